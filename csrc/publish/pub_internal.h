/* pub_internal.h: the publisher core's state, shared by pub_core.c (creation, the learner's snapshot and
 * mailbox post, waits, close) and pub_thread.c (the background thread); no one else includes it.
 * Buffers and who may touch them:
 *  - three flat device buffers (buf[0..2]) in one of four roles: `last` (device copy of the last delivered
 *    version, read by the thread), `busy` (the snapshot the thread is processing), `pending` (posted, not
 *    taken) and free. Only the learner writes a buffer (a gather on q0) and only when it is free or pending
 *    (replacing a pending snapshot: q0 is in order, so the new gather lands after the old one). The thread
 *    gives a buffer back only after clFinish on its own queue, so q0 never needs to wait for the thread;
 *    the thread's first command on a snapshot waits for the q0 marker enqueued (and flushed) after the gather.
 *  - dtypes: the snapshot buffers hold `sdt` (the parameters' dtype, or float32 when they mix dtypes), so
 *    the compare decides on float32 values; the staging slots and sinks hold `odt`, the published dtype.
 *    When they differ the thread converts the moved tensors into `conv` (odt) on its queue and reads that.
 *  - two staging slots: pinned (CL_MEM_ALLOC_HOST_PTR, mapped once) or a sink's own memory (the shared-memory
 *    slots). The thread writes only the slot that is not visible, after every sink's begin() on it (the
 *    mailbox waits there until no reader pins it). slot_tv[s][t] is the version in which slot s last
 *    received tensor t; cur_tv[t] the version in which t last changed; the visible slot always holds every
 *    tensor at cur_tv (unchanged tensors are copied over from it).
 *  - mu guards the job mailbox, roles, visible version and stats; it is never held across a blocking call
 *    except the learner's own (non-blocking) snapshot enqueues, nor across a sink call. Lock order: mu, then
 *    stream's lock. */
#ifndef TL_PUB_INTERNAL_H
#define TL_PUB_INTERNAL_H
#include "cl_runtime.h"
#include "pub_sink.h"
#include <pthread.h>

#define SRCS 16                     /* sources per gather launch (kernels/publish.cl TL_PUB_SRCS) */
#define PER_ITEM 16                 /* elements per work-item per gather block (TL_PUB_PER_ITEM) */
#define BLK 16384                   /* elements per compare/update block */
#define ALIGN 16                    /* flat offsets of the general layout, in elements (64 bytes) */

typedef struct {                    /* mirrors tl_pub_gather in kernels/publish.cl */
    cl_ulong src_off[SRCS], dst_off[SRCS], n[SRCS];
    cl_uint blk_start[SRCS + 1], nsrc, sdt, dt[SRCS], pad;
} gather_desc;
_Static_assert(sizeof(gather_desc) == 3 * 8 * SRCS + 4 * (2 * SRCS + 4), "gather descriptor layout");

typedef struct { int buf; cl_event ev; uint64_t version; int64_t step; double t0; } job;

struct tl_pub {
    const tl_runtime *rt;
    int n;
    tl_pub_param *par;                       /* names strdup'd, storages retained */
    uint64_t *flat_off, flat_elems;
    tl_pub_config cfg;
    int sdt, odt;                            /* snapshot dtype, published dtype (cfg.dtype) */
    size_t ssz, osz;                         /* their element sizes */
    int fast, nlaunch;                       /* fast: one copy of [fast_lo, +flat_elems) of par[0].storage */
    uint64_t fast_lo;
    tl_storage *fast_src;
    gather_desc *desc;                       /* [nlaunch] */
    tl_storage **src;                        /* [nlaunch * SRCS] */
    tl_storage *buf[3];
    cl_command_queue tq;
    cl_kernel k_maxabs, k_update, k_convert;
    size_t wg;
    cl_mem blk, blk_tensor, maxbuf, flagbuf, conv, stage_mem[2];   /* conv: odt != sdt only */
    cl_uint nblk;
    char *stage[2];
    int stage_sink;                          /* the sink whose memory the staging slots are, or -1 */
    uint64_t *slot_tv, *cur_tv;              /* [2 * n], [n] */
    cl_uint *maxbits, *flags;                /* [n] host copies */
    tl_pub_sink sinks[TL_PUB_MAX_SINKS + 1]; /* [0]: the in-process mailbox */
    int nsinks;
    tl_pub_mailbox *mailbox;
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    job pend;                                /* pend.buf < 0: mailbox empty */
    int busy, last, visible;
    int stop, cancel, inject, failed, err_taken, closed;
    unsigned hold_us;                        /* test hook (TLGPU_PUB_TEST_HOLD_US): sleep before a commit */
    tl_err err;
    uint64_t next_version, version, last_delivered;
    int64_t step;
    tl_pub_stats st;
};

void *tl_pub_thread_main(void *arg);
#endif
