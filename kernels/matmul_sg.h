/* matmul_sg.h: one tile configuration of kernels/matmul_sg.cl (whose banner describes the design): four
 * kernels tl_gemm_sg_{nn,nt,tn,tt}_<SG_TAG>_f32 over SG_BM x SG_BN x SG_BK tiles, SG_BM * SG_BN / (SG_TM *
 * SG_TN) work-items of SG_TM x SG_TN outputs each (8x8 unless the tag sets them). Included once per tag;
 * the tag's macros are undefined at the end. */

#ifndef SG_TM
#define SG_TM 8                                   /* a work-item's rows of C: 8 or 16 */
#endif
#ifndef SG_TN
#define SG_TN 8                                   /* ... and columns */
#endif
#ifndef SG_ST
#define SG_ST 2                                   /* local stages: 2 (double buffering), 3 to 5 (multistage) */
#endif
#define SG_NT (SG_BM * SG_BN / (SG_TM * SG_TN))
#if (SG_TM != 8 && SG_TM != 16) || (SG_TN != 8 && SG_TN != 16) || SG_BM % (SG_TM * 32 / SG_LN) != 0 ||       \
    SG_BN % (SG_TN * SG_LN) != 0 || (SG_BK != 8 && SG_BK != 16) || (SG_BM * SG_BK / 4) % SG_NT != 0 ||        \
    (SG_BN * SG_BK / 4) % SG_NT != 0 || SG_BM * SG_BK / 4 / SG_NT > 8 || SG_BN * SG_BK / 4 / SG_NT > 8 ||   \
    (SG_BM * SG_BK / 16) % 32 != 0 || (SG_BN * SG_BK / 16) % 32 != 0 || SG_BM * SG_BK / 16 > 2 * SG_NT ||  \
    SG_BN * SG_BK / 16 > 2 * SG_NT || SG_ST < 2 || SG_ST > 5 ||                                            \
    (SG_ST > 2 && (SG_BK != 8 || SG_BM * SG_BK / SG_NT > 8 || SG_BN * SG_BK / SG_NT > 8 || SG_TM * SG_TN == 64))
#error "matmul_sg.h: TM, TN 8 or 16, whole warps, BK 8 or 16, float4 loads <= 8 a work-item, ST 2-5 (> 2: BK 8, not 8x8)"
#endif
/* As and Bs: SG_ST k-tiles each, rows padded by SG_PAD floats; float4 for alignment. */
#define SG_KERNEL(lay, ak, bn)                                                                            \
    __attribute__((reqd_work_group_size(SG_NT, 1, 1))) kernel void                                        \
    SG_CAT(SG_CAT(SG_CAT(tl_gemm_sg_, lay), SG_CAT(_, SG_TAG)), _f32)(MM_ARGS)                             \
    {                                                                                                     \
        local float4 As[SG_ST * SG_BK * (SG_BM + SG_PAD) / 4], Bs[SG_ST * SG_BK * (SG_BN + SG_PAD) / 4]; \
        SG_ENTRY();                                                                                       \
        SG_BATCH();                                                                                       \
        SG_BODY(ak, bn);                                                                                  \
    }
/* The production body (8x8, no knobs) as it was timed, or the generalised one (SG_GEN=1 forces it). */
#if SG_TM == 8 && SG_TN == 8 && SG_ST == 2 && !SG_RDB && !SG_T4 && !SG_GEN
#define SG_BODY(ak, bn)                                                                                   \
    sg_gemm(M, N, K, A, (ak) ? sAm : sAk, B, (bn) ? sBk : sBn, C, calign, (local float *)As, (local float *)Bs, \
            SG_BM, SG_BN, SG_BK, ak, bn)
#else
#define SG_BODY(ak, bn)                                                                                   \
    sg_gemm_x(M, N, K, A, (ak) ? sAm : sAk, B, (bn) ? sBk : sBn, C, calign, (local float *)As,               \
              (local float *)Bs, SG_BM, SG_BN, SG_BK, SG_TM, SG_TN, SG_ST, ak, bn)
#endif

SG_KERNEL(nn, 1, 1)
SG_KERNEL(nt, 1, 0)
SG_KERNEL(tn, 0, 1)
SG_KERNEL(tt, 0, 0)

#undef SG_KERNEL
#undef SG_BODY
#undef SG_NT
#undef SG_TAG
#undef SG_BM
#undef SG_BN
#undef SG_BK
#undef SG_TM
#undef SG_TN
#undef SG_ST
