/* pub_core.c: the weight publisher's core, learner side: creation (the flat layout, fast path or gather
 * batches, the compare block table, staging, the sinks), the snapshot and the job mailbox post, waits,
 * pins, stats and close. The background thread is pub_thread.c; the state and who may touch what are in
 * pub_internal.h. No Python here: the blocking calls run with the GIL released. */
#include "clock.h"
#include "pub_internal.h"
#include "programs.h"
#include "stream.h"
#include "settings.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static tl_kernel k_gather = TL_KERNEL("publish", "tl_publish_gather");

static void
abs_deadline(double timeout, struct timespec *ts)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    double t = (double)ts->tv_sec + (double)ts->tv_nsec * 1e-9 + timeout;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - (double)ts->tv_sec) * 1e9);
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
        ok = p->par[i].storage == s && p->par[i].dtype == p->sdt;
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
        d->dt[j] = (cl_uint)p->par[i].dtype;
        d->blk_start[j + 1] = d->blk_start[j] + (cl_uint)blocks;
        d->nsrc = (cl_uint)j + 1;
        d->sdt = (cl_uint)p->sdt;
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

/* The thread's kernels, and the published-dtype buffer the host copy reads when it is not the snapshot's. */
static tl_status
make_thread_kernels(tl_pub *p, tl_err *err)
{
    size_t kmax = 0;
    cl_int rc;
    tl_status st = tl_program_create_kernel("publish", "tl_publish_maxabs", &p->k_maxabs, err);
    if (st == TL_OK) st = tl_program_create_kernel("publish", "tl_publish_update", &p->k_update, err);
    if (st == TL_OK && p->odt != p->sdt &&
        (st = tl_program_create_kernel("publish", "tl_publish_convert", &p->k_convert, err)) == TL_OK) {
        size_t bytes = (size_t)(p->flat_elems ? p->flat_elems : 1) * p->osz;
        if ((p->conv = clCreateBuffer(p->rt->ctx, CL_MEM_READ_WRITE, bytes, NULL, &rc)) == NULL || rc != CL_SUCCESS)
            st = tl_err_set(err, rc, "clCreateBuffer", "publisher conversion buffer");
    }
    if (st != TL_OK) return st;
    clGetKernelWorkGroupInfo(p->k_maxabs, p->rt->device, CL_KERNEL_WORK_GROUP_SIZE, sizeof kmax, &kmax, NULL);
    p->wg = kmax >= 256 ? 256 : kmax >= 64 ? 64 : 1;
    return TL_OK;
}

/* Registers a sink's two slots as the staging (CL_MEM_USE_HOST_PTR buffers, never used in commands:
 * registering is what makes device reads into that memory run at the pinned rate, 55 against 16 GB/s on
 * the H200). 1 if both registered. */
static int
stage_in_sink(tl_pub *p, int k, size_t bytes)
{
    const tl_pub_sink *sk = &p->sinks[k];
    cl_int rc = CL_SUCCESS;
    for (int s = 0; s < 2 && rc == CL_SUCCESS; s++) {
        if ((p->stage[s] = sk->ops->slot_memory(sk->ctx, s)) == NULL) return 0;
        p->stage_mem[s] = clCreateBuffer(p->rt->ctx, CL_MEM_USE_HOST_PTR | CL_MEM_READ_WRITE, bytes, p->stage[s], &rc);
        if (rc != CL_SUCCESS) p->stage_mem[s] = NULL;
    }
    return rc == CL_SUCCESS;
}

/* Staging, for the life of the publisher (OPENCL.md 2): the memory of the first sink that offers it (the
 * shared-memory slots), so deliveries land there with no host copy (shm_direct). Otherwise, if none offers
 * it, registering fails or with TLGPU_SHM_DIRECT=0, CL_MEM_ALLOC_HOST_PTR buffers mapped once (and sinks
 * copy out of them). */
static tl_status
make_staging(tl_pub *p, tl_err *err)
{
    cl_int rc;
    size_t bytes = (size_t)(p->flat_elems ? p->flat_elems : 1) * p->osz;
    int direct_ok = p->flat_elems > 0 && tl_setting_flag(TL_SET_SHM_DIRECT);   /* 0: the copying path (tests) */
    p->stage_sink = -1;
    for (int k = 0; direct_ok && p->stage_sink < 0 && k < p->nsinks; k++) {
        if (p->sinks[k].ops->slot_memory == NULL) continue;
        if (stage_in_sink(p, k, bytes)) { p->stage_sink = k; return TL_OK; }
        break;                                                 /* registering fails: pinned staging */
    }
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

/* The sinks: the mailbox first, then the caller's (owned from here on), each opened on the layout. */
static tl_status
open_sinks(tl_pub *p, const tl_pub_sink *sinks, int nsinks, tl_err *err)
{
    tl_status st = tl_pub_mailbox_new(&p->sinks[0], &p->mailbox, err);
    p->nsinks = st == TL_OK;
    for (int k = 0; k < nsinks; k++) p->sinks[p->nsinks++] = sinks[k];   /* closed by tl_pub_free, opened or not */
    if (st != TL_OK) return st;
    tl_pub_layout lay = {p->n, p->par, p->flat_off, p->flat_elems, p->odt};
    for (int k = 0; k < p->nsinks; k++)
        if ((st = p->sinks[k].ops->open(p->sinks[k].ctx, &lay, err)) != TL_OK) return st;
    return TL_OK;
}

tl_status
tl_pub_create(const tl_pub_param *par, int n, const tl_pub_config *cfg, const tl_pub_sink *sinks, int nsinks,
              tl_pub **out, tl_err *err)
{
    tl_pub *p = NULL;
    cl_int rc;
    tl_status st;
    int mixed = 0;
    if (nsinks > TL_PUB_MAX_SINKS || (p = calloc(1, sizeof *p)) == NULL) {
        for (int k = 0; k < nsinks; k++) sinks[k].ops->close(sinks[k].ctx);
        return tl_err_set(err, nsinks > TL_PUB_MAX_SINKS ? TL_E_ARG : TL_E_NOMEM, "tl_pub_create",
                          nsinks > TL_PUB_MAX_SINKS ? "too many sinks (at most 16)" : "host memory");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cv_work, &ca);
    pthread_cond_init(&p->cv_done, &ca);
    pthread_condattr_destroy(&ca);
    p->pend.buf = p->busy = p->last = p->visible = p->stage_sink = -1;
    p->cfg = *cfg;
#ifdef TL_TEST_HOOKS
    p->hold_us = (unsigned)tl_setting_int(TL_SET_PUB_TEST_HOLD_US);
#endif
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
        p->par[i].storage = NULL;
        if ((p->par[i].name = strdup(par[i].name)) == NULL) {
            st = tl_err_set(err, TL_E_NOMEM, "tl_pub_create", "host memory");
            goto fail;
        }
        if ((p->par[i].storage = par[i].storage) != NULL) tl_storage_retain(par[i].storage);
        mixed |= par[i].dtype != par[0].dtype;
    }
    p->sdt = n > 0 && !mixed ? par[0].dtype : TL_SHM_F32;          /* mixed: half ones widened, exactly */
    p->odt = cfg->dtype;
    p->ssz = tl_shm_dtype_size(p->sdt);
    p->osz = tl_shm_dtype_size(p->odt);
    if (p->ssz == 0 || p->osz == 0) {
        st = tl_err_set(err, TL_E_ARG, "tl_pub_create", "dtypes must be float32, float16 or bfloat16");
        goto fail;
    }
    if ((st = tl_runtime_get(&p->rt, err)) != TL_OK || (st = tl_kernel_prepare(&k_gather, err)) != TL_OK) goto fail;
    if (!plan_fast(p) && (st = plan_gather(p, err)) != TL_OK) goto fail;
    p->st.fast_path = p->fast;
    p->st.n_launches = p->fast ? 1 : p->nlaunch;
    for (int b = 0; b < 3; b++)
        if ((st = tl_storage_new((size_t)(p->flat_elems ? p->flat_elems : 1) * p->ssz, &p->buf[b], err)) != TL_OK)
            goto fail;
    p->tq = clCreateCommandQueue(p->rt->ctx, p->rt->device, 0, &rc);
    if (rc != CL_SUCCESS) {
        p->tq = NULL;
        st = tl_err_set(err, rc, "clCreateCommandQueue", "publisher queue");
        goto fail;
    }
    if ((st = make_thread_kernels(p, err)) != TL_OK || (st = make_blocks(p, err)) != TL_OK) goto fail;
    if ((st = open_sinks(p, sinks, nsinks, err)) != TL_OK || (st = make_staging(p, err)) != TL_OK) goto fail;
    p->st.shm_direct = p->stage_sink >= 0;
    if ((rc = pthread_create(&p->thread, NULL, tl_pub_thread_main, p)) != 0) {
        st = tl_err_set(err, TL_E_INVALID, "pthread_create", "publisher thread");
        goto fail;
    }
    p->thread_started = 1;
    *out = p;
    return TL_OK;
fail:
    if (p->nsinks == 0)                       /* failed before the sinks were taken over: still ours to close */
        for (int k = 0; k < nsinks; k++) sinks[k].ops->close(sinks[k].ctx);
    p->closed = 1;
    tl_pub_free(p);
    return st;
}

void tl_pub_lock(tl_pub *p) { pthread_mutex_lock(&p->mu); }
int tl_pub_trylock(tl_pub *p) { return pthread_mutex_trylock(&p->mu) == 0; }
void tl_pub_unlock(tl_pub *p) { pthread_mutex_unlock(&p->mu); }
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
        st = tl_stream_copy(dst, 0, p->fast_src, p->fast_lo * p->ssz, p->flat_elems * p->ssz, err);
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
        if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clSetKernelArg", "tl_publish_gather");
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

/* ---- delivery, stats, close (GIL released) ---- */

int
tl_pub_wait(tl_pub *p, uint64_t newer_than, double timeout)
{
    return tl_pub_mailbox_wait(p->mailbox, newer_than, timeout);
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
tl_pub_pin(tl_pub *p, uint64_t newer_than, const void **flat, uint64_t *version, int64_t *step)
{
    return tl_pub_mailbox_pin(p->mailbox, newer_than, flat, version, step);
}

void
tl_pub_unpin(tl_pub *p, int slot)
{
    tl_pub_mailbox_unpin(p->mailbox, slot);
}

void
tl_pub_get_stats(tl_pub *p, tl_pub_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    out->version = p->visible >= 0 ? p->version : 0;
    out->step = p->step;
    pthread_mutex_unlock(&p->mu);
    out->n_subs = 0;
    for (int k = 0; k < p->nsinks; k++)
        if (p->sinks[k].ops->subscribers != NULL)
            out->n_subs += p->sinks[k].ops->subscribers(p->sinks[k].ctx, out->subs + out->n_subs,
                                                        TL_PUB_MAX_SUBS - out->n_subs);
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
    p->closed = 1;
    if (p->failed) st = tl_pub_take_error_locked(p, err);
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
    if (p->mailbox != NULL) tl_pub_mailbox_stop(p->mailbox);   /* wakes in-process waiters, waits out pins */
    if (st == TL_E_CLOSED) { tl_err_clear(err); st = TL_OK; }   /* already raised once */
    return st;
}

void
tl_pub_free(tl_pub *p)
{
    if (p == NULL) return;
    if (p->tq != NULL) {
        clFinish(p->tq);
        for (int s = 0; s < 2 && p->stage_sink < 0; s++)
            if (p->stage[s] != NULL) clEnqueueUnmapMemObject(p->tq, p->stage_mem[s], p->stage[s], 0, NULL, NULL);
        clFinish(p->tq);
    }
    for (int s = 0; s < 2; s++)
        if (p->stage_mem[s] != NULL) clReleaseMemObject(p->stage_mem[s]);
    cl_mem mems[5] = {p->blk, p->blk_tensor, p->maxbuf, p->flagbuf, p->conv};
    for (int i = 0; i < 5; i++)
        if (mems[i] != NULL) clReleaseMemObject(mems[i]);
    cl_kernel ks[3] = {p->k_maxabs, p->k_update, p->k_convert};
    for (int i = 0; i < 3; i++)
        if (ks[i] != NULL) clReleaseKernel(ks[i]);
    if (p->tq != NULL) clReleaseCommandQueue(p->tq);
    for (int b = 0; b < 3; b++) tl_storage_release(p->buf[b]);   /* q0 orders any later reuse */
    for (int k = 0; k < p->nsinks; k++) p->sinks[k].ops->close(p->sinks[k].ctx);   /* after the staging above */
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
