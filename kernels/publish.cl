/* publish.cl: the weight publisher's device work (csrc/publish/pub_core.c, pub_thread.c).
 *  - tl_publish_gather (learner, compute queue): copies up to 16 parameter buffers into one flat snapshot
 *    buffer in a single launch (OpenCL 1.2 has no pointer arrays, so the sources are 16 buffer arguments
 *    and a by-value descriptor). Work-groups are spread over the sources in proportion to their size
 *    (blk_start), so one large tensor does not serialise behind small ones. A source of the snapshot's
 *    dtype is copied bit for bit; a float16/bfloat16 source in a float32 snapshot (parameters of mixed
 *    dtypes) is widened, which is exact.
 *  - tl_publish_maxabs (publisher thread): per tensor, the largest |snapshot - last delivered| computed in
 *    float32 (half snapshots are widened), by a block table (one work-group per block of one tensor) and an
 *    atomic max on the float's bits, which orders like the float because every value is >= 0. NaN counts
 *    as +inf: a NaN always "changed". When the published dtype differs, the same pass writes the snapshot
 *    converted (as tl_publish_convert does), so a compared delivery reads the snapshot once.
 *  - tl_publish_update (publisher thread): copies the flagged tensors' blocks into the device copy of the
 *    last delivered version, when it cannot simply take over the snapshot buffer.
 *  - tl_publish_convert (publisher thread): the flagged tensors' blocks of the snapshot converted to the
 *    published dtype, the buffer the host copy reads: round to nearest even, inf and NaN kept, as
 *    kernels/dtype.h's conversions (and numpy / ml_dtypes).
 * Dtype codes as dtype.h (TL_DT_F32, _F16, _BF16). Indices are ulong: a snapshot may pass 2^31 elements.
 * The descriptor layout is mirrored in csrc/publish/pub_internal.h (a static_assert checks its size). */
#include "dtype.h"

#define TL_PUB_SRCS 16
#define TL_PUB_PER_ITEM 16

typedef struct {
    ulong src_off[TL_PUB_SRCS];      /* elements into each source buffer */
    ulong dst_off[TL_PUB_SRCS];      /* elements into the flat snapshot */
    ulong n[TL_PUB_SRCS];            /* elements to copy */
    uint blk_start[TL_PUB_SRCS + 1]; /* first work-group of each source; [nsrc] = total */
    uint nsrc;
    uint sdt;                        /* the snapshot's dtype */
    uint dt[TL_PUB_SRCS];            /* each source's dtype: sdt, or a half one widened into float32 */
    uint pad;
} tl_pub_gather;

inline float
ld_wide(global const uchar *p, uint dt, ulong i)
{
    if (dt == TL_DT_F32) return ((global const float *)p)[i];
    if (dt == TL_DT_F16) return vload_half(i, (global const half *)p);
    return as_float((uint)((global const ushort *)p)[i] << 16);
}

inline void
st_narrow(global uchar *p, uint dt, ulong i, float v)
{
    if (dt == TL_DT_F32) ((global float *)p)[i] = v;
    else if (dt == TL_DT_F16) vstore_half_rte(v, i, (global half *)p);
    else ((global ushort *)p)[i] = tl_bf16_bits(v);
}

kernel void
tl_publish_gather(tl_pub_gather d, global uchar *dst,
                  global const uchar *s0, global const uchar *s1, global const uchar *s2,
                  global const uchar *s3, global const uchar *s4, global const uchar *s5,
                  global const uchar *s6, global const uchar *s7, global const uchar *s8,
                  global const uchar *s9, global const uchar *s10, global const uchar *s11,
                  global const uchar *s12, global const uchar *s13, global const uchar *s14,
                  global const uchar *s15)
{
    uint g = (uint)get_group_id(0), i = 0;
    while (i + 1 < d.nsrc && g >= d.blk_start[i + 1]) i++;     /* at most 15 uniform steps */
    global const uchar *src;
    switch (i) {
    case 0: src = s0; break;   case 1: src = s1; break;   case 2: src = s2; break;   case 3: src = s3; break;
    case 4: src = s4; break;   case 5: src = s5; break;   case 6: src = s6; break;   case 7: src = s7; break;
    case 8: src = s8; break;   case 9: src = s9; break;   case 10: src = s10; break; case 11: src = s11; break;
    case 12: src = s12; break; case 13: src = s13; break; case 14: src = s14; break; default: src = s15; break;
    }
    uint ls = (uint)get_local_size(0), lid = (uint)get_local_id(0), dt = d.dt[i];
    ulong base = (ulong)(g - d.blk_start[i]) * ls * TL_PUB_PER_ITEM, so = d.src_off[i] + base, o = d.dst_off[i] + base;
    uint len = (uint)min((ulong)ls * TL_PUB_PER_ITEM, d.n[i] - base);   /* uint loop: vectorises better */
    if (dt == TL_DT_F32) {                                              /* branches uniform per work-group */
        global const float *s = (global const float *)src + so;
        global float *out = (global float *)dst + o;
        for (uint e = lid; e < len; e += ls) out[e] = s[e];             /* coalesced per pass */
    } else if (dt == d.sdt) {                                           /* a half snapshot: the bits as they are */
        global const ushort *s = (global const ushort *)src + so;
        global ushort *out = (global ushort *)dst + o;
        for (uint e = lid; e < len; e += ls) out[e] = s[e];
    } else {                                                            /* a half into float32: exact */
        global float *out = (global float *)dst + o;
        for (uint e = lid; e < len; e += ls) out[e] = ld_wide(src, dt, so + e);
    }
}

/* odt != sdt: the same pass also writes every block of the snapshot converted to odt into conv (the buffer the
 * host copy reads), so a delivery after a comparison needs no conversion launch (tl_publish_convert's rounding). */
kernel void
tl_publish_maxabs(global const uchar *snap, global const uchar *last, global const ulong2 *blk,
                  global const uint *blk_tensor, global uint *out, uint sdt, global uchar *conv, uint odt)
{
    local uint gmax;
    uint g = (uint)get_group_id(0);
    ulong2 r = blk[g];
    uint ls = (uint)get_local_size(0), len = (uint)(r.y - r.x);
    float m = 0.0f;
    int nan = 0;
    if (sdt == TL_DT_F32 && odt == sdt) {
        global const float *a = (global const float *)snap + r.x, *b = (global const float *)last + r.x;
        for (uint e = (uint)get_local_id(0); e < len; e += ls) {   /* branch-free body: vectorises on CPUs */
            float dlt = fabs(a[e] - b[e]);
            m = fmax(m, dlt);                                        /* fmax drops NaN, so count it apart */
            nan |= isnan(dlt);
        }
    } else if (sdt == TL_DT_F32 && odt == TL_DT_BF16) {              /* compare and publish as bfloat16 */
        global const float *a = (global const float *)snap + r.x, *b = (global const float *)last + r.x;
        global ushort *o = (global ushort *)conv + r.x;
        for (uint e = (uint)get_local_id(0); e < len; e += ls) {
            float v = a[e], dlt = fabs(v - b[e]);
            m = fmax(m, dlt);
            nan |= isnan(dlt);
            o[e] = tl_bf16_bits(v);
        }
    } else if (sdt == TL_DT_F32) {                                   /* compare and publish as float16 */
        global const float *a = (global const float *)snap + r.x, *b = (global const float *)last + r.x;
        global half *o = (global half *)conv + r.x;
        for (uint e = (uint)get_local_id(0); e < len; e += ls) {
            float v = a[e], dlt = fabs(v - b[e]);
            m = fmax(m, dlt);
            nan |= isnan(dlt);
            vstore_half_rte(v, e, o);
        }
    } else {                                                         /* half snapshots: compared in float32 */
        for (uint e = (uint)get_local_id(0); e < len; e += ls) {
            float v = ld_wide(snap, sdt, r.x + e), dlt = fabs(v - ld_wide(last, sdt, r.x + e));
            m = fmax(m, dlt);
            nan |= isnan(dlt);
            if (odt != sdt) st_narrow(conv, odt, r.x + e, v);
        }
    }
    if (nan) m = INFINITY;
    if (get_local_id(0) == 0) gmax = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    atomic_max(&gmax, as_uint(m));
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) atomic_max(&out[blk_tensor[g]], gmax);
}

kernel void
tl_publish_update(global uchar *last, global const uchar *snap, global const ulong2 *blk,
                  global const uint *blk_tensor, global const uint *flags, uint sdt)
{
    uint g = (uint)get_group_id(0);
    if (flags[blk_tensor[g]] == 0u) return;                    /* uniform per work-group */
    ulong2 r = blk[g];
    uint ls = (uint)get_local_size(0), len = (uint)(r.y - r.x);
    if (sdt == TL_DT_F32) {
        global float *o = (global float *)last + r.x;
        global const float *s = (global const float *)snap + r.x;
        for (uint e = (uint)get_local_id(0); e < len; e += ls) o[e] = s[e];
    } else {
        global ushort *o = (global ushort *)last + r.x;
        global const ushort *s = (global const ushort *)snap + r.x;
        for (uint e = (uint)get_local_id(0); e < len; e += ls) o[e] = s[e];
    }
}

/* dts: the published dtype | the snapshot's << 4 (never equal: then the host reads the snapshot itself). */
kernel void
tl_publish_convert(global uchar *out, global const uchar *snap, global const ulong2 *blk,
                   global const uint *blk_tensor, global const uint *flags, uint dts)
{
    uint g = (uint)get_group_id(0);
    if (flags[blk_tensor[g]] == 0u) return;
    ulong2 r = blk[g];
    uint ls = (uint)get_local_size(0), len = (uint)(r.y - r.x), odt = dts & 15u, sdt = dts >> 4;
    uint e = 4u * (uint)get_local_id(0);
    if (sdt == TL_DT_F32 && odt == TL_DT_BF16) {     /* the common cases, 4 elements at a time: */
        global const float *sf = (global const float *)snap + r.x;   /* dtype.h's tl_bf16_bits, branch-free */
        global ushort *o = (global ushort *)out + r.x;
        for (; e + 4u <= len; e += 4u * ls) {
            uint4 u = as_uint4(vload4(0, sf + e)), rne = (u + 0x7fffu + (u >> 16 & 1u)) >> 16;
            uint4 qnan = (u >> 16 & 0x8000u) | 0x7fc0u;
            vstore4(convert_ushort4(select(rne, qnan, (u & 0x7fffffffu) > 0x7f800000u)), 0, o + e);
        }
    } else if (sdt == TL_DT_F32 && odt == TL_DT_F16) {
        global const float *sf = (global const float *)snap + r.x;
        global half *o = (global half *)out + r.x;
        for (; e + 4u <= len; e += 4u * ls) vstore_half4_rte(vload4(0, sf + e), 0, o + e);
    } else {                                             /* from a half: one at a time */
        for (e = (uint)get_local_id(0); e < len; e += ls)
            st_narrow(out, odt, r.x + e, ld_wide(snap, sdt, r.x + e));
    }
    for (; e < len; e++) st_narrow(out, odt, r.x + e, ld_wide(snap, sdt, r.x + e));   /* a vector loop's last < 4 */
}
