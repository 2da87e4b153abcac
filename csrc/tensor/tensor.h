/* tensor.h: the Python Tensor type (Python-aware from here up). A tensor is a strided view (shape,
 * strides and offset in elements) of a refcounted storage; views share the storage and its version
 * counter. A tensor with a zero in its shape has storage == NULL. */
#ifndef TL_TENSOR_H
#define TL_TENSOR_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "storage.h"
#include "../kernels/ew_ops.h"

enum { TL_F32 = 0, TL_I32 = 1 };

typedef struct tl_tensor {
    PyObject_HEAD
    tl_storage *storage;
    int dtype, ndim;
    Py_ssize_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS], offset;
    PyObject *grad;                  /* Tensor or NULL */
    struct tl_node *grad_fn;         /* autograd node (autograd.c), NULL for leaves */
    int requires_grad;
    PyObject *weakreflist;
} tl_tensor;

#define tl_tensor_CAST(op) ((tl_tensor *)(op))

int         tl_tensor_check(PyObject *op);
Py_ssize_t  tl_tensor_numel(const tl_tensor *t);
int         tl_tensor_is_contig(const tl_tensor *t);                           /* zero-size: 1 */
int         tl_tensor_set_requires_grad(tl_tensor *t, int on);                 /* -1 + exception if refused */
tl_tensor  *tl_tensor_empty(int dtype, int ndim, const Py_ssize_t *shape);        /* new, contiguous */
tl_tensor  *tl_tensor_view(tl_tensor *base, int ndim, const Py_ssize_t *shape, const Py_ssize_t *strides,
                           Py_ssize_t offset);
tl_tensor  *tl_tensor_from_storage(tl_storage *s, int dtype, int ndim, const Py_ssize_t *shape,
                                   const Py_ssize_t *strides, Py_ssize_t offset);      /* retains s */
tl_tensor  *tl_tensor_contiguous(tl_tensor *t);                                    /* new ref, maybe t */
tl_tensor  *tl_tensor_from_object(PyObject *obj, int dtype, const char *op);       /* dtype -1: infer */
PyObject   *tl_tensor_to_numpy(tl_tensor *t);
int         tl_is_numpy(PyObject *obj);                                            /* ndarray or numpy scalar */
/* A numpy operand of an operator as a new tensor: tl_tensor_from_object's conversions, and bool as a float32
 * mask (what comparisons return), so `x * dones` takes gymnasium's bool arrays. */
tl_tensor  *tl_tensor_from_operand(PyObject *obj, const char *op);
const char *tl_dtype_name(int dtype);
void        tl_shape_str(const Py_ssize_t *shape, int ndim, char *out, size_t cap); /* "(2, 3)" */
#endif
