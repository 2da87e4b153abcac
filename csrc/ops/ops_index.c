/* ops_index.c: Tensor indexing. t[key] with basic keys (ints, slices with any step, None, ...) is a view
 * (no kernel); a key that is an integer tensor, list or array gathers along dim 0 into a new tensor.
 * t[key] = value writes through the same view: a scalar fill, a broadcast copy from a tensor of the same
 * dtype, or array-like data uploaded first; the storage's version is bumped so autograd sees the write.
 * index_select and gather run tl_gather_u32 (kernels/index.cl).
 * Invariants:
 *  - Views address only elements inside the base's extent and keep offset >= 0: a negative step starts
 *    the offset at the first element it reads (the highest address) and walks down with a negative stride.
 *  - No index reads another buffer's memory. gather, and t[idx] / index_select given a 1-D int32 tensor,
 *    check the index in the kernel (an invalid one writes 0) and the next sync point raises IndexError
 *    (stream.h); their backward is gather's device scatter-add. t[idx] / index_select given a list or array
 *    check it on the host as they upload it (their backward's plan is made from that copy).
 *  - A write whose source shares storage with its target copies the source first: the copy kernel has no
 *    order between elements, so an overlapping t[1:] = t[:-1] would otherwise race.
 *  - A target with a stride-0 dim of size > 1 (an expand()ed view) is refused: one element, many writes.
 */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"
#include <numpy/arrayobject.h>

static const tl_op_row ROW_INDEX, ROW_INDEX_SELECT, ROW_GATHER, ROW_SETITEM;   /* autograd rows (below) */
static PyObject *gather_along(PyObject *self, int d, tl_tensor *idx, PyObject *host, const char *op);
static PyObject *select_on_device(PyObject *self, int d, tl_tensor *idx, const char *op);

typedef struct {
    int ndim, element;             /* element: the key is one integer per dim (numpy's single-element write) */
    Py_ssize_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS], offset;
} view_desc;
enum { KEY_BASIC = 0, KEY_ARRAY = 1 };

static int
is_index_array(PyObject *o)
{
    return tl_tensor_check(o) || PyList_Check(o) || (PyArray_Check(o) && PyArray_NDIM((PyArrayObject *)o) > 0);
}

static int
is_int(PyObject *o)
{
    return !PyBool_Check(o) && !is_index_array(o) && PyIndex_Check(o);
}

static int
norm_dim(const char *op, Py_ssize_t d, const tl_tensor *t)
{
    if (d >= -t->ndim && d < t->ndim) return (int)(d < 0 ? d + t->ndim : d);
    char s[128];
    tl_shape_str(t->shape, t->ndim, s, sizeof s);
    PyErr_Format(PyExc_IndexError, "%s: dim %zd is out of range for a tensor of shape %s (expected %d..%d)", op, d,
                 s, -t->ndim, t->ndim - 1);
    return -1;
}

/* Classifies the key; for a basic key fills v with the view it selects. -1 with IndexError on bad keys. */
static int
parse_key(const tl_tensor *t, PyObject *key, const char *op, view_desc *v)
{
    PyObject *tup = NULL;
    int rc = -1, used = 0, nint = 0, ell = 0, nd = 0, src = 0, o = 0;
    char s[128];
    tl_shape_str(t->shape, t->ndim, s, sizeof s);
    if (is_index_array(key)) return KEY_ARRAY;
    if ((tup = PyTuple_Check(key) ? Py_NewRef(key) : PyTuple_Pack(1, key)) == NULL) return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(tup), off = t->offset;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(tup, i);
        if (it == Py_Ellipsis && ell++) {
            PyErr_Format(PyExc_IndexError, "%s: an index can only have a single ellipsis ('...')", op);
            goto done;
        } else if (it == Py_None || PySlice_Check(it)) {
            nd++;
            used += it != Py_None;
        } else if (is_int(it)) {
            used++;
            nint++;
        } else if (it != Py_Ellipsis) {
            PyErr_Format(PyExc_IndexError, is_index_array(it)
                         ? "%s: an integer tensor/list index must be the whole key (got one inside a tuple, %s); "
                           "use index_select() along other dims"
                         : "%s: only integers, slices (`:`), ellipsis (`...`), None and integer tensors are valid "
                           "indices (got %s)", op, Py_TYPE(it)->tp_name);
            goto done;
        }
    }
    if (used > t->ndim) {
        PyErr_Format(PyExc_IndexError, "%s: too many indices for a tensor of shape %s: %d were given", op, s, used);
        goto done;
    }
    if ((nd += t->ndim - used) > TL_MAX_DIMS) {
        PyErr_Format(PyExc_IndexError, "%s: the result would have %d dims; at most %d are supported", op, nd,
                     TL_MAX_DIMS);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PyTuple_GET_ITEM(tup, i);
        if (it == Py_Ellipsis) {
            for (int e = 0; e < t->ndim - used; e++, src++, o++) {
                v->shape[o] = t->shape[src];
                v->strides[o] = t->strides[src];
            }
        } else if (it == Py_None) {
            v->shape[o] = 1;
            v->strides[o++] = 0;
        } else if (PySlice_Check(it)) {
            Py_ssize_t start, stop, step, len;
            if (PySlice_Unpack(it, &start, &stop, &step) < 0) goto done;
            len = PySlice_AdjustIndices(t->shape[src], &start, &stop, step);
            v->shape[o] = len;
            v->strides[o++] = t->strides[src] * step;
            if (len > 0) off += start * t->strides[src];     /* the first element read, also for step < 0 */
            src++;
        } else {
            Py_ssize_t k = PyNumber_AsSsize_t(it, PyExc_IndexError), size = t->shape[src];
            if (k == -1 && PyErr_Occurred()) goto done;
            if (k < -size || k >= size) {
                PyErr_Format(PyExc_IndexError, "%s: index %zd is out of bounds for dim %d with size %zd (shape %s)",
                             op, k, src, size, s);
                goto done;
            }
            off += (k < 0 ? k + size : k) * t->strides[src++];
        }
    }
    for (; src < t->ndim; src++, o++) {                      /* dims the key did not mention */
        v->shape[o] = t->shape[src];
        v->strides[o] = t->strides[src];
    }
    v->ndim = o;
    v->offset = off;
    v->element = nint == t->ndim && n == nint;           /* only ints, one per dim */
    rc = KEY_BASIC;
done:
    Py_DECREF(tup);
    return rc;
}

/* An int32 index tensor from a Tensor or array-like (uploaded); `exc` is raised for a wrong dtype. For an
 * array-like, *host (when host != NULL) gets its int32 host copy (new ref), so the check needs no read-back. */
static tl_tensor *
to_index(const char *op, PyObject *obj, PyObject *exc, PyObject **host)
{
    PyArrayObject *arr = NULL;
    tl_tensor *res = NULL;
    if (tl_tensor_check(obj)) {
        tl_tensor *t = tl_tensor_CAST(obj);
        if (t->dtype == TL_I32) return (tl_tensor *)Py_NewRef(obj);
        return (tl_tensor *)PyErr_Format(exc, "%s: index tensors must be int32, got %s (boolean masks are not "
                                         "supported)", op, tl_dtype_name(t->dtype));
    }
    if ((arr = (PyArrayObject *)PyArray_FromAny(obj, NULL, 0, 0, 0, NULL)) == NULL) return NULL;
    if (PyArray_SIZE(arr) == 0 || PyArray_ISINTEGER(arr)) res = tl_tensor_from_object((PyObject *)arr, TL_I32, op);
    else PyErr_Format(exc, "%s: indices must be integers (got an array of %s)", op,
                      PyArray_DESCR(arr)->typeobj->tp_name);
    if (res != NULL && host != NULL &&                /* in range for int32: the cast below is exact */
        (*host = PyArray_FromAny((PyObject *)arr, PyArray_DescrFromType(NPY_INT32), 0, 0,
                                 NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_FORCECAST, NULL)) == NULL)
        Py_CLEAR(res);
    if (res == NULL && PyErr_ExceptionMatches(PyExc_OverflowError)) {   /* past int32: out of range for any dim */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyObject *msg = value != NULL ? PyObject_Str(value) : NULL;     /* "<op>: value ... does not fit int32" */
        if (msg != NULL) PyErr_SetObject(PyExc_IndexError, msg);
        Py_XDECREF(msg); Py_XDECREF(type); Py_XDECREF(value); Py_XDECREF(tb);
    }
    Py_DECREF(arr);
    return res;
}

/* Checks every entry of the index lies in [-size, size), on its host copy `host` when given, else read back
 * (a sync point). The host copy goes to *keep (new ref) when keep != NULL: index_select's backward builds
 * its scatter plan from it. */
static int
check_indices(const char *op, tl_tensor *idx, PyObject *host, const tl_tensor *src, int dim, PyObject **keep)
{
    PyObject *arr = host != NULL ? Py_NewRef(host) : tl_tensor_to_numpy(idx);
    if (arr == NULL) return -1;
    const int32_t *p = PyArray_DATA((PyArrayObject *)arr);
    Py_ssize_t n = PyArray_SIZE((PyArrayObject *)arr), size = src->shape[dim];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i] < -size || p[i] >= size) {
            char s[128];
            tl_shape_str(src->shape, src->ndim, s, sizeof s);
            PyErr_Format(PyExc_IndexError, "%s: index %d is out of range for dim %d of shape %s", op, (int)p[i],
                         dim, s);
            Py_DECREF(arr);
            return -1;
        }
    }
    if (keep != NULL) *keep = arr;
    else Py_DECREF(arr);
    return 0;
}

/* A layout-only stand-in for a tensor (never a Python object: tl_layout_make reads just these fields). */
static void
fake(tl_tensor *f, int ndim, Py_ssize_t offset)
{
    memset(f, 0, sizeof *f);
    f->ndim = ndim;
    f->offset = offset;
    for (int d = 0; d < ndim; d++) f->shape[d] = 1;
}

/* out = src gathered along dim by idx. src_l, idx_l: both operands laid over out's shape, src_l with the
 * indexed dim at size 1 (stride 0) so it yields the base element of each output position. The index is
 * checked on the host when its host copy `host` is given (array-like indices: no wait), when keep asks for
 * that copy (the backward's plan; read back: a sync point) or when out is zero-size; otherwise the kernel
 * checks it on the device and the next sync point reports a bad one (no host wait here). */
static int
run_gather(const char *op, tl_tensor *out, tl_tensor *src, tl_tensor *src_l, tl_tensor *idx, tl_tensor *idx_l,
           PyObject *host, int dim, PyObject **keep)
{
    static tl_kernel k3[3] = {TL_KERNEL("index", "tl_gather_u8"), TL_KERNEL("index", "tl_gather_u16"),
                              TL_KERNEL("index", "tl_gather_u32")};
    const size_t es = tl_dtype_size(src->dtype);
    tl_kernel *kh = &k3[es == 1 ? 0 : es == 2 ? 1 : 2];             /* a bit copy of the element's size */
    tl_layout L;
    tl_err err = {0};
    cl_kernel k;
    cl_mem chk;
    int chk_id, on_device = keep == NULL && host == NULL && out->storage != NULL;
    /* checked also when out is zero-size: zeros(3, 0)[[5]] is an IndexError (numpy's rule) */
    if (!on_device && check_indices(op, idx, host, src, dim, keep) < 0) return -1;
    if (on_device && src->shape[dim] == 0) {           /* every index is out of range: no need to look */
        char s[128];
        tl_shape_str(src->shape, src->ndim, s, sizeof s);
        PyErr_Format(PyExc_IndexError, "%s: index out of range for dim %d of shape %s (size 0)", op, dim, s);
        return -1;
    }
    if (out->storage == NULL) return 0;                      /* zero-size: nothing to gather */
    if ((k = tl_kernel_py(kh)) == NULL) return -1;
    if (tl_stream_check_mem(op, &chk, &chk_id, &err) != TL_OK) return tl_raise(&err);
    tl_tensor *ops[3] = {out, src_l, idx_l};
    tl_layout_make(&L, out->ndim, out->shape, ops, 3);
    int dsize = (int)src->shape[dim], dstride = (int)src->strides[dim];
    const size_t sz[8] = {sizeof L, sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem), sizeof dsize, sizeof dstride,
                          sizeof chk, sizeof chk_id};
    const void *v[8] = {&L, &out->storage->mem, &src->storage->mem, &idx->storage->mem, &dsize, &dstride, &chk,
                        &chk_id};
    tl_storage *st[3] = {out->storage, src->storage, idx->storage};
    if (tl_set_args(k, 0, 8, sz, v) < 0 || tl_launch_1d(kh, (size_t)L.n, st, 3, 1u) < 0) return -1;
    if (on_device) tl_stream_check_arm();
    return 0;
}

/* out = t gathered by idx along dim (shape nd, shape), recorded for autograd as an index_select along dim:
 * the host copy of the index that run_gather checked becomes the backward's scatter plan. New ref or NULL. */
static PyObject *
gather_select(const char *op, tl_tensor *t, int nd, const Py_ssize_t *shape, tl_tensor *src_l, tl_tensor *idx,
              tl_tensor *idx_l, PyObject *host, int dim)
{
    PyObject *plan = NULL, *res;
    tl_tensor *out = tl_tensor_empty(t->dtype, nd, shape);
    if (out == NULL || run_gather(op, out, t, src_l, idx, idx_l, host, dim, &plan) < 0) {
        Py_XDECREF(out);
        return NULL;
    }
    res = tl_record1((PyObject *)out, &ROW_INDEX_SELECT, (PyObject *)t, &dim, 1, plan);
    Py_XDECREF(plan);
    return res;
}

/* t[idx]: rows of t picked by an integer index of any shape; result shape idx.shape + t.shape[1:]. */
static PyObject *
take_rows(tl_tensor *t, PyObject *key)
{
    tl_tensor *idx = NULL, *out = NULL, src_l, idx_l;
    PyObject *host = NULL;
    Py_ssize_t shape[TL_MAX_DIMS];
    char s[128];
    if ((idx = to_index("__getitem__", key, PyExc_IndexError, &host)) == NULL) return NULL;
    if (host == NULL && idx->ndim == 1 && t->ndim > 0) {     /* a 1-D device tensor: no host read */
        out = (tl_tensor *)select_on_device((PyObject *)t, 0, idx, "__getitem__");
        Py_DECREF(idx);
        return (PyObject *)out;
    }
    tl_shape_str(t->shape, t->ndim, s, sizeof s);
    int nd = idx->ndim + t->ndim - 1;
    if (t->ndim == 0) { PyErr_Format(PyExc_IndexError, "__getitem__: too many indices for a 0-d tensor"); goto fail; }
    if (nd > TL_MAX_DIMS) {
        PyErr_Format(PyExc_IndexError, "__getitem__: the result would have %d dims (at most %d)", nd, TL_MAX_DIMS);
        goto fail;
    }
    fake(&src_l, nd, t->offset);
    fake(&idx_l, nd, idx->offset);
    for (int d = 0; d < idx->ndim; d++) {
        shape[d] = idx->shape[d];
        idx_l.shape[d] = idx->shape[d];
        idx_l.strides[d] = idx->strides[d];
    }
    for (int d = 1; d < t->ndim; d++) {
        shape[idx->ndim + d - 1] = src_l.shape[idx->ndim + d - 1] = t->shape[d];
        src_l.strides[idx->ndim + d - 1] = t->strides[d];
    }
    PyObject *self = (PyObject *)t;
    if (tl_autograd_wanted(&self, 1) && idx->ndim != 1) {
        PyErr_SetString(PyExc_NotImplementedError, "__getitem__: gradients flow through 1-D integer indices "
                        "only; use index_select or reshape the index");
        goto fail;
    }
    out = (tl_tensor *)gather_select("__getitem__", t, nd, shape, &src_l, idx, &idx_l, host, 0);
    Py_DECREF(idx);
    Py_XDECREF(host);
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(idx);
    Py_XDECREF(host);
    return NULL;
}

static PyObject *
tensor_getitem(PyObject *self, PyObject *key)
{
    tl_tensor *t = tl_tensor_CAST(self);
    view_desc v;
    int kind = parse_key(t, key, "__getitem__", &v);
    if (kind < 0) return NULL;
    if (kind == KEY_ARRAY) return take_rows(t, key);
    return tl_record1((PyObject *)tl_tensor_view(t, v.ndim, v.shape, v.strides, v.offset), &ROW_INDEX, self, NULL, 0,
                      key);
}

/* Sequence protocol for `for row in t`: Python calls this with 0, 1, 2, ... until IndexError. */
static PyObject *
tensor_sq_item(PyObject *self, Py_ssize_t i)
{
    if (tl_tensor_CAST(self)->ndim == 0) return PyErr_Format(PyExc_TypeError, "iteration over a 0-d tensor");
    PyObject *k = PyLong_FromSsize_t(i), *r;
    if (k == NULL) return NULL;
    r = tensor_getitem(self, k);
    Py_DECREF(k);
    return r;
}

/* The source of a write into dst: a tensor (of any dtype: the copy converts) that broadcasts to dst and shares
 * no storage. */
static tl_tensor *
write_source(tl_tensor *dst, PyObject *value, int element)
{
    tl_tensor *src = NULL, *tmp = NULL, *ins[2];
    Py_ssize_t shape[TL_MAX_DIMS];
    char a[128], b[128];
    int nd;
    if (tl_tensor_check(value)) src = (tl_tensor *)Py_NewRef(value);
    else src = tl_tensor_from_object(value, dst->dtype, "__setitem__");
    if (src == NULL) goto fail;
    if (element && src->ndim > 0) {                          /* numpy: "setting an array element with a sequence" */
        tl_shape_str(src->shape, src->ndim, a, sizeof a);
        PyErr_Format(PyExc_ValueError, "__setitem__: the key selects one element; a value of shape %s is not a "
                     "scalar", a);
        goto fail;
    }
    int lead = 0;                                            /* numpy drops leading size-1 dims of the value */
    while (src->ndim - lead > dst->ndim && src->shape[lead] == 1) lead++;
    if (lead > 0) {
        tmp = tl_tensor_view(src, src->ndim - lead, src->shape + lead, src->strides + lead, src->offset);
        Py_SETREF(src, tmp);
        tmp = NULL;
        if (src == NULL) goto fail;
    }
    ins[0] = dst;
    ins[1] = src;
    if (tl_broadcast("__setitem__", ins, 2, &nd, shape) < 0) goto fail;
    if (nd != dst->ndim || memcmp(shape, dst->shape, sizeof(Py_ssize_t) * (size_t)nd) != 0) {
        tl_shape_str(src->shape, src->ndim, a, sizeof a);
        tl_shape_str(dst->shape, dst->ndim, b, sizeof b);
        PyErr_Format(PyExc_ValueError, "__setitem__: a value of shape %s cannot be broadcast to the indexed "
                     "shape %s", a, b);
        goto fail;
    }
    if (src->storage != NULL && src->storage == dst->storage) {  /* overlap: copy the value out first */
        if ((tmp = tl_tensor_empty(src->dtype, src->ndim, src->shape)) == NULL || tl_copy_into(tmp, src) < 0)
            goto fail;
        Py_SETREF(src, tmp);
    }
    return src;
fail:
    Py_XDECREF(tmp);
    Py_XDECREF(src);
    return NULL;
}

static int
tensor_setitem(PyObject *self, PyObject *key, PyObject *value)
{
    tl_tensor *t = tl_tensor_CAST(self), *dst = NULL, *src = NULL;
    view_desc v;
    int rc = -1, kind;
    if (value == NULL) { PyErr_SetString(PyExc_TypeError, "cannot delete tensor elements"); return -1; }
    if ((kind = parse_key(t, key, "__setitem__", &v)) < 0) return -1;
    if (kind == KEY_ARRAY) {
        PyErr_SetString(PyExc_TypeError, "__setitem__: assignment through an integer-tensor index is not supported; "
                        "use slices");
        return -1;
    }
    PyObject *ins[2] = {self, tl_tensor_check(value) ? value : NULL};
    int track = tl_autograd_wanted(ins, 2);
    if (tl_check_recorded_inplace("__setitem__", t, track) < 0) return -1;   /* the shared in-place rules */
    if ((dst = tl_tensor_view(t, v.ndim, v.shape, v.strides, v.offset)) == NULL) return -1;
    if (tl_check_writable("__setitem__", dst) < 0) goto done;
    if (PyFloat_Check(value) || PyLong_Check(value) || PyArray_IsScalar(value, Number)) {
        double x = PyFloat_AsDouble(value);
        if (x == -1.0 && PyErr_Occurred()) goto done;
        if (dst->dtype == TL_I32 && tl_check_int32_value("__setitem__", x) < 0) goto done;
        tl_mark_write(dst, "__setitem__");
        rc = tl_tensor_fill(dst, x);
    } else if ((src = write_source(dst, value, v.element)) != NULL) {
        tl_mark_write(dst, "__setitem__");
        rc = tl_convert_into(dst, src);
    }
    if (rc == 0 && track) {                      /* t's grad_fn becomes the write: old graph and value */
        tl_node *nd = tl_node_new(&ROW_SETITEM, ins, 2);
        if (nd == NULL) rc = -1;
        else {
            nd->extra = Py_NewRef(key);
            tl_node_attach(nd, t);
        }
    }
done:
    Py_XDECREF(src);
    Py_XDECREF(dst);
    return rc;
}

static PyObject *
m_index_select(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dim", "index", NULL};
    tl_tensor *t = tl_tensor_CAST(self), *idx = NULL, *out = NULL, src_l, idx_l;
    PyObject *index, *host = NULL;
    Py_ssize_t d0, shape[TL_MAX_DIMS];
    int d;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nO:index_select", kw, &d0, &index)) return NULL;
    if ((d = norm_dim("index_select", d0, t)) < 0) return NULL;
    if ((idx = to_index("index_select", index, PyExc_TypeError, &host)) == NULL) return NULL;
    if (idx->ndim > 1) {
        char s[128];
        tl_shape_str(idx->shape, idx->ndim, s, sizeof s);
        PyErr_Format(PyExc_ValueError, "index_select: the index must be 1-D, got shape %s", s);
        goto fail;
    }
    if (host == NULL && t->ndim > 0) {                       /* a device tensor: no host read */
        out = (tl_tensor *)select_on_device(self, d, idx, "index_select");
        Py_DECREF(idx);
        return (PyObject *)out;
    }
    Py_ssize_t k = idx->ndim == 1 ? idx->shape[0] : 1;
    memcpy(shape, t->shape, sizeof shape);
    shape[d] = k;
    fake(&src_l, t->ndim, t->offset);
    fake(&idx_l, t->ndim, idx->offset);
    memcpy(src_l.shape, t->shape, sizeof shape);
    memcpy(src_l.strides, t->strides, sizeof shape);
    src_l.shape[d] = 1;                                      /* the index supplies this coordinate */
    idx_l.shape[d] = k;
    idx_l.strides[d] = idx->ndim == 1 ? idx->strides[0] : 0;
    out = (tl_tensor *)gather_select("index_select", t, t->ndim, shape, &src_l, idx, &idx_l, host, d);
    Py_DECREF(idx);
    Py_XDECREF(host);
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(idx);
    Py_XDECREF(host);
    return NULL;
}

/* gather(dim, index): numpy's take_along_axis: out[..i..] = t[.. index[..i..] ..] along dim, the other
 * dims broadcast between t and index. */
static PyObject *
m_gather(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dim", "index", NULL};
    tl_tensor *t = tl_tensor_CAST(self), *idx = NULL;
    PyObject *index, *host = NULL, *out;
    Py_ssize_t d0;
    int d;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nO:gather", kw, &d0, &index)) return NULL;
    if ((d = norm_dim("gather", d0, t)) < 0) return NULL;
    if ((idx = to_index("gather", index, PyExc_TypeError, &host)) == NULL) return NULL;
    out = gather_along(self, d, idx, host, "gather");
    Py_DECREF(idx);
    Py_XDECREF(host);
    return out;
}

/* gather's work for an index already converted (host: its checked host copy, NULL for a device tensor). */
static PyObject *
gather_along(PyObject *self, int d, tl_tensor *idx, PyObject *host, const char *op)
{
    tl_tensor *t = tl_tensor_CAST(self), *out = NULL, src_l;
    Py_ssize_t shape[TL_MAX_DIMS];
    char a[128], b[128];
    int ok = idx->ndim == t->ndim;
    for (int k = 0; ok && k < t->ndim; k++) {
        ok = k == d || t->shape[k] == idx->shape[k] || t->shape[k] == 1 || idx->shape[k] == 1;
        shape[k] = k == d || t->shape[k] == 1 ? idx->shape[k] : t->shape[k];
    }
    if (!ok) {
        tl_shape_str(t->shape, t->ndim, a, sizeof a);
        tl_shape_str(idx->shape, idx->ndim, b, sizeof b);
        PyErr_Format(PyExc_ValueError, "%s: an index of shape %s does not fit a tensor of shape %s along dim %d "
                     "(same ndim; other dims equal or 1)", op, b, a, d);
        return NULL;
    }
    fake(&src_l, t->ndim, t->offset);
    memcpy(src_l.shape, t->shape, sizeof shape);
    memcpy(src_l.strides, t->strides, sizeof shape);
    src_l.shape[d] = 1;
    if ((out = tl_tensor_empty(t->dtype, t->ndim, shape)) == NULL) return NULL;
    if (run_gather(op, out, t, &src_l, idx, idx, host, d, NULL) < 0) goto fail;
    if (tl_autograd_wanted(&self, 1)) {
        tl_node *nd = tl_node_new(&ROW_GATHER, &self, 1);
        if (nd == NULL) goto fail;
        nd->iarg[0] = d;
        tl_node_save(nd, idx);
        tl_node_attach(nd, out);
    }
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    return NULL;
}

/* index_select(d, idx) / t[idx] with idx a 1-D int32 tensor already on the device: gather along d with idx
 * viewed as (1, .., k, .., 1), so the index is checked on the device (IndexError at the next sync point) and
 * the backward is gather's device scatter-add: no host read, which a traced step (tlgpu.jit) needs. */
static PyObject *
select_on_device(PyObject *self, int d, tl_tensor *idx, const char *op)
{
    tl_tensor *t = tl_tensor_CAST(self);
    Py_ssize_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    for (int k = 0; k < t->ndim; k++) {
        shape[k] = k == d ? (idx->ndim == 1 ? idx->shape[0] : 1) : 1;
        strides[k] = k == d && idx->ndim == 1 ? idx->strides[0] : 0;
    }
    tl_tensor *v = tl_tensor_view(idx, t->ndim, shape, strides, idx->offset);
    if (v == NULL) return NULL;
    PyObject *out = gather_along(self, d, v, NULL, op);
    Py_DECREF(v);
    return out;
}

/* ---- autograd ---- */

/* The backward kernels here are float32: a float16/bfloat16 gradient is widened first (exact); the engine
 * converts the result to the input's dtype. New reference. */
static PyObject *
grad32(PyObject *g)
{
    return TL_IS_HALF(tl_tensor_CAST(g)->dtype) ? tl_convert(tl_tensor_CAST(g), TL_F32) : Py_NewRef(g);
}

/* Basic indexing: zeros of the input's shape with the gradient written through the same key. */
static int
tl_index_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    tl_tensor *z = tl_tensor_empty(tl_tensor_CAST(g)->dtype, nd->in[0].ndim, nd->in[0].shape);
    if (z == NULL || tl_tensor_fill(z, 0.0) < 0 || tensor_setitem((PyObject *)z, nd->extra, g) < 0) {
        Py_XDECREF(z);
        return -1;
    }
    gin[0] = (PyObject *)z;
    return 0;
}

/* t[key] = value, recorded: the old t gets g with the written region zeroed, value gets g[key] summed down
 * to its own shape (it was broadcast into the region). */
static int
tl_setitem_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    if (tl_wants_grad(nd, 0)) {
        PyObject *z = tl_clone(tl_tensor_CAST(g)), *zero = PyFloat_FromDouble(0.0);
        int rc = z != NULL && zero != NULL ? tensor_setitem(z, nd->extra, zero) : -1;
        Py_XDECREF(zero);
        if (rc < 0) {
            Py_XDECREF(z);
            return -1;
        }
        gin[0] = z;
    }
    if (tl_wants_grad(nd, 1)) {
        PyObject *part = tensor_getitem(g, nd->extra);
        gin[1] = part != NULL ? tl_sum_to_shape(part, nd->in[1].ndim, nd->in[1].shape) : NULL;
        Py_XDECREF(part);
        if (gin[1] == NULL) return -1;
    }
    return 0;
}

/* index_select(dim, idx): grad_in[.., j, ..] = sum of g[.., i, ..] over the i with idx[i] == j. Repeated
 * indices make this a scatter-add; instead of float atomics (not in OpenCL 1.2, and not deterministic) the
 * host turns the forward's index copy into a plan (for each j, its i's in order) and one work-item per
 * output element sums its list: deterministic, and no work for rows nobody picked. */
static int
tl_index_select_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    static tl_kernel kh = TL_KERNEL("index", "tl_index_add_f32");
    const tl_edge *e = &nd->in[0];
    int dim = nd->iarg[0], rows = (int)e->shape[dim], pre = 1, post = 1;
    tl_tensor *gc = NULL, *out = NULL, *order_t = NULL, *start_t = NULL;
    PyObject *order = NULL, *starts = NULL;
    int rc = -1;
    for (int d = 0; d < dim; d++) pre *= (int)e->shape[d];
    for (int d = dim + 1; d < e->ndim; d++) post *= (int)e->shape[d];
    const int32_t *ix = PyArray_DATA((PyArrayObject *)nd->extra);
    int k = (int)PyArray_SIZE((PyArrayObject *)nd->extra);
    npy_intp nk = k, nr = rows + 1;
    if ((order = PyArray_SimpleNew(1, &nk, NPY_INT32)) == NULL ||
        (starts = PyArray_ZEROS(1, &nr, NPY_INT32, 0)) == NULL)
        goto done;
    int32_t *ord = PyArray_DATA((PyArrayObject *)order), *st = PyArray_DATA((PyArrayObject *)starts);
    for (int i = 0; i < k; i++) st[(ix[i] < 0 ? ix[i] + rows : ix[i]) + 1]++;      /* counting sort: stable */
    for (int j = 0; j < rows; j++) st[j + 1] += st[j];
    int32_t *fill = PyMem_Malloc(sizeof(int32_t) * (size_t)(rows > 0 ? rows : 1));
    if (fill == NULL) { PyErr_NoMemory(); goto done; }
    memcpy(fill, st, sizeof(int32_t) * (size_t)rows);
    for (int i = 0; i < k; i++) ord[fill[ix[i] < 0 ? ix[i] + rows : ix[i]]++] = i;
    PyMem_Free(fill);
    PyObject *g32 = grad32(g);
    gc = g32 != NULL ? tl_tensor_contiguous(tl_tensor_CAST(g32)) : NULL;
    Py_XDECREF(g32);
    if (gc == NULL || (out = tl_tensor_empty(TL_F32, e->ndim, e->shape)) == NULL) goto done;
    if (out->storage == NULL) { rc = 0; gin[0] = Py_NewRef(out); goto done; }
    if (k == 0) { rc = tl_tensor_fill(out, 0.0); if (rc == 0) gin[0] = Py_NewRef(out); goto done; }
    if ((order_t = tl_tensor_from_object(order, TL_I32, "backward")) == NULL ||
        (start_t = tl_tensor_from_object(starts, TL_I32, "backward")) == NULL)
        goto done;
    cl_kernel kern = tl_kernel_py(&kh);
    if (kern == NULL) goto done;
    const size_t sz[8] = {4, 4, 4, 4, sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem)};
    const void *v[8] = {&pre, &rows, &post, &k, &out->storage->mem, &gc->storage->mem, &order_t->storage->mem,
                        &start_t->storage->mem};
    tl_storage *sts[4] = {out->storage, gc->storage, order_t->storage, start_t->storage};
    if (tl_set_args(kern, 0, 8, sz, v) < 0 ||
        tl_launch_1d(&kh, (size_t)pre * (size_t)rows * (size_t)post, sts, 4, 1u) < 0)
        goto done;
    gin[0] = Py_NewRef(out);
    rc = 0;
done:
    Py_XDECREF(order); Py_XDECREF(starts); Py_XDECREF(gc); Py_XDECREF(out); Py_XDECREF(order_t); Py_XDECREF(start_t);
    return rc;
}

/* gather(dim, index): grad_in[.., j, ..] = the sum of g[.., k, ..] over the k whose index is j: a
 * scatter-add done as one work-item per element of grad_in looping over the index's size along dim, in a
 * fixed order (kernels/index.cl: deterministic, no atomics, no host wait); grad_in is computed at the
 * broadcast shape first and summed down where the input's dims of size 1 were broadcast. */
static int
tl_gather_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    static tl_kernel kh = TL_KERNEL("index", "tl_gather_backward_f32");
    const tl_edge *e = &nd->in[0];
    int d = nd->iarg[0], rc = -1;
    tl_tensor *idx = tl_node_saved(nd, 0), *gc = NULL, *out = NULL, g_l, idx_l;
    Py_ssize_t shape[TL_MAX_DIMS];
    tl_layout L;
    cl_kernel k;
    PyObject *g32 = idx != NULL ? grad32(g) : NULL;
    gc = g32 != NULL ? tl_tensor_contiguous(tl_tensor_CAST(g32)) : NULL;
    Py_XDECREF(g32);
    if (gc == NULL) goto done;
    memcpy(shape, gc->shape, sizeof shape);
    shape[d] = e->shape[d];
    if ((out = tl_tensor_empty(TL_F32, e->ndim, shape)) == NULL) goto done;
    if (out->storage != NULL && gc->storage == NULL) {       /* the index is empty along dim: nothing picked */
        if (tl_tensor_fill(out, 0.0) < 0) goto done;
    } else if (out->storage != NULL) {
        fake(&g_l, e->ndim, gc->offset);
        fake(&idx_l, e->ndim, idx->offset);
        memcpy(g_l.shape, gc->shape, sizeof shape);
        memcpy(g_l.strides, gc->strides, sizeof shape);
        memcpy(idx_l.shape, idx->shape, sizeof shape);
        memcpy(idx_l.strides, idx->strides, sizeof shape);
        g_l.shape[d] = idx_l.shape[d] = 1;
        tl_tensor *ops[3] = {out, &g_l, &idx_l};
        tl_layout_make(&L, e->ndim, shape, ops, 3);
        int K = (int)gc->shape[d], gs = (int)gc->strides[d], is = (int)idx->strides[d], inner = 1,
            dsize = (int)shape[d];
        for (int q = d + 1; q < e->ndim; q++) inner *= (int)shape[q];
        const size_t sz[9] = {sizeof L, sizeof(cl_mem), sizeof(cl_mem), sizeof(cl_mem), 4, 4, 4, 4, 4};
        const void *v[9] = {&L, &out->storage->mem, &gc->storage->mem, &idx->storage->mem, &K, &gs, &is, &inner,
                            &dsize};
        tl_storage *st[3] = {out->storage, gc->storage, idx->storage};
        if ((k = tl_kernel_py(&kh)) == NULL || tl_set_args(k, 0, 9, sz, v) < 0 ||
            tl_launch_1d(&kh, (size_t)L.n, st, 3, 1u) < 0)
            goto done;
    }
    gin[0] = tl_sum_to_shape((PyObject *)out, e->ndim, e->shape);
    rc = gin[0] != NULL ? 0 : -1;
done:
    Py_XDECREF(idx);
    Py_XDECREF(gc);
    Py_XDECREF(out);
    return rc;
}

static const PyMethodDef index_methods[] = {
    {"index_select", TL_KW(m_index_select), "index_select(dim, index): rows along dim picked by a 1-D int32 index "
     "(new tensor; reads the index back to check it: a sync point)."},
    {"gather", TL_KW(m_gather), "gather(dim, index): numpy take_along_axis, differentiable (new tensor; the index is "
     "checked on the device: a bad one raises IndexError at the next sync point)."},
    {NULL, NULL, 0, NULL},
};

static const PyType_Slot index_slots[] = {
    {Py_mp_subscript, tensor_getitem},
    {Py_mp_ass_subscript, tensor_setitem},
    {Py_sq_item, tensor_sq_item},
    {0, NULL},
};

static const tl_op_row ROW_INDEX = {"IndexBackward", tl_index_backward, TL_ROW_VIEW};
static const tl_op_row ROW_INDEX_SELECT = {"IndexSelectBackward", tl_index_select_backward};
static const tl_op_row ROW_GATHER = {"GatherBackward", tl_gather_backward};
static const tl_op_row ROW_SETITEM = {"CopySlices", tl_setitem_backward};
static const tl_op_row *const index_rows[] = {&ROW_INDEX, &ROW_INDEX_SELECT, &ROW_GATHER, &ROW_SETITEM, NULL};

const tl_family tl_family_index = {NULL, index_methods, index_slots, NULL, "index_select gather",
                                   .rows = index_rows};
