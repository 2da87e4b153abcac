/* elementwise.cl: every elementwise op through one switch on a uniform op code (kernels/ew_ops.h), in a
 * contiguous and a strided/broadcasting variant, the int32 subset in a strided kernel, any mix of storage
 * dtypes (float16, bfloat16, uint8) in one strided kernel, plus copy, fill, conversions and arange. One kernel per shape
 * class keeps PoCL's per-kernel specialisation compiles few. A NULL input pointer means "use the scalar". */
#include "ew_ops.h"
#include "dtype.h"
#include "ew_apply.h"

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

/* All tensor operands contiguous with the same shape: TL_EW_VEC float4s per work-item through vload4/vstore4,
 * strided by the grid so neighbouring work-items touch neighbouring 16-byte chunks (coalesced on GPUs;
 * explicit SIMD, and a loop the compiler can unswitch on the uniform op, on CPUs). The host launches
 * ceil(n / (4 * TL_EW_VEC)) work-items; the ragged tail goes element by element. */
#define TL_EW_VEC 4
/* The contiguous kernels' walk (stride and n4 = L.n & ~3 in scope): VEC for the group of 4 elements from i,
 * below n4; then TAIL for each element i past it. */
#define EW_VEC_WALK(VEC, TAIL)                                                                                \
    for (int i = get_global_id(0) * 4, j = 0; j < TL_EW_VEC; j++, i += stride) {                              \
        if (i < n4) {                                                                                         \
            VEC;                                                                                              \
        } else if (i == n4) {                                                                                 \
            for (; i < L.n; i++) TAIL;                                                                        \
        }                                                                                                     \
    }
#define EW_F32_OPND(p, k, s) ((p) ? vload4(0, (p) + L.off[k] + i) : (float4)(s))   /* an operand's group */
#define EW_F32_ONE(p, k, s) ((p) ? (p)[L.off[k] + i] : (s))                         /* and its element i */
kernel void
tl_ew_contig_f32(int op, tl_layout L, global float *o, global const float *a, global const float *b,
                 global const float *c, float sa, float sb, float sc)
{
    int stride = get_global_size(0) * 4, n4 = L.n & ~3;
    EW_VEC_WALK(vstore4(ew_apply4(op, EW_F32_OPND(a, 1, sa), EW_F32_OPND(b, 2, sb), EW_F32_OPND(c, 3, sc)), 0,
                        o + L.off[0] + i),
                o[L.off[0] + i] = ew_apply(op, EW_F32_ONE(a, 1, sa), EW_F32_ONE(b, 2, sb), EW_F32_ONE(c, 3, sc)))
}

/* tl_ew_contig_f32 for the hottest ops of a training step, on CPU devices: the op switch inside the float4
 * loop kept PoCL from vectorising it well (a [256, 256] add: 35 us, 17 with the op fixed at compile time),
 * so each of these ops gets a copy of the loop where ew_apply4's switch folds away. A kernel of its own:
 * copies of the loop in tl_ew_contig_f32 made its other ops slower (exp 43 -> 63 us); every op copied added
 * 5 s to PoCL's cold build of this file (these six: 0.4 s). The host sends only these ops here. */
/* The hot ops' cases of a switch on op, each running LOOP(its op code) (ew_launch.c's EW_HOT lists the same). */
#define EW_HOT_CASES(LOOP)                                                                                    \
    case TL_EW_ADD: LOOP(TL_EW_ADD) break;                                                                    \
    case TL_EW_SUB: LOOP(TL_EW_SUB) break;                                                                    \
    case TL_EW_MUL: LOOP(TL_EW_MUL) break;                                                                    \
    case TL_EW_DIV: LOOP(TL_EW_DIV) break;                                                                    \
    case TL_EW_RELU: LOOP(TL_EW_RELU) break;                                                                  \
    case TL_EW_RELU_GRAD: LOOP(TL_EW_RELU_GRAD) break;
#define EW_HOT_LOOP(OPC)                                                                                      \
    EW_VEC_WALK(vstore4(ew_apply4(OPC, EW_F32_OPND(a, 1, sa), EW_F32_OPND(b, 2, sb), (float4)(0.0f)), 0,        \
                        o + L.off[0] + i),                                                                    \
                o[L.off[0] + i] = ew_apply(OPC, EW_F32_ONE(a, 1, sa), EW_F32_ONE(b, 2, sb), 0.0f))
kernel void
tl_ew_hot_f32(int op, tl_layout L, global float *o, global const float *a, global const float *b,
              global const float *c, float sa, float sb, float sc)
{
    int stride = get_global_size(0) * 4, n4 = L.n & ~3;
    switch (op) {
    EW_HOT_CASES(EW_HOT_LOOP)
    default: break;
    }
}

/* Up to three dims [B, M, N] after merging, where the output and every tensor operand walk the last dim with
 * stride 1 or 0: a row broadcast ([M, N] op [N]), a column ([M, N] op [M, 1]), a same-shape operand with
 * padded rows. The grid is (column groups of 4, M, B): each work-item's offsets are two multiply-adds, where
 * the strided kernel divides by every dim per element (5x the contiguous kernel's time on PoCL for a
 * [256, 256] + [256] bias add). TL_EW_ROW_VEC float4s per work-item, the ragged end element by element. */
#define TL_EW_ROW_VEC 4
inline float4
ew_row_load(global const float *p, int at, int unit, float s)
{
    return p == 0 ? (float4)(s) : unit == 0 ? (float4)(p[at]) : vload4(0, p + at);
}

kernel void
tl_ew_rows_f32(int op, tl_layout L, global float *o, global const float *a, global const float *b,
               global const float *c, float sa, float sb, float sc)
{
    const int last = L.ndim - 1, N = L.shape[last];
    const int row = L.ndim >= 2 ? get_global_id(1) : 0, outer = L.ndim == 3 ? get_global_id(2) : 0;
    if (L.ndim >= 2 && row >= L.shape[last - 1]) return;
    int4 at = (int4)(L.off[0], L.off[1], L.off[2], L.off[3]);
    if (L.ndim >= 2) at += row * (int4)(L.st[0][last - 1], L.st[1][last - 1], L.st[2][last - 1], L.st[3][last - 1]);
    if (L.ndim == 3) at += outer * (int4)(L.st[0][0], L.st[1][0], L.st[2][0], L.st[3][0]);
    const int4 unit = (int4)(1, L.st[1][last], L.st[2][last], L.st[3][last]);
    for (int j = 0, col = get_global_id(0) * 4 * TL_EW_ROW_VEC; j < TL_EW_ROW_VEC && col < N; j++, col += 4) {
        int4 p = at + col * unit;
        if (col + 4 <= N) {
            float4 x = ew_row_load(a, p.s1, unit.s1, sa), y = ew_row_load(b, p.s2, unit.s2, sb);
            float4 z = ew_row_load(c, p.s3, unit.s3, sc);
            vstore4(ew_apply4(op, x, y, z), 0, o + p.s0);
        } else {
            for (int e = 0; col + e < N; e++, p += unit) {
                float x = a ? a[p.s1] : sa, y = b ? b[p.s2] : sb, z = c ? c[p.s3] : sc;
                o[p.s0] = ew_apply(op, x, y, z);
            }
        }
    }
}

kernel void
tl_ew_i32(int op, tl_layout L, global int *o, global const int *a, global const int *b, global const int *c,
          int sa, int sb, int sc)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    o[ix.s0] = ew_apply_i32(op, a ? a[ix.s1] : sa, b ? b[ix.s2] : sb, c ? c[ix.s3] : sc);
}

/* Any operand dtypes (float16, bfloat16, uint8, or a mix with float32/int32): each operand is loaded as
 * float32 through its dtype code and the result stored through the output's (dts: 4 bits each, output in
 * bits 0..3, a, b, c above; kernels/dtype.h). Strided, one element per work-item: the float32 kernels above
 * keep float32's speed, this one keeps the kernel count down. */
kernel void
tl_ew_any(int op, int dts, tl_layout L, global uchar *o, global const uchar *a, global const uchar *b,
          global const uchar *c, float sa, float sb, float sc)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    float x = a ? tl_ld(a, dts >> 4 & 15, ix.s1) : sa, y = b ? tl_ld(b, dts >> 8 & 15, ix.s2) : sb;
    float z = c ? tl_ld(c, dts >> 12 & 15, ix.s3) : sc;
    tl_st(o, dts & 15, ix.s0, ew_apply(op, x, y, z));
}

/* tl_ew_any for contiguous same-shape operands on CPU devices (a floating result; floating or uint8 operands:
 * frames / 255 of a uint8 replay buffer): TL_EW_VEC groups of 4 elements a work-item through dtype.h's vector
 * loads and stores (the strided kernel's index divisions and scalar loads ran at a tenth of the float32
 * kernels' rate on PoCL), computed as float4 by ew_apply4 below n & ~3 as tl_ew_contig_f32 computes them (a
 * builtin such as exp may round its float4 form unlike its scalar one; the launch is noted TL_EWM_VEC4, so
 * tlgpu.jit's fused code does the same), the rest one by one. The hot ops of a training step get a loop of
 * their own, as in tl_ew_hot_f32. */
#define EW_ANY_OPND(p, d, k, s) ((p) ? tl_ld4(p, d, L.off[k] + i) : (float4)(s))
#define EW_ANY_ONE(p, d, k, s) ((p) ? tl_ld(p, d, L.off[k] + i) : (s))
#define EW_ANY_LOOP(OPC)                                                                                      \
    EW_VEC_WALK(tl_st4(o, to, L.off[0] + i, ew_apply4(OPC, EW_ANY_OPND(a, da, 1, sa), EW_ANY_OPND(b, db, 2, sb), \
                                                      EW_ANY_OPND(c, dc, 3, sc))),                            \
                tl_st(o, to, L.off[0] + i, ew_apply(OPC, EW_ANY_ONE(a, da, 1, sa), EW_ANY_ONE(b, db, 2, sb),  \
                                                    EW_ANY_ONE(c, dc, 3, sc))))
kernel void
tl_ew_contig_any(int op, int dts, tl_layout L, global uchar *o, global const uchar *a, global const uchar *b,
                 global const uchar *c, float sa, float sb, float sc)
{
    const int stride = get_global_size(0) * 4, n4 = L.n & ~3;
    const int to = dts & 15, da = dts >> 4 & 15, db = dts >> 8 & 15, dc = dts >> 12 & 15;
    switch (op) {
    EW_HOT_CASES(EW_ANY_LOOP)
    default: EW_ANY_LOOP(op) break;
    }
}

/* Conversion between any two dtypes (dts as tl_ew_any's: output bits 0..3, input 4..7): through float32,
 * except int32 -> uint8, which wraps the integer (float32 would round values past 2**24). */
kernel void
tl_convert(int dts, tl_layout L, global uchar *o, global const uchar *a)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    int to = dts & 15, from = dts >> 4 & 15;
    if (from == TL_DT_I32 && to == TL_DT_U8) o[ix.s0] = (uchar)(((global const int *)a)[ix.s1] & 0xff);
    else tl_st(o, to, ix.s0, tl_ld(a, from, ix.s1));
}

/* tl_convert for contiguous tensors between the floating dtypes, and from uint8 (autocast's casts, .half(),
 * .bfloat16(), .float(), uint8 frames): TL_EW_VEC groups of 4 elements a work-item, strided by the grid as in
 * tl_ew_contig_f32, and each pair's loop its own copy with vector loads and stores, so PoCL vectorises it (the
 * generic kernel's per-element dtype switch and index divisions ran at 1.2-1.5 GB/s there, the float32
 * kernels at 12-16). The same bits as tl_convert: vload_half4 / vstore_half4_rte round as their scalar forms
 * and tl_bf16_bits4 as tl_bf16_bits. The host sends only these pairs here (ops_convert.c, convert_fast). */
#define CVT_CASE(FROM, TO)                                                                                    \
    case TL_DT_##TO | TL_DT_##FROM << 4:                                                                      \
        EW_VEC_WALK(tl_st4(o, TL_DT_##TO, L.off[0] + i, tl_ld4(a, TL_DT_##FROM, L.off[1] + i)),               \
                    tl_st(o, TL_DT_##TO, L.off[0] + i, tl_ld(a, TL_DT_##FROM, L.off[1] + i)))                 \
        break;
#define CVT_LD_RBF16(p, at) as_float4(convert_uint4(tl_bf16_bits4(tl_ld4(p, TL_DT_F32, at))) << 16)
#define CVT_LD_RF16(p, at) tl_round_f16(tl_ld4(p, TL_DT_F32, at))
#define CVT_RND_CASE(VIA)                                                                                     \
    case TL_DT_F32 | TL_DT_F32 << 4 | TL_DT_##VIA << 8:                                                       \
        EW_VEC_WALK(tl_st4(o, TL_DT_F32, L.off[0] + i, CVT_LD_R##VIA(a, L.off[1] + i)),                       \
                    tl_st(o, TL_DT_F32, L.off[0] + i, tl_rnd(TL_DT_##VIA, tl_ld(a, TL_DT_F32, L.off[1] + i))))  \
        break;

/* dts as tl_convert's, or float32 to float32 rounded through a half dtype (bits 8-11: bfloat16 or float16),
 * the pair of conversions autocast's float32 operands take (ops_convert.c, round_raw). */
kernel void
tl_convert_contig(int dts, tl_layout L, global uchar *o, global const uchar *a)
{
    const int stride = get_global_size(0) * 4, n4 = L.n & ~3;
    switch (dts) {
    CVT_RND_CASE(BF16)
    CVT_RND_CASE(F16)
    CVT_CASE(F32, BF16)
    CVT_CASE(BF16, F32)
    CVT_CASE(F32, F16)
    CVT_CASE(F16, F32)
    CVT_CASE(BF16, F16)
    CVT_CASE(F16, BF16)
    CVT_CASE(U8, F32)
    CVT_CASE(U8, BF16)
    CVT_CASE(U8, F16)
    default: break;
    }
}

/* Bit copies of 4-, 2- and 1-byte elements (any dtype of that size) between strided layouts. */
#define TL_COPY_KERNEL(name, T)                                                                               \
    kernel void name(tl_layout L, global T *o, global const T *a)                                            \
    {                                                                                                         \
        int gid = get_global_id(0);                                                                           \
        if (gid >= L.n) return;                                                                               \
        int4 ix = ew_index(&L, gid);                                                                          \
        o[ix.s0] = a[ix.s1];                                                                                  \
    }
TL_COPY_KERNEL(tl_copy_u32, uint)
TL_COPY_KERNEL(tl_copy_u16, ushort)
TL_COPY_KERNEL(tl_copy_u8, uchar)

/* Y = X^T per batch for 4-byte elements (tl_copy_into's transposed views): X [R, C] at offX + b * sXb + r * sXr
 * + c (its columns contiguous), Y the contiguous [C, R] of batch b at offY. 32 x 32 tiles through local memory
 * (rows padded by one: conflict-free both ways), 32 x 8 work-items, reads and writes along rows; batch in
 * dim 2. */
kernel __attribute__((reqd_work_group_size(32, 8, 1))) void
tl_transpose_u32(int R, int C, global const uint *X, int offX, int sXb, int sXr, global uint *Y, int offY)
{
    local uint t[32][33];
    const int lx = get_local_id(0), ly = get_local_id(1), c0 = get_group_id(0) * 32, r0 = get_group_id(1) * 32;
    const int b = get_global_id(2);
    X += offX + b * sXb;
    Y += offY + (size_t)b * R * C;
    for (int j = ly; j < 32; j += 8)
        if (r0 + j < R && c0 + lx < C) t[j][lx] = X[(r0 + j) * sXr + c0 + lx];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int j = ly; j < 32; j += 8)
        if (c0 + j < C && r0 + lx < R) Y[(size_t)(c0 + j) * R + r0 + lx] = t[lx][j];
}

kernel void
tl_fill_u32(tl_layout L, global uint *o, uint v)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    o[ew_index(&L, gid).s0] = v;
}

kernel void
tl_fill_u16(tl_layout L, global ushort *o, uint v)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    o[ew_index(&L, gid).s0] = (ushort)v;
}

kernel void
tl_fill_u8(tl_layout L, global uchar *o, uint v)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    o[ew_index(&L, gid).s0] = (uchar)v;
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

/* linspace: element i is start + i * step for the first half and end - (n - 1 - i) * step for the rest
 * (torch's rule: both ends exact, the rounding error symmetric). */
kernel void
tl_linspace_f32(int n, global float *o, float start, float end, float step)
{
    int gid = get_global_id(0);
    if (gid < n) o[gid] = gid < n / 2 ? start + step * (float)gid : end - step * (float)(n - 1 - gid);
}
