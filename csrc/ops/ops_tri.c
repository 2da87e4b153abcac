/* ops_tri.c: tril(diagonal=0) and triu(diagonal=0) over the last two dims of a batched float32 or int32
 * tensor (float16, bfloat16 and uint8 through float32/int32), one launch of kernels/tri.cl each; the backward applies the same mask to the gradient
 * (ROW_TRI, a row of tri_rows; iarg: diagonal, upper). */
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"
#include <limits.h>

static const tl_op_row ROW_TRI;   /* autograd rows (below) */

static PyObject *
tri(PyObject *x, int diagonal, int upper)
{
    static tl_kernel kh = TL_KERNEL("tri", "tl_tri_u32");
    const char *name = upper ? "triu" : "tril";
    tl_tensor *t = tl_tensor_CAST(x), *out, *ops[2];
    tl_layout L;
    if (t->ndim < 2) {
        char s[128];
        tl_shape_str(t->shape, t->ndim, s, sizeof s);
        return PyErr_Format(PyExc_ValueError, "%s: expected a tensor of at least 2 dims, got shape %s", name, s);
    }
    if (tl_dtype_size(t->dtype) != 4) {              /* float16/bfloat16/uint8: through float32/int32, exact */
        int wide = TL_IS_HALF(t->dtype) ? TL_F32 : TL_I32;
        PyObject *w = tl_convert(t, wide), *r = w != NULL ? tri(w, diagonal, upper) : NULL;
        Py_XDECREF(w);
        return tl_convert_steal(r, t->dtype);
    }
    if ((out = tl_tensor_empty(t->dtype, t->ndim, t->shape)) == NULL) return NULL;
    if (out->storage != NULL) {                      /* zero-size: enqueue nothing */
        cl_kernel k = tl_kernel_py(&kh);
        int rows = (int)t->shape[t->ndim - 2], cols = (int)t->shape[t->ndim - 1];
        ops[0] = out;
        ops[1] = t;
        tl_layout_make(&L, t->ndim, t->shape, ops, 2);
        const size_t sz[7] = {sizeof L, sizeof(cl_mem), sizeof(cl_mem), 4, 4, 4, 4};
        const void *v[7] = {&L, &out->storage->mem, &t->storage->mem, &rows, &cols, &diagonal, &upper};
        tl_storage *st[2] = {out->storage, t->storage};
        if (k == NULL || tl_set_args(k, 0, 7, sz, v) < 0 || tl_launch_1d(&kh, (size_t)L.n, st, 2, 1u) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    const int iarg[2] = {diagonal, upper};
    return tl_record1((PyObject *)out, &ROW_TRI, x, iarg, 2, NULL);
}

static int
tl_tri_backward(tl_node *nd, PyObject *grad, PyObject **grad_in)
{
    if (tl_wants_grad(nd, 0) && (grad_in[0] = tri(grad, nd->iarg[0], nd->iarg[1])) == NULL) return -1;
    return 0;
}

static PyObject *
tri_method(PyObject *self, PyObject *args, PyObject *kwargs, int upper)
{
    static char *kw[] = {"diagonal", NULL};
    PyObject *o = NULL;
    long long d = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, upper ? "|O:triu" : "|O:tril", kw, &o)) return NULL;
    if (o != NULL && (!PyIndex_Check(o) || ((d = PyLong_AsLongLong(o)) == -1 && PyErr_Occurred()))) {
        PyErr_Clear();
        return PyErr_Format(PyExc_TypeError, "%s: diagonal must be an int, got %s", upper ? "triu" : "tril",
                            Py_TYPE(o)->tp_name);
    }
    return tri(self, d < INT_MIN ? INT_MIN : d > INT_MAX ? INT_MAX : (int)d, upper);
}

static PyObject *
m_tril(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return tri_method(self, args, kwargs, 0);
}

static PyObject *
m_triu(PyObject *self, PyObject *args, PyObject *kwargs)
{
    return tri_method(self, args, kwargs, 1);
}

static const PyMethodDef tri_methods[] = {
    {"tril", (PyCFunction)(void (*)(void))m_tril, METH_VARARGS | METH_KEYWORDS,
     "tril(diagonal=0): zeros above the diagonal-th diagonal of the last two dims (batched, differentiable)."},
    {"triu", (PyCFunction)(void (*)(void))m_triu, METH_VARARGS | METH_KEYWORDS,
     "triu(diagonal=0): zeros below the diagonal-th diagonal of the last two dims (batched, differentiable)."},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_TRI = {"TriBackward", tl_tri_backward};
static const tl_op_row *const tri_rows[] = {&ROW_TRI, NULL};

const tl_family tl_family_tri = {NULL, tri_methods, NULL, NULL, "tril triu", .rows = tri_rows};
