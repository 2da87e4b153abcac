/* publisher.c: the weight publisher's C core: snapshot, mailbox, background thread, device compare,
 * pinned staging and delivery (no Python.h: the thread runs without the GIL; docs/publish.md).
 * Buffers and who may touch them:
 *  - three flat device buffers (buf[0..2]) in one of four roles: `last` (device copy of the last delivered
 *    version, read by the thread), `busy` (the snapshot the thread is processing), `pending` (posted, not
 *    taken) and free. Only the learner writes a buffer (a gather on q0) and only when it is free or pending
 *    (replacing a pending snapshot: q0 is in order, so the new gather lands after the old one). The thread
 *    gives a buffer back only after clFinish on its own queue, so q0 never needs to wait for the thread;
 *    the thread's first command on a snapshot waits for the q0 marker enqueued (and flushed) after the gather.
 *  - two pinned staging slots (CL_MEM_ALLOC_HOST_PTR, mapped once at creation, unmapped at close). The
 *    thread writes only the slot that is not visible, and only once no reader pins it. slot_tv[s][t] is the
 *    version in which slot s last received tensor t; cur_tv[t] the version in which t last changed; the
 *    visible slot always holds every tensor at cur_tv (unchanged tensors are copied over from it).
 *  - mu guards the mailbox, roles, pins, visible version and stats; it is never held across a blocking
 *    call except the learner's own (non-blocking) snapshot enqueues. Lock order: mu, then stream's lock. */
#include "clock.h"
#include "publisher.h"
#include "cl_runtime.h"
#include "programs.h"
#include "stream.h"
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SRCS 16                     /* sources per gather launch (kernels/publish.cl TL_PUB_SRCS) */
#define PER_ITEM 16                 /* elements per work-item per gather block (TL_PUB_PER_ITEM) */
#define BLK 16384                   /* elements per compare/update block */
#define ALIGN 16                    /* flat offsets of the general layout, in elements (64 bytes) */

typedef struct {                    /* mirrors tl_pub_gather in kernels/publish.cl */
    cl_ulong src_off[SRCS], dst_off[SRCS], n[SRCS];
    cl_uint blk_start[SRCS + 1], nsrc;
} gather_desc;
_Static_assert(sizeof(gather_desc) == 3 * 8 * SRCS + 4 * (SRCS + 2), "gather descriptor layout");

typedef struct { int buf; cl_event ev; uint64_t version; int64_t step; double t0; } job;

struct tl_pub {
    const tl_runtime *rt;
    int n;
    tl_pub_param *par;                       /* names strdup'd, storages retained */
    uint64_t *flat_off, flat_elems;
    tl_pub_config cfg;
    int fast, nlaunch;                       /* fast: one copy of [fast_lo, +flat_elems) of par[0].storage */
    uint64_t fast_lo;
    tl_storage *fast_src;
    gather_desc *desc;                       /* [nlaunch] */
    tl_storage **src;                        /* [nlaunch * SRCS] */
    tl_storage *buf[3];
    cl_command_queue tq;
    cl_kernel k_maxabs, k_update;
    size_t wg;
    cl_mem blk, blk_tensor, maxbuf, flagbuf, stage_mem[2];
    cl_uint nblk;
    float *stage[2];
    int shm_direct;                          /* the staging slots are the segment's data slots */
    uint64_t *slot_tv, *cur_tv;              /* [2 * n], [n] */
    cl_uint *maxbits, *flags;                /* [n] host copies */
    tl_shm *shm;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    job pend;                                /* pend.buf < 0: mailbox empty */
    int busy, last, visible, pins[2];
    int stop, cancel, inject, failed, err_taken, closed;
    unsigned hold_us;                        /* test hook (TLGPU_PUB_TEST_HOLD_US): sleep before a commit */
    tl_err err;
    uint64_t next_version, version, last_delivered;
    int64_t step;
    tl_pub_stats st;
};

static tl_kernel k_gather = TL_KERNEL("publish", "tl_publish_gather_f32");

static void
abs_deadline(double timeout, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    double t = (double)ts->tv_sec + (double)ts->tv_nsec * 1e-9 + timeout;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
}

static float
bits_float(cl_uint b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* ---- layout: fast path (one storage) or gather batches ---- */

static int
cmp_by_offset(const void *a, const void *b, void *ctx)
{
    const tl_pub_param *par = ctx;
    uint64_t x = par[*(const int *)a].offset, y = par[*(const int *)b].offset;
    return x < y ? -1 : x > y;
}

/* All non-empty tensors slice one storage without overlap and with little slack: snapshot its range. */
static int
plan_fast(tl_pub *p)
{
    int m = 0, *idx = malloc(sizeof(int) * (size_t)p->n);
    tl_storage *s = NULL;
    uint64_t total = 0, lo = UINT64_MAX, hi = 0, end = 0;
    int ok = idx != NULL;
    for (int i = 0; ok && i < p->n; i++) {
        if (p->par[i].numel == 0) continue;
        if (s == NULL) s = p->par[i].storage;
        ok = p->par[i].storage == s;
        idx[m++] = i;
        total += p->par[i].numel;
    }
    if (ok && m > 0) qsort_r(idx, (size_t)m, sizeof(int), cmp_by_offset, p->par);
    for (int k = 0; ok && k < m; k++) {
        const tl_pub_param *q = &p->par[idx[k]];
        ok = k == 0 || q->offset >= end;                    /* no overlap */
        end = q->offset + q->numel;
        if (q->offset < lo) lo = q->offset;
        if (end > hi) hi = end;
    }
    ok = ok && m > 0 && hi - lo <= total + total / 8 + 1024;   /* slack copied for nothing: bounded */
    if (ok) {
        p->fast = 1;
        p->fast_src = s;
        p->fast_lo = lo;
        p->flat_elems = hi - lo;
        for (int i = 0; i < p->n; i++) p->flat_off[i] = p->par[i].numel ? p->par[i].offset - lo : 0;
    }
    free(idx);
    return ok;
}

static tl_status
plan_gather(tl_pub *p, tl_err *err)
{
    uint64_t at = 0;
    int m = 0;
    for (int i = 0; i < p->n; i++) {
        p->flat_off[i] = at;
        at += (p->par[i].numel + ALIGN - 1) / ALIGN * ALIGN;
        m += p->par[i].numel > 0;
    }
    p->flat_elems = at;
    p->nlaunch = (m + SRCS - 1) / SRCS;
    p->desc = calloc((size_t)(p->nlaunch ? p->nlaunch : 1), sizeof *p->desc);
    p->src = calloc((size_t)(p->nlaunch ? p->nlaunch : 1) * SRCS, sizeof *p->src);
    if (p->desc == NULL || p->src == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_pub_create", "gather plan");
    uint64_t chunk = (uint64_t)k_gather.wg * PER_ITEM;
    for (int i = 0, k = 0; i < p->n; i++) {
        if (p->par[i].numel == 0) continue;
        gather_desc *d = &p->desc[k / SRCS];
        int j = k % SRCS;
        uint64_t blocks = (p->par[i].numel + chunk - 1) / chunk;
        if (d->blk_start[j] + blocks > UINT32_MAX / 2)
            return tl_err_set(err, TL_E_TOO_LARGE, "tl_pub_create", "a tensor too large for one gather launch");
        d->src_off[j] = p->par[i].offset;
        d->dst_off[j] = p->flat_off[i];
        d->n[j] = p->par[i].numel;
        d->blk_start[j + 1] = d->blk_start[j] + (cl_uint)blocks;
        d->nsrc = (cl_uint)j + 1;
        p->src[k] = p->par[i].storage;
        k++;
    }
    return TL_OK;
}

/* Compare/update block table: (begin, end) flat element ranges and their tensor, uploaded once. */
static tl_status
make_blocks(tl_pub *p, tl_err *err)
{
    cl_int rc;
    uint64_t nb = 0;
    tl_status st = TL_OK;
    for (int i = 0; i < p->n; i++) nb += (p->par[i].numel + BLK - 1) / BLK;
    if (nb > UINT32_MAX / 2) return tl_err_set(err, TL_E_TOO_LARGE, "tl_pub_create", "too many blocks");
    p->nblk = (cl_uint)nb;
    cl_ulong *rng = malloc(16 * (size_t)(nb ? nb : 1));
    cl_uint *tix = malloc(4 * (size_t)(nb ? nb : 1));
    if (rng == NULL || tix == NULL) { st = tl_err_set(err, TL_E_NOMEM, "tl_pub_create", "block table"); goto done; }
    for (int i = 0, b = 0; i < p->n; i++)
        for (uint64_t e = 0; e < p->par[i].numel; e += BLK, b++) {
            rng[2 * b] = p->flat_off[i] + e;
            rng[2 * b + 1] = p->flat_off[i] + (e + BLK < p->par[i].numel ? e + BLK : p->par[i].numel);
            tix[b] = (cl_uint)i;
        }
    cl_mem_flags ro = CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR;
    p->blk = clCreateBuffer(p->rt->ctx, ro, 16 * (size_t)(nb ? nb : 1), rng, &rc);
    if (rc == CL_SUCCESS) p->blk_tensor = clCreateBuffer(p->rt->ctx, ro, 4 * (size_t)(nb ? nb : 1), tix, &rc);
    if (rc == CL_SUCCESS) p->maxbuf = clCreateBuffer(p->rt->ctx, CL_MEM_READ_WRITE, 4 * (size_t)p->n, NULL, &rc);
    if (rc == CL_SUCCESS) p->flagbuf = clCreateBuffer(p->rt->ctx, CL_MEM_READ_ONLY, 4 * (size_t)p->n, NULL, &rc);
    if (rc != CL_SUCCESS) st = tl_err_set(err, rc, "clCreateBuffer", "publisher block table");
done:
    free(rng);
    free(tix);
    return st;
}

static tl_status
make_thread_kernels(tl_pub *p, tl_err *err)
{
    size_t kmax = 0;
    tl_status st = tl_program_create_kernel("publish", "tl_publish_maxabs_f32", &p->k_maxabs, err);
    if (st == TL_OK) st = tl_program_create_kernel("publish", "tl_publish_update_f32", &p->k_update, err);
    if (st != TL_OK) return st;
    clGetKernelWorkGroupInfo(p->k_maxabs, p->rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    p->wg = kmax >= 256 ? 256 : kmax >= 64 ? 64 : 1;
    return TL_OK;
}

/* Pinned staging, for the life of the publisher (OPENCL.md 2). With shared memory the segment's two data
 * slots are the staging, registered as CL_MEM_USE_HOST_PTR buffers (never used in commands: registering
 * is what makes device reads into the mapping run at the pinned rate, 55 against 16 GB/s on the H200), so
 * deliveries land in the segment with no host copy (shm_direct). Otherwise, if registering fails or with
 * TLGPU_SHM_DIRECT=0, CL_MEM_ALLOC_HOST_PTR buffers mapped once (and a copy into the segment). */
static tl_status
make_staging(tl_pub *p, tl_err *err)
{
    cl_int rc;
    size_t bytes = (size_t)(p->flat_elems ? p->flat_elems : 1) * 4;
    const char *env = getenv("TLGPU_SHM_DIRECT");              /* "0": the copying path (tests) */
    for (int s = 0; p->shm != NULL && p->flat_elems > 0 && !(env != NULL && strcmp(env, "0") == 0) && s < 2; s++) {
        p->stage[s] = tl_shm_slot_data(p->shm, s);
        p->stage_mem[s] = clCreateBuffer(p->rt->ctx, CL_MEM_USE_HOST_PTR | CL_MEM_READ_WRITE, bytes, p->stage[s], &rc);
        if (rc != CL_SUCCESS) p->stage_mem[s] = NULL;
        p->shm_direct = s == 0 ? rc == CL_SUCCESS : p->shm_direct && rc == CL_SUCCESS;
    }
    if (p->shm_direct) return TL_OK;
    for (int s = 0; s < 2; s++) {
        if (p->stage_mem[s] != NULL) clReleaseMemObject(p->stage_mem[s]);
        p->stage_mem[s] = NULL;
        p->stage[s] = NULL;
    }
    for (int s = 0; s < 2; s++) {
        p->stage_mem[s] = clCreateBuffer(p->rt->ctx, CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, bytes, NULL, &rc);
        if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clCreateBuffer", "pinned staging (CL_MEM_ALLOC_HOST_PTR)");
        p->stage[s] = clEnqueueMapBuffer(p->tq, p->stage_mem[s], CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0,
                                         NULL, NULL, &rc);
        if (rc != CL_SUCCESS) { p->stage[s] = NULL; return tl_err_set(err, rc, "clEnqueueMapBuffer", "staging"); }
    }
    return TL_OK;
}

static void *thread_main(void *arg);

tl_status
tl_pub_create(const tl_pub_param *par, int n, const tl_pub_config *cfg, tl_pub **out, tl_err *err)
{
    tl_pub *p = NULL;
    cl_int rc;
    tl_status st;
    if ((p = calloc(1, sizeof *p)) == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_pub_create", "host memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv_work, &ca);
    pthread_cond_init(&p->cv_done, &ca);
    pthread_condattr_destroy(&ca);
    p->pend.buf = p->busy = p->last = p->visible = -1;
    p->cfg = *cfg;
#ifdef TL_TEST_HOOKS
    p->hold_us = getenv("TLGPU_PUB_TEST_HOLD_US") ? (unsigned)atoi(getenv("TLGPU_PUB_TEST_HOLD_US")) : 0;
#endif
    p->cfg.shm_name = NULL;
    p->n = n;
    p->par = calloc((size_t)n, sizeof *p->par);
    p->flat_off = calloc((size_t)n, 8);
    p->slot_tv = calloc(2 * (size_t)n, 8);
    p->cur_tv = calloc((size_t)n, 8);
    p->maxbits = calloc((size_t)n, 4);
    p->flags = calloc((size_t)n, 4);
    if (!p->par || !p->flat_off || !p->slot_tv || !p->cur_tv || !p->maxbits || !p->flags) {
        st = tl_err_set(err, TL_E_NOMEM, "tl_pub_create", "host memory");
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        p->par[i] = par[i];
        if ((p->par[i].name = strdup(par[i].name)) == NULL) {
            st = tl_err_set(err, TL_E_NOMEM, "tl_pub_create", "host memory");
            goto fail;
        }
        if (par[i].storage != NULL) tl_storage_retain(par[i].storage);
    }
    if ((st = tl_runtime_get(&p->rt, err)) != TL_OK || (st = tl_kernel_prepare(&k_gather, err)) != TL_OK) goto fail;
    if (!plan_fast(p) && (st = plan_gather(p, err)) != TL_OK) goto fail;
    p->st.fast_path = p->fast;
    p->st.n_launches = p->fast ? 1 : p->nlaunch;
    for (int b = 0; b < 3; b++)
        if ((st = tl_storage_new((size_t)(p->flat_elems ? p->flat_elems : 1) * 4, &p->buf[b], err)) != TL_OK)
            goto fail;
    p->tq = clCreateCommandQueue(p->rt->ctx, p->rt->device, 0, &rc);
    if (rc != CL_SUCCESS) {
        p->tq = NULL;
        st = tl_err_set(err, rc, "clCreateCommandQueue", "publisher queue");
        goto fail;
    }
    if ((st = make_thread_kernels(p, err)) != TL_OK || (st = make_blocks(p, err)) != TL_OK) goto fail;
    if (cfg->shm_name != NULL) {
        tl_shm_tensor *t = calloc((size_t)(n ? n : 1), sizeof *t);
        if (t == NULL) { st = tl_err_set(err, TL_E_NOMEM, "tl_pub_create", "host memory"); goto fail; }
        for (int i = 0; i < n; i++) {
            t[i] = (tl_shm_tensor){p->par[i].name, p->flat_off[i], p->par[i].numel, p->par[i].ndim, {0}};
            memcpy(t[i].shape, p->par[i].shape, sizeof t[i].shape);
        }
        st = tl_shm_create(cfg->shm_name, t, n, p->flat_elems, &p->shm, err);
        free(t);
        if (st != TL_OK) goto fail;
    }
    if ((st = make_staging(p, err)) != TL_OK) goto fail;
    p->st.shm_direct = p->shm_direct;
    if ((rc = pthread_create(&p->thread, NULL, thread_main, p)) != 0) {
        st = tl_err_set(err, TL_E_INVALID, "pthread_create", "publisher thread");
        goto fail;
    }
    p->thread_started = 1;
    *out = p;
    return TL_OK;
fail:
    p->closed = 1;
    tl_pub_free(p);
    return st;
}

void tl_pub_lock(tl_pub *p) { pthread_mutex_lock(&p->mu); }
int tl_pub_trylock(tl_pub *p) { return pthread_mutex_trylock(&p->mu) == 0; }
void tl_pub_unlock(tl_pub *p) { pthread_mutex_unlock(&p->mu); }
int tl_pub_failed_locked(const tl_pub *p) { return p->failed; }
uint64_t tl_pub_flat_offset(const tl_pub *p, int i) { return p->flat_off[i]; }

tl_status
tl_pub_take_error_locked(tl_pub *p, tl_err *err)
{
    if (!p->failed) return TL_OK;
    if (p->err_taken) return tl_err_set(err, TL_E_CLOSED, "publish", "the publisher thread stopped after an error");
    p->err_taken = 1;
    *err = p->err;                          /* moves the build log, if any */
    p->err.log = NULL;
    return err->code;
}

/* The snapshot: one copy (fast path) or ceil(#tensors / 16) gather launches, then one flushed marker. */
static tl_status
enqueue_snapshot(tl_pub *p, tl_storage *dst, cl_event *ev, tl_err *err)
{
    tl_status st;
    if (p->fast) {
        st = tl_stream_copy(dst, 0, p->fast_src, p->fast_lo * 4, p->flat_elems * 4, err);
        if (st != TL_OK) return st;
    }
    for (int l = 0; !p->fast && l < p->nlaunch; l++) {
        gather_desc *d = &p->desc[l];
        tl_storage *st_list[SRCS + 1] = {dst};
        cl_int rc = clSetKernelArg(k_gather.k, 0, sizeof *d, d);
        if (rc == CL_SUCCESS) rc = clSetKernelArg(k_gather.k, 1, sizeof(cl_mem), &dst->mem);
        for (int j = 0; rc == CL_SUCCESS && j < SRCS; j++) {
            tl_storage *s = p->src[l * SRCS + ((cl_uint)j < d->nsrc ? j : 0)];   /* unused slots: any valid */
            rc = clSetKernelArg(k_gather.k, 2 + (cl_uint)j, sizeof(cl_mem), &s->mem);
            if ((cl_uint)j < d->nsrc) st_list[1 + j] = s;
        }
        if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clSetKernelArg", "tl_publish_gather_f32");
        size_t lws = k_gather.wg, gws = (size_t)d->blk_start[d->nsrc] * lws;
        /* dst never carries transfer events and sources are only read: at most 16 events to wait on,
         * within stream.c's MAX_WAIT */
        st = tl_stream_launch(k_gather.k, 1, &gws, &lws, st_list, 1 + (int)d->nsrc, 1u, k_gather.name, err);
        if (st != TL_OK) return st;
    }
    /* Our own marker, not stream.c's cached one: it must cover the copy just enqueued, and q0 is in order. */
    cl_int rc = clEnqueueMarkerWithWaitList(p->rt->q0, 0, NULL, ev);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clEnqueueMarkerWithWaitList", "publish snapshot");
    if ((rc = clFlush(p->rt->q0)) != CL_SUCCESS) {
        clReleaseEvent(*ev);
        return tl_err_set(err, rc, "clFlush", "publish snapshot");
    }
    return TL_OK;
}

tl_status
tl_pub_publish_locked(tl_pub *p, int64_t step, double t_enter, tl_err *err)
{
    cl_event ev = NULL;
    int b;
    if (p->closed || p->stop) return tl_err_set(err, TL_E_CLOSED, "publish", "the publisher is closed");
    if (p->failed) return tl_pub_take_error_locked(p, err);
    if (p->pend.buf >= 0) {                  /* latest-only: the untaken snapshot is replaced */
        b = p->pend.buf;
        clReleaseEvent(p->pend.ev);
        p->pend.buf = -1;
        p->st.dropped++;
    } else {
        for (b = 0; b == p->last || b == p->busy; b++) {}
    }
    tl_status st = enqueue_snapshot(p, p->buf[b], &ev, err);
    if (st != TL_OK) return st;
    p->pend = (job){b, ev, ++p->next_version, step, t_enter};
    p->st.published++;
    pthread_cond_signal(&p->cv_work);
    return TL_OK;
}

/* ---- the thread ---- */

static tl_status
read_runs(tl_pub *p, const job *j, int w, int all, uint64_t *moved, tl_err *err)
{
    cl_mem src = p->buf[j->buf]->mem;
    for (int i = 0; i < p->n;) {
        if (!(all || p->flags[i]) || p->par[i].numel == 0) { i++; continue; }
        uint64_t lo = p->flat_off[i], hi = lo + p->par[i].numel;
        int k = i + 1;                       /* merge neighbours that are adjacent in the flat layout */
        while (k < p->n && (all || p->flags[k]) && p->par[k].numel > 0 && p->flat_off[k] >= hi &&
               p->flat_off[k] - hi < ALIGN) {
            hi = p->flat_off[k] + p->par[k].numel;
            k++;
        }
        for (int t = i; t < k; t++) *moved += p->par[t].numel * 4;
        cl_int rc = clEnqueueReadBuffer(p->tq, src, CL_FALSE, lo * 4, (hi - lo) * 4, p->stage[w] + lo, 1, &j->ev,
                                        NULL);
        if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clEnqueueReadBuffer", "publish download");
        i = k;
    }
    cl_int rc = clFinish(p->tq);
    return rc == CL_SUCCESS ? TL_OK : tl_err_set(err, rc, "clFinish", "publish download");
}

/* The block-table kernels (kernels/publish.cl): k(a, b, blocks, block -> tensor, per-tensor c), one
 * work-group per block of BLK elements, on the thread's queue. */
static tl_status
block_launch(tl_pub *p, cl_kernel k, cl_mem a, cl_mem b, cl_mem c, tl_err *err)
{
    cl_mem args[5] = {a, b, p->blk, p->blk_tensor, c};
    for (cl_uint i = 0; i < 5; i++) TL_CL(err, fail, clSetKernelArg, (k, i, sizeof(cl_mem), &args[i]));
    size_t gws = (size_t)p->nblk * p->wg;
    TL_CL(err, fail, clEnqueueNDRangeKernel, (p->tq, k, 1, NULL, &gws, &p->wg, 0, NULL, NULL));
    return TL_OK;
fail:
    return err->code;
}

/* Per-tensor max |snapshot - last| into p->maxbits (float bits). */
static tl_status
compare(tl_pub *p, const job *j, tl_err *err)
{
    cl_uint zero = 0;
    cl_int rc;
    if (p->nblk == 0) { memset(p->maxbits, 0, 4 * (size_t)p->n); return TL_OK; }
    TL_CL(err, fail, clEnqueueFillBuffer, (p->tq, p->maxbuf, &zero, 4, 0, 4 * (size_t)p->n, 1, &j->ev, NULL));
    if (block_launch(p, p->k_maxabs, p->buf[j->buf]->mem, p->buf[p->last]->mem, p->maxbuf, err) != TL_OK)
        return err->code;
    rc = clEnqueueReadBuffer(p->tq, p->maxbuf, CL_TRUE, 0, 4 * (size_t)p->n, p->maxbits, 0, NULL, NULL);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clEnqueueReadBuffer", "publish compare");
    return TL_OK;
fail:
    return err->code;
}

/* last <- snapshot for the flagged tensors (when last cannot simply become the snapshot buffer). */
static tl_status
update_last(tl_pub *p, const job *j, tl_err *err)
{
    TL_CL(err, fail, clEnqueueWriteBuffer, (p->tq, p->flagbuf, CL_FALSE, 0, 4 * (size_t)p->n, p->flags, 0, NULL, NULL));
    if (block_launch(p, p->k_update, p->buf[p->last]->mem, p->buf[j->buf]->mem, p->flagbuf, err) != TL_OK)
        return err->code;
    TL_CL(err, fail, clFinish, (p->tq));
    return TL_OK;
fail:
    return err->code;
}

static tl_status
process(tl_pub *p, job *j, tl_err *err)
{
    tl_status st;
    int first = p->last < 0, exact = 1;
    int force = first || (p->cfg.force_every > 0 && j->version - p->last_delivered >= (uint64_t)p->cfg.force_every);
    float gmax = 0.0f;
    cl_int rc = clWaitForEvents(1, &j->ev);   /* the snapshot is on the device: timings below are ours */
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clWaitForEvents", "publish snapshot");
    double t_snap = tl_now_s();
    if (!first) {
        if ((st = compare(p, j, err)) != TL_OK) return st;
        for (int i = 0; i < p->n; i++) {
            float m = bits_float(p->maxbits[i]);
            if (m > gmax) gmax = m;
        }
        if (!force && !((double)gmax > p->cfg.threshold)) {
            pthread_mutex_lock(&p->mu);
            p->st.skipped++;
            pthread_mutex_unlock(&p->mu);
            return TL_OK;
        }
    }
    /* changed: > threshold; on a forced delivery any nonzero change, so a forced version is exact */
    for (int i = 0; i < p->n; i++) {
        float m = first ? INFINITY : bits_float(p->maxbits[i]);
        int ch = !p->cfg.incremental || first || (force ? m > 0.0f : (double)m > p->cfg.threshold);
        p->flags[i] = (cl_uint)(ch && p->par[i].numel > 0);
        if (!ch && m > 0.0f) exact = 0;
    }
    pthread_mutex_lock(&p->mu);
    int w = p->visible < 0 ? 0 : 1 - p->visible, v = p->visible;
    while (p->pins[w] > 0) pthread_cond_wait(&p->cv_done, &p->mu);   /* a reader still copies slot w */
    pthread_mutex_unlock(&p->mu);
    uint64_t moved = 0;
    double t0 = tl_now_s(), cmp = t0 - t_snap;
    if (p->shm_direct) tl_shm_begin(p->shm, w);    /* staging slot w is segment slot w: its seqlock odd first */
    if ((st = read_runs(p, j, w, 0, &moved, err)) != TL_OK) return st;
    double xfer = tl_now_s() - t0;
    for (int i = 0; i < p->n; i++) {
        if (p->flags[i]) {
            p->cur_tv[i] = p->slot_tv[w * p->n + i] = j->version;
        } else if (p->slot_tv[w * p->n + i] != p->cur_tv[i]) {   /* catch up from the visible slot */
            memcpy(p->stage[w] + p->flat_off[i], p->stage[v] + p->flat_off[i], p->par[i].numel * 4);
            p->slot_tv[w * p->n + i] = p->cur_tv[i];
        }
    }
    if (!exact && (st = update_last(p, j, err)) != TL_OK) return st;
    if (p->hold_us) usleep(p->hold_us);       /* lets a test read while slot w holds a half-made version */
    if (p->shm_direct) tl_shm_commit(p->shm, w, j->version, j->step);
    else if (p->shm != NULL) tl_shm_publish(p->shm, p->stage[w], p->cur_tv, j->version, j->step);
    double lat = tl_now_s() - j->t0;
    pthread_mutex_lock(&p->mu);
    if (exact) p->last = j->buf;              /* the snapshot is the delivered version: no device copy */
    p->visible = w;
    p->version = j->version;
    p->step = j->step;
    p->last_delivered = j->version;
    p->st.delivered++;
    p->st.bytes_moved += moved;
    p->st.xfer_sum += xfer;
    p->st.snap_sum += t_snap - j->t0;
    p->st.cmp_sum += cmp;
    p->st.lat_sum += lat;
    if (lat > p->st.lat_max) p->st.lat_max = lat;
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
    return TL_OK;
}

static void *
thread_main(void *arg)
{
    tl_pub *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->pend.buf < 0 && !p->stop && !p->inject) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->inject) {
            tl_err_set(&p->err, CL_INVALID_OPERATION, "tl_publish_thread", "injected error (test hook)");
            p->failed = 1;
            break;
        }
        if (p->pend.buf < 0 || p->cancel) break;           /* stop: drained, or cancelled */
        job j = p->pend;
        p->pend.buf = -1;
        p->busy = j.buf;
        pthread_mutex_unlock(&p->mu);
        tl_err err = {0};
        tl_status st = process(p, &j, &err);
        if (st != TL_OK) clFinish(p->tq);                   /* nothing of ours may still touch the buffer */
        clReleaseEvent(j.ev);
        pthread_mutex_lock(&p->mu);
        p->busy = -1;
        if (st != TL_OK) {
            p->err = err;
            p->failed = 1;
            break;
        }
        pthread_cond_broadcast(&p->cv_done);
    }
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* ---- delivery, stats, close (GIL released) ---- */

int
tl_pub_wait(tl_pub *p, uint64_t newer_than, double timeout)
{
    struct timespec dl;
    int r = 0;
    if (timeout >= 0) abs_deadline(timeout, &dl);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->visible >= 0 && p->version > newer_than) { r = 1; break; }
        if (p->failed || p->closed) { r = -1; break; }
        if (timeout < 0) pthread_cond_wait(&p->cv_done, &p->mu);
        else if (pthread_cond_timedwait(&p->cv_done, &p->mu, &dl) != 0) {
            r = p->visible >= 0 && p->version > newer_than;
            break;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

int
tl_pub_drain(tl_pub *p, double timeout)
{
    struct timespec dl;
    int r = 0;
    if (timeout >= 0) abs_deadline(timeout, &dl);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->failed) { r = -1; break; }
        if (p->pend.buf < 0 && p->busy < 0) { r = 1; break; }
        if (timeout < 0) pthread_cond_wait(&p->cv_done, &p->mu);
        else if (pthread_cond_timedwait(&p->cv_done, &p->mu, &dl) != 0) break;
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

int
tl_pub_pin(tl_pub *p, uint64_t newer_than, const float **flat, uint64_t *version, int64_t *step)
{
    int s = -1;
    pthread_mutex_lock(&p->mu);
    if (!p->closed && p->visible >= 0 && p->version > newer_than) {
        s = p->visible;
        p->pins[s]++;
        *flat = p->stage[s];
        *version = p->version;
        *step = p->step;
    }
    pthread_mutex_unlock(&p->mu);
    return s;
}

void
tl_pub_unpin(tl_pub *p, int slot)
{
    pthread_mutex_lock(&p->mu);
    if (--p->pins[slot] == 0) pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
}

void
tl_pub_get_stats(tl_pub *p, tl_pub_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    out->version = p->visible >= 0 ? p->version : 0;
    out->step = p->step;
    pthread_mutex_unlock(&p->mu);
    out->n_acked = p->shm != NULL ? tl_shm_acked(p->shm, out->acked, out->acked_pid, TL_SHM_ACK_SLOTS) : 0;
}

#ifdef TL_TEST_HOOKS
void
tl_pub_inject_error(tl_pub *p)
{
    pthread_mutex_lock(&p->mu);
    p->inject = 1;
    pthread_cond_signal(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
}
#endif

tl_status
tl_pub_close(tl_pub *p, int cancel, tl_err *err)
{
    tl_status st = TL_OK;
    pthread_mutex_lock(&p->mu);
    if (p->closed) { pthread_mutex_unlock(&p->mu); return TL_OK; }
    p->stop = 1;
    p->cancel = cancel;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    if (p->thread_started) pthread_join(p->thread, NULL);   /* finishes the job in hand, then exits */
    p->thread_started = 0;
    pthread_mutex_lock(&p->mu);
    if (p->pend.buf >= 0) {                  /* cancelled, or the thread failed before taking it */
        clReleaseEvent(p->pend.ev);
        p->pend.buf = -1;
        p->st.dropped++;
    }
    while (p->pins[0] > 0 || p->pins[1] > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    p->closed = 1;
    if (p->failed) st = tl_pub_take_error_locked(p, err);
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
    if (st == TL_E_CLOSED) { tl_err_clear(err); st = TL_OK; }   /* already raised once */
    return st;
}

void
tl_pub_free(tl_pub *p)
{
    if (p == NULL) return;
    if (p->tq != NULL) {
        clFinish(p->tq);
        for (int s = 0; s < 2 && !p->shm_direct; s++)
            if (p->stage[s] != NULL) clEnqueueUnmapMemObject(p->tq, p->stage_mem[s], p->stage[s], 0, NULL, NULL);
        clFinish(p->tq);
    }
    for (int s = 0; s < 2; s++)
        if (p->stage_mem[s] != NULL) clReleaseMemObject(p->stage_mem[s]);
    cl_mem mems[4] = {p->blk, p->blk_tensor, p->maxbuf, p->flagbuf};
    for (int i = 0; i < 4; i++)
        if (mems[i] != NULL) clReleaseMemObject(mems[i]);
    if (p->k_maxabs != NULL) clReleaseKernel(p->k_maxabs);
    if (p->k_update != NULL) clReleaseKernel(p->k_update);
    if (p->tq != NULL) clReleaseCommandQueue(p->tq);
    for (int b = 0; b < 3; b++) tl_storage_release(p->buf[b]);   /* q0 orders any later reuse */
    tl_shm_destroy(p->shm);
    for (int i = 0; p->par != NULL && i < p->n; i++) {
        free((void *)p->par[i].name);
        tl_storage_release(p->par[i].storage);
    }
    tl_err_clear(&p->err);
    free(p->par);
    free(p->flat_off);
    free(p->slot_tv);
    free(p->cur_tv);
    free(p->maxbits);
    free(p->flags);
    free(p->desc);
    free(p->src);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

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
