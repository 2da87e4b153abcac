/* ops_decode.c: the decode_layer op family (kernels/decode.cl): a whole llama-style decoder layer of one decode
 * step in one launch, tlgpu.decode_layer_ (issue 27: a decode step is bound by its launches on NVIDIA, not by
 * its bytes). The kernel's phases meet at grid barriers, so every work-group must be resident at once: on GPUs
 * the launch has one work-group per compute unit (NVIDIA's OpenCL places them all when nothing else holds
 * the device; the kernel's spin gives up after DEC_SPIN polls rather than hang, and _decode_barrier() reports
 * it); on CPU devices one work-group (PoCL runs work-groups on a thread pool with no such promise).
 * Weights: four matrices of one format, float32 / float16 / bfloat16 Tensors or tlgpu.quant Q4_0 / Q8_0
 * (their flat qs and d arrays), all contiguous from element 0. No autograd (weights and caches are
 * constants of inference). */
#include "ops_common.h"
#include "autograd.h"
#include "cl_runtime.h"
#include "settings.h"
#include <limits.h>
#include <math.h>

enum { F_F32, F_F16, F_BF16, F_Q4_0, F_Q8_0, NFMT };
static const char *const fmt_name[NFMT] = {"float32", "float16", "bfloat16", "q4_0", "q8_0"};
static const int fmt_dtype[NFMT] = {TL_F32, TL_F16, TL_BF16, TL_I32, TL_I32};
static const int fmt_words[NFMT] = {0, 0, 0, 4, 8};          /* qs int32 words a block of 32 */
static tl_kernel kern[NFMT] = {TL_KERNEL("decode", "tl_decode_layer_f32"), TL_KERNEL("decode", "tl_decode_layer_f16"),
                               TL_KERNEL("decode", "tl_decode_layer_bf16"), TL_KERNEL("decode", "tl_decode_layer_q4_0"),
                               TL_KERNEL("decode", "tl_decode_layer_q8_0")};
enum { BAR_GROUPS = 1024, BAR_WORDS = 4 + 16 * BAR_GROUPS };  /* 4 barrier words, then 16 stamps a work-group */
static cl_mem bar_mem;                                    /* the grid barrier's words; lives with the process */
static size_t last_groups, last_local, last_kmax;                    /* the newest launch's shape (_decode_barrier) */
static const size_t I = sizeof(int), F = sizeof(float), Mm = sizeof(cl_mem);

/* The format of weight object o: a floating Tensor's dtype or a quantized matrix's KIND; -1 with TypeError. */
static int
weight_format(PyObject *o)
{
    if (tl_tensor_check(o)) {
        const int dt = tl_tensor_CAST(o)->dtype;
        for (int f = F_F32; f <= F_BF16; f++)
            if (fmt_dtype[f] == dt) return f;
    } else {
        PyObject *kind = PyObject_GetAttrString(o, "KIND");
        const char *s = kind != NULL && PyUnicode_Check(kind) ? PyUnicode_AsUTF8(kind) : NULL;
        int f = s == NULL ? -1 : strcmp(s, "q4_0") == 0 ? F_Q4_0 : strcmp(s, "q8_0") == 0 ? F_Q8_0 : -1;
        Py_XDECREF(kind);
        PyErr_Clear();
        if (f >= 0) return f;
    }
    PyErr_Format(PyExc_TypeError, "decode_layer_: weights must be float32/float16/bfloat16 Tensors or tlgpu.quant "
                 "Q4_0/Q8_0 matrices, got %s", Py_TYPE(o)->tp_name);
    return -1;
}

/* Weight `name` of format f as L stacked (N, K) matrices ((L * N, K), or (L, N, K) for a Tensor): its two
 * device arrays (w, and d for the quantized ones; new references), or -1 with the error naming the shape it
 * should have. */
static int
weight_arrays(PyObject *o, const char *name, int f, int L, int N, int K, tl_tensor **w, tl_tensor **d)
{
    *w = *d = NULL;
    int g = weight_format(o);
    if (g < 0) return -1;
    if (g != f) {
        PyErr_Format(PyExc_TypeError, "decode_layer_: %s is %s, the others %s (one format for every matrix)", name,
                     fmt_name[g], fmt_name[f]);
        return -1;
    }
    const Py_ssize_t nblk = (Py_ssize_t)L * N * (K / 32);
    int ok;
    if (f <= F_BF16) {
        *w = (tl_tensor *)Py_NewRef(o);
        const Py_ssize_t *s = (*w)->shape;
        ok = ((*w)->ndim == 2 && s[0] == (Py_ssize_t)L * N && s[1] == K) ||
             ((*w)->ndim == 3 && s[0] == L && s[1] == N && s[2] == K);
    } else {
        PyObject *qs = PyObject_GetAttrString(o, "qs"), *dd = PyObject_GetAttrString(o, "d");
        ok = qs != NULL && dd != NULL && tl_tensor_check(qs) && tl_tensor_check(dd);
        if (ok) {
            *w = (tl_tensor *)Py_NewRef(qs);
            *d = (tl_tensor *)Py_NewRef(dd);
            ok = tl_tensor_numel(*w) == nblk * fmt_words[f] && tl_tensor_numel(*d) >= (nblk + 1) / 2 &&
                 (*d)->dtype == TL_I32 && tl_tensor_is_contig(*d) && (*d)->offset == 0;
        }
        Py_XDECREF(qs);
        Py_XDECREF(dd);
        PyErr_Clear();
    }
    ok = ok && (*w)->dtype == fmt_dtype[f] && tl_tensor_is_contig(*w) && (*w)->offset == 0;
    if (!ok) {
        Py_CLEAR(*w);
        Py_CLEAR(*d);
        char rows[48];
        if (L > 1) snprintf(rows, sizeof rows, "%d * %d", L, N);
        else snprintf(rows, sizeof rows, "%d", N);
        PyErr_Format(PyExc_ValueError, "decode_layer_: %s must be a contiguous %s matrix (%s, %d) from its first "
                     "element", name, fmt_name[f], rows, K);
        return -1;
    }
    return 0;
}

/* The rows of matrix o (its shape[0]: a Tensor's or a quantized matrix's), or -1 with ValueError. */
static int
matrix_rows(PyObject *o, int dim, const char *name)
{
    PyObject *sh = PyObject_GetAttrString(o, "shape"), *n0 = sh != NULL ? PySequence_GetItem(sh, 0) : NULL;
    const long n = n0 != NULL ? PyLong_AsLong(n0) : 0;
    Py_XDECREF(sh);
    Py_XDECREF(n0);
    PyErr_Clear();
    if (n <= 0 || n > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "decode_layer_: %s must be a (rows, %d) matrix", name, dim);
        return -1;
    }
    return (int)n;
}

/* A float32 vector of n elements, contiguous from element 0 (x, the norms' weights); -1 with ValueError. */
static int
vector_arg(PyObject *o, const char *name, int n, tl_tensor **t)
{
    if (tl_want_tensor("decode_layer_", o, t) < 0) return -1;
    if ((*t)->dtype != TL_F32 || tl_tensor_numel(*t) != n || !tl_tensor_is_contig(*t) || (*t)->offset != 0) {
        char s[128];
        tl_shape_str((*t)->shape, (*t)->ndim, s, sizeof s);
        PyErr_Format(PyExc_ValueError, "decode_layer_: %s (%s %s) must be contiguous float32 with %d elements from "
                     "its first", name, tl_dtype_name((*t)->dtype), s, n);
        return -1;
    }
    return 0;
}

/* decode_layer_(x, pos, kv, attn_norm, wqkv, wo, mlp_norm, w13, w2, n_heads, eps=1e-5, theta=10000.0, groups=0,
 * layers=1): x (dim,) or (1, dim) float32 updated in place; kv (2 * Hkv, max_len, D) keys then values, written
 * at pos; wqkv ((n_heads + 2 Hkv) D, dim), wo (dim, dim), w13 (2 hidden, dim), w2 (dim, hidden). layers=L runs L
 * layers in the one launch, each argument then L of them stacked: kv (L, 2 * Hkv, max_len, D), the norms (L,
 * dim), each matrix (L * N, K) (a Tensor also (L, N, K)). Returns x; with head (vocab, dim) of the same format and
 * head_norm (dim,): after the last layer the launch also computes logits = head @ (rms_norm(x) * head_norm) and
 * returns them, (1, vocab) float32. A whole greedy decode step in the launch: embed (rows, dim) of the weights'
 * format and token (int32, one element): x = embed[token] first (x's old values unread); argmax=True (with the
 * head): returns (logits, the first index of their largest (1,) int32); advance=True: pos (an int32 tensor)
 * += 1 at the end. */
static PyObject *
fn_decode_layer(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"x", "pos", "kv", "attn_norm", "wqkv", "wo", "mlp_norm", "w13", "w2", "n_heads", "eps",
                          "theta", "groups", "layers", "head_norm", "head", "embed", "token", "argmax", "advance",
                          NULL};
    PyObject *xo, *po, *ko, *ano, *mno, *wob[4], *hno = Py_None, *hwo = Py_None, *eo = Py_None, *to = Py_None;
    int nq = 0, groups = 0, nl = 1, want_arg = 0, advance = 0;
    double eps = 1e-5, theta = 10000.0;
    Py_ssize_t pos0 = 0;
    tl_tensor *x, *kv, *an, *mn, *hn = NULL, *pt = NULL, *w[6] = {NULL}, *d[6] = {NULL}, *scr = NULL, *lg = NULL;
    tl_tensor *tt = NULL, *nx = NULL;                     /* the token (embed=) and the argmax's output */
    PyObject *ret = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOOOOOOOi|ddiiOOOOpp:decode_layer_", kwl, &xo, &po, &ko,
                                     &ano, &wob[0], &wob[1], &mno, &wob[2], &wob[3], &nq, &eps, &theta, &groups, &nl,
                                     &hno, &hwo, &eo, &to, &want_arg, &advance))
        return NULL;
    if (tl_want_tensor("decode_layer_", xo, &x) < 0 || tl_want_tensor("decode_layer_", ko, &kv) < 0 ||
        tl_device_scalar("decode_layer_", "pos", po, &pt, &pos0) < 0)
        return NULL;
    PyObject *ins[2] = {xo, ko};
    if (tl_autograd_wanted(ins, 2))
        return PyErr_Format(PyExc_NotImplementedError, "decode_layer_: no backward; use tlgpu.no_grad()");
    const int dim = (int)(x->ndim >= 1 ? x->shape[x->ndim - 1] : 0), f = weight_format(wob[0]);
    if (f < 0) return NULL;
    if (nl < 1) return PyErr_Format(PyExc_ValueError, "decode_layer_: layers=%d; it must be at least 1", nl);
    const Py_ssize_t *ks = kv->shape + (kv->ndim == 4 ? 1 : 0);   /* one layer's (2 * Hkv, max_len, D) */
    if (!((kv->ndim == 3 && nl == 1) || (kv->ndim == 4 && kv->shape[0] == nl)) || ks[0] % 2 != 0 || ks[0] == 0 ||
        !tl_tensor_is_contig(kv) ||
        (kv->dtype != TL_F32 && kv->dtype != TL_F16 && kv->dtype != TL_BF16) || nq <= 0 || dim % nq != 0 ||
        ks[2] != dim / nq || nq % (ks[0] / 2) != 0 || dim % 32 != 0 || ks[2] % 4 != 0) {
        char s[128], c[128];
        tl_shape_str(x->shape, x->ndim, s, sizeof s);
        tl_shape_str(kv->shape, kv->ndim, c, sizeof c);
        return PyErr_Format(PyExc_ValueError, "decode_layer_: x %s and kv %s (%s) with n_heads=%d, layers=%d: kv "
                            "must be a contiguous floating (2 * Hkv, max_len, dim / n_heads) cache (layers > 1: (layers, "
                            "2 * Hkv, max_len, dim / n_heads)), n_heads a multiple of Hkv, dim a multiple of 32 and "
                            "of n_heads, the head size a multiple of 4", s, c, tl_dtype_name(kv->dtype), nq, nl);
    }
    const int nkv = (int)ks[0] / 2, ML = (int)ks[1], D = (int)ks[2], nqkv = (nq + 2 * nkv) * D;
    int hidden = 0;                                      /* w13's rows / (2 L), (L, 2 hidden, dim): its second */
    if (tl_tensor_check(wob[2])) {
        const tl_tensor *t = tl_tensor_CAST(wob[2]);
        hidden = t->ndim == 2 ? (int)(t->shape[0] / nl / 2) : t->ndim == 3 ? (int)(t->shape[1] / 2) : 0;
    } else {
        PyObject *sh = PyObject_GetAttrString(wob[2], "shape");
        PyObject *n0 = sh != NULL ? PySequence_GetItem(sh, 0) : NULL;
        hidden = n0 != NULL ? (int)(PyLong_AsLong(n0) / nl / 2) : 0;
        Py_XDECREF(sh);
        Py_XDECREF(n0);
        PyErr_Clear();
    }
    if (hidden <= 0 || hidden % 32 != 0)
        return PyErr_Format(PyExc_ValueError, "decode_layer_: w13 must be (2 * hidden, %d) with hidden a positive "
                            "multiple of 32", dim);
    if (!(theta > 0.0) || !isfinite(theta)) return PyErr_Format(PyExc_ValueError, "decode_layer_: bad theta");
    if (kv->offset > INT_MAX)
        return PyErr_Format(PyExc_ValueError, "decode_layer_: kv starts %zd elements into its storage; at most %d",
                            kv->offset, INT_MAX);
    if (pt == NULL && (pos0 < 0 || pos0 >= ML))
        return PyErr_Format(PyExc_IndexError, "decode_layer_: position %zd outside the cache's max_len %d", pos0, ML);
    const int NS[4] = {nqkv, dim, 2 * hidden, dim}, KS[4] = {dim, dim, dim, hidden};
    static const char *const wn[4] = {"wqkv", "wo", "w13", "w2"};
    for (int i = 0; i < 4; i++)
        if (weight_arrays(wob[i], wn[i], f, nl, NS[i], KS[i], &w[i], &d[i]) < 0) goto done;
    int vocab = 0;                                       /* the head's rows (0: none) */
    if ((hwo == Py_None) != (hno == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "decode_layer_: head and head_norm go together");
        goto done;
    }
    if (hwo != Py_None) {
        if ((vocab = matrix_rows(hwo, dim, "head")) < 0) goto done;
        if (weight_arrays(hwo, "head", f, 1, vocab, dim, &w[4], &d[4]) < 0 ||
            vector_arg(hno, "head_norm", dim, &hn) < 0)
            goto done;
    }
    int erows = 0;                                       /* the embedding's rows (0: none) */
    if ((eo == Py_None) != (to == Py_None)) {
        PyErr_SetString(PyExc_TypeError, "decode_layer_: embed and token go together");
        goto done;
    }
    if (eo != Py_None) {
        Py_ssize_t t0 = 0;
        if (tl_device_scalar("decode_layer_", "token", to, &tt, &t0) < 0) goto done;
        if (tt == NULL) {
            PyErr_SetString(PyExc_TypeError, "decode_layer_: token must be an int32 tensor of one element (the "
                            "previous step's argmax)");
            goto done;
        }
        if ((erows = matrix_rows(eo, dim, "embed")) < 0 ||
            weight_arrays(eo, "embed", f, 1, erows, dim, &w[5], &d[5]) < 0)
            goto done;
    }
    if (want_arg && vocab == 0) {
        PyErr_SetString(PyExc_ValueError, "decode_layer_: argmax=True needs the head (head= and head_norm=)");
        goto done;
    }
    if (advance && pt == NULL) {
        PyErr_SetString(PyExc_TypeError, "decode_layer_: advance=True needs pos as an int32 tensor of one element");
        goto done;
    }
    if (vector_arg(xo, "x", dim, &x) < 0 || vector_arg(ano, "attn_norm", nl * dim, &an) < 0 ||
        vector_arg(mno, "mlp_norm", nl * dim, &mn) < 0 || tl_check_inplace("decode_layer_", x) < 0 ||
        tl_check_inplace("decode_layer_", kv) < 0 || (advance && tl_check_inplace("decode_layer_", pt) < 0))
        goto done;
    const tl_runtime *rt;
    tl_err err = {0};
    if (tl_runtime_get(&rt, &err) != TL_OK) { tl_raise(&err); goto done; }
    tl_kernel *kh = &kern[f];
    if (tl_kernel_py(kh) == NULL) goto done;
    const int cpu = (rt->info.type & CL_DEVICE_TYPE_GPU) == 0;
    const int nv = tl_runtime_nv_ptx(rt, tl_setting_str(TL_SET_BUILD_OPTIONS));
    size_t L = 1, kmax = 0;                              /* the portable build: one work-item a group */
    clGetKernelWorkGroupInfo(kh->k, rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    while (nv && L * 2 <= kmax && L * 2 <= 1024u) L *= 2;   /* NVIDIA: up to 32 warps (loads in flight) */
    size_t fixed[3] = {0, 0, 0};                         /* built with -DDEC_WG: that size */
    clGetKernelWorkGroupInfo(kh->k, rt->device, CL_KERNEL_COMPILE_WORK_GROUP_SIZE, sizeof fixed, fixed, NULL);
    if (fixed[0] > 0) L = fixed[0];
    size_t lm = (size_t)(dim > hidden ? dim : hidden);
    if ((size_t)(2 * D + ML) > lm) lm = (size_t)(2 * D + ML);
    lm = (lm + 3) & ~(size_t)3;                          /* float4s */
    if (f >= F_Q4_0) lm += 10 * (size_t)((dim > hidden ? dim : hidden) / 32);   /* x's int8 blocks and scales */
    if ((lm + L) * F > rt->info.local_mem || (nv && L < 32)) {
        PyErr_Format(PyExc_ValueError, "decode_layer_: dim %d, hidden %d and max_len %d need %zu bytes of local memory "
                     "a work-group; this device has %llu", dim, hidden, ML, (lm + L) * F,
                     (unsigned long long)rt->info.local_mem);
        goto done;
    }
    size_t nwg = groups > 0 ? (size_t)groups : cpu ? 1 : rt->info.compute_units;
    if (groups > 0 && !cpu && (size_t)groups > rt->info.compute_units) nwg = rt->info.compute_units;
    if (nwg > BAR_GROUPS) nwg = BAR_GROUPS;
    if (bar_mem == NULL) {
        static const cl_uint zero[BAR_WORDS];
        cl_int rc;
        bar_mem = clCreateBuffer(rt->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero, (void *)zero, &rc);
        if (rc != CL_SUCCESS) {
            bar_mem = NULL;
            tl_err_set(&err, rc, "clCreateBuffer", "decode_layer_ barrier words");
            tl_raise(&err);
            goto done;
        }
    }
    Py_ssize_t ns = (Py_ssize_t)nqkv + dim + hidden + 2 * (Py_ssize_t)nwg;   /* qkv, att, g, argmax pairs */
    const Py_ssize_t lsh[2] = {1, vocab};
    if ((scr = tl_tensor_empty(TL_F32, 1, &ns)) == NULL ||
        (vocab > 0 && (lg = tl_tensor_empty(TL_F32, 2, lsh)) == NULL) ||
        (want_arg && (nx = tl_tensor_empty(TL_I32, 1, lsh)) == NULL))
        goto done;
    if (x->storage == NULL) goto result;
    float feps = (float)eps, lt = (float)log2(theta), scale = (float)(1.0 / sqrt((double)D));
    int kvdt = kv->dtype, kvo = (int)kv->offset, offp = pt != NULL ? (int)pt->offset : 0, p0 = (int)pos0;
    cl_mem pmem = pt != NULL ? pt->storage->mem : NULL, dm[6], wm4 = NULL, hnm = NULL, lgm = NULL;
    cl_mem em = NULL, tm = tt != NULL ? tt->storage->mem : NULL, nxm = nx != NULL ? nx->storage->mem : NULL;
    int offt = tt != NULL ? (int)tt->offset : 0;
    if (erows > 0) {
        em = w[5]->storage->mem;
        dm[5] = (d[5] != NULL ? d[5] : w[5])->storage->mem;
    } else {
        dm[5] = NULL;
    }
    for (int i = 0; i < 4; i++) dm[i] = (d[i] != NULL ? d[i] : w[i])->storage->mem;   /* float formats: unread */
    if (vocab > 0) {                                     /* no head: unread NULLs */
        wm4 = w[4]->storage->mem;
        dm[4] = (d[4] != NULL ? d[4] : w[4])->storage->mem;
        hnm = hn->storage->mem;
        lgm = lg->storage->mem;
    } else {
        dm[4] = NULL;
    }
    const size_t sz[43] = {I, I, I, I, I, I, F, F, F, Mm, Mm, Mm, Mm, Mm, Mm, Mm, Mm, Mm, Mm, Mm, Mm, I, Mm, I, I, Mm,
                           Mm, lm * F, L * F, I, I, Mm, Mm, Mm, Mm, I, Mm, Mm, I, Mm, I, Mm, I};
    const void *v[43] = {&dim, &nq, &nkv, &D, &hidden, &ML, &feps, &lt, &scale, &x->storage->mem, &an->storage->mem,
                         &mn->storage->mem, &w[0]->storage->mem, &dm[0], &w[1]->storage->mem, &dm[1],
                         &w[2]->storage->mem, &dm[2], &w[3]->storage->mem, &dm[3], &kv->storage->mem, &kvdt, &pmem,
                         &offp, &p0, &scr->storage->mem, &bar_mem, NULL, NULL, &nl, &kvo, &hnm, &wm4, &dm[4], &lgm,
                         &vocab, &em, &dm[5], &erows, &tm, &offt, &nxm, &advance};
    tl_storage *st[22] = {x->storage, kv->storage, scr->storage, lg != NULL ? lg->storage : NULL,
                          nx != NULL ? nx->storage : NULL, an->storage, mn->storage, pt != NULL ? pt->storage : NULL,
                          hn != NULL ? hn->storage : NULL, tt != NULL ? tt->storage : NULL};
    for (int i = 0; i < 6; i++) {
        st[10 + 2 * i] = w[i] != NULL ? w[i]->storage : NULL;
        st[11 + 2 * i] = d[i] != NULL ? d[i]->storage : NULL;
    }
    size_t gws = nwg * L;
    last_groups = nwg;
    last_local = L;
    last_kmax = kmax;
    if (tl_set_args(kh->k, 0, 43, sz, v) < 0) goto done;
    if (tl_stream_launch(kh->k, 1, &gws, &L, st, 22, 31u | (advance ? 1u << 7 : 0u), kh->name, &err) != TL_OK) {
        tl_raise(&err);
        goto done;
    }
    tl_mark_write(x, "decode_layer_");
    tl_mark_write(kv, "decode_layer_");
    if (advance) tl_mark_write(pt, "decode_layer_");
result:
    ret = nx != NULL ? PyTuple_Pack(2, (PyObject *)lg, (PyObject *)nx) : Py_NewRef(lg != NULL ? (PyObject *)lg : xo);
done:
    for (int i = 0; i < 6; i++) { Py_XDECREF(w[i]); Py_XDECREF(d[i]); }
    Py_XDECREF(scr);
    Py_XDECREF(lg);
    Py_XDECREF(nx);
    return ret;
}

/* _decode_barrier(): the grid barrier's words (count, generation, gave_up) after a sync: count's low 31 bits 0
 * between launches (its top bit flips at each barrier), the generation advanced by each barrier of a launch of
 * more than one work-group (4 a layer, 1 between two layers, 1 before the head), gave_up 1 if a spin gave up;
 * and the newest launch's work-groups, local size and the kernel's largest (its registers' bound). */
static PyObject *
fn_decode_barrier(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    const tl_runtime *rt;
    tl_err err = {0};
    cl_uint w[4] = {0, 0, 0, 0};
    if (tl_stream_synchronize(&err) != TL_OK || tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err), NULL;
    if (bar_mem != NULL) {
        cl_int rc = clEnqueueReadBuffer(rt->q0, bar_mem, CL_TRUE, 0, sizeof w, w, 0, NULL, NULL);
        if (rc != CL_SUCCESS) return tl_err_set(&err, rc, "clEnqueueReadBuffer", "decode barrier"), tl_raise(&err), NULL;
    }
    return Py_BuildValue("{sIsIsIsnsnsn}", "count", w[0], "generation", w[1], "gave_up", w[2], "groups",
                         (Py_ssize_t)last_groups, "local_size", (Py_ssize_t)last_local, "kernel_max_local",
                         (Py_ssize_t)last_kmax);
}

/* _decode_stamps(): the newest launch's %globaltimer stamps (ns, low words), a list of 16 a work-group; zeros
 * unless the program was built with -DDEC_STAMPS=1 (NVIDIA; benchmarks/diag_decode_layer.py). */
static PyObject *
fn_decode_stamps(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    const tl_runtime *rt;
    tl_err err = {0};
    static cl_uint w[BAR_WORDS];
    if (tl_stream_synchronize(&err) != TL_OK || tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err), NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL || bar_mem == NULL) return out;
    cl_int rc = clEnqueueReadBuffer(rt->q0, bar_mem, CL_TRUE, 0, sizeof w, w, 0, NULL, NULL);
    if (rc != CL_SUCCESS) {
        Py_DECREF(out);
        return tl_err_set(&err, rc, "clEnqueueReadBuffer", "decode stamps"), tl_raise(&err), NULL;
    }
    for (size_t g = 0; g < last_groups; g++) {
        PyObject *row = PyList_New(16);
        if (row == NULL || PyList_Append(out, row) < 0) { Py_XDECREF(row); Py_DECREF(out); return NULL; }
        Py_DECREF(row);
        for (int k = 0; k < 16; k++) {
            PyObject *v = PyLong_FromUnsignedLong(w[4 + 16 * g + k]);
            if (v == NULL) { Py_DECREF(out); return NULL; }
            PyList_SET_ITEM(row, k, v);
        }
    }
    return out;
}

static const PyMethodDef decode_functions[] = {
    {"decode_layer_", (PyCFunction)(void (*)(void))fn_decode_layer, METH_VARARGS | METH_KEYWORDS,
     "decode_layer_(x, pos, kv, attn_norm, wqkv, wo, mlp_norm, w13, w2, n_heads, eps=1e-5, theta=10000.0, "
     "groups=0, layers=1, head_norm=None, head=None, embed=None, token=None, argmax=False, advance=False): "
     "llama-style decoder layers of a decode step in one launch (layers > 1: each argument stacked); x updated in "
     "place; returns x, with head the logits (1, vocab), with argmax (logits, next token); embed/token: x = "
     "embed[token] first; advance: pos += 1 at the end"},
    {"_decode_barrier", fn_decode_barrier, METH_NOARGS, "_decode_barrier(): decode_layer_'s grid barrier words"},
    {"_decode_stamps", fn_decode_stamps, METH_NOARGS, "_decode_stamps(): the newest launch's phase stamps (diagnostic)"},
    {NULL, NULL, 0, NULL},
};

/* The program's options: on an NVIDIA GPU -DTL_NV_PTX=1 (warp shuffles: a team is a warp) and a fixed local
 * size of 512 (-DDEC_WG; the driver reports 256 as the kernel's limit otherwise, and the fixed 512 runs a
 * float32 or float16 layer of the medium decoder in 83 us against 111: benchmarks/NOTES.md, fifth session). */
static void
decode_options(const tl_runtime *rt, int Py_UNUSED(arg), const char *user, char *out, size_t cap)
{
    const int wg = user == NULL || strstr(user, "-DDEC_WG") == NULL;
    const int nv = tl_runtime_nv_ptx(rt, user);
    snprintf(out, cap, "%s", !nv ? "" : wg ? " -DTL_NV_PTX=1 -DDEC_WG=512" : " -DTL_NV_PTX=1");
}

static int
decode_init(PyObject *Py_UNUSED(m), tl_state *Py_UNUSED(S))
{
    static const tl_program_rule rule = {"decode", NULL, decode_options, 0};
    tl_err err = {0};
    return tl_program_register(&rule, &err) == TL_OK ? 0 : tl_raise(&err);
}

const tl_family tl_family_decode = {decode_functions, NULL, NULL, NULL, NULL, .init = decode_init};
