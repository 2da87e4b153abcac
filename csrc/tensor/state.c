/* state.c: the module state's accessor and tl_raise(), the one place a tl_err becomes a Python exception
 * (see state.h). module.c creates the module and binds it here at import. */
#include "state.h"
#include "cl_runtime.h"

static PyModuleDef *bound;

void
tl_state_bind(PyModuleDef *def)
{
    bound = def;
}

tl_state *
tl_state_get(void)
{
    PyObject *m = bound != NULL ? PyState_FindModule(bound) : NULL;
    return m != NULL ? (tl_state *)PyModule_GetState(m) : NULL;
}

static int
set_attr_string(PyObject *exc, const char *name, const char *value)
{
    PyObject *v = PyUnicode_DecodeUTF8(value ? value : "", (Py_ssize_t)strlen(value ? value : ""), "replace");
    int rc = v != NULL ? PyObject_SetAttrString(exc, name, v) : -1;
    Py_XDECREF(v);
    return rc;
}

int
tl_raise(tl_err *err)
{
    tl_state *S = tl_state_get();
    PyObject *type, *exc = NULL;
    char msg[4096];
    const tl_runtime *rt = NULL;
    tl_err ignore = {0};
    if (err->code == TL_E_ARG || err->code == TL_E_CLOSED || err->code == TL_E_OS || err->code == TL_E_INDEX ||
        err->code == TL_E_STATE) {
        if (err->code == TL_E_OS && (exc = PyObject_CallFunction(PyExc_OSError, "is", err->os_errno, err->what)))
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);          /* OSError(errno, ...) picks the subclass */
        if (err->code == TL_E_ARG) PyErr_SetString(PyExc_ValueError, err->what);
        if (err->code == TL_E_INDEX) PyErr_SetString(PyExc_IndexError, err->what);
        if (err->code == TL_E_CLOSED || err->code == TL_E_STATE)
            PyErr_Format(PyExc_RuntimeError, "%s: %s", err->routine ? err->routine : "?", err->what);
        Py_XDECREF(exc);
        tl_err_clear(err);
        return -1;
    }
    if (err->code == CL_BUILD_PROGRAM_FAILURE) {
        type = S->build_error;
        snprintf(msg, sizeof msg, "%s failed to build (%s):\n%s", err->what, err->options,
                 err->log ? err->log : "<no log>");
    } else if (tl_status_is_oom(err->code)) {
        type = S->oom_error;
        snprintf(msg, sizeof msg, "out of device memory in %s: %s (%s)", err->routine ? err->routine : "?",
                 err->what, tl_cl_error_name(err->code));
    } else if (err->code == TL_E_NODEVICE) {
        type = S->device_error;
        snprintf(msg, sizeof msg, "%s", err->what);
    } else {
        type = S->device_error;
        snprintf(msg, sizeof msg, "%s: %s (%d)%s%s", err->routine ? err->routine : "?", tl_cl_error_name(err->code),
                 err->code, err->what[0] ? " in " : "", err->what);
    }
    exc = PyObject_CallFunction(type, "s", msg);
    if (exc != NULL) {
        PyObject *code = PyLong_FromLong(err->code);
        if (code == NULL || PyObject_SetAttrString(exc, "code", code) < 0 ||
            set_attr_string(exc, "routine", err->routine) < 0) {
            Py_XDECREF(code);
            Py_CLEAR(exc);
        } else {
            Py_DECREF(code);
        }
    }
    if (exc != NULL && type == S->build_error) {
        if (tl_runtime_get(&rt, &ignore) != TL_OK) rt = NULL;
        if (set_attr_string(exc, "log", err->log) < 0 || set_attr_string(exc, "options", err->options) < 0 ||
            set_attr_string(exc, "kernel_file", err->what) < 0 ||
            set_attr_string(exc, "device", rt ? rt->info.name : "") < 0)
            Py_CLEAR(exc);
    }
    if (exc != NULL) {
        PyErr_SetObject(type, exc);
        Py_DECREF(exc);
    }
    tl_err_clear(err);
    return -1;
}
