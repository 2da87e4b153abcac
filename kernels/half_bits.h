/* half_bits.h: float16 bits (the low 16 bits of a uint) to float32 with integer operations, exact for every
 * pattern (subnormals become normal floats through an exact product, so a build that flushes float32
 * denormals keeps them; infinities and NaN payloads kept): for halves loaded as words (mv_half.cl reads
 * 8 weights as one uint4), where vload_half has nothing to load from. */
#ifndef TL_HALF_BITS_H
#define TL_HALF_BITS_H
inline float
tl_h2f(uint h)
{
    const uint em = h & 0x7fffu, sign = (h & 0x8000u) << 16;
    float f = as_float((em << 13) + 0x38000000u);           /* normal: the exponent rebiased by 127 - 15 */
    if (em < 0x0400u) f = (float)em * 0x1p-24f;             /* zero and subnormals: m * 2^-24, exact */
    if (em >= 0x7c00u) f = as_float((em << 13) | 0x7f800000u);   /* inf, NaN */
    return as_float(as_uint(f) | sign);
}

inline float4
tl_h2f4(uint4 h)
{
    const uint4 em = h & 0x7fffu, sign = (h & 0x8000u) << 16;
    float4 f = as_float4((em << 13) + 0x38000000u);
    f = select(f, convert_float4(em) * 0x1p-24f, em < (uint4)0x0400u);
    f = select(f, as_float4((em << 13) | 0x7f800000u), em >= (uint4)0x7c00u);
    return as_float4(as_uint4(f) | sign);
}
#endif
