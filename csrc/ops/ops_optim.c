/* ops_optim.c: fused optimizer steps (kernels/optim.cl): one kernel launch per parameter, Adam over up to 8
 * parameters a launch (tl_adam8, GPUs), or Adam, SGD, RAdam and RMSprop over up to 8 a launch in chunks
 * (tl_*c, CPU devices; launch_chunked). The Python optimizers (tlgpu/optim) hold hyperparameters and state
 * tensors and choose the launches.
 * Steps write parameters in place: they bump the version counter (a graph that saved the old values will
 * refuse to backward) but are allowed on leaves that require grad, as optimizer updates must be.
 * Parameters may be float32, float16 or bfloat16; the gradient and the state of a call have the parameter's
 * dtype (torch's fused optimizers); each kernel has an _f32, _f16 and _bf16 variant with the same arguments
 * (float32 arithmetic inside, one rounding per stored value). */
#include "ops_common.h"
#include "ops.h"
#include "autograd.h"

/* The variant for a parameter of dtype dt out of {_f32, _f16, _bf16} (check_group let only those through). */
#define PICK(kh, dt) (&(kh)[(dt) == TL_F32 ? 0 : (dt) == TL_F16 ? 1 : 2])
#define VARIANTS(name) \
    {TL_KERNEL("optim", name "_f32"), TL_KERNEL("optim", name "_f16"), TL_KERNEL("optim", name "_bf16")}

/* Checks that p (ts[0]) is floating and every other tensor has its dtype, and that all are contiguous and
 * shaped like p (state may be None when flagged). */
static int
check_group(const char *op, PyObject *const *ts, int n, unsigned optional)
{
    tl_tensor *p = NULL;
    for (int i = 0; i < n; i++) {
        if (ts[i] == Py_None && (optional >> i & 1u)) continue;
        if (!tl_tensor_check(ts[i])) {
            PyErr_Format(PyExc_TypeError, "%s: argument %d must be a Tensor, got %s", op, i, Py_TYPE(ts[i])->tp_name);
            return -1;
        }
        tl_tensor *t = tl_tensor_CAST(ts[i]);
        if ((p == NULL ? tl_check_float(op, t) : tl_check_dtype(op, t, p->dtype)) < 0) return -1;
        if (p == NULL) p = t;
        char a[128], b[128];
        tl_shape_str(t->shape, t->ndim, a, sizeof a);
        tl_shape_str(p->shape, p->ndim, b, sizeof b);
        if (!tl_is_dense(t)) return PyErr_Format(PyExc_ValueError, "%s: tensors must be contiguous (argument "
                                                          "%d, shape %s)", op, i, a), -1;
        if (t->ndim != p->ndim || memcmp(t->shape, p->shape, sizeof(Py_ssize_t) * (size_t)t->ndim) != 0)
            return PyErr_Format(PyExc_ValueError, "%s: argument %d has shape %s; the parameter has %s", op, i, a,
                                b), -1;
    }
    return 0;
}

/* Sets mem + offset-free arguments: every buffer argument is the tensor's storage (offsets are folded in by
 * refusing non-zero offsets: parameters and state created by tlgpu start at element 0). kh3: the kernel's
 * three dtype variants. */
static int
launch(tl_kernel *kh3, PyObject *const *ts, int nts, const size_t *sz, const void *const *extra, int nextra,
       int first_extra)
{
    tl_tensor *p = tl_tensor_CAST(ts[0]);
    tl_kernel *kh = PICK(kh3, p->dtype);
    cl_kernel k = tl_kernel_py(kh);
    tl_storage *st[6] = {NULL};
    cl_mem none = NULL;
    int n = (int)tl_tensor_numel(p);
    if (k == NULL) return -1;
    if (p->storage == NULL) return 0;
    const size_t nsz = sizeof n;
    const void *nval = &n;
    if (tl_set_args(k, 0, 1, &nsz, &nval) < 0) return -1;
    for (int i = 0; i < nts; i++) {
        tl_tensor *t = ts[i] == Py_None ? NULL : tl_tensor_CAST(ts[i]);
        if (t != NULL && t->offset != 0)
            return PyErr_Format(PyExc_ValueError, "%s: tensors must start at element 0 (argument %d is a slice)",
                                kh->name, i), -1;
        st[i] = t != NULL ? t->storage : NULL;
        const void *mem = t != NULL ? (const void *)&t->storage->mem : (const void *)&none;
        size_t msz = sizeof(cl_mem);
        if (tl_set_args(k, 1 + i, 1, &msz, &mem) < 0) return -1;
    }
    if (tl_set_args(k, first_extra, nextra, sz, extra) < 0) return -1;
    unsigned written = 1u;
    for (int i = 2; i < nts; i++) written |= 1u << i;             /* p and the state; g (1) is read only */
    tl_mark_write(p, kh->name);
    return tl_launch_1d(kh, (size_t)n, st, nts, written);
}

static PyObject *
fn_sgd_step(PyObject *Py_UNUSED(m), PyObject *args)
{
    static tl_kernel kh[3] = VARIANTS("tl_sgd");
    PyObject *ts[3];
    float lr, momentum, dampening, wd;
    int nesterov, first;
    if (!PyArg_ParseTuple(args, "OOOffffpp:_sgd_step", &ts[0], &ts[1], &ts[2], &lr, &momentum, &dampening, &wd,
                          &nesterov, &first))
        return NULL;
    if (check_group("sgd", ts, 3, 4u) < 0) return NULL;
    if (ts[2] == Py_None && momentum != 0.0f) return PyErr_Format(PyExc_ValueError, "sgd: momentum needs a buffer");
    const size_t sz[6] = {4, 4, 4, 4, 4, 4};
    const void *v[6] = {&lr, &momentum, &dampening, &wd, &nesterov, &first};
    if (launch(kh, ts, 3, sz, v, 6, 4) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
fn_adam_step(PyObject *Py_UNUSED(m), PyObject *args)
{
    static tl_kernel kh[3] = VARIANTS("tl_adam");
    PyObject *ts[5];
    float lr, b1, b2, eps, wd, bc1, bc2;
    int decoupled, amsgrad;
    if (!PyArg_ParseTuple(args, "OOOOOfffffpffp:_adam_step", &ts[0], &ts[1], &ts[2], &ts[3], &ts[4], &lr, &b1, &b2,
                          &eps, &wd, &decoupled, &bc1, &bc2, &amsgrad))
        return NULL;
    if (check_group("adam", ts, 5, 16u) < 0) return NULL;
    if (amsgrad && ts[4] == Py_None) return PyErr_Format(PyExc_ValueError, "adam: amsgrad needs a max buffer");
    const size_t sz[9] = {4, 4, 4, 4, 4, 4, 4, 4, 4};
    const void *v[9] = {&lr, &b1, &b2, &eps, &wd, &decoupled, &bc1, &bc2, &amsgrad};
    if (launch(kh, ts, 5, sz, v, 9, 6) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _adam_multi(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2):
 * Adam/AdamW without amsgrad over up to 8 parameters of one dtype at the same step, one launch (tl_adam8_f32,
 * _f16 or _bf16: tlgpu/optim groups the parameters by dtype). */
static PyObject *
fn_adam_multi(PyObject *Py_UNUSED(m), PyObject *args)
{
    static tl_kernel kh3[3] = VARIANTS("tl_adam8");
    enum { K = 8 };
    PyObject *lists[4];
    float sc[5], bc1, bc2;
    int decoupled;
    if (!PyArg_ParseTuple(args, "OOOOfffffpff:_adam_multi", &lists[0], &lists[1], &lists[2], &lists[3], &sc[0],
                          &sc[1], &sc[2], &sc[3], &sc[4], &decoupled, &bc1, &bc2))
        return NULL;
    Py_ssize_t n = PySequence_Size(lists[0]);
    if (n < 1 || n > K) return PyErr_Format(PyExc_ValueError, "adam: _adam_multi takes 1 to %d parameters", K);
    for (int j = 1; j < 4; j++)
        if (PySequence_Size(lists[j]) != n) return PyErr_Format(PyExc_ValueError, "adam: list lengths differ");
    tl_storage *st[4 * K] = {NULL};
    tl_tensor *params[K] = {NULL};
    cl_mem mem[4 * K];
    cl_int ends[K];
    long total = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *ts[4];
        for (int j = 0; j < 4; j++) {
            ts[j] = PySequence_GetItem(lists[j], k);
            if (ts[j] == NULL) { for (int q = 0; q < j; q++) Py_DECREF(ts[q]); return NULL; }
            Py_DECREF(ts[j]);                         /* the lists keep them alive */
        }
        if (check_group("adam", ts, 4, 0u) < 0) return NULL;
        if (k > 0 && tl_check_dtype("adam", tl_tensor_CAST(ts[0]), params[0]->dtype) < 0) return NULL;
        for (int j = 0; j < 4; j++) {
            tl_tensor *t = tl_tensor_CAST(ts[j]);
            if (t->offset != 0)
                return PyErr_Format(PyExc_ValueError, "adam: tensors must start at element 0 (a slice)");
            st[4 * k + j] = t->storage;
        }
        params[k] = tl_tensor_CAST(ts[0]);
        total += (long)tl_tensor_numel(params[k]);
        if (total > INT32_MAX) return PyErr_Format(PyExc_ValueError, "adam: more than 2**31-1 elements in one call");
        ends[k] = (cl_int)total;
    }
    if (total == 0) Py_RETURN_NONE;
    int real = 0;                                     /* a parameter with a buffer (total > 0: one exists) */
    while (st[4 * real] == NULL) real++;
    for (int k = 0; k < K; k++) {                     /* zero-size or unused slots alias it, never reached */
        const int use = k < n && st[4 * k] != NULL ? k : real;
        for (int j = 0; j < 4; j++) mem[4 * k + j] = st[4 * use + j]->mem;
        if (k >= n) ends[k] = (cl_int)total;
    }
    tl_kernel *kh = PICK(kh3, params[0]->dtype);
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL) return NULL;
    size_t sz[1 + 4 * K + 8];
    const void *val[1 + 4 * K + 8];
    sz[0] = sizeof ends;
    val[0] = ends;
    for (int i = 0; i < 4 * K; i++) { sz[1 + i] = sizeof(cl_mem); val[1 + i] = &mem[i]; }
    const void *scal[8] = {&sc[0], &sc[1], &sc[2], &sc[3], &sc[4], &decoupled, &bc1, &bc2};
    for (int i = 0; i < 8; i++) { sz[1 + 4 * K + i] = 4; val[1 + 4 * K + i] = scal[i]; }
    if (tl_set_args(k, 0, 1 + 4 * K + 8, sz, val) < 0) return NULL;
    unsigned written = 0;
    tl_storage *touched[4 * K];
    int nt = 0;
    for (Py_ssize_t q = 0; q < n; q++) {
        if (st[4 * q] == NULL) continue;
        tl_mark_write(params[q], kh->name);
        for (int j = 0; j < 4; j++) {
            if (j != 1) written |= 1u << nt;           /* p, m, v written; g read */
            touched[nt++] = st[4 * q + j];
        }
    }
    if (tl_launch_1d(kh, (size_t)total, touched, nt, written) < 0) return NULL;
    Py_RETURN_NONE;
}

/* ---- chunked launches (CPU devices): kernels/optim.cl's tl_*c kernels ---- */
enum { CK = 8, CHUNK = 4096, MAXB = 5 };   /* optim.cl's TL_CK; elements a work-item; buffers a parameter */

/* One launch of a chunked kernel over up to CK parameters of one dtype: lists[0..nb) are parallel sequences
 * (the parameters, their gradients, then the state the kernel writes in place); list j may be None where bit j
 * of `optional` is set (its slots then alias the nearest given buffer before j, which the kernel never touches
 * for it). Arguments: cend, nel (int8: running chunk totals, element counts), chunk (elements a work-item: 4096;
 * 1024 and 16384 measured the same on PoCL, the step being bound by memory), CK x nb buffers, then the nscal
 * scalars. The stream's written mask has 32 bits, so a launch holds
 * at most 32 buffers (8 parameters of Adam, 6 with amsgrad's max): the Python side splits longer lists. */
static int
launch_chunked(tl_kernel *kh3, const char *op, PyObject *const *lists, int nb, unsigned optional, int nscal,
               const size_t *ssz, const void *const *sval)
{
    Py_ssize_t n = PySequence_Size(lists[0]);
    int given = 0, chunk = CHUNK;
    if (n < 0) return -1;
    for (int j = 0; j < nb; j++) {
        if (lists[j] == Py_None && (optional >> j & 1u)) continue;
        given++;
        Py_ssize_t nj = PySequence_Size(lists[j]);
        if (nj < 0) return -1;
        if (nj != n) return PyErr_Format(PyExc_ValueError, "%s: list lengths differ (%zd and %zd)", op, n, nj), -1;
    }
    if (n < 1 || n > CK || n * given > 32)
        return PyErr_Format(PyExc_ValueError, "%s: one chunked launch takes 1 to %d parameters and at most 32 "
                            "buffers (got %zd parameters of %d buffers)", op, CK, n, given), -1;
    tl_tensor *t[CK][MAXB] = {{NULL}};
    cl_int cend[CK], nel[CK];
    int chunks = 0, real = -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *row[MAXB];
        for (int j = 0; j < nb; j++) {
            row[j] = lists[j] == Py_None ? Py_None : PySequence_GetItem(lists[j], k);
            if (row[j] == NULL) return -1;
            if (row[j] != Py_None) Py_DECREF(row[j]);             /* the lists keep them alive */
        }
        if (check_group(op, row, nb, optional) < 0) return -1;
        for (int j = 0; j < nb; j++) t[k][j] = row[j] == Py_None ? NULL : tl_tensor_CAST(row[j]);
        if (k > 0 && tl_check_dtype(op, t[k][0], t[0][0]->dtype) < 0) return -1;
        for (int j = 0; j < nb; j++)
            if (t[k][j] != NULL && t[k][j]->offset != 0)
                return PyErr_Format(PyExc_ValueError, "%s: tensors must start at element 0 (a slice)", op), -1;
        Py_ssize_t numel = tl_tensor_numel(t[k][0]);
        if (numel > INT32_MAX - CHUNK)
            return PyErr_Format(PyExc_ValueError, "%s: a parameter of %zd elements is too large", op, numel), -1;
        nel[k] = (cl_int)numel;
        if (t[k][0]->storage == NULL) nel[k] = 0;
        if (nel[k] > 0 && real < 0) real = (int)k;
        chunks += (nel[k] + chunk - 1) / chunk;
        if (chunks > INT32_MAX / chunk)
            return PyErr_Format(PyExc_ValueError, "%s: too many elements in one call", op), -1;
        cend[k] = chunks;
    }
    if (chunks == 0) return 0;                        /* zero-size parameters only */
    tl_kernel *kh = PICK(kh3, t[0][0]->dtype);
    cl_kernel kern = tl_kernel_py(kh);
    if (kern == NULL) return -1;
    cl_mem mem[CK * MAXB];
    size_t sz[3 + CK * MAXB + 12];
    const void *val[3 + CK * MAXB + 12];
    for (int k = 0; k < CK; k++) {                    /* unused and zero-size slots alias a real parameter */
        const int use = k < n && nel[k] > 0 ? k : real;
        if (k >= n) { cend[k] = chunks; nel[k] = 0; }
        for (int j = 0; j < nb; j++) {
            const tl_tensor *tj = t[use][j];
            for (int i = j - 1; tj == NULL; i--) tj = t[use][i];     /* the nearest given buffer before j */
            mem[nb * k + j] = tj->storage->mem;
        }
    }
    sz[0] = sz[1] = sizeof cend;
    sz[2] = sizeof chunk;
    val[0] = cend;
    val[1] = nel;
    val[2] = &chunk;
    for (int i = 0; i < CK * nb; i++) { sz[3 + i] = sizeof(cl_mem); val[3 + i] = &mem[i]; }
    for (int i = 0; i < nscal; i++) { sz[3 + CK * nb + i] = ssz[i]; val[3 + CK * nb + i] = sval[i]; }
    if (tl_set_args(kern, 0, 3 + CK * nb + nscal, sz, val) < 0) return -1;
    tl_storage *touched[32];
    unsigned written = 0;
    int nt = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        if (nel[k] == 0) continue;
        tl_mark_write(t[k][0], kh->name);
        for (int j = 0; j < nb; j++) {
            if (t[k][j] == NULL) continue;
            if (j != 1) written |= 1u << nt;             /* the parameter and its state; the gradient is read */
            touched[nt++] = t[k][j]->storage;
        }
    }
    tl_err err = {0};
    const size_t gws = (size_t)chunks, lws = 1;
    if (tl_stream_launch(kern, 1, &gws, &lws, touched, nt, written, kh->name, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

/* _adam_chunked(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs|None, lr, beta1, beta2, eps,
 * weight_decay, decoupled, bc1, bc2, amsgrad): Adam/AdamW over up to 8 parameters (6 with amsgrad) of one
 * dtype at one step, one launch of tl_adamc (CPU devices). */
static PyObject *
fn_adam_chunked(PyObject *Py_UNUSED(m), PyObject *args)
{
    static tl_kernel kh[3] = VARIANTS("tl_adamc");
    PyObject *lists[5];
    float lr, b1, b2, eps, wd, bc1, bc2;
    int decoupled, amsgrad;
    if (!PyArg_ParseTuple(args, "OOOOOfffffpffp:_adam_chunked", &lists[0], &lists[1], &lists[2], &lists[3],
                          &lists[4], &lr, &b1, &b2, &eps, &wd, &decoupled, &bc1, &bc2, &amsgrad))
        return NULL;
    if (amsgrad && lists[4] == Py_None)
        return PyErr_Format(PyExc_ValueError, "adam: amsgrad needs the max buffers");
    if (!amsgrad) lists[4] = Py_None;                 /* never read: fewer buffers, more parameters a launch */
    const size_t sz[9] = {4, 4, 4, 4, 4, 4, 4, 4, 4};
    const void *v[9] = {&lr, &b1, &b2, &eps, &wd, &decoupled, &bc1, &bc2, &amsgrad};
    if (launch_chunked(kh, "adam", lists, 5, 16u, 9, sz, v) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _sgd_chunked(params, grads, momentum_buffers|None, lr, momentum, dampening, weight_decay, nesterov, first):
 * SGD over up to 8 parameters of one dtype, one launch of tl_sgdc (CPU devices). */
static PyObject *
fn_sgd_chunked(PyObject *Py_UNUSED(m), PyObject *args)
{
    static tl_kernel kh[3] = VARIANTS("tl_sgdc");
    PyObject *lists[3];
    float lr, momentum, dampening, wd;
    int nesterov, first;
    if (!PyArg_ParseTuple(args, "OOOffffpp:_sgd_chunked", &lists[0], &lists[1], &lists[2], &lr, &momentum,
                          &dampening, &wd, &nesterov, &first))
        return NULL;
    if (lists[2] == Py_None && momentum != 0.0f)
        return PyErr_Format(PyExc_ValueError, "sgd: momentum needs the buffers");
    if (momentum == 0.0f) lists[2] = Py_None;         /* never touched */
    const size_t sz[6] = {4, 4, 4, 4, 4, 4};
    const void *v[6] = {&lr, &momentum, &dampening, &wd, &nesterov, &first};
    if (launch_chunked(kh, "sgd", lists, 3, 4u, 6, sz, v) < 0) return NULL;
    Py_RETURN_NONE;
}

/* _rmsprop(p, g, square_avg, grad_avg or None, momentum_buffer or None, lr, alpha, eps, weight_decay, momentum,
 * centered, chunked): one parameter's RMSprop step (tl_rmsprop_*), or with chunked lists of up to 8 parameters of
 * one dtype and their state (6 with both optional states: the stream's 32 buffers) in one launch of tl_rmspropc
 * (CPU devices). */
static PyObject *
fn_rmsprop(PyObject *Py_UNUSED(m), PyObject *args)
{
    static tl_kernel kh[3] = VARIANTS("tl_rmsprop"), kc[3] = VARIANTS("tl_rmspropc");
    PyObject *o[5];
    float f[5];
    int centered, chunked;
    if (!PyArg_ParseTuple(args, "OOOOOfffffpp:_rmsprop", &o[0], &o[1], &o[2], &o[3], &o[4], &f[0], &f[1], &f[2],
                          &f[3], &f[4], &centered, &chunked))
        return NULL;
    if ((centered && o[3] == Py_None) || (f[4] > 0.0f && o[4] == Py_None))
        return PyErr_Format(PyExc_ValueError, "rmsprop: centered needs grad_avg and momentum a buffer");
    const size_t sz[6] = {4, 4, 4, 4, 4, 4};
    const void *v[6] = {&f[0], &f[1], &f[2], &f[3], &f[4], &centered};
    if (chunked) {
        if (!centered) o[3] = Py_None;                 /* never touched */
        if (f[4] <= 0.0f) o[4] = Py_None;
        if (launch_chunked(kc, "rmsprop", o, 5, 24u, 6, sz, v) < 0) return NULL;
    } else if (check_group("rmsprop", o, 5, 24u) < 0 || launch(kh, o, 5, sz, v, 6, 6) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _radam_chunked(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, decoupled,
 * step_size, adaptive): RAdam over up to 8 parameters of one dtype at one step, one launch of tl_radamc. */
static PyObject *
fn_radam_chunked(PyObject *Py_UNUSED(m), PyObject *args)
{
    static tl_kernel kh[3] = VARIANTS("tl_radamc");
    PyObject *lists[4];
    float lr, b1, b2, eps, wd, step_size;
    int decoupled, adaptive;
    if (!PyArg_ParseTuple(args, "OOOOfffffpfp:_radam_chunked", &lists[0], &lists[1], &lists[2], &lists[3], &lr,
                          &b1, &b2, &eps, &wd, &decoupled, &step_size, &adaptive))
        return NULL;
    const size_t sz[8] = {4, 4, 4, 4, 4, 4, 4, 4};
    const void *v[8] = {&lr, &b1, &b2, &eps, &wd, &decoupled, &step_size, &adaptive};
    if (launch_chunked(kh, "radam", lists, 4, 0u, 8, sz, v) < 0) return NULL;
    Py_RETURN_NONE;
}

/* RAdam: the step's scalars (step_size, adaptive: rho_t > 5) come from the host (tlgpu/optim). */
static PyObject *
fn_radam_step(PyObject *Py_UNUSED(m), PyObject *args)
{
    static tl_kernel kh[3] = VARIANTS("tl_radam");
    PyObject *ts[4];
    float lr, b1, b2, eps, wd, step_size;
    int decoupled, adaptive;
    if (!PyArg_ParseTuple(args, "OOOOfffffpfp:_radam_step", &ts[0], &ts[1], &ts[2], &ts[3], &lr, &b1, &b2, &eps, &wd,
                          &decoupled, &step_size, &adaptive))
        return NULL;
    if (check_group("radam", ts, 4, 0u) < 0) return NULL;
    const size_t sz[8] = {4, 4, 4, 4, 4, 4, 4, 4};
    const void *v[8] = {&lr, &b1, &b2, &eps, &wd, &decoupled, &step_size, &adaptive};
    if (launch(kh, ts, 4, sz, v, 8, 5) < 0) return NULL;
    Py_RETURN_NONE;
}

static const PyMethodDef optim_functions[] = {
    {"_sgd_step", fn_sgd_step, METH_VARARGS,
     "_sgd_step(p, g, buf|None, lr, momentum, dampening, weight_decay, nesterov, first): one fused SGD step."},
    {"_adam_step", fn_adam_step, METH_VARARGS,
     "_adam_step(p, g, m, v, vmax|None, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2, amsgrad)."},
    {"_adam_multi", fn_adam_multi, METH_VARARGS,
     "_adam_multi(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, decoupled, bc1, bc2): "
     "Adam without amsgrad over up to 8 parameters of one dtype at one step, one launch."},
    {"_adam_chunked", fn_adam_chunked, METH_VARARGS,
     "_adam_chunked(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs|None, lr, beta1, beta2, eps, weight_decay, "
     "decoupled, bc1, bc2, amsgrad): Adam over up to 8 parameters (6 with amsgrad) of one dtype at one step, one "
     "launch in chunks (CPU devices)."},
    {"_sgd_chunked", fn_sgd_chunked, METH_VARARGS,
     "_sgd_chunked(params, grads, momentum_buffers|None, lr, momentum, dampening, weight_decay, nesterov, first): "
     "SGD over up to 8 parameters of one dtype, one launch in chunks (CPU devices)."},
    {"_radam_chunked", fn_radam_chunked, METH_VARARGS,
     "_radam_chunked(params, grads, exp_avgs, exp_avg_sqs, lr, beta1, beta2, eps, weight_decay, decoupled, "
     "step_size, adaptive): RAdam over up to 8 parameters of one dtype at one step, one launch in chunks."},
    {"_rmsprop", fn_rmsprop, METH_VARARGS,
     "_rmsprop(p, g, square_avg, grad_avg|None, momentum_buffer|None, lr, alpha, eps, weight_decay, momentum, "
     "centered, chunked): one fused RMSprop step; chunked: lists of up to 8 parameters (6 with both optional "
     "states) in one launch (CPU devices)."},
    {"_radam_step", fn_radam_step, METH_VARARGS,
     "_radam_step(p, g, m, v, lr, beta1, beta2, eps, weight_decay, decoupled, step_size, adaptive)."},
    {NULL, NULL, 0, NULL},
};

const tl_family tl_family_optim = {optim_functions, NULL, NULL, NULL, NULL};
