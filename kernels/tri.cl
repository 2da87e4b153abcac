/* tri.cl: tril/triu, and their backward (the same mask on the gradient). 4-byte elements are moved as bits,
 * so float32 and int32 share the kernel (0u is 0.0f and 0). L walks the output (contiguous) and the input
 * (any strides) in row-major order, merged dims included, so an element's row and column in the last two
 * dims come from its position gid alone. */
#include "ew_ops.h"

kernel void
tl_tri_u32(tl_layout L, global uint *o, global const uint *x, int rows, int cols, int diagonal, int upper)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    int j = gid % cols, i = (gid / cols) % rows, d = j - i;
    o[ix.s0] = (upper ? d >= diagonal : d <= diagonal) ? x[ix.s1] : 0u;
}
