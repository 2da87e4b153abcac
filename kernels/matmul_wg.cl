/* matmul_wg.cl: TF32 GEMM on Hopper's warpgroup tensor cores (wgmma.mma_async, sm_90a), for
 * tlgpu.set_matmul_precision("high") on devices of compute capability 9.0: C[b] = A[b] @ B[b] with the
 * arguments of matmul.cl's tl_gemm_f32, for the layout whose operands both run along k (x @ w.T: A with
 * sAk == 1, B with sBk == 1), since wgmma reads TF32 operands only K-major; csrc/gemm/gemm_tc.c gives other
 * layouts a K-major copy first (elementwise.cl's tl_transpose_u32).
 *  - A work-group is WG_BM / 64 warpgroups of 128 work-items; warpgroup g computes rows 64g.. of the
 *    WG_BM x WG_BN tile with one m64nNk8 wgmma per 8 of k (N = WG_BN), both operands read from local
 *    memory through matrix descriptors, N/2 float accumulators a work-item.
 *  - Tiles travel with cp.async (16-byte copies, zero-filled past the edges through src-size; four 4-byte
 *    ones where a row is not 16-byte aligned) into
 *    WG_STAGES local stages. A tile row is WG_BK floats (32, 64 or 128 bytes), stored unpadded with its
 *    16-byte chunks XOR-swizzled the way the descriptor's swizzle mode of that width reads them (chunk c of
 *    row r at c ^ ((r * width / 128) % chunks): the hardware's pattern on address bits 4-6 against 7-9).
 *  - The tensor cores read the operands' top 19 bits (truncation to TF32): relative error 7.8e-4 on
 *    random 4096 products on the H100, against 2.9e-4 for cuBLAS TF32 and the mma.sync rows (cvt.rna).
 *    -DWG_RNA=1 rounds them in local memory instead (each work-item its own copies, once they land):
 *    the same 2.9e-4, at 112 instead of 149 TFLOP/s (H100, 4096, benchmarks/NOTES.md).
 *  - Per k-tile: wait for this work-item's copies (WG_RNA: round them), fence them into the async proxy, one
 *    barrier (every warpgroup has then finished the group of two tiles back), issue the copies of the tile
 *    WG_STAGES - 2 ahead into that stage, then this tile's wgmma group (fence, WG_BK / 8 instructions,
 *    commit) and wait for the previous tile's group (wait_group 1): the tensor cores always hold the
 *    next group while the loop goes on.
 *  - NVIDIA's OpenCL compiler targets sm_90, which has no wgmma: each sm_90a instruction is a PTX comment
 *    behind the marker //TLPTX (matmul_wg_asm.h); csrc/gemm/ptx_patch.c turns the markers into instructions
 *    and retargets the PTX to sm_90a, and the driver builds that (programs.c, for any program whose PTX has the marker).
 *  - The store epilogue (kernels/mm_epi.h: scale, bias, residual, ReLU/Tanh as C is stored; matmul_tc.cl's
 *    banner) after MM_ARGS, as matmul.cl's kernels: with epi != 0, WG_STORE_EPI (element by element).
 *  - TC_EMULATE=1 (tests, any device): plain copies, and each work-item computes its accumulators from
 *    the swizzled local tiles as the descriptors describe them, so the tiling, the swizzle and the
 *    fragment layout run on PoCL.
 * Local memory, stages x (BM + BN) x BK x 4 bytes, at most 48 KiB (OpenCL's limit on NVIDIA). */

#include "matmul_wg_lib.h"

/* Production rows first; TC_SWEEP adds the rest (bench_gemm.py --tc-sweep). */
#define WG_TAG 128x128x16s3
#define WG_BM 128
#define WG_BN 128
#define WG_BK 16
#define WG_STAGES 3
#include "matmul_wg.h"

#define WG_TAG 64x128x16s4
#define WG_BM 64
#define WG_BN 128
#define WG_BK 16
#define WG_STAGES 4
#include "matmul_wg.h"

#ifdef TC_SWEEP
#define WG_TAG 128x128x8s4
#define WG_BM 128
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 4
#include "matmul_wg.h"

#define WG_TAG 256x128x8s4
#define WG_BM 256
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 4
#include "matmul_wg.h"

#define WG_TAG 128x256x8s4
#define WG_BM 128
#define WG_BN 256
#define WG_BK 8
#define WG_STAGES 4
#include "matmul_wg.h"

#define WG_TAG 64x256x8s4
#define WG_BM 64
#define WG_BN 256
#define WG_BK 8
#define WG_STAGES 4
#include "matmul_wg.h"

#define WG_TAG 128x64x16s4
#define WG_BM 128
#define WG_BN 64
#define WG_BK 16
#define WG_STAGES 4
#include "matmul_wg.h"

#define WG_TAG 128x128x8s6
#define WG_BM 128
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 6
#include "matmul_wg.h"

#define WG_TAG 128x128x8s5
#define WG_BM 128
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 5
#include "matmul_wg.h"

#define WG_TAG 64x128x8s8
#define WG_BM 64
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 8
#include "matmul_wg.h"
#endif
