/* storage.c: refcounted device buffers. Invariant: a buffer goes back to the pool only when no queue can
 * still read or write it: compute-queue work is ordered before any later user (q0 is in order), and
 * transfer-queue events are waited for here (rare: a download or upload still in flight at release). */
#include "storage.h"
#include "arena.h"
#include "pool.h"
#include "stream.h"
#include <stdlib.h>

tl_status
tl_storage_new(size_t nbytes, tl_storage **out, tl_err *err)
{
    tl_storage *s = calloc(1, sizeof *s);
    if (s == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_storage_new", "host memory");
    s->arena = tl_arena_current();
    tl_status st = s->arena != NULL ? tl_arena_alloc(s->arena, nbytes, &s->mem, &s->cap, &s->use_seq, err)
                                    : tl_pool_alloc(nbytes, &s->mem, &s->cap, &s->use_seq, err);
    if (st != TL_OK) { free(s); return st; }
    atomic_init(&s->refs, 1);
    atomic_init(&s->version, 0);
    s->nbytes = nbytes;
    *out = s;
    return TL_OK;
}

void
tl_storage_release(tl_storage *s)
{
    if (s == NULL || atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1) return;
    tl_stream_retire(s);                             /* waits for and drops transfer-queue events */
    if (s->arena != NULL) tl_arena_put(s->arena, s->mem, s->cap, s->use_seq);   /* drops its reference */
    else tl_pool_release(s->mem, s->cap, s->use_seq);
    free(s);
}

void
tl_storage_bump_version(tl_storage *s)
{
    atomic_fetch_add_explicit(&s->version, 1, memory_order_relaxed);
}

uint64_t
tl_storage_version(const tl_storage *s)
{
    return atomic_load_explicit(&s->version, memory_order_relaxed);
}
