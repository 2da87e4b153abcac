/* ops_nn.c: fused losses. cross_entropy(logits [N, C], int32 targets [N], ignore_index, reduction): a small
 * batch with mean/sum (C <= 1024, N * C <= 65536) is one work-group, one launch; otherwise it runs the
 * row log_softmax kernel, then one kernel for the per-row NLL and weights, then (mean/sum) a reduction; its
 * backward is a single kernel, (softmax - onehot) * upstream / count, from the saved log-probabilities.
 * The mean divides by the number of non-ignored targets, computed on the device: no sync point. */
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"

static const tl_op_row ROW_CROSS_ENTROPY;   /* autograd rows (below) */

enum { CE_MEAN, CE_SUM, CE_NONE };

/* Small batches (few classes, few elements) as one work-group, one launch (tl_ce_small_f32); 1 done, 0 not
 * that case, -1 raised. */
static int
cross_entropy_small(tl_tensor *x, tl_tensor *t, int ignore, int mode, PyObject **res, PyObject **logp_out,
                    PyObject **denom_out)
{
    static tl_kernel kh = TL_KERNEL("nn", "tl_ce_small_f32");
    const int n = (int)x->shape[0], c = (int)x->shape[1];
    if (mode == CE_NONE || n == 0 || c > 1024 || (long)n * c > (1L << 16) || !tl_tensor_is_contig(x)) return 0;
    cl_kernel k = tl_kernel_py(&kh);
    if (k == NULL) return -1;
    tl_tensor *tc = tl_tensor_contiguous(t), *logp = NULL, *loss = NULL, *denom = NULL;
    if (tc == NULL || (logp = tl_tensor_empty(TL_F32, 2, x->shape)) == NULL ||
        (loss = tl_tensor_empty(TL_F32, 0, NULL)) == NULL || (denom = tl_tensor_empty(TL_F32, 0, NULL)) == NULL)
        goto fail;
    size_t L = 1;
    while (L * 2 <= kh.wg && L < (size_t)n) L *= 2;
    const int xoff = (int)x->offset, toff = (int)tc->offset;
    const size_t sz[12] = {4, 4, sizeof(cl_mem), 4, sizeof(cl_mem), 4, 4, 4, sizeof(cl_mem), sizeof(cl_mem),
                           sizeof(cl_mem), 2 * L * sizeof(float)};
    const void *v[12] = {&n, &c, &x->storage->mem, &xoff, &tc->storage->mem, &toff, &ignore, &mode,
                         &logp->storage->mem, &loss->storage->mem, &denom->storage->mem, NULL};
    tl_storage *st[5] = {logp->storage, loss->storage, denom->storage, x->storage, tc->storage};
    tl_err err = {0};
    if (tl_set_args(k, 0, 12, sz, v) < 0) goto fail;
    if (tl_stream_launch(k, 1, &L, &L, st, 5, 7u, kh.name, &err) != TL_OK) { tl_raise(&err); goto fail; }
    Py_DECREF(tc);
    *res = (PyObject *)loss;
    *logp_out = (PyObject *)logp;
    if (mode == CE_MEAN) *denom_out = (PyObject *)denom;
    else Py_DECREF(denom);
    return 1;
fail:
    Py_XDECREF(tc); Py_XDECREF(logp); Py_XDECREF(loss); Py_XDECREF(denom);
    return -1;
}

static PyObject *
cross_entropy_fwd(tl_tensor *x, tl_tensor *t, int ignore, int mode, PyObject **logp_out, PyObject **denom_out)
{
    static tl_kernel kh = TL_KERNEL("nn", "tl_nll_f32");
    PyObject *logp = NULL, *loss = NULL, *w = NULL, *res = NULL, *denom = NULL;
    int n = (int)x->shape[0], c = (int)x->shape[1];
    Py_ssize_t nn = n;
    int small = cross_entropy_small(x, t, ignore, mode, &res, logp_out, denom_out);
    if (small != 0) return small > 0 ? res : NULL;
    if ((logp = tl_log_softmax(x, 1)) == NULL) goto done;
    if ((loss = (PyObject *)tl_tensor_empty(TL_F32, 1, &nn)) == NULL ||
        (w = (PyObject *)tl_tensor_empty(TL_F32, 1, &nn)) == NULL)
        goto done;
    if (n > 0) {
        cl_kernel k = tl_kernel_py(&kh);
        tl_tensor *lp = tl_tensor_CAST(logp), *ls = tl_tensor_CAST(loss), *ws = tl_tensor_CAST(w);
        tl_tensor *tc = tl_tensor_contiguous(t);
        if (k == NULL || tc == NULL) { Py_XDECREF(tc); goto done; }
        int toff = (int)tc->offset;                   /* log_softmax's output is fresh: offset 0 */
        const size_t sz[8] = {4, 4, sizeof(cl_mem), sizeof(cl_mem), 4, 4, sizeof(cl_mem), sizeof(cl_mem)};
        const void *v[8] = {&n, &c, &lp->storage->mem, &tc->storage->mem, &toff, &ignore, &ls->storage->mem,
                            &ws->storage->mem};
        tl_storage *st[4] = {ls->storage, ws->storage, lp->storage, tc->storage};
        int rc = tl_set_args(k, 0, 8, sz, v) < 0 || tl_launch_1d(&kh, (size_t)n, st, 4, 3u) < 0;
        Py_DECREF(tc);
        if (rc) goto done;
    }
    if (mode == CE_NONE) {
        res = Py_NewRef(loss);
    } else if ((res = tl_sum(tl_tensor_CAST(loss), TL_AXES_ALL, 0)) != NULL && mode == CE_MEAN) {
        if ((denom = tl_sum(tl_tensor_CAST(w), TL_AXES_ALL, 0)) == NULL) Py_CLEAR(res);
        else Py_SETREF(res, PyNumber_TrueDivide(res, denom));
    }
done:
    Py_XDECREF(loss);
    Py_XDECREF(w);
    if (res != NULL) { *logp_out = logp; *denom_out = denom; }
    else { Py_XDECREF(logp); Py_XDECREF(denom); }
    return res;
}

static PyObject *
fn_cross_entropy(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"logits", "targets", "ignore_index", "reduction", NULL};
    PyObject *xo, *to, *logp = NULL, *denom = NULL, *res;
    long long ignore_in = -100;
    int mode;
    const char *red = "mean";
    char a[128], b[128];
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|Ls:cross_entropy", kw, &xo, &to, &ignore_in, &red)) return NULL;
    if (ignore_in < INT32_MIN || ignore_in > INT32_MAX)
        return PyErr_Format(PyExc_OverflowError, "cross_entropy: ignore_index %lld does not fit int32 (the targets' "
                            "dtype)", ignore_in);
    int ignore = (int)ignore_in;
    if (!tl_tensor_check(xo) || !tl_tensor_check(to))
        return PyErr_Format(PyExc_TypeError, "cross_entropy: logits and targets must be Tensors");
    tl_tensor *x = tl_tensor_CAST(xo), *t = tl_tensor_CAST(to);
    if (tl_check_float("cross_entropy", x) < 0 || tl_check_dtype("cross_entropy", t, TL_I32) < 0) return NULL;
    if (strcmp(red, "mean") == 0) mode = CE_MEAN;
    else if (strcmp(red, "sum") == 0) mode = CE_SUM;
    else if (strcmp(red, "none") == 0) mode = CE_NONE;
    else return PyErr_Format(PyExc_ValueError, "cross_entropy: reduction must be 'mean', 'sum' or 'none', not '%s'",
                             red);
    if (x->ndim != 2 || t->ndim != 1 || t->shape[0] != x->shape[0]) {
        tl_shape_str(x->shape, x->ndim, a, sizeof a);
        tl_shape_str(t->shape, t->ndim, b, sizeof b);
        return PyErr_Format(PyExc_ValueError, "cross_entropy: logits must be (N, C) and targets (N,); got %s and %s",
                            a, b);
    }
    if (x->shape[1] == 0 && x->shape[0] > 0) {     /* no class for any target to name */
        tl_shape_str(x->shape, x->ndim, a, sizeof a);
        return PyErr_Format(PyExc_ValueError, "cross_entropy: logits of shape %s have no classes", a);
    }
    PyObject *wide = NULL;                            /* float16/bfloat16 logits: in float32, result back */
    const int half_in = TL_IS_HALF(x->dtype) ? x->dtype : -1;
    if (half_in >= 0) {
        if ((wide = tl_convert(x, TL_F32)) == NULL) return NULL;
        xo = wide;
        x = tl_tensor_CAST(wide);
    }
    int prev = tl_grad_set(0);                        /* the pieces are not recorded: one fused node is */
    res = cross_entropy_fwd(x, t, ignore, mode, &logp, &denom);
    tl_grad_set(prev);
    if (res != NULL && tl_autograd_wanted(&xo, 1)) {
        tl_node *nd = tl_node_new(&ROW_CROSS_ENTROPY, &xo, 1);
        if (nd == NULL) {
            Py_CLEAR(res);
        } else {
            nd->iarg[0] = mode;
            nd->iarg[1] = ignore;
            tl_node_save(nd, tl_tensor_CAST(logp));
            tl_node_save(nd, t);
            if (denom != NULL) tl_node_save(nd, tl_tensor_CAST(denom));
            tl_node_attach(nd, tl_tensor_CAST(res));
        }
    }
    Py_XDECREF(logp);
    Py_XDECREF(denom);
    Py_XDECREF(wide);
    return half_in >= 0 && tl_autocast_dtype() < 0 ? tl_convert_steal(res, half_in) : res;   /* autocast: float32 */
}

static int
tl_cross_entropy_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    static tl_kernel kh = TL_KERNEL("nn", "tl_ce_grad_f32");
    tl_tensor *logp = tl_node_saved(nd, 0), *t = logp ? tl_node_saved(nd, 1) : NULL;
    tl_tensor *denom = NULL, *gc = NULL, *out = NULL;
    int mode = nd->iarg[0], ignore = nd->iarg[1], rc = -1;
    if (t == NULL || (nd->n_saved > 2 && (denom = tl_node_saved(nd, 2)) == NULL)) goto done;
    if ((gc = tl_tensor_contiguous(tl_tensor_CAST(g))) == NULL) goto done;
    if ((out = tl_tensor_empty(TL_F32, 2, logp->shape)) == NULL) goto done;
    int n = (int)logp->shape[0], c = (int)logp->shape[1];
    if (out->storage != NULL) {
        cl_kernel k = tl_kernel_py(&kh);
        tl_tensor *dn = denom != NULL ? denom : gc;
        tl_tensor *tc = k != NULL ? tl_tensor_contiguous(t) : NULL;
        if (tc == NULL) goto done;
        Py_SETREF(t, tc);
        int toff = (int)t->offset, goff = (int)gc->offset, doff = (int)dn->offset;
        const size_t sz[12] = {4, 4, sizeof(cl_mem), sizeof(cl_mem), 4, 4, sizeof(cl_mem), 4, sizeof(cl_mem), 4, 4,
                               sizeof(cl_mem)};
        const void *v[12] = {&n, &c, &logp->storage->mem, &t->storage->mem, &toff, &ignore, &gc->storage->mem, &goff,
                             &dn->storage->mem, &doff, &mode, &out->storage->mem};
        tl_storage *st[5] = {out->storage, logp->storage, t->storage, gc->storage, dn->storage};
        if (tl_set_args(k, 0, 12, sz, v) < 0 || tl_launch_1d(&kh, (size_t)n * (size_t)c, st, 5, 1u) < 0) goto done;
    }
    gin[0] = (PyObject *)out;
    out = NULL;
    rc = 0;
done:
    Py_XDECREF(logp); Py_XDECREF(t); Py_XDECREF(denom); Py_XDECREF(gc); Py_XDECREF(out);
    return rc;
}

static const PyMethodDef nn_functions[] = {
    {"cross_entropy", (PyCFunction)(void (*)(void))fn_cross_entropy, METH_VARARGS | METH_KEYWORDS,
     "cross_entropy(logits, targets, ignore_index=-100, reduction='mean'): fused log-softmax + NLL over int32 "
     "targets; 'mean' divides by the number of non-ignored targets."},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_CROSS_ENTROPY = {"CrossEntropyBackward", tl_cross_entropy_backward};
static const tl_op_row *const nn_rows[] = {&ROW_CROSS_ENTROPY, NULL};

const tl_family tl_family_nn = {nn_functions, NULL, NULL, NULL, NULL, .rows = nn_rows};
