/* ops_scan.c: cumsum along one axis, float32 and int32 (float16/bfloat16 accumulate in float32; uint8 gives
 * int32, as torch's int64), and its backward (a cumsum of the gradient from the
 * other end; ROW_CUMSUM, a row of this family's scan_rows). */
#include "ops.h"
#include "ops_common.h"
#include "autograd.h"
#include <limits.h>

static const tl_op_row ROW_CUMSUM;   /* autograd rows (below) */

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
    if (TL_IS_HALF(t->dtype) || t->dtype == TL_U8) {   /* halves: in float32, back to the dtype; uint8 -> int32 */
        PyObject *w = tl_convert(t, t->dtype == TL_U8 ? TL_I32 : TL_F32), *r = w ? tl_cumsum(w, dim, reverse) : NULL;
        Py_XDECREF(w);
        return t->dtype == TL_U8 ? r : tl_convert_steal(r, t->dtype);
    }
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
    if (tl_autograd_wanted(&x, 1)) {
        tl_node *n = tl_node_new(&ROW_CUMSUM, &x, 1);
        if (n == NULL) goto fail;
        n->iarg[0] = dim;
        tl_node_attach(n, out);
    }
    return (PyObject *)out;
fail:
    Py_XDECREF(src);
    Py_DECREF(out);
    return NULL;
}

/* d(cumsum x)/dx: each input feeds every output at or after it, so the gradient is g summed from the end. */
static int
tl_cumsum_backward(tl_node *nd, PyObject *grad, PyObject **grad_in)
{
    if (tl_wants_grad(nd, 0) && (grad_in[0] = tl_cumsum(grad, nd->iarg[0], 1)) == NULL) return -1;
    return 0;
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

static const tl_op_row ROW_CUMSUM = {"CumsumBackward", tl_cumsum_backward};
static const tl_op_row *const scan_rows[] = {&ROW_CUMSUM, NULL};

const tl_family tl_family_scan = {NULL, scan_methods, NULL, NULL, "cumsum", .rows = scan_rows};
