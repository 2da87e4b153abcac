/* quant_mvq_lib.h (included by quant_mvq.h, quant_mvx.h and quant_mvm.cl): what the integer-dot matrix-vector
 * kernels share, so that every variant quantizes x and sums its products in the same order and gives the same bits
 * (a prompt's rows and its decode steps may take different variants):
 *  - dot4 (PTX dp4a on NVIDIA, char products elsewhere), warp_sum (shfl.sync butterflies), and the 8-lane
 *    max / sum that one x block's quantization needs (shfl on NVIDIA; elsewhere a local-memory exchange,
 *    with barriers: callers run it in uniform control flow);
 *  - the prologue's pieces: mvq_load4 (glu) and mvq_ss_part (part v < 32 of a row's sum of squares, float4
 *    groups v, v + 32, ..., the parts then added in order 0..31 by the caller);
 *  - mvq_quant4: 4 values of a block as int8 (q = rint(v / dx), dx = amax / 127) packed in a word;
 *  - per format the 16-byte weight loads (uint4 pointers: one 128-bit load, not four 32-bit ones; q8_0 two)
 *    and the integer dot of a block with x's two planes (elements 0-15 and 16-31);
 *  - MVQ_ROWS: one weight block per row j < NRW against RR activation rows; MVQ_FINISH: each (row, activation
 *    row) total across the warp's 32 lanes, in a fixed order, stored with the residual.
 * Lane l of a warp takes the row's blocks l, l + 32, ...: the kernels keep that map (chunks of 32 blocks). */
#ifndef TL_QUANT_MVQ_LIB_H
#define TL_QUANT_MVQ_LIB_H
#ifndef TL_NV_PTX
#define TL_NV_PTX 0
#endif
#ifndef MVQ_ASM
#define MVQ_ASM asm                                  /* NVIDIA's keyword; clang (a local PTX check) takes __asm__ */
#endif
#define MVQ_UNROLL _Pragma("unroll")              /* accumulator arrays stay in registers only if fully unrolled */
#ifndef MVQ_WNA
#define MVQ_WNA 0                                    /* 1 (NVIDIA): weight loads skip L1 (ld.global.nc.L1::no_allocate) */
#endif

#if TL_NV_PTX
inline int
dot4(uint a, uint b, int c)                          /* c + the dot product of the 4 signed bytes of a and b */
{
    int r;
    MVQ_ASM("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

inline float
warp_sum(float v)                                    /* the total over the 32 lanes of the warp, in every lane */
{
    for (int m = 16; m > 0; m >>= 1) {
        float t;
        MVQ_ASM volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(t) : "f"(v), "r"(m));
        v += t;
    }
    return v;
}

inline float                                         /* the max over the aligned 8 lanes (one x block) */
lanes8_max(float v, local float *s)
{
    (void)s;
    for (int m = 1; m < 8; m <<= 1) {
        float t;
        MVQ_ASM volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(t) : "f"(v), "r"(m));
        v = fmax(v, t);
    }
    return v;
}

inline int
lanes8_sum(int v, local float *s)
{
    (void)s;
    for (int m = 1; m < 8; m <<= 1) {
        int t;
        MVQ_ASM volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=r"(t) : "r"(v), "r"(m));
        v += t;
    }
    return v;
}
#else
inline int
dot4(uint a, uint b, int c)
{
    const char4 x = as_char4(a), y = as_char4(b);
    return c + x.s0 * y.s0 + x.s1 * y.s1 + x.s2 * y.s2 + x.s3 * y.s3;
}

inline float                                         /* s: L floats; every lane of the group calls it */
lanes8_max(float v, local float *s)
{
    const int lid = get_local_id(0), b = lid & ~7;
    s[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float m = s[b];
    for (int i = 1; i < 8; i++) m = fmax(m, s[b + i]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return m;
}

inline int
lanes8_sum(int v, local float *s)
{
    const int lid = get_local_id(0), b = lid & ~7;
    s[lid] = as_float(v);
    barrier(CLK_LOCAL_MEM_FENCE);
    int t = 0;
    for (int i = 0; i < 8; i++) t += as_int(s[b + i]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return t;
}
#endif

#if TL_NV_PTX && MVQ_WNA
inline uint4
mvq_ldw(const global uint4 *p)                       /* a streamed weight word: not kept in L1 (x stays there) */
{
    uint a, b, c, e;
    MVQ_ASM("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
            : "=r"(a), "=r"(b), "=r"(c), "=r"(e) : "l"(p));
    return (uint4)(a, b, c, e);
}
#else
#define mvq_ldw(p) (*(p))
#endif

/* One prologue value group: 4 consecutive columns k of row xr (glu: silu(a) * g, g K columns on). */
inline float4
mvq_load4(const global float *xr, int k, int K, int glu)
{
    float4 v = vload4(0, xr + k);
    if (glu) v = v / (1.0f + exp(-v)) * vload4(0, xr + K + k);
    return v;
}

inline float                                         /* part v < 32 of the sum of squares of row xr */
mvq_ss_part(const global float *xr, int K, int glu, int v)
{
    float ss = 0.0f;
    for (int k = v * 4; k < K; k += 128) {
        const float4 t = mvq_load4(xr, k, K, glu);
        ss += dot(t, t);
    }
    return ss;
}

/* 4 values of a block whose largest magnitude is amax, as int8 packed in a word; *qsum their sum. */
inline uint
mvq_quant4(float4 v, float amax, int *qsum)
{
    const float dx = amax / 127.0f, id = dx != 0.0f ? 1.0f / dx : 0.0f;
    const int4 q = clamp(convert_int4_rte(v * id), -127, 127);
    *qsum = (q.x + q.y) + (q.z + q.w);
    return as_uint(convert_char4(q));
}

inline float
max4(float4 v)
{
    const float4 m = fabs(v);
    return fmax(fmax(m.x, m.y), fmax(m.z, m.w));
}

/* Per format: the weight words of block blk (WT) from qs4 (16-byte words), and their integer dot with x's
 * two planes lo (elements 0-15) and hi (16-31); qsum, the block's sum of x's q, folds in q4_0's offset. */
#define MVQ_WT_q4_0 uint4
#define MVQ_LOADW_q4_0(blk) mvq_ldw(qs4 + (blk))
#define MVQ_WT_q8_0 uint8
#define MVQ_LOADW_q8_0(blk) (uint8)(mvq_ldw(qs4 + 2 * (blk)), mvq_ldw(qs4 + 2 * (blk) + 1))

inline int                                           /* sum (q - 8) x: word i holds q of elements 4i.. and 16+4i.. */
mvq_dot_q4_0(uint4 w, uint4 lo, uint4 hi, int qsum)
{
    const uint4 m = (uint4)0x0F0F0F0Fu, wl = w & m, wh = (w >> 4) & m;
    int s = dot4(wl.x, lo.x, -8 * qsum);
    s = dot4(wh.x, hi.x, s);
    s = dot4(wl.y, lo.y, s);
    s = dot4(wh.y, hi.y, s);
    s = dot4(wl.z, lo.z, s);
    s = dot4(wh.z, hi.z, s);
    s = dot4(wl.w, lo.w, s);
    return dot4(wh.w, hi.w, s);
}

inline int                                           /* sum q x: words 0-3 meet elements 0-15, 4-7 16-31 */
mvq_dot_q8_0(uint8 w, uint4 lo, uint4 hi, int qsum)
{
    (void)qsum;
    int s = dot4(w.s0, lo.x, 0);
    s = dot4(w.s1, lo.y, s);
    s = dot4(w.s2, lo.z, s);
    s = dot4(w.s3, lo.w, s);
    s = dot4(w.s4, hi.x, s);
    s = dot4(w.s5, hi.y, s);
    s = dot4(w.s6, hi.z, s);
    return dot4(w.s7, hi.w, s);
}

/* Block gb of weight rows nw0 + j (j < NRW; an edge row repeats row N - 1, not stored) against activation
 * rows r < RR: x's block of row r is XQ[XT(r)] (lo) and XQ[PLANE + XT(r)] (hi), scales XS[XT(r)] = (dx
 * bits, sum q). The kernel declares acc[NRW][RR] and has N, nb, qs4, d. */
#define MVQ_ROWS(FMT, NRW, RR, gb, XQ, XS, XT, PLANE)                                                       \
    do {                                                                                                    \
        MVQ_WT_##FMT wq[NRW];                                                                               \
        float dw[NRW];                                                                                      \
        MVQ_UNROLL                                                                                          \
        for (int j = 0; j < NRW; j++) {                                                                     \
            const int blk = min(nw0 + j, N - 1) * nb + (gb);                                                \
            dw[j] = vload_half(blk, d);                                                                     \
            wq[j] = MVQ_LOADW_##FMT(blk);                                                                   \
        }                                                                                                   \
        MVQ_UNROLL                                                                                          \
        for (int r = 0; r < RR; r++) {                                                                      \
            const int t_ = XT(r);                                                                           \
            const uint4 lo = XQ[t_], hi = XQ[(PLANE) + t_];                                                 \
            const int2 s_ = XS[t_];                                                                         \
            const float dx = as_float(s_.x);                                                                \
            MVQ_UNROLL                                                                                      \
            for (int j = 0; j < NRW; j++)                                                                   \
                acc[j][r] = mad(dw[j] * dx, (float)mvq_dot_##FMT(wq[j], lo, hi, s_.y), acc[j][r]);           \
        }                                                                                                   \
    } while (0)

/* The end: each acc[j][r]'s total over the warp's lanes (lane order 0..31 in the local-memory form, which
 * needs red of (NRW * RR + 1) * L floats and a barrier every lane meets), stored as y[r, nw0 + j] (+ res). */
#define MVQ_YSTORE(j, r, t)                                                                                    \
    do {                                                                                                      \
        const int n_ = nw0 + (j);                                                                             \
        if (n_ < N && (r) < R) y[(r) * N + n_] = has_res ? (t) + res[offr + (r) * N + n_] : (t);              \
    } while (0)
#if TL_NV_PTX
#define MVQ_FINISH(NRW, RR)                                                                                   \
    MVQ_UNROLL                                                                                                \
    for (int j = 0; j < NRW; j++)                                                                             \
        MVQ_UNROLL                                                                                            \
        for (int r = 0; r < RR; r++) {                                                                        \
            const float t_ = warp_sum(acc[j][r]);                                                             \
            if (lane == ((j * RR + r) & 31)) MVQ_YSTORE(j, r, t_);                                             \
        }
#else
#define MVQ_FINISH(NRW, RR)                                                                                   \
    MVQ_UNROLL                                                                                                \
    for (int j = 0; j < NRW; j++)                                                                             \
        MVQ_UNROLL                                                                                            \
        for (int r = 0; r < RR; r++) red[lid * (NRW * RR + 1) + j * RR + r] = acc[j][r];                      \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                             \
    for (int q = lane; q < NRW * RR; q += 32) {                                                               \
        float t_ = 0.0f;                                                                                      \
        for (int i = 0; i < 32; i++) t_ += red[((lid & ~31) + i) * (NRW * RR + 1) + q];                       \
        MVQ_YSTORE(q / RR, q % RR, t_);                                                                       \
    }
#endif
#endif
