/* decode.cl: one decoder layer of a decode step (one token) in one launch (tlgpu.decode_layer_, issue 27):
 *   x += wo @ attention(rope(wqkv @ rms_norm(x))),  x += w2 @ (silu(w1 @ h) * (w3 @ h)), h = rms_norm(x),
 * the steps tiny_decoder.Decoder.step takes in six launches (rms_norm_linear, rope_kv_write, attention, addmm,
 * rms_norm_linear, silu_mul_linear). The launches, not the bytes, bound a decode step on NVIDIA's OpenCL
 * (6.4 us of host time each: benchmarks/probe_launch.c), so the layer's five phases run in one kernel,
 * separated by a grid barrier:
 *   1. h = rms_norm(x) * attn_norm (every work-group, into local memory); qkv = wqkv @ h;
 *   2. a work-group per query head: q and its kv head's k rotated (NeoX pairs), k and v stored to the cache
 *      at the position (by the first head of each group), attention over positions [0, p] (position p from
 *      the rotated k in local memory, the others from the cache), out to att;
 *   3. x += wo @ att;
 *   4. h = rms_norm(x) * mlp_norm; g[n] = silu(w1[n] . h) * (w3[n] . h) (rows n and hidden + n of w13);
 *   5. x += w2 @ g.
 * Products: a team takes two weight rows at a time; lane l of the team reads column groups l, l + TS, ...
 * (16-byte loads: 4 float32, 8 half, one q4_0 block's 16 quant bytes, half of a q8_0 block's) against the
 * activations in local memory, then the team's sum. On NVIDIA (TL_NV_PTX) a team is a warp (shfl.sync sums)
 * and the work-group shares by local memory and barriers; elsewhere a work-group is one work-item that does
 * everything alone (no barrier: PoCL takes minutes to build this kernel with barriers in its loops).
 * The grid barrier: a counter and a generation word in `bar`, the last work-group to arrive resets the
 * counter and bumps the generation; the others spin on it. It needs every work-group resident at once: the
 * host launches at most one per compute unit (one where the device cannot promise that: CPU devices). A
 * spin that outlasts DEC_SPIN polls sets bar[2] and stops waiting (wrong values, never a hang); later
 * barriers then pass at once. Data another work-group wrote in this launch is read through volatile
 * pointers (not from a stale L1 line); the weights are constants of the launch.
 * Weights: float32, float16, bfloat16 (w: the (N, K) matrix; d unused) or q4_0 / q8_0 (w: quant.py's qs
 * words, d: the fp16 scales) - one kernel per format (DEC_FMT). The cache's dtype is an argument (kvdt). */
#include "dtype.h"
#include "quant_mvq_lib.h"

#define DEC_F32 0
#define DEC_F16 2
#define DEC_BF16 3
#define DEC_Q4_0 10
#define DEC_Q8_0 11
#ifndef DEC_PHASES
#define DEC_PHASES 31                                /* bit k: phase k + 1 runs (a diagnostic may drop some) */
#endif
#if !defined(DEC_UF) && TL_NV_PTX
#define DEC_UF 4                                     /* unroll of the float / half product loops */
#elif !defined(DEC_UF)
#define DEC_UF 1
#endif
#if !defined(DEC_UQ) && TL_NV_PTX
#define DEC_UQ 2                                     /* and of the quantized ones */
#elif !defined(DEC_UQ)
#define DEC_UQ 1
#endif
#define DEC_PRAGMA(x) _Pragma(#x)
#define DEC_UNROLL(n) DEC_PRAGMA(unroll n)
#ifndef DEC_SPIN
#define DEC_SPIN (1 << 22)
#endif

#if TL_NV_PTX
#define TEAM_SIZE 32
#define LBAR(f) barrier(f)
inline float
team_sum(float v)
{
    return warp_sum(v);
}

inline float                                         /* the work-group's max or sum (L a power of two) */
wg_reduce(float v, int is_max, local float *red)
{
    const int lid = get_local_id(0), L = get_local_size(0);
    red[lid] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = L / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] = is_max ? fmax(red[lid], red[lid + s]) : red[lid] + red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = red[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return r;
}
#else                                                /* one work-item a group: nothing to share */
#define TEAM_SIZE 1
#define LBAR(f)
#define team_sum(v) (v)
#define wg_reduce(v, is_max, red) (v)
#endif

inline void
grid_sync(volatile global uint *bar, uint nwg)
{
    LBAR(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0 && nwg > 1) {
        mem_fence(CLK_GLOBAL_MEM_FENCE);             /* this group's stores before its arrival */
        const uint gen = atomic_or(&bar[1], 0u);
        if (atomic_inc(&bar[0]) == nwg - 1) {
            atomic_xchg(&bar[0], 0u);
            mem_fence(CLK_GLOBAL_MEM_FENCE);
            atomic_inc(&bar[1]);
        } else if (atomic_or(&bar[2], 0u) == 0u) {
            int n = 0;
            while (bar[1] == gen)                    /* a volatile load: no read-modify-write traffic */
                if (++n > DEC_SPIN) {
                    atomic_or(&bar[2], 1u);
                    break;
                }
        }
        mem_fence(CLK_GLOBAL_MEM_FENCE);
    }
    LBAR(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
}

/* Lane tl's part of rows r0 and r1 of the (N, K) matrix dotted with h (local, K floats): 16-byte groups
 * tl, tl + ts, ... (K a multiple of 32). */
inline float2
dot2(int fmt, global const uint4 *w, global const half *d, int r0, int r1, int K, local const float *h, int tl,
     int ts)
{
    local const float4 *h4 = (local const float4 *)h;
    float a0 = 0.0f, a1 = 0.0f;
    if (fmt == DEC_F32) {
        const int n4 = K / 4;
DEC_UNROLL(DEC_UF)
        for (int k = tl; k < n4; k += ts) {
            const float4 x = h4[k];
            a0 += dot(as_float4(w[r0 * n4 + k]), x);
            a1 += dot(as_float4(w[r1 * n4 + k]), x);
        }
    } else if (fmt == DEC_F16 || fmt == DEC_BF16) {
        const int n8 = K / 8;
DEC_UNROLL(DEC_UF)
        for (int k = tl; k < n8; k += ts) {
            const float4 xl = h4[2 * k], xh = h4[2 * k + 1];
            if (fmt == DEC_F16) {
                const global half *p0 = (const global half *)(w + r0 * n8 + k), *p1 = (const global half *)(w + r1 * n8 + k);
                a0 += dot(vload_half4(0, p0), xl) + dot(vload_half4(1, p0), xh);
                a1 += dot(vload_half4(0, p1), xl) + dot(vload_half4(1, p1), xh);
            } else {                                 /* bfloat16: element 2m in the low half of word m */
                const uint4 u0 = w[r0 * n8 + k], u1 = w[r1 * n8 + k], m = (uint4)0xffff0000u;
                a0 += dot(as_float4((uint4)(u0.x << 16, u0.x & m.x, u0.y << 16, u0.y & m.y)), xl) +
                      dot(as_float4((uint4)(u0.z << 16, u0.z & m.x, u0.w << 16, u0.w & m.y)), xh);
                a1 += dot(as_float4((uint4)(u1.x << 16, u1.x & m.x, u1.y << 16, u1.y & m.y)), xl) +
                      dot(as_float4((uint4)(u1.z << 16, u1.z & m.x, u1.w << 16, u1.w & m.y)), xh);
            }
        }
    } else if (fmt == DEC_Q4_0) {                    /* word i: low nibbles elements 4i.., high 16 + 4i.. */
        const int nb = K / 32;
DEC_UNROLL(DEC_UQ)
        for (int b = tl; b < nb; b += ts) {
            const uint4 q0 = w[r0 * nb + b], q1 = w[r1 * nb + b];
            const float d0 = vload_half(r0 * nb + b, d), d1 = vload_half(r1 * nb + b, d);
            float s0 = 0.0f, s1 = 0.0f;
            const uint qa[4] = {q0.x, q0.y, q0.z, q0.w}, qb[4] = {q1.x, q1.y, q1.z, q1.w};
            MVQ_UNROLL
            for (int i = 0; i < 4; i++) {
                const float4 xl = h4[8 * b + i], xh = h4[8 * b + 4 + i];
                const uint4 sh = (uint4)(0, 8, 16, 24);
                const float4 l0 = convert_float4(((uint4)qa[i] >> sh) & 15u) - 8.0f;
                const float4 h0 = convert_float4(((uint4)qa[i] >> (sh + 4u)) & 15u) - 8.0f;
                const float4 l1 = convert_float4(((uint4)qb[i] >> sh) & 15u) - 8.0f;
                const float4 h1 = convert_float4(((uint4)qb[i] >> (sh + 4u)) & 15u) - 8.0f;
                s0 += dot(l0, xl) + dot(h0, xh);
                s1 += dot(l1, xl) + dot(h1, xh);
            }
            a0 = mad(d0, s0, a0);
            a1 = mad(d1, s1, a1);
        }
    } else {                                         /* q8_0: word i holds elements 4i..4i + 3 */
        const int nb = K / 32;
DEC_UNROLL(DEC_UQ)
        for (int b = tl; b < nb; b += ts) {
            const uint4 qa[2] = {w[2 * (r0 * nb + b)], w[2 * (r0 * nb + b) + 1]};
            const uint4 qb[2] = {w[2 * (r1 * nb + b)], w[2 * (r1 * nb + b) + 1]};
            const float d0 = vload_half(r0 * nb + b, d), d1 = vload_half(r1 * nb + b, d);
            float s0 = 0.0f, s1 = 0.0f;
            MVQ_UNROLL
            for (int j = 0; j < 2; j++) {
                const uint a[4] = {qa[j].x, qa[j].y, qa[j].z, qa[j].w}, c[4] = {qb[j].x, qb[j].y, qb[j].z, qb[j].w};
                MVQ_UNROLL
                for (int i = 0; i < 4; i++) {
                    const float4 x = h4[8 * b + 4 * j + i];
                    s0 += dot(convert_float4(as_char4(a[i])), x);
                    s1 += dot(convert_float4(as_char4(c[i])), x);
                }
            }
            a0 = mad(d0, s0, a0);
            a1 = mad(d1, s1, a1);
        }
    }
    return (float2)(a0, a1);
}

/* h[k] = src[k] * rsqrt(mean(src^2) + eps) * g[k] (g NULL: plain copy), k < K, into local memory. */
inline void
stage(volatile global const float *src, global const float *g, float eps, int K, local float *h, local float *red)
{
    const int lid = get_local_id(0), L = get_local_size(0);
    float ss = 0.0f;
    for (int k = lid; k < K; k += L) {
        const float v = src[k];
        h[k] = v;
        ss = mad(v, v, ss);
    }
    const float sc = g != 0 ? rsqrt(wg_reduce(ss, 0, red) / (float)K + eps) : 1.0f;
    if (g != 0)
        for (int k = lid; k < K; k += L) h[k] *= sc * g[k];
    LBAR(CLK_LOCAL_MEM_FENCE);
}

/* y[n] (+)= row n of W . h for n < N (glu: y[n] = silu(W[n] . h) * (W[N + n] . h)); add: y[n] += instead. */
inline void
products(int fmt, global const uint4 *w, global const half *d, int N, int K, local const float *h,
         volatile global float *y, int add, int glu, local float *red)
{
    const int lid = get_local_id(0), ts = TEAM_SIZE, tl = lid % ts;
    const int team = get_group_id(0) * (get_local_size(0) / ts) + lid / ts;
    const int teams = get_num_groups(0) * (get_local_size(0) / ts), step = glu ? 1 : 2;
    for (int n = team * step; n < N; n += teams * step) {
        const int r1 = glu ? N + n : min(n + 1, N - 1);
        float2 a = dot2(fmt, w, d, n, r1, K, h, tl, ts);
        a.x = team_sum(a.x);
        a.y = team_sum(a.y);
        if (tl == 0) {
            if (glu) {
                y[n] = a.x / (1.0f + exp(-a.x)) * a.y;
            } else {
                y[n] = add ? y[n] + a.x : a.x;
                if (n + 1 < N) y[n + 1] = add ? y[n + 1] + a.y : a.y;
            }
        }
    }
}

/* Phase 2 for query head hq: rope, cache write, attention over [0, p]; out: att[hq * D ...]. */
inline void
attend(int hq, int nq, int nkv, int D, int max_len, int p, float log2_theta, float scale,
       volatile global const float *qkv, global uchar *kv, int kvdt, volatile global float *att, local float *lm,
       local float *red)
{
    const int lid = get_local_id(0), L = get_local_size(0), half_d = D / 2, G = nq / nkv, kvh = hq / G;
    local float *lq = lm, *lk = lm + D, *sc = lm + 2 * D;
    const int in = p >= 0 && p < max_len, Lk = clamp(p + 1, 1, max_len);
    for (int i = lid; i < half_d; i += L) {
        const float ang = (float)p * exp2(-(float)(2 * i) / (float)D * log2_theta);
        float c, s = sincos(ang, &c);
        const float qa = qkv[hq * D + i], qb = qkv[hq * D + i + half_d];
        const float ka = qkv[(nq + kvh) * D + i], kb = qkv[(nq + kvh) * D + i + half_d];
        lq[i] = qa * c - qb * s;
        lq[i + half_d] = qa * s + qb * c;
        lk[i] = tl_rnd(kvdt, ka * c - kb * s);
        lk[i + half_d] = tl_rnd(kvdt, ka * s + kb * c);
        if (hq % G == 0 && in) {                     /* the group's first head stores k and v */
            const int ko = (kvh * max_len + p) * D, vo = ((nkv + kvh) * max_len + p) * D, vr = (nq + nkv + kvh) * D;
            tl_st(kv, kvdt, ko + i, lk[i]);
            tl_st(kv, kvdt, ko + i + half_d, lk[i + half_d]);
            tl_st(kv, kvdt, vo + i, qkv[vr + i]);
            tl_st(kv, kvdt, vo + i + half_d, qkv[vr + i + half_d]);
        }
    }
    LBAR(CLK_LOCAL_MEM_FENCE);
    const int ko = kvh * max_len * D, vo = (nkv + kvh) * max_len * D, vr = (nq + nkv + kvh) * D;
    const int ts = TEAM_SIZE, tl = lid % ts, teams = L / ts;
    for (int l = lid / ts; l < Lk; l += teams) {     /* a team a position, its lanes across the head */
        float s = 0.0f;
        for (int i = tl; i < D; i += ts) s = mad(lq[i], l == p ? lk[i] : tl_ld(kv, kvdt, ko + l * D + i), s);
        s = team_sum(s);
        if (tl == 0) sc[l] = s * scale;
    }
    LBAR(CLK_LOCAL_MEM_FENCE);
    float mx = -FLT_MAX;
    for (int l = lid; l < Lk; l += L) mx = fmax(mx, sc[l]);
    mx = wg_reduce(mx, 1, red);
    float sum = 0.0f;
    for (int l = lid; l < Lk; l += L) {
        const float e = exp(sc[l] - mx);
        sc[l] = e;
        sum += e;
    }
    const float inv = 1.0f / wg_reduce(sum, 0, red);  /* its barriers also publish sc */
    /* L >= D: work-item (part, dim) takes positions part, part + parts, ...; else dims lid, lid + L, ... */
    const int parts = L >= D ? L / D : 1, part = L >= D ? lid / D : 0, dstep = L >= D ? D * parts : L;
    for (int dd = L >= D ? lid % D : lid; dd < D && part < parts; dd += dstep) {
        float o = 0.0f;
        for (int l = L >= D ? part : 0; l < Lk; l += parts)
            o = mad(sc[l], l == p ? tl_rnd(kvdt, qkv[vr + dd]) : tl_ld(kv, kvdt, vo + l * D + dd), o);
        if (parts == 1) att[hq * D + dd] = o * inv;
        else red[lid] = o;
    }
    if (parts > 1) {
        LBAR(CLK_LOCAL_MEM_FENCE);
        if (lid < D) {
            float o = 0.0f;
            for (int q = 0; q < parts; q++) o += red[q * D + lid];
            att[hq * D + lid] = o * inv;
        }
    }
    LBAR(CLK_LOCAL_MEM_FENCE);
}

/* x (dim floats) is updated in place. scr: (nq + 2 nkv) * D + dim + hidden floats (qkv, att, g). bar: 3 words,
 * zero at first use (the barrier leaves the counter at zero). lm: max(dim, hidden, 2 D + max_len) floats;
 * red: L floats. Position p = pbuf[offp] + pos0 (pbuf NULL: pos0). */
#ifdef DEC_WG                                        /* a fixed local size: NVIDIA then fits the registers */
#define DEC_ATTR __attribute__((reqd_work_group_size(DEC_WG, 1, 1)))
#else
#define DEC_ATTR
#endif
#define DEC_KERNEL(NAME, FMT)                                                                                 \
kernel DEC_ATTR void                                                                                          \
NAME(int dim, int nq, int nkv, int D, int hidden, int max_len, float eps, float log2_theta, float scale,         \
     global float *x, global const float *attn_norm, global const float *mlp_norm,                            \
     global const uint4 *wqkv, global const half *dqkv, global const uint4 *wo, global const half *dwo,       \
     global const uint4 *w13, global const half *d13, global const uint4 *w2, global const half *d2,          \
     global uchar *kv, int kvdt, global const int *pbuf, int offp, int pos0, global float *scr,               \
     global uint *bar, local float4 *lm4, local float *red)                                                   \
{                                                                                                             \
    const uint nwg = get_num_groups(0);                                                                       \
    const int p = (pbuf != 0 ? pbuf[offp] : 0) + pos0, nqkv = (nq + 2 * nkv) * D;                              \
    volatile global float *vx = x, *qkv = scr, *att = scr + nqkv, *g = att + dim;                             \
    local float *lm = (local float *)lm4;            /* float4-aligned: products read it as float4 */          \
    if (DEC_PHASES & 1) {                                                                                     \
        stage(vx, attn_norm, eps, dim, lm, red);                                                              \
        products(FMT, wqkv, dqkv, nqkv, dim, lm, qkv, 0, 0, red);                                             \
    }                                                                                                         \
    grid_sync(bar, nwg);                                                                                      \
    for (int hq = get_group_id(0); (DEC_PHASES & 2) && hq < nq; hq += nwg)                                    \
        attend(hq, nq, nkv, D, max_len, p, log2_theta, scale, qkv, kv, kvdt, att, lm, red);                   \
    grid_sync(bar, nwg);                                                                                      \
    if (DEC_PHASES & 4) {                                                                                     \
        stage(att, 0, eps, dim, lm, red);                                                                     \
        products(FMT, wo, dwo, dim, dim, lm, vx, 1, 0, red);                                                  \
    }                                                                                                         \
    grid_sync(bar, nwg);                                                                                      \
    if (DEC_PHASES & 8) {                                                                                     \
        stage(vx, mlp_norm, eps, dim, lm, red);                                                               \
        products(FMT, w13, d13, hidden, dim, lm, g, 0, 1, red);                                               \
    }                                                                                                         \
    grid_sync(bar, nwg);                                                                                      \
    if (DEC_PHASES & 16) {                                                                                    \
        stage(g, 0, eps, hidden, lm, red);                                                                    \
        products(FMT, w2, d2, dim, hidden, lm, vx, 1, 0, red);                                                \
    }                                                                                                         \
}
DEC_KERNEL(tl_decode_layer_f32, DEC_F32)
DEC_KERNEL(tl_decode_layer_f16, DEC_F16)
DEC_KERNEL(tl_decode_layer_bf16, DEC_BF16)
DEC_KERNEL(tl_decode_layer_q4_0, DEC_Q4_0)
DEC_KERNEL(tl_decode_layer_q8_0, DEC_Q8_0)
