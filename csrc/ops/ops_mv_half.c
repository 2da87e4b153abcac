/* ops_mv_half.c: x @ w.T for a float16 or bfloat16 weight w (N, K) and at most 8 rows of x (decoding), with
 * the weights read as stored, 2 bytes each, by kernels/mv_half.cl (float32 accumulation). Without it a half
 * product widens the whole weight to float32 before the float32 product (ops.h's tl_call_f32): a read of
 * 2 bytes, a write and a read of 4, each step. matmul (`@`), addmm and linear call it first and take their
 * ordinary path when it declines.
 * The case: autocast off; nothing that requires grad (the widening path records autograd); b a 2-D half
 * tensor whose dim 0 has stride 1 (w.T of a weight with contiguous rows); a float32 or b's dtype, its last
 * dim K and at most 8 rows in all (leading dims flattened), nothing zero-size. The result has PyTorch's
 * dtype (one half dtype: it; float32 with a half weight: float32) and shape a.shape[:-1] + (N,). The
 * kernel adds a residual (out's shape) or a bias (N) of the result's dtype as it stores; anything else is
 * added after. Kernel choice as quant's: the GEMM table's DIRECT flag (CPU devices) picks the barrier-free
 * row kernel, else the work-group kernel, which needs 16-byte aligned weight rows (else the row kernel). */
#include "ops_mv_half.h"
#include "autograd.h"
#include "cl_runtime.h"
#include "gemm_params.h"
#include "ops.h"
#include <string.h>

enum { MVH_F16, MVH_BF16, MVH_NW };
#define MVH_GPU(P, M, W, N)                                                                                   \
    {TL_KERNEL(P, "tl_mul_mv_" M W "_r1_n" N), TL_KERNEL(P, "tl_mul_mv_" M W "_r2_n" N),                      \
     TL_KERNEL(P, "tl_mul_mv_" M W "_r4_n" N), TL_KERNEL(P, "tl_mul_mv_" M W "_r8_n" N)}
#define MVH_MODE(P, M) \
    {{MVH_GPU(P, M, "f16", "4"), MVH_GPU(P, M, "f16", "8")}, {MVH_GPU(P, M, "bf16", "4"), MVH_GPU(P, M, "bf16", "8")}}
/* [mode: plain, norm, glu][dtype][NR 4, 8][rows 1, 2, 4, 8]; the folded modes are mv_half.cl's second build */
static tl_kernel gpu_k[TL_MV_MODES][MVH_NW][2][4] = {MVH_MODE("mv_half", ""), MVH_MODE("mv_half_fused", "norm_"),
                                                     MVH_MODE("mv_half_fused", "glu_")};
static tl_kernel rows_k[TL_MV_MODES][MVH_NW] = {
    {TL_KERNEL("mv_half", "tl_mul_mv_f16_rows"), TL_KERNEL("mv_half", "tl_mul_mv_bf16_rows")},
    {TL_KERNEL("mv_half_fused", "tl_mul_mv_norm_f16_rows"), TL_KERNEL("mv_half_fused", "tl_mul_mv_norm_bf16_rows")},
    {TL_KERNEL("mv_half_fused", "tl_mul_mv_glu_f16_rows"), TL_KERNEL("mv_half_fused", "tl_mul_mv_glu_bf16_rows")}};
#define MVH_MAX_ROWS 8

/* ops_mv_half.h: y (R, N) = act(x) @ w^T (+ res, row stride sr), x rows of stride sx, w rows at offw + n * sw. */
int
tl_mv_half_launch(tl_tensor *x, int sx, tl_tensor *w, int offw, int sw, tl_tensor *y, tl_tensor *res, int sr, int R,
                  int N, int K, const tl_mv_act *act)
{
    tl_err err = {0};
    const tl_runtime *rt;
    tl_gemm_params gp;
    const int wt = w->dtype == TL_F16 ? MVH_F16 : MVH_BF16, rv = R <= 1 ? 0 : R <= 2 ? 1 : R <= 4 ? 2 : 3;
    const int mode = act != NULL ? act->mode : TL_MV_PLAIN;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    tl_gemm_params_get(&rt->info, 0, &gp);
    int cpu = gp.v[TL_GP_DIRECT] != 0 || offw % 8 != 0 || (N > 1 && sw % 8 != 0);
    /* GPU: 8 weight rows a work-group from 4 activation rows up (each group re-reads x) or where that leaves 4
     * groups per compute unit, else 4 (kernels/mv_half.cl) */
    const int big = R > 2 || (size_t)(N + 7) / 8 >= 4 * (size_t)rt->info.compute_units;
    int nr = big ? 8 : 4;
    size_t gws, lws = 1, per_lane = ((size_t)nr * (size_t)(1 << rv) + 1) * sizeof(float);
    tl_kernel *kh = &gpu_k[mode][wt][big][rv];
    if (!cpu) {            /* a power-of-two group with a lane per value, and at most K/16 lanes past that */
        const size_t nv = (size_t)nr << rv;
        if (tl_kernel_py(kh) == NULL) return -1;
        while (lws * 2 <= kh->wg && lws * 2 * per_lane <= rt->info.local_mem - 1024 &&
               (lws < nv || lws * 32 <= (size_t)K))
            lws *= 2;
        cpu = lws < nv;                                  /* too few lanes: the barrier-free kernel */
    }
    if (cpu) {                                           /* MV_NR (4) weight rows a work-item */
        kh = &rows_k[mode][wt];
        nr = 4;
    }
    if (tl_kernel_py(kh) == NULL) return -1;
    const int has_res = res != NULL, offr = has_res ? (int)res->offset : 0;
    const int offx = (int)x->offset, offy = (int)y->offset, dts = x->dtype | y->dtype << 4;
    cl_mem rmem = (has_res ? res : y)->storage->mem;    /* without a residual: never read */
    const size_t I = sizeof(int), Mm = sizeof(cl_mem);
    const size_t sz[17] = {I, I, I, Mm, I, I, Mm, I, I, Mm, I, I, Mm, I, I, I, I};
    const void *v[17] = {&N, &K, &R, &x->storage->mem, &offx, &sx, &w->storage->mem, &offw, &sw, &y->storage->mem,
                         &offy, &N, &rmem, &offr, &sr, &has_res, &dts};
    if (tl_set_args(kh->k, 0, 17, sz, v) < 0) return -1;
    const size_t groups = (size_t)(N + nr - 1) / (size_t)nr;
    if (cpu) {                                           /* small groups: PoCL spreads them over cores */
        lws = kh->wg < 8 ? kh->wg : 8;
        gws = tl_round_up(groups, lws);
    } else {
        gws = groups * lws;
        if (tl_set_args(kh->k, 17, 1, (size_t[]){lws * per_lane}, (const void *[]){NULL}) < 0) return -1;
    }
    tl_tensor *g = mode == TL_MV_NORM ? act->g : NULL;
    if (mode == TL_MV_NORM) {                            /* the norm's arguments follow the others */
        const int offg = g != NULL ? (int)g->offset : 0, has_g = g != NULL;
        if (tl_set_args(kh->k, 18 - cpu, 4, (size_t[]){Mm, I, I, sizeof(float)},
                        (const void *[]){&(g != NULL ? g : x)->storage->mem, &offg, &has_g, &act->eps}) < 0)
            return -1;
    }
    tl_storage *st[5] = {y->storage, x->storage, w->storage, has_res ? res->storage : NULL, NULL};
    int nst = 3 + has_res;
    if (g != NULL) st[nst++] = g->storage;
    if (tl_stream_launch(kh->k, 1, &gws, &lws, st, nst, 1u, kh->name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

/* a @ b (+ res where the kernel can add it: *fused) on this path: 1, 0 (not the case) or -1 (header). */
static int
mv_half(tl_tensor *a, tl_tensor *b, PyObject *res_o, PyObject **out, int *fused)
{
    PyObject *ins[3] = {(PyObject *)a, (PyObject *)b, res_o};
    *fused = 0;
    if (b->ndim != 2 || !TL_IS_HALF(b->dtype) || (a->dtype != TL_F32 && a->dtype != b->dtype) || a->ndim < 1 ||
        a->shape[a->ndim - 1] != b->shape[0] || (b->strides[0] != 1 && b->shape[0] > 1) || b->storage == NULL ||
        a->storage == NULL || tl_autocast_dtype() >= 0 || tl_autograd_wanted(ins, res_o != NULL ? 3 : 2))
        return 0;
    if (res_o != NULL && tl_tensor_check(res_o) && !TL_IS_FLOAT(tl_tensor_CAST(res_o)->dtype))
        return 0;                                        /* an integer input or bias: the caller's TypeError */
    const Py_ssize_t K = b->shape[0], N = b->shape[1], R = tl_tensor_numel(a) / K;
    if (R < 1 || R > MVH_MAX_ROWS || N > INT_MAX / MVH_MAX_ROWS) return 0;
    Py_ssize_t shape[TL_MAX_DIMS];
    memcpy(shape, a->shape, sizeof(Py_ssize_t) * (size_t)a->ndim);
    shape[a->ndim - 1] = N;
    const int odt = a->dtype == b->dtype ? b->dtype : TL_F32;
    tl_tensor *res = res_o != NULL && tl_tensor_check(res_o) ? tl_tensor_CAST(res_o) : NULL, *y = NULL, *xc = NULL;
    int sr = (int)N;
    if (res != NULL && (res->dtype != odt || res->storage == NULL)) res = NULL;
    if (res != NULL && !(tl_tensor_is_contig(res) && res->ndim == a->ndim &&
                         memcmp(res->shape, shape, sizeof(Py_ssize_t) * (size_t)a->ndim) == 0)) {
        sr = 0;                                          /* a bias: N elements added to every row */
        if (res->ndim != 1 || res->shape[0] != N || (N > 1 && res->strides[0] != 1)) res = NULL;
    }
    if ((y = tl_tensor_empty(odt, a->ndim, shape)) == NULL || (xc = tl_tensor_contiguous(a)) == NULL ||
        tl_mv_half_launch(xc, (int)K, b, (int)b->offset, (int)b->strides[1], y, res, sr, (int)R, (int)N, (int)K,
                          NULL) < 0) {
        Py_XDECREF(y); Py_XDECREF(xc);
        return -1;
    }
    Py_DECREF(xc);
    *fused = res != NULL;
    *out = (PyObject *)y;
    return 1;
}

int
tl_mv_half_matmul(tl_tensor *a, tl_tensor *b, PyObject **out)
{
    int fused;
    return mv_half(a, b, NULL, out, &fused);
}

int
tl_mv_half_addmm(PyObject *input, tl_tensor *a, tl_tensor *b, PyObject **out)
{
    int fused, k = mv_half(a, b, input, out, &fused);
    if (k > 0 && !fused) Py_SETREF(*out, PyNumber_Add(input, *out));
    return k > 0 && *out == NULL ? -1 : k;
}

int
tl_mv_half_linear(tl_tensor *x, tl_tensor *w, PyObject *bias, int act, PyObject **out)
{
    PyObject *wt = NULL;
    int fused = 0, k;
    if (w->ndim != 2 || !TL_IS_HALF(w->dtype)) return 0;   /* linear's own checks raise for the rest */
    if ((wt = tl_transpose(w, 0, 1)) == NULL) return -1;
    k = mv_half(x, tl_tensor_CAST(wt), bias != Py_None ? bias : NULL, out, &fused);
    Py_DECREF(wt);
    if (k > 0 && bias != Py_None && !fused) Py_SETREF(*out, PyNumber_Add(*out, bias));
    if (k > 0 && *out != NULL && act != TL_ACT_NONE) Py_SETREF(*out, tl_activation(tl_tensor_CAST(*out), act));
    return k > 0 && *out == NULL ? -1 : k;
}
