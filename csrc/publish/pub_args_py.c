/* pub_args_py.c: WeightPublisher's arguments: the parameters (a dict or named_parameters(), recorded by
 * identity: storage, offset, shape, dtype), the published dtype (dtype=) and the sinks (name= and
 * sinks=[...]). GIL held throughout. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "ops_common.h"
#include "pub_args_py.h"
#include "pub_sub_py.h"
#include "pub_sink_py.h"

/* The core and the shared-memory header speak tlgpu's dtype codes. */
_Static_assert((int)TL_SHM_F32 == (int)TL_F32 && (int)TL_SHM_F16 == (int)TL_F16 && (int)TL_SHM_BF16 == (int)TL_BF16,
               "publisher dtype codes");

/* (name, tensor) pairs from a dict or from obj.named_parameters(), as a list of 2-tuples. */
PyObject *
tl_pub_param_pairs(PyObject *params, int *is_dict)
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

int
tl_pub_record_param(PyObject *name, PyObject *value, tl_pub_param *rec)
{
    if ((rec->name = tl_pub_utf8_name(name, "WeightPublisher: parameter")) == NULL) return -1;
    if (!tl_tensor_check(value)) {
        PyErr_Format(PyExc_TypeError, "WeightPublisher: parameter '%U' must be a Tensor, got %s", name,
                     Py_TYPE(value)->tp_name);
        return -1;
    }
    tl_tensor *t = tl_tensor_CAST(value);
    if (!TL_IS_FLOAT(t->dtype)) {
        PyErr_Format(PyExc_TypeError, "WeightPublisher: parameter '%U' must be float32, float16 or bfloat16, got %s",
                     name, tl_dtype_name(t->dtype));
        return -1;
    }
    if (!tl_tensor_is_contig(t)) {
        PyErr_Format(PyExc_ValueError, "WeightPublisher: parameter '%U' must be contiguous (call .contiguous() "
                     "and publish that tensor)", name);
        return -1;
    }
    rec->storage = t->storage;
    rec->offset = (uint64_t)t->offset;
    rec->numel = (uint64_t)tl_tensor_numel(t);
    rec->dtype = t->dtype;
    rec->ndim = t->ndim;
    for (int d = 0; d < t->ndim; d++) rec->shape[d] = t->shape[d];
    return 0;
}

int
tl_pub_same_param(const tl_pub_param *rec, PyObject *value)
{
    if (!tl_tensor_check(value)) return 0;
    tl_tensor *t = tl_tensor_CAST(value);
    if (t->storage != rec->storage || (uint64_t)t->offset != rec->offset || t->ndim != rec->ndim ||
        t->dtype != rec->dtype)
        return 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] != rec->shape[d]) return 0;
    return 1;
}

int
tl_pub_parse_dtype(PyObject *obj, const tl_pub_param *rec, int n)
{
    if (obj == Py_None) {                                /* PyTorch's promotion: one dtype stays, a mix is float32 */
        int dt = n > 0 ? rec[0].dtype : TL_F32;
        for (int i = 1; i < n; i++)
            if (rec[i].dtype != dt) dt = TL_F32;
        return dt;
    }
    int dt = tl_parse_dtype_all(obj, -1);
    if (dt >= 0 && TL_IS_FLOAT(dt)) return dt;
    PyErr_Clear();                                       /* numpy's "not understood", or tlgpu's own */
    PyObject *r = PyObject_Repr(obj);
    if (r == NULL) PyErr_Clear();
    const char *why = "WeightPublisher: dtype must be tlgpu.float32, tlgpu.float16 or tlgpu.bfloat16 (or None: "
                      "the parameters' own), got";
    if (r != NULL) PyErr_Format(PyExc_TypeError, "%s %U%s", why, r, dt >= 0 ? " (not floating)" : "");
    else PyErr_Format(PyExc_TypeError, "%s a %s", why, Py_TYPE(obj)->tp_name);
    Py_XDECREF(r);
    return -1;
}


/* One entry of sinks=[...]: an object with a str `_tlgpu_shm_name` (tlgpu.publish.ShmSink) is a shared-memory
 * sink; any other object with a callable deliver() a Python sink. */
static int
one_sink(PyObject *obj, PyObject *names, tl_pub_sink *out)
{
    tl_err err = {0};
    tl_status st;
    const char *name;
    PyObject *shm = NULL, *fn = NULL;
    int rc = -1;
    if (PyObject_HasAttrString(obj, "_tlgpu_shm_name")) {
        if ((shm = PyObject_GetAttrString(obj, "_tlgpu_shm_name")) == NULL ||
            (name = tl_pub_utf8_name(shm, "ShmSink")) == NULL)
            goto done;
        st = tl_pub_sink_shm_new(name, out, &err);
    } else if ((fn = PyObject_GetAttrString(obj, "deliver")) != NULL && PyCallable_Check(fn)) {
        st = tl_pub_sink_py_new(obj, names, out, &err);
    } else {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "WeightPublisher: a sink must be a tlgpu.publish.ShmSink or have a "
                     "deliver(version, step, arrays) method, got %s", Py_TYPE(obj)->tp_name);
        goto done;
    }
    rc = st == TL_OK ? 0 : tl_raise(&err);
done:
    Py_XDECREF(shm);
    Py_XDECREF(fn);
    return rc;
}

int
tl_pub_make_sinks(const char *shm_name, PyObject *sinks, PyObject *names, tl_pub_sink *out, int cap)
{
    tl_err err = {0};
    PyObject *seq = NULL;
    int n = 0;
    if (shm_name != NULL) {
        if (tl_pub_sink_shm_new(shm_name, &out[0], &err) != TL_OK) return tl_raise(&err);
        n = 1;
    }
    if (sinks != Py_None) {
        if ((seq = PySequence_Fast(sinks, "WeightPublisher: sinks must be a list of sinks")) == NULL) goto fail;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
            if (n == cap) {
                PyErr_Format(PyExc_ValueError, "WeightPublisher: at most %d sinks", cap);
                goto fail;
            }
            if (one_sink(PySequence_Fast_GET_ITEM(seq, i), names, &out[n]) < 0) goto fail;
            n++;
        }
    }
    Py_XDECREF(seq);
    return n;
fail:
    Py_XDECREF(seq);
    for (int k = 0; k < n; k++) out[k].ops->close(out[k].ctx);
    return -1;
}
