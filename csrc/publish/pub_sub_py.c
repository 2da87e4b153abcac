/* pub_sub_py.c: _C.Subscriber, a reader of a publisher's shared-memory segment in any process (its type
 * and PublisherClosed live in the module state, made by pub_py.c's init). The segment work is in
 * shm_channel.c, called with the GIL released.
 * Invariants: arrays handed to Python own their memory (copied out under the seqlock: never torn, never
 * overwritten later); the mapping is unmapped only once no thread of ours is inside a GIL-released call
 * on it (`active`), so close() from another thread never pulls it from under a waiting reader; wait()
 * never blocks for good on a publisher that is gone: it raises PublisherClosed once the publisher closed or
 * its process died (checked at least every 100 ms). */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "clock.h"
#include "pub_sub_py.h"
#include "shm_channel.h"
#include "tensor.h"
#include <numpy/arrayobject.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    tl_shm *shm;
    PyObject *names;
    char path[256];
    int ack_slot, active, closing;   /* active: threads inside a GIL-released call on shm */
    long retries;
    unsigned delay_us;               /* test hook: _slow_reads() */
} sub_obj;

PyObject *
tl_pub_closed_error(void)
{
    return tl_state_get()->publisher_closed;          /* made at import by pub_py.c's publish_init */
}

int
tl_pub_parse_timeout(PyObject *obj, double *out)
{
    *out = -1.0;
    if (obj == Py_None) return 0;
    *out = PyFloat_AsDouble(obj);
    if (*out == -1.0 && PyErr_Occurred()) return -1;
    if (*out < 0) *out = 0;
    return 0;
}

const char *
tl_pub_utf8_name(PyObject *name, const char *who)
{
    Py_ssize_t len;
    const char *s;
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s: a name must be a str, got %s", who, Py_TYPE(name)->tp_name);
        return NULL;
    }
    if ((s = PyUnicode_AsUTF8AndSize(name, &len)) == NULL) return NULL;
    if ((size_t)len != strlen(s)) {
        PyErr_Format(PyExc_ValueError, "%s: the name %R holds a NUL character", who, name);
        return NULL;
    }
    return s;
}

PyObject *
tl_pub_new_array(int dtype, int ndim, const int64_t *shape)
{
    npy_intp dims[TL_SHM_MAX_DIMS];
    PyArray_Descr *d = (PyArray_Descr *)tl_dtype_descr(dtype);
    if (d == NULL) return NULL;
    for (int i = 0; i < ndim; i++) dims[i] = (npy_intp)shape[i];
    return PyArray_NewFromDescr(&PyArray_Type, d, ndim, dims, NULL, NULL, 0, NULL);   /* steals d */
}

static PyObject *
sub_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"name", NULL};
    PyObject *name_obj;
    const char *name;
    tl_err err = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Subscriber", kw, &name_obj)) return NULL;
    if ((name = tl_pub_utf8_name(name_obj, "Subscriber")) == NULL) return NULL;
    sub_obj *self = (sub_obj *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->ack_slot = -1;
    snprintf(self->path, sizeof self->path, "%s", name);
    if (tl_shm_open(name, &self->shm, &err) != TL_OK) {
        self->shm = NULL;
        tl_raise(&err);
        Py_DECREF(self);
        return NULL;
    }
    int n = tl_shm_count(self->shm);
    if ((self->names = PyTuple_New(n)) == NULL) { Py_DECREF(self); return NULL; }
    for (int i = 0; i < n; i++) {
        tl_shm_tensor t;
        tl_shm_tensor_info(self->shm, i, &t);
        PyObject *s = PyUnicode_DecodeUTF8(t.name, (Py_ssize_t)strlen(t.name), "strict");
        if (s == NULL) { Py_DECREF(self); return NULL; }   /* UnicodeDecodeError: a ValueError */
        PyTuple_SET_ITEM(self->names, i, s);
    }
    self->ack_slot = tl_shm_claim(self->shm);                /* -1: all 64 taken; ack() will say so */
    return (PyObject *)self;
}

static int
sub_check(sub_obj *self, const char *what)
{
    if (self->shm != NULL && !self->closing) return 0;
    PyErr_Format(PyExc_RuntimeError, "Subscriber.%s: the subscriber is closed", what);
    return -1;
}

static PyObject *
sub_read(sub_obj *self, uint64_t newer_than)
{
    int n = tl_shm_count(self->shm), got;
    uint64_t version = 0;
    int64_t step = 0;
    long retries = 0;
    PyObject *dict = PyDict_New(), *res = NULL;
    void **dst = PyMem_Calloc((size_t)(n ? n : 1), sizeof *dst);
    if (dict == NULL || dst == NULL) { PyErr_NoMemory(); goto done; }
    for (int i = 0; i < n; i++) {
        tl_shm_tensor t;
        tl_shm_tensor_info(self->shm, i, &t);
        PyObject *a = tl_pub_new_array(tl_shm_dtype(self->shm), t.ndim, t.shape);   /* the segment's dtype */
        if (a == NULL || PyDict_SetItem(dict, PyTuple_GET_ITEM(self->names, i), a) < 0) { Py_XDECREF(a); goto done; }
        dst[i] = PyArray_DATA((PyArrayObject *)a);           /* names are unique (checked at open): dict keeps it */
        Py_DECREF(a);
    }
    self->active++;
    Py_BEGIN_ALLOW_THREADS
    got = tl_shm_read(self->shm, newer_than, dst, &version, &step, &retries, self->delay_us);
    Py_END_ALLOW_THREADS
    self->active--;
    self->retries += retries;
    if (got == TL_SHM_CORRUPT)
        PyErr_Format(PyExc_ValueError, "Subscriber: %s is corrupt: the slot its header names as latest stays "
                     "half-written", self->path);
    else
        res = got ? Py_BuildValue("KLO", (unsigned long long)version, (long long)step, dict) : Py_NewRef(Py_None);
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
raise_closed(sub_obj *self, int why)
{
    if (why == TL_SHM_DEAD)
        return PyErr_Format(tl_pub_closed_error(), "Subscriber.wait: the publisher process %llu of %s died: no "
                            "newer version will come", (unsigned long long)tl_shm_owner_pid(self->shm), self->path);
    return PyErr_Format(tl_pub_closed_error(), "Subscriber.wait: the publisher of %s closed: no newer version "
                        "will come", self->path);
}

static PyObject *
sub_wait(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"newer_than", "timeout", NULL};
    sub_obj *self = (sub_obj *)op;
    unsigned long long newer = 0;
    PyObject *tobj = Py_None;
    double timeout;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "K|O:wait", kw, &newer, &tobj) ||
        tl_pub_parse_timeout(tobj, &timeout) < 0)
        return NULL;
    double end = tl_now_s() + timeout;
    for (;;) {                                            /* a newer version can be lapped away: loop */
        if (sub_check(self, "wait") < 0) return NULL;    /* also when closed by another thread meanwhile */
        double left = timeout < 0 ? 0.2 : end - tl_now_s(), slice = left > 0.2 ? 0.2 : left < 0 ? 0 : left;
        int r;
        self->active++;
        Py_BEGIN_ALLOW_THREADS
        r = tl_shm_wait(self->shm, newer, slice);
        Py_END_ALLOW_THREADS
        self->active--;
        if (r == TL_SHM_CLOSED || r == TL_SHM_DEAD) return raise_closed(self, r);
        if (r == 1) {
            if (sub_check(self, "wait") < 0) return NULL;
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

#ifdef TL_TEST_HOOKS
static PyObject *
sub_slow_reads(PyObject *op, PyObject *arg)
{
    long us = PyLong_AsLong(arg);
    if (us == -1 && PyErr_Occurred()) return NULL;
    if (us < 0 || us > 10000000) return PyErr_Format(PyExc_ValueError, "_slow_reads: 0..10^7 microseconds");
    ((sub_obj *)op)->delay_us = (unsigned)us;
    Py_RETURN_NONE;
}
#endif

/* Waits (GIL dropped in turns) until no other thread is inside a call on the mapping, then unmaps. */
static void
sub_release(sub_obj *self)
{
    if (self->shm == NULL || self->closing) return;
    self->closing = 1;
    while (self->active > 0) {
        Py_BEGIN_ALLOW_THREADS
        usleep(1000);
        Py_END_ALLOW_THREADS
    }
    if (self->ack_slot >= 0) tl_shm_unclaim(self->shm, self->ack_slot);
    tl_shm_close(self->shm);
    self->shm = NULL;
    self->closing = 0;
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
sub_get_dtype(PyObject *op, void *Py_UNUSED(c))
{
    sub_obj *self = (sub_obj *)op;
    if (sub_check(self, "dtype") < 0) return NULL;
    return tl_dtype_descr(tl_shm_dtype(self->shm));
}

static PyObject *
sub_get_retries(PyObject *op, void *Py_UNUSED(c))
{
    return PyLong_FromLong(((sub_obj *)op)->retries);
}

static PyObject *
sub_get_publisher_pid(PyObject *op, void *Py_UNUSED(c))
{
    sub_obj *self = (sub_obj *)op;
    if (sub_check(self, "publisher_pid") < 0) return NULL;
    return PyLong_FromUnsignedLongLong(tl_shm_owner_pid(self->shm));
}

static PyMethodDef sub_methods[] = {
    {"latest", sub_latest, METH_NOARGS, "latest() -> (version, step, {name: ndarray}) or None."},
    {"wait", (PyCFunction)(void (*)(void))sub_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(newer_than, timeout=None) -> the first version newer than newer_than, or None on timeout; "
     "PublisherClosed once the publisher closed or died."},
    {"ack", sub_ack, METH_O, "ack(version): tell the publisher which version this subscriber holds."},
    {"close", sub_close, METH_NOARGS, "close(): release the ack slot and unmap."},
#ifdef TL_TEST_HOOKS
    {"_slow_reads", sub_slow_reads, METH_O, "Test hook: sleep this many microseconds inside each first copy."},
#endif
    {"__enter__", sub_enter, METH_NOARGS, NULL},
    {"__exit__", sub_exit, METH_VARARGS, NULL},
    {NULL},
};

static PyGetSetDef sub_getset[] = {
    {"names", sub_get_names, NULL, "parameter names", NULL},
    {"dtype", sub_get_dtype, NULL, "the numpy dtype of the arrays: float32, float16 or bfloat16 (ml_dtypes)", NULL},
    {"retries", sub_get_retries, NULL, "seqlock retries so far (reads that raced the writer)", NULL},
    {"publisher_pid", sub_get_publisher_pid, NULL, "the pid of the process that created the segment", NULL},
    {NULL},
};

static PyType_Slot sub_slots[] = {
    {Py_tp_new, sub_new},         {Py_tp_dealloc, sub_dealloc}, {Py_tp_methods, sub_methods},
    {Py_tp_getset, sub_getset},   {Py_tp_doc, "Subscriber(name): reads a publisher's shared-memory versions."},
    {0, NULL},
};

PyType_Spec tl_sub_spec = {"tlgpu._C.Subscriber", sizeof(sub_obj), 0, Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
                           sub_slots};
