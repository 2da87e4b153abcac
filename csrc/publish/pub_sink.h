/* pub_sink.h: where delivered versions go. The publisher core (snapshot, staging, compare, thread) hands each
 * delivered version to its sinks through a small table of functions behind an opaque context (ggml-backend
 * style): the in-process mailbox (latest()/wait() in the learner), shared memory (Subscriber in other
 * processes), a Python object (pub_sink_py.c). All calls come from the publisher thread (open and close:
 * the creating/closing thread), never under the core's mutex nor with the GIL held. */
#ifndef TL_PUB_SINK_H
#define TL_PUB_SINK_H
#include "publisher.h"

typedef struct {                      /* the flat layout, owned by the core, valid until every close */
    int n;
    const tl_pub_param *par;
    const uint64_t *flat_off;         /* elements into a slot, per tensor */
    uint64_t flat_elems;
    int dtype;                        /* the slots' element dtype (TL_SHM_*), the published one */
} tl_pub_layout;

typedef struct {
    int slot;                         /* the staging slot (0/1) holding the version, whole and unchanging */
    const void *flat;                 /* until the next begin() on that slot */
    const uint64_t *tv;               /* per tensor: the version in which it last changed */
    uint64_t version;
    int64_t step;
} tl_pub_delivery;

typedef struct tl_pub_sink_ops {
    const char *name;
    tl_status (*open)(void *ctx, const tl_pub_layout *lay, tl_err *err);            /* at creation */
    void     *(*slot_memory)(void *ctx, int slot);     /* optional: host memory to stage into (no copy) */
    void      (*begin)(void *ctx, int slot, const void *dst);    /* optional: before staging slot is rewritten */
    tl_status (*deliver)(void *ctx, const tl_pub_delivery *d, tl_err *err);
    int       (*subscribers)(void *ctx, tl_pub_sub_stat *out, int cap);   /* optional */
    void      (*close)(void *ctx);                     /* frees ctx; also for a sink never opened */
} tl_pub_sink_ops;

struct tl_pub_sink { const tl_pub_sink_ops *ops; void *ctx; };

/* The in-process mailbox: the visible version, pinned by readers while they copy it out. */
typedef struct tl_pub_mailbox tl_pub_mailbox;
tl_status tl_pub_mailbox_new(tl_pub_sink *out, tl_pub_mailbox **mb, tl_err *err);
int       tl_pub_mailbox_wait(tl_pub_mailbox *mb, uint64_t newer_than, double timeout);   /* 1, 0, -1 stopped */
int       tl_pub_mailbox_pin(tl_pub_mailbox *mb, uint64_t newer_than, const void **flat, uint64_t *version,
                             int64_t *step);          /* the slot, or -1: none newer, or stopped */
void      tl_pub_mailbox_unpin(tl_pub_mailbox *mb, int slot);
void      tl_pub_mailbox_stop(tl_pub_mailbox *mb);    /* waiters return -1; then waits until no pin is held */

tl_status tl_pub_sink_shm_new(const char *name, tl_pub_sink *out, tl_err *err);     /* the segment at open */
#endif
