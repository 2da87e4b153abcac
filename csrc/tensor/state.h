/* state.h: module state (types, exception classes), the tl_err -> exception bridge, and the family
 * table: each ops file exports a tl_family whose functions, Tensor methods and Tensor slots module.c
 * merges at import, so a new op family touches one line there and none in tensor.c. A family that owns
 * more (its own heap types, program build rules) does that in its init hook, called once at import.
 * The bottom of the Python-aware layers (tensor/): it uses core/ only; everything above may use it. */
#ifndef TL_STATE_H
#define TL_STATE_H
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
    const struct tl_op_row *const *rows;   /* its ops' autograd rows (NULL terminated; autograd.h) */
    const struct tl_grad_prims *grad_prims;   /* ops the engine runs, if this family owns any (autograd.h) */
    /* may be NULL; called once at import after Tensor exists (its own types, program build rules);
     * -1 with an exception set. Families set it by name: .init = ... */
    int (*init)(PyObject *module, tl_state *S);
} tl_family;

/* METH_VARARGS | METH_KEYWORDS entries of a PyMethodDef table: {"name", TL_KW(fn), "doc"}. */
#define TL_KW(f) (PyCFunction)(void (*)(void))(f), METH_VARARGS | METH_KEYWORDS

tl_state *tl_state_get(void);        /* NULL before import finished */
void      tl_state_bind(PyModuleDef *def);   /* module.c, once at import: the module tl_state_get finds */
int       tl_raise(tl_err *err);     /* GIL held: sets the tlgpu exception, clears err, returns -1 */
#endif
