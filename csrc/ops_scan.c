/* ops_scan.c: cumsum along one axis, float32 and int32, and its backward (a cumsum of the gradient from the
 * other end). Its graph node is an elementwise node tagged TL_EW_CUMSUM, whose backward ops_elementwise.c
 * dispatches back here, so the op needs no row of its own in autograd.c's op table. */
#include "ops.h"
#include "ops_common.h"
#include "autograd.h"
#include <limits.h>

PyObject *
tl_cumsum(PyObject *x, int dim, int reverse)
{
    static tl_kernel kf = TL_KERNEL("scan", "tl_cumsum_f32"), ki = TL_KERNEL("scan", "tl_cumsum_i32");
    tl_tensor *t = tl_tensor_CAST(x), *src = NULL, *out = NULL;
    int nd = t->ndim, rank = nd > 0 ? nd : 1;        /* a 0-d tensor takes dim 0 or -1, like torch */
    if (dim < -rank || dim >= rank) {
        char s[128];
        tl_shape_str(t->shape, t->ndim, s, sizeof s);
        return PyErr_Format(PyExc_IndexError, "cumsum: dim %d is out of range for a tensor of shape %s", dim, s);
    }
    if (dim < 0) dim += rank;
    if ((out = tl_tensor_empty(t->dtype, nd, t->shape)) == NULL) return NULL;
    if (out->storage != NULL) {                      /* zero-size: enqueue nothing */
        int len = nd > 0 ? (int)t->shape[dim] : 1, inner = 1, outer = 1;
        for (int d = 0; d < nd; d++) {
            if (d < dim) outer *= (int)t->shape[d];
            if (d > dim) inner *= (int)t->shape[d];
        }
        int lines = outer * inner, rev = reverse != 0, off;
        tl_kernel *kh = t->dtype == TL_I32 ? &ki : &kf;
        cl_kernel k = tl_kernel_py(kh);
        if (k == NULL || (src = tl_tensor_contiguous(t)) == NULL) goto fail;
        off = (int)src->offset;
        const size_t sz[7] = {4, 4, 4, 4, sizeof(cl_mem), sizeof(cl_mem), 4};
        const void *v[7] = {&lines, &len, &inner, &rev, &out->storage->mem, &src->storage->mem, &off};
        tl_storage *st[2] = {out->storage, src->storage};
        if (tl_set_args(k, 0, 7, sz, v) < 0 || tl_launch_1d(kh, (size_t)lines, st, 2, 1u) < 0) goto fail;
        Py_CLEAR(src);
    }
    PyObject *ins[3] = {x, NULL, NULL};
    if (tl_autograd_wanted(ins, 1)) {
        tl_node *n = tl_node_new(TL_OP_EW, ins, 3);  /* three edges: the elementwise backward reads them all */
        if (n == NULL) goto fail;
        n->iarg[0] = TL_EW_CUMSUM;
        for (int i = 1; i <= 4; i++) n->iarg[i] = -1;
        n->iarg[5] = dim;
        tl_node_attach(n, out);
    }
    return (PyObject *)out;
fail:
    Py_XDECREF(src);
    Py_DECREF(out);
    return NULL;
}

static PyObject *
m_cumsum(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"dim", "axis", NULL};
    PyObject *dim = NULL, *axis = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:cumsum", kw, &dim, &axis)) return NULL;
    if ((dim == NULL) == (axis == NULL))
        return PyErr_Format(PyExc_TypeError, "cumsum: give the axis to sum along, as dim (or axis), once");
    long d = PyLong_AsLong(dim != NULL ? dim : axis);
    if (d == -1 && PyErr_Occurred()) return NULL;
    return tl_cumsum(self, d < INT_MIN ? INT_MIN : d > INT_MAX ? INT_MAX : (int)d, 0);
}

static const PyMethodDef scan_methods[] = {
    {"cumsum", (PyCFunction)(void (*)(void))m_cumsum, METH_VARARGS | METH_KEYWORDS,
     "cumsum(dim): inclusive prefix sums along dim (float32 differentiable; int32 wraps like numpy's int32)."},
    {NULL, NULL, 0, NULL},
};

const tl_family tl_family_scan = {NULL, scan_methods, NULL, NULL, "cumsum"};
