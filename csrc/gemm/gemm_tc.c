/* gemm_tc.c: matmul precision ("highest" float32, "high" TF32 on tensor cores) and the choice of the
 * tensor-core kernel (see gemm_tc.h). Three kinds of rows, built only on a device that passes tc_capable()
 * (the NVIDIA platform and compute capability 8.0 or more: tl_runtime_nv_cc, cl_nv_device_attribute_query),
 * since their kernels are inline PTX that no other compiler takes; elsewhere the setting is stored and
 * ignored:
 *  - mma.sync m16n8k8 rows (kernels/matmul_tc.cl, every operand layout, compute capability 8.0 and up);
 *  - wgmma rows (kernels/matmul_wg.cl, "wg" tags: sm_90a code reached through ptx_patch.h), for x @ w.T
 *    (both operands along k, the only TF32 layout wgmma reads) on compute capability 9.0, unless
 *    TLGPU_TC_WGMMA=0; if their family fails to build, the reason is kept (_gemm_tc()["wgmma_error"]) and
 *    the mma.sync rows run from then on;
 *  - packed wgmma rows (kernels/matmul_wgb.cl, "wgb" tags) for any layout on compute capability 9.0: both
 *    operands packed into the stage images, then bulk copies; taken first where their grid fills the
 *    device (pick()), since the packs cost a read and a write of both operands (H200: 237 TFLOP/s at 4096
 *    against 137 for matmul_wg.cl's best; at 1024, 76 against 90). A build failure there is kept apart
 *    (_gemm_tc()["packed_error"]) and the other rows run.
 * The table mirrors the kernel files': production rows first, biggest tiles first; rows marked sweep exist
 * only in a build with -DTC_SWEEP (TLGPU_BUILD_OPTIONS), for benchmarks/bench_gemm.py --tc-sweep. A
 * product takes the first production row of its kind whose grid fills the device (tl_grid_fills: at least
 * the row's share of the compute units, and whole waves where several work-groups share an SM), else the
 * last, unless even that gives fewer work-groups than half the compute units: then the float32 kernels
 * run it (smaller tiles; the MLP step's 256-row products were slower in TF32); the packed rows have no
 * such fallback: where none fills the device, the other kinds run the product, unless matmul_wg.cl's rows
 * would not take it either (their grid, or a K-major copy too dear): then the smallest packed row runs it
 * split in K (packed_split: up to 8 slices that fill the device, gemm_splitk's reduction; H200, 128 to 256
 * rows by 1024 to 4096: 1.4 to 2 x the mma.sync or float32 kernels that ran them before).
 * _gemm_tc("tag") forces a row, for tuning. */
#include "gemm_tc.h"
#include "capture.h"
#include "cl_runtime.h"
#include "gemm_splitk.h"
#include "ptx_patch.h"
#include "settings.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { TC_NN, TC_NT, TC_TN, TC_TT, TC_LAYOUTS };
typedef struct {
    const char *tag;
    int bm, bn, warps, sweep, wg;                /* wg: a wgmma row, nt kernel only: 1 matmul_wg.cl, 2 (3: paired) matmul_wgb.cl */
    int bk;                                      /* wg 2, 3: the k of a tile (the operands' packing) */
    int fill, slots;                             /* the size rule's tl_grid_fills(): % of the units, per SM */
    tl_kernel k[TC_LAYOUTS];
    tl_kernel h[2];                              /* wg 2, 3: the bfloat16 and float16 builds' kernel */
    tl_kernel mh[2];                             /* wg 0: matmul_tc.cl's bfloat16 / float16 builds' nt kernel */
} tc_config;

#define TC_ROWF(fam, tag, bm, bn, warps, sweep)                                                             \
    {tag, bm, bn, warps, sweep, 0, 0, 100, 0,                                                               \
     {TL_KERNEL(fam, "tl_gemm_tc_nn_" tag "_f32"), TL_KERNEL(fam, "tl_gemm_tc_nt_" tag "_f32"),                  \
      TL_KERNEL(fam, "tl_gemm_tc_tn_" tag "_f32"), TL_KERNEL(fam, "tl_gemm_tc_tt_" tag "_f32")},                 \
     .mh = {TL_KERNEL(fam "_bf16", "tl_gemm_tc_nt_" tag "_bf16"), TL_KERNEL(fam "_f16", "tl_gemm_tc_nt_" tag "_f16")}}
#define TC_ROW(tag, bm, bn, warps, sweep) TC_ROWF("matmul_tc", tag, bm, bn, warps, sweep)
#define TC_ROWWK(tag, bm, bn, warps, sweep)  /* a wgmma row: the nt kernel alone */                       \
    {"wg" tag, bm, bn, warps, sweep, 1, 0, 100, 0,                                                          \
     {TL_KERNEL("matmul_wg", ""), TL_KERNEL("matmul_wg", "tl_gemm_wg_nt_" tag "_f32"), TL_KERNEL("matmul_wg", ""), \
      TL_KERNEL("matmul_wg", "")}}
#define TC_ROWW(tag, bm, bn, sweep) TC_ROWWK(tag, bm, bn, (bm) / 16, sweep)   /* bm / 64 warpgroups */
/* packed operands, bulk copies (matmul_wgb.cl): bm / 64 warpgroups + 1 warp */
#define TC_ROWWBK(pre, tag, bm, bn, bk, wg, sweep, fill, slots)                                             \
    {pre tag, bm, bn, (bm) / 16 + 1, sweep, wg, bk, fill, slots,                                           \
     {TL_KERNEL("matmul_wgb", ""), TL_KERNEL("matmul_wgb", "tl_gemm_" pre "_" tag "_f32"), TL_KERNEL("matmul_wgb", ""), \
      TL_KERNEL("matmul_wgb", "")},                                                                         \
     {TL_KERNEL("matmul_wgb_bf16", "tl_gemm_" pre "_" tag "_bf16"), TL_KERNEL("matmul_wgb_f16", "tl_gemm_" pre "_" tag "_f16")}}
#define TC_ROWWB(tag, bm, bn, bk, sweep, fill, slots) TC_ROWWBK("wgb", tag, bm, bn, bk, 2, sweep, fill, slots)
#define TC_ROWWC(tag, bm, bn, bk) TC_ROWWBK("wgc", tag, bm, bn, bk, 3, 1, 100, 0)   /* clusters of two */
static tc_config configs[] = {
    TC_ROW("128x128x16w2x2s2", 128, 128, 4, 0),
    TC_ROW("64x64x32w2x2s2", 64, 64, 4, 0),
    TC_ROW("128x128x16w2x4s2", 128, 128, 8, 1),
    TC_ROW("64x64x16w2x2s3", 64, 64, 4, 1),
    TC_ROW("128x64x16w2x2s3", 128, 64, 4, 1),
    TC_ROW("128x128x8w2x4s3", 128, 128, 8, 1),
    TC_ROW("128x128x16w4x2s2", 128, 128, 8, 1),
    TC_ROW("64x128x16w2x2s3", 64, 128, 4, 1),
    TC_ROW("256x128x8w4x2s2", 256, 128, 8, 1),
    TC_ROW("128x256x8w2x4s2", 128, 256, 8, 1),
    TC_ROWW("128x128x16s3", 128, 128, 0),
    TC_ROWW("64x128x16s4", 64, 128, 0),
    TC_ROWW("128x128x8s4", 128, 128, 1),
    TC_ROWW("256x128x8s4", 256, 128, 1),
    TC_ROWW("128x256x8s4", 128, 256, 1),
    TC_ROWW("64x256x8s4", 64, 256, 1),
    TC_ROWW("128x64x16s4", 128, 64, 1),
    TC_ROWW("128x128x8s6", 128, 128, 1),
    TC_ROWW("128x128x8s5", 128, 128, 1),
    TC_ROWW("64x128x8s8", 64, 128, 1),
    /* H200: 237 TFLOP/s at 4096 (cuBLAS TF32 401), two work-groups an SM: wanted at 1.8 waves or more */
    TC_ROWWB("128x128x8s5", 128, 128, 8, 0, 180, 2),
    TC_ROWWB("64x128x16s3", 64, 128, 16, 0, 100, 0),
    TC_ROWWB("128x128x16s2", 128, 128, 16, 1, 100, 0),
    TC_ROWWB("128x64x16s3", 128, 64, 16, 1, 100, 0),
    TC_ROWWB("256x128x8s3", 256, 128, 8, 1, 100, 0),
    TC_ROWWB("128x256x8s3", 128, 256, 8, 1, 100, 0),
    TC_ROWWC("128x128x16s2", 128, 128, 16),
    TC_ROWWC("128x128x8s5", 128, 128, 8),
    TC_ROWWC("256x128x8s3", 256, 128, 8),
};
enum { TC_NCONFIGS = sizeof configs / sizeof configs[0] };

/* a K-major copy of B costs about 240 / M of the wgmma product's time on the H100 (of A, 240 / N), which runs
 * in two thirds of mma.sync's: worth it from 1024 up */
#define TC_COPY_MIN 1024

static int tf32;                                  /* 0: "highest" (float32), 1: "high" (TF32) */
static int forced = -1;                           /* _gemm_tc(tag): this row at every size */
static int capable = -1;                          /* -1 unknown, 0 no, else compute capability * 10 */
static char wg_error[1200];                        /* why the wgmma family could not be built here */
static char pk_error[1200];                        /* ... or the packed rows' (matmul_wgb.cl) */
static char h_error[2][1200];                      /* ... or their bfloat16 / float16 builds' */
static char mh_error[2][1200];                     /* ... or matmul_tc.cl's bfloat16 / float16 builds' */
static long wg_launches, pk_launches, pk_splits;  /* products given to the wgmma rows, the packed ones, split */
static long h_launches;                           /* ... packed bfloat16 / float16 products */
static long mh_launches;                          /* bfloat16 / float16 products on the mma.sync rows */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* 1 when the device runs matmul_tc.cl, 0 when not, -1 with an exception set. */
static int
tc_capable(void)
{
    const tl_runtime *rt;
    tl_err err = {0};
    if (capable >= 0) return capable > 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    int cc = tl_runtime_nv_cc(rt);
    if (cc < 80) cc = 0;
#ifdef TL_TEST_HOOKS
    if (cc == 0 && tl_setting_flag(TL_SET_TC_EMULATE)) cc = 1;   /* tests: the kernels built with -DTC_EMULATE=1 */
#endif
    pthread_mutex_lock(&lock);
    capable = cc;
    pthread_mutex_unlock(&lock);
    return cc > 0;
}

/* The row a product takes among the production rows of one kind (wg: 0 mma.sync, 1 wgmma, 2 packed): the
 * first whose grid fills the device (tl_grid_fills), else the last; -1 when even that leaves more than half
 * the compute units idle, and for the packed rows (their two packs cost most on small grids) when none fills
 * it. */
static size_t
tiles(const tc_config *c, int M, int N)
{
    return (size_t)((M + c->bm - 1) / c->bm) * (size_t)((N + c->bn - 1) / c->bn);
}

static int
pick(int M, int N, int batch, int wg, size_t units)
{
    int last = -1;
    for (int i = 0; i < TC_NCONFIGS; i++) {
        const tc_config *c = &configs[i];
        if (c->sweep || c->wg != wg) continue;
        if (tl_grid_fills((size_t)batch * tiles(c, M, N), units, c->fill, c->slots, 80)) return i;
        last = i;
    }
    if (last < 0 || wg == 2 || (size_t)batch * tiles(&configs[last], M, N) < units / 2)
        return -1;                                     /* the float32 tiers (smaller tiles) were faster there */
    return last;
}

/* 1 when the wgmma rows may run: compute capability 9.0 (or the emulation hook), not switched off by
 * TLGPU_TC_WGMMA=0, and their family has not failed to build here. */
static int
wg_usable(void)
{
    return (capable == 90 || capable == 1) && wg_error[0] == '\0' && tl_setting_flag(TL_SET_TC_WGMMA);
}

/* 1 when kernel kh (of row i) is built; 0 when it failed to build, the reason kept in why (1200 bytes: the other
 * rows run from now on); -1 with the exception when i is the forced row (a sweep or a test asked for it). */
static int
prepare_or_note(tl_kernel *kh, int i, char *why)
{
    tl_err err = {0};
    if (tl_kernel_prepare(kh, &err) == TL_OK) return 1;
    if (i == forced) return tl_raise(&err);
    pthread_mutex_lock(&lock);
    snprintf(why, sizeof wg_error, "%.100s: %.1000s", err.routine ? err.routine : "", err.what);
    pthread_mutex_unlock(&lock);
    tl_err_clear(&err);
    return 0;
}

/* 1 when wgmma row i's kernel is built; 0 when its family failed to build (the reason kept in wg_error:
 * the mma.sync rows run from now on; for a packed row in pk_error: the other wgmma rows do); -1 with an
 * exception when i is the forced row (a sweep asked for it). */
static int
wg_prepare(int i)
{
    return prepare_or_note(&configs[i].k[TC_NT], i, configs[i].wg >= 2 ? pk_error : wg_error);
}

int
tl_gemm_tc_choose(int M, int N, int K, int batch, int sAm, int sAk, int sBk, int sBn, tl_kernel **kh,
                  size_t *gws0, size_t *lws0)
{
    const tl_runtime *rt;
    tl_err err = {0};
    int ok;
    if (!tf32 || K < 1) return 0;
    if ((ok = tc_capable()) <= 0) return ok;
    int a = sAk == 1 ? 0 : sAm == 1 ? 2 : -1, b = sBn == 1 ? 0 : sBk == 1 ? 1 : -1;
    if (a < 0 || b < 0) return 0;                 /* neither stride 1: the float32 kernel reads it */
    if (sAk == 1 && sBk == 1) b = 1;              /* both along k (x @ w.T, however B's other stride is) */
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    const int nt = a + b == TC_NT;
    int i = forced >= 0 && (!configs[forced].wg || (nt && configs[forced].wg == 1)) ? forced : -1;
    if (i < 0 && nt && wg_usable()) i = pick(M, N, batch, 1, rt->info.compute_units);
    if (i >= 0 && configs[i].wg && (ok = wg_prepare(i)) <= 0) {
        if (ok < 0) return -1;
        i = -1;                                   /* the mma.sync rows instead, from now on */
    }
    if (i < 0 && (i = pick(M, N, batch, 0, rt->info.compute_units)) < 0) return 0;
    *kh = &configs[i].k[a + b];
    if (tl_kernel_py(*kh) == NULL) return -1;
    wg_launches += configs[i].wg != 0;            /* the GIL is held here */
    *lws0 = (size_t)configs[i].warps * 32;
    *gws0 = tiles(&configs[i], M, N) * *lws0;
    return 1;
}

/* Launches kernel k over st[0] (written) and st[1] (read) with n arguments, or raises. */
static int
launch(tl_kernel *kh, int n, const size_t *sz, const void **val, const size_t *gws, const size_t *lws,
       tl_storage *const *st, int nst)
{
    tl_err err = {0};
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL || tl_set_args(k, 0, n, sz, val) < 0) return -1;
    if (tl_stream_launch(k, 3, gws, lws, st, nst, 1u, kh->name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

/* Operand t packed for a wgmma row of matmul_wgb.cl (its banner: BR x bk tiles, swizzled, zero-padded):
 * rows along dim rd, k along dim kd (of the last two), KT k-tiles, tiles of R rows per batch (sP words).
 * float32: along k with aligned 16-byte chunks, one float4 a work-item (tl_wg_pack4_f32), else a local
 * transpose; bfloat16 / float16: two values a word (tl_wg_pack_h16 of that dtype's build). */
static tl_tensor *
pack(tl_tensor *t, int rd, int kd, int R, int K, int KT, int BR, int bk, size_t sP)
{
    static tl_kernel kh = TL_KERNEL("matmul_wgb", "tl_wg_pack_f32"), k4 = TL_KERNEL("matmul_wgb", "tl_wg_pack4_f32");
    static tl_kernel k16[2] = {TL_KERNEL("matmul_wgb_bf16", "tl_wg_pack_h16"), TL_KERNEL("matmul_wgb_f16", "tl_wg_pack_h16")};
    const int nd = t->ndim, batch = nd == 3 ? (int)t->shape[0] : 1, sb = nd == 3 ? (int)t->strides[0] : 0;
    const int sr = (int)t->strides[nd - 2 + rd], sk = (int)t->strides[nd - 2 + kd], off = (int)t->offset;
    const int sp = (int)sP;
    Py_ssize_t n = (Py_ssize_t)sP * batch;
    tl_tensor *y = tl_tensor_empty(TL_F32, 1, &n);
    if (y == NULL) return NULL;
    const size_t I = sizeof(int), Mm = sizeof(cl_mem);
    tl_storage *st[2] = {y->storage, t->storage};
    if (TL_IS_HALF(t->dtype)) {
        const int vec = sk == 1 && sr % 8 == 0 && off % 8 == 0 && sb % 8 == 0 && K % 8 == 0;
        const size_t gws[3] = {tl_round_up(sP / 4, 256), (size_t)batch, 1}, lws[3] = {256, 1, 1};
        const size_t sz[13] = {I, I, I, I, I, Mm, I, I, I, I, I, Mm, I};
        const void *val[13] = {&R, &K, &KT, &BR, &bk, &t->storage->mem, &off, &sb, &sr, &sk, &vec, &y->storage->mem, &sp};
        if (launch(&k16[t->dtype == TL_F16], 13, sz, val, gws, lws, st, 2) < 0) Py_CLEAR(y);
        return y;
    }
    int vec = sk == 1 && sr % 4 == 0 && off % 4 == 0 && sb % 4 == 0 && K % 4 == 0;   /* aligned along k */
#ifdef TL_TEST_HOOKS
    vec &= tl_setting_flag(TL_SET_TC_PACK4);               /* 0: the local-transpose pack always (tests, A/B) */
#endif
    if (vec) {
        const size_t gws[3] = {tl_round_up(sP / 4, 256), (size_t)batch, 1}, lws[3] = {256, 1, 1};
        const size_t sz[11] = {I, I, I, I, I, Mm, I, I, I, Mm, I};
        const void *val[11] = {&R, &K, &KT, &BR, &bk, &t->storage->mem, &off, &sb, &sr, &y->storage->mem, &sp};
        if (launch(&k4, 11, sz, val, gws, lws, st, 2) < 0) Py_CLEAR(y);
        return y;
    }
    const size_t lws[3] = {32, 8, 1};
    const size_t gws[3] = {tl_round_up((size_t)KT * (size_t)bk, 32), sP / ((size_t)KT * (size_t)bk) / 4, (size_t)batch};
    const size_t sz[12] = {I, I, I, I, I, Mm, I, I, I, I, Mm, I};
    const void *val[12] = {&R, &K, &KT, &BR, &bk, &t->storage->mem, &off, &sb, &sr, &sk, &y->storage->mem, &sp};
    if (launch(&kh, 12, sz, val, gws, lws, st, 2) < 0) Py_CLEAR(y);
    return y;
}

/* The split-K slice count of a product on packed row c (*KS k-tiles a slice; 1: no split). gemm_splitk's
 * switch TLGPU_GEMM_SPLITK=S forces S (tests), "off" none; else `fill` asks for the fewest slices, at most
 * 8 of 4 k-tiles or more, whose work-groups fill the device, and not past 64 MiB of partials. -1 with an
 * exception set (a bad switch). */
static int
packed_split(const tc_config *c, int M, int N, int K, int batch, int fill, size_t units, int *KS)
{
    const int KT = (K + c->bk - 1) / c->bk, mode = tl_gemm_splitk_mode();
    const size_t T = (size_t)batch * tiles(c, M, N), part = (size_t)batch * (size_t)M * (size_t)N * 4;
    int S = 1;
    if (mode < 0) return -1;
    if (mode >= 2) {
        S = mode;
    } else if (mode == 0 && fill && T < units) {
        S = (int)((units + T - 1) / T);
        if (S > 8 || KT < 4 * S || (size_t)S * part > ((size_t)64 << 20)) S = 1;
    }
    S = S < KT ? S : KT;
    *KS = (KT + S - 1) / S;
    return (KT + *KS - 1) / *KS;                          /* every slice at least one k-tile */
}

/* matmul_wgb.cl's product kernels: 9 arguments (C the last), then, in the float32 build, mm_epi.h's 5 */
#define WB_EPI_ARG 9
#define WB_NARGS (WB_EPI_ARG + 5)

/* a @ b on packed row c: a [.., M, K] and b [.., K, N] (2 or 3 dims, batches equal or 1) packed into
 * temporaries, then one launch of kernel kh into *out, or (S > 1, KS k-tiles a slice; float32 only) into
 * partials that gemm_splitk's reduction sums into *out. Half operands (kh of a 16-bit build) pack two values
 * a word, so the k-tiles count words, and *out has their dtype. The float32 build's kernels end in the store
 * epilogue's arguments (mm_epi.h): unsplit, the store adds bias (float32 [N] or NULL) and applies act (0-2)
 * and *fused says so (tl_gemm_tc_packed), and the launch leaves a store note, so tlgpu.jit's epilogue pass
 * may move a scale, bias add, residual add, ReLU/Tanh after it into the store (the residual may be the output
 * itself: a work-item reads an element's residual before it stores it, no restrict). 1 with *out set, 0 when the
 * operands do not fit that (the other paths run the product), -1 with an exception set. */
static int
packed_product(tc_config *c, tl_kernel *kh, tl_tensor *a, tl_tensor *b, int M, int N, int K, int S, int KS,
               tl_tensor *bias, int act, int *fused, tl_tensor **out)
{
    const int ba = a->ndim == 3 ? (int)a->shape[0] : 1, bb = b->ndim == 3 ? (int)b->shape[0] : 1;
    const int batch = ba > bb ? ba : bb, Kw = TL_IS_HALF(a->dtype) ? (K + 1) / 2 : K, KT = (Kw + c->bk - 1) / c->bk;
    size_t tm = (size_t)(M + c->bm - 1) / (size_t)c->bm, tn = (size_t)(N + c->bn - 1) / (size_t)c->bn;
    tm += c->wg == 3 && tm % 2;                        /* pairs of tile rows: A padded with a zero tile row */
    const size_t sPA = tm * (size_t)c->bm * (size_t)KT * (size_t)c->bk, sPB = tn * (size_t)c->bn * (size_t)KT * (size_t)c->bk;
    if ((ba != 1 && ba != batch) || (bb != 1 && bb != batch) || sPA * (size_t)ba > INT_MAX || sPB * (size_t)bb > INT_MAX ||
        (size_t)S * (size_t)batch * (size_t)M * (size_t)N > INT_MAX)   /* the kernels' int indices */
        return 0;
    tl_tensor *pa = pack(a, 0, 1, M, K, KT, c->bm, c->bk, sPA), *pb = pa ? pack(b, 1, 0, N, K, KT, c->bn, c->bk, sPB) : NULL;
    Py_ssize_t shape[3] = {batch, M, N};
    const int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    *out = pb != NULL ? tl_tensor_empty(a->dtype, nd, shape + 3 - nd) : NULL;
    const int n = batch * M * N;
    tl_tensor *part = *out != NULL && S > 1 ? tl_tensor_empty(TL_F32, 1, (Py_ssize_t[]){(Py_ssize_t)S * n}) : NULL;
    if (S > 1 && part == NULL) Py_CLEAR(*out);
    if (*out != NULL) {
        tl_tensor *dst = S > 1 ? part : *out;
        const int sa = ba > 1 ? (int)sPA : 0, sb = bb > 1 ? (int)sPB : 0;
        const size_t I = sizeof(int), Mm = sizeof(cl_mem), F = sizeof(float), lws[3] = {(size_t)c->warps * 32, 1, 1};
        const size_t gws[3] = {tm * tn * lws[0], (size_t)batch * (size_t)S, 1};
        const size_t sz[WB_NARGS] = {I, I, I, I, Mm, I, Mm, I, Mm, Mm, I, F, Mm, I};
        const int half = TL_IS_HALF(a->dtype);           /* the 16-bit builds: no epilogue arguments */
        const int fb = !half && S == 1 && bias != NULL, fa = !half && S == 1 && (bias == NULL || fb) ? act : 0;
        const int epi = (fb ? 1 : 0) | fa << 1, off = 0; /* the float32 build's store epilogue (mm_epi.h) */
        const float one = 1.0f;
        cl_mem *d = &dst->storage->mem, *bm = fb ? &bias->storage->mem : d;
        const void *val[WB_NARGS] = {&M, &N, &KT, &KS, &pa->storage->mem, &sa, &pb->storage->mem, &sb, d, bm, &epi, &one,
                                     d, &off};
        tl_storage *st[4] = {dst->storage, pa->storage, pb->storage, fb ? bias->storage : NULL};
        if (launch(kh, half ? WB_EPI_ARG : WB_NARGS, sz, val, gws, lws, st, 4) < 0 ||
            (S > 1 && tl_gemm_splitk_reduce(part, S, n, *out, 0) < 0)) {
            Py_CLEAR(*out);
        } else {
            wg_launches++, pk_launches++, pk_splits += S > 1, h_launches += half;
            if (fused != NULL) *fused = (fb ? 1 : 0) | (fa ? 2 : 0);
            if (!half && S == 1 && !fa)                  /* tlgpu.jit may move ops after it into the store */
                tl_capture_note_store(kh->k, &(tl_store_note){.out_arg = WB_EPI_ARG - 1, .off_arg = -1,
                                                              .bias_arg = WB_EPI_ARG, .epi_arg = WB_EPI_ARG + 1,
                                                              .alpha_arg = WB_EPI_ARG + 2, .res_arg = WB_EPI_ARG + 3,
                                                              .res_off_arg = WB_EPI_ARG + 4, .res_alias = 1,
                                                              .epi = epi, .N = N, .out_off = 0, .n = (long)n});
        }
    }
    Py_XDECREF(part);
    Py_XDECREF(pa);
    Py_XDECREF(pb);
    return *out != NULL ? 1 : -1;
}

int
tl_gemm_tc_kmajor(tl_tensor *a, tl_tensor *b, int M, int N, int K, tl_tensor **a2, tl_tensor **b2)
{
    const tl_runtime *rt;
    tl_err err = {0};
    int ok;
    if (!tf32 || M < 2 || N < 2 || K < 1 || a->ndim < 2 || a->ndim > 3 || b->ndim < 2 || b->ndim > 3) return 0;
    if ((ok = tc_capable()) <= 0) return ok;
    if (!wg_usable() || (forced >= 0 && configs[forced].wg != 1)) return 0;
    const Py_ssize_t sAm = a->strides[a->ndim - 2], sAk = a->strides[a->ndim - 1];
    const Py_ssize_t sBk = b->strides[b->ndim - 2], sBn = b->strides[b->ndim - 1];
    const int ca = sAk != 1 && sAm == 1, cb = sBk != 1 && sBn == 1;   /* the operands to copy */
    if ((sAk != 1 && !ca) || (sBk != 1 && !cb) || (!ca && !cb)) return 0;
    if ((cb && M < TC_COPY_MIN) || (ca && N < TC_COPY_MIN)) return 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    const Py_ssize_t ba = a->ndim == 3 ? a->shape[0] : 1, bb = b->ndim == 3 ? b->shape[0] : 1;
    const int batch = (int)(ba > bb ? ba : bb);
    const int i = forced >= 0 ? forced : pick(M, N, batch, 1, rt->info.compute_units);
    if (i < 0 || (ok = wg_prepare(i)) <= 0) return ok < 0 ? -1 : 0;   /* the family built */
    *a2 = ca ? tl_copy_flipped(a) : (tl_tensor *)Py_NewRef(a);    /* K-major copies: one tiled transpose */
    *b2 = *a2 == NULL ? NULL : cb ? tl_copy_flipped(b) : (tl_tensor *)Py_NewRef(b);
    if (*b2 == NULL) { Py_CLEAR(*a2); return -1; }
    return 1;
}

int
tl_gemm_tc_packed(tl_tensor *a, tl_tensor *b, int M, int N, int K, tl_tensor *res, int act, int *fused,
                  tl_tensor **out)
{
    const tl_runtime *rt;
    tl_err err = {0};
    int ok;
    if (!tf32 || (forced >= 0 && configs[forced].wg < 2) || M < 2 || N < 2 || K < 1 || a->ndim < 2 ||
        a->ndim > 3 || b->ndim < 2 || b->ndim > 3)
        return 0;
    if ((ok = tc_capable()) <= 0) return ok;
    if (!wg_usable() || (forced < 0 && pk_error[0] != '\0')) return 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    const Py_ssize_t ba = a->ndim == 3 ? a->shape[0] : 1, bb = b->ndim == 3 ? b->shape[0] : 1;
    const int batch = (int)(ba > bb ? ba : bb), units = (int)rt->info.compute_units;
    int i = forced >= 0 ? forced : pick(M, N, batch, 2, units), fill = 0, KS, S;
    const int ca = a->strides[a->ndim - 1] != 1, cb = b->strides[b->ndim - 2] != 1;   /* not along k */
    if (i < 0 && forced < 0 && (pick(M, N, batch, 1, units) < 0 || (ca && N < TC_COPY_MIN) ||
                                (cb && M < TC_COPY_MIN))) {
        for (int j = 0; j < TC_NCONFIGS; j++)             /* none fills, nor do matmul_wg.cl's rows take it: */
            if (!configs[j].sweep && configs[j].wg == 2) i = j;   /* the last (smallest), split in K */
        fill = 1;
    }
    if (i < 0 || (S = packed_split(&configs[i], M, N, K, batch, fill, (size_t)units, &KS)) < 0) return i < 0 ? 0 : -1;
    if (fill && S < 2) return 0;                          /* too small even so: the other rows */
    if ((ok = wg_prepare(i)) <= 0) return ok;
    const int bias = res != NULL && res->dtype == TL_F32 && res->ndim == 1 && res->shape[0] == N && res->offset == 0 &&
                     res->storage != NULL && (N == 1 || res->strides[0] == 1);   /* a bias: [N], from element 0 */
    return packed_product(&configs[i], &configs[i].k[TC_NT], a, b, M, N, K, S, KS, bias ? res : NULL,
                          res == NULL || bias ? act : 0, fused, out);
}

int
tl_gemm_tc_half_usable(void)
{
    return tc_capable();                              /* the packed wgmma rows, else the mma.sync ones */
}

/* Half operand t packed for matmul_tc.cl's 16-bit builds (tl_tc_pack_h16): rows along dim rd, k along dim kd
 * (of the last two), R rows of Kw words a batch; a float32 tensor of the words' bits. */
static tl_tensor *
pack16(tl_tensor *t, int rd, int kd, int R, int K, int Kw, int h)
{
    static tl_kernel kp[2] = {TL_KERNEL("matmul_tc_bf16", "tl_tc_pack_h16"),
                              TL_KERNEL("matmul_tc_f16", "tl_tc_pack_h16")};
    const int nd = t->ndim, batch = nd == 3 ? (int)t->shape[0] : 1, sb = nd == 3 ? (int)t->strides[0] : 0;
    const int sr = (int)t->strides[nd - 2 + rd], sk = (int)t->strides[nd - 2 + kd], off = (int)t->offset;
    Py_ssize_t n = (Py_ssize_t)batch * R * Kw;
    tl_tensor *y = tl_tensor_empty(TL_F32, 1, &n);
    if (y == NULL) return NULL;
    const size_t I = sizeof(int), Mm = sizeof(cl_mem), lws[3] = {64, 1, 1};
    const size_t gws[3] = {tl_round_up((size_t)Kw, 64), (size_t)R, (size_t)batch};
    const size_t sz[9] = {I, I, I, Mm, I, I, I, I, Mm};
    const void *val[9] = {&R, &K, &Kw, &t->storage->mem, &off, &sb, &sr, &sk, &y->storage->mem};
    tl_storage *st[2] = {y->storage, t->storage};
    if (launch(&kp[h], 9, sz, val, gws, lws, st, 2) < 0) Py_CLEAR(y);
    return y;
}

/* a @ b in a 16-bit dtype on an mma.sync row (compute capability 8.x, or wherever the wgmma rows do not run):
 * both operands packed two values a word along k (pack16), then the row's nt kernel of that dtype's build over
 * the words, C stored in the operands' dtype. 1 with *out set, 0 when no row takes it (or its build failed:
 * the reason in _gemm_tc()), -1 with an exception set. */
static int
mma_half(tl_tensor *a, tl_tensor *b, int M, int N, int K, int batch, int h, size_t units, tl_tensor **out)
{
    const int i = forced >= 0 && configs[forced].wg == 0 ? forced : pick(M, N, batch, 0, units);
    int ok;
    if (i < 0 || (forced < 0 && mh_error[h][0] != '\0')) return 0;
    if ((ok = prepare_or_note(&configs[i].mh[h], i, mh_error[h])) <= 0) return ok;
    const int ba = a->ndim == 3 ? (int)a->shape[0] : 1, bb = b->ndim == 3 ? (int)b->shape[0] : 1, Kw = (K + 1) / 2;
    if ((ba != 1 && ba != batch) || (bb != 1 && bb != batch) ||   /* the kernels' int indices: */
        (size_t)batch * (size_t)(M > N ? M : N) * (size_t)Kw > INT_MAX ||
        (size_t)batch * (size_t)M * (size_t)N > INT_MAX)
        return 0;
    tl_tensor *pa = pack16(a, 0, 1, M, K, Kw, h), *pb = pa != NULL ? pack16(b, 1, 0, N, K, Kw, h) : NULL;
    Py_ssize_t shape[3] = {batch, M, N};
    const int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    *out = pb != NULL ? tl_tensor_empty(a->dtype, nd, shape + 3 - nd) : NULL;
    if (*out != NULL) {
        const int zero = 0, one_i = 1, sa = ba > 1 ? M * Kw : 0, sb = bb > 1 ? N * Kw : 0;
        const float one = 1.0f;
        const size_t I = sizeof(int), Mm = sizeof(cl_mem), F = sizeof(float);
        const size_t lws[3] = {(size_t)configs[i].warps * 32, 1, 1};
        const size_t gws[3] = {tiles(&configs[i], M, N) * lws[0], 1, (size_t)batch};
        cl_mem *c = &(*out)->storage->mem;
        const size_t sz[23] = {I, I, I, I, Mm, I, I, I, I, I, Mm, I, I, I, I, I, Mm, I, Mm, I, F, Mm, I};
        const void *val[23] = {&M, &N, &Kw, &batch, &pa->storage->mem, &zero, &zero, &sa, &Kw, &one_i,
                               &pb->storage->mem, &zero, &zero, &sb, &one_i, &Kw, c, &zero, c, &zero, &one, c, &zero};
        tl_storage *st[3] = {(*out)->storage, pa->storage, pb->storage};
        if (launch(&configs[i].mh[h], 23, sz, val, gws, lws, st, 3) < 0) Py_CLEAR(*out);
        else mh_launches++;
    }
    Py_XDECREF(pa);
    Py_XDECREF(pb);
    return *out != NULL ? 1 : -1;
}

int
tl_gemm_tc_half(tl_tensor *a, tl_tensor *b, int M, int N, int K, tl_tensor **out)
{
    const tl_runtime *rt;
    tl_err err = {0};
    int ok;
    if (a->dtype != b->dtype || !TL_IS_HALF(a->dtype) || (forced >= 0 && configs[forced].wg == 1) || M < 2 ||
        N < 2 || K < 1 || a->ndim < 2 || a->ndim > 3 || b->ndim < 2 || b->ndim > 3)
        return 0;
    const int h = a->dtype == TL_F16;
    if ((ok = tc_capable()) <= 0) return ok;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    const Py_ssize_t ba = a->ndim == 3 ? a->shape[0] : 1, bb = b->ndim == 3 ? b->shape[0] : 1;
    const int batch = (int)(ba > bb ? ba : bb);
    if (!wg_usable() || (forced >= 0 && configs[forced].wg == 0))   /* compute capability 8.x: mma.sync */
        return mma_half(a, b, M, N, K, batch, h, rt->info.compute_units, out);
    if (forced < 0 && h_error[h][0] != '\0') return 0;
    int i = forced >= 0 ? forced : pick(M, N, batch, 2, rt->info.compute_units);
    for (int j = 0, none = i < 0; none && j < TC_NCONFIGS; j++)   /* none fills the device: the smallest row, */
        if (!configs[j].sweep && configs[j].wg == 2) i = j;             /* unsplit, */
    if (forced < 0 && (size_t)batch * tiles(&configs[i], M, N) * 4 < rt->info.compute_units)
        return 0;                                         /* ... unless it leaves 3/4 of the device idle */
    if ((ok = prepare_or_note(&configs[i].h[h], i, h_error[h])) <= 0) return ok;
    const int KT = ((K + 1) / 2 + configs[i].bk - 1) / configs[i].bk;
    return packed_product(&configs[i], &configs[i].h[h], a, b, M, N, K, 1, KT, NULL, 0, NULL, out);
}

/* The 16-bit builds of matmul_wgb.cl and matmul_tc.cl: the same source with -DWG_HALF / -DTC_HALF = 1 (bfloat16)
 * or 2 (float16), each file reading its own. */
static void
half_options(const tl_runtime *rt, int arg, const char *user, char *out, size_t cap)
{
    (void)rt;
    (void)user;
    snprintf(out, cap, " -DWG_HALF=%d -DTC_HALF=%d", arg, arg);
}

tl_status
tl_gemm_tc_register(tl_err *err)
{
    static const tl_program_rule rules[4] = {{"matmul_wgb_bf16", "matmul_wgb", half_options, 1},
                                             {"matmul_wgb_f16", "matmul_wgb", half_options, 2},
                                             {"matmul_tc_bf16", "matmul_tc", half_options, 1},
                                             {"matmul_tc_f16", "matmul_tc", half_options, 2}};
    tl_status st = TL_OK;
    for (int i = 0; i < 4 && st == TL_OK; i++) st = tl_program_register(&rules[i], err);
    return st;
}

PyObject *
tl_gemm_tc_set_precision(PyObject *Py_UNUSED(m), PyObject *arg)
{
    static const char *const names[] = {"highest", "high", "tf32"};
    static const int values[] = {0, 1, 1};
    if (!PyUnicode_Check(arg))
        return PyErr_Format(PyExc_TypeError, "set_matmul_precision: expected a str, got %s", Py_TYPE(arg)->tp_name);
    const char *s = PyUnicode_AsUTF8(arg);
    if (s == NULL) return NULL;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i]) == 0) {
            tf32 = values[i];
            Py_RETURN_NONE;
        }
    }
    return PyErr_Format(PyExc_ValueError, "set_matmul_precision: '%s' is not one of 'highest' (float32), 'high' "
                        "or 'tf32' (TF32 tensor cores where the device has them)", s);
}

int
tl_gemm_tc_tf32(void)
{
    return tf32;
}

PyObject *
tl_gemm_tc_get_precision(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
    return PyUnicode_FromString(tf32 ? "high" : "highest");
}

/* _gemm_tc(): {"capability": cc * 10 (0: no tensor-core path here), "active": TF32 products would run on
 * tensor cores, "configs": [tags], "forced": tag or None}; _gemm_tc(tag) forces that row (None: the
 * size rule again). */
PyObject *
tl_gemm_tc_info(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *tag = NULL, *tags = NULL, *r = NULL;
    if (!PyArg_ParseTuple(args, "|O:_gemm_tc", &tag)) return NULL;
    if (tag == Py_None) {
        forced = -1;
    } else if (tag != NULL) {
        const char *s = PyUnicode_Check(tag) ? PyUnicode_AsUTF8(tag) : NULL;
        int i = 0;
        while (s != NULL && i < TC_NCONFIGS && strcmp(configs[i].tag, s) != 0) i++;
        if (s == NULL || i == TC_NCONFIGS) return PyErr_Format(PyExc_ValueError, "_gemm_tc: unknown configuration");
        forced = i;
    }
    int ok = tc_capable();
    if (ok < 0 || (tags = PyList_New(0)) == NULL) return NULL;
    for (int i = 0; i < TC_NCONFIGS; i++) {
        PyObject *s = PyUnicode_FromString(configs[i].tag);
        if (s == NULL || PyList_Append(tags, s) < 0) { Py_XDECREF(s); Py_DECREF(tags); return NULL; }
        Py_DECREF(s);
    }
    r = Py_BuildValue("{s:i,s:O,s:N,s:s,s:O,s:s,s:s,s:l,s:l,s:l,s:l,s:s,s:s,s:l,s:s,s:s}", "capability", capable,
                      "active", ok && tf32 ? Py_True : Py_False, "configs", tags, "forced",
                      forced >= 0 ? configs[forced].tag : NULL,
                      "wgmma", wg_usable() ? Py_True : Py_False, "wgmma_error", wg_error[0] ? wg_error : NULL,
                      "packed_error", pk_error[0] ? pk_error : NULL, "wgmma_launches", wg_launches,
                      "packed_launches", pk_launches, "packed_splits", pk_splits, "half_launches", h_launches,
                      "bf16_error", h_error[0][0] ? h_error[0] : NULL, "f16_error", h_error[1][0] ? h_error[1] : NULL,
                      "mma_half_launches", mh_launches, "mma_bf16_error", mh_error[0][0] ? mh_error[0] : NULL,
                      "mma_f16_error", mh_error[1][0] ? mh_error[1] : NULL);
    return r;
}

#ifdef TL_TEST_HOOKS
/* _ptx_patch(text): ptx_patch.h's rewrite of a PTX text, or ValueError with the reason (tests). */
PyObject *
tl_ptx_patch_py(PyObject *Py_UNUSED(m), PyObject *arg)
{
    Py_ssize_t n = 0;
    size_t out_n = 0;
    const char *why = NULL, *s = PyUnicode_Check(arg) ? PyUnicode_AsUTF8AndSize(arg, &n) : NULL;
    if (s == NULL) return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "_ptx_patch: expected a str");
    char *out = tl_ptx_patch(s, (size_t)n, &out_n, &why);
    if (out == NULL) return PyErr_Format(PyExc_ValueError, "_ptx_patch: %s", why);
    PyObject *r = PyUnicode_FromStringAndSize(out, (Py_ssize_t)out_n);
    free(out);
    return r;
}
#endif
