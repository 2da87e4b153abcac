/* mv_half.cl: the decode-shaped product y[r, n] = x[r, :] . W[n, :] (+ res[r, n]) for float16 or bfloat16
 * weights W (N rows of K, row stride sw, read as stored: 2 bytes a weight) and R <= 8 activation rows x
 * (float32 or the weights' dtype), accumulated in float32; y (and res, laid out like y with row stride sr:
 * N for addmm's residual, 0 for a bias) in float32 or the weights' dtype, rounded to nearest even.
 * x's and y's dtypes are runtime codes (kernels/dtype.h) packed in dts (bits 0-3 x, 4-7 y); the weights'
 * dtype is in the kernel's name (tl_mul_mv_<f16|bf16>_...), so the weight loop has no branch.
 *  - GPU (tl_mul_mv_<wt>_r{1,2,4,8}_n{4,8}): matmul.cl's mul_mv layout: one work-group per NR weight
 *    rows, lanes striding over k eight weights (16 bytes) at a time, one kernel per padded row count RR and
 *    NR so the NR x RR accumulators stay in registers, then mv_reduce. The host takes NR = 8 from 4 rows of
 *    x up or where that still gives 4 work-groups per compute unit (else 4), and gives a group at most K/16
 *    lanes, so each lane has two or more 16-byte loads of every row in flight before the reduction (H200,
 *    1 row: 32000x2048 46.4 -> 39.6 us, 11264x2048 18.9 -> 13.0 us against 4 rows a group and 256 lanes;
 *    4 rows: 84 -> 63 us; but 2048x5632 8.8 -> 10.9 us with 8 rows a group for 1 row of x: too few groups).
 *    With MVH_WIDE (the default) a lane reads its 8 weights as one uint4 and widens them in registers, so
 *    the host runs it only where every row starts 16-byte aligned (offw and sw multiples of 8); MVH_WIDE=0
 *    reads them with vload_half8 / vload8 (element alignment; 14 % slower on the H100 at 11264x2048).
 *  - CPU (tl_mul_mv_<wt>_rows): one work-item per MV_NR weight rows and two activation rows at a time,
 *    16-wide vectors, no barriers, any alignment; float16 through vload_half16 (PoCL: the CPU's F16C
 *    conversion).
 * Either reads every weight once per launch. Every kernel comes in three MODEs (below): plain
 * (tl_mul_mv_<wt>_...), with rms_norm folded in (tl_mul_mv_norm_<wt>_..., tlgpu.rms_norm_linear) and with
 * silu_mul folded in (tl_mul_mv_glu_<wt>_..., tlgpu.silu_mul_linear); the fused ones take the norm's
 * arguments after the others. */
#include "dtype.h"
#include "mv_reduce.h"

#ifndef MVH_WIDE
#define MVH_WIDE 1
#endif
#define MV_NR 4

/* Eight weights from element i on. MVH_WIDE: one 16-byte load (the host checks the alignment), widened from
 * the private copy (vload_half8 there: NVIDIA's compiler keeps it in registers and converts with cvt; an
 * integer conversion instead cost the H100 a third more time at 2048x5632). */
#if MVH_WIDE
inline float8
w8_f16(global const ushort *w, int i)
{
    const uint4 q = *(global const uint4 *)(w + i);
    return vload_half8(0, (const private half *)&q);
}

inline float8
w8_bf16(global const ushort *w, int i)
{
    const uint4 q = *(global const uint4 *)(w + i);
    const float4 a = as_float4(q << 16), b = as_float4(q & 0xffff0000u);   /* elements 0 2 4 6, 1 3 5 7 */
    return (float8)(a.x, b.x, a.y, b.y, a.z, b.z, a.w, b.w);
}
#else
inline float8 w8_f16(global const ushort *w, int i) { return vload_half8(0, (global const half *)w + i); }
inline float8 w8_bf16(global const ushort *w, int i) { return as_float8(convert_uint8(vload8(0, w + i)) << 16); }
#endif
inline float w1_f16(global const ushort *w, int i) { return vload_half(i, (global const half *)w); }
inline float w1_bf16(global const ushort *w, int i) { return as_float((uint)w[i] << 16); }
inline float16 w16_f16(global const ushort *w, int i) { return vload_half16(0, (global const half *)w + i); }
inline float16 w16_bf16(global const ushort *w, int i) { return as_float16(convert_uint16(vload16(0, w + i)) << 16); }

/* Activations: 1, 8 or 16 elements of x (dtype dt) from element i on. */
inline float x1(global const uchar *x, int dt, int i) { return tl_ld(x, dt, i); }

inline float8
x8(global const uchar *x, int dt, int i)
{
    if (dt == TL_DT_F16) return vload_half8(0, (global const half *)x + i);
    if (dt == TL_DT_BF16) return as_float8(convert_uint8(vload8(0, (global const ushort *)x + i)) << 16);
    return vload8(0, (global const float *)x + i);
}

inline float16
x16(global const uchar *x, int dt, int i)
{
    if (dt == TL_DT_F16) return w16_f16((global const ushort *)x, i);
    if (dt == TL_DT_BF16) return as_float16(convert_uint16(vload16(0, (global const ushort *)x + i)) << 16);
    return vload16(0, (global const float *)x + i);
}

inline float dot8(float8 a, float8 b) { return dot(a.lo, b.lo) + dot(a.hi, b.hi); }

inline float
hsum16(float16 v)
{
    const float8 h8 = v.lo + v.hi;
    const float4 h = h8.lo + h8.hi;
    return (h.x + h.y) + (h.z + h.w);
}

/* y[r, n] = v (+ res[r, n]) in y's dtype. */
inline void
mv_store(global uchar *y, int offy, int sy, global const uchar *res, int offr, int sr, int has_res, int dy, int r,
         int n, float v)
{
    if (has_res) v += x1(res, dy, offr + r * sr + n);
    tl_st(y, dy, offy + r * sy + n, v);
}

/* The activations by MODE, as matmul.cl's matrix-vector kernels: 0 x as it is; 1 (norm) rms_norm's x * g
 * (float32 g, has_g) with each row's sum of squares kept for its scale rsqrt(mean(x^2) + eps), applied at
 * the store; 2 (glu) silu(x[k]) * x[K + k] (the halves of a gate|up row of 2K). */
#define MV_GLU(a, b) ((a) / (1.0f + exp(-(a))) * (b))
#define MVH_ARGS_0
#define MVH_ARGS_1 , global const float *g, int offg, int has_g, float eps
#define MVH_ARGS_2
#define MVH_LD_0(LD, o, k) LD(o, k)
#define MVH_LD_1(LD, o, k) LD(o, k)
#define MVH_LD_2(LD, o, k) MV_GLU(LD(o, k), LD(o, K + (k)))
#define MVH_SQ_0(s, v) ((void)0)
#define MVH_SQ_1(s, v) ((s) += (v))
#define MVH_SQ_2(s, v) ((void)0)
#define MVH_G_0(GL, v, k) (v)
#define MVH_G_1(GL, v, k) (has_g ? (v) * GL(g + offg, k) : (v))
#define MVH_G_2(GL, v, k) (v)
#define MVH_X8(o, k) x8(x, dx, (o) + (k))
#define MVH_X1(o, k) x1(x, dx, (o) + (k))
#define MVH_X16(o, k) x16(x, dx, (o) + (k))
#define MVH_G8(p, k) vload8(0, (p) + (k))
#define MVH_G1(p, k) ((p)[k])
#define MVH_G16(p, k) vload16(0, (p) + (k))
#define MVH_LOCALS_0(RR)
#define MVH_LOCALS_1(RR) local float sc[RR];             /* the rows' rms_norm scales */
#define MVH_LOCALS_2(RR)
#define MVH_PRE_0(RR) ((void)0)
#define MVH_PRE_1(RR) MV_ROW_SCALE(sq, RR, K, eps, sc)
#define MVH_PRE_2(RR) ((void)0)
#define MVH_EPS_0 1.0f
#define MVH_EPS_1 eps
#define MVH_EPS_2 1.0f
#define MVH_SCALE_0(s, c) (s)
#define MVH_SCALE_1(s, c) ((s) * (c))
#define MVH_SCALE_2(s, c) (s)

#define MVH_KERNEL(NAME, MODE, WT, RR, NR)                                                                    \
kernel void                                                                                               \
NAME(int N, int K, int R, global const uchar *x, int offx, int sx, global const ushort *w, int offw, int sw, \
     global uchar *y, int offy, int sy, global const uchar *res, int offr, int sr, int has_res, int dts,  \
     local float *red MVH_ARGS_##MODE)                                                                    \
{                                                                                                         \
    MVH_LOCALS_##MODE(RR)                                                                                 \
    const int L = get_local_size(0), lid = get_local_id(0), n0 = get_group_id(0) * NR;                    \
    const int dx = dts & 15, dy = (dts >> 4) & 15, kv = K & ~7;                                           \
    int xo[RR], wo[NR];                                                                                   \
    float acc[NR][RR], sq[RR];                                                                            \
    for (int r = 0; r < RR; r++) {                                                                        \
        xo[r] = offx + min(r, R - 1) * sx;                                                                \
        sq[r] = 0.0f;                                                                                     \
    }                                                                                                     \
    for (int j = 0; j < NR; j++) {                                                                        \
        wo[j] = offw + min(n0 + j, N - 1) * sw;        /* an edge row repeats the last; not stored */     \
        for (int r = 0; r < RR; r++) acc[j][r] = 0.0f;                                                    \
    }                                                                                                     \
    for (int k = lid * 8; k < kv; k += L * 8) {        /* 8 weights (16 bytes) of each row per lane */    \
        float8 xv[RR];                                                                                    \
        for (int r = 0; r < RR; r++) {                                                                    \
            const float8 v = MVH_LD_##MODE(MVH_X8, xo[r], k);                                             \
            MVH_SQ_##MODE(sq[r], dot8(v, v));                                                             \
            xv[r] = MVH_G_##MODE(MVH_G8, v, k);                                                           \
        }                                                                                                 \
        for (int j = 0; j < NR; j++) {                                                                    \
            const float8 wv = w8_##WT(w, wo[j] + k);                                                      \
            for (int r = 0; r < RR; r++) acc[j][r] += dot8(wv, xv[r]);                                    \
        }                                                                                                 \
    }                                                                                                     \
    for (int k = kv + lid; k < K; k += L) {                                                               \
        float xs[RR];                                                                                     \
        for (int r = 0; r < RR; r++) {                                                                    \
            const float v = MVH_LD_##MODE(MVH_X1, xo[r], k);                                              \
            MVH_SQ_##MODE(sq[r], v * v);                                                                  \
            xs[r] = MVH_G_##MODE(MVH_G1, v, k);                                                           \
        }                                                                                                 \
        for (int j = 0; j < NR; j++) {                                                                    \
            const float wk = w1_##WT(w, wo[j] + k);                                                       \
            for (int r = 0; r < RR; r++) acc[j][r] = mad(wk, xs[r], acc[j][r]);                           \
        }                                                                                                 \
    }                                                                                                     \
    MVH_PRE_##MODE(RR);                                                                                   \
    MV_FINISH(acc, NR, RR, MVH_STORE_##MODE);                                                             \
}
#define MVH_STORE(j, r, t) mv_store(y, offy, sy, res, offr, sr, has_res, dy, r, n0 + (j), t)
#define MVH_STORE_0(j, r, t) MVH_STORE(j, r, t)
#define MVH_STORE_1(j, r, t) MVH_STORE(j, r, (t) * sc[r])
#define MVH_STORE_2(j, r, t) MVH_STORE(j, r, t)

#define MVH_ROWS_KERNEL(NAME, MODE, WT)                                                                       \
kernel void                                                                                               \
NAME(int N, int K, int R, global const uchar *x, int offx, int sx, global const ushort *w, int offw, int sw, \
     global uchar *y, int offy, int sy, global const uchar *res, int offr, int sr, int has_res, int dts   \
     MVH_ARGS_##MODE)                                                                                     \
{                                                                                                         \
    const int n0 = get_global_id(0) * MV_NR, dx = dts & 15, dy = (dts >> 4) & 15, kv = K & ~15;          \
    if (n0 >= N) return;                                                                                  \
    int wo[MV_NR];                                                                                        \
    for (int j = 0; j < MV_NR; j++) wo[j] = offw + min(n0 + j, N - 1) * sw;                               \
    for (int r0 = 0; r0 < R; r0 += 2) {                /* two x rows at a time: W stays in L1 between */  \
        const int r1 = min(r0 + 1, R - 1), xa = offx + r0 * sx, xb = offx + r1 * sx;                      \
        float16 a0[MV_NR], a1[MV_NR], q0 = (float16)0.0f, q1 = (float16)0.0f;                            \
        for (int j = 0; j < MV_NR; j++) a0[j] = a1[j] = (float16)0.0f;                                    \
        for (int k = 0; k < kv; k += 16) {                                                                \
            float16 xv0 = MVH_LD_##MODE(MVH_X16, xa, k), xv1 = MVH_LD_##MODE(MVH_X16, xb, k);             \
            MVH_SQ_##MODE(q0, xv0 * xv0);                                                                 \
            MVH_SQ_##MODE(q1, xv1 * xv1);                                                                 \
            xv0 = MVH_G_##MODE(MVH_G16, xv0, k);                                                          \
            xv1 = MVH_G_##MODE(MVH_G16, xv1, k);                                                          \
            for (int j = 0; j < MV_NR; j++) {                                                             \
                const float16 wv = w16_##WT(w, wo[j] + k);                                                \
                a0[j] = mad(wv, xv0, a0[j]);                                                              \
                a1[j] = mad(wv, xv1, a1[j]);                                                              \
            }                                                                                             \
        }                                                                                                 \
        float c0 = hsum16(q0), c1 = hsum16(q1);                                                           \
        for (int k = kv; k < K; k++) {                                                                    \
            const float u0 = MVH_LD_##MODE(MVH_X1, xa, k), u1 = MVH_LD_##MODE(MVH_X1, xb, k);             \
            MVH_SQ_##MODE(c0, u0 * u0);                                                                   \
            MVH_SQ_##MODE(c1, u1 * u1);                                                                   \
        }                                                                                                 \
        c0 = rsqrt(c0 / (float)K + MVH_EPS_##MODE);    /* MODE 1's scales (unused otherwise) */           \
        c1 = rsqrt(c1 / (float)K + MVH_EPS_##MODE);                                                       \
        for (int j = 0; j < MV_NR && n0 + j < N; j++) {                                                   \
            float s0 = hsum16(a0[j]), s1 = hsum16(a1[j]);                                                 \
            for (int k = kv; k < K; k++) {                                                                \
                const float wk = w1_##WT(w, wo[j] + k);                                                   \
                const float u0 = MVH_LD_##MODE(MVH_X1, xa, k), u1 = MVH_LD_##MODE(MVH_X1, xb, k);         \
                s0 = mad(wk, MVH_G_##MODE(MVH_G1, u0, k), s0);                                            \
                s1 = mad(wk, MVH_G_##MODE(MVH_G1, u1, k), s1);                                            \
            }                                                                                             \
            mv_store(y, offy, sy, res, offr, sr, has_res, dy, r0, n0 + j, MVH_SCALE_##MODE(s0, c0));      \
            if (r1 != r0) mv_store(y, offy, sy, res, offr, sr, has_res, dy, r1, n0 + j, MVH_SCALE_##MODE(s1, c1)); \
        }                                                                                                 \
    }                                                                                                     \
}

#define MVH_KERNELS(PRE, MODE, WT)                                                                            \
    MVH_KERNEL(PRE##WT##_r1_n4, MODE, WT, 1, 4)                                                           \
    MVH_KERNEL(PRE##WT##_r2_n4, MODE, WT, 2, 4)                                                           \
    MVH_KERNEL(PRE##WT##_r4_n4, MODE, WT, 4, 4)                                                           \
    MVH_KERNEL(PRE##WT##_r8_n4, MODE, WT, 8, 4)                                                           \
    MVH_KERNEL(PRE##WT##_r1_n8, MODE, WT, 1, 8)                                                           \
    MVH_KERNEL(PRE##WT##_r2_n8, MODE, WT, 2, 8)                                                           \
    MVH_KERNEL(PRE##WT##_r4_n8, MODE, WT, 4, 8)                                                           \
    MVH_KERNEL(PRE##WT##_r8_n8, MODE, WT, 8, 8)                                                           \
    MVH_ROWS_KERNEL(PRE##WT##_rows, MODE, WT)
#ifndef MVH_FUSED                           /* two builds (ops_llm.c's rule "mv_half_fused"): the plain kernels */
MVH_KERNELS(tl_mul_mv_, 0, f16)
MVH_KERNELS(tl_mul_mv_, 0, bf16)
#else                                        /* and those with rms_norm or silu_mul folded in */
MVH_KERNELS(tl_mul_mv_norm_, 1, f16)
MVH_KERNELS(tl_mul_mv_norm_, 1, bf16)
MVH_KERNELS(tl_mul_mv_glu_, 2, f16)
MVH_KERNELS(tl_mul_mv_glu_, 2, bf16)
#endif
