/* llm.cl: the row-wise and decode-step kernels of LLM inference (no autograd; ops_llm.c checks shapes).
 * Invariants: every row kernel runs one work-group per row with a local size L that is a power of two
 * (the host picks it from the kernel's limits), so the tree reductions in wg_sum/wg_max are exact, and
 * every work-item reaches every barrier. Operands are contiguous (the host copies views first) and
 * offsets are in elements. Nothing relies on infinities (TLGPU_FAST_MATH=1 assumes there are none):
 * masked scores are skipped, and maxima start at -FLT_MAX.
 *  - rms_norm: y = x * rsqrt(mean(x^2) + eps) * w, one pass for the sum of squares, one for the output.
 *  - rope: NeoX pairing (i, i + D/2) by default, GPT-J pairing (2i, 2i + 1) when interleaved; may run in
 *    place (each work-item reads its pair before writing it).
 *  - softmax_rows: max, sum of exp, normalise (three passes over a row held in cache), optional causal
 *    mask aligned to the end of the row (query i of Tq sees keys j <= i + Tk - Tq) and a scale.
 *  - attention: one work-group per query head over a KV cache: scores into a global scratch row, the
 *    max-subtracted softmax, then P @ V with the work-items split over (dim, slice of positions).
 * Two builds of this one source (ops_llm.c picks per call): "llm", every operand float32 (tl_<op>_f32), and
 * "llm_any" (-DTL_LLM_ANY), where every floating operand is a byte pointer whose dtype (float32, float16 or
 * bfloat16: kernels/dtype.h's codes) is packed 4 bits per operand slot into a last argument `dts` (slot s:
 * bits 4s..4s+3; the slots are listed at each kernel) (tl_<op>_any). Loads widen to float32 exactly, all
 * arithmetic and accumulation is float32, stores round to nearest even (docs/precision.md). LD/ST/LD4 are
 * the only memory accesses of operands, so the float32 build is the plain indexing it always was. */
#include "dtype.h"

#ifdef TL_LLM_ANY
#define KN(op) tl_##op##_any
#define TP uchar                                       /* operand storage: bytes; the dtype is in dts */
#define DTS , int dts
#define DT(s) ((dts >> (4 * (s))) & 15)
#define LD(p, s, i) tl_ld((global const uchar *)(p), DT(s), i)
#define ST(p, s, i, v) tl_st((global uchar *)(p), DT(s), i, v)
#define LD4(p, s, i) ld4((global const uchar *)(p), DT(s), i)
#define RND(s, v) tl_rnd(DT(s), v)

/* Four elements from i on of a float32 / float16 / bfloat16 operand (element alignment suffices). */
inline float4
ld4(global const uchar *p, int dt, int i)
{
    if (dt == TL_DT_F16) return vload_half4(0, (global const half *)p + i);
    if (dt == TL_DT_BF16) return as_float4(convert_uint4(vload4(0, (global const ushort *)p + i)) << 16);
    return vload4(0, (global const float *)p + i);
}

#else
#define KN(op) tl_##op##_f32
#define TP float
#define DTS
#define LD(p, s, i) ((p)[i])
#define ST(p, s, i, v) ((p)[i] = (v))
#define LD4(p, s, i) vload4(0, (p) + (i))
#define RND(s, v) (v)
#endif

/* Work-group reductions of one float per work-item (L a power of two); every work-item gets the result.
 * red is reused by the caller's next reduction, hence the trailing barrier. */
#define WG_REDUCE(name, combine)                                                                    \
    inline float name(float v, local float *red)                                                    \
    {                                                                                               \
        const int lid = get_local_id(0), L = get_local_size(0);                                     \
        red[lid] = v;                                                                               \
        barrier(CLK_LOCAL_MEM_FENCE);                                                               \
        for (int s = L / 2; s > 0; s >>= 1) {                                                       \
            if (lid < s) red[lid] = combine(red[lid], red[lid + s]);                                \
            barrier(CLK_LOCAL_MEM_FENCE);                                                           \
        }                                                                                           \
        float r = red[0];                                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                                               \
        return r;                                                                                   \
    }
#define WG_ADD(a, b) ((a) + (b))
WG_REDUCE(wg_sum, WG_ADD)
WG_REDUCE(wg_max, fmax)

/* One row of D per work-group; w may be absent (has_w == 0: the host passes x's buffer, never read).
 * Slots: 0 x, 1 w, 2 y. */
kernel void
KN(rms_norm)(int D, float eps, global const TP *x, int offx, global const TP *w, int offw, int has_w,
             global TP *y, int offy, local float *red DTS)
{
    const int row = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
    const int xo = offx + row * D, yo = offy + row * D;
    float ss = 0.0f;
    for (int i = lid; i < D; i += L) {
        const float v = LD(x, 0, xo + i);
        ss = mad(v, v, ss);
    }
    const float r = rsqrt(wg_sum(ss, red) / (float)D + eps);
    for (int i = lid; i < D; i += L)
        ST(y, 2, yo + i, has_w ? LD(x, 0, xo + i) * r * LD(w, 1, offw + i) : LD(x, 0, xo + i) * r);
}

/* x and y: (T, H, D); pos[t] from the int32 buffer (offset offp), or pos0 when has_pos is 0 (T == 1: a
 * position given as an int, no upload). One work-item per rotated pair.
 * The angle of pair i is pos * theta^(-2i/D), computed as exp2(-(2i/D) * log2(theta)) in float32.
 * Slots: 0 x, 1 y. */
kernel void
KN(rope)(int T, int H, int D, float log2_theta, int interleaved, global const TP *x, int offx,
         global const int *pos, int offp, int has_pos, int pos0, global TP *y, int offy DTS)
{
    const int g = get_global_id(0), half_d = D / 2;
    if (g >= T * H * half_d) return;
    const int i = g % half_d, row = g / half_d, t = row / H;
    const float ang = (float)(has_pos ? pos[offp + t] : pos0) * exp2(-(float)(2 * i) / (float)D * log2_theta);
    float c, s = sincos(ang, &c);
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half_d;
    const int xo = offx + row * D, yo = offy + row * D;
    const float a = LD(x, 0, xo + i0), b = LD(x, 0, xo + i1);
    ST(y, 1, yo + i0, a * c - b * s);
    ST(y, 1, yo + i1, a * s + b * c);
}

/* One decode step's rope and cache write in one launch: qkv (nq + 2 * nkv, D) holds the q, k and v heads of
 * one token; the q and k heads are rotated in place (as rope at position p) and the k and v heads are
 * written to cache (2 * nkv, max_len, D) at row p (keys, then values: kv_write's layout). p = pbuf[offp] +
 * pos0 with pbuf, else pos0; rows outside the cache are not written. One work-item per pair of a head.
 * The cache gets the rotated values as qkv holds them (rounded to qkv's dtype), then rounded to its own.
 * Slots: 0 qkv, 1 cache. */
kernel void
KN(rope_kv)(int nq, int nkv, int D, float log2_theta, int interleaved, global TP *qkv, int offx,
            global TP *cache, int offc, int max_len, global const int *pbuf, int offp, int pos0 DTS)
{
    const int g = get_global_id(0), half_d = D / 2;
    if (g >= (nq + 2 * nkv) * half_d) return;
    const int i = g % half_d, r = g / half_d, p = (pbuf != 0 ? pbuf[offp] : 0) + pos0;
    const int i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half_d, xo = offx + r * D;
    float a = LD(qkv, 0, xo + i0), b = LD(qkv, 0, xo + i1);
    if (r < nq + nkv) {
        const float ang = (float)p * exp2(-(float)(2 * i) / (float)D * log2_theta);
        float c, s = sincos(ang, &c);
        const float a2 = a * c - b * s, b2 = a * s + b * c;
        ST(qkv, 0, xo + i0, a2);
        ST(qkv, 0, xo + i1, b2);
        a = RND(0, a2);
        b = RND(0, b2);
    }
    if (r >= nq && p >= 0 && p < max_len) {
        const int co = offc + ((r - nq) * max_len + p) * D;
        ST(cache, 1, co + i0, a);
        ST(cache, 1, co + i1, b);
    }
}

/* Rows of n; row r is query r % Tq of its group. Masked entries (causal) become exactly 0. Slots: 0 x, 1 y. */
kernel void
KN(softmax_rows)(int n, int Tq, float scale, int causal, global const TP *x, int offx, global TP *y,
                 int offy, local float *red DTS)
{
    const int row = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
    const int lim = causal ? min(n, row % Tq + n - Tq + 1) : n;      /* keys [0, lim) are visible */
    const int xo = offx + row * n, yo = offy + row * n;
    float mx = -FLT_MAX;
    for (int j = lid; j < lim; j += L) mx = fmax(mx, LD(x, 0, xo + j) * scale);
    mx = wg_max(mx, red);
    float sum = 0.0f;
    for (int j = lid; j < lim; j += L) sum += exp(LD(x, 0, xo + j) * scale - mx);
    const float inv = 1.0f / wg_sum(sum, red);
    for (int j = lid; j < n; j += L) ST(y, 1, yo + j, j < lim ? exp(LD(x, 0, xo + j) * scale - mx) * inv : 0.0f);
}

/* Slots: 0 x, 1 g, 2 y. */
kernel void
KN(silu_mul)(int n, global const TP *x, int offx, global const TP *g, int offg, global TP *y DTS)
{
    const int i = get_global_id(0);
    if (i >= n) return;
    const float v = LD(x, 0, offx + i);
    ST(y, 2, i, v / (1.0f + exp(-v)) * LD(g, 1, offg + i));
}

/* cache (Hkv, max_len, D) at offc; x (Hkv, T, D) contiguous at offx; rows [pos, pos + T) of every head.
 * With pbuf (not NULL) the position is pbuf[offp] + pos, read on the device (a traced decode step replays
 * with the position a tensor holds); rows outside the cache are not written there. Slots: 0 x, 1 cache. */
kernel void
KN(kv_write)(int Hkv, int T, int D, int max_len, int pos, global const TP *x, int offx, global TP *cache,
             int offc, global const int *pbuf, int offp DTS)
{
    const int g = get_global_id(0);
    if (g >= Hkv * T * D) return;
    const int d = g % D, t = (g / D) % T, h = g / (D * T);
    const int p = (pbuf != 0 ? pbuf[offp] : 0) + pos + t;
    if (p < 0 || p >= max_len) return;
    ST(cache, 1, offc + (h * max_len + p) * D + d, LD(x, 0, offx + g));
}

/* q (T, H, D): the last T of `length` positions (T = 1: a decode step); caches (Hkv, max_len, D), head h reads
 * kv head h / G; query t sees keys [0, length - T + t] (causal); out (T, H, D); sc: T * H * length floats of
 * scratch (float32 whatever the operands); red: L floats (L = local size, a power of two). One work-group per
 * (query, head). Slots: 0 q, 1 k cache, 2 v cache, 3 out. */
kernel void
KN(attention)(int G, int D, int length, int max_len, float scale, int H, int T, global const TP *q, int offq,
              global const TP *kc, int offk, global const TP *vc, int offv, global TP *out,
              global float *sc, local float *red, global const int *lbuf, int offl, int stride DTS)
{
    const int g = get_group_id(0), lid = get_local_id(0), L = get_local_size(0);
    if (lbuf != 0) length = clamp(lbuf[offl] + length, T, max_len);   /* the length a tensor holds (+ offset) */
    const int t = g / H, h = g - t * H, kvh = h / G, Lk = length - T + 1 + t;
    const int qo = offq + g * D, oo = g * D, ko = offk + kvh * max_len * D, vo = offv + kvh * max_len * D;
    sc += g * stride;
    float mx = -FLT_MAX;
    for (int l = lid; l < Lk; l += L) {              /* each work-item scores whole positions */
        const int kr = ko + l * D;
        float4 acc4 = (float4)0.0f;
        int i = 0;
        for (; i + 4 <= D; i += 4) acc4 = mad(LD4(q, 0, qo + i), LD4(kc, 1, kr + i), acc4);
        float d = (acc4.x + acc4.y) + (acc4.z + acc4.w);
        for (; i < D; i++) d = mad(LD(q, 0, qo + i), LD(kc, 1, kr + i), d);
        d *= scale;
        sc[l] = d;
        mx = fmax(mx, d);
    }
    mx = wg_max(mx, red);
    float sum = 0.0f;
    for (int l = lid; l < Lk; l += L) {
        float e = exp(sc[l] - mx);
        sc[l] = e;
        sum += e;
    }
    const float inv = 1.0f / wg_sum(sum, red);
    barrier(CLK_GLOBAL_MEM_FENCE);                   /* the P row in sc is read by every work-item below */
    /* Every work-item reaches the one barrier below: PoCL 3.1 miscompiled (corrupting host memory) the
     * dtype-generic build of this kernel when the D >= L case returned before a barrier the other took. */
    const int parts = L / D;                         /* D < L: (dim, slice of positions); part == parts idles */
    float o = 0.0f;
    if (D >= L) {                                    /* a work-item owns dims lid, lid + L, ... */
        for (int d = lid; d < D; d += L) {
            float od = 0.0f;
            for (int l = 0; l < Lk; l++) od = mad(sc[l], LD(vc, 2, vo + l * D + d), od);
            ST(out, 3, oo + d, od * inv);
        }
    } else if (lid / D < parts) {
        for (int l = lid / D, d = lid % D; l < Lk; l += parts) o = mad(sc[l], LD(vc, 2, vo + l * D + d), o);
    }
    red[lid] = o;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (D < L && lid < D) {
        float tot = 0.0f;
        for (int p = 0; p < parts; p++) tot += red[p * D + lid];
        ST(out, 3, oo + lid, tot * inv);
    }
}

/* out[i, :] = table[ids[i], :] (V rows of D, row stride st), or table[id0, :] when has_ids is 0 (n == 1: one
 * id given as an int, no upload); an id outside [0, V) gives a row of NaN. Slots: 0 table, 1 out. */
kernel void
KN(get_rows)(int n, int D, int V, global const int *ids, int offi, int has_ids, int id0, global const TP *table,
             int offt, int st, global TP *out DTS)
{
    const int g = get_global_id(0);
    if (g >= n * D) return;
    const int i = g / D, d = g - i * D, id = has_ids ? ids[offi + i] : id0;
    ST(out, 1, g, (id >= 0 && id < V) ? LD(table, 0, offt + id * st + d) : NAN);   /* a bad id must not pass unseen */
}
