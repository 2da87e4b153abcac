/* ops_rnn_seq.c: a whole GRU or LSTM layer over a sequence as one op (kernels/rnn.cl), so a time step costs
 * two launches forward (the h W_hh^T product and a gate kernel) and two backward (a gate kernel and the
 * product carrying dh to the step before), under one autograd node per sequence.
 *   gru_sequence(gi_all, h0, w_hh, b_hh=None) -> out [T, B, H]
 *   lstm_sequence(gi_all, h0, c0, w_hh, b_hh=None) -> y [T + 1, B, H]: y[:T] the outputs h_1..h_T, y[T] c_T
 * gi_all [T, B, G H] is the whole sequence's input projection x W_ih^T + b_ih (its backward is linear's), read
 * through its strides; h0, c0 [B, H] or None (zeros); w_hh [G H, H]; b_hh [G H] or None; T >= 1.
 * Layout: the hidden states live in one buffer hs [T + 1, B, H] (slot 0 h0, slot t + 1 h_t; the LSTM's has a
 * slot more for c_T, its cell states a buffer cs [T + 1, B, H] of their own), so step t's product reads slot t
 * in place, the gate kernel writes slot t + 1, the output is a view of hs (no copies, no stack), and backward's
 * W_hh gradient is one product of all steps' gate gradients with slots 0..T-1.
 * Autograd: inputs (gi_all, h0, c0, w_hh, b_hh) (the GRU's c0 absent). Only when a graph is recorded, forward
 * keeps each step's gate activations in act [T, B, 4H]; the node saves act, hs, w_hh (and cs), version-checked,
 * so writing into the output in place makes backward raise. Backward runs from act, carrying the dh (LSTM: dc)
 * of the step after in a [B, H] buffer the gate kernel updates in place, and the product dgh[t] W_hh.
 * float16/bfloat16 operands and autocast go through tl_call_f32 (ops.h), as the step ops (ops_rnn.c): the
 * layer runs in float32 on widened copies (the hidden states stay float32 between steps) and its output is
 * rounded once to the operands' dtype (under autocast, the autocast dtype); gradients come back in each
 * input's dtype through the recorded conversions.
 * Invariants: arguments are checked (ValueError / TypeError naming op and shapes) before anything is enqueued;
 * B == 0 or H == 0 enqueues nothing forward (the gradients are zeros). */
#include "ops.h"
#include "ops_rnn.h"
#include "autograd.h"
#include <limits.h>

static const tl_op_row ROW_GRU_SEQ, ROW_LSTM_SEQ;   /* autograd rows (below) */

enum { GRU, LSTM, N_IN = 5 };                           /* inputs: gi_all, h0, c0, w_hh, b_hh */
static const char *const op_name[2] = {"gru_sequence", "lstm_sequence"};
static const char *const in_name[N_IN] = {"gi_all", "h0", "c0", "w_hh", "b_hh"};

/* Sets kernel args from `first` on: n ints, then (optionally) the mats' 4 values each. */
static int
set_ints(cl_kernel k, int first, int n, const int *v)
{
    for (int i = 0; i < n; i++)
        if (tl_set_args(k, first + i, 1, (size_t[]){sizeof(int)}, (const void *[]){&v[i]}) < 0) return -1;
    return 0;
}

static int
set_mem(cl_kernel k, int i, const tl_tensor *t, const tl_tensor *none)
{
    const cl_mem *m = TL_MEM(t) != NULL ? TL_MEM(t) : TL_MEM(none);
    return tl_set_args(k, i, 1, (size_t[]){sizeof(cl_mem)}, (const void *[]){m});
}

/* A contiguous view of t: shape (a, b) from element `off` (rows of b). */
static tl_tensor *
view2(tl_tensor *t, Py_ssize_t a, Py_ssize_t b, Py_ssize_t off)
{
    return tl_tensor_view(t, 2, (Py_ssize_t[]){a, b}, (Py_ssize_t[]){b, 1}, off);
}

static int
shape_error(const char *op, const char *name, const tl_tensor *t, const char *want, const tl_tensor *ref,
            const char *refname)
{
    char got[128], rs[128];
    tl_shape_str(t->shape, t->ndim, got, sizeof got);
    tl_shape_str(ref->shape, ref->ndim, rs, sizeof rs);
    PyErr_Format(PyExc_ValueError, "%s: %s must have shape %s for %s of shape %s, got %s", op, name, want, refname,
                 rs, got);
    return -1;
}

/* Parses the operands (o[i] == NULL: not an input of this op; None allowed for h0, c0, b_hh) into t, then
 * checks the shapes against w_hh [G H, H] and gi_all's T and B. */
static int
check_args(int kind, PyObject **o, tl_tensor **t)
{
    const char *op = op_name[kind];
    const Py_ssize_t G = kind == GRU ? 3 : 4;
    char want[96];
    for (int i = 0; i < N_IN; i++) {
        t[i] = NULL;
        if (o[i] == NULL) continue;
        if (o[i] == Py_None && (i == 1 || i == 2 || i == 4)) { o[i] = NULL; continue; }
        if (!tl_tensor_check(o[i])) {
            PyErr_Format(PyExc_TypeError, "%s: %s must be a Tensor%s, got %s", op, in_name[i],
                         i == 0 || i == 3 ? "" : " or None", Py_TYPE(o[i])->tp_name);
            return -1;
        }
        t[i] = tl_tensor_CAST(o[i]);
        if (tl_check_dtype(op, t[i], TL_F32) < 0) return -1;
    }
    tl_tensor *gi = t[0], *w = t[3];
    if (w->ndim != 2 || w->shape[0] != G * w->shape[1]) {
        char got[128];
        tl_shape_str(w->shape, w->ndim, got, sizeof got);
        PyErr_Format(PyExc_ValueError, "%s: w_hh must be 2-D [%d * hidden, hidden], got %s", op, (int)G, got);
        return -1;
    }
    Py_ssize_t H = w->shape[1];
    snprintf(want, sizeof want, "(T, batch, %zd)", G * H);
    if (gi->ndim != 3 || gi->shape[2] != G * H) return shape_error(op, "gi_all", gi, want, w, "w_hh");
    if (gi->shape[0] < 1) {
        PyErr_Format(PyExc_ValueError, "%s: gi_all must have at least one time step, got T = 0", op);
        return -1;
    }
    Py_ssize_t B = gi->shape[1];
    if ((gi->shape[0] + 2) * B * 4 * H > INT_MAX) {                 /* the kernels' offsets are ints */
        PyErr_Format(PyExc_ValueError, "%s: T * B * hidden = %zd * %zd * %zd is too large", op, gi->shape[0], B, H);
        return -1;
    }
    snprintf(want, sizeof want, "(%zd, %zd)", B, H);
    for (int i = 1; i <= 2; i++)
        if (t[i] != NULL && (t[i]->ndim != 2 || t[i]->shape[0] != B || t[i]->shape[1] != H))
            return shape_error(op, in_name[i], t[i], want, gi, "gi_all");
    snprintf(want, sizeof want, "(%zd,)", G * H);
    if (t[4] != NULL && (t[4]->ndim != 1 || t[4]->shape[0] != G * H))
        return shape_error(op, "b_hh", t[4], want, w, "w_hh");
    return 0;
}

/* Slot 0 of a state buffer [*, B, H] := s, or zeros for None. */
static int
init_slot(tl_tensor *buf, tl_tensor *s)
{
    tl_tensor *v = view2(buf, buf->shape[1], buf->shape[2], 0);
    int rc = v == NULL ? -1 : s != NULL ? tl_copy_into(v, s) : tl_tensor_fill(v, 0.0);
    Py_XDECREF(v);
    return rc;
}

/* Step t forward: gh = h_{t-1} W_hh^T (wt = W_hh^T), then the gate kernel. zero: bit 0 h0, bit 1 c0 is None
 * (zeros): step 0 then runs no product and reads no slot 0. */
static int
step(int kind, Py_ssize_t t, Py_ssize_t T, tl_tensor *const *in, tl_tensor *wt, tl_tensor *hs, tl_tensor *cs,
     tl_tensor *act, int zero)
{
    static tl_kernel kh[2] = {TL_KERNEL("rnn", "tl_gru_seq_step_f32"), TL_KERNEL("rnn", "tl_lstm_seq_step_f32")};
    const Py_ssize_t B = hs->shape[1], H = hs->shape[2], BH = B * H;
    const int zh = t == 0 && (zero & 1), zc = t == 0 && (zero & 2);
    tl_tensor *hp = NULL, *gh = NULL;
    cl_kernel k;
    int rc = -1;
    if (!zh && ((hp = view2(hs, B, H, t * BH)) == NULL || (gh = (tl_tensor *)tl_matmul(hp, wt)) == NULL)) goto done;
    if ((k = tl_kernel_py(&kh[kind])) == NULL) goto done;
    const int mask = (in[4] != NULL) | (act != NULL) << 1 | (t == T - 1) << 2 | zh << 3 | zc << 4;
    const int head[3] = {(int)B, (int)H, mask}, a_o = (int)(t * 4 * BH), p_o = (int)(t * BH);
    int n = 3;
    if (set_ints(k, 0, 3, head) < 0 || set_mem(k, n++, hs, NULL) < 0 || set_ints(k, n++, 1, &p_o) < 0) goto done;
    if (kind == LSTM) {
        const int more[1] = {(int)((T + 1) * BH)};       /* c_T's slot in hs */
        if (set_ints(k, n++, 1, more) < 0 || set_mem(k, n++, cs, NULL) < 0 || set_ints(k, n++, 1, &p_o) < 0)
            goto done;
    }
    if (set_mem(k, n++, act, hs) < 0 || set_ints(k, n++, 1, &a_o) < 0 ||
        tl_rnn_set_mat(k, n, tl_rnn_mat_of(in[0], t, NULL)) < 0 || tl_rnn_set_mat(k, n + 4, tl_rnn_mat_of(gh, 0, hs->storage->mem)) < 0 ||
        tl_rnn_set_mat(k, n + 8, tl_rnn_mat_of(in[4], 0, hs->storage->mem)) < 0)
        goto done;
    tl_storage *st[6] = {hs->storage};
    int ns = 1;
    if (cs != NULL) st[ns++] = cs->storage;
    if (act != NULL) st[ns++] = act->storage;
    unsigned written = (1u << ns) - 1u;
    st[ns++] = in[0]->storage;
    if (gh != NULL) st[ns++] = gh->storage;
    if (in[4] != NULL) st[ns++] = in[4]->storage;
    rc = tl_launch_1d(&kh[kind], (size_t)BH, st, ns, written);
done:
    Py_XDECREF(hp);
    Py_XDECREF(gh);
    return rc;
}

static PyObject *
forward(int kind, PyObject **o)
{
    tl_tensor *in[N_IN], *hs = NULL, *cs = NULL, *act = NULL, *wt = NULL, *out = NULL;
    if (check_args(kind, o, in) < 0) return NULL;
    const int lstm = kind == LSTM, grad = tl_autograd_wanted(o, N_IN);
    const int zero = (in[1] == NULL) | (lstm && in[2] == NULL) << 1;    /* states given as None: zeros */
    const int prev = tl_grad_set(0);                       /* the internal products and views record nothing */
    const Py_ssize_t T = in[0]->shape[0], B = in[0]->shape[1], H = in[3]->shape[1], BH = B * H;
    if ((hs = tl_tensor_empty(TL_F32, 3, (Py_ssize_t[]){T + 1 + lstm, B, H})) == NULL) goto fail;
    if (lstm && (cs = tl_tensor_empty(TL_F32, 3, (Py_ssize_t[]){T + 1, B, H})) == NULL) goto fail;
    if (grad && (act = tl_tensor_empty(TL_F32, 3, (Py_ssize_t[]){T, B, 4 * H})) == NULL) goto fail;
    if (hs->storage != NULL) {                             /* B, H > 0 */
        if ((in[1] != NULL && init_slot(hs, in[1]) < 0) || (lstm && in[2] != NULL && init_slot(cs, in[2]) < 0))
            goto fail;
        if ((wt = (tl_tensor *)tl_transpose(in[3], 0, 1)) == NULL) goto fail;
        for (Py_ssize_t t = 0; t < T; t++)
            if (step(kind, t, T, in, wt, hs, cs, act, zero) < 0) goto fail;
    }
    out = tl_tensor_view(hs, 3, (Py_ssize_t[]){T + lstm, B, H}, (Py_ssize_t[]){BH, H, 1}, BH);
    if (out == NULL) goto fail;
    if (grad) {
        tl_node *nd = tl_node_new(lstm ? &ROW_LSTM_SEQ : &ROW_GRU_SEQ, o, N_IN);
        if (nd == NULL) goto fail;
        nd->iarg[0] = zero;
        tl_node_save(nd, act);
        tl_node_save(nd, hs);
        tl_node_save(nd, in[3]);
        if (lstm) tl_node_save(nd, cs);
        tl_node_attach(nd, out);
    }
    tl_grad_set(prev);
    Py_XDECREF(wt); Py_XDECREF(act); Py_XDECREF(cs); Py_DECREF(hs);
    return (PyObject *)out;
fail:
    tl_grad_set(prev);
    Py_XDECREF(wt); Py_XDECREF(act); Py_XDECREF(cs); Py_XDECREF(hs); Py_XDECREF(out);
    return NULL;
}

/* tl_call_f32's fn: forward on (a copy of) the operands; ctx points at the kind. */
static PyObject *
forward_f32(PyObject *const *in, void *ctx)
{
    PyObject *o[N_IN];
    memcpy(o, in, sizeof o);
    return forward(*(const int *)ctx, o);
}

static PyObject *
fn_gru_sequence(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"gi_all", "h0", "w_hh", "b_hh", NULL};
    static const int kind = GRU;
    PyObject *o[N_IN] = {NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|O:gru_sequence", kw, &o[0], &o[1], &o[3], &o[4]))
        return NULL;
    return tl_call_f32(op_name[GRU], forward_f32, o, N_IN, (void *)&kind);
}

static PyObject *
fn_lstm_sequence(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"gi_all", "h0", "c0", "w_hh", "b_hh", NULL};
    static const int kind = LSTM;
    PyObject *o[N_IN] = {NULL, NULL, NULL, NULL, Py_None};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO|O:lstm_sequence", kw, &o[0], &o[1], &o[2], &o[3], &o[4]))
        return NULL;
    return tl_call_f32(op_name[LSTM], forward_f32, o, N_IN, (void *)&kind);
}

/* Backward step t's gate kernel: reads the upstream g (slot t; the LSTM's c_T gradient from slot T), carry and
 * mm (from step t + 1, absent at t = T - 1), act and the states; writes slot t of dgh (and dgi) and carry. */
static int
back_step(int kind, Py_ssize_t t, Py_ssize_t T, tl_tensor *g, tl_tensor *dgh, tl_tensor *dgi, tl_tensor *carry,
          tl_tensor *mm, tl_tensor *act, tl_tensor *states, int zero)
{
    static tl_kernel kh[2] = {TL_KERNEL("rnn", "tl_gru_seq_backward_f32"),
                              TL_KERNEL("rnn", "tl_lstm_seq_backward_f32")};
    const Py_ssize_t B = carry->shape[0], H = carry->shape[1], BH = B * H;
    cl_kernel k = tl_kernel_py(&kh[kind]);
    if (k == NULL) return -1;
    const int zp = t == 0 && (zero & (kind == GRU ? 1 : 2));     /* the state read (h, or the LSTM's c) is 0 */
    const int head[3] = {(int)B, (int)H, (mm != NULL) | (dgi != NULL) << 1 | zp << 2};
    const int d_o = (int)(t * (kind == GRU ? 3 : 4) * BH), a_o = (int)(t * 4 * BH), p_o = (int)(t * BH);
    int n = 3;
    if (set_ints(k, 0, 3, head) < 0) return -1;
    if (kind == GRU && set_mem(k, n++, dgi, dgh) < 0) return -1;
    if (set_mem(k, n++, dgh, NULL) < 0 || set_ints(k, n++, 1, &d_o) < 0 || set_mem(k, n++, carry, NULL) < 0 ||
        set_mem(k, n++, mm, carry) < 0 || tl_rnn_set_mat(k, n, tl_rnn_mat_of(g, t, NULL)) < 0)
        return -1;
    n += 4;
    if (kind == LSTM && tl_rnn_set_mat(k, n, tl_rnn_mat_of(g, T, NULL)) < 0) return -1;
    n += kind == LSTM ? 4 : 0;
    if (set_mem(k, n, act, NULL) < 0 || set_ints(k, n + 1, 1, &a_o) < 0 || set_mem(k, n + 2, states, NULL) < 0 ||
        set_ints(k, n + 3, 1, &p_o) < 0)
        return -1;
    tl_storage *st[7] = {dgh->storage, carry->storage};
    int ns = 2;
    if (dgi != NULL) st[ns++] = dgi->storage;
    unsigned written = (1u << ns) - 1u;
    if (mm != NULL) st[ns++] = mm->storage;
    st[ns++] = g->storage;
    st[ns++] = act->storage;
    st[ns++] = states->storage;
    return tl_launch_1d(&kh[kind], (size_t)BH, st, ns, written);
}

/* Zeros of the input shapes (B == 0 or H == 0: nothing ran forward, every gradient is zero). */
static int
zero_grads(tl_node *nd, PyObject **gin)
{
    for (int i = 0; i < N_IN; i++) {
        if (!tl_wants_grad(nd, i)) continue;
        tl_tensor *z = tl_tensor_empty(TL_F32, nd->in[i].ndim, nd->in[i].shape);
        if (z == NULL || tl_tensor_fill(z, 0.0) < 0) { Py_XDECREF(z); return -1; }
        gin[i] = (PyObject *)z;
    }
    return 0;
}

static int
backward(int kind, tl_node *nd, PyObject *grad, PyObject **gin)
{
    const int lstm = kind == LSTM;
    tl_tensor *act = NULL, *hs = NULL, *w = NULL, *cs = NULL, *g = tl_tensor_CAST(grad);
    tl_tensor *dgh = NULL, *dgi = NULL, *carry = NULL, *mm = NULL, *dv = NULL, *d2 = NULL, *dt = NULL, *hp = NULL;
    int rc = -1;
    if ((act = tl_node_saved(nd, 0)) == NULL || (hs = tl_node_saved(nd, 1)) == NULL ||
        (w = tl_node_saved(nd, 2)) == NULL || (lstm && (cs = tl_node_saved(nd, 3)) == NULL))
        goto done;
    const Py_ssize_t T = act->shape[0], B = act->shape[1], H = hs->shape[2], GH = w->shape[0];
    if (B * H == 0) { rc = zero_grads(nd, gin); goto done; }
    if ((dgh = tl_tensor_empty(TL_F32, 3, (Py_ssize_t[]){T, B, GH})) == NULL ||
        (!lstm && tl_wants_grad(nd, 0) && (dgi = tl_tensor_empty(TL_F32, 3, (Py_ssize_t[]){T, B, GH})) == NULL) ||
        (carry = tl_tensor_empty(TL_F32, 2, (Py_ssize_t[]){B, H})) == NULL)
        goto done;
    for (Py_ssize_t t = T - 1; t >= 0; t--) {
        if (back_step(kind, t, T, g, dgh, dgi, carry, mm, act, lstm ? cs : hs, nd->iarg[0]) < 0) goto done;
        Py_CLEAR(mm);
        if (t == 0 && !tl_wants_grad(nd, 1)) break;
        Py_XSETREF(dv, view2(dgh, B, GH, t * B * GH));     /* d h_{t-1} through the product: dgh[t] W_hh */
        if (dv == NULL || (mm = (tl_tensor *)tl_matmul(dv, w)) == NULL) goto done;
    }
    if (tl_wants_grad(nd, 1)) {                             /* the GRU's d h0 also has the elementwise z dh */
        if (!lstm && tl_add_(mm, carry) < 0) goto done;
        gin[1] = (PyObject *)mm;
        mm = NULL;
    }
    if (lstm && tl_wants_grad(nd, 2)) gin[2] = Py_NewRef((PyObject *)carry);
    if ((d2 = view2(dgh, T * B, GH, 0)) == NULL) goto done;
    if (tl_wants_grad(nd, 3)) {             /* d W_hh = dgh^T [h0; h_1..h_{T-1}], one product; h0 = 0 adds nothing */
        const Py_ssize_t t0 = nd->iarg[0] & 1, rows = (T - t0) * B;      /* T == 1 without h0: K = 0, zeros */
        dt = tl_tensor_view(dgh, 2, (Py_ssize_t[]){GH, rows}, (Py_ssize_t[]){1, GH}, t0 * B * GH);
        if (dt == NULL || (hp = view2(hs, rows, H, t0 * B * H)) == NULL || (gin[3] = tl_matmul(dt, hp)) == NULL)
            goto done;
    }
    if (tl_wants_grad(nd, 4) && (gin[4] = tl_sum(d2, 1u, 0)) == NULL) goto done;
    if (tl_wants_grad(nd, 0)) gin[0] = Py_NewRef((PyObject *)(lstm ? dgh : dgi));
    rc = 0;
done:
    Py_XDECREF(act); Py_XDECREF(hs); Py_XDECREF(w); Py_XDECREF(cs); Py_XDECREF(dgh); Py_XDECREF(dgi);
    Py_XDECREF(carry); Py_XDECREF(mm); Py_XDECREF(dv); Py_XDECREF(d2); Py_XDECREF(dt); Py_XDECREF(hp);
    return rc;
}

static int
tl_gru_seq_backward(tl_node *nd, PyObject *grad, PyObject **gin)
{
    return backward(GRU, nd, grad, gin);
}

static int
tl_lstm_seq_backward(tl_node *nd, PyObject *grad, PyObject **gin)
{
    return backward(LSTM, nd, grad, gin);
}

static const PyMethodDef rnn_seq_functions[] = {
    {"gru_sequence", TL_KW(fn_gru_sequence),
     "gru_sequence(gi_all, h0, w_hh, b_hh=None): a GRU layer's outputs [T, B, H] from the input projection "
     "gi_all [T, B, 3H] (b_ih included), h0 [B, H] or None (zeros); two launches per step each way, one node."},
    {"lstm_sequence", TL_KW(fn_lstm_sequence),
     "lstm_sequence(gi_all, h0, c0, w_hh, b_hh=None): an LSTM layer's y [T + 1, B, H]: y[:T] the outputs, "
     "y[T] the last cell state; gi_all [T, B, 4H] (b_ih included); h0, c0 [B, H] or None (zeros)."},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_GRU_SEQ = {"GruSequenceBackward", tl_gru_seq_backward};
static const tl_op_row ROW_LSTM_SEQ = {"LstmSequenceBackward", tl_lstm_seq_backward};
static const tl_op_row *const rnn_seq_rows[] = {&ROW_GRU_SEQ, &ROW_LSTM_SEQ, NULL};

const tl_family tl_family_rnn_seq = {rnn_seq_functions, NULL, NULL, NULL, NULL, .rows = rnn_seq_rows};
