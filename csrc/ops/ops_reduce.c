/* ops_reduce.c: reductions over axes (sum mean max min argmax argmin logsumexp prod, numpy semantics:
 * axis None/int/negative/tuple, keepdims, dim= and keepdim= as synonyms) and softmax/log_softmax
 * along one axis, float32 only. Every reduction becomes [rows, cols]: when the reduced axes are one
 * adjacent block the contiguous input is read in place (row r, element j at base(r) + j*inner, see
 * kernels/reduce.cl); otherwise a permuted view (kept axes first) is copied contiguous once. A plan
 * picks G lanes per row (a power of two <= the kernel's work-group size L) and, when there are too few
 * rows to fill the device, splits rows into nseg segments whose partials a second launch finishes.
 * Invariants: launches use one local size per kernel (L, from tl_kernel.wg: PoCL compiles each local
 * size separately); the plan depends only on shapes and the device, so results are bit-identical run
 * to run; empty reductions enqueue at most a fill (sum 0, mean NaN, logsumexp -inf; max/min/arg raise);
 * zero-size outputs enqueue nothing. */
#include "ops_common.h"
#include "autograd.h"
#include "cl_runtime.h"
#include "ops.h"
#include "settings.h"
#include <math.h>
#include <stdlib.h>

static const tl_op_row ROW_REDUCE, ROW_SOFTMAX;   /* autograd rows (below) */

enum { R_SUM, R_MEAN, R_MAX, R_MIN, R_ARGMAX, R_ARGMIN, R_LSE, R_PROD };    /* = kernels/reduce.cl's R_* */
static const char *const R_NAME[] = {"sum", "mean", "max", "min", "argmax", "argmin", "logsumexp", "prod"};
_Static_assert(sizeof R_NAME / sizeof R_NAME[0] == R_PROD + 1, "op names");

static tl_kernel k_reduce = TL_KERNEL("reduce", "tl_reduce_f32");
static tl_kernel k_softmax = TL_KERNEL("reduce", "tl_softmax_f32");

/* ---- argument parsing ---- */

static int
axis_error(const char *op, PyObject *axis, const tl_tensor *x)
{
    char s[128];
    PyObject *mod, *cls = NULL, *msg;
    tl_shape_str(x->shape, x->ndim, s, sizeof s);
    /* numpy's AxisError subclasses both IndexError and ValueError, so either except clause works */
    if ((mod = PyImport_ImportModule("numpy.exceptions")) != NULL) {
        cls = PyObject_GetAttrString(mod, "AxisError");
        Py_DECREF(mod);
    }
    if (cls == NULL) {
        PyErr_Clear();
        cls = Py_NewRef(PyExc_IndexError);
    }
    msg = PyUnicode_FromFormat("%s: axis %S is out of bounds for a tensor of shape %s (ndim %d)", op, axis, s,
                               x->ndim);
    if (msg != NULL) PyErr_SetObject(cls, msg);
    Py_XDECREF(msg);
    Py_DECREF(cls);
    return -1;
}

static int
one_axis(const char *op, const tl_tensor *x, PyObject *o, int allow_tuple, int *out)
{
    if (!PyIndex_Check(o)) {                         /* ints and numpy integers (anything with __index__) */
        PyErr_Format(PyExc_TypeError, "%s: axis must be None, an int%s, got %s", op,
                     allow_tuple ? " or a tuple of ints" : "", Py_TYPE(o)->tp_name);
        return -1;
    }
    int overflow = 0;
    PyObject *i = PyNumber_Index(o);
    if (i == NULL) return -1;
    long a = PyLong_AsLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (a == -1 && PyErr_Occurred()) return -1;
    if (overflow || a < -x->ndim || a >= x->ndim) return axis_error(op, o, x);
    *out = (int)(a < 0 ? a + x->ndim : a);
    return 0;
}

/* axis -> bit mask of reduced dims. None: all dims (a 0-d tensor reduces to itself). */
static int
parse_axes(const char *op, const tl_tensor *x, PyObject *o, int allow_tuple, unsigned *mask)
{
    int a;
    *mask = 0;
    if (o == Py_None) {
        *mask = (1u << x->ndim) - 1u;
        return 0;
    }
    if (PyIndex_Check(o) || !allow_tuple || !(PyTuple_Check(o) || PyList_Check(o))) {
        if (one_axis(op, x, o, allow_tuple, &a) < 0) return -1;
        *mask = 1u << a;
        return 0;
    }
    PyObject *fast = PySequence_Fast(o, "axis");
    if (fast == NULL) return -1;
    for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(fast); k++) {
        if (one_axis(op, x, PySequence_Fast_GET_ITEM(fast, k), 1, &a) < 0) goto fail;
        if (*mask & (1u << a)) {
            char s[128];
            tl_shape_str(x->shape, x->ndim, s, sizeof s);
            PyErr_Format(PyExc_ValueError, "%s: duplicate axis %d in axis=%R for a tensor of shape %s", op, a, o, s);
            goto fail;
        }
        *mask |= 1u << a;
    }
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    return -1;
}

/* (axis=..., keepdims=False) with dim= and keepdim= accepted as synonyms (PyTorch spelling); out= and dtype= only
 * as None, which numpy's np.sum(t), np.mean(t), np.max(t) ... pass to the tensor's method. */
static int
parse_args(const char *op, PyObject *args, PyObject *kwargs, PyObject *dflt, PyObject **axis, int *keepdims)
{
    static char *kw[] = {"axis", "keepdims", "dim", "keepdim", "out", "dtype", NULL};
    PyObject *ax = NULL, *dim = NULL, *out = Py_None, *dtype = Py_None;
    int kd = 0, kd2 = 0;
    char fmt[48];
    snprintf(fmt, sizeof fmt, "|OpOp$OO:%s", op);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, fmt, kw, &ax, &kd, &dim, &kd2, &out, &dtype)) return -1;
    if (out != Py_None || dtype != Py_None) {
        PyErr_Format(PyExc_TypeError, "%s: out= and dtype= are not supported (convert the result instead)", op);
        return -1;
    }
    if (ax != NULL && dim != NULL) {
        PyErr_Format(PyExc_TypeError, "%s: give axis or dim, not both", op);
        return -1;
    }
    *axis = ax != NULL ? ax : dim != NULL ? dim : dflt;
    *keepdims = kd || kd2;
    return 0;
}

/* ---- launch planning ---- */

typedef struct { size_t L, W; int blocked; } geometry;  /* local size; threads that fill the device; CPU */

static int
get_geometry(tl_kernel *kh, geometry *g)
{
    const tl_runtime *rt;
    tl_err err = {0};
    if (tl_kernel_py(kh) == NULL) return -1;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    size_t L = 1;
    while (L * 2 <= kh->wg) L *= 2;                  /* the trees need a power of two */
    while (L > 1 && 3 * L * sizeof(float) > rt->info.local_mem) L /= 2;
    g->L = L;
    g->W = 4 * (size_t)(rt->info.compute_units > 0 ? rt->info.compute_units : 1) * L;
    /* a CPU runs a work-group's items as a loop on one core: give each lane a contiguous stretch.
     * TLGPU_REDUCE_BLOCKED=0/1 forces the choice, so tests reach the GPU layout on PoCL too. */
    const int force = tl_setting_flag(TL_SET_REDUCE_BLOCKED);
    g->blocked = force >= 0 ? force : (rt->info.type & CL_DEVICE_TYPE_CPU) != 0;
    return 0;
}

/* Lanes per row, at most L: about 8 elements per lane before the tree on GPUs; on CPUs 1024, enough
 * for float16 vectors to pay off (fewer lanes also means fewer barriers, which PoCL makes costly). */
static int
lanes_log2(Py_ssize_t cols, const geometry *g)
{
    int glog = 0;
    Py_ssize_t per = g->blocked ? 1024 : 8;
    while (((size_t)1 << glog) < g->L && (per << glog) < cols) glog++;
    return glog;
}

typedef struct {
    int op, rows, cols, inner, chunk, nseg, glog, fin, xoff;
    float count;
    tl_storage *x, *xw, *xi, *ov, *ow, *oi;          /* inputs, then outputs (written) */
} rpass;

static cl_mem *
mem_of(tl_storage *s)
{
    return s != NULL ? &s->mem : NULL;
}

static int
launch_reduce(const rpass *p, const geometry *g)
{
    tl_err err = {0};
    cl_kernel k = k_reduce.k;
    const size_t cm = sizeof(cl_mem), lm = g->L * sizeof(float);
    const size_t sz[20] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, cm, cm, cm, cm, cm, cm, lm, lm, lm};
    const void *v[20] = {&p->op, &g->blocked, &p->rows, &p->cols, &p->inner, &p->chunk, &p->nseg, &p->glog, &p->fin,
                         &p->count, &p->xoff, mem_of(p->x), mem_of(p->xw), mem_of(p->xi), mem_of(p->ov),
                         mem_of(p->ow), mem_of(p->oi), NULL, NULL, NULL};
    tl_storage *st[6] = {p->x, p->xw, p->xi, p->ov, p->ow, p->oi};
    size_t units = (size_t)p->rows * (size_t)p->nseg, per = g->L >> p->glog;
    size_t gws = (units + per - 1) / per * g->L, lws = g->L;
    if (tl_set_args(k, 0, 20, sz, v) < 0) return -1;
    if (tl_stream_launch(k, 1, &gws, &lws, st, 6, 0x38u, k_reduce.name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

/* One or two launches reducing src ([rows, cols] with `inner`, contiguous from xoff) into out. */
static int
run_reduce(int op, tl_tensor *src, int rows, int cols, int inner, tl_tensor *out)
{
    geometry g;
    tl_tensor *pv = NULL, *pw = NULL, *pi = NULL;
    int rc = -1, arg = op == R_ARGMAX || op == R_ARGMIN;
    if (get_geometry(&k_reduce, &g) < 0) return -1;
    rpass p = {op, rows, cols, inner, cols, 1, 0, 1, (int)src->offset, (float)cols,
               src->storage, NULL, NULL, arg ? NULL : out->storage, NULL, arg ? out->storage : NULL};
    /* inner > 1: one lane per row keeps adjacent threads on adjacent addresses (a column reduction) */
    p.glog = inner > 1 || cols <= 4 ? 0 : lanes_log2(cols, &g);
    size_t G = (size_t)1 << p.glog, want = g.W / G > 0 ? g.W / G : 1;
    if ((size_t)rows < want && (size_t)cols >= 32 * G && (size_t)rows * (size_t)cols > (1u << 16)) {
        /* too few rows to fill the device: split each into segments of >= 16 elements per lane (not for
         * 64K elements or fewer: a second launch costs more there than the lanes it adds; a small learner's
         * bias gradients and losses are launch-bound) */
        size_t ns = (want + (size_t)rows - 1) / (size_t)rows, cap = (size_t)cols / (16 * G);
        if (ns > cap) ns = cap;
        size_t chunk = ((size_t)cols + ns - 1) / ns;
        if (G > 1) chunk = tl_round_up(chunk, (g.blocked ? 32 : 4) * G);   /* whole vector steps per lane */
        p.chunk = (int)chunk;
        p.nseg = (int)(((size_t)cols + chunk - 1) / chunk);
    }
    if (p.nseg == 1) return launch_reduce(&p, &g);
    Py_ssize_t np_ = (Py_ssize_t)rows * p.nseg;
    if ((pv = tl_tensor_empty(TL_F32, 1, &np_)) == NULL) goto done;
    if (op == R_LSE && (pw = tl_tensor_empty(TL_F32, 1, &np_)) == NULL) goto done;
    if (arg && (pi = tl_tensor_empty(TL_I32, 1, &np_)) == NULL) goto done;
    rpass p1 = p;
    p1.fin = 0;
    p1.ov = pv->storage;
    p1.ow = pw != NULL ? pw->storage : NULL;
    p1.oi = pi != NULL ? pi->storage : NULL;
    rpass p2 = {op, rows, p.nseg, 1, p.nseg, 1, lanes_log2(p.nseg, &g), 1, 0, (float)cols,
                p1.ov, p1.ow, p1.oi, p.ov, NULL, p.oi};
    rc = launch_reduce(&p1, &g) < 0 || launch_reduce(&p2, &g) < 0 ? -1 : 0;
done:
    Py_XDECREF(pv);                                   /* the pool keeps the queue order for reuse */
    Py_XDECREF(pw);
    Py_XDECREF(pi);
    return rc;
}

/* ---- reductions ---- */

/* Records a reduction or softmax node: iarg = {kind, op/logmode, axis mask, keepdims}; x and out saved. */
static PyObject *
record(PyObject *out, PyObject *x, const tl_op_row *row, int op, unsigned mask, int keepdims, int save_x, int save_out)
{
    if (out == NULL || !tl_autograd_wanted(&x, 1)) return out;
    if (op == R_ARGMAX || op == R_ARGMIN) return out;                  /* integer results: no gradient */
    tl_node *nd = tl_node_new(row, &x, 1);
    if (nd == NULL) { Py_DECREF(out); return NULL; }
    nd->iarg[0] = op;
    nd->iarg[1] = (int)mask;
    nd->iarg[2] = keepdims;
    nd->iarg[3] = nd->iarg[4] = -1;
    if (save_x) { nd->iarg[3] = nd->n_saved; tl_node_save(nd, tl_tensor_CAST(x)); }
    if (save_out) { nd->iarg[4] = nd->n_saved; tl_node_save(nd, tl_tensor_CAST(out)); }
    tl_node_attach(nd, tl_tensor_CAST(out));
    return out;
}

/* x reduced over the dims in mask (already checked against x's ndim); float32 x. */
static PyObject *
reduce_fwd(int op, tl_tensor *x, unsigned mask, int keepdims)
{
    const char *name = R_NAME[op];
    tl_tensor *view = NULL, *src = NULL, *out = NULL;
    Py_ssize_t oshape[TL_MAX_DIMS], pshape[TL_MAX_DIMS], pstrides[TL_MAX_DIMS], rows = 1, cols = 1;
    int nd = x->ndim, ond = 0, nkept = 0, arg = op == R_ARGMAX || op == R_ARGMIN;
    for (int d = 0; d < nd; d++) {
        if (mask & (1u << d)) {
            cols *= x->shape[d];
            if (keepdims) oshape[ond++] = 1;
        } else {
            rows *= x->shape[d];
            oshape[ond++] = x->shape[d];
            pshape[nkept] = x->shape[d];
            pstrides[nkept++] = x->strides[d];
        }
    }
    if (cols == 0 && (op == R_MAX || op == R_MIN || arg)) {
        char s[128];
        tl_shape_str(x->shape, nd, s, sizeof s);
        return PyErr_Format(PyExc_ValueError, "%s: reduction over an empty axis of a tensor of shape %s has no "
                            "identity", name, s);
    }
    if ((out = tl_tensor_empty(arg ? TL_I32 : TL_F32, ond, oshape)) == NULL || out->storage == NULL)
        return (PyObject *)out;                       /* zero-size result: enqueue nothing */
    if (cols == 0) {
        double fill = op == R_MEAN ? NAN : op == R_LSE ? -INFINITY : op == R_PROD ? 1.0 : 0.0;
        if (tl_tensor_fill(out, fill) < 0) Py_CLEAR(out);
        return (PyObject *)out;
    }
    /* reduced dims [a, b] adjacent: read in place; otherwise copy kept-then-reduced contiguous */
    int a = 0, b = nd - 1, adjacent = 1;
    while (a < nd && !(mask & (1u << a))) a++;
    while (b >= 0 && !(mask & (1u << b))) b--;
    for (int d = a; d <= b; d++) adjacent &= (mask >> d) & 1u;
    Py_ssize_t inner = 1;
    if (adjacent) {
        for (int d = b + 1; d < nd; d++) inner *= x->shape[d];
        src = tl_tensor_contiguous(x);
    } else {
        for (int d = 0, k = nkept; d < nd; d++)
            if (mask & (1u << d)) { pshape[k] = x->shape[d]; pstrides[k++] = x->strides[d]; }
        if ((view = tl_tensor_view(x, nd, pshape, pstrides, x->offset)) != NULL) src = tl_tensor_contiguous(view);
    }
    if (src == NULL || run_reduce(op, src, (int)rows, (int)cols, (int)inner, out) < 0) Py_CLEAR(out);
    Py_XDECREF(src);
    Py_XDECREF(view);
    return (PyObject *)out;
}

/* The reduction with its autograd record. mask: TL_AXES_ALL or bits below x's ndim. */
static PyObject *
reduce_impl(int op, tl_tensor *x, unsigned mask, int keepdims)
{
    int needs = op == R_MAX || op == R_MIN || op == R_LSE;
    if (TL_IS_HALF(x->dtype)) {                      /* accumulate in float32, result in x's dtype */
        PyObject *w = tl_convert(x, TL_F32), *r = w != NULL ? reduce_impl(op, tl_tensor_CAST(w), mask, keepdims) : NULL;
        Py_XDECREF(w);
        int keep = op == R_ARGMAX || op == R_ARGMIN || (tl_autocast_dtype() >= 0 && op != R_MAX && op != R_MIN);
        return keep ? r : tl_convert_steal(r, x->dtype);   /* torch's autocast: sum/mean/prod/logsumexp float32 */
    }
    if (tl_check_dtype(R_NAME[op], x, TL_F32) < 0) return NULL;
    mask &= (1u << x->ndim) - 1u;
    return record(reduce_fwd(op, x, mask, keepdims), (PyObject *)x, &ROW_REDUCE, op, mask, keepdims,
                  needs || op == R_PROD, needs);
}

PyObject *
tl_sum(tl_tensor *x, unsigned axes, int keepdims)
{
    if (axes != TL_AXES_ALL && (axes >> x->ndim) != 0) {
        char s[128];
        tl_shape_str(x->shape, x->ndim, s, sizeof s);
        return PyErr_Format(PyExc_IndexError, "sum: axis mask 0x%x names dims past a tensor of shape %s", axes, s);
    }
    return reduce_impl(R_SUM, x, axes, keepdims);
}

/* The Python face: dtype first (as every op), then the axes. */
static PyObject *
reduce_method(int op, PyObject *self, PyObject *args, PyObject *kwargs)
{
    tl_tensor *x = tl_tensor_CAST(self);
    PyObject *axis;
    unsigned mask;
    int keepdims, arg = op == R_ARGMAX || op == R_ARGMIN;
    if (parse_args(R_NAME[op], args, kwargs, Py_None, &axis, &keepdims) < 0) return NULL;
    if (tl_check_float(R_NAME[op], x) < 0 || parse_axes(R_NAME[op], x, axis, !arg, &mask) < 0) return NULL;
    return reduce_impl(op, x, mask, keepdims);
}

#define REDUCER(pyname, OP)                                                                     \
    static PyObject *m_##pyname(PyObject *self, PyObject *args, PyObject *kwargs)               \
    {                                                                                           \
        return reduce_method(OP, self, args, kwargs);                                           \
    }
REDUCER(sum, R_SUM) REDUCER(mean, R_MEAN) REDUCER(max, R_MAX) REDUCER(min, R_MIN) REDUCER(argmax, R_ARGMAX)
REDUCER(argmin, R_ARGMIN) REDUCER(logsumexp, R_LSE) REDUCER(prod, R_PROD)
#undef REDUCER

/* ---- softmax ---- */

/* softmax or log_softmax of float32 x along dim `axis` (normalised), or over all elements when axis < 0. */
static PyObject *
softmax_fwd(int logmode, tl_tensor *x, int axis)
{
    tl_tensor *src = NULL, *out = NULL;
    Py_ssize_t cols = 1, inner = 1, rows = 1;
    unsigned smask = 0;
    int glog = 0;
    geometry g;
    if (TL_IS_HALF(x->dtype)) {                      /* in float32, result in x's dtype */
        PyObject *w = tl_convert(x, TL_F32), *r = w != NULL ? softmax_fwd(logmode, tl_tensor_CAST(w), axis) : NULL;
        Py_XDECREF(w);
        return tl_autocast_dtype() >= 0 ? r : tl_convert_steal(r, x->dtype);   /* autocast: float32 */
    }
    if (axis >= 0) {                                  /* one axis: [outer, cols, inner]; none: all */
        cols = x->shape[axis];
        for (int d = axis + 1; d < x->ndim; d++) inner *= x->shape[d];
        smask = 1u << axis;
    } else {
        cols = tl_tensor_numel(x);
        smask = (1u << x->ndim) - 1u;
    }
    if ((out = tl_tensor_empty(TL_F32, x->ndim, x->shape)) == NULL || out->storage == NULL) goto done;
    rows = tl_tensor_numel(x) / cols;
    if ((src = tl_tensor_contiguous(x)) == NULL || get_geometry(&k_softmax, &g) < 0) goto fail;
    /* a column softmax with rows to spare: one lane per row, adjacent threads on adjacent addresses */
    glog = inner > 1 && (size_t)rows >= g.W ? 0 : lanes_log2(cols, &g);
    int ri = (int)rows, ci = (int)cols, ii = (int)inner, xoff = (int)src->offset;
    const size_t sz[10] = {4, 4, 4, 4, 4, 4, 4, sizeof(cl_mem), sizeof(cl_mem), g.L * sizeof(float)};
    const void *v[10] = {&logmode, &g.blocked, &ri, &ci, &ii, &glog, &xoff, &src->storage->mem,
                         &out->storage->mem, NULL};
    tl_storage *st[2] = {src->storage, out->storage};
    size_t per = g.L >> glog, gws = ((size_t)rows + per - 1) / per * g.L, lws = g.L;
    tl_err err = {0};
    if (tl_set_args(k_softmax.k, 0, 10, sz, v) < 0) goto fail;
    if (tl_stream_launch(k_softmax.k, 1, &gws, &lws, st, 2, 0x2u, k_softmax.name, &err) != TL_OK) {
        tl_raise(&err);
        goto fail;
    }
done:
    Py_XDECREF(src);
    return record((PyObject *)out, (PyObject *)x, &ROW_SOFTMAX, logmode, smask, 1, 0, 1);
fail:
    Py_CLEAR(out);
    goto done;
}

static PyObject *
softmax_axis(int logmode, tl_tensor *x, int axis)
{
    const char *name = logmode ? "log_softmax" : "softmax";
    if (tl_check_float(name, x) < 0) return NULL;
    if (axis < -x->ndim || axis >= x->ndim) {
        PyObject *o = PyLong_FromLong(axis);
        if (o != NULL) axis_error(name, o, x);
        Py_XDECREF(o);
        return NULL;
    }
    return softmax_fwd(logmode, x, axis < 0 ? axis + x->ndim : axis);
}

PyObject *tl_softmax(tl_tensor *x, int axis) { return softmax_axis(0, x, axis); }
PyObject *tl_log_softmax(tl_tensor *x, int axis) { return softmax_axis(1, x, axis); }

static PyObject *
softmax_method(int logmode, PyObject *self, PyObject *args, PyObject *kwargs)
{
    const char *name = logmode ? "log_softmax" : "softmax";
    static char *kw[] = {"axis", "dim", NULL};
    tl_tensor *x = tl_tensor_CAST(self);
    PyObject *ax = NULL, *dim = NULL;
    unsigned mask;
    int a = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, logmode ? "|OO:log_softmax" : "|OO:softmax", kw, &ax, &dim))
        return NULL;
    if (ax != NULL && dim != NULL) return PyErr_Format(PyExc_TypeError, "%s: give axis or dim, not both", name);
    if (ax == NULL) ax = dim;
    if (ax == NULL) return softmax_axis(logmode, x, -1);
    if (tl_check_float(name, x) < 0 || parse_axes(name, x, ax, 0, &mask) < 0) return NULL;
    if (ax == Py_None) return softmax_fwd(logmode, x, -1);
    while (!(mask & (1u << a))) a++;
    return softmax_fwd(logmode, x, a);
}

static PyObject *m_softmax(PyObject *s, PyObject *a, PyObject *k) { return softmax_method(0, s, a, k); }
static PyObject *m_log_softmax(PyObject *s, PyObject *a, PyObject *k) { return softmax_method(1, s, a, k); }

/* ---- backward ---- */

/* t (a reduced result) with the reduced dims back as size 1, so it broadcasts against the input */
static PyObject *
keep_dims(PyObject *t, const tl_edge *e, unsigned mask, int keepdims)
{
    Py_ssize_t shape[TL_MAX_DIMS];
    if (keepdims) return Py_NewRef(t);
    for (int d = 0; d < e->ndim; d++) shape[d] = mask >> d & 1u ? 1 : e->shape[d];
    return tl_reshape(tl_tensor_CAST(t), e->ndim, shape);
}

static PyObject *
saved_or_null(tl_node *nd, int which)
{
    return nd->iarg[which] >= 0 ? (PyObject *)tl_node_saved(nd, nd->iarg[which]) : Py_NewRef(Py_None);
}

/* prod: d out / d x_i is the product of the others (PyTorch's rule, exact with zeros): with z the number of
 * zeros in x_i's reduction and p the product of its non-zero elements, it is p / x_i when z == 0, p at the
 * zero when z == 1, and 0 otherwise. From masks: m = (x == 0), xs = x + m (zeros become 1), p = prod(xs),
 * grad = g * p * ((1 - m) * (z == 0) / xs + m * (z == 1)). */
static int
prod_grad(PyObject *x, PyObject *gk, unsigned mask, PyObject **gin)
{
    PyObject *zero = NULL, *one = NULL, *m = NULL, *xs = NULL, *p = NULL, *z = NULL, *z0 = NULL, *z1 = NULL,
             *a = NULL, *b = NULL;
    tl_tensor *zt = NULL;
    int rc = -1;
    Py_ssize_t one_shape[1] = {1};
    if ((zt = tl_tensor_empty(TL_F32, 0, one_shape)) == NULL || tl_tensor_fill(zt, 0.0) < 0) goto done;
    zero = (PyObject *)zt;
    zt = NULL;
    if ((one = PyFloat_FromDouble(1.0)) == NULL ||
        (m = tl_eq(tl_tensor_CAST(x), tl_tensor_CAST(zero))) == NULL || (xs = PyNumber_Add(x, m)) == NULL ||
        (p = reduce_impl(R_PROD, tl_tensor_CAST(xs), mask, 1)) == NULL ||
        (z = reduce_impl(R_SUM, tl_tensor_CAST(m), mask, 1)) == NULL ||
        (z0 = tl_eq(tl_tensor_CAST(z), tl_tensor_CAST(zero))) == NULL)
        goto done;
    Py_SETREF(z, PyNumber_Subtract(z, one));                         /* z - 1 == 0: one zero */
    if (z == NULL || (z1 = tl_eq(tl_tensor_CAST(z), tl_tensor_CAST(zero))) == NULL ||
        (a = PyNumber_Subtract(one, m)) == NULL)
        goto done;
    Py_SETREF(a, PyNumber_Multiply(a, z0));
    if (a != NULL) Py_SETREF(a, PyNumber_TrueDivide(a, xs));
    if (a == NULL || (b = PyNumber_Multiply(m, z1)) == NULL) goto done;
    Py_SETREF(a, PyNumber_Add(a, b));
    if (a != NULL) Py_SETREF(a, PyNumber_Multiply(a, p));
    if (a != NULL) *gin = PyNumber_Multiply(a, gk);
    rc = *gin != NULL ? 0 : -1;
done:
    Py_XDECREF(zero); Py_XDECREF(one); Py_XDECREF(m); Py_XDECREF(xs); Py_XDECREF(p); Py_XDECREF(z);
    Py_XDECREF(z0); Py_XDECREF(z1); Py_XDECREF(a); Py_XDECREF(b);
    return rc;
}

/* sum: g broadcast back; mean: / count; max/min: shared evenly among the elements equal to the extreme;
 * logsumexp: g * exp(x - lse). The engine keeps every result contiguous-or-temporary. */
static int
tl_reduce_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    const tl_edge *e = &nd->in[0];
    int op = nd->iarg[0], keep = nd->iarg[2];
    unsigned mask = (unsigned)nd->iarg[1];
    PyObject *x = saved_or_null(nd, 3), *out = x ? saved_or_null(nd, 4) : NULL;
    PyObject *gk = NULL, *ok = NULL, *t = NULL, *u = NULL;
    Py_ssize_t count = 1;
    int rc_prod = 0;
    for (int d = 0; d < e->ndim; d++) if (mask >> d & 1u) count *= e->shape[d];
    if (out == NULL || (gk = keep_dims(g, e, mask, keep)) == NULL) goto done;
    if (op == R_SUM || op == R_MEAN) {
        tl_tensor *full = tl_tensor_empty(TL_F32, e->ndim, e->shape);        /* materialised: .grad must own it */
        if ((t = (PyObject *)full) == NULL) goto done;
        if (op == R_MEAN && (u = PyFloat_FromDouble(1.0 / (double)(count ? count : 1))) != NULL)
            Py_SETREF(u, PyNumber_Multiply(gk, u));
        if (op == R_MEAN && u == NULL) goto done;
        if (tl_copy_into(full, tl_tensor_CAST(u != NULL ? u : gk)) < 0) goto done;   /* broadcasting copy */
        gin[0] = Py_NewRef(t);
    } else if (op == R_LSE) {
        if ((ok = keep_dims(out, e, mask, keep)) == NULL || (t = PyNumber_Subtract(x, ok)) == NULL ||
            (u = tl_exp(tl_tensor_CAST(t))) == NULL)
            goto done;
        gin[0] = PyNumber_Multiply(u, gk);
    } else if (op == R_PROD) {
        rc_prod = prod_grad(x, gk, mask, &gin[0]);
    } else {                                          /* R_MAX / R_MIN: the gradient splits among ties */
        if ((ok = keep_dims(out, e, mask, keep)) == NULL ||
            (t = tl_eq(tl_tensor_CAST(x), tl_tensor_CAST(ok))) == NULL ||
            (u = reduce_impl(R_SUM, tl_tensor_CAST(t), mask, 1)) == NULL)
            goto done;
        Py_SETREF(u, PyNumber_TrueDivide(gk, u));
        if (u != NULL) gin[0] = PyNumber_Multiply(t, u);
    }
done:
    Py_XDECREF(x); Py_XDECREF(out); Py_XDECREF(gk); Py_XDECREF(ok); Py_XDECREF(t); Py_XDECREF(u);
    return rc_prod < 0 || PyErr_Occurred() ? -1 : 0;
}

/* softmax: y * (g - sum(g * y)); log_softmax: g - exp(y) * sum(g), sums over the softmax axis */
static int
tl_softmax_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    unsigned mask = (unsigned)nd->iarg[1];
    PyObject *y = saved_or_null(nd, 4), *t = NULL, *s = NULL, *u = NULL;
    if (y == NULL) goto done;
    if (nd->iarg[0] == 0) {
        if ((t = PyNumber_Multiply(g, y)) == NULL || (s = reduce_impl(R_SUM, tl_tensor_CAST(t), mask, 1)) == NULL ||
            (u = PyNumber_Subtract(g, s)) == NULL)
            goto done;
        gin[0] = PyNumber_Multiply(y, u);
    } else {
        if ((s = reduce_impl(R_SUM, tl_tensor_CAST(g), mask, 1)) == NULL ||
            (t = tl_exp(tl_tensor_CAST(y))) == NULL || (u = PyNumber_Multiply(t, s)) == NULL)
            goto done;
        gin[0] = PyNumber_Subtract(g, u);
    }
done:
    Py_XDECREF(y); Py_XDECREF(t); Py_XDECREF(s); Py_XDECREF(u);
    return PyErr_Occurred() ? -1 : 0;
}

static const PyMethodDef reduce_methods[] = {
    {"sum", TL_KW(m_sum), "sum(axis=None, keepdims=False): sum over axes (None: all; int or tuple; dim= works too)"},
    {"mean", TL_KW(m_mean), "mean(axis=None, keepdims=False): arithmetic mean (NaN over an empty axis)"},
    {"max", TL_KW(m_max), "max(axis=None, keepdims=False): maximum (NaN propagates; empty axis raises ValueError)"},
    {"min", TL_KW(m_min), "min(axis=None, keepdims=False): minimum (NaN propagates; empty axis raises ValueError)"},
    {"argmax", TL_KW(m_argmax),
     "argmax(axis=None, keepdims=False): int32 index of the first maximum (flat when axis=None)"},
    {"argmin", TL_KW(m_argmin),
     "argmin(axis=None, keepdims=False): int32 index of the first minimum (flat when axis=None)"},
    {"logsumexp", TL_KW(m_logsumexp),
     "logsumexp(axis=None, keepdims=False): log(sum(exp(x))) computed stably (max subtracted)"},
    {"prod", TL_KW(m_prod),
     "prod(axis=None, keepdims=False): product over axes (1 over an empty axis); the gradient is the "
     "product of the other elements, exact where x has zeros"},
    {"softmax", TL_KW(m_softmax),
     "softmax(axis=-1): exp(x - max) / sum(exp(x - max)) along one axis (None: all elements)"},
    {"log_softmax", TL_KW(m_log_softmax), "log_softmax(axis=-1): x - logsumexp(x) along one axis (None: all elements)"},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_REDUCE = {"ReduceBackward", tl_reduce_backward};
static const tl_op_row ROW_SOFTMAX = {"SoftmaxBackward", tl_softmax_backward};
static const tl_op_row *const reduce_rows[] = {&ROW_REDUCE, &ROW_SOFTMAX, NULL};
static const tl_grad_prims reduce_prims = {.sum = tl_sum};

const tl_family tl_family_reduce = {NULL, reduce_methods, NULL, NULL,
                                    "sum mean max min argmax argmin logsumexp prod softmax log_softmax",
                                    .rows = reduce_rows, .grad_prims = &reduce_prims};
