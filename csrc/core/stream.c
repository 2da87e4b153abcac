/* stream.c: enqueue accounting, flushes, sync points, cross-queue ordering and back-pressure.
 * q0 (compute) is in order, so its commands need no events among themselves. Each storage records
 * use_seq, the q0 sequence number of the last command touching it. Where queues meet:
 *  - a q1 command on a buffer that q0 used after the newest marker gets a fresh marker on q0
 *    (clEnqueueMarkerWithWaitList covers all earlier q0 work) in its wait list; markers are reused
 *    until q0 moves on (OPENCL.md 1.3: an event per kernel would cost ~1.6 us on NVIDIA);
 *  - a q1 upload leaves ready_ev: the first q0 command touching the buffer waits on it, then drops it;
 *  - a q1 download leaves rd_ev: the first q0 command writing the buffer waits on it, then drops it.
 * At most two events per buffer, never lists. Every q1 enqueue is flushed before q0 may wait on it.
 * Back-pressure keeps host memory bounded without sync points (every queued command holds driver memory,
 * every upload a host copy): each periodic flush of q0 takes one marker event, and when more than
 * TLGPU_MAX_INFLIGHT (16) flushed batches are outstanding the host waits for the oldest; uploads whose host
 * copies exceed TLGPU_MAX_STAGING_MB (64) wait for the oldest upload. These waits never drain a queue and
 * are counted apart from the sync-point `waits`, as backpressure_waits (only those that had to block). */
#include "stream.h"
#include "capture.h"
#include "cl_runtime.h"
#include "cmdbuf.h"
#include "settings.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_WAIT 16
#define MAX_BATCHES 256                                /* the most TLGPU_MAX_INFLIGHT may ask for */
#define MAX_UPLOADS 64                                 /* uploads tracked for the staging bound */

typedef struct { cl_event ev; uint64_t seq; size_t n; } pending;
typedef struct { pending *e; int cap, head, n; } fifo;  /* oldest first: both queues are in order */

static pthread_mutex_t slock = PTHREAD_MUTEX_INITIALIZER;
static atomic_long n_enqueued, n_flushes, n_waits, n_bp_waits;
static uint64_t q0_seq, mk_seq, up_seq;
static cl_event mk_ev;
static int per_flush = -1, max_inflight, sync_mode, debug;
static size_t max_staging, staged;                     /* bytes of host copies in `uploads` */
static int since_flush;
static pending batch_slots[MAX_BATCHES], upload_slots[MAX_UPLOADS];
static fifo batches = {batch_slots, MAX_BATCHES, 0, 0}, uploads = {upload_slots, MAX_UPLOADS, 0, 0};
static tl_block_enter_fn block_enter;
static tl_block_leave_fn block_leave;

static void
configure(void)                                        /* the ranges are settings.c's rows */
{
    per_flush = (int)tl_setting_int(TL_SET_COMPUTE_PER_BUFFER);
    max_inflight = (int)tl_setting_int(TL_SET_MAX_INFLIGHT);                    /* 0: unbounded */
    max_staging = (size_t)tl_setting_int(TL_SET_MAX_STAGING_MB) << 20;          /* 0: unbounded */
    sync_mode = tl_setting_flag(TL_SET_SYNC);
    debug = tl_setting_flag(TL_SET_DEBUG_BATCHING);
    if (max_inflight > MAX_BATCHES - 1) max_inflight = MAX_BATCHES - 1;
}

void
tl_stream_set_block_hooks(tl_block_enter_fn enter, tl_block_leave_fn leave)
{
    block_enter = enter;
    block_leave = leave;
}

void
tl_stream_count_wait(const char *why)
{
    atomic_fetch_add(&n_waits, 1);
    if (debug) fprintf(stderr, "tlgpu: wait (%s)\n", why);
}

static void
fifo_push(fifo *f, cl_event ev, uint64_t seq, size_t n)
{
    f->e[(f->head + f->n++) % f->cap] = (pending){ev, seq, n};
}

static pending
fifo_pop(fifo *f)
{
    pending p = f->e[f->head];
    f->head = (f->head + 1) % f->cap;
    f->n--;
    return p;
}

/* Drops the entries whose work a finished host wait covered (seq <= upto): complete, nothing to wait on. */
static void
fifo_drain(fifo *f, uint64_t upto, size_t *bytes)
{
    while (f->n > 0 && f->e[f->head].seq <= upto) {
        pending p = fifo_pop(f);
        if (bytes != NULL) *bytes -= p.n;
        clReleaseEvent(p.ev);
    }
}

/* Back-pressure: the host waits (with the GIL released where the caller held it) for ev unless it has
 * completed already; only a wait that blocks is counted. Called without slock. Consumes ev. */
static void
backpressure_wait(cl_event ev, const char *why)
{
    cl_int status = CL_QUEUED;
    if (clGetEventInfo(ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) != CL_SUCCESS ||
        status > CL_COMPLETE) {                        /* negative: failed, which is final too */
        void *gil = block_enter != NULL ? block_enter() : NULL;
        clWaitForEvents(1, &ev);                       /* an error surfaces at the next sync point */
        if (block_leave != NULL) block_leave(gil);
        atomic_fetch_add(&n_bp_waits, 1);
        if (debug) fprintf(stderr, "tlgpu: backpressure wait (%s)\n", why);
    }
    clReleaseEvent(ev);
}

/* A q0 marker covering every q0 command up to `need`, flushed so another queue may wait on it. slock held. */
static tl_status
marker_covering(const tl_runtime *rt, uint64_t need, cl_event *out, tl_err *err)
{
    *out = NULL;
    if (need == 0) return TL_OK;                       /* never used on q0 */
    if (mk_ev == NULL || mk_seq < need) {
        cl_event ev;
        cl_int rc = clEnqueueMarkerWithWaitList(rt->q0, 0, NULL, &ev);
        if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clEnqueueMarkerWithWaitList", NULL);
        if (mk_ev != NULL) clReleaseEvent(mk_ev);
        mk_ev = ev;
        mk_seq = q0_seq;
        if ((rc = clFlush(rt->q0)) != CL_SUCCESS) return tl_err_set(err, rc, "clFlush", NULL);
        atomic_fetch_add(&n_flushes, 1);               /* since_flush runs on: back-pressure counts batches */
    }
    clRetainEvent(mk_ev);
    *out = mk_ev;
    return TL_OK;
}

/* Moves an event into the wait list; when the list is full (more than MAX_WAIT storages with transfers in
 * flight, which no op produces today) the host waits for it instead, so an ordering is never dropped. */
static int
take_one(cl_event *slot, cl_event *wl, int nwl)
{
    cl_event ev = *slot;
    *slot = NULL;
    if (nwl < MAX_WAIT) {
        wl[nwl++] = ev;
    } else {
        clWaitForEvents(1, &ev);
        tl_stream_count_wait("wait list full");
        clReleaseEvent(ev);
    }
    return nwl;
}

/* Moves the transfer events a q0 command must wait on into wl. slock held. */
static int
take_events(tl_storage *s, int writes, cl_event *wl, int nwl)
{
    if (s->ready_ev != NULL) nwl = take_one(&s->ready_ev, wl, nwl);
    if (writes && s->rd_ev != NULL) nwl = take_one(&s->rd_ev, wl, nwl);
    return nwl;
}

/* The periodic flush: with back-pressure on, one marker event marks the end of the batch; when more than
 * max_inflight batches are outstanding, the oldest one's event goes to *oldest for the caller to wait on
 * after dropping slock. slock held. */
static cl_int
flush_batch(const tl_runtime *rt, cl_event *oldest)
{
    cl_event ev = NULL;
    cl_int rc = max_inflight > 0 ? clEnqueueMarkerWithWaitList(rt->q0, 0, NULL, &ev) : CL_SUCCESS;
    if (rc == CL_SUCCESS) rc = clFlush(rt->q0);
    atomic_fetch_add(&n_flushes, 1);
    if (debug) fprintf(stderr, "tlgpu: flush after %d enqueues\n", since_flush);
    since_flush = 0;
    if (ev != NULL) {
        fifo_push(&batches, ev, q0_seq, 0);
        if (batches.n > max_inflight) *oldest = fifo_pop(&batches).ev;
    }
    return rc;
}

/* Bookkeeping after a q0 command: sequence numbers, periodic flush, eager mode. slock held. */
static tl_status
after_q0(const tl_runtime *rt, tl_storage *const *st, int n, const char *what, cl_event *oldest, tl_err *err)
{
    q0_seq++;
    for (int i = 0; i < n; i++)
        if (st[i] != NULL) st[i]->use_seq = q0_seq;
    atomic_fetch_add(&n_enqueued, 1);
    if (sync_mode) {                                   /* debug: surface errors at the op that caused them */
        cl_int rc = clFinish(rt->q0);
        tl_stream_count_wait(what);
        since_flush = 0;
        if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clFinish", what);
    } else if (++since_flush >= per_flush) {
        cl_int rc = flush_batch(rt, oldest);
        if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clFlush", what);
    }
    return TL_OK;
}

static void
release_all(cl_event *wl, int n)
{
    for (int i = 0; i < n; i++) clReleaseEvent(wl[i]);
}

/* One q0 command, the kinds the entry points below enqueue. */
typedef struct {
    cl_kernel k;                                       /* a kernel: */
    cl_uint dim;
    const size_t *gws, *lws;
    void (CL_CALLBACK *fn)(void *);                    /* a native kernel: */
    void *args;
    size_t cb;
    const void **mem_loc;
    const cl_mem *mem;
    cl_uint nmem;
    cl_mem src, dst;                                   /* a copy: */
    size_t soff, doff, n;
} q0_cmd;

static cl_int
enqueue_kernel(const tl_runtime *rt, const q0_cmd *c, cl_uint nwl, const cl_event *wl)
{
    return clEnqueueNDRangeKernel(rt->q0, c->k, c->dim, NULL, c->gws, c->lws, nwl, wl, NULL);
}

static cl_int
enqueue_native(const tl_runtime *rt, const q0_cmd *c, cl_uint nwl, const cl_event *wl)
{
    return clEnqueueNativeKernel(rt->q0, c->fn, c->args, c->cb, c->nmem, c->mem, c->mem_loc, nwl, wl, NULL);
}

static cl_int
enqueue_copy(const tl_runtime *rt, const q0_cmd *c, cl_uint nwl, const cl_event *wl)
{
    return clEnqueueCopyBuffer(rt->q0, c->src, c->dst, c->soff, c->doff, c->n, nwl, wl, NULL);
}

typedef cl_int (*q0_enqueue_fn)(const tl_runtime *, const q0_cmd *, cl_uint, const cl_event *);

/* The one q0 enqueue sequence: under slock, the transfer events of st[] (bit i of `written`: st[i] is
 * written) go into the wait list, `enqueue` puts the command on q0, after_q0 counts it and flushes every
 * per_flush; then, without slock, the wait lists' events are released and back-pressure waits for the
 * oldest batch when too many are in flight. NULL entries of st are skipped. Inlined into each entry point,
 * where `enqueue` is a constant: a launch, the hot path, compiles to the code it had as its own copy. */
static inline __attribute__((always_inline)) tl_status
q0_command(q0_enqueue_fn enqueue, const q0_cmd *c, const char *routine, tl_storage *const *st, int n,
           unsigned written, const char *what, tl_err *err)
{
    const tl_runtime *rt;
    cl_event wl[MAX_WAIT], oldest = NULL;
    int nwl = 0;
    tl_status s = tl_runtime_get(&rt, err);
    if (s != TL_OK) return s;
    pthread_mutex_lock(&slock);
    if (per_flush < 0) configure();
    for (int i = 0; i < n; i++)
        if (st[i] != NULL) nwl = take_events(st[i], (written >> i) & 1u, wl, nwl);
    cl_int rc = enqueue(rt, c, (cl_uint)nwl, nwl ? wl : NULL);
    if (rc != CL_SUCCESS) s = tl_err_set(err, rc, routine, what);
    else s = after_q0(rt, st, n, what, &oldest, err);
    pthread_mutex_unlock(&slock);
    release_all(wl, nwl);
    if (oldest != NULL) backpressure_wait(oldest, "compute batches in flight");
    return s;
}

tl_status
tl_stream_launch(cl_kernel k, cl_uint dim, const size_t *gws, const size_t *lws, tl_storage *const *st, int n,
                 unsigned written, const char *what, tl_err *err)
{
    const q0_cmd c = {.k = k, .dim = dim, .gws = gws, .lws = lws};
    tl_status s = q0_command(enqueue_kernel, &c, "clEnqueueNDRangeKernel", st, n, written, what, err);
    if (s == TL_OK && tl_capture_current() != NULL) tl_capture_kernel(k, dim, gws, lws, st, n, what);
    return s;
}

tl_status
tl_stream_native(void (CL_CALLBACK *fn)(void *), void *args, size_t cb, const void **mem_loc, tl_storage *const *st,
                 int n, unsigned written, const char *what, tl_err *err)
{
    cl_mem mem[MAX_WAIT];
    if (n > MAX_WAIT) return tl_err_set(err, CL_INVALID_VALUE, "clEnqueueNativeKernel", what);
    for (int i = 0; i < n; i++) mem[i] = st[i]->mem;
    const q0_cmd c = {.fn = fn, .args = args, .cb = cb, .mem_loc = mem_loc, .mem = mem, .nmem = (cl_uint)n};
    tl_status s = q0_command(enqueue_native, &c, "clEnqueueNativeKernel", st, n, written, what, err);
    if (s == TL_OK && tl_capture_current() != NULL) tl_capture_native(fn, args, cb, mem_loc, st, n, what);
    return s;
}

tl_status
tl_stream_copy(tl_storage *dst, size_t doff, tl_storage *src, size_t soff, size_t n, tl_err *err)
{
    tl_storage *both[2] = {src, dst};                  /* src's events first, then dst's (written) */
    const q0_cmd c = {.src = src->mem, .dst = dst->mem, .soff = soff, .doff = doff, .n = n};
    tl_status s = q0_command(enqueue_copy, &c, "clEnqueueCopyBuffer", both, 2, 2u, "copy", err);
    if (s == TL_OK && tl_capture_current() != NULL) tl_capture_copy(dst, doff, src, soff, n);
    return s;
}

/* ---- device-side checks (stream.h) ---- */
#define MAX_CHECK_OPS 8
static cl_mem check_mem;                               /* int[3], created on first use, lives with the process */
static const char *check_ops[MAX_CHECK_OPS];
static uint64_t check_seq;                             /* q0 seq of the newest checked launch; 0: none */

tl_status
tl_stream_check_mem(const char *op, cl_mem *mem, int *op_id, tl_err *err)
{
    const tl_runtime *rt;
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    pthread_mutex_lock(&slock);
    int id = 0;
    while (id < MAX_CHECK_OPS && check_ops[id] != NULL && strcmp(check_ops[id], op) != 0) id++;
    if (id == MAX_CHECK_OPS) st = tl_err_set(err, TL_E_INVALID, "tl_stream_check_mem", "too many checked ops");
    if (st == TL_OK && check_mem == NULL) {
        cl_int zero[3] = {0, 0, 0}, rc;
        check_mem = clCreateBuffer(rt->ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof zero, zero, &rc);
        if (rc != CL_SUCCESS) {
            check_mem = NULL;
            st = tl_err_set(err, rc, "clCreateBuffer", "device-side check word");
        }
    }
    if (st == TL_OK) {
        check_ops[id] = op;
        *mem = check_mem;
        *op_id = id;
    }
    pthread_mutex_unlock(&slock);
    return st;
}

void
tl_stream_check_arm(void)
{
    pthread_mutex_lock(&slock);
    check_seq = q0_seq;
    pthread_mutex_unlock(&slock);
    tl_trace *tr = tl_capture_current();
    if (tr != NULL && tr->ncmds > 0) tr->cmds[tr->ncmds - 1].arms_check = 1;
}

/* A host wait inside a traced function would read values the replays never refresh. */
static tl_status
refuse_in_capture(const char *what, tl_err *err)
{
    if (tl_capture_current() == NULL) return TL_OK;
    tl_err_set(err, TL_E_STATE, "tlgpu.jit", NULL);
    snprintf(err->what, sizeof err->what, "%s waits for the device inside a traced function: replays would not "
             "repeat it (a host read: numpy(), item(), tolist(), float(), bool() or an `if` on a tensor). "
             "Return the tensor from the function and read it outside", what);
    return TL_E_STATE;
}

/* After a host wait that covered every q0 command before it: reads the check word when a checked launch
 * is armed (the queue is drained, so the read waits on no device work) and turns a recorded failure into
 * TL_E_INDEX, clearing the word. */
static tl_status
collect_checks(const tl_runtime *rt, tl_err *err)
{
    cl_int w[3], zero[3] = {0, 0, 0};
    pthread_mutex_lock(&slock);
    uint64_t armed = check_seq, upto = q0_seq;         /* the read below follows every q0 command up to upto */
    pthread_mutex_unlock(&slock);
    if (armed == 0) return TL_OK;
    cl_int rc = clEnqueueReadBuffer(rt->q0, check_mem, CL_TRUE, 0, sizeof w, w, 0, NULL, NULL);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clEnqueueReadBuffer", "device-side check word");
    pthread_mutex_lock(&slock);
    if (check_seq <= upto) check_seq = 0;             /* a launch armed since stays armed */
    pthread_mutex_unlock(&slock);
    if (w[0] <= 0 || w[0] > MAX_CHECK_OPS) return TL_OK;
    rc = clEnqueueWriteBuffer(rt->q0, check_mem, CL_TRUE, 0, sizeof zero, zero, 0, NULL, NULL);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clEnqueueWriteBuffer", "device-side check word");
    tl_err_set(err, TL_E_INDEX, "device-side check", NULL);
    snprintf(err->what, sizeof err->what, "%s: index %d is out of range for a dim of size %d (checked on the "
             "device; raised at the next sync point, the result holds 0 there)", check_ops[w[0] - 1], w[1], w[2]);
    return TL_E_INDEX;
}

tl_status
tl_stream_read(tl_storage *s, size_t off, void *dst, size_t n, tl_err *err)
{
    const tl_runtime *rt;
    cl_event wl[MAX_WAIT];
    int nwl;
    uint64_t seq;
    tl_status st = tl_runtime_get(&rt, err);
    if (st == TL_OK) st = refuse_in_capture("a read of device memory", err);
    if (st != TL_OK) return st;
    pthread_mutex_lock(&slock);
    if (per_flush < 0) configure();
    nwl = take_events(s, 0, wl, 0);
    s->use_seq = seq = ++q0_seq;
    since_flush = 0;                                   /* a blocking read flushes q0 */
    atomic_fetch_add(&n_enqueued, 1);
    pthread_mutex_unlock(&slock);
    cl_int rc = clEnqueueReadBuffer(rt->q0, s->mem, CL_TRUE, off, n, dst, (cl_uint)nwl, nwl ? wl : NULL, NULL);
    tl_stream_count_wait("read");
    release_all(wl, nwl);
    if (rc == CL_SUCCESS) {                            /* every q0 batch before the read has completed */
        pthread_mutex_lock(&slock);
        fifo_drain(&batches, seq, NULL);
        pthread_mutex_unlock(&slock);
    }
    return rc == CL_SUCCESS ? collect_checks(rt, err) : tl_err_set(err, rc, "clEnqueueReadBuffer", NULL);
}

static void CL_CALLBACK
free_host_copy(cl_event ev, cl_int status, void *p)
{
    (void)ev;
    (void)status;
    free(p);
}

/* Before an upload of n bytes: while the host copies of earlier uploads still in flight would exceed
 * max_staging (or MAX_UPLOADS are tracked), wait for the oldest (q1 is in order). With max_staging 0,
 * nothing is tracked. */
static void
make_staging_room(size_t n)
{
    for (;;) {
        cl_event ev = NULL;
        pthread_mutex_lock(&slock);
        if (per_flush < 0) configure();
        if (uploads.n == MAX_UPLOADS || (uploads.n > 0 && staged + n > max_staging)) {
            pending p = fifo_pop(&uploads);
            staged -= p.n;
            ev = p.ev;
        }
        pthread_mutex_unlock(&slock);
        if (ev == NULL) return;
        backpressure_wait(ev, "upload staging in flight");
    }
}

tl_status
tl_stream_upload(tl_storage *s, size_t off, const void *src, size_t n, tl_err *err)
{
    const tl_runtime *rt;
    cl_event mk = NULL, ev = NULL;
    cl_int rc;
    tl_status st = tl_runtime_get(&rt, err);
    if (st == TL_OK && tl_capture_current() != NULL) {   /* a replay would repeat the same bytes: refuse */
        tl_err_set(err, TL_E_STATE, "tlgpu.jit", "host data uploaded inside a traced function (tensor() or "
                   "from_numpy of an array, indexing with a list or a numpy array, copy_ from numpy) would replay "
                   "as the same constant every call: pass it in as a tensor argument, or make it outside the "
                   "function");
        return TL_E_STATE;
    }
    if (st != TL_OK) return st;
    make_staging_room(n);
    void *copy = malloc(n);                            /* the caller's memory may go away before the write */
    if (copy == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_stream_upload", "host staging copy");
    memcpy(copy, src, n);
    pthread_mutex_lock(&slock);
    st = marker_covering(rt, s->use_seq, &mk, err);   /* a recycled block may still be in use on q0 */
    if (st == TL_OK) {
        rc = clEnqueueWriteBuffer(rt->q1, s->mem, CL_FALSE, off, n, copy, mk ? 1 : 0, mk ? &mk : NULL, &ev);
        if (rc == CL_SUCCESS) rc = clSetEventCallback(ev, CL_COMPLETE, free_host_copy, copy);   /* frees it */
        else free(copy);
        if (rc == CL_SUCCESS) rc = clFlush(rt->q1);
        if (rc != CL_SUCCESS) st = tl_err_set(err, rc, "clEnqueueWriteBuffer", "upload");
    } else {
        free(copy);
    }
    if (ev != NULL) {
        if (s->ready_ev != NULL) clReleaseEvent(s->ready_ev);   /* q1 is in order: the new write is later */
        s->ready_ev = ev;
        if (max_staging > 0) {                         /* tracked until known complete */
            clRetainEvent(ev);
            fifo_push(&uploads, ev, ++up_seq, n);
            staged += n;
        }
        atomic_fetch_add(&n_enqueued, 1);
    }
    pthread_mutex_unlock(&slock);
    if (mk != NULL) clReleaseEvent(mk);
    return st;
}

tl_status
tl_stream_synchronize(tl_err *err)
{
    const tl_runtime *rt;
    tl_status st = tl_runtime_get(&rt, err);
    if (st == TL_OK) st = refuse_in_capture("synchronize()", err);
    if (st != TL_OK) return st;
    pthread_mutex_lock(&slock);
    uint64_t seq = q0_seq, useq = up_seq;              /* what the finishes below cover */
    pthread_mutex_unlock(&slock);
    cl_int rc = clFinish(rt->q0);
    cl_int rc1 = clFinish(rt->q1);
    pthread_mutex_lock(&slock);
    since_flush = 0;
    if (rc == CL_SUCCESS) fifo_drain(&batches, seq, NULL);
    if (rc1 == CL_SUCCESS) fifo_drain(&uploads, useq, &staged);
    pthread_mutex_unlock(&slock);
    tl_stream_count_wait("synchronize");
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clFinish", "compute queue");
    return rc1 == CL_SUCCESS ? collect_checks(rt, err) : tl_err_set(err, rc1, "clFinish", "transfer queue");
}

/* ---- replay of a captured trace (capture.h) ---- */

static cl_mem
bound(const tl_cmd_mem *mm, tl_storage *const *slots)
{
    return mm->slot >= 0 ? slots[mm->slot]->mem : mm->mem;
}

/* One recorded command on q0: rebinds its slot arguments where the buffer changed, draws its random
 * stream position, enqueues. slock held. */
static cl_int
replay_cmd(const tl_runtime *rt, tl_cmd *m, tl_storage *const *slots, tl_rng_take_fn take, const char **routine)
{
    cl_int rc = CL_SUCCESS;
    if (m->kind == TL_CMD_COPY) {
        *routine = "clEnqueueCopyBuffer";
        return clEnqueueCopyBuffer(rt->q0, bound(&m->mems[0], slots), bound(&m->mems[1], slots), m->soff, m->doff,
                                   m->n, 0, NULL, NULL);
    }
    if (m->kind == TL_CMD_NATIVE) {
        cl_mem mem[MAX_WAIT];
        const void *loc[MAX_WAIT];
        for (int j = 0; j < m->nmem && j < MAX_WAIT; j++) {
            mem[j] = m->mems[j].mem;                   /* natives' slots are copied, never rebound */
            loc[j] = (const char *)m->args + m->loc[j];
        }
        *routine = "clEnqueueNativeKernel";
        return clEnqueueNativeKernel(rt->q0, m->fn, m->args, m->cb, (cl_uint)m->nmem, mem, loc, 0, NULL, NULL);
    }
    *routine = "clSetKernelArg";
    for (int j = 0; j < m->nmem && rc == CL_SUCCESS; j++) {
        tl_cmd_mem *mm = &m->mems[j];
        if (mm->slot < 0 || slots[mm->slot]->mem == mm->mem) continue;
        mm->mem = slots[mm->slot]->mem;
        rc = clSetKernelArg(m->k, mm->idx, sizeof(cl_mem), &mm->mem);
    }
    if (rc == CL_SUCCESS && m->rng_block >= 0 && take != NULL) {
        cl_ulong seed, block = take(m->rng_used, &seed);
        rc = clSetKernelArg(m->k, (cl_uint)m->rng_seed, sizeof seed, &seed);
        if (rc == CL_SUCCESS) rc = clSetKernelArg(m->k, (cl_uint)m->rng_block, sizeof block, &block);
    }
    if (rc != CL_SUCCESS) return rc;
    *routine = "clEnqueueNDRangeKernel";
    return clEnqueueNDRangeKernel(rt->q0, m->k, m->dim, NULL, m->gws, m->has_lws ? m->lws : NULL, 0, NULL, NULL);
}

/* The commands in order: a segment of the trace's command buffers (cmdbuf.h) where one starts, else one
 * command. n counts the enqueues (q0_seq, the stream's `enqueued`); the flush policy counts the commands
 * inside segments too, so q0 is flushed where the loop would flush it. */
tl_status
tl_stream_replay(tl_trace *tr, tl_storage *const *slots, tl_err *err)
{
    const tl_runtime *rt;
    cl_event wl[MAX_WAIT], oldest = NULL;
    const char *routine = "clEnqueueBarrierWithWaitList", *what = "tlgpu.jit replay";
    int nwl = 0, n = 0, work = 0;                      /* n: enqueues; n + work: the commands they carry */
    cl_int rc = CL_SUCCESS;
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    if (tl_capture_current() != NULL)
        return tl_err_set(err, TL_E_STATE, "tlgpu.jit", "a trace cannot be replayed while another is captured");
    tl_rng_take_fn take = tl_capture_rng_source();
    pthread_mutex_lock(&slock);
    if (per_flush < 0) configure();
    for (int i = 0; i < tr->nslots; i++)               /* transfers still on its buffers come first */
        if (slots[i] != NULL) nwl = take_events(slots[i], 1, wl, nwl);
    for (int i = 0; i < tr->nheld; i++) nwl = take_events(tr->held[i], 1, wl, nwl);
    if (nwl > 0) rc = clEnqueueBarrierWithWaitList(rt->q0, (cl_uint)nwl, wl, NULL);
    const uint64_t base = q0_seq;
    for (int i = 0; i < tr->ncopies && rc == CL_SUCCESS; i++) {          /* copied inputs */
        const tl_slot_copy *c = &tr->copies[i];
        if (c->slot >= tr->ninputs) continue;
        const tl_storage *src = slots[c->slot];
        if (src->mem == c->traced->mem) continue;      /* the traced tensor itself again */
        routine = "clEnqueueCopyBuffer";
        rc = clEnqueueCopyBuffer(rt->q0, src->mem, c->traced->mem, 0, 0,
                                 src->nbytes < c->traced->nbytes ? src->nbytes : c->traced->nbytes, 0, NULL, NULL);
        n++;
    }
    for (int i = 0, took = 0; i < tr->ncmds && rc == CL_SUCCESS; i += took, n++) {
        rc = tl_cmdbuf_enqueue_at(tr, i, slots, rt->q0, &took, &routine);   /* a segment: one enqueue */
        if (rc == CL_SUCCESS && took == 0) {
            rc = replay_cmd(rt, &tr->cmds[i], slots, take, &routine);
            took = 1;
        }
        what = tr->cmds[i].what;
        for (int j = i; j < i + took; j++)
            if (tr->cmds[j].arms_check) check_seq = base + (uint64_t)n + 1;
        work += took > 1 ? took - 1 : 0;
    }
    for (int i = 0; i < tr->ncopies && rc == CL_SUCCESS; i++) {          /* outputs, inputs written in place */
        const tl_slot_copy *c = &tr->copies[i];
        const tl_storage *dst = slots[c->slot];
        if ((c->slot < tr->ninputs && !c->back) || dst->mem == c->traced->mem) continue;
        routine = "clEnqueueCopyBuffer";
        rc = clEnqueueCopyBuffer(rt->q0, c->traced->mem, dst->mem, 0, 0,
                                 dst->nbytes < c->traced->nbytes ? dst->nbytes : c->traced->nbytes, 0, NULL, NULL);
        n++;
    }
    q0_seq += (uint64_t)n;
    for (int i = 0; i < tr->nslots; i++)
        if (slots[i] != NULL) slots[i]->use_seq = q0_seq;
    for (int i = 0; i < tr->nheld; i++) tr->held[i]->use_seq = q0_seq;
    atomic_fetch_add(&n_enqueued, n);
    since_flush += n + work;                           /* flushes where the loop's would be */
    if (rc != CL_SUCCESS) {
        st = tl_err_set(err, rc, routine, what);
    } else if (sync_mode) {
        rc = clFinish(rt->q0);
        tl_stream_count_wait(what);
        since_flush = 0;
        if (rc != CL_SUCCESS) st = tl_err_set(err, rc, "clFinish", what);
    } else if (since_flush >= per_flush && (rc = flush_batch(rt, &oldest)) != CL_SUCCESS) {   /* as eager */
        st = tl_err_set(err, rc, "clFlush", what);
    }
    const uint64_t upto = q0_seq;
    pthread_mutex_unlock(&slock);
    tl_arena_touch(tr->arena, upto);
    release_all(wl, nwl);
    if (oldest != NULL) backpressure_wait(oldest, "compute batches in flight");
    return st;
}

int
tl_stream_pending(tl_storage *s)
{
    pthread_mutex_lock(&slock);
    int pending = s->ready_ev != NULL || s->rd_ev != NULL;
    pthread_mutex_unlock(&slock);
    return pending;
}

void
tl_stream_retire(tl_storage *s)
{
    cl_event wl[2];
    int n = 0;
    pthread_mutex_lock(&slock);
    if (s->ready_ev != NULL) { wl[n++] = s->ready_ev; s->ready_ev = NULL; }
    if (s->rd_ev != NULL) { wl[n++] = s->rd_ev; s->rd_ev = NULL; }
    pthread_mutex_unlock(&slock);
    if (n == 0) return;
    clWaitForEvents((cl_uint)n, wl);
    tl_stream_count_wait("release of a buffer with a transfer in flight");
    release_all(wl, n);
}

void
tl_stream_get_stats(tl_stream_stats *out)
{
    out->enqueued = atomic_load(&n_enqueued);
    out->flushes = atomic_load(&n_flushes);
    out->waits = atomic_load(&n_waits);
    out->backpressure_waits = atomic_load(&n_bp_waits);
}

void
tl_stream_reset_stats(void)
{
    atomic_store(&n_enqueued, 0);
    atomic_store(&n_flushes, 0);
    atomic_store(&n_waits, 0);
    atomic_store(&n_bp_waits, 0);
}
