/* publisher_py.c: the Python face of the weight publisher: _C.Publisher and _C.Subscriber (heap types
 * made on first use by _C._publish_types(), since module.c only merges functions), and the benchmark
 * helper _C._bench_pinned_read. Argument checks and conversions live here; the work is in publisher.c
 * and shm_channel.c, called with the GIL released around everything that blocks (waits, joins, copies).
 * Invariants: the core's mutex is taken from a GIL holder only bz2-style (try, else release the GIL and
 * block); arrays handed to Python own their memory (copied out of a pinned slot while it is pinned, or out
 * of shared memory under the seqlock), so they are never torn and never overwritten later. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "clock.h"
#include "ops_common.h"
#include "publisher.h"
#include <errno.h>
#include <numpy/arrayobject.h>
#include <structmember.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    tl_pub *core;
    PyObject *source;                /* the dict, or the object with named_parameters() */
    PyObject *tensors, *names;       /* tuples, in publish order */
    int n, is_dict, closed;
    tl_pub_param *rec;               /* identity recorded at construction (storage, offset, shape) */
    double block_sum, block_max;
    long block_n;
    tl_pub_stats final;              /* stats kept past close() */
} pub_obj;

typedef struct {
    PyObject_HEAD
    tl_shm *shm;
    PyObject *names;
    int ack_slot;
    long retries;
    unsigned delay_us;               /* test hook: _slow_reads() */
} sub_obj;

/* bz2's pattern: take a C lock while holding the GIL without ever blocking other Python threads on it. */
static void
lock_core(tl_pub *core)
{
    if (tl_pub_trylock(core)) return;
    Py_BEGIN_ALLOW_THREADS
    tl_pub_lock(core);
    Py_END_ALLOW_THREADS
}

static int
raise_status(tl_err *err, int os_errno, const char *filename)
{
    if (os_errno != 0) {
        errno = os_errno;
        tl_err_clear(err);
        PyErr_SetFromErrnoWithFilename(PyExc_OSError, filename);
        return -1;
    }
    if (err->code == TL_E_INVALID) {
        PyErr_SetString(PyExc_ValueError, err->what);
        tl_err_clear(err);
        return -1;
    }
    if (err->code == TL_E_CLOSED) {
        PyErr_Format(PyExc_RuntimeError, "%s: %s", err->routine ? err->routine : "publisher", err->what);
        tl_err_clear(err);
        return -1;
    }
    return tl_raise(err);
}

/* ---- parameters ---- */

/* (name, tensor) pairs from a dict or from obj.named_parameters(), as a list of 2-tuples. */
static PyObject *
param_pairs(PyObject *params, int *is_dict)
{
    *is_dict = PyDict_Check(params);
    if (*is_dict) return PyDict_Items(params);
    if (!PyObject_HasAttrString(params, "named_parameters"))
        return PyErr_Format(PyExc_TypeError, "WeightPublisher: params must be a dict of name -> Tensor or have "
                            "named_parameters(), got %s", Py_TYPE(params)->tp_name);
    PyObject *it = PyObject_CallMethod(params, "named_parameters", NULL), *list = NULL;
    if (it != NULL) list = PySequence_List(it);
    Py_XDECREF(it);
    return list;
}

static int
record_param(PyObject *name, PyObject *value, tl_pub_param *rec)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "WeightPublisher: parameter names must be str, got %s", Py_TYPE(name)->tp_name);
        return -1;
    }
    if (!tl_tensor_check(value)) {
        PyErr_Format(PyExc_TypeError, "WeightPublisher: parameter '%U' must be a Tensor, got %s", name,
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    tl_tensor *t = tl_tensor_CAST(value);
    if (t->dtype != TL_F32) {
        PyErr_Format(PyExc_TypeError, "WeightPublisher: parameter '%U' must be float32, got %s", name,
                     tl_dtype_name(t->dtype));
        return -1;
    }
    if (!tl_tensor_is_contig(t)) {
        PyErr_Format(PyExc_ValueError, "WeightPublisher: parameter '%U' must be contiguous (call .contiguous() "
                     "and publish that tensor)", name);
        return -1;
    }
    if ((rec->name = PyUnicode_AsUTF8(name)) == NULL) return -1;
    rec->storage = t->storage;
    rec->offset = (uint64_t)t->offset;
    rec->numel = (uint64_t)tl_tensor_numel(t);
    rec->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) rec->shape[d] = t->shape[d];
    return 0;
}

static int
same_param(const tl_pub_param *rec, PyObject *value)
{
    if (!tl_tensor_check(value)) return 0;
    tl_tensor *t = tl_tensor_CAST(value);
    if (t->storage != rec->storage || (uint64_t)t->offset != rec->offset || t->ndim != rec->ndim ||
        t->dtype != TL_F32)
        return 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != rec->shape[d]) return 0;
    return 1;
}

/* The parameters still are the tensors (storage, offset, shape) the publisher was built for. */
static int
check_params(pub_obj *self)
{
    if (self->is_dict && PyDict_GET_SIZE(self->source) != self->n) goto changed;
    for (int i = 0; i < self->n; i++) {
        PyObject *name = PyTuple_GET_ITEM(self->names, i), *v;
        v = self->is_dict ? PyDict_GetItemWithError(self->source, name) : PyTuple_GET_ITEM(self->tensors, i);
        if (v == NULL && PyErr_Occurred()) return -1;
        if (v == NULL || !same_param(&self->rec[i], v)) {
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
    static char *kw[] = {"params", "threshold", "incremental", "force_every", "name", NULL};
    PyObject *params, *force = Py_None, *name = Py_None, *pairs = NULL;
    double threshold = 0.0;
    int incremental = 1, os_errno = 0;
    tl_pub_config cfg = {0};
    tl_err err = {0};
    tl_status st;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|dpOO:WeightPublisher", kw, &params, &threshold, &incremental,
                                     &force, &name))
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
    if (name != Py_None && (!PyUnicode_Check(name) || (cfg.shm_name = PyUnicode_AsUTF8(name)) == NULL))
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_TypeError, "WeightPublisher: name must be a str or None");
    cfg.threshold = threshold;
    cfg.incremental = incremental;
    pub_obj *self = (pub_obj *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->closed = 1;                                      /* until the core exists */
    if ((pairs = param_pairs(params, &self->is_dict)) == NULL) goto fail;
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
        if (record_param(k, v, &self->rec[i]) < 0) goto fail;
        PyTuple_SET_ITEM(self->names, i, Py_NewRef(k));
        PyTuple_SET_ITEM(self->tensors, i, Py_NewRef(v));
    }
    Py_BEGIN_ALLOW_THREADS                                 /* kernel build, allocations, pinning */
    st = tl_pub_create(self->rec, self->n, &cfg, &self->core, &os_errno, &err);
    Py_END_ALLOW_THREADS
    if (st != TL_OK) {
        self->core = NULL;
        raise_status(&err, os_errno, cfg.shm_name);
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
    if (!self->closed) return 0;
    PyErr_Format(PyExc_RuntimeError, "%s: the publisher is closed", what);
    return -1;
}

/* The thread's stored error, raised once at the learner's next call. */
static int
raise_thread_error(pub_obj *self)
{
    tl_err err = {0};
    lock_core(self->core);
    tl_status st = tl_pub_take_error_locked(self->core, &err);
    tl_pub_unlock(self->core);
    return st == TL_OK ? 0 : raise_status(&err, 0, NULL);
}

static PyObject *
pub_publish(PyObject *op, PyObject *arg)
{
    pub_obj *self = (pub_obj *)op;
    double t0 = tl_now_s();
    tl_err err = {0};
    if (check_open(self, "publish") < 0) return NULL;
    unsigned long long step = PyLong_AsUnsignedLongLong(arg);
    if (step == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (check_params(self) < 0) return NULL;
    lock_core(self->core);
    tl_status st = tl_pub_publish_locked(self->core, step, t0, &err);
    tl_pub_unlock(self->core);
    if (st != TL_OK) return raise_status(&err, 0, NULL), NULL;
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
    const float *flat = NULL;
    uint64_t version = 0, step = 0;
    int slot, n = self->n;
    PyObject *dict = NULL, *res = NULL;
    Py_BEGIN_ALLOW_THREADS
    slot = tl_pub_pin(self->core, newer_than, &flat, &version, &step);
    Py_END_ALLOW_THREADS
    if (slot < 0) Py_RETURN_NONE;
    float **dst = PyMem_Calloc((size_t)n, sizeof *dst);
    if (dst == NULL || (dict = PyDict_New()) == NULL) { PyErr_NoMemory(); goto done; }
    for (int i = 0; i < n; i++) {
        npy_intp shape[TL_SHM_MAX_DIMS];
        for (int d = 0; d < self->rec[i].ndim; d++) shape[d] = (npy_intp)self->rec[i].shape[d];
        PyObject *a = PyArray_SimpleNew(self->rec[i].ndim, shape, NPY_FLOAT32);
        if (a == NULL || PyDict_SetItem(dict, PyTuple_GET_ITEM(self->names, i), a) < 0) { Py_XDECREF(a); goto done; }
        dst[i] = PyArray_DATA((PyArrayObject *)a);
        Py_DECREF(a);                                      /* the dict holds it */
    }
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < n; i++)
        memcpy(dst[i], flat + tl_pub_flat_offset(self->core, i), self->rec[i].numel * 4);
    Py_END_ALLOW_THREADS
    res = Py_BuildValue("KKO", (unsigned long long)version, (unsigned long long)step, dict);
done:
    Py_BEGIN_ALLOW_THREADS
    tl_pub_unpin(self->core, slot);
    Py_END_ALLOW_THREADS
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

static int
parse_timeout(PyObject *obj, double *out)
{
    *out = -1.0;
    if (obj == Py_None) return 0;
    *out = PyFloat_AsDouble(obj);
    if (*out == -1.0 && PyErr_Occurred()) return -1;
    if (*out < 0) *out = 0;
    return 0;
}

/* Waits in slices so Ctrl-C is seen; fn: 1 done, 0 timed out, -1 stopped. */
static int
wait_sliced(pub_obj *self, int drain, uint64_t newer_than, double timeout)
{
    double end = tl_now_s() + timeout;
    for (;;) {
        double left = timeout < 0 ? 0.2 : end - tl_now_s(), slice = left > 0.2 ? 0.2 : left < 0 ? 0 : left;
        int r;
        Py_BEGIN_ALLOW_THREADS
        r = drain ? tl_pub_drain(self->core, slice) : tl_pub_wait(self->core, newer_than, slice);
        Py_END_ALLOW_THREADS
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
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "K|O:wait", kw, &newer, &tobj) || parse_timeout(tobj, &timeout) < 0)
        return NULL;
    if (check_open(self, "wait") < 0 || raise_thread_error(self) < 0) return NULL;
    int r = wait_sliced(self, 0, newer, timeout);
    if (r == -2 || raise_thread_error(self) < 0) return NULL;
    if (r <= 0) Py_RETURN_NONE;
    return copy_out(self, newer);
}

static PyObject *
pub_drain(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"timeout", NULL};
    pub_obj *self = (pub_obj *)op;
    PyObject *tobj = Py_None;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:drain", kw, &tobj) || parse_timeout(tobj, &timeout) < 0)
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

/* Joins the thread and frees everything; the thread's unreported error comes back in err. */
static tl_status
shutdown_core(pub_obj *self, int cancel, tl_err *err)
{
    tl_status st;
    tl_pub *core = self->core;
    Py_BEGIN_ALLOW_THREADS
    st = tl_pub_close(core, cancel, err);
    Py_END_ALLOW_THREADS
    keep_final_stats(self);
    Py_BEGIN_ALLOW_THREADS
    tl_pub_free(core);
    Py_END_ALLOW_THREADS
    self->core = NULL;
    self->closed = 1;
    return st;
}

static PyObject *
pub_close(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"cancel", NULL};
    pub_obj *self = (pub_obj *)op;
    int cancel = 0;
    tl_err err = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|p:close", kw, &cancel)) return NULL;
    if (self->core == NULL) Py_RETURN_NONE;
    if (shutdown_core(self, cancel, &err) != TL_OK) return raise_status(&err, 0, NULL), NULL;
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
    tl_err err = {0};
    if (self->core == NULL) Py_RETURN_FALSE;
    /* leaving on an exception: cancel the pending snapshot rather than wait for it */
    if (shutdown_core(self, exc != NULL && exc != Py_None, &err) != TL_OK) return raise_status(&err, 0, NULL), NULL;
    Py_RETURN_FALSE;
}

static PyObject *
pub_stats(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    pub_obj *self = (pub_obj *)op;
    tl_pub_stats s;
    if (self->core != NULL) tl_pub_get_stats(self->core, &s);
    else s = self->final;
    PyObject *acked = PyList_New(s.n_acked);
    if (acked == NULL) return NULL;
    for (int i = 0; i < s.n_acked; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(s.acked[i]);
        if (v == NULL) { Py_DECREF(acked); return NULL; }
        PyList_SET_ITEM(acked, i, v);
    }
    double nd = s.delivered > 0 ? (double)s.delivered : 1.0, nb = self->block_n > 0 ? (double)self->block_n : 1.0;
    return Py_BuildValue(
        "{s:l,s:l,s:l,s:l,s:K,s:d,s:d,s:d,s:d,s:d,s:d,s:d,s:K,s:K,s:N,s:O,s:i,s:O}", "published", s.published,
        "delivered", s.delivered, "skipped", s.skipped, "dropped", s.dropped, "bytes_moved",
        (unsigned long long)s.bytes_moved, "blocking_mean_s", self->block_sum / nb, "blocking_max_s",
        self->block_max, "transfer_mean_s", s.xfer_sum / nd, "snapshot_mean_s", s.snap_sum / nd, "compare_mean_s",
        s.cmp_sum / nd, "latency_mean_s", s.lat_sum / nd, "latency_max_s", s.lat_max, "version",
        (unsigned long long)s.version, "step", (unsigned long long)s.step, "acked", acked, "fast_path",
        s.fast_path ? Py_True : Py_False, "snapshot_enqueues", s.n_launches, "shm_direct",
        s.shm_direct ? Py_True : Py_False);
}

static PyObject *
pub_inject_error(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    pub_obj *self = (pub_obj *)op;
    if (check_open(self, "_inject_error") < 0) return NULL;
    tl_pub_inject_error(self->core);
    Py_RETURN_NONE;
}

static PyObject *
pub_get_names(PyObject *op, void *Py_UNUSED(c))
{
    return Py_NewRef(((pub_obj *)op)->names);
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
    tl_err err = {0};
    PyObject_GC_UnTrack(op);
    if (self->core != NULL && shutdown_core(self, 1, &err) != TL_OK) {   /* forgot close(): cancel, clean up */
        raise_status(&err, 0, NULL);
        PyErr_WriteUnraisable(op);
    }
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
    {"_inject_error", pub_inject_error, METH_NOARGS, "Test hook: the thread fails at its next wake-up."},
    {"__enter__", pub_enter, METH_NOARGS, NULL},
    {"__exit__", pub_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef pub_getset[] = {
    {"names", pub_get_names, NULL, "parameter names, in publish order", NULL},
    {"closed", pub_get_closed, NULL, "True after close()", NULL},
    {NULL},
};

static PyType_Slot pub_slots[] = {
    {Py_tp_new, pub_new},           {Py_tp_dealloc, pub_dealloc}, {Py_tp_traverse, pub_traverse},
    {Py_tp_clear, pub_clear},       {Py_tp_methods, pub_methods}, {Py_tp_getset, pub_getset},
    {Py_tp_doc, "Publisher(params, threshold=0.0, incremental=True, force_every=None, name=None): the C core of "
                "tlgpu.publish.WeightPublisher."},
    {0, NULL},
};

static PyType_Spec pub_spec = {"tlgpu._C.Publisher", sizeof(pub_obj), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, pub_slots};

/* ---- Subscriber ---- */

static PyObject *
sub_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"name", NULL};
    const char *name;
    tl_err err = {0};
    int os_errno = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "s:Subscriber", kw, &name)) return NULL;
    sub_obj *self = (sub_obj *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->ack_slot = -1;
    if (tl_shm_open(name, &self->shm, &os_errno, &err) != TL_OK) {
        self->shm = NULL;
        raise_status(&err, os_errno, name);
        Py_DECREF(self);
        return NULL;
    }
    int n = tl_shm_count(self->shm);
    if ((self->names = PyTuple_New(n)) == NULL) { Py_DECREF(self); return NULL; }
    for (int i = 0; i < n; i++) {
        tl_shm_tensor t;
        tl_shm_tensor_info(self->shm, i, &t);
        PyObject *s = PyUnicode_FromString(t.name);
        if (s == NULL) { Py_DECREF(self); return NULL; }
        PyTuple_SET_ITEM(self->names, i, s);
    }
    self->ack_slot = tl_shm_claim(self->shm);                /* -1: all 64 taken; ack() will say so */
    return (PyObject *)self;
}

static int
sub_check(sub_obj *self, const char *what)
{
    if (self->shm != NULL) return 0;
    PyErr_Format(PyExc_RuntimeError, "Subscriber.%s: the subscriber is closed", what);
    return -1;
}

static PyObject *
sub_read(sub_obj *self, uint64_t newer_than)
{
    int n = tl_shm_count(self->shm), got;
    uint64_t version = 0, step = 0;
    long retries = 0;
    PyObject *dict = PyDict_New(), *res = NULL;
    float **dst = PyMem_Calloc((size_t)(n ? n : 1), sizeof *dst);
    if (dict == NULL || dst == NULL) { PyErr_NoMemory(); goto done; }
    for (int i = 0; i < n; i++) {
        tl_shm_tensor t;
        npy_intp shape[TL_SHM_MAX_DIMS];
        tl_shm_tensor_info(self->shm, i, &t);
        for (int d = 0; d < t.ndim; d++) shape[d] = (npy_intp)t.shape[d];
        PyObject *a = PyArray_SimpleNew(t.ndim, shape, NPY_FLOAT32);
        if (a == NULL || PyDict_SetItem(dict, PyTuple_GET_ITEM(self->names, i), a) < 0) { Py_XDECREF(a); goto done; }
        dst[i] = PyArray_DATA((PyArrayObject *)a);
        Py_DECREF(a);
    }
    Py_BEGIN_ALLOW_THREADS
    got = tl_shm_read(self->shm, newer_than, dst, &version, &step, &retries, self->delay_us);
    Py_END_ALLOW_THREADS
    self->retries += retries;
    res = got ? Py_BuildValue("KKO", (unsigned long long)version, (unsigned long long)step, dict) : Py_NewRef(Py_None);
done:
    PyMem_Free(dst);
    Py_XDECREF(dict);
    return res;
}

static PyObject *
sub_latest(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    sub_obj *self = (sub_obj *)op;
    if (sub_check(self, "latest") < 0) return NULL;
    return sub_read(self, 0);
}

static PyObject *
sub_wait(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"newer_than", "timeout", NULL};
    sub_obj *self = (sub_obj *)op;
    unsigned long long newer = 0;
    PyObject *tobj = Py_None;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "K|O:wait", kw, &newer, &tobj) || parse_timeout(tobj, &timeout) < 0)
        return NULL;
    if (sub_check(self, "wait") < 0) return NULL;
    double end = tl_now_s() + timeout;
    for (;;) {                                            /* a newer version can be lapped away: loop */
        double left = timeout < 0 ? 0.2 : end - tl_now_s(), slice = left > 0.2 ? 0.2 : left < 0 ? 0 : left;
        int r;
        Py_BEGIN_ALLOW_THREADS
        r = tl_shm_wait(self->shm, newer, slice);
        Py_END_ALLOW_THREADS
        if (r) {
            PyObject *res = sub_read(self, newer);
            if (res != Py_None) return res;
            Py_DECREF(res);
        }
        if (timeout >= 0 && tl_now_s() >= end) Py_RETURN_NONE;
        if (PyErr_CheckSignals() < 0) return NULL;
    }
}

static PyObject *
sub_ack(PyObject *op, PyObject *arg)
{
    sub_obj *self = (sub_obj *)op;
    if (sub_check(self, "ack") < 0) return NULL;
    unsigned long long v = PyLong_AsUnsignedLongLong(arg);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    if (self->ack_slot < 0)
        return PyErr_Format(PyExc_RuntimeError, "Subscriber.ack: all %d ack slots are taken", TL_SHM_ACK_SLOTS);
    tl_shm_ack(self->shm, self->ack_slot, v);
    Py_RETURN_NONE;
}

static PyObject *
sub_slow_reads(PyObject *op, PyObject *arg)
{
    long us = PyLong_AsLong(arg);
    if (us == -1 && PyErr_Occurred()) return NULL;
    if (us < 0 || us > 10000000) return PyErr_Format(PyExc_ValueError, "_slow_reads: 0..10^7 microseconds");
    ((sub_obj *)op)->delay_us = (unsigned)us;
    Py_RETURN_NONE;
}

static void
sub_release(sub_obj *self)
{
    if (self->shm == NULL) return;
    if (self->ack_slot >= 0) tl_shm_unclaim(self->shm, self->ack_slot);
    tl_shm_close(self->shm);
    self->shm = NULL;
}

static PyObject *
sub_close(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    sub_release((sub_obj *)op);
    Py_RETURN_NONE;
}

static PyObject *
sub_enter(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return Py_NewRef(op);
}

static PyObject *
sub_exit(PyObject *op, PyObject *Py_UNUSED(args))
{
    sub_release((sub_obj *)op);
    Py_RETURN_FALSE;
}

static void
sub_dealloc(PyObject *op)
{
    PyTypeObject *tp = Py_TYPE(op);
    sub_release((sub_obj *)op);
    Py_CLEAR(((sub_obj *)op)->names);
    tp->tp_free(op);
    Py_DECREF(tp);
}

static PyObject *
sub_get_names(PyObject *op, void *Py_UNUSED(c))
{
    return Py_NewRef(((sub_obj *)op)->names);
}

static PyObject *
sub_get_retries(PyObject *op, void *Py_UNUSED(c))
{
    return PyLong_FromLong(((sub_obj *)op)->retries);
}

static PyMethodDef sub_methods[] = {
    {"latest", sub_latest, METH_NOARGS, "latest() -> (version, step, {name: ndarray}) or None."},
    {"wait", (PyCFunction)(void (*)(void))sub_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(newer_than, timeout=None) -> the first version newer than newer_than, or None."},
    {"ack", sub_ack, METH_O, "ack(version): tell the publisher which version this subscriber holds."},
    {"close", sub_close, METH_NOARGS, "close(): release the ack slot and unmap."},
    {"_slow_reads", sub_slow_reads, METH_O, "Test hook: sleep this many microseconds inside each first copy."},
    {"__enter__", sub_enter, METH_NOARGS, NULL},
    {"__exit__", sub_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef sub_getset[] = {
    {"names", sub_get_names, NULL, "parameter names", NULL},
    {"retries", sub_get_retries, NULL, "seqlock retries so far (reads that raced the writer)", NULL},
    {NULL},
};

static PyType_Slot sub_slots[] = {
    {Py_tp_new, sub_new},         {Py_tp_dealloc, sub_dealloc}, {Py_tp_methods, sub_methods},
    {Py_tp_getset, sub_getset},   {Py_tp_doc, "Subscriber(name): reads a publisher's shared-memory versions."},
    {0, NULL},
};

static PyType_Spec sub_spec = {"tlgpu._C.Subscriber", sizeof(sub_obj), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
                               sub_slots};

/* ---- module functions ---- */

static PyObject *
fn_publish_types(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    static PyObject *types;                               /* made once, kept for the process */
    if (types == NULL) {
        PyObject *p = PyType_FromSpec(&pub_spec), *s = p ? PyType_FromSpec(&sub_spec) : NULL;
        if (s != NULL) types = PyTuple_Pack(2, p, s);
        Py_XDECREF(p);
        Py_XDECREF(s);
        if (types == NULL) return NULL;
    }
    return Py_NewRef(types);
}

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

static const PyMethodDef functions[] = {
    {"_publish_types", fn_publish_types, METH_NOARGS, "(Publisher, Subscriber) types of the weight publisher."},
    {"_bench_pinned_read", fn_bench_pinned_read, METH_VARARGS,
     "_bench_pinned_read(nbytes, iters) -> seconds per clEnqueueReadBuffer into pinned memory mapped once."},
    {NULL},
};

const tl_family tl_family_publish = {functions, NULL, NULL, NULL, NULL};
