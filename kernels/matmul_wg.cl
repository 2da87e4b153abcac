/* matmul_wg.cl: TF32 GEMM on Hopper's warpgroup tensor cores (wgmma.mma_async, sm_90a), for
 * tlgpu.set_matmul_precision("high") on devices of compute capability 9.0: C[b] = A[b] @ B[b] with the
 * arguments of matmul.cl's tl_gemm_f32, for the layout whose operands both run along k (x @ w.T: A with
 * sAk == 1, B with sBk == 1), since wgmma reads TF32 operands only K-major; csrc/gemm_tc.c gives other
 * layouts a K-major copy first (tl_wg_transpose_f32 below).
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
 *    behind the marker //TLPTX (matmul_wg_asm.h); csrc/ptx_patch.c turns the markers into instructions
 *    and retargets the PTX to sm_90a, and the driver builds that (programs.c, for any program whose PTX has the marker).
 *  - TC_EMULATE=1 (tests, any device): plain copies, and each work-item computes its accumulators from
 *    the swizzled local tiles as the descriptors describe them, so the tiling, the swizzle and the
 *    fragment layout run on PoCL.
 * Local memory, stages x (BM + BN) x BK x 4 bytes, at most 48 KiB (OpenCL's limit on NVIDIA). */

#include "matmul_tc_lib.h"
#if !TC_EMULATE
#include "matmul_wg_asm.h"
#endif

#ifndef WG_RNA
#define WG_RNA 0
#endif
#define WG_CAT_(a, b) a##b
#define WG_CAT(a, b) WG_CAT_(a, b)

/* The chunk swizzle of a row for a swizzle width of sw bytes (the row's length). */
static inline int
wg_swz(int r, int sw)
{
    return ((r * sw) >> 7) & (sw / 16 - 1);
}

#if !TC_EMULATE
/* The matrix descriptor of a K-major tile at p: start address >> 4, leading offset 1 (unused when the
 * swizzle spans the k extent), stride offset 8 rows, swizzle mode 1 (128 B), 2 (64 B) or 3 (32 B). */
static inline ulong
wg_desc(local const float *p, int sw)
{
    const ulong mode = sw == 128 ? 1 : sw == 64 ? 2 : 3;
    return (ulong)((tc_saddr(p) & 0x3FFFF) >> 4) | (1ul << 16) | ((ulong)(8 * sw >> 4) << 32) | (mode << 62);
}

static inline void
wg_commit(void)
{
    TC_ASM volatile("//TLPTX wgmma.commit_group.sync.aligned;\n" ::: "memory");
}

static inline void
wg_proxy_fence(void)
{
    TC_ASM volatile("//TLPTX fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* mbarriers in local memory (shared-window address bar), for matmul_wgp.h's producer and consumer warps */
static inline void
wg_bar_init(uint bar, int count)
{
    TC_ASM volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

static inline void
wg_bar_wait(uint bar, uint parity)                  /* until the phase of that parity has completed */
{
    uint done;
    do {
        TC_ASM volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                        : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

static inline void
wg_bar_arrive(uint bar)
{
    TC_ASM volatile("{ .reg .b64 st; mbarrier.arrive.shared::cta.b64 st, [%0]; }" ::"r"(bar) : "memory");
}

static inline void
wg_bar_arrive_copies(uint bar)                      /* once this work-item's cp.async copies have landed */
{
    TC_ASM volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}
#else
static inline void
wg_proxy_fence(void)
{
}

#define wg_wait0_n64(d) ((void)0)
#define wg_wait0_n128(d) ((void)0)
#define wg_wait0_n256(d) ((void)0)

/* What one tile's wgmma group adds to work-item t (0-127) of a warpgroup: rows 16(t/32) + (t%32)/4 (+ 8)
 * of the warpgroup's 64, columns 8j + 2(t%4) (+ 1), summed over the tile's k from the swizzled rows. */
static inline void
wg_mma_emu(float *d, local const float *as, local const float *bs, const int bn, const int bk, const int sw, int t)
{
    const int r = (t / 32) * 16 + (t % 32) / 4;
    for (int j = 0; j < bn / 8; j++) {
        for (int o = 0; o < 4; o++) {
            const int m = r + 8 * (o >> 1), n = 8 * j + 2 * (t % 4) + (o & 1);
            float s = d[4 * j + o];
            for (int k = 0; k < bk; k++) {
                const float x = as[m * bk + 4 * ((k / 4) ^ wg_swz(m, sw)) + k % 4];
                const float y = bs[n * bk + 4 * ((k / 4) ^ wg_swz(n, sw)) + k % 4];
                s += as_float(tc_tf32(x) & 0xffffe000u) * as_float(tc_tf32(y) & 0xffffe000u);
            }
            d[4 * j + o] = s;
        }
    }
}
#endif

/* Stores a warpgroup's accumulators (a macro: WG_BN stays a compile-time constant, so d stays in registers):
 * work-item (warp w, lane l) of warpgroup tid / 128 holds rows 16w + l/4 (+ 8) and columns 8j + 2(l%4) (+ 1)
 * of the tile at (m0, n0); past M or N nothing is stored. */
#define WG_STORE(d, m0, n0, tid)                                                                    \
    do {                                                                                            \
        const int lane_ = (tid) % 32, r_ = (m0) + (tid) / 128 * 64 + ((tid) % 128) / 32 * 16 + lane_ / 4; \
        _Pragma("unroll") for (int j_ = 0; j_ < WG_BN / 8; j_++) {                                  \
            const int c_ = (n0) + 8 * j_ + 2 * (lane_ % 4);                                         \
            for (int h_ = 0; h_ < 2; h_++) {                                                        \
                if (r_ + 8 * h_ >= M) continue;                                                     \
                if (c_ < N) C[(r_ + 8 * h_) * N + c_] = (d)[4 * j_ + 2 * h_];                       \
                if (c_ + 1 < N) C[(r_ + 8 * h_) * N + c_ + 1] = (d)[4 * j_ + 2 * h_ + 1];           \
            }                                                                                       \
        }                                                                                           \
    } while (0)

/* Y[b] = X[b]^T, Y contiguous [C, R] per batch, X [R, C] at (offX + b * sXb + r * sXr + c * sXc): the
 * K-major copy of an operand that runs along m or n (csrc/gemm_tc.c, before a @ b or a gradient goes to
 * the wgmma rows). 32 x 32 tiles through local memory (rows padded by 1), 32 x 8 work-items. */
kernel __attribute__((reqd_work_group_size(32, 8, 1))) void
tl_wg_transpose_f32(int R, int C, global const float *X, int offX, int sXb, int sXr, int sXc, global float *Y)
{
    local float t[32][33];
    const int lx = get_local_id(0), ly = get_local_id(1), c0 = get_group_id(0) * 32, r0 = get_group_id(1) * 32;
    const int b = get_global_id(2);
    X += offX + b * sXb;
    Y += (size_t)b * R * C;
    for (int j = ly; j < 32; j += 8)
        t[j][lx] = r0 + j < R && c0 + lx < C ? X[(r0 + j) * sXr + (c0 + lx) * sXc] : 0.0f;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = ly; j < 32; j += 8)
        if (c0 + j < C && r0 + lx < R) Y[(size_t)(c0 + j) * R + r0 + lx] = t[lx][j];
}

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
#if !TC_EMULATE      /* producer and consumer warps (matmul_wgp.h): never emulated */
#define WG_TAG 128x128x16s2p
#define WG_BM 128
#define WG_BN 128
#define WG_BK 16
#define WG_STAGES 2
#define WG_PW 1
#include "matmul_wgp.h"

#define WG_TAG 128x128x16s2p4
#define WG_BM 128
#define WG_BN 128
#define WG_BK 16
#define WG_STAGES 2
#define WG_PW 4
#include "matmul_wgp.h"

#define WG_TAG 128x128x8s5p
#define WG_BM 128
#define WG_BN 128
#define WG_BK 8
#define WG_STAGES 5
#define WG_PW 1
#include "matmul_wgp.h"

#define WG_TAG 64x128x16s3p
#define WG_BM 64
#define WG_BN 128
#define WG_BK 16
#define WG_STAGES 3
#define WG_PW 1
#include "matmul_wgp.h"

#define WG_TAG 128x64x16s3p
#define WG_BM 128
#define WG_BN 64
#define WG_BK 16
#define WG_STAGES 3
#define WG_PW 1
#include "matmul_wgp.h"
#endif
#endif
