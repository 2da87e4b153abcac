/* gemm_sg.h: the NVIDIA float32 GEMM (kernels/matmul_sg.cl, a hand-written-CUDA-style SGEMM: 128x128x8
 * tiles, 8x8 outputs a work-item) and its choice. Exact float32 like the tiled kernels it replaces there;
 * other devices keep those (matmul.cl). TLGPU_SG=off turns it off on NVIDIA too. Python-facing (raises). */
#ifndef TL_GEMM_SG_H
#define TL_GEMM_SG_H
#include "ops_common.h"

/* For a C[M, N] = A @ B product (times `batch`) the GEMM path would run: 1 with *kh, *gws0, *lws0 set (a
 * 1-D launch over dim 0; dims 1 and 2 are the caller's, dim 2 the batch), 0 to keep the float32 kernels
 * (not an NVIDIA GPU, TLGPU_SG=off, a product too small to fill the device, an operand with no unit stride
 * or not 16-byte aligned), -1 with an exception set. alignA (alignB): A's (B's) offset and batch strides
 * ORed together, for the float4 loads' alignment. *S, *ks (S NULL: no split wanted): the split in K
 * (gemm_splitk.h's launch; *S 1 for none), for grids that leave most of the last wave empty. */
int tl_gemm_sg_choose(int M, int N, int K, int batch, int sAm, int sAk, int sBk, int sBn, int alignA, int alignB,
                      tl_kernel **kh, size_t *gws0, size_t *lws0, int *S, int *ks);

/* a @ b with both operands 2-D, A along k and B along n (nn), where the multistage tn row would take a.T.T @ b
 * (the size rule, N >= 2048 so the copy costs under ~3 % of the product; float32 precision, TLGPU_SG_COPY
 * not "off", no row forced): A's transposed copy in *a2 (a new reference: the [M, K] view of a contiguous
 * [K, M]), for the caller to multiply instead. 1 with *a2 set, 0 to leave the product alone, -1 raised. */
int tl_gemm_sg_copy_a(tl_tensor *a, tl_tensor *b, int M, int N, int K, tl_tensor **a2);

PyObject *tl_gemm_sg_info(PyObject *m, PyObject *args);    /* _gemm_sg([config]): state, forced config */

/* The GEMM layer's part of import (tl_family_matmul's init): the program rules of the matmul tiers and of
 * matmul_sg, and ptx_patch.h's binary hook (the sm_90a rewrite every NVIDIA build passes through). */
int tl_gemm_init(PyObject *m, tl_state *S);
#endif
