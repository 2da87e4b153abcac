/* ew_ops.h: elementwise op codes, shared verbatim by the C host code and kernels/elementwise.cl, so the
 * two can never disagree. X(NAME, arity): arity 1 reads a, 2 reads a and b, 3 reads a, b and c. */
#ifndef TL_EW_OPS_H
#define TL_EW_OPS_H
#define TL_EW_OPS(X)                                                                                   \
    X(ADD, 2) X(SUB, 2) X(MUL, 2) X(DIV, 2) X(POW, 2) X(MAXIMUM, 2) X(MINIMUM, 2)                      \
    X(FLOORDIV, 2) X(MOD, 2)                                                                           \
    X(LT, 2) X(LE, 2) X(GT, 2) X(GE, 2) X(EQ, 2) X(NE, 2)                                              \
    X(NEG, 1) X(EXP, 1) X(LOG, 1) X(SQRT, 1) X(RSQRT, 1) X(TANH, 1) X(SIGMOID, 1) X(RELU, 1)           \
    X(SILU, 1) X(GELU, 1) X(ABS, 1) X(SIN, 1) X(COS, 1) X(SQUARE, 1) X(RECIPROCAL, 1) X(SIGN, 1)       \
    X(COPY, 1) X(WHERE, 3) X(CLAMP, 3)                                                                 \
    /* backward helpers: (x or out, upstream grad) */                                                  \
    X(RELU_GRAD, 2) X(SILU_GRAD, 2) X(GELU_GRAD, 2) X(TANH_GRAD, 2) X(SIGMOID_GRAD, 2) X(INRANGE, 3)     \
    /* rounding (zero gradient); leaky_relu(x, slope) and its backward helper (x, upstream grad, slope) */ \
    X(CEIL, 1) X(FLOOR, 1) X(ROUND, 1) X(LEAKY_RELU, 2) X(LEAKY_RELU_GRAD, 3)                          \
    X(LOG1P, 1) X(EXPM1, 1) X(ERF, 1)                                                                  \
    /* torch's math: inverse trig, hyperbolics, log2/log10/exp2, trunc/frac (x - trunc(x)), erfc */    \
    X(ATAN, 1) X(ASIN, 1) X(ACOS, 1) X(TAN, 1) X(LOG2, 1) X(LOG10, 1) X(EXP2, 1) X(SINH, 1) X(COSH, 1) \
    X(ASINH, 1) X(ACOSH, 1) X(ATANH, 1) X(TRUNC, 1) X(FRAC, 1) X(ERFC, 1)                              \
    /* fmod: C's (the dividend's sign); logaddexp: max + log1p(exp(-|a-b|)); xlogy: 0 where x == 0 */  \
    X(ATAN2, 2) X(HYPOT, 2) X(FMOD, 2) X(LOGADDEXP, 2) X(XLOGY, 2)                                     \
    /* special functions (ew_special.h); TRIGAMMA (polygamma(1, x)) is digamma's backward helper */     \
    X(LGAMMA, 1) X(DIGAMMA, 1) X(TRIGAMMA, 1) X(ERFINV, 1)

#define TL_EW_ENUM(name, arity) TL_EW_##name,
enum { TL_EW_OPS(TL_EW_ENUM) TL_EW_COUNT };
#undef TL_EW_ENUM

/* The kernels' view of an N-d iteration: out and up to three inputs, strides in elements (0 = broadcast).
 * Only 32-bit ints, so the host and device layouts agree without padding rules. */
#define TL_MAX_DIMS 8
typedef struct {
    int ndim, n;
    int shape[TL_MAX_DIMS];
    int st[4][TL_MAX_DIMS];
    int off[4];
} tl_layout;

#ifdef __OPENCL_VERSION__
/* Element gid of a row-major walk over L->shape: offsets of operand 0 (the output) and operands 1..3. */
inline int4
ew_index(const tl_layout *L, int gid)
{
    int4 ix = (int4)(L->off[0], L->off[1], L->off[2], L->off[3]);
    for (int d = L->ndim - 1; d >= 0; d--) {
        int i = gid % L->shape[d];
        gid /= L->shape[d];
        ix += i * (int4)(L->st[0][d], L->st[1][d], L->st[2][d], L->st[3][d]);
    }
    return ix;
}
#endif
#endif
