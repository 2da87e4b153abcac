/* matmul_wgr.h: one kernel of kernels/matmul_wg.cl with A from registers, tl_gemm_wg_nt_<tag>_f32 (tags
 * ending in "r"): only B goes through local memory (WG_STAGES stages of WG_BN x WG_BK, swizzled as in
 * matmul_wg.h), so a 48 KiB work-group holds deeper pipelines and taller tiles, and the tensor cores read
 * half the local-memory bytes. Each warp loads its own 16 rows of A straight from global memory into the
 * m16n8k8 TF32 fragment layout (lane (g, t): rows g and g + 8, columns t and t + 4 of each k8 step), into
 * a ring of WG_R register sets: tile kt + WG_R - 1 is loaded once tile kt - 1's wgmma group is done. */
#define WG_THREADS (WG_BM / 64 * 128)
#define WG_SW (WG_BK * 4)
#define WG_CH (WG_BK / 4)
#define WG_STAGE (WG_BN * WG_BK)
#define WG_NC ((WG_BN * WG_CH + WG_THREADS - 1) / WG_THREADS)
#define WG_KS (WG_BK / 8)
#define WG_R 3
#if WG_STAGES * WG_STAGE * 4 > 49152 || WG_STAGES < 3
#error "matmul_wg: 3 stages or more, within the 48 KiB of local memory a work-group gets"
#endif
#define WG_MMA WG_CAT(wg_mma_rs_n, WG_BN)
#define WG_FENCE WG_CAT(wg_fence_n, WG_BN)
#define WG_WAIT0 WG_CAT(wg_wait0_n, WG_BN)
#define WG_WAIT1 WG_CAT(wg_wait1_n, WG_BN)

kernel __attribute__((reqd_work_group_size(WG_THREADS, 1, 1))) void
WG_CAT(WG_CAT(tl_gemm_wg_nt_, WG_TAG), _f32)(MM_ARGS)
{
    local float S[WG_STAGES * WG_STAGE] __attribute__((aligned(1024)));
#if TC_EMULATE
    local uint X[WG_THREADS * 4];
#endif
    const int tid = get_local_id(0), grp = tid / 128, lane = tid % 32;
    const int tm = (M + WG_BM - 1) / WG_BM, tn = (N + WG_BN - 1) / WG_BN;
    int pm, pn;
    tc_tile_order(get_group_id(0), tm, tn, &pm, &pn);
    const int m0 = pm * WG_BM, n0 = pn * WG_BN;
    MM_BATCH();
    (void)sAk;
    (void)sBk;
    global const float *src[WG_NC];
    int dst[WG_NC], kc[WG_NC], vec[WG_NC];
#pragma unroll
    for (int i = 0; i < WG_NC; i++) {
        const int e = tid + i * WG_THREADS, r = e / WG_CH, c = e % WG_CH;
        const int ok = e < WG_BN * WG_CH && r < N - n0;
        src[i] = ok ? B + (n0 + r) * sBn + 4 * c : B;
        dst[i] = r * WG_BK + 4 * (c ^ wg_swz(r, WG_SW));
        kc[i] = ok ? 4 * c : 1 << 30;
        vec[i] = ((ulong)(uintptr_t)src[i] & 15) == 0;
    }
#define WG_COPY(stage, k0)                                                                          \
    for (int i = 0; i < WG_NC; i++)                                                                 \
        if (tid + i * WG_THREADS < WG_BN * WG_CH)                                                   \
            tc_copy4(S + (stage) * WG_STAGE + dst[i], src[i] + (kc[i] < K - (k0) ? (k0) : 0),       \
                     clamp(K - (k0) - kc[i], 0, 4), vec[i])
    const int ra = m0 + grp * 64 + (tid % 128) / 32 * 16 + lane / 4, t4 = lane % 4;
    const int v0 = ra < M, v1 = ra + 8 < M;
    global const float *a0 = A + (v0 ? ra : 0) * sAm + t4, *a1 = A + (v1 ? ra + 8 : 0) * sAm + t4;
    uint af[WG_R][WG_KS][4];
#define WG_ALOAD(set, kt)                                                                           \
    for (int kk = 0; kk < WG_KS; kk++) {                                                            \
        const int k = (kt) * WG_BK + 8 * kk;                                                        \
        af[set][kk][0] = v0 && k + t4 < K ? as_uint(a0[k]) : 0u;                                    \
        af[set][kk][1] = v1 && k + t4 < K ? as_uint(a1[k]) : 0u;                                    \
        af[set][kk][2] = v0 && k + 4 + t4 < K ? as_uint(a0[k + 4]) : 0u;                            \
        af[set][kk][3] = v1 && k + 4 + t4 < K ? as_uint(a1[k + 4]) : 0u;                            \
    }
    const int KT = (K + WG_BK - 1) / WG_BK;
    float d[WG_BN / 2];
    for (int i = 0; i < WG_BN / 2; i++) d[i] = 0.0f;
    for (int s = 0; s < WG_STAGES - 2; s++) {
        if (s < KT) { WG_COPY(s, s * WG_BK); }
        tc_commit();
    }
#pragma unroll
    for (int s = 0; s < WG_R - 1; s++)
        if (s < KT) { WG_ALOAD(s, s); }
#if TC_EMULATE
#define WG_GROUP(set, bs)                                                                           \
    for (int kk = 0; kk < WG_KS; kk++)                                                              \
        wg_mma_rs_emu(d, af[set][kk], bs, WG_BN, WG_BK, WG_SW, kk, X + grp * 512, tid % 128)
#else
#define WG_GROUP(set, bs)                                                                           \
    const ulong db = wg_desc(bs, WG_SW);                                                            \
    WG_FENCE(d);                                                                                    \
    for (int kk = 0; kk < WG_KS; kk++) WG_MMA(d, af[set][kk], db + 2 * kk);                         \
    wg_commit();                                                                                    \
    WG_WAIT1(d)
#endif
    /* one k-tile; `set` is kt % WG_R, a constant in each unrolled copy so the ring stays in registers */
#define WG_STEP(set)                                                                                \
    if (kt0 + (set) < KT) {                                                                         \
        const int kt = kt0 + (set), nk = kt + WG_STAGES - 2;                                        \
        tc_wait(WG_STAGES - 3);                                                                     \
        wg_proxy_fence();                                                                           \
        barrier(CLK_LOCAL_MEM_FENCE);                                                               \
        if (nk < KT) { WG_COPY(nk % WG_STAGES, nk * WG_BK); }                                       \
        tc_commit();                                                                                \
        local const float *bs = S + (kt % WG_STAGES) * WG_STAGE;                                    \
        WG_GROUP(set, bs);                                                                          \
        if (kt + WG_R - 1 < KT) { WG_ALOAD(((set) + WG_R - 1) % WG_R, kt + WG_R - 1); }             \
    }
    for (int kt0 = 0; kt0 < KT; kt0 += WG_R) {
        WG_STEP(0)
        WG_STEP(1)
        WG_STEP(2)
    }
#undef WG_STEP
#undef WG_GROUP
#undef WG_ALOAD
#undef WG_COPY
    WG_WAIT0(d);
    const int r = ra;
#pragma unroll
    for (int j = 0; j < WG_BN / 8; j++) {
        const int c = n0 + 8 * j + 2 * t4;
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
#undef WG_STAGE
#undef WG_NC
#undef WG_KS
#undef WG_R
#undef WG_MMA
#undef WG_FENCE
#undef WG_WAIT0
#undef WG_WAIT1
#undef WG_TAG
#undef WG_BM
#undef WG_BN
#undef WG_BK
#undef WG_STAGES
