/* ew_special.h: float32 digamma, trigamma and erfinv for ew_apply.h (OpenCL has lgamma as a builtin, not
 * these). Scalar functions; ew_apply4 calls them lane by lane (EW_LANES), so a fused float4 chain computes
 * what the eager scalar kernel computed. Written after torch's CPU kernels (calc_digamma, calc_trigamma) and
 * Giles' erfinv ("Approximating the erfinv function", GPU Computing Gems, 2011) with one Newton step.
 * Measured against float64 references: tests/test_special_ops.py. */
#ifndef TL_EW_SPECIAL_H
#define TL_EW_SPECIAL_H

#define EW_LANES(f, x) ((float4)(f((x).s0), f((x).s1), f((x).s2), f((x).s3)))

/* psi(x): psi(+0) = -inf, psi(-0) = +inf, NaN at negative integers and -inf (torch's values). Written as
 * acc + psi(1 + t) with t >= 0 held exactly (1 + t is never rounded where the result is small): x < 0 by
 * reflection, psi(x) = psi(1 - x) - pi / tan(pi x) (tanpi: pi x is not rounded), t = -x; 0 < x < 1 by
 * psi(x) = psi(1 + x) - 1 / x, t = x; else t = x - 1. Then psi(1 + t) = psi(t) + 1 / t down to t in [0, 1] and
 * there Boost's 24-bit rational form (t - t0) (Y + P(t) / Q(t)) around the root t0 = 0.46163214... (so the
 * result keeps its relative accuracy next to the root); 1 + t >= 10 uses the asymptotic series
 * ln y - 1 / (2y) - sum B_2k / (2k y^2k). */
inline float
ew_digamma(float x)
{
    if (x == 0.0f) return copysign(INFINITY, -x);
    if (isnan(x) || x == INFINITY) return x;
    float acc = 0.0f, t;
    if (x < 0.0f) {
        if (x == trunc(x)) return NAN;
        acc = -M_PI_F / tanpi(x - trunc(x));
        t = -x;
    } else if (x < 1.0f) {
        acc = -1.0f / x;
        t = x;
    } else {
        t = x - 1.0f;
    }
    if (t >= 9.0f) {
        float y = x > 0.0f ? x : 1.0f + t, z = 1.0f / (y * y);
        z *= 0.083333333333f - z * (0.0083333333333f - z * (0.0039682539683f - z * 0.0041666666667f));
        return acc + (log(y) - 0.5f / y - z);
    }
    while (t > 1.0f) {                               /* exact: t - 1 keeps t's ulp */
        acc += 1.0f / t;
        t -= 1.0f;
    }
    float g = (t - 0.46163177490234375f) - 3.700660186e-7f;
    float r = (0.25479851023f + t * (-0.44981331915f + t * (-0.43916936920f + t * -0.061041765351f))) /
              (1.0f + t * (1.5890202431f + t * (0.65341249856f + t * 0.063851690523f)));
    return acc + (g * 0.99558162689f + g * r);
}

/* psi'(x) = polygamma(1, x), digamma's derivative: reflection below 1/2 (pi^2 / sin^2(pi x)), the recurrence
 * psi'(x) = psi'(x + 1) + 1 / x^2 up to x >= 10, then 1/x + 1/(2x^2) + sum B_2k / x^(2k+1). */
inline float
ew_trigamma(float x)
{
    float sign = 1.0f, acc = 0.0f;
    if (x < 0.5f) {
        float r = x - trunc(x), s = sinpi(r);
        if (r == 0.0f) return INFINITY;
        sign = -1.0f;
        acc = -M_PI_F * M_PI_F / (s * s);
        x = 1.0f - x;
    }
    if (isnan(x)) return x;
    for (; x < 10.0f; x += 1.0f) acc += 1.0f / (x * x);
    float ixx = 1.0f / (x * x);
    acc += (1.0f + 0.5f / x + ixx * (1.0f / 6 - ixx * (1.0f / 30 - ixx * (1.0f / 42)))) / x;
    return sign * acc;
}

/* erfinv on [-1, 1]: Giles' single-precision polynomials in w = -log((1 - x)(1 + x)) (1 - x is exact near 1),
 * then one Newton step on erf(y) - x (erf's derivative 2/sqrt(pi) exp(-y^2)). +-1 give +-inf, |x| > 1 NaN. */
inline float
ew_erfinv(float x)
{
    float ax = fabs(x);
    if (!(ax < 1.0f)) return ax == 1.0f ? copysign(INFINITY, x) : NAN;
    float w = -log((1.0f - ax) * (1.0f + ax)), p;
    if (w < 5.0f) {
        w -= 2.5f;
        p = 2.81022636e-08f;
        p = 3.43273939e-07f + p * w;
        p = -3.5233877e-06f + p * w;
        p = -4.39150654e-06f + p * w;
        p = 0.00021858087f + p * w;
        p = -0.00125372503f + p * w;
        p = -0.00417768164f + p * w;
        p = 0.246640727f + p * w;
        p = 1.50140941f + p * w;
    } else {
        w = sqrt(w) - 3.0f;
        p = -0.000200214257f;
        p = 0.000100950558f + p * w;
        p = 0.00134934322f + p * w;
        p = -0.00367342844f + p * w;
        p = 0.00573950773f + p * w;
        p = -0.0076224613f + p * w;
        p = 0.00943887047f + p * w;
        p = 1.00167406f + p * w;
        p = 2.83297682f + p * w;
    }
    float y = p * ax;                                /* Newton: erf(y) - ax, via erfc where erf(y) ~ 1 */
    float d = ax > 0.5f ? (1.0f - ax) - erfc(y) : erf(y) - ax;
    y -= d * 0.886226925f * exp(y * y);
    return copysign(y, x);
}
inline float4 ew_digamma4(float4 x) { return EW_LANES(ew_digamma, x); }
inline float4 ew_trigamma4(float4 x) { return EW_LANES(ew_trigamma, x); }
inline float4 ew_erfinv4(float4 x) { return EW_LANES(ew_erfinv, x); }
#endif
