/* cpu_blas.h: matrix products on CPU OpenCL devices (PoCL) through a host BLAS, run as a native kernel
 * (clEnqueueNativeKernel) on the compute queue, so they stay lazy and in queue order with every other
 * command. The BLAS is dlopen'ed at first use from the paths tlgpu/__init__.py hands over (TLGPU_BLAS, the
 * system's libopenblas, numpy's bundled one); with none, or on a GPU, the OpenCL kernels run. docs/cpu.md. */
#ifndef TL_CPU_BLAS_H
#define TL_CPU_BLAS_H
#include "tensor.h"

/* Whether products take the BLAS path on this device now (a CPU device with unified memory, a BLAS loaded). */
int tl_cpu_blas_usable(void);
/* C[batch, M, N] = A @ B (+ res when given: contiguous of out's shape, or a contiguous row of N elements
 * added to every row of C, a linear layer's bias). Any of out, a, b, res, sums may be float16 or bfloat16: the
 * command widens the elements they touch into a float32 scratch, multiplies (and sums) in float32 and rounds C
 * once, after the residual and the ReLU, and the sums once (cpu_half.h's conversions).
 * dims = {M, N, K, sAm, sAk, sBk, sBn};
 * batch dims bshape[0..nbd) with element strides bst[0|1|2] of C, A, B; off = element offsets of C, A, B.
 * With sums (contiguous [M], no batch dims) the same command also writes sums[m] = sum over k of A[m, k]
 * (a linear layer's bias gradient beside its weight gradient). relu: max(C, 0) (NaN kept) after the product.
 * 1: enqueued (res added, sums written); 0: not applicable here (no BLAS, not a CPU device, strides a BLAS
 * cannot take, sums with batch dims); -1: error with an exception set. */
int tl_cpu_blas_mm(const int *dims, int nbd, const int *bshape, const int (*bst)[TL_MAX_DIMS], const int *off,
                   tl_tensor *out, tl_tensor *a, tl_tensor *b, tl_tensor *res, tl_tensor *sums, int relu);
/* *out = conv2d(x, w) + bias as a new contiguous [N, O, OH, OW] tensor, no autograd: per image (or group of
 * images), im2col into a small buffer and one sgemm into the output (cpu_blas.c). g: ops_conv.c's conv_geom,
 * TL_CONV_GEOM ints (N C H W OH OW KH KW SH SW PH PW DH DW, then x's strides n c h w and offset). 1: enqueued;
 * 0: not applicable (as for tl_cpu_blas_mm; a weight that is not contiguous; zero-size); -1: error with an
 * exception set. */
#define TL_CONV_GEOM 19
int tl_cpu_blas_conv(const int *g, tl_tensor *x, tl_tensor *w, tl_tensor *bias, tl_tensor **out);
PyObject *tl_cpu_blas_py(PyObject *m, PyObject *args, PyObject *kw);   /* _C._cpu_blas(paths=, enable=) */
#endif
