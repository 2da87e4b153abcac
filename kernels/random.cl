/* random.cl: counter-based random numbers, Philox4x32-10 (Salmon et al., SC'11; Random123's constants).
 * Work-item g computes one Philox block: counter (lo, hi of block0 + g, 0, 0) under key (lo, hi of the
 * seed) gives four 32-bit values, the stream's values 4*(block0+g) .. +3. A value depends only on
 * (seed, position), never on the work-group size or the device, so the integer stream is bit-identical
 * everywhere; uniform floats are exact functions of it, normals go through the device's log/sqrt/sincos
 * (within the OpenCL ulp bounds). Outputs are contiguous; element i comes from block i / (outputs per
 * block), and the last block's extra outputs are dropped. In-place fills (uniform_, normal_) write value i
 * of the same stream to element i of a row-major walk over any strided view, so a fill of a contiguous tensor
 * holds rand's (randn's) values, scaled. multinomial: inverse-CDF search with replacement, an exponential
 * race per row (Efraimidis-Spirakis keys E/w, the k smallest win, in order) without. */
#include "ew_ops.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u               /* key bumps: golden ratio, sqrt(3) - 1 */
#define PHILOX_W1 0xBB67AE85u
#define TWO_POW_M24 5.9604644775390625e-8f   /* 2**-24 */

inline uint4
philox4x32_10(uint4 c, uint2 k)
{
    for (int r = 0; r < 10; r++) {
        uint hi0 = mul_hi(PHILOX_M0, c.x), lo0 = PHILOX_M0 * c.x;
        uint hi1 = mul_hi(PHILOX_M1, c.z), lo1 = PHILOX_M1 * c.z;
        c = (uint4)(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k += (uint2)(PHILOX_W0, PHILOX_W1);
    }
    return c;
}

inline uint4
philox_block(ulong seed, ulong block0)
{
    ulong b = block0 + get_global_id(0);
    return philox4x32_10((uint4)((uint)b, (uint)(b >> 32), 0u, 0u), (uint2)((uint)seed, (uint)(seed >> 32)));
}

/* [0, 1) on a grid of 2**-24: every value is exactly representable, and 1.0 never comes out. */
inline float
to_unit(uint x)
{
    return (float)(x >> 8) * TWO_POW_M24;
}

kernel void
tl_philox_uniform_f32(int n, global float *o, ulong seed, ulong block0)
{
    size_t i = get_global_id(0) * 4;                 /* size_t: the rounded-up tail must not wrap */
    if (i >= (size_t)n) return;
    uint4 x = philox_block(seed, block0);
    o[i] = to_unit(x.x);
    if (i + 1 < (size_t)n) o[i + 1] = to_unit(x.y);
    if (i + 2 < (size_t)n) o[i + 2] = to_unit(x.z);
    if (i + 3 < (size_t)n) o[i + 3] = to_unit(x.w);
}

/* Box-Muller on two pairs. u1 is in (0, 1] so log(u1) is finite; |z| <= sqrt(-2 log 2**-24) = 5.77. */
inline float2
box_muller(uint a, uint b)
{
    float u1 = (float)((a >> 8) + 1u) * TWO_POW_M24, u2 = to_unit(b);
    float r = sqrt(-2.0f * log(u1)), c, s = sincos(6.283185307179586f * u2, &c);
    return (float2)(r * c, r * s);
}

kernel void
tl_philox_normal_f32(int n, global float *o, ulong seed, ulong block0)
{
    size_t i = get_global_id(0) * 4;
    if (i >= (size_t)n) return;
    uint4 x = philox_block(seed, block0);
    float2 z0 = box_muller(x.x, x.y), z1 = box_muller(x.z, x.w);
    o[i] = z0.x;
    if (i + 1 < (size_t)n) o[i + 1] = z0.y;
    if (i + 2 < (size_t)n) o[i + 2] = z1.x;
    if (i + 3 < (size_t)n) o[i + 3] = z1.y;
}

/* low + (64-bit value mod range): two 32-bit values per output, so the modulo bias is below
 * range / 2**64 <= 2**-32 for any int32 range (range = high - low <= 2**32). */
kernel void
tl_philox_randint_i32(int n, global int *o, ulong seed, ulong block0, long low, ulong range)
{
    size_t i = get_global_id(0) * 2;
    if (i >= (size_t)n) return;
    uint4 x = philox_block(seed, block0);
    o[i] = (int)(low + (long)((((ulong)x.y << 32) | x.x) % range));
    if (i + 1 < (size_t)n) o[i + 1] = (int)(low + (long)((((ulong)x.w << 32) | x.z) % range));
}

/* Inverted dropout: keep (value `scale` = 1/(1-p)) where u >= p, so P(keep) = 1 - p on the 2**-24 grid. */
kernel void
tl_philox_dropout_f32(int n, global float *o, ulong seed, ulong block0, float p, float scale)
{
    size_t i = get_global_id(0) * 4;
    if (i >= (size_t)n) return;
    uint4 x = philox_block(seed, block0);
    o[i] = to_unit(x.x) >= p ? scale : 0.0f;
    if (i + 1 < (size_t)n) o[i + 1] = to_unit(x.y) >= p ? scale : 0.0f;
    if (i + 2 < (size_t)n) o[i + 2] = to_unit(x.z) >= p ? scale : 0.0f;
    if (i + 3 < (size_t)n) o[i + 3] = to_unit(x.w) >= p ? scale : 0.0f;
}

/* uniform_/normal_: lo + scale * value for elements 4g .. 4g+3 of the walk over L (operand 0: the target). */
kernel void
tl_philox_uniform_into_f32(tl_layout L, global float *o, ulong seed, ulong block0, float lo, float scale)
{
    size_t i = get_global_id(0) * 4;
    if (i >= (size_t)L.n) return;
    uint4 x = philox_block(seed, block0);
    float v[4] = {to_unit(x.x), to_unit(x.y), to_unit(x.z), to_unit(x.w)};
    for (int j = 0; j < 4 && i + j < (size_t)L.n; j++) o[ew_index(&L, (int)i + j).s0] = lo + scale * v[j];
}

kernel void
tl_philox_normal_into_f32(tl_layout L, global float *o, ulong seed, ulong block0, float lo, float scale)
{
    size_t i = get_global_id(0) * 4;
    if (i >= (size_t)L.n) return;
    uint4 x = philox_block(seed, block0);
    float2 z0 = box_muller(x.x, x.y), z1 = box_muller(x.z, x.w);
    float v[4] = {z0.x, z0.y, z1.x, z1.y};
    for (int j = 0; j < 4 && i + j < (size_t)L.n; j++) o[ew_index(&L, (int)i + j).s0] = lo + scale * v[j];
}

/* multinomial with replacement: outputs are rows x k (contiguous), output m of row m / k takes stream value
 * m as u in [0, 1) and returns the first category whose inclusive prefix sum (cdf: rows x n, contiguous)
 * exceeds u * total, so zero-weight categories never come out. u * total rounding up to total falls back to
 * the last positive category; a row without a positive total gives -1 (torch raises: that needs a sync). */
inline int
cdf_search(global const float *cdf, int n, float u)
{
    float total = cdf[n - 1], t = u * total;
    if (!(total > 0.0f)) return -1;
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (cdf[mid] > t) hi = mid;
        else lo = mid + 1;
    }
    while (lo > 0 && !(cdf[lo] > cdf[lo - 1])) lo--;        /* only where t reached total */
    return lo;
}

kernel void
tl_multinomial_rep_f32(int m, int n, int k, global const float *cdf, global int *o, ulong seed, ulong block0)
{
    size_t i = get_global_id(0) * 4;
    if (i >= (size_t)m) return;
    uint4 x = philox_block(seed, block0);
    uint v[4] = {x.x, x.y, x.z, x.w};
    for (int j = 0; j < 4 && i + j < (size_t)m; j++) {
        int s = (int)i + j;
        o[s] = cdf_search(cdf + (size_t)(s / k) * n, n, to_unit(v[j]));
    }
}

/* Max-heap of (key, index) on the k slots of one row: the root is the worst of the best k so far. */
inline void
heap_down(global float *key, global int *idx, int size, int i)
{
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < size && key[l] > key[m]) m = l;
        if (r < size && key[r] > key[m]) m = r;
        if (m == i) return;
        float tk = key[i]; key[i] = key[m]; key[m] = tk;
        int ti = idx[i]; idx[i] = idx[m]; idx[m] = ti;
        i = m;
    }
}

/* multinomial without replacement, one work-item per row: category c of row r draws E = -log(u), u in (0, 1],
 * from stream block r * ceil(n / 4) + c / 4, and its key is E / w; the k smallest keys, ascending, are a
 * sample without replacement in draw order. Weights that are not > 0 never enter; slots the row's positive
 * weights cannot fill get -1. p: element (r, c) at p_off + r * p_rs + c * p_cs; key: rows x k scratch. */
kernel void
tl_multinomial_norep_f32(int rows, int n, int k, global const float *p, int p_off, int p_rs, int p_cs,
                         global int *o, global float *key, ulong seed, ulong block0)
{
    int r = get_global_id(0);
    if (r >= rows) return;
    global float *kk = key + (size_t)r * k;
    global int *ii = o + (size_t)r * k;
    ulong b = block0 + (ulong)r * (ulong)((n + 3) / 4);
    uint2 kw = (uint2)((uint)seed, (uint)(seed >> 32));
    uint v[4];
    int size = 0;
    for (int c = 0; c < n; c++) {
        if ((c & 3) == 0) {
            ulong bc = b + (ulong)(c / 4);
            uint4 x = philox4x32_10((uint4)((uint)bc, (uint)(bc >> 32), 0u, 0u), kw);
            v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
        }
        float w = p[p_off + r * p_rs + c * p_cs];
        if (!(w > 0.0f)) continue;
        float e = -log((float)((v[c & 3] >> 8) + 1u) * TWO_POW_M24), kv = e / w;
        if (size < k) {                                   /* push, then sift up */
            int i = size++;
            kk[i] = kv;
            ii[i] = c;
            while (i > 0 && kk[(i - 1) / 2] < kk[i]) {
                int q = (i - 1) / 2;
                float tk = kk[i]; kk[i] = kk[q]; kk[q] = tk;
                int ti = ii[i]; ii[i] = ii[q]; ii[q] = ti;
                i = q;
            }
        } else if (kv < kk[0]) {
            kk[0] = kv;
            ii[0] = c;
            heap_down(kk, ii, size, 0);
        }
    }
    for (int e = size - 1; e > 0; e--) {                  /* heap sort: ascending keys */
        float tk = kk[0]; kk[0] = kk[e]; kk[e] = tk;
        int ti = ii[0]; ii[0] = ii[e]; ii[e] = ti;
        heap_down(kk, ii, e, 0);
    }
    for (int j = size; j < k; j++) ii[j] = -1;
}
