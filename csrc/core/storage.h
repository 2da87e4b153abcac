/* storage.h: a device buffer shared by every view of it (Arc-style). The last release waits for any
 * transfer-queue event still on the buffer, then returns it to the pool (or to its trace's arena). The event fields and use_seq are
 * owned by stream.c and changed only under its lock. */
#ifndef TL_STORAGE_H
#define TL_STORAGE_H
#include "errors.h"
#include <stdatomic.h>
#include <stdint.h>

typedef struct tl_storage {
    atomic_int refs;
    atomic_ullong version;           /* bumped by every in-place write; autograd compares saved versions */
    cl_mem mem;
    size_t nbytes, cap;              /* requested / held by the pool block */
    uint64_t use_seq;                /* compute-queue sequence number of the last command touching it */
    cl_event ready_ev;               /* pending transfer-queue write into it (an upload) */
    cl_event rd_ev;                  /* pending transfer-queue read of it (a download) */
    const char *writer;              /* the last in-place op (a static string), for autograd's errors */
    struct tl_arena *arena;          /* the trace arena its block came from (arena.h), NULL: the pool */
} tl_storage;

/* nbytes > 0; from this thread's current arena while a trace is being captured, else from the pool */
tl_status tl_storage_new(size_t nbytes, tl_storage **out, tl_err *err);
void      tl_storage_release(tl_storage *s);                               /* NULL is a no-op */
void      tl_storage_bump_version(tl_storage *s);
uint64_t  tl_storage_version(const tl_storage *s);

static inline void
tl_storage_retain(tl_storage *s)                       /* inline: the layers under storage.c hold too */
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}
#endif
