/* ops_sort.c: topk(k, dim=-1, largest=True, sorted=True), sort(dim=-1, descending=False) and
 * argsort(dim=-1, descending=False), float32 (float16/bfloat16 sorted as their exact float32 copies). The
 * sorted dim is swapped to the end and made contiguous ([rows, n]); one launch of kernels/sort.cl sorts every
 * row with a bitonic network in a scratch buffer and writes the first k (value, index) pairs; the results are
 * swapped back. The order is total (value, NaN largest, then index ascending), so the sort is stable and ties
 * come out in index order, bit-identical run to run; topk's results are always sorted (sorted=False allows
 * any order; this one is it).
 * Invariants: indices are int32; zero-size results enqueue nothing; values record a TopkBackward node
 * (sort's too: k = n) saving the indices, whose backward scatters the gradient into zeros of x's shape (the
 * indices in a row are distinct: one writer per element). A 0-d x is sorted as one element. */
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"

static const tl_op_row ROW_TOPK;   /* autograd rows (below) */

static tl_kernel k_sort = TL_KERNEL("sort", "tl_sort_rows_f32");
static tl_kernel k_back = TL_KERNEL("sort", "tl_topk_backward_f32");

/* A view of t with dims dim and ndim-1 swapped; a 0-d t becomes [1]. */
static tl_tensor *
swapped(tl_tensor *t, int dim)
{
    Py_ssize_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int nd = t->ndim > 0 ? t->ndim : 1;
    if (t->ndim == 0) {
        shape[0] = 1;
        strides[0] = 1;
    } else {
        memcpy(shape, t->shape, sizeof shape);
        memcpy(strides, t->strides, sizeof strides);
        shape[dim] = t->shape[nd - 1];
        strides[dim] = t->strides[nd - 1];
        shape[nd - 1] = t->shape[dim];
        strides[nd - 1] = t->strides[dim];
    }
    return tl_tensor_view(t, nd, shape, strides, t->offset);
}

/* t ([.., k] in swapped order, contiguous) back in the caller's order, contiguous: 0-d when ndim == 0. */
static tl_tensor *
unswapped(tl_tensor *t, int ndim, int dim)
{
    tl_tensor *v, *out;
    if (ndim == 0) return tl_tensor_view(t, 0, t->shape, t->strides, t->offset);
    if ((v = swapped(t, dim)) == NULL) return NULL;
    out = tl_tensor_contiguous(v);
    Py_DECREF(v);
    return out;
}

/* Sorts x along dim (checked) and keeps the first k of each row: *values (NULL when vals is NULL) and
 * *indices, in x's dim order. 0 or -1. */
static int
sort_core(tl_tensor *x, int dim, Py_ssize_t k, int desc, tl_tensor **vals, tl_tensor **inds)
{
    tl_tensor *xt = NULL, *xc = NULL, *ov = NULL, *oi = NULL, *kv = NULL, *ki = NULL;
    Py_ssize_t shape[TL_MAX_DIMS];
    int rc = -1, nd;
    if ((xt = swapped(x, dim)) == NULL) return -1;
    nd = xt->ndim;
    Py_ssize_t n = xt->shape[nd - 1], rows = 1;
    for (int d = 0; d < nd - 1; d++) rows *= xt->shape[d];
    memcpy(shape, xt->shape, sizeof shape);
    shape[nd - 1] = k;
    if ((vals != NULL && (ov = tl_tensor_empty(TL_F32, nd, shape)) == NULL) ||
        (oi = tl_tensor_empty(TL_I32, nd, shape)) == NULL)
        goto done;
    if (oi->storage != NULL) {                                /* rows > 0 and k > 0 (so n > 0) */
        Py_ssize_t P = 1;
        while (P < n) P *= 2;
        Py_ssize_t scratch = rows * P;
        if ((xc = tl_tensor_contiguous(xt)) == NULL || (kv = tl_tensor_empty(TL_F32, 1, &scratch)) == NULL ||
            (ki = tl_tensor_empty(TL_I32, 1, &scratch)) == NULL || tl_kernel_py(&k_sort) == NULL)
            goto done;
        int ni = (int)n, Pi = (int)P, ki_ = (int)k, xoff = (int)xc->offset;
        cl_mem none = NULL;
        const size_t cm = sizeof(cl_mem), sz[10] = {4, 4, 4, 4, cm, 4, cm, cm, cm, cm};
        const void *v[10] = {&ni, &Pi, &ki_, &desc, &xc->storage->mem, &xoff, &kv->storage->mem, &ki->storage->mem,
                             ov != NULL ? (const void *)&ov->storage->mem : (const void *)&none,
                             &oi->storage->mem};
        tl_storage *st[5] = {kv->storage, ki->storage, ov != NULL ? ov->storage : NULL, oi->storage, xc->storage};
        size_t lws = k_sort.wg, gws = (size_t)rows * lws;
        tl_err err = {0};
        if (tl_set_args(k_sort.k, 0, 10, sz, v) < 0) goto done;
        if (tl_stream_launch(k_sort.k, 1, &gws, &lws, st, 5, 0xfu, k_sort.name, &err) != TL_OK) {
            tl_raise(&err);
            goto done;
        }
    }
    if ((*inds = unswapped(oi, x->ndim, dim)) == NULL) goto done;
    if (vals != NULL && (*vals = unswapped(ov, x->ndim, dim)) == NULL) {
        Py_CLEAR(*inds);
        goto done;
    }
    rc = 0;
done:
    Py_XDECREF(xt); Py_XDECREF(xc); Py_XDECREF(ov); Py_XDECREF(oi); Py_XDECREF(kv); Py_XDECREF(ki);
    return rc;
}

/* The dim argument normalised (a 0-d tensor takes 0 and -1), or -1 with IndexError. */
static int
norm_dim(const char *op, tl_tensor *x, Py_ssize_t d)
{
    int nd = x->ndim > 0 ? x->ndim : 1;
    if (d >= -nd && d < nd) return (int)(d < 0 ? d + nd : d);
    char s[128];
    tl_shape_str(x->shape, x->ndim, s, sizeof s);
    PyErr_Format(PyExc_IndexError, "%s: dim %zd is out of range for a tensor of shape %s (expected %d..%d)", op, d, s,
                 -nd, nd - 1);
    return -1;
}

/* (values, indices) as a tuple (tlgpu/autograd.py makes it a named tuple); values recorded for autograd. */
static PyObject *
values_indices(const char *op, tl_tensor *x, Py_ssize_t d0, Py_ssize_t k, int desc)
{
    tl_tensor *vals = NULL, *inds = NULL;
    PyObject *xo = (PyObject *)x;
    int dim;
    if (TL_IS_HALF(x->dtype)) {                      /* float16/bfloat16: sorted in float32 (exact), values back */
        PyObject *w = tl_convert(x, TL_F32), *r = w != NULL ? values_indices(op, tl_tensor_CAST(w), d0, k, desc) : NULL;
        Py_XDECREF(w);
        PyObject *v = r != NULL ? tl_convert(tl_tensor_CAST(PyTuple_GET_ITEM(r, 0)), x->dtype) : NULL;
        PyObject *res = v != NULL ? PyTuple_Pack(2, v, PyTuple_GET_ITEM(r, 1)) : NULL;
        Py_XDECREF(v);
        Py_XDECREF(r);
        return res;
    }
    if (tl_check_dtype(op, x, TL_F32) < 0 || (dim = norm_dim(op, x, d0)) < 0) return NULL;
    Py_ssize_t n = x->ndim > 0 ? x->shape[dim] : 1;
    if (k < 0 || k > n) {
        char s[128];
        tl_shape_str(x->shape, x->ndim, s, sizeof s);
        return PyErr_Format(PyExc_ValueError, "%s: k=%zd is out of range for dim %d of a tensor of shape %s "
                            "(0 <= k <= %zd)", op, k, dim, s, n);
    }
    if (sort_core(x, dim, k, desc, &vals, &inds) < 0) return NULL;
    if (tl_autograd_wanted(&xo, 1)) {
        tl_node *nd = tl_node_new(&ROW_TOPK, &xo, 1);
        if (nd == NULL) goto fail;
        nd->iarg[0] = dim;
        tl_node_save(nd, inds);
        tl_node_attach(nd, vals);
    }
    PyObject *res = PyTuple_Pack(2, (PyObject *)vals, (PyObject *)inds);
    Py_DECREF(vals);
    Py_DECREF(inds);
    return res;
fail:
    Py_XDECREF(vals);
    Py_XDECREF(inds);
    return NULL;
}

static PyObject *
m_topk(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"k", "dim", "largest", "sorted", NULL};
    Py_ssize_t k, dim = -1;
    int largest = 1, sorted_ = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|npp:topk", kw, &k, &dim, &largest, &sorted_)) return NULL;
    return values_indices("topk", tl_tensor_CAST(self), dim, k, largest);
}

/* sort/argsort's (dim=-1, descending=False, stable=False) (stable is accepted: the sort always is). */
static int
parse_sort(const char *fmt, PyObject *args, PyObject *kwargs, Py_ssize_t *dim, int *desc)
{
    static char *kw[] = {"dim", "descending", "stable", NULL};
    int stable = 0;
    *dim = -1;
    *desc = 0;
    return PyArg_ParseTupleAndKeywords(args, kwargs, fmt, kw, dim, desc, &stable) ? 0 : -1;
}

static PyObject *
m_sort(PyObject *self, PyObject *args, PyObject *kwargs)
{
    tl_tensor *x = tl_tensor_CAST(self);
    Py_ssize_t dim;
    int desc, d;
    if (parse_sort("|np$p:sort", args, kwargs, &dim, &desc) < 0 || (d = norm_dim("sort", x, dim)) < 0) return NULL;
    return values_indices("sort", x, dim, x->ndim > 0 ? x->shape[d] : 1, desc);
}

static PyObject *
m_argsort(PyObject *self, PyObject *args, PyObject *kwargs)
{
    tl_tensor *x = tl_tensor_CAST(self), *inds = NULL;
    Py_ssize_t dim;
    int desc, d;
    if (parse_sort("|np$p:argsort", args, kwargs, &dim, &desc) < 0 || tl_check_float("argsort", x) < 0 ||
        (d = norm_dim("argsort", x, dim)) < 0)
        return NULL;
    if (TL_IS_HALF(x->dtype)) {                      /* float16/bfloat16: the indices of the exact float32 copy */
        PyObject *w = tl_convert(x, TL_F32), *r = w != NULL ? m_argsort(w, args, kwargs) : NULL;
        Py_XDECREF(w);
        return r;
    }
    if (sort_core(x, d, x->ndim > 0 ? x->shape[d] : 1, desc, NULL, &inds) < 0) return NULL;
    return (PyObject *)inds;
}

/* The gradient of x: zeros with g written at the saved indices along dim (in the swapped order, then back). */
static int
tl_topk_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    const tl_edge *e = &nd->in[0];
    int dim = nd->iarg[0], rc = -1, znd = e->ndim > 0 ? e->ndim : 1;
    tl_tensor *idx = NULL, *gs = NULL, *is = NULL, *gc = NULL, *ic = NULL, *z = NULL;
    Py_ssize_t zshape[TL_MAX_DIMS] = {1};
    if (e->ndim > 0) {
        memcpy(zshape, e->shape, sizeof zshape);
        zshape[dim] = e->shape[znd - 1];
        zshape[znd - 1] = e->shape[dim];
    }
    if ((idx = tl_node_saved(nd, 0)) == NULL || (gs = swapped(tl_tensor_CAST(g), dim)) == NULL ||
        (is = swapped(idx, dim)) == NULL || (gc = tl_tensor_contiguous(gs)) == NULL ||
        (ic = tl_tensor_contiguous(is)) == NULL || (z = tl_tensor_empty(TL_F32, znd, zshape)) == NULL)
        goto done;
    if (z->storage != NULL && tl_tensor_fill(z, 0.0) < 0) goto done;
    if (z->storage != NULL && gc->storage != NULL) {
        int n = (int)zshape[znd - 1], k = (int)gc->shape[znd - 1], rows = (int)(tl_tensor_numel(z) / n);
        int goff = (int)gc->offset, ioff = (int)ic->offset;
        const size_t cm = sizeof(cl_mem), sz[8] = {4, 4, 4, cm, cm, 4, cm, 4};
        const void *v[8] = {&rows, &n, &k, &z->storage->mem, &gc->storage->mem, &goff, &ic->storage->mem, &ioff};
        tl_storage *st[3] = {z->storage, gc->storage, ic->storage};
        if (tl_kernel_py(&k_back) == NULL || tl_set_args(k_back.k, 0, 8, sz, v) < 0 ||
            tl_launch_1d(&k_back, (size_t)rows * (size_t)k, st, 3, 1u) < 0)
            goto done;
    }
    if ((gin[0] = (PyObject *)unswapped(z, e->ndim, dim)) != NULL) rc = 0;
done:
    Py_XDECREF(idx); Py_XDECREF(gs); Py_XDECREF(is); Py_XDECREF(gc); Py_XDECREF(ic); Py_XDECREF(z);
    return rc;
}

static const PyMethodDef sort_methods[] = {
    {"topk", TL_KW(m_topk), "topk(k, dim=-1, largest=True, sorted=True) -> (values, indices): the k largest (smallest "
     "with largest=False) along dim, sorted, ties in index order; indices int32; values differentiable."},
    {"sort", TL_KW(m_sort), "sort(dim=-1, descending=False) -> (values, indices): a stable sort along dim (NaN "
     "largest); indices int32; values differentiable."},
    {"argsort", TL_KW(m_argsort), "argsort(dim=-1, descending=False): the int32 indices that sort along dim (stable)."},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_TOPK = {"TopkBackward", tl_topk_backward};
static const tl_op_row *const sort_rows[] = {&ROW_TOPK, NULL};

const tl_family tl_family_sort = {NULL, sort_methods, NULL, NULL, "topk sort argsort", .rows = sort_rows};
