/* index.cl: gathers for index_select, gather (take_along_axis) and integer-tensor indexing, and their
 * backwards.
 * One gather kernel serves all three: the host builds a tl_layout over the output's shape in which
 * operand 1 is the source with the indexed dim given stride 0 (its base element for that output position)
 * and operand 2 is the index tensor broadcast to the output. The element read is base + idx * dim_stride.
 * Indices in [-dim_size, dim_size) are valid, negative ones count from the end. index_select and t[idx]
 * check them on the host first; gather does not read them back: an invalid one reads nothing, writes 0
 * and records itself in chk (int[3]: 1 + chk_id, the index, dim_size; the first one wins), which the next
 * sync point reports (stream.h, device-side checks). */
#include "ew_ops.h"

inline void
report_bad(global int *chk, int chk_id, int i, int dim_size)
{
    if (atomic_cmpxchg(&chk[0], 0, chk_id + 1) == 0) {
        chk[1] = i;
        chk[2] = dim_size;
    }
}

/* 4-byte elements moved as bits, so float32 and int32 sources share the kernel. */
#define TL_GATHER(NAME, T)                                                                               \
kernel void                                                                                                \
NAME(tl_layout L, global T *o, global const T *a, global const int *idx, int dim_size, int dim_stride,       \
     global int *chk, int chk_id)                                                                          \
{                                                                                                          \
    int gid = get_global_id(0);                                                                            \
    if (gid >= L.n) return;                                                                                \
    int4 ix = ew_index(&L, gid);                                                                           \
    int i = idx[ix.s2], j = i < 0 ? i + dim_size : i;                                                      \
    if (j < 0 || j >= dim_size) {                                                                          \
        report_bad(chk, chk_id, i, dim_size);                                                              \
        o[ix.s0] = 0;                                                                                      \
        return;                                                                                            \
    }                                                                                                      \
    o[ix.s0] = a[ix.s1 + j * dim_stride];                                                                  \
}
TL_GATHER(tl_gather_u32, uint)
TL_GATHER(tl_gather_u16, ushort)   /* float16, bfloat16 */
TL_GATHER(tl_gather_u8, uchar)     /* uint8 */

/* gather backward, deterministic without atomics: one work-item per element of the source's gradient
 * (laid out contiguous over L's shape, whose dim d has the source's size; `inner` = the product of the
 * sizes after d). Operands 1 and 2 are the upstream gradient and the index over the same shape with dim d
 * at stride 0; the work-item sums, in order, the k of [0, K) whose index names its position along d.
 * Cost: numel x K, K = the index's size along d (1 for Q-values and log-probabilities). */
kernel void
tl_gather_backward_f32(tl_layout L, global float *o, global const float *g, global const int *idx, int K,
                       int g_stride, int idx_stride, int inner, int dim_size)
{
    int gid = get_global_id(0);
    if (gid >= L.n) return;
    int4 ix = ew_index(&L, gid);
    int j = (gid / inner) % dim_size;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) {
        int i = idx[ix.s2 + k * idx_stride];
        if ((i < 0 ? i + dim_size : i) == j) acc += g[ix.s1 + k * g_stride];
    }
    o[ix.s0] = acc;
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

/* index_add_(dim, index, source, alpha), deterministic without float atomics. self is [pre, rows, post]
 * (contiguous from ooff), source [pre, k, post] (contiguous from soff), the index k int32 (stride istride).
 * Pass 1 (tl_index_add_bounds_i32): one work-item per block of IA_BLOCK index entries checks them (a bad one
 * is reported like gather's and adds nothing) and writes the block's [min, max] position (min > max: none).
 * Pass 2 (tl_index_add_scan_f32): one work-item per element of self walks the blocks in order, skips those
 * whose range misses its row, and sums the matching source elements in index order, so the result is
 * bit-identical run to run. Cost: numel(self) x k/IA_BLOCK bound reads, plus IA_BLOCK index reads per block
 * whose range holds the row: about numel(self) x k for a random index, much less for a sorted or clustered
 * one (C51's projection). */
#define IA_BLOCK 64

kernel void
tl_index_add_bounds_i32(int k, int rows, global const int *idx, int ioff, int istride, global int *bounds,
                        global int *chk, int chk_id)
{
    int b = get_global_id(0);
    if (b >= (k + IA_BLOCK - 1) / IA_BLOCK) return;
    int lo = INT_MAX, hi = -1;
    for (int t = b * IA_BLOCK; t < min(k, (b + 1) * IA_BLOCK); t++) {
        int i = idx[ioff + t * istride], j = i < 0 ? i + rows : i;
        if (j < 0 || j >= rows) {
            report_bad(chk, chk_id, i, rows);
            continue;
        }
        lo = min(lo, j);
        hi = max(hi, j);
    }
    bounds[2 * b] = lo;
    bounds[2 * b + 1] = hi;
}

kernel void
tl_index_add_scan_f32(int pre, int rows, int post, int k, float alpha, global float *out, int ooff,
                      global const float *src, int soff, global const int *idx, int ioff, int istride,
                      global const int *bounds)
{
    int gid = get_global_id(0);
    if (gid >= pre * rows * post) return;
    int q = gid % post, j = (gid / post) % rows, p = gid / (post * rows), nb = (k + IA_BLOCK - 1) / IA_BLOCK;
    global const float *s = src + soff + p * k * post + q;
    float acc = 0.0f;
    int hit = 0;
    for (int b = 0; b < nb; b++) {
        if (j < bounds[2 * b] || j > bounds[2 * b + 1]) continue;
        for (int t = b * IA_BLOCK; t < min(k, (b + 1) * IA_BLOCK); t++) {
            int i = idx[ioff + t * istride];
            if ((i < 0 ? i + rows : i) == j) {
                acc += s[t * post];
                hit = 1;
            }
        }
    }
    if (hit) out[ooff + gid] += alpha * acc;
}

/* index_add_'s gradient to source: out [pre, k, post] = alpha * g[p, index[t], q] (g contiguous
 * [pre, rows, post]); an invalid entry (reported by the forward) gives 0. */
kernel void
tl_index_add_grad_f32(int pre, int rows, int post, int k, float alpha, global float *out, global const float *g,
                      int goff, global const int *idx, int ioff, int istride)
{
    int gid = get_global_id(0);
    if (gid >= pre * k * post) return;
    int q = gid % post, t = (gid / post) % k, p = gid / (post * k);
    int i = idx[ioff + t * istride], j = i < 0 ? i + rows : i;
    out[gid] = j >= 0 && j < rows ? alpha * g[goff + (p * rows + j) * post + q] : 0.0f;
}
