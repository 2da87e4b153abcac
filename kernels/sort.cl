/* sort.cl: topk / sort / argsort along the last dim of a contiguous [rows, n] float32 tensor, and topk's
 * backward. One work-group per row runs a bitonic sorting network over (value, index) pairs padded to P (a
 * power of two >= n) in a global scratch row: the network is data-oblivious and the order is total (values,
 * NaN above every number as in PyTorch, then the index ascending), so the result is a stable sort, the
 * same bit for bit on every run and device. Cost per row: P/2 * log2(P) * (log2(P) + 1) / 2 compare-exchanges
 * spread over the work-group, one barrier per stage.
 * Invariants: every work-item of the group reaches every barrier (the loops are uniform); a row's scratch is
 * touched only by its own work-group, so global-memory barriers order it. */

/* Does (va, ia) come before (vb, ib)? Indices >= n are padding and go last. */
inline bool
before(float va, int ia, float vb, int ib, int n, int desc)
{
    bool pa = ia >= n, pb = ib >= n;
    if (pa || pb) return pa == pb ? ia < ib : pb;
    bool na = isnan(va), nb = isnan(vb);
    if (na != nb) return desc ? na : nb;               /* NaN is the largest value */
    if (!na && va != vb) return desc ? va > vb : va < vb;
    return ia < ib;
}

/* x: [rows, n] from xoff; kv, ki: scratch [rows, P]; out: the first k of each sorted row, values in ov (may
 * be NULL: argsort) and indices in oi, [rows, k]. Launched with rows work-groups. */
kernel void
tl_sort_rows_f32(int n, int P, int k, int desc, global const float *x, int xoff, global float *kv, global int *ki,
                 global float *ov, global int *oi)
{
    int row = (int)get_group_id(0), lid = (int)get_local_id(0), L = (int)get_local_size(0);
    global const float *xr = x + xoff + (long)row * n;
    global float *v = kv + (long)row * P;
    global int *ix = ki + (long)row * P;
    for (int t = lid; t < P; t += L) {
        v[t] = t < n ? xr[t] : 0.0f;
        ix[t] = t;
    }
    barrier(CLK_GLOBAL_MEM_FENCE);
    for (int size = 2; size <= P; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = lid; t < P / 2; t += L) {
                int lo = 2 * stride * (t / stride) + t % stride, hi = lo + stride;
                float a = v[lo], b = v[hi];
                int ia = ix[lo], ib = ix[hi];
                bool up = (lo & size) == 0;
                if (up ? before(b, ib, a, ia, n, desc) : before(a, ia, b, ib, n, desc)) {
                    v[lo] = b;
                    v[hi] = a;
                    ix[lo] = ib;
                    ix[hi] = ia;
                }
            }
            barrier(CLK_GLOBAL_MEM_FENCE);
        }
    }
    for (int r = lid; r < k; r += L) {
        if (ov) ov[(long)row * k + r] = v[r];
        oi[(long)row * k + r] = ix[r];
    }
}

/* topk backward: out [rows, n] (zeroed first) receives g [rows, k] at the saved indices, which are distinct
 * within a row, so each element has at most one writer. */
kernel void
tl_topk_backward_f32(int rows, int n, int k, global float *out, global const float *g, int goff,
                     global const int *idx, int ioff)
{
    int gid = get_global_id(0);
    if (gid >= rows * k) return;
    int row = gid / k, i = idx[ioff + gid];
    if (i >= 0 && i < n) out[(long)row * n + i] = g[goff + gid];
}
