/* ops_common.c: shared helpers for the ops families (see ops_common.h): kernel preparation and launches,
 * layouts, argument checks, and the copies and fills every layer above needs (contiguous, copy_into,
 * fill). Uses tensor.c and core/ only. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "ops_common.h"
#include "cl_runtime.h"
#include "capture.h"
#include "half.h"
#include <numpy/arrayobject.h>

cl_kernel
tl_kernel_py(tl_kernel *kh)
{
    tl_err err = {0};
    tl_status st;
    if (__atomic_load_n(&kh->k, __ATOMIC_ACQUIRE) != NULL) return kh->k;
    Py_BEGIN_ALLOW_THREADS                           /* a first build can take a second on PoCL */
    st = tl_kernel_prepare(kh, &err);
    Py_END_ALLOW_THREADS
    if (st != TL_OK) { tl_raise(&err); return NULL; }
    return kh->k;
}

int
tl_device_is_cpu(void)
{
    static int is_cpu = -1;
    if (is_cpu < 0) {
        const tl_runtime *rt;
        tl_err err = {0};
        if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
        is_cpu = (rt->info.type & CL_DEVICE_TYPE_CPU) != 0;
    }
    return is_cpu;
}

int
tl_set_args(cl_kernel k, int first, int n, const size_t *sizes, const void *const *values)
{
    for (int i = 0; i < n; i++) {
        cl_int rc = clSetKernelArg(k, (cl_uint)(first + i), sizes[i], values[i]);
        tl_capture_arg(k, (cl_uint)(first + i), sizes[i], values[i]);   /* no-op unless tlgpu.jit captures */
        if (rc != CL_SUCCESS) {
            tl_err err = {0};
            tl_err_set(&err, rc, "clSetKernelArg", NULL);
            return tl_raise(&err);
        }
    }
    return 0;
}

int
tl_launch_1d(tl_kernel *kh, size_t n, tl_storage *const *st, int nst, unsigned written)
{
    tl_err err = {0};
    size_t gws = tl_round_up(n, kh->wg), lws = kh->wg;
    if (tl_stream_launch(kh->k, 1, &gws, &lws, st, nst, written, kh->name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

/* On CPU devices a launch of fewer items than the handle's work-group size (256 on PoCL) runs in groups of 16:
 * PoCL runs a group's work-items as a loop, and a 256-wide group of mostly idle ones cost 2.3-2.5 us of CPU a
 * launch against 1.3-1.5 in groups of 16 (tl_ew_hot_f32 on 64 to 1024 floats, PoCL 3.1 with one thread: the
 * Tanh of a small policy). Only two local sizes, since PoCL builds a kernel for each local size it meets. */
int
tl_launch_flat(tl_kernel *kh, size_t n, tl_storage *const *st, int nst)
{
    tl_err err = {0};
    if (n >= kh->wg || kh->wg < 16) return tl_launch_1d(kh, n, st, nst, 1u);
    size_t gws = tl_round_up(n, 16), lws = 16;
    if (tl_stream_launch(kh->k, 1, &gws, &lws, st, nst, 1u, kh->name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

void
tl_layout_make(tl_layout *L, int ndim, const Py_ssize_t *shape, tl_tensor *const *ops, int nops)
{
    int st[4][TL_MAX_DIMS], sh[TL_MAX_DIMS], nd = 0;
    memset(L, 0, sizeof *L);
    L->n = 1;
    for (int d = 0; d < ndim; d++) L->n *= (int)shape[d];
    for (int k = 0; k < nops; k++) L->off[k] = ops[k] != NULL ? (int)ops[k]->offset : 0;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] == 1) continue;                     /* size-1 dims contribute nothing */
        sh[nd] = (int)shape[d];
        for (int k = 0; k < 4; k++) {
            const tl_tensor *t = k < nops ? ops[k] : NULL;
            int td = t != NULL ? d - (ndim - t->ndim) : -1;
            st[k][nd] = (t == NULL || td < 0 || t->shape[td] == 1) ? 0 : (int)t->strides[td];
        }
        nd++;
    }
    /* merge dim d into the last merged dim when every operand walks them as one run: the merged dim's own
     * stride (L->st), which a merge has already replaced by the inner dim's (a contiguous [N, C, H, W] is one
     * run; comparing the first dim's stride kept it 2-D or 3-D, so it took the strided kernels) */
    int out = 0;
    for (int d = 0; d < nd; d++) {
        int merge = out > 0;
        for (int k = 0; k < 4 && merge; k++) merge = L->st[k][out - 1] == st[k][d] * sh[d];
        if (merge) {
            L->shape[out - 1] *= sh[d];
            for (int k = 0; k < 4; k++) L->st[k][out - 1] = st[k][d];
        } else {
            L->shape[out] = sh[d];
            for (int k = 0; k < 4; k++) L->st[k][out] = st[k][d];
            out++;
        }
    }
    L->ndim = out;
}

int
tl_broadcast(const char *op, tl_tensor *const *ts, int n, int *ndim, Py_ssize_t *shape)
{
    int nd = 0;
    for (int i = 0; i < n; i++)
        if (ts[i] != NULL && ts[i]->ndim > nd) nd = ts[i]->ndim;
    for (int d = 0; d < nd; d++) shape[d] = 1;
    for (int i = 0; i < n; i++) {
        const tl_tensor *t = ts[i];
        if (t == NULL) continue;
        for (int d = 0; d < t->ndim; d++) {
            Py_ssize_t *s = &shape[nd - t->ndim + d], v = t->shape[d];
            if (*s == 1) *s = v;
            else if (v != 1 && v != *s) {
                char sa[128], sb[128];
                tl_shape_str(ts[0] ? ts[0]->shape : NULL, ts[0] ? ts[0]->ndim : 0, sa, sizeof sa);
                tl_shape_str(t->shape, t->ndim, sb, sizeof sb);
                PyErr_Format(PyExc_ValueError, "%s: shapes %s and %s cannot be broadcast together", op, sa, sb);
                return -1;
            }
        }
    }
    *ndim = nd;
    return 0;
}

int
tl_want_tensor(const char *op, PyObject *x, tl_tensor **out)
{
    if (tl_tensor_check(x)) { *out = tl_tensor_CAST(x); return 0; }
    PyErr_Format(PyExc_TypeError, "%s: expected a Tensor, got %s", op, Py_TYPE(x)->tp_name);
    return -1;
}

int
tl_check_dtype(const char *op, const tl_tensor *t, int dtype)
{
    if (t->dtype == dtype) return 0;
    char s[128];
    tl_shape_str(t->shape, t->ndim, s, sizeof s);
    PyErr_Format(PyExc_TypeError, "%s: expected a %s tensor, got %s with shape %s", op, tl_dtype_name(dtype),
                 tl_dtype_name(t->dtype), s);
    return -1;
}

int
tl_parse_shape(const char *op, PyObject *args, int *ndim, Py_ssize_t *shape)
{
    PyObject *seq = args;
    /* f(n) and f((n, m)) both: anything with __index__ (numpy integers too) is one size */
    if (PyTuple_GET_SIZE(args) == 1 && !PyIndex_Check(PyTuple_GET_ITEM(args, 0))) seq = PyTuple_GET_ITEM(args, 0);
    PyObject *fast = PySequence_Fast(seq, "shape must be ints or a sequence of ints");
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > TL_MAX_DIMS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "%s: %zd dimensions; at most %d are supported", op, n, TL_MAX_DIMS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t v = PyNumber_AsSsize_t(PySequence_Fast_GET_ITEM(fast, i), PyExc_OverflowError);
        if (v == -1 && PyErr_Occurred()) { Py_DECREF(fast); return -1; }
        if (v < 0) {
            Py_DECREF(fast);
            PyErr_Format(PyExc_ValueError, "%s: negative dimension %zd in shape", op, v);
            return -1;
        }
        shape[i] = v;
    }
    *ndim = (int)n;
    Py_DECREF(fast);
    return 0;
}

int
tl_parse_dtype_all(PyObject *obj, int dflt)
{
    PyArray_Descr *d = NULL;
    if (obj == NULL || obj == Py_None) return dflt;
    if (!PyArray_DescrConverter2(obj, &d)) return -1;
    int dt = d != NULL ? tl_dtype_of_typenum(d->type_num) : -1;
    Py_XDECREF(d);
    if (dt >= 0) return dt;
    PyObject *r = PyObject_Repr(obj);
    PyErr_Format(PyExc_TypeError, "unsupported dtype %s: tlgpu tensors are float32, int32, float16, bfloat16 "
                 "or uint8", r ? PyUnicode_AsUTF8(r) : "?");
    Py_XDECREF(r);
    return -1;
}

int
tl_parse_dtype(PyObject *obj, int dflt)
{
    int dt = tl_parse_dtype_all(obj, dflt);
    if (dt == TL_F32 || dt == TL_I32 || dt < 0) return dt;
    PyErr_Format(PyExc_TypeError, "unsupported dtype %s here: this op makes float32 or int32 tensors (convert "
                 "the result with .to(dtype))", tl_dtype_name(dt));
    return -1;
}

/* dst (contiguous, 2 or 3 dims) = src whose dim -2 has stride 1 (a transposed view, x.T.contiguous()): one
 * tiled transpose (tl_transpose_u32) instead of strided reads. 1 done, 0 not that case, -1 raised. */
static int
copy_transposed(tl_tensor *dst, tl_tensor *src)
{
    static tl_kernel kh = TL_KERNEL("elementwise", "tl_transpose_u32");
    tl_err err = {0};
    const int nd = src->ndim;
    if (tl_dtype_size(src->dtype) != 4 || nd < 2 || nd > 3 || src->strides[nd - 2] != 1 || src->shape[nd - 2] < 2 || src->shape[nd - 1] < 2 ||
        !tl_tensor_is_contig(dst) || tl_tensor_numel(src) > INT_MAX)
        return 0;
    const int R = (int)src->shape[nd - 1], C = (int)src->shape[nd - 2], sR = (int)src->strides[nd - 1];
    const int sb = nd == 3 ? (int)src->strides[0] : 0, offX = (int)src->offset, offY = (int)dst->offset;
    const size_t si = sizeof(int), sm = sizeof(cl_mem), sz[8] = {si, si, sm, si, si, si, sm, si}, lws[3] = {32, 8, 1};
    const size_t gws[3] = {tl_round_up((size_t)C, 32), tl_round_up((size_t)R, 32) / 4,
                           nd == 3 ? (size_t)src->shape[0] : 1};
    const void *val[8] = {&R, &C, &src->storage->mem, &offX, &sb, &sR, &dst->storage->mem, &offY};
    tl_storage *st[2] = {dst->storage, src->storage};
    cl_kernel k = tl_kernel_py(&kh);
    if (k == NULL || tl_set_args(k, 0, 8, sz, val) < 0) return -1;
    if (tl_stream_launch(k, 3, gws, lws, st, 2, 1u, kh.name, &err) != TL_OK) return tl_raise(&err);
    return 1;
}

/* t with its last two dims swapped: a view, outside the graph. */
static tl_tensor *
swap_last2(tl_tensor *t)
{
    const int nd = t->ndim;
    Py_ssize_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    memcpy(strides, t->strides, sizeof strides);
    shape[nd - 2] = t->shape[nd - 1], shape[nd - 1] = t->shape[nd - 2];
    strides[nd - 2] = t->strides[nd - 1], strides[nd - 1] = t->strides[nd - 2];
    return tl_tensor_view(t, nd, shape, strides, t->offset);
}

tl_tensor *
tl_copy_flipped(tl_tensor *t)
{
    const int nd = t->ndim;
    if (t->strides[nd - 2] == 1) return tl_tensor_contiguous(t);
    tl_tensor *v = swap_last2(t), *y = v != NULL ? tl_tensor_contiguous(v) : NULL;
    Py_XDECREF(v);
    v = y != NULL ? swap_last2(y) : NULL;
    Py_XDECREF(y);
    return v;
}

/* The bit copy and fill kernels by element size: [0] 1 byte, [1] 2 bytes, [2] 4 bytes. */
static tl_kernel *
by_size(tl_kernel *k3, int dtype)
{
    size_t s = tl_dtype_size(dtype);
    return &k3[s == 1 ? 0 : s == 2 ? 1 : 2];
}

int
tl_copy_into(tl_tensor *dst, tl_tensor *src)
{
    static tl_kernel k3[3] = {TL_KERNEL("elementwise", "tl_copy_u8"), TL_KERNEL("elementwise", "tl_copy_u16"),
                              TL_KERNEL("elementwise", "tl_copy_u32")};
    tl_kernel *kh = by_size(k3, dst->dtype);
    tl_layout L;
    tl_tensor *ops[2] = {dst, src};
    cl_kernel k;
    int t;
    if (dst->storage == NULL) return 0;                  /* zero-size: nothing to do */
    if (tl_dtype_size(src->dtype) != tl_dtype_size(dst->dtype)) {
        PyErr_Format(PyExc_SystemError, "copy: %s into %s is no bit copy", tl_dtype_name(src->dtype),
                     tl_dtype_name(dst->dtype));
        return -1;
    }
    if ((t = copy_transposed(dst, src)) != 0) return t < 0 ? -1 : 0;
    if ((k = tl_kernel_py(kh)) == NULL) return -1;
    tl_layout_make(&L, dst->ndim, dst->shape, ops, 2);
    const size_t sz[3] = {sizeof L, sizeof(cl_mem), sizeof(cl_mem)};
    const void *v[3] = {&L, &dst->storage->mem, &src->storage->mem};
    tl_storage *st[2] = {dst->storage, src->storage};
    if (tl_set_args(k, 0, 3, sz, v) < 0) return -1;
    return tl_launch_1d(kh, (size_t)L.n, st, 2, 1u);
}

tl_tensor *
tl_tensor_contiguous(tl_tensor *t)
{
    if (tl_tensor_is_contig(t)) return (tl_tensor *)Py_NewRef(t);
    tl_tensor *out = tl_tensor_empty(t->dtype, t->ndim, t->shape);
    if (out != NULL && tl_copy_into(out, t) < 0) Py_CLEAR(out);
    return out;
}

int
tl_check_int32_value(const char *op, double v)
{
    char num[64];
    if (v != v) {                                    /* numpy casts NaN to INT32_MIN: refuse it instead */
        PyErr_Format(PyExc_ValueError, "%s: cannot convert NaN to int32", op);
        return -1;
    }
    if (v > -2147483649.0 && v < 2147483648.0) return 0;   /* truncation toward zero lands in range */
    snprintf(num, sizeof num, "%.17g", v);
    PyErr_Format(PyExc_OverflowError, "%s: value %s does not fit int32", op, num);
    return -1;
}

/* Fills every element of t (any layout) with the bit pattern `bits` (the low 1, 2 or 4 bytes of it). */
static int
fill_bits(tl_tensor *t, uint32_t bits)
{
    static tl_kernel k3[3] = {TL_KERNEL("elementwise", "tl_fill_u8"), TL_KERNEL("elementwise", "tl_fill_u16"),
                              TL_KERNEL("elementwise", "tl_fill_u32")};
    tl_kernel *kh = by_size(k3, t->dtype);
    tl_layout L;
    cl_kernel k;
    if (t->storage == NULL) return 0;
    if ((k = tl_kernel_py(kh)) == NULL) return -1;
    tl_layout_make(&L, t->ndim, t->shape, &t, 1);
    const size_t sz[3] = {sizeof L, sizeof(cl_mem), sizeof bits};
    const void *v[3] = {&L, &t->storage->mem, &bits};
    if (tl_set_args(k, 0, 3, sz, v) < 0 || tl_launch_1d(kh, (size_t)L.n, &t->storage, 1, 1u) < 0) return -1;
    if (t->dtype == TL_F32 || t->dtype == TL_I32)       /* a fill is a copy of a scalar: tlgpu.jit may fuse it */
        tl_capture_note_ew(k, TL_EW_COPY, t->dtype == TL_I32 ? TL_EWM_I32 : TL_EWM_F32, &L, t->dtype, 1, 2);
    return 0;
}

int
tl_tensor_fill(tl_tensor *t, double value)
{
    uint32_t bits;
    if (t->dtype == TL_I32) {
        if (tl_check_int32_value("fill", value) < 0) return -1;    /* the cast below would be undefined */
        int32_t i = (int32_t)value;
        memcpy(&bits, &i, 4);
    } else if (t->dtype == TL_U8) {                  /* torch's wrap: -1 -> 255, 300 -> 44 */
        if (!(value > -9.2e18 && value < 9.2e18)) value = 0.0;
        bits = (uint32_t)((uint64_t)(int64_t)value & 0xffu);
    } else if (t->dtype == TL_F16) {
        bits = tl_f32_to_f16_bits((float)value);
    } else if (t->dtype == TL_BF16) {
        bits = tl_f32_to_bf16_bits((float)value);
    } else {
        float f = (float)value;
        memcpy(&bits, &f, 4);
    }
    return fill_bits(t, bits);
}

int
tl_is_dense(const tl_tensor *t)
{
    return tl_tensor_numel(t) == 0 || tl_tensor_is_contig(t);
}

/* The creation functions' requires_grad=True, set on the fresh leaf they made (the Tensor attribute's setter
 * rules, of which only the dtype applies to a new leaf). */
int
tl_require_grad_new(const char *op, tl_tensor *t)
{
    if (!TL_IS_FLOAT(t->dtype)) {
        PyErr_Format(PyExc_TypeError, "%s: requires_grad=True needs float32, float16 or bfloat16 (a floating "
                     "dtype); got %s", op, tl_dtype_name(t->dtype));
        return -1;
    }
    t->requires_grad = 1;
    return 0;
}

int
tl_check_writable(const char *op, const tl_tensor *t)
{
    for (int d = 0; d < t->ndim; d++) {
        if (t->strides[d] == 0 && t->shape[d] > 1) {
            char sh[128];
            tl_shape_str(t->shape, t->ndim, sh, sizeof sh);
            PyErr_Format(PyExc_ValueError, "%s: cannot write in place to an expanded view (shape %s, dim %d has "
                         "stride 0); make it contiguous() first", op, sh, d);
            return -1;
        }
    }
    return 0;
}

/* Kernels write elements in no particular order, so a source that shares the destination's storage with a
 * different layout (t[1:] += t[:-1]) is copied out first. The identical layout (t += t) is safe. */
tl_tensor *
tl_unalias(tl_tensor *dst, tl_tensor *src)
{
    int same = src->storage == NULL || src->storage != dst->storage ||
               (src->offset == dst->offset && src->ndim == dst->ndim &&
                memcmp(src->shape, dst->shape, sizeof(Py_ssize_t) * (size_t)src->ndim) == 0 &&
                memcmp(src->strides, dst->strides, sizeof(Py_ssize_t) * (size_t)src->ndim) == 0);
    if (same) return (tl_tensor *)Py_NewRef(src);
    tl_tensor *tmp = tl_tensor_empty(src->dtype, src->ndim, src->shape);
    if (tmp != NULL && tl_copy_into(tmp, src) < 0) Py_CLEAR(tmp);
    return tmp;
}

/* An int, or an int32 tensor of one element whose value the kernel reads on the device (no sync: a traced
 * decode step replays with whatever the tensor then holds). *t: borrowed, NULL for an int (then *v). */
int
tl_device_scalar(const char *op, const char *name, PyObject *o, tl_tensor **t, Py_ssize_t *v)
{
    *t = NULL;
    if (!tl_tensor_check(o)) {
        *v = PyNumber_AsSsize_t(o, PyExc_OverflowError);
        if (*v == -1 && PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_TypeError))
                PyErr_Format(PyExc_TypeError, "%s: %s must be an int or an int32 tensor of one element, got %s", op,
                             name, Py_TYPE(o)->tp_name);
            return -1;
        }
        return 0;
    }
    tl_tensor *x = tl_tensor_CAST(o);
    if (x->dtype != TL_I32 || tl_tensor_numel(x) != 1) {
        char s[128];
        tl_shape_str(x->shape, x->ndim, s, sizeof s);
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int or an int32 tensor of one element, got %s %s", op, name,
                     tl_dtype_name(x->dtype), s);
        return -1;
    }
    *t = x;
    return 0;
}
