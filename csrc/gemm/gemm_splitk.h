/* gemm_splitk.h: split-K for the float32 tiled GEMM tiers (ops_matmul.c). A product whose tiles would leave
 * most compute units idle and whose K is long runs as S products over slices of K into a pooled [S, batch,
 * M, N] temporary, then one kernel sums the S partials in slice order into C (deterministic, no atomics).
 * Plain products only: the tiled path has no epilogue (a residual or bias is added by the caller). */
#ifndef TL_GEMM_SPLITK_H
#define TL_GEMM_SPLITK_H
#include "ops_common.h"

/* The rule, a pure function of the product, the tier's tile (MWG x NWG, depth KWG) and the device's compute
 * units: the slice count S (1: no split) and *ks, the length of slices 0..S-2 (the last one takes the rest,
 * K - (S-1) * *ks, from 1 to *ks elements). See gemm_splitk.c for the rule. */
int tl_gemm_splitk_rule(int M, int N, int K, int batch, int mwg, int nwg, int kwg, int cus, int *ks);

/* The switch: 0 the rule (default), 1 never split, S >= 2 that many slices (of K / S, the last one taking
 * the rest) on every product the tiled kernel can split, on any device (tests). TLGPU_GEMM_SPLITK=auto|off|S
 * sets it at the first product; -1 with ValueError set for a bad value. */
int tl_gemm_splitk_mode(void);

/* C[batch, M, N] (contiguous at offC) = A @ B over one batch dim (strides sAb, sBb) in S slices of ks: the
 * tiled kernel `kh` (its 2-D grid and local size in gws[0..1], lws), one launch for the slices of length
 * ks (two when the last is shorter or longer), then the reduction. -1 with an exception set. */
typedef struct { int M, N, K, batch, sAm, sAk, sBk, sBn, sAb, sBb, offA, offB, offC; } tl_splitk_problem;
int tl_gemm_splitk_launch(const tl_splitk_problem *p, int S, int ks, tl_kernel *kh, const size_t *gws,
                          const size_t *lws, tl_tensor *a, tl_tensor *b, tl_tensor *out);

/* out[offC + i] = the sum over s of part[s * n + i], in slice order (one launch; the TF32 packed rows' split,
 * gemm_tc.c, uses it too). -1 with an exception set. */
int tl_gemm_splitk_reduce(tl_tensor *part, int S, int n, tl_tensor *out, int offC);

PyObject *tl_gemm_splitk_py(PyObject *m, PyObject *args);        /* _gemm_splitk([S]): the switch, counts */
PyObject *tl_gemm_splitk_rule_py(PyObject *m, PyObject *args);   /* _gemm_splitk_rule(...): (S, ks) */
#endif
