/* pub_py.c: the Python face of the weight publisher: _C.Publisher (the Subscriber is in pub_sub_py.c; both
 * heap types and PublisherClosed are made at import by this family's init hook, into the module state), and
 * the benchmark helper _C._bench_pinned_read (test-hooks builds only). Argument checks and conversions live
 * here; the work is in the core (pub_core.c, pub_thread.c, the sinks), called with the GIL released around
 * everything that blocks.
 * Invariants: the core's mutex is taken from a GIL holder only bz2-style (try, else release the GIL and
 * block); arrays handed to Python own their memory (copied out of a pinned slot while it is pinned), so
 * they are never torn and never overwritten later; the core is freed only once no thread of ours is inside
 * a GIL-released call on it (`active`), so close() from one thread never frees it under another's wait(). */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "clock.h"
#include "pub_sub_py.h"
#include "pub_args_py.h"
#include "pub_bench.h"
#include "publisher.h"
#include "pub_sink_py.h"
#include "shm_channel.h"
#include "tensor.h"
#include <numpy/arrayobject.h>
#include <structmember.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    tl_pub *core;
    PyObject *source;                /* the dict, or the object with named_parameters() */
    PyObject *tensors, *names;       /* tuples, in publish order */
    int n, is_dict, closed, closing, active;   /* active: threads inside a GIL-released call on core */
    int dtype;                       /* the published dtype (TL_SHM_* = tlgpu's codes) */
    tl_pub_sink sinks[TL_PUB_MAX_SINKS];    /* as handed to the core (which owns them): Python sinks' errors */
    int nsinks;
    tl_pub_param *rec;               /* identity recorded at construction (storage, offset, shape) */
    double block_sum, block_max;
    long block_n;
    tl_pub_stats final;              /* stats kept past close() */
} pub_obj;

/* bz2's pattern: take a C lock while holding the GIL without ever blocking other Python threads on it. */
static void
lock_core(pub_obj *self)
{
    tl_pub *core = self->core;
    if (tl_pub_trylock(core)) return;
    self->active++;
    Py_BEGIN_ALLOW_THREADS
    tl_pub_lock(core);
    Py_END_ALLOW_THREADS
    self->active--;
}

/* ---- parameters ---- */

/* The parameters still are the tensors (storage, offset, shape) the publisher was built for. */
static int
check_params(pub_obj *self)
{
    if (self->is_dict && PyDict_GET_SIZE(self->source) != self->n) goto changed;
    for (int i = 0; i < self->n; i++) {
        PyObject *name = PyTuple_GET_ITEM(self->names, i), *v;
        v = self->is_dict ? PyDict_GetItemWithError(self->source, name) : PyTuple_GET_ITEM(self->tensors, i);
        if (v == NULL && PyErr_Occurred()) return -1;
        if (v == NULL || !tl_pub_same_param(&self->rec[i], v)) {
            PyErr_Format(PyExc_ValueError, "publish: parameter '%U' changed shape or storage since the publisher "
                         "was created (or is gone); create a new WeightPublisher", name);
            return -1;
        }
    }
    return 0;
changed:
    PyErr_Format(PyExc_ValueError, "publish: the params dict now has %zd entries, the publisher was created "
                 "for %d; create a new WeightPublisher", PyDict_GET_SIZE(self->source), self->n);
    return -1;
}

static PyObject *
pub_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"params", "threshold", "incremental", "force_every", "name", "sinks", "dtype", NULL};
    PyObject *params, *force = Py_None, *name = Py_None, *sinks = Py_None, *dtype = Py_None, *pairs = NULL;
    const char *shm_name = NULL;
    double threshold = 0.0;
    int incremental = 1;
    tl_pub_config cfg = {0};
    tl_err err = {0};
    tl_status st;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|dpOOOO:WeightPublisher", kw, &params, &threshold, &incremental,
                                     &force, &name, &sinks, &dtype))
        return NULL;
    if (!(threshold >= 0.0)) {
        char num[64];                                 /* PyErr_Format has no %g */
        snprintf(num, sizeof num, "%g", threshold);
        return PyErr_Format(PyExc_ValueError, "WeightPublisher: threshold must be >= 0, got %s", num);
    }
    if (force != Py_None) {
        cfg.force_every = PyLong_AsLong(force);
        if (cfg.force_every == -1 && PyErr_Occurred()) return NULL;
        if (cfg.force_every < 1)
            return PyErr_Format(PyExc_ValueError, "WeightPublisher: force_every must be >= 1 or None, got %ld",
                                cfg.force_every);
    }
    if (name != Py_None) {
        char path[256];
        if ((shm_name = tl_pub_utf8_name(name, "WeightPublisher")) == NULL) return NULL;
        if (tl_shm_check_name(shm_name, path, sizeof path, &err) != TL_OK) return tl_raise(&err), NULL;
    }
    cfg.threshold = threshold;
    cfg.incremental = incremental;
    pub_obj *self = (pub_obj *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->closed = 1;                                      /* until the core exists */
    if ((pairs = tl_pub_param_pairs(params, &self->is_dict)) == NULL) goto fail;
    self->n = (int)PyList_GET_SIZE(pairs);
    if (self->n == 0) {
        PyErr_SetString(PyExc_ValueError, "WeightPublisher: no parameters to publish");
        goto fail;
    }
    self->source = Py_NewRef(params);
    if ((self->tensors = PyTuple_New(self->n)) == NULL || (self->names = PyTuple_New(self->n)) == NULL ||
        (self->rec = PyMem_Calloc((size_t)self->n, sizeof *self->rec)) == NULL)
        goto fail;
    for (int i = 0; i < self->n; i++) {
        PyObject *pair = PyList_GET_ITEM(pairs, i);
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "WeightPublisher: named_parameters() must yield (name, tensor) pairs");
            goto fail;
        }
        PyObject *k = PyTuple_GET_ITEM(pair, 0), *v = PyTuple_GET_ITEM(pair, 1);
        if (tl_pub_record_param(k, v, &self->rec[i]) < 0) goto fail;
        for (int j = 0; j < i; j++)                        /* the names key the delivered dicts */
            if (strcmp(self->rec[j].name, self->rec[i].name) == 0) {
                PyErr_Format(PyExc_ValueError, "WeightPublisher: two parameters are named %R", k);
                goto fail;
            }
        PyTuple_SET_ITEM(self->names, i, Py_NewRef(k));
        PyTuple_SET_ITEM(self->tensors, i, Py_NewRef(v));
    }
    if ((self->dtype = cfg.dtype = tl_pub_parse_dtype(dtype, self->rec, self->n)) < 0) goto fail;
    if ((self->nsinks = tl_pub_make_sinks(shm_name, sinks, self->names, self->sinks, TL_PUB_MAX_SINKS)) < 0) {
        self->nsinks = 0;
        goto fail;
    }
    Py_BEGIN_ALLOW_THREADS                                 /* kernel build, allocations, pinning; owns the sinks */
    st = tl_pub_create(self->rec, self->n, &cfg, self->sinks, self->nsinks, &self->core, &err);
    Py_END_ALLOW_THREADS
    if (st != TL_OK) {
        self->core = NULL;
        tl_raise(&err);
        goto fail;
    }
    self->closed = 0;
    Py_DECREF(pairs);
    return (PyObject *)self;
fail:
    Py_XDECREF(pairs);
    Py_DECREF(self);
    return NULL;
}

static int
check_open(pub_obj *self, const char *what)
{
    if (!self->closed && !self->closing) return 0;
    PyErr_Format(tl_pub_closed_error(), "%s: the publisher is closed", what);
    return -1;
}

/* A core error as an exception: the very exception a Python sink's deliver() raised, if that was it (the
 * sinks must still be open), else tl_raise's mapping. */
static int
raise_err(pub_obj *self, tl_err *err)
{
    for (int k = 0; err->code == TL_E_ARG && k < self->nsinks; k++)
        if (tl_pub_sink_py_take_error(&self->sinks[k])) {
            tl_err_clear(err);
            return -1;
        }
    return tl_raise(err);
}

/* The thread's stored error, raised once at the learner's next call. */
static int
raise_thread_error(pub_obj *self)
{
    tl_err err = {0};
    lock_core(self);
    tl_status st = tl_pub_take_error_locked(self->core, &err);
    tl_pub_unlock(self->core);
    return st == TL_OK ? 0 : raise_err(self, &err);
}

static PyObject *
pub_publish(PyObject *op, PyObject *arg)
{
    pub_obj *self = (pub_obj *)op;
    double t0 = tl_now_s();
    tl_err err = {0};
    if (check_open(self, "publish") < 0) return NULL;
    long long step = PyLong_AsLongLong(arg);                /* any signed 64-bit step, delivered as given */
    if (step == -1 && PyErr_Occurred()) return NULL;
    if (check_params(self) < 0) return NULL;
    lock_core(self);
    tl_status st = tl_pub_publish_locked(self->core, step, t0, &err);
    tl_pub_unlock(self->core);
    if (st != TL_OK) return raise_err(self, &err), NULL;
    double dt = tl_now_s() - t0;
    self->block_sum += dt;
    self->block_n++;
    if (dt > self->block_max) self->block_max = dt;
    Py_RETURN_NONE;
}

/* (version, step, {name: array}) copied out of the visible pinned slot, or None. */
static PyObject *
copy_out(pub_obj *self, uint64_t newer_than)
{
    const void *flat = NULL;
    uint64_t version = 0;
    int64_t step = 0;
    int slot, n = self->n;
    PyObject *dict = NULL, *res = NULL;
    self->active++;                                        /* until the unpin below */
    Py_BEGIN_ALLOW_THREADS
    slot = tl_pub_pin(self->core, newer_than, &flat, &version, &step);
    Py_END_ALLOW_THREADS
    if (slot < 0) {
        self->active--;
        Py_RETURN_NONE;
    }
    void **dst = PyMem_Calloc((size_t)n, sizeof *dst);
    const size_t z = tl_shm_dtype_size(self->dtype);
    if (dst == NULL || (dict = PyDict_New()) == NULL) { PyErr_NoMemory(); goto done; }
    for (int i = 0; i < n; i++) {
        PyObject *a = tl_pub_new_array(self->dtype, self->rec[i].ndim, self->rec[i].shape);
        if (a == NULL || PyDict_SetItem(dict, PyTuple_GET_ITEM(self->names, i), a) < 0) { Py_XDECREF(a); goto done; }
        dst[i] = PyArray_DATA((PyArrayObject *)a);
        Py_DECREF(a);                                      /* the dict holds it */
    }
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < n; i++)
        memcpy(dst[i], (const char *)flat + tl_pub_flat_offset(self->core, i) * z, self->rec[i].numel * z);
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("KLO", (unsigned long long)version, (long long)step, dict);
done:
    Py_BEGIN_ALLOW_THREADS
    tl_pub_unpin(self->core, slot);
    Py_END_ALLOW_THREADS
    self->active--;
    PyMem_Free(dst);
    Py_XDECREF(dict);
    return res;
}

static PyObject *
pub_latest(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    pub_obj *self = (pub_obj *)op;
    if (check_open(self, "latest") < 0 || raise_thread_error(self) < 0) return NULL;
    return copy_out(self, 0);
}

/* Waits in slices so Ctrl-C and a close() from another thread are seen: 1 done, 0 timed out, -1 the thread
 * stopped, -2 an exception is set (a signal, or PublisherClosed: closed meanwhile). */
static int
wait_sliced(pub_obj *self, int drain, uint64_t newer_than, double timeout)
{
    double end = tl_now_s() + timeout;
    for (;;) {
        if (check_open(self, drain ? "drain" : "wait") < 0) return -2;
        double left = timeout < 0 ? 0.2 : end - tl_now_s(), slice = left > 0.2 ? 0.2 : left < 0 ? 0 : left;
        int r;
        self->active++;
        Py_BEGIN_ALLOW_THREADS
        r = drain ? tl_pub_drain(self->core, slice) : tl_pub_wait(self->core, newer_than, slice);
        Py_END_ALLOW_THREADS
        self->active--;
        if (r < 0 && check_open(self, drain ? "drain" : "wait") < 0) return -2;
        if (r != 0 || (timeout >= 0 && tl_now_s() >= end)) return r;
        if (PyErr_CheckSignals() < 0) return -2;
    }
}

static PyObject *
pub_wait(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"newer_than", "timeout", NULL};
    pub_obj *self = (pub_obj *)op;
    unsigned long long newer = 0;
    PyObject *tobj = Py_None;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "K|O:wait", kw, &newer, &tobj) ||
        tl_pub_parse_timeout(tobj, &timeout) < 0)
        return NULL;
    if (check_open(self, "wait") < 0 || raise_thread_error(self) < 0) return NULL;
    int r = wait_sliced(self, 0, newer, timeout);
    if (r == -2 || raise_thread_error(self) < 0) return NULL;
    if (r < 0) return PyErr_Format(PyExc_RuntimeError, "wait: the publisher thread stopped after an error");
    if (r == 0) Py_RETURN_NONE;
    return copy_out(self, newer);
}

static PyObject *
pub_drain(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"timeout", NULL};
    pub_obj *self = (pub_obj *)op;
    PyObject *tobj = Py_None;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:drain", kw, &tobj) ||
        tl_pub_parse_timeout(tobj, &timeout) < 0)
        return NULL;
    if (check_open(self, "drain") < 0 || raise_thread_error(self) < 0) return NULL;
    int r = wait_sliced(self, 1, 0, timeout);
    if (r == -2 || raise_thread_error(self) < 0) return NULL;
    return PyBool_FromLong(r > 0);
}

static void
keep_final_stats(pub_obj *self)
{
    tl_pub_get_stats(self->core, &self->final);
}

/* Joins the thread and frees everything: 0, or -1 with the thread's unreported error set as the exception.
 * Other threads' calls in progress are woken by the close (waits return, pins end) and finish first. */
static int
shutdown_core(pub_obj *self, int cancel)
{
    tl_err err = {0};
    tl_status st;
    tl_pub *core = self->core;
    PyObject *et = NULL, *ev = NULL, *tb = NULL;
    self->closing = 1;
    Py_BEGIN_ALLOW_THREADS
    st = tl_pub_close(core, cancel, &err);
    Py_END_ALLOW_THREADS
    while (self->active > 0) {
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
    }
    if (st != TL_OK) {
        raise_err(self, &err);                             /* while the sinks are open */
        PyErr_Fetch(&et, &ev, &tb);                        /* closing a Python sink may run Python code */
    }
    keep_final_stats(self);
    self->core = NULL;
    self->closed = 1;
    self->nsinks = 0;
    Py_BEGIN_ALLOW_THREADS
    tl_pub_free(core);
    Py_END_ALLOW_THREADS
    if (et == NULL) return 0;
    PyErr_Restore(et, ev, tb);
    return -1;
}

static PyObject *
pub_close(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"cancel", NULL};
    pub_obj *self = (pub_obj *)op;
    int cancel = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:close", kw, &cancel)) return NULL;
    if (self->core == NULL || self->closing) Py_RETURN_NONE;   /* closed, or being closed by another thread */
    if (shutdown_core(self, cancel) < 0) return NULL;
    Py_RETURN_NONE;
}

static PyObject *
pub_enter(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    if (check_open((pub_obj *)op, "__enter__") < 0) return NULL;
    return Py_NewRef(op);
}

static PyObject *
pub_exit(PyObject *op, PyObject *args)
{
    PyObject *exc = PyTuple_Size(args) > 0 ? PyTuple_GetItem(args, 0) : Py_None;
    pub_obj *self = (pub_obj *)op;
    if (self->core == NULL || self->closing) Py_RETURN_FALSE;
    /* leaving on an exception: cancel the pending snapshot rather than wait for it */
    if (shutdown_core(self, exc != NULL && exc != Py_None) < 0) return NULL;
    Py_RETURN_FALSE;
}

static PyObject *
pub_stats(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    pub_obj *self = (pub_obj *)op;
    tl_pub_stats s;
    if (self->core != NULL) tl_pub_get_stats(self->core, &s);
    else s = self->final;
    PyObject *acked = PyList_New(s.n_subs), *subs = PyList_New(s.n_subs);
    if (acked == NULL || subs == NULL) goto fail;
    for (int i = 0; i < s.n_subs; i++) {
        const tl_pub_sub_stat *q = &s.subs[i];
        PyObject *v = PyLong_FromUnsignedLongLong(q->acked);
        PyObject *d = Py_BuildValue("{s:s,s:K,s:K}", "sink", q->sink, "pid", (unsigned long long)q->pid, "acked",
                                    (unsigned long long)q->acked);
        if (v == NULL || d == NULL) { Py_XDECREF(v); Py_XDECREF(d); goto fail; }
        PyList_SET_ITEM(acked, i, v);
        PyList_SET_ITEM(subs, i, d);
    }
    double nd = s.delivered > 0 ? (double)s.delivered : 1.0, nb = self->block_n > 0 ? (double)self->block_n : 1.0;
    return Py_BuildValue(
        "{s:l,s:l,s:l,s:l,s:K,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:K,s:L,s:N,s:N,s:O,s:i,s:O}", "published", s.published,
        "delivered", s.delivered, "skipped", s.skipped, "dropped", s.dropped, "bytes_moved",
        (unsigned long long)s.bytes_moved, "blocking_mean_s", self->block_sum / nb, "blocking_max_s",
        self->block_max, "transfer_mean_s", s.xfer_sum / nd, "snapshot_mean_s", s.snap_sum / nd, "compare_mean_s",
        s.cmp_sum / nd, "latency_mean_s", s.lat_sum / nd, "latency_max_s", s.lat_max, "version",
        (unsigned long long)s.version, "step", (long long)s.step, "acked", acked, "subscribers", subs, "fast_path",
        s.fast_path ? Py_True : Py_False, "snapshot_enqueues", s.n_launches, "shm_direct",
        s.shm_direct ? Py_True : Py_False);
fail:
    Py_XDECREF(acked);
    Py_XDECREF(subs);
    return NULL;
}

#ifdef TL_TEST_HOOKS
static PyObject *
pub_inject_error(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    pub_obj *self = (pub_obj *)op;
    if (check_open(self, "_inject_error") < 0) return NULL;
    tl_pub_inject_error(self->core);
    Py_RETURN_NONE;
}
#endif

static PyObject *
pub_get_names(PyObject *op, void *Py_UNUSED(c))
{
    return Py_NewRef(((pub_obj *)op)->names);
}

static PyObject *
pub_get_dtype(PyObject *op, void *Py_UNUSED(c))
{
    return tl_dtype_descr(((pub_obj *)op)->dtype);
}

static PyObject *
pub_get_closed(PyObject *op, void *Py_UNUSED(c))
{
    return PyBool_FromLong(((pub_obj *)op)->closed);
}

static int
pub_traverse(PyObject *op, visitproc visit, void *arg)
{
    pub_obj *self = (pub_obj *)op;
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(self->source);
    Py_VISIT(self->tensors);
    return 0;
}

static int
pub_clear(PyObject *op)
{
    pub_obj *self = (pub_obj *)op;
    Py_CLEAR(self->source);                               /* the core retains the storages themselves */
    Py_CLEAR(self->tensors);
    return 0;
}

static void
pub_dealloc(PyObject *op)
{
    pub_obj *self = (pub_obj *)op;
    PyTypeObject *tp = Py_TYPE(op);
    PyObject *et, *ev, *tb;
    PyObject_GC_UnTrack(op);
    PyErr_Fetch(&et, &ev, &tb);                                  /* a dealloc may run while one is being raised */
    if (self->core != NULL && shutdown_core(self, 1) < 0)        /* forgot close(): cancel, clean up */
        PyErr_WriteUnraisable(op);
    PyErr_Restore(et, ev, tb);
    pub_clear(op);
    Py_CLEAR(self->names);
    PyMem_Free(self->rec);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyMethodDef pub_methods[] = {
    {"publish", pub_publish, METH_O, "publish(step): snapshot the parameters and hand them to the thread."},
    {"latest", pub_latest, METH_NOARGS, "latest() -> (version, step, {name: ndarray}) or None."},
    {"wait", (PyCFunction)(void (*)(void))pub_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(newer_than, timeout=None) -> the first version newer than newer_than, or None on timeout."},
    {"drain", (PyCFunction)(void (*)(void))pub_drain, METH_VARARGS | METH_KEYWORDS,
     "drain(timeout=None) -> True once every publish so far was delivered, skipped or dropped."},
    {"close", (PyCFunction)(void (*)(void))pub_close, METH_VARARGS | METH_KEYWORDS,
     "close(cancel=False): finish (or cancel) the pending snapshot, join the thread, free everything."},
    {"stats", pub_stats, METH_NOARGS, "stats() -> dict of counters and timings."},
#ifdef TL_TEST_HOOKS
    {"_inject_error", pub_inject_error, METH_NOARGS, "Test hook: the thread fails at its next wake-up."},
#endif
    {"__enter__", pub_enter, METH_NOARGS, NULL},
    {"__exit__", pub_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef pub_getset[] = {
    {"names", pub_get_names, NULL, "parameter names, in publish order", NULL},
    {"closed", pub_get_closed, NULL, "True after close()", NULL},
    {"dtype", pub_get_dtype, NULL, "the published numpy dtype: float32, float16 or bfloat16 (ml_dtypes)", NULL},
    {NULL},
};

static PyType_Slot pub_slots[] = {
    {Py_tp_new, pub_new},           {Py_tp_dealloc, pub_dealloc}, {Py_tp_traverse, pub_traverse},
    {Py_tp_clear, pub_clear},       {Py_tp_methods, pub_methods}, {Py_tp_getset, pub_getset},
    {Py_tp_doc, "Publisher(params, threshold=0.0, incremental=True, force_every=None, name=None, sinks=None, "
                "dtype=None): the C core of tlgpu.publish.WeightPublisher."},
    {0, NULL},
};

static PyType_Spec pub_spec = {"tlgpu._C.Publisher", sizeof(pub_obj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, pub_slots};

/* ---- module functions ---- */

#ifdef TL_TEST_HOOKS                                   /* benchmark-only: test-hooks builds */
static PyObject *
fn_bench_pinned_read(PyObject *Py_UNUSED(m), PyObject *args)
{
    Py_ssize_t nbytes;
    int iters;
    double secs = 0;
    tl_err err = {0};
    tl_status st;
    int mode = 0;
    if (!PyArg_ParseTuple(args, "ni|i:_bench_pinned_read", &nbytes, &iters, &mode)) return NULL;
    if (mode < 0 || mode > 3) return PyErr_Format(PyExc_ValueError, "_bench_pinned_read: mode is 0-3");
    if (nbytes <= 0 || iters <= 0) return PyErr_Format(PyExc_ValueError, "_bench_pinned_read: nbytes, iters > 0");
    Py_BEGIN_ALLOW_THREADS
    st = tl_pub_bench_pinned_read((size_t)nbytes, iters, mode, &secs, &err);
    Py_END_ALLOW_THREADS
    if (st != TL_OK) return tl_raise(&err), NULL;
    return PyFloat_FromDouble(secs);
}
#endif

static const PyMethodDef functions[] = {
#ifdef TL_TEST_HOOKS
    {"_bench_pinned_read", fn_bench_pinned_read, METH_VARARGS,
     "_bench_pinned_read(nbytes, iters) -> seconds per clEnqueueReadBuffer into pinned memory mapped once."},
#endif
    {NULL},
};

/* The publisher's types and exception, made at import into the module state and the module's attributes
 * (tlgpu.publish subclasses them). */
static int
publish_init(PyObject *m, tl_state *S)
{
    S->publisher_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &pub_spec, NULL);
    if (S->publisher_type == NULL || PyModule_AddObjectRef(m, "Publisher", (PyObject *)S->publisher_type) < 0)
        return -1;
    S->subscriber_type = (PyTypeObject *)PyType_FromModuleAndSpec(m, &tl_sub_spec, NULL);
    if (S->subscriber_type == NULL || PyModule_AddObjectRef(m, "Subscriber", (PyObject *)S->subscriber_type) < 0)
        return -1;
    S->publisher_closed = PyErr_NewExceptionWithDoc(
        "tlgpu.publish.PublisherClosed", "The publisher closed, or its process died: no newer version will come.",
        PyExc_RuntimeError, NULL);
    return S->publisher_closed == NULL ? -1 : PyModule_AddObjectRef(m, "PublisherClosed", S->publisher_closed);
}

const tl_family tl_family_publish = {functions, NULL, NULL, NULL, NULL, .init = publish_init};
