/* ops_conv.c: 2-D convolution and pooling over NCHW float32 tensors (kernels/conv.cl).
 * conv2d(x, w, b) lowers to the project's GEMM: im2col writes cols [C*KH*KW, N*OH*OW] into a new pooled
 * tensor, the weight viewed as [O, C*KH*KW] multiplies it (one GEMM over the whole batch, through the @
 * slot), and one pass lays the [O, N, OH, OW] product out as NCHW and adds the bias (ROW_CONV_LAYOUT,
 * whose backward is the reverse pass plus a row sum for the bias). Without autograd on a CPU device with the
 * BLAS path, conv2d is instead one native command (tl_cpu_blas_conv: per image or group of images, im2col into
 * a buffer that stays in cache and one sgemm into the NCHW output; the actors' forward, docs/cpu.md).
 * Autograd is the composition: im2col is an op of its own whose backward is col2im (each input element's
 * sum over the windows that read it, in a fixed order: deterministic, no atomics; one work-item per input
 * row on CPUs, per input element elsewhere); the GEMM and the weight's reshape bring their own
 * backwards. max_pool2d / avg_pool2d are one kernel each, with a backward of one work-item per input
 * element (max pooling saves the argmax of each window).
 * Invariants: every shape is checked before anything is enqueued (ValueError naming the op and the
 * shapes); inputs are read through their strides, outputs are new contiguous tensors; 3-D (C, H, W)
 * inputs are treated as a batch of one, as torch does; zero-size tensors enqueue nothing. */
#include "ops_common.h"
#include "autograd.h"
#include "capture.h"
#include "cl_runtime.h"
#include "cpu_blas.h"
#include "ops.h"
#include "settings.h"
#include <limits.h>
#include <stdlib.h>

static const tl_op_row ROW_IM2COL, ROW_MAX_POOL2D, ROW_AVG_POOL2D, ROW_CONV_LAYOUT;   /* autograd rows (below) */

/* Keep in step with conv_geom in kernels/conv.cl: ints only, so host and device layouts agree. */
typedef struct {
    int N, C, H, W, OH, OW, KH, KW, SH, SW, PH, PW, DH, DW;
    int sn, sc, sh, sw, off;
} conv_geom;
_Static_assert(sizeof(conv_geom) == TL_CONV_GEOM * sizeof(int), "cpu_blas.h's conv geometry");

static tl_kernel k_im2col = TL_KERNEL("conv", "tl_im2col_f32"), k_col2im = TL_KERNEL("conv", "tl_col2im_f32"),
                 k_im2col_rows = TL_KERNEL("conv", "tl_im2col_rows_f32"),
                 k_col2im_rows = TL_KERNEL("conv", "tl_col2im_rows_f32"),
                 k_maxpool = TL_KERNEL("conv", "tl_max_pool2d_f32"), k_avgpool = TL_KERNEL("conv", "tl_avg_pool2d_f32"),
                 k_poolbw = TL_KERNEL("conv", "tl_pool2d_backward_f32"),
                 k_layout = TL_KERNEL("conv", "tl_conv_layout_f32");

static const size_t I = sizeof(int), Mm = sizeof(cl_mem);

/* One int of a pair, clamped to the int range (the range checks come after); -1 if it is not an int. */
static int
pair_item(PyObject *it, int *out)
{
    long v = PyIndex_Check(it) ? PyLong_AsLong(it) : -1;     /* PyLong_AsLong takes __index__ */
    if (!PyIndex_Check(it) || (v == -1 && PyErr_Occurred())) { PyErr_Clear(); return -1; }
    *out = v > INT_MAX ? INT_MAX : v < INT_MIN ? INT_MIN : (int)v;
    return 0;
}

/* An int or a pair of ints (torch's _pair) into out[2], each >= lo; None or missing gives dflt. */
static int
parse_pair(const char *op, const char *name, PyObject *o, int dflt, int lo, int out[2])
{
    int ok;
    out[0] = out[1] = dflt;
    if (o == NULL || o == Py_None) return 0;
    if (PyIndex_Check(o)) {
        ok = pair_item(o, &out[0]) == 0;
        out[1] = out[0];
    } else {
        PyObject *t = PySequence_Check(o) && !PyUnicode_Check(o) ? PySequence_Tuple(o) : NULL;
        PyErr_Clear();
        ok = t != NULL && PyTuple_GET_SIZE(t) == 2 && pair_item(PyTuple_GET_ITEM(t, 0), &out[0]) == 0 &&
             pair_item(PyTuple_GET_ITEM(t, 1), &out[1]) == 0;
        Py_XDECREF(t);
    }
    if (!ok) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int or a pair of ints", op, name);
        return -1;
    }
    if (out[0] < lo || out[1] < lo) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be >= %d, got (%d, %d)", op, name, lo, out[0], out[1]);
        return -1;
    }
    return 0;
}

static tl_tensor *
arg_f32(const char *op, const char *name, PyObject *o)
{
    if (!tl_tensor_check(o)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a Tensor, got %s", op, name, Py_TYPE(o)->tp_name);
        return NULL;
    }
    return tl_check_dtype(op, tl_tensor_CAST(o), TL_F32) < 0 ? NULL : tl_tensor_CAST(o);
}

/* x as a 4-D tensor (new ref): itself, or a (C, H, W) input viewed as (1, C, H, W); *batched says which. */
static PyObject *
as_batch(const char *op, PyObject *xo, int *batched)
{
    tl_tensor *x = tl_tensor_CAST(xo);
    char s[128];
    *batched = x->ndim == 4;
    if (x->ndim == 4) return Py_NewRef(xo);
    if (x->ndim == 3) return tl_unsqueeze(x, 0);
    tl_shape_str(x->shape, x->ndim, s, sizeof s);
    return PyErr_Format(PyExc_ValueError, "%s: input must be 4-D (N, C, H, W) or 3-D (C, H, W), got shape %s", op, s);
}

/* Output size and input layout for a window KH x KW (dilated), stride and padding over x (4-D). Checks
 * that the dilated window fits the padded input and that every index fits an int. */
static int
geometry(const char *op, tl_tensor *x, int KH, int KW, const int *s, const int *p, const int *d, conv_geom *g)
{
    char a[128];
    long eh = (long)d[0] * (KH - 1) + 1, ew = (long)d[1] * (KW - 1) + 1;
    long ph = x->shape[2] + 2L * p[0], pw = x->shape[3] + 2L * p[1];
    tl_shape_str(x->shape, x->ndim, a, sizeof a);
    if (x->shape[1] == 0 || x->shape[2] == 0 || x->shape[3] == 0) {
        PyErr_Format(PyExc_ValueError, "%s: input %s has a zero-size channel or spatial dim", op, a);
        return -1;
    }
    if (eh > ph || ew > pw) {
        PyErr_Format(PyExc_ValueError, "%s: kernel (%d, %d) with dilation (%d, %d) spans (%ld, %ld), larger than "
                     "the padded input (%ld, %ld) of input %s with padding (%d, %d)", op, KH, KW, d[0], d[1], eh, ew,
                     ph, pw, a, p[0], p[1]);
        return -1;
    }
    *g = (conv_geom){.N = (int)x->shape[0], .C = (int)x->shape[1], .H = (int)x->shape[2], .W = (int)x->shape[3],
                     .KH = KH, .KW = KW, .SH = s[0], .SW = s[1], .PH = p[0], .PW = p[1], .DH = d[0], .DW = d[1],
                     .sn = (int)x->strides[0], .sc = (int)x->strides[1], .sh = (int)x->strides[2],
                     .sw = (int)x->strides[3], .off = (int)x->offset};
    g->OH = (int)((ph - eh) / s[0] + 1);
    g->OW = (int)((pw - ew) / s[1] + 1);
    double cols = (double)g->C * KH * KW * g->N * g->OH * g->OW, in = (double)g->N * g->C * ph * pw;
    if (cols >= INT_MAX || in >= INT_MAX) {                /* kernels index with ints */
        PyErr_Format(PyExc_ValueError, "%s: input %s with kernel (%d, %d) indexes %.0f elements; at most %d are "
                     "supported: split the batch", op, a, KH, KW, cols > in ? cols : in, INT_MAX - 1);
        return -1;
    }
    return 0;
}

/* conv_geom from a node's iarg (KH KW SH SW PH PW DH DW) and its input's shape, for a contiguous input. */
static conv_geom
node_geometry(const tl_node *nd)
{
    const Py_ssize_t *sh = nd->in[0].shape;
    const int *a = nd->iarg;
    conv_geom g = {.N = (int)sh[0], .C = (int)sh[1], .H = (int)sh[2], .W = (int)sh[3], .KH = a[0], .KW = a[1],
                   .SH = a[2], .SW = a[3], .PH = a[4], .PW = a[5], .DH = a[6], .DW = a[7]};
    g.OH = (g.H + 2 * g.PH - g.DH * (g.KH - 1) - 1) / g.SH + 1;
    g.OW = (g.W + 2 * g.PW - g.DW * (g.KW - 1) - 1) / g.SW + 1;
    g.sw = 1; g.sh = g.W; g.sc = g.H * g.W; g.sn = g.C * g.H * g.W;
    return g;
}

static void
geometry_iarg(const conv_geom *g, int *iarg)
{
    const int v[8] = {g->KH, g->KW, g->SH, g->SW, g->PH, g->PW, g->DH, g->DW};
    memcpy(iarg, v, sizeof v);
}

/* One launch over `total` work-items: geometry, total, then the buffers, with *extra (if given) as an int
 * argument after the second buffer (pooling's mode flags). */
static int
launch(tl_kernel *kh, const conv_geom *g, int total, tl_tensor *const *ts, const int *extra, int nts,
       unsigned written)
{
    size_t sz[8] = {sizeof *g, I};
    const void *v[8] = {g, &total};
    tl_storage *st[6];
    int n = 2;
    if (tl_kernel_py(kh) == NULL) return -1;
    for (int i = 0; i < nts; i++) {
        st[i] = ts[i]->storage;
        sz[n] = Mm;
        v[n++] = &ts[i]->storage->mem;
        if (extra != NULL && i == 1) { sz[n] = I; v[n++] = extra; }
    }
    if (tl_set_args(kh->k, 0, n, sz, v) < 0) return -1;
    return tl_launch_1d(kh, (size_t)total, st, nts, written);
}

/* im2col and col2im each have a kernel for CPUs, whose work-items own contiguous rows of their output, and
 * one for GPUs, whose neighbouring work-items touch neighbouring addresses (see conv.cl). The device type
 * picks; TLGPU_CONV_KERNELS=rows|elements forces one (tests run both on any device). */
static int
rows_kernels(void)
{
    static int rows = -1;
    if (rows < 0) {
        const char *env = tl_setting_str(TL_SET_CONV_KERNELS);
        const tl_runtime *rt;
        tl_err err = {0};
        if (env != NULL && (strcmp(env, "rows") == 0 || strcmp(env, "elements") == 0)) rows = env[0] == 'r';
        else if (tl_runtime_get(&rt, &err) == TL_OK) rows = (rt->info.type & CL_DEVICE_TYPE_CPU) != 0;
        else return tl_raise(&err);
    }
    return rows;
}

/* cols [C*KH*KW, N*OH*OW] of x (4-D) under g, recorded for autograd (ROW_IM2COL). New ref. */
static PyObject *
im2col(PyObject *xo, const conv_geom *g)
{
    tl_tensor *x = tl_tensor_CAST(xo);
    Py_ssize_t shape[2] = {(Py_ssize_t)g->C * g->KH * g->KW, (Py_ssize_t)g->N * g->OH * g->OW};
    int rows = rows_kernels();
    tl_tensor *cols = rows < 0 ? NULL : tl_tensor_empty(TL_F32, 2, shape);
    if (cols == NULL) return NULL;
    if (cols->storage != NULL) {
        tl_tensor *ts[2] = {x, cols};
        int total = g->C * g->N * g->OH * (rows ? g->KH * g->KW : g->OW);   /* row segments or windows */
        if (launch(rows ? &k_im2col_rows : &k_im2col, g, total, ts, NULL, 2, 2u) < 0) { Py_DECREF(cols); return NULL; }
    }
    int iarg[8];
    geometry_iarg(g, iarg);
    return tl_record1((PyObject *)cols, &ROW_IM2COL, xo, iarg, 8, NULL);
}

/* A gradient as a contiguous tensor starting at element 0 (the backward kernels index from 0). New ref. */
static tl_tensor *
contig0(PyObject *grad)
{
    tl_tensor *g = tl_tensor_CAST(grad), *c;
    if (tl_tensor_is_contig(g) && g->offset == 0) return (tl_tensor *)Py_NewRef(grad);
    if ((c = tl_tensor_empty(TL_F32, g->ndim, g->shape)) != NULL && tl_copy_into(c, g) < 0) Py_CLEAR(c);
    return c;
}

static int
tl_im2col_backward(tl_node *nd, PyObject *grad, PyObject **gin)
{
    conv_geom g = node_geometry(nd);
    tl_tensor *gc = contig0(grad), *dx = NULL;
    int rows = rows_kernels();
    if (rows < 0 || gc == NULL || (dx = tl_tensor_empty(TL_F32, 4, nd->in[0].shape)) == NULL) goto fail;
    if (dx->storage != NULL) {                       /* then the columns are non-empty too */
        tl_tensor *ts[2] = {gc, dx};
        int total = g.N * g.C * g.H * (rows ? 1 : g.W);
        if (launch(rows ? &k_col2im_rows : &k_col2im, &g, total, ts, NULL, 2, 2u) < 0) goto fail;
    }
    Py_DECREF(gc);
    gin[0] = (PyObject *)dx;
    return 0;
fail:
    Py_XDECREF(gc); Py_XDECREF(dx);
    return -1;
}

static PyObject *
fn_im2col(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"input", "kernel_size", "stride", "padding", "dilation", NULL};
    PyObject *xo, *ko, *so = NULL, *po = NULL, *dO = NULL, *xb = NULL, *res = NULL;
    int k[2], s[2], p[2], d[2], batched;
    conv_geom g;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOO:_im2col", kwl, &xo, &ko, &so, &po, &dO)) return NULL;
    if (arg_f32("_im2col", "input", xo) == NULL || parse_pair("_im2col", "kernel_size", ko, 1, 1, k) < 0 ||
        parse_pair("_im2col", "stride", so, 1, 1, s) < 0 || parse_pair("_im2col", "padding", po, 0, 0, p) < 0 ||
        parse_pair("_im2col", "dilation", dO, 1, 1, d) < 0 || (xb = as_batch("_im2col", xo, &batched)) == NULL)
        return NULL;
    if (geometry("_im2col", tl_tensor_CAST(xb), k[0], k[1], s, p, d, &g) == 0) res = im2col(xb, &g);
    Py_DECREF(xb);
    return res;
}

/* One tl_conv_layout_f32 pass: y [O, N*L] -> out [N, O, L] (+ bias), or back with to_y. Every operand is
 * contiguous from element 0. */
static int
layout_launch(tl_tensor *src, tl_tensor *bias, tl_tensor *dst, int O, int N, int L, int to_y)
{
    int rows = rows_kernels(), hb = bias != NULL;
    if (rows < 0 || tl_kernel_py(&k_layout) == NULL) return -1;
    int total = N * O * (rows ? 1 : L);
    cl_mem bm = (hb ? bias : src)->storage->mem;       /* without a bias: never read */
    const size_t sz[10] = {I, I, I, I, I, I, Mm, Mm, I, Mm};
    const void *v[10] = {&O, &N, &L, &rows, &to_y, &total, &src->storage->mem, &bm, &hb, &dst->storage->mem};
    tl_storage *st[3] = {dst->storage, src->storage, hb ? bias->storage : NULL};
    if (tl_set_args(k_layout.k, 0, 10, sz, v) < 0 || tl_launch_1d(&k_layout, (size_t)total, st, 3, 1u) < 0)
        return -1;
    if (!to_y)                                           /* tlgpu.jit may move a ReLU/Tanh into this store */
        tl_capture_note_store(k_layout.k, &(tl_store_note){.out_arg = 9, .off_arg = -1, .bias_arg = -1,
                                                           .epi_arg = 8, .alpha_arg = -1, .res_arg = -1,
                                                           .res_off_arg = -1, .epi = hb, .N = L,
                                                           .out_off = (int)dst->offset, .n = (long)N * O * L});
    return 0;
}

/* y [O, N*OH*OW] (the GEMM's product) as the NCHW output [N, O, OH, OW] plus the bias, in one pass recorded
 * as ROW_CONV_LAYOUT; for N == 1 without a bias, y already is NCHW: a view. New ref. */
static PyObject *
to_nchw(PyObject *y, PyObject *bo, const conv_geom *g, int O)
{
    Py_ssize_t shape[4] = {g->N, O, g->OH, g->OW};
    PyObject *ins[2] = {y, bo};
    tl_tensor *b = NULL, *out = NULL;
    if (g->N == 1 && bo == NULL) return tl_reshape(tl_tensor_CAST(y), 4, shape);
    if (bo != NULL && (b = contig0(bo)) == NULL) return NULL;
    if ((out = tl_tensor_empty(TL_F32, 4, shape)) != NULL && out->storage != NULL &&
        layout_launch(tl_tensor_CAST(y), b, out, O, g->N, g->OH * g->OW, 0) < 0)
        Py_CLEAR(out);
    Py_XDECREF(b);
    if (out == NULL || !tl_autograd_wanted(ins, 2)) return (PyObject *)out;
    tl_node *nd = tl_node_new(&ROW_CONV_LAYOUT, ins, 2);
    if (nd == NULL) { Py_DECREF(out); return NULL; }
    nd->iarg[0] = O;
    nd->iarg[1] = g->N;
    nd->iarg[2] = g->OH * g->OW;
    tl_node_attach(nd, out);
    return (PyObject *)out;
}

/* dy = the gradient laid back out as [O, N*L]; dbias = its row sums (a contiguous last-axis reduction). */
static int
tl_conv_layout_backward(tl_node *nd, PyObject *grad, PyObject **gin)
{
    int O = nd->iarg[0], N = nd->iarg[1], L = nd->iarg[2];
    Py_ssize_t shape[2] = {O, (Py_ssize_t)N * L};
    tl_tensor *gc = contig0(grad), *gy = NULL;
    if (gc == NULL || (gy = tl_tensor_empty(TL_F32, 2, shape)) == NULL) goto fail;
    if (gy->storage != NULL && layout_launch(gc, NULL, gy, O, N, L, 1) < 0) goto fail;
    if (tl_wants_grad(nd, 1) && (gin[1] = tl_sum(gy, 1u << 1, 0)) == NULL) goto fail;
    Py_DECREF(gc);
    if (tl_wants_grad(nd, 0)) gin[0] = (PyObject *)gy;
    else Py_DECREF(gy);
    return 0;
fail:
    Py_XDECREF(gc); Py_XDECREF(gy);
    return -1;
}

/* conv2d on float32 operands (in: input, weight, bias or NULL; ctx: stride, padding, dilation objects). */
static PyObject *
conv2d_fn(PyObject *const *in, void *ctx)
{
    PyObject *xo = in[0], *wo = in[1], *bo = in[2] != NULL ? in[2] : Py_None;
    PyObject *so = ((PyObject **)ctx)[0], *po = ((PyObject **)ctx)[1], *dO = ((PyObject **)ctx)[2];
    PyObject *xb = NULL, *cols = NULL, *wm = NULL, *y = NULL, *out = NULL;
    tl_tensor *x, *w, *b = NULL;
    int s[2], p[2], d[2], batched = 1;
    char a[128], c[128];
    conv_geom g;
    if ((x = arg_f32("conv2d", "input", xo)) == NULL || (w = arg_f32("conv2d", "weight", wo)) == NULL) return NULL;
    if (bo != Py_None && (b = arg_f32("conv2d", "bias", bo)) == NULL) return NULL;
    if (parse_pair("conv2d", "stride", so, 1, 1, s) < 0 || parse_pair("conv2d", "padding", po, 0, 0, p) < 0 ||
        parse_pair("conv2d", "dilation", dO, 1, 1, d) < 0)
        return NULL;
    if (w->ndim != 4) {
        tl_shape_str(w->shape, w->ndim, c, sizeof c);
        return PyErr_Format(PyExc_ValueError, "conv2d: weight must be 4-D (out_channels, in_channels, kH, kW), got "
                            "shape %s", c);
    }
    if ((xb = as_batch("conv2d", xo, &batched)) == NULL) return NULL;
    x = tl_tensor_CAST(xb);
    int O = (int)w->shape[0];
    tl_shape_str(x->shape, x->ndim, a, sizeof a);
    tl_shape_str(w->shape, w->ndim, c, sizeof c);
    if (w->shape[1] != x->shape[1]) {
        PyErr_Format(PyExc_ValueError, "conv2d: weight %s expects %zd input channels, input %s has %zd (groups=1)",
                     c, w->shape[1], a, x->shape[1]);
        goto done;
    }
    if (b != NULL && (b->ndim != 1 || b->shape[0] != O)) {
        char e[128];
        tl_shape_str(b->shape, b->ndim, e, sizeof e);
        PyErr_Format(PyExc_ValueError, "conv2d: bias must be (%d,) for weight %s, got %s", O, c, e);
        goto done;
    }
    if (geometry("conv2d", x, (int)w->shape[2], (int)w->shape[3], s, p, d, &g) < 0) goto done;
    if ((double)O * g.N * g.OH * g.OW >= INT_MAX) {       /* the layout kernel indexes with ints */
        PyErr_Format(PyExc_ValueError, "conv2d: output (%d, %d, %d, %d) of input %s and weight %s has 2**31 or "
                     "more elements: split the batch", g.N, O, g.OH, g.OW, a, c);
        goto done;
    }
    /* Without autograd, where products take the CPU BLAS path: the whole convolution as one native command
     * (per image or group of images, im2col into a buffer that stays in cache and one sgemm into the NCHW
     * output), not three passes over the whole batch's columns in memory. */
    PyObject *ins[3] = {xb, wo, b != NULL ? bo : NULL};
    tl_tensor *direct = NULL;
    int nat = tl_autograd_wanted(ins, 3) ? 0 : tl_cpu_blas_conv((const int *)&g, x, w, b, &direct);
    if (nat < 0) goto done;
    if (nat > 0) {
        out = batched ? (PyObject *)direct : tl_squeeze_dim(direct, 0);
        if (!batched) Py_DECREF(direct);
        goto done;
    }
    if ((cols = im2col(xb, &g)) == NULL) goto done;
    Py_ssize_t wshape[2] = {O, tl_tensor_CAST(cols)->shape[0]};
    if ((wm = tl_reshape(w, 2, wshape)) == NULL) goto done;
    if ((y = PyNumber_MatrixMultiply(wm, cols)) == NULL) goto done;
    Py_CLEAR(cols);                                   /* the GEMM's node holds what backward needs */
    out = to_nchw(y, b != NULL ? bo : NULL, &g, O);
    if (out != NULL && !batched) Py_SETREF(out, tl_squeeze_dim(tl_tensor_CAST(out), 0));
done:
    Py_XDECREF(xb); Py_XDECREF(cols); Py_XDECREF(wm); Py_XDECREF(y);
    return out;
}

/* float16/bfloat16 operands and autocast through tl_call_f32 (ops.h): the float32 convolution. */
static PyObject *
fn_conv2d(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    static char *kwl[] = {"input", "weight", "bias", "stride", "padding", "dilation", NULL};
    PyObject *xo, *wo, *bo = Py_None, *geo[3] = {NULL, NULL, NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOO:conv2d", kwl, &xo, &wo, &bo, &geo[0], &geo[1], &geo[2]))
        return NULL;
    return tl_call_f32("conv2d", conv2d_fn, (PyObject *[]){xo, wo, bo == Py_None ? NULL : bo}, 3, geo);
}

/* Pooling: kernel_size, stride (default: kernel_size), padding (at most half the kernel, as torch). */
static int
pool_args(const char *op, PyObject *xo, PyObject *ko, PyObject *so, PyObject *po, PyObject **xb, int *batched,
          conv_geom *g)
{
    int k[2], s[2], p[2], one[2] = {1, 1};
    if (arg_f32(op, "input", xo) == NULL || parse_pair(op, "kernel_size", ko, 1, 1, k) < 0) return -1;
    if (so == NULL || so == Py_None || (PySequence_Check(so) && PySequence_Size(so) == 0)) {
        s[0] = k[0]; s[1] = k[1];
    } else if (parse_pair(op, "stride", so, 1, 1, s) < 0) {
        return -1;
    }
    if (parse_pair(op, "padding", po, 0, 0, p) < 0) return -1;
    if (2 * p[0] > k[0] || 2 * p[1] > k[1]) {
        PyErr_Format(PyExc_ValueError, "%s: padding (%d, %d) must be at most half the kernel (%d, %d)", op, p[0],
                     p[1], k[0], k[1]);
        return -1;
    }
    if ((*xb = as_batch(op, xo, batched)) == NULL) return -1;
    if (geometry(op, tl_tensor_CAST(*xb), k[0], k[1], s, p, one, g) < 0) { Py_CLEAR(*xb); return -1; }
    return 0;
}

static PyObject *pool_forward(PyObject *args, PyObject *kw, int is_max);

/* tl_call_wide's fn for a float16/bfloat16 input: in = input, then the pool's other arguments (ctx: is_max). */
static PyObject *
pool_f32(PyObject *const *in, void *ctx)
{
    const int is_max = *(const int *)ctx;
    PyObject *args = PyTuple_Pack(2, in[0], in[1]), *kw = PyDict_New(), *r = NULL;
    static const char *names[3] = {"stride", "padding", "count_include_pad"};
    for (int i = 0; kw != NULL && i < 3; i++)
        if (in[2 + i] != NULL && PyDict_SetItemString(kw, names[i], in[2 + i]) < 0) Py_CLEAR(kw);
    if (args != NULL && kw != NULL) r = pool_forward(args, kw, is_max);
    Py_XDECREF(args);
    Py_XDECREF(kw);
    return r;
}

static PyObject *
pool_forward(PyObject *args, PyObject *kw, int is_max)
{
    static char *kwl[] = {"input", "kernel_size", "stride", "padding", "count_include_pad", NULL};
    static char *kwl_max[] = {"input", "kernel_size", "stride", "padding", NULL};
    const char *op = is_max ? "max_pool2d" : "avg_pool2d";
    PyObject *xo, *ko, *so = NULL, *po = NULL, *xb = NULL;
    int batched, cip = 1;
    tl_tensor *out = NULL, *idx = NULL;
    conv_geom g;
    if (!PyArg_ParseTupleAndKeywords(args, kw, is_max ? "OO|OO:max_pool2d" : "OO|OOp:avg_pool2d",
                                     is_max ? kwl_max : kwl, &xo, &ko, &so, &po, &cip))
        return NULL;
    if (tl_tensor_check(xo) && TL_IS_HALF(tl_tensor_CAST(xo)->dtype)) {   /* float32 inside, the input's dtype out */
        PyObject *c = is_max ? NULL : PyBool_FromLong(cip), *r;
        r = tl_call_wide(op, pool_f32, (PyObject *[]){xo, ko, so, po, c}, 5, &is_max);
        Py_XDECREF(c);
        return r;
    }
    if (pool_args(op, xo, ko, so, po, &xb, &batched, &g) < 0) return NULL;
    Py_ssize_t shape[4] = {g.N, g.C, g.OH, g.OW};
    if ((out = tl_tensor_empty(TL_F32, 4, shape)) == NULL) goto fail;
    if (is_max && (idx = tl_tensor_empty(TL_I32, 4, shape)) == NULL) goto fail;
    if (out->storage != NULL) {
        tl_tensor *ts[3] = {tl_tensor_CAST(xb), out, idx};
        int total = g.N * g.C * g.OH * g.OW;
        if (launch(is_max ? &k_maxpool : &k_avgpool, &g, total, ts, is_max ? NULL : &cip, is_max ? 3 : 2,
                   is_max ? 6u : 2u) < 0)
            goto fail;
    }
    if (tl_autograd_wanted(&xb, 1)) {
        tl_node *nd = tl_node_new(is_max ? &ROW_MAX_POOL2D : &ROW_AVG_POOL2D, &xb, 1);
        if (nd == NULL) goto fail;
        geometry_iarg(&g, nd->iarg);
        nd->iarg[8] = is_max ? 0 : cip ? 1 : 2;       /* the backward kernel's mode */
        if (is_max) tl_node_save(nd, idx);
        tl_node_attach(nd, out);
    }
    Py_XDECREF(idx);
    Py_DECREF(xb);
    if (!batched) {
        PyObject *sq = tl_squeeze_dim(out, 0);
        Py_DECREF(out);
        return sq;
    }
    return (PyObject *)out;
fail:
    Py_XDECREF(xb); Py_XDECREF(out); Py_XDECREF(idx);
    return NULL;
}

static PyObject *
fn_max_pool2d(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    return pool_forward(args, kw, 1);
}

static PyObject *
fn_avg_pool2d(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kw)
{
    return pool_forward(args, kw, 0);
}

static int
pool_backward(tl_node *nd, PyObject *grad, PyObject **gin, int is_max)
{
    int mode = nd->iarg[8];
    conv_geom g = node_geometry(nd);
    tl_tensor *gc = contig0(grad), *idx = NULL, *dx = NULL;
    if (gc == NULL || (is_max && (idx = tl_node_saved(nd, 0)) == NULL)) goto fail;
    if ((dx = tl_tensor_empty(TL_F32, 4, nd->in[0].shape)) == NULL) goto fail;
    if (dx->storage != NULL) {
        tl_tensor *ts[3] = {gc, is_max ? idx : gc, dx};
        if (launch(&k_poolbw, &g, g.N * g.C * g.H * g.W, ts, &mode, 3, 4u) < 0) goto fail;
    }
    Py_DECREF(gc); Py_XDECREF(idx);
    gin[0] = (PyObject *)dx;
    return 0;
fail:
    Py_XDECREF(gc); Py_XDECREF(idx); Py_XDECREF(dx);
    return -1;
}

static int
tl_max_pool2d_backward(tl_node *nd, PyObject *grad, PyObject **gin)
{
    return pool_backward(nd, grad, gin, 1);
}

static int
tl_avg_pool2d_backward(tl_node *nd, PyObject *grad, PyObject **gin)
{
    return pool_backward(nd, grad, gin, 0);
}

static const PyMethodDef conv_functions[] = {
    {"conv2d", TL_KW(fn_conv2d),
     "conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1): 2-D cross-correlation of NCHW input "
     "(N, C, H, W) or (C, H, W) with weight (O, C, kH, kW) (groups=1); im2col + one GEMM."},
    {"max_pool2d", TL_KW(fn_max_pool2d),
     "max_pool2d(input, kernel_size, stride=None, padding=0): window maxima (stride defaults to kernel_size; "
     "padding counts as -inf; the gradient goes to the first maximum)."},
    {"avg_pool2d", TL_KW(fn_avg_pool2d),
     "avg_pool2d(input, kernel_size, stride=None, padding=0, count_include_pad=True): window means, zero "
     "padding counted in the divisor."},
    {"_im2col", TL_KW(fn_im2col),
     "_im2col(input, kernel_size, stride=1, padding=0, dilation=1): the columns [C*kH*kW, N*OH*OW] conv2d "
     "multiplies (differentiable: the backward is col2im)."},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_IM2COL = {"Im2colBackward", tl_im2col_backward};
static const tl_op_row ROW_MAX_POOL2D = {"MaxPool2dBackward", tl_max_pool2d_backward};
static const tl_op_row ROW_AVG_POOL2D = {"AvgPool2dBackward", tl_avg_pool2d_backward};
static const tl_op_row ROW_CONV_LAYOUT = {"ConvolutionBackward", tl_conv_layout_backward};
static const tl_op_row *const conv_rows[] = {&ROW_IM2COL, &ROW_MAX_POOL2D, &ROW_AVG_POOL2D, &ROW_CONV_LAYOUT, NULL};

const tl_family tl_family_conv = {conv_functions, NULL, NULL, NULL, NULL, .rows = conv_rows};
