/* publisher.h: the asynchronous weight publisher core (pure C, no Python; see docs/publish.md).
 * The learner (GIL holder) snapshots the parameters into a flat device buffer on q0 and posts it to a
 * one-slot mailbox; a background pthread compares, transfers into pinned staging and hands the version to
 * its sinks (pub_sink.h): the in-process mailbox always, shared memory and Python objects as asked.
 * Dtypes: parameters are float32, float16 or bfloat16 (TL_SHM_* codes); the snapshot and the compare keep
 * them (widened to float32 where they mix), and the thread converts to the published dtype on the device
 * before the copy to the host, so staging and every sink hold the published dtype.
 * Functions marked "lock held" need tl_pub_lock/tl_pub_trylock first; the blocking ones are called with
 * the GIL released. */
#ifndef TL_PUBLISHER_H
#define TL_PUBLISHER_H
#include "storage.h"
#include "shm_channel.h"

#define TL_PUB_MAX_SINKS 16
#define TL_PUB_MAX_SUBS 256

typedef struct tl_pub tl_pub;
typedef struct tl_pub_sink tl_pub_sink;
typedef struct {
    const char *name;
    tl_storage *storage;                 /* NULL for a zero-size tensor; the publisher retains it */
    uint64_t offset, numel;              /* elements; the tensor is contiguous */
    int dtype;                           /* TL_SHM_F32, _F16 or _BF16 */
    int ndim;
    int64_t shape[TL_SHM_MAX_DIMS];
} tl_pub_param;
typedef struct { double threshold; int incremental; long force_every; int dtype; } tl_pub_config;   /* published */
typedef struct { const char *sink; uint64_t pid, acked; } tl_pub_sub_stat;   /* one subscriber of a sink */
typedef struct {
    long published, delivered, skipped, dropped;
    uint64_t bytes_moved, version;
    int64_t step;
    double xfer_sum, lat_sum, lat_max, snap_sum, cmp_sum;   /* sums over delivered versions */
    int fast_path, n_launches, n_subs, shm_direct;
    tl_pub_sub_stat subs[TL_PUB_MAX_SUBS];
} tl_pub_stats;

/* Blocks: builds, allocates, opens the sinks. The core owns the sinks from here on, even on failure. */
tl_status tl_pub_create(const tl_pub_param *par, int n, const tl_pub_config *cfg, const tl_pub_sink *sinks,
                        int nsinks, tl_pub **out, tl_err *err);
void      tl_pub_lock(tl_pub *p);
int       tl_pub_trylock(tl_pub *p);                                     /* 1 when taken */
void      tl_pub_unlock(tl_pub *p);
tl_status tl_pub_publish_locked(tl_pub *p, int64_t step, double t_enter, tl_err *err);   /* GIL + lock held */
tl_status tl_pub_take_error_locked(tl_pub *p, tl_err *err);             /* the thread's error, once */
/* Blocking (GIL released). wait: 1 a version > newer_than is visible, 0 timeout, -1 the thread stopped. */
int       tl_pub_wait(tl_pub *p, uint64_t newer_than, double timeout);
int       tl_pub_drain(tl_pub *p, double timeout);                       /* 1 idle, 0 timeout, -1 stopped */
/* Pins the visible staging slot if its version > newer_than: returns the slot (0/1) or -1. */
int       tl_pub_pin(tl_pub *p, uint64_t newer_than, const void **flat, uint64_t *version, int64_t *step);
void      tl_pub_unpin(tl_pub *p, int slot);
uint64_t  tl_pub_flat_offset(const tl_pub *p, int i);                  /* elements of the published dtype */
void      tl_pub_get_stats(tl_pub *p, tl_pub_stats *out);
#ifdef TL_TEST_HOOKS
void      tl_pub_inject_error(tl_pub *p);                                /* the thread fails */
#endif
tl_status tl_pub_close(tl_pub *p, int cancel, tl_err *err);              /* blocks: joins; idempotent */
void      tl_pub_free(tl_pub *p);                                        /* after close: closes the sinks */
#endif
