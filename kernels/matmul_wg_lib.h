/* matmul_wg_lib.h: what the wgmma families share (matmul_wg.cl: cp.async staging; matmul_wgb.cl: packed
 * operands and bulk copies): the chunk swizzle, matrix descriptors, group commits, the proxy fence,
 * mbarriers, the emulation of a wgmma group (TC_EMULATE) and the accumulator store. matmul_wg.cl's banner
 * describes the layout. */
#ifndef TL_MATMUL_WG_LIB_H
#define TL_MATMUL_WG_LIB_H

#include "matmul_tc_lib.h"
#if !TC_EMULATE
#include "matmul_wg_asm.h"
#endif

#ifndef WG_RNA
#define WG_RNA 0
#endif
/* WG_HALF (matmul_wgb.cl's 16-bit builds, families matmul_wgb_bf16 / matmul_wgb_f16): 1 bfloat16, 2 float16
 * operands, two to a 4-byte word along k (the lower k in the low half), so a tile row of WG_BK words holds
 * 2 WG_BK values and the byte layout, the swizzle and the descriptors stay the TF32 ones; wgmma m64nNk16
 * reads the 32 bytes one m64nNk8 TF32 instruction read. The result is stored in the operands' dtype. */
#ifndef WG_HALF
#define WG_HALF 0
#endif
#define WG_CAT_(a, b) a##b
#define WG_CAT(a, b) WG_CAT_(a, b)
#if WG_HALF == 1
#include "dtype.h"
#define WG_DT _bf16
#define WG_MMA WG_CAT(wg_mma_bf16_n, WG_BN)
#elif WG_HALF == 2
#define WG_DT _f16
#define WG_MMA WG_CAT(wg_mma_f16_n, WG_BN)
#else
#define WG_DT _f32
/* The wgmma wrappers (matmul_wg_asm.h) for the including configuration's width WG_BN, at each use. */
#define WG_MMA WG_CAT(wg_mma_n, WG_BN)
#endif
#define WG_FENCE WG_CAT(wg_fence_n, WG_BN)
#define WG_WAIT0 WG_CAT(wg_wait0_n, WG_BN)
#define WG_WAIT1 WG_CAT(wg_wait1_n, WG_BN)
#define WG_WAIT2 WG_CAT(wg_wait2_n, WG_BN)
/* One k-tile's wgmma group on the tiles of descriptors da, db (WG_BK / 8 instructions, +32 bytes along k
 * each), then a wait until at most `depth` groups (1 or 2) are still queued: the previous tile's group (or
 * the one before) is done, and one or two groups always stay queued. */
#define WG_GROUP_DEPTH(d, da, db, depth)                                                            \
    do {                                                                                            \
        WG_FENCE(d);                                                                                \
        _Pragma("unroll") for (int kk_ = 0; kk_ < WG_BK / 8; kk_++) WG_MMA(d, (da) + 2 * kk_, (db) + 2 * kk_); \
        wg_commit();                                                                                \
        if ((depth) == 2) WG_WAIT2(d); else WG_WAIT1(d);                                           \
    } while (0)
#define WG_GROUP(d, da, db) WG_GROUP_DEPTH(d, da, db, 1)

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

/* mbarriers in local memory (shared-window address bar), for matmul_wgb.h's producer and consumer warps */
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
#else
static inline void
wg_proxy_fence(void)
{
}

#define wg_wait0_n64(d) ((void)0)
#define wg_wait0_n128(d) ((void)0)
#define wg_wait0_n256(d) ((void)0)

#if WG_HALF
/* Value h (0 or 1: the low or high half) of a packed word, widened exactly. */
static inline float
wg_half(float w, int h)
{
    const uint u = as_uint(w) >> (16 * h) & 0xffffu;
#if WG_HALF == 1
    return as_float(u << 16);
#else
    const ushort v = (ushort)u;
    return vload_half(0, (const half *)&v);
#endif
}
#endif

/* What one tile's wgmma group adds to work-item t (0-127) of a warpgroup: rows 16(t/32) + (t%32)/4 (+ 8)
 * of the warpgroup's 64, columns 8j + 2(t%4) (+ 1), summed over the tile's k from the swizzled rows (for
 * WG_HALF, both values of each word). */
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
#if WG_HALF
                s += wg_half(x, 0) * wg_half(y, 0) + wg_half(x, 1) * wg_half(y, 1);
#else
                s += as_float(tc_tf32(x) & 0xffffe000u) * as_float(tc_tf32(y) & 0xffffe000u);
#endif
            }
            d[4 * j + o] = s;
        }
    }
}
#endif

/* An accumulator stored at C[i] in C's type: float, or (WG_HALF) the 16-bit pattern rounded to nearest even
 * (bfloat16: kernels/dtype.h's tl_bf16_bits; float16: vstore_half_rte); and two of them at an even i as one word. */
#if WG_HALF == 1
#define WG_CT ushort
#define WG_ST(i, v) (C[i] = tl_bf16_bits(v))
#define WG_ST2(i, v0, v1) (*(global uint *)(C + (i)) = (uint)tl_bf16_bits(v0) | (uint)tl_bf16_bits(v1) << 16)
#elif WG_HALF == 2
#define WG_CT ushort
#define WG_ST(i, v) vstore_half_rte((v), (i), (global half *)C)
#define WG_ST2(i, v0, v1) vstore_half2_rte((float2)((v0), (v1)), (i) / 2, (global half *)C)
#else
#define WG_CT float
#define WG_ST(i, v) (C[i] = (v))
#define WG_ST2(i, v0, v1) (C[i] = (v0), C[(i) + 1] = (v1))       /* C may be 4-byte aligned only */
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
                const int i_ = (r_ + 8 * h_) * N + c_;                                              \
                if (r_ + 8 * h_ >= M) continue;                                                     \
                if (c_ + 1 < N && (i_ & 1) == 0) {                                                  \
                    WG_ST2(i_, (d)[4 * j_ + 2 * h_], (d)[4 * j_ + 2 * h_ + 1]);                     \
                } else {                                                                            \
                    if (c_ < N) WG_ST(i_, (d)[4 * j_ + 2 * h_]);                                    \
                    if (c_ + 1 < N) WG_ST(i_ + 1, (d)[4 * j_ + 2 * h_ + 1]);                        \
                }                                                                                   \
            }                                                                                       \
        }                                                                                           \
    } while (0)

#if !WG_HALF
/* WG_STORE through the store epilogue (mm_epi.h: the kernel's MM_EPI_ARGS, resid shifted to the batch),
 * element by element; the kernels take it when epi != 0 (a uniform branch), so the plain store stays as
 * it was. The 16-bit builds have no epilogue arguments. */
#define WG_STORE_EPI(d, m0, n0, tid)                                                                \
    do {                                                                                            \
        const int lane_ = (tid) % 32, r_ = (m0) + (tid) / 128 * 64 + ((tid) % 128) / 32 * 16 + lane_ / 4; \
        _Pragma("unroll") for (int j_ = 0; j_ < WG_BN / 8; j_++) {                                  \
            const int c_ = (n0) + 8 * j_ + 2 * (lane_ % 4);                                         \
            for (int h_ = 0; h_ < 2; h_++) {                                                        \
                const int i_ = (r_ + 8 * h_) * N + c_;                                              \
                if (r_ + 8 * h_ >= M) continue;                                                     \
                if (c_ < N) C[i_] = MM_EPI((d)[4 * j_ + 2 * h_], c_, i_);                           \
                if (c_ + 1 < N) C[i_ + 1] = MM_EPI((d)[4 * j_ + 2 * h_ + 1], c_ + 1, i_ + 1);       \
            }                                                                                       \
        }                                                                                           \
    } while (0)
#endif

#endif
