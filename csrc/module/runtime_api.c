/* runtime_api.c: the Python face of the runtime, stream, pool and program layers: devices, sync,
 * counters, memory statistics; and, in test-hooks builds only (TL_TEST_HOOKS, `make build`), the
 * raw-OpenCL reference loops that benchmarks compare against (measured in C with the GIL released, so
 * they show what the hardware and driver cost alone) and the raw cl_mem and queue handles for benchmarks
 * that drive another OpenCL library. */
#include "ops_common.h"
#include "cl_runtime.h"
#include "pool.h"
#include "clock.h"
#include "settings.h"

static PyObject *
device_dict(const tl_device_info *d, int index)
{
    return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:s,s:K,s:K,s:K,s:n,s:I,s:O,s:i}", "name", d->name,
                         "vendor", d->vendor, "platform", d->platform, "platform_vendor", d->platform_vendor,
                         "platform_version", d->platform_version, "type", tl_device_type_name(d->type), "version",
                         d->version, "driver", d->driver,
                         "global_mem_bytes", (unsigned long long)d->global_mem, "max_alloc_bytes",
                         (unsigned long long)d->max_alloc, "local_mem_bytes", (unsigned long long)d->local_mem,
                         "max_work_group_size", (Py_ssize_t)d->max_wg, "compute_units", d->compute_units,
                         "unified_memory", d->unified_memory ? Py_True : Py_False, "index", index);
}

static PyObject *
fn_devices(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_device_info infos[32];
    tl_err err = {0};
    int n = 0;
    if (tl_runtime_list(infos, 32, &n, &err) != TL_OK) return tl_raise(&err), NULL;
    PyObject *list = PyList_New(n);
    for (int i = 0; list != NULL && i < n; i++) {
        PyObject *d = device_dict(&infos[i], i);
        if (d == NULL) { Py_CLEAR(list); break; }
        PyList_SET_ITEM(list, i, d);
    }
    return list;
}

static PyObject *
fn_device(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    const tl_runtime *rt;
    tl_err err = {0};
    tl_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tl_runtime_get(&rt, &err);
    Py_END_ALLOW_THREADS
    if (st != TL_OK) return tl_raise(&err), NULL;
    return device_dict(&rt->info, rt->index);
}

/* tlgpu.settings(): name -> {value, default, doc, kind, read, test_only} for every TLGPU_* row of settings.c.
 * The value of a ONCE row is the one the process latched, if it read it already; else the environment's. */
static PyObject *
fn_settings(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    static const char *kinds[] = {"str", "int", "flag"};
    PyObject *out = NULL, *row = NULL;
    if ((out = PyDict_New()) == NULL) goto fail;
    for (int i = 0; i < TL_SET_COUNT; i++) {
        const tl_setting *s = tl_setting_info((tl_setting_id)i);
        int latched;
        if (s->name == NULL) {                        /* a hole in the table's designated initializers */
            PyErr_Format(PyExc_SystemError, "settings.c: no row for setting %d", i);
            goto fail;
        }
        if (s->flags & TL_SETF_FOREIGN) continue;
        const char *v = tl_setting_peek((tl_setting_id)i, &latched);
        const char *read = (s->flags & TL_SETF_ONCE) ? "once" : (s->flags & TL_SETF_PY_ONLY) ? "python" : "each use";
        row = Py_BuildValue("{s:z,s:s,s:s,s:s,s:s,s:O}", "value", v, "default", s->shown, "doc", s->doc, "kind",
                            kinds[s->kind], "read", read, "test_only", (s->flags & TL_SETF_TEST) ? Py_True : Py_False);
        if (row == NULL || PyDict_SetItemString(out, s->name, row) < 0) goto fail;
        Py_CLEAR(row);
    }
    return out;
fail:
    Py_XDECREF(row);
    Py_XDECREF(out);
    return NULL;
}

static PyObject *
fn_synchronize(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_err err = {0};
    tl_status st;
    Py_BEGIN_ALLOW_THREADS
    st = tl_stream_synchronize(&err);
    Py_END_ALLOW_THREADS
    if (st != TL_OK) return tl_raise(&err), NULL;
    Py_RETURN_NONE;
}

static PyObject *
fn_stream_stats(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_stream_stats s;
    tl_stream_get_stats(&s);
    return Py_BuildValue("{s:l,s:l,s:l,s:l}", "enqueued", s.enqueued, "flushes", s.flushes, "waits", s.waits,
                         "backpressure_waits", s.backpressure_waits);
}

/* Back-pressure blocks inside launch/copy/upload, which ops call holding the GIL (enqueues keep it): release
 * it around that wait when this thread holds it (the publisher thread and GIL-free callers do not). */
static void *
gil_release(void)
{
    return PyGILState_Check() ? (void *)PyEval_SaveThread() : NULL;
}

static void
gil_restore(void *ts)
{
    if (ts != NULL) PyEval_RestoreThread((PyThreadState *)ts);
}

/* Registered when the extension is loaded, before any op can run; keeps stream.c free of Python. */
__attribute__((constructor)) static void
register_block_hooks(void)
{
    tl_stream_set_block_hooks(gil_release, gil_restore);
}

static PyObject *
fn_reset_stream_stats(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_stream_reset_stats();
    Py_RETURN_NONE;
}

static PyObject *
fn_memory_stats(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_pool_stats s;
    tl_pool_get_stats(&s);
    return Py_BuildValue("{s:n,s:n,s:n,s:n,s:l,s:l,s:l,s:l,s:l,s:O}", "live", (Py_ssize_t)s.live, "cached",
                         (Py_ssize_t)s.cached, "peak", (Py_ssize_t)s.peak, "limit", (Py_ssize_t)s.limit,
                         "allocations", s.allocations, "hits", s.hits, "misses", s.misses, "frees", s.frees,
                         "oom_retries", s.oom_retries, "enabled", s.enabled ? Py_True : Py_False);
}

static PyObject *
fn_reset_peak(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_pool_reset_peak();
    Py_RETURN_NONE;
}

static PyObject *
fn_pool_block_bytes(PyObject *Py_UNUSED(m), PyObject *arg)
{
    Py_ssize_t n = PyNumber_AsSsize_t(arg, PyExc_OverflowError);
    if (n == -1 && PyErr_Occurred()) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "_pool_block_bytes: negative size %zd", n);
    return PyLong_FromSize_t(n == 0 ? 0 : tl_pool_round((size_t)n));   /* zero-size tensors own nothing */
}

static PyObject *
fn_empty_cache(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_pool_empty_cache();
    Py_RETURN_NONE;
}

static PyObject *
fn_program_stats(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(a))
{
    tl_program_stats s;
    char dir[1024];
    tl_program_get_stats(&s);
    int has_dir = tl_program_cache_dir(dir, sizeof dir);
    return Py_BuildValue("{s:l,s:l,s:l,s:l,s:s}", "builds", s.builds, "binary_loads", s.binary_loads, "cache_writes",
                         s.cache_writes, "cache_rejects", s.cache_rejects, "cache_dir", has_dir ? dir : NULL);
}

static PyObject *
fn_build_log(PyObject *Py_UNUSED(m), PyObject *arg)
{
    tl_err err = {0};
    char *log = NULL;
    const char *family = PyUnicode_AsUTF8(arg);
    if (family == NULL) return NULL;
    if (tl_program_build_log(family, &log, &err) != TL_OK) return tl_raise(&err), NULL;
    PyObject *r = PyUnicode_DecodeUTF8(log, (Py_ssize_t)strlen(log), "replace");
    free(log);
    return r;
}

#ifdef TL_TEST_HOOKS                                   /* benchmark-only: test-hooks builds */
/* Raw reference loops. mode 0: tl_ew_contig_f32 ADD on n floats, args set once, `iters` enqueues, then
 * one clFinish; mode 1: the same with clFinish after every enqueue; mode 2: tl_bench_copy_f32 on n floats.
 * Returns seconds per enqueue (wall time, including the final finish). */
static tl_status
raw_loop(int mode, int n, int iters, double *per_op, tl_err *err)
{
    const tl_runtime *rt;
    cl_kernel k = NULL;
    cl_mem buf[3] = {NULL, NULL, NULL};
    cl_int rc = CL_SUCCESS;
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    st = mode == 2 ? tl_program_create_kernel("bench", "tl_bench_copy_f32", &k, err)
                   : tl_program_create_kernel("elementwise", "tl_ew_contig_f32", &k, err);
    if (st != TL_OK) return st;
    for (int i = 0; i < 3; i++) {
        buf[i] = clCreateBuffer(rt->ctx, CL_MEM_READ_WRITE, (size_t)n * 4, NULL, &rc);
        if (rc != CL_SUCCESS) { st = tl_err_set(err, rc, "clCreateBuffer", "raw loop"); goto done; }
        float one = 1.0f;                                /* touch every page: untouched memory reads too fast */
        TL_CL(err, cl_fail, clEnqueueFillBuffer, (rt->q0, buf[i], &one, sizeof one, 0, (size_t)n * 4, 0, NULL, NULL));
    }
    if (mode == 2) {
        TL_CL(err, cl_fail, clSetKernelArg, (k, 0, sizeof n, &n));
        TL_CL(err, cl_fail, clSetKernelArg, (k, 1, sizeof(cl_mem), &buf[0]));
        TL_CL(err, cl_fail, clSetKernelArg, (k, 2, sizeof(cl_mem), &buf[1]));
    } else {
        tl_layout L;
        int op = TL_EW_ADD;
        float zero = 0.0f;
        memset(&L, 0, sizeof L);
        L.ndim = 1; L.n = n; L.shape[0] = n;
        TL_CL(err, cl_fail, clSetKernelArg, (k, 0, sizeof op, &op));
        TL_CL(err, cl_fail, clSetKernelArg, (k, 1, sizeof L, &L));
        for (int i = 0; i < 3; i++) TL_CL(err, cl_fail, clSetKernelArg, (k, (cl_uint)(2 + i), sizeof(cl_mem), &buf[i]));
        TL_CL(err, cl_fail, clSetKernelArg, (k, 5, sizeof(cl_mem), NULL));
        for (int i = 6; i < 9; i++) TL_CL(err, cl_fail, clSetKernelArg, (k, (cl_uint)i, sizeof zero, &zero));
    }
    size_t lws = 256, gws = tl_round_up((size_t)n, lws);
    size_t kmax = 0;
    clGetKernelWorkGroupInfo(k, rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    if (kmax < lws) { lws = kmax; gws = tl_round_up((size_t)n, lws); }
    TL_CL(err, cl_fail, clEnqueueNDRangeKernel, (rt->q0, k, 1, NULL, &gws, &lws, 0, NULL, NULL));   /* warm-up */
    TL_CL(err, cl_fail, clFinish, (rt->q0));
    double t0 = tl_now_s();
    for (int i = 0; i < iters; i++) {
        TL_CL(err, cl_fail, clEnqueueNDRangeKernel, (rt->q0, k, 1, NULL, &gws, &lws, 0, NULL, NULL));
        if (mode == 1) TL_CL(err, cl_fail, clFinish, (rt->q0));
    }
    TL_CL(err, cl_fail, clFinish, (rt->q0));
    *per_op = (tl_now_s() - t0) / iters;
    goto done;
cl_fail:
    st = err->code;
done:
    for (int i = 0; i < 3; i++) if (buf[i] != NULL) clReleaseMemObject(buf[i]);
    if (k != NULL) clReleaseKernel(k);
    return st;
}

static PyObject *
fn_bench_raw(PyObject *Py_UNUSED(m), PyObject *args)
{
    int mode, n, iters;
    double per_op = 0.0;
    tl_err err = {0};
    tl_status st;
    if (!PyArg_ParseTuple(args, "iii:_bench_raw", &mode, &n, &iters)) return NULL;
    if (mode < 0 || mode > 2 || n <= 0 || iters <= 0)
        return PyErr_Format(PyExc_ValueError, "_bench_raw: mode must be 0..2 and n, iters positive");
    Py_BEGIN_ALLOW_THREADS
    st = raw_loop(mode, n, iters, &per_op, &err);
    Py_END_ALLOW_THREADS
    if (st != TL_OK) return tl_raise(&err), NULL;
    return PyFloat_FromDouble(per_op);
}

/* Raw handles for benchmarks that drive another OpenCL library (CLBlast through ctypes) on tlgpu's own
 * buffers and queue: (cl_mem, offset in elements) of a tensor, and (queue, context, device). The caller
 * owns the ordering: such work is outside tlgpu's stream accounting, so end it with tlgpu.synchronize(). */
static PyObject *
fn_cl_handles(PyObject *Py_UNUSED(m), PyObject *arg)
{
    if (!tl_tensor_check(arg))
        return PyErr_Format(PyExc_TypeError, "_cl_handles: expected a Tensor, got %s", Py_TYPE(arg)->tp_name);
    tl_tensor *t = tl_tensor_CAST(arg);
    if (t->storage == NULL) return Py_BuildValue("(Kn)", 0ULL, t->offset);
    if (t->storage->ready_ev != NULL && tl_stream_synchronize(&(tl_err){0}) != TL_OK)   /* finish its upload */
        return PyErr_Format(PyExc_RuntimeError, "_cl_handles: synchronize failed");
    return Py_BuildValue("(Kn)", (unsigned long long)(uintptr_t)t->storage->mem, t->offset);
}

static PyObject *
fn_cl_queue(PyObject *Py_UNUSED(m), PyObject *Py_UNUSED(ignored))
{
    const tl_runtime *rt;
    tl_err err = {0};
    if (tl_runtime_get(&rt, &err) != TL_OK) return tl_raise(&err), NULL;
    return Py_BuildValue("(KKK)", (unsigned long long)(uintptr_t)rt->q0, (unsigned long long)(uintptr_t)rt->ctx,
                         (unsigned long long)(uintptr_t)rt->device);
}
#endif

static const PyMethodDef runtime_functions[] = {
    {"devices", fn_devices, METH_NOARGS, "List every OpenCL device as a dict."},
    {"_device", fn_device, METH_NOARGS, "The selected device as a dict (initialises the runtime)."},
    {"settings", fn_settings, METH_NOARGS,
     "settings(): every TLGPU_* environment variable: name -> {'value', 'default', 'doc', 'kind', 'read', "
     "'test_only'}."},
    {"synchronize", fn_synchronize, METH_NOARGS, "Wait until all enqueued work is done (a sync point)."},
    {"stream_stats", fn_stream_stats, METH_NOARGS,
     "{'enqueued', 'flushes', 'waits', 'backpressure_waits'} since the last reset."},
    {"reset_stream_stats", fn_reset_stream_stats, METH_NOARGS, "Zero the stream counters."},
    {"memory_stats", fn_memory_stats, METH_NOARGS, "Pool statistics (bytes and counts)."},
    {"reset_peak_memory_stats", fn_reset_peak, METH_NOARGS, "Peak := live; zero the pool counters."},
    {"empty_cache", fn_empty_cache, METH_NOARGS, "Release every cached pool block to the device."},
    {"_pool_block_bytes", fn_pool_block_bytes, METH_O,
     "The bytes of the pool block (its size class) that a buffer of n bytes takes: what memory_stats() counts."},
    {"_program_stats", fn_program_stats, METH_NOARGS, "Kernel program builds and disk-cache counters."},
    {"_build_log", fn_build_log, METH_O, "_build_log(family): the compiler's log of that kernel program."},
#ifdef TL_TEST_HOOKS
    {"_bench_raw", fn_bench_raw, METH_VARARGS, "_bench_raw(mode, n, iters): raw OpenCL reference loop."},
    {"_cl_handles", fn_cl_handles, METH_O, "_cl_handles(t): (cl_mem, offset in elements) as ints, for benchmarks."},
    {"_cl_queue", fn_cl_queue, METH_NOARGS, "_cl_queue(): (compute queue, context, device) as ints, for benchmarks."},
#endif
    {NULL, NULL, 0, NULL},
};

const tl_family tl_family_runtime = {runtime_functions, NULL, NULL, NULL, NULL};
