/* ops_mv_half.h: the decode-shaped products on float16 / bfloat16 weights (ops_mv_half.c, kernels/mv_half.cl)
 * that matmul, addmm and linear try before their widening path. Each returns 1 when it ran the product
 * (*out a new reference), 0 when the operands are not that case (nothing done, no exception), -1 with an
 * exception set. */
#ifndef TL_OPS_MV_HALF_H
#define TL_OPS_MV_HALF_H
#include "ops_common.h"

int tl_mv_half_matmul(tl_tensor *a, tl_tensor *b, PyObject **out);                       /* a @ b */
int tl_mv_half_addmm(PyObject *input, tl_tensor *a, tl_tensor *b, PyObject **out);       /* input + a @ b */
int tl_mv_half_linear(tl_tensor *x, tl_tensor *w, PyObject *bias, int act, PyObject **out);  /* ops.h TL_ACT_* */

/* What a matrix-vector kernel applies to x as it reads it (kernels/matmul.cl, mv_half.cl): nothing, rms_norm
 * (g: its weight or NULL, eps) or silu(a) * b of each row a|b of 2K (ops_mv.h's fused ops). */
enum { TL_MV_PLAIN, TL_MV_NORM, TL_MV_GLU, TL_MV_MODES };
typedef struct { int mode; tl_tensor *g; float eps; } tl_mv_act;
/* y (R, N, contiguous) = act(x) @ w^T (+ res, row stride sr: N, or 0 for a bias), x R rows of stride sx (of 2K
 * for TL_MV_GLU) in float32 or w's dtype, w (N, K) half rows at offw + n * sw; act NULL: plain. 0 or -1. */
int tl_mv_half_launch(tl_tensor *x, int sx, tl_tensor *w, int offw, int sw, tl_tensor *y, tl_tensor *res, int sr, int R,
                      int N, int K, const tl_mv_act *act);
#endif
