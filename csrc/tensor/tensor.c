/* tensor.c: the Tensor heap type: lifetime (storage refs, GC slots for .grad), views, contiguity checks,
 * shape attributes and the methods that read no values. Numpy in/out and the protocols that read values
 * (repr, float, int, bool, item, pickling) are tensor_io.c's; copies are ops_common.c's. A tensor's grad_fn
 * is an opaque node here: the autograd engine installs the two node operations tensor/ needs. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#define NO_IMPORT_ARRAY
#include "tensor.h"
#include "state.h"
#include "stream.h"
#include <numpy/arrayobject.h>
#include <structmember.h>

static tl_node_ops node_ops;

void
tl_tensor_set_node_ops(const tl_node_ops *ops)
{
    node_ops = *ops;
}

const char *
tl_tensor_grad_fn_name(const tl_tensor *t)
{
    return t->grad_fn != NULL ? node_ops.name(t->grad_fn) : NULL;
}

static const char *const DTYPE_NAME[TL_NDTYPES] = {"float32", "int32", "float16", "bfloat16", "uint8"};
static const unsigned char DTYPE_SIZE[TL_NDTYPES] = {4, 4, 2, 2, 1};

const char *
tl_dtype_name(int dtype)
{
    return dtype >= 0 && dtype < TL_NDTYPES ? DTYPE_NAME[dtype] : "?";
}

size_t
tl_dtype_size(int dtype)
{
    return DTYPE_SIZE[dtype];
}

/* bfloat16 is ml_dtypes' user dtype: its numpy type number is known only once ml_dtypes is imported (at the
 * first use here). 0: not looked up yet; -1: ml_dtypes is missing. */
static int bf16_num;

static int
bf16_type_num(void)
{
    if (bf16_num != 0) return bf16_num;
    PyObject *mod = PyImport_ImportModule("ml_dtypes"), *typ = NULL;
    PyArray_Descr *d = NULL;
    if (mod != NULL && (typ = PyObject_GetAttrString(mod, "bfloat16")) != NULL && PyArray_DescrConverter(typ, &d))
        bf16_num = d->type_num;
    else
        bf16_num = -1;
    PyErr_Clear();                                   /* missing ml_dtypes: bfloat16 is refused where asked for */
    Py_XDECREF(d);
    Py_XDECREF(typ);
    Py_XDECREF(mod);
    return bf16_num;
}

PyObject *
tl_dtype_descr(int dtype)
{
    static const int num[TL_NDTYPES] = {NPY_FLOAT32, NPY_INT32, NPY_FLOAT16, -1, NPY_UINT8};
    if (dtype == TL_BF16) {
        if (bf16_type_num() < 0)
            return PyErr_Format(PyExc_TypeError, "bfloat16 needs the ml_dtypes package (pip install ml_dtypes)");
        return (PyObject *)PyArray_DescrFromType(bf16_num);
    }
    return (PyObject *)PyArray_DescrFromType(num[dtype]);
}

int
tl_dtype_of_typenum(int type_num)
{
    switch (type_num) {
    case NPY_FLOAT32: return TL_F32;
    case NPY_INT32: return TL_I32;
    case NPY_FLOAT16: return TL_F16;
    case NPY_UINT8: return TL_U8;
    default: break;
    }
    if (PyArray_EquivTypenums(type_num, NPY_INT32)) return TL_I32;    /* NPY_LONG where long is 32 bits */
    return type_num >= NPY_USERDEF && type_num == bf16_type_num() ? TL_BF16 : -1;
}

void
tl_shape_str(const Py_ssize_t *shape, int ndim, char *out, size_t cap)
{
    size_t k = (size_t)snprintf(out, cap, "(");
    for (int d = 0; d < ndim && k < cap; d++)
        k += (size_t)snprintf(out + k, cap - k, d == 0 ? "%zd" : ", %zd", shape[d]);
    if (k < cap) snprintf(out + k, cap - k, ndim == 1 ? ",)" : ")");
}

int
tl_tensor_check(PyObject *op)
{
    tl_state *S = tl_state_get();
    return S != NULL && PyObject_TypeCheck(op, S->tensor_type);
}

Py_ssize_t
tl_tensor_numel(const tl_tensor *t)
{
    Py_ssize_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

int
tl_tensor_is_contig(const tl_tensor *t)
{
    if (tl_tensor_numel(t) == 0) return 1;           /* numpy's rule: no element is out of place */
    Py_ssize_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != expect) return 0;
        expect *= t->shape[d];
    }
    return 1;
}

static tl_tensor *
alloc_object(void)
{
    tl_state *S = tl_state_get();
    tl_tensor *t = (tl_tensor *)S->tensor_type->tp_alloc(S->tensor_type, 0);
    return t;                                        /* tp_alloc zero-fills */
}

tl_tensor *
tl_tensor_empty(int dtype, int ndim, const Py_ssize_t *shape)
{
    tl_err err = {0};
    tl_tensor *t;
    Py_ssize_t n = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return (tl_tensor *)PyErr_Format(PyExc_ValueError, "negative dimension %zd", shape[d]);
        if (shape[d] > 0 && n > INT32_MAX / shape[d])
            return (tl_tensor *)PyErr_Format(PyExc_ValueError, "tensor of more than 2**31-1 elements");
        n *= shape[d];
    }
    if ((t = alloc_object()) == NULL) return NULL;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = ndim - 1, s = 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->strides[d] = s;
        s *= (int)(shape[d] > 0 ? shape[d] : 1);
    }
    if (n > 0 && tl_storage_new((size_t)n * tl_dtype_size(dtype), &t->storage, &err) != TL_OK) {
        Py_DECREF(t);
        tl_raise(&err);
        return NULL;
    }
    return t;
}

tl_tensor *
tl_tensor_from_storage(tl_storage *s, int dtype, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                       Py_ssize_t offset)
{
    tl_tensor *t = alloc_object();
    Py_ssize_t n = 1;
    if (t == NULL) return NULL;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) { t->shape[d] = shape[d]; t->strides[d] = strides[d]; n *= shape[d]; }
    t->offset = n > 0 ? offset : 0;
    if (n > 0 && s != NULL) {
        t->storage = s;
        tl_storage_retain(s);
    }
    return t;
}

tl_tensor *
tl_tensor_view(tl_tensor *base, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides, Py_ssize_t offset)
{
    return tl_tensor_from_storage(base->storage, base->dtype, ndim, shape, strides, offset);
}

/* ---- type slots ---- */

static int
tensor_traverse(PyObject *op, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(op));
    Py_VISIT(tl_tensor_CAST(op)->grad);
    return 0;
}

static int
tensor_clear(PyObject *op)
{
    Py_CLEAR(tl_tensor_CAST(op)->grad);
    return 0;
}

static void
tensor_dealloc(PyObject *op)
{
    tl_tensor *t = tl_tensor_CAST(op);
    PyTypeObject *tp = Py_TYPE(op);
    PyObject_GC_UnTrack(op);
    if (t->weakreflist != NULL) PyObject_ClearWeakRefs(op);
    tensor_clear(op);
    if (t->grad_fn != NULL) node_ops.release(t->grad_fn);
    tl_storage *s = t->storage;
    if (s != NULL && atomic_load(&s->refs) == 1 && tl_stream_pending(s)) {
        Py_BEGIN_ALLOW_THREADS                       /* the last release waits for an in-flight transfer */
        tl_storage_release(s);
        Py_END_ALLOW_THREADS
    } else {
        tl_storage_release(s);
    }
    tp->tp_free(op);
    Py_DECREF(tp);
}

static Py_ssize_t
tensor_len(PyObject *op)
{
    tl_tensor *t = tl_tensor_CAST(op);
    if (t->ndim == 0) {
        PyErr_SetString(PyExc_TypeError, "len() of a 0-d tensor");
        return -1;
    }
    return t->shape[0];
}

/* ---- methods ---- */

static PyObject *
tensor_numel_m(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(tl_tensor_numel(tl_tensor_CAST(op)));
}

static PyObject *
tensor_is_contiguous(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(tl_tensor_is_contig(tl_tensor_CAST(op)));
}

static PyObject *
tensor_stride(PyObject *op, PyObject *Py_UNUSED(ignored))
{
    tl_tensor *t = tl_tensor_CAST(op);
    PyObject *tup = PyTuple_New(t->ndim);
    for (int d = 0; tup != NULL && d < t->ndim; d++) PyTuple_SET_ITEM(tup, d, PyLong_FromSsize_t(t->strides[d]));
    return tup;
}

/* ---- attributes ---- */

static PyObject *
get_shape(PyObject *op, void *Py_UNUSED(c))
{
    tl_tensor *t = tl_tensor_CAST(op);
    PyObject *tup = PyTuple_New(t->ndim);
    for (int d = 0; tup != NULL && d < t->ndim; d++) PyTuple_SET_ITEM(tup, d, PyLong_FromSsize_t(t->shape[d]));
    return tup;
}

static PyObject *
get_dtype(PyObject *op, void *Py_UNUSED(c))
{
    return tl_dtype_descr(tl_tensor_CAST(op)->dtype);
}

static PyObject *
get_ndim(PyObject *op, void *Py_UNUSED(c))
{
    return PyLong_FromLong(tl_tensor_CAST(op)->ndim);
}

static PyObject *
get_version(PyObject *op, void *Py_UNUSED(c))
{
    tl_tensor *t = tl_tensor_CAST(op);
    return PyLong_FromUnsignedLongLong(t->storage ? tl_storage_version(t->storage) : 0);
}

static PyObject *
get_grad(PyObject *op, void *Py_UNUSED(c))
{
    tl_tensor *t = tl_tensor_CAST(op);
    return Py_NewRef(t->grad != NULL ? t->grad : Py_None);
}

static int
set_grad(PyObject *op, PyObject *v, void *Py_UNUSED(c))
{
    tl_tensor *t = tl_tensor_CAST(op);
    if (v != NULL && v != Py_None && !tl_tensor_check(v)) {
        PyErr_SetString(PyExc_TypeError, "grad must be a Tensor or None");
        return -1;
    }
    Py_XSETREF(t->grad, v == NULL || v == Py_None ? NULL : Py_NewRef(v));
    return 0;
}

static PyObject *
get_requires_grad(PyObject *op, void *Py_UNUSED(c))
{
    return PyBool_FromLong(tl_tensor_CAST(op)->requires_grad);
}

int
tl_tensor_set_requires_grad(tl_tensor *t, int on)
{
    if (on && !TL_IS_FLOAT(t->dtype)) {
        PyErr_Format(PyExc_TypeError, "requires_grad: only floating tensors (float32, float16, bfloat16) can "
                     "require gradients (got %s)", tl_dtype_name(t->dtype));
        return -1;
    }
    if (!on && t->grad_fn != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "requires_grad: cannot be turned off on a non-leaf tensor; use detach()");
        return -1;
    }
    t->requires_grad = on;
    return 0;
}

static int
set_requires_grad(PyObject *op, PyObject *v, void *Py_UNUSED(c))
{
    int on = v != NULL ? PyObject_IsTrue(v) : 0;
    return on < 0 ? -1 : tl_tensor_set_requires_grad(tl_tensor_CAST(op), on);
}

static PyObject *
get_is_leaf(PyObject *op, void *Py_UNUSED(c))
{
    return PyBool_FromLong(tl_tensor_CAST(op)->grad_fn == NULL);
}

static const PyGetSetDef tensor_getset[] = {
    {"shape", get_shape, NULL, "Tuple of dimension sizes.", NULL},
    {"dtype", get_dtype, NULL, "numpy dtype: float32, int32, float16, bfloat16 (ml_dtypes) or uint8.", NULL},
    {"ndim", get_ndim, NULL, "Number of dimensions.", NULL},
    {"_version", get_version, NULL, "The storage's in-place version counter.", NULL},
    {"grad", get_grad, set_grad, "Accumulated gradient (leaves only) or None.", NULL},
    {"requires_grad", get_requires_grad, set_requires_grad, "Whether autograd records ops on it.", NULL},
    {"is_leaf", get_is_leaf, NULL, "True unless the tensor was produced by a recorded op.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static const PyMethodDef tensor_methods[] = {
    {"numel", tensor_numel_m, METH_NOARGS, "Number of elements."},
    {"is_contiguous", tensor_is_contiguous, METH_NOARGS, "True if row-major without gaps."},
    {"stride", tensor_stride, METH_NOARGS, "Strides in elements."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef tensor_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(tl_tensor, weakreflist), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static const PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_traverse, tensor_traverse},
    {Py_tp_clear, tensor_clear},
    {Py_mp_length, tensor_len},
    {Py_tp_members, tensor_members},
    {Py_tp_doc, "A tensor in OpenCL device memory (float32, int32, float16, bfloat16 or uint8)."},
    {0, NULL},
};

const tl_family tl_family_tensor = {NULL, tensor_methods, tensor_slots, tensor_getset, NULL};
