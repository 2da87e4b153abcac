/* matmul_wg.h: one kernel of kernels/matmul_wg.cl, tl_gemm_wg_nt_<tag>_f32, for the configuration the
 * includer sets (WG_TAG, WG_BM = 64 x warpgroups, WG_BN = the wgmma width N, WG_BK, WG_STAGES >= 3). */
#define WG_THREADS (WG_BM / 64 * 128)
#define WG_SW (WG_BK * 4)                   /* bytes of a tile row = the swizzle width (32, 64 or 128) */
#define WG_CH (WG_BK / 4)                   /* 16-byte chunks a row */
#define WG_ASZ (WG_BM * WG_BK)              /* floats of a stage's A tile, then its B tile */
#define WG_STAGE (WG_ASZ + WG_BN * WG_BK)
#define WG_NC (((WG_BM + WG_BN) * WG_CH + WG_THREADS - 1) / WG_THREADS)   /* chunks a work-item copies */
#if WG_STAGES * WG_STAGE * 4 > 49152 || WG_STAGES < 3
#error "matmul_wg: 3 stages or more, within the 48 KiB of local memory a work-group gets"
#endif

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
    /* This work-item's chunks of a stage, the same at every k-tile: chunk e is row e / WG_CH of A's tile
     * then of B's (rows past the matrices read nothing), its 16-byte piece c stored at c ^ wg_swz(row). */
    global const float *src[WG_NC];
    int dst[WG_NC], kc[WG_NC], vec[WG_NC];
#pragma unroll
    for (int i = 0; i < WG_NC; i++) {
        const int e = tid + i * WG_THREADS, r = e / WG_CH, c = e % WG_CH, isb = r >= WG_BM;
        const int row = isb ? r - WG_BM : r, lim = isb ? N - n0 : M - m0;
        const int ok = e < (WG_BM + WG_BN) * WG_CH && row < lim;
        src[i] = ok ? (isb ? B + (n0 + row) * sBn : A + (m0 + row) * sAm) + 4 * c : A;
        dst[i] = r * WG_BK + 4 * (c ^ wg_swz(row, WG_SW));
        kc[i] = ok ? 4 * c : 1 << 30;           /* a chunk past the edge copies nothing, zero-fills */
        vec[i] = ((ulong)(uintptr_t)src[i] & 15) == 0;
    }
#define WG_COPY(stage, k0)                                                                          \
    for (int i = 0; i < WG_NC; i++)                                                                 \
        if (tid + i * WG_THREADS < (WG_BM + WG_BN) * WG_CH)                                         \
            tc_copy4(S + (stage) * WG_STAGE + dst[i], src[i] + (kc[i] < K - (k0) ? (k0) : 0),       \
                     clamp(K - (k0) - kc[i], 0, 4), vec[i])
    const int KT = (K + WG_BK - 1) / WG_BK;
    float d[WG_BN / 2];
    for (int i = 0; i < WG_BN / 2; i++) d[i] = 0.0f;
    for (int s = 0; s < WG_STAGES - 2; s++) {
        if (s < KT) { WG_COPY(s, s * WG_BK); }
        tc_commit();
    }
    /* Tile kt's wgmma group is issued while kt - 1's may still run; a stage is refilled two tiles after
     * its group was issued, once every warpgroup has waited for that group (wait_group 1, then the barrier). */
    for (int kt = 0; kt < KT; kt++) {
        tc_wait(WG_STAGES - 3);                 /* this work-item's copies of tile kt have landed */
#if WG_RNA && !TC_EMULATE
        for (int i = 0; i < WG_NC; i++) {       /* rounded to TF32 in place (cvt.rna), as cuBLAS does */
            local float *q = S + (kt % WG_STAGES) * WG_STAGE + dst[i];
            if (tid + i * WG_THREADS < (WG_BM + WG_BN) * WG_CH)
                *(local float4 *)q = as_float4((uint4)(tc_tf32(q[0]), tc_tf32(q[1]), tc_tf32(q[2]), tc_tf32(q[3])));
        }
#endif
        wg_proxy_fence();                       /* ... and are visible to the tensor cores' (async) proxy */
        barrier(CLK_LOCAL_MEM_FENCE);           /* every copy of kt is in; every group of kt - 2 is done */
        const int nk = kt + WG_STAGES - 2;
        if (nk < KT) { WG_COPY(nk % WG_STAGES, nk * WG_BK); }
        tc_commit();
        local const float *as = S + (kt % WG_STAGES) * WG_STAGE + grp * 64 * WG_BK;
        local const float *bs = S + (kt % WG_STAGES) * WG_STAGE + WG_ASZ;
#if TC_EMULATE
        wg_mma_emu(d, as, bs, WG_BN, WG_BK, WG_SW, tid % 128);
#else
        const ulong da = wg_desc(as, WG_SW), db = wg_desc(bs, WG_SW);
        WG_GROUP(d, da, db);                    /* ... and the group of kt - 1 is done */
#endif
    }
#undef WG_COPY
    WG_WAIT0(d);
    if (epi) WG_STORE_EPI(d, m0, n0, tid);     /* the store epilogue (mm_epi.h) */
    else WG_STORE(d, m0, n0, tid);
}

#include "matmul_wg_end.h"
