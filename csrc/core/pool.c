/* pool.c: the buffer pool. Free blocks are kept per size class (an open-addressed table of LIFO stacks,
 * so the most recently used, still-warm block is handed out first). A block enters the pool only after
 * storage.c has seen every transfer-queue event on it complete; compute-queue users need no event
 * because q0 is in order and any later user is enqueued after the last one.
 * Out of memory: when a request does not fit the device's global memory (live + request), or
 * clCreateBuffer fails, the cached blocks are released and the request retried once; a second failure
 * is TL_E_NOMEM. TLGPU_POOL=0 bypasses caching (every release frees); TLGPU_POOL_LIMIT_MB caps the
 * cached bytes (blocks beyond it are freed at release). */
#include "pool.h"
#include "cl_runtime.h"
#include "settings.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NBINS 1024                                   /* power of two; classes in use are far fewer */

typedef struct { cl_mem mem; uint64_t seq; } block;
typedef struct { size_t cap; block *items; int n, room; } bin;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bin bins[NBINS];
static tl_pool_stats st;
static int configured;

static void
configure(void)
{
    st.enabled = tl_setting_flag(TL_SET_POOL);         /* off by default in sanitizer builds (settings.c) */
    st.limit = (size_t)tl_setting_int(TL_SET_POOL_LIMIT_MB) << 20;
    configured = 1;
}

size_t
tl_pool_round(size_t n)
{
    if (n <= 256) return 256;
    int bits = 64 - __builtin_clzll((unsigned long long)(n - 1));   /* n-1 < 2^bits */
    size_t step = (size_t)1 << (bits - 5);                           /* 16 steps per octave */
    return (n + step - 1) / step * step;
}

static bin *
find_bin(size_t cap, int create)
{
    size_t h = (cap >> 8) * 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < NBINS; i++) {
        bin *b = &bins[(h + i) & (NBINS - 1)];
        if (b->cap == cap) return b;
        if (b->cap == 0) {
            if (!create) return NULL;
            b->cap = cap;
            return b;
        }
    }
    return NULL;
}

static void
free_cached(void)
{
    for (int i = 0; i < NBINS; i++) {
        for (int j = 0; j < bins[i].n; j++) clReleaseMemObject(bins[i].items[j].mem);
        bins[i].n = 0;
    }
    st.cached = 0;
}

tl_status
tl_pool_alloc(size_t nbytes, cl_mem *out, size_t *cap_out, uint64_t *use_seq, tl_err *err)
{
    const tl_runtime *rt;
    tl_status s = tl_runtime_get(&rt, err);
    if (s != TL_OK) return s;
    size_t cap = tl_pool_round(nbytes);
    char what[160];
    if (cap > rt->info.max_alloc) {
        snprintf(what, sizeof what, "%zu bytes requested; the device's largest buffer is %llu bytes", nbytes,
                 (unsigned long long)rt->info.max_alloc);
        return tl_err_set(err, TL_E_NOMEM, "tl_pool_alloc", what);
    }
    pthread_mutex_lock(&lock);
    if (!configured) configure();
    st.allocations++;
    bin *b = st.enabled ? find_bin(cap, 0) : NULL;
    if (b != NULL && b->n > 0) {
        block blk = b->items[--b->n];
        st.hits++;
        st.cached -= cap;
        st.live += cap;
        if (st.live > st.peak) st.peak = st.live;
        pthread_mutex_unlock(&lock);
        *out = blk.mem; *cap_out = cap; *use_seq = blk.seq;
        return TL_OK;
    }
    st.misses++;
    cl_int rc = CL_SUCCESS;
    cl_mem mem = NULL;
    for (int attempt = 0; attempt < 2 && mem == NULL; attempt++) {
        if (attempt == 1) {                              /* release what the pool holds, then retry once */
            st.oom_retries++;
            free_cached();
        }
        if (st.live + st.cached + cap > rt->info.global_mem) {   /* cached blocks count against the device */
            rc = CL_MEM_OBJECT_ALLOCATION_FAILURE;
            continue;
        }
        mem = clCreateBuffer(rt->ctx, CL_MEM_READ_WRITE, cap, NULL, &rc);
        if (rc != CL_SUCCESS) mem = NULL;
    }
    if (mem != NULL) {
        st.live += cap;
        if (st.live > st.peak) st.peak = st.live;
    }
    size_t live = st.live;
    pthread_mutex_unlock(&lock);
    if (mem == NULL) {
        snprintf(what, sizeof what, "%zu bytes requested with %zu live of %llu on the device", nbytes, live,
                 (unsigned long long)rt->info.global_mem);
        return tl_err_set(err, tl_status_is_oom(rc) ? TL_E_NOMEM : rc, "clCreateBuffer", what);
    }
    *out = mem; *cap_out = cap; *use_seq = 0;
    return TL_OK;
}

void
tl_pool_release(cl_mem mem, size_t cap, uint64_t use_seq)
{
    pthread_mutex_lock(&lock);
    if (!configured) configure();
    st.frees++;
    st.live -= cap;
    bin *b = NULL;
    if (st.enabled && (st.limit == 0 || st.cached + cap <= st.limit)) b = find_bin(cap, 1);
    if (b != NULL && b->n == b->room) {
        int room = b->room ? 2 * b->room : 8;
        block *grown = realloc(b->items, (size_t)room * sizeof *grown);
        if (grown != NULL) { b->items = grown; b->room = room; }
    }
    if (b != NULL && b->n < b->room) {
        b->items[b->n].mem = mem;
        b->items[b->n++].seq = use_seq;
        st.cached += cap;
        mem = NULL;
    }
    pthread_mutex_unlock(&lock);
    if (mem != NULL) clReleaseMemObject(mem);
}

void
tl_pool_get_stats(tl_pool_stats *out)
{
    pthread_mutex_lock(&lock);
    if (!configured) configure();
    *out = st;
    pthread_mutex_unlock(&lock);
}

void
tl_pool_reset_peak(void)
{
    pthread_mutex_lock(&lock);
    st.peak = st.live;
    st.allocations = st.hits = st.misses = st.frees = st.oom_retries = 0;
    pthread_mutex_unlock(&lock);
}

void
tl_pool_empty_cache(void)
{
    pthread_mutex_lock(&lock);
    free_cached();
    pthread_mutex_unlock(&lock);
}
