/* index.cl: gathers for index_select, gather (take_along_axis) and integer-tensor indexing.
 * One kernel serves all three: the host builds a tl_layout over the output's shape in which operand 1 is
 * the source with the indexed dim given stride 0 (its base element for that output position) and
 * operand 2 is the index tensor broadcast to the output. The element read is base + idx * dim_stride.
 * Indices were checked on the host to lie in [-dim_size, dim_size); negative ones count from the end. */
#include "ew_ops.h"

/* Element gid of a row-major walk over L.shape: offsets of the output (0) and operands 1..3. */
inline int4
ix_offsets(const tl_layout *L, int gid)
{
    int4 ix = (int4)(L->off[0], L->off[1], L->off[2], L->off[3]);
    for (int d = L->ndim - 1; d >= 0; d--) {
        int i = gid % L->shape[d];
        gid /= L->shape[d];
        ix += i * (int4)(L->st[0][d], L->st[1][d], L->st[2][d], L->st[3][d]);
    }
    return ix;
}

/* 4-byte elements moved as bits, so float32 and int32 sources share the kernel. */
kernel void
tl_gather_u32(tl_layout L, global uint *o, global const uint *a, global const int *idx, int dim_size,
              int dim_stride)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ix_offsets(&L, gid);
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
