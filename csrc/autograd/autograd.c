/* autograd.c: graph nodes, the backward engine, gradient accumulation and grad mode.
 * Invariants: a node owns refs to its inputs' nodes (next[]) and to input leaves (leaf[]), never to its
 * outputs, so dropping the output frees the graph by refcounting alone (release is iterative: a 10,000-op
 * chain does not recurse). Saved tensors are storage refs plus the version they had; using one whose
 * storage has been written in place since raises, naming the op that saved it and the op that wrote it.
 * The engine runs Kahn's algorithm over the nodes reachable from the root (no recursion), sums gradients
 * of nodes used several times, reduces broadcast gradients back to input shapes, accumulates into the
 * .grad of leaves, and (without retain_graph) frees each node's saved tensors once its backward ran.
 * Grad mode is thread-local; the engine itself runs with it off (no higher-order graphs). */
#include "autograd.h"
#include "ops_common.h"
#include "ops.h"

static _Thread_local int grad_off;
static unsigned long run_id;

static const tl_op_info TL_OPS[TL_OP_COUNT] = {
    [TL_OP_EW] = {"Elementwise", tl_ew_backward},
    [TL_OP_RESHAPE] = {"ReshapeBackward", tl_reshape_backward},
    [TL_OP_PERMUTE] = {"PermuteBackward", tl_permute_backward},
    [TL_OP_EXPAND] = {"ExpandBackward", tl_expand_backward},
    [TL_OP_NARROW] = {"NarrowBackward", tl_narrow_backward},
    [TL_OP_CAT] = {"CatBackward", tl_cat_backward},
    [TL_OP_STACK] = {"StackBackward", tl_stack_backward},
    [TL_OP_INDEX] = {"IndexBackward", tl_index_backward},
    [TL_OP_INDEX_SELECT] = {"IndexSelectBackward", tl_index_select_backward},
    [TL_OP_MATMUL] = {"MatmulBackward", tl_matmul_backward},
    [TL_OP_LINEAR] = {"LinearBackward", tl_linear_backward},
    [TL_OP_REDUCE] = {"ReduceBackward", tl_reduce_backward},
    [TL_OP_SOFTMAX] = {"SoftmaxBackward", tl_softmax_backward},
    [TL_OP_CROSS_ENTROPY] = {"CrossEntropyBackward", tl_cross_entropy_backward},
    [TL_OP_IM2COL] = {"Im2colBackward", tl_im2col_backward},
    [TL_OP_MAX_POOL2D] = {"MaxPool2dBackward", tl_max_pool2d_backward},
    [TL_OP_AVG_POOL2D] = {"AvgPool2dBackward", tl_avg_pool2d_backward},
    [TL_OP_CONV_LAYOUT] = {"ConvolutionBackward", tl_conv_layout_backward},
    [TL_OP_CUMSUM] = {"CumsumBackward", tl_cumsum_backward},
    [TL_OP_GATHER] = {"GatherBackward", tl_gather_backward},
    [TL_OP_SETITEM] = {"CopySlices", tl_setitem_backward},
    [TL_OP_GRU_GATES] = {"GruGatesBackward", tl_gru_gates_backward},
    [TL_OP_LSTM_GATES] = {"LstmGatesBackward", tl_lstm_gates_backward},
    [TL_OP_GRU_SEQ] = {"GruSequenceBackward", tl_gru_seq_backward},
    [TL_OP_LSTM_SEQ] = {"LstmSequenceBackward", tl_lstm_seq_backward},
    [TL_OP_TRI] = {"TriBackward", tl_tri_backward},
    [TL_OP_INDEX_ADD] = {"IndexAddBackward", tl_index_add_backward},
    [TL_OP_TOPK] = {"TopkBackward", tl_topk_backward},
};
_Static_assert(sizeof TL_OPS / sizeof TL_OPS[0] == TL_OP_COUNT, "one row per op");

int
tl_grad_enabled(void)
{
    return !grad_off;
}

int
tl_grad_set(int enabled)
{
    int prev = !grad_off;
    grad_off = !enabled;
    return prev;
}

int
tl_autograd_wanted(PyObject *const *ins, int n)
{
    if (grad_off) return 0;
    for (int i = 0; i < n; i++)
        if (ins[i] != NULL && tl_tensor_check(ins[i]) && tl_tensor_CAST(ins[i])->requires_grad) return 1;
    return 0;
}

tl_node *
tl_node_new(int op, PyObject *const *ins, int n)
{
    tl_node *nd = PyMem_Calloc(1, sizeof *nd + (size_t)n * sizeof(tl_edge));
    if (nd == NULL) return (tl_node *)PyErr_NoMemory();
    atomic_init(&nd->refs, 1);
    nd->op = op;
    nd->n_in = n;
    for (int i = 0; i < n; i++) {
        if (ins[i] == NULL || !tl_tensor_check(ins[i])) continue;
        tl_tensor *t = tl_tensor_CAST(ins[i]);
        tl_edge *e = &nd->in[i];
        e->ndim = t->ndim;
        memcpy(e->shape, t->shape, sizeof(Py_ssize_t) * (size_t)t->ndim);
        if (!t->requires_grad) continue;
        if (t->grad_fn != NULL) {
            e->next = t->grad_fn;
            atomic_fetch_add(&t->grad_fn->refs, 1);
        } else {
            e->leaf = Py_NewRef(ins[i]);
        }
    }
    return nd;
}

int
tl_wants_grad(const tl_node *nd, int i)
{
    return nd->in[i].next != NULL || nd->in[i].leaf != NULL;
}

PyObject *
tl_record1(PyObject *out, int op, PyObject *in, const int *iarg, int n_iarg, PyObject *extra)
{
    if (out == NULL || !tl_autograd_wanted(&in, 1)) return out;
    tl_node *nd = tl_node_new(op, &in, 1);
    if (nd == NULL) { Py_DECREF(out); return NULL; }
    for (int i = 0; i < n_iarg; i++) nd->iarg[i] = iarg[i];
    nd->extra = Py_XNewRef(extra);
    tl_node_attach(nd, tl_tensor_CAST(out));
    return out;
}

int
tl_node_save(tl_node *nd, tl_tensor *t)
{
    tl_saved *s = &nd->saved[nd->n_saved++];
    s->storage = t->storage;
    if (s->storage != NULL) tl_storage_retain(s->storage);
    s->dtype = t->dtype;
    s->ndim = t->ndim;
    memcpy(s->shape, t->shape, sizeof s->shape);
    memcpy(s->strides, t->strides, sizeof s->strides);
    s->offset = t->offset;
    s->version = s->storage != NULL ? tl_storage_version(s->storage) : 0;
    return 0;
}

tl_tensor *
tl_node_saved(tl_node *nd, int i)
{
    tl_saved *s = &nd->saved[i];
    if (s->storage != NULL && tl_storage_version(s->storage) != s->version) {
        return (tl_tensor *)PyErr_Format(
            PyExc_RuntimeError,
            "backward of %s: a tensor it saved was modified in place by %s (version %llu, now %llu); "
            "clone it before the in-place op or do the op out of place",
            tl_node_name(nd), s->storage->writer ? s->storage->writer : "an in-place op",
            (unsigned long long)s->version, (unsigned long long)tl_storage_version(s->storage));
    }
    return tl_tensor_from_storage(s->storage, s->dtype, s->ndim, s->shape, s->strides, s->offset);
}

void
tl_node_attach(tl_node *nd, tl_tensor *out)
{
    if (out->grad_fn != NULL) tl_node_release(out->grad_fn);
    out->grad_fn = nd;
    out->requires_grad = 1;
}

static void
free_saved(tl_node *nd)
{
    for (int i = 0; i < nd->n_saved; i++) {
        tl_storage_release(nd->saved[i].storage);
        nd->saved[i].storage = NULL;
    }
    nd->n_saved = 0;
}

void
tl_node_release(tl_node *first)
{
    tl_node *stack_buf[64], **stack = stack_buf;
    size_t n = 0, cap = 64;
    if (first == NULL || atomic_fetch_sub(&first->refs, 1) != 1) return;
    stack[n++] = first;
    while (n > 0) {                                   /* iterative: long chains must not recurse */
        tl_node *nd = stack[--n];
        for (int i = 0; i < nd->n_in; i++) {
            Py_CLEAR(nd->in[i].leaf);
            tl_node *nx = nd->in[i].next;
            if (nx == NULL || atomic_fetch_sub(&nx->refs, 1) != 1) continue;
            if (n == cap) {
                tl_node **grown = PyMem_Malloc(2 * cap * sizeof *grown);
                if (grown == NULL) continue;          /* leaks one subgraph rather than crash */
                memcpy(grown, stack, n * sizeof *grown);
                if (stack != stack_buf) PyMem_Free(stack);
                stack = grown;
                cap *= 2;
            }
            stack[n++] = nx;
        }
        free_saved(nd);
        Py_CLEAR(nd->grad);
        Py_CLEAR(nd->extra);
        PyMem_Free(nd);
    }
    if (stack != stack_buf) PyMem_Free(stack);
}

const char *
tl_node_name(const tl_node *nd)
{
    static const char *const ew_names[TL_EW_COUNT] = {
#define X(name, arity) #name,
        TL_EW_OPS(X)
#undef X
    };
    static char names[TL_EW_COUNT][32];               /* "MUL" -> "MulBackward", built once under the GIL */
    if (nd->op != TL_OP_EW || nd->iarg[0] < 0 || nd->iarg[0] >= TL_EW_COUNT) return TL_OPS[nd->op].name;
    char *out = names[nd->iarg[0]];
    if (out[0] == '\0') {
        const char *in = ew_names[nd->iarg[0]];
        size_t k = 0;
        for (; in[k] && k < 20; k++)
            out[k] = (char)(k == 0 ? in[k] : (in[k] >= 'A' && in[k] <= 'Z' ? in[k] + 32 : in[k]));
        memcpy(out + k, "Backward", 9);
    }
    return out;
}

/* Sum g over the dims that broadcasting added or stretched, so it has `shape` again. */
PyObject *
tl_sum_to_shape(PyObject *g, int ndim, const Py_ssize_t *shape)
{
    tl_tensor *t = tl_tensor_CAST(g);
    PyObject *summed, *res;
    int lead = t->ndim - ndim;
    unsigned axes = 0;
    int same = lead == 0;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (same) return Py_NewRef(g);
    for (int d = 0; d < t->ndim; d++)
        if (d < lead || (shape[d - lead] == 1 && t->shape[d] != 1)) axes |= 1u << d;
    summed = axes != 0 ? tl_sum(t, axes, 1) : Py_NewRef(g);
    if (summed == NULL) return NULL;
    res = tl_reshape(tl_tensor_CAST(summed), ndim, shape);
    Py_DECREF(summed);
    return res;
}

static int
is_view_op(int op)
{
    return op == TL_OP_RESHAPE || op == TL_OP_PERMUTE || op == TL_OP_EXPAND || op == TL_OP_NARROW ||
           op == TL_OP_INDEX;
}

/* In-place writes that autograd records (PyTorch's rules, less its view tracking): a leaf that requires grad
 * is refused while grad mode is on; a non-leaf may be written, and the op becomes its new grad_fn (tensors
 * that earlier ops saved from it then refuse to backward, naming the op). A view whose storage is also held
 * elsewhere is refused when the write must be recorded: its base's graph would not see the write. */
int
tl_check_recorded_inplace(const char *op, tl_tensor *t, int track)
{
    if (grad_off) return 0;
    if (t->requires_grad && t->grad_fn == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: a leaf tensor that requires grad cannot be modified in place while "
                     "grad mode is on (wrap the update in tlgpu.no_grad())", op);
        return -1;
    }
    if (track && t->storage != NULL && atomic_load(&t->storage->refs) > 1 &&
        (t->grad_fn == NULL || is_view_op(t->grad_fn->op))) {
        char s[128];
        tl_shape_str(t->shape, t->ndim, s, sizeof s);
        PyErr_Format(PyExc_RuntimeError, "%s: in-place op on a view of shape %s whose storage other tensors share, "
                     "while autograd records it: the base would not see the write; clone() the view first", op, s);
        return -1;
    }
    return 0;
}

int
tl_check_inplace(const char *op, tl_tensor *t)
{
    if (grad_off || !t->requires_grad) return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "%s: %s tensor that requires grad cannot be modified in place while grad mode is on "
                 "(wrap the update in tlgpu.no_grad())", op, t->grad_fn == NULL ? "a leaf" : "a");
    return -1;
}

void
tl_mark_write(tl_tensor *t, const char *op)
{
    if (t->storage == NULL) return;
    t->storage->writer = op;
    tl_storage_bump_version(t->storage);
}

/* grad_acc += g, where acc may be NULL. A .grad must own its memory, contiguous from element 0 (optimizers
 * update it with flat kernels and in place): g is kept when it is such a private temporary (only we hold it
 * and its storage), otherwise copied. */
static int
accumulate(PyObject **acc, PyObject *g, int leaf)
{
    tl_tensor *t = tl_tensor_CAST(g);
    if (!leaf) {                                      /* a node's pending sum: shared refs are fine, never in place */
        if (*acc == NULL) { *acc = Py_NewRef(g); return 0; }
        Py_SETREF(*acc, PyNumber_Add(*acc, g));
        return *acc == NULL ? -1 : 0;
    }
    if (*acc == NULL) {
        int private = Py_REFCNT(g) == 1 && t->offset == 0 && tl_tensor_is_contig(t) &&
                      (t->storage == NULL || atomic_load(&t->storage->refs) == 1);
        if (private) { *acc = Py_NewRef(g); return 0; }
        tl_tensor *copy = tl_tensor_empty(TL_F32, t->ndim, t->shape);
        if (copy != NULL && tl_copy_into(copy, t) < 0) Py_CLEAR(copy);
        *acc = (PyObject *)copy;
        return copy == NULL ? -1 : 0;
    }
    return tl_add_(tl_tensor_CAST(*acc), tl_tensor_CAST(g));
}

/* Nodes reachable from root, each once, with deps = edges into it from reachable nodes. */
static tl_node **
collect(tl_node *root, size_t *count)
{
    size_t n = 0, cap = 64, head = 0;
    tl_node **all = PyMem_Malloc(cap * sizeof *all);
    if (all == NULL) return (tl_node **)PyErr_NoMemory();
    unsigned long mark = ++run_id;
    root->deps = 0;
    root->mark = mark;
    all[n++] = root;
    while (head < n) {                                /* breadth-first: the array doubles as the queue */
        tl_node *nd = all[head++];
        if (nd->released) {
            PyMem_Free(all);
            return (tl_node **)PyErr_Format(PyExc_RuntimeError,
                "backward through %s a second time: its saved tensors were freed by the first backward; "
                "pass retain_graph=True to the first call", tl_node_name(nd));
        }
        for (int i = 0; i < nd->n_in; i++) {
            tl_node *nx = nd->in[i].next;
            if (nx == NULL) continue;
            if (nx->mark != mark) {
                nx->mark = mark;
                nx->deps = 0;
                if (n == cap) {
                    tl_node **grown = PyMem_Realloc(all, 2 * cap * sizeof *grown);
                    if (grown == NULL) { PyMem_Free(all); return (tl_node **)PyErr_NoMemory(); }
                    all = grown;
                    cap *= 2;
                }
                all[n++] = nx;
            }
            nx->deps++;
        }
    }
    *count = n;
    return all;
}

static int
run_backward(tl_node *root, PyObject *grad, int retain)
{
    size_t n = 0, head = 0, tail = 0;
    tl_node **all = collect(root, &n), **ready = NULL;
    int rc = -1;
    if (all == NULL) return -1;
    if ((ready = PyMem_Malloc(n * sizeof *ready)) == NULL) { PyErr_NoMemory(); goto done; }
    root->grad = Py_NewRef(grad);
    ready[tail++] = root;
    while (head < tail) {
        tl_node *nd = ready[head++];
        PyObject *gbuf[8] = {NULL}, **gin = nd->n_in <= 8 ? gbuf : PyMem_Calloc((size_t)nd->n_in, sizeof *gin);
        PyObject *g = nd->grad;
        nd->grad = NULL;
        int st = gin == NULL ? (PyErr_NoMemory(), -1) : g == NULL ? 0 : TL_OPS[nd->op].backward(nd, g, gin);
        Py_XDECREF(g);
        for (int i = 0; gin != NULL && i < nd->n_in; i++) {
            tl_edge *e = &nd->in[i];
            if (st == 0 && gin[i] != NULL && (e->next != NULL || e->leaf != NULL)) {
                PyObject *r = tl_sum_to_shape(gin[i], e->ndim, e->shape);
                if (r == gin[i]) Py_CLEAR(gin[i]);    /* r is then the only ref: accumulate may keep it, no copy */
                if (r == NULL) st = -1;
                else if (accumulate(e->next ? &e->next->grad : &tl_tensor_CAST(e->leaf)->grad, r, e->next == NULL) < 0)
                    st = -1;
                Py_XDECREF(r);
            }
            Py_XDECREF(gin[i]);
            if (e->next != NULL && --e->next->deps == 0) ready[tail++] = e->next;
        }
        if (gin != gbuf) PyMem_Free(gin);
        if (!retain) {
            free_saved(nd);
            nd->released = 1;
        }
        if (st < 0) goto done;
    }
    rc = 0;
done:
    for (size_t i = 0; i < n; i++) Py_CLEAR(all[i]->grad);   /* an error leaves no half-summed grads */
    PyMem_Free(ready);
    PyMem_Free(all);
    return rc;
}

static PyObject *
tensor_backward(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"gradient", "retain_graph", NULL};
    tl_tensor *t = tl_tensor_CAST(self);
    PyObject *gradient = Py_None, *g = NULL;
    int retain = 0, rc;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|Op:backward", kw, &gradient, &retain)) return NULL;
    if (!t->requires_grad)
        return PyErr_Format(PyExc_RuntimeError, "backward: the tensor does not require grad and has no grad_fn");
    if (gradient == Py_None) {
        if (tl_tensor_numel(t) != 1) {
            char s[128];
            tl_shape_str(t->shape, t->ndim, s, sizeof s);
            return PyErr_Format(PyExc_RuntimeError, "backward: gradient can be implicit only for a one-element "
                                "output; this one has shape %s: pass gradient=", s);
        }
        g = (PyObject *)tl_tensor_empty(TL_F32, t->ndim, t->shape);
        if (g != NULL && tl_tensor_fill(tl_tensor_CAST(g), 1.0) < 0) Py_CLEAR(g);
    } else if (!tl_tensor_check(gradient) || tl_tensor_CAST(gradient)->dtype != TL_F32) {
        return PyErr_Format(PyExc_TypeError, "backward: gradient must be a float32 Tensor");
    } else {
        tl_tensor *gt = tl_tensor_CAST(gradient);
        if (gt->ndim != t->ndim || memcmp(gt->shape, t->shape, sizeof(Py_ssize_t) * (size_t)t->ndim) != 0) {
            char a[128], b[128];
            tl_shape_str(gt->shape, gt->ndim, a, sizeof a);
            tl_shape_str(t->shape, t->ndim, b, sizeof b);
            return PyErr_Format(PyExc_ValueError, "backward: gradient shape %s does not match the output's %s", a, b);
        }
        g = Py_NewRef(gradient);
    }
    if (g == NULL) return NULL;
    int was_off = grad_off;
    grad_off = 1;
    if (t->grad_fn == NULL) rc = accumulate(&t->grad, g, 1);       /* a leaf: d(t)/d(t) */
    else rc = run_backward(t->grad_fn, g, retain);
    grad_off = was_off;
    Py_DECREF(g);
    if (rc < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
tensor_detach(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    tl_tensor *t = tl_tensor_CAST(self);
    return (PyObject *)tl_tensor_from_storage(t->storage, t->dtype, t->ndim, t->shape, t->strides, t->offset);
}

static PyObject *
tensor_requires_grad_(PyObject *self, PyObject *args)
{
    int on = 1;
    if (!PyArg_ParseTuple(args, "|p:requires_grad_", &on)) return NULL;
    if (tl_tensor_set_requires_grad(tl_tensor_CAST(self), on) < 0) return NULL;
    return Py_NewRef(self);
}

static PyObject *
get_grad_fn(PyObject *self, void *Py_UNUSED(c))
{
    tl_tensor *t = tl_tensor_CAST(self);
    if (t->grad_fn == NULL) Py_RETURN_NONE;
    return PyUnicode_FromString(tl_node_name(t->grad_fn));
}

static PyObject *
fn_set_grad_enabled(PyObject *Py_UNUSED(m), PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    PyObject *prev = PyBool_FromLong(!grad_off);
    grad_off = !on;
    return prev;
}

static PyObject *
fn_is_grad_enabled(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(!grad_off);
}

static const PyMethodDef autograd_methods[] = {
    {"backward", (PyCFunction)(void (*)(void))tensor_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(gradient=None, retain_graph=False): accumulate gradients into the leaves' .grad."},
    {"detach", tensor_detach, METH_NOARGS, "A view sharing storage (and version counter) outside the graph."},
    {"requires_grad_", tensor_requires_grad_, METH_VARARGS, "Set requires_grad in place; returns self."},
    {NULL, NULL, 0, NULL},
};

static const PyMethodDef autograd_functions[] = {
    {"_set_grad_enabled", fn_set_grad_enabled, METH_O, "Set this thread's grad mode; returns the previous one."},
    {"is_grad_enabled", fn_is_grad_enabled, METH_NOARGS, "Whether ops record graphs in this thread."},
    {NULL, NULL, 0, NULL},
};

static const PyGetSetDef autograd_getset[] = {
    {"grad_fn", get_grad_fn, NULL, "Name of the backward node that produced this tensor, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

const tl_family tl_family_autograd = {autograd_functions, autograd_methods, NULL, autograd_getset, NULL};
