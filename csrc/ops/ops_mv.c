/* ops_mv.c: the decode-shaped float32 matrix-vector product, y = act(x) @ W^T (+ res) for at most 8 rows of x
 * (kernels/matmul.cl's tl_mul_mv_*: a work-group kernel per padded row count on GPUs, a barrier-free row
 * kernel on CPUs), and the fused inference products: rms_norm (tlgpu.rms_norm_linear) or silu_mul
 * (silu_mul_linear) applied to x as the kernel reads it, on float32 weights here and on half weights through
 * ops_mv_half.c. matmul / addmm (ops_matmul.c) run the plain product through tl_mv_f32_launch; the fused ops'
 * dispatch and fallbacks are ops_llm.c's. Invariant: each call is one launch; every weight is read once. */
#include "ops_mv.h"
#include "autograd.h"
#include "cl_runtime.h"
#include "gemm_params.h"
#include <string.h>

/* [mode][padded rows 1, 2, 4, 8]: compile-time bounds keep the accumulators in registers; and the row kernels */
#define MV_GPU(M) {TL_KERNEL("matmul", "tl_mul_mv_" M "r1_f32"), TL_KERNEL("matmul", "tl_mul_mv_" M "r2_f32"),   \
                   TL_KERNEL("matmul", "tl_mul_mv_" M "r4_f32"), TL_KERNEL("matmul", "tl_mul_mv_" M "r8_f32")}
static tl_kernel gpu_k[TL_MV_MODES][4] = {MV_GPU(""), MV_GPU("norm_"), MV_GPU("glu_")};
static tl_kernel rows_k[TL_MV_MODES] = {TL_KERNEL("matmul", "tl_mul_mv_rows_f32"),
                                        TL_KERNEL("matmul", "tl_mul_mv_norm_rows_f32"),
                                        TL_KERNEL("matmul", "tl_mul_mv_glu_rows_f32")};

int
tl_mv_f32_launch(int R, int N, int K, tl_tensor *x, int offx, int sx, tl_tensor *w, int offw, int sw,
                 tl_tensor *y, int offy, tl_tensor *res, int cpu, const tl_mv_act *act)
{
    static const int nr_of[4] = {4, 4, 8, 8};            /* weight rows per work-group: kernels/matmul.cl */
    tl_err err = {0};
    const tl_runtime *rt;
    const int rv = R <= 1 ? 0 : R <= 2 ? 1 : R <= 4 ? 2 : 3, rr = 1 << rv;
    const int mode = act != NULL ? act->mode : TL_MV_PLAIN;
    size_t gws, lws = 1, per_lane = 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    if (!cpu) {                                          /* GPU: a power-of-two group with a lane per value */
        tl_kernel *g = &gpu_k[mode][rv];
        if (tl_kernel_py(g) == NULL) return -1;
        per_lane = ((size_t)nr_of[rv] * (size_t)rr + 1) * sizeof(float);   /* mv_reduce's padded rows */
        while (lws * 2 <= g->wg && lws * 2 * per_lane <= rt->info.local_mem - 1024) lws *= 2;
        cpu = lws < (size_t)(nr_of[rv] * rr);            /* too few lanes: the barrier-free kernel */
    }
    const int nr = cpu ? 4 : nr_of[rv];
    tl_kernel *kh = cpu ? &rows_k[mode] : &gpu_k[mode][rv];
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL) return -1;
    int sy = N, groups = (N + nr - 1) / nr;
    const size_t I = sizeof(int), Mm = sizeof(cl_mem);
    const size_t sz[12] = {I, I, I, Mm, I, I, Mm, I, I, Mm, I, I};
    const void *val[12] = {&N, &K, &R, &x->storage->mem, &offx, &sx, &w->storage->mem, &offw, &sw, &y->storage->mem,
                           &offy, &sy};
    int has_res = res != NULL, offr = has_res ? (int)res->offset : 0;
    cl_mem rmem = (has_res ? res : y)->storage->mem;    /* without a residual: never read */
    if (tl_set_args(k, 0, 12, sz, val) < 0 ||
        tl_set_args(k, 12, 3, (size_t[]){Mm, I, I}, (const void *[]){&rmem, &offr, &has_res}) < 0)
        return -1;
    if (cpu) {                                           /* small groups: PoCL spreads groups over cores */
        lws = kh->wg < 8 ? kh->wg : 8;
        gws = tl_round_up((size_t)groups, lws);
    } else {
        gws = (size_t)groups * lws;
        if (tl_set_args(k, 15, 1, (size_t[]){lws * per_lane}, (const void *[]){NULL}) < 0) return -1;
    }
    tl_tensor *g = mode == TL_MV_NORM ? act->g : NULL;
    if (mode == TL_MV_NORM) {                            /* the norm's arguments follow the others */
        const int offg = g != NULL ? (int)g->offset : 0, has_g = g != NULL;
        if (tl_set_args(k, 16 - cpu, 4, (size_t[]){Mm, I, I, sizeof(float)},
                        (const void *[]){&(g != NULL ? g : x)->storage->mem, &offg, &has_g, &act->eps}) < 0)
            return -1;
    }
    tl_storage *st[5] = {y->storage, x->storage, w->storage, has_res ? res->storage : NULL, NULL};
    int nst = 3 + has_res;
    if (g != NULL) st[nst++] = g->storage;
    if (tl_stream_launch(k, 1, &gws, &lws, st, nst, 1u, kh->name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

int
tl_mv_fused(tl_tensor *x, tl_tensor *w, tl_tensor *res, const tl_mv_act *act, PyObject **out)
{
    const tl_runtime *rt;
    tl_gemm_params gp;
    tl_err err = {0};
    tl_tensor *g = act->g, *y = NULL, *xc = NULL;
    if (x->dtype != TL_F32 || x->ndim < 1 || w->ndim != 2 || (w->dtype != TL_F32 && !TL_IS_HALF(w->dtype)) ||
        (w->strides[1] != 1 && w->shape[1] > 1) || x->storage == NULL || w->storage == NULL ||
        tl_autocast_dtype() >= 0)
        return 0;
    if (g != NULL && (g->dtype != TL_F32 || g->ndim != 1 || (g->shape[0] > 1 && g->strides[0] != 1)))
        return 0;
    const Py_ssize_t N = w->shape[0], K = w->shape[1], Kx = x->shape[x->ndim - 1];
    const Py_ssize_t R = Kx > 0 ? tl_tensor_numel(x) / Kx : 0;
    if (R < 1 || R > TL_MV_MAX_ROWS || N > INT_MAX / TL_MV_MAX_ROWS || Kx != (act->mode == TL_MV_GLU ? 2 * K : K))
        return 0;
    Py_ssize_t shape[TL_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(Py_ssize_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = N;
    if (res != NULL && (res->dtype != TL_F32 || res->storage == NULL || !tl_tensor_is_contig(res) ||
                        res->ndim != x->ndim || memcmp(res->shape, shape, sizeof(Py_ssize_t) * (size_t)x->ndim) != 0))
        return 0;                                        /* broadcast or another dtype: the separate ops */
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    tl_gemm_params_get(&rt->info, 0, &gp);
    if ((y = tl_tensor_empty(TL_F32, x->ndim, shape)) == NULL || (xc = tl_tensor_contiguous(x)) == NULL) goto fail;
    const int r = (int)R, n = (int)N, k = (int)K, sx = (int)Kx, offw = (int)w->offset, sw = (int)w->strides[0];
    const int cpu = gp.v[TL_GP_DIRECT] != 0;
    const int rc = w->dtype == TL_F32
        ? tl_mv_f32_launch(r, n, k, xc, (int)xc->offset, sx, w, offw, sw, y, (int)y->offset, res, cpu, act)
        : tl_mv_half_launch(xc, sx, w, offw, sw, y, res, n, r, n, k, act);
    if (rc < 0) goto fail;
    Py_DECREF(xc);
    *out = (PyObject *)y;
    return 1;
fail:
    Py_XDECREF(y);
    Py_XDECREF(xc);
    return -1;
}
