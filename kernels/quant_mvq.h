/* quant_mvq.h (included by quant.cl): the one-launch integer-dot matrix-vector product of q4_0 / q8_0 weights,
 * after llama.cpp's CUDA mmvq (activations as int8 blocks of 32 with a float scale, "q8_1"; 4-byte integer dot
 * products; a warp reduction); the decode kernel (impl "dp4a"): no launch besides its own. quant_mvx.h has
 * the two-launch form for big products. y[r, n] = p(x)[r, :] . W[n, :] for R <= 8 rows, p the prologue.
 *  - A work-group of L = 32 W lanes owns NR = W * MVQ_NRW weight rows: warp w the MVQ_NRW rows
 *    n0 + w * MVQ_NRW + j, all of them at once (each x block loaded from local memory serves MVQ_NRW rows).
 *  - x is staged chunk by chunk (KC columns, the host's choice: K itself, or a multiple of 1024 so a lane
 *    meets the blocks it would meet unchunked; local memory holds R * KC bytes): 8 neighbouring lanes take
 *    one block of 32 (a float4 each: a warp reads 512 contiguous bytes), agree on its amax (lanes8_max),
 *    and store their 4 int8 q = rint(v / dx), dx = amax / 127, as one word of two planes (elements 0-15 and
 *    16-31; a lane's 16-byte read of either plane meets no bank conflict), plus (dx, sum q) per block. The
 *    prologue runs there: glu (x has 2K columns; v = silu(x[:K]) * x[K:]) and then norm (v *= rsqrt(mean(v^2)
 *    + eps) * nw, the mean from a first pass over the row, mvq_ss_part's order).
 *  - Lane l of a warp takes blocks l, l + 32, ... of its rows: one 16-byte (q4_0) or two (q8_0) loads of
 *    quants per row and block, 512 / 1024 contiguous bytes a warp; 8 dot4 per block and activation row,
 *    then acc += dw * dx * (sumi - 8 sum q) (q4_0's offset folded in as an integer) or dw * dx * sumi.
 *  - The end: MVQ_FINISH (quant_mvq_lib.h). */
#include "quant_mvq_lib.h"

#define MVQ_NRW 4                                    /* weight rows per warp; ops_quant.c knows it */

/* Local buffers (sizes from ops_quant.c): xq R * KC bytes, xsc R * KC / 4 bytes, red (floats) at least
 * soff + RR (soff = max(L, 32 RR); red[soff + r] keeps row r's norm scale) and, without TL_NV_PTX,
 * (MVQ_NRW * RR + 1) * L. */
#define MVQ_DP4A_KERNEL(FMT, RR)                                                                              \
kernel void                                                                                               \
tl_mvq_##FMT##_r##RR##_f32(int N, int K, int R, global const float *x, int offx, int sx,                      \
                           global const uint4 *qs4, global const half *d, global float *y,                \
                           global const float *res, int offr, int has_res, global const float *nw,         \
                           int has_norm, float eps, int glu, int KC, local uint4 *xq, local int2 *xsc,     \
                           local float *red)                                                               \
{                                                                                                         \
    const int L = get_local_size(0), lid = get_local_id(0), lane = lid & 31, nb = K / 32;                 \
    const int nw0 = get_group_id(0) * (L / 32) * MVQ_NRW + (lid >> 5) * MVQ_NRW, soff = max(L, 32 * RR);  \
    float acc[MVQ_NRW][RR];                                                                               \
    MVQ_UNROLL                                                                                            \
    for (int j = 0; j < MVQ_NRW; j++)                                                                     \
        MVQ_UNROLL                                                                                        \
        for (int r = 0; r < RR; r++) acc[j][r] = 0.0f;                                                    \
    for (int t = lid; t < R * 32; t += L)            /* red[soff + r]: row r's norm scale (no barrier */   \
        red[t] = has_norm ? mvq_ss_part(x + offx + (t >> 5) * sx, K, glu, t & 31) : 0.0f; /* in a branch) */ \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                         \
    if (lid < R) {                                                                                        \
        float tot = 0.0f;                                                                                 \
        for (int i = 0; i < 32; i++) tot += red[lid * 32 + i];                                            \
        red[soff + lid] = rsqrt(tot / (float)K + eps);                                                    \
    }                                                                                                     \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                         \
    for (int c0 = 0; c0 < K; c0 += KC) {                                                                  \
        const int nbc = min(KC, K - c0) / 32, plane = R * nbc, gb0 = c0 / 32;                             \
        MVQ_STAGE();                                                                                      \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                     \
        for (int b = lane; b < nbc; b += 32)                                                              \
            MVQ_ROWS(FMT, MVQ_NRW, RR, gb0 + b, xq, xsc, MVQ_XT_LOCAL, plane);                             \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                     \
    }                                                                                                     \
    MVQ_FINISH(MVQ_NRW, RR);                                                                              \
}
#define MVQ_XT_LOCAL(r) (min((r), R - 1) * nbc + b)

/* Stages blocks t < R * nbc (row t / nbc) of the chunk at column c0: words of xq's two planes (plane words
 * apart) and xsc[t] = (dx bits, sum q). MVQ_STAGE8 (the default on NVIDIA; -DMVQ_STAGE8=1 runs it on PoCL in a
 * test): 8 lanes a block, a group-uniform loop (lanes8_* hold shuffles or barriers); else a lane a block (no
 * barrier inside a loop: PoCL builds such kernels several times slower). Either gives the same values. */
#ifndef MVQ_STAGE8
#define MVQ_STAGE8 TL_NV_PTX
#endif
#if MVQ_STAGE8
#define MVQ_STAGE()                                                                                           \
    for (int u0 = 0; u0 < R * nbc * 8; u0 += L) {   /* group-uniform: lanes8_* take every lane */        \
        const int u = u0 + lid, t = u >> 3, p = u & 7, r = t / nbc, k = c0 + (t - r * nbc) * 32 + 4 * p;     \
        const int in = u < R * nbc * 8;                                                                       \
        float4 v = (float4)0.0f;                                                                              \
        if (in) {                                                                                             \
            v = mvq_load4(x + offx + r * sx, k, K, glu);                                                      \
            if (has_norm) v *= red[soff + r] * vload4(0, nw + k);                                             \
        }                                                                                                     \
        const float amax = lanes8_max(max4(v), red);                                                          \
        int qs;                                                                                               \
        const uint word = mvq_quant4(v, amax, &qs);                                                           \
        qs = lanes8_sum(qs, red);                                                                             \
        if (in) {                                                                                             \
            ((local uint *)xq)[(p >> 2) * plane * 4 + t * 4 + (p & 3)] = word;                                \
            if (p == 0) xsc[t] = (int2)(as_int(amax / 127.0f), qs);                                           \
        }                                                                                                     \
    }
#else
#define MVQ_STAGE()                                                                                           \
    for (int t = lid; t < R * nbc; t += L) {                                                                  \
        const int r = t / nbc, k0 = c0 + (t - r * nbc) * 32;                                                  \
        float4 v[8];                                                                                          \
        float amax = 0.0f;                                                                                    \
        MVQ_UNROLL                                                                                            \
        for (int p = 0; p < 8; p++) {                                                                         \
            v[p] = mvq_load4(x + offx + r * sx, k0 + 4 * p, K, glu);                                          \
            if (has_norm) v[p] *= red[soff + r] * vload4(0, nw + k0 + 4 * p);                                 \
            amax = fmax(amax, max4(v[p]));                                                                    \
        }                                                                                                     \
        int qsum = 0;                                                                                         \
        MVQ_UNROLL                                                                                            \
        for (int p = 0; p < 8; p++) {                                                                         \
            int qs;                                                                                           \
            ((local uint *)xq)[(p >> 2) * plane * 4 + t * 4 + (p & 3)] = mvq_quant4(v[p], amax, &qs);         \
            qsum += qs;                                                                                       \
        }                                                                                                     \
        xsc[t] = (int2)(as_int(amax / 127.0f), qsum);                                                         \
    }
#endif

MVQ_DP4A_KERNEL(q4_0, 1)
MVQ_DP4A_KERNEL(q4_0, 2)
MVQ_DP4A_KERNEL(q4_0, 4)
MVQ_DP4A_KERNEL(q4_0, 8)
MVQ_DP4A_KERNEL(q8_0, 1)
MVQ_DP4A_KERNEL(q8_0, 2)
MVQ_DP4A_KERNEL(q8_0, 4)
MVQ_DP4A_KERNEL(q8_0, 8)

/* The prologue alone (before the per-row CPU kernels and the old GPU ones): out (R, K) contiguous = glu
 * and/or rms_norm of x's rows, one work-group (L lanes, a power of two; red L floats) per row. */
kernel void
tl_mvq_prologue_f32(int K, global const float *x, int offx, int sx, global const float *nw, int has_norm,
                    float eps, int glu, global float *out, local float *red)
{
    const int L = get_local_size(0), lid = get_local_id(0), r = get_group_id(0);
    const global float *xr = x + offx + r * sx;
    float ss = 0.0f;
    if (has_norm)
        for (int k = lid * 4; k < K; k += L * 4) {
            const float4 v = mvq_load4(xr, k, K, glu);
            ss += dot(v, v);
        }
    red[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = L / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float sc = has_norm ? rsqrt(red[0] / (float)K + eps) : 1.0f;
    for (int k = lid * 4; k < K; k += L * 4) {
        float4 v = mvq_load4(xr, k, K, glu);
        if (has_norm) v *= sc * vload4(0, nw + k);
        vstore4(v, 0, out + r * K + k);
    }
}
