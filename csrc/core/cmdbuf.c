/* cmdbuf.c: tlgpu.jit's replay through cl_khr_command_buffer (cmdbuf.h).
 * Segments: maximal runs (at least MIN_SEG) of kernel and copy commands that every replay enqueues unchanged
 * except for the slots' buffers. Native kernels, random draws (fresh stream positions each replay) and
 * commands whose scalars Trace.set_arg refreshes (marked `refreshed`; a new mark drops the plan) stay outside.
 * Variants: a command buffer fixes its arguments when recorded, so each segment keeps up to MAX_VARIANTS
 * recordings keyed by the cl_mem of every slot it touches, least recently used out. A variant retains the
 * buffers its commands use (the slots' and the trace's held ones), so a key can never match a freed buffer whose
 * handle was reused (a hit is the very same buffers) and none goes while a dropped recording may still run.
 * A segment whose bindings keep changing (outputs kept by the caller: fresh blocks each call) stops recording
 * and runs one command at a time. Where the device lacks simultaneous use, a variant still pending runs one
 * by one instead of waiting.
 * PoCL 3.1 (extension 0.9.0) reads a recorded kernel's arguments from the kernel object when it runs, not
 * at record time as the specification says (an argument set after recording changes or crashes the
 * recorded command), and crashes on a sync-point list given with a count of 0. So each recorded command
 * gets its own clone of the trace's kernel (clCloneKernel, OpenCL 2.1), never touched after recording, and
 * empty lists are NULL. Commands are chained by sync points: in order whatever the implementation's default.
 * The extension's entry points and constants are declared here: the installed headers may predate or
 * postdate them (0.9.5 added a properties argument to the copy command: the device's version picks).
 * setup.py defines _GNU_SOURCE (dlsym's RTLD_DEFAULT). */
#include "cmdbuf.h"
#include "cl_runtime.h"
#include "clock.h"
#include "settings.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_VARIANTS 4
#define MIN_SEG 2                                      /* one command gains nothing from a buffer */
#define THRASH_MISSES 8                                /* misses before a segment may stop recording */

typedef struct _cl_command_buffer_khr *cbuf;
typedef cl_uint syncpt;
typedef cl_ulong cbprop;
enum { DEV_CB_CAPS = 0x12A9, DEV_CB_QUEUE_PROPS = 0x12AA, DEV_EXT_VERSIONS = 0x1060, CB_FLAGS = 0x1293 };
enum { CAP_SIMULTANEOUS = 1 << 2, CB_SIMULTANEOUS = 1 << 0 };
typedef struct { cl_uint version; char name[64]; } name_version;   /* cl_name_version */

typedef cbuf (CL_API_CALL *create_fn)(cl_uint, const cl_command_queue *, const cbprop *, cl_int *);
typedef cl_int (CL_API_CALL *cbuf_fn)(cbuf);
typedef cl_int (CL_API_CALL *enqueue_fn)(cl_uint, cl_command_queue *, cbuf, cl_uint, const cl_event *, cl_event *);
typedef cl_int (CL_API_CALL *ndrange_fn)(cbuf, cl_command_queue, const cbprop *, cl_kernel, cl_uint, const size_t *,
                                         const size_t *, const size_t *, cl_uint, const syncpt *, syncpt *, void *);
typedef cl_int (CL_API_CALL *copy_fn)(cbuf, cl_command_queue, cl_mem, cl_mem, size_t, size_t, size_t, cl_uint,
                                      const syncpt *, syncpt *, void *);
typedef cl_int (CL_API_CALL *copy_props_fn)(cbuf, cl_command_queue, const cbprop *, cl_mem, cl_mem, size_t, size_t,
                                            size_t, cl_uint, const syncpt *, syncpt *, void *);
typedef cl_kernel (CL_API_CALL *clone_fn)(cl_kernel, cl_int *);

static struct {
    int probed, present, simultaneous, copy_props;
    const char *why;                                   /* why the device cannot, NULL: it can */
    create_fn create;
    cbuf_fn finalize, release;
    enqueue_fn enqueue;
    ndrange_fn ndrange;
    copy_fn copy;
    copy_props_fn copy_p;
    clone_fn clone;
} ext;
static pthread_mutex_t probe_lock = PTHREAD_MUTEX_INITIALIZER;

typedef struct {
    cbuf cb;
    cl_kernel *clones;                                 /* one per command (NULL for copies) */
    cl_mem *key;                                       /* the bound buffer of each of the segment's slots */
    cl_mem *held;                                      /* every buffer its commands use, retained */
    int nheld;
    cl_event last;                                     /* the last enqueue, where simultaneous use is missing */
    uint64_t used;
} variant;

typedef struct {
    int first, count, nslots, nv, off;                 /* off: bindings thrashed, the loop runs it */
    int *slots;                                        /* the distinct slots its commands bind */
    long hits, misses;
    variant v[MAX_VARIANTS];
} segment;

struct tl_cmdbuf {
    int planned, nseg;
    segment *seg;
    int *at;                                           /* at[i]: the segment starting at command i, -1: none */
    uint64_t tick;
    tl_cmdbuf_stats st;
};

static int
has_token(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = strstr(list, word); p != NULL; p = strstr(p + 1, word))
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == '\0')) return 1;
    return 0;
}

/* The extension's version from CL_DEVICE_EXTENSIONS_WITH_VERSION (OpenCL 3.0), 0 when unknown. */
static cl_uint
ext_version(cl_device_id dev)
{
    size_t n = 0;
    cl_uint v = 0;
    if (clGetDeviceInfo(dev, DEV_EXT_VERSIONS, 0, NULL, &n) != CL_SUCCESS || n == 0) return 0;
    name_version *all = malloc(n);
    if (all != NULL && clGetDeviceInfo(dev, DEV_EXT_VERSIONS, n, all, NULL) == CL_SUCCESS)
        for (size_t i = 0; i < n / sizeof *all; i++)
            if (strcmp(all[i].name, "cl_khr_command_buffer") == 0) v = all[i].version;
    free(all);
    return v;
}

static void
probe(const tl_runtime *rt)
{
    char *exts = NULL;
    size_t n = 0;
    cl_ulong caps = 0, need = 0, have = 0;
    int major = 0, minor = 0;
    ext.why = "the device does not report cl_khr_command_buffer";
    if (clGetDeviceInfo(rt->device, CL_DEVICE_EXTENSIONS, 0, NULL, &n) != CL_SUCCESS) return;
    if ((exts = calloc(n + 1, 1)) == NULL) return;
    if (clGetDeviceInfo(rt->device, CL_DEVICE_EXTENSIONS, n, exts, NULL) == CL_SUCCESS &&
        has_token(exts, "cl_khr_command_buffer")) ext.present = 1;
    free(exts);
    if (!ext.present) return;
#define GET(field, type, name) ext.field = (type)clGetExtensionFunctionAddressForPlatform(rt->platform, name)
    GET(create, create_fn, "clCreateCommandBufferKHR");
    GET(finalize, cbuf_fn, "clFinalizeCommandBufferKHR");
    GET(release, cbuf_fn, "clReleaseCommandBufferKHR");
    GET(enqueue, enqueue_fn, "clEnqueueCommandBufferKHR");
    GET(ndrange, ndrange_fn, "clCommandNDRangeKernelKHR");
    GET(copy, copy_fn, "clCommandCopyBufferKHR");
#undef GET
    ext.copy_p = (copy_props_fn)(void *)ext.copy;
    const cl_uint v = ext_version(rt->device);         /* major << 22 | minor << 12 | patch */
    ext.copy_props = v >= ((0u << 22) | (9u << 12) | 5u);
    if (sscanf(rt->info.version, "OpenCL %d.%d", &major, &minor) == 2 && major * 10 + minor >= 21)
        ext.clone = (clone_fn)dlsym(RTLD_DEFAULT, "clCloneKernel");
    clGetDeviceInfo(rt->device, DEV_CB_CAPS, sizeof caps, &caps, NULL);
    clGetDeviceInfo(rt->device, DEV_CB_QUEUE_PROPS, sizeof need, &need, NULL);
    clGetCommandQueueInfo(rt->q0, CL_QUEUE_PROPERTIES, sizeof have, &have, NULL);
    ext.simultaneous = (caps & CAP_SIMULTANEOUS) != 0;
    if (!ext.create || !ext.finalize || !ext.release || !ext.enqueue || !ext.ndrange || !ext.copy)
        ext.why = "the platform does not give cl_khr_command_buffer's entry points";
    else if (ext.clone == NULL)
        ext.why = "the device lacks clCloneKernel (OpenCL 2.1), which gives each recorded command its own kernel";
    else if ((need & ~have) != 0)
        ext.why = "the device's command buffers need queue properties the compute queue lacks";
    else
        ext.why = NULL;
}

/* auto's rule: on only where a measurement showed replays through command buffers are no slower than the loop
 * (benchmarks/bench_jit_cmdbuf.py; docs/jit.md, "Command buffers"). PoCL 3.1 (the extension's 0.9.0): a wash,
 * the best rounds within 20 % either way and the loop's lower in 8 of 12, no host time saved, whatever the worker
 * threads. No other device with the extension has been measured yet: a row goes here when one is. */
static int
measured_gain(const tl_runtime *rt)
{
    (void)rt;
    return 0;
}

tl_status
tl_cmdbuf_device(const char **why, tl_err *err)
{
    const tl_runtime *rt;
    tl_status st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    pthread_mutex_lock(&probe_lock);
    if (!ext.probed) probe(rt);
    ext.probed = 1;
    pthread_mutex_unlock(&probe_lock);
    *why = ext.why;
    return TL_OK;
}

tl_status
tl_cmdbuf_choose(int want, int *use, tl_err *err)
{
    const tl_runtime *rt;
    const char *why;
    tl_status st = tl_cmdbuf_device(&why, err);
    *use = 0;
    if (st == TL_OK) st = tl_runtime_get(&rt, err);
    if (st != TL_OK) return st;
    if (want < 0) {
        const char *s = tl_setting_str(TL_SET_JIT_CMDBUF);
        want = s != NULL && strcmp(s, "1") == 0 ? 1 : s != NULL && strcmp(s, "0") == 0 ? 0 : -1;
        if (want == 1 && ext.why != NULL) want = 0;    /* the setting asks where it can: never an error */
    }
    if (want == 1 && ext.why != NULL) {
        tl_err_set(err, TL_E_ARG, "tlgpu.jit", NULL);
        snprintf(err->what, sizeof err->what, "command_buffer=True: %s (%s)", ext.why, rt->info.name);
        return TL_E_ARG;
    }
    *use = want == 1 || (want < 0 && ext.why == NULL && measured_gain(rt));
    return TL_OK;
}

tl_status
tl_cmdbuf_attach(tl_trace *tr, tl_err *err)
{
    if (tr->cmdbuf != NULL) return TL_OK;
    if ((tr->cmdbuf = calloc(1, sizeof *tr->cmdbuf)) == NULL)
        return tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "host memory for a trace's command buffers");
    return TL_OK;
}

/* Variants dropped while an execution may be pending wait here, behind a q0 marker, before their command
 * buffer, clones and buffers are released (an implementation need not retain what a recorded command uses).
 * Swept at each segment enqueue and each plan drop; never waited on. */
typedef struct grave { struct grave *next; cl_event mk; variant v; int count, nslots; } grave;
static grave *graves;
static pthread_mutex_t grave_lock = PTHREAD_MUTEX_INITIALIZER;

static void
release_variant(variant *v, int count, int nslots)
{
    if (v->cb != NULL) ext.release(v->cb);
    for (int i = 0; v->clones != NULL && i < count; i++)
        if (v->clones[i] != NULL) clReleaseKernel(v->clones[i]);
    (void)nslots;
    for (int i = 0; i < v->nheld; i++) clReleaseMemObject(v->held[i]);
    if (v->last != NULL) clReleaseEvent(v->last);
    free(v->clones);
    free(v->key);
    free(v->held);
    memset(v, 0, sizeof *v);
}

static void
sweep_graves(void)
{
    pthread_mutex_lock(&grave_lock);
    for (grave **p = &graves; *p != NULL;) {
        grave *g = *p;
        cl_int status = CL_QUEUED;
        clGetEventInfo(g->mk, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
        if (status > CL_COMPLETE) {
            p = &g->next;
            continue;
        }
        *p = g->next;
        clReleaseEvent(g->mk);
        release_variant(&g->v, g->count, g->nslots);
        free(g);
    }
    pthread_mutex_unlock(&grave_lock);
}

/* Drops v: at once if it never ran, else behind a marker on q0 (in order: it covers every execution). */
static void
variant_clear(variant *v, int count, int nslots)
{
    const tl_runtime *rt;
    tl_err err = {0};
    grave *g = v->used ? malloc(sizeof *g) : NULL;
    if (g != NULL && tl_runtime_get(&rt, &err) == TL_OK &&
        clEnqueueMarkerWithWaitList(rt->q0, 0, NULL, &g->mk) == CL_SUCCESS) {
        clFlush(rt->q0);
        g->v = *v;
        g->count = count;
        g->nslots = nslots;
        pthread_mutex_lock(&grave_lock);
        g->next = graves;
        graves = g;
        pthread_mutex_unlock(&grave_lock);
        memset(v, 0, sizeof *v);
        return;
    }
    free(g);                                           /* no marker: released now, as clReleaseKernel would be */
    release_variant(v, count, nslots);
}

static void
drop_plan(tl_cmdbuf *cb)
{
    sweep_graves();
    for (int s = 0; s < cb->nseg; s++) {
        segment *g = &cb->seg[s];
        for (int k = 0; k < g->nv; k++) variant_clear(&g->v[k], g->count, g->nslots);
        free(g->slots);
    }
    free(cb->seg);
    free(cb->at);
    cb->seg = NULL;
    cb->at = NULL;
    cb->nseg = cb->planned = 0;
    cb->st.segments = cb->st.commands = cb->st.variants = 0;
}

void
tl_cmdbuf_invalidate(tl_cmdbuf *cb)
{
    if (cb != NULL) drop_plan(cb);
}

void
tl_cmdbuf_free(tl_cmdbuf *cb)
{
    if (cb == NULL) return;
    drop_plan(cb);
    free(cb);
}

void
tl_cmdbuf_get_stats(const tl_cmdbuf *cb, tl_cmdbuf_stats *out)
{
    if (cb == NULL) memset(out, 0, sizeof *out);
    else *out = cb->st;
}

/* The arguments the op set with a NULL value of a cl_mem's size (an optional buffer left out, or a __local
 * array of 8 bytes) are set so again on the clone: PoCL 3.1 crashes recording a NULL buffer given as a
 * pointer to a NULL cl_mem, the form its clones carry. Repeating the op's own call is faithful either way. */
static cl_int
null_args(const tl_cmd *m, cl_kernel k)
{
    cl_int rc = CL_SUCCESS;
    for (cl_uint i = 0; i < 63 && rc == CL_SUCCESS; i++)
        if (m->null_args >> i & 1) rc = clSetKernelArg(k, i, sizeof(cl_mem), NULL);
    return rc;
}

static int
recordable(const tl_cmd *m)
{
    if (m->rng_block >= 0 || m->refreshed) return 0;
    return m->kind == TL_CMD_COPY || (m->kind == TL_CMD_KERNEL && !(m->null_args >> 63 & 1));
}

/* The segments of tr's commands as they stand (which are refreshed is known after the first replay's hooks). */
static int
plan(tl_cmdbuf *cb, const tl_trace *tr)
{
    int n = tr->ncmds;
    if ((cb->at = malloc((size_t)(n ? n : 1) * sizeof *cb->at)) == NULL) return -1;
    if ((cb->seg = calloc((size_t)(n / MIN_SEG + 1), sizeof *cb->seg)) == NULL) return -1;
    for (int i = 0; i < n; i++) cb->at[i] = -1;
    for (int i = 0; i < n;) {
        int j = i;
        while (j < n && recordable(&tr->cmds[j])) j++;
        if (j - i >= MIN_SEG) {
            segment *g = &cb->seg[cb->nseg];
            g->first = i;
            g->count = j - i;
            if ((g->slots = malloc((size_t)(tr->nslots ? tr->nslots : 1) * sizeof *g->slots)) == NULL) return -1;
            for (int c = i; c < j; c++)
                for (int k = 0; k < tr->cmds[c].nmem; k++) {
                    const int s = tr->cmds[c].mems[k].slot;
                    int seen = 0;
                    for (int e = 0; e < g->nslots; e++) seen |= g->slots[e] == s;
                    if (s >= 0 && !seen) g->slots[g->nslots++] = s;
                }
            cb->at[i] = cb->nseg++;
            cb->st.commands += g->count;
        }
        i = j > i ? j : i + 1;
    }
    cb->st.segments = cb->nseg;
    cb->planned = 1;
    return 0;
}

static cl_mem
bound_mem(const tl_cmd_mem *mm, tl_storage *const *slots)
{
    return mm->slot >= 0 ? slots[mm->slot]->mem : mm->mem;
}

/* Whether mem is a buffer the trace holds: a command's 8-byte scalar argument looks like a cl_mem in its list
 * (capture.h keeps every argument of a cl_mem's size), so only buffers known to be buffers are retained. The
 * arena's blocks are not among them: the arena lives as long as the trace, and its blocks return to the pool,
 * which frees a block only when asked (empty_cache, its limit). */
static int
known(const tl_trace *tr, cl_mem mem)
{
    for (int i = 0; i < tr->nheld; i++)
        if (tr->held[i]->mem == mem) return 1;
    for (int i = 0; i < tr->ncopies; i++)
        if (tr->copies[i].traced->mem == mem) return 1;
    return 0;
}

/* Records segment g with slots bound into v (empty). */
static cl_int
record(const tl_trace *tr, const segment *g, variant *v, tl_storage *const *slots, cl_command_queue q,
       const char **routine)
{
    const cbprop props[] = {CB_FLAGS, CB_SIMULTANEOUS, 0};
    cl_int rc = CL_SUCCESS;
    syncpt prev = 0, sp = 0;
    size_t nmem = 1;
    for (int c = 0; c < g->count; c++) nmem += (size_t)(unsigned)tr->cmds[g->first + c].nmem;
    v->clones = calloc((size_t)(unsigned)g->count, sizeof *v->clones);
    v->key = calloc((size_t)(g->nslots ? g->nslots : 1), sizeof *v->key);
    v->held = calloc(nmem, sizeof *v->held);
    if (v->clones == NULL || v->key == NULL || v->held == NULL) return CL_OUT_OF_HOST_MEMORY;
    for (int k = 0; k < g->nslots; k++) v->key[k] = slots[g->slots[k]]->mem;
    for (int c = 0; c < g->count; c++)                 /* alive while the variant lives: keys stay unique */
        for (int k = 0; k < tr->cmds[g->first + c].nmem; k++) {
            const tl_cmd_mem *mm = &tr->cmds[g->first + c].mems[k];
            cl_mem mem = bound_mem(mm, slots);
            if (mem != NULL && (mm->slot >= 0 || known(tr, mem)) && clRetainMemObject(mem) == CL_SUCCESS)
                v->held[v->nheld++] = mem;
        }
    *routine = "clCreateCommandBufferKHR";
    v->cb = ext.create(1, &q, ext.simultaneous ? props : NULL, &rc);
    if (rc != CL_SUCCESS) {
        v->cb = NULL;
        return rc;
    }
    for (int c = 0; c < g->count && rc == CL_SUCCESS; c++) {
        const tl_cmd *m = &tr->cmds[g->first + c];
        const cl_uint nw = c > 0;
        if (m->kind == TL_CMD_COPY) {
            cl_mem src = bound_mem(&m->mems[0], slots), dst = bound_mem(&m->mems[1], slots);
            *routine = "clCommandCopyBufferKHR";
            rc = ext.copy_props ? ext.copy_p(v->cb, NULL, NULL, src, dst, m->soff, m->doff, m->n, nw, nw ? &prev : NULL,
                                             &sp, NULL)
                                : ext.copy(v->cb, NULL, src, dst, m->soff, m->doff, m->n, nw, nw ? &prev : NULL, &sp, NULL);
        } else {
            *routine = "clCloneKernel";
            v->clones[c] = ext.clone(m->k, &rc);
            if (rc == CL_SUCCESS) rc = null_args(m, v->clones[c]);
            for (int k = 0; k < m->nmem && rc == CL_SUCCESS; k++) {
                if (m->mems[k].slot < 0) continue;     /* fixed buffers: the clone has them */
                cl_mem mem = slots[m->mems[k].slot]->mem;
                *routine = "clSetKernelArg";
                rc = clSetKernelArg(v->clones[c], m->mems[k].idx, sizeof mem, &mem);
            }
            if (rc != CL_SUCCESS) break;
            *routine = "clCommandNDRangeKernelKHR";
            rc = ext.ndrange(v->cb, NULL, NULL, v->clones[c], m->dim, NULL, m->gws, m->has_lws ? m->lws : NULL, nw,
                             nw ? &prev : NULL, &sp, NULL);
        }
        prev = sp;
    }
    if (rc == CL_SUCCESS) {
        *routine = "clFinalizeCommandBufferKHR";
        rc = ext.finalize(v->cb);
    }
    return rc;
}

static int
matches(const segment *g, const variant *v, tl_storage *const *slots)
{
    for (int k = 0; k < g->nslots; k++)
        if (slots[g->slots[k]]->mem != v->key[k]) return 0;
    return 1;
}

static int
still_pending(const variant *v)
{
    cl_int status = CL_COMPLETE;
    if (v->last == NULL) return 0;
    clGetEventInfo(v->last, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL);
    return status > CL_COMPLETE;
}

cl_int
tl_cmdbuf_enqueue_at(tl_trace *tr, int i, tl_storage *const *slots, cl_command_queue q, int *took,
                     const char **routine)
{
    tl_cmdbuf *cb = tr->cmdbuf;
    *took = 0;
    if (cb == NULL) return CL_SUCCESS;
    if (!cb->planned && plan(cb, tr) < 0) {
        drop_plan(cb);
        *routine = "tlgpu.jit command buffers";
        return CL_OUT_OF_HOST_MEMORY;
    }
    if (i >= tr->ncmds || cb->at[i] < 0) return CL_SUCCESS;
    segment *g = &cb->seg[cb->at[i]];
    sweep_graves();
    if (g->off) {
        cb->st.loop_runs++;
        return CL_SUCCESS;
    }
    variant *v = NULL;
    for (int k = 0; k < g->nv && v == NULL; k++)
        if (matches(g, &g->v[k], slots)) v = &g->v[k];
    if (v != NULL) {
        g->hits++;
        cb->st.hits++;
    } else {
        g->misses++;
        if (g->misses > THRASH_MISSES && 2 * g->misses > g->hits) {   /* keeps changing: stop recording */
            for (int k = 0; k < g->nv; k++) variant_clear(&g->v[k], g->count, g->nslots);
            cb->st.variants -= g->nv;
            g->nv = 0;
            g->off = 1;
            cb->st.loop_runs++;
            return CL_SUCCESS;
        }
        if (g->nv == MAX_VARIANTS) {                   /* the least recently used goes */
            int old = 0;
            for (int k = 1; k < g->nv; k++)
                if (g->v[k].used < g->v[old].used) old = k;
            variant_clear(&g->v[old], g->count, g->nslots);
            g->v[old] = g->v[--g->nv];
            cb->st.variants--;
        }
        v = &g->v[g->nv++];
        memset(v, 0, sizeof *v);
        cb->st.variants++;
        cb->st.records++;
        const double t0 = tl_now_s();
        cl_int rc = record(tr, g, v, slots, q, routine);
        cb->st.record_s += tl_now_s() - t0;
        if (rc != CL_SUCCESS) {
            variant_clear(v, g->count, g->nslots);
            *v = g->v[--g->nv];
            cb->st.variants--;
            return rc;
        }
    }
    if (!ext.simultaneous && still_pending(v)) {       /* may not be enqueued again before it completes */
        cb->st.loop_runs++;
        return CL_SUCCESS;
    }
    v->used = ++cb->tick;
    cl_event ev = NULL;
    *routine = "clEnqueueCommandBufferKHR";
    cl_int rc = ext.enqueue(0, NULL, v->cb, 0, NULL, ext.simultaneous ? NULL : &ev);
    if (rc != CL_SUCCESS) return rc;
    if (ev != NULL) {
        if (v->last != NULL) clReleaseEvent(v->last);
        v->last = ev;
    }
    cb->st.enqueues++;
    *took = g->count;
    return CL_SUCCESS;
}
