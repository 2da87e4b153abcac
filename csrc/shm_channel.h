/* shm_channel.h: the weight publisher's POSIX shared-memory segment (pure C, no Python). One writer (the
 * publisher thread) and any number of reader processes. Two data slots, each guarded by its own seqlock;
 * `latest` names the newest complete slot, so a reader copies while the writer fills the other slot and
 * retries only when the writer lapped it. Layout and protocol: docs/publish.md. */
#ifndef TL_SHM_CHANNEL_H
#define TL_SHM_CHANNEL_H
#include "errors.h"
#include <stdint.h>

#define TL_SHM_MAX_DIMS 8
#define TL_SHM_ACK_SLOTS 64

typedef struct tl_shm tl_shm;
typedef struct {
    const char *name;
    uint64_t off, numel;             /* elements into a data slot */
    int ndim;
    int64_t shape[TL_SHM_MAX_DIMS];
} tl_shm_tensor;

/* Writer. The segment is created exclusively (an existing name is an error naming it). */
tl_status tl_shm_create(const char *name, const tl_shm_tensor *t, int n, uint64_t flat_elems, tl_shm **out,
                        int *os_errno, tl_err *err);         /* os_errno: errno of a failed system call */
/* Publishes `version`: copies into the older slot the tensors whose tensor version (tv[i], the version in
 * which tensor i last changed) that slot does not hold yet, from the flat host array src. */
void      tl_shm_publish(tl_shm *s, const float *src, const uint64_t *tv, uint64_t version, uint64_t step);
/* Or in place: the slot the next publish writes (the one `latest` does not name), its data (flat_elems
 * floats: the publisher's own staging, written by device reads), begin (its seqlock odd: from here the
 * writer may change it) and commit (seqlock even, `latest` names it as `version`, readers woken). */
int       tl_shm_next_slot(const tl_shm *s);
float    *tl_shm_slot_data(tl_shm *s, int slot);
void      tl_shm_begin(tl_shm *s, int slot);
void      tl_shm_commit(tl_shm *s, int slot, uint64_t version, uint64_t step);
int       tl_shm_acked(tl_shm *s, uint64_t *out, int cap);   /* ack versions of live subscribers */
void      tl_shm_destroy(tl_shm *s);                         /* marks closed, unmaps, unlinks (writer) */

/* Reader. */
tl_status tl_shm_open(const char *name, tl_shm **out, int *os_errno, tl_err *err);
int       tl_shm_count(const tl_shm *s);
void      tl_shm_tensor_info(const tl_shm *s, int i, tl_shm_tensor *out);   /* name points into the map */
/* 1: copied a version newer than newer_than into dst[i] (numel floats each); 0: none newer yet.
 * delay_us (test hook): sleep halfway through the first copy attempt, so that the writer laps it. */
int       tl_shm_read(tl_shm *s, uint64_t newer_than, float *const *dst, uint64_t *version, uint64_t *step,
                      long *retries, unsigned delay_us);
int       tl_shm_wait(tl_shm *s, uint64_t newer_than, double timeout);     /* 1 newer there, 0 timeout/closed */
uint64_t  tl_shm_latest_version(const tl_shm *s);
int       tl_shm_claim(tl_shm *s);                          /* an ack slot index, or -1 if all taken */
void      tl_shm_ack(tl_shm *s, int slot, uint64_t version);
void      tl_shm_unclaim(tl_shm *s, int slot);
void      tl_shm_close(tl_shm *s);                          /* reader: unmaps only */
#endif
