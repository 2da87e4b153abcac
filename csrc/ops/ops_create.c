/* ops_create.c: tensor creation: tensor() and from_numpy() (the conversions are tl_tensor_from_object's,
 * tensor/tensor_io.c), zeros/ones/full/empty, arange and linspace. Uploads go to the transfer queue and
 * return at once; the first compute command that reads the tensor waits for them. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "ops_common.h"
#include <math.h>
#include <numpy/arrayobject.h>

static PyObject *
fn_tensor(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"data", "dtype", "requires_grad", NULL};
    PyObject *data, *dtype = Py_None;
    int rg = 0, td;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Op:tensor", kw, &data, &dtype, &rg)) return NULL;
    if ((td = tl_parse_dtype_all(dtype, -1)) == -1 && PyErr_Occurred()) return NULL;
    tl_tensor *t = tl_tensor_from_object(data, td, "tensor");
    if (t != NULL && rg && tl_require_grad_new("tensor", t) < 0) Py_CLEAR(t);
    return (PyObject *)t;
}

static PyObject *
fn_from_numpy(PyObject *Py_UNUSED(m), PyObject *arr)
{
    if (!PyArray_Check(arr)) return PyErr_Format(PyExc_TypeError, "from_numpy: expected a numpy array, got %s",
                                                 Py_TYPE(arr)->tp_name);
    return (PyObject *)tl_tensor_from_object(arr, -1, "from_numpy");
}

/* zeros/ones/full/empty share this: shape from *args, dtype= keyword, optional fill value. */
static PyObject *
make_filled(PyObject *args, PyObject *kwargs, const char *op, int has_fill, double fill, PyObject *fill_obj)
{
    static char *kw[] = {"dtype", "requires_grad", NULL};
    PyObject *dtype = Py_None, *empty = NULL;
    int ndim, rg = 0, td;
    Py_ssize_t shape[TL_MAX_DIMS];
    if ((empty = PyTuple_New(0)) == NULL) return NULL;
    int ok = PyArg_ParseTupleAndKeywords(empty, kwargs, "|Op", kw, &dtype, &rg);
    Py_DECREF(empty);
    if (!ok || tl_parse_shape(op, args, &ndim, shape) < 0) return NULL;
    int dflt = fill_obj != NULL && PyLong_Check(fill_obj) && !PyBool_Check(fill_obj) ? TL_I32 : TL_F32;
    if ((td = tl_parse_dtype_all(dtype, dflt)) < 0) return NULL;
    if (has_fill && td == TL_I32 && tl_check_int32_value(op, fill) < 0) return NULL;
    tl_tensor *t = tl_tensor_empty(td, ndim, shape);
    if (t != NULL && rg && tl_require_grad_new(op, t) < 0) Py_CLEAR(t);      /* before the fill: nothing wasted */
    if (t != NULL && has_fill && tl_tensor_fill(t, fill) < 0) Py_CLEAR(t);
    return (PyObject *)t;
}

static PyObject *
fn_zeros(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    return make_filled(args, kwargs, "zeros", 1, 0.0, NULL);
}

static PyObject *
fn_ones(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    return make_filled(args, kwargs, "ones", 1, 1.0, NULL);
}

static PyObject *
fn_empty(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    return make_filled(args, kwargs, "empty", 0, 0.0, NULL);
}

static PyObject *
fn_full(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    PyObject *shape_args = NULL, *res;
    if (PyTuple_GET_SIZE(args) != 2)
        return PyErr_Format(PyExc_TypeError, "full(shape, value, dtype=None): takes 2 positional arguments");
    PyObject *value = PyTuple_GET_ITEM(args, 1);
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) return NULL;
    if ((shape_args = PyTuple_Pack(1, PyTuple_GET_ITEM(args, 0))) == NULL) return NULL;
    res = make_filled(shape_args, kwargs, "full", 1, v, value);
    Py_DECREF(shape_args);
    return res;
}

static PyObject *
fn_arange(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"start", "stop", "step", "dtype", NULL};
    static tl_kernel kf = TL_KERNEL("elementwise", "tl_arange_f32"), ki = TL_KERNEL("elementwise", "tl_arange_i32");
    PyObject *a = NULL, *b = Py_None, *c = NULL, *dtype = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOO:arange", kw, &a, &b, &c, &dtype)) return NULL;
    PyObject *start_o = b == Py_None ? NULL : a, *stop_o = b == Py_None ? a : b;
    int all_int = PyLong_Check(stop_o) && (start_o == NULL || PyLong_Check(start_o)) && (c == NULL || PyLong_Check(c));
    double start = start_o ? PyFloat_AsDouble(start_o) : 0.0, stop = PyFloat_AsDouble(stop_o);
    double step = c ? PyFloat_AsDouble(c) : 1.0;
    if (PyErr_Occurred()) return NULL;
    if (step == 0.0) return PyErr_Format(PyExc_ValueError, "arange: step must not be zero");
    int td = tl_parse_dtype(dtype, all_int ? TL_I32 : TL_F32);
    if (td < 0) return NULL;
    if (!isfinite(start) || !isfinite(stop) || !isfinite(step))   /* no length, or an infinite one */
        return PyErr_Format(PyExc_ValueError, "arange: cannot compute the length of arange(%R, %R, %R): the "
                            "bounds and step must be finite", start_o ? start_o : Py_None, stop_o, c ? c : Py_None);
    double count = ceil((stop - start) / step);
    if (count > (double)INT32_MAX) {
        char num[64];
        snprintf(num, sizeof num, "%.17g", count);
        return PyErr_Format(PyExc_ValueError, "arange(%R, %R, %R): %s elements; at most 2**31-1 are supported",
                            start_o ? start_o : Py_None, stop_o, c ? c : Py_None, num);
    }
    Py_ssize_t n = count > 0 ? (Py_ssize_t)count : 0;
    if (td == TL_I32 && (start != trunc(start) || step != trunc(step)))   /* int32 steps would truncate to 0 */
        return PyErr_Format(PyExc_ValueError, "arange(%R, %R, %R, dtype=int32): start and step must be integers",
                            start_o ? start_o : Py_None, stop_o, c ? c : Py_None);
    if (td == TL_I32 && n > 0 &&                     /* the kernel computes start + i*step in int32 */
        (tl_check_int32_value("arange", start) < 0 || tl_check_int32_value("arange", step) < 0 ||
         tl_check_int32_value("arange", start + (double)(n - 1) * step) < 0))
        return NULL;
    tl_tensor *t = tl_tensor_empty(td, 1, &n);
    if (t == NULL || n == 0) return (PyObject *)t;
    tl_kernel *kh = td == TL_I32 ? &ki : &kf;
    cl_kernel k = tl_kernel_py(kh);
    int n32 = (int)n, is = (int)start, ist = (int)step;
    float fs = (float)start, fst = (float)step;
    const size_t sz[4] = {sizeof n32, sizeof(cl_mem), 4, 4};
    const void *v[4] = {&n32, &t->storage->mem, td == TL_I32 ? (void *)&is : (void *)&fs,
                        td == TL_I32 ? (void *)&ist : (void *)&fst};
    if (k == NULL || tl_set_args(k, 0, 4, sz, v) < 0 || tl_launch_1d(kh, (size_t)n, &t->storage, 1, 1u) < 0)
        Py_CLEAR(t);
    return (PyObject *)t;
}

/* linspace(start, end, steps, dtype=None): float32, `steps` points from start to end inclusive. */
static PyObject *
fn_linspace(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"start", "end", "steps", "dtype", NULL};
    static tl_kernel kh = TL_KERNEL("elementwise", "tl_linspace_f32");
    double start, end;
    Py_ssize_t n;
    PyObject *dtype = Py_None, *a, *b, *c;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|O:linspace", kw, &a, &b, &c, &dtype)) return NULL;
    start = PyFloat_AsDouble(a);
    end = PyErr_Occurred() ? 0.0 : PyFloat_AsDouble(b);
    if (PyErr_Occurred())
        return PyErr_Format(PyExc_TypeError, "linspace(%R, %R, %R): start and end must be numbers", a, b, c);
    if (!PyLong_Check(c) || ((n = PyLong_AsSsize_t(c)) == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return PyErr_Format(PyExc_TypeError, "linspace(%R, %R, %R): steps must be an int", a, b, c);
    }
    int td = tl_parse_dtype(dtype, TL_F32);
    if (td < 0) return NULL;
    if (td != TL_F32) return PyErr_Format(PyExc_TypeError, "linspace: dtype must be float32");
    if (n < 0 || n > INT32_MAX)
        return PyErr_Format(PyExc_ValueError, "linspace: steps must be in [0, 2**31-1], got %zd", n);
    tl_tensor *t = tl_tensor_empty(TL_F32, 1, &n);
    if (t == NULL || n == 0) return (PyObject *)t;
    cl_kernel k = tl_kernel_py(&kh);
    int n32 = (int)n;
    float fs = (float)start, fe = (float)(n == 1 ? start : end);
    float fst = n > 1 ? (float)((end - start) / (double)(n - 1)) : 0.0f;
    const size_t sz[5] = {sizeof n32, sizeof(cl_mem), 4, 4, 4};
    const void *v[5] = {&n32, &t->storage->mem, &fs, &fe, &fst};
    if (k == NULL || tl_set_args(k, 0, 5, sz, v) < 0 || tl_launch_1d(&kh, (size_t)n, &t->storage, 1, 1u) < 0)
        Py_CLEAR(t);
    return (PyObject *)t;
}

static const PyMethodDef create_functions[] = {
    {"tensor", TL_KW(fn_tensor), "tensor(data, dtype=None, requires_grad=False): copy data to the device."},
    {"from_numpy", fn_from_numpy, METH_O, "from_numpy(array): copy a numpy array to the device."},
    {"zeros", TL_KW(fn_zeros), "zeros(*shape, dtype=None)"},
    {"ones", TL_KW(fn_ones), "ones(*shape, dtype=None)"},
    {"empty", TL_KW(fn_empty), "empty(*shape, dtype=None): uninitialised."},
    {"full", TL_KW(fn_full), "full(shape, value, dtype=None)"},
    {"arange", TL_KW(fn_arange), "arange([start,] stop[, step], dtype=None)"},
    {"linspace", TL_KW(fn_linspace), "linspace(start, end, steps, dtype=None): float32, end included."},
    {NULL, NULL, 0, NULL},
};

const tl_family tl_family_create = {create_functions, NULL, NULL, NULL, NULL};
