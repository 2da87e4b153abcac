/* stream.h: the one enqueue choke point. Counts commands, flushes the compute queue every
 * TLGPU_COMPUTE_PER_BUFFER enqueues, makes commands wait on the transfer-queue events of the buffers they
 * touch, and performs the host waits (sync points). TLGPU_SYNC=1 finishes after every command;
 * TLGPU_DEBUG_BATCHING=1 logs flushes and waits to stderr. Thread-safe (own mutex, never held while
 * blocking); blocking functions are called with the GIL released. Back-pressure (more than TLGPU_MAX_INFLIGHT
 * flushed batches, or TLGPU_MAX_STAGING_MB of upload copies, in flight) may block launch, copy and upload,
 * which callers enter holding the GIL: the block hooks release it around that wait. */
#ifndef TL_STREAM_H
#define TL_STREAM_H
#include "storage.h"

struct tl_trace;                                       /* capture.h */
typedef struct { long enqueued, flushes, waits, backpressure_waits; } tl_stream_stats;
typedef void *(*tl_block_enter_fn)(void);            /* e.g. release the GIL if this thread holds it */
typedef void (*tl_block_leave_fn)(void *);

/* Kernel on q0 touching st[0..n); bit i of `written` marks st[i] as written. NULL entries are skipped. */
tl_status tl_stream_launch(cl_kernel k, cl_uint dim, const size_t *gws, const size_t *lws,
                           tl_storage *const *st, int n, unsigned written, const char *what, tl_err *err);
/* Native kernel (clEnqueueNativeKernel) on q0 with the same accounting as tl_stream_launch: the runtime
 * copies `args` and puts the host pointer of st[i]'s buffer where mem_loc[i] points inside it. */
tl_status tl_stream_native(void (CL_CALLBACK *fn)(void *), void *args, size_t cb, const void **mem_loc,
                           tl_storage *const *st, int n, unsigned written, const char *what, tl_err *err);
tl_status tl_stream_copy(tl_storage *dst, size_t doff, tl_storage *src, size_t soff, size_t n, tl_err *err);
tl_status tl_stream_read(tl_storage *s, size_t off, void *dst, size_t n, tl_err *err);       /* blocks */
tl_status tl_stream_upload(tl_storage *s, size_t off, const void *src, size_t n, tl_err *err); /* q1, async */
tl_status tl_stream_synchronize(tl_err *err);                                                 /* blocks */
void      tl_stream_retire(tl_storage *s);                                                    /* may block */
int       tl_stream_pending(tl_storage *s);          /* transfer events still on s: its release may block */
void      tl_stream_count_wait(const char *why);
/* Device-side checks: a kernel that validates data only the device holds (gather's indices) records its
 * first failure in a small buffer (int[3]: 1 + the op's id, the bad value, the bound) instead of the host
 * reading the data first. The next sync point (tl_stream_read, tl_stream_synchronize) reads it back when
 * a check is armed and fails with TL_E_INDEX naming the op; the buffer is cleared for the work after.
 * tl_stream_check_mem returns the buffer and the op's id (op: a string literal); tl_stream_check_arm, called
 * after the checked launch, makes the next sync points read the buffer until one has covered that launch. */
tl_status tl_stream_check_mem(const char *op, cl_mem *mem, int *op_id, tl_err *err);
void      tl_stream_check_arm(void);
/* Enqueues a captured trace (capture.h) with slots[] bound (its inputs, then fresh output storages); the
 * stream's per-buffer ordering, counts and flush policy as for the commands it recorded (tl_trace_bump_writes
 * then bumps the versions the call bumped). */
tl_status tl_stream_replay(struct tl_trace *tr, tl_storage *const *slots, tl_err *err);
void      tl_stream_set_block_hooks(tl_block_enter_fn enter, tl_block_leave_fn leave);   /* back-pressure */
void      tl_stream_get_stats(tl_stream_stats *out);
void      tl_stream_reset_stats(void);
#endif
