/* pub_sink_mailbox.c: the in-process sink, behind WeightPublisher.latest()/wait(): the staging slot of the
 * newest delivered version, which learner-side readers pin while they copy it out (GIL released).
 * Invariants: a pinned slot is never rewritten (begin() on it waits until its pins are gone); once stopped
 * (close, or the thread failed) no new pin is given and waiters return -1; stop returns only when no pin is
 * held, so the staging can be freed after it. Its own mutex: never held across anything that blocks. */
#include "pub_sink.h"
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

struct tl_pub_mailbox {
    pthread_mutex_t mu;
    pthread_cond_t cv;                /* a delivery, a stop, or a pin released */
    const void *slot[2];
    int visible, pins[2], stopped;
    uint64_t version;
    int64_t step;
};

static tl_status
mb_open(void *ctx, const tl_pub_layout *lay, tl_err *err)
{
    (void)ctx, (void)lay, (void)err;
    return TL_OK;
}

static void
mb_begin(void *ctx, int slot, const void *dst)
{
    tl_pub_mailbox *mb = ctx;
    (void)dst;
    pthread_mutex_lock(&mb->mu);
    while (mb->pins[slot] > 0) pthread_cond_wait(&mb->cv, &mb->mu);   /* a reader still copies it */
    pthread_mutex_unlock(&mb->mu);
}

static tl_status
mb_deliver(void *ctx, const tl_pub_delivery *d, tl_err *err)
{
    tl_pub_mailbox *mb = ctx;
    (void)err;
    pthread_mutex_lock(&mb->mu);
    mb->slot[d->slot] = d->flat;
    mb->visible = d->slot;
    mb->version = d->version;
    mb->step = d->step;
    pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
    return TL_OK;
}

static void
mb_close(void *ctx)
{
    tl_pub_mailbox *mb = ctx;
    if (mb == NULL) return;
    pthread_cond_destroy(&mb->cv);
    pthread_mutex_destroy(&mb->mu);
    free(mb);
}

static const tl_pub_sink_ops mailbox_ops = {"mailbox", mb_open, NULL, mb_begin, mb_deliver, NULL, mb_close};

tl_status
tl_pub_mailbox_new(tl_pub_sink *out, tl_pub_mailbox **mb_out, tl_err *err)
{
    tl_pub_mailbox *mb = calloc(1, sizeof *mb);
    if (mb == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_pub_mailbox_new", "host memory");
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&mb->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&mb->mu, NULL);
    mb->visible = -1;
    *out = (tl_pub_sink){&mailbox_ops, mb};
    *mb_out = mb;
    return TL_OK;
}

int
tl_pub_mailbox_wait(tl_pub_mailbox *mb, uint64_t newer_than, double timeout)
{
    struct timespec dl;
    int r = 0;
    if (timeout >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &dl);
        double t = (double)dl.tv_sec + (double)dl.tv_nsec * 1e-9 + timeout;
        dl.tv_sec = (time_t)t;
        dl.tv_nsec = (long)((t - (double)dl.tv_sec) * 1e9);
    }
    pthread_mutex_lock(&mb->mu);
    for (;;) {
        if (mb->visible >= 0 && mb->version > newer_than) { r = 1; break; }
        if (mb->stopped) { r = -1; break; }
        if (timeout < 0) pthread_cond_wait(&mb->cv, &mb->mu);
        else if (pthread_cond_timedwait(&mb->cv, &mb->mu, &dl) != 0) {
            r = mb->visible >= 0 && mb->version > newer_than;
            break;
        }
    }
    pthread_mutex_unlock(&mb->mu);
    return r;
}

int
tl_pub_mailbox_pin(tl_pub_mailbox *mb, uint64_t newer_than, const void **flat, uint64_t *version, int64_t *step)
{
    int s = -1;
    pthread_mutex_lock(&mb->mu);
    if (!mb->stopped && mb->visible >= 0 && mb->version > newer_than) {
        s = mb->visible;
        mb->pins[s]++;
        *flat = mb->slot[s];
        *version = mb->version;
        *step = mb->step;
    }
    pthread_mutex_unlock(&mb->mu);
    return s;
}

void
tl_pub_mailbox_unpin(tl_pub_mailbox *mb, int slot)
{
    pthread_mutex_lock(&mb->mu);
    if (--mb->pins[slot] == 0) pthread_cond_broadcast(&mb->cv);
    pthread_mutex_unlock(&mb->mu);
}

void
tl_pub_mailbox_stop(tl_pub_mailbox *mb)
{
    pthread_mutex_lock(&mb->mu);
    mb->stopped = 1;
    pthread_cond_broadcast(&mb->cv);
    while (mb->pins[0] > 0 || mb->pins[1] > 0) pthread_cond_wait(&mb->cv, &mb->mu);
    pthread_mutex_unlock(&mb->mu);
}
