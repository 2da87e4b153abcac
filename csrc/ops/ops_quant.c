/* ops_quant.c: the q4_0 and q8_0 op family (kernels/quant.cl): dequantize, get_rows and the matrix-vector
 * product of float32 activations by quantized weights, one set of functions for both formats (table fmts).
 * The Python face is tlgpu/quant.py (classes Q4_0, Q8_0), which quantizes on the host and hands these
 * private functions the two device arrays of the flat layout: qs, an int32 tensor of 4 (q4_0: 16 bytes of
 * nibbles) or 8 (q8_0: 32 int8) words per block, and d, an int32 tensor holding the N*K/32 fp16 scales two
 * to a word. Invariants: K is a multiple of 32; qs and d are contiguous, as quant.py makes
 * them; the float kernel choice (work-group tree or one row per work-item) follows the GEMM table's DIRECT
 * flag so TLGPU_GEMM_PARAMS=DIRECT=0 exercises the GPU kernels on a CPU device; GPUs default to the integer-dot
 * kernels (one launch, quant_mvq.h, or two, quant_mvx.h and the tensor-core quant_mvm.cl: auto_impl), which give
 * the same bits as each other;
 * no autograd (weights are constants; activations that require grad are refused). */
#include "ops_common.h"
#include "autograd.h"
#include "cl_runtime.h"

#include "cpu_quant.h"
#include "gemm_params.h"
#include "settings.h"

/* One row per format: its name, qs words per block of 32 weights, and its kernels. */
typedef struct {
    const char *name;
    int words;
    tl_kernel deq, rows, mv[4], mv_rows, mvq[4], mvx[2][4];   /* mvx: NRW 4 and 8 (kernels/quant_mvx.h) */
    tl_kernel mvm;                                      /* 2-8 rows on tensor cores (kernels/quant_mvm.cl) */
} qfmt;

#define QFMT(F, W) {#F, W, TL_KERNEL("quant", "tl_dequantize_" #F "_f32"),                                   \
    TL_KERNEL("quant", "tl_get_rows_" #F "_f32"),                                                            \
    {TL_KERNEL("quant", "tl_mul_mv_" #F "_r1_f32"), TL_KERNEL("quant", "tl_mul_mv_" #F "_r2_f32"),               \
     TL_KERNEL("quant", "tl_mul_mv_" #F "_r4_f32"), TL_KERNEL("quant", "tl_mul_mv_" #F "_r8_f32")},              \
    TL_KERNEL("quant", "tl_mul_mv_" #F "_rows_f32"),                                                          \
    {TL_KERNEL("quant", "tl_mvq_" #F "_r1_f32"), TL_KERNEL("quant", "tl_mvq_" #F "_r2_f32"),                     \
     TL_KERNEL("quant", "tl_mvq_" #F "_r4_f32"), TL_KERNEL("quant", "tl_mvq_" #F "_r8_f32")},                   \
    {{MVX(F, 1, 4), MVX(F, 2, 4), MVX(F, 4, 4), MVX(F, 8, 4)},                                                 \
     {MVX(F, 1, 8), MVX(F, 2, 8), MVX(F, 4, 8), MVX(F, 8, 8)}}, TL_KERNEL("quant_mvm", "tl_mvqm_" #F "_f32")}
#define MVX(F, R, W) TL_KERNEL("quant", "tl_mvqx_" #F "_r" #R "_n" #W "_f32")
enum { Q4_0, Q8_0, NFMT };
static qfmt fmts[NFMT] = {QFMT(q4_0, 4), QFMT(q8_0, 8)};
static const size_t I = sizeof(int), Mm = sizeof(cl_mem);
#define MVQ_NRW 4                                         /* weight rows per warp: kernels/quant_mvq.h */
#define MVM_LANES 256
#define MVM_EMU_WORDS 192

/* Parses (qs, d, N, K) at the front of args and checks the flat arrays of format f. */
static int
q_args(const qfmt *f, const char *op, PyObject *qo, PyObject *dq, int N, int K, tl_tensor **qs, tl_tensor **d)
{
    if (!tl_tensor_check(qo) || !tl_tensor_check(dq)) {
        PyErr_Format(PyExc_TypeError, "%s: qs and d must be int32 Tensors", op);
        return -1;
    }
    *qs = tl_tensor_CAST(qo);
    *d = tl_tensor_CAST(dq);
    if (tl_check_dtype(op, *qs, TL_I32) < 0 || tl_check_dtype(op, *d, TL_I32) < 0) return -1;
    if (N < 0 || K < 0 || K % 32 != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %s shape (%d, %d): the row length must be a multiple of 32", op, f->name,
                     N, K);
        return -1;
    }
    Py_ssize_t nblk = (Py_ssize_t)N * (K / 32);
    if (!tl_tensor_is_contig(*qs) || !tl_tensor_is_contig(*d) || tl_tensor_numel(*qs) != nblk * f->words ||
        tl_tensor_numel(*d) < (nblk + 1) / 2 || (*qs)->offset != 0 || (*d)->offset != 0) {
        PyErr_Format(PyExc_ValueError, "%s: %s arrays (%zd words, %zd scale words) do not hold a (%d, %d) matrix",
                     op, f->name, tl_tensor_numel(*qs), tl_tensor_numel(*d), N, K);
        return -1;
    }
    return 0;
}

static PyObject *
dequantize(qfmt *f, PyObject *args)
{
    PyObject *qo, *dq;
    int N, K;
    tl_tensor *qs, *d, *out;
    if (!PyArg_ParseTuple(args, "OOii:dequantize", &qo, &dq, &N, &K)) return NULL;
    if (q_args(f, "dequantize", qo, dq, N, K, &qs, &d) < 0) return NULL;
    Py_ssize_t shape[2] = {N, K};
    if ((out = tl_tensor_empty(TL_F32, 2, shape)) == NULL || out->storage == NULL) return (PyObject *)out;
    int nblk = N * (K / 32);
    const size_t sz[4] = {I, Mm, Mm, Mm};
    const void *v[4] = {&nblk, &qs->storage->mem, &d->storage->mem, &out->storage->mem};
    tl_storage *st[3] = {out->storage, qs->storage, d->storage};
    if (tl_kernel_py(&f->deq) == NULL || tl_set_args(f->deq.k, 0, 4, sz, v) < 0 ||
        tl_launch_1d(&f->deq, (size_t)nblk, st, 3, 1u) < 0)
        Py_CLEAR(out);
    return (PyObject *)out;
}

/* _q4_0_get_rows(qs, d, N, K, ids): ids an int32 Tensor, or one int (a kernel argument, no upload); checked
 * in quant.py when given as ints. */
static PyObject *
get_rows(qfmt *f, PyObject *args)
{
    PyObject *qo, *dq, *io;
    int N, K, has_ids = 1, id0 = 0;
    tl_tensor *qs, *d, *ids = NULL, *out = NULL;
    if (!PyArg_ParseTuple(args, "OOiiO:embedding", &qo, &dq, &N, &K, &io)) return NULL;
    if (q_args(f, "embedding", qo, dq, N, K, &qs, &d) < 0) return NULL;
    if (PyLong_Check(io)) {
        long id = PyLong_AsLong(io);
        if (id == -1 && PyErr_Occurred()) return NULL;
        if (id < 0 || id >= N) return PyErr_Format(PyExc_IndexError, "embedding: id %ld outside the table's %d rows", id, N);
        has_ids = 0;
        id0 = (int)id;
    } else {
        if (!tl_tensor_check(io)) return PyErr_Format(PyExc_TypeError, "embedding: ids must be an int32 Tensor");
        tl_tensor *it = tl_tensor_CAST(io);
        if (tl_check_dtype("embedding", it, TL_I32) < 0) return NULL;
        if (N == 0 && tl_tensor_numel(it) > 0) {        /* every id is out of range, known without a sync */
            char s[128];
            tl_shape_str(it->shape, it->ndim, s, sizeof s);
            return PyErr_Format(PyExc_IndexError, "embedding: the %s table (0, %d) has no rows for ids of shape %s",
                                f->name, K, s);
        }
        if ((ids = tl_tensor_contiguous(it)) == NULL) return NULL;
    }
    Py_ssize_t shape[TL_MAX_DIMS] = {1};
    int nd = has_ids ? ids->ndim : 1;
    if (nd + 1 > TL_MAX_DIMS) { PyErr_SetString(PyExc_ValueError, "embedding: too many id dims"); goto done; }
    if (has_ids) memcpy(shape, ids->shape, sizeof(Py_ssize_t) * (size_t)nd);
    shape[nd] = K;
    if ((out = tl_tensor_empty(TL_F32, nd + 1, shape)) == NULL || out->storage == NULL) goto done;
    int n = has_ids ? (int)tl_tensor_numel(ids) : 1, nb = K / 32, oi = has_ids ? (int)ids->offset : 0;
    cl_mem imem = (has_ids ? ids : qs)->storage->mem;   /* without ids: never read */
    const size_t sz[10] = {I, I, I, Mm, I, I, I, Mm, Mm, Mm};
    const void *v[10] = {&n, &N, &nb, &imem, &oi, &has_ids, &id0, &qs->storage->mem, &d->storage->mem,
                         &out->storage->mem};
    tl_storage *st[4] = {out->storage, qs->storage, d->storage, has_ids ? ids->storage : NULL};
    if (tl_kernel_py(&f->rows) == NULL || tl_set_args(f->rows.k, 0, 10, sz, v) < 0 ||
        tl_launch_1d(&f->rows, (size_t)n * (size_t)nb, st, 3 + has_ids, 1u) < 0)
        Py_CLEAR(out);
done:
    Py_XDECREF(ids);
    return (PyObject *)out;
}

/* Whether the quant program is built with -DMVQ_MMA=1 (quant_mvm.cl's mma.sync): TL_NV_PTX and compute
 * capability 8.0 or more. */
static int
nv_mma(const tl_runtime *rt, const char *user)
{
    return tl_runtime_nv_ptx(rt, user) && tl_runtime_nv_cc(rt) >= 80;
}

/* The prologue alone, (R, K) = glu and/or rms_norm of x's rows (x contiguous, xc), one work-group a row. */
static tl_kernel prologue_k = TL_KERNEL("quant", "tl_mvq_prologue_f32");

static tl_tensor *
prologue(tl_tensor *xc, int K, tl_tensor *nw, float eps, int glu)
{
    Py_ssize_t shape[2] = {xc->shape[0], K};
    tl_tensor *out = tl_tensor_empty(TL_F32, 2, shape);
    if (out == NULL || out->storage == NULL || tl_kernel_py(&prologue_k) == NULL) return out;
    size_t l = 1;
    while (l * 2 <= prologue_k.wg && l * 2 <= 256) l *= 2;
    int ox = (int)xc->offset, sx = (int)xc->shape[1], has_norm = nw != NULL;
    cl_mem nmem = (has_norm ? nw : xc)->storage->mem;   /* without a norm: never read */
    const size_t sz[10] = {I, Mm, I, I, Mm, I, sizeof(float), I, Mm, l * sizeof(float)};
    const void *v[10] = {&K, &xc->storage->mem, &ox, &sx, &nmem, &has_norm, &eps, &glu, &out->storage->mem, NULL};
    size_t gws = (size_t)shape[0] * l;
    tl_err err = {0};
    tl_storage *st[3] = {out->storage, xc->storage, has_norm ? nw->storage : NULL};
    if (tl_set_args(prologue_k.k, 0, 10, sz, v) < 0) Py_CLEAR(out);
    else if (gws > 0 && tl_stream_launch(prologue_k.k, 1, &gws, &l, st, 3, 1u, prologue_k.name, &err) != TL_OK) {
        tl_raise(&err);
        Py_CLEAR(out);
    }
    return out;
}

/* Checks the prologue's norm weight (None, or a float32 Tensor (K,)): *nw a new contiguous reference or NULL. */
static int
norm_arg(const char *op, PyObject *no, int K, tl_tensor **nw)
{
    *nw = NULL;
    if (no == Py_None) return 0;
    if (!tl_tensor_check(no)) return PyErr_Format(PyExc_TypeError, "%s: norm must be a float32 Tensor", op), -1;
    tl_tensor *t = tl_tensor_CAST(no);
    if (tl_check_dtype(op, t, TL_F32) < 0) return -1;
    if (t->ndim != 1 || t->shape[0] != K) {
        char s[128];
        tl_shape_str(t->shape, t->ndim, s, sizeof s);
        return PyErr_Format(PyExc_ValueError, "%s: norm %s must be a vector of the row length %d", op, s, K), -1;
    }
    return (*nw = tl_tensor_contiguous(t)) == NULL ? -1 : 0;
}

/* Lanes of an integer-dot group: up to 256 (the kernel's limit), fewer while that leaves under two groups a
 * compute unit (rows: weight rows a warp owns). 0 when the kernel cannot take a warp. */
static size_t
mvq_lanes(const tl_runtime *rt, const tl_kernel *kh, int N, int rows)
{
    size_t L = 256;
    while (L > kh->wg) L /= 2;
    if (L < 32) return 0;
    const size_t cus = rt->info.compute_units ? rt->info.compute_units : 1;
    while (L > 64 && (size_t)(N + L / 32 * rows - 1) / (L / 32 * rows) < 2 * cus) L /= 2;  /* fill the device */
    return L;
}

/* The one-launch integer-dot kernel (quant_mvq.h): x staged in chunks of KC columns (K, or a multiple of 1024
 * so each lane meets the blocks it would meet unchunked) in at most 32 KiB of local memory. Returns 0
 * launched, 1 when this device cannot run it (too little local memory or too small a work-group: the caller's
 * kernels run), -1 with an exception. sz/v: the 12 arguments the float kernels take too; st: the 6 storages. */
static int
launch_mvq(qfmt *f, const tl_runtime *rt, int nv, int rv, int N, int K, int R, tl_tensor *nw, float eps, int glu,
           const size_t *sz, const void **v, tl_storage **st)
{
    tl_kernel *kh = &f->mvq[rv];
    const size_t rr = (size_t)1 << rv;
    if (tl_kernel_py(kh) == NULL) return -1;
    size_t L = mvq_lanes(rt, kh, N, MVQ_NRW);
    if (L == 0) return 1;
    size_t red = (L > 32 * rr ? L : 32 * rr) + rr;       /* lanes8 scratch, then the norm scales */
    if (!nv && red < (MVQ_NRW * rr + 1) * L) red = (MVQ_NRW * rr + 1) * L;   /* MVQ_FINISH's local-memory form */
    red *= sizeof(float);
    size_t budget = rt->info.local_mem > red + 1024 ? rt->info.local_mem - red - 1024 : 0;
    if (budget > 32768) budget = 32768;
    const size_t per = (size_t)R * 40 / 32;              /* bytes of local memory a column: R int8 + scales */
    size_t kmax = budget / per / 32 * 32;
    int KC = (size_t)K <= kmax ? K : (int)(kmax / 1024 * 1024), has_norm = nw != NULL;
    if (KC == 0) return 1;
    cl_mem nmem = has_norm ? nw->storage->mem : *(const cl_mem *)v[3];   /* without a norm: x, never read */
    const size_t sz2[8] = {Mm, I, sizeof(float), I, I, (size_t)R * (size_t)KC, (size_t)R * (size_t)KC / 4, red};
    const void *v2[8] = {&nmem, &has_norm, &eps, &glu, &KC, NULL, NULL, NULL};
    if (tl_set_args(kh->k, 0, 12, sz, v) < 0 || tl_set_args(kh->k, 12, 8, sz2, v2) < 0) return -1;
    size_t groups = ((size_t)N + L / 32 * MVQ_NRW - 1) / (L / 32 * MVQ_NRW), gws = groups * L;
    tl_err err = {0};
    if (tl_stream_launch(kh->k, 1, &gws, &L, st, 6, 1u, kh->name, &err) != TL_OK) return tl_raise(&err), -1;
    return 0;
}

/* x quantized once per launch (kernels/quant_mvx.h), R rows of int8 blocks in a global scratch. */
static tl_kernel quantize_x_k = TL_KERNEL("quant", "tl_mvq_quantize_x_f32");

/* The two-launch integer-dot product (quant_mvx.h, quant_mvm.cl): tl_mvq_quantize_x_f32 into a scratch, then
 * kernel kh in groups of L lanes owning rows weight rows each, with red bytes of local memory. Returns as
 * launch_mvq; v and st as there. */
static int
launch_two(const tl_runtime *rt, tl_kernel *kh, size_t L, int rows, size_t red, int N, int K, int R, tl_tensor *nw,
           float eps, int glu, const void **v, tl_storage **st)
{
    const int nb = K / 32, has_norm = nw != NULL;
    size_t lq = 256;
    while (lq > quantize_x_k.wg) lq /= 2;
    if (L == 0 || L > kh->wg || lq < 32 || red + 1024 > rt->info.local_mem) return 1;
    Py_ssize_t words = (Py_ssize_t)R * nb * 10;          /* two planes of 8 words a block, then (dx, sum q) */
    tl_tensor *xs = tl_tensor_empty(TL_I32, 1, &words);
    if (xs == NULL) return -1;
    int rc = -1;
    tl_err err = {0};
    cl_mem nmem = has_norm ? nw->storage->mem : *(const cl_mem *)v[3];   /* without a norm: x, never read */
    const size_t qsz[11] = {I, I, Mm, I, I, Mm, I, sizeof(float), I, Mm, lq * sizeof(float)};
    const void *qv[11] = {&K, &R, v[3], v[4], v[5], &nmem, &has_norm, &eps, &glu, &xs->storage->mem, NULL};
    size_t qg[2] = {tl_round_up((size_t)nb * 8, lq), (size_t)R}, ql[2] = {lq, 1};
    tl_storage *qst[3] = {xs->storage, st[1], st[5]};
    if (tl_set_args(quantize_x_k.k, 0, 11, qsz, qv) < 0) goto done;
    if (tl_stream_launch(quantize_x_k.k, 2, qg, ql, qst, 3, 1u, quantize_x_k.name, &err) != TL_OK) {
        tl_raise(&err);
        goto done;
    }
    const size_t msz[11] = {I, I, I, Mm, Mm, Mm, Mm, Mm, I, I, red};
    const void *mv[11] = {v[0], v[1], v[2], &xs->storage->mem, v[6], v[7], v[8], v[9], v[10], v[11], NULL};
    size_t gws = ((size_t)N + rows - 1) / (size_t)rows * L;
    tl_storage *mst[5] = {st[0], xs->storage, st[2], st[3], st[4]};
    if (tl_set_args(kh->k, 0, 11, msz, mv) < 0) goto done;
    if (tl_stream_launch(kh->k, 1, &gws, &L, mst, 5, 1u, kh->name, &err) != TL_OK) {
        tl_raise(&err);
        goto done;
    }
    rc = 0;
done:
    Py_DECREF(xs);
    return rc;
}

/* The two-launch kernel of quant_mvx.h with NRW = 4 << wsel weight rows a warp. */
static int
launch_mvx(qfmt *f, const tl_runtime *rt, int nv, int rv, int wsel, int N, int K, int R, tl_tensor *nw, float eps,
           int glu, const void **v, tl_storage **st)
{
    tl_kernel *kh = &f->mvx[wsel][rv];
    const int nrw = 4 << wsel;
    if (tl_kernel_py(kh) == NULL || tl_kernel_py(&quantize_x_k) == NULL) return -1;
    size_t L = mvq_lanes(rt, kh, N, nrw);
    const size_t red = nv ? 1 : (size_t)nrw * ((size_t)1 << rv) + 1;   /* floats a lane: MVQ_FINISH's form */
    while (L > 32 && red * L * sizeof(float) + 1024 > rt->info.local_mem) L /= 2;
    return launch_two(rt, kh, L, (int)(L / 32) * nrw, red * L * sizeof(float), N, K, R, nw, eps, glu, v, st);
}

/* A knob of quant_mvm.cl that a sweep may set in TLGPU_BUILD_OPTIONS ("-DMVM_MT_q4_0=", "-DMVM_ASYNC=": the
 * kernel's layout depends on it, so its local memory does), else dflt (the kernel's own default). */
static int
mvm_knob(const char *key, int dflt)
{
    const char *user = tl_setting_str(TL_SET_BUILD_OPTIONS), *o;
    return user != NULL && (o = strstr(user, key)) != NULL ? atoi(o + strlen(key)) : dflt;
}

/* The tensor-core kernel of quant_mvm.cl: MVM_LANES lanes and 16 x MVM_MT_<fmt> weight rows a group (2 for q4_0,
 * 1 for q8_0: 16 KB of weights a chunk of 32 blocks); its local memory the larger of a chunk's staging (the
 * weights, or two chunks' with MVM_ASYNC; x's planes; the weight scales, float or with MVM_ASYNC half; x's
 * scales and sums) and the 32 partial sums of each output, then, without mma.sync, the emulation's words (the
 * kernel's layout: quant_mvm.cl). */
static int
launch_mvm(qfmt *f, const tl_runtime *rt, int mma, int N, int K, int R, tl_tensor *nw, float eps, int glu,
           const void **v, tl_storage **st)
{
    if (tl_kernel_py(&f->mvm) == NULL || tl_kernel_py(&quantize_x_k) == NULL) return -1;
    char key[24];
    snprintf(key, sizeof key, "-DMVM_MT_%s=", f->name);
    const size_t rows = 16 * (size_t)mvm_knob(key, f->words == 4 ? 2 : 1), p = 36, w = f->words;
    const int async = mvm_knob("-DMVM_ASYNC=", 0) != 0;
    const size_t sw = async ? 2 * rows * 32 * w : rows * (w * p + (w == 8 ? 16 : 0));
    const size_t sd = async ? rows * p / 2 : rows * p;
    const size_t stage = sw + sd + (2 * 8 * 4 + 16) * p, parts = 32 * rows * 8;
    const size_t red = ((stage > parts ? stage : parts) + (mma ? 0 : 8 * MVM_EMU_WORDS)) * sizeof(float);
    return launch_two(rt, &f->mvm, MVM_LANES, (int)rows, red, N, K, R, nw, eps, glu, v, st);
}

/* GPUs' choice among the integer kernels (impl 2-5 of mul_mv): the one-launch kernel where x's staging in every
 * group costs less than a second launch (decode: one row of a weight under 64M values, or a small weight),
 * else the two-launch ones: from 4 rows the tensor-core kernel where the device has mma.sync (its time hardly
 * depends on the rows), else 8 weight rows a warp for q4_0 (each x block from L1 serves 8 rows) and 4 for one
 * row of q8_0 (twice the weight bytes a block: fewer rows keep more groups in flight). Set from bench_gemm
 * --quant on the H200 (benchmarks/NOTES.md, fourth and ninth sessions): [1,8192]x[65536,8192]^T q4_0 0.82 of
 * float32's read bandwidth with 8 rows a warp (0.67 with 4), q8_0 0.91 with 4 (0.82 with 8); with 2 / 4 / 8
 * rows q8x8 102 / 134 / 194 us (q4_0), 152 / 273 / 253 (q8_0), the tensor-core kernel ~131 (q4_0) and ~188
 * (q8_0) for any of them. */
static int
auto_impl(const qfmt *f, int N, int K, int R, int mma)
{
    const double nk = (double)N * (double)K;
    if (nk < (R == 1 ? 67108864.0 : 4194304.0)) return 2;
    if (mma && R >= 4) return 5;
    return f->words == 8 && R == 1 ? 3 : 4;
}

/* _q4_0_mul_mv(x, qs, d, N, K, res=None, norm=None, eps=1e-5, glu=0, impl=0): x (R, K) float32 with R <= 8
 * ((R, 2K) with glu) -> (R, N) = p(x) @ W^T (+ res, a contiguous float32 (R, N), added as y is stored:
 * addmm); p the prologue (quant_mvq.h: glu, then rms_norm with the weight norm). impl: 0 the device's
 * default (the integer-dot kernel on GPUs, the float row kernel on CPUs), 1 the float kernels (GPU tree or
 * CPU rows, as DIRECT says; a prologue is then a launch of its own), 2 the one-launch integer-dot kernel
 * (quant_mvq.h), 3 and 4 the two-launch one (quant_mvx.h: x quantized once, then 4 or 8 weight rows a warp), 5
 * the two-launch tensor-core one (quant_mvm.cl). */
static PyObject *
mul_mv(qfmt *f, PyObject *args)
{
    PyObject *xo, *qo, *dq, *ro = Py_None, *no = Py_None;
    int N, K, glu = 0, impl = 0;
    double eps_d = 1e-5;
    tl_tensor *x, *qs, *d, *xc = NULL, *out = NULL, *res = NULL, *nw = NULL;
    tl_err err = {0};
    const tl_runtime *rt;
    if (!PyArg_ParseTuple(args, "OOOii|OOdii:matmul", &xo, &qo, &dq, &N, &K, &ro, &no, &eps_d, &glu, &impl))
        return NULL;
    if (q_args(f, "matmul", qo, dq, N, K, &qs, &d) < 0) return NULL;
    if (!tl_tensor_check(xo)) return PyErr_Format(PyExc_TypeError, "matmul: x must be a Tensor");
    x = tl_tensor_CAST(xo);
    if (tl_check_dtype("matmul", x, TL_F32) < 0) return NULL;
    if (tl_autograd_wanted(&xo, 1))
        return PyErr_Format(PyExc_NotImplementedError, "matmul (%s): no backward; use tlgpu.no_grad() or detach()",
                            f->name);
    const int xw = glu ? 2 * K : K;
    if (x->ndim != 2 || x->shape[1] != xw || x->shape[0] > 8 || impl < 0 || impl > 5) {
        char s[128];
        tl_shape_str(x->shape, x->ndim, s, sizeof s);
        return PyErr_Format(PyExc_ValueError, "matmul (%s mul_mv): x %s must be (R <= 8, %d) for weights (%d, %d)%s",
                            f->name, s, xw, N, K, glu ? " with glu" : "");
    }
    int R = (int)x->shape[0];
    Py_ssize_t shape[2] = {R, N};
    if (ro != Py_None) {                                 /* addmm: res is added as y is stored */
        if (!tl_tensor_check(ro)) return PyErr_Format(PyExc_TypeError, "addmm: input must be a Tensor");
        res = tl_tensor_CAST(ro);
        if (res->dtype != TL_F32 || res->ndim != 2 || res->shape[0] != R || res->shape[1] != N ||
            !tl_tensor_is_contig(res))
            return PyErr_Format(PyExc_ValueError, "addmm (%s): input must be contiguous float32 (%d, %d)", f->name,
                                R, N);
    }
    if (norm_arg("matmul", no, K, &nw) < 0) return NULL;
    const float eps = (float)eps_d;
    if ((out = tl_tensor_empty(TL_F32, 2, shape)) == NULL || out->storage == NULL || R == 0) goto done;
    if (K == 0) { if (tl_tensor_fill(out, 0.0) < 0) Py_CLEAR(out); goto done; }
    if (tl_runtime_get(&rt, &err) != TL_OK) { tl_raise(&err); goto fail; }
    tl_gemm_params gp;
    tl_gemm_params_get(&rt->info, 0, &gp);
    static const int nr_of[4] = {4, 4, 8, 8};            /* weight rows per work-group: kernels/quant.cl */
    int cpu = gp.v[TL_GP_DIRECT] != 0;
    const int rv = R <= 1 ? 0 : R <= 2 ? 1 : R <= 4 ? 2 : 3, rr = 1 << rv;   /* GPU: padded row-count variant */
    if ((xc = tl_tensor_contiguous(x)) == NULL) goto fail;
    int ox = (int)xc->offset, sx = xw;
    int has_res = res != NULL && res->storage != NULL, offr = has_res ? (int)res->offset : 0;
    cl_mem rmem = (has_res ? res : out)->storage->mem;  /* without a residual: never read */
    const size_t sz[12] = {I, I, I, Mm, I, I, Mm, Mm, Mm, Mm, I, I};
    const void *v[12] = {&N, &K, &R, &xc->storage->mem, &ox, &sx, &qs->storage->mem, &d->storage->mem,
                         &out->storage->mem, &rmem, &offr, &has_res};
    tl_storage *st[6] = {out->storage, xc->storage, qs->storage, d->storage, has_res ? res->storage : NULL,
                         nw != NULL ? nw->storage : NULL};
    /* ---- CPU devices: the native-command product (gemm/cpu_quant.h); _C._cpu_quant(enable=False) or impl 1
     * ("old") gives the OpenCL kernels below ---- */
    if (cpu && impl == 0) {
        const int r = tl_cpu_quant_mv(f == &fmts[Q8_0], N, K, R, xc, xw, qs, d, out, res, nw, eps, glu);
        if (r < 0) goto fail;
        if (r > 0) goto done;
    }
    /* ---- end of the CPU hook ---- */
    /* The default on GPUs: an integer kernel for every row count, so a prompt's rows and a decode step's
     * round x alike (a split by rows gave other tokens for a prefill than for the same steps:
     * docs/inference.md); its three forms give the same bits (tests/test_quant_mv.py). */
    const char *user = tl_setting_str(TL_SET_BUILD_OPTIONS);
    const int mma = !cpu && nv_mma(rt, user);
    if (impl == 0 && !cpu) impl = auto_impl(f, N, K, R, mma);
    if (impl >= 2) {
        const int nv = tl_runtime_nv_ptx(rt, user);
        int r = impl == 2   ? launch_mvq(f, rt, nv, rv, N, K, R, nw, eps, glu, sz, v, st)
                : impl == 5 ? launch_mvm(f, rt, mma, N, K, R, nw, eps, glu, v, st)
                            : launch_mvx(f, rt, nv, rv, impl - 3, N, K, R, nw, eps, glu, v, st);
        if (r < 0) goto fail;
        if (r == 0) goto done;
    }
    if (nw != NULL || glu) {                             /* the float kernels: the prologue first */
        tl_tensor *xp = prologue(xc, K, nw, eps, glu);
        if (xp == NULL) goto fail;
        Py_SETREF(xc, xp);
        ox = 0;
        sx = K;
        v[3] = &xc->storage->mem;
        st[1] = xc->storage;
    }
    size_t gws[2], lws[2] = {1, 1}, per_lane = 0;
    if (!cpu) {                                          /* GPU: a power-of-two group with a lane per value */
        if (tl_kernel_py(&f->mv[rv]) == NULL) goto fail;
        per_lane = ((size_t)nr_of[rv] * (size_t)rr + 1) * sizeof(float);   /* mv_reduce's padded rows */
        const size_t units = (size_t)(K / 32) * 4, least = (size_t)nr_of[rv] * (size_t)rr;
        while (lws[0] * 2 <= f->mv[rv].wg && lws[0] * 2 * per_lane <= rt->info.local_mem - 1024 &&
               (lws[0] < units || lws[0] < 32 || lws[0] < least))   /* a lane a word, no more: at K = 2048 */
            lws[0] *= 2;                                 /* 1024 lanes left 3/4 of them idle */
        cpu = lws[0] < (size_t)(nr_of[rv] * rr);         /* too few lanes: the barrier-free kernel */
    }
    const int nr = cpu ? 4 : nr_of[rv];
    tl_kernel *kh = cpu ? &f->mv_rows : &f->mv[rv];
    if (tl_kernel_py(kh) == NULL || tl_set_args(kh->k, 0, 12, sz, v) < 0) goto fail;
    size_t groups = (size_t)(N + nr - 1) / (size_t)nr;
    cl_uint dim = 1;
    if (cpu) {                                           /* small groups: PoCL spreads them over cores */
        dim = 2;
        lws[0] = kh->wg < 8 ? kh->wg : 8;
        gws[0] = tl_round_up(groups, lws[0]);
        gws[1] = (size_t)(R + 1) / 2;                   /* two activation rows per work-item */
    } else {
        gws[0] = groups * lws[0];
        if (tl_set_args(kh->k, 12, 1, (size_t[]){lws[0] * per_lane}, (const void *[]){NULL}) < 0) goto fail;
    }
    if (tl_stream_launch(kh->k, dim, gws, lws, st, 5, 1u, kh->name, &err) != TL_OK) {
        tl_raise(&err);
        goto fail;
    }
done:
    Py_XDECREF(xc);
    Py_XDECREF(nw);
    return (PyObject *)out;
fail:
    Py_CLEAR(out);
    goto done;
}

/* _quant_mv_prologue(x, norm=None, eps=1e-5, glu=0): the mul_mv prologue alone on x (R, K) ((R, 2K) with glu),
 * float32 -> (R, K) (quant.py's many-row path, before the GEMM). */
static PyObject *
fn_mv_prologue(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *xo, *no = Py_None;
    double eps = 1e-5;
    int glu = 0;
    tl_tensor *nw, *xc, *out;
    if (!PyArg_ParseTuple(args, "O|Odi:matmul", &xo, &no, &eps, &glu)) return NULL;
    if (!tl_tensor_check(xo)) return PyErr_Format(PyExc_TypeError, "matmul: x must be a Tensor");
    tl_tensor *x = tl_tensor_CAST(xo);
    if (tl_check_dtype("matmul", x, TL_F32) < 0) return NULL;
    if (x->ndim != 2 || (glu && x->shape[1] % 2 != 0) || x->shape[1] > INT_MAX / 2)
        return PyErr_Format(PyExc_ValueError, "matmul: the prologue takes a 2-D x%s", glu ? " of even width" : "");
    const int K = (int)(glu ? x->shape[1] / 2 : x->shape[1]);
    if (norm_arg("matmul", no, K, &nw) < 0) return NULL;
    if ((xc = tl_tensor_contiguous(x)) == NULL) { Py_XDECREF(nw); return NULL; }
    out = prologue(xc, K, nw, (float)eps, glu);
    Py_DECREF(xc);
    Py_XDECREF(nw);
    return (PyObject *)out;
}

#define QFNS(F, E)                                                                                     \
    static PyObject *fn_##F##_dequantize(PyObject *Py_UNUSED(m), PyObject *a) { return dequantize(&fmts[E], a); } \
    static PyObject *fn_##F##_get_rows(PyObject *Py_UNUSED(m), PyObject *a) { return get_rows(&fmts[E], a); }     \
    static PyObject *fn_##F##_mul_mv(PyObject *Py_UNUSED(m), PyObject *a) { return mul_mv(&fmts[E], a); }
QFNS(q4_0, Q4_0)
QFNS(q8_0, Q8_0)
#define QDEFS(F)                                                                                            \
    {"_" #F "_dequantize", fn_##F##_dequantize, METH_VARARGS, "_" #F "_dequantize(qs, d, N, K): float32 (N, K)"}, \
    {"_" #F "_get_rows", fn_##F##_get_rows, METH_VARARGS, "_" #F "_get_rows(qs, d, N, K, ids): dequantized rows"}, \
    {"_" #F "_mul_mv", fn_##F##_mul_mv, METH_VARARGS, "_" #F "_mul_mv(x, qs, d, N, K): x @ W^T for x (R <= 8, K)"}

static const PyMethodDef quant_functions[] = {
    QDEFS(q4_0),
    QDEFS(q8_0),
    {"_cpu_quant", (PyCFunction)(void (*)(void))tl_cpu_quant_py, METH_VARARGS | METH_KEYWORDS,   /* cpu_quant.h */
     "_cpu_quant(enable=None, threads=0, isa=None): the CPU native q4_0/q8_0 product's state (docs/cpu.md)."},
    {"_quant_mv_prologue", fn_mv_prologue, METH_VARARGS,
     "_quant_mv_prologue(x, norm=None, eps=1e-5, glu=0): glu and/or rms_norm of x's rows, as mul_mv's prologue"},
    {NULL, NULL, 0, NULL},
};

/* The quant programs' options: the GEMM tile parameters (tier 0), and on an NVIDIA GPU platform -DTL_NV_PTX=1
 * (quant_mvq.h's dp4a and shfl.sync PTX; TLGPU_BUILD_OPTIONS=-DTL_NV_PTX=0 keeps the portable code), with
 * -DMVQ_MMA=1 from compute capability 8.0 (quant_mvm.cl's mma.sync). */
static void
quant_options(const tl_runtime *rt, int arg, const char *user, char *out, size_t cap)
{
    tl_gemm_program_options(rt, arg, user, out, cap);
    size_t k = strlen(out);
    if (tl_runtime_nv_ptx(rt, user) && k < cap)
        snprintf(out + k, cap - k, nv_mma(rt, user) ? " -DTL_NV_PTX=1 -DMVQ_MMA=1" : " -DTL_NV_PTX=1");
}

/* The build rules (programs.h), registered at import: quant.cl and quant_mvm.cl (a program of its own, so the
 * quant program's build on PoCL does not pay for the tensor-core kernels' emulation: 24 s against 33). */
static int
quant_init(PyObject *Py_UNUSED(m), tl_state *Py_UNUSED(S))
{
    static const tl_program_rule rule = {"quant", NULL, quant_options, 0};
    static const tl_program_rule mvm_rule = {"quant_mvm", NULL, quant_options, 0};
    tl_err err = {0};
    if (tl_program_register(&rule, &err) != TL_OK || tl_program_register(&mvm_rule, &err) != TL_OK)
        return tl_raise(&err);
    return 0;
}

const tl_family tl_family_quant = {quant_functions, NULL, NULL, NULL, NULL, .init = quant_init};
