/* gemm_params.h: GEMM tile parameters per device: a small built-in table keyed by device type/vendor,
 * TLGPU_GEMM_PARAMS ("MWG=64,NWG=64,...", any subset) applied on top, checked against the divisibility
 * rules kernels/matmul.cl relies on. Pure C: programs.c puts them in the matmul/llm/quant build options
 * (and so in the binary cache key); the ops read them to size their launches. */
#ifndef TL_GEMM_PARAMS_H
#define TL_GEMM_PARAMS_H
#include "cl_runtime.h"

enum { TL_GP_MWG, TL_GP_NWG, TL_GP_KWG, TL_GP_MDIMC, TL_GP_NDIMC, TL_GP_VW, TL_GP_CMR, TL_GP_CVW, TL_GP_CNV,
       TL_GP_CNR, TL_GP_DIRECT, TL_GP_MVEC, TL_GP_PREFETCH, TL_GP_DBUF, TL_GP_INTERIOR, TL_GP_COUNT };
typedef struct { int v[TL_GP_COUNT]; } tl_gemm_params;

/* The process's parameters (computed once). Returns NULL, or why TLGPU_GEMM_PARAMS was refused (the
 * table entry is used then, and the ops raise ValueError with this text). */
const char *tl_gemm_params_get(const tl_device_info *d, tl_gemm_params *out);
void        tl_gemm_params_options(const tl_device_info *d, char *out, size_t cap);   /* " -DMWG=.. ..." */
extern const char *const tl_gemm_param_names[TL_GP_COUNT];
#endif
