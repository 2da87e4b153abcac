/* cpu_quant.h: the q4_0 / q8_0 matrix-vector product on CPU OpenCL devices (PoCL) as one native command,
 * llama.cpp's CPU design: the 1-8 activation rows quantized once to int8 blocks of 32 (dx = amax / 127,
 * round to even: kernels/quant_mvq.h's staging), then per weight row and block an integer dot product
 * (AVX-512 VNNI, AVX2 or portable C, chosen at run time) scaled by dw * dx and summed in float32. The rows
 * are split over the part threads of cpu_native.h. ops_quant.c's mul_mv calls it on CPU devices. docs/cpu.md. */
#ifndef TL_CPU_QUANT_H
#define TL_CPU_QUANT_H
#include "tensor.h"

/* y (R, N) = p(x) @ W^T (+ res) for W (N, K) in q4_0 (q8 0) or q8_0 (q8 1) as ops_quant.c's flat arrays qs
 * and d; x contiguous (R, sx) float32 at its offset (sx = 2K with glu), p: glu (silu(a) * b of x = a|b),
 * then rms_norm with the weight nw (NULL: none) and eps; res NULL or contiguous float32 (R, N); y new
 * contiguous (R, N). 1: enqueued; 0: not applicable (switched off, not a CPU device that runs native
 * kernels); -1: error with an exception set. */
int tl_cpu_quant_mv(int q8, int N, int K, int R, tl_tensor *x, int sx, tl_tensor *qs, tl_tensor *d, tl_tensor *y,
                    tl_tensor *res, tl_tensor *nw, float eps, int glu);
/* _C._cpu_quant(enable=None, threads=0, isa=None): the path's state; enable=False gives the OpenCL kernels,
 * isa ("vnni", "avx2", "scalar") forces a dot product no faster than the CPU's (tests, measurements). */
PyObject *tl_cpu_quant_py(PyObject *m, PyObject *args, PyObject *kw);
#endif
