/* ops_mv.h: the decode-shaped float32 products (kernels/matmul.cl's mul_mv, ops_mv.c) and the fused
 * rms_norm / silu_mul products on float32 or half weights (the inference ops rms_norm_linear and
 * silu_mul_linear, ops_llm.c). GIL held. */
#ifndef TL_OPS_MV_H
#define TL_OPS_MV_H
#include "ops_mv_half.h"

#define TL_MV_MAX_ROWS 8
/* y (R, N) at offy, row stride N = act(x) @ W^T (+ res laid out like y): x R rows at offx of stride sx, W (N, K)
 * float32 rows at offw of stride sw (unit stride along K); R <= 8; cpu: the barrier-free row kernel (the GEMM
 * table's DIRECT flag). act NULL: plain (matmul, addmm). 0, or -1 with an exception set. */
int tl_mv_f32_launch(int R, int N, int K, tl_tensor *x, int offx, int sx, tl_tensor *w, int offw, int sw,
                     tl_tensor *y, int offy, tl_tensor *res, int cpu, const tl_mv_act *act);
/* y = act(x) @ w^T (+ res) in one launch, act->mode TL_MV_NORM (x (..., K)) or TL_MV_GLU (x (..., 2K)), where
 * the kernels take it: x float32 with at most 8 rows; w (N, K) float32 or half with unit stride along K; res
 * NULL or float32 of y's shape, contiguous; act->g NULL or float32 (K,) contiguous; nothing zero-size;
 * autocast off. The caller checked shapes and autograd. 1 with *out (float32 (..., N)), 0 when not the
 * case (nothing done), -1 with an exception set. */
int tl_mv_fused(tl_tensor *x, tl_tensor *w, tl_tensor *res, const tl_mv_act *act, PyObject **out);
#endif
