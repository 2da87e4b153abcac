/* gemm_params.c: the GEMM tile-parameter table and its TLGPU_GEMM_PARAMS override (see gemm_params.h).
 * Built-in table. GPUs: 256 work-items, 8x8 (NVIDIA: 128x128 tiles) or 4x4 outputs each, float4 along n;
 * NVIDIA's 128x128 tile with KWG=16, MVEC=1 and PREFETCH=1 (16 KiB of local memory per k-step; best of an H200 sweep,
 * benchmarks/NOTES.md). CPUs: the direct kernels, vectors as wide as the ISA (PoCL puts the ISA in the
 * device name), 4 rows x 32 columns (nn) or 4 x 4 dots (nt). Computed once per process under a mutex. */
#include "gemm_params.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const tl_gemm_param_names[TL_GP_COUNT] = {"MWG", "NWG", "KWG", "MDIMC", "NDIMC", "VW", "CMR", "CVW",
                                                      "CNV", "CNR", "DIRECT", "MVEC", "PREFETCH", "DBUF",
                                                      "INTERIOR"};
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static tl_gemm_params chosen;
static int ready;
static char refused[200];

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
table(const tl_device_info *d, tl_gemm_params *q)
{
    static const tl_gemm_params gpu = {{64, 64, 16, 16, 16, 4, 4, 16, 2, 4, 0, 0, 0, 0, 0}};
    static const tl_gemm_params nvidia = {{128, 128, 16, 16, 16, 4, 4, 16, 2, 4, 0, 1, 1, 0, 0}};
    static const tl_gemm_params cpu = {{64, 64, 16, 8, 8, 4, 4, 16, 2, 4, 1, 0, 0, 0, 0}};
    if (d->type & CL_DEVICE_TYPE_CPU) {
        *q = cpu;
        if (strstr(d->name, "avx512") == NULL) q->v[TL_GP_CVW] = 8;
    } else if (strstr(d->vendor, "NVIDIA") != NULL || strstr(d->platform, "NVIDIA") != NULL) {
        *q = nvidia;
    } else {
        *q = gpu;
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
tl_gemm_params_get(const tl_device_info *d, tl_gemm_params *out)
{
    pthread_mutex_lock(&lock);
    if (!ready) {
        const char *env = getenv("TLGPU_GEMM_PARAMS"), *why = NULL;
        tl_gemm_params q;
        table(d, &q);
        chosen = q;
        if (env != NULL && *env != '\0' && (why = apply(env, &q, refused, sizeof refused)) == NULL) chosen = q;
        if (why != NULL && why != refused) snprintf(refused, sizeof refused, "%s", why);
        ready = 1;
    }
    *out = chosen;
    pthread_mutex_unlock(&lock);
    return refused[0] ? refused : NULL;
}

void
tl_gemm_params_options(const tl_device_info *d, char *out, size_t cap)
{
    tl_gemm_params q;
    size_t k = 0;
    tl_gemm_params_get(d, &q);
    out[0] = '\0';
    for (int i = 0; i < TL_GP_COUNT && k < cap; i++)         /* DIRECT becomes GEMM_DIRECT in the kernels */
        k += (size_t)snprintf(out + k, cap - k, " -D%s%s=%d", i == TL_GP_DIRECT ? "GEMM_" : "",
                              tl_gemm_param_names[i], q.v[i]);
}
