/* ops_shape.c: shape ops. Most only re-describe an existing storage (reshape/view, transpose, permute,
 * .T, unsqueeze, squeeze, expand, flatten, split, chunk); cat and stack build a new tensor.
 * Invariants:
 *  - A view op never enqueues a kernel: it returns tl_tensor_view() over the same storage, so the
 *    result shares the storage's version counter and in-place writes are seen through every view.
 *  - reshape copies (one strided copy kernel) only when no strides describe the new shape over the old
 *    storage (torch's computeStride rule); view() raises instead of copying.
 *  - expand gives stride 0 to broadcast dims; writing through such a view is refused by __setitem__.
 *  - Dims may be negative and are normalised once. A dim out of range is an IndexError, shapes that do
 *    not fit are a ValueError, dtype mismatches a TypeError; each message names the op and the shapes.
 *  - Zero-size tensors have no storage: every op here accepts them and enqueues nothing for them.
 *  - split/chunk follow torch: an int is a chunk size (split) or a chunk count (chunk), a list are sizes.
 */
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"

/* the autograd rows of its ops, defined below with the backwards */
static const tl_op_row ROW_RESHAPE, ROW_PERMUTE, ROW_EXPAND, ROW_NARROW, ROW_CAT, ROW_STACK;

static int
norm_dim(const char *op, Py_ssize_t d, int range, const tl_tensor *t)
{
    if (d >= -range && d < range) return (int)(d < 0 ? d + range : d);
    char s[128];
    tl_shape_str(t->shape, t->ndim, s, sizeof s);
    PyErr_Format(PyExc_IndexError, "%s: dim %zd is out of range for a tensor of shape %s (expected %d..%d)", op, d,
                 s, -range, range - 1);
    return -1;
}

/* dim= and axis= are synonyms; at most one may be given. Returns 0 with *out = dflt when neither is. */
static int
pick_axis(const char *op, PyObject *dim, PyObject *axis, Py_ssize_t dflt, Py_ssize_t *out)
{
    if (dim != NULL && dim != Py_None && axis != NULL && axis != Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: give dim= or axis=, not both", op);
        return -1;
    }
    PyObject *o = dim != NULL && dim != Py_None ? dim : axis;
    if (o == NULL || o == Py_None) { *out = dflt; return 0; }
    *out = PyNumber_AsSsize_t(o, PyExc_IndexError);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* Ints given as separate arguments or as one sequence; the values are not checked here. */
static int
parse_ints(const char *op, PyObject *args, Py_ssize_t *out, int *n)
{
    char msg[96];
    PyObject *seq = args, *fast;
    if (PyTuple_GET_SIZE(args) == 1 && !PyIndex_Check(PyTuple_GET_ITEM(args, 0))) seq = PyTuple_GET_ITEM(args, 0);
    snprintf(msg, sizeof msg, "%s: expected ints or one sequence of ints", op);
    if ((fast = PySequence_Fast(seq, msg)) == NULL) return -1;
    Py_ssize_t len = PySequence_Fast_GET_SIZE(fast);
    if (len > TL_MAX_DIMS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: %zd dimensions; at most %d are supported", op, len, TL_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < len; i++) {
        out[i] = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i), PyExc_OverflowError);
        if (out[i] == -1 && PyErr_Occurred()) { Py_DECREF(fast); return -1; }
    }
    *n = (int)len;
    Py_DECREF(fast);
    return 0;
}

static void
contig_strides(int nd, const Py_ssize_t *shape, Py_ssize_t *st)
{
    Py_ssize_t s = 1;
    for (int d = nd - 1; d >= 0; d--) { st[d] = s; s *= shape[d] > 0 ? shape[d] : 1; }
}

/* A view of t; when autograd records, `row` (a view row of this family, with its iargs) undoes it in backward. */
static PyObject *
view_rec(tl_tensor *t, int nd, const Py_ssize_t *shape, const Py_ssize_t *st, Py_ssize_t off,
         const tl_op_row *row, const int *iarg, int n_iarg)
{
    return tl_record1((PyObject *)tl_tensor_view(t, nd, shape, st, off), row, (PyObject *)t, iarg, n_iarg, NULL);
}

static PyObject *
view_of(tl_tensor *t, int nd, const Py_ssize_t *shape, const Py_ssize_t *st, Py_ssize_t off)
{
    return view_rec(t, nd, shape, st, off, &ROW_RESHAPE, NULL, 0);
}

/* Resolves one -1 and checks the element count, naming the requested shape on failure. */
static int
infer_shape(const char *op, const tl_tensor *t, int nd, Py_ssize_t *shape)
{
    Py_ssize_t known = 1, n = tl_tensor_numel(t);
    int neg = -1, bad = 0;
    char a[128], b[128];
    for (int d = 0; d < nd; d++) {
        if (shape[d] == -1 && neg < 0) neg = d;
        else if (shape[d] < 0) bad = 1;
        else if (shape[d] > 0 && known > PY_SSIZE_T_MAX / shape[d]) bad = 1;
        else known *= shape[d];
    }
    if (!bad && neg >= 0 && known > 0 && n % known == 0) shape[neg] = n / known;
    else if (!bad && neg < 0 && known == n) return 0;
    else bad = 1;
    if (!bad) return 0;
    tl_shape_str(t->shape, t->ndim, a, sizeof a);
    tl_shape_str(shape, nd, b, sizeof b);
    PyErr_Format(PyExc_ValueError, "%s: cannot reshape a tensor of shape %s (%zd elements) into shape %s "
                 "(at most one -1; other sizes >= 0)", op, a, n, b);
    return -1;
}

/* Strides that view t's storage with the new shape, or 0 when none exist (torch's computeStride: the
 * old dims split into runs that are contiguous among themselves; each run must map onto whole new dims). */
static int
view_strides(const tl_tensor *t, int nd, const Py_ssize_t *shape, Py_ssize_t *out)
{
    if (tl_tensor_numel(t) <= 1 || tl_tensor_is_contig(t)) {    /* any row-major strides will do */
        contig_strides(nd, shape, out);
        return 1;
    }
    int vd = nd - 1;
    Py_ssize_t chunk = t->strides[t->ndim - 1], tn = 1, vn = 1;
    for (int td = t->ndim - 1; td >= 0; td--) {
        tn *= t->shape[td];
        if (td == 0 || (t->shape[td - 1] != 1 && t->strides[td - 1] != tn * chunk)) {
            while (vd >= 0 && (vn < tn || shape[vd] == 1)) {
                out[vd] = vn * chunk;
                vn *= shape[vd];
                vd--;
            }
            if (vn != tn) return 0;
            if (td > 0) { chunk = t->strides[td - 1]; tn = 1; vn = 1; }
        }
    }
    return vd == -1;
}

static PyObject *
reshape_to(tl_tensor *t, int nd, Py_ssize_t *shape, int allow_copy, const char *op)
{
    Py_ssize_t st[TL_MAX_DIMS];
    tl_tensor *src = NULL;
    PyObject *res = NULL;
    if (infer_shape(op, t, nd, shape) < 0) return NULL;
    if (view_strides(t, nd, shape, st)) return view_of(t, nd, shape, st, t->offset);
    if (!allow_copy) {
        char a[128], b[128], c[128];
        tl_shape_str(t->shape, t->ndim, a, sizeof a);
        tl_shape_str(t->strides, t->ndim, b, sizeof b);
        tl_shape_str(shape, nd, c, sizeof c);
        return PyErr_Format(PyExc_ValueError, "view: a tensor of shape %s with strides %s cannot be viewed as "
                            "shape %s without a copy; use reshape() or contiguous() first", a, b, c);
    }
    if ((src = tl_tensor_contiguous(t)) == NULL) return NULL;   /* one strided copy kernel */
    contig_strides(nd, shape, st);
    res = tl_record1((PyObject *)tl_tensor_view(src, nd, shape, st, src->offset), &ROW_RESHAPE, (PyObject *)t,
                     NULL, 0, NULL);
    Py_DECREF(src);
    return res;
}

PyObject *
tl_reshape(tl_tensor *x, int ndim, const Py_ssize_t *shape)
{
    Py_ssize_t sh[TL_MAX_DIMS];
    if (ndim < 0 || ndim > TL_MAX_DIMS)
        return PyErr_Format(PyExc_ValueError, "reshape: %d dimensions; at most %d are supported", ndim, TL_MAX_DIMS);
    memcpy(sh, shape, sizeof(Py_ssize_t) * (size_t)ndim);
    return reshape_to(x, ndim, sh, 1, "reshape");
}

static PyObject *
m_reshape(PyObject *self, PyObject *args)
{
    Py_ssize_t shape[TL_MAX_DIMS];
    int nd;
    if (parse_ints("reshape", args, shape, &nd) < 0) return NULL;
    return reshape_to(tl_tensor_CAST(self), nd, shape, 1, "reshape");
}

static PyObject *
m_view(PyObject *self, PyObject *args)
{
    Py_ssize_t shape[TL_MAX_DIMS];
    int nd;
    if (parse_ints("view", args, shape, &nd) < 0) return NULL;
    return reshape_to(tl_tensor_CAST(self), nd, shape, 0, "view");
}

static PyObject *
m_flatten(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"start_dim", "end_dim", NULL};
    tl_tensor *t = tl_tensor_CAST(self);
    Py_ssize_t s0 = 0, e0 = -1, shape[TL_MAX_DIMS];
    int s, e, nd = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|nn:flatten", kw, &s0, &e0)) return NULL;
    if (t->ndim == 0) { shape[0] = 1; return reshape_to(t, 1, shape, 1, "flatten"); }
    if ((s = norm_dim("flatten", s0, t->ndim, t)) < 0 || (e = norm_dim("flatten", e0, t->ndim, t)) < 0) return NULL;
    if (s > e) return PyErr_Format(PyExc_ValueError, "flatten: start_dim %zd comes after end_dim %zd", s0, e0);
    for (int d = 0; d < s; d++) shape[nd++] = t->shape[d];
    shape[nd] = 1;
    for (int d = s; d <= e; d++) shape[nd] *= t->shape[d];
    nd++;
    for (int d = e + 1; d < t->ndim; d++) shape[nd++] = t->shape[d];
    return reshape_to(t, nd, shape, 1, "flatten");
}

static PyObject *
transpose_dims(tl_tensor *t, Py_ssize_t a0, Py_ssize_t b0)
{
    Py_ssize_t shape[TL_MAX_DIMS], st[TL_MAX_DIMS];
    int a, b;
    if ((a = norm_dim("transpose", a0, t->ndim, t)) < 0 || (b = norm_dim("transpose", b0, t->ndim, t)) < 0)
        return NULL;
    memcpy(shape, t->shape, sizeof shape);
    memcpy(st, t->strides, sizeof st);
    shape[a] = t->shape[b]; shape[b] = t->shape[a];
    st[a] = t->strides[b]; st[b] = t->strides[a];
    int perm[TL_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) perm[d] = d == a ? b : d == b ? a : d;
    return view_rec(t, t->ndim, shape, st, t->offset, &ROW_PERMUTE, perm, t->ndim);
}

PyObject *
tl_transpose(tl_tensor *x, int dim0, int dim1)
{
    return transpose_dims(x, dim0, dim1);
}

static PyObject *
m_transpose(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dim0", "dim1", NULL};
    Py_ssize_t a0, b0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "nn:transpose", kw, &a0, &b0)) return NULL;
    return transpose_dims(tl_tensor_CAST(self), a0, b0);
}

static PyObject *
permute_by(tl_tensor *t, const Py_ssize_t *dims, int n, const char *op)
{
    Py_ssize_t shape[TL_MAX_DIMS], st[TL_MAX_DIMS];
    int seen[TL_MAX_DIMS] = {0}, perm[TL_MAX_DIMS];
    char a[128], b[128];
    if (n != t->ndim) goto bad;
    for (int i = 0; i < n; i++) {
        int d = norm_dim(op, dims[i], t->ndim, t);
        if (d < 0) return NULL;
        if (seen[d]++) goto bad;
        shape[i] = t->shape[d];
        st[i] = t->strides[d];
        perm[i] = d;
    }
    return view_rec(t, n, shape, st, t->offset, &ROW_PERMUTE, perm, n);
bad:
    tl_shape_str(dims, n, a, sizeof a);
    tl_shape_str(t->shape, t->ndim, b, sizeof b);
    return PyErr_Format(PyExc_ValueError, "%s: dims %s are not a permutation of the %d dims of shape %s", op, a,
                        t->ndim, b);
}

static PyObject *
m_permute(PyObject *self, PyObject *args)
{
    Py_ssize_t dims[TL_MAX_DIMS];
    int n;
    if (parse_ints("permute", args, dims, &n) < 0) return NULL;
    return permute_by(tl_tensor_CAST(self), dims, n, "permute");
}

static PyObject *
get_T(PyObject *self, void *Py_UNUSED(c))
{
    tl_tensor *t = tl_tensor_CAST(self);
    Py_ssize_t dims[TL_MAX_DIMS];
    for (int d = 0; d < t->ndim; d++) dims[d] = t->ndim - 1 - d;   /* numpy: reverse all dims */
    return permute_by(t, dims, t->ndim, "T");
}

static PyObject *
unsqueeze_at(tl_tensor *t, Py_ssize_t d0)
{
    Py_ssize_t shape[TL_MAX_DIMS], st[TL_MAX_DIMS];
    int d, nd = 0;
    if ((d = norm_dim("unsqueeze", d0, t->ndim + 1, t)) < 0) return NULL;
    if (t->ndim >= TL_MAX_DIMS)
        return PyErr_Format(PyExc_ValueError, "unsqueeze: a tensor already has the maximum of %d dims", TL_MAX_DIMS);
    for (int i = 0; i <= t->ndim; i++) {
        if (i == d) {                                        /* any stride works for size 1; keep it tidy */
            shape[nd] = 1;
            st[nd++] = d < t->ndim ? t->strides[d] * (t->shape[d] > 0 ? t->shape[d] : 1) : 1;
        }
        if (i < t->ndim) { shape[nd] = t->shape[i]; st[nd++] = t->strides[i]; }
    }
    return view_of(t, nd, shape, st, t->offset);
}

PyObject *
tl_unsqueeze(tl_tensor *x, int dim)
{
    return unsqueeze_at(x, dim);
}

static PyObject *
m_unsqueeze(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dim", "axis", NULL};
    PyObject *dim = NULL, *axis = NULL;
    Py_ssize_t d0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:unsqueeze", kw, &dim, &axis)) return NULL;
    if ((dim == NULL || dim == Py_None) && (axis == NULL || axis == Py_None))
        return PyErr_Format(PyExc_TypeError, "unsqueeze: missing the dim argument");
    if (pick_axis("unsqueeze", dim, axis, 0, &d0) < 0) return NULL;
    return unsqueeze_at(tl_tensor_CAST(self), d0);
}

/* Drops the n given dims (each must have size 1), or every size-1 dim when n < 0. */
static PyObject *
squeeze_dims(tl_tensor *t, const Py_ssize_t *dims, int n)
{
    Py_ssize_t shape[TL_MAX_DIMS], st[TL_MAX_DIMS];
    int drop[TL_MAX_DIMS] = {0}, nd = 0;
    if (n < 0)
        for (int d = 0; d < t->ndim; d++) drop[d] = t->shape[d] == 1;
    for (int i = 0; i < n; i++) {
        int d = norm_dim("squeeze", dims[i], t->ndim, t);
        if (d < 0) return NULL;
        if (t->shape[d] != 1) {                             /* numpy's rule, not torch's silent no-op */
            char s[128];
            tl_shape_str(t->shape, t->ndim, s, sizeof s);
            return PyErr_Format(PyExc_ValueError, "squeeze: dim %zd of shape %s has size %zd, not 1", dims[i], s,
                                t->shape[d]);
        }
        drop[d] = 1;
    }
    for (int d = 0; d < t->ndim; d++)
        if (!drop[d]) { shape[nd] = t->shape[d]; st[nd++] = t->strides[d]; }
    return view_of(t, nd, shape, st, t->offset);
}

PyObject *
tl_squeeze_dim(tl_tensor *x, int dim)
{
    Py_ssize_t d = dim;
    return squeeze_dims(x, &d, 1);
}

static PyObject *
m_squeeze(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dim", "axis", NULL};
    PyObject *dim = NULL, *axis = NULL, *sel = NULL;
    Py_ssize_t dims[TL_MAX_DIMS];
    int n = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:squeeze", kw, &dim, &axis)) return NULL;
    if (dim != NULL && dim != Py_None && axis != NULL && axis != Py_None)
        return PyErr_Format(PyExc_TypeError, "squeeze: give dim= or axis=, not both");
    sel = dim != NULL && dim != Py_None ? dim : (axis != NULL && axis != Py_None ? axis : NULL);
    if (sel != NULL) {                                       /* one dim or a sequence of dims */
        PyObject *one = PyTuple_Pack(1, sel);
        int rc = one != NULL ? parse_ints("squeeze", one, dims, &n) : -1;
        Py_XDECREF(one);
        if (rc < 0) return NULL;
    }
    return squeeze_dims(tl_tensor_CAST(self), dims, n);
}

static PyObject *
expand_to(tl_tensor *t, int n, const Py_ssize_t *want, const char *op)
{
    Py_ssize_t shape[TL_MAX_DIMS], st[TL_MAX_DIMS];
    char a[128], b[128];
    if (n < t->ndim) goto bad;
    for (int i = 0; i < n; i++) {
        int j = i - (n - t->ndim);
        if (j < 0) {                                         /* new leading dim: every row is the same data */
            if (want[i] < 0) goto bad;
            shape[i] = want[i];
            st[i] = 0;
        } else if (want[i] == -1 || want[i] == t->shape[j]) {
            shape[i] = t->shape[j];
            st[i] = t->strides[j];
        } else if (t->shape[j] == 1 && want[i] >= 0) {
            shape[i] = want[i];
            st[i] = 0;
        } else {
            goto bad;
        }
    }
    return view_rec(t, n, shape, st, t->offset, &ROW_EXPAND, NULL, 0);
bad:
    tl_shape_str(t->shape, t->ndim, a, sizeof a);
    tl_shape_str(want, n, b, sizeof b);
    return PyErr_Format(PyExc_ValueError, "%s: cannot expand shape %s to %s (only size-1 dims expand; -1 keeps a "
                        "dim; new dims go in front)", op, a, b);
}

static PyObject *
m_expand(PyObject *self, PyObject *args)
{
    Py_ssize_t want[TL_MAX_DIMS];
    int n;
    if (parse_ints("expand", args, want, &n) < 0) return NULL;
    return expand_to(tl_tensor_CAST(self), n, want, "expand");
}

static PyObject *
m_expand_as(PyObject *self, PyObject *other)
{
    if (!tl_tensor_check(other)) return PyErr_Format(PyExc_TypeError, "expand_as: expected a Tensor");
    tl_tensor *o = tl_tensor_CAST(other);
    return expand_to(tl_tensor_CAST(self), o->ndim, o->shape, "expand_as");
}

/* A view of t restricted to [start, start + len) along dim. */
static PyObject *
narrow(tl_tensor *t, int dim, Py_ssize_t start, Py_ssize_t len)
{
    Py_ssize_t shape[TL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[dim] = len;
    int iarg[2] = {dim, (int)start};
    return view_rec(t, t->ndim, shape, t->strides, t->offset + start * t->strides[dim], &ROW_NARROW, iarg, 2);
}

/* Views of consecutive pieces of the given sizes along dim, as a list. */
static PyObject *
pieces(tl_tensor *t, int dim, const Py_ssize_t *sizes, Py_ssize_t n)
{
    PyObject *list = PyList_New(n);
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; list != NULL && i < n; i++) {
        PyObject *v = narrow(t, dim, at, sizes[i]);
        if (v == NULL) Py_CLEAR(list);
        else PyList_SET_ITEM(list, i, v);
        at += sizes[i];
    }
    return list;
}

static PyObject *
split_even(tl_tensor *t, int dim, Py_ssize_t size)
{
    Py_ssize_t len = t->shape[dim], n = len == 0 ? 1 : (len + size - 1) / size, *sizes;
    PyObject *res;
    if ((sizes = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)n)) == NULL) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) sizes[i] = len - i * size < size ? len - i * size : size;
    res = pieces(t, dim, sizes, n);
    PyMem_Free(sizes);
    return res;
}

static PyObject *
m_split(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"split_size_or_sections", "dim", "axis", NULL};
    tl_tensor *t = tl_tensor_CAST(self);
    PyObject *arg, *dim = NULL, *axis = NULL, *fast = NULL, *res = NULL;
    Py_ssize_t d0, *sizes = NULL, total = 0;
    int d;
    char s[128];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO:split", kw, &arg, &dim, &axis)) return NULL;
    if (pick_axis("split", dim, axis, 0, &d0) < 0 || (d = norm_dim("split", d0, t->ndim, t)) < 0) return NULL;
    tl_shape_str(t->shape, t->ndim, s, sizeof s);
    if (PyIndex_Check(arg)) {
        Py_ssize_t size = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
        if (size == -1 && PyErr_Occurred()) return NULL;
        if (size <= 0) return PyErr_Format(PyExc_ValueError, "split: chunk size must be positive, got %zd", size);
        return split_even(t, d, size);
    }
    if ((fast = PySequence_Fast(arg, "split: expected a chunk size or a sequence of sizes")) == NULL) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if ((sizes = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(n > 0 ? n : 1))) == NULL) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        sizes[i] = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i), PyExc_OverflowError);
        if (sizes[i] == -1 && PyErr_Occurred()) goto done;
        if (sizes[i] < 0) { total = -1; break; }
        total += sizes[i];
    }
    if (total != t->shape[d]) {
        PyErr_Format(PyExc_ValueError, "split: sizes must be >= 0 and sum to %zd (dim %d of shape %s)", t->shape[d],
                     d, s);
        goto done;
    }
    res = pieces(t, d, sizes, n);
done:
    PyMem_Free(sizes);
    Py_XDECREF(fast);
    return res;
}

static PyObject *
m_chunk(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"chunks", "dim", "axis", NULL};
    tl_tensor *t = tl_tensor_CAST(self);
    PyObject *dim = NULL, *axis = NULL;
    Py_ssize_t n, d0;
    int d;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n|OO:chunk", kw, &n, &dim, &axis)) return NULL;
    if (n <= 0) return PyErr_Format(PyExc_ValueError, "chunk: the number of chunks must be positive, got %zd", n);
    if (pick_axis("chunk", dim, axis, 0, &d0) < 0 || (d = norm_dim("chunk", d0, t->ndim, t)) < 0) return NULL;
    Py_ssize_t len = t->shape[d], size = (len + n - 1) / n;  /* torch: may give fewer than n chunks */
    return split_even(t, d, size > 0 ? size : 1);
}

/* The tensors of a cat/stack argument: a list of borrowed tensor pointers, all of one dtype. */
static PyObject *
tensor_list(const char *op, PyObject *seq, tl_tensor ***out, Py_ssize_t *n)
{
    char msg[96];
    snprintf(msg, sizeof msg, "%s: expected a sequence of tensors", op);
    PyObject *fast = PySequence_Fast(seq, msg);
    if (fast == NULL) return NULL;
    *n = PySequence_Fast_GET_SIZE(fast);
    if (*n == 0) { Py_DECREF(fast); return PyErr_Format(PyExc_ValueError, "%s: need at least one tensor", op); }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(fast, i);
        if (!tl_tensor_check(o)) {
            Py_DECREF(fast);
            return PyErr_Format(PyExc_TypeError, "%s: item %zd is a %s, not a Tensor", op, i, Py_TYPE(o)->tp_name);
        }
        tl_tensor *t = tl_tensor_CAST(o), *t0 = tl_tensor_CAST(PySequence_Fast_GET_ITEM(fast, 0));
        if (t->dtype != t0->dtype) {
            Py_DECREF(fast);
            return PyErr_Format(PyExc_TypeError, "%s: tensor %zd is %s but tensor 0 is %s; cast first", op, i,
                                tl_dtype_name(t->dtype), tl_dtype_name(t0->dtype));
        }
    }
    *out = (tl_tensor **)PySequence_Fast_ITEMS(fast);
    return fast;                                             /* keeps the items alive */
}

static int
shape_mismatch(const char *op, Py_ssize_t i, const tl_tensor *t, const tl_tensor *t0, const char *why)
{
    char a[128], b[128];
    tl_shape_str(t->shape, t->ndim, a, sizeof a);
    tl_shape_str(t0->shape, t0->ndim, b, sizeof b);
    PyErr_Format(PyExc_ValueError, "%s: tensor %zd has shape %s but tensor 0 has shape %s%s", op, i, a, b, why);
    return -1;
}

static int record_many(PyObject **ins, Py_ssize_t n, const tl_op_row *row, int dim, tl_tensor *out);

static PyObject *
fn_cat(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"tensors", "axis", "dim", NULL};
    PyObject *seq, *axis = NULL, *dim = NULL, *fast = NULL;
    tl_tensor **ts, *out = NULL;
    Py_ssize_t n, d0, shape[TL_MAX_DIMS], at = 0;
    int d;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO:cat", kw, &seq, &axis, &dim)) return NULL;
    if ((fast = tensor_list("cat", seq, &ts, &n)) == NULL) return NULL;
    if (ts[0]->ndim == 0) {
        PyErr_SetString(PyExc_ValueError, "cat: zero-dimensional tensors cannot be concatenated; use stack()");
        goto fail;
    }
    if (pick_axis("cat", dim, axis, 0, &d0) < 0 || (d = norm_dim("cat", d0, ts[0]->ndim, ts[0])) < 0) goto fail;
    memcpy(shape, ts[0]->shape, sizeof shape);
    shape[d] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        int ok = ts[i]->ndim == ts[0]->ndim;
        for (int k = 0; ok && k < ts[0]->ndim; k++) ok = k == d || ts[i]->shape[k] == ts[0]->shape[k];
        if (!ok) { shape_mismatch("cat", i, ts[i], ts[0], " (they must match except along the cat dim)"); goto fail; }
        shape[d] += ts[i]->shape[d];
    }
    if ((out = tl_tensor_empty(ts[0]->dtype, ts[0]->ndim, shape)) == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {                     /* one strided copy per non-empty part */
        tl_tensor *dst = (tl_tensor *)narrow(out, d, at, ts[i]->shape[d]);
        int rc = dst != NULL ? tl_copy_into(dst, ts[i]) : -1;
        Py_XDECREF(dst);
        if (rc < 0) goto fail;
        at += ts[i]->shape[d];
    }
    if (record_many((PyObject **)ts, n, &ROW_CAT, d, out) < 0) goto fail;
    Py_DECREF(fast);
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(fast);
    return NULL;
}

static PyObject *
fn_stack(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"tensors", "axis", "dim", NULL};
    PyObject *seq, *axis = NULL, *dim = NULL, *fast = NULL;
    tl_tensor **ts, *out = NULL;
    Py_ssize_t n, d0, shape[TL_MAX_DIMS], st[TL_MAX_DIMS];
    int d, nd;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO:stack", kw, &seq, &axis, &dim)) return NULL;
    if ((fast = tensor_list("stack", seq, &ts, &n)) == NULL) return NULL;
    nd = ts[0]->ndim;
    if (nd >= TL_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "stack: tensors already have the maximum of %d dims", TL_MAX_DIMS);
        goto fail;
    }
    if (pick_axis("stack", dim, axis, 0, &d0) < 0 || (d = norm_dim("stack", d0, nd + 1, ts[0])) < 0) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        int ok = ts[i]->ndim == nd;
        for (int k = 0; ok && k < nd; k++) ok = ts[i]->shape[k] == ts[0]->shape[k];
        if (!ok) { shape_mismatch("stack", i, ts[i], ts[0], " (they must be equal)"); goto fail; }
    }
    for (int k = 0, j = 0; k <= nd; k++) shape[k] = k == d ? n : ts[0]->shape[j++];
    if ((out = tl_tensor_empty(ts[0]->dtype, nd + 1, shape)) == NULL) goto fail;
    for (int k = 0, j = 0; k <= nd; k++)                     /* out's strides with the new dim left out */
        if (k != d) { st[j] = out->strides[k]; j++; }
    for (Py_ssize_t i = 0; i < n; i++) {
        tl_tensor *dst = tl_tensor_view(out, nd, ts[0]->shape, st, i * out->strides[d]);
        int rc = dst != NULL ? tl_copy_into(dst, ts[i]) : -1;
        Py_XDECREF(dst);
        if (rc < 0) goto fail;
    }
    if (record_many((PyObject **)ts, n, &ROW_STACK, d, out) < 0) goto fail;
    Py_DECREF(fast);
    return (PyObject *)out;
fail:
    Py_XDECREF(out);
    Py_XDECREF(fast);
    return NULL;
}

/* ---- autograd: each view op's backward undoes it on the gradient ---- */

static int
record_many(PyObject **ins, Py_ssize_t n, const tl_op_row *row, int dim, tl_tensor *out)
{
    if (!tl_autograd_wanted(ins, (int)n)) return 0;
    tl_node *nd = tl_node_new(row, ins, (int)n);
    if (nd == NULL) return -1;
    nd->iarg[0] = dim;
    tl_node_attach(nd, out);
    return 0;
}

static int
tl_reshape_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    Py_ssize_t shape[TL_MAX_DIMS];
    memcpy(shape, nd->in[0].shape, sizeof shape);
    gin[0] = reshape_to(tl_tensor_CAST(g), nd->in[0].ndim, shape, 1, "backward");
    return gin[0] == NULL ? -1 : 0;
}

static int
tl_permute_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    Py_ssize_t inv[TL_MAX_DIMS];
    int n = nd->in[0].ndim;
    for (int i = 0; i < n; i++) inv[nd->iarg[i]] = i;
    gin[0] = permute_by(tl_tensor_CAST(g), inv, n, "backward");
    return gin[0] == NULL ? -1 : 0;
}

static int
tl_expand_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    (void)nd;
    gin[0] = Py_NewRef(g);                            /* the engine sums it back to the input's shape */
    return 0;
}

/* zeros of the input's shape with g written into the narrowed region */
static int
tl_narrow_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    tl_tensor *z = tl_tensor_empty(tl_tensor_CAST(g)->dtype, nd->in[0].ndim, nd->in[0].shape), *dst = NULL;
    int rc = -1;
    if (z == NULL || tl_tensor_fill(z, 0.0) < 0) goto done;
    if ((dst = (tl_tensor *)narrow(z, nd->iarg[0], nd->iarg[1], tl_tensor_CAST(g)->shape[nd->iarg[0]])) == NULL)
        goto done;
    if ((rc = tl_copy_into(dst, tl_tensor_CAST(g))) == 0) gin[0] = Py_NewRef(z);
done:
    Py_XDECREF(dst);
    Py_XDECREF(z);
    return rc;
}

static int
tl_cat_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    Py_ssize_t at = 0;
    int d = nd->iarg[0];
    for (int i = 0; i < nd->n_in; i++) {
        if (tl_wants_grad(nd, i) && (gin[i] = narrow(tl_tensor_CAST(g), d, at, nd->in[i].shape[d])) == NULL) return -1;
        at += nd->in[i].shape[d];
    }
    return 0;
}

static int
tl_stack_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    tl_tensor *gt = tl_tensor_CAST(g);
    Py_ssize_t st[TL_MAX_DIMS];
    int d = nd->iarg[0];
    for (int k = 0, j = 0; k < gt->ndim; k++)
        if (k != d) st[j++] = gt->strides[k];
    for (int i = 0; i < nd->n_in; i++) {
        if (!tl_wants_grad(nd, i)) continue;
        gin[i] = (PyObject *)tl_tensor_view(gt, nd->in[i].ndim, nd->in[i].shape, st, gt->offset + i * gt->strides[d]);
        if (gin[i] == NULL) return -1;
    }
    return 0;
}

static const PyMethodDef shape_methods[] = {
    {"reshape", m_reshape, METH_VARARGS, "reshape(*shape): a view when strides allow, else a contiguous copy."},
    {"view", m_view, METH_VARARGS, "view(*shape): a view with the new shape; ValueError if that needs a copy."},
    {"flatten", TL_KW(m_flatten), "flatten(start_dim=0, end_dim=-1): merge a range of dims (reshape rules)."},
    {"transpose", TL_KW(m_transpose), "transpose(dim0, dim1): a view with two dims swapped."},
    {"permute", m_permute, METH_VARARGS, "permute(*dims): a view with the dims reordered."},
    {"unsqueeze", TL_KW(m_unsqueeze), "unsqueeze(dim): a view with a size-1 dim inserted at dim."},
    {"squeeze", TL_KW(m_squeeze), "squeeze(dim=None): drop size-1 dims (all, or the given ones; each must be 1)."},
    {"expand", m_expand, METH_VARARGS, "expand(*shape): broadcast view (stride 0); -1 keeps a dim."},
    {"expand_as", m_expand_as, METH_O, "expand_as(other): expand(*other.shape)."},
    {"split", TL_KW(m_split), "split(size_or_sections, dim=0): list of views (torch semantics)."},
    {"chunk", TL_KW(m_chunk), "chunk(n, dim=0): at most n views of equal size (the last may be smaller)."},
    {NULL, NULL, 0, NULL},
};

#ifdef TL_TEST_HOOKS
/* Test hook (TLGPU_TEST_HOOKS=1 builds only): a strided view of t with any strides, including negative
 * ones the shape family never makes, checked against its storage so a test cannot make the kernel read
 * outside the buffer. */
static PyObject *
fn_test_view(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *t_o, *shape_o, *strides_o, *shape_args = NULL, *fast = NULL, *res = NULL;
    Py_ssize_t off, shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int nd;
    if (!PyArg_ParseTuple(args, "O!OOn:_matmul_test_view", tl_state_get()->tensor_type, &t_o, &shape_o, &strides_o,
                          &off))
        return NULL;
    tl_tensor *t = tl_tensor_CAST(t_o);
    if ((shape_args = PyTuple_Pack(1, shape_o)) == NULL) goto done;
    if (tl_parse_shape("_matmul_test_view", shape_args, &nd, shape) < 0) goto done;
    if ((fast = PySequence_Fast(strides_o, "strides must be a sequence of ints")) == NULL) goto done;
    if (PySequence_Fast_GET_SIZE(fast) != nd) {
        PyErr_SetString(PyExc_ValueError, "_matmul_test_view: shape and strides differ in length");
        goto done;
    }
    Py_ssize_t lo = off, hi = off, n = 1, cap = t->storage ? (Py_ssize_t)(t->storage->nbytes / 4) : 0;
    for (int d = 0; d < nd; d++) {
        strides[d] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, d));
        if (strides[d] == -1 && PyErr_Occurred()) goto done;
        *(strides[d] < 0 ? &lo : &hi) += strides[d] * (shape[d] > 0 ? shape[d] - 1 : 0);
        n *= shape[d];
    }
    if (n > 0 && (lo < 0 || hi >= cap)) {
        PyErr_SetString(PyExc_IndexError, "_matmul_test_view: the view reaches outside the storage");
        goto done;
    }
    res = (PyObject *)tl_tensor_view(t, nd, shape, strides, off);
done:
    Py_XDECREF(fast);
    Py_XDECREF(shape_args);
    return res;
}
#endif

static const PyMethodDef shape_functions[] = {
    {"cat", TL_KW(fn_cat), "cat(tensors, axis=0): concatenate along an existing dim (new tensor)."},
    {"concatenate", TL_KW(fn_cat), "Alias of cat()."},
    {"stack", TL_KW(fn_stack), "stack(tensors, axis=0): join equal-shaped tensors along a new dim."},
#ifdef TL_TEST_HOOKS
    {"_matmul_test_view", fn_test_view, METH_VARARGS,
     "_matmul_test_view(t, shape, strides, offset): a strided view, for tests of strided matmul operands."},
#endif
    {NULL, NULL, 0, NULL},
};

static const PyGetSetDef shape_getset[] = {
    {"T", get_T, NULL, "A view with all dims reversed (numpy's .T).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static const tl_op_row ROW_RESHAPE = {"ReshapeBackward", tl_reshape_backward, TL_ROW_VIEW};
static const tl_op_row ROW_PERMUTE = {"PermuteBackward", tl_permute_backward, TL_ROW_VIEW};
static const tl_op_row ROW_EXPAND = {"ExpandBackward", tl_expand_backward, TL_ROW_VIEW};
static const tl_op_row ROW_NARROW = {"NarrowBackward", tl_narrow_backward, TL_ROW_VIEW};
static const tl_op_row ROW_CAT = {"CatBackward", tl_cat_backward};
static const tl_op_row ROW_STACK = {"StackBackward", tl_stack_backward};
static const tl_op_row *const shape_rows[] = {&ROW_RESHAPE, &ROW_PERMUTE, &ROW_EXPAND, &ROW_NARROW, &ROW_CAT,
                                               &ROW_STACK, NULL};
static const tl_grad_prims shape_prims = {.reshape = tl_reshape};

const tl_family tl_family_shape = {shape_functions, shape_methods, NULL, shape_getset,
                                   "reshape flatten transpose permute unsqueeze squeeze expand split chunk",
                                   .rows = shape_rows, .grad_prims = &shape_prims};
