/* shm_copy.c: large copies into and out of the publisher's shared-memory slots (a publish into the segment,
 * a subscriber's read out of it), split over threads: one thread's memcpy ran at 6-7 GB/s on the H200's
 * host (benchmarks/RESULTS.md), far under its memory bandwidth. Pure C. The helpers are joined before the
 * call returns, so the caller's seqlock store or check (shm_channel.c) orders their copies. */
#include "shm_copy.h"
#include "settings.h"
#include <pthread.h>
#include <string.h>
#include <unistd.h>

enum { PAR_MIN_BYTES = 16 << 20, PAR_MAX_THREADS = 8 };
typedef struct { const tl_shm_run *runs; int nruns; size_t begin, end; } copy_share;   /* bytes of the runs */

static void
copy_share_run(const copy_share *p)
{
    size_t at = 0;
    for (int i = 0; i < p->nruns && at < p->end; at += p->runs[i].n, i++) {
        size_t lo = p->begin > at ? p->begin - at : 0, hi = p->end - at < p->runs[i].n ? p->end - at : p->runs[i].n;
        if (lo < hi) memcpy(p->runs[i].dst + lo, p->runs[i].src + lo, hi - lo);
    }
}

static void *
copy_thread(void *arg)
{
    copy_share_run(arg);
    return NULL;
}

/* Copies the runs: one contiguous share of their bytes per thread, the caller taking the first (and any
 * share whose thread could not start); one thread below PAR_MIN_BYTES, else half the CPUs (at most 8; one on
 * machines of under 4). TLGPU_SHM_COPY_THREADS=N sets the count for copies of any size (tests, tuning). */
void
tl_shm_copy_runs(const tl_shm_run *runs, int nruns)
{
    size_t total = 0;
    for (int i = 0; i < nruns; i++) total += runs[i].n;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const long env = tl_setting_int(TL_SET_SHM_COPY_THREADS);   /* 0: unset */
    int T = total < PAR_MIN_BYTES || ncpu < 4 ? 1 : ncpu / 2 < PAR_MAX_THREADS ? (int)(ncpu / 2) : PAR_MAX_THREADS;
    if (env > 0) T = env < PAR_MAX_THREADS ? (int)env : PAR_MAX_THREADS;
    pthread_t th[PAR_MAX_THREADS];
    copy_share share[PAR_MAX_THREADS];
    int started[PAR_MAX_THREADS] = {0};
    size_t each = (total + (size_t)T - 1) / (size_t)T;
    for (int t = 0; t < T; t++) {
        size_t b = (size_t)t * each < total ? (size_t)t * each : total, e = b + each < total ? b + each : total;
        share[t] = (copy_share){runs, nruns, b, e};
    }
    for (int t = 1; t < T; t++) started[t] = pthread_create(&th[t], NULL, copy_thread, &share[t]) == 0;
    copy_share_run(&share[0]);
    for (int t = 1; t < T; t++) {
        if (started[t]) pthread_join(th[t], NULL);
        else copy_share_run(&share[t]);
    }
}
