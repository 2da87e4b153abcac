/* matmul_wgb.h: one kernel of kernels/matmul_wgb.cl, tl_gemm_wgb_<tag>_f32, for the configuration the
 * includer sets (WG_TAG, WG_BM = 64 x consumer warpgroups, WG_BN = the wgmma width N, WG_BK, WG_STAGES >= 2).
 * C[b] = A[b] @ B[b]^T from the packed A [M, K] (PA + b * sPA) and B [N, K] (PB + b * sPB), KT k-tiles;
 * C contiguous [M, N] a batch. Launch: (tiles x WB_THREADS, batches), work-groups of WB_THREADS. */
#define WB_CW (WG_BM / 64 * 128)            /* consumer work-items; the producer warp follows them */
#define WB_THREADS (WB_CW + 32)
#define WB_ASZ (WG_BM * WG_BK)              /* floats of a stage's A tile, then its B tile */
#define WB_BSZ (WG_BN * WG_BK)
#define WB_STAGE (WB_ASZ + WB_BSZ)
#if WG_STAGES * (WB_STAGE * 4 + 16) > 49152 || WG_STAGES < 2
#error "matmul_wgb: 2 stages or more (and their mbarriers) within the 48 KiB of local memory a work-group gets"
#endif
#define WG_MMA WG_CAT(wg_mma_n, WG_BN)
#define WG_FENCE WG_CAT(wg_fence_n, WG_BN)
#define WG_WAIT0 WG_CAT(wg_wait0_n, WG_BN)
#define WG_WAIT1 WG_CAT(wg_wait1_n, WG_BN)

kernel __attribute__((reqd_work_group_size(WB_THREADS, 1, 1))) void
WG_CAT(WG_CAT(tl_gemm_wgb_, WG_TAG), _f32)(int M, int N, int KT, global const float *PA, int sPA,
                                           global const float *PB, int sPB, global float *C)
{
    local float S[WG_STAGES * WB_STAGE] __attribute__((aligned(1024)));
    const int tid = get_local_id(0), b = get_group_id(1);
    const int tm = (M + WG_BM - 1) / WG_BM, tn = (N + WG_BN - 1) / WG_BN;
    int pm, pn;
    tc_tile_order(get_group_id(0), tm, tn, &pm, &pn);
    const int m0 = pm * WG_BM, n0 = pn * WG_BN;
    global const float *pa = PA + (size_t)b * sPA + (size_t)pm * KT * WB_ASZ;   /* this tile row's k-tiles */
    global const float *pb = PB + (size_t)b * sPB + (size_t)pn * KT * WB_BSZ;
    C += (size_t)b * M * N;
    float d[WG_BN / 2];
    for (int i = 0; i < WG_BN / 2; i++) d[i] = 0.0f;
#if TC_EMULATE
    for (int kt = 0; kt < KT; kt++) {
        for (int i = tid; i < WB_STAGE; i += WB_THREADS)
            S[i] = i < WB_ASZ ? pa[(size_t)kt * WB_ASZ + i] : pb[(size_t)kt * WB_BSZ + i - WB_ASZ];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (tid < WB_CW) wg_mma_emu(d, S + tid / 128 * 64 * WG_BK, S + WB_ASZ, WG_BN, WG_BK, 4 * WG_BK, tid % 128);
        barrier(CLK_LOCAL_MEM_FENCE);
    }
#else
    local ulong bars[2 * WG_STAGES];                    /* full[s], then empty[s] */
    if (tid == 0)
        for (int s = 0; s < WG_STAGES; s++) {
            wg_bar_init(tc_saddr((local float *)&bars[s]), 1);
            wg_bar_init(tc_saddr((local float *)&bars[WG_STAGES + s]), WB_CW);
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid >= WB_CW) {                                 /* the producer warp: its first work-item copies */
        if (tid == WB_CW)
            for (int kt = 0; kt < KT; kt++) {
                const int s = kt % WG_STAGES;
                const uint full = tc_saddr((local float *)&bars[s]);
                if (kt >= WG_STAGES) wg_bar_wait(tc_saddr((local float *)&bars[WG_STAGES + s]), (kt / WG_STAGES - 1) & 1);
                wb_expect(full, WB_STAGE * 4);
                wb_bulk(tc_saddr(S + s * WB_STAGE), pa + (size_t)kt * WB_ASZ, WB_ASZ * 4, full);
                wb_bulk(tc_saddr(S + s * WB_STAGE + WB_ASZ), pb + (size_t)kt * WB_BSZ, WB_BSZ * 4, full);
            }
        return;
    }
    const int grp = tid / 128;
    for (int kt = 0; kt < KT; kt++) {
        const int s = kt % WG_STAGES;
        wg_bar_wait(tc_saddr((local float *)&bars[s]), (kt / WG_STAGES) & 1);   /* the stage's bytes landed */
        const ulong da = wg_desc(S + s * WB_STAGE + grp * 64 * WG_BK, 4 * WG_BK), db = wg_desc(S + s * WB_STAGE + WB_ASZ, 4 * WG_BK);
        WG_FENCE(d);
#pragma unroll
        for (int kk = 0; kk < WG_BK / 8; kk++) WG_MMA(d, da + 2 * kk, db + 2 * kk);
        wg_commit();
        WG_WAIT1(d);                                    /* tile kt - 1's group is done: its stage is free */
        if (kt > 0) wg_bar_arrive(tc_saddr((local float *)&bars[WG_STAGES + (kt - 1) % WG_STAGES]));
    }
    WG_WAIT0(d);
#endif
    if (tid < WB_CW) WG_STORE(d, m0, n0, tid);
}

#undef WB_CW
#undef WB_THREADS
#undef WB_ASZ
#undef WB_BSZ
#undef WB_STAGE
#undef WG_MMA
#undef WG_FENCE
#undef WG_WAIT0
#undef WG_WAIT1
#undef WG_TAG
#undef WG_BM
#undef WG_BN
#undef WG_BK
#undef WG_STAGES
