/* decode.cl: the decoder layers of a decode step (one token) in one launch (tlgpu.decode_layer_, issue 27):
 *   x += wo @ attention(rope(wqkv @ rms_norm(x))),  x += w2 @ (silu(w1 @ h) * (w3 @ h)), h = rms_norm(x),
 * the steps tiny_decoder.Decoder.step takes in six launches (rms_norm_linear, rope_kv_write, attention, addmm,
 * rms_norm_linear, silu_mul_linear). The launches, not the bytes, bound a decode step on NVIDIA's OpenCL (6.4 us
 * of host time each: benchmarks/probe_launch.c), so the layer's five phases run in one kernel, separated by a
 * grid barrier:
 *   1. h = rms_norm(x) * attn_norm (every work-group, into local memory); qkv = wqkv @ h;
 *   2. a work-group per query head: q and its kv head's k rotated (NeoX pairs), k and v stored to the cache
 *      at the position (by the first head of each group), attention over positions [0, p] (position p from
 *      the rotated k in local memory, the others from the cache), out to att;
 *   3. x += wo @ att;
 *   4. h = rms_norm(x) * mlp_norm; g[n] = silu(w1[n] . h) * (w3[n] . h) (rows n and hidden + n of w13);
 *   5. x += w2 @ g.
 * With nl > 1 the launch runs nl layers in turn (their arguments stacked: layer l's matrices, norms and cache
 * l strides on from the first), a grid barrier after each; with vocab > 0 it ends with the head, logits = head @
 * (rms_norm(x) * head_norm), as phase 1's product. The whole greedy step (emb, next, advance): layer 0 starts
 * from the token's embedding row, and after the head each work-group's best row (its argmax candidate), a grid
 * barrier, and work-group 0 picks the token among the candidates and advances the position.
 * Products: a team takes one weight row at a time, two where the rows outnumber the teams; lane l of the team
 * reads column groups l, l + TS, ... (16-byte loads: 4 float32, 8 half, one q4_0 block's 16 quant bytes, half of
 * a q8_0 block's) against the activations in local memory (for q4_0 / q8_0 rounded to int8 blocks, as the
 * quantized matrix-vector kernels round them, and dotted in integers), then the team's sum. On NVIDIA
 * (TL_NV_PTX) a team is a warp (shfl.sync sums) and the work-group shares by local memory and barriers;
 * elsewhere a work-group is one work-item that does everything alone (no barrier: PoCL takes minutes to build
 * this kernel with barriers in its loops). The grid barrier (grid_sync): one atomic add a work-group to a word
 * of `bar` whose top bit flips when the last arrives; the others spin on it. It needs every work-group resident
 * at once: the host launches at most one per compute unit (one where the device cannot promise that: CPU
 * devices). A spin that outlasts DEC_SPIN polls sets bar[2] and stops waiting (wrong values, never a hang);
 * later barriers then pass at once. Data another work-group wrote in this launch is read through volatile
 * pointers (not from a stale L1 line); the weights are constants of the launch. Weights: float32, float16,
 * bfloat16 (w: the (N, K) matrix; d unused) or q4_0 / q8_0 (w: quant.py's qs words, d: the fp16 scales) - one
 * kernel per format (DEC_FMT). The cache's dtype is an argument (kvdt). */
#include "dtype.h"
#include "quant_mvq_lib.h"
#include "arg_better.h"

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
#if TL_NV_PTX                                        /* unroll hints for NVIDIA only (PoCL warns on them) */
#define DEC_UNROLL(n) DEC_PRAGMA(unroll n)
#else
#define DEC_UNROLL(n)
#endif
#ifndef DEC_SPIN
#define DEC_SPIN (1 << 22)
#endif

#ifndef DEC_STAMPS
#define DEC_STAMPS 0                                 /* 1 (NVIDIA, a diagnostic): %globaltimer at the phases' ends */
#endif
#if DEC_STAMPS && TL_NV_PTX                          /* bar[4 + 16 g + k]: work-group g's stamp k (ns, low word) */
#define STAMP(k)                                                                                              \
    do {                                                                                                      \
        if (get_local_id(0) == 0) {                                                                           \
            uint t_;                                                                                          \
            MVQ_ASM volatile("mov.u32 %0, %%globaltimer_lo;" : "=r"(t_));                                     \
            bar[4 + 16 * get_group_id(0) + (k)] = t_;                                                         \
        }                                                                                                     \
    } while (0)
#else
#define STAMP(k)
#endif

#if TL_NV_PTX
#define TEAM_SIZE 32
#define LBAR(f) barrier(f)
inline float
team_sum(float v)
{
    return warp_sum(v);
}

inline float                                         /* lane ^ m's v (every lane of the warp calls it) */
shfl_xor(float v, int m)
{
    float t;
    MVQ_ASM volatile("shfl.sync.bfly.b32 %0, %1, %2, 0x1f, 0xffffffff;" : "=f"(t) : "f"(v), "r"(m));
    return t;
}

inline float                                         /* the warp's max, in every lane */
warp_max(float v)
{
    for (int m = 16; m > 0; m >>= 1) v = fmax(v, shfl_xor(v, m));
    return v;
}

inline float                                         /* the sum over the aligned 8 lanes, in each of them */
lanes8_fsum(float v)
{
    for (int m = 1; m < 8; m <<= 1) v += shfl_xor(v, m);
    return v;
}
#define ATT_TS 8                                     /* attention's scores: 8 lanes a position */
#define att_sum(v) lanes8_fsum(v)

inline float                                         /* the work-group's max or sum (L a multiple of 32) */
wg_reduce(float v, int is_max, local float *red)
{
    const int lid = get_local_id(0), nw = get_local_size(0) / 32;
    v = is_max ? warp_max(v) : warp_sum(v);          /* each warp, then its lane 0's partial in red */
    if (lid % 32 == 0) red[lid / 32] = v;
    barrier(CLK_LOCAL_MEM_FENCE);
    float r = lid % 32 < nw ? red[lid % 32] : is_max ? -INFINITY : 0.0f;   /* every warp: the partials' total */
    r = is_max ? warp_max(r) : warp_sum(r);          /* (a butterfly: the same bits in every lane) */
    barrier(CLK_LOCAL_MEM_FENCE);                    /* red is free again */
    return r;
}
#else                                                /* one work-item a group: nothing to share */
#define TEAM_SIZE 1
#define ATT_TS 1
#define att_sum(v) (v)
#define LBAR(f)
#define team_sum(v) (v)
#define wg_reduce(v, is_max, red) (v)
#endif

/* The grid barrier (one atomic a work-group, as CUDA's cooperative groups): work-group 0 adds 2^31 - (nwg - 1)
 * to bar[0], the others 1, so the word's top bit flips once all have arrived (its low 31 bits stay 0 between
 * barriers, whatever nwg a launch has); each waits for the flip by volatile loads. Work-group 0 then counts the
 * barrier in bar[1] (a generation for _decode_barrier). */
inline void
grid_sync(volatile global uint *bar, uint nwg)
{
    LBAR(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0 && nwg > 1) {
        mem_fence(CLK_GLOBAL_MEM_FENCE);             /* this group's stores before its arrival */
        const int first = get_group_id(0) == 0;
        const uint old = atomic_add(&bar[0], first ? 0x80000000u - (nwg - 1u) : 1u);
        if (bar[2] == 0u) {
            int n = 0;
            while (((bar[0] ^ old) & 0x80000000u) == 0u)   /* volatile loads: no read-modify-write traffic */
                if (++n > DEC_SPIN) {
                    atomic_or(&bar[2], 1u);
                    break;
                }
        }
        if (first) atomic_inc(&bar[1]);
        mem_fence(CLK_GLOBAL_MEM_FENCE);
    }
    LBAR(CLK_GLOBAL_MEM_FENCE | CLK_LOCAL_MEM_FENCE);
}

/* Lane tl's part of rows r0 and r1 of the (N, K) matrix dotted with h (local, K floats): 16-byte groups
 * tl, tl + ts, ... (K a multiple of 32). */
inline float2
dot2(int fmt, global const uint4 *w, global const half *d, int r0, int r1, int K, local const float *h,
     local const uint4 *xq, local const int2 *xs, int tl, int ts)
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
    } else {                                         /* q4_0 / q8_0 against x's int8 blocks (xq, xs) */
        const int nb = K / 32;
DEC_UNROLL(DEC_UQ)
        for (int b = tl; b < nb; b += ts) {
            const uint4 lo = xq[2 * b], hi = xq[2 * b + 1];
            const int2 xb = xs[b];
            const float dx = as_float(xb.x);
            const float d0 = vload_half(r0 * nb + b, d) * dx, d1 = vload_half(r1 * nb + b, d) * dx;
            if (fmt == DEC_Q4_0) {                   /* word i: low nibbles elements 4i.., high 16 + 4i.. */
                a0 = mad(d0, (float)mvq_dot_q4_0(w[r0 * nb + b], lo, hi, xb.y), a0);
                a1 = mad(d1, (float)mvq_dot_q4_0(w[r1 * nb + b], lo, hi, xb.y), a1);
            } else {                                 /* q8_0: word i holds elements 4i..4i + 3 */
                const uint8 q0 = (uint8)(w[2 * (r0 * nb + b)], w[2 * (r0 * nb + b) + 1]);
                const uint8 q1 = (uint8)(w[2 * (r1 * nb + b)], w[2 * (r1 * nb + b) + 1]);
                a0 = mad(d0, (float)mvq_dot_q8_0(q0, lo, hi, xb.y), a0);
                a1 = mad(d1, (float)mvq_dot_q8_0(q1, lo, hi, xb.y), a1);
            }
        }
    }
    return (float2)(a0, a1);
}

/* h[k] = src[k] for k < K (a multiple of 4; src 16-byte aligned), into local memory; returns the work-item's part
 * of sum(src^2). float4 loads, a work-item's all issued before their use: the phase's start is a chain of
 * latencies otherwise. */
inline float
stage_load(volatile global const float *src, int K, local float *h)
{
    const int lid = get_local_id(0), L = get_local_size(0), K4 = K / 4;
    volatile global const float4 *s4 = (volatile global const float4 *)src;
    local float4 *h4 = (local float4 *)h;
    float ss = 0.0f;
    for (int k0 = lid; k0 < K4; k0 += 4 * L) {       /* 4 loads issued before their use */
        float4 v[4];
        MVQ_UNROLL
        for (int u = 0; u < 4; u++) v[u] = k0 + u * L < K4 ? s4[k0 + u * L] : (float4)0.0f;
        MVQ_UNROLL
        for (int u = 0; u < 4; u++) {
            if (k0 + u * L < K4) h4[k0 + u * L] = v[u];
            ss += dot(v[u], v[u]);
        }
    }
    return ss;
}

/* Elements 4 k4 .. 4 k4 + 3 of row `row` of the (rows, K) matrix e of format fmt (d: the quantized ones'
 * scales), as floats: the embedding's dequantization (quant.cl's get_rows: d * (q - 8), d * q). */
inline float4
emb_ld4(int fmt, global const uint4 *e, global const half *d, int row, int K, int k4)
{
    const long i = (long)row * K + 4 * k4;           /* the first element */
    if (fmt == DEC_F32) return as_float4(e[i / 4]);
    if (fmt == DEC_F16) return vload_half4(i / 4, (global const half *)e);
    if (fmt == DEC_BF16) {
        const uint2 u = ((global const uint2 *)e)[i / 4];
        return as_float4((uint4)(u.x << 16, u.x & 0xffff0000u, u.y << 16, u.y & 0xffff0000u));
    }
    const long b = i / 32;
    const int j = (int)(i % 32);
    const float db = vload_half(b, d);
    if (fmt == DEC_Q4_0) {                           /* block word w: low nibbles elements 4w.., high 16 + 4w.. */
        const uint u = ((global const uint *)e)[4 * b + (j % 16) / 4] >> (j >= 16 ? 4 : 0);
        return db * (convert_float4((uint4)(u & 15u, (u >> 8) & 15u, (u >> 16) & 15u, (u >> 24) & 15u)) - 8.0f);
    }
    return db * convert_float4(as_char4(((global const uint *)e)[8 * b + j / 4]));
}

/* h = row `row` of the embedding e (rows of K elements), as stage_load does for a vector; a row outside [0,
 * rows) reads as NaN (as quant.cl's get_rows: a bad id must not pass unseen). x (wr): the row stored too. */
inline float
embed_load(int fmt, global const uint4 *e, global const half *d, int row, int rows, int K, local float *h,
           global float *x, int wr)
{
    const int lid = get_local_id(0), L = get_local_size(0), K4 = K / 4, ok = row >= 0 && row < rows;
    local float4 *h4 = (local float4 *)h;
    float ss = 0.0f;
    for (int k = lid; k < K4; k += L) {
        const float4 v = ok ? emb_ld4(fmt, e, d, row, K, k) : (float4)NAN;
        h4[k] = v;
        if (wr) vstore4(v, k, x);
        ss += dot(v, v);
    }
    return ss;
}

/* h (staged by stage_load / embed_load, ss the work-item's part of its sum of squares) *= rsqrt(mean(h^2) + eps)
 * * g (g NULL: left as it is). */
inline void
stage_norm(float ss, global const float *g, float eps, int K, local float *h, local float *red)
{
    const int lid = get_local_id(0), L = get_local_size(0), K4 = K / 4;
    global const float4 *g4 = (global const float4 *)g;
    local float4 *h4 = (local float4 *)h;
    if (g != 0) {                                    /* the norm's first weights before the reduction */
        const float4 g0 = lid < K4 ? g4[lid] : (float4)0.0f;
        const float sc = rsqrt(wg_reduce(ss, 0, red) / (float)K + eps);
        for (int k = lid; k < K4; k += L) h4[k] *= sc * (k == lid ? g0 : g4[k]);
    }
    LBAR(CLK_LOCAL_MEM_FENCE);
}

/* h = src * rsqrt(mean(src^2) + eps) * g (g NULL: a plain copy), K floats into local memory. */
inline void
stage(volatile global const float *src, global const float *g, float eps, int K, local float *h, local float *red)
{
    stage_norm(stage_load(src, K, h), g, eps, K, h, red);
}

/* The work-group's best of its work-items' candidates (bv, bi) in numpy's argmax order (arg_better: a total order,
 * so any tree agrees; bi -1: none), in work-item 0: (the value's bits, the index). red: L / 32 floats and as many
 * ints after them (NVIDIA; elsewhere a work-group is one work-item). */
inline int2
wg_argbest(float bv, int bi, local float *red)
{
#if TL_NV_PTX
    const int lid = get_local_id(0), nw = get_local_size(0) / 32;
    local int *ri = (local int *)(red + nw);
    for (int m = 16; m > 0; m >>= 1) {               /* the warp's best */
        const float ov = shfl_xor(bv, m);
        arg_keep(1, &bv, &bi, ov, as_int(shfl_xor(as_float(bi), m)));
    }
    if (lid % 32 == 0) {
        red[lid / 32] = bv;
        ri[lid / 32] = bi;
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lid == 0)
        for (int w = 1; w < nw; w++) arg_keep(1, &bv, &bi, red[w], ri[w]);
    barrier(CLK_LOCAL_MEM_FENCE);                    /* red is free again */
#endif
    return (int2)(as_int(bv), bi);
}

/* Quantized formats: h's blocks of 32 as int8 as the quantized matrix-vector kernels round x (mvq_quant4: q =
 * rint(h / dx), dx = amax / 127), in xq (lo: elements 0-15, hi: 16-31, a uint4 each) and xs (dx's bits, sum q);
 * the products are then integer dot products (dp4a on NVIDIA), the float dequantization's conversions gone. */
#if TL_NV_PTX
inline void                                          /* 8 lanes a block, a float4 each; the same words */
stage_q8(int K, local const float *h, local uint4 *xq, local int2 *xs)
{
    const int lid = get_local_id(0), L = get_local_size(0), nb = K / 32, i = lid % 8;
    local const float4 *h4 = (local const float4 *)h;
    local uint *xw = (local uint *)xq;               /* block b's word i: xq[2 b + i / 4]'s element i % 4 */
    for (int b0 = 0; b0 < nb; b0 += L / 8) {         /* the same trips in every lane (the shuffles) */
        const int b = b0 + lid / 8, ok = b < nb;
        const float4 v = ok ? h4[8 * b + i] : (float4)0.0f;
        float amax = max4(v);
        for (int m = 1; m < 8; m <<= 1) amax = fmax(amax, shfl_xor(amax, m));
        int t;
        const uint q = mvq_quant4(v, amax, &t);
        const int qsum = (int)lanes8_fsum((float)t); /* |sum| <= 32 * 127: exact in a float */
        if (ok) {
            xw[8 * b + i] = q;
            if (i == 0) xs[b] = (int2)(as_int(amax / 127.0f), qsum);
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}

/* Quantized formats on NVIDIA: src (K floats) * rsqrt(mean(src^2) + eps) * g (g NULL: no norm) straight into its
 * int8 blocks, as stage() then stage_q8() make them (the same words) without the float copy in local memory and
 * its barrier: work-item lid keeps float4s lid, lid + L, ... (at most SQ_MAX; 8 neighbours a block) in registers
 * across the norm's reduction. */
#ifndef SQ_MAX
#define SQ_MAX 3
#endif
#ifndef DEC_QX
#define DEC_QX 1                                     /* 0: stage() then stage_q8() (a diagnostic) */
#endif
#define SQ_FITS(K) (DEC_QX && (K) / 4 <= SQ_MAX * (int)get_local_size(0))
inline void
stage_qx(volatile global const float *src, global const float *g, float eps, int K, local uint4 *xq, local int2 *xs,
         local float *red)
{
    const int lid = get_local_id(0), L = get_local_size(0), K4 = K / 4, i = lid % 8;
    volatile global const float4 *s4 = (volatile global const float4 *)src;
    global const float4 *g4 = (global const float4 *)g;
    local uint *xw = (local uint *)xq;
    float4 v[SQ_MAX], gw[SQ_MAX];
    float ss = 0.0f;
    MVQ_UNROLL
    for (int u = 0; u < SQ_MAX; u++) {               /* every load issued before its use */
        const int k = lid + u * L;
        v[u] = k < K4 ? s4[k] : (float4)0.0f;
        gw[u] = g != 0 && k < K4 ? g4[k] : (float4)0.0f;
    }
    MVQ_UNROLL
    for (int u = 0; u < SQ_MAX; u++) ss += dot(v[u], v[u]);
    if (g != 0) {
        const float sc = rsqrt(wg_reduce(ss, 0, red) / (float)K + eps);
        MVQ_UNROLL
        for (int u = 0; u < SQ_MAX; u++) v[u] *= sc * gw[u];
    }
    MVQ_UNROLL
    for (int u = 0; u < SQ_MAX; u++) {
        const int k = lid + u * L;
        if (u * L < K4) {                            /* the same in every lane (the shuffles) */
            float amax = max4(v[u]);
            for (int m = 1; m < 8; m <<= 1) amax = fmax(amax, shfl_xor(amax, m));
            int t;
            const uint q = mvq_quant4(v[u], amax, &t);
            const int qsum = (int)lanes8_fsum((float)t);
            if (k < K4) {
                xw[k] = q;
                if (i == 0) xs[k / 8] = (int2)(as_int(amax / 127.0f), qsum);
            }
        }
    }
    barrier(CLK_LOCAL_MEM_FENCE);
}
#else                                                /* a work-item a block */
#define SQ_FITS(K) 0
#define stage_qx(src, g, eps, K, xq, xs, red)
inline void
stage_q8(int K, local const float *h, local uint4 *xq, local int2 *xs)
{
    const int lid = get_local_id(0), L = get_local_size(0), nb = K / 32;
    local const float4 *h4 = (local const float4 *)h;
    for (int b = lid; b < nb; b += L) {
        float4 v[8];
        float amax = 0.0f;
        MVQ_UNROLL
        for (int i = 0; i < 8; i++) {
            v[i] = h4[8 * b + i];
            amax = fmax(amax, max4(v[i]));
        }
        uint q[8];
        int qsum = 0;
        MVQ_UNROLL
        for (int i = 0; i < 8; i++) {
            int t;
            q[i] = mvq_quant4(v[i], amax, &t);
            qsum += t;
        }
        xq[2 * b] = (uint4)(q[0], q[1], q[2], q[3]);
        xq[2 * b + 1] = (uint4)(q[4], q[5], q[6], q[7]);
        xs[b] = (int2)(as_int(amax / 127.0f), qsum);
    }
}
#endif

/* y[n] (+)= row n of W . h for n < N (glu: y[n] = silu(W[n] . h) * (W[N + n] . h)); add: y[n] += instead. best
 * (not NULL, plain products): the work-group's argmax candidate of its rows' y, (value, index bits), at
 * best[group] (the argmax then reads one pair a work-group, not every y). */
inline void
products(int fmt, global const uint4 *w, global const half *d, int N, int K, local const float *h,
         local const uint4 *xq, local const int2 *xs,
         volatile global float *y, int add, int glu, local float *red, volatile global float2 *best)
{
    const int lid = get_local_id(0), ts = TEAM_SIZE, tl = lid % ts;
    const int team = get_group_id(0) * (get_local_size(0) / ts) + lid / ts;
    const int teams = get_num_groups(0) * (get_local_size(0) / ts), step = glu || N <= teams ? 1 : 2;
    float bv = 0.0f;                                 /* lane 0's best row (best) */
    int bi = -1;
    for (int n = team * step; n < N; n += teams * step) {          /* two rows a team only when they are many */
        const int r1 = glu ? N + n : min(n + step - 1, N - 1);
        float2 a = dot2(fmt, w, d, n, r1, K, h, xq, xs, tl, ts);
        a.x = team_sum(a.x);
        a.y = team_sum(a.y);
        if (tl == 0) {
            if (glu) {
                y[n] = a.x / (1.0f + exp(-a.x)) * a.y;
            } else {
                y[n] = add ? y[n] + a.x : a.x;
                if (step == 2 && n + 1 < N) y[n + 1] = add ? y[n + 1] + a.y : a.y;
            }
            if (best != 0) arg_keep(1, &bv, &bi, a.x, n);
            if (best != 0 && step == 2 && n + 1 < N) arg_keep(1, &bv, &bi, a.y, n + 1);
        }
    }
    if (best != 0) {
        const int2 b = wg_argbest(bv, bi, red);
        if (lid == 0) best[get_group_id(0)] = (float2)(as_float(b.x), as_float(b.y));
    }
}

/* Elements 4 i4 .. 4 i4 + 3 of the cache (dtype dt) as floats. */
inline float4
kv_ld4(global const uchar *kv, int dt, int i4)
{
    if (dt == TL_DT_F16) return vload_half4(i4, (global const half *)kv);
    if (dt == TL_DT_BF16) {
        const uint2 u = ((global const uint2 *)kv)[i4];
        return as_float4((uint4)(u.x << 16, u.x & 0xffff0000u, u.y << 16, u.y & 0xffff0000u));
    }
    return ((global const float4 *)kv)[i4];
}

/* o += sc[l] * cache[base + l D] for l = l0, l0 + dl, ... < l1, in that order: 8 loads issued before their
 * products (a chain of latencies otherwise), one loop a dtype. */
#define ATT_ACC(LD)                                                                                           \
    for (int j = l0; j < l1; j += 8 * dl) {                                                                   \
        float v[8];                                                                                           \
        MVQ_UNROLL                                                                                            \
        for (int u = 0; u < 8; u++) {                                                                         \
            const int l = j + u * dl;                                                                         \
            v[u] = l < l1 ? (LD) : 0.0f;                                                                      \
        }                                                                                                     \
        MVQ_UNROLL                                                                                            \
        for (int u = 0; u < 8; u++)                                                                           \
            if (j + u * dl < l1) o = mad(sc[j + u * dl], v[u], o);                                            \
    }
inline float
att_values(global const uchar *kv, int dt, int base, int D, local const float *sc, int l0, int l1, int dl, float o)
{
    if (dt == TL_DT_F16) ATT_ACC(vload_half(base + l * D, (global const half *)kv))
    else if (dt == TL_DT_BF16) ATT_ACC(as_float((uint)((global const ushort *)kv)[base + l * D] << 16))
    else ATT_ACC(((global const float *)kv)[base + l * D])
    return o;
}

/* Phase 2 for query head hq: rope, cache write, attention over [0, p]; out: att[hq * D ...]. The scores: ATT_TS
 * lanes a position, each lane's float4s of the head (D a multiple of 4) issued together; the values: a
 * work-item a (dimension, part of the positions), the cache's positions in one unrolled loop a dtype and
 * position p's value (from qkv, rounded as the cache stores it) last, as the position order has it. The
 * first round's keys and the first 8 values of a work-item are loaded before the rope (they are older
 * positions, which nothing here writes): their latency overlaps the rope's and the softmax's. */
inline void
attend(int hq, int nq, int nkv, int D, int max_len, int p, float log2_theta, float scale,
       volatile global const float *qkv, global uchar *kv, int kvdt, volatile global float *att, local float *lm,
       local float *red)
{
    const int lid = get_local_id(0), L = get_local_size(0), half_d = D / 2, G = nq / nkv, kvh = hq / G, D4 = D / 4;
    local float *lq = lm, *lk = lm + D, *sc = lm + 2 * D;
    const int in = p >= 0 && p < max_len, Lk = clamp(p + 1, 1, max_len), Lc = in ? Lk - 1 : Lk;
    const int ko = kvh * max_len * D, vo = (nkv + kvh) * max_len * D, vr = (nq + nkv + kvh) * D;
    const int tl = lid % ATT_TS, teams = L / ATT_TS, l1 = lid / ATT_TS;
    /* L >= D: work-item (part, dim) takes positions part, part + parts, ...; else dims lid, lid + L, ... */
    const int parts = L >= D ? L / D : 1, part = L >= D ? lid / D : 0, dstep = L >= D ? D * parts : L;
    const int dd0 = L >= D ? lid % D : lid;
    float4 kpre[4];
    float vpre[8];
    MVQ_UNROLL
    for (int i = 0; i < 4; i++) {
        const int c = tl + i * ATT_TS;
        kpre[i] = l1 < Lc && c < D4 ? kv_ld4(kv, kvdt, (ko + l1 * D) / 4 + c) : (float4)0.0f;
    }
    MVQ_UNROLL
    for (int u = 0; u < 8; u++) {
        const int l = part + u * parts;
        vpre[u] = dd0 < D && part < parts && l < Lc ? tl_ld(kv, kvdt, vo + dd0 + l * D) : 0.0f;
    }
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
            const int kp = ko + p * D, vp = vo + p * D;
            tl_st(kv, kvdt, kp + i, lk[i]);
            tl_st(kv, kvdt, kp + i + half_d, lk[i + half_d]);
            tl_st(kv, kvdt, vp + i, qkv[vr + i]);
            tl_st(kv, kvdt, vp + i + half_d, qkv[vr + i + half_d]);
        }
    }
    LBAR(CLK_LOCAL_MEM_FENCE);
    local const float4 *q4 = (local const float4 *)lq, *k4 = (local const float4 *)lk;
    for (int l0 = 0; l0 < Lk; l0 += teams) {         /* every lane the same rounds: the sums' shuffles */
        const int l = l0 + l1;
        float s = 0.0f;
        if (l < Lc && l0 == 0) {
            MVQ_UNROLL
            for (int i = 0; i < 4; i++)
                if (tl + i * ATT_TS < D4) s += dot(q4[tl + i * ATT_TS], kpre[i]);
            for (int c = tl + 4 * ATT_TS; c < D4; c += ATT_TS) s += dot(q4[c], kv_ld4(kv, kvdt, (ko + l * D) / 4 + c));
        } else if (l < Lc) {
DEC_UNROLL(4)
            for (int c = tl; c < D4; c += ATT_TS) s += dot(q4[c], kv_ld4(kv, kvdt, (ko + l * D) / 4 + c));
        } else if (l < Lk) {                         /* position p: its k from local memory */
            for (int c = tl; c < D4; c += ATT_TS) s += dot(q4[c], k4[c]);
        }
        s = att_sum(s);
        if (tl == 0 && l < Lk) sc[l] = s * scale;
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
    for (int dd = dd0; dd < D && part < parts; dd += dstep) {
        float o = 0.0f;
        int lv = part;
        if (dd == dd0) {                             /* the preloaded values first */
            MVQ_UNROLL
            for (int u = 0; u < 8; u++)
                if (part + u * parts < Lc) o = mad(sc[part + u * parts], vpre[u], o);
            lv = part + 8 * parts;
        }
        o = att_values(kv, kvdt, vo + dd, D, sc, lv, Lc, parts, o);
        if (in && Lc % parts == part) o = mad(sc[Lc], tl_rnd(kvdt, qkv[vr + dd]), o);
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

/* x (dim floats) is updated in place; logits (vocab floats, vocab > 0) written. scr: (nq + 2 nkv) * D + dim +
 * hidden + 2 nwg floats (qkv, att, g, the argmax's candidates). bar: 4 words, zero at first use (the barrier leaves
 * bar[0]'s low 31 bits as it found them, its top bit flipped a barrier, and advances the generation bar[1]), then
 * 16 stamps a work-group (DEC_STAMPS: 0-9 the last layer's phases, 10 and 11 the launch's start and end, 12-15
 * the ends of the stagings before the qkv, w2, wo and w13 products). lm:
 * max(dim, hidden, 2 D + max_len) floats rounded up to float4s, and for q4_0 / q8_0 10 words a block of 32 of
 * max(dim, hidden) (x's int8 blocks and scales); red: L floats. Position p = pbuf[offp] + pos0 (pbuf NULL: pos0);
 * the cache starts kvo elements into kv. emb (erows rows of dim, the weights' format; NULL: none): layer 0 starts
 * from x = emb[tbuf[offt]] (work-group 0 stores it to x) instead of x. next (NULL: none): after the head, next[0] =
 * argmax(logits); advance: pbuf[offp] += 1 at the launch's end (a grid barrier before either). */
#ifdef DEC_WG                                        /* a fixed local size: NVIDIA then fits the registers */
#define DEC_ATTR __attribute__((reqd_work_group_size(DEC_WG, 1, 1)))
#else
#define DEC_ATTR
#endif
/* Layer LAYER's matrix M (its N x K weights: uint4s of w, halves of d, the quantized formats' scales). */
#define W_AT(FMT, M, N, K)                                                                                    \
    (M + (long)LAYER * (N) * (K) / (FMT == DEC_F32 ? 4 : FMT <= DEC_BF16 ? 8 : FMT == DEC_Q4_0 ? 32 : 16))
#define D_AT(FMT, M, N, K) (M + (FMT >= DEC_Q4_0 ? (long)LAYER * (N) * (K) / 32 : 0L))
/* x's staging before a product: src * rsqrt(mean(src^2) + eps) * NORM (NORM NULL: src), K floats, into lm, and for
 * the quantized formats into x's int8 blocks (xq, xs), straight there by stage_qx where it fits (NVIDIA). */
#define QX(FMT, K) (FMT >= DEC_Q4_0 && SQ_FITS(K))
#define STAGE(FMT, SRC, NORM, K)                                                                               \
    do {                                                                                                      \
        if (QX(FMT, K)) {                                                                                     \
            stage_qx(SRC, NORM, eps, K, xq, xs, red);                                                         \
        } else {                                                                                              \
            stage(SRC, NORM, eps, K, lm, red);                                                                \
            if (FMT >= DEC_Q4_0) stage_q8(K, lm, xq, xs);                                                     \
        }                                                                                                     \
    } while (0)
/* The layer, read back from local memory in each phase (volatile): the layer's pointers then live in their phase
 * alone. Kept in registers across the layer loop they cost the float16 kernel a third of its speed (57 us a
 * medium layer against 38: past 128 registers, spills; benchmarks/NOTES.md, seventh session). */
#define LAYER (*(volatile local int *)&lcur)
#define DEC_KERNEL(NAME, FMT)                                                                                 \
kernel DEC_ATTR void                                                                                          \
NAME(int dim, int nq, int nkv, int D, int hidden, int max_len, float eps, float log2_theta, float scale,      \
     global float *x, global const float *attn_norm, global const float *mlp_norm,                            \
     global const uint4 *wqkv, global const half *dqkv, global const uint4 *wo, global const half *dwo,       \
     global const uint4 *w13, global const half *d13, global const uint4 *w2, global const half *d2,          \
     global uchar *kv, int kvdt, global int *pbuf, int offp, int pos0, global float *scr,                     \
     global uint *bar, local float4 *lm4, local float *red, int nl, int kvo, global const float *head_norm,   \
     global const uint4 *head, global const half *dhead, global float *logits, int vocab,                     \
     global const uint4 *emb, global const half *demb, int erows, global const int *tbuf, int offt,           \
     global int *next, int advance)                                                                           \
{                                                                                                             \
    local int lcur;                                                                                           \
    const uint nwg = get_num_groups(0);                                                                       \
    const int p0 = pbuf != 0 ? pbuf[offp] : 0, p = p0 + pos0, nqkv = (nq + 2 * nkv) * D;                      \
    const int tok = emb != 0 ? tbuf[offt] : 0;                                                                \
    volatile global float *vx = x, *qkv = scr, *att = scr + nqkv, *g = att + dim;                             \
    volatile global float2 *wbest = (volatile global float2 *)(g + hidden);   /* argmax: a pair a group */    \
    local float *lm = (local float *)lm4;            /* float4-aligned: products read it as float4 */         \
    const int lmf = (max(max(dim, hidden), 2 * D + max_len) + 3) & ~3, nbx = max(dim, hidden) / 32;           \
    local uint4 *xq = (local uint4 *)(lm4 + lmf / 4);  /* quantized formats: x's int8 blocks after h */       \
    local int2 *xs = (local int2 *)(xq + 2 * nbx);                                                            \
    const long kvl = (long)2 * nkv * max_len * D;    /* a layer's cache elements */                           \
    STAMP(10);                                                                                                \
    for (int l = 0; l < nl; l++) {                                                                            \
        if (get_local_id(0) == 0) lcur = l;                                                                   \
        LBAR(CLK_LOCAL_MEM_FENCE);                                                                            \
        STAMP(0);                                                                                             \
        if (DEC_PHASES & 1) {                        /* layer 0 with emb: x = the token's row */              \
            if (QX(FMT, dim) && !(emb != 0 && l == 0)) {                                                           \
                stage_qx(vx, attn_norm + LAYER * dim, eps, dim, xq, xs, red);                                 \
            } else {                                                                                          \
                const float ss = emb != 0 && l == 0 ? embed_load(FMT, emb, demb, tok, erows, dim, lm, x,      \
                                                                 get_group_id(0) == 0)                        \
                                                    : stage_load(vx, dim, lm);                                \
                stage_norm(ss, attn_norm + LAYER * dim, eps, dim, lm, red);                                   \
                if (FMT >= DEC_Q4_0) stage_q8(dim, lm, xq, xs);                                               \
            }                                                                                                 \
            STAMP(12);                                                                                        \
            products(FMT, W_AT(FMT, wqkv, nqkv, dim), D_AT(FMT, dqkv, nqkv, dim), nqkv, dim, lm, xq, xs, qkv, \
                     0, 0, red, 0);                                                                           \
        }                                                                                                     \
        STAMP(1);                                                                                             \
        grid_sync(bar, nwg);                                                                                  \
        STAMP(2);                                                                                             \
        for (int hq = get_group_id(0); (DEC_PHASES & 2) && hq < nq; hq += nwg)                                \
            attend(hq, nq, nkv, D, max_len, p, log2_theta, scale, qkv,                                        \
                   kv + (kvo + LAYER * kvl) * (kvdt == TL_DT_F32 ? 4 : 2), kvdt, att, lm, red);               \
        STAMP(3);                                                                                             \
        grid_sync(bar, nwg);                                                                                  \
        STAMP(4);                                                                                             \
        if (DEC_PHASES & 4) {                                                                                 \
            STAGE(FMT, att, 0, dim);                                                                            \
            STAMP(14);                                                                                        \
            products(FMT, W_AT(FMT, wo, dim, dim), D_AT(FMT, dwo, dim, dim), dim, dim, lm, xq, xs, vx, 1, 0,  \
                     red, 0);                                                                                 \
        }                                                                                                     \
        STAMP(5);                                                                                             \
        grid_sync(bar, nwg);                                                                                  \
        STAMP(6);                                                                                             \
        if (DEC_PHASES & 8) {                                                                                 \
            STAGE(FMT, vx, mlp_norm + LAYER * dim, dim);                                                      \
            STAMP(15);                                                                                        \
            products(FMT, W_AT(FMT, w13, 2 * hidden, dim), D_AT(FMT, d13, 2 * hidden, dim), hidden, dim, lm,  \
                     xq, xs, g, 0, 1, red, 0);                                                                \
        }                                                                                                     \
        STAMP(7);                                                                                             \
        grid_sync(bar, nwg);                                                                                  \
        STAMP(8);                                                                                             \
        if (DEC_PHASES & 16) {                                                                                \
            STAGE(FMT, g, 0, hidden);                                                                         \
            STAMP(13);                                                                                        \
            products(FMT, W_AT(FMT, w2, dim, hidden), D_AT(FMT, d2, dim, hidden), dim, hidden, lm, xq, xs, vx, \
                     1, 0, red, 0);                                                                           \
        }                                                                                                     \
        STAMP(9);                                                                                             \
        if (l + 1 < nl || vocab > 0) grid_sync(bar, nwg);   /* x whole before it is staged again */           \
    }                                                                                                         \
    if (vocab > 0) {                                 /* the head: logits = head @ rms_norm(x) * head_norm */  \
        STAGE(FMT, vx, head_norm, dim);                                                                       \
        products(FMT, head, dhead, vocab, dim, lm, xq, xs, logits, 0, 0, red, next != 0 ? wbest : 0);         \
    }                                                                                                         \
    if (next != 0 || advance) {                      /* the greedy token: every logit written first */        \
        grid_sync(bar, nwg);                                                                                  \
        if (get_group_id(0) == 0) {                                                                           \
            float bv = 0.0f;                         /* the work-groups' candidates (products' best) */       \
            int bi = -1;                                                                                      \
            for (int i = get_local_id(0); next != 0 && i < (int)nwg; i += get_local_size(0)) {                \
                const float2 c = wbest[i];                                                                    \
                arg_keep(1, &bv, &bi, c.x, as_int(c.y));                                                      \
            }                                                                                                 \
            const int best = wg_argbest(bv, bi, red).y;                                                       \
            if (get_local_id(0) == 0) {                                                                       \
                if (next != 0) next[0] = best;                                                                \
                if (advance) pbuf[offp] = p0 + 1;    /* every work-group read it before the first barrier */  \
            }                                                                                                 \
        }                                                                                                     \
    }                                                                                                         \
    STAMP(11);                                                                                                \
}
DEC_KERNEL(tl_decode_layer_f32, DEC_F32)
DEC_KERNEL(tl_decode_layer_f16, DEC_F16)
DEC_KERNEL(tl_decode_layer_bf16, DEC_BF16)
DEC_KERNEL(tl_decode_layer_q4_0, DEC_Q4_0)
DEC_KERNEL(tl_decode_layer_q8_0, DEC_Q8_0)
