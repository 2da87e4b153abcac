/* ops_rnn.c: the fused gate ops of one recurrent step (kernels/rnn.cl), so a GRU or LSTM step costs one
 * kernel forward and one backward instead of a dozen elementwise ones (tlgpu/nn/rnn.py composes them with
 * the weight products).
 *   gru_gates(gi, gh, h, b_ih=None, b_hh=None) -> h'          gi, gh [B, 3H], h [B, H], biases [3H]
 *   lstm_gates(gates, c, gh=None, b_ih=None, b_hh=None) -> (h', c')   gates, gh [B, 4H], c [B, H], biases [4H]
 * Operands all of one half dtype (autocast off, or on in that dtype) run the families rnn_bf16 / rnn_f16: the
 * same kernels loading halves and rounding each output once, gradients in that dtype. Mixed dtypes and
 * autocast go through tl_call_f32 (ops.h): the float32 op runs on widened copies (recorded, so gradients come
 * back in each input's dtype) and its result is rounded once to the operands' dtype; under autocast every
 * floating operand is cast to the autocast dtype first (torch's rule: the RNN cells run in the low dtype).
 * Invariants: a kernel sees operands of one dtype, checked (shapes named in the ValueError) before anything is
 * enqueued; operands are read through their strides (no contiguous copies); B == 0 or H == 0 enqueues nothing.
 * Autograd: one node per op saves its inputs (not the gates: backward recomputes them) and iarg[0] is the
 * bit mask of the operands given. The LSTM node's output is one [2, B, H] tensor (h' then c'), so one node has
 * one output; h' and c' are its two index views, and the backward kernel reads both halves of its gradient.
 * Bias gradients are the [B, G] gate gradients, which the engine sums over the rows. */
#include "ops.h"
#include "ops_rnn.h"
#include "autograd.h"

static const tl_op_row ROW_GRU_GATES, ROW_LSTM_GATES;   /* autograd rows (below) */

#define N_OPERANDS 5
/* A kernel's handles in the families of float32, bfloat16 and float16 operands (rnn.cl's RNN_HALF). */
#define RNN_KERNELS(name) {TL_KERNEL("rnn", name), TL_KERNEL("rnn_bf16", name), TL_KERNEL("rnn_f16", name)}
#define RNN_AT(kh, dt) (&(kh)[(dt) == TL_BF16 ? 1 : (dt) == TL_F16 ? 2 : 0])

tl_rnn_mat
tl_rnn_mat_of(const tl_tensor *t, Py_ssize_t slot, cl_mem none)
{
    tl_rnn_mat m = {none, 0, 0, 0};
    if (t == NULL || t->storage == NULL) return m;
    int nd = t->ndim;
    m.mem = t->storage->mem;
    m.off = (int)(t->offset + (nd == 3 ? slot * t->strides[0] : 0));
    m.rs = nd >= 2 ? (int)t->strides[nd - 2] : 0;
    m.cs = (int)t->strides[nd - 1];
    return m;
}

int
tl_rnn_set_mat(cl_kernel k, int first, tl_rnn_mat m)
{
    const size_t I = sizeof(int);
    return tl_set_args(k, first, 4, (size_t[]){sizeof(cl_mem), I, I, I}, (const void *[]){&m.mem, &m.off, &m.rs, &m.cs});
}

/* Args from `first`: B, H, mask, the n_out outputs, then the operands as (mem, offset, row stride, col stride). */
static int
launch(tl_kernel *kh, int B, int H, int mask, tl_tensor *const *outs, int n_out, const tl_rnn_mat *ops, int n_ops,
       tl_storage *const *reads, int n_reads)
{
    cl_kernel k = tl_kernel_py(kh);
    if (k == NULL) return -1;
    const size_t I = sizeof(int), M = sizeof(cl_mem);
    if (tl_set_args(k, 0, 3, (size_t[]){I, I, I}, (const void *[]){&B, &H, &mask}) < 0) return -1;
    for (int i = 0; i < n_out; i++)
        if (tl_set_args(k, 3 + i, 1, (size_t[]){M}, (const void *[]){&outs[i]->storage->mem}) < 0) return -1;
    for (int i = 0; i < n_ops; i++)
        if (tl_rnn_set_mat(k, 3 + n_out + 4 * i, ops[i]) < 0) return -1;
    tl_storage *st[3 + 2 * N_OPERANDS];
    int n = 0;
    for (int i = 0; i < n_out; i++) st[n++] = outs[i]->storage;
    for (int i = 0; i < n_reads; i++) st[n++] = reads[i];
    return tl_launch_1d(kh, (size_t)B * (size_t)H, st, n, (1u << n_out) - 1u);
}

/* Parses up to N_OPERANDS operands (the first n_req required, None allowed for the rest) into t (NULL = absent). */
static int
operands(const char *op, PyObject *const *o, int n_req, tl_tensor **t, int *present)
{
    *present = 0;
    for (int i = 0; i < N_OPERANDS; i++) {
        t[i] = NULL;
        if (i >= n_req && o[i] == Py_None) continue;
        if (!tl_tensor_check(o[i])) {
            PyErr_Format(PyExc_TypeError, "%s: expected a Tensor%s, got %s", op, i >= n_req ? " or None" : "",
                         Py_TYPE(o[i])->tp_name);
            return -1;
        }
        t[i] = tl_tensor_CAST(o[i]);                 /* the first's dtype, a floating one (float32 if not) */
        if (tl_check_dtype(op, t[i], TL_IS_FLOAT(t[0]->dtype) ? t[0]->dtype : TL_F32) < 0) return -1;
        *present |= 1 << i;
    }
    return 0;
}

/* ValueError unless t (when given) is [rows, cols], or [cols] for rows < 0; `ref` names the state it must match. */
static int
want_shape(const char *op, const char *name, const tl_tensor *t, Py_ssize_t rows, Py_ssize_t cols,
           const tl_tensor *ref, const char *refname)
{
    int nd = rows < 0 ? 1 : 2;
    if (t == NULL || (t->ndim == nd && t->shape[nd - 1] == cols && (nd == 1 || t->shape[0] == rows))) return 0;
    char want[64], got[128], rs[128];
    Py_ssize_t shape[2] = {rows, cols};
    tl_shape_str(nd == 1 ? &shape[1] : shape, nd, want, sizeof want);
    tl_shape_str(t->shape, t->ndim, got, sizeof got);
    tl_shape_str(ref->shape, ref->ndim, rs, sizeof rs);
    PyErr_Format(PyExc_ValueError, "%s: %s must have shape %s for %s of shape %s, got %s", op, name, want, refname,
                 rs, got);
    return -1;
}

/* The state (h or c) must be 2-D; then every other operand is checked against its B and H, gates G = n_gates H. */
static int
check_shapes(const char *op, tl_tensor *const *t, const char *const *names, int state, int n_gates)
{
    tl_tensor *s = t[state];
    if (s->ndim != 2) {
        char got[128];
        tl_shape_str(s->shape, s->ndim, got, sizeof got);
        PyErr_Format(PyExc_ValueError, "%s: %s must be 2-D [batch, hidden], got %s", op, names[state], got);
        return -1;
    }
    Py_ssize_t B = s->shape[0], G = n_gates * s->shape[1];
    for (int i = 0; i < N_OPERANDS; i++)
        if (i != state && want_shape(op, names[i], t[i], i >= 3 ? -1 : B, G, s, names[state]) < 0) return -1;
    return 0;
}

static int
record(PyObject *const *o, tl_tensor *const *t, int present, const tl_op_row *row, tl_tensor *out)
{
    PyObject *ins[N_OPERANDS];
    for (int i = 0; i < N_OPERANDS; i++) ins[i] = t[i] != NULL ? o[i] : NULL;
    if (!tl_autograd_wanted(ins, N_OPERANDS)) return 0;
    tl_node *nd = tl_node_new(row, ins, N_OPERANDS);
    if (nd == NULL) return -1;
    nd->iarg[0] = present;
    for (int i = 0; i < N_OPERANDS; i++)
        if (t[i] != NULL) tl_node_save(nd, t[i]);
    tl_node_attach(nd, out);
    return 0;
}

/* The saved operands back as views in their slots (absent ones NULL); -1 with an exception set. */
static int
restore(tl_node *nd, tl_tensor **t)
{
    for (int i = 0, j = 0; i < N_OPERANDS; i++) {
        t[i] = NULL;
        if ((nd->iarg[0] & (1 << i)) && (t[i] = tl_node_saved(nd, j++)) == NULL) return -1;
    }
    return 0;
}

static void
release(tl_tensor **t, int n)
{
    for (int i = 0; i < n; i++) Py_XDECREF(t[i]);
}

/* Whether the operands given (o, None for absent optional ones) are all tensors of one half dtype that runs
 * as it is: autocast off, or on in that dtype (it would cast nothing). */
static int
one_half(PyObject *const *o)
{
    int dt = -1;
    for (int i = 0; i < N_OPERANDS; i++) {
        if (o[i] == Py_None) continue;
        if (!tl_tensor_check(o[i])) return 0;
        const int d = tl_tensor_CAST(o[i])->dtype;
        if (!TL_IS_HALF(d) || (dt >= 0 && d != dt)) return 0;
        dt = d;
    }
    const int low = tl_autocast_dtype();
    return dt >= 0 && (low < 0 || low == dt);
}

/* The upstream gradient in the operands' dtype dt (a new reference; NULL with an exception set). */
static tl_tensor *
grad_in(PyObject *grad, int dt)
{
    tl_tensor *g = tl_tensor_CAST(grad);
    return g->dtype == dt ? (tl_tensor *)Py_NewRef(grad) : (tl_tensor *)tl_convert(g, dt);
}

/* The operands' mats and storages in kernel order `order`; returns how many storages. */
static int
gather(tl_tensor *const *t, const int *order, tl_rnn_mat *m, tl_storage **st, cl_mem none)
{
    int n = 0;
    for (int i = 0; i < N_OPERANDS; i++) {
        m[i] = tl_rnn_mat_of(t[order[i]], 0, none);
        if (t[order[i]] != NULL) st[n++] = t[order[i]]->storage;
    }
    return n;
}

static const int gru_order[N_OPERANDS] = {0, 1, 2, 3, 4};             /* gi, gh, h, b_ih, b_hh */
static const int lstm_order[N_OPERANDS] = {0, 2, 1, 3, 4};            /* gates, gh, c, b_ih, b_hh */
static const char *const gru_names[N_OPERANDS] = {"gi", "gh", "h", "b_ih", "b_hh"};
static const char *const lstm_names[N_OPERANDS] = {"gates", "c", "gh", "b_ih", "b_hh"};

/* The op over operands of one dtype (float32: tl_call_f32's fn; one half dtype: called directly, one_half):
 * o = gi, gh, h, b_ih, b_hh (None for an absent bias). */
static PyObject *
gru_gates_op(PyObject *const *o, void *Py_UNUSED(ctx))
{
    static tl_kernel kh[3] = RNN_KERNELS("tl_gru_gates_f32");
    tl_tensor *t[N_OPERANDS], *out;
    int present;
    tl_rnn_mat ms[N_OPERANDS];
    tl_storage *st[N_OPERANDS];
    if (operands("gru_gates", o, 3, t, &present) < 0 || check_shapes("gru_gates", t, gru_names, 2, 3) < 0)
        return NULL;
    if ((out = tl_tensor_empty(t[0]->dtype, 2, t[2]->shape)) == NULL) return NULL;
    if (out->storage != NULL) {                               /* zero-size: enqueue nothing */
        int n = gather(t, gru_order, ms, st, out->storage->mem);
        if (launch(RNN_AT(kh, out->dtype), (int)out->shape[0], (int)out->shape[1], present >> 3, &out, 1, ms,
                   N_OPERANDS, st, n) < 0)
            goto fail;
    }
    if (record(o, t, present, &ROW_GRU_GATES, out) < 0) goto fail;
    return (PyObject *)out;
fail:
    Py_DECREF(out);
    return NULL;
}

static PyObject *
fn_gru_gates(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"gi", "gh", "h", "b_ih", "b_hh", NULL};
    PyObject *o[N_OPERANDS] = {NULL, NULL, NULL, Py_None, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|OO:gru_gates", kw, &o[0], &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    return one_half(o) ? gru_gates_op(o, NULL) : tl_call_f32("gru_gates", gru_gates_op, o, N_OPERANDS, NULL);
}

/* One kernel: d gi, d gh [B, 3H] and d h [B, H]; the biases take d gi and d gh (summed over rows by the engine). */
static int
tl_gru_gates_backward(tl_node *nd, PyObject *grad, PyObject **gin)
{
    static tl_kernel kh[3] = RNN_KERNELS("tl_gru_gates_backward_f32");
    tl_tensor *t[N_OPERANDS], *g = NULL, *d[3] = {NULL, NULL, NULL};
    tl_rnn_mat ms[1 + N_OPERANDS];
    tl_storage *st[1 + N_OPERANDS];
    int rc = -1;
    if (restore(nd, t) < 0 || (g = grad_in(grad, t[0]->dtype)) == NULL) goto done;
    Py_ssize_t B = t[2]->shape[0], H = t[2]->shape[1];
    for (int i = 0; i < 3; i++)
        if ((d[i] = tl_tensor_empty(t[0]->dtype, 2, (Py_ssize_t[]){B, i < 2 ? 3 * H : H})) == NULL) goto done;
    if (d[2]->storage != NULL) {                             /* B, H > 0 */
        int n = gather(t, gru_order, ms + 1, st + 1, d[0]->storage->mem) + 1;
        ms[0] = tl_rnn_mat_of(g, 0, NULL);
        st[0] = g->storage;
        if (launch(RNN_AT(kh, t[0]->dtype), (int)B, (int)H, nd->iarg[0] >> 3, d, 3, ms, 1 + N_OPERANDS, st, n) < 0)
            goto done;
    }
    static const int from[N_OPERANDS] = {0, 1, 2, 0, 1};     /* which result each input's gradient is */
    for (int i = 0; i < N_OPERANDS; i++)
        if (tl_wants_grad(nd, i)) gin[i] = Py_NewRef((PyObject *)d[from[i]]);
    rc = 0;
done:
    release(t, N_OPERANDS);
    release(d, 3);
    Py_XDECREF(g);
    return rc;
}

/* As gru_gates_op: o = gates, c, gh, b_ih, b_hh; returns the [2, B, H] output. */
static PyObject *
lstm_gates_op(PyObject *const *o, void *Py_UNUSED(ctx))
{
    static tl_kernel kh[3] = RNN_KERNELS("tl_lstm_gates_f32");
    tl_tensor *t[N_OPERANDS], *y;
    int present;
    tl_rnn_mat ms[N_OPERANDS];
    tl_storage *st[N_OPERANDS];
    if (operands("lstm_gates", o, 2, t, &present) < 0 || check_shapes("lstm_gates", t, lstm_names, 1, 4) < 0)
        return NULL;
    if ((y = tl_tensor_empty(t[0]->dtype, 3, (Py_ssize_t[]){2, t[1]->shape[0], t[1]->shape[1]})) == NULL) return NULL;
    if (y->storage != NULL) {
        int n = gather(t, lstm_order, ms, st, y->storage->mem);
        if (launch(RNN_AT(kh, y->dtype), (int)y->shape[1], (int)y->shape[2], present >> 2, &y, 1, ms, N_OPERANDS, st,
                   n) < 0)
            goto fail;
    }
    if (record(o, t, present, &ROW_LSTM_GATES, y) < 0) goto fail;
    return (PyObject *)y;
fail:
    Py_DECREF(y);
    return NULL;
}

static PyObject *
fn_lstm_gates(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"gates", "c", "gh", "b_ih", "b_hh", NULL};
    PyObject *o[N_OPERANDS] = {NULL, NULL, Py_None, Py_None, Py_None}, *y, *res = NULL, *h2 = NULL, *c2 = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|OOO:lstm_gates", kw, &o[0], &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    y = one_half(o) ? lstm_gates_op(o, NULL) : tl_call_f32("lstm_gates", lstm_gates_op, o, N_OPERANDS, NULL);
    if (y == NULL) return NULL;
    h2 = PySequence_GetItem(y, 0);                         /* index views: h' = y[0], c' = y[1] */
    c2 = h2 != NULL ? PySequence_GetItem(y, 1) : NULL;
    if (c2 != NULL) res = PyTuple_Pack(2, h2, c2);
    Py_XDECREF(h2);
    Py_XDECREF(c2);
    Py_DECREF(y);
    return res;
}

/* One kernel: d gates [B, 4H] (also gh's and, summed by the engine, the biases') and d c [B, H], from both
 * halves of the [2, B, H] output's gradient (the index views' backward left zeros where one had none). */
static int
tl_lstm_gates_backward(tl_node *nd, PyObject *grad, PyObject **gin)
{
    static tl_kernel kh[3] = RNN_KERNELS("tl_lstm_gates_backward_f32");
    tl_tensor *t[N_OPERANDS], *g = NULL, *d[2] = {NULL, NULL};
    tl_rnn_mat ms[2 + N_OPERANDS];
    tl_storage *st[1 + N_OPERANDS];
    int rc = -1;
    if (restore(nd, t) < 0 || (g = grad_in(grad, t[0]->dtype)) == NULL) goto done;
    Py_ssize_t B = t[1]->shape[0], H = t[1]->shape[1];
    for (int i = 0; i < 2; i++)
        if ((d[i] = tl_tensor_empty(t[0]->dtype, 2, (Py_ssize_t[]){B, i == 0 ? 4 * H : H})) == NULL) goto done;
    if (d[1]->storage != NULL) {
        int n = gather(t, lstm_order, ms + 2, st + 1, d[0]->storage->mem) + 1;
        ms[0] = tl_rnn_mat_of(g, 0, NULL);
        ms[1] = tl_rnn_mat_of(g, 1, NULL);
        st[0] = g->storage;
        if (launch(RNN_AT(kh, t[0]->dtype), (int)B, (int)H, nd->iarg[0] >> 2, d, 2, ms, 2 + N_OPERANDS, st, n) < 0)
            goto done;
    }
    static const int from[N_OPERANDS] = {0, 1, 0, 0, 0};     /* gates, c, gh, b_ih, b_hh */
    for (int i = 0; i < N_OPERANDS; i++)
        if (tl_wants_grad(nd, i)) gin[i] = Py_NewRef((PyObject *)d[from[i]]);
    rc = 0;
done:
    release(t, N_OPERANDS);
    release(d, 2);
    Py_XDECREF(g);
    return rc;
}

static const PyMethodDef rnn_functions[] = {
    {"gru_gates", TL_KW(fn_gru_gates),
     "gru_gates(gi, gh, h, b_ih=None, b_hh=None): one GRU step's h' from the input and hidden projections "
     "gi, gh [B, 3H] (r, z, n) and h [B, H]; one kernel forward, one backward."},
    {"lstm_gates", TL_KW(fn_lstm_gates),
     "lstm_gates(gates, c, gh=None, b_ih=None, b_hh=None): one LSTM step's (h', c') from the gate "
     "pre-activations gates (+ gh) [B, 4H] (i, f, g, o) and c [B, H]; one kernel forward, one backward."},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_GRU_GATES = {"GruGatesBackward", tl_gru_gates_backward};
static const tl_op_row ROW_LSTM_GATES = {"LstmGatesBackward", tl_lstm_gates_backward};
static const tl_op_row *const rnn_rows[] = {&ROW_GRU_GATES, &ROW_LSTM_GATES, NULL};

static void
half_options(const tl_runtime *Py_UNUSED(rt), int arg, const char *Py_UNUSED(user), char *out, size_t cap)
{
    snprintf(out, cap, " -DRNN_HALF=%d", arg);
}

/* The build rules of rnn.cl's half families (programs.h), at import. */
static int
rnn_init(PyObject *Py_UNUSED(m), tl_state *Py_UNUSED(S))
{
    static const tl_program_rule bf16 = {"rnn_bf16", "rnn", half_options, 1}, f16 = {"rnn_f16", "rnn", half_options, 2};
    tl_err err = {0};
    return tl_program_register(&bf16, &err) == TL_OK && tl_program_register(&f16, &err) == TL_OK ? 0 : tl_raise(&err);
}

const tl_family tl_family_rnn = {rnn_functions, NULL, NULL, NULL, NULL, .rows = rnn_rows, .init = rnn_init};
