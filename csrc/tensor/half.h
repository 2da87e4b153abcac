/* half.h: float32 -> float16 / bfloat16 bit patterns on the host (fills and scalar constants), rounding to
 * nearest even as kernels/convert.cl does on the device: float16 as numpy's npy_floatbits_to_halfbits
 * (NaN keeps its sign and top payload bits, stays NaN), bfloat16 as ml_dtypes (NaN -> sign | 0x7fc0). */
#ifndef TL_HALF_H
#define TL_HALF_H
#include <stdint.h>
#include <string.h>

static inline uint16_t
tl_f32_to_bf16_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16 & 0x8000u) | 0x7fc0u);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}

static inline uint16_t
tl_f32_to_f16_bits(float f)
{
    uint32_t u, sign, e, m;
    memcpy(&u, &f, 4);
    sign = u >> 16 & 0x8000u;
    u &= 0x7fffffffu;
    if (u >= 0x7f800000u) {                          /* inf, NaN (kept a NaN) */
        m = (u & 0x7fffffu) >> 13;
        return (uint16_t)(sign | 0x7c00u | (u > 0x7f800000u && m == 0 ? 1u : m));
    }
    if (u >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          /* rounds past 65504: inf */
    if (u < 0x38800000u) {                           /* subnormal half (or zero) */
        if (u < 0x33000000u) return (uint16_t)sign;  /* below half the smallest subnormal: +-0 */
        e = u >> 23;
        m = (u & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e, r = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
        r += rem > half || (rem == half && (r & 1u));
        return (uint16_t)(sign | r);
    }
    uint32_t r = u - 0x38000000u;                    /* rebias the exponent (127 -> 15) */
    r += 0xfffu + (r >> 13 & 1u);
    return (uint16_t)(sign | r >> 13);
}
#endif
