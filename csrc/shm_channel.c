/* shm_channel.c: the publisher's shared-memory segment: layout, the seqlock writer and reader, the futex
 * doorbell and the subscribers' ack slots. Pure C (no Python): the writer side runs on the publisher
 * thread, the reader side with the GIL released.
 * Invariants:
 *  - the segment is laid out once by its creator and never resized; `magic` is stored last (release), so
 *    a reader that sees it (acquire) sees the whole layout;
 *  - only one writer; it writes the slot that `latest` does not name, inside that slot's seqlock (seq odd
 *    while writing), then publishes `latest` = version << 1 | slot (release);
 *  - a reader accepts a copy only if the slot's seq was even before and unchanged after the copy (with an
 *    acquire fence between, Boehm's C11 seqlock); otherwise it retries: never a torn version;
 *  - per slot, the writer remembers which version of each tensor the slot holds, so an incremental publish
 *    copies only tensors that changed since that slot was last written. */
#include "shm_channel.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x3142505550474c54ull            /* "TLGPUPB1" little-endian */
#define LAYOUT_VERSION 1u
#define PAGE 4096u

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2, "shared-memory atomics must be lock-free");

typedef struct {                                /* one cache line per data slot */
    _Atomic uint64_t seq, version, step;
    uint64_t pad[5];
} slot_hdr;

typedef struct {
    _Atomic uint64_t owner;                     /* pid of the subscriber holding the slot, 0 = free */
    _Atomic uint64_t version;                   /* the version it acked, 0 = none yet */
} ack_slot;

typedef struct {
    _Atomic uint64_t magic;                     /* stored last by the creator */
    uint32_t layout_version, n_tensors;
    uint64_t flat_elems, meta_off, names_off, data_off[2], total_bytes, creator_pid;
    uint64_t pad0[7];
    _Atomic uint64_t latest;                    /* 0 = nothing yet; else version << 1 | slot */
    _Atomic uint64_t closed;                    /* the publisher closed: no newer version will come */
    _Atomic uint32_t notify;                    /* futex word, bumped after every publish */
    uint32_t pad1;
    uint64_t pad2[5];
    slot_hdr slot[2];
    ack_slot ack[TL_SHM_ACK_SLOTS];
} shm_header;

/* The offsets docs/publish.md documents: other-language readers depend on them. */
_Static_assert(offsetof(shm_header, latest) == 128 && offsetof(shm_header, notify) == 144 &&
               offsetof(shm_header, slot) == 192 && offsetof(shm_header, ack) == 320, "shm header layout");

typedef struct {                                /* one per tensor, after the header */
    uint64_t off, numel, name_off, name_len;
    int64_t shape[TL_SHM_MAX_DIMS];
    uint32_t ndim, pad;
} shm_meta;

struct tl_shm {
    shm_header *h;
    size_t len;
    int writer;
    char name[256];
    const shm_meta *meta;
    const char *names;
    float *data[2];
    uint64_t *slot_tv;                          /* writer: [2][n] tensor versions each slot holds */
};

static uint64_t
align_up(uint64_t n, uint64_t a)
{
    return (n + a - 1) / a * a;
}

static tl_status
fail_errno(tl_err *err, int *os_errno, const char *routine, const char *name)
{
    char what[600];
    *os_errno = errno;
    snprintf(what, sizeof what, "%s: %s", name, strerror(errno));
    return tl_err_set(err, TL_E_INVALID, routine, what);
}

/* POSIX shm names are "/name" with no other slash. */
static tl_status
shm_path(const char *name, char *out, size_t cap, tl_err *err)
{
    const char *base = name[0] == '/' ? name + 1 : name;
    if (base[0] == '\0' || strchr(base, '/') != NULL || strlen(base) + 2 > cap || strlen(base) > NAME_MAX - 1)
        return tl_err_set(err, TL_E_INVALID, "shm_open", "a shared-memory name is 1-250 characters without '/'");
    snprintf(out, cap, "/%s", base);
    return TL_OK;
}

tl_status
tl_shm_create(const char *name, const tl_shm_tensor *t, int n, uint64_t flat_elems, tl_shm **out, int *os_errno,
              tl_err *err)
{
    tl_shm *s = NULL;
    int fd = -1;
    uint64_t names_len = 0;
    *os_errno = 0;
    if ((s = calloc(1, sizeof *s)) == NULL || (s->slot_tv = calloc(2 * (size_t)(n > 0 ? n : 1), 8)) == NULL) {
        tl_err_set(err, TL_E_NOMEM, "tl_shm_create", "host memory");
        goto fail;
    }
    if (shm_path(name, s->name, sizeof s->name, err) != TL_OK) goto fail;
    for (int i = 0; i < n; i++) names_len += strlen(t[i].name) + 1;
    uint64_t meta_off = align_up(sizeof(shm_header), 64), names_off = meta_off + (uint64_t)n * sizeof(shm_meta);
    uint64_t d0 = align_up(names_off + names_len, PAGE), slot_bytes = align_up(flat_elems * 4, PAGE);
    s->len = d0 + 2 * slot_bytes;
    if ((fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600)) < 0) {
        fail_errno(err, os_errno, "shm_open", s->name);
        goto fail;
    }
    s->writer = 1;                               /* from here on, destroy unlinks */
    if (ftruncate(fd, (off_t)s->len) < 0) { fail_errno(err, os_errno, "ftruncate", s->name); goto fail; }
    void *map = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { fail_errno(err, os_errno, "mmap", s->name); goto fail; }
    close(fd);
    fd = -1;
    s->h = map;                                  /* ftruncate zero-filled it: latest = 0, all slots free */
    shm_header *h = s->h;
    h->layout_version = LAYOUT_VERSION;
    h->n_tensors = (uint32_t)n;
    h->flat_elems = flat_elems;
    h->meta_off = meta_off;
    h->names_off = names_off;
    h->data_off[0] = d0;
    h->data_off[1] = d0 + slot_bytes;
    h->total_bytes = s->len;
    h->creator_pid = (uint64_t)getpid();
    shm_meta *m = (shm_meta *)((char *)map + meta_off);
    char *names = (char *)map + names_off;
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(t[i].name);
        m[i] = (shm_meta){t[i].off, t[i].numel, at, len, {0}, (uint32_t)t[i].ndim, 0};
        memcpy(m[i].shape, t[i].shape, sizeof m[i].shape);
        memcpy(names + at, t[i].name, len + 1);
        at += len + 1;
    }
    s->meta = m;
    s->names = names;
    s->data[0] = (float *)((char *)map + d0);
    s->data[1] = (float *)((char *)map + d0 + slot_bytes);
    atomic_store_explicit(&h->magic, MAGIC, memory_order_release);
    *out = s;
    return TL_OK;
fail:
    if (fd >= 0) close(fd);
    tl_shm_destroy(s);
    return err->code;
}

/* Large copies (a publish into the segment, a subscriber's read out of it) are split over threads: one
 * thread's memcpy ran at 6-7 GB/s on the H200's host (benchmarks/RESULTS.md), far under its memory bandwidth.
 * The helpers are joined before the seqlock's closing store or check, so their copies are ordered by it. */
enum { PAR_MIN_BYTES = 16 << 20, PAR_MAX_THREADS = 8 };
typedef struct { char *dst; const char *src; size_t n; } copy_run;
typedef struct { const copy_run *runs; int nruns; size_t begin, end; } copy_share;   /* bytes of the runs */

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
static void
copy_runs(const copy_run *runs, int nruns)
{
    size_t total = 0;
    for (int i = 0; i < nruns; i++) total += runs[i].n;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("TLGPU_SHM_COPY_THREADS");
    int T = total < PAR_MIN_BYTES || ncpu < 4 ? 1 : ncpu / 2 < PAR_MAX_THREADS ? (int)(ncpu / 2) : PAR_MAX_THREADS;
    if (env != NULL && atoi(env) > 0) T = atoi(env) < PAR_MAX_THREADS ? atoi(env) : PAR_MAX_THREADS;
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

static void
futex_wake_all(_Atomic uint32_t *word)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);   /* shared: no _PRIVATE */
}

int
tl_shm_next_slot(const tl_shm *s)
{
    uint64_t L = atomic_load_explicit(&s->h->latest, memory_order_relaxed);   /* we are the only writer */
    return L == 0 ? 0 : 1 - (int)(L & 1);
}

float *
tl_shm_slot_data(tl_shm *s, int slot)
{
    return s->data[slot];
}

void
tl_shm_begin(tl_shm *s, int slot)
{
    slot_hdr *sh = &s->h->slot[slot];
    uint64_t q = atomic_load_explicit(&sh->seq, memory_order_relaxed);
    if (!(q & 1)) atomic_store_explicit(&sh->seq, q + 1, memory_order_relaxed);   /* odd: readers retry */
    atomic_thread_fence(memory_order_release);
}

void
tl_shm_commit(tl_shm *s, int slot, uint64_t version, uint64_t step)
{
    shm_header *h = s->h;
    slot_hdr *sh = &h->slot[slot];
    atomic_store_explicit(&sh->version, version, memory_order_relaxed);
    atomic_store_explicit(&sh->step, step, memory_order_relaxed);
    atomic_store_explicit(&sh->seq, atomic_load_explicit(&sh->seq, memory_order_relaxed) + 1, memory_order_release);
    atomic_store_explicit(&h->latest, version << 1 | (uint64_t)slot, memory_order_release);
    atomic_fetch_add_explicit(&h->notify, 1, memory_order_release);
    futex_wake_all(&h->notify);
}

void
tl_shm_publish(tl_shm *s, const float *src, const uint64_t *tv, uint64_t version, uint64_t step)
{
    int n = (int)s->h->n_tensors, w = tl_shm_next_slot(s);
    tl_shm_begin(s, w);
    copy_run *runs = malloc((size_t)(n > 0 ? n : 1) * sizeof *runs);
    int nr = 0;
    for (int i = 0; i < n; i++) {
        if (s->slot_tv[w * n + i] == tv[i]) continue;                      /* slot already holds it */
        copy_run r = {(char *)(s->data[w] + s->meta[i].off), (const char *)(src + s->meta[i].off),
                      s->meta[i].numel * 4};
        if (runs != NULL) runs[nr++] = r;
        else memcpy(r.dst, r.src, r.n);                                    /* no memory for the list */
        s->slot_tv[w * n + i] = tv[i];
    }
    copy_runs(runs, nr);
    free(runs);
    tl_shm_commit(s, w, version, step);
}

static int
pid_alive(uint64_t pid)
{
    return pid != 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

int
tl_shm_acked(tl_shm *s, uint64_t *out, int cap)
{
    int k = 0;
    for (int i = 0; i < TL_SHM_ACK_SLOTS && k < cap; i++) {
        uint64_t o = atomic_load_explicit(&s->h->ack[i].owner, memory_order_acquire);
        if (pid_alive(o)) out[k++] = atomic_load_explicit(&s->h->ack[i].version, memory_order_relaxed);
    }
    return k;
}

void
tl_shm_destroy(tl_shm *s)
{
    if (s == NULL) return;
    if (s->h != NULL) {
        if (s->writer) {
            atomic_store_explicit(&s->h->closed, 1, memory_order_release);
            atomic_fetch_add_explicit(&s->h->notify, 1, memory_order_release);
            futex_wake_all(&s->h->notify);       /* waiting readers see `closed` at once */
        }
        munmap(s->h, s->len);
    }
    if (s->writer) shm_unlink(s->name);          /* mapped readers keep their view */
    free(s->slot_tv);
    free(s);
}

tl_status
tl_shm_open(const char *name, tl_shm **out, int *os_errno, tl_err *err)
{
    tl_shm *s = NULL;
    int fd = -1;
    struct stat sb;
    *os_errno = 0;
    if ((s = calloc(1, sizeof *s)) == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_shm_open", "host memory");
    if (shm_path(name, s->name, sizeof s->name, err) != TL_OK) goto fail;
    if ((fd = shm_open(s->name, O_RDWR, 0)) < 0) { fail_errno(err, os_errno, "shm_open", s->name); goto fail; }
    if (fstat(fd, &sb) < 0) { fail_errno(err, os_errno, "fstat", s->name); goto fail; }
    if ((size_t)sb.st_size < sizeof(shm_header)) {
        tl_err_set(err, TL_E_INVALID, "tl_shm_open", "segment too small: not a tlgpu publisher (or not ready)");
        goto fail;
    }
    s->len = (size_t)sb.st_size;
    void *map = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);   /* write: ack slots */
    if (map == MAP_FAILED) { fail_errno(err, os_errno, "mmap", s->name); goto fail; }
    close(fd);
    fd = -1;
    s->h = map;
    shm_header *h = s->h;
    if (atomic_load_explicit(&h->magic, memory_order_acquire) != MAGIC || h->layout_version != LAYOUT_VERSION ||
        h->total_bytes != s->len || h->data_off[1] + h->flat_elems * 4 > s->len ||
        h->names_off > h->data_off[0]) {
        tl_err_set(err, TL_E_INVALID, "tl_shm_open", "bad magic or layout: not a tlgpu publisher segment");
        goto fail;
    }
    s->meta = (const shm_meta *)((char *)map + h->meta_off);
    s->names = (const char *)map + h->names_off;
    s->data[0] = (float *)((char *)map + h->data_off[0]);
    s->data[1] = (float *)((char *)map + h->data_off[1]);
    for (uint32_t i = 0; i < h->n_tensors; i++)
        if (s->meta[i].off + s->meta[i].numel > h->flat_elems || s->meta[i].ndim > TL_SHM_MAX_DIMS ||
            h->names_off + s->meta[i].name_off + s->meta[i].name_len >= h->data_off[0]) {
            tl_err_set(err, TL_E_INVALID, "tl_shm_open", "corrupt tensor table");
            goto fail;
        }
    *out = s;
    return TL_OK;
fail:
    if (fd >= 0) close(fd);
    tl_shm_close(s);
    return err->code;
}

int
tl_shm_count(const tl_shm *s)
{
    return (int)s->h->n_tensors;
}

void
tl_shm_tensor_info(const tl_shm *s, int i, tl_shm_tensor *out)
{
    const shm_meta *m = &s->meta[i];
    out->name = s->names + m->name_off;
    out->off = m->off;
    out->numel = m->numel;
    out->ndim = (int)m->ndim;
    memcpy(out->shape, m->shape, sizeof out->shape);
}

uint64_t
tl_shm_latest_version(const tl_shm *s)
{
    return atomic_load_explicit(&s->h->latest, memory_order_acquire) >> 1;
}

int
tl_shm_read(tl_shm *s, uint64_t newer_than, float *const *dst, uint64_t *version, uint64_t *step, long *retries,
            unsigned delay_us)
{
    shm_header *h = s->h;
    for (int attempt = 0;; attempt++) {
        if (attempt > 0) {
            (*retries)++;
            if (attempt > 4) sched_yield();    /* the writer is mid-slot: let it finish */
        }
        uint64_t L = atomic_load_explicit(&h->latest, memory_order_acquire);
        if (L == 0 || L >> 1 <= newer_than) return 0;
        slot_hdr *sh = &h->slot[L & 1];
        uint64_t s1 = atomic_load_explicit(&sh->seq, memory_order_acquire);
        if (s1 & 1) continue;                   /* being rewritten: `latest` has moved on, reload it */
        uint64_t v = atomic_load_explicit(&sh->version, memory_order_relaxed);
        uint64_t st = atomic_load_explicit(&sh->step, memory_order_relaxed);
        copy_run *runs = delay_us ? NULL : malloc((size_t)h->n_tensors * sizeof *runs + 1);
        for (uint32_t i = 0; i < h->n_tensors; i++) {
            copy_run r = {(char *)dst[i], (const char *)(s->data[L & 1] + s->meta[i].off), s->meta[i].numel * 4};
            if (runs != NULL) { runs[i] = r; continue; }
            if (delay_us && attempt == 0 && i == h->n_tensors / 2) usleep(delay_us);   /* test hook */
            memcpy(r.dst, r.src, r.n);
        }
        if (runs != NULL) copy_runs(runs, (int)h->n_tensors);
        free(runs);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&sh->seq, memory_order_relaxed) != s1) continue;   /* lapped: torn */
        *version = v;
        *step = st;
        return 1;
    }
}

int
tl_shm_wait(tl_shm *s, uint64_t newer_than, double timeout)
{
    struct timespec now, end;
    clock_gettime(CLOCK_MONOTONIC, &now);
    double deadline = now.tv_sec + now.tv_nsec * 1e-9 + (timeout >= 0 ? timeout : 1e18);
    for (;;) {
        uint32_t seen = atomic_load_explicit(&s->h->notify, memory_order_acquire);
        if (tl_shm_latest_version(s) > newer_than) return 1;
        if (atomic_load_explicit(&s->h->closed, memory_order_acquire)) return 0;
        clock_gettime(CLOCK_MONOTONIC, &now);
        double left = deadline - (now.tv_sec + now.tv_nsec * 1e-9);
        if (left <= 0) return 0;
        if (left > 0.1) left = 0.1;             /* re-check now and then: a crashed writer never rings */
        end.tv_sec = (time_t)left;
        end.tv_nsec = (long)((left - (double)end.tv_sec) * 1e9);
        syscall(SYS_futex, (uint32_t *)&s->h->notify, FUTEX_WAIT, seen, &end, NULL, 0);   /* relative */
    }
}

int
tl_shm_claim(tl_shm *s)
{
    uint64_t me = (uint64_t)getpid();
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < TL_SHM_ACK_SLOTS; i++) {
            ack_slot *a = &s->h->ack[i];
            uint64_t o = atomic_load_explicit(&a->owner, memory_order_relaxed);
            if (pass == 0 ? o != 0 : pid_alive(o)) continue;   /* pass 1 takes slots of dead processes */
            if (atomic_compare_exchange_strong_explicit(&a->owner, &o, me, memory_order_acq_rel,
                                                        memory_order_relaxed)) {
                atomic_store_explicit(&a->version, 0, memory_order_release);
                return i;
            }
        }
    return -1;
}

void
tl_shm_ack(tl_shm *s, int slot, uint64_t version)
{
    atomic_store_explicit(&s->h->ack[slot].version, version, memory_order_release);
}

void
tl_shm_unclaim(tl_shm *s, int slot)
{
    atomic_store_explicit(&s->h->ack[slot].version, 0, memory_order_relaxed);
    atomic_store_explicit(&s->h->ack[slot].owner, 0, memory_order_release);
}

void
tl_shm_close(tl_shm *s)
{
    if (s == NULL) return;
    if (s->h != NULL) munmap(s->h, s->len);
    free(s->slot_tv);
    free(s);
}
