/* module.c: PyInit__C, the module state's lifetime and the exception types (tl_raise() and the state's
 * accessor live below every family, in tensor/state.c). Nothing else: functions and Tensor methods come from
 * the families listed in FAMILIES, merged here into one method table and one type spec. Single-phase init
 * (the module is found from deep C code through PyState_FindModule); the CL runtime is a process-global C
 * singleton created on first use, not at import. The top layer: it may use every layer below. */
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL tl_ARRAY_API
#include "cl_runtime.h"
#include "state.h"
#include "tensor.h"
#include "autograd.h"
#include <numpy/arrayobject.h>

extern const tl_family tl_family_tensor, tl_family_tensor_io, tl_family_create, tl_family_elementwise,
    tl_family_runtime, tl_family_reduce, tl_family_shape, tl_family_index, tl_family_matmul, tl_family_random,
    tl_family_publish, tl_family_autograd, tl_family_llm, tl_family_quant, tl_family_nn, tl_family_optim,
    tl_family_scan, tl_family_conv, tl_family_rnn, tl_family_rnn_seq, tl_family_tri, tl_family_index_add,
    tl_family_sort, tl_family_convert, tl_family_linear, tl_family_jit, tl_family_quant_gemm, tl_family_decode;

static const tl_family *const FAMILIES[] = {
    &tl_family_tensor, &tl_family_tensor_io, &tl_family_create, &tl_family_elementwise, &tl_family_runtime,
    &tl_family_reduce, &tl_family_shape, &tl_family_index, &tl_family_matmul, &tl_family_random,
    &tl_family_publish, &tl_family_autograd, &tl_family_llm, &tl_family_quant, &tl_family_nn, &tl_family_optim,
    &tl_family_scan, &tl_family_conv, &tl_family_rnn, &tl_family_rnn_seq, &tl_family_tri, &tl_family_index_add,
    &tl_family_sort, &tl_family_convert, &tl_family_linear, &tl_family_jit, &tl_family_quant_gemm, &tl_family_decode,
};
#define N_FAMILIES (sizeof FAMILIES / sizeof FAMILIES[0])

static struct PyModuleDef module_def;

static PyObject *
fn_aliases(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    PyObject *out = PyUnicode_FromString(""), *part;
    for (size_t f = 0; out != NULL && f < N_FAMILIES; f++) {
        if (FAMILIES[f]->aliases == NULL) continue;
        part = PyUnicode_FromFormat("%U %s", out, FAMILIES[f]->aliases);
        Py_SETREF(out, part);
    }
    return out;
}

/* Concatenates the {NULL}-terminated tables of every family into one malloc'd table. */
static PyMethodDef *
merge_methods(int functions)
{
    static const PyMethodDef own = {"_aliases", fn_aliases, METH_NOARGS, "Tensor methods also offered as functions."};
    size_t n = 1, k = 0;
    for (size_t f = 0; f < N_FAMILIES; f++) {
        const PyMethodDef *t = functions ? FAMILIES[f]->functions : FAMILIES[f]->methods;
        for (; t != NULL && t->ml_name != NULL; t++) n++;
    }
    PyMethodDef *out = PyMem_Calloc(n + 1, sizeof *out);
    if (out == NULL) return (PyMethodDef *)PyErr_NoMemory();
    if (functions) out[k++] = own;
    for (size_t f = 0; f < N_FAMILIES; f++) {
        const PyMethodDef *t = functions ? FAMILIES[f]->functions : FAMILIES[f]->methods;
        for (; t != NULL && t->ml_name != NULL; t++) out[k++] = *t;
    }
    return out;
}

static PyTypeObject *
make_tensor_type(PyObject *module)
{
    static PyType_Slot slots[96];
    static PyGetSetDef getset[64];
    size_t ns = 0, ng = 0;
    PyMethodDef *methods = merge_methods(0);       /* lives as long as the type: never freed */
    if (methods == NULL) return NULL;
    for (size_t f = 0; f < N_FAMILIES; f++) {
        for (const PyType_Slot *s = FAMILIES[f]->slots; s != NULL && s->slot != 0; s++) {
            if (ns + 3 >= sizeof slots / sizeof slots[0])
                return (PyTypeObject *)PyErr_Format(PyExc_SystemError, "too many Tensor slots");
            slots[ns++] = *s;
        }
        for (const PyGetSetDef *g = FAMILIES[f]->getset; g != NULL && g->name != NULL; g++) {
            if (ng + 2 >= sizeof getset / sizeof getset[0])
                return (PyTypeObject *)PyErr_Format(PyExc_SystemError, "too many Tensor attributes");
            getset[ng++] = *g;
        }
    }
    slots[ns++] = (PyType_Slot){Py_tp_methods, methods};
    slots[ns++] = (PyType_Slot){Py_tp_getset, getset};
    slots[ns] = (PyType_Slot){0, NULL};
    static PyType_Spec spec = {"tlgpu._C.Tensor", sizeof(tl_tensor), 0,
                               Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, NULL};
    spec.slots = slots;
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &spec, NULL);
}

static int
add_exception(PyObject *m, PyObject **slot, const char *name, PyObject *base, const char *doc)
{
    char full[64];
    snprintf(full, sizeof full, "tlgpu.%s", name);
    *slot = PyErr_NewExceptionWithDoc(full, doc, base, NULL);
    return *slot == NULL ? -1 : PyModule_AddObjectRef(m, name, *slot);
}

static int
module_traverse(PyObject *m, visitproc visit, void *arg)
{
    tl_state *S = PyModule_GetState(m);
    Py_VISIT(S->tensor_type);
    Py_VISIT(S->device_error);
    Py_VISIT(S->build_error);
    Py_VISIT(S->oom_error);
    Py_VISIT(S->publisher_type);
    Py_VISIT(S->subscriber_type);
    Py_VISIT(S->publisher_closed);
    return 0;
}

static int
module_clear(PyObject *m)
{
    tl_state *S = PyModule_GetState(m);
    Py_CLEAR(S->tensor_type);
    Py_CLEAR(S->device_error);
    Py_CLEAR(S->build_error);
    Py_CLEAR(S->oom_error);
    Py_CLEAR(S->publisher_type);
    Py_CLEAR(S->subscriber_type);
    Py_CLEAR(S->publisher_closed);
    return 0;
}

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "tlgpu._C", "tlgpu's C core: OpenCL runtime, tensors, ops.", sizeof(tl_state),
    NULL, NULL, module_traverse, module_clear, NULL};

PyMODINIT_FUNC
PyInit__C(void)
{
    PyObject *m = NULL, *oom_bases = NULL;
    tl_state *S;
    import_array();
    static int at_exit;                               /* once a process: the queues finish before exit */
    if (!at_exit && Py_AtExit(tl_runtime_finish_at_exit) == 0) at_exit = 1;
    if ((module_def.m_methods = merge_methods(1)) == NULL) return NULL;
    tl_state_bind(&module_def);
    if ((m = PyModule_Create(&module_def)) == NULL) return NULL;
    if (PyState_AddModule(m, &module_def) < 0) goto fail;
    S = PyModule_GetState(m);
    if (add_exception(m, &S->device_error, "DeviceError", PyExc_RuntimeError,
                      "An OpenCL call failed; .code and .routine name it.") < 0)
        goto fail;
    if (add_exception(m, &S->build_error, "KernelBuildError", S->device_error,
                      "A kernel program failed to build; .log carries the compiler's build log.") < 0)
        goto fail;
    if ((oom_bases = PyTuple_Pack(2, S->device_error, PyExc_MemoryError)) == NULL ||
        add_exception(m, &S->oom_error, "OutOfMemoryError", oom_bases,
                      "The device is out of memory even after the pool released its cached blocks.") < 0)
        goto fail;
    Py_CLEAR(oom_bases);
    if ((S->tensor_type = make_tensor_type(m)) == NULL ||
        PyModule_AddObjectRef(m, "Tensor", (PyObject *)S->tensor_type) < 0)
        goto fail;
    if (tl_autograd_register(FAMILIES, N_FAMILIES) < 0) goto fail;   /* every op's row, or ImportError */
    for (size_t f = 0; f < N_FAMILIES; f++)           /* the families' own types, program build rules */
        if (FAMILIES[f]->init != NULL && FAMILIES[f]->init(m, S) < 0) goto fail;
    return m;
fail:
    Py_XDECREF(oom_bases);
    Py_DECREF(m);
    return NULL;
}
