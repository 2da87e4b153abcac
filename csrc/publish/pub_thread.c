/* pub_thread.c: the weight publisher's background thread (pure C, no GIL): it takes the newest snapshot from
 * the job mailbox, compares it with the last delivered version on the device (per-tensor max |difference|),
 * skips it or reads the changed tensors (converted to the published dtype on the device first, when it is not
 * the snapshot's) into the staging slot that is not visible, completes that slot from
 * the visible one, and hands the version to every sink (pub_sink.h) in order: the in-process mailbox, then
 * the caller's sinks. Only then is the version visible in stats() and the snapshot buffer released; an
 * error (OpenCL, a sink's) is stored for the learner's next call and stops the thread. */
#include "clock.h"
#include "pub_internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the thread ---- */

static tl_status
read_runs(tl_pub *p, const job *j, int w, int all, uint64_t *moved, tl_err *err)
{
    cl_mem src = p->conv != NULL ? p->conv : p->buf[j->buf]->mem;   /* published dtype */
    const size_t z = p->osz;
    for (int i = 0; i < p->n;) {
        if (!(all || p->flags[i]) || p->par[i].numel == 0) { i++; continue; }
        uint64_t lo = p->flat_off[i], hi = lo + p->par[i].numel;
        int k = i + 1;                       /* merge neighbours that are adjacent in the flat layout */
        while (k < p->n && (all || p->flags[k]) && p->par[k].numel > 0 && p->flat_off[k] >= hi &&
               p->flat_off[k] - hi < ALIGN) {
            hi = p->flat_off[k] + p->par[k].numel;
            k++;
        }
        for (int t = i; t < k; t++) *moved += p->par[t].numel * z;
        cl_int rc = clEnqueueReadBuffer(p->tq, src, CL_FALSE, lo * z, (hi - lo) * z, p->stage[w] + lo * z, 1, &j->ev,
                                        NULL);
        if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clEnqueueReadBuffer", "publish download");
        i = k;
    }
    cl_int rc = clFinish(p->tq);
    return rc == CL_SUCCESS ? TL_OK : tl_err_set(err, rc, "clFinish", "publish download");
}

/* The block-table kernels (kernels/publish.cl): k(a, b, blocks, block -> tensor, per-tensor c, dtypes), one
 * work-group per block of BLK elements, on the thread's queue. */
static tl_status
block_launch(tl_pub *p, cl_kernel k, cl_mem a, cl_mem b, cl_mem c, cl_uint dts, tl_err *err)
{
    cl_mem args[5] = {a, b, p->blk, p->blk_tensor, c};
    for (cl_uint i = 0; i < 5; i++) TL_CL(err, fail, clSetKernelArg, (k, i, sizeof(cl_mem), &args[i]));
    TL_CL(err, fail, clSetKernelArg, (k, 5, sizeof dts, &dts));
    size_t gws = (size_t)p->nblk * p->wg;
    TL_CL(err, fail, clEnqueueNDRangeKernel, (p->tq, k, 1, NULL, &gws, &p->wg, 0, NULL, NULL));
    return TL_OK;
fail:
    return err->code;
}

/* Per-tensor max |snapshot - last| into p->maxbits (float bits); with a published dtype of its own (p->conv),
 * the snapshot converted into p->conv in the same pass. */
static tl_status
compare(tl_pub *p, const job *j, tl_err *err)
{
    cl_uint zero = 0;
    cl_int rc;
    if (p->nblk == 0) { memset(p->maxbits, 0, 4 * (size_t)p->n); return TL_OK; }
    cl_mem conv = p->conv != NULL ? p->conv : p->buf[j->buf]->mem;   /* converted in the same pass */
    cl_uint odt = p->conv != NULL ? (cl_uint)p->odt : (cl_uint)p->sdt;
    TL_CL(err, fail, clEnqueueFillBuffer, (p->tq, p->maxbuf, &zero, 4, 0, 4 * (size_t)p->n, 1, &j->ev, NULL));
    TL_CL(err, fail, clSetKernelArg, (p->k_maxabs, 6, sizeof conv, &conv));
    TL_CL(err, fail, clSetKernelArg, (p->k_maxabs, 7, sizeof odt, &odt));
    if (block_launch(p, p->k_maxabs, p->buf[j->buf]->mem, p->buf[p->last]->mem, p->maxbuf, (cl_uint)p->sdt, err)
        != TL_OK)
        return err->code;
    rc = clEnqueueReadBuffer(p->tq, p->maxbuf, CL_TRUE, 0, 4 * (size_t)p->n, p->maxbits, 0, NULL, NULL);
    if (rc != CL_SUCCESS) return tl_err_set(err, rc, "clEnqueueReadBuffer", "publish compare");
    return TL_OK;
fail:
    return err->code;
}

/* The flags to the device (once per delivery: the conversion and the update both read them; the host copy
 * stays unchanged until the clFinish that ends either). */
static tl_status
write_flags(tl_pub *p, int *written, tl_err *err)
{
    if (*written) return TL_OK;
    *written = 1;
    TL_CL(err, fail, clEnqueueWriteBuffer, (p->tq, p->flagbuf, CL_FALSE, 0, 4 * (size_t)p->n, p->flags, 0, NULL, NULL));
    return TL_OK;
fail:
    return err->code;
}

/* conv <- the flagged tensors of the snapshot in the published dtype, before the host reads them. */
static tl_status
convert(tl_pub *p, const job *j, int *written, tl_err *err)
{
    if (p->conv == NULL || p->nblk == 0) return TL_OK;
    if (write_flags(p, written, err) != TL_OK) return err->code;
    return block_launch(p, p->k_convert, p->conv, p->buf[j->buf]->mem, p->flagbuf, (cl_uint)(p->odt | p->sdt << 4),
                        err);
}

/* last <- snapshot for the flagged tensors (when last cannot simply become the snapshot buffer). */
static tl_status
update_last(tl_pub *p, const job *j, int *written, tl_err *err)
{
    if (write_flags(p, written, err) != TL_OK) return err->code;
    if (block_launch(p, p->k_update, p->buf[p->last]->mem, p->buf[j->buf]->mem, p->flagbuf, (cl_uint)p->sdt, err)
        != TL_OK)
        return err->code;
    TL_CL(err, fail, clFinish, (p->tq));
    return TL_OK;
fail:
    return err->code;
}

static float
bits_float(cl_uint b)
{
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* Staging slot w is about to be rewritten: each sink may still need it quiet (the mailbox waits until no
 * reader pins it; the shared-memory sink whose memory it is makes that slot's seqlock odd). */
static void
begin_slot(tl_pub *p, int w)
{
    for (int k = 0; k < p->nsinks; k++)
        if (p->sinks[k].ops->begin != NULL) p->sinks[k].ops->begin(p->sinks[k].ctx, w, p->stage[w]);
}

static tl_status
deliver(tl_pub *p, int w, const job *j, tl_err *err)
{
    tl_pub_delivery d = {w, p->stage[w], p->cur_tv, j->version, j->step};
    for (int k = 0; k < p->nsinks; k++) {
        tl_status st = p->sinks[k].ops->deliver(p->sinks[k].ctx, &d, err);
        if (st != TL_OK) return st;
    }
    return TL_OK;
}

static tl_status
process(tl_pub *p, job *j, tl_err *err)
{
    tl_status st;
    int first = p->last < 0, exact = 1, written = 0;
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
    int w = p->visible < 0 ? 0 : 1 - p->visible, v = p->visible;   /* only this thread changes visible */
    begin_slot(p, w);
    uint64_t moved = 0;
    double t0 = tl_now_s(), cmp = t0 - t_snap;
    if ((first && (st = convert(p, j, &written, err)) != TL_OK) ||   /* else compare() converted */
        (st = read_runs(p, j, w, 0, &moved, err)) != TL_OK)
        return st;
    double xfer = tl_now_s() - t0;
    for (int i = 0; i < p->n; i++) {
        if (p->flags[i]) {
            p->cur_tv[i] = p->slot_tv[w * p->n + i] = j->version;
        } else if (p->slot_tv[w * p->n + i] != p->cur_tv[i]) {   /* catch up from the visible slot */
            size_t at = p->flat_off[i] * p->osz;
            memcpy(p->stage[w] + at, p->stage[v] + at, p->par[i].numel * p->osz);
            p->slot_tv[w * p->n + i] = p->cur_tv[i];
        }
    }
    if (!exact && (st = update_last(p, j, &written, err)) != TL_OK) return st;
#ifdef TL_TEST_HOOKS
    if (p->hold_us) usleep(p->hold_us);       /* lets a test read while slot w holds a half-made version */
#endif
    /* The counters describe a version before any sink makes it visible: a reader that sees version v
     * (wait(), a subscriber, a Python sink) sees stats() that count it. Only the latency is taken after. */
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
    pthread_mutex_unlock(&p->mu);
    if ((st = deliver(p, w, j, err)) != TL_OK) return st;
    double lat = tl_now_s() - j->t0;
    pthread_mutex_lock(&p->mu);
    p->st.lat_sum += lat;
    if (lat > p->st.lat_max) p->st.lat_max = lat;
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
    return TL_OK;
}

void *
tl_pub_thread_main(void *arg)
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
    int failed = p->failed;
    pthread_cond_broadcast(&p->cv_done);
    pthread_mutex_unlock(&p->mu);
    if (failed) tl_pub_mailbox_stop(p->mailbox);            /* in-process waiters return: the error is raised */
    return NULL;
}
