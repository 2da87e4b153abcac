/* errors.h: the one error vocabulary of the C core.
 * Pure-C layers return tl_status (0 ok; <0 a cl_int passed through as is; <= TL_E_BASE tlgpu's own codes)
 * and fill a caller-owned tl_err. They never abort and never touch Python; tl_raise() (tensor/state.c) converts
 * a tl_err into the matching Python exception exactly once, at the Python-facing call site. */
#ifndef TL_ERRORS_H
#define TL_ERRORS_H
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

typedef int tl_status;
enum { TL_OK = 0, TL_E_BASE = -1000, TL_E_NOMEM = -1001, TL_E_CLOSED = -1002, TL_E_NODEVICE = -1003,
       TL_E_INVALID = -1004, TL_E_TOO_LARGE = -1005, TL_E_ARG = -1006, TL_E_OS = -1007,
       TL_E_INDEX = -1008, TL_E_STATE = -1009 };
/* TL_E_ARG: a bad argument or input (ValueError); TL_E_OS: a failed system call, its errno in os_errno (OSError);
 * TL_E_INDEX: an index out of range, found by a device-side check (IndexError); TL_E_STATE: a call the
 * current state refuses, e.g. a host read inside a traced function (RuntimeError "routine: what") */
typedef struct { tl_status code; const char *routine; char what[1024]; char *log; char options[1024];
                 int os_errno; } tl_err;

#define TL_CL(err, label, fn, args) do { cl_int rc_ = fn args;                        \
        if (rc_ != CL_SUCCESS) { tl_err_set((err), rc_, #fn, NULL); goto label; } } while (0)

tl_status   tl_err_set(tl_err *err, tl_status code, const char *routine, const char *what);
void        tl_err_clear(tl_err *err);         /* frees err->log */
const char *tl_cl_error_name(cl_int code);     /* -54 -> "CL_INVALID_WORK_GROUP_SIZE" */
int         tl_status_is_oom(tl_status code);  /* the three out-of-memory codes, pyopencl's set */
#endif
