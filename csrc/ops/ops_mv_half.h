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
#endif
