/* probe_launch.c: where a small kernel's launch time goes on a GPU's OpenCL (issue 29: the decode step's
 * ~7 us a launch on NVIDIA). N launches of a one-work-group kernel, enqueued back to back then clFinish:
 * host microseconds per clEnqueueNDRangeKernel, wall per launch to the finish, and (on a profiling queue)
 * the device's busy time and the gap between one kernel's end and the next one's start. Three kernels: 2
 * buffer arguments, 24 scalar arguments (a GEMM's), and a 256-byte struct by value (an elementwise layout).
 * Build: gcc -O2 -o /tmp/probe_launch benchmarks/probe_launch.c -lOpenCL; run: /tmp/probe_launch [N] */
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *src =
    "kernel void k2(global float *a, global const float *b) { a[get_global_id(0)] += b[get_global_id(0)]; }\n"
    "kernel void k24(global float *a, global const float *b, int c0, int c1, int c2, int c3, int c4, int c5,\n"
    "  int c6, int c7, int c8, int c9, int c10, int c11, int c12, int c13, int c14, int c15, int c16, int c17,\n"
    "  int c18, int c19, int c20, int c21) { a[get_global_id(0)] += b[get_global_id(0)] * (float)(c0 + c21); }\n"
    "typedef struct { int v[64]; } big;\n"
    "kernel void kst(global float *a, global const float *b, big s) { a[get_global_id(0)] += b[get_global_id(0)] * (float)s.v[63]; }\n";

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
    const int n = argc > 1 ? atoi(argv[1]) : 50;
    cl_platform_id plats[8];
    cl_uint np = 0;
    cl_device_id dev = NULL;
    cl_int rc;
    clGetPlatformIDs(8, plats, &np);
    for (cl_uint i = 0; i < np && dev == NULL; i++)
        if (clGetDeviceIDs(plats[i], CL_DEVICE_TYPE_GPU, 1, &dev, NULL) != CL_SUCCESS) dev = NULL;
    if (dev == NULL) return fprintf(stderr, "no GPU\n"), 1;
    char name[256];
    clGetDeviceInfo(dev, CL_DEVICE_NAME, sizeof name, name, NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &rc);
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &rc);
    if (clBuildProgram(p, 1, &dev, NULL, NULL, NULL) != CL_SUCCESS) return fprintf(stderr, "build\n"), 1;
    cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &rc);
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 1 << 20, NULL, &rc);
    const char *names[3] = {"k2", "k24", "kst"};
    cl_queue_properties prof[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_PROFILING_ENABLE, 0};
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &rc);
    cl_command_queue qp = clCreateCommandQueueWithProperties(ctx, dev, prof, &rc);
    printf("%s, %d launches of one 256-item work-group\n", name, n);
    for (int w = 0; w < 3; w++) {
        cl_kernel k = clCreateKernel(p, names[w], &rc);
        clSetKernelArg(k, 0, sizeof a, &a);
        clSetKernelArg(k, 1, sizeof b, &b);
        if (w == 1) for (int i = 0; i < 22; i++) clSetKernelArg(k, 2 + i, sizeof i, &i);
        if (w == 2) { int big[64] = {0}; clSetKernelArg(k, 2, sizeof big, big); }
        size_t g = 256, l = 256;
        double best_enq = 1e30, best_all = 1e30;
        for (int r = 0; r < 20; r++) {
            double t0 = now_us();
            for (int i = 0; i < n; i++) clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL);
            double t1 = now_us();
            clFinish(q);
            double t2 = now_us();
            if (r > 2 && (t1 - t0) / n < best_enq) best_enq = (t1 - t0) / n;
            if (r > 2 && (t2 - t0) / n < best_all) best_all = (t2 - t0) / n;
        }
        cl_event *ev = malloc(sizeof(cl_event) * n);
        for (int i = 0; i < n; i++) clEnqueueNDRangeKernel(qp, k, 1, NULL, &g, &l, 0, NULL, &ev[i]);
        clFinish(qp);
        double busy = 0, gap = 0;
        cl_ulong s0, e0, s1, e1;
        for (int i = 0; i < n; i++) {
            clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_START, sizeof s1, &s1, NULL);
            clGetEventProfilingInfo(ev[i], CL_PROFILING_COMMAND_END, sizeof e1, &e1, NULL);
            busy += (double)(e1 - s1) / 1e3;
            if (i > 0) gap += (double)(s1 - e0) / 1e3;
            s0 = s1; e0 = e1;
            clReleaseEvent(ev[i]);
        }
        (void)s0;
        free(ev);
        printf("%-4s host enqueue %.2f us a launch, to finish %.2f us a launch; profiled: busy %.2f us, gap %.2f us\n",
               names[w], best_enq, best_all, busy / n, gap / (n - 1));
        clReleaseKernel(k);
    }
    return 0;
}
