/* matmul_tc4.h: the four operand layouts of one tile configuration (TC_TAG, TC_BM, ... set by the
 * includer, matmul_tc.cl): tl_gemm_tc_<a><b>_<tag>_<dt> (f32; bf16 / f16 in the TC_HALF builds), a = n (A
 * read along k) or t (along m),
 * b = n (B read along n) or t (along k); x @ w.T is nt, its gradients nn and tn. */
#ifndef TC_SWZ
#define TC_SWZ 0                    /* matmul_tc.h: swizzled unpadded tiles (a build option for sweeps) */
#endif
#ifndef TC_DBUF
#define TC_DBUF 0                   /* matmul_tc.h: double-buffered fragments (a build option for sweeps) */
#endif
#if TC_HALF == 1                    /* matmul_tc_lib.h's 16-bit builds: C in the operands' dtype */
#define TC_KNAME_(ab, tag) tl_gemm_tc_##ab##_##tag##_bf16
#elif TC_HALF == 2
#define TC_KNAME_(ab, tag) tl_gemm_tc_##ab##_##tag##_f16
#else
#define TC_KNAME_(ab, tag) tl_gemm_tc_##ab##_##tag##_f32
#endif
#define TC_KNAME(ab, tag) TC_KNAME_(ab, tag)

#define TC_AK 1
#define TC_BK1 0
#define TC_NAME TC_KNAME(nn, TC_TAG)
#include "matmul_tc.h"
#undef TC_NAME
#undef TC_BK1
#define TC_BK1 1
#define TC_NAME TC_KNAME(nt, TC_TAG)
#include "matmul_tc.h"
#undef TC_NAME
#undef TC_BK1
#undef TC_AK
#define TC_AK 0
#define TC_BK1 0
#define TC_NAME TC_KNAME(tn, TC_TAG)
#include "matmul_tc.h"
#undef TC_NAME
#undef TC_BK1
#define TC_BK1 1
#define TC_NAME TC_KNAME(tt, TC_TAG)
#include "matmul_tc.h"
#undef TC_NAME
#undef TC_BK1
#undef TC_AK

#undef TC_TAG
#undef TC_BM
#undef TC_BN
#undef TC_BK
#undef TC_WM
#undef TC_WN
#undef TC_STAGES
