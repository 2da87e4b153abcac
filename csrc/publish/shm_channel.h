/* shm_channel.h: the weight publisher's POSIX shared-memory segment (pure C, no Python). One writer (the
 * publisher thread) and any number of reader processes. Two data slots, each guarded by its own seqlock;
 * `latest` names the newest complete slot, so a reader copies while the writer fills the other slot and
 * retries only when the writer lapped it. A reader trusts nothing in the segment: the layout is checked
 * against the segment's real size once and copied; the owner's pid and start time tell a dead writer.
 * Layout, protocol and failure behaviour: docs/publish.md. */
#ifndef TL_SHM_CHANNEL_H
#define TL_SHM_CHANNEL_H
#include "errors.h"
#include <stdint.h>

#define TL_SHM_MAX_DIMS 8
#define TL_SHM_ACK_SLOTS 64
enum { TL_SHM_CLOSED = -1, TL_SHM_DEAD = -2, TL_SHM_CORRUPT = -3 };   /* tl_shm_wait / tl_shm_read results */
/* The element dtype of the data slots: tlgpu's dtype codes (csrc/tensor/tensor.h). float32 segments keep
 * layout version 1; float16/bfloat16 ones are layout version 2, which records the dtype in the header. */
enum { TL_SHM_F32 = 0, TL_SHM_F16 = 2, TL_SHM_BF16 = 3 };
size_t    tl_shm_dtype_size(int dtype);                    /* 4, 2, 2; 0 for any other code */

typedef struct tl_shm tl_shm;
typedef struct {
    const char *name;
    uint64_t off, numel;             /* elements (of the segment's dtype) into a data slot */
    int ndim;
    int64_t shape[TL_SHM_MAX_DIMS];
} tl_shm_tensor;

/* "/name" or "name": 1-254 bytes, no '/' after the first, not "." or ".." (TL_E_ARG otherwise). */
tl_status tl_shm_check_name(const char *name, char *path, size_t cap, tl_err *err);

/* Writer. An existing segment of a dead owner is removed and made anew; a live owner's is TL_E_OS EEXIST. */
tl_status tl_shm_create(const char *name, const tl_shm_tensor *t, int n, uint64_t flat_elems, int dtype,
                        tl_shm **out, tl_err *err);
/* Publishes `version`: copies into the older slot the tensors whose tensor version (tv[i], the version in
 * which tensor i last changed) that slot does not hold yet, from the flat host array src (segment dtype). */
void      tl_shm_publish(tl_shm *s, const void *src, const uint64_t *tv, uint64_t version, int64_t step);
/* Or in place: the slot the next publish writes (the one `latest` does not name), its data (flat_elems
 * elements: the publisher's own staging, written by device reads), begin (its seqlock odd: from here the
 * writer may change it) and commit (seqlock even, `latest` names it as `version`, readers woken). */
int       tl_shm_next_slot(const tl_shm *s);
void     *tl_shm_slot_data(tl_shm *s, int slot);
void      tl_shm_begin(tl_shm *s, int slot);
void      tl_shm_commit(tl_shm *s, int slot, uint64_t version, int64_t step);
/* Ack versions and pids of live subscribers. */
int       tl_shm_acked(tl_shm *s, uint64_t *version, uint64_t *pid, int cap);
void      tl_shm_destroy(tl_shm *s);                         /* marks closed, unmaps, unlinks (writer) */

/* Reader. TL_E_OS (errno) if it cannot be opened, TL_E_ARG if it is not a sound tlgpu segment. */
tl_status tl_shm_open(const char *name, tl_shm **out, tl_err *err);
int       tl_shm_count(const tl_shm *s);
int       tl_shm_dtype(const tl_shm *s);                    /* TL_SHM_F32, _F16 or _BF16 */
void      tl_shm_tensor_info(const tl_shm *s, int i, tl_shm_tensor *out);   /* name: the reader's copy */
uint64_t  tl_shm_owner_pid(const tl_shm *s);
/* 1: copied a version newer than newer_than into dst[i] (numel elements each); 0: none newer yet;
 * TL_SHM_CORRUPT: `latest` names a slot that stays mid-write (a corrupted header).
 * delay_us (test hook): sleep halfway through the first copy attempt, so that the writer laps it. */
int       tl_shm_read(tl_shm *s, uint64_t newer_than, void *const *dst, uint64_t *version, int64_t *step,
                      long *retries, unsigned delay_us);
/* 1 newer there, 0 timeout, TL_SHM_CLOSED, TL_SHM_DEAD (owner process gone); wakes every 100 ms to check. */
int       tl_shm_wait(tl_shm *s, uint64_t newer_than, double timeout);
int       tl_shm_claim(tl_shm *s);                          /* an ack slot index, or -1 if all taken */
void      tl_shm_ack(tl_shm *s, int slot, uint64_t version);
void      tl_shm_unclaim(tl_shm *s, int slot);
void      tl_shm_close(tl_shm *s);                          /* reader: unmaps only */
#endif
