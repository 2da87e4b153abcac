/* matmul_tc.h: the body of one tensor-core TF32 GEMM kernel, included by matmul_tc.cl once per tile
 * configuration and operand layout with these macros set (and #undef'd by the includer afterwards):
 *   TC_NAME            the kernel's name
 *   TC_BM, TC_BN, TC_BK  the work-group's tile of C and its k-step; TC_WM x TC_WN warps split the tile
 *   TC_STAGES          local-memory tiles in flight (cp.async pipeline depth, >= 2)
 *   TC_AK              1: A is read along k (sAk == 1; As[m][k]), 0: along m (sAm == 1; As[k][m])
 *   TC_BK1             1: B is read along k (sBk == 1; Bs[n][k]), 0: along n (sBn == 1; Bs[k][n])
 * Each warp owns a (BM/WM) x (BN/WN) block of C as m16n8k8 accumulators (kernels/matmul_tc.cl says how a
 * fragment maps to lanes). Local rows are padded so that a fragment's 32 reads hit 32 banks: rows read
 * along k by BK+4 floats, rows read along m or n by BM+8 / BN+8 floats (both keep 16-byte alignment).
 * Optional build options for sweeps (default 0; H100 sweeps found no gain, benchmarks/NOTES.md):
 *   TC_SWZ   1: unpadded rows with their 16-byte chunks XOR-swizzled instead of padding (see TC_IDXK)
 *   TC_DBUF  1: fragments in two register sets, the next k8 step's (or the next tile's first) read from
 *            local memory while the tensor cores work on the current one (needs BK a multiple of 16) */

#define TC_WTM (TC_BM / TC_WM)
#define TC_WTN (TC_BN / TC_WN)
#define TC_MI (TC_WTM / 16)
#define TC_NI (TC_WTN / 8)
#define TC_NT (32 * TC_WM * TC_WN)
/* TC_AIDX(r, c), TC_BIDX(r, c): element c of stored row r of a stage (rows along k: r = m or n, c = k;
 * rows along m or n: r = k, c = m or n); TC_AS(m, k), TC_BS(k, n): the element of the stage at as / bs. */
#if TC_SWZ
/* Unpadded rows of 16-byte chunks (4 floats); chunk c of row r is stored at chunk c ^ s(r), so each chunk
 * stays whole and 16-byte aligned (cp.async, ldmatrix). 32 banks = 8 chunks:
 *  - rows along k (BK floats, KC = BK/4 chunks, 8/KC rows a 128-byte line): s(r) = (r / (8/KC)) % KC, or
 *    r % 8 when KC >= 8: the 8 rows g = 0..7 that a fragment reads at one k (rows 8-aligned) put that
 *    chunk on 8 different bank groups;
 *  - rows along m or n (>= 64 floats): s(k) = 2 (k % 4): the 8 columns (2 chunks, 8-aligned) a fragment
 *    reads at 4 consecutive k cover the 8 bank groups.
 * The XOR permutes chunks inside aligned groups of 8 (or of one row), so the 8 consecutive chunks that 8
 * lanes copy still land on 8 different bank groups. */
#define TC_KC (TC_BK / 4)
#define TC_KSW(r) (TC_KC >= 8 ? (r) & 7 : ((r) >> (TC_KC == 4 ? 1 : 2)) & (TC_KC - 1))  /* shifts: r >= 0 */
#define TC_IDXK(r, c) ((r) * TC_BK + ((c) ^ (TC_KSW(r) << 2)))            /* chunk XOR s = column XOR 4s */
#define TC_IDXM(r, c, ld) ((r) * (ld) + ((c) ^ (((r) & 3) << 3)))
#if TC_AK
#define TC_ASZ (TC_BM * TC_BK)
#define TC_AIDX(r, c) TC_IDXK(r, c)
#else
#define TC_ASZ (TC_BK * TC_BM)
#define TC_AIDX(r, c) TC_IDXM(r, c, TC_BM)
#endif
#if TC_BK1
#define TC_BSZ (TC_BN * TC_BK)
#define TC_BIDX(r, c) TC_IDXK(r, c)
#else
#define TC_BSZ (TC_BK * TC_BN)
#define TC_BIDX(r, c) TC_IDXM(r, c, TC_BN)
#endif
#else
#if TC_AK
#define TC_LDA (TC_BK + 4)
#define TC_ASZ (TC_BM * TC_LDA)
#else
#define TC_LDA (TC_BM + 8)
#define TC_ASZ (TC_BK * TC_LDA)
#endif
#if TC_BK1
#define TC_LDB (TC_BK + 4)
#define TC_BSZ (TC_BN * TC_LDB)
#else
#define TC_LDB (TC_BN + 8)
#define TC_BSZ (TC_BK * TC_LDB)
#endif
#define TC_AIDX(r, c) (r) * TC_LDA + (c)
#define TC_BIDX(r, c) (r) * TC_LDB + (c)
#endif
#if TC_SWZ
/* Fragment reads: the rows a lane reads are, mod 8, its own (g, or lane % 8 for ldmatrix) along k and
 * t (mod 4) along m or n, so s(r) is a per-lane constant (tc_swk, tc_swm) and the addresses stay a few
 * per-lane offsets plus constants. */
#define TC_FK(r, c) ((r) * TC_BK + ((c) ^ tc_swk))
#define TC_FM(r, c, ld) ((r) * (ld) + ((c) ^ tc_swm))
#if TC_AK
#define TC_AS(m, k) as[TC_FK(m, k)]
#else
#define TC_AS(m, k) as[TC_FM(k, m, TC_BM)]
#endif
#if TC_BK1
#define TC_BS(k, n) bs[TC_FK(n, k)]
#else
#define TC_BS(k, n) bs[TC_FM(k, n, TC_BN)]
#endif
#else
#if TC_AK
#define TC_AS(m, k) as[TC_AIDX(m, k)]
#else
#define TC_AS(m, k) as[TC_AIDX(k, m)]
#endif
#if TC_BK1
#define TC_BS(k, n) bs[TC_BIDX(n, k)]
#else
#define TC_BS(k, n) bs[TC_BIDX(k, n)]
#endif
#endif
#if !TC_EMULATE && TC_STAGES * (TC_ASZ + TC_BSZ) * 4 > 49152
#error "matmul_tc.h: the stages need more than the 48 KiB of local memory OpenCL gives a work-group on NVIDIA"
#endif
#if TC_DBUF && TC_BK % 16 != 0
#error "matmul_tc.h: TC_DBUF needs an even number of k8 steps a tile"
#endif

#if TC_DBUF
/* TC_FRAGS(af, bf, kk): the A and B fragments of k8 step kk of the stage at as / bs (the same reads as the
 * loop body below without TC_DBUF); TC_MMAS(af, bf): the warp's MMAs on them. Unrolled (_Pragma) so that
 * the fragment arrays stay in registers. */
#if TC_LDSM && TC_AK
#define TC_AFRAG(AF, KK)                                                                            \
    _Pragma("unroll") for (int i = 0; i < TC_MI; i++)                                               \
        tc_ldsm4(AF[i], &TC_AS(wm * TC_WTM + i * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), (KK) + 4 * (lane >> 4)));
#else
#define TC_AFRAG(AF, KK)                                                                            \
    _Pragma("unroll") for (int i = 0; i < TC_MI; i++) {                                             \
        const int r_ = wm * TC_WTM + i * 16 + g;                                                    \
        AF[i][0] = tc_tf32(TC_AS(r_, (KK) + t));                                                    \
        AF[i][1] = tc_tf32(TC_AS(r_ + 8, (KK) + t));                                                \
        AF[i][2] = tc_tf32(TC_AS(r_, (KK) + t + 4));                                                \
        AF[i][3] = tc_tf32(TC_AS(r_ + 8, (KK) + t + 4));                                            \
    }
#endif
#if TC_LDSM && TC_BK1
#define TC_BFRAG(BF, KK)                                                                            \
    _Pragma("unroll") for (int j = 0; j < TC_NI; j += 2) {                                          \
        uint r4_[4];                                                                                \
        tc_ldsm4(r4_, &TC_BS((KK) + 4 * ((lane >> 3) & 1), wn * TC_WTN + j * 8 + 8 * (lane >> 4) + (lane & 7))); \
        BF[j][0] = r4_[0];                                                                          \
        BF[j][1] = r4_[1];                                                                          \
        BF[j + 1][0] = r4_[2];                                                                      \
        BF[j + 1][1] = r4_[3];                                                                      \
    }
#else
#define TC_BFRAG(BF, KK)                                                                            \
    _Pragma("unroll") for (int j = 0; j < TC_NI; j++) {                                             \
        const int c_ = wn * TC_WTN + j * 8 + g;                                                     \
        BF[j][0] = tc_tf32(TC_BS((KK) + t, c_));                                                    \
        BF[j][1] = tc_tf32(TC_BS((KK) + t + 4, c_));                                                \
    }
#endif
#define TC_FRAGS(AF, BF, KK) do { TC_AFRAG(AF, KK) TC_BFRAG(BF, KK) } while (0)
#if TC_EMULATE
#define TC_MMAS(AF, BF) TC_MMA_STEP(AF, BF)
#else
#define TC_MMAS(AF, BF)                                                                             \
    _Pragma("unroll") for (int i = 0; i < TC_MI; i++)                                               \
        _Pragma("unroll") for (int j = 0; j < TC_NI; j++) TC_MMA(acc[i][j], AF[i], BF[j])
#endif
#endif

kernel __attribute__((reqd_work_group_size(TC_NT, 1, 1))) void
TC_NAME(MM_ARGS)
{
    local float As[TC_STAGES * TC_ASZ] __attribute__((aligned(16)));    /* 16-byte copies, ldmatrix rows */
    local float Bs[TC_STAGES * TC_BSZ] __attribute__((aligned(16)));
#if TC_EMULATE
    local uint Xs[TC_NT * (4 * TC_MI + 2 * TC_NI)];
#define TC_MMA_STEP(AF, BF)                                                                         \
    tc_mma_step_emu(&acc[0][0][0], &AF[0][0], &BF[0][0], TC_MI, TC_NI, Xs + warp * 32 * (4 * TC_MI + 2 * TC_NI), lane)
#else
#define TC_MMA(d, a, b) tc_mma(d, a, b)
#endif
    const int lid = get_local_id(0), lane = lid & 31, warp = lid >> 5;
    const int g = lane >> 2, t = lane & 3;
    const int wm = warp / TC_WN, wn = warp % TC_WN;
#if TC_SWZ
    const int tc_swk = TC_KSW(TC_LDSM ? lane & 7 : g) << 2, tc_swm = t << 3;   /* see TC_FK, TC_FM */
#endif
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
        tc_copy4(As + (stage) * TC_ASZ + TC_AIDX(r, kc), A + (nv ? m * sAm + k : 0), nv, a_vec); \
    }
#else
#define TC_A_CHUNKS (TC_BK * TC_BM / 4)
#define TC_A_LOAD(stage, k0)                                                                        \
    for (int c = lid; c < TC_A_CHUNKS; c += TC_NT) {                                                \
        const int r = c / (TC_BM / 4), mc = (c % (TC_BM / 4)) * 4;                                  \
        const int m = m0 + mc, k = (k0) + r;                                                        \
        const int nv = k < K ? clamp(M - m, 0, 4) : 0;                                              \
        tc_copy4(As + (stage) * TC_ASZ + TC_AIDX(r, mc), A + (nv ? m + k * sAk : 0), nv, a_vec); \
    }
#endif
#if TC_BK1
#define TC_B_CHUNKS (TC_BN * TC_BK / 4)
#define TC_B_LOAD(stage, k0)                                                                        \
    for (int c = lid; c < TC_B_CHUNKS; c += TC_NT) {                                                \
        const int r = c / (TC_BK / 4), kc = (c % (TC_BK / 4)) * 4;                                  \
        const int n = n0 + r, k = (k0) + kc;                                                        \
        const int nv = n < N ? clamp(K - k, 0, 4) : 0;                                              \
        tc_copy4(Bs + (stage) * TC_BSZ + TC_BIDX(r, kc), B + (nv ? n * sBn + k : 0), nv, b_vec); \
    }
#else
#define TC_B_CHUNKS (TC_BK * TC_BN / 4)
#define TC_B_LOAD(stage, k0)                                                                        \
    for (int c = lid; c < TC_B_CHUNKS; c += TC_NT) {                                                \
        const int r = c / (TC_BN / 4), nc = (c % (TC_BN / 4)) * 4;                                  \
        const int n = n0 + nc, k = (k0) + r;                                                        \
        const int nv = k < K ? clamp(N - n, 0, 4) : 0;                                              \
        tc_copy4(Bs + (stage) * TC_BSZ + TC_BIDX(r, nc), B + (nv ? n + k * sBk : 0), nv, b_vec); \
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
#if TC_DBUF
    /* Two fragment sets in CUTLASS's multistage order: each k8 step reads the next step's fragments before
     * its MMAs; before a tile's last step come the wait and barrier for the next tile, whose first
     * fragments that step then reads. After that barrier no one reads the tile's stage again, so the
     * copies issued at the top of the next tile may overwrite it. */
    uint af[2][TC_MI][4], bf[2][TC_NI][2];
    tc_wait(TC_STAGES - 2);
    barrier(CLK_LOCAL_MEM_FENCE);
    {
        local const float *as = As, *bs = Bs;
        TC_FRAGS(af[0], bf[0], 0);
    }
    for (int kt = 0; kt < KT; kt++) {
        {
            const int nk = kt + TC_STAGES - 1, ns = nk % TC_STAGES;
            if (nk < KT) {
                TC_A_LOAD(ns, nk * TC_BK);
                TC_B_LOAD(ns, nk * TC_BK);
            }
            tc_commit();
        }
        {
            local const float *as = As + (kt % TC_STAGES) * TC_ASZ;
            local const float *bs = Bs + (kt % TC_STAGES) * TC_BSZ;
#pragma unroll
            for (int kk = 0; kk < TC_BK - 8; kk += 8) {
                const int cur = (kk / 8) & 1;
                TC_FRAGS(af[cur ^ 1], bf[cur ^ 1], kk + 8);
                TC_MMAS(af[cur], bf[cur]);
            }
        }
        tc_wait(TC_STAGES - 2);                       /* tile kt+1 has landed, for everyone */
        barrier(CLK_LOCAL_MEM_FENCE);
        {                                             /* past the last tile: unused reads */
            local const float *as = As + ((kt + 1) % TC_STAGES) * TC_ASZ;
            local const float *bs = Bs + ((kt + 1) % TC_STAGES) * TC_BSZ;
            TC_FRAGS(af[0], bf[0], 0);
        }
        TC_MMAS(af[1], bf[1]);                        /* an even number of steps: the last one's set is 1 */
    }
#else
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
#if TC_EMULATE
            TC_MMA_STEP(af, bf);
#else
#pragma unroll
            for (int i = 0; i < TC_MI; i++)
#pragma unroll
                for (int j = 0; j < TC_NI; j++) TC_MMA(acc[i][j], af[i], bf[j]);
#endif
        }
    }
#endif
    tc_wait_all();

    /* store: lane (g, t) holds rows g and g+8, columns 2t and 2t+1 of each 16x8 block */
    if (epi) {                                    /* the store epilogue (mm_epi.h): a uniform branch */
#pragma unroll
        for (int i = 0; i < TC_MI; i++) {
#pragma unroll
            for (int j = 0; j < TC_NI; j++) {
                const int n = n0 + wn * TC_WTN + j * 8 + 2 * t;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int m = m0 + wm * TC_WTM + i * 16 + g + 8 * h, at = m * N + n;
                    if (m >= M) continue;
#if TC_HALF
                    if (n < N) tc_st1(C + at, MM_EPI(acc[i][j][2 * h], n, at));
                    if (n + 1 < N) tc_st1(C + at + 1, MM_EPI(acc[i][j][2 * h + 1], n + 1, at + 1));
#else
                    if (n < N) C[at] = MM_EPI(acc[i][j][2 * h], n, at);
                    if (n + 1 < N) C[at + 1] = MM_EPI(acc[i][j][2 * h + 1], n + 1, at + 1);
#endif
                }
            }
        }
        return;
    }
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
                global TC_CT *dst = C + m * N + n;
#if TC_HALF
                if (n < N) tc_st1(dst, acc[i][j][2 * h]);
                if (n + 1 < N) tc_st1(dst + 1, acc[i][j][2 * h + 1]);
                (void)pair;
#else
                if (pair && n + 1 < N) {
                    vstore2((float2)(acc[i][j][2 * h], acc[i][j][2 * h + 1]), 0, dst);
                } else {
                    if (n < N) dst[0] = acc[i][j][2 * h];
                    if (n + 1 < N) dst[1] = acc[i][j][2 * h + 1];
                }
#endif
            }
        }
    }
}

#undef TC_MMA
#undef TC_MMA_STEP
#undef TC_KC
#undef TC_KSW
#undef TC_IDXK
#undef TC_IDXM
#undef TC_FK
#undef TC_FM
#undef TC_AIDX
#undef TC_BIDX
#undef TC_AFRAG
#undef TC_BFRAG
#undef TC_FRAGS
#undef TC_MMAS
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
