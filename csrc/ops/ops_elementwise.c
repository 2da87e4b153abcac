/* ops_elementwise.c: unary, binary and ternary elementwise ops with numpy broadcasting over strided
 * views, Python scalars and numpy arrays on either side (numpy data is uploaded, never computed on the
 * host), comparisons as float32 masks, where/clamp/maximum/minimum, the in-place family (each bumps the
 * storage's version counter; recorded by autograd on non-leaf tensors), casts, and the number protocol.
 * Every op is one launch of kernels/elementwise.cl with an op code from kernels/ew_ops.h (ew_launch.c picks
 * the kernel for the layout and dtypes; ops_elementwise_operand.c reads the operands and the result dtype). */
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"
#include "ew_launch.h"
#include "ops_elementwise_operand.h"
#include <math.h>

static const tl_op_row ROW_EW;   /* autograd rows (below) */

static const char *const EW_NAME[TL_EW_COUNT] = {
#define X(name, arity) #name,
    TL_EW_OPS(X)
#undef X
};
_Static_assert(sizeof EW_NAME / sizeof EW_NAME[0] == TL_EW_COUNT, "op table");

typedef tl_ew_operand operand;

#define IS_CMP(op) ((op) >= TL_EW_LT && (op) <= TL_EW_NE)
#define IS_DIVISION(op) ((op) == TL_EW_FLOORDIV || (op) == TL_EW_MOD || (op) == TL_EW_FMOD)

/* What each op's backward needs: bit 0..2 = operands a, b, c; bit 3 = the output. 0 = not differentiable
 * or needs nothing; ND marks ops whose outputs never require grad (comparisons, sign, backward helpers). */
enum { SA = 1, SB = 2, SC = 4, SO = 8, ND = 16 };
static const unsigned char EW_SAVE[TL_EW_COUNT] = {
    [TL_EW_MUL] = SA | SB, [TL_EW_DIV] = SB | SO, [TL_EW_POW] = SA | SB | SO, [TL_EW_MAXIMUM] = SA | SB,
    [TL_EW_MINIMUM] = SA | SB, [TL_EW_LT] = ND, [TL_EW_LE] = ND, [TL_EW_GT] = ND, [TL_EW_GE] = ND, [TL_EW_EQ] = ND,
    [TL_EW_NE] = ND, [TL_EW_EXP] = SO, [TL_EW_LOG] = SA, [TL_EW_SQRT] = SO, [TL_EW_RSQRT] = SO, [TL_EW_TANH] = SO,
    [TL_EW_SIGMOID] = SO, [TL_EW_RELU] = SA, [TL_EW_SILU] = SA, [TL_EW_GELU] = SA, [TL_EW_ABS] = SA,
    [TL_EW_SIN] = SA, [TL_EW_COS] = SA, [TL_EW_SQUARE] = SA, [TL_EW_RECIPROCAL] = SO, [TL_EW_SIGN] = ND,
    [TL_EW_WHERE] = SA, [TL_EW_CLAMP] = SA | SB | SC, [TL_EW_RELU_GRAD] = ND, [TL_EW_SILU_GRAD] = ND,
    [TL_EW_GELU_GRAD] = ND, [TL_EW_TANH_GRAD] = ND, [TL_EW_SIGMOID_GRAD] = ND, [TL_EW_INRANGE] = ND,
    [TL_EW_FLOORDIV] = ND, [TL_EW_MOD] = SA | SB, [TL_EW_LEAKY_RELU] = SA | SB, [TL_EW_LEAKY_RELU_GRAD] = ND,
    [TL_EW_LOG1P] = SA, [TL_EW_EXPM1] = SO, [TL_EW_ERF] = SA,
    [TL_EW_ATAN] = SA, [TL_EW_ASIN] = SA, [TL_EW_ACOS] = SA, [TL_EW_TAN] = SO, [TL_EW_LOG2] = SA, [TL_EW_LOG10] = SA,
    [TL_EW_EXP2] = SO, [TL_EW_SINH] = SA, [TL_EW_COSH] = SA, [TL_EW_ASINH] = SA, [TL_EW_ACOSH] = SA,
    [TL_EW_ATANH] = SA, [TL_EW_ERFC] = SA, [TL_EW_ATAN2] = SA | SB, [TL_EW_HYPOT] = SA | SB | SO,
    [TL_EW_FMOD] = SA | SB, [TL_EW_LOGADDEXP] = SA | SB, [TL_EW_XLOGY] = SA | SB,
    [TL_EW_LGAMMA] = SA, [TL_EW_DIGAMMA] = SA, [TL_EW_TRIGAMMA] = ND, [TL_EW_ERFINV] = SO,
};

/* A graph node for out = OP(ins) that saves the operands EW_SAVE asks for (not the output: that is saved by
 * the caller once it is written). iarg: [0] op, [1..4] saved slot of a, b, c, out (-1: not saved); farg:
 * scalar operand values. */
static tl_node *
node_make(int op, PyObject *const *ins, const operand *o)
{
    tl_node *nd = tl_node_new(&ROW_EW, ins, 3);
    if (nd == NULL) return NULL;
    nd->iarg[0] = op;
    for (int i = 0; i < 4; i++) nd->iarg[1 + i] = -1;
    for (int i = 0; i < 3; i++) {
        nd->farg[i] = o[i].value;
        if ((EW_SAVE[op] >> i & 1) && o[i].t != NULL) {
            nd->iarg[1 + i] = nd->n_saved;
            tl_node_save(nd, o[i].t);
        }
    }
    return nd;
}

static void
node_finish(tl_node *nd, tl_tensor *out)
{
    if (EW_SAVE[nd->iarg[0]] & SO) {
        nd->iarg[4] = nd->n_saved;
        tl_node_save(nd, out);
    }
    tl_node_attach(nd, out);
}

static int record_overwrite(tl_tensor *t, PyObject *src);

/* The one dispatch: out = OP(x, y, z). `into` (in-place target) or NULL for a new contiguous result. */
static PyObject *ew_checked(int op, const char *name, PyObject **ins, tl_tensor *into, operand *o, int odt);

static PyObject *
ew(int op, const char *name, PyObject *x, PyObject *y, PyObject *z, tl_tensor *into)
{
    operand o[3];
    PyObject *ins[3] = {x, y, z}, *held[3] = {NULL, NULL, NULL}, *unaliased[3] = {NULL, NULL, NULL}, *res = NULL;
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (tl_ew_operand_from(ins[i], name, &o[i], &held[i]) < 0) goto done;
        if (held[i] != NULL) ins[i] = held[i];
        if (ins[i] != NULL) n = i + 1;
    }
    tl_tensor *bc[4] = {into, o[0].t, o[1].t, o[2].t};      /* shapes first: a failed op enqueues no cast */
    Py_ssize_t shape[TL_MAX_DIMS];
    int nd_bc, rdt = tl_ew_result_dtype(op, o, n), as_int = rdt == TL_I32 && tl_ew_op_has_i32(op);
    if (tl_broadcast(name, bc + (into == NULL), 4 - (into == NULL), &nd_bc, shape) < 0) goto done;
    if (rdt == TL_U8 && (IS_DIVISION(op) || op == TL_EW_POW)) {
        char s[128];
        tl_shape_str(shape, nd_bc, s, sizeof s);
        PyErr_Format(PyExc_TypeError, "%s: not supported for uint8 tensors (shape %s); convert with .int() first",
                     name, s);
        goto done;
    }
    for (int i = 0; (as_int || rdt == TL_U8) && i < n; i++) {
        if (o[i].t == NULL && !o[i].fits) {
            PyErr_Format(PyExc_OverflowError, "%s: Python int operand does not fit int32", name);
            goto done;
        }
        if (IS_DIVISION(op) && i == 1 && o[i].t == NULL && o[i].ivalue == 0) {
            PyErr_Format(PyExc_ZeroDivisionError, "%s: integer division by zero", name);
            goto done;
        }
        if (op == TL_EW_POW && i == 1 && o[i].t == NULL && o[i].ivalue < 0) {   /* numpy's and torch's rule */
            PyErr_Format(PyExc_ValueError, "%s: integers to negative integer powers are not allowed", name);
            goto done;
        }
    }
    for (int i = 0; as_int && i < n; i++) {           /* int32 math: uint8 tensors widen first */
        if (o[i].t == NULL || o[i].t->dtype == TL_I32) continue;
        PyObject *c = tl_convert(o[i].t, TL_I32);
        if (c == NULL) goto done;
        Py_XSETREF(held[i], c);
        ins[i] = c;
        o[i].t = tl_tensor_CAST(c);
    }
    if (into != NULL) {
        int r = IS_CMP(op) ? TL_F32 : rdt;           /* a floating result goes into any floating dtype */
        if (into->dtype != r && !(TL_IS_FLOAT(into->dtype) && TL_IS_FLOAT(r))) {
            char s[128];
            tl_shape_str(into->shape, into->ndim, s, sizeof s);
            PyErr_Format(PyExc_TypeError, "%s: the %s result cannot be written in place into an %s tensor of "
                         "shape %s", name, tl_dtype_name(r), tl_dtype_name(into->dtype), s);
            goto done;
        }
        if (tl_check_writable(name, into) < 0) goto done;
        for (int i = 0; i < 3; i++) {
            if (o[i].t == NULL || o[i].t->storage != into->storage) continue;
            if ((o[i].t = tl_unalias(into, o[i].t)) == NULL) goto done;
            unaliased[i] = (PyObject *)o[i].t;      /* ins[i] keeps the original: the graph's edge */
        }
    }
    res = ew_checked(op, name, ins, into, o, as_int ? -1 : IS_CMP(op) ? TL_F32 : rdt);
done:
    for (int i = 0; i < 3; i++) {
        Py_XDECREF(unaliased[i]);
        Py_XDECREF(held[i]);
    }
    return res;
}

/* Operand i's data that an in-place recorded op saves: a copy when it is the storage being overwritten. */
static int
save_copies(int op, tl_tensor *into, operand *o, PyObject **held)
{
    for (int i = 0; i < 3; i++) {
        if (!(EW_SAVE[op] >> i & 1) || o[i].t == NULL || o[i].t->storage != into->storage) continue;
        tl_tensor *c = tl_tensor_empty(o[i].t->dtype, o[i].t->ndim, o[i].t->shape);
        if (c == NULL || tl_copy_into(c, o[i].t) < 0) { Py_XDECREF(c); return -1; }
        held[i] = (PyObject *)c;
        o[i].t = c;
    }
    return 0;
}

/* odt: the output's dtype, -1 for int32 math (tl_ew_i32). Float32 operands into a float32 output take the
 * float32 kernels; any other mix (float16, bfloat16, uint8, int32 read as float) takes tl_ew_any or its
 * contiguous twin (ew_launch.c). */
static PyObject *
ew_checked(int op, const char *name, PyObject **ins, tl_tensor *into, operand *o, int odt)
{
    const int as_int = odt < 0;
    tl_tensor *out = NULL;
    tl_node *nd = NULL;
    PyObject *copies[3] = {NULL, NULL, NULL};
    Py_ssize_t shape[TL_MAX_DIMS];
    int ndim, track = 0;
    tl_tensor *bc[4] = {into, o[0].t, o[1].t, o[2].t};
    if (tl_broadcast(name, bc + (into == NULL), 4 - (into == NULL), &ndim, shape) < 0) return NULL;
    if (into != NULL) {
        int same = ndim == into->ndim;
        for (int d = 0; same && d < ndim; d++) same = shape[d] == into->shape[d];
        if (!same) {
            char a[128], b[128];
            tl_shape_str(into->shape, into->ndim, a, sizeof a);
            tl_shape_str(shape, ndim, b, sizeof b);
            return PyErr_Format(PyExc_ValueError, "%s: in-place output of shape %s cannot hold the broadcast "
                                "result of shape %s", name, a, b);
        }
        track = !as_int && !(EW_SAVE[op] & ND) && tl_autograd_wanted(ins, 3);
        if (tl_check_recorded_inplace(name, into, track) < 0) return NULL;
        if (track && (save_copies(op, into, o, copies) < 0 || (nd = node_make(op, ins, o)) == NULL)) goto fail;
        out = (tl_tensor *)Py_NewRef(into);
        tl_mark_write(out, name);
    } else if ((out = tl_tensor_empty(as_int ? (IS_CMP(op) ? TL_F32 : TL_I32) : odt, ndim, shape)) == NULL) {
        return NULL;
    } else if (!(EW_SAVE[op] & ND) && tl_autograd_wanted(ins, 3) && (nd = node_make(op, ins, o)) == NULL) {
        goto fail;
    }
    if (out->storage != NULL && tl_ew_launch(op, out, o, ndim, shape, as_int) < 0) goto fail;   /* zero-size: none */
    if (nd != NULL) node_finish(nd, out);
    else if (into != NULL && (EW_SAVE[op] & ND) && record_overwrite(into, NULL) < 0) goto fail;  /* x //= 2 */
    for (int i = 0; i < 3; i++) Py_XDECREF(copies[i]);
    return (PyObject *)out;
fail:
    if (nd != NULL) tl_node_release(nd);
    for (int i = 0; i < 3; i++) Py_XDECREF(copies[i]);
    Py_XDECREF(out);
    return NULL;
}

static const char *
lower(const char *s, char *buf, size_t cap)
{
    size_t i = 0;
    for (; s[i] && i + 1 < cap; i++) buf[i] = (char)(s[i] >= 'A' && s[i] <= 'Z' ? s[i] - 'A' + 'a' : s[i]);
    buf[i] = '\0';
    return buf;
}

/* Number-protocol entry: NotImplemented for operands we do not take, so Python can try the other side. */
static PyObject *
nb(int op, PyObject *a, PyObject *b)
{
    char name[16];
    if (!tl_ew_operand_check(a) || !tl_ew_operand_check(b)) Py_RETURN_NOTIMPLEMENTED;
    return ew(op, lower(EW_NAME[op], name, sizeof name), a, b, NULL, NULL);
}

static PyObject *
nb_inplace(int op, PyObject *a, PyObject *b)
{
    char name[16];
    if (!tl_ew_operand_check(b)) Py_RETURN_NOTIMPLEMENTED;
    return ew(op, lower(EW_NAME[op], name, sizeof name), a, b, NULL, tl_tensor_CAST(a));
}

static PyObject *nb_add(PyObject *a, PyObject *b) { return nb(TL_EW_ADD, a, b); }
static PyObject *nb_sub(PyObject *a, PyObject *b) { return nb(TL_EW_SUB, a, b); }
static PyObject *nb_mul(PyObject *a, PyObject *b) { return nb(TL_EW_MUL, a, b); }
static PyObject *nb_div(PyObject *a, PyObject *b) { return nb(TL_EW_DIV, a, b); }
static PyObject *nb_floordiv(PyObject *a, PyObject *b) { return nb(TL_EW_FLOORDIV, a, b); }
static PyObject *nb_mod(PyObject *a, PyObject *b) { return nb(TL_EW_MOD, a, b); }
static PyObject *nb_iadd(PyObject *a, PyObject *b) { return nb_inplace(TL_EW_ADD, a, b); }
static PyObject *nb_isub(PyObject *a, PyObject *b) { return nb_inplace(TL_EW_SUB, a, b); }
static PyObject *nb_imul(PyObject *a, PyObject *b) { return nb_inplace(TL_EW_MUL, a, b); }
static PyObject *nb_idiv(PyObject *a, PyObject *b) { return nb_inplace(TL_EW_DIV, a, b); }
static PyObject *nb_ifloordiv(PyObject *a, PyObject *b) { return nb_inplace(TL_EW_FLOORDIV, a, b); }
static PyObject *nb_imod(PyObject *a, PyObject *b) { return nb_inplace(TL_EW_MOD, a, b); }
static PyObject *nb_neg(PyObject *a) { return ew(TL_EW_NEG, "neg", a, NULL, NULL, NULL); }
static PyObject *nb_abs(PyObject *a) { return ew(TL_EW_ABS, "abs", a, NULL, NULL, NULL); }
static PyObject *nb_pos(PyObject *a) { return Py_NewRef(a); }

static PyObject *
nb_pow(PyObject *a, PyObject *b, PyObject *mod)
{
    if (mod != Py_None) return PyErr_Format(PyExc_TypeError, "pow: the modulo argument is not supported");
    return nb(TL_EW_POW, a, b);
}

static PyObject *
richcompare(PyObject *a, PyObject *b, int cmp)
{
    static const int map[6] = {TL_EW_LT, TL_EW_LE, TL_EW_EQ, TL_EW_NE, TL_EW_GT, TL_EW_GE};
    return nb(map[cmp], a, b);
}

static Py_hash_t
tensor_hash(PyObject *op)
{
    return (Py_hash_t)((uintptr_t)op >> 4);        /* identity, like PyTorch: == builds a mask */
}

/* ---- backward ---- */

/* Saved operand i (0..2 = a, b, c; 3 = out) as a new ref, or its scalar value as a Python float. */
static PyObject *
saved(tl_node *nd, int i)
{
    int slot = nd->iarg[1 + i];
    if (slot >= 0) return (PyObject *)tl_node_saved(nd, slot);
    return PyFloat_FromDouble(nd->farg[i]);
}

static PyObject *
ew2(int op, PyObject *x, PyObject *y)
{
    return x != NULL && y != NULL ? ew(op, "backward", x, y, NULL, NULL) : NULL;
}

static PyObject *
ew1(int op, PyObject *x)
{
    return x != NULL ? ew(op, "backward", x, NULL, NULL, NULL) : NULL;
}

static PyObject *
ews(int op, PyObject *x, double v)
{
    PyObject *s = PyFloat_FromDouble(v), *r = s != NULL ? ew2(op, x, s) : NULL;
    Py_XDECREF(s);
    return r;
}

static PyObject *
rsub(double v, PyObject *x)                          /* v - x */
{
    PyObject *s = PyFloat_FromDouble(v), *r = s != NULL ? ew2(TL_EW_SUB, s, x) : NULL;
    Py_XDECREF(s);
    return r;
}

/* grad_in[i] for out = OP(a, b, c), from the upstream gradient g; every result is a few kernels. */
static int
tl_ew_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    int op = nd->iarg[0];
    PyObject *a = NULL, *b = NULL, *c = NULL, *out = NULL, *t = NULL, *u = NULL;
    int want_a = tl_wants_grad(nd, 0), want_b = tl_wants_grad(nd, 1), want_c = tl_wants_grad(nd, 2);
    if ((EW_SAVE[op] & SA) && (a = saved(nd, 0)) == NULL) goto fail;
    if ((EW_SAVE[op] & SB) && (b = saved(nd, 1)) == NULL) goto fail;
    if ((EW_SAVE[op] & SC) && (c = saved(nd, 2)) == NULL) goto fail;
    if ((EW_SAVE[op] & SO) && (out = saved(nd, 3)) == NULL) goto fail;
    switch (op) {
    case TL_EW_ADD: gin[0] = Py_NewRef(g); gin[1] = Py_NewRef(g); break;
    case TL_EW_SUB: gin[0] = Py_NewRef(g); if (want_b) gin[1] = ew1(TL_EW_NEG, g); break;
    case TL_EW_COPY: gin[0] = Py_NewRef(g); break;
    case TL_EW_NEG: gin[0] = ew1(TL_EW_NEG, g); break;
    case TL_EW_MUL:
        if (want_a) gin[0] = ew2(TL_EW_MUL, g, b);
        if (want_b) gin[1] = ew2(TL_EW_MUL, g, a);
        break;
    case TL_EW_DIV:                                   /* d/da = g/b; d/db = -g*out/b */
        if (want_a) gin[0] = ew2(TL_EW_DIV, g, b);
        if (want_b && (t = ew2(TL_EW_MUL, g, out)) != NULL && (u = ew2(TL_EW_DIV, t, b)) != NULL)
            gin[1] = ew1(TL_EW_NEG, u);
        break;
    case TL_EW_POW:                                   /* d/da = g*b*a^(b-1); d/db = g*out*log(a) */
        if (want_a) {
            PyObject *bm1 = ews(TL_EW_SUB, b, 1.0), *p = bm1 ? ew2(TL_EW_POW, a, bm1) : NULL;
            PyObject *q = p ? ew2(TL_EW_MUL, p, b) : NULL;
            gin[0] = q ? ew2(TL_EW_MUL, g, q) : NULL;
            Py_XDECREF(bm1); Py_XDECREF(p); Py_XDECREF(q);
        }
        if (want_b) {
            PyObject *la = ew1(TL_EW_LOG, a), *p = la ? ew2(TL_EW_MUL, out, la) : NULL;
            gin[1] = p ? ew2(TL_EW_MUL, g, p) : NULL;
            Py_XDECREF(la); Py_XDECREF(p);
        }
        break;
    case TL_EW_MAXIMUM: case TL_EW_MINIMUM:           /* ties go to a, like numpy's choice of a */
        if ((t = ew2(op == TL_EW_MAXIMUM ? TL_EW_GE : TL_EW_LE, a, b)) == NULL) goto fail;
        if (want_a) gin[0] = ew2(TL_EW_MUL, g, t);
        if (want_b && (u = ews(TL_EW_SUB, t, 1.0)) != NULL) {     /* (mask - 1) * -g */
            PyObject *ng = ew1(TL_EW_NEG, g);
            gin[1] = ng ? ew2(TL_EW_MUL, ng, u) : NULL;
            Py_XDECREF(ng);
        }
        break;
    case TL_EW_MOD:                                   /* a - floor(a/b)*b: d/da = g, d/db = -g*floor(a/b) */
        gin[0] = Py_NewRef(g);
        if (want_b && (t = ew2(TL_EW_FLOORDIV, a, b)) != NULL && (u = ew2(TL_EW_MUL, g, t)) != NULL)
            gin[1] = ew1(TL_EW_NEG, u);
        break;
    case TL_EW_EXP: gin[0] = ew2(TL_EW_MUL, g, out); break;
    case TL_EW_LOG: gin[0] = ew2(TL_EW_DIV, g, a); break;
    case TL_EW_SQRT: if ((t = ews(TL_EW_MUL, out, 2.0)) != NULL) gin[0] = ew2(TL_EW_DIV, g, t); break;
    case TL_EW_RSQRT:                                 /* -0.5 * out^3 */
        if ((t = ews(TL_EW_POW, out, 3.0)) != NULL && (u = ews(TL_EW_MUL, t, -0.5)) != NULL)
            gin[0] = ew2(TL_EW_MUL, g, u);
        break;
    case TL_EW_TANH: gin[0] = ew2(TL_EW_TANH_GRAD, out, g); break;
    case TL_EW_SIGMOID: gin[0] = ew2(TL_EW_SIGMOID_GRAD, out, g); break;
    case TL_EW_RELU: gin[0] = ew2(TL_EW_RELU_GRAD, a, g); break;
    case TL_EW_LEAKY_RELU: gin[0] = ew(TL_EW_LEAKY_RELU_GRAD, "backward", a, g, b, NULL); break;
    case TL_EW_CEIL: case TL_EW_FLOOR: case TL_EW_ROUND: case TL_EW_TRUNC: {   /* zeros, like torch (not g * 0) */
        const tl_tensor *gt = tl_tensor_CAST(g);
        if ((t = (PyObject *)tl_tensor_empty(gt->dtype, gt->ndim, gt->shape)) != NULL &&
            tl_tensor_fill(tl_tensor_CAST(t), 0.0) == 0)
            gin[0] = Py_NewRef(t);
        break;
    }
    case TL_EW_SILU: gin[0] = ew2(TL_EW_SILU_GRAD, a, g); break;
    case TL_EW_GELU: gin[0] = ew2(TL_EW_GELU_GRAD, a, g); break;
    case TL_EW_ABS:
        if ((t = ew1(TL_EW_SIGN, a)) != NULL) gin[0] = ew2(TL_EW_MUL, g, t);
        break;
    case TL_EW_SIN:
        if ((t = ew1(TL_EW_COS, a)) != NULL) gin[0] = ew2(TL_EW_MUL, g, t);
        break;
    case TL_EW_COS:
        if ((t = ew1(TL_EW_SIN, a)) != NULL && (u = ew2(TL_EW_MUL, g, t)) != NULL)
            gin[0] = ew1(TL_EW_NEG, u);
        break;
    case TL_EW_SQUARE: if ((t = ews(TL_EW_MUL, a, 2.0)) != NULL) gin[0] = ew2(TL_EW_MUL, g, t); break;
    case TL_EW_LOG1P: if ((t = ews(TL_EW_ADD, a, 1.0)) != NULL) gin[0] = ew2(TL_EW_DIV, g, t); break;
    case TL_EW_EXPM1: if ((t = ews(TL_EW_ADD, out, 1.0)) != NULL) gin[0] = ew2(TL_EW_MUL, g, t); break;
    case TL_EW_ERF: case TL_EW_ERFC:                  /* +-2 / sqrt(pi) exp(-a^2) */
        if ((t = ew2(TL_EW_MUL, a, a)) != NULL && (u = ews(TL_EW_MUL, t, -1.0)) != NULL) {
            Py_SETREF(t, ew1(TL_EW_EXP, u));
            Py_SETREF(u, t != NULL ? ews(TL_EW_MUL, t, (op == TL_EW_ERF ? 1 : -1) * 1.1283791670955126) : NULL);
            gin[0] = ew2(TL_EW_MUL, g, u);
        }
        break;
    case TL_EW_ATAN: case TL_EW_ATANH: case TL_EW_ASIN: case TL_EW_ACOS: case TL_EW_ASINH: case TL_EW_ACOSH: {
        /* 1 / (1 + a^2), 1 / (1 - a^2), +-rsqrt(1 - a^2), rsqrt(a^2 + 1), rsqrt(a^2 - 1) */
        if ((t = ew2(TL_EW_MUL, a, a)) == NULL) goto fail;
        if (op == TL_EW_ATANH || op == TL_EW_ASIN || op == TL_EW_ACOS) u = rsub(1.0, t);
        else u = ews(TL_EW_ADD, t, op == TL_EW_ACOSH ? -1.0 : 1.0);
        if (op == TL_EW_ATAN || op == TL_EW_ATANH) { gin[0] = ew2(TL_EW_DIV, g, u); break; }
        Py_XSETREF(t, ew1(TL_EW_RSQRT, u));
        Py_XSETREF(u, ew2(TL_EW_MUL, g, t));
        gin[0] = op == TL_EW_ACOS ? ew1(TL_EW_NEG, u) : Py_XNewRef(u);
        break;
    }
    case TL_EW_FRAC: gin[0] = Py_NewRef(g); break;
    case TL_EW_LGAMMA: case TL_EW_DIGAMMA:            /* digamma(a), trigamma(a) */
        if ((t = ew1(op == TL_EW_LGAMMA ? TL_EW_DIGAMMA : TL_EW_TRIGAMMA, a)) != NULL) gin[0] = ew2(TL_EW_MUL, g, t);
        break;
    case TL_EW_ERFINV:                                /* sqrt(pi) / 2 exp(out^2) */
        if ((t = ew2(TL_EW_MUL, out, out)) != NULL && (u = ews(TL_EW_MUL, g, 0.88622692545275801)) != NULL)
            { Py_SETREF(t, ew1(TL_EW_EXP, t)); gin[0] = t != NULL ? ew2(TL_EW_MUL, u, t) : NULL; }
        break;
    case TL_EW_TAN:                                   /* 1 + out^2 */
        if ((t = ew2(TL_EW_MUL, out, out)) != NULL && (u = ews(TL_EW_ADD, t, 1.0)) != NULL)
            gin[0] = ew2(TL_EW_MUL, g, u);
        break;
    case TL_EW_LOG2: case TL_EW_LOG10:                /* 1 / (a ln 2), 1 / (a ln 10) */
        if ((t = ews(TL_EW_MUL, a, op == TL_EW_LOG2 ? 0.6931471805599453 : 2.302585092994046)) != NULL)
            gin[0] = ew2(TL_EW_DIV, g, t);
        break;
    case TL_EW_EXP2: if ((t = ews(TL_EW_MUL, out, 0.6931471805599453)) != NULL) gin[0] = ew2(TL_EW_MUL, g, t); break;
    case TL_EW_SINH: case TL_EW_COSH:
        if ((t = ew1(op == TL_EW_SINH ? TL_EW_COSH : TL_EW_SINH, a)) != NULL) gin[0] = ew2(TL_EW_MUL, g, t);
        break;
    case TL_EW_ATAN2:         /* (b, -a) g / (a^2 + b^2) as (g / h) (b / h), h = hypot(a, b): a^2 + b^2 and
                               * g / h^2 would overflow or underflow in float32 where the gradient does not */
        if ((u = ew2(TL_EW_HYPOT, a, b)) == NULL || (t = ew2(TL_EW_DIV, g, u)) == NULL) goto fail;
        for (int i = 0; i < 2 && !PyErr_Occurred(); i++) {
            if (!(i ? want_b : want_a)) continue;
            PyObject *q = ew2(TL_EW_DIV, i ? a : b, u), *r = ew2(TL_EW_MUL, t, q);
            gin[i] = i && r != NULL ? ew1(TL_EW_NEG, r) : Py_XNewRef(r);
            Py_XDECREF(q);
            Py_XDECREF(r);
        }
        break;
    case TL_EW_HYPOT:                                 /* (a, b) / out */
        if ((t = ew2(TL_EW_DIV, g, out)) == NULL) goto fail;
        if (want_a) gin[0] = ew2(TL_EW_MUL, t, a);
        if (want_b && !PyErr_Occurred()) gin[1] = ew2(TL_EW_MUL, t, b);
        break;
    case TL_EW_FMOD:                                  /* a - trunc(a/b)*b: d/da = g, d/db = -g*trunc(a/b) */
        gin[0] = Py_NewRef(g);
        if (want_b && (t = ew2(TL_EW_DIV, a, b)) != NULL && (u = ew1(TL_EW_TRUNC, t)) != NULL) {
            Py_SETREF(t, ew2(TL_EW_MUL, g, u));
            gin[1] = ew1(TL_EW_NEG, t);
        }
        break;
    case TL_EW_LOGADDEXP:                             /* sigmoid(a - b), sigmoid(b - a) */
        for (int i = 0; i < 2 && !PyErr_Occurred(); i++) {
            if (!(i ? want_b : want_a)) continue;
            Py_XSETREF(t, ew2(TL_EW_SUB, i ? b : a, i ? a : b));
            Py_XSETREF(u, ew1(TL_EW_SIGMOID, t));
            gin[i] = ew2(TL_EW_MUL, g, u);
        }
        break;
    case TL_EW_XLOGY:                                 /* xlogy(x != 0, y) (torch's), x / y */
        if (want_a && (t = ews(TL_EW_NE, a, 0.0)) != NULL && (u = ew2(TL_EW_XLOGY, t, b)) != NULL)
            gin[0] = ew2(TL_EW_MUL, g, u);
        if (want_b && !PyErr_Occurred()) { Py_XSETREF(t, ew2(TL_EW_MUL, g, a)); gin[1] = ew2(TL_EW_DIV, t, b); }
        break;
    case TL_EW_RECIPROCAL:                            /* -out^2 */
        if ((t = ew2(TL_EW_MUL, out, out)) != NULL && (u = ew2(TL_EW_MUL, g, t)) != NULL)
            gin[0] = ew1(TL_EW_NEG, u);
        break;
    case TL_EW_WHERE:
        if ((t = PyFloat_FromDouble(0.0)) == NULL) goto fail;
        if (want_b) gin[1] = ew(TL_EW_WHERE, "backward", a, g, t, NULL);
        if (want_c) gin[2] = ew(TL_EW_WHERE, "backward", a, t, g, NULL);
        break;
    case TL_EW_CLAMP:                                 /* x passes where lo <= x <= hi; bounds get the rest */
        if ((t = ew(TL_EW_INRANGE, "backward", a, b, c, NULL)) == NULL) goto fail;
        gin[0] = ew2(TL_EW_MUL, g, t);
        if (want_b && (u = ew2(TL_EW_LT, a, b)) != NULL) gin[1] = ew2(TL_EW_MUL, g, u);
        if (want_c) { Py_XDECREF(u); u = ew2(TL_EW_GT, a, c); gin[2] = u ? ew2(TL_EW_MUL, g, u) : NULL; }
        break;
    default:
        break;
    }
    Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(c); Py_XDECREF(out); Py_XDECREF(t); Py_XDECREF(u);
    return PyErr_Occurred() ? -1 : 0;
fail:
    Py_XDECREF(a); Py_XDECREF(b); Py_XDECREF(c); Py_XDECREF(out); Py_XDECREF(t); Py_XDECREF(u);
    return -1;
}

/* ---- methods ---- */

#define UNARY(pyname, OP)                                                                      \
    static PyObject *m_##pyname(PyObject *self, PyObject *Py_UNUSED(ignored))                  \
    { return ew(TL_EW_##OP, #pyname, self, NULL, NULL, NULL); }
UNARY(neg, NEG) UNARY(exp, EXP) UNARY(log, LOG) UNARY(sqrt, SQRT) UNARY(rsqrt, RSQRT) UNARY(tanh, TANH)
UNARY(sigmoid, SIGMOID) UNARY(relu, RELU) UNARY(silu, SILU) UNARY(gelu, GELU) UNARY(abs, ABS) UNARY(sin, SIN)
UNARY(cos, COS) UNARY(clone, COPY) UNARY(square, SQUARE) UNARY(reciprocal, RECIPROCAL) UNARY(sign, SIGN)
UNARY(ceil, CEIL) UNARY(floor, FLOOR) UNARY(round, ROUND) UNARY(log1p, LOG1P) UNARY(expm1, EXPM1) UNARY(erf, ERF)
UNARY(atan, ATAN) UNARY(asin, ASIN) UNARY(acos, ACOS) UNARY(tan, TAN) UNARY(log2, LOG2) UNARY(log10, LOG10)
UNARY(exp2, EXP2) UNARY(sinh, SINH) UNARY(cosh, COSH) UNARY(asinh, ASINH) UNARY(acosh, ACOSH) UNARY(atanh, ATANH)
UNARY(trunc, TRUNC) UNARY(frac, FRAC) UNARY(erfc, ERFC) UNARY(lgamma, LGAMMA) UNARY(digamma, DIGAMMA)
UNARY(erfinv, ERFINV)
#undef UNARY

#define BINARY(pyname, OP)                                                                     \
    static PyObject *m_##pyname(PyObject *self, PyObject *other)                               \
    { return ew(TL_EW_##OP, #pyname, self, other, NULL, NULL); }
BINARY(add, ADD) BINARY(sub, SUB) BINARY(mul, MUL) BINARY(div, DIV) BINARY(pow, POW) BINARY(maximum, MAXIMUM)
BINARY(minimum, MINIMUM) BINARY(floor_divide, FLOORDIV) BINARY(remainder, MOD) BINARY(lt, LT) BINARY(le, LE)
BINARY(gt, GT) BINARY(ge, GE) BINARY(eq, EQ) BINARY(ne, NE)
BINARY(atan2, ATAN2) BINARY(hypot, HYPOT) BINARY(fmod, FMOD) BINARY(logaddexp, LOGADDEXP) BINARY(xlogy, XLOGY)
#undef BINARY
#define INPLACE(pyname, OP, OTHER)                                                             \
    static PyObject *m_##pyname##_(PyObject *self, PyObject *other)                            \
    { (void)other; return ew(TL_EW_##OP, #pyname "_", self, OTHER, NULL, tl_tensor_CAST(self)); }
INPLACE(add, ADD, other) INPLACE(sub, SUB, other) INPLACE(mul, MUL, other) INPLACE(div, DIV, other)
INPLACE(relu, RELU, NULL) INPLACE(sigmoid, SIGMOID, NULL) INPLACE(tanh, TANH, NULL) INPLACE(exp, EXP, NULL)
INPLACE(neg, NEG, NULL) INPLACE(abs, ABS, NULL) INPLACE(sqrt, SQRT, NULL)
#undef INPLACE
/* ---- the internal C API (ops.h) ---- */

PyObject *tl_exp(tl_tensor *x) { return ew(TL_EW_EXP, "exp", (PyObject *)x, NULL, NULL, NULL); }
PyObject *tl_eq(tl_tensor *a, tl_tensor *b) { return ew(TL_EW_EQ, "eq", (PyObject *)a, (PyObject *)b, NULL, NULL); }
PyObject *tl_clone(tl_tensor *x) { return ew(TL_EW_COPY, "clone", (PyObject *)x, NULL, NULL, NULL); }

PyObject *tl_activation(tl_tensor *x, int act) { return ew(act == TL_ACT_RELU ? TL_EW_RELU : TL_EW_TANH, "activation",
                                                          (PyObject *)x, NULL, NULL, NULL); }
PyObject *tl_activation_grad(int act, tl_tensor *out, PyObject *g)   /* relu's mask from out: out > 0 iff x > 0 */
{ return ew2(act == TL_ACT_RELU ? TL_EW_RELU_GRAD : TL_EW_TANH_GRAD, (PyObject *)out, g); }

static PyObject *
m_contiguous(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    tl_tensor *t = tl_tensor_CAST(op);
    if (!tl_tensor_is_contig(t) && tl_autograd_wanted(&op, 1)) return tl_clone(t);   /* keeps the graph */
    return (PyObject *)tl_tensor_contiguous(t);
}

int
tl_add_(tl_tensor *acc, tl_tensor *x)
{
    PyObject *r = ew(TL_EW_ADD, "add_", (PyObject *)acc, (PyObject *)x, NULL, acc);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

static PyObject *
clamp(PyObject *self, PyObject *args, PyObject *kwargs, const char *name, tl_tensor *into)
{
    static char *kw[] = {"min", "max", NULL};
    PyObject *lo = Py_None, *hi = Py_None, *res = NULL;
    char fmt[16];
    snprintf(fmt, sizeof fmt, "|OO:%s", name);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, fmt, kw, &lo, &hi)) return NULL;
    int i32 = tl_tensor_check(self) && tl_tensor_CAST(self)->dtype == TL_I32;   /* an open int bound stays int */
    PyObject *lo_o = lo != Py_None ? Py_NewRef(lo) : i32 ? PyLong_FromLong(INT32_MIN) : PyFloat_FromDouble(-INFINITY);
    PyObject *hi_o = hi != Py_None ? Py_NewRef(hi) : i32 ? PyLong_FromLong(INT32_MAX) : PyFloat_FromDouble(INFINITY);
    if (lo_o != NULL && hi_o != NULL) res = ew(TL_EW_CLAMP, name, self, lo_o, hi_o, into);
    Py_XDECREF(lo_o);
    Py_XDECREF(hi_o);
    return res;
}

/* leaky_relu(negative_slope=0.01): x where x > 0, else negative_slope * x (torch's rule, also at 0). */
static PyObject *
m_leaky_relu(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"negative_slope", NULL};
    PyObject *o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:leaky_relu", kw, &o)) return NULL;
    double slope = o != NULL ? PyFloat_AsDouble(o) : 0.01;
    if (slope == -1.0 && PyErr_Occurred())
        return PyErr_Format(PyExc_TypeError, "leaky_relu: negative_slope must be a number, got %s",
                            Py_TYPE(o)->tp_name);
    PyObject *s = PyFloat_FromDouble(slope), *res = s ? ew(TL_EW_LEAKY_RELU, "leaky_relu", self, s, NULL, NULL) : NULL;
    Py_XDECREF(s);
    return res;
}

static PyObject *
m_clamp(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return clamp(self, args, kwargs, "clamp", NULL);
}

static PyObject *
m_clamp_(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return clamp(self, args, kwargs, "clamp_", tl_tensor_CAST(self));
}

static PyObject *
fn_where(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *c, *x, *y;
    if (!PyArg_ParseTuple(args, "OOO:where", &c, &x, &y)) return NULL;
    if (!tl_tensor_check(c) && !tl_is_numpy(c))
        return PyErr_Format(PyExc_TypeError, "where: condition must be a Tensor (a float32 mask) or a numpy array");
    return ew(TL_EW_WHERE, "where", c, x, y, NULL);
}

static PyObject *
fn_binary(int op, const char *name, PyObject *args)
{
    PyObject *a, *b;
    if (!PyArg_UnpackTuple(args, name, 2, 2, &a, &b)) return NULL;
    if (!tl_tensor_check(a) && !tl_tensor_check(b))
        return PyErr_Format(PyExc_TypeError, "%s: at least one argument must be a Tensor", name);
    return ew(op, name, a, b, NULL, NULL);
}

/* tlgpu.<name>(a, b): a Tensor on either side, the other a Tensor, a number or a numpy array. */
#define FN_BINARY(pyname, OP)                                                                      \
    static PyObject *fn_##pyname(PyObject *Py_UNUSED(m), PyObject *args)                           \
    { return fn_binary(TL_EW_##OP, #pyname, args); }
FN_BINARY(maximum, MAXIMUM) FN_BINARY(minimum, MINIMUM) FN_BINARY(atan2, ATAN2) FN_BINARY(hypot, HYPOT)
FN_BINARY(fmod, FMOD) FN_BINARY(logaddexp, LOGADDEXP) FN_BINARY(xlogy, XLOGY)
#undef FN_BINARY

/* After an in-place write that replaced t's values: when autograd records it, t's grad_fn becomes a copy of
 * `src` (when src requires grad) or a node that passes a zero gradient to t's old graph (PyTorch's
 * Fill/Zero/CopyBackward: a non-leaf keeps requiring grad). */
static int
record_overwrite(tl_tensor *t, PyObject *src)
{
    PyObject *ins[3] = {src, NULL, NULL};
    if (src == NULL || !tl_autograd_wanted(ins, 1)) ins[0] = (PyObject *)t;
    if (!tl_autograd_wanted(ins, 1)) return 0;
    tl_node *nd = tl_node_new(&ROW_EW, ins, 3);
    if (nd == NULL) return -1;
    nd->iarg[0] = ins[0] == src ? TL_EW_COPY : TL_EW_MUL;     /* MUL by the scalar 0, nothing saved */
    for (int i = 0; i < 4; i++) nd->iarg[1 + i] = -1;
    tl_node_attach(nd, t);
    return 0;
}

int tl_record_overwrite(tl_tensor *t) { return record_overwrite(t, NULL); }

static PyObject *
fill_inplace(PyObject *self, double v, const char *op)
{
    tl_tensor *t = tl_tensor_CAST(self);
    PyObject *me = self;
    if (tl_check_writable(op, t) < 0 || tl_check_recorded_inplace(op, t, tl_autograd_wanted(&me, 1)) < 0)
        return NULL;
    if (t->dtype == TL_I32 && isnan(v))                 /* as every other int32 path (tensor_io.c, ops_common.c) */
        return PyErr_Format(PyExc_ValueError, "%s: cannot write NaN into an int32 tensor", op);
    if (t->dtype == TL_I32 && !(v >= INT32_MIN && v <= INT32_MAX)) {
        char num[64];
        snprintf(num, sizeof num, "%.17g", v);
        return PyErr_Format(PyExc_OverflowError, "%s: value %s does not fit int32", op, num);
    }
    tl_mark_write(t, op);
    return tl_tensor_fill(t, v) < 0 || record_overwrite(t, NULL) < 0 ? NULL : Py_NewRef(self);
}

static PyObject *
m_zero_(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return fill_inplace(self, 0.0, "zero_");
}

static PyObject *
m_fill_(PyObject *self, PyObject *value)
{
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    return fill_inplace(self, v, "fill_");
}

/* copy_(src): src is a Tensor (of any dtype: converted) broadcastable to self, or array-like data (uploaded). */
static PyObject *
m_copy_(PyObject *self, PyObject *src_o)
{
    tl_tensor *t = tl_tensor_CAST(self), *src = NULL, *ins[2];
    Py_ssize_t shape[TL_MAX_DIMS];
    int ndim, rc = -1;
    if (tl_tensor_check(src_o)) src = (tl_tensor *)Py_NewRef(src_o);
    else src = tl_tensor_from_object(src_o, t->dtype, "copy_");
    if (src == NULL) return NULL;
    PyObject *ins2[2] = {self, (PyObject *)src};
    if (tl_check_writable("copy_", t) < 0 || tl_check_recorded_inplace("copy_", t, tl_autograd_wanted(ins2, 2)) < 0)
        goto done;
    Py_SETREF(src, tl_unalias(t, src));
    if (src == NULL) return NULL;
    ins[0] = t;
    ins[1] = src;
    if (tl_broadcast("copy_", ins, 2, &ndim, shape) < 0) goto done;
    if (ndim != t->ndim || memcmp(shape, t->shape, sizeof(Py_ssize_t) * (size_t)ndim) != 0) {
        char a[128], b[128];
        tl_shape_str(t->shape, t->ndim, a, sizeof a);
        tl_shape_str(src->shape, src->ndim, b, sizeof b);
        PyErr_Format(PyExc_ValueError, "copy_: source of shape %s does not broadcast to %s", b, a);
        goto done;
    }
    tl_mark_write(t, "copy_");
    rc = tl_convert_into(t, src);                    /* another dtype converts, as torch's copy_ */
    if (rc == 0 && record_overwrite(t, tl_tensor_check(src_o) ? src_o : NULL) < 0) rc = -1;
done:
    Py_DECREF(src);
    return rc < 0 ? NULL : Py_NewRef(self);
}

#define U(name, doc) {#name, m_##name, METH_NOARGS, doc}
#define UI(name) U(name##_, "in place " #name)
#define B(name, doc) {#name, m_##name, METH_O, doc}
static const PyMethodDef ew_methods[] = {
    U(neg, "-x"), U(exp, "e**x"), U(log, "natural log"), U(sqrt, "square root"), U(rsqrt, "1/sqrt(x)"),
    U(tanh, "tanh"), U(sigmoid, "1/(1+e**-x)"), U(relu, "max(x, 0)"), U(silu, "x*sigmoid(x)"),
    U(gelu, "exact (erf) GELU"), U(abs, "|x|"), U(sin, "sin"), U(cos, "cos"), U(square, "x*x"),
    U(reciprocal, "1/x"), U(sign, "-1, 0 or 1"), U(clone, "a contiguous copy (differentiable)"),
    U(ceil, "round up (int32: unchanged; zero gradient)"), U(floor, "round down (int32: unchanged; zero gradient)"),
    U(round, "round half to even (int32: unchanged; zero gradient)"),
    U(log1p, "log(1 + x), accurate near 0"), U(expm1, "e**x - 1, accurate near 0"), U(erf, "the error function"),
    U(atan, "arctangent"), U(asin, "arcsine (NaN outside [-1, 1])"), U(acos, "arccosine (NaN outside [-1, 1])"),
    U(tan, "tangent"), U(log2, "base-2 log"), U(log10, "base-10 log"), U(exp2, "2**x"), U(sinh, "hyperbolic sine"),
    U(cosh, "hyperbolic cosine"), U(asinh, "inverse hyperbolic sine"), U(acosh, "inverse hyperbolic cosine (x >= 1)"),
    U(atanh, "inverse hyperbolic tangent (|x| <= 1)"), U(trunc, "round toward 0 (int32: unchanged; zero gradient)"),
    U(frac, "x - trunc(x), the sign of x"), U(erfc, "1 - erf(x), accurate where erf(x) is near 1"),
    U(lgamma, "log|Gamma(x)|"), U(digamma, "psi(x), lgamma's derivative"), U(erfinv, "erf's inverse (+-inf at +-1)"),
    {"leaky_relu", (PyCFunction)(void (*)(void))m_leaky_relu, METH_VARARGS | METH_KEYWORDS,
     "leaky_relu(negative_slope=0.01): x if x > 0 else negative_slope * x"},
    B(add, "self + other"), B(sub, "self - other"), B(mul, "self * other"), B(div, "self / other"),
    B(pow, "self ** other"), B(floor_divide, "self // other (rounds toward -inf, like Python)"),
    B(remainder, "self % other (the divisor's sign, like Python)"), B(maximum, "elementwise max (NaN propagates)"),
    B(minimum, "elementwise min"),
    B(lt, "self < other as a float32 mask"), B(le, "<= mask"), B(gt, "> mask"), B(ge, ">= mask"),
    B(eq, "== mask"), B(ne, "!= mask"),
    B(atan2, "atan2(self, other): the angle of the point (other, self), in [-pi, pi]"),
    B(hypot, "sqrt(self**2 + other**2) without overflow"),
    B(fmod, "C's fmod: the dividend's sign (remainder takes the divisor's); int32 stays int32"),
    B(logaddexp, "log(exp(self) + exp(other)), stable: max + log1p(exp(-|self - other|))"),
    B(xlogy, "self * log(other); 0 where self == 0 unless other is NaN"),
    B(add_, "in place +="), B(sub_, "in place -="), B(mul_, "in place *="), B(div_, "in place /="),
    UI(relu), UI(sigmoid), UI(tanh), UI(exp), UI(neg), UI(abs), UI(sqrt),
    U(zero_, "in place: set to 0"), B(fill_, "in place: set to a value"),
    B(copy_, "in place: copy (broadcast, converting the dtype) from a tensor or array-like"),
    {"clamp", (PyCFunction)(void (*)(void))m_clamp, METH_VARARGS | METH_KEYWORDS, "clamp(min=None, max=None)"},
    {"clamp_", (PyCFunction)(void (*)(void))m_clamp_, METH_VARARGS | METH_KEYWORDS, "in place clamp(min, max)"},
    U(contiguous, "Self if contiguous, else a contiguous copy."),
    {NULL, NULL, 0, NULL},
};
#undef U
#undef B

static const PyMethodDef ew_functions[] = {
    {"where", fn_where, METH_VARARGS, "where(cond, x, y): x where cond != 0 else y (broadcasting)."},
    {"maximum", fn_maximum, METH_VARARGS, "maximum(a, b) elementwise (NaN propagates)."},
    {"minimum", fn_minimum, METH_VARARGS, "minimum(a, b) elementwise (NaN propagates)."},
    {"atan2", fn_atan2, METH_VARARGS, "atan2(a, b): the angle of the point (b, a), in [-pi, pi] (broadcasting)."},
    {"hypot", fn_hypot, METH_VARARGS, "hypot(a, b): sqrt(a**2 + b**2) without overflow (broadcasting)."},
    {"fmod", fn_fmod, METH_VARARGS, "fmod(a, b): C's fmod, the dividend's sign (remainder: the divisor's)."},
    {"logaddexp", fn_logaddexp, METH_VARARGS, "logaddexp(a, b): log(exp(a) + exp(b)), computed stably."},
    {"xlogy", fn_xlogy, METH_VARARGS, "xlogy(x, y): x * log(y); 0 where x == 0 unless y is NaN."},
    {NULL, NULL, 0, NULL},
};

static const PyType_Slot ew_slots[] = {
    {Py_nb_add, nb_add}, {Py_nb_subtract, nb_sub}, {Py_nb_multiply, nb_mul}, {Py_nb_true_divide, nb_div},
    {Py_nb_power, nb_pow}, {Py_nb_negative, nb_neg}, {Py_nb_absolute, nb_abs}, {Py_nb_positive, nb_pos},
    {Py_nb_inplace_add, nb_iadd}, {Py_nb_inplace_subtract, nb_isub}, {Py_nb_inplace_multiply, nb_imul},
    {Py_nb_inplace_true_divide, nb_idiv}, {Py_tp_richcompare, richcompare}, {Py_tp_hash, tensor_hash},
    {Py_nb_floor_divide, nb_floordiv}, {Py_nb_remainder, nb_mod}, {Py_nb_inplace_floor_divide, nb_ifloordiv},
    {Py_nb_inplace_remainder, nb_imod},
    {0, NULL},
};

/* grad_fn's name per op code: "MUL" -> "MulBackward", built once under the GIL. */
static const char *
ew_node_name(const tl_node *nd)
{
    static char names[TL_EW_COUNT][32];
    const int op = nd->iarg[0];
    if (op < 0 || op >= TL_EW_COUNT) return "Elementwise";
    if (names[op][0] == '\0') {
        lower(EW_NAME[op], names[op], 21);
        names[op][0] = EW_NAME[op][0];
        memcpy(names[op] + strlen(names[op]), "Backward", 9);
    }
    return names[op];
}

static const tl_op_row ROW_EW = {"Elementwise", tl_ew_backward, 0, ew_node_name};
static const tl_op_row *const elementwise_rows[] = {&ROW_EW, NULL};
static const tl_grad_prims ew_prims = {.add_ = tl_add_};

const tl_family tl_family_elementwise = {
    ew_functions, ew_methods, ew_slots, NULL,
    "neg exp log sqrt rsqrt tanh sigmoid relu silu gelu abs sin cos square reciprocal sign add sub mul div pow "
    "lt le gt ge eq ne clamp clone floor_divide remainder ceil floor round leaky_relu log1p expm1 erf "
    "atan asin acos tan log2 log10 exp2 sinh cosh asinh acosh atanh trunc frac erfc lgamma digamma erfinv",
    .rows = elementwise_rows, .grad_prims = &ew_prims};
