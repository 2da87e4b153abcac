/* matmul_wg.h: one kernel of kernels/matmul_wg.cl, tl_gemm_wg_nt_<tag>_f32, for the configuration the
 * includer sets (WG_TAG, WG_BM = 64 x warpgroups, WG_BN = the wgmma width N, WG_BK, WG_STAGES). */
#define WG_THREADS (WG_BM / 64 * 128)
#define WG_SW (WG_BK * 4)                   /* bytes of a tile row = the swizzle width (32, 64 or 128) */
#define WG_CH (WG_BK / 4)                   /* 16-byte chunks a row */
#define WG_ASZ (WG_BM * WG_BK)              /* floats of a stage's A tile, then its B tile */
#define WG_STAGE (WG_ASZ + WG_BN * WG_BK)
#if WG_STAGES * WG_STAGE * 4 > 49152
#error "matmul_wg: the stages exceed the 48 KiB of local memory a work-group gets"
#endif
#define WG_MMA WG_CAT(wg_mma_n, WG_BN)
#define WG_FENCE WG_CAT(wg_fence_n, WG_BN)
#define WG_WAIT0 WG_CAT(wg_wait0_n, WG_BN)
#define WG_LOAD WG_CAT(wg_load_, WG_TAG)

/* Tile kt of the rows r0.. (n_rows of them, `lim` valid) of a K-major operand X (row stride ld) into the
 * local tile t: row r's chunk c at chunk c ^ wg_swz(r), rows past lim and columns past K zero-filled; 16-byte copies where
 * the source is 16-byte aligned, else four 4-byte ones. */
static inline void
WG_LOAD(local float *t, global const float *X, int ld, int lim, int n_rows, int K, int k0, int tid)
{
    for (int e = tid; e < n_rows * WG_CH; e += WG_THREADS) {
        const int r = e / WG_CH, c = e % WG_CH, k = k0 + 4 * c;
        const int nv = r < lim ? clamp(K - k, 0, 4) : 0;
        global const float *src = X + (nv > 0 ? r * ld + k : 0);
        tc_copy4(t + r * WG_BK + 4 * (c ^ wg_swz(r, WG_SW)), src, nv, ((ulong)(uintptr_t)src & 15) == 0);
    }
}

kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void
WG_CAT(WG_CAT(tl_gemm_wg_nt_, WG_TAG), _f32)(MM_ARGS)
{
    local float S[WG_STAGES * WG_STAGE] __attribute__((aligned(1024)));
    const int tid = get_local_id(0), grp = tid / 128;
    const int tm = (M + WG_BM - 1) / WG_BM, tn = (N + WG_BN - 1) / WG_BN;
    int pm, pn;
    tc_tile_order(get_group_id(0), tm, tn, &pm, &pn);
    const int m0 = pm * WG_BM, n0 = pn * WG_BN;
    MM_BATCH();
    (void)sAk;
    (void)sBk;
    global const float *Ab = A + m0 * sAm, *Bb = B + n0 * sBn;
    const int KT = (K + WG_BK - 1) / WG_BK;
    float d[WG_BN / 2];
    for (int i = 0; i < WG_BN / 2; i++) d[i] = 0.0f;
    for (int s = 0; s < WG_STAGES - 1; s++) {
        if (s < KT) {
            WG_LOAD(S + s * WG_STAGE, Ab, sAm, M - m0, WG_BM, K, s * WG_BK, tid);
            WG_LOAD(S + s * WG_STAGE + WG_ASZ, Bb, sBn, N - n0, WG_BN, K, s * WG_BK, tid);
        }
        tc_commit();
    }
    for (int kt = 0; kt < KT; kt++) {
        tc_wait(WG_STAGES - 2);                 /* this work-item's copies of tile kt have landed */
        wg_proxy_fence();                       /* ... and are visible to the tensor cores' (async) proxy */
        WG_WAIT0(d);                            /* this warpgroup is done reading tile kt - 1 */
        barrier(CLK_LOCAL_MEM_FENCE);           /* every copy of tile kt is in; no one still reads kt - 1 */
        const int nk = kt + WG_STAGES - 1;
        if (nk < KT) {                          /* into the stage tile kt - 1 used */
            local float *t = S + (nk % WG_STAGES) * WG_STAGE;
            WG_LOAD(t, Ab, sAm, M - m0, WG_BM, K, nk * WG_BK, tid);
            WG_LOAD(t + WG_ASZ, Bb, sBn, N - n0, WG_BN, K, nk * WG_BK, tid);
        }
        tc_commit();
        local const float *as = S + (kt % WG_STAGES) * WG_STAGE + grp * 64 * WG_BK;
        local const float *bs = S + (kt % WG_STAGES) * WG_STAGE + WG_ASZ;
#if TC_EMULATE
        wg_mma_emu(d, as, bs, WG_BN, WG_BK, WG_SW, tid % 128);
#else
        const ulong da = wg_desc(as, WG_SW), db = wg_desc(bs, WG_SW);
        WG_FENCE(d);
#pragma unroll
        for (int kk = 0; kk < WG_BK / 8; kk++) WG_MMA(d, da + 2 * kk, db + 2 * kk);   /* +32 bytes along k */
        wg_commit();
#endif
    }
    WG_WAIT0(d);
    /* thread (warp w, lane l) of warpgroup grp holds rows 16w + l/4 (+ 8) and columns 8j + 2(l%4) (+ 1) */
    const int lane = tid % 32, r = m0 + grp * 64 + (tid % 128) / 32 * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < WG_BN / 8; j++) {
        const int c = n0 + 8 * j + 2 * (lane % 4);
        for (int h = 0; h < 2; h++) {
            if (r + 8 * h >= M) continue;
            if (c < N) C[(r + 8 * h) * N + c] = d[4 * j + 2 * h];
            if (c + 1 < N) C[(r + 8 * h) * N + c + 1] = d[4 * j + 2 * h + 1];
        }
    }
}

#undef WG_THREADS
#undef WG_SW
#undef WG_CH
#undef WG_ASZ
#undef WG_STAGE
#undef WG_MMA
#undef WG_FENCE
#undef WG_WAIT0
#undef WG_LOAD
#undef WG_TAG
#undef WG_BM
#undef WG_BN
#undef WG_BK
#undef WG_STAGES
