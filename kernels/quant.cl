/* quant.cl: q4_0 weights (llama.cpp's format, stored "flat" as ggml's _flat kernels do): a matrix W of
 * N rows x K columns (K a multiple of 32) is nb = K/32 blocks per row; block (n, b) has an fp16 scale
 * d[n*nb + b] (read with vload_half, which needs no cl_khr_fp16) and 16 bytes of nibbles, the words
 * qs[(n*nb + b)*4 + i], i < 4, little-endian: byte j holds element j in its low nibble and element j+16
 * in its high one; the value is d * (q - 8). The scales and the nibbles live in two arrays so every
 * load is aligned and neighbouring work-items read neighbouring words.
 * q8_0 (llama.cpp's block_q8_0) is stored the same way: an fp16 scale per block in d and 32 int8 (8 words)
 * in qs[(n*nb + b)*8 + i]; the value is d * q.
 *  - dequantize / get_rows: one work-item per block (32 outputs).
 *  - mul_mv (y[r, n] = x[r, :] . W[n, :], R <= 8 rows of x): GPU, one work-group per 4 or 8 rows, each
 *    work-item a quarter block (one word) per step for all R rows (a whole block per lane left most lanes
 *    idle at K = 2048: 64 blocks for 256 lanes), then mv_reduce; CPU, one work-item per
 *    MV_NR rows with 16-wide vectors, no barriers. Either reads each weight byte once per launch. */
#include "mv_reduce.h"

#define MV_NR 4

inline void
unpack(uint w, float4 *lo, float4 *hi)              /* word i: elements 4i..4i+3 and 16+4i..16+4i+3 */
{
    uint4 b = (uint4)(w, w >> 8, w >> 16, w >> 24);
    *lo = convert_float4(b & 0xFu) - 8.0f;
    *hi = convert_float4((b >> 4) & 0xFu) - 8.0f;
}

inline void
unpack8(uint2 w, float4 *lo, float4 *hi)            /* q8_0: 8 int8 weights, little-endian */
{
    *lo = convert_float4(as_char4(w.x));
    *hi = convert_float4(as_char4(w.y));
}

/* Block blk of a q4_0 matrix, scaled, into y[0..31]. */
inline void
deq_block_q4_0(global const uint *qs, global const half *d, int blk, global float *y)
{
    const float s = vload_half(blk, d);
    const uint4 w = vload4(blk, qs);
    float4 lo, hi;
    unpack(w.x, &lo, &hi); vstore4(lo * s, 0, y); vstore4(hi * s, 4, y);
    unpack(w.y, &lo, &hi); vstore4(lo * s, 1, y); vstore4(hi * s, 5, y);
    unpack(w.z, &lo, &hi); vstore4(lo * s, 2, y); vstore4(hi * s, 6, y);
    unpack(w.w, &lo, &hi); vstore4(lo * s, 3, y); vstore4(hi * s, 7, y);
}

/* Per format (deq_block_<fmt>): dequantize, one work-item per block (32 outputs); get_rows, out[i, :] =
 * W[ids[i], :] (or W[id0, :] when has_ids is 0: one id as an int, no upload), one work-item per (i, block),
 * an id outside [0, N) giving a row of NaN. */
#define DEQ_KERNELS(FMT)                                                                                      \
kernel void                                                                                               \
tl_dequantize_##FMT##_f32(int nblocks, global const uint *qs, global const half *d, global float *y)          \
{                                                                                                         \
    const int g = get_global_id(0);                                                                       \
    if (g < nblocks) deq_block_##FMT(qs, d, g, y + g * 32);                                               \
}                                                                                                         \
                                                                                                          \
kernel void                                                                                               \
tl_get_rows_##FMT##_f32(int n, int N, int nb, global const int *ids, int offi, int has_ids, int id0,          \
                        global const uint *qs, global const half *d, global float *y)                     \
{                                                                                                         \
    const int g = get_global_id(0);                                                                       \
    if (g >= n * nb) return;                                                                              \
    const int i = g / nb, b = g - i * nb, id = has_ids ? ids[offi + i] : id0;                             \
    y += g * 32;                                                                                          \
    if (id < 0 || id >= N) {                         /* a bad id must not pass unseen: NaN, not zeros */  \
        for (int j = 0; j < 8; j++) vstore4((float4)NAN, j, y);                                           \
        return;                                                                                           \
    }                                                                                                     \
    deq_block_##FMT(qs, d, id * nb + b, y);                                                               \
}
DEQ_KERNELS(q4_0)

/* GPU: x (R, K) at offx with row stride sx; y (R, N) contiguous (plus res, laid out like y, when has_res); red: L * (NR * RR + 1) floats. NR weight
 * rows per work-group: 4, or 8 from 4 activation rows up (every group re-reads all of x from cache; 16
 * rows starved the GPU of work-groups in decode, where N is small). One kernel per
 * padded row count RR in {1, 2, 4, 8}: compile-time bounds keep the accumulators in registers; rows >= R
 * re-read row R-1 and are not stored. */
#define MVQ_KERNEL(FMT, RR, NR)                                                                               \
kernel void                                                                                               \
tl_mul_mv_##FMT##_r##RR##_f32(int N, int K, int R, global const float *x, int offx, int sx,                   \
                           global const uint *qs, global const half *d, global float *y,                  \
                           global const float *res, int offr, int has_res, local float *red)              \
{                                                                                                         \
    const int L = get_local_size(0), lid = get_local_id(0), n0 = get_group_id(0) * NR, nb = K / 32;    \
    const global float *xr[RR];                                                                           \
    float acc[NR][RR];                                                                                 \
    for (int r = 0; r < RR; r++) xr[r] = x + offx + min(r, R - 1) * sx;                                   \
    for (int j = 0; j < NR; j++)                                                                       \
        for (int r = 0; r < RR; r++) acc[j][r] = 0.0f;                                                    \
    for (int u = lid; u < nb * 4; u += L) {          /* a quarter block (one word, 8 weights) per lane */ \
        const int b = u >> 2, qq = u & 3;                                                                 \
        float4 xl[RR], xh[RR];                                                                            \
        for (int r = 0; r < RR; r++) {                                                                    \
            xl[r] = vload4(XLO_##FMT(qq), xr[r] + b * 32);                                                \
            xh[r] = vload4(XHI_##FMT(qq), xr[r] + b * 32);                                                \
        }                                                                                                 \
        for (int j = 0; j < NR; j++) {                                                                 \
            const int blk = min(n0 + j, N - 1) * nb + b;      /* an edge row repeats the last; not stored */ \
            const float s = vload_half(blk, d);                                                           \
            float4 lo, hi;                                                                                \
            LOAD_##FMT(qs, blk, qq, &lo, &hi);                                                            \
            lo *= s;                                                                                      \
            hi *= s;                                                                                      \
            for (int r = 0; r < RR; r++) acc[j][r] += dot(lo, xl[r]) + dot(hi, xh[r]);                    \
        }                                                                                                 \
    }                                                                                                     \
    MV_FINISH(acc, NR, RR, MVQ_STORE);                                                                    \
}
#define MVQ_STORE(j, r, t) (y[(r) * N + n0 + (j)] = has_res ? (t) + res[offr + (r) * N + n0 + (j)] : (t))
/* Per format: a quarter block qq (8 weights) as two float4 (lo, hi) and the float4 indices of x they meet.
 * q4_0: word qq holds elements 4qq..4qq+3 (low nibbles) and 16+4qq.. (high); q8_0: words 2qq and 2qq+1
 * hold elements 8qq..8qq+7 as int8. */
#define XLO_q4_0(qq) (qq)
#define XHI_q4_0(qq) ((qq) + 4)
#define LOAD_q4_0(qs, blk, qq, lo, hi) unpack((qs)[(blk) * 4 + (qq)], lo, hi)
#define XLO_q8_0(qq) (2 * (qq))
#define XHI_q8_0(qq) (2 * (qq) + 1)
#define LOAD_q8_0(qs, blk, qq, lo, hi) unpack8(vload2((blk) * 4 + (qq), qs), lo, hi)

MVQ_KERNEL(q4_0, 1, 4)
MVQ_KERNEL(q4_0, 2, 4)
MVQ_KERNEL(q4_0, 4, 8)
MVQ_KERNEL(q4_0, 8, 8)
MVQ_KERNEL(q8_0, 1, 4)
MVQ_KERNEL(q8_0, 2, 4)
MVQ_KERNEL(q8_0, 4, 8)
MVQ_KERNEL(q8_0, 8, 8)

/* CPU: one work-item per MV_NR rows of W and two rows of x (global (ceil(N/MV_NR), ceil(R/2))), so each
 * block is unpacked once for two activation rows; no barriers. ROWS_BLOCK_<fmt> unpacks block blk, scaled,
 * into its elements 0-15 (lo) and 16-31 (hi). */
#define ROWS_BLOCK_q4_0(qs, blk, s, lo, hi)                                                                   \
    const uchar16 q = as_uchar16(vload4(blk, qs));                                                            \
    const float16 lo = (convert_float16(q & (uchar)0xF) - 8.0f) * s, hi = (convert_float16(q >> (uchar)4) - 8.0f) * s
#define ROWS_BLOCK_q8_0(qs, blk, s, lo, hi)                                                                   \
    const float16 lo = convert_float16(as_char16(vload4(2 * (blk), qs))) * s;                                 \
    const float16 hi = convert_float16(as_char16(vload4(2 * (blk) + 1, qs))) * s
#define MVQ_ROWS_KERNEL(FMT)                                                                                  \
kernel void                                                                                               \
tl_mul_mv_##FMT##_rows_f32(int N, int K, int R, global const float *x, int offx, int sx,                   \
                           global const uint *qs, global const half *d, global float *y,                  \
                           global const float *res, int offr, int has_res)                                \
{                                                                                                         \
    const int n0 = get_global_id(0) * MV_NR, r0 = get_global_id(1) * 2, nb = K / 32;                      \
    if (n0 >= N || r0 >= R) return;                                                                       \
    const int r1 = min(r0 + 1, R - 1);                                                                    \
    const global float *x0 = x + offx + r0 * sx, *x1 = x + offx + r1 * sx;                                \
    float16 a0[MV_NR], a1[MV_NR];                                                                         \
    for (int j = 0; j < MV_NR; j++) a0[j] = a1[j] = (float16)0.0f;                                       \
    for (int b = 0; b < nb; b++) {                                                                        \
        const float16 xl0 = vload16(0, x0 + b * 32), xh0 = vload16(1, x0 + b * 32);                      \
        const float16 xl1 = vload16(0, x1 + b * 32), xh1 = vload16(1, x1 + b * 32);                      \
        for (int j = 0; j < MV_NR; j++) {                                                                 \
            const int blk = min(n0 + j, N - 1) * nb + b;                                                  \
            const float16 s = (float16)vload_half(blk, d);                                                \
            ROWS_BLOCK_##FMT(qs, blk, s, lo, hi);                                                         \
            a0[j] = mad(lo, xl0, mad(hi, xh0, a0[j]));                                                    \
            if (r1 != r0) a1[j] = mad(lo, xl1, mad(hi, xh1, a1[j]));   /* uniform: an odd last row */     \
        }                                                                                                 \
    }                                                                                                     \
    for (int j = 0; j < MV_NR && n0 + j < N; j++) {                                                       \
        float8 h8 = a0[j].lo + a0[j].hi;                                                                  \
        float4 h = h8.lo + h8.hi;                                                                         \
        y[r0 * N + n0 + j] = (h.x + h.y) + (h.z + h.w) + (has_res ? res[offr + r0 * N + n0 + j] : 0.0f);   \
        h8 = a1[j].lo + a1[j].hi;                                                                         \
        h = h8.lo + h8.hi;                                                                                \
        if (r1 != r0)                                                                                     \
            y[r1 * N + n0 + j] = (h.x + h.y) + (h.z + h.w) + (has_res ? res[offr + r1 * N + n0 + j] : 0.0f); \
    }                                                                                                     \
}
MVQ_ROWS_KERNEL(q4_0)

/* q8_0: dequantize, get_rows and the per-row (CPU) mul_mv, from the macros above. */
inline void
deq_block_q8_0(global const uint *qs, global const half *d, int blk, global float *y)
{
    const float s = vload_half(blk, d);
    vstore16(convert_float16(as_char16(vload4(2 * blk, qs))) * s, 0, y);
    vstore16(convert_float16(as_char16(vload4(2 * blk + 1, qs))) * s, 1, y);
}

DEQ_KERNELS(q8_0)

MVQ_ROWS_KERNEL(q8_0)

#include "quant_mvq.h"
#include "quant_mvx.h"
