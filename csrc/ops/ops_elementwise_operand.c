/* ops_elementwise_operand.c: the operands of an elementwise op and its result dtype, below the dispatch of
 * ops_elementwise.c. An operand is a Tensor, a Python int or float (kept as a scalar kernel argument, never a
 * tensor), or numpy data, which is uploaded here so that it stays on the device. Integer tensors keep int32
 * math only for the ops with an int32 kernel; everything else computes in float32. */
#include "ops_elementwise_operand.h"

/* Ops with an int32 kernel (tl_ew_i32). Every other op computes in float32: int32 operands are cast first
 * (true division, pow, exp, ... of ints give float32, like torch). */
static const unsigned char EW_INT[TL_EW_COUNT] = {
    [TL_EW_ADD] = 1, [TL_EW_SUB] = 1, [TL_EW_MUL] = 1, [TL_EW_FLOORDIV] = 1, [TL_EW_MOD] = 1, [TL_EW_MAXIMUM] = 1,
    [TL_EW_MINIMUM] = 1, [TL_EW_LT] = 1, [TL_EW_LE] = 1, [TL_EW_GT] = 1, [TL_EW_GE] = 1, [TL_EW_EQ] = 1,
    [TL_EW_NE] = 1, [TL_EW_NEG] = 1, [TL_EW_ABS] = 1, [TL_EW_SIGN] = 1, [TL_EW_RELU] = 1, [TL_EW_SQUARE] = 1,
    [TL_EW_CLAMP] = 1, [TL_EW_COPY] = 1, [TL_EW_POW] = 1, [TL_EW_CEIL] = 1, [TL_EW_FLOOR] = 1, [TL_EW_ROUND] = 1,
    [TL_EW_TRUNC] = 1, [TL_EW_FMOD] = 1,
};

int
tl_ew_op_has_i32(int op)
{
    return op >= 0 && op < TL_EW_COUNT && EW_INT[op];
}

int
tl_ew_operand_from(PyObject *x, const char *name, tl_ew_operand *out, PyObject **held)
{
    *out = (tl_ew_operand){NULL, 0.0f, 0, 1, 1};
    *held = NULL;
    if (x == NULL) return 0;
    if (tl_tensor_check(x)) {
        out->t = tl_tensor_CAST(x);
        return 0;
    }
    if (PyLong_Check(x)) {
        int overflow = 0;
        long long v = PyLong_AsLongLongAndOverflow(x, &overflow);
        if (v == -1 && PyErr_Occurred()) return -1;
        out->fits = !overflow && v >= INT32_MIN && v <= INT32_MAX;
        out->ivalue = out->fits ? (int)v : 0;
        double d = PyLong_AsDouble(x);
        if (d == -1.0 && PyErr_Occurred()) return -1;
        out->value = (float)d;
        return 0;
    }
    if (PyFloat_Check(x)) {
        out->is_int = 0;
        out->value = (float)PyFloat_AS_DOUBLE(x);
        return 0;
    }
    if (tl_is_numpy(x)) {
        if ((out->t = tl_tensor_from_operand(x, name)) == NULL) return -1;
        *held = (PyObject *)out->t;
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "%s: expected a Tensor, a numpy array or a Python number, got %s", name,
                 Py_TYPE(x)->tp_name);
    return -1;
}

int
tl_ew_operand_check(PyObject *x)
{
    return tl_tensor_check(x) || PyFloat_Check(x) || PyLong_Check(x) || tl_is_numpy(x);
}

/* PyTorch's result dtype: floating tensors win over integer ones (float16 with float16 stays float16; two
 * floating dtypes that differ give float32), uint8 with int32 gives int32; Python scalars do not promote
 * a tensor's dtype within its kind, a float scalar makes integer tensors float32; ops without an integer
 * form give float32 for integer tensors. */
int
tl_ew_result_dtype(int op, const tl_ew_operand *o, int n)
{
    int fl = -1, in = -1, fscalar = 0;
    for (int i = op == TL_EW_WHERE; i < n; i++) {    /* where's condition (a mask) does not promote */
        const int dt = o[i].t != NULL ? o[i].t->dtype : -1;
        if (dt < 0) fscalar |= !o[i].is_int;
        else if (TL_IS_FLOAT(dt)) fl = fl < 0 || fl == dt ? dt : TL_F32;
        else in = in < 0 || in == dt ? dt : TL_I32;
    }
    if (fl >= 0) return fl;
    return in < 0 || fscalar || !tl_ew_op_has_i32(op) ? TL_F32 : in;
}
