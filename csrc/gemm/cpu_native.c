/* cpu_native.c: native commands on CPU OpenCL devices (see cpu_native.h): the cells of host pointers, the
 * submit of one job, and the part threads.
 * Host pointers: PoCL 3.1 hands a native kernel the host pointers of its mem_list sorted in its own order
 * and without duplicates, not at the caller's args_mem_loc order (measured: passing buffers 3 2 1 0 gave
 * the callback 0 1 2 3), so a job never reads those slots: a one-buffer native kernel (no order to get
 * wrong) stores the pointer in the buffer's cell, in queue order before the jobs that read it; the cell
 * goes with the buffer (clSetMemObjectDestructorCallback, which runs only after the last command using it
 * completed).
 * Threads: helpers of our own that sleep on a condition variable between jobs (OpenBLAS's own workers spin
 * after each call, taking a core from PoCL's workers and the Python thread on a 2-core machine). One job at
 * a time: the compute queue is in order, so only one runs. Invariants: the job's callback touches no Python
 * object; a helper runs only the parts of the job current when it was woken. */
#include "cpu_native.h"
#include "cl_runtime.h"
#include "stream.h"
#include "capture.h"
#include "settings.h"
#include "state.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sched.h>
#include <time.h>

typedef tl_native_cell cell;
enum { NBUCKET = 256 };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static cell *cells[NBUCKET];          /* under lock */
static atomic_long n_learnt;

static unsigned
bucket(cl_mem m)
{
    return (unsigned)(((uintptr_t)m >> 4) % NBUCKET);
}

static void CL_CALLBACK
drop_cell(cl_mem m, void *c)
{
    pthread_mutex_lock(&lock);
    for (cell **pp = &cells[bucket(m)]; *pp != NULL; pp = &(*pp)->next)
        if (*pp == c) { *pp = ((cell *)c)->next; break; }
    pthread_mutex_unlock(&lock);
    free(c);
}

typedef struct { cl_mem mem; cell *c; } learn_args;

static void CL_CALLBACK
learn_ptr(void *args)
{
    learn_args *l = args;             /* the runtime put the buffer's host pointer in l->mem */
    l->c->p = (void *)l->mem;
}

/* The cell of s's buffer; a new one gets its pointer from a one-buffer native kernel. NULL with err set. */
static cell *
cell_of(tl_storage *s, tl_err *err)
{
    cell *c;
    pthread_mutex_lock(&lock);
    for (c = cells[bucket(s->mem)]; c != NULL && c->mem != s->mem; c = c->next) {}
    pthread_mutex_unlock(&lock);
    if (c != NULL && c->queued) return c;
    if (c == NULL) {
        if ((c = calloc(1, sizeof *c)) == NULL) {
            tl_err_set(err, TL_E_NOMEM, "cpu_native", "pointer cell");
            return NULL;
        }
        c->mem = s->mem;
        cl_int rc = clSetMemObjectDestructorCallback(s->mem, drop_cell, c);
        if (rc != CL_SUCCESS) { free(c); tl_err_set(err, rc, "clSetMemObjectDestructorCallback", NULL); return NULL; }
        pthread_mutex_lock(&lock);
        c->next = cells[bucket(s->mem)];
        cells[bucket(s->mem)] = c;
        pthread_mutex_unlock(&lock);
    }
    learn_args l = {s->mem, c};
    const void *loc = &l.mem;
    if (tl_stream_native(learn_ptr, &l, sizeof l, &loc, &s, 1, 0u, "cpu_blas_pointer", err) != TL_OK) return NULL;
    c->queued = 1;                    /* a failed enqueue leaves the cell to try again */
    tl_capture_drop_last();           /* a trace keeps the buffer alive: its pointer is learnt for good */
    atomic_fetch_add(&n_learnt, 1);
    return c;
}

long
tl_cpu_native_pointers(void)
{
    return atomic_load(&n_learnt);
}

int
tl_cpu_native_submit(void (CL_CALLBACK *fn)(void *), void *job, size_t size, tl_native_cell **const *slot,
                     cl_mem *mem, tl_storage *const *st, int n, unsigned wmask, const char *what)
{
    tl_storage *uniq[TL_NATIVE_MAX];
    const void *loc[TL_NATIVE_MAX];
    tl_err err = {0};
    int nu = 0;
    unsigned written = 0;
    for (int i = 0; i < n && i < TL_NATIVE_MAX; i++) {
        if (st[i] == NULL) continue;
        if ((*slot[i] = cell_of(st[i], &err)) == NULL) return tl_raise(&err);
        int seen = -1;                /* each buffer once in mem_list (PoCL drops repeats) */
        for (int u = 0; u < nu; u++)
            if (uniq[u] == st[i]) seen = u;
        if (seen < 0) { seen = nu; uniq[nu] = st[i]; mem[nu] = st[i]->mem; loc[nu] = &mem[nu]; nu++; }
        if (wmask >> i & 1u) written |= 1u << seen;
    }
    if (tl_stream_native(fn, job, size, loc, uniq, nu, written, what, &err) != TL_OK) return tl_raise(&err);
    return 0;
}

/* ---- the device test ---- */
static long spin_us = -1;             /* after a part, how long a helper polls for the next job */
static int dev_state;                 /* 0 not tested, 1 a CPU that runs native kernels, -1 not (under lock) */
static int dev_units;
static char dev_reason[128];

int
tl_cpu_native_device(int *units, char *reason, size_t cap)
{
    pthread_mutex_lock(&lock);
    if (dev_state == 0) {
        const tl_runtime *rt;
        tl_err err = {0};
        cl_device_exec_capabilities caps = 0;
        dev_state = -1;
        if (tl_runtime_get(&rt, &err) != TL_OK) {
            tl_err_clear(&err);
            snprintf(dev_reason, sizeof dev_reason, "no OpenCL runtime");
            dev_state = 0;            /* tried again at the next call, as the runtime is */
        } else {
            clGetDeviceInfo(rt->device, CL_DEVICE_EXECUTION_CAPABILITIES, sizeof caps, &caps, NULL);
            if (!(rt->info.type & CL_DEVICE_TYPE_CPU) || !rt->info.unified_memory || !(caps & CL_EXEC_NATIVE_KERNEL))
                snprintf(dev_reason, sizeof dev_reason,
                         "the device is not a CPU with unified memory and native kernels");
            else {
                dev_state = 1;
                dev_units = rt->info.compute_units ? (int)rt->info.compute_units : 1;
                /* 500: covers the gaps between an MLP step's products */
                __atomic_store_n(&spin_us, tl_setting_int(TL_SET_BLAS_SPIN_US), __ATOMIC_RELAXED);
            }
        }
    }
    const int ok = dev_state == 1;
    if (units != NULL) *units = dev_units;
    if (!ok && reason != NULL) snprintf(reason, cap, "%s", dev_reason);
    pthread_mutex_unlock(&lock);
    return ok;
}

long
tl_cpu_native_spin_us(void)
{
    return __atomic_load_n(&spin_us, __ATOMIC_RELAXED);
}

/* ---- the part threads ---- */
enum { MAX_HELPERS = 63 };
static pthread_mutex_t hlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hgo = PTHREAD_COND_INITIALIZER, hdone = PTHREAD_COND_INITIALIZER;
static const void *hjob;
static void (*hfn)(const void *, int, int);
static int hparts, nhelpers;
static unsigned long hpending;        /* helpers still running the current job (atomic: polled) */
static unsigned long hgen, hborn[MAX_HELPERS + 1];   /* hborn[part]: hgen when that helper was created */

static void
forget_helpers(void)                  /* in a forked child: the helper threads stayed in the parent */
{
    pthread_mutex_init(&hlock, NULL);
    pthread_cond_init(&hgo, NULL);
    pthread_cond_init(&hdone, NULL);
    nhelpers = 0;
}

/* After a part, a helper polls for the next job for spin_us (yielding its core to any other runnable
 * thread) before it sleeps: a sleeping helper woken by the PoCL worker was placed on the waker's own core
 * and ran only after part 0 (measured in the MLP step: every split product ran its parts one after the
 * other); a polling one is already running on the other core. Likewise the PoCL worker polls for the
 * helpers' end after part 0 before it sleeps (a wake from sleep took 30-40 us of a 400 us product). */
static void
spin(const unsigned long *word, unsigned long value, int until_zero)   /* at most spin_us */
{
    struct timespec t0, t;
    const long us = tl_cpu_native_spin_us();
    if (us <= 0) return;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 1; until_zero ? __atomic_load_n(word, __ATOMIC_ACQUIRE) != 0 :
                                 __atomic_load_n(word, __ATOMIC_ACQUIRE) == value; i++) {
        sched_yield();
        if (i % 16 != 0) continue;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 >= us) return;
    }
}

static void *
helper(void *arg)
{
    const int part = (int)(intptr_t)arg;
    pthread_mutex_lock(&hlock);
    unsigned long seen = hborn[part];  /* jobs before this helper existed are not its work */
    for (;;) {
        while (__atomic_load_n(&hgen, __ATOMIC_ACQUIRE) == seen) pthread_cond_wait(&hgo, &hlock);
        seen = hgen;
        const void *j = hjob;
        void (*fn)(const void *, int, int) = hfn;
        int parts = hparts;
        pthread_mutex_unlock(&hlock);
        if (part < parts) fn(j, part, parts);
        pthread_mutex_lock(&hlock);
        if (__atomic_sub_fetch(&hpending, 1, __ATOMIC_RELEASE) == 0) pthread_cond_signal(&hdone);
        pthread_mutex_unlock(&hlock);
        spin(&hgen, seen, 0);
        pthread_mutex_lock(&hlock);
    }
    return NULL;
}

static void
register_atfork(void)
{
    pthread_atfork(NULL, NULL, forget_helpers);
}

void
tl_cpu_native_parts(void (*part)(const void *, int, int), const void *job, int parts)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, register_atfork);
    if (parts < 1) parts = 1;
    pthread_mutex_lock(&hlock);
    while (nhelpers < parts - 1 && nhelpers < MAX_HELPERS) {
        pthread_t th;
        hborn[nhelpers + 1] = hgen;
        if (pthread_create(&th, NULL, helper, (void *)(intptr_t)(nhelpers + 1)) != 0) break;
        pthread_detach(th);
        nhelpers++;
    }
    if (parts > nhelpers + 1) parts = nhelpers + 1;
    if (parts > 1) {
        hjob = job;
        hfn = part;
        hparts = parts;
        __atomic_store_n(&hpending, (unsigned long)nhelpers, __ATOMIC_RELAXED);
        __atomic_fetch_add(&hgen, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&hgo);
    }
    pthread_mutex_unlock(&hlock);
    part(job, 0, parts);
    if (parts > 1) {
        spin(&hpending, 0, 1);
        pthread_mutex_lock(&hlock);
        while (__atomic_load_n(&hpending, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&hdone, &hlock);
        pthread_mutex_unlock(&hlock);
    }
}
