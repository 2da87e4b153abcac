/* module.h: module state (types, exception classes), the tl_err -> exception bridge, and the family
 * table: each ops file exports a tl_family whose functions, Tensor methods and Tensor slots module.c
 * merges at import, so a new op family touches one line here and none in tensor.c. A family that owns
 * more (its own heap types, program build rules) does that in its init hook, called once at import. */
#ifndef TL_MODULE_H
#define TL_MODULE_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "errors.h"

/* Every type and exception class of _C (module_traverse/module_clear visit each field). */
typedef struct {
    PyTypeObject *tensor_type;
    PyObject *device_error, *build_error, *oom_error;
    PyTypeObject *publisher_type, *subscriber_type;   /* pub_py.c, pub_sub_py.c */
    PyObject *publisher_closed;                       /* tlgpu.publish.PublisherClosed */
} tl_state;

typedef struct {
    const PyMethodDef *functions;    /* module-level, {NULL} terminated, may be NULL */
    const PyMethodDef *methods;      /* Tensor methods */
    const PyType_Slot *slots;        /* Tensor slots ({0, NULL} terminated) */
    const PyGetSetDef *getset;       /* Tensor attributes */
    const char *aliases;             /* space-separated Tensor methods also offered as tlgpu.<name>(t, ...) */
    int (*init)(PyObject *module, tl_state *S);   /* may be NULL; after Tensor exists; -1 with an exception */
} tl_family;

/* METH_VARARGS | METH_KEYWORDS entries of a PyMethodDef table: {"name", TL_KW(fn), "doc"}. */
#define TL_KW(f) (PyCFunction)(void (*)(void))(f), METH_VARARGS | METH_KEYWORDS

extern const tl_family tl_family_tensor, tl_family_create, tl_family_elementwise, tl_family_runtime,
    tl_family_reduce, tl_family_shape, tl_family_index, tl_family_matmul, tl_family_random, tl_family_publish,
    tl_family_autograd, tl_family_llm, tl_family_quant, tl_family_nn, tl_family_optim, tl_family_scan,
    tl_family_conv, tl_family_rnn, tl_family_rnn_seq, tl_family_tri, tl_family_index_add, tl_family_sort;

tl_state *tl_state_get(void);
int       tl_raise(tl_err *err);     /* GIL held: sets the tlgpu exception, clears err, returns -1 */
#endif
