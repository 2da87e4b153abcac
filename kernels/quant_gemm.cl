/* quant_gemm.cl: the prefill product Y[M, N] = X[M, K] @ W[N, K]^T (+ bias[N]) of float32 activations X (M rows,
 * contiguous, from element offx) by q4_0 / q8_0 weights W in quant.cl's flat layout (qs: 4 (q4_0) or 8 (q8_0)
 * int32 words a block of 32 weights, little-endian; d: the fp16 scales, one a block), the weights dequantized
 * as they are read: no float32 copy of W is ever written. Float32 accumulation; a dequantized weight d * (q - 8)
 * or d * q is exact in float32, so results are the float product of the dequantized weights up to the order
 * of summation.
 *  - tl_qgemm_<fmt>_m<MWG>_f32 (GPUs, CLBlast-style tiles): a work-group of QNDIMC x (MWG / QMWI) work-items
 *    owns an MWG x QNWG tile of Y; per block of 32 columns of K it stages MWG rows of X (Xs[m][k]) and QNWG
 *    weight blocks dequantized (Ws[k][n]) in local memory, each work-item whole words of weights (8 q4_0 or
 *    4 q8_0 values each), read into registers while the previous block is multiplied; then each work-item
 *    adds its QMWI x 4 outputs (float4 along n) over the 32 columns.
 *    MWG in {32, 64}: the host picks 64 where that still gives the device enough work-groups. (16 was dropped:
 *    PoCL, which builds these only for tests, took 5-10 s a kernel to build, 4-8 words a work-item the most.)
 *  - tl_qgemm_<fmt>_direct_f32 (CPUs, PoCL; no local memory, no barriers): a work-item owns QCMR rows x QCNR
 *    columns of Y; per block it unpacks its QCNR weight blocks once into float16 pairs held in registers and
 *    multiplies them into QCMR rows of X read straight from the caches; swizzled as matmul.cl's direct
 *    kernels (QDSW row blocks swept against each column block, so the X slice stays in L2).
 * Two programs of this source: "quant_gemm_tiles" (-DQG_TILES=1, the tile kernels) and "quant_gemm" (the CPU
 * kernels), so a CPU device never builds the tiles it does not run.
 * Sizes need not be multiples of a tile: edge rows and columns read a clamped (or zero) value and are not
 * stored. */

#ifndef QG_TILES
#define QG_TILES 0
#endif
#define QMWI 4                          /* GPU: rows of Y per work-item (adjacent) */
#define QNDIMC 16                       /* GPU: work-items along n, 4 adjacent columns each */
#define QNWG (QNDIMC * 4)               /* GPU: weight rows (columns of Y) per work-group */
#define XLD 36                          /* Xs row stride: 32 columns + 4 (float4-aligned) */
#define WLD (QNWG + 4)                  /* Ws row stride */
#define QCMR 6                          /* CPU: rows of X per work-item (ops_quant_gemm.c's QG_CMR) */
#define QCNR 3                          /* CPU: weight rows per work-item (QG_CNR); 6 x 3 beat 8 x 2, 4 x 4, 12 x 2 on PoCL */
#define QDSW 16                         /* CPU: row blocks swept together */

/* GPU weight words: word w of a block into column r of the local tile, scaled by s. q4_0: word w holds
 * elements 4w..4w+3 (low nibbles) and 16+4w..16+4w+3 (high nibbles); q8_0: elements 4w..4w+3 as int8. A
 * weight row past N comes as q = 0, s = 0 and stores zeros. */
#define WPB_q4_0 4
#define WPB_q8_0 8
#define TILE_WORD_q4_0(q, w, s, ws)                                                                           \
    for (int j = 0; j < 4; j++) {                                                                         \
        const uint byte = ((q) >> (8 * j)) & 0xFFu;                                                        \
        (ws)[(4 * (w) + j) * WLD] = ((float)(int)(byte & 0xFu) - 8.0f) * (s);                             \
        (ws)[(16 + 4 * (w) + j) * WLD] = ((float)(int)(byte >> 4) - 8.0f) * (s);                          \
    }
#define TILE_WORD_q8_0(q, w, s, ws)                                                                           \
    for (int j = 0; j < 4; j++) (ws)[(4 * (w) + j) * WLD] = (float)(char)(((q) >> (8 * j)) & 0xFFu) * (s);

/* One column kk (0..3) of the float4 xv[i] against row k + kk of the weight tile. */
#define TILE_STEP(kk, comp)                                                                                   \
    {                                                                                                     \
        const float4 wv = vload4(0, ws + (k + (kk)) * WLD);                                               \
        for (int i = 0; i < QMWI; i++) acc[i] = mad((float4)(xv[i].comp), wv, acc[i]);                    \
    }

/* Register prefetch: block b's share of this work-item (XPT float4 of X, WPT weight words and their scales)
 * is read from global memory while the previous block is multiplied, then stored to the local tiles. */
#define XPT 2                                            /* MWG * 8 float4 over MWG * 4 work-items */
#define TILE_LOAD(FMT, b)                                                                                     \
    for (int t = 0; t < XPT; t++) {                                                                       \
        const int e = lid + t * NT, m = m0 + (e >> 3);                                                    \
        px[t] = m < M ? vload4(0, X + (size_t)m * K + (b) * 32 + (e & 7) * 4) : (float4)0.0f;             \
    }                                                                                                     \
    for (int t = 0; t < WPT; t++) {                                                                       \
        const int e = lid + t * NT, n = n0 + e / WPB_##FMT;                                               \
        const size_t blk = (size_t)min(n, N - 1) * nb + (b);                                              \
        pw[t] = n < N ? qs[blk * WPB_##FMT + e % WPB_##FMT] : 0u;                                         \
        ps[t] = n < N ? vload_half(blk, d) : 0.0f;                                                        \
    }
#define TILE_STORE(FMT)                                                                                       \
    for (int t = 0; t < XPT; t++) {                                                                       \
        const int e = lid + t * NT;                                                                       \
        vstore4(px[t], 0, Xs + (e >> 3) * XLD + (e & 7) * 4);                                             \
    }                                                                                                     \
    for (int t = 0; t < WPT; t++) {                                                                       \
        const int e = lid + t * NT, r = e / WPB_##FMT;                                                    \
        TILE_WORD_##FMT(pw[t], e % WPB_##FMT, ps[t], Ws + r);                                             \
    }

#define QGEMM_TILE(FMT, MWG)                                                                                  \
kernel __attribute__((reqd_work_group_size(QNDIMC, (MWG) / QMWI, 1))) void                                 \
tl_qgemm_##FMT##_m##MWG##_f32(int M, int N, int K, global const float *X, int offx, global const uint *qs,  \
                              global const half *d, global const float *bias, int has_bias, global float *Y) \
{                                                                                                         \
    local float Xs[(MWG) * XLD];                                                                          \
    local float Ws[32 * WLD];                                                                             \
    enum { NT = QNDIMC * ((MWG) / QMWI), WPT = QNWG * WPB_##FMT / NT };                                   \
    const int tn = get_local_id(0), tm = get_local_id(1), lid = tm * QNDIMC + tn;                         \
    const int n0 = get_group_id(0) * QNWG, m0 = get_group_id(1) * (MWG), nb = K / 32;                    \
    X += offx;                                                                                            \
    float4 acc[QMWI], px[XPT];                                                                            \
    uint pw[WPT];                                                                                         \
    float ps[WPT];                                                                                        \
    for (int i = 0; i < QMWI; i++) acc[i] = (float4)0.0f;                                                 \
    local const float *xs = Xs + tm * QMWI * XLD, *ws = Ws + tn * 4;                                     \
    TILE_LOAD(FMT, 0);                                                                                    \
    for (int b = 0; b < nb; b++) {                                                                        \
        TILE_STORE(FMT);                                                                                  \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                     \
        if (b + 1 < nb) { TILE_LOAD(FMT, b + 1); }                                                        \
        for (int k = 0; k < 32; k += 4) {                                                                 \
            float4 xv[QMWI];                                                                              \
            for (int i = 0; i < QMWI; i++) xv[i] = vload4(0, xs + i * XLD + k);                           \
            TILE_STEP(0, x) TILE_STEP(1, y) TILE_STEP(2, z) TILE_STEP(3, w)                               \
        }                                                                                                 \
        barrier(CLK_LOCAL_MEM_FENCE);                    /* the next store must not overwrite this tile */ \
    }                                                                                                     \
    const int n = n0 + tn * 4;                                                                            \
    float4 bv = (float4)0.0f;                                                                             \
    if (has_bias) {                                                                                       \
        float t[4];                                                                                       \
        for (int j = 0; j < 4; j++) t[j] = n + j < N ? bias[n + j] : 0.0f;                                \
        bv = vload4(0, t);                                                                                \
    }                                                                                                     \
    for (int i = 0; i < QMWI; i++) {                                                                      \
        const int m = m0 + tm * QMWI + i;                                                                 \
        if (m >= M) break;                                                                                \
        global float *y = Y + (size_t)m * N + n;                                                          \
        const float4 v = acc[i] + bv;                                                                     \
        if (n + 4 <= N) {                                                                                 \
            vstore4(v, 0, y);                                                                             \
        } else {                                                                                          \
            float t[4];                                                                                   \
            vstore4(v, 0, t);                                                                             \
            for (int j = 0; n + j < N; j++) y[j] = t[j];                                                  \
        }                                                                                                 \
    }                                                                                                     \
}
#if QG_TILES
QGEMM_TILE(q4_0, 32)
QGEMM_TILE(q4_0, 64)
QGEMM_TILE(q8_0, 32)
QGEMM_TILE(q8_0, 64)
#endif

/* CPU: block blk of a row, scaled, as its elements 0-15 (lo) and 16-31 (hi). */
#define CPU_BLOCK_q4_0(blk, lo, hi)                                                                           \
    {                                                                                                     \
        const uchar16 q = as_uchar16(vload4(blk, qs));                                                    \
        const float16 s = (float16)vload_half(blk, d);                                                    \
        lo = (convert_float16(q & (uchar)0xF) - 8.0f) * s;                                                \
        hi = (convert_float16(q >> (uchar)4) - 8.0f) * s;                                                 \
    }
#define CPU_BLOCK_q8_0(blk, lo, hi)                                                                           \
    {                                                                                                     \
        const float16 s = (float16)vload_half(blk, d);                                                    \
        lo = convert_float16(as_char16(vload4(2 * (blk), qs))) * s;                                       \
        hi = convert_float16(as_char16(vload4(2 * (blk) + 1, qs))) * s;                                   \
    }

#define QGEMM_DIRECT(FMT)                                                                                     \
kernel void                                                                                               \
tl_qgemm_##FMT##_direct_f32(int M, int N, int K, global const float *X, int offx, global const uint *qs,    \
                            global const half *d, global const float *bias, int has_bias, global float *Y) \
{                                                                                                         \
    const int MB = (M + QCMR - 1) / QCMR, NB = (N + QCNR - 1) / QCNR, nb = K / 32;                       \
    const int g = get_global_id(0), chunk = g / (QDSW * NB);                                              \
    if (g >= MB * NB) return;                                                                             \
    const int hgt = min(QDSW, MB - chunk * QDSW), rr = g - chunk * QDSW * NB;                             \
    const int m0 = (chunk * QDSW + rr % hgt) * QCMR, n0 = (rr / hgt) * QCNR;                              \
    const global float *xr[QCMR];                                                                         \
    int wr[QCNR];                                                                                         \
    for (int i = 0; i < QCMR; i++) xr[i] = X + offx + (size_t)min(m0 + i, M - 1) * K;                     \
    for (int j = 0; j < QCNR; j++) wr[j] = min(n0 + j, N - 1) * nb;                                       \
    float16 acc[QCMR][QCNR];                                                                              \
    for (int i = 0; i < QCMR; i++)                                                                        \
        for (int j = 0; j < QCNR; j++) acc[i][j] = (float16)0.0f;                                         \
    for (int b = 0; b < nb; b++) {                                                                        \
        float16 lo[QCNR], hi[QCNR];                                                                       \
        for (int j = 0; j < QCNR; j++) CPU_BLOCK_##FMT(wr[j] + b, lo[j], hi[j]);                          \
        for (int i = 0; i < QCMR; i++) {                                                                  \
            const float16 xl = vload16(0, xr[i] + b * 32), xh = vload16(1, xr[i] + b * 32);               \
            for (int j = 0; j < QCNR; j++) acc[i][j] = mad(xh, hi[j], mad(xl, lo[j], acc[i][j]));         \
        }                                                                                                 \
    }                                                                                                     \
    for (int i = 0; i < QCMR && m0 + i < M; i++)                                                          \
        for (int j = 0; j < QCNR && n0 + j < N; j++) {                                                    \
            const float8 h8 = acc[i][j].lo + acc[i][j].hi;                                                \
            const float4 h = h8.lo + h8.hi;                                                               \
            Y[(size_t)(m0 + i) * N + n0 + j] = (h.x + h.y) + (h.z + h.w) + (has_bias ? bias[n0 + j] : 0.0f); \
        }                                                                                                 \
}
#if !QG_TILES
QGEMM_DIRECT(q4_0)
QGEMM_DIRECT(q8_0)
#endif
