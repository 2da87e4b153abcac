/* ops_matmul.c: float32 matrix products: matmul / `@` with numpy semantics (1-D operands promoted and
 * their dim dropped from the result, batch dims broadcast), dot of two vectors (a 0-d result) and outer.
 * Every product becomes one mm_problem: C[batch, M, N] = A @ B, with A and B read through their own
 * strides (a transposed view, a vector, a broadcast batch all cost no copy) and C a new contiguous
 * tensor. Invariants: the kernel is chosen once per process from the work-group size the device
 * allows for it (kernels/matmul.cl: 256, 64 or any work-items); a zero-size result enqueues nothing
 * and K == 0 is one fill with zeros; batch dims collapse where strides allow, and the host issues one
 * launch per index of any batch dims beyond the two the kernel walks. On GPUs the tiled kernel comes in
 * three tile-size tiers (gemm_params.h), picked per product by pick_tier; split-K (gemm_splitk.h) runs a
 * product whose tiles number < compute units with K >= 2048 and >= 4*max(M, N) as slices of K and a sum.
 * TLGPU_MATMUL_KERNEL=small|naive forces a fallback kernel (for tests), =gemm tier 0 at every size (for
 * tuning, no split-K). Autograd: record() saves both operands; tl_matmul_backward. */
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"
#include "cl_runtime.h"
#include "gemm_params.h"
#include "gemm_tc.h"
#include "gemm_sg.h"
#include "capture.h"
#include "cpu_blas.h"
#include "gemm_splitk.h"
#include "ops_mv.h"
#include "settings.h"
#include <stdlib.h>
#include <string.h>

static const tl_op_row ROW_MATMUL;   /* autograd rows (below) */

/* Batch dims after collapsing: shape and, per operand (0 = C, 1 = A, 2 = B), strides in elements. */
typedef struct {
    int M, N, K;
    int sAm, sAk, sBk, sBn;
    int nbd, bshape[TL_MAX_DIMS], bst[3][TL_MAX_DIMS], off[3];
    int act;                         /* an activation the store may apply (matmul.cl's mm_epi): 1 relu, 2 tanh */
} mm_problem;

typedef tl_gemm_params gemm_params;
enum { GP_MWG = TL_GP_MWG, GP_NWG = TL_GP_NWG, GP_KWG = TL_GP_KWG, GP_MDIMC = TL_GP_MDIMC, GP_NDIMC = TL_GP_NDIMC,
       GP_VW = TL_GP_VW, GP_CMR = TL_GP_CMR, GP_CVW = TL_GP_CVW, GP_CNV = TL_GP_CNV, GP_CNR = TL_GP_CNR,
       GP_DIRECT = TL_GP_DIRECT };

/* Raises ValueError for a bad TLGPU_GEMM_PARAMS (or _MID, _SMALL); fills the tier's parameters otherwise. */
static int
gemm_check(int tier, gemm_params *q)
{
    const tl_runtime *rt;
    tl_err err = {0};
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    const char *why = tl_gemm_params_get(&rt->info, tier, q);
    if (why != NULL) {
        PyErr_Format(PyExc_ValueError, "matmul: %s (keys: MWG NWG KWG MDIMC NDIMC VW CMR CVW CNV CNR "
                     "DIRECT MVEC PREFETCH DBUF INTERIOR)", why);            /* why names the variable */
        return -1;
    }
    return 0;
}

typedef enum { MM_GEMM, MM_DIRECT_NN, MM_DIRECT_NT, MM_SMALL, MM_NAIVE, MM_NKERNELS } mm_variant;
static tl_kernel mm_kernels[MM_NKERNELS] = {
    TL_KERNEL("matmul", "tl_gemm_f32"), TL_KERNEL("matmul", "tl_gemm_direct_nn_f32"),
    TL_KERNEL("matmul", "tl_gemm_direct_nt_f32"), TL_KERNEL("matmul", "tl_matmul_small_f32"),
    TL_KERNEL("matmul", "tl_matmul_naive_f32")};
/* the tiled kernel of tiers 1 and 2 (tier 0 is mm_kernels[MM_GEMM]): the same source, other tile sizes */
static tl_kernel tier_kernels[TL_GEMM_TIERS - 1] = {TL_KERNEL("matmul_mid", "tl_gemm_f32"),
                                                   TL_KERNEL("matmul_small", "tl_gemm_f32")};
static int mm_tiled = -1;                               /* MM_GEMM, MM_SMALL or MM_NAIVE: what the device runs */
static int gemm_only;                                   /* TLGPU_MATMUL_KERNEL=gemm: no small-problem switch */

static size_t
kernel_max_wg(tl_kernel *kh)
{
    const tl_runtime *rt;
    tl_err err = {0};
    size_t kmax = 0;
    if (tl_kernel_py(kh) == NULL) return 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err), 0;
    cl_int rc = clGetKernelWorkGroupInfo(kh->k, rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    if (rc != CL_SUCCESS) { tl_err_set(&err, rc, "clGetKernelWorkGroupInfo", kh->name); return tl_raise(&err), 0; }
    return kmax;
}

/* The local-memory kernel when the device allows its MDIMC*NDIMC work-items, else small, else naive
 * (TLGPU_MATMUL_KERNEL=small|naive forces a fallback, for tests). -1 with an exception set. */
static int
choose_tiled(const gemm_params *q)
{
    if (mm_tiled >= 0) return mm_tiled;
    const char *force = tl_setting_str(TL_SET_MATMUL_KERNEL);
    if (force != NULL && strcmp(force, "small") == 0) return mm_tiled = MM_SMALL;
    if (force != NULL && strcmp(force, "naive") == 0) return mm_tiled = MM_NAIVE;
    gemm_only = force != NULL && strcmp(force, "gemm") == 0;
    size_t need[2] = {(size_t)q->v[GP_MDIMC] * (size_t)q->v[GP_NDIMC], 64};
    for (int v = MM_GEMM; v <= MM_SMALL; v += MM_SMALL - MM_GEMM) {
        size_t kmax = kernel_max_wg(&mm_kernels[v]);
        if (kmax == 0) return -1;
        if (kmax >= need[v == MM_SMALL]) return mm_tiled = v;
    }
    return mm_tiled = MM_NAIVE;
}

static int
to_int(Py_ssize_t v)                                    /* sizes and strides fit: storages hold < 2**31 */
{
    return (int)v;
}

static int
batch_size(const mm_problem *p)
{
    int batch = 1;
    for (int d = 0; d < p->nbd; d++) batch *= p->bshape[d];
    return batch;
}

/* Big tiles starve a GPU on small products (a 256x256 result is 4 work-groups of 128x128): the tier whose
 * grid first fills the device runs, that is the biggest tiles whose work-groups number at least 3/4 of the
 * compute units (at 1024^2 on an H200, 128 groups of 128x64 on 132 units beat 512 of 64x32), else the
 * smallest. Tiers whose work-group the device cannot run are skipped; CPUs (direct kernels) and
 * TLGPU_MATMUL_KERNEL=gemm keep tier 0. Fills q with the tier's parameters; -1 with an exception set. */
static int
pick_tier(const mm_problem *p, gemm_params *q)
{
    const tl_runtime *rt;
    tl_err err = {0};
    int tier = 0;
    if (gemm_check(0, q) < 0) return -1;
    if (q->v[GP_DIRECT] != 0 || gemm_only) return 0;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    size_t batch = (size_t)batch_size(p);
    for (int t = 0; t < TL_GEMM_TIERS; t++) {
        gemm_params qt;
        if (gemm_check(t, &qt) < 0) return -1;
        if (t > 0) {
            size_t kmax = kernel_max_wg(&tier_kernels[t - 1]);
            if (kmax == 0) return -1;
            if (kmax < (size_t)qt.v[GP_MDIMC] * (size_t)qt.v[GP_NDIMC]) continue;
        }
        *q = qt;
        tier = t;
        size_t tiles = batch * (size_t)((p->M + qt.v[GP_MWG] - 1) / qt.v[GP_MWG]) *
                       (size_t)((p->N + qt.v[GP_NWG] - 1) / qt.v[GP_NWG]);
        if (tiles * 4 >= (size_t)rt->info.compute_units * 3) break;
    }
    return tier;
}

/* The K slices of p on the tiled kernel with tier parameters q (gemm_splitk.h): 1 (and *ks = K) for no split.
 * Split-K needs at most one batch dim (the kernel walks slices x batch) and a product the tile fills in m and
 * n; forced (the switch >= 2: S slices of K / S, the last taking the rest) on any device, else the rule
 * where the tiled tiers run (not the direct kernels of CPUs, nor under TLGPU_MATMUL_KERNEL=gemm). */
static int
mm_slices(const mm_problem *p, const gemm_params *q, int mode, int direct, int *ks)
{
    const tl_runtime *rt;
    tl_err err = {0};
    *ks = p->K;
    if (mode == 1 || p->M == 1 || p->N == 1 || p->K < 2 || p->nbd > 1 || (p->nbd && p->bst[0][0] != p->M * p->N))
        return 1;
    if (mode >= 2) {
        int S = mode < p->K ? mode : p->K;
        *ks = p->K / S;
        return S;
    }
    if (direct || gemm_only) return 1;                  /* direct: tier 0's DIRECT (a CPU device) */
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    return tl_gemm_splitk_rule(p->M, p->N, p->K, batch_size(p), q->v[GP_MWG], q->v[GP_NWG], q->v[GP_KWG],
                               (int)rt->info.compute_units, ks);
}

/* Enqueues C = A @ B for p over `out` (contiguous, non-empty). a/b may lack storage only when K == 0. With
 * `res` (contiguous: out's shape, or N elements added to every row, a bias) the mul_mv path (out's shape
 * only), the CPU BLAS path and the kernels with a store epilogue (kernels/mm_epi.h; a float32 bias only) add
 * it and set bit 0 of *fused; those kernels also apply p->act as they store, the CPU BLAS path a ReLU (act 1)
 * after its product, and set bit 1; other paths (split-K, kernels without the epilogue) do neither. The
 * epilogue kernels' launches also leave a store note for tlgpu.jit's epilogue pass (capture.h). A forced split-K (tests) takes every product it can split to the tiled kernel, past mul_mv,
 * TF32, BLAS and direct. */
static int
mm_launch(const mm_problem *p, tl_tensor *a, tl_tensor *b, tl_tensor *out, tl_tensor *res, int *fused)
{
    tl_err err = {0};
    gemm_params q;
    int v, tier = 0, nouter = 1, nb1 = 1, nb2 = 1, sb[2][2] = {{0, 0}, {0, 0}}, S = 1, ks = p->K, mode;
    if (p->K == 0) return tl_tensor_fill(out, 0.0);
    if (gemm_check(0, &q) < 0 || (v = choose_tiled(&q)) < 0 || (mode = tl_gemm_splitk_mode()) < 0) return -1;
    const int cpu = q.v[GP_DIRECT] != 0, forced = v != MM_GEMM;
    const int plain = !forced && !(mode >= 2 && mm_slices(p, &q, mode, 1, &ks) > 1);   /* else forced split-K */
    if (plain && p->nbd == 0 && p->M <= 8 && p->N >= 4 && p->sAk == 1 && p->sBk == 1) {
        if (res != NULL && tl_tensor_numel(res) != tl_tensor_numel(out)) res = NULL;   /* a bias: added after */
        *fused = res != NULL;                            /* x @ w.T with few rows: the decode case */
        return tl_mv_f32_launch(p->M, p->N, p->K, a, p->off[1], p->sAm, b, p->off[2], p->sBn, out, p->off[0], res, cpu,
                                NULL);                   /* ops_mv.h */
    }
    size_t tc_gws = 0, tc_lws = 0;                      /* TF32 on tensor cores where asked for (gemm_tc.h) */
    tl_kernel *kh = NULL;
    int tc = 0, *split = p->nbd > 1 || (p->nbd && p->bst[0][0] != p->M * p->N) ? NULL : &S;   /* sg: split-K */
    if (plain && p->M > 1 && p->N > 1 &&
        (tc = tl_gemm_tc_choose(p->M, p->N, p->K, batch_size(p), p->sAm, p->sAk, p->sBk, p->sBn, &kh, &tc_gws,
                                &tc_lws)) < 0)
        return -1;
    int al[3] = {p->off[0], p->off[1], p->off[2]};      /* NVIDIA float32: matmul_sg.cl (gemm_sg.h) */
    for (int d = 0; d < p->nbd; d++) { al[1] |= p->bst[1][d]; al[2] |= p->bst[2][d]; }
    if (plain && p->M > 1 && p->N > 1 && !tc && (tc = tl_gemm_sg_choose(p->M, p->N, p->K, batch_size(p), p->sAm,
            p->sAk, p->sBk, p->sBn, al[1], al[2], &kh, &tc_gws, &tc_lws, split, &ks)) < 0)
        return -1;
    const int blas = cpu && plain && !tc ? tl_cpu_blas_mm((const int[]){p->M, p->N, p->K, p->sAm, p->sAk, p->sBk,
                                                                        p->sBn},
                                                          p->nbd, p->bshape, p->bst, p->off, out, a, b, res, NULL,
                                                          p->act == 1) : 0;
    if (blas != 0)                                       /* CPU devices: a host BLAS (cpu_blas.h), ReLU after it */
        return blas < 0 ? -1 : (*fused = (res != NULL) | (p->act == 1 ? 2 : 0), 0);
    if (p->M == 1 || p->N == 1) v = MM_NAIVE;           /* other vector products: a tile would sit idle */
    if (v == MM_GEMM && !tc && cpu && plain)             /* CPUs: the direct kernels where a layout fits */
        v = p->sBn == 1 ? MM_DIRECT_NN : p->sAk == 1 && p->sBk == 1 ? MM_DIRECT_NT : MM_GEMM;
    if (v == MM_GEMM && !tc && (tier = pick_tier(p, &q)) < 0) return -1;
    if (v == MM_GEMM && !tc && (S = mm_slices(p, &q, mode, cpu, &ks)) < 0) return -1;
    if (!tc) kh = tier > 0 ? &tier_kernels[tier - 1] : &mm_kernels[v];
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL) return -1;
    int inner = p->nbd < 2 ? p->nbd : 2, first = p->nbd - inner;
    if (inner >= 1) { nb2 = p->bshape[p->nbd - 1]; sb[0][1] = p->bst[1][p->nbd - 1]; sb[1][1] = p->bst[2][p->nbd - 1]; }
    if (inner == 2) { nb1 = p->bshape[first]; sb[0][0] = p->bst[1][first]; sb[1][0] = p->bst[2][first]; }
    for (int d = 0; d < first; d++) nouter *= p->bshape[d];
    size_t gws[3], lws[3] = {1, 1, 1};
    switch (v) {
    case MM_NAIVE:                                       /* flat over M*N with the handle's 1-D size */
        lws[0] = kh->wg;
        gws[0] = tl_round_up((size_t)p->M * (size_t)p->N, kh->wg);
        gws[1] = 1;
        break;
    case MM_SMALL:
        lws[0] = lws[1] = 8;
        gws[0] = tl_round_up((size_t)p->N, 32) / 4;
        gws[1] = tl_round_up((size_t)p->M, 32) / 4;
        break;
    case MM_GEMM:
        if (tc) { lws[0] = tc_lws; gws[0] = tc_gws; gws[1] = 1; break; }
        lws[0] = (size_t)q.v[GP_NDIMC];
        lws[1] = (size_t)q.v[GP_MDIMC];
        gws[0] = (size_t)((p->N + q.v[GP_NWG] - 1) / q.v[GP_NWG]) * lws[0];
        gws[1] = (size_t)((p->M + q.v[GP_MWG] - 1) / q.v[GP_MWG]) * lws[1];
        break;
    default: {                                           /* direct: no barriers, so any small local size */
        int cols = v == MM_DIRECT_NN ? q.v[GP_CNV] * q.v[GP_CVW] : q.v[GP_CNR];
        lws[0] = kh->wg < 4 ? kh->wg : 4;                /* 1-D over row x column blocks (swizzled) */
        gws[0] = tl_round_up((size_t)((p->N + cols - 1) / cols) * (size_t)((p->M + q.v[GP_CMR] - 1) / q.v[GP_CMR]),
                             lws[0]);
        gws[1] = 1;
    }
    }
    if (S > 1) {                                         /* split-K: slices x the one batch dim, then a sum */
        const tl_splitk_problem sp = {p->M, p->N, p->K, nb2, p->sAm, p->sAk, p->sBk, p->sBn, sb[0][1], sb[1][1],
                                      p->off[1], p->off[2], p->off[0]};
        return tl_gemm_splitk_launch(&sp, S, ks, kh, gws, lws, a, b, out);
    }
    gws[2] = (size_t)nb1 * (size_t)nb2;
    /* kernels with a store epilogue (kernels/mm_epi.h: matmul.cl's): the bias and the activation */
    const int has_epi = tl_mm_has_epi(k) && out->dtype == TL_F32;
    const int bias_ok = has_epi && res != NULL && res->dtype == TL_F32 && res->ndim == 1 && res->shape[0] == p->N &&
                        res->offset == 0 && tl_tensor_numel(res) != tl_tensor_numel(out);
    const int act = res == NULL || bias_ok ? p->act : 0;   /* res added after the product: act after it */
    const int epi = has_epi ? (bias_ok ? 1 : 0) | (act << 1) : 0;
    if (has_epi) *fused = (bias_ok ? 1 : 0) | (act ? 2 : 0);
    tl_storage *st[4] = {out->storage, a->storage, b->storage, bias_ok ? res->storage : NULL};
    for (int o = 0; o < nouter; o++) {
        int off[3] = {p->off[0], p->off[1], p->off[2]};
        for (int d = first - 1, rest = o; d >= 0; d--) {  /* batch dims the kernel does not walk */
            int i = rest % p->bshape[d];
            rest /= p->bshape[d];
            for (int r = 0; r < 3; r++) off[r] += i * p->bst[r][d];
        }
        const size_t I = sizeof(int), Mm = sizeof(cl_mem);
        const size_t sz[18] = {I, I, I, I, Mm, I, I, I, I, I, Mm, I, I, I, I, I, Mm, I};
        const void *val[18] = {&p->M, &p->N, &p->K, &nb2, &a->storage->mem, &off[1], &sb[0][0], &sb[0][1],
                               &p->sAm, &p->sAk, &b->storage->mem, &off[2], &sb[1][0], &sb[1][1], &p->sBk,
                               &p->sBn, &out->storage->mem, &off[0]};
        if (tl_set_args(k, 0, 18, sz, val) < 0 ||
            (has_epi && tl_mm_epi_set(k, out->storage->mem, bias_ok ? res->storage->mem : NULL, epi, 1.0f, NULL, 0) < 0))
            return -1;
        if (tl_stream_launch(k, 3, gws, lws, st, 4, 1u, kh->name, &err) != TL_OK)
            return tl_raise(&err);
    }
    if (has_epi && nouter == 1 && !(epi >> 1))           /* tlgpu.jit may move ops after it into the store */
        tl_capture_note_store(k, &(tl_store_note){.out_arg = 16, .off_arg = 17, .bias_arg = TL_MM_EPI_ARG,
                                                   .epi_arg = TL_MM_EPI_ARG + 1, .alpha_arg = TL_MM_EPI_ARG + 2,
                                                   .res_arg = TL_MM_EPI_ARG + 3, .res_off_arg = TL_MM_EPI_ARG + 4,
                                                   .res_alias = !tc, .epi = epi, .N = p->N,
                                                   .out_off = p->off[0], .n = (long)p->M * p->N * nb1 * nb2});
    return 0;
}

/* ValueError naming the op and both shapes; returns NULL. */
static PyObject *
shapes_error(const char *op, const tl_tensor *a, const tl_tensor *b, const char *why)
{
    char sa[128], sb[128];
    tl_shape_str(a->shape, a->ndim, sa, sizeof sa);
    tl_shape_str(b->shape, b->ndim, sb, sizeof sb);
    return PyErr_Format(PyExc_ValueError, "%s: shapes %s and %s %s", op, sa, sb, why);
}

/* Broadcasts the batch dims of a (first nda dims) and b (first ndb) into p and shape; C strides follow
 * the contiguous result. Size-1 dims are dropped and runs every operand walks as one are merged. */
static int
mm_batch(const char *op, tl_tensor *a, int nda, tl_tensor *b, int ndb, mm_problem *p, Py_ssize_t *shape,
         int *nshape)
{
    int nd = nda > ndb ? nda : ndb, sh[TL_MAX_DIMS], st[3][TL_MAX_DIMS], n = 0;
    for (int d = 0; d < nd; d++) {
        int da = d - (nd - nda), db = d - (nd - ndb);
        Py_ssize_t ea = da >= 0 ? a->shape[da] : 1, eb = db >= 0 ? b->shape[db] : 1;
        if (ea != eb && ea != 1 && eb != 1) {
            shapes_error(op, a, b, "have batch dims that cannot be broadcast");
            return -1;
        }
        shape[d] = ea == 1 ? eb : ea;
    }
    *nshape = nd;
    int cst = p->M * p->N;                                /* C's stride for the innermost batch dim */
    for (int d = nd - 1; d >= 0; d--) {
        int da = d - (nd - nda), db = d - (nd - ndb);
        if (shape[d] != 1) {
            sh[n] = to_int(shape[d]);
            st[0][n] = cst;
            st[1][n] = da >= 0 && a->shape[da] != 1 ? to_int(a->strides[da]) : 0;
            st[2][n] = db >= 0 && b->shape[db] != 1 ? to_int(b->strides[db]) : 0;
            n++;
        }
        cst *= to_int(shape[d]);
    }
    p->nbd = 0;                                          /* reverse into row-major order, merging */
    for (int i = n - 1; i >= 0; i--) {
        int q = p->nbd - 1, merge = q >= 0;
        for (int o = 0; o < 3 && merge; o++) merge = p->bst[o][q] == st[o][i] * sh[i];
        if (merge) {
            p->bshape[q] *= sh[i];
            for (int o = 0; o < 3; o++) p->bst[o][q] = st[o][i];
        } else {
            p->bshape[p->nbd] = sh[i];
            for (int o = 0; o < 3; o++) p->bst[o][p->nbd] = st[o][i];
            p->nbd++;
        }
    }
    return 0;
}

/* numpy matmul: a (..., M, K) or (K,), b (..., K, N) or (K,). With res, the result plus res where the kernel
 * can add it (bit 0 of *fused set; res must then be contiguous float32 of the result's shape, or of shape (N,)
 * with b a matrix: a bias added to every row), else just a @ b; act (1 relu, 2 tanh) applied after it where
 * the kernel can (bit 1 of *fused; mm_launch). */
static PyObject *mm_forward_res(const char *op, tl_tensor *a, tl_tensor *b, tl_tensor *res, int act, int *fused);

/* a @ b for two matrices (or batches) of one half dtype, not recorded: on the tensor cores (gemm_tc.h) where
 * they run it, else widened to float32 and the product rounded back. */
static PyObject *
mm_half_plain(const char *op, tl_tensor *a, tl_tensor *b)
{
    tl_tensor *out = NULL;
    int ok = a->shape[a->ndim - 1] == b->shape[b->ndim - 2] ?
             tl_gemm_tc_half(a, b, to_int(a->shape[a->ndim - 2]), to_int(b->shape[b->ndim - 1]),
                             to_int(a->shape[a->ndim - 1]), &out) : 0;
    if (ok != 0) return ok < 0 ? NULL : (PyObject *)out;
    const int prev = tl_grad_set(0);
    PyObject *x = tl_convert(a, TL_F32), *y = x != NULL ? tl_convert(b, TL_F32) : NULL;
    PyObject *r = y != NULL ? mm_forward_res(op, tl_tensor_CAST(x), tl_tensor_CAST(y), NULL, 0, &ok) : NULL;
    tl_grad_set(prev);
    Py_XDECREF(x);
    Py_XDECREF(y);
    return tl_convert_steal(r, a->dtype);
}

/* Whether half products run in the CPU BLAS command (it widens and rounds them; cpu_blas.h): the BLAS path
 * runs here and the tensor cores do not (they come first where usable, the emulated ones in tests too). */
static int
half_on_cpu_blas(void)
{
    return tl_gemm_tc_half_usable() == 0 && tl_cpu_blas_usable();
}

static PyObject *
mm_forward_res(const char *op, tl_tensor *a, tl_tensor *b, tl_tensor *res, int act, int *fused)
{
    mm_problem p = {.act = act};
    /* two operands of one half dtype: the CPU BLAS command, else mm_half_plain (the tensor cores, or widened;
     * nothing fused: the caller adds res, applies act) */
    const int half = TL_IS_HALF(a->dtype) && a->dtype == b->dtype && a->ndim >= 2 && a->ndim <= 3 && b->ndim >= 2 &&
                     b->ndim <= 3;
    if (half && !half_on_cpu_blas()) return mm_half_plain(op, a, b);
    Py_ssize_t shape[TL_MAX_DIMS + 2];
    int nshape = 0;
    tl_tensor *out = NULL;
    if (!half && (tl_check_dtype(op, a, TL_F32) < 0 || tl_check_dtype(op, b, TL_F32) < 0)) return NULL;
    if (a->ndim == 0 || b->ndim == 0) return shapes_error(op, a, b, "include a 0-d operand; use * for scalars");
    int av = a->ndim == 1, bv = b->ndim == 1;
    Py_ssize_t Ka = a->shape[a->ndim - 1], Kb = b->shape[bv ? 0 : b->ndim - 2];
    if (Ka != Kb) return shapes_error(op, a, b, "are not aligned: the contracted dims differ");
    p.M = av ? 1 : to_int(a->shape[a->ndim - 2]);
    p.N = bv ? 1 : to_int(b->shape[b->ndim - 1]);
    p.K = to_int(Ka);
    p.sAm = av ? 0 : to_int(a->strides[a->ndim - 2]);
    p.sAk = to_int(a->strides[a->ndim - 1]);
    p.sBk = to_int(b->strides[bv ? 0 : b->ndim - 2]);
    p.sBn = bv ? 0 : to_int(b->strides[b->ndim - 1]);
    if (mm_batch(op, a, av ? 0 : a->ndim - 2, b, bv ? 0 : b->ndim - 2, &p, shape, &nshape) < 0) return NULL;
    tl_tensor *a2 = NULL, *b2 = NULL;                    /* TF32 on wgmma (gemm_tc.h): the packed rows */
    int kc = av || bv || half ? 0 : tl_gemm_tc_packed(a, b, p.M, p.N, p.K, res, act, fused, &a2);   /* bias, act */
    if (kc != 0) return kc < 0 ? NULL : (PyObject *)a2;
    kc = av || bv || half ? 0 : tl_gemm_tc_kmajor(a, b, p.M, p.N, p.K, &a2, &b2);   /* ... or K-major copies */
    if (kc == 0 && !av && !bv && !half && (kc = tl_gemm_sg_copy_a(a, b, p.M, p.N, p.K, &a2)) > 0)
        b2 = (tl_tensor *)Py_NewRef(b);                  /* NVIDIA float32: a @ b as tn (gemm_sg.h) */
    if (kc != 0) {
        PyObject *r = kc < 0 ? NULL : mm_forward_res(op, a2, b2, res, act, fused);
        Py_XDECREF(a2);
        Py_XDECREF(b2);
        return r;
    }
    if (!av) shape[nshape++] = p.M;
    if (!bv) shape[nshape++] = p.N;
    if (nshape > TL_MAX_DIMS) return shapes_error(op, a, b, "give a result of too many dims");
    if ((out = tl_tensor_empty(half ? a->dtype : TL_F32, nshape, shape)) == NULL) return NULL;
    if (out->storage == NULL) return (PyObject *)out;    /* zero-size: enqueue nothing */
    p.off[1] = to_int(a->offset);
    p.off[2] = to_int(b->offset);
    int row = res != NULL && !bv && res->ndim == 1 && res->shape[0] == p.N && (p.N == 1 || res->strides[0] == 1);
    int full = res != NULL && res->ndim == nshape && tl_tensor_is_contig(res) &&
               memcmp(res->shape, shape, sizeof(Py_ssize_t) * (size_t)nshape) == 0;
    if (res != NULL && (!(row || full) || (res->dtype != TL_F32 && res->dtype != out->dtype) || res->storage == NULL)) {
        res = NULL;                                      /* not in the store's layout: added separately, */
        p.act = 0;                                       /* ... and the activation after that add */
    }
    if (half) {                                          /* CPU devices: the BLAS command, ReLU after it */
        const int r = tl_cpu_blas_mm((const int[]){p.M, p.N, p.K, p.sAm, p.sAk, p.sBk, p.sBn}, p.nbd, p.bshape, p.bst,
                                     p.off, out, a, b, res, NULL, p.act == 1);
        if (r > 0) {
            *fused = (res != NULL) | (p.act == 1 ? 2 : 0);
            return (PyObject *)out;
        }
        Py_DECREF(out);
        return r < 0 ? NULL : mm_half_plain(op, a, b);   /* 0: strides no BLAS takes, widened */
    }
    if (mm_launch(&p, a, b, out, res, fused) < 0) Py_CLEAR(out);
    return (PyObject *)out;
}

static PyObject *
mm_forward(const char *op, tl_tensor *a, tl_tensor *b)
{
    int fused = 0;
    return mm_forward_res(op, a, b, NULL, 0, &fused);
}

/* Records out = a @ b (kind 0) or outer(a, b) (kind 1) for autograd: both operands are saved. */
static PyObject *
record(PyObject *out, tl_tensor *a, tl_tensor *b, int kind)
{
    PyObject *ins[2] = {(PyObject *)a, (PyObject *)b};
    if (out == NULL || !tl_autograd_wanted(ins, 2)) return out;
    tl_node *nd = tl_node_new(&ROW_MATMUL, ins, 2);
    if (nd == NULL) { Py_DECREF(out); return NULL; }
    nd->iarg[0] = kind;
    tl_node_save(nd, a);
    tl_node_save(nd, b);
    tl_node_attach(nd, tl_tensor_CAST(out));
    return out;
}

/* ops.h: a @ b for another family, not recorded (the caller's op records its own node). */
PyObject *
tl_matmul(tl_tensor *a, tl_tensor *b)
{
    return mm_forward("matmul", a, b);
}

static PyObject *
mm_fn(PyObject *const *in, void *op)                     /* float32 operands: the recorded product */
{
    tl_tensor *a = tl_tensor_CAST(in[0]), *b = tl_tensor_CAST(in[1]);
    return record(mm_forward((const char *)op, a, b), a, b, 0);
}

/* ops.h: whether this device multiplies half operands as they are: the tensor cores (gemm_tc.h), or the CPU BLAS
 * command, which widens and rounds them itself (cpu_blas.h); -1 with an exception set. With casts (autocast's
 * float32 operands) the tensor cores only: on CPU devices rounding them in place and multiplying in float32
 * (tl_call_f32) is fewer commands in a training step than casting them (benchmarks/NOTES.md, eleventh session). */
int
tl_matmul_half_native(int casts)
{
    const int tc = tl_gemm_tc_half_usable();
    return tc != 0 || casts ? tc : half_on_cpu_blas();
}

/* a @ b, recorded, in the operands' half dtype (the tensor cores, or the CPU BLAS command: mm_forward) when both
 * are bfloat16 or both float16 (after the autocast cast, when user is set), they are matrices or batches of
 * them, and the device multiplies them natively (tl_matmul_half_native); else NULL with no exception set. */
static PyObject *
mm_half(tl_tensor *a, tl_tensor *b, int user)
{
    const int low = user ? tl_autocast_dtype() : -1;
    if (a->ndim < 2 || a->ndim > 3 || b->ndim < 2 || b->ndim > 3 || !TL_IS_FLOAT(a->dtype) || !TL_IS_FLOAT(b->dtype) ||
        (low < 0 && (a->dtype != b->dtype || !TL_IS_HALF(a->dtype))) || a->shape[a->ndim - 1] != b->shape[b->ndim - 2])
        return NULL;
    if (a->ndim == 3 && b->ndim == 3 && a->shape[0] != b->shape[0] && a->shape[0] != 1 && b->shape[0] != 1) return NULL;
    int ok = tl_matmul_half_native(low >= 0 && (a->dtype != low || b->dtype != low));
    if (ok <= 0) return NULL;                            /* (with the exception set when -1) */
    PyObject *x = low >= 0 && a->dtype != low ? tl_convert(a, low) : Py_NewRef(a), *y = NULL;
    if (x != NULL) y = low >= 0 && b->dtype != low ? tl_convert(b, low) : Py_NewRef(b);
    PyObject *r = y != NULL ? record(mm_forward("matmul", tl_tensor_CAST(x), tl_tensor_CAST(y)), tl_tensor_CAST(x),
                                     tl_tensor_CAST(y), 0) : NULL;
    Py_XDECREF(x);
    Py_XDECREF(y);
    return r;
}

/* a @ b, recorded. Half operands run on the half matrix-vector kernel (a few rows of a, ops_mv_half.h), on the
 * tensor cores (mm_half) or else through float32 by tl_call_f32,
 * which also casts to the autocast dtype when user is set (the products the user asked for; autocast is off
 * in backward anyway). */
static PyObject *
mm_as(const char *op, tl_tensor *a, tl_tensor *b, int user)
{
    PyObject *in[2] = {(PyObject *)a, (PyObject *)b}, *r = NULL;
    if (a->dtype == TL_F32 && b->dtype == TL_F32 && (!user || tl_autocast_dtype() < 0)) return mm_fn(in, (void *)op);
    const int k = tl_mv_half_matmul(a, b, &r);         /* a half weight, few rows: read as stored */
    if (k != 0) return k < 0 ? NULL : r;
    if ((r = mm_half(a, b, user)) != NULL || PyErr_Occurred()) return r;   /* the tensor cores */
    return tl_call_f32(op, mm_fn, in, 2, (void *)op);
}
static inline PyObject *mm(const char *op, tl_tensor *a, tl_tensor *b) { return mm_as(op, a, b, 0); }

/* d(a @ b): da = g @ b^T, db = a^T @ g, with 1-D operands promoted to matrices (and the promoted dim squeezed
 * back out) so the engine's broadcast reduction sees only real batch dims. outer: da = g @ b, db = g^T @ a. */
static int
tl_matmul_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    PyObject *a = (PyObject *)tl_node_saved(nd, 0), *b = a ? (PyObject *)tl_node_saved(nd, 1) : NULL;
    PyObject *a2 = NULL, *b2 = NULL, *g2 = NULL, *t = NULL, *r = NULL;
    int rc = -1;
    if (b == NULL) goto done;
    int av = tl_tensor_CAST(a)->ndim == 1, bv = tl_tensor_CAST(b)->ndim == 1;
    if (nd->iarg[0] == 1) {
        if (tl_wants_grad(nd, 0) && (gin[0] = mm("backward", tl_tensor_CAST(g), tl_tensor_CAST(b))) == NULL) goto done;
        if (tl_wants_grad(nd, 1) && ((t = tl_transpose(tl_tensor_CAST(g), 0, 1)) == NULL ||
                                     (gin[1] = mm("backward", tl_tensor_CAST(t), tl_tensor_CAST(a))) == NULL))
            goto done;
        rc = 0;
        goto done;
    }
    a2 = av ? tl_unsqueeze(tl_tensor_CAST(a), 0) : Py_NewRef(a);
    b2 = bv ? tl_unsqueeze(tl_tensor_CAST(b), -1) : Py_NewRef(b);
    g2 = Py_NewRef(g);
    if (a2 == NULL || b2 == NULL) goto done;
    if (av) Py_SETREF(g2, tl_unsqueeze(tl_tensor_CAST(g2), tl_tensor_CAST(g2)->ndim - (bv ? 0 : 1)));
    if (bv && g2 != NULL) Py_SETREF(g2, tl_unsqueeze(tl_tensor_CAST(g2), -1));
    if (g2 == NULL) goto done;
    if (tl_wants_grad(nd, 0)) {
        if ((t = tl_transpose(tl_tensor_CAST(b2), -1, -2)) == NULL ||
            (r = mm("backward", tl_tensor_CAST(g2), tl_tensor_CAST(t))) == NULL)
            goto done;
        gin[0] = av ? tl_squeeze_dim(tl_tensor_CAST(r), -2) : Py_NewRef(r);
        Py_CLEAR(t);
        Py_CLEAR(r);
        if (gin[0] == NULL) goto done;
    }
    if (tl_wants_grad(nd, 1)) {
        if ((t = tl_transpose(tl_tensor_CAST(a2), -1, -2)) == NULL ||
            (r = mm("backward", tl_tensor_CAST(t), tl_tensor_CAST(g2))) == NULL)
            goto done;
        if ((gin[1] = bv ? tl_squeeze_dim(tl_tensor_CAST(r), -1) : Py_NewRef(r)) == NULL) goto done;
    }
    rc = 0;
done:
    Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(a2); Py_XDECREF(b2); Py_XDECREF(g2); Py_XDECREF(t); Py_XDECREF(r);
    return rc;
}

static PyObject *
nb_matmul(PyObject *x, PyObject *y)
{
    if (!tl_tensor_check(x) || !tl_tensor_check(y)) Py_RETURN_NOTIMPLEMENTED;
    return mm_as("matmul", tl_tensor_CAST(x), tl_tensor_CAST(y), 1);
}

static PyObject *
m_matmul(PyObject *self, PyObject *other)
{
    tl_tensor *b;
    return tl_want_tensor("matmul", other, &b) < 0 ? NULL : mm_as("matmul", tl_tensor_CAST(self), b, 1);
}

static PyObject *
m_dot(PyObject *self, PyObject *other)
{
    tl_tensor *a = tl_tensor_CAST(self), *b;
    if (tl_want_tensor("dot", other, &b) < 0) return NULL;
    if (a->ndim != 1 || b->ndim != 1) return shapes_error("dot", a, b, "are not both 1-D; use matmul");
    return mm_as("dot", a, b, 1);
}

static PyObject *m_outer(PyObject *self, PyObject *other);

static PyObject *
outer_f32(PyObject *const *in, void *Py_UNUSED(ctx))
{
    return m_outer(in[0], in[1]);
}

/* outer(a, b)[i, j] = a[i] * b[j]: a product with K = 1, both contracted strides 0. float16/bfloat16 operands
 * run it in float32 (tl_call_wide), the result in their promoted dtype. */
static PyObject *
m_outer(PyObject *self, PyObject *other)
{
    tl_tensor *a = tl_tensor_CAST(self), *b, *out;
    mm_problem p = {0};
    if (tl_want_tensor("outer", other, &b) < 0) return NULL;
    if ((TL_IS_HALF(a->dtype) && TL_IS_FLOAT(b->dtype)) || (TL_IS_HALF(b->dtype) && TL_IS_FLOAT(a->dtype)))
        return tl_call_wide("outer", outer_f32, (PyObject *[]){self, (PyObject *)b}, 2, NULL);
    if (tl_check_dtype("outer", a, TL_F32) < 0 || tl_check_dtype("outer", b, TL_F32) < 0) return NULL;
    if (a->ndim != 1 || b->ndim != 1) return shapes_error("outer", a, b, "are not both 1-D");
    Py_ssize_t shape[2] = {a->shape[0], b->shape[0]};
    if ((out = tl_tensor_empty(TL_F32, 2, shape)) == NULL || out->storage == NULL) return (PyObject *)out;
    p.M = to_int(shape[0]);
    p.N = to_int(shape[1]);
    p.K = 1;
    p.sAm = to_int(a->strides[0]);
    p.sBn = to_int(b->strides[0]);
    p.off[1] = to_int(a->offset);
    p.off[2] = to_int(b->offset);
    int fused = 0;
    if (mm_launch(&p, a, b, out, NULL, &fused) < 0) Py_CLEAR(out);
    return record((PyObject *)out, a, b, 1);
}

/* addmm(input, mat1, mat2): input + mat1 @ mat2, input broadcast as by +. One launch on the mul_mv path (at
 * most 8 rows times a transposed weight) when input is contiguous float32 of the product's shape and
 * nothing requires grad: the kernel adds it as it stores (a decoder's residual). Otherwise the product and
 * an add, recorded for autograd as those two ops. */
static PyObject *
addmm_fn(PyObject *const *in, void *Py_UNUSED(ctx))
{
    PyObject *r;
    int fused = 0;
    r = tl_autograd_wanted(in, 3) ? mm("addmm", tl_tensor_CAST(in[1]), tl_tensor_CAST(in[2]))
                                  : mm_forward_res("addmm", tl_tensor_CAST(in[1]), tl_tensor_CAST(in[2]),
                                                   tl_tensor_CAST(in[0]), 0, &fused);
    if (r != NULL && !fused) Py_SETREF(r, PyNumber_Add(in[0], r));
    return r;
}

static PyObject *
fn_addmm(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *io, *ao, *bo;
    tl_tensor *in, *a, *b;
    if (!PyArg_ParseTuple(args, "OOO:addmm", &io, &ao, &bo)) return NULL;
    if (tl_want_tensor("addmm", io, &in) < 0 || tl_want_tensor("addmm", ao, &a) < 0 || tl_want_tensor("addmm", bo, &b) < 0)
        return NULL;
    PyObject *ins[3] = {io, ao, bo}, *r = NULL;
    if (in->dtype == TL_F32 && a->dtype == TL_F32 && b->dtype == TL_F32 && tl_autocast_dtype() < 0)
        return addmm_fn(ins, NULL);
    const int k = tl_mv_half_addmm(io, a, b, &r);      /* a half weight, few rows: read as stored */
    if (k != 0) return k < 0 ? NULL : r;
    return tl_call_f32("addmm", addmm_fn, ins, 3, NULL);
}

/* dw = g2^T @ x2 and db = the column sums of g2 as one command on the CPU BLAS path: 1 done, 0 not there (the
 * caller runs the product and a sum), -1 with an exception set. */
int
tl_linear_grads_blas(tl_tensor *g2, tl_tensor *x2, PyObject **gw, PyObject **gb)
{
    const int rows = to_int(g2->shape[0]), N = to_int(g2->shape[1]), K = to_int(x2->shape[1]);
    tl_tensor *w = NULL, *b = NULL;
    gemm_params q;
    int v, r, none[3][TL_MAX_DIMS] = {{0}};
    const int dt = g2->dtype;                           /* float32, or one half dtype (the command widens it) */
    if (rows == 0 || N == 0 || K == 0 || x2->dtype != dt || (dt != TL_F32 && !TL_IS_HALF(dt))) return 0;
    if (dt != TL_F32 && !half_on_cpu_blas()) return 0;
    if (gemm_check(0, &q) < 0 || (v = choose_tiled(&q)) < 0) return -1;
    if (q.v[GP_DIRECT] == 0 || v != MM_GEMM) return 0;  /* a GPU, or TLGPU_MATMUL_KERNEL forced a kernel */
    if ((w = tl_tensor_empty(dt, 2, (Py_ssize_t[]){N, K})) == NULL ||
        (b = tl_tensor_empty(dt, 1, (Py_ssize_t[]){N})) == NULL)
        r = -1;
    else
        r = tl_cpu_blas_mm((const int[]){N, K, rows, to_int(g2->strides[1]), to_int(g2->strides[0]),
                                         to_int(x2->strides[0]), to_int(x2->strides[1])},
                           0, none[0], (const int(*)[TL_MAX_DIMS])none, (const int[]){0, to_int(g2->offset),
                           to_int(x2->offset)}, w, g2, x2, NULL, b, 0);
    if (r <= 0) { Py_XDECREF(w); Py_XDECREF(b); return r; }
    *gw = (PyObject *)w;
    *gb = (PyObject *)b;
    return 1;
}

/* ops.h: a @ b (+ res) (then act) where the kernel can fuse them, not recorded; *fused says what it did. */
PyObject *
tl_matmul_res(const char *op, tl_tensor *a, tl_tensor *b, tl_tensor *res, int act, int *fused)
{
    *fused = 0;
    return mm_forward_res(op, a, b, res, act, fused);
}

/* The GEMM parameters of a tier on this device (after the environment overrides), for benchmarks and docs. */
static PyObject *
fn_gemm_params(PyObject *Py_UNUSED(m), PyObject *args)
{
    gemm_params q;
    int tier = 0;
    PyObject *d = NULL;
    if (!PyArg_ParseTuple(args, "|i:_gemm_params", &tier)) return NULL;
    if (tier < 0 || tier >= TL_GEMM_TIERS) return PyErr_Format(PyExc_ValueError, "_gemm_params: tier is 0, 1 or 2");
    if (gemm_check(tier, &q) < 0 || (d = PyDict_New()) == NULL) return NULL;
    for (int i = 0; i < TL_GP_COUNT; i++) {
        PyObject *v = PyLong_FromLong(q.v[i]);
        if (v == NULL || PyDict_SetItemString(d, tl_gemm_param_names[i], v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

/* The tier an [M, K] @ [K, N] product (times `batch`) runs on the tiled kernel, for tests and benchmarks. */
static PyObject *
fn_gemm_tier(PyObject *Py_UNUSED(m), PyObject *args)
{
    mm_problem p = {0};
    gemm_params q;
    int batch = 1;
    if (!PyArg_ParseTuple(args, "ii|i:_gemm_tier", &p.M, &p.N, &batch)) return NULL;
    if (p.M < 1 || p.N < 1 || batch < 1) return PyErr_Format(PyExc_ValueError, "_gemm_tier: sizes must be >= 1");
    p.nbd = 1;
    p.bshape[0] = batch;
    int tier = pick_tier(&p, &q);
    return tier < 0 ? NULL : PyLong_FromLong(tier);
}

/* (tier, S, ks) of an [M, K] @ [K, N] product (times `batch`) on the tiled kernel here: split-K's slices (1 for
 * none) of ks elements, the last taking the rest (gemm_splitk.h), under the current switch. For tests. */
static PyObject *
fn_gemm_plan(PyObject *Py_UNUSED(m), PyObject *args)
{
    mm_problem p = {0};
    gemm_params q;
    int batch = 1, ks, S, mode, tier;
    if (!PyArg_ParseTuple(args, "iii|i:_gemm_plan", &p.M, &p.K, &p.N, &batch)) return NULL;
    if (p.M < 1 || p.K < 1 || p.N < 1 || batch < 1) return PyErr_Format(PyExc_ValueError, "_gemm_plan: sizes >= 1");
    p.nbd = batch > 1, p.bshape[0] = batch, p.bst[0][0] = p.M * p.N;
    if ((mode = tl_gemm_splitk_mode()) < 0 || gemm_check(0, &q) < 0 || choose_tiled(&q) < 0) return NULL;
    const int direct = q.v[GP_DIRECT] != 0;
    if ((tier = pick_tier(&p, &q)) < 0 || (S = mm_slices(&p, &q, mode, direct, &ks)) < 0) return NULL;
    return Py_BuildValue("(iii)", tier, S, ks);
}

static const PyMethodDef mm_methods[] = {
    {"matmul", m_matmul, METH_O, "matmul(other): self @ other with numpy semantics (float32)."},
    {"dot", m_dot, METH_O, "dot(other): inner product of two 1-D tensors, a 0-d tensor."},
    {"outer", m_outer, METH_O, "outer(other): the (len(self), len(other)) outer product of two 1-D tensors."},
    {NULL, NULL, 0, NULL},
};

static const PyMethodDef mm_functions[] = {
    {"addmm", fn_addmm, METH_VARARGS, "addmm(input, mat1, mat2): input + mat1 @ mat2 (fused on the mul_mv path)."},
    {"_gemm_params", fn_gemm_params, METH_VARARGS, "_gemm_params(tier=0): a GEMM tier's tile parameters here."},
    {"_cpu_blas", (PyCFunction)(void (*)(void))tl_cpu_blas_py, METH_VARARGS | METH_KEYWORDS,
     "_cpu_blas(paths=None, enable=None): the CPU BLAS path's state (docs/cpu.md)."},
    {"set_matmul_precision", tl_gemm_tc_set_precision, METH_O,
     "set_matmul_precision(p): 'highest' (float32, the default), or 'high' / 'tf32': TF32 tensor cores for "
     "matmul, addmm and Linear on NVIDIA devices of compute capability >= 8.0 (ignored elsewhere)."},
    {"get_matmul_precision", tl_gemm_tc_get_precision, METH_NOARGS, "get_matmul_precision(): 'highest' or 'high'."},
    {"_gemm_tc", tl_gemm_tc_info, METH_VARARGS, "_gemm_tc([config]): the tensor-core path's state; forces a tile row."},
    {"_gemm_sg", tl_gemm_sg_info, METH_VARARGS, "_gemm_sg([config]): the NVIDIA float32 kernel's state; forces a row."},
    {"_gemm_tier", fn_gemm_tier, METH_VARARGS, "_gemm_tier(M, N, batch=1): the GEMM tier such a product runs."},
    {"_gemm_plan", fn_gemm_plan, METH_VARARGS, "_gemm_plan(M, K, N, batch=1): (tier, split-K slices, slice length)."},
    {"_gemm_splitk_rule", tl_gemm_splitk_rule_py, METH_VARARGS,
     "_gemm_splitk_rule(M, K, N, MWG, NWG, KWG, units, batch=1): split-K's (slices, slice length) for that tile."},
#ifdef TL_TEST_HOOKS
    {"_gemm_splitk", tl_gemm_splitk_py, METH_VARARGS, "_gemm_splitk([S]): split-K's switch (None: the rule, 1: "
     "never, S: forced on any device) and counts."},
    {"_ptx_patch", tl_ptx_patch_py, METH_O, "_ptx_patch(text): the sm_90a rewrite of a PTX text (ptx_patch.h)."},
#endif
    {NULL, NULL, 0, NULL},
};

static const PyType_Slot mm_slots[] = {
    {Py_nb_matrix_multiply, nb_matmul},
    {0, NULL},
};

static const tl_op_row ROW_MATMUL = {"MatmulBackward", tl_matmul_backward};
static const tl_op_row *const matmul_rows[] = {&ROW_MATMUL, NULL};

/* tl_gemm_init (gemm_sg.c): the GEMM layer's program build rules and binary hook, registered at import. */
const tl_family tl_family_matmul = {mm_functions, mm_methods, mm_slots, NULL, "matmul dot outer",
                                    .rows = matmul_rows, .init = tl_gemm_init};
