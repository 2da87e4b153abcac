/* gemm_params.c: the GEMM tile-parameter table and its environment overrides (see gemm_params.h).
 * Built-in table, three tiers each (big, mid, small tiles). NVIDIA: 256 work-items of 8x8 outputs on
 * 128x128 and 128x64 tiles, 128 work-items of 4x4 on 64x32, all with float2/float4 vectors along n, float4
 * reads of the A tile (MVEC), register prefetch, two local tiles (DBUF) and unchecked loads inside the
 * matrices (INTERIOR): the best of H200 sweeps (benchmarks/NOTES.md, benchmarks/tune_gemm.py). Other GPUs:
 * 64x64, 32x32 and 16x16 tiles of 4x4 (or 2x2) outputs. CPUs: the direct kernels (one tier), vectors as wide as
 * the ISA (PoCL puts the ISA in the device name), 4 rows x 32 columns (nn) or 4 x 4 dots (nt). Computed
 * once per process under a mutex. */
#include "gemm_params.h"
#include "ops_common.h"
#include "programs.h"
#include "settings.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const tl_gemm_param_names[TL_GP_COUNT] = {"MWG", "NWG", "KWG", "MDIMC", "NDIMC", "VW", "CMR", "CVW",
                                                      "CNV", "CNR", "DIRECT", "MVEC", "PREFETCH", "DBUF",
                                                      "INTERIOR"};
const char *const tl_gemm_tier_family[TL_GEMM_TIERS] = {"matmul", "matmul_mid", "matmul_small"};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static tl_gemm_params chosen[TL_GEMM_TIERS];
static int ready;
static char refused[TL_GEMM_TIERS][500];

static int
pow2(int v)
{
    return v > 0 && (v & (v - 1)) == 0;
}

/* The divisibility rules the kernels rely on: a message for the first one broken, else NULL. */
static const char *
invalid(const tl_gemm_params *q)
{
    const int *v = q->v;
    for (int i = 0; i < TL_GP_DIRECT; i++)
        if (v[i] <= 0) return "every value must be a positive integer";
    if (!pow2(v[TL_GP_VW]) || v[TL_GP_VW] > 16) return "VW must be 1, 2, 4, 8 or 16";
    if (v[TL_GP_CVW] != 4 && v[TL_GP_CVW] != 8 && v[TL_GP_CVW] != 16) return "CVW must be 4, 8 or 16";
    if (v[TL_GP_MWG] % v[TL_GP_MDIMC] != 0) return "MWG must be a multiple of MDIMC";
    if (v[TL_GP_NWG] % (v[TL_GP_NDIMC] * v[TL_GP_VW]) != 0) return "NWG must be a multiple of NDIMC*VW";
    if (v[TL_GP_MDIMC] * v[TL_GP_NDIMC] > 1024) return "MDIMC*NDIMC must be at most 1024";
    for (int i = TL_GP_MVEC; i < TL_GP_COUNT; i++)
        if (v[i] > 1) return "MVEC, PREFETCH, DBUF and INTERIOR are 0 or 1";
    return NULL;
}

static void
table(const tl_device_info *d, int tier, tl_gemm_params *q)
{
    /*                                           MWG  NWG KWG MDIMC NDIMC VW CMR CVW CNV CNR DIR MVEC PF DBUF INT */
    static const tl_gemm_params gpu[TL_GEMM_TIERS] = {{{64, 64, 16, 16, 16, 4, 4, 16, 2, 4, 0, 0, 0, 0, 0}},
                                                      {{32, 32, 16, 8, 8, 4, 4, 16, 2, 4, 0, 0, 0, 0, 0}},
                                                      {{16, 16, 16, 8, 8, 2, 4, 16, 2, 4, 0, 0, 0, 0, 0}}};
    static const tl_gemm_params nvidia[TL_GEMM_TIERS] = {{{128, 128, 16, 16, 16, 2, 4, 16, 2, 4, 0, 1, 1, 1, 1}},
                                                         {{128, 64, 16, 16, 16, 2, 4, 16, 2, 4, 0, 1, 1, 1, 1}},
                                                         {{64, 32, 16, 16, 8, 4, 4, 16, 2, 4, 0, 1, 1, 1, 1}}};
    static const tl_gemm_params cpu = {{64, 64, 16, 8, 8, 4, 4, 16, 2, 4, 1, 0, 0, 0, 0}};
    if (d->type & CL_DEVICE_TYPE_CPU) {
        *q = cpu;
        if (strstr(d->name, "avx512") == NULL) q->v[TL_GP_CVW] = 8;
    } else if (strstr(d->vendor, "NVIDIA") != NULL || strstr(d->platform, "NVIDIA") != NULL) {
        *q = nvidia[tier];
    } else {
        *q = gpu[tier];
    }
}

/* Applies "KEY=value,..." to q; a message on a bad key or value. */
static const char *
apply(const char *env, tl_gemm_params *q, char *msg, size_t cap)
{
    char buf[256], *save = NULL;
    snprintf(buf, sizeof buf, "%s", env);
    for (char *tok = strtok_r(buf, ", ", &save); tok != NULL; tok = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(tok, '='), *end = NULL;
        int i = 0;
        if (eq != NULL) *eq = '\0';
        while (i < TL_GP_COUNT && strcmp(tl_gemm_param_names[i], tok) != 0) i++;
        long val = eq != NULL ? strtol(eq + 1, &end, 10) : 0;
        if (i == TL_GP_COUNT || eq == NULL || *end != '\0' || val < 0 || val > 4096) {
            snprintf(msg, cap, "unknown key or bad value in '%s'", tok);
            return msg;
        }
        q->v[i] = (int)val;
    }
    return invalid(q);
}

const char *
tl_gemm_params_get(const tl_device_info *d, int tier, tl_gemm_params *out)
{
    pthread_mutex_lock(&lock);
    for (int t = 0; !ready && t < TL_GEMM_TIERS; t++) {
        const tl_setting_id id = (tl_setting_id)(TL_SET_GEMM_PARAMS + t);
        const char *env = tl_setting_str(id), *why = NULL;
        tl_gemm_params q;
        table(d, t, &q);
        chosen[t] = q;
        if (env != NULL && *env != '\0' && (why = apply(env, &q, refused[t], sizeof refused[t])) == NULL)
            chosen[t] = q;
        if (why != NULL) {                                /* "NAME='value': why", for the caller's error */
            char msg[200];
            snprintf(msg, sizeof msg, "%.190s", why);
            snprintf(refused[t], sizeof refused[t], "%s='%.200s': %.190s", tl_setting_info(id)->name, env, msg);
        }
    }
    ready = 1;
    *out = chosen[tier];
    pthread_mutex_unlock(&lock);
    return refused[tier][0] ? refused[tier] : NULL;
}

void
tl_gemm_params_options(const tl_device_info *d, int tier, char *out, size_t cap)
{
    tl_gemm_params q;
    size_t k = 0;
    tl_gemm_params_get(d, tier, &q);
    out[0] = '\0';
    for (int i = 0; i < TL_GP_COUNT && k < cap; i++)         /* DIRECT becomes GEMM_DIRECT in the kernels */
        k += (size_t)snprintf(out + k, cap - k, " -D%s%s=%d", i == TL_GP_DIRECT ? "GEMM_" : "",
                              tl_gemm_param_names[i], q.v[i]);
}

void
tl_gemm_program_options(const tl_runtime *rt, int tier, const char *user, char *out, size_t cap)
{
    (void)user;
    tl_gemm_params_options(&rt->info, tier, out, cap);
}

tl_status
tl_gemm_params_register(tl_err *err)
{
    static tl_program_rule tiers[TL_GEMM_TIERS];      /* one source, matmul.cl, three option sets */
    tl_status st = TL_OK;
    for (int t = 0; t < TL_GEMM_TIERS && st == TL_OK; t++) {
        tiers[t] = (tl_program_rule){tl_gemm_tier_family[t], "matmul", tl_gemm_program_options, t};
        st = tl_program_register(&tiers[t], err);
    }
    return st;
}

int
tl_mm_has_epi(cl_kernel k)
{
    cl_uint nargs = 0;
    return clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL) == CL_SUCCESS &&
           nargs >= TL_MM_EPI_ARG + 5;
}

int
tl_mm_epi_set(cl_kernel k, cl_mem any, cl_mem bias, int epi, float alpha, cl_mem res, int off_res)
{
    const cl_mem b = bias != NULL ? bias : any, r = res != NULL ? res : any;
    const size_t I = sizeof(int), Mm = sizeof(cl_mem);
    return tl_set_args(k, TL_MM_EPI_ARG, 5, (size_t[]){Mm, I, sizeof alpha, Mm, I},
                       (const void *[]){&b, &epi, &alpha, &r, &off_res});
}
