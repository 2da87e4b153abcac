/* pub_bench.c: the benchmark's reference transfers (benchmarks/bench_publish.py, bench_host_reads.py).
 * Benchmark-only: compiled in test-hooks builds alone (TL_TEST_HOOKS); a release build has none of it. */
#include "clock.h"
#include "pub_bench.h"
#include "cl_runtime.h"
#include <string.h>
#include <sys/mman.h>

#ifdef TL_TEST_HOOKS

/* Reference for the benchmark: device-to-host reads of nbytes. mode 0: into a pinned buffer mapped once;
 * 1: into a MAP_SHARED mapping (as the shared-memory slots are); 2: the same mapping registered first as a
 * CL_MEM_USE_HOST_PTR buffer, read into its pointer; 3: a copy into that registered buffer, then a map and
 * unmap of it. The data are checked after the timed reads (a DeviceError if wrong). */
tl_status
tl_pub_bench_pinned_read(size_t nbytes, int iters, int mode, double *seconds, tl_err *err)
{
    const tl_runtime *rt;
    cl_mem dev = NULL, pin = NULL;
    cl_command_queue q = NULL;
    void *host = NULL, *shared = MAP_FAILED;
    cl_int rc;
    float pattern = 1.5f, got[2] = {0, 0};
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    q = clCreateCommandQueue(rt->ctx, rt->device, 0, &rc);
    if (rc != CL_SUCCESS) { q = NULL; st = tl_err_set(err, rc, "clCreateCommandQueue", "bench"); goto done; }
    dev = clCreateBuffer(rt->ctx, CL_MEM_READ_WRITE, nbytes, NULL, &rc);
    if (rc == CL_SUCCESS && mode == 0)
        pin = clCreateBuffer(rt->ctx, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, nbytes, NULL, &rc);
    if (rc == CL_SUCCESS && mode > 0) {
        shared = mmap(NULL, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shared == MAP_FAILED) { st = tl_err_set(err, TL_E_NOMEM, "mmap", "bench"); goto done; }
        memset(shared, 0, nbytes);
        host = shared;
        if (mode >= 2) pin = clCreateBuffer(rt->ctx, CL_MEM_USE_HOST_PTR | CL_MEM_READ_WRITE, nbytes, shared, &rc);
    }
    if (rc != CL_SUCCESS) { st = tl_err_set(err, rc, "clCreateBuffer", "bench"); goto done; }
    if (mode == 0) {
        host = clEnqueueMapBuffer(q, pin, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, nbytes, 0, NULL, NULL, &rc);
        if (rc != CL_SUCCESS) { host = NULL; st = tl_err_set(err, rc, "clEnqueueMapBuffer", "bench"); goto done; }
    }
    TL_CL(err, done, clEnqueueFillBuffer, (q, dev, &pattern, 4, 0, nbytes, 0, NULL, NULL));
    double t0 = 0;
    for (int i = -1; i < iters; i++) {                                   /* i = -1: warm-up */
        if (i == 0) t0 = tl_now_s();
        if (mode < 3) {
            TL_CL(err, done, clEnqueueReadBuffer, (q, dev, CL_TRUE, 0, nbytes, host, 0, NULL, NULL));
            continue;
        }
        TL_CL(err, done, clEnqueueCopyBuffer, (q, dev, pin, 0, 0, nbytes, 0, NULL, NULL));
        void *m = clEnqueueMapBuffer(q, pin, CL_TRUE, CL_MAP_READ, 0, nbytes, 0, NULL, NULL, &rc);
        if (rc != CL_SUCCESS) { st = tl_err_set(err, rc, "clEnqueueMapBuffer", "bench"); goto done; }
        if (m != shared) { st = tl_err_set(err, TL_E_INVALID, "bench", "USE_HOST_PTR map moved"); goto done; }
        TL_CL(err, done, clEnqueueUnmapMemObject, (q, pin, m, 0, NULL, NULL));
        TL_CL(err, done, clFinish, (q));
    }
    *seconds = (tl_now_s() - t0) / (iters > 0 ? iters : 1);
    memcpy(&got[0], host, 4);
    memcpy(&got[1], (char *)host + nbytes / 4 * 4 - 4, 4);
    if (got[0] != pattern || got[1] != pattern) st = tl_err_set(err, TL_E_INVALID, "bench", "wrong data read");
done:
    if (err->code != TL_OK) st = err->code;
    if (mode == 0 && host != NULL) { clEnqueueUnmapMemObject(q, pin, host, 0, NULL, NULL); clFinish(q); }
    if (pin != NULL) clReleaseMemObject(pin);
    if (dev != NULL) clReleaseMemObject(dev);
    if (q != NULL) clReleaseCommandQueue(q);
    if (shared != MAP_FAILED) munmap(shared, nbytes);
    return st;
}
#endif
