/* ew_fused.cl: the base of the kernels tlgpu.jit generates for fused elementwise chains (csrc/jit/fuse.c
 * appends them to this text and builds the whole as one program per distinct text). It has no kernel of its
 * own: the op definitions the eager kernels use (ew_apply.h) and the 4-lane helpers the generated code is
 * written with. A generated work-item takes the 4 consecutive elements i0 .. i0 + 3; each op is computed per
 * lane as its eager kernel computed that element, as float4 (ew_apply4) or one value at a time (TL_FS,
 * TL_IS), since a device's float4 builtins need not round like its scalar ones (PoCL's exp does not). */
#include "ew_ops.h"
#include "dtype.h"
#include "ew_apply.h"

#define TL_IS(op, x, y, z)                                                                                 \
    ((int4)(ew_apply_i32(op, (x).s0, (y).s0, (z).s0), ew_apply_i32(op, (x).s1, (y).s1, (z).s1),           \
            ew_apply_i32(op, (x).s2, (y).s2, (z).s2), ew_apply_i32(op, (x).s3, (y).s3, (z).s3)))

/* What a store into the dtype and a load back give (tl_st, then tl_ld; float16: dtype.h's tl_round_f16): a fused
 * chain keeps its intermediates in registers, rounded as if they had gone through memory. TL_FS: ew_apply.h. */
#define TL_TO_I32(t) ((int4)((int)(t).s0, (int)(t).s1, (int)(t).s2, (int)(t).s3))

inline float
tl_round_bf16(float v)
{
    return as_float((uint)tl_bf16_bits(v) << 16);
}

inline float
tl_round_u8(float v)
{
    return (float)(uchar)(convert_long_sat_rtz(v) & 0xff);
}

#define TL_ROUND_BF16(t) ((float4)(tl_round_bf16((t).s0), tl_round_bf16((t).s1), tl_round_bf16((t).s2), tl_round_bf16((t).s3)))
#define TL_ROUND_U8(t) ((float4)(tl_round_u8((t).s0), tl_round_u8((t).s1), tl_round_u8((t).s2), tl_round_u8((t).s3)))
