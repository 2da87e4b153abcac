/* tensor_io.c: numpy in and out of a Tensor, and the Tensor protocols that read values: numpy(), __array__,
 * tolist(), item(), float/int/bool, repr and pickling. Every reader is a sync point: it releases the GIL
 * and blocks on the device (repr too, except for zero-size tensors). In: float64 -> float32, int64 -> int32
 * with a range check, bool -> a float32 mask, float16/bfloat16/uint8 kept, anything else refused; uploads go to the transfer queue and
 * return at once. Uses ops_common.c (contiguous copies), tensor.c and core/. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "tensor_io.h"
#include "ops_common.h"
#include <numpy/arrayobject.h>

/* The fixed-width type number of arr's dtype: numpy has two numbers for each 64-bit integer type (long and
 * long long), and checks below compare against the fixed-width names. */
static int
type_num(PyArrayObject *arr)
{
    int num = PyArray_TYPE(arr);
    if (PyArray_ITEMSIZE(arr) == 8 && PyTypeNum_ISSIGNED(num)) return NPY_INT64;
    if (PyArray_ITEMSIZE(arr) == 8 && PyTypeNum_ISUNSIGNED(num)) return NPY_UINT64;
    if (PyArray_ITEMSIZE(arr) == 4 && PyTypeNum_ISSIGNED(num)) return NPY_INT32;
    if (PyArray_ITEMSIZE(arr) == 4 && PyTypeNum_ISUNSIGNED(num)) return NPY_UINT32;
    return num;
}

/* The tensor dtype for a numpy type number, or -1 with a TypeError naming the op. float16, bfloat16
 * (ml_dtypes) and uint8 arrays keep their dtype. */
static int
dtype_for(int num, int requested, const char *op)
{
    int is_float = num == NPY_FLOAT32 || num == NPY_FLOAT64;
    int is_int = num == NPY_INT32 || num == NPY_INT64;
    int own = tl_dtype_of_typenum(num);
    if (requested >= 0 && (is_float || is_int || own >= 0 || num == NPY_BOOL || num == NPY_INT16 ||
                           num == NPY_INT8 || num == NPY_UINT16 || num == NPY_UINT32 || num == NPY_UINT64))
        return requested;                            /* an explicit dtype converts like numpy's astype */
    if (own >= 0) return own;
    if (is_float || num == NPY_BOOL) return TL_F32;   /* bools are float32 masks, like comparisons' */
    if (is_int) return TL_I32;
    PyArray_Descr *d = PyArray_DescrFromType(num);
    PyErr_Format(PyExc_TypeError,
                 "%s: numpy dtype %s is not supported; tlgpu takes float32/float64 (stored as float32), "
                 "int32/int64 (stored as int32), float16, bfloat16 (ml_dtypes), uint8, bool (a float32 mask), "
                 "or pass dtype= explicitly", op, d ? d->typeobj->tp_name : "?");
    Py_XDECREF(d);
    return -1;
}

/* Every value of arr must convert to int32 (integers in range; floats finite and in range after truncation):
 * numpy's casts wrap or produce INT32_MIN, a silent wrong result. */
static int
check_int32_range(PyArrayObject *arr, const char *op)
{
    int num = type_num(arr), rc = 0;
    int wide = num == NPY_INT64 || num == NPY_UINT32 || num == NPY_UINT64;
    int flt = num == NPY_FLOAT16 || num == NPY_FLOAT32 || num == NPY_FLOAT64;
    if (!wide && !flt) return 0;                     /* int8/16, uint8/16 always fit */
    int as = num == NPY_UINT64 ? NPY_UINT64 : flt ? NPY_FLOAT64 : NPY_INT64;
    PyArrayObject *c = (PyArrayObject *)PyArray_FromAny((PyObject *)arr, PyArray_DescrFromType(as), 0, 0,
                                                       NPY_ARRAY_CARRAY_RO, NULL);
    if (c == NULL) return -1;
    npy_intp n = PyArray_SIZE(c);
    for (npy_intp i = 0; i < n && rc == 0; i++) {
        if (as == NPY_FLOAT64) {
            rc = tl_check_int32_value(op, ((const double *)PyArray_DATA(c))[i]);
        } else if (as == NPY_UINT64) {
            npy_uint64 v = ((const npy_uint64 *)PyArray_DATA(c))[i];
            if (v > INT32_MAX) {
                PyErr_Format(PyExc_OverflowError, "%s: value %llu does not fit int32", op, (unsigned long long)v);
                rc = -1;
            }
        } else {
            npy_int64 v = ((const npy_int64 *)PyArray_DATA(c))[i];
            if (v < INT32_MIN || v > INT32_MAX) {
                PyErr_Format(PyExc_OverflowError, "%s: value %lld does not fit int32", op, (long long)v);
                rc = -1;
            }
        }
    }
    Py_DECREF(c);
    return rc;
}

tl_tensor *
tl_tensor_from_object(PyObject *obj, int dtype, const char *op)
{
    PyArrayObject *arr = NULL, *c = NULL;
    tl_tensor *t = NULL;
    tl_err err = {0};
    Py_ssize_t shape[TL_MAX_DIMS];
    if (tl_tensor_check(obj)) obj = tl_tensor_to_numpy(tl_tensor_CAST(obj));
    else Py_INCREF(obj);
    if (obj == NULL) return NULL;
    if ((arr = (PyArrayObject *)PyArray_FromAny(obj, NULL, 0, 0, 0, NULL)) == NULL) goto done;
    /* Python ints past int64 come out as uint64: say they overflow rather than that uint64 is unsupported */
    if (type_num(arr) == NPY_UINT64 && dtype != TL_F32 && check_int32_range(arr, op) < 0) goto done;
    int td = dtype_for(type_num(arr), dtype, op);
    if (td < 0) goto done;
    if (PyArray_NDIM(arr) > TL_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: %d dimensions; at most %d are supported", op, PyArray_NDIM(arr),
                     TL_MAX_DIMS);
        goto done;
    }
    if (td == TL_I32 && check_int32_range(arr, op) < 0) goto done;
    PyArray_Descr *want = (PyArray_Descr *)tl_dtype_descr(td);          /* stolen by PyArray_FromAny */
    if (want == NULL) goto done;
    c = (PyArrayObject *)PyArray_FromAny((PyObject *)arr, want, 0, 0, NPY_ARRAY_CARRAY_RO | NPY_ARRAY_FORCECAST, NULL);
    if (c == NULL) goto done;
    for (int d = 0; d < PyArray_NDIM(c); d++) shape[d] = PyArray_DIM(c, d);
    if ((t = tl_tensor_empty(td, PyArray_NDIM(c), shape)) == NULL) goto done;
    if (t->storage != NULL &&
        tl_stream_upload(t->storage, 0, PyArray_DATA(c), (size_t)PyArray_NBYTES(c), &err) != TL_OK) {
        Py_CLEAR(t);
        tl_raise(&err);
    }
done:
    Py_XDECREF(c);
    Py_XDECREF(arr);
    Py_DECREF(obj);
    return t;
}

PyObject *
tl_tensor_to_numpy(tl_tensor *self)
{
    tl_tensor *src = NULL;
    PyObject *arr = NULL;
    tl_err err = {0};
    tl_status st = TL_OK;
    npy_intp dims[TL_MAX_DIMS];
    for (int d = 0; d < self->ndim; d++) dims[d] = self->shape[d];
    if ((src = tl_tensor_contiguous(self)) == NULL) goto fail;
    PyArray_Descr *descr = (PyArray_Descr *)tl_dtype_descr(self->dtype);     /* stolen */
    if (descr == NULL) goto fail;
    arr = PyArray_NewFromDescr(&PyArray_Type, descr, self->ndim, dims, NULL, NULL, 0, NULL);
    if (arr == NULL) goto fail;
    if (src->storage != NULL) {                      /* zero-size owns nothing */
        void *dst = PyArray_DATA((PyArrayObject *)arr);
        const size_t es = tl_dtype_size(src->dtype);
        size_t off = (size_t)src->offset * es, n = (size_t)tl_tensor_numel(src) * es;
        tl_storage *s = src->storage;
        Py_BEGIN_ALLOW_THREADS                       /* a sync point: blocks until the data is here */
        st = tl_stream_read(s, off, dst, n, &err);
        Py_END_ALLOW_THREADS
        if (st != TL_OK) { tl_raise(&err); goto fail; }
    }
    Py_DECREF(src);
    return arr;
fail:
    Py_XDECREF(arr);
    Py_XDECREF(src);
    return NULL;
}

int
tl_is_numpy(PyObject *obj)
{
    return PyArray_Check(obj) || PyArray_IsScalar(obj, Generic);
}

tl_tensor *
tl_tensor_from_operand(PyObject *obj, const char *op)
{
    int is_bool = PyArray_Check(obj) ? PyArray_ISBOOL((PyArrayObject *)obj) : PyArray_IsScalar(obj, Bool);
    if (!is_bool) return tl_tensor_from_object(obj, -1, op);
    PyObject *mask = PyArray_FromAny(obj, PyArray_DescrFromType(NPY_FLOAT32), 0, 0, NPY_ARRAY_FORCECAST, NULL);
    tl_tensor *t = mask != NULL ? tl_tensor_from_object(mask, TL_F32, op) : NULL;
    Py_XDECREF(mask);
    return t;
}

/* ---- value-reading protocols ---- */

static PyObject *
tensor_repr(PyObject *op)
{
    tl_tensor *t = tl_tensor_CAST(op);
    PyObject *arr = tl_tensor_to_numpy(t), *body = NULL, *res = NULL;
    char shape[128];
    if (arr == NULL) return NULL;
    tl_shape_str(t->shape, t->ndim, shape, sizeof shape);
    char grad[64] = "";                              /* PyTorch's tail: the node of a non-leaf, the flag of a leaf */
    if (t->grad_fn != NULL) snprintf(grad, sizeof grad, ", grad_fn=<%s>", tl_tensor_grad_fn_name(t));
    else if (t->requires_grad) snprintf(grad, sizeof grad, ", requires_grad=True");
    if ((body = PyObject_Str(arr)) != NULL)
        res = PyUnicode_FromFormat("tensor(%U, shape=%s, dtype=%s%s)", body, shape, tl_dtype_name(t->dtype), grad);
    Py_XDECREF(body);
    Py_DECREF(arr);
    return res;
}

/* The single value of a one-element tensor, as a Python float or int (a sync point). */
static PyObject *
scalar_value(tl_tensor *t, const char *what)
{
    if (tl_tensor_numel(t) != 1) {
        char s[128];
        tl_shape_str(t->shape, t->ndim, s, sizeof s);
        return PyErr_Format(PyExc_ValueError, "%s: only one-element tensors can be converted; shape is %s", what, s);
    }
    PyObject *arr = tl_tensor_to_numpy(t), *v;
    if (arr == NULL) return NULL;
    if (t->dtype == TL_I32) v = PyLong_FromLong(*(int *)PyArray_DATA((PyArrayObject *)arr));
    else if (t->dtype == TL_U8) v = PyLong_FromLong(*(unsigned char *)PyArray_DATA((PyArrayObject *)arr));
    else if (t->dtype == TL_F32) v = PyFloat_FromDouble(*(float *)PyArray_DATA((PyArrayObject *)arr));
    else {                                           /* float16/bfloat16: numpy's scalar, then a float */
        PyObject *sc = PyArray_GETITEM((PyArrayObject *)arr, PyArray_DATA((PyArrayObject *)arr));
        v = sc != NULL ? PyNumber_Float(sc) : NULL;
        Py_XDECREF(sc);
    }
    Py_DECREF(arr);
    return v;
}

static PyObject *
tensor_float(PyObject *op)
{
    PyObject *v = scalar_value(tl_tensor_CAST(op), "float()");
    if (v != NULL && !PyFloat_Check(v)) Py_SETREF(v, PyNumber_Float(v));
    return v;
}

static PyObject *
tensor_int(PyObject *op)
{
    PyObject *v = scalar_value(tl_tensor_CAST(op), "int()");
    if (v != NULL && !PyLong_Check(v)) Py_SETREF(v, PyNumber_Long(v));
    return v;
}

static int
tensor_bool(PyObject *op)
{
    PyObject *v = scalar_value(tl_tensor_CAST(op), "bool()");
    int r = v != NULL ? PyObject_IsTrue(v) : -1;
    Py_XDECREF(v);
    return r;
}

static PyObject *
tensor_numpy(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return tl_tensor_to_numpy(tl_tensor_CAST(op));
}

static PyObject *
tensor_array(PyObject *op, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dtype", "copy", NULL};
    PyObject *dtype = Py_None, *copy = Py_None, *arr;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:__array__", kw, &dtype, &copy)) return NULL;
    if ((arr = tl_tensor_to_numpy(tl_tensor_CAST(op))) == NULL || dtype == Py_None) return arr;
    PyObject *conv = PyObject_CallMethod(arr, "astype", "O", dtype);
    Py_DECREF(arr);
    return conv;
}

static PyObject *
tensor_tolist(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    PyObject *arr = tl_tensor_to_numpy(tl_tensor_CAST(op)), *res;
    if (arr == NULL) return NULL;
    res = PyObject_CallMethod(arr, "tolist", NULL);
    Py_DECREF(arr);
    return res;
}

static PyObject *
tensor_item(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return scalar_value(tl_tensor_CAST(op), "item()");
}

static PyObject *
tensor_reduce(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    PyObject *arr = tl_tensor_to_numpy(tl_tensor_CAST(op)), *mod = NULL, *fn = NULL, *res = NULL;
    if (arr != NULL && (mod = PyImport_ImportModule("tlgpu")) != NULL &&
        (fn = PyObject_GetAttrString(mod, "from_numpy")) != NULL)
        res = Py_BuildValue("O(O)", fn, arr);
    Py_XDECREF(fn);
    Py_XDECREF(mod);
    Py_XDECREF(arr);
    return res;
}

static const PyMethodDef io_methods[] = {
    {"to_numpy", tensor_numpy, METH_NOARGS, "Copy to a new numpy array (a sync point)."},
    {"numpy", tensor_numpy, METH_NOARGS, "Alias of to_numpy()."},
    {"__array__", (PyCFunction)(void (*)(void))tensor_array, METH_VARARGS | METH_KEYWORDS, "numpy interop."},
    {"tolist", tensor_tolist, METH_NOARGS, "Nested Python lists (a sync point)."},
    {"item", tensor_item, METH_NOARGS, "The value of a one-element tensor (a sync point)."},
    {"__reduce__", tensor_reduce, METH_NOARGS, "Pickle through numpy."},
    {NULL, NULL, 0, NULL},
};

static const PyType_Slot io_slots[] = {
    {Py_tp_repr, tensor_repr},
    {Py_nb_float, tensor_float},
    {Py_nb_int, tensor_int},
    {Py_nb_bool, tensor_bool},
    {0, NULL},
};

const tl_family tl_family_tensor_io = {NULL, io_methods, io_slots, NULL, NULL};
