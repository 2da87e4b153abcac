/* autograd.c: graph nodes, the backward engine, gradient accumulation and grad mode.
 * Invariants: a node owns refs to its inputs' nodes (next[]) and to input leaves (leaf[]), never to its
 * outputs, so dropping the output frees the graph by refcounting alone (release is iterative: a 10,000-op
 * chain does not recurse). Saved tensors are storage refs plus the version they had; using one whose
 * storage has been written in place since raises, naming the op that saved it and the op that wrote it.
 * The engine runs Kahn's algorithm over the nodes reachable from the root (no recursion), sums gradients
 * of nodes used several times, reduces broadcast gradients back to input shapes, accumulates into the
 * .grad of leaves, and (without retain_graph) frees each node's saved tensors once its backward ran.
 * Grad mode is thread-local; the engine itself runs with it off (no higher-order graphs).
 * The engine knows no op: backward functions, node names and view flags come from the rows the op families
 * register (tl_autograd_register, checked at import), and the ops it runs itself (in-place add, sum over
 * axes, reshape; and the conversion of an input's gradient to the input's dtype, optional) from the
 * primitives they register. */
#include "autograd.h"
#include "capture.h"
#include "ops_common.h"
#include <stdarg.h>

static _Thread_local int grad_off;
static _Thread_local int autocast_on, autocast_dt;   /* tlgpu.autocast: per thread, like grad mode */
static unsigned long run_id;

#define TL_MAX_ROWS 128
static const tl_op_row *ROWS[TL_MAX_ROWS];    /* filled at import from the families' rows */
static size_t N_ROWS;
static const tl_family *const *FAMS;          /* the live families (the test hook checks their rows again) */
static size_t N_FAMS;
static tl_grad_prims PRIMS;                     /* likewise: the ops the engine runs itself */

static int
row_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyErr_FormatV(PyExc_ImportError, fmt, ap);
    va_end(ap);
    return -1;
}

/* The families' rows into table (*n of them) and their primitives into prims: every row named, with a
 * backward, listed once by one family, no two rows of one name; every primitive given exactly once.
 * -1 with an ImportError naming the first row or primitive at fault. */
static int
check_rows(const tl_family *const *fams, size_t n, const tl_op_row **table, size_t *n_rows, tl_grad_prims *prims)
{
    size_t owner[TL_MAX_ROWS], k = 0;
    memset(prims, 0, sizeof *prims);
    for (size_t f = 0; f < n; f++) {
        const tl_grad_prims *p = fams[f]->grad_prims;
        for (const tl_op_row *const *rp = fams[f]->rows; rp != NULL && *rp != NULL; rp++) {
            const tl_op_row *r = *rp;
            if (r->name == NULL || r->name[0] == '\0')
                return row_error("autograd row %zu of op family %zu has no name", (size_t)(rp - fams[f]->rows), f);
            if (r->backward == NULL) return row_error("autograd row %s has no backward", r->name);
            for (size_t i = 0; i < k; i++) {
                if (table[i] == r && owner[i] == f)
                    return row_error("autograd row %s is listed twice by one op family", r->name);
                if (table[i] == r)
                    return row_error("autograd row %s is listed by two op families", r->name);
                if (strcmp(table[i]->name, r->name) == 0)
                    return row_error("two autograd rows are named %s", r->name);
            }
            if (k == TL_MAX_ROWS) return row_error("more than %d autograd rows (TL_MAX_ROWS)", TL_MAX_ROWS);
            owner[k] = f;
            table[k++] = r;
        }
#define TAKE(m) if (p != NULL && p->m != NULL) {                                                                \
            if (prims->m != NULL)                                                                               \
                return row_error("two op families register the autograd engine's %s primitive", #m);            \
            prims->m = p->m;                                                                                    \
        }
        TAKE(add_) TAKE(sum) TAKE(reshape) TAKE(convert)
#undef TAKE
    }
    if (prims->add_ == NULL || prims->sum == NULL || prims->reshape == NULL)
        return row_error("no op family registers the autograd engine's %s primitive",
                         prims->add_ == NULL ? "add_" : prims->sum == NULL ? "sum" : "reshape");
    *n_rows = k;
    return 0;
}

int
tl_autograd_register(const tl_family *const *families, size_t n)
{
    static const tl_node_ops node_ops = {tl_node_release, tl_node_name};
    if (check_rows(families, n, ROWS, &N_ROWS, &PRIMS) < 0) return -1;
    FAMS = families;
    N_FAMS = n;
    tl_tensor_set_node_ops(&node_ops);
    return 0;
}

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
tl_autocast_dtype(void)
{
    return autocast_on ? autocast_dt : -1;
}

int
tl_autocast_set(int dtype)
{
    int prev = tl_autocast_dtype();
    autocast_on = dtype >= 0;
    autocast_dt = autocast_on ? dtype : 0;
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
tl_node_new(const tl_op_row *row, PyObject *const *ins, int n)
{
#ifdef TL_TEST_HOOKS
    size_t k = 0;                              /* a row no family listed escaped the import check: refuse it */
    while (k < N_ROWS && ROWS[k] != row) k++;
    if (k == N_ROWS)
        return PyErr_Format(PyExc_SystemError, "autograd row %s is listed by no op family's tl_family.rows",
                            row != NULL && row->name != NULL ? row->name : "(null)"), NULL;
#endif
    tl_node *nd = PyMem_Calloc(1, sizeof *nd + (size_t)n * sizeof(tl_edge));
    if (nd == NULL) return (tl_node *)PyErr_NoMemory();
    atomic_init(&nd->refs, 1);
    nd->row = row;
    nd->n_in = n;
    for (int i = 0; i < n; i++) {
        if (ins[i] == NULL || !tl_tensor_check(ins[i])) continue;
        tl_tensor *t = tl_tensor_CAST(ins[i]);
        tl_edge *e = &nd->in[i];
        e->ndim = t->ndim;
        e->dtype = t->dtype;
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
tl_record1(PyObject *out, const tl_op_row *row, PyObject *in, const int *iarg, int n_iarg, PyObject *extra)
{
    if (out == NULL || !tl_autograd_wanted(&in, 1)) return out;
    tl_node *nd = tl_node_new(row, &in, 1);
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
    const tl_op_row *r = nd->row;
    return r->node_name != NULL ? r->node_name(nd) : r->name;
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
    summed = axes != 0 ? PRIMS.sum(t, axes, 1) : Py_NewRef(g);
    if (summed == NULL) return NULL;
    res = PRIMS.reshape(tl_tensor_CAST(summed), ndim, shape);
    Py_DECREF(summed);
    return res;
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
        (t->grad_fn == NULL || (t->grad_fn->row->flags & TL_ROW_VIEW))) {
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
    tl_capture_note_write(t->storage, op);            /* a tlgpu.jit replay bumps it again (a no-op otherwise) */
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
        tl_tensor *copy = tl_tensor_empty(t->dtype, t->ndim, t->shape);
        if (copy != NULL && tl_copy_into(copy, t) < 0) Py_CLEAR(copy);
        *acc = (PyObject *)copy;
        return copy == NULL ? -1 : 0;
    }
    return PRIMS.add_(tl_tensor_CAST(*acc), tl_tensor_CAST(g));
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
        int st = gin == NULL ? (PyErr_NoMemory(), -1) : g == NULL ? 0 : nd->row->backward(nd, g, gin);
        Py_XDECREF(g);
        for (int i = 0; gin != NULL && i < nd->n_in; i++) {
            tl_edge *e = &nd->in[i];
            if (st == 0 && gin[i] != NULL && (e->next != NULL || e->leaf != NULL)) {
                PyObject *r = tl_sum_to_shape(gin[i], e->ndim, e->shape);
                if (r != NULL && tl_tensor_CAST(r)->dtype != e->dtype && PRIMS.convert != NULL)
                    Py_SETREF(r, PRIMS.convert(tl_tensor_CAST(r), e->dtype));    /* float16 input, float32 grad */
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
        g = (PyObject *)tl_tensor_empty(t->dtype, t->ndim, t->shape);
        if (g != NULL && tl_tensor_fill(tl_tensor_CAST(g), 1.0) < 0) Py_CLEAR(g);
    } else if (!tl_tensor_check(gradient) || tl_tensor_CAST(gradient)->dtype != t->dtype) {
        return PyErr_Format(PyExc_TypeError, "backward: gradient must be a %s Tensor (the output's dtype)",
                            tl_dtype_name(t->dtype));
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
    int was_off = grad_off, was_cast = autocast_on;
    grad_off = 1;
    autocast_on = 0;                                  /* backward ops run in their forward's dtypes (torch) */
    if (t->grad_fn == NULL) rc = accumulate(&t->grad, g, 1);       /* a leaf: d(t)/d(t) */
    else rc = run_backward(t->grad_fn, g, retain);
    grad_off = was_off;
    autocast_on = was_cast;
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

/* _set_autocast(dtype or None): this thread's autocast dtype (float16 or bfloat16; None: off); returns the
 * previous one. tlgpu/amp.py's autocast is the public face. */
static PyObject *
fn_set_autocast(PyObject *Py_UNUSED(m), PyObject *arg)
{
    int dt = tl_parse_dtype_all(arg, -2);
    if (dt == -1) return NULL;
    if (dt != -2 && !TL_IS_HALF(dt))
        return PyErr_Format(PyExc_ValueError, "autocast: dtype must be float16 or bfloat16, got %s", tl_dtype_name(dt));
    PyObject *prev = autocast_on ? tl_dtype_descr(autocast_dt) : Py_NewRef(Py_None);
    if (prev != NULL) tl_autocast_set(dt == -2 ? -1 : dt);
    return prev;
}

static PyObject *
fn_is_grad_enabled(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    return PyBool_FromLong(!grad_off);
}

#ifdef TL_TEST_HOOKS
static int
test_backward(tl_node *Py_UNUSED(nd), PyObject *Py_UNUSED(g), PyObject **Py_UNUSED(gin))
{
    return 0;
}

static const tl_op_row unlisted_row = {"UnlistedBackward", test_backward, 0, NULL};

/* _autograd_record_unlisted(x): records a node whose row no family listed (x requires grad); must raise. */
static PyObject *
fn_autograd_record_unlisted(PyObject *Py_UNUSED(m), PyObject *x)
{
    if (!tl_tensor_check(x)) return PyErr_Format(PyExc_TypeError, "expected a Tensor");
    return tl_record1(Py_NewRef(x), &unlisted_row, x, NULL, 0, NULL);
}

/* One made-up family's rows from a sequence of items: "Name" a new row with a backward, ("Name", False) one
 * without, None one without a name, an int k the k-th row made so far (the same object again). */
static int
made_up_rows(PyObject *items, tl_op_row *rows, size_t *n_made, const tl_op_row **out)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(items);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *it = PySequence_Fast_GET_ITEM(items, i), *name = it;
        int has_bw = 1;
        if (PyLong_Check(it)) {
            long k = PyLong_AsLong(it);
            if (k < 0 || (size_t)k >= *n_made) { PyErr_SetString(PyExc_ValueError, "rows: no such row"); return -1; }
            out[i] = &rows[k];
            continue;
        }
        if (PyTuple_Check(it) && !PyArg_ParseTuple(it, "Op", &name, &has_bw)) return -1;
        const char *nm = name == Py_None ? NULL : PyUnicode_AsUTF8(name);
        if (nm == NULL && name != Py_None) return -1;
        rows[*n_made] = (tl_op_row){nm, has_bw ? test_backward : NULL, 0, NULL};
        out[i] = &rows[(*n_made)++];
    }
    out[n] = NULL;
    return 0;
}

/* _autograd_check_rows(families=None, prims="add_ sum reshape"): runs the import check on a made-up
 * registry, not the live one: one family per sequence of items in families (made_up_rows; None: the live
 * families' rows), then one family per word of prims giving that primitive. Returns the number of rows, or
 * raises the ImportError an import would. */
static PyObject *
fn_autograd_check_rows(PyObject *Py_UNUSED(m), PyObject *args)
{
    PyObject *spec = Py_None, *fast = NULL, *res = NULL, *items[64] = {NULL};
    const char *words = "add_ sum reshape";
    tl_op_row *rows = NULL;
    const tl_op_row **ptrs = NULL, *table[TL_MAX_ROWS];
    tl_grad_prims gp[8] = {{0}}, out;
    tl_family fam[72] = {{0}};
    const tl_family *fp[72];
    size_t nf = 0, total = 0, made = 0, n_rows = 0, n_gp = 0;
    if (!PyArg_ParseTuple(args, "|Os:_autograd_check_rows", &spec, &words)) return NULL;
    if (spec == Py_None) {
        for (; nf < N_FAMS && nf < 64; nf++) fam[nf].rows = FAMS[nf]->rows;
    } else {
        if ((fast = PySequence_Fast(spec, "families: a sequence of sequences")) == NULL) return NULL;
        if ((nf = (size_t)PySequence_Fast_GET_SIZE(fast)) > 64) {
            PyErr_SetString(PyExc_ValueError, "families: at most 64");
            goto done;
        }
        for (size_t f = 0; f < nf; f++) {
            items[f] = PySequence_Fast(PySequence_Fast_GET_ITEM(fast, f), "rows: a sequence");
            if (items[f] == NULL) goto done;
            total += (size_t)PySequence_Fast_GET_SIZE(items[f]) + 1;
        }
        rows = PyMem_Calloc(total + 1, sizeof *rows);
        ptrs = PyMem_Calloc(total + 1, sizeof *ptrs);
        if (rows == NULL || ptrs == NULL) { PyErr_NoMemory(); goto done; }
        for (size_t f = 0, at = 0; f < nf; f++) {
            if (made_up_rows(items[f], rows, &made, ptrs + at) < 0) goto done;
            fam[f].rows = ptrs + at;
            at += (size_t)PySequence_Fast_GET_SIZE(items[f]) + 1;
        }
    }
    for (const char *w = words, *end; *w != '\0'; w = end + (*end == ' ')) {
        size_t len = strcspn(w, " ");
        end = w + len;
        if (len == 0) continue;
        if (n_gp == 8 || nf == 72) { PyErr_SetString(PyExc_ValueError, "prims: at most 8 words"); goto done; }
        size_t g = n_gp++;
        if (len == 4 && memcmp(w, "add_", 4) == 0) gp[g].add_ = PRIMS.add_;
        else if (len == 3 && memcmp(w, "sum", 3) == 0) gp[g].sum = PRIMS.sum;
        else if (len == 7 && memcmp(w, "reshape", 7) == 0) gp[g].reshape = PRIMS.reshape;
        else { PyErr_Format(PyExc_ValueError, "prims: unknown word %.*s", (int)len, w); goto done; }
        fam[nf++].grad_prims = &gp[g];
    }
    for (size_t f = 0; f < nf; f++) fp[f] = &fam[f];
    if (check_rows(fp, nf, table, &n_rows, &out) == 0) res = PyLong_FromSize_t(n_rows);
done:
    for (size_t f = 0; f < 64; f++) Py_XDECREF(items[f]);
    PyMem_Free(rows);
    PyMem_Free(ptrs);
    Py_XDECREF(fast);
    return res;
}
#endif

static const PyMethodDef autograd_methods[] = {
    {"backward", (PyCFunction)(void (*)(void))tensor_backward, METH_VARARGS | METH_KEYWORDS,
     "backward(gradient=None, retain_graph=False): accumulate gradients into the leaves' .grad."},
    {"detach", tensor_detach, METH_NOARGS, "A view sharing storage (and version counter) outside the graph."},
    {"requires_grad_", tensor_requires_grad_, METH_VARARGS, "Set requires_grad in place; returns self."},
    {NULL, NULL, 0, NULL},
};

static const PyMethodDef autograd_functions[] = {
    {"_set_grad_enabled", fn_set_grad_enabled, METH_O, "Set this thread's grad mode; returns the previous one."},
    {"_set_autocast", fn_set_autocast, METH_O, "Set this thread's autocast dtype (None: off); returns the previous."},
    {"is_grad_enabled", fn_is_grad_enabled, METH_NOARGS, "Whether ops record graphs in this thread."},
#ifdef TL_TEST_HOOKS
    {"_autograd_check_rows", fn_autograd_check_rows, METH_VARARGS, "Test hook: the import check on made-up rows."},
    {"_autograd_record_unlisted", fn_autograd_record_unlisted, METH_O, "Test hook: record a row no family lists."},
#endif
    {NULL, NULL, 0, NULL},
};

static const PyGetSetDef autograd_getset[] = {
    {"grad_fn", get_grad_fn, NULL, "Name of the backward node that produced this tensor, or None.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

const tl_family tl_family_autograd = {autograd_functions, autograd_methods, NULL, autograd_getset, NULL};
