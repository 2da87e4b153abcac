/* pub_sink_shm.c: the shared-memory sink: each delivered version goes into a POSIX shared-memory segment
 * (shm_channel.c) that Subscriber(name) reads in other processes. Zero-copy when the core stages into the
 * segment's own slots (it asks slot_memory): begin() makes the slot's seqlock odd before the device reads
 * land in it, deliver() commits it. Otherwise deliver() copies the tensors the older slot lacks out of the
 * core's pinned staging, inside that slot's seqlock. The segment records the published dtype (layout 2 for
 * float16/bfloat16), so a subscriber reads the slots as what they hold. */
#include "pub_sink.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char name[256];
    tl_shm *shm;
    uint64_t flat_elems;
} shm_sink;

static tl_status
shm_open_sink(void *ctx, const tl_pub_layout *lay, tl_err *err)
{
    shm_sink *k = ctx;
    tl_shm_tensor *t = calloc((size_t)(lay->n ? lay->n : 1), sizeof *t);
    if (t == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_pub_sink_shm", "host memory");
    for (int i = 0; i < lay->n; i++) {
        const tl_pub_param *q = &lay->par[i];
        t[i] = (tl_shm_tensor){q->name, lay->flat_off[i], q->numel, q->ndim, {0}};
        memcpy(t[i].shape, q->shape, sizeof t[i].shape);
    }
    k->flat_elems = lay->flat_elems;
    tl_status st = tl_shm_create(k->name, t, lay->n, lay->flat_elems, lay->dtype, &k->shm, err);
    free(t);
    return st;
}

static void *
shm_slot_memory(void *ctx, int slot)
{
    shm_sink *k = ctx;
    return k->shm != NULL && k->flat_elems > 0 ? tl_shm_slot_data(k->shm, slot) : NULL;
}

static void
shm_begin(void *ctx, int slot, const void *dst)
{
    shm_sink *k = ctx;
    if (dst == tl_shm_slot_data(k->shm, slot)) tl_shm_begin(k->shm, slot);   /* staged in place: odd first */
}

static tl_status
shm_deliver(void *ctx, const tl_pub_delivery *d, tl_err *err)
{
    shm_sink *k = ctx;
    (void)err;
    if (d->flat == tl_shm_slot_data(k->shm, d->slot)) tl_shm_commit(k->shm, d->slot, d->version, d->step);
    else tl_shm_publish(k->shm, d->flat, d->tv, d->version, d->step);
    return TL_OK;
}

static int
shm_subscribers(void *ctx, tl_pub_sub_stat *out, int cap)
{
    shm_sink *k = ctx;
    uint64_t v[TL_SHM_ACK_SLOTS], pid[TL_SHM_ACK_SLOTS];
    int n = k->shm != NULL ? tl_shm_acked(k->shm, v, pid, TL_SHM_ACK_SLOTS) : 0;
    if (n > cap) n = cap;
    for (int i = 0; i < n; i++) out[i] = (tl_pub_sub_stat){"shm", pid[i], v[i]};
    return n;
}

static void
shm_close_sink(void *ctx)
{
    shm_sink *k = ctx;
    if (k == NULL) return;
    tl_shm_destroy(k->shm);                       /* marks it closed for readers, unlinks the name */
    free(k);
}

static const tl_pub_sink_ops shm_ops = {"shm", shm_open_sink, shm_slot_memory, shm_begin, shm_deliver,
                                        shm_subscribers, shm_close_sink};

tl_status
tl_pub_sink_shm_new(const char *name, tl_pub_sink *out, tl_err *err)
{
    shm_sink *k = calloc(1, sizeof *k);
    if (k == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_pub_sink_shm_new", "host memory");
    if (tl_shm_check_name(name, k->name, sizeof k->name, err) != TL_OK) {
        free(k);
        return err->code;
    }
    *out = (tl_pub_sink){&shm_ops, k};
    return TL_OK;
}
