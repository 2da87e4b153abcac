/* gemm_sg.c: the choice of the NVIDIA float32 GEMM (see gemm_sg.h, kernels/matmul_sg.cl). The family
 * "matmul_sg" runs only on an NVIDIA GPU platform (the CLBlast-style tiers of matmul.cl stay everywhere
 * else), unless TLGPU_SG says otherwise: "off" keeps the tiers on NVIDIA too; "force" (test builds only,
 * TL_TEST_HOOKS) takes every product it can, on any device, at any size. The configuration table mirrors
 * matmul_sg.cl's: production rows first, biggest tiles first; rows marked sweep exist only in a build with
 * -DSG_SWEEP (TLGPU_BUILD_OPTIONS), for benchmarks/sweep_sgemm.py. A product takes the first production row
 * its layout may take (the multistage 128x128x8t16x8s4 is tn's only) whose grid fills the device
 * (tl_grid_fills: the row's share of the compute units and, for the 128x128 rows, two work-groups an SM,
 * past one wave, waves 80 % full on average (the multistage row 70 %): on the H200 128x128x16t16x8 ran 31
 * TFLOP/s at 1.3 waves where 128x64x16 ran 37, and 44-45 at 0.97 and at 3.9), or that fills it split in K
 * (sg_slices), else the last, unless even that gives fewer work-groups than half the compute units: then
 * the tiers run it (they have smaller tiles and split-K). a @ b (nn) where the rule gives a.T @ b a row of
 * tn's own runs as a.T.T @ b after a transposed copy of A (tl_gemm_sg_copy_a, called by ops_matmul.c).
 * _gemm_sg("tag") forces a row at every size, for sweeps. The kernels' fast path needs 16-byte aligned
 * float4 loads along a unit stride (matmul_sg.cl's banner); other products keep the tiers. */
#include "gemm_sg.h"
#include "cl_runtime.h"
#include "gemm_params.h"
#include "gemm_tc.h"
#include "ops.h"
#include "ptx_patch.h"
#include "settings.h"
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { SG_NN, SG_NT, SG_TN, SG_TT, SG_LAYOUTS };
typedef struct {
    const char *tag;
    int bm, bn, tmn, sweep, fill, slots, pct;    /* tmn: outputs a work-item; fill, slots, pct: tl_grid_fills() */
    int lays;                                     /* the layouts (1 << SG_NN ..) the size rule gives it */
    tl_kernel k[SG_LAYOUTS];
} sg_config;

#define SG_ALL 15
#define SG_ROW(tag, bm, bn, tmn, sweep, fill, slots, pct, lays)                                             \
    {tag, bm, bn, tmn, sweep, fill, slots, pct, lays,                                                        \
     {TL_KERNEL("matmul_sg", "tl_gemm_sg_nn_" tag "_f32"), TL_KERNEL("matmul_sg", "tl_gemm_sg_nt_" tag "_f32"), \
      TL_KERNEL("matmul_sg", "tl_gemm_sg_tn_" tag "_f32"), TL_KERNEL("matmul_sg", "tl_gemm_sg_tt_" tag "_f32")}}
static sg_config configs[] = {
    /* tn (both operands along m or n: 16-byte cp.async only), 4 stages: 47.0 / 47.8 / 48.1 at 2048 / 4096 /
     * 8192 against 46.0 / 46.7 / 46.8 for the next row, and better from 0.48 to 1 wave of 264 and at 1.5 and
     * 2.2 (3072: 42.0 where the rule's pick ran 36.3), but not at 1.3 (512 x 4096 x 11008: 34.1 against 36.2
     * for 128x64x16), hence waves 70 % full; nn, nt, tt lose with it (4-byte copies for the operand along k) */
    SG_ROW("128x128x8t16x8s4", 128, 128, 128, 0, 90, 2, 70, 1 << SG_TN),
    /* H200, TFLOP/s (cuBLAS 48-52): 45-47 at 2048 and 4096, every layout, against 38-41 for the 8x8 rows */
    SG_ROW("128x128x16t16x8", 128, 128, 128, 0, 180, 2, 80, SG_ALL),
    /* 31-39 from 1024 to 512 x 4096 x 11008, where the 128x128 rows ran 15-27, but 32 at 2048 */
    SG_ROW("128x64x16", 128, 64, 64, 0, 90, 0, 0, SG_ALL),
    SG_ROW("128x128x8", 128, 128, 64, 0, 100, 0, 0, SG_ALL),
    SG_ROW("128x64x8", 128, 64, 64, 0, 100, 0, 0, SG_ALL),
    SG_ROW("64x64x8", 64, 64, 64, 0, 100, 0, 0, SG_ALL),
    SG_ROW("128x128x16", 128, 128, 64, 1, 100, 0, 0, SG_ALL),
    SG_ROW("64x128x8", 64, 128, 64, 1, 100, 0, 0, SG_ALL),
    SG_ROW("64x64x16", 64, 64, 64, 1, 100, 0, 0, SG_ALL),
    SG_ROW("128x128x8t16x8", 128, 128, 128, 1, 100, 0, 0, SG_ALL),   /* 16x8 or 8x16 outputs a work-item */
    SG_ROW("128x128x8t8x16", 128, 128, 128, 1, 100, 0, 0, SG_ALL),
    SG_ROW("256x128x8t16x8", 256, 128, 128, 1, 100, 0, 0, SG_ALL),
    SG_ROW("128x256x8t8x16", 128, 256, 128, 1, 100, 0, 0, SG_ALL),
    SG_ROW("256x128x8t16x8s3", 256, 128, 128, 1, 100, 0, 0, SG_ALL),  /* multistage: cp.async, 3 or 4 stages */
    SG_ROW("128x256x8t8x16s3", 128, 256, 128, 1, 100, 0, 0, SG_ALL),
    SG_ROW("128x128x8t16x8s3", 128, 128, 128, 1, 100, 0, 0, SG_ALL),
    SG_ROW("128x128x8t16x8s5", 128, 128, 128, 1, 100, 0, 0, SG_ALL),
};
enum { SG_NCONFIGS = sizeof configs / sizeof configs[0], SG_COPY_MIN = 2048, SG_SPLIT_MIN_K = 512 };
#define SG_SPLIT_MAX_BYTES ((size_t)256 << 20)

static int forced = -1;                           /* _gemm_sg(tag): this row at every size */
static int nvidia = -1;                           /* -1 unknown, else whether the device is an NVIDIA GPU */
static long launches;                             /* products given to matmul_sg (tests, sweeps) */
static long copies;                               /* transposed copies of A (tl_gemm_sg_copy_a) */
static const char *last;                          /* the row of the latest of them */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* TLGPU_SG: 0 "off", 2 "force" (test builds), 1 otherwise (NVIDIA GPUs only). */
static int
sg_mode(void)
{
    const char *s = tl_setting_str(TL_SET_SG);
    if (s != NULL && strcmp(s, "off") == 0) return 0;
#ifdef TL_TEST_HOOKS
    if (s != NULL && strcmp(s, "force") == 0) return 2;
#endif
    return 1;
}

/* 1 when the device is an NVIDIA GPU, 0 when not, -1 with an exception set. */
static int
sg_nvidia(void)
{
    const tl_runtime *rt;
    tl_err err = {0};
    if (nvidia >= 0) return nvidia;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    int nv = strstr(rt->info.platform, "NVIDIA") != NULL && (rt->info.type & CL_DEVICE_TYPE_GPU) != 0;
    pthread_mutex_lock(&lock);
    nvidia = nv;
    pthread_mutex_unlock(&lock);
    return nv;
}

/* The layout index (SG_NN..SG_TT) whose float4 loads fit the operands (aligned, runs inside the matrix),
 * or -1. A along k (sAk == 1) or m (sAm == 1); B along n (sBn == 1) or k (sBk == 1). */
static int
sg_layout(int M, int N, int K, int sAm, int sAk, int sBk, int sBn, int alignA, int alignB)
{
    int a = -1, b = -1;
    if (sAk == 1 && K % 4 == 0 && sAm % 4 == 0) a = 0;
    else if (sAm == 1 && M % 4 == 0 && sAk % 4 == 0) a = 2;
    if (sBn == 1 && N % 4 == 0 && sBk % 4 == 0) b = 0;
    else if (sBk == 1 && K % 4 == 0 && sBn % 4 == 0) b = 1;
    if (a < 0 || b < 0 || alignA % 4 != 0 || alignB % 4 != 0) return -1;
    return a + b;
}

/* Whether row c takes a grid of `groups` work-groups on `units` compute units (the size rule above). */
static int
sg_fits(const sg_config *c, size_t groups, size_t units)
{
    return tl_grid_fills(groups, units, c->fill, c->slots, c->pct);
}

/* The slice count (1: none) that row c (the 128x128 rows: two work-groups an SM) takes for a product of K
 * whose grid alone does not fill its waves: the first of 2, 4, 8 whose grid does (sg_fits), slices of at
 * least SG_SPLIT_MIN_K, partials of at most SG_SPLIT_MAX_BYTES. H200: [512,4096]x[4096,11008]^T 36.8 ->
 * 40.3 TFLOP/s (2 slices), 256x4096x4096^T 34.6 -> 43.1 (4), 3072^3 tt 35.5 -> 40.6 (2), 2560^3 tt 31.6 -> 39.0
 * (4); on grids that fill the device a split lost (4096^3 nt 45.9 -> 44.9 with 2). TLGPU_SG_SPLIT=S forces S
 * slices (1: none) on any row chosen (test builds). */
static int
sg_slices(const sg_config *c, size_t groups, int M, int N, int K, int batch, size_t units)
{
    if (c->slots == 0) return 1;
    for (int s = 2; s <= 8; s *= 2) {
        const size_t part = (size_t)s * (size_t)batch * (size_t)M * (size_t)N * sizeof(float);
        if (K / s < SG_SPLIT_MIN_K || part > SG_SPLIT_MAX_BYTES) break;
        if (sg_fits(c, groups * (size_t)s, units)) return s;
    }
    return 1;
}

static size_t
groups_of(const sg_config *c, int M, int N, int batch)
{
    return (size_t)batch * (size_t)((M + c->bm - 1) / c->bm) * (size_t)((N + c->bn - 1) / c->bn);
}

/* The size rule: the first production row of layout `lay` whose grid fits (sg_fits), or split in K fits
 * (S not NULL: *S slices), else the layout's last row. */
static int
sg_pick(int lay, int M, int N, int K, int batch, size_t units, int *S)
{
    int last = -1;
    if (S != NULL) *S = 1;
    for (int i = 0; i < SG_NCONFIGS; i++) {
        const sg_config *c = &configs[i];
        if (c->sweep || !(c->lays >> lay & 1)) continue;
        const size_t groups = groups_of(c, M, N, batch);
        if (sg_fits(c, groups, units)) return i;
        if (S != NULL && (*S = sg_slices(c, groups, M, N, K, batch, units)) > 1) return i;   /* split in K */
        last = i;
    }
    return last;
}

int
tl_gemm_sg_choose(int M, int N, int K, int batch, int sAm, int sAk, int sBk, int sBn, int alignA, int alignB,
                  tl_kernel **kh, size_t *gws0, size_t *lws0, int *S, int *ks)
{
    const tl_runtime *rt;
    tl_err err = {0};
    const int mode = sg_mode();
    int ok;
    if (mode == 0 || K < 1 || M < 4 || N < 4) return 0;
    if (mode == 1 && (ok = sg_nvidia()) <= 0) return ok;
    const int lay = sg_layout(M, N, K, sAm, sAk, sBk, sBn, alignA, alignB);
    if (lay < 0) return 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    int i = forced >= 0 ? forced : sg_pick(lay, M, N, K, batch, rt->info.compute_units, S);
    if (i < 0 || (mode == 1 && groups_of(&configs[i], M, N, batch) * (size_t)(S != NULL ? *S : 1) <
                                   rt->info.compute_units / 2))
        return 0;                                 /* the tiers' smaller tiles */
    sg_config *c = &configs[i];
    const size_t threads = (size_t)c->bm * (size_t)c->bn / (size_t)c->tmn;
    *kh = &c->k[lay];
    if (tl_kernel_py(*kh) == NULL) return -1;
    if ((*kh)->wg < threads) return 0;            /* too many registers for the work-group: the tiers */
    *lws0 = threads;
    *gws0 = (size_t)((M + c->bm - 1) / c->bm) * (size_t)((N + c->bn - 1) / c->bn) * threads;
#ifdef TL_TEST_HOOKS
    const long split = tl_setting_int(TL_SET_SG_SPLIT);    /* 0: unset */
    if (S != NULL && split >= 1) *S = (int)split;
#endif
    if (S != NULL && *S > 1) {                    /* whole k-tiles of 16 (float4-aligned), the last one shorter */
        *ks = (K / *S + 15) / 16 * 16;
        const size_t n = (size_t)*S * (size_t)batch * (size_t)M * (size_t)N;
        *S = *ks >= K || n > (size_t)INT_MAX ? 1 : (K + *ks - 1) / *ks;
    }
    pthread_mutex_lock(&lock);
    launches++;
    last = c->tag;
    pthread_mutex_unlock(&lock);
    return 1;
}

int
tl_gemm_sg_copy_a(tl_tensor *a, tl_tensor *b, int M, int N, int K, tl_tensor **a2)
{
    const tl_runtime *rt;
    tl_err err = {0};
    const char *env = tl_setting_str(TL_SET_SG_COPY);
    const int mode = sg_mode();
    int ok;
    if (mode == 0 || forced >= 0 || tl_gemm_tc_tf32() || (env != NULL && strcmp(env, "off") == 0)) return 0;
    if (a->ndim != 2 || b->ndim != 2 || a->strides[1] != 1 || b->strides[1] != 1 || N < SG_COPY_MIN || M < 4)
        return 0;                                   /* M >= 4: the copy's strides are (1, M), never nn again */
    if (mode == 1 && (ok = sg_nvidia()) <= 0) return ok;
    if (sg_layout(M, N, K, 1, M, (int)b->strides[0], 1, 0, (int)b->offset) != SG_TN) return 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    const int i = sg_pick(SG_TN, M, N, K, 1, rt->info.compute_units, NULL);
    if (i < 0 || (configs[i].lays & 1 << SG_NN)) return 0;   /* a row a @ b takes as it is */
    if ((*a2 = tl_copy_flipped(a)) == NULL) return -1;       /* [M, K] over a contiguous [K, M] */
    pthread_mutex_lock(&lock);
    copies++;
    pthread_mutex_unlock(&lock);
    return 1;
}

/* _gemm_sg(): {"nvidia": the device runs matmul_sg by default, "mode": TLGPU_SG's reading ("off", "auto",
 * "force"), "configs": [{tag, bm, bn, threads, sweep, layouts: 4 bools, nn nt tn tt, where the size rule
 * may give it}], "forced": tag or None, "launches": products run so far, "last": the latest one's row or
 * None, "copies": transposed copies of A made so far}; _gemm_sg(tag) forces that row (None: the size rule
 * again). */
PyObject *
tl_gemm_sg_info(PyObject *Py_UNUSED(m), PyObject *args)
{
    static const char *const modes[] = {"off", "auto", "force"};
    PyObject *tag = NULL, *tags = NULL;
    if (!PyArg_ParseTuple(args, "|O:_gemm_sg", &tag)) return NULL;
    if (tag == Py_None) {
        forced = -1;
    } else if (tag != NULL) {
        const char *s = PyUnicode_Check(tag) ? PyUnicode_AsUTF8(tag) : NULL;
        int i = 0;
        while (s != NULL && i < SG_NCONFIGS && strcmp(configs[i].tag, s) != 0) i++;
        if (s == NULL || i == SG_NCONFIGS) return PyErr_Format(PyExc_ValueError, "_gemm_sg: unknown configuration");
        forced = i;
    }
    int nv = sg_nvidia();
    if (nv < 0 || (tags = PyList_New(0)) == NULL) return NULL;
    for (int i = 0; i < SG_NCONFIGS; i++) {
        PyObject *s = Py_BuildValue("{s:s,s:i,s:i,s:i,s:O,s:[OOOO]}", "tag", configs[i].tag, "bm", configs[i].bm,
                                    "bn", configs[i].bn, "threads", configs[i].bm * configs[i].bn / configs[i].tmn,
                                    "sweep", configs[i].sweep ? Py_True : Py_False, "layouts",
                                    configs[i].lays & 1 ? Py_True : Py_False, configs[i].lays & 2 ? Py_True : Py_False,
                                    configs[i].lays & 4 ? Py_True : Py_False, configs[i].lays & 8 ? Py_True : Py_False);
        if (s == NULL || PyList_Append(tags, s) < 0) { Py_XDECREF(s); Py_DECREF(tags); return NULL; }
        Py_DECREF(s);
    }
    pthread_mutex_lock(&lock);
    long n = launches, nc = copies;
    const char *row = last;
    pthread_mutex_unlock(&lock);
    return Py_BuildValue("{s:O,s:s,s:N,s:s,s:l,s:s,s:l}", "nvidia", nv ? Py_True : Py_False, "mode",
                         modes[sg_mode()], "configs", tags, "forced", forced >= 0 ? configs[forced].tag : NULL,
                         "launches", n, "last", row, "copies", nc);
}

/* matmul_sg's build options (a programs.h rule): cp.async (-DSG_ASYNC=1, matmul_sg.cl's banner) on NVIDIA
 * compute capability 8 and up, unless the user's own options set SG_ASYNC (a sweep's). */
static void
sg_options(const tl_runtime *rt, int arg, const char *user, char *out, size_t cap)
{
    (void)arg;
    if ((user == NULL || strstr(user, "-DSG_ASYNC") == NULL) && tl_runtime_nv_cc(rt) >= 80)   /* sm_80 asm */
        snprintf(out, cap, " -DSG_ASYNC=1");
}

int
tl_gemm_init(PyObject *Py_UNUSED(m), tl_state *Py_UNUSED(S))
{
    static const tl_program_rule sg_rule = {"matmul_sg", NULL, sg_options, 0};
    tl_err err = {0};
    if (tl_gemm_params_register(&err) != TL_OK || tl_program_register(&sg_rule, &err) != TL_OK ||
        tl_gemm_tc_register(&err) != TL_OK)
        return tl_raise(&err);
    tl_program_set_binary_hook(&tl_ptx_binary_hook);
    return 0;
}
