/* matmul.cl: batched float32 GEMM over strided operands, C[b] = A[b] @ B[b] (C contiguous).
 * Every operand is addressed as off + b1*sb1 + b2*sb2 + row*s_row + col*s_col, so transposed views,
 * 1-D operands (a zero stride on the missing side) and broadcast batches (sb = 0) need no copy.
 * The batch index is global id 2, split as b = b1*nb2 + b2 (two collapsed batch dims); the host loops
 * over any further ones. Sizes need not be multiples of a tile: out-of-range loads read 0 and
 * out-of-range stores are skipped, so the global size is only rounded up to the tile.
 * Tiles are -D-free constants. tl_matmul_f32 (the default) runs 16x16 work-items on a 64x64 output
 * tile; tl_matmul_small_f32 runs 8x8 on 32x32 for devices whose kernel limit is under 256 work-items;
 * tl_matmul_naive_f32 (one output per work-item, no local memory) fits any work-group size and
 * also serves vector products (M or N == 1), where a square tile would sit mostly idle.
 * Each work-item of a tiled kernel keeps a 4x4 block of C in registers, strided by the tile side / 4,
 * so neighbouring work-items read neighbouring B values (coalesced on GPUs, SIMD lanes on PoCL). */

#define MM_WPT 4                      /* outputs per work-item along each of m and n */
#define MM_TK 16                      /* k-depth of one local tile */

#define MM_ARGS int M, int N, int K, int nb2,                                                       \
    global const float *A, int offA, int sAb1, int sAb2, int sAm, int sAk,                          \
    global const float *B, int offB, int sBb1, int sBb2, int sBk, int sBn,                          \
    global float *C, int offC

/* One TS x TS output tile (TS = 4 * local size); As is TS x MM_TK, Bs is MM_TK x TS. */
inline void
mm_tile(const int TS, local float *As, local float *Bs, MM_ARGS)
{
    const int R = TS / MM_WPT, nthreads = R * R;
    const int tx = get_local_id(0), ty = get_local_id(1), lid = ty * R + tx;
    const int n0 = get_group_id(0) * TS, m0 = get_group_id(1) * TS;
    const int b = get_global_id(2), b1 = b / nb2, b2 = b - b1 * nb2;
    A += offA + b1 * sAb1 + b2 * sAb2;
    B += offB + b1 * sBb1 + b2 * sBb2;
    C += offC + b * M * N;
    float acc[MM_WPT][MM_WPT];
    for (int i = 0; i < MM_WPT; i++)
        for (int j = 0; j < MM_WPT; j++) acc[i][j] = 0.0f;
    for (int k0 = 0; k0 < K; k0 += MM_TK) {
        for (int e = lid; e < TS * MM_TK; e += nthreads) {
            int r = e / MM_TK, c = e - r * MM_TK, m = m0 + r, k = k0 + c;
            As[e] = (m < M && k < K) ? A[m * sAm + k * sAk] : 0.0f;
            int kr = e / TS, nc = e - kr * TS, kb = k0 + kr, n = n0 + nc;
            Bs[e] = (kb < K && n < N) ? B[kb * sBk + n * sBn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < MM_TK; k++) {
            float a[MM_WPT], bv[MM_WPT];
            for (int i = 0; i < MM_WPT; i++) a[i] = As[(ty + i * R) * MM_TK + k];
            for (int j = 0; j < MM_WPT; j++) bv[j] = Bs[k * TS + tx + j * R];
            for (int i = 0; i < MM_WPT; i++)
                for (int j = 0; j < MM_WPT; j++) acc[i][j] = mad(a[i], bv[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);       /* the next load must not overwrite a tile still being read */
    }
    for (int i = 0; i < MM_WPT; i++) {
        int m = m0 + ty + i * R;
        for (int j = 0; j < MM_WPT; j++) {
            int n = n0 + tx + j * R;
            if (m < M && n < N) C[m * N + n] = acc[i][j];
        }
    }
}

kernel void
tl_matmul_f32(MM_ARGS)
{
    local float As[64 * MM_TK], Bs[MM_TK * 64];
    mm_tile(64, As, Bs, M, N, K, nb2, A, offA, sAb1, sAb2, sAm, sAk, B, offB, sBb1, sBb2, sBk, sBn, C, offC);
}

kernel void
tl_matmul_small_f32(MM_ARGS)
{
    local float As[32 * MM_TK], Bs[MM_TK * 32];
    mm_tile(32, As, Bs, M, N, K, nb2, A, offA, sAb1, sAb2, sAm, sAk, B, offB, sBb1, sBb2, sBk, sBn, C, offC);
}

/* One output per work-item over the flattened M x N (so a vector product keeps every lane busy and the
 * launch keeps one local size, which PoCL compiles once); global size (>= M*N, 1, batch). */
kernel void
tl_matmul_naive_f32(MM_ARGS)
{
    const size_t idx = get_global_id(0);
    if (idx >= (size_t)M * (size_t)N) return;
    const int m = (int)(idx / (size_t)N), n = (int)(idx - (size_t)m * (size_t)N);
    const int b = get_global_id(2), b1 = b / nb2, b2 = b - b1 * nb2;
    A += offA + b1 * sAb1 + b2 * sAb2 + m * sAm;
    B += offB + b1 * sBb1 + b2 * sBb2 + n * sBn;
    float acc = 0.0f;
    for (int k = 0; k < K; k++) acc = mad(A[k * sAk], B[k * sBk], acc);
    C[offC + b * M * N + m * N + n] = acc;
}
