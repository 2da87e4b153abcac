/* matmul_wgb.h: one kernel of kernels/matmul_wgb.cl, tl_gemm_wgb_<tag>_<dt> (or, with WB_PAIR 1,
 * tl_gemm_wgc_<tag>_<dt>; dt f32, or bf16 / f16 in the WG_HALF builds, C then in that dtype), for the configuration the includer sets (WG_TAG, WG_BM = 64 x consumer warpgroups,
 * WG_BN = the wgmma width N, WG_BK, WG_STAGES >= 2, optional WB_PAIR).
 * C[b] = A[b] @ B[b]^T from the packed A [M, K] (PA + b * sPA) and B [N, K] (PB + b * sPB), KT k-tiles;
 * C contiguous [M, N] a batch. Launch: (tiles x WB_THREADS, batches x S), work-groups of WB_THREADS. With
 * S = ceil(KT / KS) > 1 (split-K), work-group (., b * S + s) takes k-tiles s KS .. s KS + KS - 1 and writes
 * the partial C[s][b] ([S, batches, M, N]), which gemm_splitk's reduction sums.
 * WB_PAIR: work-groups run as clusters of two (.reqnctapercluster, added by the PTX patch) on tile rows 2p
 * and 2p + 1 of one tile column (the packed A padded to an even number of tile rows): each loads its own A
 * and multicasts its half of the shared B tile into both, so the pair reads 3/4 of the bytes from L2; each
 * "full" barrier expects its A and both halves, and a stage is refilled once the consumers of both (one
 * arrival a warp on each work-group's "empty") are done with it. Cluster barriers after the barriers'
 * initialisation and before exit (no remote arrival may land in a finished work-group). */
#ifndef WB_PAIR
#define WB_PAIR 0
#endif
#ifndef WB_DEPTH
#define WB_DEPTH 1                          /* wgmma groups left queued at each k-tile's wait (1 or 2; a knob) */
#endif
#if WB_DEPTH >= WG_STAGES
#error "matmul_wgb: WB_DEPTH must be below the stage count"
#endif
#define WB_CW (WG_BM / 64 * 128)            /* consumer work-items; the producer warp follows them */
#define WB_THREADS (WB_CW + 32)
#define WB_ASZ (WG_BM * WG_BK)              /* floats of a stage's A tile, then its B tile */
#define WB_BSZ (WG_BN * WG_BK)
#define WB_STAGE (WB_ASZ + WB_BSZ)
#if WG_STAGES * (WB_STAGE * 4 + 16) > 49152 || WG_STAGES < 2
#error "matmul_wgb: 2 stages or more (and their mbarriers) within the 48 KiB of local memory a work-group gets"
#endif

#if WB_PAIR
#define WB_NAME WG_CAT(WG_CAT(tl_gemm_wgc_, WG_TAG), WG_DT)
#define WB_EMPTY (2 * WB_CW / 32)           /* arrivals that free a stage: a warp of each work-group */
#else
#define WB_NAME WG_CAT(WG_CAT(tl_gemm_wgb_, WG_TAG), WG_DT)
#define WB_EMPTY WB_CW                      /* every consumer work-item */
#endif

kernel __attribute__((reqd_work_group_size(WB_THREADS, 1, 1))) void
WB_NAME(int M, int N, int KT, int KS, global const float *PA, int sPA, global const float *PB, int sPB,
        global WG_CT *C WB_EPI_ARGS)
{
    local float S[WG_STAGES * WB_STAGE] __attribute__((aligned(1024)));
    const int nsl = (KT + KS - 1) / KS, sl = get_group_id(1) % nsl, b = get_group_id(1) / nsl;
    const int tid = get_local_id(0), kt0 = sl * KS;
    const int tm = (M + WG_BM - 1) / WG_BM, tn = (N + WG_BN - 1) / WG_BN;
    int pm, pn;
#if WB_PAIR
    const uint rank = get_group_id(0) & 1;              /* in the cluster of two along dim 0 */
#if !TC_EMULATE
    TC_ASM volatile("//TLPTX_ENTRY .reqnctapercluster 2, 1, 1\n" ::: "memory");   /* moved to the entry by the patch */
#endif
    tc_tile_order(get_group_id(0) / 2, (tm + 1) / 2, tn, &pm, &pn);
    pm = 2 * pm + (int)rank;
#else
    tc_tile_order(get_group_id(0), tm, tn, &pm, &pn);
#endif
    const int m0 = pm * WG_BM, n0 = pn * WG_BN;
    global const float *pa = PA + (size_t)b * sPA + ((size_t)pm * KT + kt0) * WB_ASZ;   /* this tile row's */
    global const float *pb = PB + (size_t)b * sPB + ((size_t)pn * KT + kt0) * WB_BSZ;   /* k-tiles, slice sl's */
    C += ((size_t)sl * (get_num_groups(1) / nsl) + b) * M * N;
#if !WG_HALF
    resid += offR + b * M * N;                          /* the epilogue's residual (epi 0 when split) */
#endif
    KT = min(KS, KT - kt0);                             /* from here: this slice's k-tiles */
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
    if (tid == 0) {
        for (int s = 0; s < WG_STAGES; s++) {
            wg_bar_init(tc_saddr((local float *)&bars[s]), 1);
            wg_bar_init(tc_saddr((local float *)&bars[WG_STAGES + s]), WB_EMPTY);
        }
        if (WB_PAIR) wb_init_fence();                   /* the barriers, visible to the other work-group */
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (WB_PAIR) wb_cluster_sync();                     /* ... which has initialised its own */
    if (tid >= WB_CW) {                                 /* the producer warp: its first work-item copies */
        if (tid == WB_CW)
            for (int kt = 0; kt < KT; kt++) {
                const int s = kt % WG_STAGES;
                const uint full = tc_saddr((local float *)&bars[s]);
                if (kt >= WG_STAGES) wg_bar_wait(tc_saddr((local float *)&bars[WG_STAGES + s]), (kt / WG_STAGES - 1) & 1);
                wb_expect(full, WB_STAGE * 4);
                wb_bulk(tc_saddr(S + s * WB_STAGE), pa + (size_t)kt * WB_ASZ, WB_ASZ * 4, full);
#if WB_PAIR                                             /* this work-group's half of B, into both */
                wb_bulk_pair(tc_saddr(S + s * WB_STAGE + WB_ASZ + rank * (WB_BSZ / 2)),
                             pb + (size_t)kt * WB_BSZ + rank * (WB_BSZ / 2), WB_BSZ * 2, full);
#else
                wb_bulk(tc_saddr(S + s * WB_STAGE + WB_ASZ), pb + (size_t)kt * WB_BSZ, WB_BSZ * 4, full);
#endif
            }
        if (WB_PAIR) wb_cluster_sync();
        return;
    }
    const int grp = tid / 128;
    for (int kt = 0; kt < KT; kt++) {
        const int s = kt % WG_STAGES;
        wg_bar_wait(tc_saddr((local float *)&bars[s]), (kt / WG_STAGES) & 1);   /* the stage's bytes landed */
        const ulong da = wg_desc(S + s * WB_STAGE + grp * 64 * WG_BK, 4 * WG_BK), db = wg_desc(S + s * WB_STAGE + WB_ASZ, 4 * WG_BK);
        WG_GROUP_DEPTH(d, da, db, WB_DEPTH);    /* ... and the group of kt - WB_DEPTH is done */
        const uint empty = tc_saddr((local float *)&bars[WG_STAGES + (kt + WG_STAGES - WB_DEPTH) % WG_STAGES]);
#if WB_PAIR                                             /* lane r frees the stage in work-group r */
        if (kt >= WB_DEPTH) wb_arrive_pair(empty);
#else
        if (kt >= WB_DEPTH) wg_bar_arrive(empty);
#endif
    }
    WG_WAIT0(d);
#endif
#if WG_HALF
    if (tid < WB_CW) WG_STORE(d, m0, n0, tid);
#else
    if (tid < WB_CW && epi) WG_STORE_EPI(d, m0, n0, tid);   /* the store epilogue (mm_epi.h) */
    else if (tid < WB_CW) WG_STORE(d, m0, n0, tid);
#endif
#if WB_PAIR && !TC_EMULATE
    wb_cluster_sync();                                  /* no remote arrival may land after this one exits */
#endif
}

#undef WB_NAME
#undef WB_EMPTY
#undef WB_PAIR
#undef WB_CW
#undef WB_THREADS
#undef WB_ASZ
#undef WB_BSZ
#undef WB_STAGE
#include "matmul_wg_end.h"
