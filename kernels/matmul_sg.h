/* matmul_sg.h: one tile configuration of kernels/matmul_sg.cl (whose banner describes the design): four
 * kernels tl_gemm_sg_{nn,nt,tn,tt}_<SG_TAG>_f32 over SG_BM x SG_BN x SG_BK tiles, SG_BM * SG_BN / 64
 * work-items of 8x8 outputs each. Included once per tag; the tag's macros are undefined at the end. */

#define SG_NT (SG_BM * SG_BN / 64)
#if SG_BM % (256 / SG_LN) != 0 || SG_BN % (8 * SG_LN) != 0 || (SG_BK != 8 && SG_BK != 16) || \
    (SG_BM * SG_BK / 4) % SG_NT != 0 || (SG_BN * SG_BK / 4) % SG_NT != 0
#error "matmul_sg.h: tiles need whole warps (BM % (256 / SG_LN), BN % (8 SG_LN)), BK 8 or 16, whole float4 loads"
#endif

/* As and Bs: two k-tiles each (double buffering), rows padded by SG_PAD floats; float4 for alignment. */
#define SG_KERNEL(lay, ak, bn)                                                                            \
    __attribute__((reqd_work_group_size(SG_NT, 1, 1))) kernel void                                        \
    SG_CAT(SG_CAT(SG_CAT(tl_gemm_sg_, lay), SG_CAT(_, SG_TAG)), _f32)(MM_ARGS)                             \
    {                                                                                                     \
        local float4 As[2 * SG_BK * (SG_BM + SG_PAD) / 4], Bs[2 * SG_BK * (SG_BN + SG_PAD) / 4];           \
        SG_BATCH();                                                                                       \
        sg_gemm(M, N, K, A, (ak) ? sAm : sAk, B, (bn) ? sBk : sBn, C, calign, (local float *)As,            \
                (local float *)Bs, SG_BM, SG_BN, SG_BK, ak, bn);                                          \
    }

SG_KERNEL(nn, 1, 1)
SG_KERNEL(nt, 1, 0)
SG_KERNEL(tn, 0, 1)
SG_KERNEL(tt, 0, 0)

#undef SG_KERNEL
#undef SG_NT
#undef SG_TAG
#undef SG_BM
#undef SG_BN
#undef SG_BK
