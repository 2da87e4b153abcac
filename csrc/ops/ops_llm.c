/* ops_llm.c: the inference op family (kernels/llm.cl): rms_norm, rope, softmax_rows, silu_mul, kv_write,
 * attention (one decode step over a KV cache, grouped-query heads allowed) and get_rows (embedding lookup);
 * rms_norm_linear and silu_mul_linear, the norm or the SwiGLU product folded into the projection after it
 * (their kernels: ops_mv.h).
 * These ops have no backward: called with an input that requires grad while grad mode is on, they raise
 * NotImplementedError naming the composite ops to use instead.
 * Dtypes: float32, float16 and bfloat16 operands, in any mix. All float32 runs the "llm" build of llm.cl;
 * anything else its "llm_any" build, which takes each operand's dtype code in one packed argument (dts):
 * loads widen to float32, math is float32, stores round to nearest even. Results follow PyTorch's
 * promotion (one half dtype: it; mixed: float32); a cache keeps its dtype (writes convert, as copy_).
 * Invariants: outputs are new contiguous tensors (kv_write and rope(inplace=True) write their target);
 * inputs that are views are copied to contiguous first (tl_tensor_contiguous), so kernels see rows of
 * known stride; row kernels get a power-of-two local size from the kernel's own limit (tl_kernel.wg),
 * never a hard-coded one; zero-size inputs enqueue nothing. Errors name the op and the shapes. */
#include "ops_common.h"
#include "autograd.h"
#include "cl_runtime.h"
#include "gemm_params.h"
#include "ops.h"
#include "ops_mv.h"
#include <math.h>

/* Each kernel in both builds of llm.cl: [0] float32 operands ("llm"), [1] any floating dtypes ("llm_any"). */
#define KPAIR(op) {TL_KERNEL("llm", "tl_" op "_f32"), TL_KERNEL("llm_any", "tl_" op "_any")}
static tl_kernel k_rms[2] = KPAIR("rms_norm"), k_rope[2] = KPAIR("rope"), k_softmax[2] = KPAIR("softmax_rows"),
                 k_silu[2] = KPAIR("silu_mul"), k_kv[2] = KPAIR("kv_write"), k_attn[2] = KPAIR("attention"),
                 k_rows[2] = KPAIR("get_rows"), k_rkv[2] = KPAIR("rope_kv");

static const size_t I = sizeof(int), F = sizeof(float), Mm = sizeof(cl_mem);

/* A floating Tensor argument (float32, float16, bfloat16), or TypeError naming op, dtype and shape. Borrowed. */
static tl_tensor *
arg_tensor(const char *op, const char *name, PyObject *o)
{
    if (!tl_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a Tensor, got %s", op, name, Py_TYPE(o)->tp_name);
        return NULL;
    }
    return tl_check_float(op, tl_tensor_CAST(o)) < 0 ? NULL : tl_tensor_CAST(o);
}

static int
promote(int a, int b)                                   /* PyTorch's rule among the floating dtypes */
{
    return a == b ? a : TL_F32;
}

/* The packed dtype codes of llm.cl's "llm_any" build: dt[s] in bits 4s..4s+3; 0 when every operand is float32. */
static int
pack(int n, const int *dt)
{
    int dts = 0;
    for (int s = 0; s < n; s++) dts |= dt[s] << (4 * s);
    return dts;
}

/* The build of kernel pair k for these operands (k[0] when every one is float32, dts == 0), prepared, with
 * dts set as argument `narg` of the "llm_any" kernel. NULL with an exception set. */
static tl_kernel *
variant(tl_kernel *k, int dts, int narg)
{
    tl_kernel *kh = &k[dts != 0];
    if (tl_kernel_py(kh) == NULL) return NULL;
    if (dts != 0 && tl_set_args(kh->k, narg, 1, (size_t[]){I}, (const void *[]){&dts}) < 0) return NULL;
    return kh;
}

static int
no_grad(const char *op, PyObject *const *ins, int n)
{
    if (!tl_autograd_wanted(ins, n)) return 0;
    PyErr_Format(PyExc_NotImplementedError, "%s: inference op without a backward; an input requires grad. Use "
                 "tlgpu.no_grad(), detach(), or the composite differentiable ops", op);
    return -1;
}

static PyObject *
shape_error(const char *op, const tl_tensor *t, const char *what)
{
    char s[128];
    tl_shape_str(t->shape, t->ndim, s, sizeof s);
    return PyErr_Format(PyExc_ValueError, "%s: %s (got shape %s)", op, what, s);
}

/* Power-of-two local size for a row kernel over rows of n: at most the kernel's size, at least 1. */
static size_t
row_wg(tl_kernel *kh, int n)
{
    size_t L = 1;
    while (L * 2 <= kh->wg && L < (size_t)n) L *= 2;
    return L;
}

static int
launch(tl_kernel *kh, size_t gws, size_t lws, tl_storage *const *st, int nst, unsigned written)
{
    tl_err err = {0};
    if (tl_stream_launch(kh->k, 1, &gws, &lws, st, nst, written, kh->name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

/* rms_norm(x, weight=None, eps=1e-6): over the last dim. */
static PyObject *
fn_rms_norm(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"x", "weight", "eps", NULL};
    PyObject *xo, *wo = Py_None;
    double eps = 1e-6;
    tl_tensor *x, *w = NULL, *xc = NULL, *wc = NULL, *out = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|Od:rms_norm", kwl, &xo, &wo, &eps)) return NULL;
    if ((x = arg_tensor("rms_norm", "x", xo)) == NULL) return NULL;
    if (wo != Py_None && (w = arg_tensor("rms_norm", "weight", wo)) == NULL) return NULL;
    PyObject *ins[2] = {xo, wo != Py_None ? wo : NULL};
    if (no_grad("rms_norm", ins, w != NULL ? 2 : 1) < 0) return NULL;
    if (x->ndim == 0) return shape_error("rms_norm", x, "x needs at least one dim");
    int D = (int)x->shape[x->ndim - 1];
    if (w != NULL && (w->ndim != 1 || w->shape[0] != D))
        return shape_error("rms_norm", w, "weight must be (D,) for x's last dim D");
    const int dt[3] = {x->dtype, w != NULL ? w->dtype : TL_F32, w != NULL ? promote(x->dtype, w->dtype) : x->dtype};
    tl_kernel *kh;
    if ((out = tl_tensor_empty(dt[2], x->ndim, x->shape)) == NULL || out->storage == NULL) return (PyObject *)out;
    if ((kh = variant(k_rms, pack(3, dt), 10)) == NULL || (xc = tl_tensor_contiguous(x)) == NULL) goto fail;
    if (w != NULL && (wc = tl_tensor_contiguous(w)) == NULL) goto fail;
    int offx = (int)xc->offset, offw = wc ? (int)wc->offset : 0, hw = w != NULL, zero = 0;
    float e = (float)eps;
    size_t L = row_wg(kh, D);
    cl_mem *wm = wc ? &wc->storage->mem : &xc->storage->mem;
    const size_t sz[10] = {I, F, Mm, I, Mm, I, I, Mm, I, L * F};
    const void *v[10] = {&D, &e, &xc->storage->mem, &offx, wm, &offw, &hw, &out->storage->mem, &zero, NULL};
    tl_storage *st[3] = {out->storage, xc->storage, wc ? wc->storage : NULL};
    if (tl_set_args(kh->k, 0, 10, sz, v) < 0) goto fail;
    if (launch(kh, (size_t)(tl_tensor_numel(x) / D) * L, L, st, 3, 1u) < 0) goto fail;
    Py_XDECREF(xc); Py_XDECREF(wc);
    return (PyObject *)out;
fail:
    Py_XDECREF(xc); Py_XDECREF(wc); Py_XDECREF(out);
    return NULL;
}

/* positions as an int32 tensor of T elements: an int, a sequence of ints or an int32 Tensor. New ref. */
static tl_tensor *
positions(PyObject *po, int T)
{
    tl_tensor *p = NULL;
    if (tl_tensor_check(po)) {
        if (tl_check_dtype("rope", tl_tensor_CAST(po), TL_I32) < 0) return NULL;
        p = (tl_tensor *)Py_NewRef(po);
    } else if (PyLong_Check(po)) {
        PyObject *lst = Py_BuildValue("[O]", po);
        p = lst ? tl_tensor_from_object(lst, TL_I32, "rope") : NULL;
        Py_XDECREF(lst);
    } else {
        p = tl_tensor_from_object(po, TL_I32, "rope");
    }
    if (p == NULL) return NULL;
    if (tl_tensor_numel(p) != T) {
        PyErr_Format(PyExc_ValueError, "rope: %zd positions for %d rows of x (x is (T, H, D) or (H, D) with T = 1)",
                     tl_tensor_numel(p), T);
        Py_DECREF(p);
        return NULL;
    }
    Py_SETREF(p, tl_tensor_contiguous(p));
    return p;
}

/* rope(x, positions, theta=10000.0, interleaved=False, inplace=False): x (T, H, D) or (H, D), D even. */
static PyObject *
fn_rope(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"x", "positions", "theta", "interleaved", "inplace", NULL};
    PyObject *xo, *po;
    double theta = 10000.0;
    int inter = 0, inplace = 0;
    tl_tensor *x, *xc = NULL, *p = NULL, *out = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|dpp:rope", kwl, &xo, &po, &theta, &inter, &inplace)) return NULL;
    if ((x = arg_tensor("rope", "x", xo)) == NULL || no_grad("rope", &xo, 1) < 0) return NULL;
    if (x->ndim != 2 && x->ndim != 3) return shape_error("rope", x, "x must be (T, H, D) or (H, D)");
    int T = x->ndim == 3 ? (int)x->shape[0] : 1, H = (int)x->shape[x->ndim - 2], D = (int)x->shape[x->ndim - 1];
    if (D % 2 != 0) return shape_error("rope", x, "the head dim D must be even");
    if (!(theta > 0.0) || !isfinite(theta)) {
        char num[64];                                   /* PyErr_Format has no %g */
        snprintf(num, sizeof num, "%g", theta);
        return PyErr_Format(PyExc_ValueError, "rope: theta must be positive and finite, got %s", num);
    }
    if (inplace && !tl_tensor_is_contig(x)) return shape_error("rope", x, "inplace=True needs a contiguous x");
    int has_pos = !(PyLong_Check(po) && T == 1), pos0 = 0;
    if (!has_pos) {                                      /* one position as an int: a kernel argument */
        int overflow = 0;
        long v = PyLong_AsLongAndOverflow(po, &overflow);
        if (v == -1 && PyErr_Occurred()) return NULL;
        if (overflow || v < INT32_MIN || v > INT32_MAX)
            return PyErr_Format(PyExc_OverflowError, "rope: position %S does not fit int32", po);
        pos0 = (int)v;
    } else if ((p = positions(po, T)) == NULL) {
        return NULL;
    }
    if (inplace) {
        if (tl_check_inplace("rope", x) < 0) goto fail;
        out = (tl_tensor *)Py_NewRef(x);
    } else if ((out = tl_tensor_empty(x->dtype, x->ndim, x->shape)) == NULL) {
        goto fail;
    }
    if (out->storage == NULL) { Py_XDECREF(p); return (PyObject *)out; }
    tl_kernel *kh = variant(k_rope, pack(2, (const int[]){x->dtype, x->dtype}), 13);
    if (kh == NULL || (xc = tl_tensor_contiguous(x)) == NULL) goto fail;
    int offx = (int)xc->offset, offp = has_pos ? (int)p->offset : 0, offy = (int)out->offset;
    float lt = (float)log2(theta);
    cl_mem pmem = has_pos ? p->storage->mem : xc->storage->mem;     /* without positions: never read */
    const size_t sz[13] = {I, I, I, F, I, Mm, I, Mm, I, I, I, Mm, I};
    const void *v[13] = {&T, &H, &D, &lt, &inter, &xc->storage->mem, &offx, &pmem, &offp, &has_pos, &pos0,
                         &out->storage->mem, &offy};
    tl_storage *st[3] = {out->storage, xc->storage, has_pos ? p->storage : NULL};
    if (tl_set_args(kh->k, 0, 13, sz, v) < 0) goto fail;
    if (tl_launch_1d(kh, (size_t)T * (size_t)H * (size_t)(D / 2), st, 2 + has_pos, 1u) < 0) goto fail;
    if (inplace) tl_mark_write(out, "rope");
    Py_XDECREF(xc); Py_XDECREF(p);
    return (PyObject *)out;
fail:
    Py_XDECREF(xc); Py_XDECREF(p); Py_XDECREF(out);
    return NULL;
}

/* softmax_rows(x, scale=1.0, causal=False): softmax(scale * x) over the last dim. */
static PyObject *
fn_softmax_rows(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"x", "scale", "causal", NULL};
    PyObject *xo;
    double scale = 1.0;
    int causal = 0;
    tl_tensor *x, *xc = NULL, *out = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|dp:softmax_rows", kwl, &xo, &scale, &causal)) return NULL;
    if ((x = arg_tensor("softmax_rows", "x", xo)) == NULL || no_grad("softmax_rows", &xo, 1) < 0) return NULL;
    if (x->ndim == 0 || (causal && x->ndim < 2)) return shape_error("softmax_rows", x, "x needs 1 dim (2 with causal)");
    int n = (int)x->shape[x->ndim - 1], Tq = causal ? (int)x->shape[x->ndim - 2] : 1;
    if (causal && Tq > n) return shape_error("softmax_rows", x, "causal needs queries <= keys (dims -2 <= -1)");
    if ((out = tl_tensor_empty(x->dtype, x->ndim, x->shape)) == NULL || out->storage == NULL) return (PyObject *)out;
    tl_kernel *kh = variant(k_softmax, pack(2, (const int[]){x->dtype, x->dtype}), 9);
    if (kh == NULL || (xc = tl_tensor_contiguous(x)) == NULL) goto fail;
    int offx = (int)xc->offset, zero = 0;
    float s = (float)scale;
    size_t L = row_wg(kh, n);
    const size_t sz[9] = {I, I, F, I, Mm, I, Mm, I, L * F};
    const void *v[9] = {&n, &Tq, &s, &causal, &xc->storage->mem, &offx, &out->storage->mem, &zero, NULL};
    tl_storage *st[2] = {out->storage, xc->storage};
    if (tl_set_args(kh->k, 0, 9, sz, v) < 0) goto fail;
    if (launch(kh, (size_t)(tl_tensor_numel(x) / n) * L, L, st, 2, 1u) < 0) goto fail;
    Py_DECREF(xc);
    return (PyObject *)out;
fail:
    Py_XDECREF(xc); Py_XDECREF(out);
    return NULL;
}

/* silu_mul(x, y) = silu(x) * y, same shapes. */
static PyObject *
fn_silu_mul(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *xo, *yo;
    tl_tensor *x, *y, *xc = NULL, *yc = NULL, *out = NULL;
    if (!PyArg_ParseTuple(args, "OO:silu_mul", &xo, &yo)) return NULL;
    if ((x = arg_tensor("silu_mul", "x", xo)) == NULL || (y = arg_tensor("silu_mul", "y", yo)) == NULL)
        return NULL;
    PyObject *ins[2] = {xo, yo};
    if (no_grad("silu_mul", ins, 2) < 0) return NULL;
    if (x->ndim != y->ndim || memcmp(x->shape, y->shape, sizeof(Py_ssize_t) * (size_t)x->ndim) != 0) {
        char a[128], b[128];
        tl_shape_str(x->shape, x->ndim, a, sizeof a);
        tl_shape_str(y->shape, y->ndim, b, sizeof b);
        return PyErr_Format(PyExc_ValueError, "silu_mul: x %s and y %s must have the same shape", a, b);
    }
    const int dt[3] = {x->dtype, y->dtype, promote(x->dtype, y->dtype)};
    tl_kernel *kh;
    if ((out = tl_tensor_empty(dt[2], x->ndim, x->shape)) == NULL || out->storage == NULL) return (PyObject *)out;
    if ((kh = variant(k_silu, pack(3, dt), 6)) == NULL || (xc = tl_tensor_contiguous(x)) == NULL ||
        (yc = tl_tensor_contiguous(y)) == NULL)
        goto fail;
    int n = (int)tl_tensor_numel(x), ox = (int)xc->offset, oy = (int)yc->offset;
    const size_t sz[6] = {I, Mm, I, Mm, I, Mm};
    const void *v[6] = {&n, &xc->storage->mem, &ox, &yc->storage->mem, &oy, &out->storage->mem};
    tl_storage *st[3] = {out->storage, xc->storage, yc->storage};
    if (tl_set_args(kh->k, 0, 6, sz, v) < 0 || tl_launch_1d(kh, (size_t)n, st, 3, 1u) < 0) goto fail;
    Py_DECREF(xc); Py_DECREF(yc);
    return (PyObject *)out;
fail:
    Py_XDECREF(xc); Py_XDECREF(yc); Py_XDECREF(out);
    return NULL;
}

/* The fused inference products rms_norm_linear and silu_mul_linear: act(x) @ w.T (+ residual) with the act
 * computed by the matrix-vector kernel as it reads x (ops_mv.h: one launch, float32 or half w, <= 8 rows).
 * Elsewhere the separate ops, same results within float32 rounding: the act (rms_norm / silu_mul of the halves),
 * then h @ w.T and + residual (a tlgpu.quant weight: quant_linear below). Shapes: x (..., K) (silu_mul_linear: (..., 2K)), w (N, K), residual broadcast to
 * (..., N). No autograd, as rms_norm. */
static PyObject *
fused_fallback(int mode, PyObject *xo, PyObject *go, double eps, PyObject *wo, PyObject *ro, Py_ssize_t K, int ndim)
{
    PyObject *a = NULL, *h = NULL, *t = NULL, *y = NULL;
    if (mode == TL_MV_NORM) {
        if ((a = Py_BuildValue("(OOd)", xo, go, eps)) != NULL) h = fn_rms_norm(NULL, a, NULL);
    } else {                                             /* silu(x[..., :K]) * x[..., K:] */
        PyObject *ix[2] = {PyTuple_New(ndim), PyTuple_New(ndim)}, *halves[2] = {NULL, NULL};
        for (int s = 0; s < 2 && ix[0] != NULL && ix[1] != NULL; s++) {
            for (int d = 0; d < ndim; d++) {
                PyObject *lo = d == ndim - 1 ? PyLong_FromSsize_t(s * K) : NULL;
                PyObject *hi = d == ndim - 1 && s == 0 ? PyLong_FromSsize_t(K) : NULL;
                PyTuple_SET_ITEM(ix[s], d, PySlice_New(lo, hi, NULL));
                Py_XDECREF(lo); Py_XDECREF(hi);
            }
            halves[s] = PyObject_GetItem(xo, ix[s]);
        }
        if (halves[0] != NULL && halves[1] != NULL && (a = PyTuple_Pack(2, halves[0], halves[1])) != NULL)
            h = fn_silu_mul(NULL, a);
        Py_XDECREF(ix[0]); Py_XDECREF(ix[1]); Py_XDECREF(halves[0]); Py_XDECREF(halves[1]);
    }
    Py_XDECREF(a);
    if (h == NULL) return NULL;
    if ((t = tl_transpose(tl_tensor_CAST(wo), 0, 1)) != NULL && (y = PyNumber_MatrixMultiply(h, t)) != NULL &&
        ro != Py_None)
        Py_SETREF(y, PyNumber_Add(ro, y));
    Py_XDECREF(t);
    Py_DECREF(h);
    return y;
}

/* The same through tlgpu.quant.matmul / addmm(..., norm=, eps=, glu=) for a Q4_0/Q8_0 weight: one mul_mv launch
 * with the prologue for up to 8 rows on GPUs (kernels/quant_mvq.h), a prologue launch first elsewhere. */
static PyObject *
quant_linear(PyObject *quant, int mode, PyObject *xo, PyObject *go, double eps, PyObject *wo, PyObject *ro)
{
    PyObject *fn = PyObject_GetAttrString(quant, ro != Py_None ? "addmm" : "matmul"), *y = NULL;
    PyObject *args = ro != Py_None ? PyTuple_Pack(3, ro, xo, wo) : PyTuple_Pack(2, xo, wo);
    PyObject *kw = mode == TL_MV_NORM ? Py_BuildValue("{sOsd}", "norm", go, "eps", eps)
                                      : Py_BuildValue("{sO}", "glu", Py_True);
    if (fn != NULL && args != NULL && kw != NULL) y = PyObject_Call(fn, args, kw);
    Py_XDECREF(fn);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return y;
}

static PyObject *
fused_linear(const char *op, int mode, PyObject *xo, PyObject *go, double eps, PyObject *wo, PyObject *ro)
{
    tl_tensor *x, *g = NULL, *w = NULL, *res = NULL;
    PyObject *quant = NULL, *y = NULL, *ins[4] = {xo, NULL, NULL, NULL};
    Py_ssize_t N = 0, K = 0;
    int n = 1;
    char a[128], b[128];
    if ((x = arg_tensor(op, "x", xo)) == NULL || (go != Py_None && (g = arg_tensor(op, "norm", go)) == NULL) ||
        (ro != Py_None && (res = arg_tensor(op, "residual", ro)) == NULL))
        return NULL;
    if (tl_tensor_check(wo)) {
        if ((w = arg_tensor(op, "w", wo)) == NULL) return NULL;
        if (w->ndim != 2) return shape_error(op, w, "w must be 2-D (N, K), a linear layer's weight");
        N = w->shape[0], K = w->shape[1];
        ins[n++] = wo;
    } else {                                             /* a tlgpu.quant weight, or a TypeError */
        PyObject *q = NULL, *shape = NULL;
        if ((quant = PyImport_ImportModule("tlgpu.quant")) == NULL ||
            (q = PyObject_CallMethod(quant, "is_quantized", "O", wo)) == NULL)
            goto done;
        const int yes = PyObject_IsTrue(q);
        Py_DECREF(q);
        if (yes != 1) {
            if (yes == 0)
                PyErr_Format(PyExc_TypeError, "%s: w must be a Tensor or a tlgpu.quant Q4_0/Q8_0 weight, got %s", op,
                             Py_TYPE(wo)->tp_name);
            goto done;
        }
        if ((shape = PyObject_GetAttrString(wo, "shape")) == NULL ||
            !PyArg_ParseTuple(shape, "nn", &N, &K)) {
            Py_XDECREF(shape);
            goto done;
        }
        Py_DECREF(shape);
    }
    if (g != NULL) ins[n++] = go;
    if (res != NULL) ins[n++] = ro;
    if (no_grad(op, ins, n) < 0) goto done;
    if (x->ndim == 0) { shape_error(op, x, "x needs at least one dim"); goto done; }
    const Py_ssize_t Kx = mode == TL_MV_GLU ? 2 * K : K;
    if (x->shape[x->ndim - 1] != Kx) {
        tl_shape_str(x->shape, x->ndim, a, sizeof a);
        PyErr_Format(PyExc_ValueError, "%s: x %s must end in %zd for w (%zd, %zd)%s", op, a, Kx, N, K,
                     mode == TL_MV_GLU ? " (the two halves of each row: silu(a) * b)" : "");
        goto done;
    }
    if (g != NULL && (g->ndim != 1 || g->shape[0] != K)) {
        tl_shape_str(g->shape, g->ndim, b, sizeof b);
        PyErr_Format(PyExc_ValueError, "%s: norm %s must be (%zd,) for x's last dim", op, b, K);
        goto done;
    }
    const tl_mv_act act = {mode, g, (float)eps};
    const int k = w != NULL ? tl_mv_fused(x, w, res, &act, &y) : 0;
    if (k == 0 && quant != NULL)                         /* tlgpu.quant's mul_mv takes the same prologues */
        y = quant_linear(quant, mode, xo, go, eps, wo, ro);
    else if (k == 0)
        y = fused_fallback(mode, xo, go, eps, wo, ro, K, x->ndim);
done:
    Py_XDECREF(quant);
    return y;
}

/* rms_norm_linear(x, norm, w, eps=1e-6, residual=None) */
static PyObject *
fn_rms_norm_linear(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"x", "norm", "w", "eps", "residual", NULL};
    PyObject *xo, *go, *wo, *ro = Py_None;
    double eps = 1e-6;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|dO:rms_norm_linear", kwl, &xo, &go, &wo, &eps, &ro)) return NULL;
    return fused_linear("rms_norm_linear", TL_MV_NORM, xo, go, eps, wo, ro);
}

/* silu_mul_linear(x, w, residual=None) */
static PyObject *
fn_silu_mul_linear(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"x", "w", "residual", NULL};
    PyObject *xo, *wo, *ro = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:silu_mul_linear", kwl, &xo, &wo, &ro)) return NULL;
    return fused_linear("silu_mul_linear", TL_MV_GLU, xo, Py_None, 0.0, wo, ro);
}

/* The (Hkv, max_len, D) cache checks shared by kv_write and attention. */
static int
check_cache(const char *op, const char *name, const tl_tensor *c)
{
    if (c->ndim != 3) { shape_error(op, c, name); return -1; }
    if (!tl_is_dense(c)) {
        shape_error(op, c, "caches must be contiguous (Hkv, max_len, D) tensors");
        return -1;
    }
    return 0;
}

/* kv_write(cache, x, pos): cache[:, pos:pos+T, :] = x for x (Hkv, D) (T = 1) or (Hkv, T, D). Returns cache. */
static PyObject *
fn_kv_write(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *co, *xo, *po;
    Py_ssize_t pos_in = 0;
    tl_tensor *c, *x, *xc = NULL, *pt = NULL;
    if (!PyArg_ParseTuple(args, "OOO:kv_write", &co, &xo, &po)) return NULL;
    if (tl_device_scalar("kv_write", "pos", po, &pt, &pos_in) < 0) return NULL;
    if ((c = arg_tensor("kv_write", "cache", co)) == NULL || (x = arg_tensor("kv_write", "x", xo)) == NULL)
        return NULL;
    if (check_cache("kv_write", "cache must be (Hkv, max_len, D)", c) < 0 || tl_check_inplace("kv_write", c) < 0)
        return NULL;
    int Hkv = (int)c->shape[0], ML = (int)c->shape[1], D = (int)c->shape[2];
    int T = x->ndim == 3 ? (int)x->shape[1] : 1;
    if ((x->ndim != 2 && x->ndim != 3) || x->shape[0] != Hkv || x->shape[x->ndim - 1] != D) {
        char a[128], b[128];
        tl_shape_str(c->shape, c->ndim, a, sizeof a);
        tl_shape_str(x->shape, x->ndim, b, sizeof b);
        return PyErr_Format(PyExc_ValueError, "kv_write: x %s must be (Hkv, D) or (Hkv, T, D) for cache %s", b, a);
    }
    if (pt == NULL && (pos_in < 0 || pos_in + T > ML))
        return PyErr_Format(PyExc_IndexError, "kv_write: positions [%zd, %zd) outside the cache's max_len %d",
                            pos_in, pos_in + T, ML);
    int pos = (int)pos_in;
    if (c->storage == NULL || T == 0) return Py_NewRef(co);
    tl_kernel *kh = variant(k_kv, pack(2, (const int[]){x->dtype, c->dtype}), 11);
    if (kh == NULL || (xc = tl_tensor_contiguous(x)) == NULL) return NULL;
    int ox = (int)xc->offset, oc = (int)c->offset, op = pt != NULL ? (int)pt->offset : 0;
    cl_mem pmem = pt != NULL ? pt->storage->mem : NULL;
    const size_t sz[11] = {I, I, I, I, I, Mm, I, Mm, I, Mm, I};
    const void *v[11] = {&Hkv, &T, &D, &ML, &pos, &xc->storage->mem, &ox, &c->storage->mem, &oc, &pmem, &op};
    tl_storage *st[3] = {c->storage, xc->storage, pt != NULL ? pt->storage : NULL};
    int rc = tl_set_args(kh->k, 0, 11, sz, v);
    if (rc == 0) rc = tl_launch_1d(kh, (size_t)Hkv * (size_t)T * (size_t)D, st, 3, 1u);
    Py_DECREF(xc);
    if (rc < 0) return NULL;
    tl_mark_write(c, "kv_write");
    return Py_NewRef(co);
}

/* rope_kv_write(qkv, cache, pos, n_q, theta=10000.0, interleaved=False): one decode step's rope and cache write
 * as one launch: qkv (n_q + 2 * Hkv, D) contiguous, the q, k and v heads of one token; q and k rotated in
 * place at position pos, then k and v written to cache (2 * Hkv, max_len, D) at row pos. Returns qkv. The
 * same as rope(qkv[:n_q + Hkv], pos, inplace=True) then kv_write(cache, qkv[n_q:], pos). */
static PyObject *
fn_rope_kv_write(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"qkv", "cache", "pos", "n_q", "theta", "interleaved", NULL};
    PyObject *xo, *co, *po;
    Py_ssize_t nq_in, pos_in = 0;
    double theta = 10000.0;
    int inter = 0;
    tl_tensor *x, *c, *pt = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOn|dp:rope_kv_write", kwl, &xo, &co, &po, &nq_in, &theta, &inter))
        return NULL;
    if ((x = arg_tensor("rope_kv_write", "qkv", xo)) == NULL || (c = arg_tensor("rope_kv_write", "cache", co)) == NULL || no_grad("rope_kv_write", &xo, 1) < 0 ||
        tl_device_scalar("rope_kv_write", "pos", po, &pt, &pos_in) < 0)
        return NULL;
    if (check_cache("rope_kv_write", "cache must be (2 * Hkv, max_len, D)", c) < 0 ||
        tl_check_inplace("rope_kv_write", c) < 0 || tl_check_inplace("rope_kv_write", x) < 0)
        return NULL;
    const int R = x->ndim == 2 ? (int)x->shape[0] : -1, D = x->ndim == 2 ? (int)x->shape[1] : -1;
    const int two_kv = (int)c->shape[0], ML = (int)c->shape[1], nq = (int)nq_in, nkv = two_kv / 2;
    if (x->ndim != 2 || !tl_tensor_is_contig(x) || D % 2 != 0 || D != (int)c->shape[2] || two_kv % 2 != 0 ||
        nq_in < 0 || nq_in + two_kv != R) {
        char a[128], b[128];
        tl_shape_str(x->shape, x->ndim, a, sizeof a);
        tl_shape_str(c->shape, c->ndim, b, sizeof b);
        return PyErr_Format(PyExc_ValueError, "rope_kv_write: qkv %s must be contiguous (n_q + 2 * Hkv, D) with D "
                            "even, for cache %s = (2 * Hkv, max_len, D) and n_q = %zd", a, b, nq_in);
    }
    if (!(theta > 0.0) || !isfinite(theta)) return PyErr_Format(PyExc_ValueError, "rope_kv_write: bad theta");
    if (pt == NULL && (pos_in < 0 || pos_in >= ML))
        return PyErr_Format(PyExc_IndexError, "rope_kv_write: position %zd outside the cache's max_len %d", pos_in,
                            ML);
    if (x->storage == NULL || c->storage == NULL) return Py_NewRef(xo);
    tl_kernel *kh = variant(k_rkv, pack(2, (const int[]){x->dtype, c->dtype}), 13);
    if (kh == NULL) return NULL;
    int offx = (int)x->offset, offc = (int)c->offset, offp = pt != NULL ? (int)pt->offset : 0, pos0 = (int)pos_in;
    float lt = (float)log2(theta);
    cl_mem pmem = pt != NULL ? pt->storage->mem : NULL;
    const size_t sz[13] = {I, I, I, F, I, Mm, I, Mm, I, I, Mm, I, I};
    const void *v[13] = {&nq, &nkv, &D, &lt, &inter, &x->storage->mem, &offx, &c->storage->mem, &offc, &ML, &pmem,
                         &offp, &pos0};
    tl_storage *st[3] = {x->storage, c->storage, pt != NULL ? pt->storage : NULL};
    if (tl_set_args(kh->k, 0, 13, sz, v) < 0 ||
        tl_launch_1d(kh, (size_t)R * (size_t)(D / 2), st, 3, 3u) < 0)
        return NULL;
    tl_mark_write(x, "rope_kv_write");
    tl_mark_write(c, "rope_kv_write");
    return Py_NewRef(xo);
}

/* attention(q, k_cache, v_cache, length, scale=None): q (H, D) (a decode step) or (T, H, D) (the last T of
 * `length` positions, causal: prefill), caches (Hkv, max_len, D), H % Hkv == 0. */
static PyObject *
fn_attention(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"q", "k_cache", "v_cache", "length", "scale", "offset", NULL};
    PyObject *qo, *ko, *vo, *lo, *so = Py_None;
    Py_ssize_t Lk_in = 0, offset = 0;
    tl_tensor *q, *kc, *vc, *qc = NULL, *out = NULL, *sc = NULL, *lt = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|On:attention", kwl, &qo, &ko, &vo, &lo, &so, &offset))
        return NULL;
    if (tl_device_scalar("attention", "length", lo, &lt, &Lk_in) < 0) return NULL;
    if ((q = arg_tensor("attention", "q", qo)) == NULL || (kc = arg_tensor("attention", "k_cache", ko)) == NULL ||
        (vc = arg_tensor("attention", "v_cache", vo)) == NULL)
        return NULL;
    PyObject *ins[3] = {qo, ko, vo};
    if (no_grad("attention", ins, 3) < 0) return NULL;
    if (q->ndim != 2 && q->ndim != 3) return shape_error("attention", q, "q must be (H, D) or (T, H, D)");
    if (check_cache("attention", "k_cache must be (Hkv, max_len, D)", kc) < 0 ||
        check_cache("attention", "v_cache must be (Hkv, max_len, D)", vc) < 0)
        return NULL;
    int T = q->ndim == 3 ? (int)q->shape[0] : 1, H = (int)q->shape[q->ndim - 2], D = (int)q->shape[q->ndim - 1];
    int Hkv = (int)kc->shape[0], ML = (int)kc->shape[1];
    if (memcmp(kc->shape, vc->shape, sizeof kc->shape[0] * 3) != 0 || kc->shape[2] != D || Hkv == 0 || H % Hkv != 0) {
        char a[128], b[128], c[128];
        tl_shape_str(q->shape, q->ndim, a, sizeof a);
        tl_shape_str(kc->shape, 3, b, sizeof b);
        tl_shape_str(vc->shape, 3, c, sizeof c);
        return PyErr_Format(PyExc_ValueError, "attention: q %s, k_cache %s, v_cache %s: caches must match, share D "
                            "with q, and Hkv must divide H", a, b, c);
    }
    if (lt == NULL && (Lk_in + offset < T || Lk_in + offset < 1 || Lk_in + offset > ML))
        return PyErr_Format(PyExc_ValueError, "attention: length %zd outside [max(1, T=%d), max_len=%d]",
                            Lk_in + offset, T, ML);
    if (offset < -ML || offset > ML) return PyErr_Format(PyExc_ValueError, "attention: offset %zd", offset);
    /* a length on the device: the scratch and the work-group size are those of the whole cache */
    int Lk = lt != NULL ? ML : (int)(Lk_in + offset), len_arg = lt != NULL ? (int)offset : Lk;
    double scale = 1.0 / sqrt((double)(D > 0 ? D : 1));
    if (so != Py_None && ((scale = PyFloat_AsDouble(so)) == -1.0 && PyErr_Occurred())) return NULL;
    const int dt[4] = {q->dtype, kc->dtype, vc->dtype, promote(q->dtype, promote(kc->dtype, vc->dtype))};
    tl_kernel *kh;
    if ((out = tl_tensor_empty(dt[3], q->ndim, q->shape)) == NULL || out->storage == NULL) return (PyObject *)out;
    Py_ssize_t nsc = (Py_ssize_t)T * H * Lk;
    if ((kh = variant(k_attn, pack(4, dt), 19)) == NULL || (qc = tl_tensor_contiguous(q)) == NULL ||
        (sc = tl_tensor_empty(TL_F32, 1, &nsc)) == NULL)
        goto fail;
    int G = H / Hkv, oq = (int)qc->offset, ok = (int)kc->offset, ov = (int)vc->offset;
    float s = (float)scale;
    size_t L = row_wg(kh, ML > D ? ML : D);            /* the cache's, whatever the length: a step with its length
                                                           on the host sums as one with it on the device */
    cl_mem lmem = lt != NULL ? lt->storage->mem : NULL;
    int ol = lt != NULL ? (int)lt->offset : 0;
    const size_t sz[19] = {I, I, I, I, F, I, I, Mm, I, Mm, I, Mm, I, Mm, Mm, L * F, Mm, I, I};
    const void *v[19] = {&G, &D, &len_arg, &ML, &s, &H, &T, &qc->storage->mem, &oq, &kc->storage->mem, &ok,
                         &vc->storage->mem, &ov, &out->storage->mem, &sc->storage->mem, NULL, &lmem, &ol, &Lk};
    tl_storage *st[6] = {out->storage, sc->storage, qc->storage, kc->storage, vc->storage,
                         lt != NULL ? lt->storage : NULL};
    if (tl_set_args(kh->k, 0, 19, sz, v) < 0 || launch(kh, (size_t)T * H * L, L, st, 6, 3u) < 0) goto fail;
    Py_DECREF(qc); Py_DECREF(sc);
    return (PyObject *)out;
fail:
    Py_XDECREF(qc); Py_XDECREF(sc); Py_XDECREF(out);
    return NULL;
}

/* get_rows(table, ids, dtype=None): table (V, D) floating, ids an int32 Tensor (any shape) or ints; out
 * ids.shape + (D,) in `dtype` (default: the table's; a float16 table can give float32 rows, as ggml's).
 * Ids given as Python ints are range-checked here; ids already on the device cannot be without a sync, so
 * an id outside [0, V) there yields a row of NaN (visible downstream, as cross_entropy's bad targets are). */
static PyObject *
fn_get_rows(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"table", "ids", "dtype", NULL};
    PyObject *to, *io, *dto = Py_None;
    tl_tensor *t, *ids = NULL, *tc = NULL, *out = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:get_rows", kwl, &to, &io, &dto)) return NULL;
    if ((t = arg_tensor("get_rows", "table", to)) == NULL || no_grad("get_rows", &to, 1) < 0) return NULL;
    if (t->ndim != 2) return shape_error("get_rows", t, "table must be (V, D)");
    const int odt = tl_parse_dtype_all(dto, t->dtype);
    if (odt < 0) return NULL;
    if (!TL_IS_FLOAT(odt))
        return PyErr_Format(PyExc_TypeError, "get_rows: dtype must be float32, float16 or bfloat16, got %s",
                            tl_dtype_name(odt));
    int V = (int)t->shape[0], D = (int)t->shape[1], has_ids = 1, id0 = 0;
    if (PyLong_Check(io)) {                              /* one id as an int: a kernel argument */
        long id = PyLong_AsLong(io);
        if (id == -1 && PyErr_Occurred()) return NULL;
        if (id < 0 || id >= V) return PyErr_Format(PyExc_IndexError, "get_rows: id %ld outside the table's %d rows", id, V);
        has_ids = 0;
        id0 = (int)id;
    } else if (tl_tensor_check(io)) {
        tl_tensor *it = tl_tensor_CAST(io);
        if (tl_check_dtype("get_rows", it, TL_I32) < 0) return NULL;
        if (V == 0 && tl_tensor_numel(it) > 0) {         /* every id is out of range, known without a sync */
            char a[128], b[128];
            tl_shape_str(t->shape, t->ndim, a, sizeof a);
            tl_shape_str(it->shape, it->ndim, b, sizeof b);
            return PyErr_Format(PyExc_IndexError, "get_rows: the table %s has no rows for ids of shape %s", a, b);
        }
        ids = tl_tensor_contiguous(it);
    } else {
        PyObject *arr = Py_NewRef(io);
        PyObject *fast = arr ? PySequence_Fast(arr, "get_rows: ids must be an int32 Tensor, an int or ints") : NULL;
        for (Py_ssize_t i = 0; fast != NULL && i < PySequence_Fast_GET_SIZE(fast); i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
            if (!PyIndex_Check(item) || PyBool_Check(item)) {     /* 1.7 must not become row 1 */
                PyErr_Format(PyExc_TypeError, "get_rows: ids must be integers, got %s", Py_TYPE(item)->tp_name);
                Py_CLEAR(fast);
                break;
            }
            long id = PyLong_AsLong(item);
            if (id == -1 && PyErr_Occurred()) { Py_CLEAR(fast); break; }
            if (id < 0 || id >= V) {
                PyErr_Format(PyExc_IndexError, "get_rows: id %ld outside the table's %d rows", id, V);
                Py_CLEAR(fast);
            }
        }
        ids = fast ? tl_tensor_from_object(arr, TL_I32, "get_rows") : NULL;
        Py_XDECREF(fast); Py_XDECREF(arr);
    }
    if (has_ids && ids == NULL) return NULL;
    Py_ssize_t shape[TL_MAX_DIMS] = {1};
    int nd = has_ids ? ids->ndim : 1;
    if (nd + 1 > TL_MAX_DIMS) { shape_error("get_rows", ids, "too many id dims"); goto fail; }
    if (has_ids) memcpy(shape, ids->shape, sizeof(Py_ssize_t) * (size_t)nd);
    shape[nd] = D;
    if ((out = tl_tensor_empty(odt, nd + 1, shape)) == NULL) goto fail;
    if (out->storage == NULL) { Py_XDECREF(ids); return (PyObject *)out; }
    tl_kernel *kh = variant(k_rows, pack(2, (const int[]){t->dtype, odt}), 11);
    if (kh == NULL || (tc = tl_tensor_contiguous(t)) == NULL) goto fail;
    int n = has_ids ? (int)tl_tensor_numel(ids) : 1, oi = has_ids ? (int)ids->offset : 0, ot = (int)tc->offset;
    cl_mem imem = (has_ids ? ids : tc)->storage->mem;   /* without ids: never read */
    const size_t sz[11] = {I, I, I, Mm, I, I, I, Mm, I, I, Mm};
    const void *v[11] = {&n, &D, &V, &imem, &oi, &has_ids, &id0, &tc->storage->mem, &ot, &D, &out->storage->mem};
    tl_storage *st[3] = {out->storage, tc->storage, has_ids ? ids->storage : NULL};
    if (tl_set_args(kh->k, 0, 11, sz, v) < 0 ||
        tl_launch_1d(kh, (size_t)n * (size_t)D, st, 2 + has_ids, 1u) < 0)
        goto fail;
    Py_XDECREF(ids); Py_DECREF(tc);
    return (PyObject *)out;
fail:
    Py_XDECREF(ids); Py_XDECREF(tc); Py_XDECREF(out);
    return NULL;
}

static const PyMethodDef llm_functions[] = {
    {"rms_norm", TL_KW(fn_rms_norm),
     "rms_norm(x, weight=None, eps=1e-6): x * rsqrt(mean(x**2, -1) + eps) * weight (no autograd)."},
    {"rope", TL_KW(fn_rope),
     "rope(x, positions, theta=10000.0, interleaved=False, inplace=False): rotary embedding of x (T, H, D) or "
     "(H, D); NeoX pairing (i, i + D/2), GPT-J (2i, 2i+1) when interleaved (no autograd)."},
    {"softmax_rows", TL_KW(fn_softmax_rows),
     "softmax_rows(x, scale=1.0, causal=False): softmax(scale*x) over the last dim; causal: query i of Tq "
     "(dim -2) sees keys j <= i + Tk - Tq (no autograd)."},
    {"silu_mul", fn_silu_mul, METH_VARARGS, "silu_mul(x, y): silu(x) * y, same shapes (no autograd)."},
    {"rms_norm_linear", TL_KW(fn_rms_norm_linear),
     "rms_norm_linear(x, norm, w, eps=1e-6, residual=None): rms_norm(x, norm, eps) @ w.T (+ residual), one launch "
     "for up to 8 rows of float32 x and float32/float16/bfloat16 w (no autograd)."},
    {"silu_mul_linear", TL_KW(fn_silu_mul_linear),
     "silu_mul_linear(x, w, residual=None): silu(x[..., :K]) * x[..., K:] @ w.T (+ residual) for w (N, K), one "
     "launch for up to 8 rows of float32 x and float32/float16/bfloat16 w (no autograd)."},
    {"kv_write", fn_kv_write, METH_VARARGS,
     "kv_write(cache, x, pos): cache[:, pos:pos+T] = x for cache (Hkv, max_len, D), x (Hkv, D) or (Hkv, T, D); pos an "
     "int or an int32 tensor of one element read on the device (rows past max_len are then not written)."},
    {"rope_kv_write", TL_KW(fn_rope_kv_write),
     "rope_kv_write(qkv, cache, pos, n_q, theta=10000.0, interleaved=False): one decode step's rope of the q and k "
     "heads (in place) and kv_write of k and v in one launch; pos an int or an int32 tensor of one element."},
    {"attention", TL_KW(fn_attention),
     "attention(q, k_cache, v_cache, length, scale=None, offset=0): one decode step, q (H, D) over the first "
     "`length` + offset positions of caches (Hkv, max_len, D); head h reads kv head h // (H // Hkv); scale 1/sqrt(D) "
     "by default; length an int or an int32 tensor of one element read on the device (clamped to [T, max_len])."},
    {"get_rows", TL_KW(fn_get_rows),
     "get_rows(table, ids, dtype=None): table[ids] for a (V, D) table and int32 ids (embedding lookup), in dtype "
     "(default: the table's)."},
    {NULL, NULL, 0, NULL},
};

static void
any_options(const tl_runtime *rt, int arg, const char *user, char *out, size_t cap)
{
    tl_gemm_program_options(rt, arg, user, out, cap);
    size_t n = strlen(out);
    snprintf(out + n, cap - n, " -DTL_LLM_ANY=1");
}

static void
mvh_fused_options(const tl_runtime *Py_UNUSED(rt), int Py_UNUSED(arg), const char *Py_UNUSED(user), char *out,
                  size_t cap)
{
    snprintf(out, cap, " -DMVH_FUSED=1");
}

/* The llm kernels read the GEMM tile parameters (tier 0): the build rules (programs.h) of both builds of
 * llm.cl, at import; "llm_any" adds -DTL_LLM_ANY (operands of any floating dtype). "mv_half_fused" is
 * mv_half.cl's build of rms_norm_linear's and silu_mul_linear's kernels (its plain build has the others:
 * each compiles in a third of the time on PoCL). */
static int
llm_init(PyObject *Py_UNUSED(m), tl_state *Py_UNUSED(S))
{
    static const tl_program_rule rule = {"llm", NULL, tl_gemm_program_options, 0},
                                 any = {"llm_any", "llm", any_options, 0},
                                 mvh = {"mv_half_fused", "mv_half", mvh_fused_options, 0};
    tl_err err = {0};
    return tl_program_register(&rule, &err) == TL_OK && tl_program_register(&any, &err) == TL_OK &&
           tl_program_register(&mvh, &err) == TL_OK ? 0 : tl_raise(&err);
}

const tl_family tl_family_llm = {llm_functions, NULL, NULL, NULL, NULL, .init = llm_init};
