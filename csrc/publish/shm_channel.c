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
 *    copies only tensors that changed since that slot was last written;
 *  - the slots hold elements of one dtype: float32 in layout version 1 (the dtype fields zero), float32,
 *    float16 or bfloat16 as the header's dtype and elem_bytes say in version 2. A float32 segment is written
 *    as version 1, byte for byte as before, so older readers read it; a half one as version 2, which they
 *    refuse instead of reading its halves as floats. */
#include "shm_channel.h"
#include "shm_copy.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x3142505550474c54ull            /* "TLGPUPB1" little-endian */
#define LAYOUT_VERSION 2u                       /* the newest this code reads; 1 is still read and written */
#define PAGE 4096u
#define MAX_TENSORS (1u << 24)                  /* a reader refuses more: no table allocation beyond this */

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2, "shared-memory atomics must be lock-free");

typedef struct {                                /* one cache line per data slot */
    _Atomic uint64_t seq, version;
    _Atomic int64_t step;
    uint64_t pad[5];
} slot_hdr;

typedef struct {
    _Atomic uint64_t owner;                     /* pid of the subscriber holding the slot, 0 = free */
    _Atomic uint64_t version;                   /* the version it acked, 0 = none yet */
} ack_slot;

typedef struct {
    _Atomic uint64_t magic;                     /* stored last by the creator */
    uint32_t layout_version, n_tensors;
    uint64_t flat_elems, meta_off, names_off, data_off[2], total_bytes;
    uint64_t creator_pid, creator_start;        /* the learner: pid and start time (/proc/<pid>/stat field 22) */
    uint32_t dtype, elem_bytes;                 /* layout 2: the slots' element dtype (TL_SHM_*) and size */
    uint64_t pad0[5];
    _Atomic uint64_t latest;                    /* 0 = nothing yet; else version << 1 | slot */
    _Atomic uint64_t closed;                    /* the publisher closed: no newer version will come */
    _Atomic uint32_t notify;                    /* futex word, bumped after every publish */
    uint32_t pad1;
    uint64_t pad2[5];
    slot_hdr slot[2];
    ack_slot ack[TL_SHM_ACK_SLOTS];
} shm_header;

/* The offsets docs/publish.md documents: other-language readers depend on them. */
_Static_assert(offsetof(shm_header, creator_start) == 72 && offsetof(shm_header, dtype) == 80 &&
               offsetof(shm_header, elem_bytes) == 84 && offsetof(shm_header, latest) == 128 &&
               offsetof(shm_header, notify) == 144 && offsetof(shm_header, slot) == 192 &&
               offsetof(shm_header, ack) == 320, "shm header layout");

typedef struct {                                /* one per tensor, after the header */
    uint64_t off, numel, name_off, name_len;
    int64_t shape[TL_SHM_MAX_DIMS];
    uint32_t ndim, pad;
} shm_meta;

/* Everything the reader or writer uses to compute an address lives here, checked once: the shared header
 * can change under us (another process, a bug), the private copy cannot. */
struct tl_shm {
    shm_header *h;
    size_t len;
    int writer;
    char name[256];
    uint32_t n;
    uint64_t flat_elems, owner_pid, owner_start;
    int dtype;
    size_t esz;                                 /* bytes per element of the slots */
    shm_meta *meta;                             /* [n], private */
    char *names;                                /* private, NUL-terminated names */
    char *data[2];
    uint64_t *slot_tv;                          /* writer: [2][n] tensor versions each slot holds */
};

size_t
tl_shm_dtype_size(int dtype)
{
    return dtype == TL_SHM_F32 ? 4 : dtype == TL_SHM_F16 || dtype == TL_SHM_BF16 ? 2 : 0;
}

static uint64_t
align_up(uint64_t n, uint64_t a)
{
    return (n + a - 1) / a * a;
}

/* A failed system call: TL_E_OS with its errno (OSError at the Python edge, the subclass picked by errno). */
static tl_status
fail_os(tl_err *err, int e, const char *routine, const char *what)
{
    char msg[700];
    if (err->code != TL_OK) return err->code;
    snprintf(msg, sizeof msg, "%s: %s", what, strerror(e));
    tl_err_set(err, TL_E_OS, routine, msg);
    err->os_errno = e;
    return TL_E_OS;
}

tl_status
tl_shm_check_name(const char *name, char *path, size_t cap, tl_err *err)
{
    const char *base = name[0] == '/' ? name + 1 : name;
    size_t len = strlen(base);
    if (len == 0 || len > NAME_MAX - 1 || len + 2 > cap || strchr(base, '/') != NULL || strcmp(base, ".") == 0 ||
        strcmp(base, "..") == 0)
        return tl_err_set(err, TL_E_ARG, "shm_open", "a shared-memory name is 1-254 bytes without '/' (one leading "
                          "'/' is allowed), and not '.' or '..'");
    snprintf(path, cap, "/%s", base);
    return TL_OK;
}

/* /proc/<pid>/stat: 1 for a live process (its start time, field 22, in *start), 0 for none or a zombie (a
 * SIGKILLed learner stays a zombie until its parent reaps it), -1 when /proc cannot tell. */
static int
proc_stat(uint64_t pid, uint64_t *start)
{
    char path[64], buf[1024];
    if (pid == 0 || pid > INT_MAX) return 0;
    snprintf(path, sizeof path, "/proc/%llu/stat", (unsigned long long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT && access("/proc/self/stat", R_OK) == 0 ? 0 : -1;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0) return 0;                     /* it went between open and read */
    buf[got] = '\0';
    char *p = strrchr(buf, ')');                /* the command name may hold spaces and parentheses */
    if (p == NULL || p[1] != ' ') return -1;
    if (p[2] == 'Z' || p[2] == 'X' || p[2] == 'x') return 0;
    p += 2;                                     /* field 3, the state */
    for (int f = 3; f < 22 && p != NULL; f++)
        if ((p = strchr(p, ' ')) != NULL) p++;
    *start = p != NULL ? strtoull(p, NULL, 10) : 0;
    return 1;
}

/* start == 0: any process with that pid (segments and ack slots that carry no start time). */
static int
proc_alive(uint64_t pid, uint64_t start)
{
    uint64_t now = 0;
    int r = proc_stat(pid, &now);
    if (r < 0) return pid != 0 && pid <= INT_MAX && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
    return r == 1 && (start == 0 || now == start);
}

/* An existing segment under the name: removed when it is a tlgpu segment whose owner is dead (a crashed
 * learner's leftover); otherwise TL_E_OS EEXIST naming the live owner. flock serialises reclaimers and
 * waits out a creator still laying out its header (it holds the lock until then); the name must still be
 * the locked segment before it is unlinked, so two new publishers never remove each other's fresh one.
 * TL_OK: try the exclusive create again. */
static tl_status
reclaim(const char *path, tl_err *err)
{
    int fd = shm_open(path, O_RDWR, 0), fd2 = -1;
    struct stat a, b;
    shm_header h;
    char what[600];
    tl_status st = TL_OK;
    if (fd < 0) return errno == ENOENT ? TL_OK : fail_os(err, errno, "shm_open", path);
    for (int i = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; i++) {
        if (i == 200) {                         /* 2 s: someone holds it for good; not ours to break */
            snprintf(what, sizeof what, "%s exists and another process holds its lock", path);
            st = fail_os(err, EEXIST, "shm_open", what);
            goto done;
        }
        usleep(10000);
    }
    if ((fd2 = shm_open(path, O_RDONLY, 0)) < 0 || fstat(fd, &a) < 0 || fstat(fd2, &b) < 0 || a.st_ino != b.st_ino ||
        a.st_dev != b.st_dev)
        goto done;                              /* gone or replaced meanwhile: try again */
    memset(&h, 0, sizeof h);
    ssize_t got = pread(fd, &h, sizeof h, 0);
    uint64_t magic = atomic_load_explicit(&h.magic, memory_order_relaxed);
    int ours = got >= (ssize_t)offsetof(shm_header, latest) && h.creator_pid != 0 &&
               (magic == MAGIC || (magic == 0 && h.layout_version >= 1 && h.layout_version <= LAYOUT_VERSION));
    /* magic 0: its creator died while laying it out */
    if (!ours) {
        snprintf(what, sizeof what, "%s exists and is not a (complete) tlgpu publisher segment; remove /dev/shm%s "
                 "if it is stale", path, path);
        st = fail_os(err, EEXIST, "shm_open", what);
    } else if (proc_alive(h.creator_pid, h.creator_start)) {
        snprintf(what, sizeof what, "%s is in use by the live publisher process %llu", path,
                 (unsigned long long)h.creator_pid);
        st = fail_os(err, EEXIST, "shm_open", what);
    } else if (shm_unlink(path) < 0 && errno != ENOENT) {
        st = fail_os(err, errno, "shm_unlink", path);
    }
done:
    if (fd2 >= 0) close(fd2);
    close(fd);
    return st;
}

/* The private tensor table and names (writer and reader). */
static tl_status
alloc_tables(tl_shm *s, uint32_t n, uint64_t names_len, tl_err *err)
{
    s->n = n;
    s->meta = calloc(n > 0 ? n : 1, sizeof *s->meta);
    s->names = malloc(names_len + 1);
    if (s->meta == NULL || s->names == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_shm", "host memory");
    s->names[names_len] = '\0';
    return TL_OK;
}

tl_status
tl_shm_create(const char *name, const tl_shm_tensor *t, int n, uint64_t flat_elems, int dtype, tl_shm **out,
              tl_err *err)
{
    tl_shm *s = NULL;
    int fd = -1;
    uint64_t names_len = 0;
    if ((s = calloc(1, sizeof *s)) == NULL || (s->slot_tv = calloc(2 * (size_t)(n > 0 ? n : 1), 8)) == NULL) {
        tl_err_set(err, TL_E_NOMEM, "tl_shm_create", "host memory");
        goto fail;
    }
    if (tl_shm_check_name(name, s->name, sizeof s->name, err) != TL_OK) goto fail;
    if ((s->esz = tl_shm_dtype_size(dtype)) == 0) {
        tl_err_set(err, TL_E_ARG, "tl_shm_create", "the slots' dtype must be float32, float16 or bfloat16");
        goto fail;
    }
    s->dtype = dtype;
    for (int i = 0; i < n; i++) names_len += strlen(t[i].name) + 1;
    if (alloc_tables(s, (uint32_t)n, names_len, err) != TL_OK) goto fail;
    uint64_t meta_off = align_up(sizeof(shm_header), 64), names_off = meta_off + (uint64_t)n * sizeof(shm_meta);
    uint64_t d0 = align_up(names_off + names_len, PAGE), slot_bytes = align_up(flat_elems * s->esz, PAGE);
    s->len = d0 + 2 * slot_bytes;
    for (int attempt = 0; (fd = shm_open(s->name, O_CREAT | O_EXCL | O_RDWR, 0600)) < 0; attempt++) {
        if (errno != EEXIST || attempt == 3) { fail_os(err, errno, "shm_open", s->name); goto fail; }
        if (reclaim(s->name, err) != TL_OK) goto fail;
    }
    s->writer = 1;                               /* from here on, destroy unlinks */
    flock(fd, LOCK_EX);                          /* reclaimers wait until the header names us (released by close) */
    if (ftruncate(fd, (off_t)s->len) < 0) { fail_os(err, errno, "ftruncate", s->name); goto fail; }
    void *map = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) { fail_os(err, errno, "mmap", s->name); goto fail; }
    s->h = map;                                  /* ftruncate zero-filled it: latest = 0, all slots free */
    shm_header *h = s->h;
    h->layout_version = dtype == TL_SHM_F32 ? 1u : 2u;    /* float32: as before, for older readers */
    if (dtype != TL_SHM_F32) {
        h->dtype = (uint32_t)dtype;
        h->elem_bytes = (uint32_t)s->esz;
    }
    h->n_tensors = (uint32_t)n;
    h->flat_elems = s->flat_elems = flat_elems;
    h->meta_off = meta_off;
    h->names_off = names_off;
    h->data_off[0] = d0;
    h->data_off[1] = d0 + slot_bytes;
    h->total_bytes = s->len;
    h->creator_pid = s->owner_pid = (uint64_t)getpid();
    if (proc_stat(h->creator_pid, &s->owner_start) == 1) h->creator_start = s->owner_start;
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(t[i].name);
        s->meta[i] = (shm_meta){t[i].off, t[i].numel, at, len, {0}, (uint32_t)t[i].ndim, 0};
        memcpy(s->meta[i].shape, t[i].shape, sizeof s->meta[i].shape);
        memcpy(s->names + at, t[i].name, len + 1);
        at += len + 1;
    }
    memcpy((char *)map + meta_off, s->meta, (size_t)n * sizeof(shm_meta));
    memcpy((char *)map + names_off, s->names, names_len);
    s->data[0] = (char *)map + d0;
    s->data[1] = (char *)map + d0 + slot_bytes;
    atomic_store_explicit(&h->magic, MAGIC, memory_order_release);
    flock(fd, LOCK_UN);                          /* explicitly: the mapping keeps the file, and its lock, open */
    close(fd);
    *out = s;
    return TL_OK;
fail:
    if (fd >= 0) close(fd);
    tl_shm_destroy(s);
    return err->code;
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

void *
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
tl_shm_commit(tl_shm *s, int slot, uint64_t version, int64_t step)
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
tl_shm_publish(tl_shm *s, const void *src, const uint64_t *tv, uint64_t version, int64_t step)
{
    int n = (int)s->n, w = tl_shm_next_slot(s);
    tl_shm_begin(s, w);
    tl_shm_run *runs = malloc((size_t)(n > 0 ? n : 1) * sizeof *runs);
    int nr = 0;
    for (int i = 0; i < n; i++) {
        if (s->slot_tv[w * n + i] == tv[i]) continue;                      /* slot already holds it */
        tl_shm_run r = {s->data[w] + s->meta[i].off * s->esz, (const char *)src + s->meta[i].off * s->esz,
                      s->meta[i].numel * s->esz};
        if (runs != NULL) runs[nr++] = r;
        else memcpy(r.dst, r.src, r.n);                                    /* no memory for the list */
        s->slot_tv[w * n + i] = tv[i];
    }
    tl_shm_copy_runs(runs, nr);
    free(runs);
    tl_shm_commit(s, w, version, step);
}

int
tl_shm_acked(tl_shm *s, uint64_t *version, uint64_t *pid, int cap)
{
    int k = 0;
    for (int i = 0; i < TL_SHM_ACK_SLOTS && k < cap; i++) {
        uint64_t o = atomic_load_explicit(&s->h->ack[i].owner, memory_order_acquire);
        if (!proc_alive(o, 0)) continue;
        pid[k] = o;
        version[k++] = atomic_load_explicit(&s->h->ack[i].version, memory_order_relaxed);
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
    free(s->meta);
    free(s->names);
    free(s->slot_tv);
    free(s);
}

static tl_status
bad_segment(tl_err *err, const char *path, const char *why)
{
    char what[800];
    snprintf(what, sizeof what, "Subscriber: %s is not a sound tlgpu publisher segment: %s", path, why);
    return tl_err_set(err, TL_E_ARG, "tl_shm_open", what);
}

static int
cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Every tensor row: its range inside a slot, its shape against its size, its name (inside the name table,
 * NUL-terminated where its length says, no NUL before) and no two names alike. */
static tl_status
check_tensors(tl_shm *s, uint64_t names_len, tl_err *err)
{
    char why[400];
    const char **sorted = malloc(sizeof(char *) * (s->n > 0 ? s->n : 1));
    tl_status st = TL_OK;
    if (sorted == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_shm_open", "host memory");
    for (uint32_t i = 0; i < s->n && st == TL_OK; i++) {
        const shm_meta *m = &s->meta[i];
        uint64_t prod = 1;
        int shape_ok = m->ndim <= TL_SHM_MAX_DIMS;
        for (uint32_t d = 0; shape_ok && d < m->ndim; d++) {
            uint64_t e = (uint64_t)m->shape[d];
            shape_ok = m->shape[d] >= 0 && (e == 0 || prod <= UINT64_MAX / e);
            prod *= e;
        }
        why[0] = '\0';
        if (m->off > s->flat_elems || m->numel > s->flat_elems - m->off)
            snprintf(why, sizeof why, "tensor %u lies outside its data slot", i);
        else if (!shape_ok || prod != m->numel)
            snprintf(why, sizeof why, "tensor %u: its shape does not match its %llu elements", i,
                     (unsigned long long)m->numel);
        else if (m->name_off >= names_len || m->name_len >= names_len - m->name_off ||
                 s->names[m->name_off + m->name_len] != '\0' || memchr(s->names + m->name_off, 0, m->name_len))
            snprintf(why, sizeof why, "tensor %u: its name lies outside the name table or is not terminated", i);
        if (why[0] != '\0') st = bad_segment(err, s->name, why);
        else sorted[i] = s->names + m->name_off;    /* only a checked offset: past the table it is UB */
    }
    if (st == TL_OK) qsort(sorted, s->n, sizeof *sorted, cmp_str);
    for (uint32_t i = 1; st == TL_OK && i < s->n; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            snprintf(why, sizeof why, "two tensors are named '%.200s'", sorted[i]);
            st = bad_segment(err, s->name, why);
        }
    free(sorted);
    return st;
}

/* The header, read once, against the segment's real size; then the tables, copied and checked. */
static tl_status
check_layout(tl_shm *s, tl_err *err)
{
    const shm_header *h = s->h;
    uint64_t size = s->len, n = h->n_tensors, flat = h->flat_elems, meta_off = h->meta_off;
    uint64_t names_off = h->names_off, d[2] = {h->data_off[0], h->data_off[1]};
    uint32_t layout = h->layout_version, dt = layout == 1 ? TL_SHM_F32 : h->dtype, eb = h->elem_bytes;
    size_t esz = tl_shm_dtype_size((int)dt);
    char why[400];
    why[0] = '\0';
    if (layout < 1 || layout > LAYOUT_VERSION)
        snprintf(why, sizeof why, "layout version %u (this reader knows 1 to %u)", layout, LAYOUT_VERSION);
    else if (esz == 0 || (layout > 1 && eb != esz))
        snprintf(why, sizeof why, "layout version %u with element dtype code %u of %u bytes (this reader knows "
                 "float32 (0, 4 bytes), float16 (2, 2) and bfloat16 (3, 2))", layout, dt, eb);
    else if (h->total_bytes != size)
        snprintf(why, sizeof why, "its header says %llu bytes, it has %llu", (unsigned long long)h->total_bytes,
                 (unsigned long long)size);
    else if (n > MAX_TENSORS || meta_off < sizeof(shm_header) || meta_off > size ||
             (size - meta_off) / sizeof(shm_meta) < n)
        snprintf(why, sizeof why, "its tensor table (%llu rows at %llu) lies outside it", (unsigned long long)n,
                 (unsigned long long)meta_off);
    else if (names_off < meta_off + n * sizeof(shm_meta) || names_off > d[0] || names_off > d[1])
        snprintf(why, sizeof why, "its name table offset %llu is out of place", (unsigned long long)names_off);
    else if (flat > size / esz)
        snprintf(why, sizeof why, "data slots of %llu elements do not fit", (unsigned long long)flat);
    for (int k = 0; k < 2 && why[0] == '\0'; k++)
        if (d[k] % 4 != 0 || d[k] > size || flat * esz > size - d[k])
            snprintf(why, sizeof why, "data slot %d (%llu elements at %llu) lies outside it", k,
                     (unsigned long long)flat, (unsigned long long)d[k]);
    if (why[0] != '\0') return bad_segment(err, s->name, why);
    uint64_t names_len = (d[0] < d[1] ? d[0] : d[1]) - names_off;
    if (alloc_tables(s, (uint32_t)n, names_len, err) != TL_OK) return err->code;
    memcpy(s->meta, (const char *)h + meta_off, n * sizeof(shm_meta));
    memcpy(s->names, (const char *)h + names_off, names_len);
    s->flat_elems = flat;
    s->dtype = (int)dt;
    s->esz = esz;
    s->owner_pid = h->creator_pid;
    s->owner_start = h->creator_start;
    s->data[0] = (char *)s->h + d[0];
    s->data[1] = (char *)s->h + d[1];
    return check_tensors(s, names_len, err);
}

tl_status
tl_shm_open(const char *name, tl_shm **out, tl_err *err)
{
    tl_shm *s = NULL;
    int fd = -1;
    struct stat sb;
    if ((s = calloc(1, sizeof *s)) == NULL) return tl_err_set(err, TL_E_NOMEM, "tl_shm_open", "host memory");
    if (tl_shm_check_name(name, s->name, sizeof s->name, err) != TL_OK) goto fail;
    if ((fd = shm_open(s->name, O_RDWR, 0)) < 0) { fail_os(err, errno, "shm_open", s->name); goto fail; }
    if (fstat(fd, &sb) < 0) { fail_os(err, errno, "fstat", s->name); goto fail; }
    if ((uint64_t)sb.st_size < sizeof(shm_header)) {
        bad_segment(err, s->name, "smaller than its header (or its publisher is still creating it)");
        goto fail;
    }
    s->len = (size_t)sb.st_size;
    void *map = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);   /* write: ack slots */
    if (map == MAP_FAILED) { fail_os(err, errno, "mmap", s->name); goto fail; }
    close(fd);
    fd = -1;
    s->h = map;
    if (atomic_load_explicit(&s->h->magic, memory_order_acquire) != MAGIC) {
        bad_segment(err, s->name, "bad magic (or its publisher is still creating it)");
        goto fail;
    }
    if (check_layout(s, err) != TL_OK) goto fail;
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
    return (int)s->n;
}

int
tl_shm_dtype(const tl_shm *s)
{
    return s->dtype;
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
tl_shm_owner_pid(const tl_shm *s)
{
    return s->owner_pid;
}

static double
mono_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int
tl_shm_read(tl_shm *s, uint64_t newer_than, void *const *dst, uint64_t *version, int64_t *step, long *retries,
            unsigned delay_us)
{
    shm_header *h = s->h;
    uint64_t odd_L = 0;
    double odd_since = 0;
    for (int attempt = 0;; attempt++) {
        if (attempt > 0) {
            (*retries)++;
            if (attempt > 4) sched_yield();    /* the writer is mid-slot: let it finish */
        }
        uint64_t L = atomic_load_explicit(&h->latest, memory_order_acquire);
        if (L == 0 || L >> 1 <= newer_than) return 0;
        slot_hdr *sh = &h->slot[L & 1];
        uint64_t s1 = atomic_load_explicit(&sh->seq, memory_order_acquire);
        if (s1 & 1) {                           /* being rewritten: `latest` has moved on, reload it */
            /* The writer only rewrites the slot `latest` does not name, so the named slot stays odd for
             * long only in a corrupted segment: give up after 100 ms of that rather than spin for ever. */
            if (L != odd_L) { odd_L = L; odd_since = mono_now(); }
            else if (mono_now() - odd_since > 0.1) return TL_SHM_CORRUPT;
            continue;
        }
        uint64_t v = atomic_load_explicit(&sh->version, memory_order_relaxed);
        int64_t st = atomic_load_explicit(&sh->step, memory_order_relaxed);
        tl_shm_run *runs = delay_us ? NULL : malloc((size_t)s->n * sizeof *runs + 1);
        for (uint32_t i = 0; i < s->n; i++) {
            tl_shm_run r = {dst[i], s->data[L & 1] + s->meta[i].off * s->esz, s->meta[i].numel * s->esz};
            if (runs != NULL) { runs[i] = r; continue; }
            if (delay_us && attempt == 0 && i == s->n / 2) usleep(delay_us);   /* test hook */
            memcpy(r.dst, r.src, r.n);
        }
        if (runs != NULL) tl_shm_copy_runs(runs, (int)s->n);
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
    struct timespec rel;
    double deadline = mono_now() + (timeout >= 0 ? timeout : 1e18);
    for (;;) {
        uint32_t seen = atomic_load_explicit(&s->h->notify, memory_order_acquire);
        if (atomic_load_explicit(&s->h->latest, memory_order_acquire) >> 1 > newer_than) return 1;
        if (atomic_load_explicit(&s->h->closed, memory_order_acquire)) return TL_SHM_CLOSED;
        if (!proc_alive(s->owner_pid, s->owner_start)) return TL_SHM_DEAD;   /* SIGKILL never rings the bell */
        double left = deadline - mono_now();
        if (left <= 0) return 0;
        if (left > 0.1) left = 0.1;             /* re-check now and then: a dead writer never rings */
        rel.tv_sec = (time_t)left;
        rel.tv_nsec = (long)((left - (double)rel.tv_sec) * 1e9);
        syscall(SYS_futex, (uint32_t *)&s->h->notify, FUTEX_WAIT, seen, &rel, NULL, 0);   /* relative */
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
            if (pass == 0 ? o != 0 : proc_alive(o, 0)) continue;   /* pass 1 takes slots of dead processes */
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
    free(s->meta);
    free(s->names);
    free(s->slot_tv);
    free(s);
}
