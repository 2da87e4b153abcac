/* pub_sink_py.c: a Python object as a publisher sink. deliver() runs on the publisher thread: it takes the
 * GIL (PyGILState), copies the version out of the staging slot into fresh numpy arrays (the slot is
 * rewritten by a later delivery, so the object may keep them) and calls obj.deliver(version, step, arrays).
 * It runs after the C sinks, whenever the GIL is free; a slow deliver() delays the next delivery, never the
 * learner's publish(). An exception it raises is kept here and stops the publisher like any thread error:
 * the learner's next call raises that same exception (pub_py.c asks tl_pub_sink_py_take_error). The arrays
 * are of the published dtype (float32, float16, or ml_dtypes' bfloat16). */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "pub_sink_py.h"
#include "pub_sub_py.h"
#include <numpy/arrayobject.h>
#include <string.h>

typedef struct {
    PyObject *obj, *names;
    tl_pub_layout lay;
    PyObject *exc_type, *exc_value, *exc_tb;   /* what deliver() raised, until taken */
} py_sink;

/* At interpreter exit the GIL can no longer be taken safely: deliveries are skipped, references leaked. */
static int
finalizing(void)
{
#if PY_VERSION_HEX >= 0x030D0000
    return Py_IsFinalizing();
#else
    return _Py_IsFinalizing();
#endif
}

static tl_status
py_open(void *ctx, const tl_pub_layout *lay, tl_err *err)
{
    (void)err;
    ((py_sink *)ctx)->lay = *lay;
    return TL_OK;
}

static PyObject *
arrays(py_sink *k, const tl_pub_delivery *d)
{
    PyObject *dict = PyDict_New();
    char **dst = PyMem_RawCalloc(k->lay.n > 0 ? k->lay.n : 1, sizeof *dst);
    if (dst == NULL) { Py_XDECREF(dict); return PyErr_NoMemory(); }
    const size_t z = tl_shm_dtype_size(k->lay.dtype);
    for (int i = 0; dict != NULL && i < k->lay.n; i++) {
        const tl_pub_param *q = &k->lay.par[i];
        PyObject *a = tl_pub_new_array(k->lay.dtype, q->ndim, q->shape);
        if (a == NULL || PyDict_SetItem(dict, PyTuple_GET_ITEM(k->names, i), a) < 0) Py_CLEAR(dict);
        else dst[i] = PyArray_DATA((PyArrayObject *)a);
        Py_XDECREF(a);
    }
    if (dict != NULL) {
        Py_BEGIN_ALLOW_THREADS                       /* the arrays are ours alone until deliver() is called */
        for (int i = 0; i < k->lay.n; i++)
            memcpy(dst[i], (const char *)d->flat + k->lay.flat_off[i] * z, k->lay.par[i].numel * z);
        Py_END_ALLOW_THREADS
    }
    PyMem_RawFree(dst);
    return dict;
}

static tl_status
py_deliver(void *ctx, const tl_pub_delivery *d, tl_err *err)
{
    py_sink *k = ctx;
    tl_status st = TL_OK;
    if (finalizing()) return TL_OK;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *dict = arrays(k, d), *res = NULL;
    if (dict != NULL)
        res = PyObject_CallMethod(k->obj, "deliver", "KLO", (unsigned long long)d->version, (long long)d->step, dict);
    if (res == NULL) {
        char what[300];
        PyErr_Fetch(&k->exc_type, &k->exc_value, &k->exc_tb);
        PyErr_NormalizeException(&k->exc_type, &k->exc_value, &k->exc_tb);
        snprintf(what, sizeof what, "a Python sink's deliver() raised %s",
                 k->exc_type ? ((PyTypeObject *)k->exc_type)->tp_name : "?");
        st = tl_err_set(err, TL_E_ARG, "sink.deliver", what);
    }
    Py_XDECREF(res);
    Py_XDECREF(dict);
    PyGILState_Release(g);
    return st;
}

static void
py_close(void *ctx)
{
    py_sink *k = ctx;
    if (k == NULL) return;
    if (!finalizing()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_XDECREF(k->obj);
        Py_XDECREF(k->names);
        Py_XDECREF(k->exc_type);
        Py_XDECREF(k->exc_value);
        Py_XDECREF(k->exc_tb);
        PyGILState_Release(g);
    }
    PyMem_RawFree(k);
}

static const tl_pub_sink_ops py_ops = {"python", py_open, NULL, NULL, py_deliver, NULL, py_close};

tl_status
tl_pub_sink_py_new(PyObject *obj, PyObject *names, tl_pub_sink *out, tl_err *err)
{
    py_sink *k = PyMem_RawCalloc(1, sizeof *k);           /* raw: freed on a thread without the GIL */
    if (k == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_pub_sink_py_new", "host memory");
    k->obj = Py_NewRef(obj);
    k->names = Py_NewRef(names);
    *out = (tl_pub_sink){&py_ops, k};
    return TL_OK;
}

int
tl_pub_sink_py_take_error(const tl_pub_sink *s)
{
    py_sink *k = s->ctx;
    if (s->ops != &py_ops || k->exc_type == NULL) return 0;
    PyErr_Restore(k->exc_type, k->exc_value, k->exc_tb);  /* steals them */
    k->exc_type = k->exc_value = k->exc_tb = NULL;
    return 1;
}
