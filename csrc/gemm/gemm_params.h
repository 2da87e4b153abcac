/* gemm_params.h: GEMM tile parameters per device: a small built-in table keyed by device type/vendor,
 * TLGPU_GEMM_PARAMS ("MWG=64,NWG=64,...", any subset) applied on top, checked against the divisibility
 * rules kernels/matmul.cl relies on. Pure C: the matmul tiers' program rules (registered at import) and
 * llm's and quant's put them in the build options (and so in the binary cache key); the ops read them to
 * size their launches.
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
/* A programs.h rule callback: tier `tier`'s parameters as options (llm and quant register it with tier 0). */
void        tl_gemm_program_options(const tl_runtime *rt, int tier, const char *user, char *out, size_t cap);
tl_status   tl_gemm_params_register(tl_err *err);       /* the three tiers' program rules (at import) */

/* A product kernel's store epilogue (kernels/mm_epi.h): its 5 arguments follow C's offset, argument
 * TL_MM_EPI_ARG on. tl_mm_has_epi: whether kernel k takes them (1, 0); tl_mm_epi_set sets them (epi 0:
 * a plain store; NULL buffers are bound as `any`, never read then; through tl_set_args, so a capture
 * records them): 0, or -1 with a Python error. */
#define TL_MM_EPI_ARG 18
int tl_mm_has_epi(cl_kernel k);
int tl_mm_epi_set(cl_kernel k, cl_mem any, cl_mem bias, int epi, float alpha, cl_mem res, int off_res);
extern const char *const tl_gemm_param_names[TL_GP_COUNT];
extern const char *const tl_gemm_tier_family[TL_GEMM_TIERS];
#endif
