/* arena.c: a trace's blocks (arena.h). Every block the arena took from the pool is either held by a live
 * storage of the arena or on its free list; the arena's reference count is 1 (its trace) + its live
 * storages, so when it reaches 0 every block is on the free list and goes back to the pool with the newest
 * compute-queue sequence number that touched it (a replay touches them all). */
#include "arena.h"
#include "pool.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

typedef struct { cl_mem mem; size_t cap; uint64_t seq; } block;
typedef struct { cl_mem mem; int at; } put_log;

struct tl_arena {
    atomic_int refs;
    pthread_mutex_t lock;
    block *free;                                       /* released blocks, most recent last */
    int nfree, room;
    uint64_t touched;                                  /* newest replay's sequence number */
    tl_arena_stats st;
    const int *clock;                                  /* while capturing: the trace's command count */
    put_log *log;                                      /* blocks given back while capturing, in order */
    int nlog, logroom;
};

static _Thread_local tl_arena *current;

tl_arena *
tl_arena_new(void)
{
    tl_arena *a = calloc(1, sizeof *a);
    if (a == NULL) return NULL;
    atomic_init(&a->refs, 1);
    pthread_mutex_init(&a->lock, NULL);
    return a;
}

void
tl_arena_retain(tl_arena *a)
{
    atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
}

void
tl_arena_release(tl_arena *a)
{
    if (a == NULL || atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) != 1) return;
    for (int i = 0; i < a->nfree; i++) {
        const block *b = &a->free[i];
        tl_pool_release(b->mem, b->cap, b->seq > a->touched ? b->seq : a->touched);
    }
    if (current == a) current = NULL;
    pthread_mutex_destroy(&a->lock);
    free(a->free);
    free(a->log);
    free(a);
}

void
tl_arena_set_current(tl_arena *a)
{
    current = a;
}

tl_arena *
tl_arena_current(void)
{
    return current;
}

/* The most recently released block of nbytes' size class, else a new one from the pool. Takes a reference
 * for the storage that will hold the block. */
tl_status
tl_arena_alloc(tl_arena *a, size_t nbytes, cl_mem *out, size_t *cap, uint64_t *use_seq, tl_err *err)
{
    const size_t want = tl_pool_round(nbytes);
    pthread_mutex_lock(&a->lock);
    for (int i = a->nfree - 1; i >= 0; i--) {
        if (a->free[i].cap != want) continue;
        block b = a->free[i];
        a->free[i] = a->free[--a->nfree];
        a->st.reused++;
        pthread_mutex_unlock(&a->lock);
        *out = b.mem; *cap = b.cap; *use_seq = b.seq > a->touched ? b.seq : a->touched;
        tl_arena_retain(a);
        return TL_OK;
    }
    pthread_mutex_unlock(&a->lock);
    tl_status st = tl_pool_alloc(nbytes, out, cap, use_seq, err);
    if (st != TL_OK) return st;
    pthread_mutex_lock(&a->lock);
    a->st.bytes += *cap;
    a->st.blocks++;
    pthread_mutex_unlock(&a->lock);
    tl_arena_retain(a);
    return TL_OK;
}

void
tl_arena_put(tl_arena *a, cl_mem mem, size_t cap, uint64_t use_seq)
{
    pthread_mutex_lock(&a->lock);
    if (a->nfree == a->room) {
        int room = a->room ? 2 * a->room : 16;
        block *grown = realloc(a->free, (size_t)room * sizeof *grown);
        if (grown == NULL) {                           /* the trace may still write it: lose it rather */
            pthread_mutex_unlock(&a->lock);            /* than let the pool hand it out */
            tl_arena_release(a);
            return;
        }
        a->free = grown;
        a->room = room;
    }
    a->free[a->nfree++] = (block){mem, cap, use_seq};
    if (a->clock != NULL && a->nlog == a->logroom) {   /* a lost entry hides one release: safe */
        int room = a->logroom ? 2 * a->logroom : 64;
        put_log *grown = realloc(a->log, (size_t)room * sizeof *grown);
        if (grown != NULL) { a->log = grown; a->logroom = room; }
    }
    if (a->clock != NULL && a->nlog < a->logroom) a->log[a->nlog++] = (put_log){mem, *a->clock};
    pthread_mutex_unlock(&a->lock);
    tl_arena_release(a);
}

void
tl_arena_touch(tl_arena *a, uint64_t use_seq)
{
    pthread_mutex_lock(&a->lock);
    if (use_seq > a->touched) a->touched = use_seq;
    pthread_mutex_unlock(&a->lock);
}

void
tl_arena_get_stats(tl_arena *a, tl_arena_stats *out)
{
    pthread_mutex_lock(&a->lock);
    *out = a->st;
    pthread_mutex_unlock(&a->lock);
}

void
tl_arena_log_puts(tl_arena *a, const int *clock)
{
    pthread_mutex_lock(&a->lock);
    a->clock = clock;
    pthread_mutex_unlock(&a->lock);
}

int
tl_arena_put_after(tl_arena *a, cl_mem mem, int from)
{
    int at = -1;
    pthread_mutex_lock(&a->lock);
    for (int i = 0; i < a->nlog && at < 0; i++)
        if (a->log[i].mem == mem && a->log[i].at >= from) at = a->log[i].at;
    pthread_mutex_unlock(&a->lock);
    return at;
}
