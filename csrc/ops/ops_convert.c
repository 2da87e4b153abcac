/* ops_convert.c: dtype conversions on the device between the five storage dtypes (float32, int32, float16,
 * bfloat16, uint8): float(), int(), half(), bfloat16(), byte(), one launch of kernels/elementwise.cl's
 * tl_convert (float32 <-> int32 keep their own two kernels). Rounding is to nearest even, inf and NaN
 * are kept; to int32 and uint8 truncates toward zero (uint8 then wraps modulo 256, as torch on CPU).
 * A conversion between floating dtypes is differentiable: the gradient is converted back to the source
 * dtype (ROW_CONVERT; iarg[0]: the source dtype), as PyTorch's ToCopyBackward. The engine also converts
 * an input's gradient to the input's dtype with tl_convert (the family's grad primitive). */
#include "ops_common.h"
#include "autograd.h"
#include "capture.h"
#include "ops.h"

static const tl_op_row ROW_CONVERT, ROW_ROUND;   /* autograd rows (below) */

/* Whether tl_convert_contig converts from dtype `from` to `to`: between the floating dtypes, and uint8 to them. */
static int
convert_fast(int from, int to)
{
    return from != to && TL_IS_FLOAT(to) && (TL_IS_FLOAT(from) || from == TL_U8);
}

/* x converted to dtype `to` (a new contiguous tensor; x itself when it has that dtype), not recorded; via >= 0
 * (x and to float32): x rounded through the half dtype via instead (round_raw). A contiguous x between the
 * pairs of convert_fast takes tl_convert_contig (vector loops, 16 elements a work-item), any other tl_convert. */
static tl_tensor *
convert_via(tl_tensor *x, int to, int via)
{
    static tl_kernel kf = TL_KERNEL("elementwise", "tl_cast_i32_to_f32"),
                     ki = TL_KERNEL("elementwise", "tl_cast_f32_to_i32"), ka = TL_KERNEL("elementwise", "tl_convert"),
                     kc = TL_KERNEL("elementwise", "tl_convert_contig");
    tl_tensor *out, *ops[2];
    tl_layout L;
    if (x->dtype == to && via < 0) return (tl_tensor *)Py_NewRef(x);
    if ((out = tl_tensor_empty(to, x->ndim, x->shape)) == NULL || out->storage == NULL) return out;
    const int dts = to | x->dtype << 4 | (via >= 0 ? via << 8 : 0);
    const int i32f32 = (to == TL_F32 && x->dtype == TL_I32) || (to == TL_I32 && x->dtype == TL_F32);
    ops[0] = out;
    ops[1] = x;
    tl_layout_make(&L, x->ndim, x->shape, ops, 2);
    int contig = (via >= 0 || convert_fast(x->dtype, to)) &&
                 (L.ndim == 0 || (L.ndim == 1 && L.st[0][0] == 1 && L.st[1][0] == 1));
    if (via >= 0 && !contig) {                       /* the two conversions the rounding stands for */
        Py_DECREF(out);
        tl_tensor *h = convert_via(x, via, -1);
        out = h != NULL ? convert_via(h, TL_F32, -1) : NULL;
        Py_XDECREF(h);
        return out;
    }
    tl_kernel *kh = contig ? &kc : !i32f32 ? &ka : to == TL_F32 ? &kf : &ki;
    cl_kernel k = tl_kernel_py(kh);
    const size_t sz[4] = {sizeof dts, sizeof L, sizeof(cl_mem), sizeof(cl_mem)};
    const void *v[4] = {&dts, &L, &out->storage->mem, &x->storage->mem};
    tl_storage *st[2] = {out->storage, x->storage};
    const int first = i32f32;                        /* the two old kernels take no dts */
    if (k == NULL || tl_set_args(k, 0, 4 - first, sz + first, v + first) < 0 ||
        (contig ? tl_launch_flat(kh, ((size_t)L.n + 15) / 16, st, 2) : tl_launch_1d(kh, (size_t)L.n, st, 2, 1u)) < 0)
        Py_CLEAR(out);
    else if ((to != TL_U8 || x->dtype != TL_I32) && via < 0)   /* the fusion's metadata (none for int32 -> */
        tl_capture_note_ew(k, TL_EW_COPY, TL_EWM_ANY, &L, dts, 2 - first, -1);   /* uint8, which wraps, */
    return out;                                                                   /* nor for a rounding) */
}

static tl_tensor *
convert_raw(tl_tensor *x, int to)
{
    return convert_via(x, to, -1);
}

/* x (float32) rounded to the half dtype dt and widened again: what converting it to dt and back to float32
 * gives, in one launch where convert_via takes tl_convert_contig. Not recorded. */
static tl_tensor *
round_raw(tl_tensor *x, int dt)
{
    return convert_via(x, TL_F32, dt);
}

/* round_raw recorded: its gradient is the incoming one rounded the same way (the two conversions' backward). */
static PyObject *
round_through(tl_tensor *x, int dt)
{
    PyObject *out = (PyObject *)round_raw(x, dt);
    const int iarg[1] = {dt};
    return out == NULL ? NULL : tl_record1(out, &ROW_ROUND, (PyObject *)x, iarg, 1, NULL);
}

static int
round_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    tl_tensor *gt = tl_tensor_CAST(g);
    if (!tl_wants_grad(nd, 0)) return 0;
    gin[0] = (PyObject *)(gt->dtype == TL_F32 ? round_raw(gt, nd->iarg[0]) : convert_raw(gt, TL_F32));
    return gin[0] == NULL ? -1 : 0;
}

PyObject *
tl_convert(tl_tensor *x, int to)
{
    PyObject *in = (PyObject *)x;
    tl_tensor *out = convert_raw(x, to);
    if (out == NULL || out == x || !TL_IS_FLOAT(to)) return (PyObject *)out;
    const int iarg[1] = {x->dtype};
    return tl_record1((PyObject *)out, &ROW_CONVERT, in, iarg, 1, NULL);
}

PyObject *
tl_convert_steal(PyObject *r, int to)
{
    if (r == NULL) return NULL;
    PyObject *c = tl_convert(tl_tensor_CAST(r), to);
    Py_DECREF(r);
    return c;
}

int
tl_check_float(const char *op, const tl_tensor *t)
{
    return TL_IS_FLOAT(t->dtype) ? 0 : tl_check_dtype(op, t, TL_F32);
}

/* w[i] = in[i] widened to float32 (new refs; non-tensors and NULLs kept); returns the result dtype by PyTorch's
 * promotion (every tensor of one half dtype: it, else float32), or -1 (TypeError naming op for an int tensor). */
static int
widen_args(const char *op, PyObject *const *in, PyObject **w, int n)
{
    int dt = -1;
    for (int i = 0; i < n; i++) w[i] = NULL;
    for (int i = 0; i < n; i++) {
        if (in[i] == NULL || !tl_tensor_check(in[i])) continue;
        const tl_tensor *t = tl_tensor_CAST(in[i]);
        if (tl_check_float(op, t) < 0) return -1;
        dt = dt < 0 || dt == t->dtype ? t->dtype : TL_F32;
    }
    for (int i = 0; i < n; i++) {
        w[i] = in[i] == NULL || !tl_tensor_check(in[i]) ? Py_XNewRef(in[i]) : tl_convert(tl_tensor_CAST(in[i]), TL_F32);
        if (in[i] != NULL && w[i] == NULL) goto fail;
    }
    return dt < 0 ? TL_F32 : dt;
fail:
    for (int i = 0; i < n; i++) Py_CLEAR(w[i]);
    return -1;
}

/* torch.autocast's cast cache (cache_enabled): within the outermost autocast region a parameter (a float32 leaf
 * that requires grad) is cast once while grad mode is on, its storage unchanged (its version: an optimizer
 * step inside the region casts again, eager or a tlgpu.jit replay, which bumps versions as the call did) and no
 * trace is being captured (tlgpu.jit replays casts as commands).
 * Per thread; _autocast_cache_clear (amp.py, on leaving the outermost region) drops it. */
#define CAST_CACHE 64
typedef struct { PyObject *leaf, *val; uint64_t version; int dt, round; } cast_entry;
static _Thread_local cast_entry cast_cache[CAST_CACHE];
static _Thread_local int cast_cached, cast_cache_on = 1;

static void
cast_cache_clear(void)
{
    for (int i = 0; i < cast_cached; i++) {
        Py_CLEAR(cast_cache[i].leaf);
        Py_CLEAR(cast_cache[i].val);
    }
    cast_cached = 0;
}

PyObject *
tl_autocast_operand(tl_tensor *t, int dt, int round)
{
    const int cacheable = cast_cache_on && t->dtype == TL_F32 && t->requires_grad && t->grad_fn == NULL &&
                          t->storage != NULL && tl_grad_enabled() && tl_capture_current() == NULL;
    const uint64_t version = cacheable ? tl_storage_version(t->storage) : 0;
    cast_entry *e = NULL;
    for (int i = 0; cacheable && i < cast_cached && e == NULL; i++)
        if (cast_cache[i].leaf == (PyObject *)t && cast_cache[i].dt == dt && cast_cache[i].round == round)
            e = &cast_cache[i];
    if (e != NULL && e->version == version) return Py_NewRef(e->val);
    PyObject *v = round && t->dtype == TL_F32 ? round_through(t, dt) : tl_convert(t, dt);
    if (v == NULL || !cacheable) return v;
    if (e == NULL && cast_cached < CAST_CACHE) {
        e = &cast_cache[cast_cached++];
        e->leaf = Py_NewRef((PyObject *)t), e->val = NULL, e->dt = dt, e->round = round;
    }
    if (e != NULL) {
        Py_XSETREF(e->val, Py_NewRef(v));
        e->version = version;
    }
    return v;
}

/* c[i] = in[i] (new refs), floating tensors cast to the autocast dtype when autocast is on: float32 ones rounded
 * through it and left float32 (round_through: what the cast and call_widened's widening would give, in one
 * launch), the others converted; parameters through the cast cache (tl_autocast_operand). Returns the result
 * dtype (the autocast dtype once a tensor was cast, else -1: the operands' promotion), or -2 with an exception
 * set. */
static int
autocast_args(PyObject *const *in, PyObject **c, int n)
{
    const int low = tl_autocast_dtype();
    int dt = -1;
    for (int i = 0; i < n; i++) c[i] = NULL;
    for (int i = 0; i < n; i++) {
        tl_tensor *t = in[i] != NULL && tl_tensor_check(in[i]) ? tl_tensor_CAST(in[i]) : NULL;
        const int cast = low >= 0 && t != NULL && TL_IS_FLOAT(t->dtype);
        c[i] = cast ? tl_autocast_operand(t, low, 1) : Py_XNewRef(in[i]);
        if (in[i] != NULL && c[i] == NULL) {
            for (int j = 0; j < i; j++) Py_CLEAR(c[j]);
            return -2;
        }
        dt = cast ? low : dt;
    }
    return dt;
}

static int
all_f32(PyObject *const *in, int n)
{
    for (int i = 0; i < n; i++)
        if (in[i] != NULL && tl_tensor_check(in[i]) && tl_tensor_CAST(in[i])->dtype != TL_F32) return 0;
    return 1;
}

/* fn on the widened operands, its result converted to their promoted dtype (or to `to` when >= 0); autocast off
 * inside. */
static PyObject *
call_widened(const char *op, tl_f32_op fn, PyObject *const *in, int n, void *ctx, int to)
{
    PyObject *w[TL_F32_OP_MAX], *r = NULL;
    int dt = widen_args(op, in, w, n);
    if (dt >= 0) {
        dt = to >= 0 ? to : dt;
        const int low = tl_autocast_set(-1);          /* the float32 implementation's own products stay float32 */
        r = tl_convert_steal(fn(w, ctx), dt);
        tl_autocast_set(low);
        for (int i = 0; i < n; i++) Py_XDECREF(w[i]);
    }
    return r;
}

PyObject *
tl_call_f32(const char *op, tl_f32_op fn, PyObject *const *in, int n, void *ctx)
{
    PyObject *c[TL_F32_OP_MAX] = {NULL}, *r;
    if (tl_autocast_dtype() < 0 && all_f32(in, n)) return fn(in, ctx);   /* the float32 path as it always was */
    const int to = autocast_args(in, c, n);
    if (to == -2) return NULL;
    r = call_widened(op, fn, c, n, ctx, to);
    for (int i = 0; i < n; i++) Py_XDECREF(c[i]);
    return r;
}

PyObject *
tl_call_wide(const char *op, tl_f32_op fn, PyObject *const *in, int n, void *ctx)
{
    return all_f32(in, n) ? fn(in, ctx) : call_widened(op, fn, in, n, ctx, -1);
}

int
tl_convert_into(tl_tensor *dst, tl_tensor *src)
{
    if (src->dtype == dst->dtype) return tl_copy_into(dst, src);
    tl_tensor *c = convert_raw(src, dst->dtype);     /* contiguous: then a broadcasting bit copy */
    int rc = c != NULL ? tl_copy_into(dst, c) : -1;
    Py_XDECREF(c);
    return rc;
}

static int
convert_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    if (tl_wants_grad(nd, 0) && (gin[0] = (PyObject *)convert_raw(tl_tensor_CAST(g), nd->iarg[0])) == NULL) return -1;
    return 0;
}

/* The engine's primitive: an input's gradient in the input's dtype. */
static PyObject *
grad_convert(tl_tensor *x, int dtype)
{
    return (PyObject *)convert_raw(x, dtype);
}

static PyObject *m_float(PyObject *self, PyObject *Py_UNUSED(i)) { return tl_convert(tl_tensor_CAST(self), TL_F32); }
static PyObject *m_int(PyObject *self, PyObject *Py_UNUSED(i)) { return tl_convert(tl_tensor_CAST(self), TL_I32); }
static PyObject *m_half(PyObject *self, PyObject *Py_UNUSED(i)) { return tl_convert(tl_tensor_CAST(self), TL_F16); }
static PyObject *m_bfloat16(PyObject *self, PyObject *Py_UNUSED(i))
{
    return tl_convert(tl_tensor_CAST(self), TL_BF16);
}
static PyObject *m_byte(PyObject *self, PyObject *Py_UNUSED(i)) { return tl_convert(tl_tensor_CAST(self), TL_U8); }

/* _autocast_cache(on or None): whether this thread's autocast casts parameters once a region (torch's
 * cache_enabled); returns the previous setting; None only reports it. */
static PyObject *
fn_autocast_cache(PyObject *Py_UNUSED(m), PyObject *arg)
{
    const int prev = cast_cache_on;
    if (arg != Py_None) {
        const int on = PyObject_IsTrue(arg);
        if (on < 0) return NULL;
        cast_cache_on = on;
    }
    return PyBool_FromLong(prev);
}

static PyObject *
fn_autocast_cache_clear(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    cast_cache_clear();
    Py_RETURN_NONE;
}

/* _convert(dtype): the conversion Tensor.to(dtype) runs (any numpy dtype spelling of the five). */
static PyObject *
m_convert(PyObject *self, PyObject *dtype)
{
    int to = tl_parse_dtype_all(dtype, -1);
    if (to < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "to: a dtype is needed");
        return NULL;
    }
    return tl_convert(tl_tensor_CAST(self), to);
}

#define U(name, doc) {#name, m_##name, METH_NOARGS, doc}
static const PyMethodDef convert_methods[] = {
    U(float, "convert to float32 (differentiable from float16/bfloat16)"),
    U(int, "convert to int32 (truncating toward zero)"),
    U(half, "convert to float16 (round to nearest even; differentiable)"),
    U(bfloat16, "convert to bfloat16 (round to nearest even; differentiable)"),
    U(byte, "convert to uint8 (truncating toward zero, wrapping modulo 256)"),
    {"_convert", m_convert, METH_O, "_convert(dtype): the conversion Tensor.to(dtype) runs."},
    {NULL, NULL, 0, NULL},
};
#undef U

static const tl_op_row ROW_CONVERT = {"ToCopyBackward", convert_backward};
static const tl_op_row ROW_ROUND = {"AutocastRoundBackward", round_backward};   /* torch: two ToCopyBackward */
static const tl_op_row *const convert_rows[] = {&ROW_CONVERT, &ROW_ROUND, NULL};
static const tl_grad_prims convert_prims = {.convert = grad_convert};

static const PyMethodDef convert_functions[] = {
    {"_autocast_cache", fn_autocast_cache, METH_O, "_autocast_cache(on or None): torch's cache_enabled for this "
     "thread (parameters cast once an autocast region); returns the previous setting."},
    {"_autocast_cache_clear", fn_autocast_cache_clear, METH_NOARGS, "Drop this thread's autocast cast cache."},
    {NULL, NULL, 0, NULL},
};

const tl_family tl_family_convert = {convert_functions, convert_methods, NULL, NULL, NULL, .rows = convert_rows,
                                     .grad_prims = &convert_prims};
