/* ops_elementwise_operand.h: what an elementwise op takes as an operand (a Tensor, a Python number, a numpy
 * array or scalar, which is uploaded) and the dtype of its result (PyTorch's promotion rules), for the
 * dispatch in ops_elementwise.c (ops_elementwise_operand.c). */
#ifndef TL_OPS_ELEMENTWISE_OPERAND_H
#define TL_OPS_ELEMENTWISE_OPERAND_H
#include "ew_launch.h"

/* x (NULL: an absent operand) as an operand of op `name`. A numpy array or scalar is uploaded (float64 ->
 * float32, int64 -> int32) into a new tensor returned in *held (else NULL). 0, or -1 with an exception set. */
int tl_ew_operand_from(PyObject *x, const char *name, tl_ew_operand *out, PyObject **held);
int tl_ew_operand_check(PyObject *x);            /* 1 if tl_ew_operand_from takes x (no exception set) */
int tl_ew_op_has_i32(int op);                    /* 1 if op has an int32 kernel (tl_ew_i32) */
/* The result dtype of op over its first n operands. */
int tl_ew_result_dtype(int op, const tl_ew_operand *o, int n);
#endif
