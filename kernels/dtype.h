/* dtype.h: the storage dtypes' loads and stores (codes as csrc/tensor/tensor.h's enum: 0 float32, 1 int32,
 * 2 float16, 3 bfloat16, 4 uint8). Arithmetic is float32: a load widens exactly, a store rounds to nearest
 * even. float16 goes through vload_half/vstore_half_rte (core OpenCL: NVIDIA's OpenCL has no cl_khr_fp16);
 * bfloat16 is the top half of a float32, rounded with integer bit operations (NaN -> sign | 0x7fc0, as
 * ml_dtypes). Stores to int32 truncate (C's cast), to uint8 truncate and wrap modulo 256 (torch on CPU). */
#ifndef TL_DTYPE_H
#define TL_DTYPE_H
#define TL_DT_F32 0
#define TL_DT_I32 1
#define TL_DT_F16 2
#define TL_DT_BF16 3
#define TL_DT_U8 4

inline ushort
tl_bf16_bits(float v)
{
    uint u = as_uint(v);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (ushort)((u >> 16 & 0x8000u) | 0x7fc0u);
    return (ushort)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}

inline ushort4                                       /* tl_bf16_bits of four values */
tl_bf16_bits4(float4 v)
{
    const uint4 u = as_uint4(v), r = (u + 0x7fffu + (u >> 16 & 1u)) >> 16, nan = (u >> 16 & 0x8000u) | 0x7fc0u;
    return convert_ushort4(select(r, nan, (u & 0x7fffffffu) > 0x7f800000u));
}

inline float
tl_ld(global const uchar *p, int dt, int i)
{
    switch (dt) {
    case TL_DT_F32: return ((global const float *)p)[i];
    case TL_DT_I32: return (float)((global const int *)p)[i];
    case TL_DT_F16: return vload_half(i, (global const half *)p);
    case TL_DT_BF16: return as_float((uint)((global const ushort *)p)[i] << 16);
    default: return (float)p[i];
    }
}

inline void
tl_st(global uchar *p, int dt, int i, float v)
{
    switch (dt) {
    case TL_DT_F32: ((global float *)p)[i] = v; break;
    case TL_DT_I32: ((global int *)p)[i] = (int)v; break;
    case TL_DT_F16: vstore_half_rte(v, i, (global half *)p); break;
    case TL_DT_BF16: ((global ushort *)p)[i] = tl_bf16_bits(v); break;
    default: p[i] = (uchar)(convert_long_sat_rtz(v) & 0xff); break;
    }
}
/* Four consecutive elements from element at of p (dtype dt: a floating dtype or uint8) as float32, and four
 * stored into a floating dtype: the vector forms of tl_ld / tl_st, the same bits (vload_half4 / vstore_half4_rte
 * round as the scalar forms). With a constant dt the switch folds away. */
inline float4
tl_ld4(global const uchar *p, int dt, int at)
{
    switch (dt) {
    case TL_DT_F32: return vload4(0, (global const float *)p + at);
    case TL_DT_F16: return vload_half4(0, (global const half *)p + at);
    case TL_DT_BF16: return as_float4(convert_uint4(vload4(0, (global const ushort *)p + at)) << 16);
    default: return convert_float4(vload4(0, p + at));
    }
}

inline void
tl_st4(global uchar *p, int dt, int at, float4 v)
{
    switch (dt) {
    case TL_DT_F32: vstore4(v, 0, (global float *)p + at); break;
    case TL_DT_F16: vstore_half4_rte(v, 0, (global half *)p + at); break;
    default: vstore4(tl_bf16_bits4(v), 0, (global ushort *)p + at); break;
    }
}

inline float4                                        /* four values rounded to float16 and widened (tl_rnd) */
tl_round_f16(float4 t)
{
    ushort4 h;
    vstore_half4_rte(t, 0, (private half *)&h);
    return vload_half4(0, (const private half *)&h);
}

/* v rounded to the floating dtype dt and widened again: what a store and a load of it give. */
inline float
tl_rnd(int dt, float v)
{
    if (dt == TL_DT_BF16) return as_float((uint)tl_bf16_bits(v) << 16);
    if (dt != TL_DT_F16) return v;
    ushort h;
    vstore_half_rte(v, 0, (private half *)&h);
    return vload_half(0, (const private half *)&h);
}
#endif
