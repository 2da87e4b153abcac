/* cl_runtime.h: the process-global OpenCL runtime: one device, its context, the in-order compute queue
 * (q0: every kernel) and the in-order transfer queue (q1: uploads and background downloads), and the
 * device limits the ops need. Chosen once, on first use, by TLGPU_DEVICE ("selector[:index]", see cl_runtime.c). */
#ifndef TL_CL_RUNTIME_H
#define TL_CL_RUNTIME_H
#include "errors.h"

typedef struct {
    char platform[128], name[128], vendor[128], version[128], driver[64], platform_version[128];
    char platform_vendor[128];
    cl_device_type type;
    cl_ulong global_mem, max_alloc, local_mem;
    size_t max_wg;
    cl_uint compute_units;
    int unified_memory;
} tl_device_info;

typedef struct {
    cl_platform_id platform;
    cl_device_id device;
    cl_context ctx;
    cl_command_queue q0, q1;
    tl_device_info info;
    int index;                       /* position in tl_runtime_list's order */
} tl_runtime;

tl_status tl_runtime_get(const tl_runtime **out, tl_err *err);          /* initialises once, thread-safe */
/* At process exit (module.c registers it with Py_AtExit): waits for both queues if this process made the runtime
 * (not in a forked child, whose copies of the queues have no driver threads behind them), so no
 * command is still running in the driver's threads while the libraries unload (PoCL's pthread device then
 * crashed in its kernel cache lookup, seen as SIGSEGV after the script's last line). */
void      tl_runtime_finish_at_exit(void);
tl_status tl_runtime_list(tl_device_info *out, int cap, int *n, tl_err *err);
const char *tl_device_type_name(cl_device_type t);
/* 1 when a program may be built with -DTL_NV_PTX=1 (its kernels' inline PTX: quant, decode): an NVIDIA GPU
 * platform whose user build options (user, TLGPU_BUILD_OPTIONS) do not set TL_NV_PTX themselves. */
int tl_runtime_nv_ptx(const tl_runtime *rt, const char *user);
/* The NVIDIA GPU's compute capability, major * 10 + minor (cl_nv_device_attribute_query; 90 an H100/H200), 0 on
 * any other device; asked once (the process has one device). What the tensor-core paths (gemm_tc.c's mma.sync
 * and wgmma rows, matmul_sg's cp.async, quant_mvm.cl's int8 mma) test. */
int tl_runtime_nv_cc(const tl_runtime *rt);
#endif
