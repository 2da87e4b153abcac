/* ops_random.c: random tensors from the device's Philox4x32-10 stream (kernels/random.cl): rand, randn,
 * randint, rand_like, randn_like, dropout_mask, dropout, the in-place fills uniform_ and normal_ (any strided
 * view), multinomial, and the generator state (manual_seed, seed, initial_seed, get_rng_state, set_rng_state).
 * The generator is (seed, offset): offset counts the 32-bit values consumed so far and is always a
 * multiple of 4 (one Philox block). Each call takes the next range of the stream, [offset, offset + used)
 * with used rounded up to a whole block, so consecutive calls differ and a seed replays the same sequence
 * in every process and on every device. The state is touched only with the GIL held, which orders calls
 * the same way it orders their enqueues; no other lock is needed. Without manual_seed a process starts
 * from TL_RNG_DEFAULT_SEED (deterministic by default; seed() draws a fresh one from os.urandom). */
#include "ops_common.h"
#include "ops.h"
#include "autograd.h"
#include "capture.h"

#define TL_RNG_DEFAULT_SEED 0x853c49e6748fea9bULL

static uint64_t rng_seed = TL_RNG_DEFAULT_SEED, rng_offset = 0;

typedef enum { RNG_UNIFORM, RNG_NORMAL, RNG_RANDINT, RNG_DROPOUT } rng_kind;
static tl_kernel rng_kernels[4] = {
    TL_KERNEL("random", "tl_philox_uniform_f32"), TL_KERNEL("random", "tl_philox_normal_f32"),
    TL_KERNEL("random", "tl_philox_randint_i32"), TL_KERNEL("random", "tl_philox_dropout_f32")};
static const int rng_per_block[4] = {4, 4, 2, 4};        /* outputs of one 4-value Philox block */

/* Fills out (new, contiguous) from the next blocks of the stream; extra: the kind's trailing arguments. */
static int
rng_fill(rng_kind kind, tl_tensor *out, int nextra, const size_t *xsz, const void *const *xval)
{
    tl_kernel *kh = &rng_kernels[kind];
    if (out->storage == NULL) return 0;                  /* zero-size: consumes nothing */
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL) return -1;
    int n = (int)tl_tensor_numel(out);
    size_t blocks = ((size_t)n + (size_t)rng_per_block[kind] - 1) / (size_t)rng_per_block[kind];
    cl_ulong seed = rng_seed, block0 = rng_offset / 4;
    const size_t sz[4] = {sizeof n, sizeof(cl_mem), sizeof seed, sizeof block0};
    const void *v[4] = {&n, &out->storage->mem, &seed, &block0};
    if (tl_set_args(k, 0, 4, sz, v) < 0 || tl_set_args(k, 4, nextra, xsz, xval) < 0) return -1;
    if (tl_launch_1d(kh, blocks, &out->storage, 1, 1u) < 0) return -1;
    tl_capture_rng(2, 3, 4 * (uint64_t)blocks);          /* a replay draws the next numbers again */
    rng_offset += 4 * (uint64_t)blocks;                  /* only once enqueued: a failed call replays */
    return 0;
}

/* Keywords shared by the creation functions: dtype (float32 only here) and requires_grad. */
static int
float_kwargs(const char *op, PyObject *kwargs, int dflt, int *requires_grad)
{
    static char *kw[] = {"dtype", "requires_grad", NULL};
    PyObject *dtype = Py_None, *empty = PyTuple_New(0);
    if (empty == NULL) return -1;
    int ok = PyArg_ParseTupleAndKeywords(empty, kwargs, "|Op", kw, &dtype, requires_grad);
    Py_DECREF(empty);
    int td = ok ? tl_parse_dtype_all(dtype, dflt) : -1;
    if (td >= 0 && !TL_IS_FLOAT(td)) {
        PyErr_Format(PyExc_TypeError, "%s: dtype must be float32, float16 or bfloat16, got %s (use randint for "
                     "integers)", op, tl_dtype_name(td));
        return -1;
    }
    return td;
}

/* A float16/bfloat16 dtype draws float32 numbers and rounds them once (to nearest even), as PyTorch's
 * kernels compute in float then store the half value. */
static PyObject *
make_random(rng_kind kind, int ndim, const Py_ssize_t *shape, int dtype, int requires_grad)
{
    tl_tensor *t = tl_tensor_empty(TL_F32, ndim, shape);
    if (t != NULL && rng_fill(kind, t, 0, NULL, NULL) < 0) Py_CLEAR(t);
    PyObject *r = dtype == TL_F32 ? (PyObject *)t : tl_convert_steal((PyObject *)t, dtype);
    if (r != NULL && requires_grad && tl_require_grad_new("rand", tl_tensor_CAST(r)) < 0) Py_CLEAR(r);
    return r;                                         /* a floating dtype: require_grad never fails */
}

static PyObject *
shaped(rng_kind kind, const char *op, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t shape[TL_MAX_DIMS];
    int ndim, rg = 0, dt;
    if ((dt = float_kwargs(op, kwargs, TL_F32, &rg)) < 0 || tl_parse_shape(op, args, &ndim, shape) < 0) return NULL;
    return make_random(kind, ndim, shape, dt, rg);
}

static PyObject *
fn_rand(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    return shaped(RNG_UNIFORM, "rand", args, kwargs);
}

static PyObject *
fn_randn(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    return shaped(RNG_NORMAL, "randn", args, kwargs);
}

static PyObject *
like(rng_kind kind, const char *op, PyObject *args, PyObject *kwargs)
{
    PyObject *t_o;
    int rg = 0;
    if (PyTuple_GET_SIZE(args) != 1 || !tl_tensor_check(t_o = PyTuple_GET_ITEM(args, 0)))
        return PyErr_Format(PyExc_TypeError, "%s(t, dtype=None): t must be a Tensor", op);
    tl_tensor *t = tl_tensor_CAST(t_o);
    const int dt = float_kwargs(op, kwargs, t->dtype, &rg);
    return dt < 0 ? NULL : make_random(kind, t->ndim, t->shape, dt, rg);
}

static PyObject *
fn_rand_like(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    return like(RNG_UNIFORM, "rand_like", args, kwargs);
}

static PyObject *
fn_randn_like(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    return like(RNG_NORMAL, "randn_like", args, kwargs);
}

/* randint(low, high, shape, dtype=None): int32 uniform on [low, high). */
static PyObject *
fn_randint(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"low", "high", "shape", "dtype", NULL};
    long long lo, hi;
    PyObject *shape_o, *dtype = Py_None, *shape_args = NULL;
    Py_ssize_t shape[TL_MAX_DIMS];
    int ndim;
    tl_tensor *t = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "LLO|O:randint", kw, &lo, &hi, &shape_o, &dtype)) return NULL;
    int td = tl_parse_dtype(dtype, TL_I32);
    if (td < 0) return NULL;
    if (td != TL_I32) return PyErr_Format(PyExc_TypeError, "randint: dtype must be int32");
    if (lo >= hi) return PyErr_Format(PyExc_ValueError, "randint: low (%lld) must be below high (%lld)", lo, hi);
    if (lo < INT32_MIN || hi > (long long)INT32_MAX + 1)
        return PyErr_Format(PyExc_ValueError, "randint: [%lld, %lld) does not fit int32", lo, hi);
    if ((shape_args = PyTuple_Pack(1, shape_o)) == NULL) return NULL;
    int rc = tl_parse_shape("randint", shape_args, &ndim, shape);
    Py_DECREF(shape_args);
    if (rc < 0 || (t = tl_tensor_empty(TL_I32, ndim, shape)) == NULL) return NULL;
    cl_long low = lo;
    cl_ulong range = (cl_ulong)(hi - lo);
    const size_t xsz[2] = {sizeof low, sizeof range};
    const void *xv[2] = {&low, &range};
    if (rng_fill(RNG_RANDINT, t, 2, xsz, xv) < 0) Py_CLEAR(t);
    return (PyObject *)t;
}

static int
check_p(const char *op, double p)
{
    char buf[32];
    if (p >= 0.0 && p < 1.0) return 0;                   /* also refuses NaN */
    snprintf(buf, sizeof buf, "%g", p);
    PyErr_Format(PyExc_ValueError, "%s: p must be in [0, 1), got %s", op, buf);
    return -1;
}

static tl_tensor *
mask(int ndim, const Py_ssize_t *shape, double p)
{
    tl_tensor *t = tl_tensor_empty(TL_F32, ndim, shape);
    float pf = (float)p, scale = (float)(1.0 / (1.0 - p));
    const size_t xsz[2] = {sizeof pf, sizeof scale};
    const void *xv[2] = {&pf, &scale};
    if (t != NULL && rng_fill(RNG_DROPOUT, t, 2, xsz, xv) < 0) Py_CLEAR(t);
    return t;
}

/* dropout_mask(shape, p): float32, each element 1/(1-p) with probability 1-p, else 0. */
static PyObject *
fn_dropout_mask(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"shape", "p", NULL};
    PyObject *shape_o, *shape_args;
    Py_ssize_t shape[TL_MAX_DIMS];
    double p;
    int ndim;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "Od:dropout_mask", kw, &shape_o, &p)) return NULL;
    if (check_p("dropout_mask", p) < 0 || (shape_args = PyTuple_Pack(1, shape_o)) == NULL) return NULL;
    int rc = tl_parse_shape("dropout_mask", shape_args, &ndim, shape);
    Py_DECREF(shape_args);
    return rc < 0 ? NULL : (PyObject *)mask(ndim, shape, p);
}

/* dropout(x, p=0.5, training=True) = x * dropout_mask(x.shape, p); x itself when there is nothing to drop.
 * The product goes through Tensor.__mul__, so it is recorded like any product once autograd exists. */
static PyObject *
fn_dropout(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"x", "p", "training", NULL};
    PyObject *x_o, *res;
    double p = 0.5;
    int training = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|dp:dropout", kw, &x_o, &p, &training)) return NULL;
    if (!tl_tensor_check(x_o))
        return PyErr_Format(PyExc_TypeError, "dropout: expected a Tensor, got %s", Py_TYPE(x_o)->tp_name);
    tl_tensor *x = tl_tensor_CAST(x_o), *mk;
    if (check_p("dropout", p) < 0 || tl_check_float("dropout", x) < 0) return NULL;
    if (!training || p == 0.0) return Py_NewRef(x_o);
    if ((mk = mask(x->ndim, x->shape, p)) == NULL) return NULL;
    if (TL_IS_HALF(x->dtype)) {                       /* x * mask in float32, rounded once to x's dtype */
        PyObject *w = tl_convert(x, TL_F32);
        res = w != NULL ? tl_convert_steal(PyNumber_Multiply(w, (PyObject *)mk), x->dtype) : NULL;
        Py_XDECREF(w);
    } else {
        res = PyNumber_Multiply(x_o, (PyObject *)mk);
    }
    Py_DECREF(mk);
    return res;
}

static PyObject *
fn_manual_seed(PyObject *Py_UNUSED(m), PyObject *s)
{
    if (!PyLong_Check(s))
        return PyErr_Format(PyExc_TypeError, "manual_seed: expected an int, got %s", Py_TYPE(s)->tp_name);
    unsigned long long v = PyLong_AsUnsignedLongLongMask(s);   /* any int, taken mod 2**64 */
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    rng_seed = v;
    rng_offset = 0;
    Py_RETURN_NONE;
}

static PyObject *
fn_seed(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    PyObject *os = PyImport_ImportModule("os"), *bytes = NULL, *v = NULL;
    uint64_t s;
    if (os != NULL && (bytes = PyObject_CallMethod(os, "urandom", "i", 8)) != NULL && PyBytes_Check(bytes) &&
        PyBytes_GET_SIZE(bytes) == 8) {
        memcpy(&s, PyBytes_AS_STRING(bytes), 8);
        if ((v = PyLong_FromUnsignedLongLong(s)) != NULL) {
            rng_seed = s;
            rng_offset = 0;
        }
    }
    Py_XDECREF(bytes);
    Py_XDECREF(os);
    return v;
}

static PyObject *
fn_initial_seed(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyLong_FromUnsignedLongLong(rng_seed);
}

static PyObject *
fn_get_rng_state(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return Py_BuildValue("(KK)", (unsigned long long)rng_seed, (unsigned long long)rng_offset);
}

static PyObject *
fn_set_rng_state(PyObject *Py_UNUSED(m), PyObject *state)
{
    unsigned long long s, off;
    if (!PyArg_ParseTuple(state, "KK:set_rng_state", &s, &off)) return NULL;
    if (off % 4 != 0)
        return PyErr_Format(PyExc_ValueError, "set_rng_state: offset %llu is not a multiple of 4", off);
    rng_seed = s;
    rng_offset = off;
    Py_RETURN_NONE;
}

/* Element i of the row-major walk over t (any strides) gets lo + scale * stream value i. */
static int
fill_into(int normal, tl_tensor *t, float lo, float scale)
{
    static tl_kernel ku = TL_KERNEL("random", "tl_philox_uniform_into_f32"),
                     kn = TL_KERNEL("random", "tl_philox_normal_into_f32");
    tl_kernel *kh = normal ? &kn : &ku;
    tl_layout L;
    if (t->storage == NULL) return 0;                    /* zero-size: consumes nothing */
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL) return -1;
    tl_layout_make(&L, t->ndim, t->shape, &t, 1);
    size_t blocks = ((size_t)L.n + 3) / 4;
    cl_ulong seed = rng_seed, block0 = rng_offset / 4;
    const size_t sz[6] = {sizeof L, sizeof(cl_mem), sizeof seed, sizeof block0, 4, 4};
    const void *v[6] = {&L, &t->storage->mem, &seed, &block0, &lo, &scale};
    if (tl_set_args(k, 0, 6, sz, v) < 0 || tl_launch_1d(kh, blocks, &t->storage, 1, 1u) < 0) return -1;
    tl_capture_rng(2, 3, 4 * (uint64_t)blocks);
    rng_offset += 4 * blocks;
    return 0;
}

/* uniform_(a=0, b=1) / normal_(mean=0, std=1): floating tensors (half ones take float32 draws rounded once), self; refused where other in-place ops
 * are (leaves requiring grad in grad mode, expanded views); a recorded non-leaf passes a zero gradient back. */
static PyObject *
random_inplace(PyObject *self, PyObject *args, PyObject *kwargs, int normal)
{
    static char *kwu[] = {"a", "b", NULL}, *kwn[] = {"mean", "std", NULL};
    const char *op = normal ? "normal_" : "uniform_";
    double p[2] = {0.0, 1.0};
    tl_tensor *t = tl_tensor_CAST(self);
    PyObject *me = self, *o[2] = {NULL, NULL};
    char **kw = normal ? kwn : kwu;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, normal ? "|OO:normal_" : "|OO:uniform_", kw, &o[0], &o[1]))
        return NULL;
    for (int i = 0; i < 2; i++) {
        if (o[i] != NULL && (p[i] = PyFloat_AsDouble(o[i])) == -1.0 && PyErr_Occurred())
            return PyErr_Format(PyExc_TypeError, "%s: %s must be a number, got %s", op, kw[i], Py_TYPE(o[i])->tp_name);
    }
    const double p0 = p[0], p1 = p[1];
    if (tl_check_float(op, t) < 0) return NULL;
    if (!normal && !(p0 <= p1)) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%g", p0);
        snprintf(b, sizeof b, "%g", p1);
        return PyErr_Format(PyExc_ValueError, "uniform_: expects a <= b, got a=%s, b=%s", a, b);
    }
    if (normal && !(p1 >= 0.0)) {
        char b[32];
        snprintf(b, sizeof b, "%g", p1);
        return PyErr_Format(PyExc_ValueError, "normal_: std must be >= 0, got %s", b);
    }
    if (tl_check_writable(op, t) < 0 || tl_check_recorded_inplace(op, t, tl_autograd_wanted(&me, 1)) < 0)
        return NULL;
    tl_mark_write(t, op);
    if (TL_IS_HALF(t->dtype)) {                       /* float32 draws of t's shape, rounded once into t */
        tl_tensor *f = tl_tensor_empty(TL_F32, t->ndim, t->shape);
        int rc = f == NULL ? -1 : fill_into(normal, f, (float)p0, (float)(normal ? p1 : p1 - p0));
        if (rc == 0) rc = tl_convert_into(t, f);
        Py_XDECREF(f);
        if (rc < 0 || tl_record_overwrite(t) < 0) return NULL;
        return Py_NewRef(self);
    }
    if (fill_into(normal, t, (float)p0, (float)(normal ? p1 : p1 - p0)) < 0 || tl_record_overwrite(t) < 0)
        return NULL;
    return Py_NewRef(self);
}

static PyObject *
m_uniform_(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return random_inplace(self, args, kwargs, 0);
}

static PyObject *
m_normal_(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return random_inplace(self, args, kwargs, 1);
}

/* multinomial(num_samples, replacement=False): rows of unnormalised weights (1-D or 2-D float32) -> int32
 * category indices, (k,) or (rows, k). Nothing is read back: weights are not checked (torch raises on a row
 * without positive weights, or without replacement with fewer of them than k; those samples are -1 here).
 * One sample per row without replacement is the same draw as with it, so it takes the O(n / rows) path. */
static PyObject *
m_multinomial(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"num_samples", "replacement", NULL};
    static tl_kernel kr = TL_KERNEL("random", "tl_multinomial_rep_f32"),
                     kn = TL_KERNEL("random", "tl_multinomial_norep_f32");
    tl_tensor *p = tl_tensor_CAST(self), *out = NULL, *scratch = NULL;
    PyObject *cdf = NULL;
    Py_ssize_t k, shape[2];
    int repl = 0;
    char s[128];
    PyObject *k_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|p:multinomial", kw, &k_o, &repl)) return NULL;
    if (!PyLong_Check(k_o) || ((k = PyLong_AsSsize_t(k_o)) == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return PyErr_Format(PyExc_TypeError, "multinomial: num_samples must be an int, got %s", Py_TYPE(k_o)->tp_name);
    }
    tl_shape_str(p->shape, p->ndim, s, sizeof s);
    if (TL_IS_HALF(p->dtype)) {                       /* the weights widened: the same draws as their float32 copy */
        PyObject *w = tl_convert(p, TL_F32), *r = w != NULL ? m_multinomial(w, args, kwargs) : NULL;
        Py_XDECREF(w);
        return r;
    }
    if (tl_check_dtype("multinomial", p, TL_F32) < 0) return NULL;
    if (p->ndim != 1 && p->ndim != 2)
        return PyErr_Format(PyExc_ValueError, "multinomial: probabilities must be 1-D or 2-D, got shape %s", s);
    Py_ssize_t rows = p->ndim == 2 ? p->shape[0] : 1, n = p->shape[p->ndim - 1];
    if (k <= 0) return PyErr_Format(PyExc_ValueError, "multinomial: cannot sample %zd <= 0 samples", k);
    if (n == 0) return PyErr_Format(PyExc_ValueError, "multinomial: no categories to sample from (shape %s)", s);
    if (!repl && k > n)
        return PyErr_Format(PyExc_ValueError, "multinomial: cannot sample %zd > %zd categories (shape %s) without "
                            "replacement", k, n, s);
    if (rows * k > INT32_MAX || rows * n > INT32_MAX)
        return PyErr_Format(PyExc_ValueError, "multinomial: %zd x %zd samples or shape %s exceed 2**31-1", rows, k, s);
    shape[0] = rows;
    shape[1] = k;
    if ((out = tl_tensor_empty(TL_I32, p->ndim, shape + (p->ndim == 1))) == NULL || out->storage == NULL)
        return (PyObject *)out;                          /* zero rows: nothing enqueued */
    int r32 = (int)rows, n32 = (int)n, k32 = (int)k;
    cl_ulong seed = rng_seed, block0 = rng_offset / 4;
    size_t blocks;
    if (repl || k == 1) {
        int prev = tl_grad_set(0), m = r32 * k32;
        cdf = tl_cumsum(self, -1, 0);
        tl_grad_set(prev);
        cl_kernel kk = cdf != NULL ? tl_kernel_py(&kr) : NULL;
        if (kk == NULL) goto fail;
        blocks = ((size_t)m + 3) / 4;
        const size_t sz[7] = {4, 4, 4, sizeof(cl_mem), sizeof(cl_mem), sizeof seed, sizeof block0};
        const void *v[7] = {&m, &n32, &k32, TL_MEM(tl_tensor_CAST(cdf)), &out->storage->mem, &seed, &block0};
        tl_storage *st[2] = {out->storage, tl_tensor_CAST(cdf)->storage};
        if (tl_set_args(kk, 0, 7, sz, v) < 0 || tl_launch_1d(&kr, blocks, st, 2, 1u) < 0) goto fail;
        tl_capture_rng(5, 6, 4 * (uint64_t)blocks);
    } else {
        cl_kernel kk = tl_kernel_py(&kn);
        if (kk == NULL || (scratch = tl_tensor_empty(TL_F32, 2, shape)) == NULL) goto fail;
        int off = (int)p->offset, cs = (int)p->strides[p->ndim - 1], rs = p->ndim == 2 ? (int)p->strides[0] : 0;
        blocks = (size_t)rows * (((size_t)n + 3) / 4);
        const size_t sz[11] = {4, 4, 4, sizeof(cl_mem), 4, 4, 4, sizeof(cl_mem), sizeof(cl_mem), sizeof seed,
                               sizeof block0};
        const void *v[11] = {&r32, &n32, &k32, &p->storage->mem, &off, &rs, &cs, &out->storage->mem,
                             &scratch->storage->mem, &seed, &block0};
        tl_storage *st[3] = {out->storage, p->storage, scratch->storage};
        if (tl_set_args(kk, 0, 11, sz, v) < 0 || tl_launch_1d(&kn, (size_t)rows, st, 3, 5u) < 0) goto fail;
        tl_capture_rng(9, 10, 4 * (uint64_t)blocks);
    }
    rng_offset += 4 * (uint64_t)blocks;
    Py_XDECREF(cdf);
    Py_XDECREF(scratch);
    return (PyObject *)out;
fail:
    Py_XDECREF(cdf);
    Py_XDECREF(scratch);
    Py_DECREF(out);
    return NULL;
}

static const PyMethodDef random_methods[] = {
    {"uniform_", TL_KW(m_uniform_), "uniform_(a=0.0, b=1.0): fill in place from U[a, b) (the rand stream); self."},
    {"normal_", TL_KW(m_normal_), "normal_(mean=0.0, std=1.0): fill in place from N(mean, std**2); self."},
    {"multinomial", TL_KW(m_multinomial),
     "multinomial(num_samples, replacement=False): int32 category indices drawn from rows of weights."},
    {NULL, NULL, 0, NULL},
};

static const PyMethodDef random_functions[] = {
    {"rand", TL_KW(fn_rand), "rand(*shape, dtype=None, requires_grad=False): uniform on [0, 1), float32."},
    {"randn", TL_KW(fn_randn), "randn(*shape, dtype=None, requires_grad=False): standard normal, float32."},
    {"randint", TL_KW(fn_randint), "randint(low, high, shape, dtype=None): int32 uniform on [low, high)."},
    {"rand_like", TL_KW(fn_rand_like), "rand_like(t, dtype=None): rand with t's shape."},
    {"randn_like", TL_KW(fn_randn_like), "randn_like(t, dtype=None): randn with t's shape."},
    {"dropout_mask", TL_KW(fn_dropout_mask), "dropout_mask(shape, p): 0 or 1/(1-p), keeping with probability 1-p."},
    {"dropout", TL_KW(fn_dropout), "dropout(x, p=0.5, training=True): x * dropout_mask(x.shape, p) (inverted)."},
    {"manual_seed", fn_manual_seed, METH_O, "manual_seed(s): seed the generator and rewind its stream."},
    {"seed", fn_seed, METH_NOARGS, "seed(): seed from os.urandom; returns the seed."},
    {"initial_seed", fn_initial_seed, METH_NOARGS, "The generator's current seed."},
    {"get_rng_state", fn_get_rng_state, METH_NOARGS, "(seed, offset): the stream position, for checkpoints."},
    {"set_rng_state", fn_set_rng_state, METH_O, "set_rng_state((seed, offset)): resume a saved position."},
    {NULL, NULL, 0, NULL},
};

/* A replay's draws (capture.h): the next `used` values of the stream, as the eager call would take them. */
static uint64_t
rng_take(uint64_t used, uint64_t *seed)
{
    uint64_t block0 = rng_offset / 4;
    *seed = rng_seed;
    rng_offset += used;
    return block0;
}

static int
random_init(PyObject *Py_UNUSED(m), tl_state *Py_UNUSED(S))
{
    tl_capture_set_rng(rng_take);
    return 0;
}

const tl_family tl_family_random = {.functions = random_functions, .methods = random_methods,
                                    .aliases = "multinomial", .init = random_init};
