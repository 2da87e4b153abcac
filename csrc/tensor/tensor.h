/* tensor.h: the Python Tensor type (Python-aware from here up). A tensor is a strided view (shape,
 * strides and offset in elements) of a refcounted storage; views share the storage and its version
 * counter. A tensor with a zero in its shape has storage == NULL. tensor/ is the layer every family
 * stands on: state.c (module state, tl_raise) < tensor.c < ops_common.c (launches, copies, fills) <
 * tensor_io.c (numpy in/out); it uses core/ only and knows neither autograd nor any op family. */
#ifndef TL_TENSOR_H
#define TL_TENSOR_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "storage.h"
#include "../kernels/ew_ops.h"

/* Storage dtypes. float16/bfloat16 (2 bytes) and uint8 (1 byte) are storage formats: kernels load them as
 * float32 (or int) and round on store (docs/precision.md). TL_F32..TL_I32 keep their values (kernels pass
 * them). */
enum { TL_F32 = 0, TL_I32 = 1, TL_F16 = 2, TL_BF16 = 3, TL_U8 = 4, TL_NDTYPES = 5 };
#define TL_IS_FLOAT(dt) ((dt) == TL_F32 || (dt) == TL_F16 || (dt) == TL_BF16)
#define TL_IS_HALF(dt) ((dt) == TL_F16 || (dt) == TL_BF16)

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
const char *tl_dtype_name(int dtype);
size_t      tl_dtype_size(int dtype);                                          /* bytes per element */
PyObject   *tl_dtype_descr(int dtype);                                /* new ref: the numpy dtype, or NULL */
int         tl_dtype_of_typenum(int type_num);             /* a numpy type number's dtype, -1 if none (no error) */
void        tl_shape_str(const Py_ssize_t *shape, int ndim, char *out, size_t cap); /* "(2, 3)" */

/* What tensor/ needs of a grad_fn, installed by the autograd engine at import (a node is opaque here). */
typedef struct {
    void (*release)(struct tl_node *nd);                 /* drop one reference (GIL held) */
    const char *(*name)(const struct tl_node *nd);       /* "MulBackward" */
} tl_node_ops;
void        tl_tensor_set_node_ops(const tl_node_ops *ops);
const char *tl_tensor_grad_fn_name(const tl_tensor *t);                            /* NULL for a leaf */
#endif
