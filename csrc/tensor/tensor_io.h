/* tensor_io.h: numpy in and out of a Tensor (tensor_io.c). GIL held; readers are sync points. */
#ifndef TL_TENSOR_IO_H
#define TL_TENSOR_IO_H
#include "tensor.h"

tl_tensor  *tl_tensor_from_object(PyObject *obj, int dtype, const char *op);       /* dtype -1: infer */
PyObject   *tl_tensor_to_numpy(tl_tensor *t);
int         tl_is_numpy(PyObject *obj);                                            /* ndarray or numpy scalar */
/* A numpy operand of an operator as a new tensor: tl_tensor_from_object's conversions, and bool as a float32
 * mask (what comparisons return), so `x * dones` takes gymnasium's bool arrays. */
tl_tensor  *tl_tensor_from_operand(PyObject *obj, const char *op);
#endif
