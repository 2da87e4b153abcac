/* matmul_tc4.h: the four operand layouts of one tile configuration (TC_TAG, TC_BM, ... set by the
 * includer, matmul_tc.cl): tl_gemm_tc_<a><b>_<tag>_f32, a = n (A read along k) or t (along m),
 * b = n (B read along n) or t (along k); x @ w.T is nt, its gradients nn and tn. */
#ifndef TC_SWZ
#define TC_SWZ 0                    /* matmul_tc.h: swizzled unpadded tiles (a build option for sweeps) */
#endif
#ifndef TC_DBUF
#define TC_DBUF 0                   /* matmul_tc.h: double-buffered fragments (a build option for sweeps) */
#endif
#define TC_KNAME_(ab, tag) tl_gemm_tc_##ab##_##tag##_f32
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
