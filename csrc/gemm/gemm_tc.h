/* gemm_tc.h: the TF32 tensor-core GEMM (kernels/matmul_tc.cl) and the matmul precision setting.
 * tlgpu.set_matmul_precision("high" | "tf32") lets matmul, addmm and nn.Linear (forward and backward) run
 * their GEMM-sized products on NVIDIA tensor cores in TF32 (10-bit mantissa operands, float32
 * accumulation); "highest" (the default) keeps exact float32. Devices other than an NVIDIA platform with
 * compute capability >= 8.0 accept the setting and ignore it. Python-facing (raises on errors). */
#ifndef TL_GEMM_TC_H
#define TL_GEMM_TC_H
#include "ops_common.h"

/* For a C[M, N] = A @ B product (times `batch`) the GEMM path would run: 1 with *kh, *gws0, *lws0 set
 * (a 1-D launch over dim 0; dims 1 and 2 are the caller's, dim 2 the batch), 0 to keep the float32 kernel
 * (precision "highest", a device without tensor cores, an operand with no unit stride), -1 with an
 * exception set. */
int tl_gemm_tc_choose(int M, int N, int K, int batch, int sAm, int sAk, int sBk, int sBn, tl_kernel **kh,
                      size_t *gws0, size_t *lws0);

/* Under TF32 where the wgmma rows run (compute capability 9.0), for a product a @ b big enough for them whose
 * operands are not both along k (a @ b, the gradients): K-major copies (one tiled transpose each, 2-D or
 * 3-D operands) in *a2 / *b2 (new references; an operand already along k is passed through), so the caller
 * multiplies those instead (x @ w.T on the wgmma rows). 1 with both set, 0 to leave the product alone, -1
 * with an exception set. */
int tl_gemm_tc_kmajor(tl_tensor *a, tl_tensor *b, int M, int N, int K, tl_tensor **a2, tl_tensor **b2);

/* Under TF32 where the packed wgmma rows run (compute capability 9.0; kernels/matmul_wgb.cl), for a product
 * whose grid fills the device on one of them, one that no other wgmma row would take (then split in K, with
 * gemm_splitk's reduction), or with one forced (_gemm_tc("wgb..."), sweeps): a @ b of any layout (2-D or 3-D
 * operands, batches equal or 1) run there: both operands packed, one launch (two when split). res: NULL, or
 * what the caller adds to the product (ops_matmul.c's mm_forward_res): where it is a bias (float32 [N],
 * contiguous from element 0) and the product is not split, the store adds it (bit 0 of *fused) and then
 * applies act (1 ReLU, 2 Tanh; bit 1), as mm_launch's kernels do; act is applied only with the bias added or
 * res NULL. 1 with the result in *out, 0 to leave the product alone, -1 with an exception set. */
int tl_gemm_tc_packed(tl_tensor *a, tl_tensor *b, int M, int N, int K, tl_tensor *res, int act, int *fused,
                      tl_tensor **out);

/* Where the packed wgmma rows run (compute capability 9.0), a @ b for bfloat16 or float16 operands of one dtype
 * (2-D or 3-D, batches equal or 1, any layout) on the tensor cores in that dtype with float32 accumulation,
 * whatever the matmul precision: both operands packed two values a word, one launch, the result rounded to
 * their dtype. 1 with *out set, 0 to leave the product alone (another device, a product too small to fill a
 * quarter of the device, the build failed: the reason in _gemm_tc()), -1 with an exception set. */
int tl_gemm_tc_half(tl_tensor *a, tl_tensor *b, int M, int N, int K, tl_tensor **out);
int tl_gemm_tc_half_usable(void);             /* 1 where that path may run, 0 not, -1 with an exception set */

/* Registers the 16-bit builds of kernels/matmul_wgb.cl (families matmul_wgb_bf16, matmul_wgb_f16). */
tl_status tl_gemm_tc_register(tl_err *err);

/* 1 when set_matmul_precision asks for TF32 ("high" / "tf32"), else 0. */
int tl_gemm_tc_tf32(void);

PyObject *tl_gemm_tc_set_precision(PyObject *m, PyObject *arg);
PyObject *tl_gemm_tc_get_precision(PyObject *m, PyObject *noargs);
PyObject *tl_gemm_tc_info(PyObject *m, PyObject *args);    /* _gemm_tc([config]): state, forced config */
#ifdef TL_TEST_HOOKS
PyObject *tl_ptx_patch_py(PyObject *m, PyObject *arg);     /* _ptx_patch(text): ptx_patch.h's rewrite */
#endif
#endif
