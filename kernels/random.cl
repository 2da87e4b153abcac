/* random.cl: counter-based random numbers, Philox4x32-10 (Salmon et al., SC'11; Random123's constants).
 * Work-item g computes one Philox block: counter (lo, hi of block0 + g, 0, 0) under key (lo, hi of the
 * seed) gives four 32-bit values, the stream's values 4*(block0+g) .. +3. A value depends only on
 * (seed, position), never on the work-group size or the device, so the integer stream is bit-identical
 * everywhere; uniform floats are exact functions of it, normals go through the device's log/sqrt/sincos
 * (within the OpenCL ulp bounds). Outputs are contiguous; element i comes from block i / (outputs per
 * block), and the last block's extra outputs are dropped. */

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
