/* matmul_wg_end.h: the end of one configuration of a wgmma kernel header (matmul_wg.h,
 * matmul_wgb.h): undefines the includer's configuration and the names the headers derive from it. */
#undef WG_THREADS
#undef WG_SW
#undef WG_CH
#undef WG_ASZ
#undef WG_STAGE
#undef WG_NC
#undef WG_TAG
#undef WG_BM
#undef WG_BN
#undef WG_BK
#undef WG_STAGES
