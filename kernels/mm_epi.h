/* mm_epi.h: the store epilogue of the matrix-product kernels (matmul.cl; ops_matmul.c's mm_launch sets its
 * arguments, tlgpu.jit's epilogue pass, csrc/jit/epilogue.c, may set them in a trace). A product that ends
 * in MM_EPI_ARGS stores, for the element of C at row m, column n:
 *     v = acc;  if (epi & MM_EPI_SCALE) v *= alpha;  if (epi & MM_EPI_BIAS) v += bias[n];
 *     if (epi & MM_EPI_RES) v += resid[the element's own offset];  then the activation MM_EPI_ACT(epi)
 * (1: ReLU, as the elementwise kernel's, NaN kept; 2: tanh). Each step is one float32 rounding, the one the
 * eager elementwise kernel would make, in the order the eager ops run (a trace only moves ops that ran in
 * this order). resid is laid out like C (contiguous, from element offR, batch after batch); the kernel reads
 * an element of resid before it stores C's, one work-item per element, so resid may be C itself (an in-place
 * `c += a @ b`) in kernels without restrict pointers.
 * epi 0 stores the product as it is; bias and R are then never read (any buffer may be bound). */
#ifndef TL_MM_EPI_H
#define TL_MM_EPI_H

#define MM_EPI_BIAS 1
#define MM_EPI_SCALE 8
#define MM_EPI_RES 16
#define MM_EPI_ACT(e) (((e) >> 1) & 3)

#define MM_EPI_ARGS global const float *bias, int epi, float alpha, global const float *resid, int offR

/* r: the residual element (resid + the element's offset), read only with MM_EPI_RES. */
inline float
mm_epi(float v, int n, const global float *r, global const float *bias, int epi, float alpha)
{
    if (epi & MM_EPI_SCALE) v *= alpha;
    if (epi & MM_EPI_BIAS) v += bias[n];
    if (epi & MM_EPI_RES) v += *r;
    const int act = MM_EPI_ACT(epi);
    return act == 1 ? ((v > 0.0f) | isnan(v) ? v : 0.0f) : act == 2 ? tanh(v) : v;
}

/* The epilogue of C's element at offset `at` from C (after MM_EPI_BATCH shifted R along with C). */
#define MM_EPI(v, n, at) mm_epi((v), (n), resid + (at), bias, epi, alpha)
#define MM_EPI_BATCH(b) resid += offR + (b) * M * N

#endif
