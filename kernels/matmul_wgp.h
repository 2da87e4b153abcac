/* matmul_wgp.h: a sweep-only variant of matmul_wg.h's kernel with the copies and the MMAs in different warps
 * (tags ending in "p"), for the next H100 sweep: WG_BM / 64 consumer warpgroups (the MMAs and the store, as in
 * matmul_wg.h) and WG_PW producer warps after them (the cp.async copies of every stage). No barrier per
 * k-tile: two mbarriers a stage hand it over. "full" completes when every producer work-item's copies into
 * the stage have landed (cp.async.mbarrier.arrive.noinc, WG_PW * 32 arrivals); "empty" when every consumer
 * work-item has waited for its wgmma group on the stage (WG_BM * 2 arrivals). Use n of stage s (tile
 * kt = n * WG_STAGES + s) waits for phase parity n & 1 of "full", and the producer, before refilling it,
 * for parity (n - 1) & 1 of "empty". Consumers fence the landed copies into the async proxy after the wait.
 * Never built by the emulation (PoCL runs a work-group's work-items in turn, so a spin wait cannot end). */
#define WG_CW (WG_BM / 64 * 128)            /* consumer work-items */
#define WG_THREADS (WG_CW + WG_PW * 32)
#define WG_SW (WG_BK * 4)
#define WG_CH (WG_BK / 4)
#define WG_ASZ (WG_BM * WG_BK)
#define WG_STAGE (WG_ASZ + WG_BN * WG_BK)
#define WG_NC (((WG_BM + WG_BN) * WG_CH + WG_PW * 32 - 1) / (WG_PW * 32))   /* chunks a producer copies */
#if WG_STAGES * (WG_STAGE * 4 + 16) > 49152 || WG_STAGES < 2
#error "matmul_wgp: 2 stages or more (and their mbarriers) within the 48 KiB of local memory a work-group gets"
#endif

kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void
WG_CAT(WG_CAT(tl_gemm_wg_nt_, WG_TAG), _f32)(MM_ARGS)
{
    local float S[WG_STAGES * WG_STAGE] __attribute__((aligned(1024)));
    local ulong bars[2 * WG_STAGES];                    /* full[s], then empty[s] */
    const int tid = get_local_id(0);
    const int tm = (M + WG_BM - 1) / WG_BM, tn = (N + WG_BN - 1) / WG_BN;
    int pm, pn;
    tc_tile_order(get_group_id(0), tm, tn, &pm, &pn);
    const int m0 = pm * WG_BM, n0 = pn * WG_BN, KT = (K + WG_BK - 1) / WG_BK;
    MM_BATCH();
    (void)sAk;
    (void)sBk;
    if (tid == 0)
        for (int s = 0; s < WG_STAGES; s++) {
            wg_bar_init(tc_saddr((local float *)&bars[s]), WG_PW * 32);
            wg_bar_init(tc_saddr((local float *)&bars[WG_STAGES + s]), WG_CW);
        }
    barrier(CLK_LOCAL_MEM_FENCE);
    if (tid >= WG_CW) {                                 /* producer warps */
        const int p = tid - WG_CW;
        for (int kt = 0; kt < KT; kt++) {
            const int s = kt % WG_STAGES, k0 = kt * WG_BK;
            if (kt >= WG_STAGES) wg_bar_wait(tc_saddr((local float *)&bars[WG_STAGES + s]), (kt / WG_STAGES - 1) & 1);
            for (int i = 0; i < WG_NC; i++) {
                const int e = p + i * WG_PW * 32, r = e / WG_CH, c = e % WG_CH, isb = r >= WG_BM;
                const int row = isb ? r - WG_BM : r, lim = isb ? N - n0 : M - m0, k = k0 + 4 * c;
                if (e >= (WG_BM + WG_BN) * WG_CH) break;
                const int nv = row < lim ? clamp(K - k, 0, 4) : 0;
                global const float *src = nv > 0 ? (isb ? B + (n0 + row) * sBn : A + (m0 + row) * sAm) + k : A;
                tc_copy4(S + s * WG_STAGE + r * WG_BK + 4 * (c ^ wg_swz(row, WG_SW)), src, nv,
                         ((ulong)(uintptr_t)src & 15) == 0);
            }
            wg_bar_arrive_copies(tc_saddr((local float *)&bars[s]));
        }
        tc_wait_all();
        return;
    }
    const int grp = tid / 128;
    float d[WG_BN / 2];
    for (int i = 0; i < WG_BN / 2; i++) d[i] = 0.0f;
    for (int kt = 0; kt < KT; kt++) {
        const int s = kt % WG_STAGES;
        wg_bar_wait(tc_saddr((local float *)&bars[s]), (kt / WG_STAGES) & 1);
        wg_proxy_fence();
        local const float *as = S + s * WG_STAGE + grp * 64 * WG_BK, *bs = S + s * WG_STAGE + WG_ASZ;
        const ulong da = wg_desc(as, WG_SW), db = wg_desc(bs, WG_SW);
        WG_GROUP(d, da, db);                    /* ... and the group of kt - 1 is done */
        if (kt > 0) wg_bar_arrive(tc_saddr((local float *)&bars[WG_STAGES + (kt - 1) % WG_STAGES]));
    }
    WG_WAIT0(d);
    WG_STORE(d, m0, n0, tid);
}

#undef WG_CW
#include "matmul_wg_end.h"
#undef WG_PW
