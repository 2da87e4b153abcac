/* matmul_tc.h: the body of one tensor-core TF32 GEMM kernel, included by matmul_tc.cl once per tile
 * configuration and operand layout with these macros set (and #undef'd by the includer afterwards):
 *   TC_NAME            the kernel's name
 *   TC_BM, TC_BN, TC_BK  the work-group's tile of C and its k-step; TC_WM x TC_WN warps split the tile
 *   TC_STAGES          local-memory tiles in flight (cp.async pipeline depth, >= 2)
 *   TC_AK              1: A is read along k (sAk == 1; As[m][k]), 0: along m (sAm == 1; As[k][m])
 *   TC_BK1             1: B is read along k (sBk == 1; Bs[n][k]), 0: along n (sBn == 1; Bs[k][n])
 * Each warp owns a (BM/WM) x (BN/WN) block of C as m16n8k8 accumulators (kernels/matmul_tc.cl says how a
 * fragment maps to lanes). Local rows are padded so that a fragment's 32 reads hit 32 banks: rows read
 * along k by BK+4 floats, rows read along m or n by BM+8 / BN+8 floats (both keep 16-byte alignment). */

#define TC_WTM (TC_BM / TC_WM)
#define TC_WTN (TC_BN / TC_WN)
#define TC_MI (TC_WTM / 16)
#define TC_NI (TC_WTN / 8)
#define TC_NT (32 * TC_WM * TC_WN)
#if TC_AK
#define TC_LDA (TC_BK + 4)
#define TC_ASZ (TC_BM * TC_LDA)
#define TC_AS(m, k) as[(m) * TC_LDA + (k)]
#else
#define TC_LDA (TC_BM + 8)
#define TC_ASZ (TC_BK * TC_LDA)
#define TC_AS(m, k) as[(k) * TC_LDA + (m)]
#endif
#if TC_BK1
#define TC_LDB (TC_BK + 4)
#define TC_BSZ (TC_BN * TC_LDB)
#define TC_BS(k, n) bs[(n) * TC_LDB + (k)]
#else
#define TC_LDB (TC_BN + 8)
#define TC_BSZ (TC_BK * TC_LDB)
#define TC_BS(k, n) bs[(k) * TC_LDB + (n)]
#endif

kernel __attribute__((reqd_work_group_size(TC_NT, 1, 1))) void
TC_NAME(MM_ARGS)
{
    local float As[TC_STAGES * TC_ASZ] __attribute__((aligned(16)));    /* 16-byte copies, ldmatrix rows */
    local float Bs[TC_STAGES * TC_BSZ] __attribute__((aligned(16)));
#if TC_EMULATE
    local uint Xs[TC_NT / 32 * 192];
#define TC_MMA(d, a, b) tc_mma_emu(d, a, b, Xs + warp * 192, lane)
#else
#define TC_MMA(d, a, b) tc_mma(d, a, b)
#endif
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp / TC_WN, wn = warp % TC_WN;
    int pm, pn;
    tc_tile_order(get_group_id(0), (M + TC_BM - 1) / TC_BM, (N + TC_BN - 1) / TC_BN, &pm, &pn);
    const int m0 = pm * TC_BM, n0 = pn * TC_BN;
    MM_BATCH();
    /* 16-byte copies need every chunk's first element 16-byte aligned: the base, batch and row strides */
#if TC_AK
    const int a_vec = (offA | sAb1 | sAb2 | sAm) % 4 == 0;
#else
    const int a_vec = (offA | sAb1 | sAb2 | sAk) % 4 == 0;
#endif
#if TC_BK1
    const int b_vec = (offB | sBb1 | sBb2 | sBn) % 4 == 0;
#else
    const int b_vec = (offB | sBb1 | sBb2 | sBk) % 4 == 0;
#endif
    float acc[TC_MI][TC_NI][4];
    for (int i = 0; i < TC_MI; i++)
        for (int j = 0; j < TC_NI; j++)
            for (int c = 0; c < 4; c++) acc[i][j][c] = 0.0f;
    const int KT = (K + TC_BK - 1) / TC_BK;

    /* Tile loads: chunks of 4 elements along the operand's contiguous dim, each one cp.async of 16 bytes
     * (or 4 of 4 bytes when unaligned); elements outside the matrices are zero-filled (src-size 0). */
#if TC_AK
#define TC_A_CHUNKS (TC_BM * TC_BK / 4)
#define TC_A_LOAD(stage, k0)                                                                        \
    for (int c = lid; c < TC_A_CHUNKS; c += TC_NT) {                                                \
        const int r = c / (TC_BK / 4), kc = (c % (TC_BK / 4)) * 4;                                  \
        const int m = m0 + r, k = (k0) + kc;                                                        \
        const int nv = m < M ? clamp(K - k, 0, 4) : 0;                                              \
        tc_copy4(As + (stage) * TC_ASZ + r * TC_LDA + kc, A + (nv ? m * sAm + k : 0), nv, a_vec); \
    }
#else
#define TC_A_CHUNKS (TC_BK * TC_BM / 4)
#define TC_A_LOAD(stage, k0)                                                                        \
    for (int c = lid; c < TC_A_CHUNKS; c += TC_NT) {                                                \
        const int r = c / (TC_BM / 4), mc = (c % (TC_BM / 4)) * 4;                                  \
        const int m = m0 + mc, k = (k0) + r;                                                        \
        const int nv = k < K ? clamp(M - m, 0, 4) : 0;                                              \
        tc_copy4(As + (stage) * TC_ASZ + r * TC_LDA + mc, A + (nv ? m + k * sAk : 0), nv, a_vec); \
    }
#endif
#if TC_BK1
#define TC_B_CHUNKS (TC_BN * TC_BK / 4)
#define TC_B_LOAD(stage, k0)                                                                        \
    for (int c = lid; c < TC_B_CHUNKS; c += TC_NT) {                                                \
        const int r = c / (TC_BK / 4), kc = (c % (TC_BK / 4)) * 4;                                  \
        const int n = n0 + r, k = (k0) + kc;                                                        \
        const int nv = n < N ? clamp(K - k, 0, 4) : 0;                                              \
        tc_copy4(Bs + (stage) * TC_BSZ + r * TC_LDB + kc, B + (nv ? n * sBn + k : 0), nv, b_vec); \
    }
#else
#define TC_B_CHUNKS (TC_BK * TC_BN / 4)
#define TC_B_LOAD(stage, k0)                                                                        \
    for (int c = lid; c < TC_B_CHUNKS; c += TC_NT) {                                                \
        const int r = c / (TC_BN / 4), nc = (c % (TC_BN / 4)) * 4;                                  \
        const int n = n0 + nc, k = (k0) + r;                                                        \
        const int nv = k < K ? clamp(N - n, 0, 4) : 0;                                              \
        tc_copy4(Bs + (stage) * TC_BSZ + r * TC_LDB + nc, B + (nv ? n + k * sBk : 0), nv, b_vec); \
    }
#endif

    /* prologue: STAGES-1 tiles in flight, one commit group each (empty groups keep the count) */
    for (int s = 0; s < TC_STAGES - 1; s++) {
        if (s < KT) {
            TC_A_LOAD(s, s * TC_BK);
            TC_B_LOAD(s, s * TC_BK);
        }
        tc_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        tc_wait(TC_STAGES - 2);                       /* this thread's copies of tile kt have landed ... */
        barrier(CLK_LOCAL_MEM_FENCE);           /* ... and everyone's; the stage read last step is free */
        {
            const int nk = kt + TC_STAGES - 1, ns = nk % TC_STAGES;
            if (nk < KT) {
                TC_A_LOAD(ns, nk * TC_BK);
                TC_B_LOAD(ns, nk * TC_BK);
            }
            tc_commit();
        }
        local const float *as = As + (kt % TC_STAGES) * TC_ASZ;
        local const float *bs = Bs + (kt % TC_STAGES) * TC_BSZ;
#pragma unroll
        for (int kk = 0; kk < TC_BK; kk += 8) {
            uint af[TC_MI][4], bf[TC_NI][2];
            const int q = lane >> 3, qi = lane & 7;          /* ldmatrix: this lane's row address */
#if TC_LDSM && TC_AK
#pragma unroll
            for (int i = 0; i < TC_MI; i++)
                tc_ldsm4(af[i], &TC_AS(wm * TC_WTM + i * 16 + qi + 8 * (q & 1), kk + 4 * (q >> 1)));
#else
#pragma unroll
            for (int i = 0; i < TC_MI; i++) {
                const int r = wm * TC_WTM + i * 16 + g;
                af[i][0] = tc_tf32(TC_AS(r, kk + t));
                af[i][1] = tc_tf32(TC_AS(r + 8, kk + t));
                af[i][2] = tc_tf32(TC_AS(r, kk + t + 4));
                af[i][3] = tc_tf32(TC_AS(r + 8, kk + t + 4));
            }
#endif
#if TC_LDSM && TC_BK1
#pragma unroll
            for (int j = 0; j < TC_NI; j += 2) {
                uint r4[4];
                tc_ldsm4(r4, &TC_BS(kk + 4 * (q & 1), wn * TC_WTN + j * 8 + 8 * (q >> 1) + qi));
                bf[j][0] = r4[0];
                bf[j][1] = r4[1];
                bf[j + 1][0] = r4[2];
                bf[j + 1][1] = r4[3];
            }
#else
#pragma unroll
            for (int j = 0; j < TC_NI; j++) {
                const int c = wn * TC_WTN + j * 8 + g;
                bf[j][0] = tc_tf32(TC_BS(kk + t, c));
                bf[j][1] = tc_tf32(TC_BS(kk + t + 4, c));
            }
#endif
#pragma unroll
            for (int i = 0; i < TC_MI; i++)
#pragma unroll
                for (int j = 0; j < TC_NI; j++) TC_MMA(acc[i][j], af[i], bf[j]);
        }
    }
    tc_wait_all();

    /* store: lane (g, t) holds rows g and g+8, columns 2t and 2t+1 of each 16x8 block */
    const int pair = (N % 2 == 0) && (offC % 2 == 0);
#pragma unroll
    for (int i = 0; i < TC_MI; i++) {
#pragma unroll
        for (int j = 0; j < TC_NI; j++) {
            const int n = n0 + wn * TC_WTN + j * 8 + 2 * t;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int m = m0 + wm * TC_WTM + i * 16 + g + 8 * h;
                if (m >= M) continue;
                global float *dst = C + m * N + n;
                if (pair && n + 1 < N) {
                    vstore2((float2)(acc[i][j][2 * h], acc[i][j][2 * h + 1]), 0, dst);
                } else {
                    if (n < N) dst[0] = acc[i][j][2 * h];
                    if (n + 1 < N) dst[1] = acc[i][j][2 * h + 1];
                }
            }
        }
    }
}

#undef TC_MMA
#undef TC_WTM
#undef TC_WTN
#undef TC_MI
#undef TC_NI
#undef TC_NT
#undef TC_LDA
#undef TC_ASZ
#undef TC_AS
#undef TC_LDB
#undef TC_BSZ
#undef TC_BS
#undef TC_A_CHUNKS
#undef TC_A_LOAD
#undef TC_B_CHUNKS
#undef TC_B_LOAD
