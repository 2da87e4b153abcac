/* probe_subdev.c: does a one-compute-unit sub-device (clCreateSubDevices, PoCL's pthread driver) run small
 * kernels without waking the whole thread pool? N launches of an n-element add then clFinish, on a queue of
 * the root device and on one of a 1-CU sub-device in the same context; microseconds per launch, best of
 * 5 x 200 batches. For issue 29 (small work on CPU devices).
 * Build: gcc -O2 -o /tmp/probe_subdev benchmarks/probe_subdev.c -lOpenCL; run: /tmp/probe_subdev [N] [n] */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
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

static double
per_launch(cl_command_queue q, cl_kernel k, int n, size_t items)
{
    double best = 1e30;
    for (int r = 0; r < 5; r++) {
        double t0 = now_us();
        for (int it = 0; it < 200; it++) {
            for (int i = 0; i < n; i++) clEnqueueNDRangeKernel(q, k, 1, NULL, &items, NULL, 0, NULL, NULL);
            clFinish(q);
        }
        double t = (now_us() - t0) / (200.0 * n);
        if (t < best) best = t;
    }
    return best;
}

int
main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 30;
    const size_t items = argc > 2 ? (size_t)atol(argv[2]) : 256;
    cl_platform_id plats[8];
    cl_device_id dev = NULL, sub[64];
    cl_uint nplat = 0, nsub = 0, cus = 0;
    cl_int rc;
    clGetPlatformIDs(8, plats, &nplat);
    for (cl_uint i = 0; i < nplat && dev == NULL; i++)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_CPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (dev == NULL) return fprintf(stderr, "no OpenCL CPU device\n"), 1;
    clGetDeviceInfo(dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof cus, &cus, NULL);
    const cl_device_partition_property props[] = {CL_DEVICE_PARTITION_BY_COUNTS, 1,
                                                  CL_DEVICE_PARTITION_BY_COUNTS_LIST_END, 0};
    rc = clCreateSubDevices(dev, props, 64, sub, &nsub);
    if (rc != CL_SUCCESS || nsub < 1) return fprintf(stderr, "clCreateSubDevices: %d\n", rc), 1;
    cl_device_id both[2] = {dev, sub[0]};
    cl_context ctx = clCreateContext(NULL, 2, both, NULL, NULL, &rc);
    if (rc != CL_SUCCESS) return fprintf(stderr, "clCreateContext: %d\n", rc), 1;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &rc);
    if ((rc = clBuildProgram(p, 2, both, NULL, NULL, NULL)) != CL_SUCCESS) return fprintf(stderr, "build %d\n", rc), 1;
    cl_kernel k = clCreateKernel(p, "add", &rc);
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, items * 4, NULL, &rc);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, items * 4, NULL, &rc);
    float zero = 0.0f;
    clSetKernelArg(k, 0, sizeof a, &a);
    clSetKernelArg(k, 1, sizeof b, &b);
    cl_command_queue q0 = clCreateCommandQueueWithProperties(ctx, dev, NULL, &rc);
    cl_command_queue q1 = clCreateCommandQueueWithProperties(ctx, sub[0], NULL, &rc);
    clEnqueueFillBuffer(q0, a, &zero, 4, 0, items * 4, 0, NULL, NULL);
    clEnqueueFillBuffer(q0, b, &zero, 4, 0, items * 4, 0, NULL, NULL);
    clFinish(q0);
    per_launch(q0, k, n, items);
    per_launch(q1, k, n, items);
    double t0 = per_launch(q0, k, n, items), t1 = per_launch(q1, k, n, items);
    printf("%u compute units, %d launches of %zu items: root device %.2f us a launch, 1-CU sub-device %.2f\n", cus, n,
           items, t0, t1);
    return 0;
}
