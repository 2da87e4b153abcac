/* capture.c: recording a call's compute-queue commands into a trace (capture.h). The capture state is
 * per thread: other threads' work is neither recorded nor given the arena's blocks. An op sets a kernel's
 * arguments (tl_capture_arg keeps a shadow copy per cl_kernel, since OpenCL cannot read them back) and
 * launches it; the launch creates the trace's own kernel object from the same program and sets the
 * shadow's values on it, so the shared kernel object stays free for the next op. */
#include "capture.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { size_t size; unsigned char *val; int set; } shadow_arg;   /* set with val NULL: __local */
typedef struct { cl_kernel k; cl_uint nargs; shadow_arg *a; } shadow;
typedef struct {
    tl_trace *tr;
    shadow *sh;
    int nsh, shroom;
    tl_storage **set;                                  /* held storages, open addressing; cap a power of 2 */
    int setcap;
} capture;

static _Thread_local capture *cur;
static tl_rng_take_fn rng_take;

void
tl_capture_set_rng(tl_rng_take_fn take)
{
    rng_take = take;
}

tl_rng_take_fn
tl_capture_rng_source(void)
{
    return rng_take;
}

tl_trace *
tl_capture_current(void)
{
    return cur != NULL ? cur->tr : NULL;
}

void
tl_capture_fail(const char *fmt, const char *what)
{
    if (cur != NULL && cur->tr->error[0] == '\0')
        snprintf(cur->tr->error, sizeof cur->tr->error, fmt, what != NULL ? what : "?");
}

tl_status
tl_capture_begin(tl_err *err)
{
    if (cur != NULL) return tl_err_set(err, TL_E_STATE, "tlgpu.jit", "this thread is capturing a trace already");
    capture *c = calloc(1, sizeof *c);
    tl_trace *tr = calloc(1, sizeof *tr);
    tl_arena *a = tl_arena_new();
    if (c == NULL || tr == NULL || a == NULL) {
        free(c);
        free(tr);
        tl_arena_release(a);
        return tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "host memory for a trace");
    }
    tr->arena = a;
    c->tr = tr;
    cur = c;
    tl_arena_set_current(a);
    tl_arena_log_puts(a, &tr->ncmds);                  /* liveness for the fusion pass */
    return TL_OK;
}

tl_trace *
tl_capture_end(void)
{
    capture *c = cur;
    if (c == NULL) return NULL;
    cur = NULL;
    tl_arena_set_current(NULL);
    tl_arena_log_puts(c->tr->arena, NULL);
    for (int i = 0; i < c->nsh; i++) {
        for (cl_uint j = 0; j < c->sh[i].nargs; j++) free(c->sh[i].a[j].val);
        free(c->sh[i].a);
    }
    free(c->sh);
    free(c->set);
    tl_trace *tr = c->tr;
    free(c);
    return tr;
}

static shadow *
shadow_of(capture *c, cl_kernel k, int create)
{
    for (int i = c->nsh - 1; i >= 0; i--)
        if (c->sh[i].k == k) return &c->sh[i];
    if (!create) return NULL;
    cl_uint nargs = 0;
    if (clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL) != CL_SUCCESS) return NULL;
    if (c->nsh == c->shroom) {
        int room = c->shroom ? 2 * c->shroom : 32;
        shadow *grown = realloc(c->sh, (size_t)room * sizeof *grown);
        if (grown == NULL) return NULL;
        c->sh = grown;
        c->shroom = room;
    }
    shadow *s = &c->sh[c->nsh];
    *s = (shadow){k, nargs, calloc(nargs ? nargs : 1, sizeof(shadow_arg))};
    if (s->a == NULL) return NULL;
    c->nsh++;
    return s;
}

void
tl_capture_arg(cl_kernel k, cl_uint idx, size_t size, const void *value)
{
    capture *c = cur;
    if (c == NULL) return;
    shadow *s = shadow_of(c, k, 1);
    if (s == NULL || idx >= s->nargs) { tl_capture_fail("%s: out of host memory recording arguments", "tlgpu.jit"); return; }
    shadow_arg *a = &s->a[idx];
    free(a->val);
    a->val = NULL;
    a->size = size;
    a->set = 1;
    if (value != NULL && (a->val = malloc(size ? size : 1)) == NULL) {
        a->set = 0;
        tl_capture_fail("%s: out of host memory recording arguments", "tlgpu.jit");
        return;
    }
    if (value != NULL) memcpy(a->val, value, size);
}

static tl_cmd *
new_cmd(capture *c, int kind, const char *what)
{
    tl_trace *tr = c->tr;
    if (tr->ncmds == tr->room) {
        int room = tr->room ? 2 * tr->room : 64;
        tl_cmd *grown = realloc(tr->cmds, (size_t)room * sizeof *grown);
        if (grown == NULL) { tl_capture_fail("%s: out of host memory recording a command", what); return NULL; }
        tr->cmds = grown;
        tr->room = room;
    }
    tl_cmd *m = &tr->cmds[tr->ncmds++];
    memset(m, 0, sizeof *m);
    m->kind = kind;
    m->what = what;
    m->rng_seed = m->rng_block = -1;
    return m;
}

/* Retains s once for the trace unless the arena gave its block. */
static void
hold(capture *c, tl_storage *s)
{
    tl_trace *tr = c->tr;
    if (s == NULL || s->arena == tr->arena) return;
    if (2 * (tr->nheld + 1) > c->setcap) {                 /* grow the set (and rehash) */
        int cap = c->setcap ? 2 * c->setcap : 64;
        tl_storage **set = calloc((size_t)cap, sizeof *set);
        tl_storage **held = realloc(tr->held, (size_t)cap * sizeof *held);
        if (set == NULL || held == NULL) {
            free(set);
            if (held != NULL) tr->held = held;
            tl_capture_fail("%s: out of host memory holding buffers", "tlgpu.jit");
            return;
        }
        tr->held = held;
        for (int i = 0; i < tr->nheld; i++) {
            size_t h = ((uintptr_t)tr->held[i] >> 4) & (size_t)(cap - 1);
            while (set[h] != NULL) h = (h + 1) & (size_t)(cap - 1);
            set[h] = tr->held[i];
        }
        free(c->set);
        c->set = set;
        c->setcap = cap;
    }
    size_t h = ((uintptr_t)s >> 4) & (size_t)(c->setcap - 1);
    while (c->set[h] != NULL) {
        if (c->set[h] == s) return;
        h = (h + 1) & (size_t)(c->setcap - 1);
    }
    c->set[h] = s;
    tl_storage_retain(s);
    tr->held[tr->nheld++] = s;
}

void
tl_capture_note_write(tl_storage *s, const char *op)
{
    tl_trace *tr = cur != NULL ? cur->tr : NULL;
    if (tr == NULL || s == NULL || s->arena == tr->arena) return;   /* the arena's blocks are fresh each replay */
    for (int i = 0; i < tr->nwrites; i++)
        if (tr->writes[i].s == s) {
            tr->writes[i].op = op;                     /* the last writer names it, as tl_mark_write's */
            return;
        }
    if (tr->nwrites == tr->wroom) {
        const int room = tr->wroom ? 2 * tr->wroom : 16;
        tl_trace_write *grown = realloc(tr->writes, (size_t)room * sizeof *grown);
        if (grown == NULL) {
            tl_capture_fail("%s: out of host memory recording in-place writes", "tlgpu.jit");
            return;
        }
        tr->writes = grown;
        tr->wroom = room;
    }
    tl_storage_retain(s);
    tr->writes[tr->nwrites++] = (tl_trace_write){s, -1, 1, op};
}

void
tl_capture_drop_last(void)
{
    capture *c = cur;
    if (c == NULL || c->tr->ncmds == 0) return;
    tl_cmd_clear(&c->tr->cmds[--c->tr->ncmds]);        /* what it held stays held: harmless */
}

void
tl_cmd_clear(tl_cmd *m)
{
    if (m->k != NULL) clReleaseKernel(m->k);
    free(m->mems);
    free(m->args);
    free(m->loc);
    free(m->ew);
    free(m->store);
    free(m->name);
    memset(m, 0, sizeof *m);
}

void
tl_capture_note_ew(cl_kernel k, int op, int math, const tl_layout *L, int dts, int out_arg, int scalar_arg)
{
    capture *c = cur;
    if (c == NULL || c->tr->error[0] || c->tr->ncmds == 0) return;
    tl_cmd *m = &c->tr->cmds[c->tr->ncmds - 1];
    const shadow *s = shadow_of(c, k, 0);
    if (m->kind != TL_CMD_KERNEL || m->from != k || m->ew != NULL || s == NULL) return;
    tl_ew_note *nt = calloc(1, sizeof *nt);
    if (nt == NULL) return;                            /* no metadata: the command is just not fused */
    nt->op = op;
    nt->math = math & 3;
    nt->vec = math >> 2;
    nt->L = *L;
    for (int i = 0; i < 4; i++) {
        nt->dtype[i] = dts >> (4 * i) & 15;
        nt->arg[i] = out_arg + i;
    }
    for (int i = 0; i < 3; i++) {                      /* the scalar arguments this launch had */
        const int a = scalar_arg < 0 ? -1 : scalar_arg + i;
        if (a >= 0 && (cl_uint)a < s->nargs && s->a[a].val != NULL && s->a[a].size == 4)
            memcpy(&nt->bits[i], s->a[a].val, 4);
    }
    m->ew = nt;
}

cl_mem
tl_cmd_arg_mem(const tl_cmd *m, int arg)
{
    for (int j = 0; j < m->nmem; j++)
        if ((int)m->mems[j].idx == arg) return m->mems[j].mem;
    return NULL;
}

int
tl_trace_dead_after(const tl_trace *tr, cl_mem mem, int last, int end)
{
    const int s = tl_arena_put_after(tr->arena, mem, last + 1);
    if (s < 0) return 0;
    for (int i = end; i < s && i < tr->ncmds; i++)
        for (int j = 0; j < tr->cmds[i].nmem; j++)
            if (tr->cmds[i].mems[j].mem == mem) return 0;
    return 1;
}

void
tl_capture_note_store(cl_kernel k, const tl_store_note *note)
{
    capture *c = cur;
    if (c == NULL || c->tr->error[0] || c->tr->ncmds == 0) return;
    tl_cmd *m = &c->tr->cmds[c->tr->ncmds - 1];
    if (m->kind != TL_CMD_KERNEL || m->from != k || m->store != NULL) return;
    if ((m->store = malloc(sizeof *m->store)) != NULL) *m->store = *note;   /* else just not fused */
}

static int
add_mems(tl_cmd *m, int n)
{
    m->mems = calloc((size_t)(n ? n : 1), sizeof *m->mems);
    return m->mems != NULL ? 0 : -1;
}

void
tl_capture_kernel(cl_kernel k, cl_uint dim, const size_t *gws, const size_t *lws, tl_storage *const *st, int n,
                  const char *what)
{
    capture *c = cur;
    if (c == NULL || c->tr->error[0]) return;
    shadow *s = shadow_of(c, k, 0);
    cl_program prog;
    char name[256];
    cl_int rc = clGetKernelInfo(k, CL_KERNEL_PROGRAM, sizeof prog, &prog, NULL);
    if (rc == CL_SUCCESS) rc = clGetKernelInfo(k, CL_KERNEL_FUNCTION_NAME, sizeof name, name, NULL);
    if (rc != CL_SUCCESS) { tl_capture_fail("tlgpu.jit: cannot record kernel %s (clGetKernelInfo)", what); return; }
    for (cl_uint i = 0; s != NULL && i < s->nargs; i++)
        if (!s->a[i].set) s = NULL;
    if (s == NULL || s->nargs == 0) {
        cl_uint nargs = 0;
        clGetKernelInfo(k, CL_KERNEL_NUM_ARGS, sizeof nargs, &nargs, NULL);
        if (nargs > 0) {
            tl_capture_fail("tlgpu.jit: kernel %s was launched with arguments set outside the trace", what);
            return;
        }
    }
    tl_cmd *m = new_cmd(c, TL_CMD_KERNEL, what);
    if (m == NULL) return;
    m->from = k;
    m->k = clCreateKernel(prog, name, &rc);
    if (rc != CL_SUCCESS) { m->k = NULL; tl_capture_fail("tlgpu.jit: cannot record kernel %s (clCreateKernel)", what); return; }
    m->dim = dim;
    for (cl_uint d = 0; d < dim && d < 3; d++) {
        m->gws[d] = gws[d];
        m->lws[d] = lws != NULL ? lws[d] : 0;
    }
    m->has_lws = lws != NULL;
    int nmem = 0;
    for (cl_uint i = 0; s != NULL && i < s->nargs; i++) nmem += s->a[i].val != NULL && s->a[i].size == sizeof(cl_mem);
    if (add_mems(m, nmem) < 0) { tl_capture_fail("%s: out of host memory recording a command", what); return; }
    for (cl_uint i = 0; s != NULL && i < s->nargs; i++) {
        const shadow_arg *a = &s->a[i];
        if ((rc = clSetKernelArg(m->k, i, a->size, a->val)) != CL_SUCCESS) {
            tl_capture_fail("tlgpu.jit: cannot record kernel %s (clSetKernelArg)", what);
            return;
        }
        if (a->val == NULL && a->size == sizeof(cl_mem)) m->null_args |= 1ull << (i < 63 ? i : 63);
        if (a->val != NULL && a->size == sizeof(cl_mem)) {
            tl_cmd_mem *mm = &m->mems[m->nmem++];
            mm->idx = i;
            memcpy(&mm->mem, a->val, sizeof(cl_mem));
            mm->slot = -1;
        }
    }
    for (int i = 0; i < n; i++) hold(c, st[i]);
}

void
tl_capture_copy(tl_storage *dst, size_t doff, tl_storage *src, size_t soff, size_t n)
{
    capture *c = cur;
    if (c == NULL || c->tr->error[0]) return;
    tl_cmd *m = new_cmd(c, TL_CMD_COPY, "copy");
    if (m == NULL || add_mems(m, 2) < 0) { tl_capture_fail("%s: out of host memory recording a command", "copy"); return; }
    m->mems[0] = (tl_cmd_mem){0, src->mem, -1};
    m->mems[1] = (tl_cmd_mem){1, dst->mem, -1};
    m->nmem = 2;
    m->soff = soff;
    m->doff = doff;
    m->n = n;
    hold(c, src);
    hold(c, dst);
}

void
tl_capture_native(void (CL_CALLBACK *fn)(void *), const void *args, size_t cb, const void **mem_loc,
                  tl_storage *const *st, int n, const char *what)
{
    capture *c = cur;
    if (c == NULL || c->tr->error[0]) return;
    tl_cmd *m = new_cmd(c, TL_CMD_NATIVE, what);
    if (m == NULL) return;
    m->fn = fn;
    m->cb = cb;
    m->args = malloc(cb ? cb : 1);
    m->loc = calloc((size_t)(n ? n : 1), sizeof *m->loc);
    if (m->args == NULL || m->loc == NULL || add_mems(m, n) < 0) {
        tl_capture_fail("%s: out of host memory recording a command", what);
        return;
    }
    memcpy(m->args, args, cb);
    for (int i = 0; i < n; i++) {
        m->loc[i] = (size_t)((const char *)mem_loc[i] - (const char *)args);
        m->mems[i] = (tl_cmd_mem){(cl_uint)i, st[i]->mem, -1};
        hold(c, st[i]);
    }
    m->nmem = n;
}

void
tl_capture_rng(int seed_arg, int block_arg, uint64_t used)
{
    capture *c = cur;
    if (c == NULL || c->tr->ncmds == 0) return;
    tl_cmd *m = &c->tr->cmds[c->tr->ncmds - 1];
    m->rng_seed = seed_arg;
    m->rng_block = block_arg;
    m->rng_used = used;
}

int
tl_capture_last(void)
{
    return cur != NULL ? cur->tr->ncmds - 1 : -1;
}
