/* mv_reduce.h: the cross-lane finish of the matrix-vector kernels (matmul.cl, quant.cl, mv_half.cl). Each of the L
 * lanes (a power of two) has written its partial sums of NV values to red[lane * (NV + 1) + q] (the +1
 * keeps both the writes and the reads below free of local-memory bank conflicts); the caller has passed a
 * barrier. Returns, in lane q < NV, the total of value q, summed in a fixed order (deterministic): every
 * lane first sums a strided slice of one value's partials, then lane q adds the L/NV slices of value q;
 * two barriers instead of a tree's log2(L), each with every lane busy. */
#ifndef TL_MV_REDUCE_H
#define TL_MV_REDUCE_H
#define MV_RED(lane, q, NV) red[(lane) * ((NV) + 1) + (q)]
inline float
mv_reduce(local float *red, int NV, int L, int lid)
{
    const int chunks = L / NV, q = lid % NV, c = lid / NV;      /* NV <= L, both powers of two (host) */
    float s = 0.0f;
    for (int l = c; l < L; l += chunks) s += MV_RED(l, q, NV);
    barrier(CLK_LOCAL_MEM_FENCE);
    MV_RED(c, q, NV) = s;
    barrier(CLK_LOCAL_MEM_FENCE);
    s = 0.0f;
    if (lid < NV)
        for (int k = 0; k < chunks; k++) s += MV_RED(k, lid, NV);
    return s;
}

/* A matrix-vector kernel's end: each lane's partial sums acc[NR][RR] (weight row j, activation row r) go to
 * red (the kernel's local float *red, lane lid of L), mv_reduce totals them, and lane j * RR + r runs
 * STORE(j, r, total) where n0 + j < N and r < R (a statement macro of the kernel's, its outputs' layout). */
#define MV_FINISH(acc, NR, RR, STORE)                                                                       \
    do {                                                                                                    \
        for (int j_ = 0; j_ < (NR); j_++)                                                                   \
            for (int r_ = 0; r_ < (RR); r_++) MV_RED(lid, j_ * (RR) + r_, (NR) * (RR)) = acc[j_][r_];       \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                       \
        const float tot_ = mv_reduce(red, (NR) * (RR), L, lid);                                             \
        if (lid < (NR) * (RR)) {                                                                            \
            const int j_ = lid / (RR), r_ = lid - j_ * (RR);                                                \
            if (n0 + j_ < N && r_ < R) STORE(j_, r_, tot_);                                                 \
        }                                                                                                   \
    } while (0)

/* rms_norm fused into a matrix-vector kernel (the activation rows' scale is a factor of every dot product):
 * each lane's partial sums of squares sq[RR] of activation row r are totalled as MV_FINISH's values are, and
 * sc[r] = rsqrt(total / K + eps) is left in the kernel's local float sc[RR] for its store. Uses red (its
 * first L * (RR + 1) floats) and leaves it free for MV_FINISH; ends with a barrier. RR <= L. */
#define MV_ROW_SCALE(sq, RR, K, eps, sc)                                                                    \
    do {                                                                                                    \
        for (int r_ = 0; r_ < (RR); r_++) MV_RED(lid, r_, (RR)) = sq[r_];                                   \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                       \
        const float ss_ = mv_reduce(red, (RR), L, lid);                                                     \
        if (lid < (RR)) sc[lid] = rsqrt(ss_ / (float)(K) + (eps));                                          \
        barrier(CLK_LOCAL_MEM_FENCE);                                                                       \
    } while (0)
#endif
