/* ops_matmul.c: float32 matrix products: matmul / `@` with numpy semantics (1-D operands promoted and
 * their dim dropped from the result, batch dims broadcast), dot of two vectors (a 0-d result) and outer.
 * Every product becomes one mm_problem: C[batch, M, N] = A @ B, with A and B read through their own
 * strides (a transposed view, a vector, a broadcast batch all cost no copy) and C a new contiguous
 * tensor. Invariants: the kernel is chosen once per process from the work-group size the device
 * allows for it (kernels/matmul.cl: 256, 64 or any work-items); a zero-size result enqueues nothing
 * and K == 0 is one fill with zeros; batch dims collapse where strides allow, and the host issues one
 * launch per index of any batch dims beyond the two the kernel walks. TLGPU_MATMUL_KERNEL=small|naive
 * forces a fallback kernel (for tests). No backward yet (autograd has not landed). */
#include "ops_common.h"
#include "autograd.h"
#include <stdarg.h>
#include "cl_runtime.h"
#include <stdlib.h>
#include <string.h>

/* Batch dims after collapsing: shape and, per operand (0 = C, 1 = A, 2 = B), strides in elements. */
typedef struct {
    int M, N, K;
    int sAm, sAk, sBk, sBn;
    int nbd, bshape[TL_MAX_DIMS], bst[3][TL_MAX_DIMS], off[3];
} mm_problem;

typedef enum { MM_TILED = 0, MM_SMALL = 1, MM_NAIVE = 2 } mm_variant;
static tl_kernel mm_kernels[3] = {TL_KERNEL("matmul", "tl_matmul_f32"), TL_KERNEL("matmul", "tl_matmul_small_f32"),
                                  TL_KERNEL("matmul", "tl_matmul_naive_f32")};
static const int mm_tile[3] = {64, 32, 1};              /* output tile side; 4x4 outputs per work-item */
static int mm_best = -1;                                /* the tiled variant this device can run */

/* The largest tiled kernel whose work-group (tile/4 squared) the device allows for it, else naive. */
static int
choose_tiled(void)
{
    const tl_runtime *rt;
    tl_err err = {0};
    if (mm_best >= 0) return mm_best;
    const char *force = getenv("TLGPU_MATMUL_KERNEL");    /* "small" or "naive": test the fallbacks */
    if (force != NULL && strcmp(force, "small") == 0) return mm_best = MM_SMALL;
    if (force != NULL && strcmp(force, "naive") == 0) return mm_best = MM_NAIVE;
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err);
    for (int v = MM_TILED; v <= MM_SMALL; v++) {
        size_t kmax = 0, need = (size_t)(mm_tile[v] / 4) * (size_t)(mm_tile[v] / 4);
        cl_kernel k = tl_kernel_py(&mm_kernels[v]);
        if (k == NULL) return -1;
        cl_int rc = clGetKernelWorkGroupInfo(k, rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
        if (rc != CL_SUCCESS) {
            tl_err_set(&err, rc, "clGetKernelWorkGroupInfo", mm_kernels[v].name);
            return tl_raise(&err);
        }
        if (kmax >= need) return mm_best = v;
    }
    return mm_best = MM_NAIVE;
}

static int
to_int(Py_ssize_t v)                                    /* sizes and strides fit: storages hold < 2**31 */
{
    return (int)v;
}

/* Enqueues C = A @ B for p over `out` (contiguous, non-empty). a/b may lack storage only when K == 0. */
static int
mm_launch(const mm_problem *p, tl_tensor *a, tl_tensor *b, tl_tensor *out)
{
    tl_err err = {0};
    int v, nouter = 1, nb1 = 1, nb2 = 1, sb[2][2] = {{0, 0}, {0, 0}};
    if (p->K == 0) return tl_tensor_fill(out, 0.0);
    if ((v = choose_tiled()) < 0) return -1;
    if (p->M == 1 || p->N == 1) v = MM_NAIVE;           /* a vector product: a tile would be mostly idle */
    tl_kernel *kh = &mm_kernels[v];
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL) return -1;
    int inner = p->nbd < 2 ? p->nbd : 2, first = p->nbd - inner;
    if (inner >= 1) { nb2 = p->bshape[p->nbd - 1]; sb[0][1] = p->bst[1][p->nbd - 1]; sb[1][1] = p->bst[2][p->nbd - 1]; }
    if (inner == 2) { nb1 = p->bshape[first]; sb[0][0] = p->bst[1][first]; sb[1][0] = p->bst[2][first]; }
    for (int d = 0; d < first; d++) nouter *= p->bshape[d];
    size_t gws[3], lws[3] = {(size_t)mm_tile[v] / 4, (size_t)mm_tile[v] / 4, 1};
    if (v == MM_NAIVE) {                                 /* flat over M*N with the handle's 1-D size */
        lws[0] = kh->wg;
        lws[1] = 1;
        gws[0] = tl_round_up((size_t)p->M * (size_t)p->N, kh->wg);
        gws[1] = 1;
    } else {
        gws[0] = tl_round_up((size_t)p->N, (size_t)mm_tile[v]) / 4;
        gws[1] = tl_round_up((size_t)p->M, (size_t)mm_tile[v]) / 4;
    }
    gws[2] = (size_t)nb1 * (size_t)nb2;
    tl_storage *st[3] = {out->storage, a->storage, b->storage};
    for (int o = 0; o < nouter; o++) {
        int off[3] = {p->off[0], p->off[1], p->off[2]};
        for (int d = first - 1, rest = o; d >= 0; d--) {  /* batch dims the kernel does not walk */
            int i = rest % p->bshape[d];
            rest /= p->bshape[d];
            for (int q = 0; q < 3; q++) off[q] += i * p->bst[q][d];
        }
        const size_t I = sizeof(int), Mm = sizeof(cl_mem);
        const size_t sz[18] = {I, I, I, I, Mm, I, I, I, I, I, Mm, I, I, I, I, I, Mm, I};
        const void *val[18] = {&p->M, &p->N, &p->K, &nb2, &a->storage->mem, &off[1], &sb[0][0], &sb[0][1],
                               &p->sAm, &p->sAk, &b->storage->mem, &off[2], &sb[1][0], &sb[1][1], &p->sBk,
                               &p->sBn, &out->storage->mem, &off[0]};
        if (tl_set_args(k, 0, 18, sz, val) < 0) return -1;
        if (tl_stream_launch(k, 3, gws, lws, st, 3, 1u, kh->name, &err) != TL_OK)
            return tl_raise(&err);
    }
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

/* numpy matmul: a (..., M, K) or (K,), b (..., K, N) or (K,). */
static PyObject *
mm_forward(const char *op, tl_tensor *a, tl_tensor *b)
{
    mm_problem p = {0};
    Py_ssize_t shape[TL_MAX_DIMS + 2];
    int nshape = 0;
    tl_tensor *out = NULL;
    if (tl_check_dtype(op, a, TL_F32) < 0 || tl_check_dtype(op, b, TL_F32) < 0) return NULL;
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
    if (!av) shape[nshape++] = p.M;
    if (!bv) shape[nshape++] = p.N;
    if (nshape > TL_MAX_DIMS) return shapes_error(op, a, b, "give a result of too many dims");
    if ((out = tl_tensor_empty(TL_F32, nshape, shape)) == NULL) return NULL;
    if (out->storage == NULL) return (PyObject *)out;    /* zero-size: enqueue nothing */
    p.off[1] = to_int(a->offset);
    p.off[2] = to_int(b->offset);
    if (mm_launch(&p, a, b, out) < 0) Py_CLEAR(out);
    return (PyObject *)out;
}

/* Records out = a @ b (kind 0) or outer(a, b) (kind 1) for autograd: both operands are saved. */
static PyObject *
record(PyObject *out, tl_tensor *a, tl_tensor *b, int kind)
{
    PyObject *ins[2] = {(PyObject *)a, (PyObject *)b};
    if (out == NULL || !tl_autograd_wanted(ins, 2)) return out;
    tl_node *nd = tl_node_new(TL_OP_MATMUL, ins, 2);
    if (nd == NULL) { Py_DECREF(out); return NULL; }
    nd->iarg[0] = kind;
    tl_node_save(nd, a);
    tl_node_save(nd, b);
    tl_node_attach(nd, tl_tensor_CAST(out));
    return out;
}

static PyObject *
mm(const char *op, tl_tensor *a, tl_tensor *b)
{
    return record(mm_forward(op, a, b), a, b, 0);
}

static PyObject *
call(PyObject *obj, const char *method, const char *fmt, ...);

/* d(a @ b): da = g @ b^T, db = a^T @ g, with 1-D operands promoted to matrices (and the promoted dim squeezed
 * back out) so the engine's broadcast reduction sees only real batch dims. outer: da = g @ b, db = g^T @ a. */
int
tl_matmul_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    PyObject *a = (PyObject *)tl_node_saved(nd, 0), *b = a ? (PyObject *)tl_node_saved(nd, 1) : NULL;
    PyObject *a2 = NULL, *b2 = NULL, *g2 = NULL, *t = NULL, *r = NULL;
    int rc = -1;
    if (b == NULL) goto done;
    int av = tl_tensor_CAST(a)->ndim == 1, bv = tl_tensor_CAST(b)->ndim == 1;
    if (nd->iarg[0] == 1) {
        if (tl_wants_grad(nd, 0) && (gin[0] = mm("backward", tl_tensor_CAST(g), tl_tensor_CAST(b))) == NULL) goto done;
        if (tl_wants_grad(nd, 1) && ((t = call(g, "transpose", "ii", 0, 1)) == NULL ||
                                     (gin[1] = mm("backward", tl_tensor_CAST(t), tl_tensor_CAST(a))) == NULL))
            goto done;
        rc = 0;
        goto done;
    }
    a2 = av ? call(a, "unsqueeze", "i", 0) : Py_NewRef(a);
    b2 = bv ? call(b, "unsqueeze", "i", -1) : Py_NewRef(b);
    g2 = Py_NewRef(g);
    if (a2 == NULL || b2 == NULL) goto done;
    if (av) Py_SETREF(g2, call(g2, "unsqueeze", "i", tl_tensor_CAST(g2)->ndim - (bv ? 0 : 1)));
    if (bv && g2 != NULL) Py_SETREF(g2, call(g2, "unsqueeze", "i", -1));
    if (g2 == NULL) goto done;
    if (tl_wants_grad(nd, 0)) {
        if ((t = call(b2, "transpose", "ii", -1, -2)) == NULL || (r = mm("backward", tl_tensor_CAST(g2), tl_tensor_CAST(t))) == NULL)
            goto done;
        gin[0] = av ? call(r, "squeeze", "i", -2) : Py_NewRef(r);
        Py_CLEAR(t);
        Py_CLEAR(r);
        if (gin[0] == NULL) goto done;
    }
    if (tl_wants_grad(nd, 1)) {
        if ((t = call(a2, "transpose", "ii", -1, -2)) == NULL || (r = mm("backward", tl_tensor_CAST(t), tl_tensor_CAST(g2))) == NULL)
            goto done;
        if ((gin[1] = bv ? call(r, "squeeze", "i", -1) : Py_NewRef(r)) == NULL) goto done;
    }
    rc = 0;
done:
    Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(a2); Py_XDECREF(b2); Py_XDECREF(g2); Py_XDECREF(t); Py_XDECREF(r);
    return rc;
}

static PyObject *
call(PyObject *obj, const char *method, const char *fmt, ...)
{
    va_list va;
    va_start(va, fmt);
    PyObject *args = Py_VaBuildValue(fmt, va), *fn = PyObject_GetAttrString(obj, method), *r = NULL;
    va_end(va);
    if (args != NULL && fn != NULL) {
        if (!PyTuple_Check(args)) Py_SETREF(args, PyTuple_Pack(1, args));
        if (args != NULL) r = PyObject_Call(fn, args, NULL);
    }
    Py_XDECREF(args);
    Py_XDECREF(fn);
    return r;
}

static int
want_tensor(const char *op, PyObject *x, tl_tensor **out)
{
    if (tl_tensor_check(x)) { *out = tl_tensor_CAST(x); return 0; }
    PyErr_Format(PyExc_TypeError, "%s: expected a Tensor, got %s", op, Py_TYPE(x)->tp_name);
    return -1;
}

static PyObject *
nb_matmul(PyObject *x, PyObject *y)
{
    if (!tl_tensor_check(x) || !tl_tensor_check(y)) Py_RETURN_NOTIMPLEMENTED;
    return mm("matmul", tl_tensor_CAST(x), tl_tensor_CAST(y));
}

static PyObject *
m_matmul(PyObject *self, PyObject *other)
{
    tl_tensor *b;
    return want_tensor("matmul", other, &b) < 0 ? NULL : mm("matmul", tl_tensor_CAST(self), b);
}

static PyObject *
m_dot(PyObject *self, PyObject *other)
{
    tl_tensor *a = tl_tensor_CAST(self), *b;
    if (want_tensor("dot", other, &b) < 0) return NULL;
    if (a->ndim != 1 || b->ndim != 1) return shapes_error("dot", a, b, "are not both 1-D; use matmul");
    return mm("dot", a, b);
}

/* outer(a, b)[i, j] = a[i] * b[j]: a product with K = 1, both contracted strides 0. */
static PyObject *
m_outer(PyObject *self, PyObject *other)
{
    tl_tensor *a = tl_tensor_CAST(self), *b, *out;
    mm_problem p = {0};
    if (want_tensor("outer", other, &b) < 0) return NULL;
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
    if (mm_launch(&p, a, b, out) < 0) Py_CLEAR(out);
    return record((PyObject *)out, a, b, 1);
}

/* Test hook until the shape family offers views: a strided view of t, checked against its storage so a
 * test cannot make the kernel read outside the buffer. */
static PyObject *
fn_test_view(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *t_o, *shape_o, *strides_o, *shape_args = NULL, *fast = NULL, *res = NULL;
    Py_ssize_t off, shape[TL_MAX_DIMS], strides[TL_MAX_DIMS];
    int nd;
    if (!PyArg_ParseTuple(args, "O!OOn:_matmul_test_view", tl_state_get()->tensor_type, &t_o, &shape_o, &strides_o,
                          &off))
        return NULL;
    tl_tensor *t = tl_tensor_CAST(t_o);
    if ((shape_args = PyTuple_Pack(1, shape_o)) == NULL) goto done;
    if (tl_parse_shape("_matmul_test_view", shape_args, &nd, shape) < 0) goto done;
    if ((fast = PySequence_Fast(strides_o, "strides must be a sequence of ints")) == NULL) goto done;
    if (PySequence_Fast_GET_SIZE(fast) != nd) {
        PyErr_SetString(PyExc_ValueError, "_matmul_test_view: shape and strides differ in length");
        goto done;
    }
    Py_ssize_t lo = off, hi = off, n = 1, cap = t->storage ? (Py_ssize_t)(t->storage->nbytes / 4) : 0;
    for (int d = 0; d < nd; d++) {
        strides[d] = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(fast, d));
        if (strides[d] == -1 && PyErr_Occurred()) goto done;
        *(strides[d] < 0 ? &lo : &hi) += strides[d] * (shape[d] > 0 ? shape[d] - 1 : 0);
        n *= shape[d];
    }
    if (n > 0 && (lo < 0 || hi >= cap)) {
        PyErr_SetString(PyExc_IndexError, "_matmul_test_view: the view reaches outside the storage");
        goto done;
    }
    res = (PyObject *)tl_tensor_view(t, nd, shape, strides, off);
done:
    Py_XDECREF(fast);
    Py_XDECREF(shape_args);
    return res;
}

static const PyMethodDef mm_methods[] = {
    {"matmul", m_matmul, METH_O, "matmul(other): self @ other with numpy semantics (float32)."},
    {"dot", m_dot, METH_O, "dot(other): inner product of two 1-D tensors, a 0-d tensor."},
    {"outer", m_outer, METH_O, "outer(other): the (len(self), len(other)) outer product of two 1-D tensors."},
    {NULL, NULL, 0, NULL},
};

static const PyMethodDef mm_functions[] = {
    {"_matmul_test_view", fn_test_view, METH_VARARGS,
     "_matmul_test_view(t, shape, strides, offset): a strided view, for tests of strided matmul operands."},
    {NULL, NULL, 0, NULL},
};

static const PyType_Slot mm_slots[] = {
    {Py_nb_matrix_multiply, nb_matmul},
    {0, NULL},
};

const tl_family tl_family_matmul = {mm_functions, mm_methods, mm_slots, NULL, "matmul dot outer"};
