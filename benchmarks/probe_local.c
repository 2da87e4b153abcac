/* probe_local.c: does NVIDIA's OpenCL take a dynamic local-memory argument above the 48 KiB it reports?
 * For each size: enqueue a kernel whose work-group fills a `local` argument of that size, read it back,
 * check, and print the shared-window offset of the argument (alignment). Build: gcc probe_local.c -lOpenCL. */
#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *src =
    "kernel void k(global float *o, local float *s, int n, global uint *addr) {\n"
    "  int l = get_local_id(0), z = get_local_size(0);\n"
    "  for (int i = l; i < n; i += z) s[i] = (float)(i % 1000003);\n"
    "  barrier(CLK_LOCAL_MEM_FENCE);\n"
    "  float acc = 0; for (int i = l; i < n; i += z) acc += s[n - 1 - i];\n"
    "  o[get_global_id(0)] = acc;\n"
    "  if (get_global_id(0) == 0) addr[0] = (uint)(size_t)s;\n"
    "}\n";

int
main(void)
{
    cl_platform_id ps[8];
    cl_uint np = 0;
    clGetPlatformIDs(8, ps, &np);
    for (cl_uint p = 0; p < np; p++) {
        char name[256];
        clGetPlatformInfo(ps[p], CL_PLATFORM_NAME, sizeof name, name, NULL);
        if (!strstr(name, "NVIDIA")) continue;
        cl_device_id d;
        clGetDeviceIDs(ps[p], CL_DEVICE_TYPE_GPU, 1, &d, NULL);
        cl_int rc;
        cl_context ctx = clCreateContext(NULL, 1, &d, NULL, NULL, &rc);
        cl_command_queue q = clCreateCommandQueue(ctx, d, 0, &rc);
        cl_program pr = clCreateProgramWithSource(ctx, 1, &src, NULL, &rc);
        rc = clBuildProgram(pr, 1, &d, "", NULL, NULL);
        cl_kernel k = clCreateKernel(pr, "k", &rc);
        const int threads = 256, groups = 264;
        cl_mem o = clCreateBuffer(ctx, CL_MEM_READ_WRITE, sizeof(float) * threads * groups, NULL, &rc);
        cl_mem a = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 16, NULL, &rc);
        size_t sizes[] = {32768, 49152, 65536, 98304, 131072, 163840, 200704, 227328};
        for (int i = 0; i < 8; i++) {
            int n = (int)(sizes[i] / 4);
            clSetKernelArg(k, 0, sizeof o, &o);
            cl_int ra = clSetKernelArg(k, 1, sizes[i], NULL);
            clSetKernelArg(k, 2, sizeof n, &n);
            clSetKernelArg(k, 3, sizeof a, &a);
            size_t g = (size_t)threads * groups, l = threads;
            cl_int re = clEnqueueNDRangeKernel(q, k, 1, NULL, &g, &l, 0, NULL, NULL);
            cl_int rf = clFinish(q);
            float *h = malloc(sizeof(float) * threads * groups);
            unsigned addr = 0;
            cl_int rr = clEnqueueReadBuffer(q, o, CL_TRUE, 0, sizeof(float) * threads * groups, h, 0, NULL, NULL);
            clEnqueueReadBuffer(q, a, CL_TRUE, 0, 4, &addr, 0, NULL, NULL);
            int bad = 0;
            for (int t = 0; t < threads; t++) {
                double ref = 0;
                for (int j = t; j < n; j += threads) ref += (float)((n - 1 - j) % 1000003);
                float acc = 0;
                for (int j = t; j < n; j += threads) acc += (float)((n - 1 - j) % 1000003);
                if (h[t] != acc) bad++;
                (void)ref;
            }
            printf("local %6zu B: setarg %d enqueue %d finish %d read %d wrong %d addr 0x%x\n", sizes[i], ra, re, rf,
                   rr, bad, addr);
            free(h);
        }
        return 0;
    }
    printf("no NVIDIA platform\n");
    return 1;
}
