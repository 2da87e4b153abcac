/* cpu_native.h: the machinery of host code run as native commands on CPU OpenCL devices (PoCL), shared by
 * the BLAS path (cpu_blas.c) and the quantized matrix-vector product (cpu_quant.c): the device test, the
 * buffers' host pointers (cells), one job's submit on the compute queue, and the part threads that split a
 * job on the PoCL worker and helper threads. docs/cpu.md. */
#ifndef TL_CPU_NATIVE_H
#define TL_CPU_NATIVE_H
#include "tensor.h"

/* A buffer's host pointer, learnt once per cl_mem by a one-buffer native command queued before the jobs that
 * read it (p is valid when a job runs); the cell goes with the buffer. */
typedef struct tl_native_cell { cl_mem mem; void *p; int queued; struct tl_native_cell *next; } tl_native_cell;
enum { TL_NATIVE_MAX = 8 };           /* buffers a job names */

/* Whether the device is a CPU with unified memory that runs native kernels: 1 (*units its compute units),
 * else 0 with why in reason. Reads TLGPU_BLAS_SPIN_US (the helpers' polling) on its first call. */
int tl_cpu_native_device(int *units, char *reason, size_t cap);
/* Enqueues fn(job copy) on the compute queue over storages st[0..n) (NULL: absent; bit i of wmask: st[i] is
 * written): *slot[i] gets st[i]'s cell, mem[] (inside job, TL_NATIVE_MAX entries) the runtime's copies of
 * the buffers, which the job never reads (PoCL passes them in its own order). 0, or -1 with an exception. */
int tl_cpu_native_submit(void (CL_CALLBACK *fn)(void *), void *job, size_t size, tl_native_cell **const *slot,
                         cl_mem *mem, tl_storage *const *st, int n, unsigned wmask, const char *what);
/* On the PoCL worker, inside a job: part(job, i, p) for i < p on p threads (this one and helpers that sleep
 * between jobs); p = parts, or fewer if threads could not be made. One job at a time (the queue is in order). */
void tl_cpu_native_parts(void (*part)(const void *job, int i, int p), const void *job, int parts);
long tl_cpu_native_spin_us(void);     /* TLGPU_BLAS_SPIN_US as read (-1 before the first device test) */
long tl_cpu_native_pointers(void);    /* buffers whose pointer was learnt */
#endif
