/* publish.cl: the weight publisher's device work (csrc/publish/pub_core.c).
 *  - tl_publish_gather_f32 (learner, compute queue): copies up to 16 parameter buffers into one flat
 *    snapshot buffer in a single launch (OpenCL 1.2 has no pointer arrays, so the sources are 16 buffer
 *    arguments and a by-value descriptor). Work-groups are spread over the sources in proportion to their
 *    size (blk_start), so one large tensor does not serialise behind small ones.
 *  - tl_publish_maxabs_f32 (publisher thread): per tensor, the largest |snapshot - last delivered|, by a
 *    block table (one work-group per block of one tensor) and an atomic max on the float's bits, which
 *    orders like the float because every value is >= 0. NaN counts as +inf: a NaN always "changed".
 *  - tl_publish_update_f32 (publisher thread): copies the flagged tensors' blocks into the device copy of
 *    the last delivered version, when it cannot simply take over the snapshot buffer.
 * The descriptor layout is mirrored in csrc/publish/pub_internal.h (a static_assert checks its size). */

#define TL_PUB_SRCS 16
#define TL_PUB_PER_ITEM 16

typedef struct {
    ulong src_off[TL_PUB_SRCS];      /* elements into each source buffer */
    ulong dst_off[TL_PUB_SRCS];      /* elements into the flat snapshot */
    ulong n[TL_PUB_SRCS];            /* elements to copy */
    uint blk_start[TL_PUB_SRCS + 1]; /* first work-group of each source; [nsrc] = total */
    uint nsrc;
} tl_pub_gather;

kernel void
tl_publish_gather_f32(tl_pub_gather d, global float *dst,
                      global const float *s0, global const float *s1, global const float *s2,
                      global const float *s3, global const float *s4, global const float *s5,
                      global const float *s6, global const float *s7, global const float *s8,
                      global const float *s9, global const float *s10, global const float *s11,
                      global const float *s12, global const float *s13, global const float *s14,
                      global const float *s15)
{
    uint g = (uint)get_group_id(0), i = 0;
    while (i + 1 < d.nsrc && g >= d.blk_start[i + 1]) i++;     /* at most 15 uniform steps */
    global const float *src;
    switch (i) {
    case 0: src = s0; break;   case 1: src = s1; break;   case 2: src = s2; break;   case 3: src = s3; break;
    case 4: src = s4; break;   case 5: src = s5; break;   case 6: src = s6; break;   case 7: src = s7; break;
    case 8: src = s8; break;   case 9: src = s9; break;   case 10: src = s10; break; case 11: src = s11; break;
    case 12: src = s12; break; case 13: src = s13; break; case 14: src = s14; break; default: src = s15; break;
    }
    uint ls = (uint)get_local_size(0), lid = (uint)get_local_id(0);
    ulong base = (ulong)(g - d.blk_start[i]) * ls * TL_PUB_PER_ITEM;
    uint len = (uint)min((ulong)ls * TL_PUB_PER_ITEM, d.n[i] - base);   /* uint loop: vectorises better */
    global const float *s = src + d.src_off[i] + base;
    global float *o = dst + d.dst_off[i] + base;
    for (uint e = lid; e < len; e += ls) o[e] = s[e];                   /* coalesced per pass */
}

kernel void
tl_publish_maxabs_f32(global const float *snap, global const float *last, global const ulong2 *blk,
                      global const uint *blk_tensor, global uint *out)
{
    local uint gmax;
    uint g = (uint)get_group_id(0);
    ulong2 r = blk[g];
    uint ls = (uint)get_local_size(0), len = (uint)(r.y - r.x);
    global const float *a = snap + r.x, *b = last + r.x;
    float m = 0.0f;
    int nan = 0;
    for (uint e = (uint)get_local_id(0); e < len; e += ls) {   /* branch-free body: vectorises on CPUs */
        float dlt = fabs(a[e] - b[e]);
        m = fmax(m, dlt);                                        /* fmax drops NaN, so count it apart */
        nan |= isnan(dlt);
    }
    if (nan) m = INFINITY;
    if (get_local_id(0) == 0) gmax = 0u;
    barrier(CLK_LOCAL_MEM_FENCE);
    atomic_max(&gmax, as_uint(m));
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_local_id(0) == 0) atomic_max(&out[blk_tensor[g]], gmax);
}

kernel void
tl_publish_update_f32(global float *last, global const float *snap, global const ulong2 *blk,
                      global const uint *blk_tensor, global const uint *flags)
{
    uint g = (uint)get_group_id(0);
    if (flags[blk_tensor[g]] == 0u) return;                    /* uniform per work-group */
    ulong2 r = blk[g];
    uint ls = (uint)get_local_size(0), len = (uint)(r.y - r.x);
    global float *o = last + r.x;
    global const float *s = snap + r.x;
    for (uint e = (uint)get_local_id(0); e < len; e += ls) o[e] = s[e];
}
