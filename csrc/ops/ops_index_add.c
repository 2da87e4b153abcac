/* ops_index_add.c: index_add_(dim, index, source, alpha=1) in place and index_add out of place (PyTorch's
 * semantics: self.index_select(dim, index) positions receive alpha * source; repeated indices accumulate).
 * Float32 self and source, a 1-D (or 0-d) int32 index, negative entries counting from the end as in
 * index_select. Two launches of kernels/index.cl: a pass over the index (range check, per-block bounds),
 * then one work-item per element of self summing its matching source elements in index order:
 * deterministic, no float atomics, no host wait. The index is checked on the device (gather's scheme): a bad
 * entry adds nothing and the next sync point raises IndexError.
 * Invariants: each element of self is written by one work-item, which reads it first, so the update is in
 * place without races; a non-contiguous self is updated through a contiguous copy written back; a source
 * that shares self's storage is copied first. Zero-size operands enqueue nothing.
 * Autograd: the old self gets the gradient unchanged, source gets alpha * grad.index_select(dim, index). */
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"

static const tl_op_row ROW_INDEX_ADD;   /* autograd rows (below) */

static tl_kernel k_bounds = TL_KERNEL("index", "tl_index_add_bounds_i32");
static tl_kernel k_scan = TL_KERNEL("index", "tl_index_add_scan_f32");
static tl_kernel k_grad = TL_KERNEL("index", "tl_index_add_grad_f32");
#define IA_BLOCK 64                                        /* = kernels/index.cl's */

typedef struct { int pre, rows, post, k; } geom;

static geom
geom_of(const Py_ssize_t *shape, int ndim, int dim, Py_ssize_t k)
{
    geom g = {1, (int)shape[dim], 1, (int)k};
    for (int d = 0; d < dim; d++) g.pre *= (int)shape[d];
    for (int d = dim + 1; d < ndim; d++) g.post *= (int)shape[d];
    return g;
}

/* An int32 index tensor (array-likes are uploaded), 0-d or 1-D. New ref or NULL. */
static tl_tensor *
index_arg(const char *op, PyObject *obj)
{
    tl_tensor *idx;
    if (tl_tensor_check(obj)) idx = (tl_tensor *)Py_NewRef(obj);
    else if ((idx = tl_tensor_from_object(obj, TL_I32, op)) == NULL) return NULL;
    if (idx->dtype != TL_I32) {
        PyErr_Format(PyExc_TypeError, "%s: the index must be int32, got %s", op, tl_dtype_name(idx->dtype));
        Py_DECREF(idx);
        return NULL;
    }
    if (idx->ndim > 1) {
        char s[128];
        tl_shape_str(idx->shape, idx->ndim, s, sizeof s);
        PyErr_Format(PyExc_ValueError, "%s: the index must be 1-D, got shape %s", op, s);
        Py_DECREF(idx);
        return NULL;
    }
    return idx;
}

/* Checks source against self, dim and the index length: same ndim, source.shape[dim] == len(index), the
 * other dims equal (a 0-d source stands for a 1-element one along dim of a 1-D self). */
static int
check_source(const char *op, const tl_tensor *self, const tl_tensor *src, int dim, Py_ssize_t k)
{
    int ok = src->ndim == self->ndim || (self->ndim == 1 && src->ndim == 0 && k == 1);
    for (int d = 0; ok && d < src->ndim; d++) ok = d == dim ? src->shape[d] == k : src->shape[d] == self->shape[d];
    if (ok) return 0;
    char a[128], b[128];
    tl_shape_str(self->shape, self->ndim, a, sizeof a);
    tl_shape_str(src->shape, src->ndim, b, sizeof b);
    PyErr_Format(PyExc_ValueError, "%s: source of shape %s does not fit self of shape %s along dim %d with an "
                 "index of %zd entries (source must be self's shape with dim %d of size %zd)", op, b, a, dim, k, dim,
                 k);
    return -1;
}

/* dst (contiguous, float32) += alpha * source scattered by idx along dim: the two launches. */
static int
run_index_add(tl_tensor *dst, tl_tensor *src, tl_tensor *idx, int dim, float alpha)
{
    tl_tensor *sc = NULL, *ic = NULL, *bounds = NULL;
    tl_err err = {0};
    cl_mem chk;
    int chk_id, rc = -1;
    geom g = geom_of(dst->shape, dst->ndim, dim, tl_tensor_numel(idx));
    Py_ssize_t nb2 = 2 * (Py_ssize_t)((g.k + IA_BLOCK - 1) / IA_BLOCK);
    if ((sc = tl_tensor_contiguous(src)) == NULL || (ic = tl_tensor_contiguous(idx)) == NULL ||
        (bounds = tl_tensor_empty(TL_I32, 1, &nb2)) == NULL)
        goto done;
    if (tl_kernel_py(&k_bounds) == NULL || tl_kernel_py(&k_scan) == NULL) goto done;
    if (tl_stream_check_mem("index_add_", &chk, &chk_id, &err) != TL_OK) { tl_raise(&err); goto done; }
    int ioff = (int)ic->offset, istride = 1, soff = (int)sc->offset, ooff = (int)dst->offset;
    const size_t cm = sizeof(cl_mem);
    const size_t sz1[8] = {4, 4, cm, 4, 4, cm, cm, 4};
    const void *v1[8] = {&g.k, &g.rows, &ic->storage->mem, &ioff, &istride, &bounds->storage->mem, &chk, &chk_id};
    tl_storage *st1[2] = {bounds->storage, ic->storage};
    if (tl_set_args(k_bounds.k, 0, 8, sz1, v1) < 0 || tl_launch_1d(&k_bounds, (size_t)nb2 / 2, st1, 2, 1u) < 0)
        goto done;
    tl_stream_check_arm();
    const size_t sz2[13] = {4, 4, 4, 4, 4, cm, 4, cm, 4, cm, 4, 4, cm};
    const void *v2[13] = {&g.pre, &g.rows, &g.post, &g.k, &alpha, &dst->storage->mem, &ooff, &sc->storage->mem,
                          &soff, &ic->storage->mem, &ioff, &istride, &bounds->storage->mem};
    tl_storage *st2[4] = {dst->storage, sc->storage, ic->storage, bounds->storage};
    if (tl_set_args(k_scan.k, 0, 13, sz2, v2) < 0 ||
        tl_launch_1d(&k_scan, (size_t)g.pre * (size_t)g.rows * (size_t)g.post, st2, 4, 1u) < 0)
        goto done;
    rc = 0;
done:
    Py_XDECREF(sc);
    Py_XDECREF(ic);
    Py_XDECREF(bounds);
    return rc;
}

/* self.index_add_(dim, index, source, alpha): checks, the in-place rules, the update, the record. */
static int
index_add_inplace(const char *op, tl_tensor *self, Py_ssize_t d0, PyObject *index, PyObject *source, double alpha)
{
    tl_tensor *idx = NULL, *src = NULL, *work = NULL;
    int rc = -1, dim;
    char s[128];
    tl_shape_str(self->shape, self->ndim, s, sizeof s);
    if (tl_check_dtype(op, self, TL_F32) < 0) return -1;
    if (d0 < -self->ndim || d0 >= self->ndim) {
        PyErr_Format(PyExc_IndexError, "%s: dim %zd is out of range for a tensor of shape %s (expected %d..%d)", op,
                     d0, s, -self->ndim, self->ndim - 1);
        return -1;
    }
    dim = (int)(d0 < 0 ? d0 + self->ndim : d0);
    if (!tl_tensor_check(source)) {
        PyErr_Format(PyExc_TypeError, "%s: source must be a Tensor, got %s", op, Py_TYPE(source)->tp_name);
        return -1;
    }
    if ((idx = index_arg(op, index)) == NULL) return -1;
    Py_ssize_t k = tl_tensor_numel(idx);
    if (tl_check_dtype(op, tl_tensor_CAST(source), TL_F32) < 0 ||
        check_source(op, self, tl_tensor_CAST(source), dim, k) < 0 || tl_check_writable(op, self) < 0)
        goto done;
    if (k > 0 && self->shape[dim] == 0) {                   /* every entry is out of range: no need to look */
        PyErr_Format(PyExc_IndexError, "%s: index out of range for dim %d of shape %s (size 0)", op, dim, s);
        goto done;
    }
    PyObject *ins[2] = {(PyObject *)self, source};
    int track = tl_autograd_wanted(ins, 2);
    if (tl_check_recorded_inplace(op, self, track) < 0) goto done;
    if (k > 0 && self->storage != NULL) {
        if ((src = tl_unalias(self, tl_tensor_CAST(source))) == NULL) goto done;
        if (tl_tensor_is_contig(self)) work = (tl_tensor *)Py_NewRef(self);
        else if ((work = tl_tensor_empty(TL_F32, self->ndim, self->shape)) == NULL || tl_copy_into(work, self) < 0)
            goto done;
        if (run_index_add(work, src, idx, dim, (float)alpha) < 0) goto done;
        if (work != self && tl_copy_into(self, work) < 0) goto done;
        tl_mark_write(self, op);
    }
    if (track) {                                            /* self's grad_fn becomes the update */
        tl_node *nd = tl_node_new(&ROW_INDEX_ADD, ins, 2);
        if (nd == NULL) goto done;
        nd->iarg[0] = dim;
        nd->farg[0] = alpha;
        tl_node_save(nd, idx);
        tl_node_attach(nd, self);
    }
    rc = 0;
done:
    Py_XDECREF(idx);
    Py_XDECREF(src);
    Py_XDECREF(work);
    return rc;
}

static int
parse(const char *fmt, PyObject *args, PyObject *kwargs, Py_ssize_t *dim, PyObject **index, PyObject **source,
      double *alpha)
{
    static char *kw[] = {"dim", "index", "source", "alpha", NULL};
    *alpha = 1.0;
    return PyArg_ParseTupleAndKeywords(args, kwargs, fmt, kw, dim, index, source, alpha) ? 0 : -1;
}

/* Out of place: a (differentiable) clone of self, updated in place. A float16/bfloat16 self (and source of its
 * dtype) adds in float32, rounded once to self's dtype (the widenings and the rounding recorded). */
static PyObject *
index_add_copy(const char *op, PyObject *self, Py_ssize_t dim, PyObject *index, PyObject *source, double alpha)
{
    tl_tensor *t = tl_tensor_CAST(self);
    const int half = TL_IS_HALF(t->dtype);
    if (!half && tl_check_dtype(op, t, TL_F32) < 0) return NULL;
    PyObject *out = half ? tl_convert(t, TL_F32) : tl_clone(t), *src = Py_NewRef(source);
    if (half && tl_tensor_check(source) && tl_tensor_CAST(source)->dtype == t->dtype)
        Py_SETREF(src, tl_convert(tl_tensor_CAST(source), TL_F32));
    if (out != NULL && (src == NULL || index_add_inplace(op, tl_tensor_CAST(out), dim, index, src, alpha) < 0))
        Py_CLEAR(out);
    Py_XDECREF(src);
    return half ? tl_convert_steal(out, t->dtype) : out;
}

static PyObject *
m_index_add_(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t dim;
    PyObject *index, *source;
    double alpha;
    if (parse("nOO|d:index_add_", args, kwargs, &dim, &index, &source, &alpha) < 0) return NULL;
    if (TL_IS_HALF(tl_tensor_CAST(self)->dtype)) {     /* the float32 sum, then copied in (copy_'s rules) */
        PyObject *r = index_add_copy("index_add_", self, dim, index, source, alpha), *c;
        c = r != NULL ? PyObject_CallMethod(self, "copy_", "O", r) : NULL;
        Py_XDECREF(r);
        return c;
    }
    if (index_add_inplace("index_add_", tl_tensor_CAST(self), dim, index, source, alpha) < 0) return NULL;
    return Py_NewRef(self);
}

static PyObject *
m_index_add(PyObject *self, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t dim;
    PyObject *index, *source;
    double alpha;
    if (parse("nOO|d:index_add", args, kwargs, &dim, &index, &source, &alpha) < 0) return NULL;
    return index_add_copy("index_add", self, dim, index, source, alpha);
}

/* self: the gradient as is; source: alpha * g gathered along dim by the saved index. */
static int
tl_index_add_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    const tl_edge *e = &nd->in[1];
    int dim = nd->iarg[0], rc = -1;
    float alpha = (float)nd->farg[0];
    tl_tensor *idx = NULL, *gc = NULL, *out = NULL;
    if (tl_wants_grad(nd, 0)) gin[0] = Py_NewRef(g);
    if (!tl_wants_grad(nd, 1)) return 0;
    if ((idx = tl_node_saved(nd, 0)) == NULL || (gc = tl_tensor_contiguous(tl_tensor_CAST(g))) == NULL ||
        (out = tl_tensor_empty(TL_F32, e->ndim, e->shape)) == NULL)
        goto done;
    if (out->storage != NULL) {
        geom q = geom_of(gc->shape, gc->ndim, dim, tl_tensor_numel(idx));
        int goff = (int)gc->offset, ioff = (int)idx->offset, istride = idx->ndim == 1 ? (int)idx->strides[0] : 1;
        const size_t cm = sizeof(cl_mem), sz[11] = {4, 4, 4, 4, 4, cm, cm, 4, cm, 4, 4};
        const void *v[11] = {&q.pre, &q.rows, &q.post, &q.k, &alpha, &out->storage->mem, &gc->storage->mem, &goff,
                             &idx->storage->mem, &ioff, &istride};
        tl_storage *st[3] = {out->storage, gc->storage, idx->storage};
        if (tl_kernel_py(&k_grad) == NULL || tl_set_args(k_grad.k, 0, 11, sz, v) < 0 ||
            tl_launch_1d(&k_grad, (size_t)tl_tensor_numel(out), st, 3, 1u) < 0)
            goto done;
    }
    gin[1] = Py_NewRef(out);
    rc = 0;
done:
    Py_XDECREF(idx);
    Py_XDECREF(gc);
    Py_XDECREF(out);
    return rc;
}

static const PyMethodDef index_add_methods[] = {
    {"index_add_", TL_KW(m_index_add_), "index_add_(dim, index, source, alpha=1): self[.., index[i], ..] += alpha * "
     "source[.., i, ..] in place, repeated indices accumulating (deterministic: each element sums its sources "
     "in index order); a bad index raises IndexError at the next sync point. Returns self."},
    {"index_add", TL_KW(m_index_add), "index_add(dim, index, source, alpha=1): index_add_ on a copy of self."},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_INDEX_ADD = {"IndexAddBackward", tl_index_add_backward};
static const tl_op_row *const index_add_rows[] = {&ROW_INDEX_ADD, NULL};

const tl_family tl_family_index_add = {NULL, index_add_methods, NULL, NULL, "index_add_ index_add",
                                       .rows = index_add_rows};
