/* ew_apply.h: what each elementwise op code computes, for float, float4 (ew_apply, ew_apply4) and int32
 * (ew_apply_i32). The one definition: kernels/elementwise.cl's kernels and the kernels tlgpu.jit generates
 * for fused elementwise chains (kernels/ew_fused.cl, csrc/jit/fuse.c) both call these, so a fused chain
 * computes what the eager launches computed. Needs ew_ops.h first. */
#ifndef TL_EW_APPLY_H
#define TL_EW_APPLY_H
#include "ew_special.h"
/* The op switch, written once for float and float4 (OpenCL's builtins and ?: work on both; select()
 * turns a comparison into 1/0 for scalars and vectors alike). The op code is uniform across the launch,
 * so the switch costs one predictable branch per work-item. */
/* numpy's maximum/minimum: a NaN on either side gives NaN (fmax/fmin would drop it), so relu and clamp,
 * built on these, propagate NaN like np.maximum(x, 0) and np.clip. */
#define EW_MAX(x, y) select((y), (x), ((x) > (y)) | isnan(x))
#define EW_MIN(x, y) select((y), (x), ((x) < (y)) | isnan(x))

#define EW_APPLY(NAME, T, S)    /* S: the special functions' suffix, 4 for float4 (ew_special.h) */     \
inline T                                                                                             \
NAME(int op, T x, T y, T z)                                                                          \
{                                                                                                    \
    const T one = (T)(1.0f), zero = (T)(0.0f);                                                       \
    switch (op) {                                                                                    \
    case TL_EW_ADD: return x + y;                                                                    \
    case TL_EW_SUB: return x - y;                                                                    \
    case TL_EW_MUL: return x * y;                                                                    \
    case TL_EW_DIV: return x / y;                                                                    \
    case TL_EW_POW: return pow(x, y);                                                                \
    case TL_EW_FLOORDIV: case TL_EW_MOD: {  /* numpy's npy_divmod: Python's signs, floor rounding */   \
        T m = fmod(x, y), fix = select(zero, one, (m != zero) & ((y < zero) != (m < zero)));          \
        if (op == TL_EW_MOD) {                                                                       \
            m += fix * y;                                                                            \
            return select(m, copysign(zero, y), m == zero);                                          \
        }                                                                                            \
        T d = (x - m) / y - fix, f = floor(d);                                                       \
        f = select(f, f + one, (d - f) > (T)(0.5f));                                                 \
        return select(f, x / y, y == zero);                                                          \
    }                                                                                                \
    case TL_EW_MAXIMUM: return EW_MAX(x, y);                                                         \
    case TL_EW_MINIMUM: return EW_MIN(x, y);                                                         \
    case TL_EW_LT: return select(zero, one, x < y);                                                  \
    case TL_EW_LE: return select(zero, one, x <= y);                                                 \
    case TL_EW_GT: return select(zero, one, x > y);                                                  \
    case TL_EW_GE: return select(zero, one, x >= y);                                                 \
    case TL_EW_EQ: return select(zero, one, x == y);                                                 \
    case TL_EW_NE: return select(zero, one, x != y);                                                 \
    case TL_EW_NEG: return -x;                                                                       \
    case TL_EW_EXP: return exp(x);                                                                   \
    case TL_EW_LOG: return log(x);                                                                   \
    case TL_EW_SQRT: return sqrt(x);                                                                 \
    case TL_EW_RSQRT: return rsqrt(x);                                                               \
    case TL_EW_TANH: return tanh(x);                                                                 \
    case TL_EW_SIGMOID: return one / (one + exp(-x));                                                \
    case TL_EW_RELU: return EW_MAX(x, zero);                                                         \
    case TL_EW_SILU: return x / (one + exp(-x));                                                     \
    case TL_EW_GELU: return (T)(0.5f) * x * (one + erf(x * (T)(0.70710678118654752f)));              \
    case TL_EW_ABS: return fabs(x);                                                                  \
    case TL_EW_SIN: return sin(x);                                                                   \
    case TL_EW_COS: return cos(x);                                                                   \
    case TL_EW_SQUARE: return x * x;                                                                 \
    case TL_EW_RECIPROCAL: return one / x;                                                           \
    case TL_EW_SIGN: return select(select(x, -one, x < zero), one, x > zero);   /* keeps 0 and NaN */ \
    case TL_EW_COPY: return x;                                                                       \
    case TL_EW_WHERE: return select(z, y, x != zero);                                                \
    case TL_EW_CLAMP: return EW_MIN(EW_MAX(x, y), z);                                                \
    case TL_EW_RELU_GRAD: return select(zero, y, x > zero);                                          \
    case TL_EW_SILU_GRAD: { T s = one / (one + exp(-x)); return y * s * (one + x * (one - s)); }     \
    case TL_EW_GELU_GRAD:                                                                            \
        return y * ((T)(0.5f) * (one + erf(x * (T)(0.70710678118654752f))) +                        \
                    x * (T)(0.3989422804014327f) * exp((T)(-0.5f) * x * x));                         \
    case TL_EW_TANH_GRAD: return y * (one - x * x);                                                  \
    case TL_EW_SIGMOID_GRAD: return y * x * (one - x);                                               \
    case TL_EW_INRANGE: return select(zero, one, (x >= y) & (x <= z));                               \
    case TL_EW_CEIL: return ceil(x);                                                                 \
    case TL_EW_FLOOR: return floor(x);                                                               \
    case TL_EW_ROUND: return rint(x);                   /* halves to even, like torch.round */       \
    case TL_EW_LEAKY_RELU: return select(x * y, x, x > zero);                                        \
    case TL_EW_LEAKY_RELU_GRAD: return select(y * z, y, x > zero);                                   \
    case TL_EW_LOG1P: return log1p(x);                                                               \
    case TL_EW_EXPM1: return expm1(x);                                                               \
    case TL_EW_ERF: return erf(x);                                                                   \
    case TL_EW_ATAN: return atan(x);                                                                 \
    case TL_EW_ASIN: return asin(x);                                                                 \
    case TL_EW_ACOS: return acos(x);                                                                 \
    case TL_EW_TAN: return tan(x);                                                                   \
    case TL_EW_LOG2: return log2(x);                                                                 \
    case TL_EW_LOG10: return log10(x);                                                               \
    case TL_EW_EXP2: return exp2(x);                                                                 \
    case TL_EW_SINH: return sinh(x);                                                                 \
    case TL_EW_COSH: return cosh(x);                                                                 \
    case TL_EW_ASINH: return asinh(x);                                                               \
    case TL_EW_ACOSH: return acosh(x);                                                               \
    case TL_EW_ATANH: return atanh(x);                                                               \
    case TL_EW_TRUNC: return trunc(x);                                                               \
    case TL_EW_FRAC: return x - trunc(x);         /* torch's: inf gives NaN */                       \
    case TL_EW_ERFC: return erfc(x);                                                                 \
    case TL_EW_ATAN2: return atan2(x, y);                                                            \
    case TL_EW_HYPOT: return hypot(x, y);                                                            \
    case TL_EW_FMOD: return fmod(x, y);                                                              \
    case TL_EW_LOGADDEXP:       /* stable; equal infinities give themselves (not NaN), like torch */ \
        return select(EW_MAX(x, y) + log1p(exp(-fabs(x - y))), x, isinf(x) & (x == y));              \
    case TL_EW_XLOGY: return select(x * log(y), zero, (x == zero) & !isnan(y)); /* NaN y wins */     \
    case TL_EW_LGAMMA: return lgamma(x);                                                             \
    case TL_EW_DIGAMMA: return ew_digamma##S(x);                                                     \
    case TL_EW_TRIGAMMA: return ew_trigamma##S(x);                                                   \
    case TL_EW_ERFINV: return ew_erfinv##S(x);                                                       \
    default: return (T)(NAN);                                                                        \
    }                                                                                                \
}
EW_APPLY(ew_apply, float, )

/* ew_apply lane by lane of float4 operands: the scalar builtins' rounding (a device's float4 builtins need not
 * round like its scalar ones). */
#define TL_FS(op, x, y, z)                                                                                 \
    ((float4)(ew_apply(op, (x).s0, (y).s0, (z).s0), ew_apply(op, (x).s1, (y).s1, (z).s1),                 \
              ew_apply(op, (x).s2, (y).s2, (z).s2), ew_apply(op, (x).s3, (y).s3, (z).s3)))
EW_APPLY(ew_apply4, float4, 4)

/* int32 arithmetic. Wrapping like numpy's int32 (done on uint, where overflow is defined); // and % round
 * toward minus infinity like Python and numpy, fmod toward 0 like C; x // 0 == x % 0 == fmod(x, 0) == 0
 * (numpy's result, without its warning: an integer division by zero traps on CPU devices, so it is never
 * executed). Comparisons store float32 masks through the same 32-bit slots. */
inline int
ew_apply_i32(int op, int x, int y, int z)
{
    uint ux = as_uint(x), uy = as_uint(y);
    switch (op) {
    case TL_EW_ADD: return as_int(ux + uy);
    case TL_EW_SUB: return as_int(ux - uy);
    case TL_EW_MUL: return as_int(ux * uy);
    case TL_EW_FLOORDIV:
        if (y == 0) return 0;
        if (y == -1) return as_int(0u - ux);           /* INT_MIN / -1 traps too */
        return x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
    case TL_EW_MOD: {
        if (y == 0 || y == -1) return 0;
        int r = x % y;
        return r != 0 && ((r < 0) != (y < 0)) ? r + y : r;
    }
    case TL_EW_POW: {                                /* by squaring, wrapping; a negative power truncates */
        if (y < 0) return x == 1 ? 1 : x == -1 ? ((y & 1) ? -1 : 1) : 0;
        uint r = 1u;
        for (; y > 0; y >>= 1, ux *= ux)
            if (y & 1) r *= ux;
        return as_int(r);
    }
    case TL_EW_MAXIMUM: return max(x, y);
    case TL_EW_MINIMUM: return min(x, y);
    case TL_EW_LT: return as_int(x < y ? 1.0f : 0.0f);
    case TL_EW_LE: return as_int(x <= y ? 1.0f : 0.0f);
    case TL_EW_GT: return as_int(x > y ? 1.0f : 0.0f);
    case TL_EW_GE: return as_int(x >= y ? 1.0f : 0.0f);
    case TL_EW_EQ: return as_int(x == y ? 1.0f : 0.0f);
    case TL_EW_NE: return as_int(x != y ? 1.0f : 0.0f);
    case TL_EW_NEG: return as_int(0u - ux);
    case TL_EW_ABS: return x < 0 ? as_int(0u - ux) : x;
    case TL_EW_SIGN: return (x > 0) - (x < 0);
    case TL_EW_RELU: return max(x, 0);
    case TL_EW_SQUARE: return as_int(ux * ux);
    case TL_EW_CLAMP: return min(max(x, y), z);
    case TL_EW_COPY: case TL_EW_CEIL: case TL_EW_FLOOR: case TL_EW_ROUND: case TL_EW_TRUNC: return x;
    case TL_EW_FMOD: return y == 0 || y == -1 ? 0 : x % y;     /* C's: the dividend's sign */
    default: return 0;
    }
}
#endif
