/* cpu_half.c: the host's float16 / bfloat16 conversions (cpu_half.h). bfloat16 is bit arithmetic the compiler
 * vectorises; float16 takes F16C's vcvtph2ps / vcvtps2ph eight at a time where the CPU has it (chosen at run
 * time, as cpu_quant.c chooses its dot), and plain C for the rest and elsewhere. */
#include "cpu_half.h"
#include "tensor.h"
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HALF_F16C 1
#else
#define HALF_F16C 0
#endif

float
tl_half_to_float(uint16_t h)
{
    const uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    uint32_t u;
    if (e == 0x1F) u = s | 0x7F800000u | (m << 13);
    else if (e != 0) u = s | ((e + 112u) << 23) | (m << 13);
    else if (m == 0) u = s;
    else {
        float f = (float)m * (1.0f / 16777216.0f);   /* m * 2^-24 */
        return s ? -f : f;
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* float32 bits to binary16, rounded to nearest even (numpy's npy_floatbits_to_halfbits): overflow to inf,
 * subnormals rounded at their own precision, NaN kept a NaN with the top of its payload. */
static uint16_t
float_to_half(uint32_t f)
{
    const uint16_t sgn = (uint16_t)((f >> 16) & 0x8000u);
    const uint32_t e = f & 0x7f800000u;
    uint32_t sig = f & 0x007fffffu;
    if (e >= 0x47800000u) {                          /* inf, NaN, or too large: inf */
        if (e == 0x7f800000u && sig != 0) {
            const uint16_t r = (uint16_t)(0x7c00u + (sig >> 13));
            return (uint16_t)(sgn + (r == 0x7c00u ? r + 1 : r));
        }
        return (uint16_t)(sgn + 0x7c00u);
    }
    if (e <= 0x38000000u) {                          /* a subnormal half, or zero */
        if (e < 0x33000000u) return sgn;             /* under half the smallest subnormal */
        const uint32_t ex = e >> 23;
        sig |= 0x00800000u;
        const uint32_t shift = 113u - ex, rest = sig & ((1u << (shift + 13u)) - 1u), halfway = 1u << (shift + 12u);
        uint32_t h = sig >> (shift + 13u);
        if (rest > halfway || (rest == halfway && (h & 1u))) h++;
        return (uint16_t)(sgn + h);
    }
    uint32_t h = ((e - 0x38000000u) >> 13) + (sig >> 13);   /* normal: exponent and mantissa, then round */
    const uint32_t rest = sig & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;   /* a carry into the exponent is right, inf too */
    return (uint16_t)(sgn + h);
}

static uint16_t
float_to_bf16(uint32_t u)                            /* kernels/dtype.h's tl_bf16_bits */
{
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16 & 0x8000u) | 0x7fc0u);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}

#if HALF_F16C
__attribute__((target("avx,f16c"))) static size_t
widen_f16c(const uint16_t *s, float *d, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)(s + i))));
    return i;
}

__attribute__((target("avx,f16c"))) static size_t
narrow_f16c(const float *s, uint16_t *d, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(void *)(d + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
    return i;
}

static int
has_f16c(void)
{
    static int known = -1;                           /* a benign race: every thread computes the same */
    if (known < 0) known = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    return known;
}
#endif

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-loop-vectorize")))    /* -O2's cost model leaves these loops scalar */
#endif
void
tl_cpu_widen(int dt, const void *src, float *dst, size_t n)
{
    const uint16_t *s = src;
    size_t i = 0;
    if (dt == TL_BF16) {
        uint32_t *d = (uint32_t *)(void *)dst;
        for (; i < n; i++) d[i] = (uint32_t)s[i] << 16;
        return;
    }
#if HALF_F16C
    if (has_f16c()) i = widen_f16c(s, dst, n);
#endif
    for (; i < n; i++) dst[i] = tl_half_to_float(s[i]);
}

#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("tree-loop-vectorize")))
#endif
void
tl_cpu_narrow(int dt, const float *src, void *dst, size_t n)
{
    const uint32_t *s = (const uint32_t *)(const void *)src;
    uint16_t *d = dst;
    size_t i = 0;
    if (dt == TL_BF16) {
        for (; i < n; i++) d[i] = float_to_bf16(s[i]);
        return;
    }
#if HALF_F16C
    if (has_f16c()) i = narrow_f16c(src, d, n);
#endif
    for (; i < n; i++) d[i] = float_to_half(s[i]);
}
