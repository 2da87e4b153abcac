/* gemm_params.h: GEMM tile parameters per device: a small built-in table keyed by device type/vendor,
 * TLGPU_GEMM_PARAMS ("MWG=64,NWG=64,...", any subset) applied on top, checked against the divisibility
 * rules kernels/matmul.cl relies on. Pure C: programs.c puts them in the matmul/llm/quant build options
 * (and so in the binary cache key); the ops read them to size their launches.
 * Tiers: three parameter sets per device for products of decreasing size (big tiles starve a GPU on small
 * products), each built as its own program from matmul.cl: "matmul" (tier 0, TLGPU_GEMM_PARAMS),
 * "matmul_mid" (TLGPU_GEMM_PARAMS_MID) and "matmul_small" (TLGPU_GEMM_PARAMS_SMALL). DIRECT is read from
 * tier 0 only (CPU devices run the direct kernels, which have no tiles). */
#ifndef TL_GEMM_PARAMS_H
#define TL_GEMM_PARAMS_H
#include "cl_runtime.h"

enum { TL_GP_MWG, TL_GP_NWG, TL_GP_KWG, TL_GP_MDIMC, TL_GP_NDIMC, TL_GP_VW, TL_GP_CMR, TL_GP_CVW, TL_GP_CNV,
       TL_GP_CNR, TL_GP_DIRECT, TL_GP_MVEC, TL_GP_PREFETCH, TL_GP_DBUF, TL_GP_INTERIOR, TL_GP_COUNT };
typedef struct { int v[TL_GP_COUNT]; } tl_gemm_params;
enum { TL_GEMM_TIERS = 3 };

/* The process's parameters of a tier (computed once). Returns NULL, or why the tier's environment
 * variable was refused, as "NAME='value': why" (the table entry is used then, and the ops raise ValueError
 * with this text). */
const char *tl_gemm_params_get(const tl_device_info *d, int tier, tl_gemm_params *out);
void        tl_gemm_params_options(const tl_device_info *d, int tier, char *out, size_t cap);   /* " -DMWG=.." */
int         tl_gemm_family_tier(const char *family);    /* 0-2 for the matmul families, else -1 */
extern const char *const tl_gemm_param_names[TL_GP_COUNT];
extern const char *const tl_gemm_tier_family[TL_GEMM_TIERS];
#endif
