/* probe_cmdbuf.c: does cl_khr_command_buffer make a batch of small kernels cheaper than enqueuing them one by
 * one? N launches of a 1024-element add, (a) clEnqueueNDRangeKernel N times then clFinish, (b) one command
 * buffer holding the same N commands, clEnqueueCommandBufferKHR then clFinish; microseconds per batch, best
 * of 5 x 200 batches. For tlgpu.jit's replay on PoCL (issue 29; NVIDIA's OpenCL lacks the extension).
 * Build: gcc -O2 -o /tmp/probe_cmdbuf benchmarks/probe_cmdbuf.c -lOpenCL; run: /tmp/probe_cmdbuf [N] */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <CL/cl_ext.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *src = "kernel void add(global float *a, global const float *b) {"
                         "  int i = get_global_id(0); a[i] += b[i]; }";

static double
now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

int
main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 30, iters = 200;
    cl_platform_id plat;
    cl_device_id dev;
    cl_int rc;
    char ext[8192] = "";
    if (clGetPlatformIDs(1, &plat, NULL) != CL_SUCCESS || clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &dev, NULL))
        return fprintf(stderr, "no OpenCL device\n"), 1;
    clGetDeviceInfo(dev, CL_DEVICE_EXTENSIONS, sizeof ext, ext, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &rc);
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &rc);
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &rc);
    clBuildProgram(p, 1, &dev, NULL, NULL, NULL);
    cl_kernel k = clCreateKernel(p, "add", &rc);
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096, NULL, &rc), b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 4096,
                                                                                         NULL, &rc);
    clSetKernelArg(k, 0, sizeof a, &a);
    clSetKernelArg(k, 1, sizeof b, &b);
    size_t gws = 1024;
    double best_loop = 1e30, best_cb = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now_us();
        for (int it = 0; it < iters; it++) {
            for (int i = 0; i < n; i++) clEnqueueNDRangeKernel(q, k, 1, NULL, &gws, NULL, 0, NULL, NULL);
            clFinish(q);
        }
        double t = (now_us() - t0) / iters;
        if (t < best_loop) best_loop = t;
    }
    printf("device: has cl_khr_command_buffer: %s\n", strstr(ext, "cl_khr_command_buffer") ? "yes" : "no");
    printf("%d launches + finish: %.1f us per batch (%.2f us per launch)\n", n, best_loop, best_loop / n);
    if (!strstr(ext, "cl_khr_command_buffer")) return 0;
    clCreateCommandBufferKHR_fn create =
        (clCreateCommandBufferKHR_fn)clGetExtensionFunctionAddressForPlatform(plat, "clCreateCommandBufferKHR");
    clCommandNDRangeKernelKHR_fn cmd =
        (clCommandNDRangeKernelKHR_fn)clGetExtensionFunctionAddressForPlatform(plat, "clCommandNDRangeKernelKHR");
    clFinalizeCommandBufferKHR_fn fin =
        (clFinalizeCommandBufferKHR_fn)clGetExtensionFunctionAddressForPlatform(plat, "clFinalizeCommandBufferKHR");
    clEnqueueCommandBufferKHR_fn enq =
        (clEnqueueCommandBufferKHR_fn)clGetExtensionFunctionAddressForPlatform(plat, "clEnqueueCommandBufferKHR");
    if (!create || !cmd || !fin || !enq) return fprintf(stderr, "command buffer entry points missing\n"), 1;
    cl_command_buffer_khr cb = create(1, &q, NULL, &rc);
    if (rc != CL_SUCCESS) return fprintf(stderr, "clCreateCommandBufferKHR: %d\n", rc), 1;
    for (int i = 0; i < n; i++)
        if ((rc = cmd(cb, NULL, NULL, k, 1, NULL, &gws, NULL, 0, NULL, NULL, NULL)) != CL_SUCCESS)
            return fprintf(stderr, "clCommandNDRangeKernelKHR: %d\n", rc), 1;
    if ((rc = fin(cb)) != CL_SUCCESS) return fprintf(stderr, "clFinalizeCommandBufferKHR: %d\n", rc), 1;
    for (int r = 0; r < 5; r++) {
        double t0 = now_us();
        for (int it = 0; it < iters; it++) {
            if ((rc = enq(0, NULL, cb, 0, NULL, NULL)) != CL_SUCCESS)
                return fprintf(stderr, "clEnqueueCommandBufferKHR: %d\n", rc), 1;
            clFinish(q);
        }
        double t = (now_us() - t0) / iters;
        if (t < best_cb) best_cb = t;
    }
    printf("one command buffer of %d + finish: %.1f us per batch (%.2f us per command)\n", n, best_cb, best_cb / n);
    return 0;
}
