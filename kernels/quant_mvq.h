/* quant_mvq.h (included by quant.cl): the integer-dot matrix-vector product of q4_0 / q8_0 weights, after
 * llama.cpp's CUDA mmvq (activations as int8 blocks of 32 with a float scale, "q8_1"; 4-byte integer dot
 * products; a warp reduction). y[r, n] = p(x)[r, :] . W[n, :] for R <= 8 rows, p the prologue below.
 *  - A work-group of L = 32 W lanes owns NR = W * MVQ_NRW weight rows: warp w the MVQ_NRW rows
 *    n0 + w * MVQ_NRW + j, all of them at once (each x block loaded from local memory serves MVQ_NRW rows).
 *  - x is staged chunk by chunk (KC columns, the host's choice: local memory holds RR * KC bytes): lane t
 *    converts block (r, b) of the chunk to 32 int8 q = rint(v / dx), dx = amax / 127, kept as two planes
 *    of words (elements 0-15 and 16-31; a lane's 16-byte read of either plane meets no bank conflict),
 *    and (dx, sum q) per block. The prologue runs there: glu (x has 2K columns; v = silu(x[:K]) * x[K:])
 *    and then norm (v *= rsqrt(mean(v^2) + eps) * nw, the mean from a first pass over the row).
 *  - Lane l of a warp takes blocks l, l + 32, ... of its rows: a 16-byte (q4_0) or 32-byte (q8_0) load of
 *    quants per row and block, 512 / 1024 contiguous bytes a warp; 8 dot4 per block and activation row,
 *    then one float multiply-add: acc += dw * dx * (sumi - 8 sum q) (q4_0's offset folded in as an
 *    integer) or dw * dx * sumi (q8_0).
 *  - The end: each (row, activation row) total across the warp's 32 lanes: shfl.sync butterflies on NVIDIA
 *    (TL_NV_PTX, the build option ops_quant.c passes there), else local memory (red).
 * dot4 is PTX dp4a.s32.s32 on NVIDIA, plain char products elsewhere (PoCL runs the same kernel text). */
#ifndef TL_NV_PTX
#define TL_NV_PTX 0
#endif
#define MVQ_NRW 4                                    /* weight rows per warp; ops_quant.c knows it */
#ifndef MVQ_ASM
#define MVQ_ASM asm                                  /* NVIDIA's keyword; clang (a local PTX check) takes __asm__ */
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
#else
inline int
dot4(uint a, uint b, int c)
{
    const char4 x = as_char4(a), y = as_char4(b);
    return c + x.s0 * y.s0 + x.s1 * y.s1 + x.s2 * y.s2 + x.s3 * y.s3;
}
#endif

/* One prologue value group: 4 consecutive columns k of row xr (glu: silu(a) * g, g K columns on). */
inline float4
mvq_load4(const global float *xr, int k, int K, int glu)
{
    float4 v = vload4(0, xr + k);
    if (glu) v = v / (1.0f + exp(-v)) * vload4(0, xr + K + k);
    return v;
}

/* red[r] = rsqrt(mean(v^2) + eps) of each prologue row r < RR (rows >= R repeat row R-1); red holds RR * L
 * floats. */
#define MVQ_NORM_SCALES(RR)                                                                                   \
    for (int r = 0; r < RR; r++) {                                                                            \
        float ss = 0.0f;                                                                                      \
        if (has_norm) {                                                                                       \
            const global float *xr = x + offx + min(r, R - 1) * sx;                                           \
            for (int k = lid * 4; k < K; k += L * 4) {                                                        \
                const float4 v = mvq_load4(xr, k, K, glu);                                                    \
                ss += dot(v, v);                                                                              \
            }                                                                                                 \
        }                                                                                                     \
        red[r * L + lid] = ss;                                                                                \
    }                                                                                                         \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                             \
    float tot_ = 0.0f;                                                                                        \
    if (has_norm && lid < RR)                                                                                 \
        for (int i = 0; i < L; i++) tot_ += red[lid * L + i];                                                 \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                             \
    if (lid < RR) red[lid] = rsqrt(tot_ / (float)K + eps);                                                    \
    barrier(CLK_LOCAL_MEM_FENCE)

/* Stages columns c0 .. c0 + 32 nbc of the RR rows: xq's two planes (nplane words each) and xsc's (dx, sum q). */
#define MVQ_STAGE(RR)                                                                                         \
    for (int t = lid; t < RR * nbc; t += L) {                                                                 \
        const int r = t / nbc, b = t - r * nbc, k0 = c0 + b * 32;                                             \
        const global float *xr = x + offx + min(r, R - 1) * sx;                                               \
        float4 v[8];                                                                                          \
        float4 m = (float4)0.0f;                                                                              \
        for (int i = 0; i < 8; i++) {                                                                         \
            v[i] = mvq_load4(xr, k0 + 4 * i, K, glu);                                                         \
            if (has_norm) v[i] *= red[r] * vload4(0, nw + k0 + 4 * i);                                         \
            m = fmax(m, fabs(v[i]));                                                                          \
        }                                                                                                     \
        const float amax = fmax(fmax(m.x, m.y), fmax(m.z, m.w)), dx = amax / 127.0f;                          \
        const float id = dx != 0.0f ? 1.0f / dx : 0.0f;                                                       \
        int4 qsum = (int4)0;                                                                                  \
        for (int i = 0; i < 8; i++) {                                                                         \
            const int4 q = clamp(convert_int4_rte(v[i] * id), -127, 127);                                     \
            qsum += q;                                                                                        \
            xq[(i >> 2) * nplane + t * 4 + (i & 3)] = as_uint(convert_char4(q));                              \
        }                                                                                                     \
        xsc[2 * t] = as_int(dx);                                                                              \
        xsc[2 * t + 1] = (qsum.x + qsum.y) + (qsum.z + qsum.w);                                               \
    }

/* Per format: the weight words of block blk (WT), and the integer dot of them with x's two planes. */
#define MVQ_WT_q4_0 uint4
#define MVQ_LOADW_q4_0(blk) vload4((blk), qs)
#define MVQ_WT_q8_0 uint8
#define MVQ_LOADW_q8_0(blk) vload8((blk), qs)

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

/* GPU and (tests, DIRECT=0 or impl "dp4a") CPU: see the banner. Local buffers (sizes from ops_quant.c):
 * xq RR * KC bytes, xsc RR * KC / 16 ints, red RR * L floats (TL_NV_PTX), else
 * (MVQ_NRW * RR + 1) * L. */
#define MVQ_DP4A_KERNEL(FMT, RR)                                                                              \
kernel void                                                                                               \
tl_mvq_##FMT##_r##RR##_f32(int N, int K, int R, global const float *x, int offx, int sx,                      \
                           global const uint *qs, global const half *d, global float *y,                  \
                           global const float *res, int offr, int has_res, global const float *nw,         \
                           int has_norm, float eps, int glu, int KC, local uint *xq, local int *xsc,       \
                           local float *red)                                                               \
{                                                                                                         \
    const int L = get_local_size(0), lid = get_local_id(0), lane = lid & 31, nb = K / 32;                 \
    const int nw0 = get_group_id(0) * (L / 32) * MVQ_NRW + (lid >> 5) * MVQ_NRW;                          \
    float acc[MVQ_NRW][RR];                                                                               \
    for (int j = 0; j < MVQ_NRW; j++)                                                                     \
        for (int r = 0; r < RR; r++) acc[j][r] = 0.0f;                                                    \
    MVQ_NORM_SCALES(RR);                                                                                  \
    for (int c0 = 0; c0 < K; c0 += KC) {                                                                  \
        const int nbc = min(KC, K - c0) / 32, nplane = RR * nbc * 4, gb0 = c0 / 32;                       \
        MVQ_STAGE(RR)                                                                                     \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                     \
        for (int b = lane; b < nbc; b += 32) {                                                            \
            MVQ_WT_##FMT wq[MVQ_NRW];                                                                     \
            float dw[MVQ_NRW];                                                                            \
            for (int j = 0; j < MVQ_NRW; j++) {                                                           \
                const int blk = min(nw0 + j, N - 1) * nb + gb0 + b;  /* an edge row repeats the last */  \
                dw[j] = vload_half(blk, d);                                                               \
                wq[j] = MVQ_LOADW_##FMT(blk);                                                             \
            }                                                                                             \
            for (int r = 0; r < RR; r++) {                                                                \
                const int t = r * nbc + b;                                                                \
                const uint4 lo = vload4(t, xq), hi = vload4(t, xq + nplane);                              \
                const float dx = as_float(xsc[2 * t]);                                                    \
                const int qsum = xsc[2 * t + 1];                                                          \
                for (int j = 0; j < MVQ_NRW; j++)                                                         \
                    acc[j][r] = mad(dw[j] * dx, (float)mvq_dot_##FMT(wq[j], lo, hi, qsum), acc[j][r]);   \
            }                                                                                             \
        }                                                                                                 \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                     \
    }                                                                                                     \
    MVQ_WARP_FINISH(RR);                                                                                  \
}

/* Lane j * RR + r of each warp stores the total of acc[j][r] (row nw0 + j, activation row r). */
#define MVQ_WSTORE(j, r, t)                                                                                    \
    do {                                                                                                      \
        const int n_ = nw0 + (j);                                                                             \
        if (n_ < N && (r) < R) y[(r) * N + n_] = has_res ? (t) + res[offr + (r) * N + n_] : (t);              \
    } while (0)
#if TL_NV_PTX
#define MVQ_WARP_FINISH(RR)                                                                                   \
    for (int j = 0; j < MVQ_NRW; j++)                                                                         \
        for (int r = 0; r < RR; r++) {                                                                        \
            const float t_ = warp_sum(acc[j][r]);                                                             \
            if (lane == j * RR + r) MVQ_WSTORE(j, r, t_);                                                      \
        }
#else
#define MVQ_WARP_FINISH(RR)                                                                                   \
    for (int j = 0; j < MVQ_NRW; j++)                                                                         \
        for (int r = 0; r < RR; r++) red[lid * (MVQ_NRW * RR + 1) + j * RR + r] = acc[j][r];                  \
    barrier(CLK_LOCAL_MEM_FENCE);                                                                             \
    if (lane < MVQ_NRW * RR) {                                                                                \
        float t_ = 0.0f;                                                                                      \
        for (int i = 0; i < 32; i++) t_ += red[((lid & ~31) + i) * (MVQ_NRW * RR + 1) + lane];                \
        MVQ_WSTORE(lane / RR, lane % RR, t_);                                                                  \
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
