/* index.cl: gathers for index_select, gather (take_along_axis) and integer-tensor indexing.
 * One kernel serves all three: the host builds a tl_layout over the output's shape in which operand 1 is
 * the source with the indexed dim given stride 0 (its base element for that output position) and
 * operand 2 is the index tensor broadcast to the output. The element read is base + idx * dim_stride.
 * Indices were checked on the host to lie in [-dim_size, dim_size); negative ones count from the end. */
#include "ew_ops.h"

/* 4-byte elements moved as bits, so float32 and int32 sources share the kernel. */
kernel void
tl_gather_u32(tl_layout L, global uint *o, global const uint *a, global const int *idx, int dim_size,
              int dim_stride)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    int i = idx[ix.s2];
    if (i < 0) i += dim_size;
    o[ix.s0] = a[ix.s1 + i * dim_stride];
}

/* index_select backward: out is [pre, rows, post], g is [pre, k, post] (contiguous). For output row j the
 * source rows are order[starts[j] .. starts[j+1]), in increasing order, so the sum is deterministic. */
kernel void
tl_index_add_f32(int pre, int rows, int post, int k, global float *out, global const float *g,
                 global const int *order, global const int *starts)
{
    int gid = get_global_id(0);
    if (gid >= pre * rows * post) return;
    int q = gid % post, j = (gid / post) % rows, p = gid / (post * rows);
    float acc = 0.0f;
    for (int t = starts[j]; t < starts[j + 1]; t++) acc += g[(p * k + order[t]) * post + q];
    out[gid] = acc;
}
