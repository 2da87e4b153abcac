/* elementwise.cl: every elementwise op through one switch on a uniform op code (kernels/ew_ops.h), in a
 * contiguous and a strided/broadcasting variant, plus copy, fill, cast and arange. One kernel per shape
 * class keeps PoCL's per-kernel specialisation compiles few. A NULL input pointer means "use the scalar". */
#include "ew_ops.h"

inline float
ew_apply(int op, float x, float y, float z)
{
    switch (op) {
    case TL_EW_ADD: return x + y;
    case TL_EW_SUB: return x - y;
    case TL_EW_MUL: return x * y;
    case TL_EW_DIV: return x / y;
    case TL_EW_POW: return pow(x, y);
    case TL_EW_MAXIMUM: return (x > y || isnan(x)) ? x : y;          /* numpy: NaN propagates */
    case TL_EW_MINIMUM: return (x < y || isnan(x)) ? x : y;
    case TL_EW_LT: return x < y ? 1.0f : 0.0f;
    case TL_EW_LE: return x <= y ? 1.0f : 0.0f;
    case TL_EW_GT: return x > y ? 1.0f : 0.0f;
    case TL_EW_GE: return x >= y ? 1.0f : 0.0f;
    case TL_EW_EQ: return x == y ? 1.0f : 0.0f;
    case TL_EW_NE: return x != y ? 1.0f : 0.0f;
    case TL_EW_NEG: return -x;
    case TL_EW_EXP: return exp(x);
    case TL_EW_LOG: return log(x);
    case TL_EW_SQRT: return sqrt(x);
    case TL_EW_RSQRT: return rsqrt(x);
    case TL_EW_TANH: return tanh(x);
    case TL_EW_SIGMOID: return 1.0f / (1.0f + exp(-x));
    case TL_EW_RELU: return x > 0.0f ? x : 0.0f;
    case TL_EW_SILU: return x / (1.0f + exp(-x));
    case TL_EW_GELU: return 0.5f * x * (1.0f + erf(x * 0.70710678118654752f));
    case TL_EW_ABS: return fabs(x);
    case TL_EW_SIN: return sin(x);
    case TL_EW_COS: return cos(x);
    case TL_EW_SQUARE: return x * x;
    case TL_EW_RECIPROCAL: return 1.0f / x;
    case TL_EW_SIGN: return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
    case TL_EW_COPY: return x;
    case TL_EW_WHERE: return x != 0.0f ? y : z;
    case TL_EW_CLAMP: return fmin(fmax(x, y), z);
    default: return NAN;
    }
}

/* Element gid of a row-major walk over L.shape: offsets of out (0) and the inputs (1..3). */
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

kernel void
tl_ew_f32(int op, tl_layout L, global float *o, global const float *a, global const float *b,
          global const float *c, float sa, float sb, float sc)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    float x = a ? a[ix.s1] : sa, y = b ? b[ix.s2] : sb, z = c ? c[ix.s3] : sc;
    o[ix.s0] = ew_apply(op, x, y, z);
}

/* All tensor operands contiguous with the same shape: no index arithmetic beyond the offsets. */
kernel void
tl_ew_contig_f32(int op, tl_layout L, global float *o, global const float *a, global const float *b,
                 global const float *c, float sa, float sb, float sc)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    float x = a ? a[L.off[1] + gid] : sa, y = b ? b[L.off[2] + gid] : sb, z = c ? c[L.off[3] + gid] : sc;
    o[L.off[0] + gid] = ew_apply(op, x, y, z);
}

/* Bit copy of 4-byte elements (float32 and int32 alike) between strided layouts. */
kernel void
tl_copy_u32(tl_layout L, global uint *o, global const uint *a)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    o[ix.s0] = a[ix.s1];
}

kernel void
tl_fill_u32(tl_layout L, global uint *o, uint v)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    o[ew_index(&L, gid).s0] = v;
}

/* Casts: to_f32 from int32, to_i32 from float32 (truncation toward zero, like numpy's astype). */
kernel void
tl_cast_i32_to_f32(tl_layout L, global float *o, global const int *a)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    o[ix.s0] = (float)a[ix.s1];
}

kernel void
tl_cast_f32_to_i32(tl_layout L, global int *o, global const float *a)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    o[ix.s0] = (int)a[ix.s1];
}

kernel void
tl_arange_f32(int n, global float *o, float start, float step)
{
    int gid = get_global_id(0);
    if (gid < n) o[gid] = start + step * (float)gid;
}

kernel void
tl_arange_i32(int n, global int *o, int start, int step)
{
    int gid = get_global_id(0);
    if (gid < n) o[gid] = start + step * gid;
}
