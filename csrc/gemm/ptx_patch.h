/* ptx_patch.h: PTX rewriting for kernels that need sm_90a instructions (wgmma) from NVIDIA's OpenCL
 * compiler, which targets plain sm_90. A kernel writes each such instruction as a PTX comment behind the
 * marker "//TLPTX " (its operands still substituted by the compiler); the patch removes every marker and
 * retargets ".target sm_90" to sm_90a, and the driver builds the result as a program binary. */
#ifndef TL_PTX_PATCH_H
#define TL_PTX_PATCH_H
#include "programs.h"
#include <stddef.h>

#define TL_PTX_MARK "//TLPTX "
/* A kernel-entry directive (e.g. ".reqnctapercluster 2, 1, 1") written in the body: moved before the body. */
#define TL_PTX_ENTRY "//TLPTX_ENTRY "

/* 1 when the text carries either marker (it needs the patch), else 0. */
int tl_ptx_marked(const char *ptx, size_t len);

/* The patched text (malloc'd, NUL-terminated, *out_len without the NUL), or NULL with *why set when the
 * text is not PTX for sm_90 or has neither marker. */
char *tl_ptx_patch(const char *ptx, size_t len, size_t *out_len, const char **why);

/* programs.c's binary hook (installed by the GEMM layer at import): on an NVIDIA platform the driver's
 * binary is PTX; one carrying a marker (the wgmma families' sm_90a instructions, entry directives such as
 * matmul_sg's SG_MAXNREG) is patched; other programs are left as they are. */
extern const tl_program_binary_hook tl_ptx_binary_hook;
#endif
