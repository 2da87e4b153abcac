/* matmul_tc.cl: float32 GEMM on NVIDIA tensor cores in TF32 (tlgpu.set_matmul_precision("high")), C[b] =
 * A[b] @ B[b] with the operands and arguments of matmul.cl's tl_gemm_f32 (strided, batched). Inline PTX:
 * NVIDIA's OpenCL compiler accepts asm (PoCL does not), so csrc/gemm/gemm_tc.c builds this family only on an
 * NVIDIA platform whose device reports compute capability 8.0 or more; nothing else ever compiles it.
 *  - mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32: lane (g = lane/4, t = lane%4) holds A[g][t],
 *    A[g+8][t], A[g][t+4], A[g+8][t+4]; B[t][g], B[t+4][g]; C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
 *    Operands are rounded to TF32 (cvt.rna: to nearest, ties away) as they leave local memory (TC_RNA=0:
 *    the tensor cores' own truncation).
 *  - Tiles go from global to local memory with cp.async (16-byte copies, zero-filled past the matrices'
 *    edges through src-size), TC_STAGES deep, one barrier per k-step; TC_ASYNC=0 uses plain loads and
 *    stores instead.
 *  - Work-groups walk the tiles in groups of TC_GROUP tile rows (column by column inside a group), so
 *    the A rows and B columns in flight at once stay in L2.
 *  - Local tiles are padded against bank conflicts (-DTC_SWZ=1: unpadded, 16-byte chunks XOR-swizzled
 *    by row; -DTC_DBUF=1: fragments double-buffered in registers; neither gained on the H100).
 *  - On compute capability 9.0, x @ w.T runs on kernels/matmul_wg.cl (wgmma) instead.
 *  - -DTC_HALF=1 / 2 (programs matmul_tc_bf16 / matmul_tc_f16): bfloat16 / float16 products, m16n8k16 with
 *    float32 accumulation, on operands packed two values a word along k (tl_tc_pack_h16): a word is read where
 *    the TF32 build reads a float, so the k8 step's fragments (in words) are m16n8k16's (in values); C is
 *    stored rounded to the operands' dtype. Compute capability 8.x (and 9.0 with TLGPU_TC_WGMMA=0).
 *  - The store epilogue (kernels/mm_epi.h; matmul.cl's arguments end in it, and so do these): with epi != 0
 *    each element of C is scaled, gets bias[n] and its residual added, then ReLU/Tanh, one float32 rounding
 *    a step, as it is stored (element by element; a uniform branch, so epi 0 stores as before). The host sets
 *    it as for matmul.cl (ops_matmul.c's mm_launch: a linear layer's bias and activation; tlgpu.jit's
 *    epilogue pass: ops after the product). matmul_wg.cl's kernels take it too.
 * The configurations below (tile, warps, stages) come from H100 sweeps (bench_gemm.py --tc-sweep,
 * benchmarks/NOTES.md); TC_SWEEP adds the others measured there. csrc/gemm/gemm_tc.c holds the same table.
 * Knobs for such sweeps (build options, e.g. through TLGPU_BUILD_OPTIONS): TC_RNA, TC_ASYNC, TC_LDSM,
 * TC_GROUP, TC_SWZ, TC_DBUF. The helpers every family shares are in matmul_tc_lib.h. */

#include "matmul_tc_lib.h"

/* tag: m x n tile of C, k-step, warps along m and n, pipeline stages. Production rows first (the emulation
 * builds only the 64x64 one: PoCL takes minutes over the big unrolled ones). */
#if !TC_EMULATE
#define TC_TAG 128x128x16w2x2s2
#define TC_BM 128
#define TC_BN 128
#define TC_BK 16
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 2
#include "matmul_tc4.h"
#endif

#define TC_TAG 64x64x32w2x2s2
#define TC_BM 64
#define TC_BN 64
#define TC_BK 32
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 2
#include "matmul_tc4.h"

#ifdef TC_SWEEP
#define TC_TAG 128x128x16w2x4s2
#define TC_BM 128
#define TC_BN 128
#define TC_BK 16
#define TC_WM 2
#define TC_WN 4
#define TC_STAGES 2
#include "matmul_tc4.h"

#define TC_TAG 64x64x16w2x2s3
#define TC_BM 64
#define TC_BN 64
#define TC_BK 16
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 3
#include "matmul_tc4.h"

#define TC_TAG 128x64x16w2x2s3
#define TC_BM 128
#define TC_BN 64
#define TC_BK 16
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 3
#include "matmul_tc4.h"

#define TC_TAG 128x128x8w2x4s3
#define TC_BM 128
#define TC_BN 128
#define TC_BK 8
#define TC_WM 2
#define TC_WN 4
#define TC_STAGES 3
#include "matmul_tc4.h"

#define TC_TAG 128x128x16w4x2s2
#define TC_BM 128
#define TC_BN 128
#define TC_BK 16
#define TC_WM 4
#define TC_WN 2
#define TC_STAGES 2
#include "matmul_tc4.h"

#define TC_TAG 64x128x16w2x2s3
#define TC_BM 64
#define TC_BN 128
#define TC_BK 16
#define TC_WM 2
#define TC_WN 2
#define TC_STAGES 3
#include "matmul_tc4.h"

#define TC_TAG 256x128x8w4x2s2
#define TC_BM 256
#define TC_BN 128
#define TC_BK 8
#define TC_WM 4
#define TC_WN 2
#define TC_STAGES 2
#include "matmul_tc4.h"

#define TC_TAG 128x256x8w2x4s2
#define TC_BM 128
#define TC_BN 256
#define TC_BK 8
#define TC_WM 2
#define TC_WN 4
#define TC_STAGES 2
#include "matmul_tc4.h"
#endif

#if TC_HALF
/* The 16-bit builds' operand pack: P[b][r][w] = X[b][r][2 w] | X[b][r][2 w + 1] << 16 (0 past K): two values a
 * word along k, the lower k in the low half, as mma.sync's m16n8k16 fragments hold them; the kernels above then
 * read P as a K / 2-word operand along k. X: rows sr apart, k sk apart, batches sb apart (2-byte elements). */
kernel void
tl_tc_pack_h16(int R, int K, int Kw, global const ushort *X, int off, int sb, int sr, int sk, global uint *P)
{
    const int w = get_global_id(0), r = get_global_id(1), b = get_global_id(2);
    if (w >= Kw || r >= R) return;
    global const ushort *x = X + off + (long)b * sb + (long)r * sr;
    const uint lo = x[(long)(2 * w) * sk], hi = 2 * w + 1 < K ? x[(long)(2 * w + 1) * sk] : 0u;
    P[((long)b * R + r) * Kw + w] = lo | hi << 16;
}
#endif
