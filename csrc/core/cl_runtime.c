/* cl_runtime.c: platform/device selection, context and the two queues.
 * Selection (TLGPU_DEVICE): a device type ("cpu", "gpu", "accelerator") matches that type exactly; any
 * other text is a case-insensitive substring of the platform's name, vendor or version or the device's
 * name or vendor (PoCL calls its platform "Portable Computing Language": "pocl" is in its version and
 * vendor strings). An optional ":index" picks among the matches; unset means the first GPU, else the
 * first device of any type. An unknown selector is a TL_E_NODEVICE error whose text says what was
 * searched and lists every device. The runtime is built
 * once under a mutex and never torn down: queues outlive every storage, so late releases stay valid. */
#include "cl_runtime.h"
#include "settings.h"
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#define MAX_DEVS 32

static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;
static tl_runtime rt;
static int rt_ready;
static pid_t rt_pid;                 /* the process that made the runtime (a forked child's queues are not its own) */

typedef struct { cl_platform_id p; cl_device_id d; } dev_ref;

/* The ICD loader that CUDA ships (seen on the NVIDIA machines here, with OCL_ICD_FILENAMES set to
 * "libpocl.so.2:libnvidia-opencl.so.1") splits that variable in place: afterwards the process's environment
 * holds its first entry alone, and every child process started from it lists PoCL only. The loader reads it
 * on the first call; put the whole value back after it. */
static cl_int
platform_ids(cl_platform_id *plats, cl_uint *np)
{
    static const tl_setting_id vars[] = {TL_SET_OCL_ICD_FILENAMES, TL_SET_OCL_ICD_VENDORS};
    char *saved[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        const char *v = tl_setting_str(vars[i]);
        if (v != NULL) saved[i] = strdup(v);
    }
    cl_int rc = clGetPlatformIDs(16, plats, np);
    for (int i = 0; i < 2; i++) {
        const char *now = tl_setting_str(vars[i]);
        if (saved[i] != NULL && (now == NULL || strcmp(now, saved[i]) != 0))
            setenv(tl_setting_info(vars[i])->name, saved[i], 1);
        free(saved[i]);
    }
    return rc;
}

static tl_status
enumerate(dev_ref *refs, tl_device_info *infos, int cap, int *n, tl_err *err)
{
    cl_platform_id plats[16];
    cl_uint np = 0;
    *n = 0;
    cl_int rc = platform_ids(plats, &np);
    if (rc == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || np == 0)
        return tl_err_set(err, TL_E_NODEVICE, "clGetPlatformIDs",
                          "no OpenCL platform found (install pocl-opencl-icd or a GPU driver's ICD)");
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clGetPlatformIDs", NULL);
    for (cl_uint i = 0; i < np && i < 16; i++) {
        cl_device_id devs[MAX_DEVS];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_ALL, MAX_DEVS, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint j = 0; j < nd && *n < cap; j++) {
            tl_device_info *d = &infos[*n];
            cl_bool unified = CL_FALSE;
            memset(d, 0, sizeof *d);
            clGetPlatformInfo(plats[i], CL_PLATFORM_NAME, sizeof d->platform - 1, d->platform, NULL);
            clGetPlatformInfo(plats[i], CL_PLATFORM_VENDOR, sizeof d->platform_vendor - 1,
                              d->platform_vendor, NULL);
            clGetPlatformInfo(plats[i], CL_PLATFORM_VERSION, sizeof d->platform_version - 1,
                              d->platform_version, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_NAME, sizeof d->name - 1, d->name, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_VENDOR, sizeof d->vendor - 1, d->vendor, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_VERSION, sizeof d->version - 1, d->version, NULL);
            clGetDeviceInfo(devs[j], CL_DRIVER_VERSION, sizeof d->driver - 1, d->driver, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_TYPE, sizeof d->type, &d->type, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_GLOBAL_MEM_SIZE, sizeof d->global_mem, &d->global_mem, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof d->max_alloc, &d->max_alloc, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_LOCAL_MEM_SIZE, sizeof d->local_mem, &d->local_mem, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_MAX_WORK_GROUP_SIZE, sizeof d->max_wg, &d->max_wg, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_MAX_COMPUTE_UNITS, sizeof d->compute_units,
                            &d->compute_units, NULL);
            clGetDeviceInfo(devs[j], CL_DEVICE_HOST_UNIFIED_MEMORY, sizeof unified, &unified, NULL);
            d->unified_memory = unified == CL_TRUE;
            if (refs != NULL) { refs[*n].p = plats[i]; refs[*n].d = devs[j]; }
            (*n)++;
        }
    }
    if (*n == 0) return tl_err_set(err, TL_E_NODEVICE, "clGetDeviceIDs", "no OpenCL device found");
    return TL_OK;
}

tl_status
tl_runtime_list(tl_device_info *out, int cap, int *n, tl_err *err)
{
    return enumerate(NULL, out, cap, n, err);
}

const char *
tl_device_type_name(cl_device_type t)
{
    if (t & CL_DEVICE_TYPE_GPU) return "gpu";
    if (t & CL_DEVICE_TYPE_CPU) return "cpu";
    if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
    return "other";
}

static int
contains_ci(const char *hay, const char *needle)
{
    size_t nl = strlen(needle);
    for (; *hay; hay++) {
        size_t k = 0;
        while (k < nl && hay[k] && tolower((unsigned char)hay[k]) == tolower((unsigned char)needle[k])) k++;
        if (k == nl) return 1;
    }
    return nl == 0;
}

static int
matches(const tl_device_info *d, const char *pat)
{
    static const char *types[] = {"cpu", "gpu", "accelerator"};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++)
        if (strcasecmp(pat, types[t]) == 0) return strcmp(tl_device_type_name(d->type), types[t]) == 0;
    return contains_ci(d->platform, pat) || contains_ci(d->platform_vendor, pat) ||
           contains_ci(d->platform_version, pat) || contains_ci(d->name, pat) || contains_ci(d->vendor, pat);
}

/* Picks the device index for the selector; -1 when nothing matches. */
static int
select_device(const tl_device_info *infos, int n, const char *sel)
{
    if (sel == NULL || *sel == '\0') {
        for (int i = 0; i < n; i++)
            if (infos[i].type & CL_DEVICE_TYPE_GPU) return i;
        return 0;
    }
    char pat[128];
    int want = 0;
    snprintf(pat, sizeof pat, "%s", sel);
    char *colon = strrchr(pat, ':');
    if (colon != NULL) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end != '\0' || end == colon + 1 || v < 0) return -1;
        want = (int)v;
        *colon = '\0';
    }
    for (int i = 0, seen = 0; i < n; i++)
        if (matches(&infos[i], pat) && seen++ == want) return i;
    return -1;
}

static tl_status
no_match(const tl_device_info *infos, int n, const char *sel, tl_err *err)
{
    char text[sizeof err->what];
    int k = snprintf(text, sizeof text, "TLGPU_DEVICE='%s' matches no device (searched: the device type "
                     "cpu/gpu/accelerator, platform name, vendor and version, device name and vendor); devices:",
                     sel);
    for (int i = 0; i < n && k > 0 && (size_t)k < sizeof text; i++)
        k += snprintf(text + k, sizeof text - (size_t)k, " [%d] %s (%s; %s) / %s (%s, %s);", i,
                      infos[i].platform, infos[i].platform_vendor, infos[i].platform_version, infos[i].name,
                      infos[i].vendor, tl_device_type_name(infos[i].type));
    return tl_err_set(err, TL_E_NODEVICE, "tl_runtime_get", text);
}

static tl_status
init_runtime(tl_err *err)
{
    dev_ref refs[MAX_DEVS];
    tl_device_info infos[MAX_DEVS];
    int n = 0;
    cl_int rc;
    tl_status st = enumerate(refs, infos, MAX_DEVS, &n, err);
    if (st != TL_OK) return st;
    const char *sel = tl_setting_str(TL_SET_DEVICE);
    int i = select_device(infos, n, sel);
    if (i < 0) return no_match(infos, n, sel, err);
    rt.platform = refs[i].p;
    rt.device = refs[i].d;
    rt.info = infos[i];
    rt.index = i;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)rt.platform, 0};
    rt.ctx = clCreateContext(props, 1, &rt.device, NULL, NULL, &rc);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clCreateContext", rt.info.name);
    rt.q0 = clCreateCommandQueue(rt.ctx, rt.device, 0, &rc);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clCreateCommandQueue", "compute queue");
    rt.q1 = clCreateCommandQueue(rt.ctx, rt.device, 0, &rc);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clCreateCommandQueue", "transfer queue");
    return TL_OK;
}

void
tl_runtime_finish_at_exit(void)
{
    if (!__atomic_load_n(&rt_ready, __ATOMIC_ACQUIRE) || getpid() != rt_pid) return;
    clFinish(rt.q0);
    clFinish(rt.q1);
}

tl_status
tl_runtime_get(const tl_runtime **out, tl_err *err)
{
    tl_status st = TL_OK;
    if (!__atomic_load_n(&rt_ready, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&init_lock);
        if (!rt_ready) {
            st = init_runtime(err);
            if (st == TL_OK) {
                rt_pid = getpid();
                __atomic_store_n(&rt_ready, 1, __ATOMIC_RELEASE);
            }
        }
        pthread_mutex_unlock(&init_lock);
    }
    *out = st == TL_OK ? &rt : NULL;
    return st;
}

/* 1 on an NVIDIA GPU platform (its OpenCL takes inline PTX). */
static int
nv_gpu(const tl_runtime *rt)
{
    return strstr(rt->info.platform, "NVIDIA") != NULL && (rt->info.type & CL_DEVICE_TYPE_GPU) != 0;
}

int
tl_runtime_nv_ptx(const tl_runtime *rt, const char *user)
{
    return nv_gpu(rt) && (user == NULL || strstr(user, "-DTL_NV_PTX") == NULL);
}

int
tl_runtime_nv_cc(const tl_runtime *rt)
{
    static int cc = -1;                               /* an int store: a racing second query writes the same */
    cl_uint major = 0, minor = 0;                     /* CL_DEVICE_COMPUTE_CAPABILITY_MAJOR_NV / _MINOR_NV */
    if (cc < 0)
        cc = nv_gpu(rt) && clGetDeviceInfo(rt->device, 0x4000, sizeof major, &major, NULL) == CL_SUCCESS &&
                     clGetDeviceInfo(rt->device, 0x4001, sizeof minor, &minor, NULL) == CL_SUCCESS
                 ? (int)(major * 10 + minor)
                 : 0;
    return cc;
}
