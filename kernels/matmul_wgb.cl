/* matmul_wgb.cl: TF32 GEMM on Hopper's wgmma with packed operands and bulk copies (tags "wgb...": the
 * production TF32 rows for products that fill the device, every layout, csrc/gemm/gemm_tc.c; "wgc..." rows, in
 * clusters of two, are sweep-only: they fail on the H200, benchmarks/NOTES.md). The cp.async
 * rows of matmul_wg.cl spend most of a k-tile on the copies' issue, their waits and the
 * barrier (benchmarks/NOTES.md): here the operands are first packed (tl_wg_pack_f32 below) into exactly
 * the local-memory image a stage needs, so one work-item moves a whole stage with two 1-D bulk copies
 * (cp.async.bulk, sm_90: no tensor map) that complete on an mbarrier, and no barrier runs in the loop.
 *  - Packed layout of an operand X [R, K] (R = M for A, N for B; any strides, batched): tiles of BR rows x
 *    BK k, tile (rb, kb) at ((rb * KT + kb) * BR * BK) floats (KT = ceil(K / BK)), its row r's 16-byte
 *    chunk c at r * BK + 4 * (c ^ wg_swz(r, 4 * BK)), as matmul_wg.cl stores a stage; rows past R and k
 *    past K are zeros, so the GEMM reads whole tiles and has no edge but the store. The pack rounds to TF32
 *    (cvt.rna, as cuBLAS does): the tensor cores' truncation of a rounded value changes nothing.
 *  - The GEMM work-group: WG_BM / 64 consumer warpgroups (wgmma, one m64nNk8 per 8 of k, as matmul_wg.h)
 *    and one producer warp whose first work-item issues, per k-tile, mbarrier.arrive.expect_tx on the
 *    stage's "full" barrier and the two bulk copies; before refilling a stage it waits for its "empty"
 *    barrier, which every consumer work-item arrives on once its wgmma group on the stage is done.
 *  - Every sm_90a/PTX 8.0 instruction is behind the //TLPTX marker (ptx_patch.h), so a compiler that does
 *    not know them never sees them; the family is its own program, so a failure here cannot take
 *    matmul_wg.cl's production rows with it.
 *  - The float32 build's product kernels end in the store epilogue's arguments (kernels/mm_epi.h, after C:
 *    argument 9 on; gemm_tc.c stores plainly, and tlgpu.jit's epilogue pass may move a scale, bias add,
 *    residual add and ReLU/Tanh after the product into it); the 16-bit builds have none (C is 16-bit).
 *  - TC_EMULATE=1 (tests, PoCL): plain copies of the packed stages with barriers, the accumulators from
 *    wg_mma_emu: the pack, the tile walk and the store run on any device; the mbarrier handoffs do not. */

#include "matmul_wg_lib.h"

#if WG_HALF
/* The 16-bit builds' pack (WG_HALF: bfloat16 or float16 X, bit patterns copied): P[b] as tl_wg_pack_f32's, in
 * 4-byte words that each hold two values along k (k = 2w, 2w + 1 in word w; KT tiles of BK words, so K / 2
 * rounded up words a row), zeros past R and K. Work-item q writes P's 16-byte chunk q (8 values): one 16-byte
 * load where X runs along k with aligned chunks (vec), else 8 loads (a transposed operand: neighbouring
 * work-items read neighbouring rows). */
kernel void
tl_wg_pack_h16(int R, int K, int KT, int BR, int BK, global const ushort *X, int offX, int sXb, int sXr, int sXk,
               int vec, global uint *P, int sP)
{
    const size_t q = get_global_id(0);
    const int b = get_global_id(1), cpr = BK / 4, row = (int)(q / (size_t)cpr), cpos = (int)(q % (size_t)cpr);
    const int rb = row / (KT * BR), kb = row / BR % KT, rr = row % BR, r = rb * BR + rr;
    const int k = 2 * (kb * BK + 4 * (cpos ^ wg_swz(rr, 4 * BK)));
    if (q >= (size_t)sP / 4) return;
    X += offX + b * sXb;
    uint4 v = (uint4)(0u);
    if (r < R && vec && k < K) {
        v = *(global const uint4 *)(X + (size_t)r * sXr + k);
    } else if (r < R) {
        uint w[4];
        for (int j = 0; j < 4; j++) {
            const int k0 = k + 2 * j;
            const uint lo = k0 < K ? X[(size_t)r * sXr + (size_t)k0 * sXk] : 0u;
            const uint hi = k0 + 1 < K ? X[(size_t)r * sXr + (size_t)(k0 + 1) * sXk] : 0u;
            w[j] = lo | hi << 16;
        }
        v = (uint4)(w[0], w[1], w[2], w[3]);
    }
    *(global uint4 *)(P + (size_t)b * sP + 4 * q) = v;
}
#else
/* P[b] = the packed tiles of X[b] ([R, K] at offX + b * sXb + r * sXr + k * sXk), BR x BK tiles, per batch
 * sP floats apart. 32 x 32 blocks through local memory, 32 x 8 work-items: loads coalesced along whichever
 * of X's strides is 1, stores as float4 chunks. */
kernel __attribute__((reqd_work_group_size(32, 8, 1))) void
tl_wg_pack_f32(int R, int K, int KT, int BR, int BK, global const float *X, int offX, int sXb, int sXr, int sXk,
               global float *P, int sP)
{
    local float t[32][33];
    const int lx = get_local_id(0), ly = get_local_id(1), k0 = get_group_id(0) * 32, r0 = get_group_id(1) * 32;
    const int b = get_global_id(2);
    X += offX + b * sXb;
    P += (size_t)b * sP;
    for (int j = ly; j < 32; j += 8) {
        if (sXk == 1) {                                 /* t[row][k], lanes along k */
            t[j][lx] = r0 + j < R && k0 + lx < K ? X[(r0 + j) * sXr + k0 + lx] : 0.0f;
        } else {                                        /* lanes along the rows */
            t[lx][j] = r0 + lx < R && k0 + j < K ? X[(r0 + lx) * sXr + (k0 + j) * sXk] : 0.0f;
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    const int e = ly * 32 + lx, row = e / 8, ch = e % 8, k = k0 + 4 * ch, r = r0 + row;
    if (k >= KT * BK) return;
    const int rb = r / BR, rr = r % BR, kb = k / BK, c = (k % BK) / 4;
    float4 v = (float4)(t[row][4 * ch], t[row][4 * ch + 1], t[row][4 * ch + 2], t[row][4 * ch + 3]);
    v = as_float4((uint4)(tc_tf32(v.x), tc_tf32(v.y), tc_tf32(v.z), tc_tf32(v.w)));
    *(global float4 *)(P + ((size_t)(rb * KT + kb) * BR + rr) * BK + 4 * (c ^ wg_swz(rr, 4 * BK))) = v;
}

/* tl_wg_pack_f32 for an X along k whose 16-byte chunks are aligned (sXk 1; offX, sXr, sXb and K multiples of
 * 4): work-item q writes P's chunk q (consecutive stores) from one float4 load, no local memory. */
kernel void
tl_wg_pack4_f32(int R, int K, int KT, int BR, int BK, global const float *X, int offX, int sXb, int sXr,
                global float *P, int sP)
{
    const size_t q = get_global_id(0);
    const int b = get_global_id(1), cpr = BK / 4, row = (int)(q / (size_t)cpr), cpos = (int)(q % (size_t)cpr);
    const int rb = row / (KT * BR), kb = row / BR % KT, rr = row % BR, r = rb * BR + rr;
    const int k = kb * BK + 4 * (cpos ^ wg_swz(rr, 4 * BK));
    if (q >= (size_t)sP / 4) return;
    X += offX + b * sXb;
    float4 v = r < R && k < K ? *(global const float4 *)(X + (size_t)r * sXr + k) : (float4)(0.0f);
    v = as_float4((uint4)(tc_tf32(v.x), tc_tf32(v.y), tc_tf32(v.z), tc_tf32(v.w)));
    *(global float4 *)(P + (size_t)b * sP + 4 * q) = v;
}
#endif

#if !TC_EMULATE
/* The stage's "full" barrier expects `bytes` more from copies, and this work-item's arrival counts. */
static inline void
wb_expect(uint bar, uint bytes)
{
    TC_ASM volatile("//TLPTX {\n"
                    "//TLPTX .reg .b64 st;\n"
                    "//TLPTX mbarrier.arrive.expect_tx.shared::cta.b64 st, [%0], %1;\n"
                    "//TLPTX }\n" ::"r"(bar), "r"(bytes) : "memory");
}

/* `bytes` (a multiple of 16) from src (16-byte aligned) to the local address dst; completes on bar. */
static inline void
wb_bulk(uint dst, global const float *src, uint bytes, uint bar)
{
    TC_ASM volatile("//TLPTX cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                    ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

/* Like wb_bulk into the same local address of both work-groups of the cluster, completing on the same bar. */
static inline void
wb_bulk_pair(uint dst, global const float *src, uint bytes, uint bar)
{
    TC_ASM volatile("//TLPTX {\n"
                    "//TLPTX .reg .b16 msk;\n"
                    "//TLPTX mov.b16 msk, 3;\n"
                    "//TLPTX cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1], %2, [%3], msk;\n"
                    "//TLPTX }\n" ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

/* Lanes 0 and 1 of the calling warp: one arrival each on the mbarrier at local address bar of the
 * cluster's work-group 0 and 1. Lane and work-group come from %laneid inside the asm: with them as
 * operands (or a branch around the call) ptxas serialised the wgmma pipeline (C7515) in the local check. */
static inline void
wb_arrive_pair(uint bar)
{
    TC_ASM volatile("//TLPTX {\n"
                    "//TLPTX .reg .b32 ra, ln;\n"
                    "//TLPTX .reg .pred p;\n"
                    "//TLPTX mov.u32 ln, %%laneid;\n"
                    "//TLPTX setp.lt.u32 p, ln, 2;\n"
                    "//TLPTX and.b32 ln, ln, 1;\n"
                    "//TLPTX mapa.shared::cluster.u32 ra, %0, ln;\n"
                    "//TLPTX @p mbarrier.arrive.shared::cluster.b64 _, [ra];\n"
                    "//TLPTX }\n" ::"r"(bar) : "memory");
}

static inline void
wb_init_fence(void)
{
    TC_ASM volatile("//TLPTX fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

static inline void
wb_cluster_sync(void)                                   /* every work-item of both work-groups */
{
    TC_ASM volatile("//TLPTX barrier.cluster.arrive;\n"
                    "//TLPTX barrier.cluster.wait;\n" ::: "memory");
}
#endif

/* The float32 build's kernels end in the store epilogue's arguments (mm_epi.h: scale, bias, residual,
 * ReLU/Tanh as they store C; gemm_tc.c's packed_product sets them, epi 0 when split in K); the 16-bit
 * builds, whose C is bfloat16 / float16, have none. */
#if WG_HALF
#define WB_EPI_ARGS
#else
#define WB_EPI_ARGS , MM_EPI_ARGS
#endif

#define WG_TAG 128x128x8s5
#define WG_BM 128
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 5
#include "matmul_wgb.h"

#define WG_TAG 64x128x16s3
#define WG_BM 64
#define WG_BN 128
#define WG_BK 16
#define WG_STAGES 3
#include "matmul_wgb.h"

#ifdef TC_SWEEP
#define WG_TAG 128x128x16s2
#define WG_BM 128
#define WG_BN 128
#define WG_BK 16
#define WG_STAGES 2
#include "matmul_wgb.h"

#define WG_TAG 128x64x16s3
#define WG_BM 128
#define WG_BN 64
#define WG_BK 16
#define WG_STAGES 3
#include "matmul_wgb.h"

#define WG_TAG 256x128x8s3
#define WG_BM 256
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 3
#include "matmul_wgb.h"

#define WG_TAG 128x256x8s3
#define WG_BM 128
#define WG_BN 256
#define WG_BK 8
#define WG_STAGES 3
#include "matmul_wgb.h"

#define WG_TAG 128x128x16s2
#define WG_BM 128
#define WG_BN 128
#define WG_BK 16
#define WG_STAGES 2
#define WB_PAIR 1
#include "matmul_wgb.h"

#define WG_TAG 128x128x8s5
#define WG_BM 128
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 5
#define WB_PAIR 1
#include "matmul_wgb.h"

#define WG_TAG 256x128x8s3
#define WG_BM 256
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 3
#define WB_PAIR 1
#include "matmul_wgb.h"
#endif
