/* ops_quant_gemm.c: the quant_gemm op family (kernels/quant_gemm.cl): prefill products of many float32 rows by
 * q4_0 / q8_0 weights, the weights dequantized as the kernel's tiles read them (issue 27), instead of a float32
 * copy of the whole matrix for the float GEMM. One private function, _quant_gemm, called by tlgpu/quant.py's
 * matmul for more than 8 rows (tlgpu.quant._PREFILL_IMPL chooses). The weights arrive as ops_quant.c's two
 * flat arrays (qs: 4 or 8 int32 words a block of 32, d: the fp16 scales two to a word). The kernel follows
 * the GEMM table's DIRECT flag (tier 0) as ops_quant.c does: the tiled local-memory kernel on GPUs, the
 * register-blocked one on CPUs; `kernel` overrides it (tests run both on PoCL). No autograd. */
#include "ops_common.h"
#include "autograd.h"
#include "cl_runtime.h"

#include "gemm_params.h"

enum { QG_TILES = 2 };                                    /* MWG 32, 64: kernels/quant_gemm.cl */
typedef struct {
    const char *name;
    int words;                                            /* qs words a block of 32 weights */
    tl_kernel tile[QG_TILES], direct;
} qg_fmt;

#define QG_FMT(F, W) {#F, W,                                                                                 \
    {TL_KERNEL("quant_gemm_tiles", "tl_qgemm_" #F "_m32_f32"), TL_KERNEL("quant_gemm_tiles", "tl_qgemm_" #F "_m64_f32")}, \
    TL_KERNEL("quant_gemm", "tl_qgemm_" #F "_direct_f32")}
static qg_fmt fmts[] = {QG_FMT(q4_0, 4), QG_FMT(q8_0, 8)};
#define QG_NWG 64                                         /* weight rows per work-group (tile kernels) */
#define QG_CMR 6                                          /* CPU kernel: rows x weight rows per work-item (QCMR, QCNR) */
#define QG_CNR 3
static const size_t I = sizeof(int), Mm = sizeof(cl_mem);

/* The tile height (index into tile[], MWG = 32 << t) for an M x N product: 64 where that leaves at least two
 * work-groups a compute unit and fills more than half a tile; forced when mwg is 32 or 64. */
static int
pick_tile(int M, int N, int mwg, size_t cus)
{
    if (mwg) return mwg == 32 ? 0 : 1;
    const size_t ncol = (size_t)(N + QG_NWG - 1) / QG_NWG;
    return M > 32 && (size_t)((M + 63) / 64) * ncol >= 2 * cus ? 1 : 0;
}

/* Checks the flat arrays of a (N, K) matrix of format f: *qs, *d borrowed. */
static int
weight_args(const qg_fmt *f, PyObject *qo, PyObject *dq, int N, int K, tl_tensor **qs, tl_tensor **d)
{
    if (!tl_tensor_check(qo) || !tl_tensor_check(dq))
        return PyErr_Format(PyExc_TypeError, "matmul (%s): qs and d must be int32 Tensors", f->name), -1;
    *qs = tl_tensor_CAST(qo);
    *d = tl_tensor_CAST(dq);
    if (tl_check_dtype("matmul", *qs, TL_I32) < 0 || tl_check_dtype("matmul", *d, TL_I32) < 0) return -1;
    if (N < 0 || K < 0 || K % 32 != 0)
        return PyErr_Format(PyExc_ValueError, "matmul: %s shape (%d, %d): the row length must be a multiple of 32",
                            f->name, N, K), -1;
    const Py_ssize_t nblk = (Py_ssize_t)N * (K / 32);
    if (!tl_tensor_is_contig(*qs) || !tl_tensor_is_contig(*d) || tl_tensor_numel(*qs) != nblk * f->words ||
        tl_tensor_numel(*d) < (nblk + 1) / 2 || (*qs)->offset != 0 || (*d)->offset != 0 ||
        nblk * f->words > INT_MAX)
        return PyErr_Format(PyExc_ValueError, "matmul: %s arrays (%zd words, %zd scale words) do not hold a (%d, %d) "
                            "matrix", f->name, tl_tensor_numel(*qs), tl_tensor_numel(*d), N, K), -1;
    return 0;
}

/* _quant_gemm(x, qs, d, N, K, fmt, bias=None, kernel=0, mwg=0): x (M, K) float32 -> (M, N) = x @ W^T (+ bias,
 * a float32 (N,)), W the (N, K) fmt ("q4_0" or "q8_0") matrix of qs and d. kernel: 0 the device's (DIRECT:
 * the CPU kernel), 1 the tiles, 2 the CPU kernel; mwg: the tiles' height (0: chosen by shape, or 32, 64). */
static PyObject *
fn_quant_gemm(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"x", "qs", "d", "N", "K", "fmt", "bias", "kernel", "mwg", NULL};
    PyObject *xo, *qo, *dq, *bo = Py_None;
    const char *fname;
    int N, K, kernel = 0, mwg = 0;
    tl_tensor *x, *qs, *d, *xc = NULL, *bias = NULL, *out = NULL;
    tl_err err = {0};
    const tl_runtime *rt;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOiis|Oii:_quant_gemm", kwlist, &xo, &qo, &dq, &N, &K, &fname,
                                     &bo, &kernel, &mwg))
        return NULL;
    qg_fmt *f = NULL;
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++)
        if (strcmp(fmts[i].name, fname) == 0) f = &fmts[i];
    if (f == NULL) return PyErr_Format(PyExc_ValueError, "_quant_gemm: fmt must be 'q4_0' or 'q8_0', got '%s'", fname);
    if (kernel < 0 || kernel > 2 || (mwg != 0 && mwg != 32 && mwg != 64))
        return PyErr_Format(PyExc_ValueError, "_quant_gemm: kernel must be 0, 1 or 2 and mwg 0, 32 or 64, got %d and %d",
                            kernel, mwg);
    if (weight_args(f, qo, dq, N, K, &qs, &d) < 0) return NULL;
    if (!tl_tensor_check(xo)) return PyErr_Format(PyExc_TypeError, "matmul (%s): x must be a Tensor", f->name);
    x = tl_tensor_CAST(xo);
    if (tl_check_dtype("matmul", x, TL_F32) < 0) return NULL;
    if (tl_autograd_wanted(&xo, 1))
        return PyErr_Format(PyExc_NotImplementedError, "matmul (%s): no backward; use tlgpu.no_grad() or detach()",
                            f->name);
    if (x->ndim != 2 || x->shape[1] != K || x->shape[0] > INT_MAX) {
        char s[128];
        tl_shape_str(x->shape, x->ndim, s, sizeof s);
        return PyErr_Format(PyExc_ValueError, "matmul (%s): x %s must be (M, %d) for weights (%d, %d)", f->name, s, K,
                            N, K);
    }
    if (bo != Py_None) {
        if (!tl_tensor_check(bo)) return PyErr_Format(PyExc_TypeError, "matmul (%s): bias must be a Tensor", f->name);
        tl_tensor *b = tl_tensor_CAST(bo);
        if (tl_check_dtype("matmul", b, TL_F32) < 0) return NULL;
        if (b->ndim != 1 || b->shape[0] != N) {
            char s[128];
            tl_shape_str(b->shape, b->ndim, s, sizeof s);
            return PyErr_Format(PyExc_ValueError, "matmul (%s): bias %s must be a vector of %d", f->name, s, N);
        }
        if ((bias = tl_tensor_contiguous(b)) == NULL) return NULL;
    }
    const int M = (int)x->shape[0];
    Py_ssize_t shape[2] = {M, N};
    if ((out = tl_tensor_empty(TL_F32, 2, shape)) == NULL || out->storage == NULL) goto done;
    if (K == 0) {                                        /* an empty sum: zeros, or the bias */
        if (tl_tensor_fill(out, 0.0) < 0 || (bias != NULL && bias->storage != NULL && tl_copy_into(out, bias) < 0))
            Py_CLEAR(out);
        goto done;
    }
    if (tl_runtime_get(&rt, &err) != TL_OK) { tl_raise(&err); goto fail; }
    tl_gemm_params gp;
    tl_gemm_params_get(&rt->info, 0, &gp);
    const int direct = kernel == 2 || (kernel == 0 && gp.v[TL_GP_DIRECT] != 0);
    if ((xc = tl_tensor_contiguous(x)) == NULL) goto fail;
    int offx = (int)xc->offset, has_bias = bias != NULL;
    cl_mem bmem = (has_bias ? bias : out)->storage->mem;   /* without a bias: never read */
    const size_t sz[10] = {I, I, I, Mm, I, Mm, Mm, Mm, I, Mm};
    const void *v[10] = {&M, &N, &K, &xc->storage->mem, &offx, &qs->storage->mem, &d->storage->mem, &bmem,
                         &has_bias, &out->storage->mem};
    tl_storage *st[5] = {out->storage, xc->storage, qs->storage, d->storage, has_bias ? bias->storage : NULL};
    size_t gws[2], lws[2];
    cl_uint dim = 2;
    tl_kernel *kh = NULL;
    if (!direct) {                                       /* the tallest tile this device runs, up to the pick */
        for (int t = pick_tile(M, N, mwg, rt->info.compute_units ? rt->info.compute_units : 1); t >= 0; t--) {
            if (tl_kernel_py(&f->tile[t]) == NULL) goto fail;
            if (f->tile[t].wg >= (size_t)(32 << t) * 4) { kh = &f->tile[t]; break; }   /* 16 x MWG/4 items */
            if (mwg) break;
        }
        if (kh != NULL) {
            const int h = (int)(kh - f->tile);
            lws[0] = 16;
            lws[1] = (size_t)(8 << h);
            gws[0] = (size_t)((N + QG_NWG - 1) / QG_NWG) * lws[0];
            gws[1] = (size_t)((M + (32 << h) - 1) / (32 << h)) * lws[1];
        }
    }
    if (kh == NULL) {                                    /* the CPU kernel: no barriers; groups of one work-item */
        kh = &f->direct;                                 /* (on the loaded 2-core PoCL host: 1.0-1.8x faster than 4) */
        if (tl_kernel_py(kh) == NULL) goto fail;
        dim = 1;
        lws[0] = 1;
        gws[0] = (size_t)((M + QG_CMR - 1) / QG_CMR) * (size_t)((N + QG_CNR - 1) / QG_CNR);
    }
    if (tl_set_args(kh->k, 0, 10, sz, v) < 0) goto fail;
    if (M > 0 && N > 0 && tl_stream_launch(kh->k, dim, gws, lws, st, 5, 1u, kh->name, &err) != TL_OK) {
        tl_raise(&err);
        goto fail;
    }
done:
    Py_XDECREF(xc);
    Py_XDECREF(bias);
    return (PyObject *)out;
fail:
    Py_CLEAR(out);
    goto done;
}

static const PyMethodDef quant_gemm_functions[] = {
    {"_quant_gemm", (PyCFunction)(void (*)(void))fn_quant_gemm, METH_VARARGS | METH_KEYWORDS,
     "_quant_gemm(x, qs, d, N, K, fmt, bias=None, kernel=0, mwg=0): x (M, K) @ W^T (+ bias) for a q4_0 or q8_0 W "
     "(N, K), dequantized in the kernel's tiles"},
    {NULL, NULL, 0, NULL},
};

/* The tiles' program: quant_gemm.cl again, with -DQG_TILES=1 (programs.h rule, registered at import). */
static void
tiles_options(const tl_runtime *Py_UNUSED(rt), int Py_UNUSED(arg), const char *Py_UNUSED(user), char *out, size_t cap)
{
    snprintf(out, cap, " -DQG_TILES=1");
}

static int
quant_gemm_init(PyObject *Py_UNUSED(m), tl_state *Py_UNUSED(S))
{
    static const tl_program_rule rule = {"quant_gemm_tiles", "quant_gemm", tiles_options, 0};
    tl_err err = {0};
    return tl_program_register(&rule, &err) == TL_OK ? 0 : tl_raise(&err);
}

const tl_family tl_family_quant_gemm = {quant_gemm_functions, NULL, NULL, NULL, NULL, .init = quant_gemm_init};
