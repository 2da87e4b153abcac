/* trace.c: a captured trace's slots and lifetime (trace.h): binding the inputs and outputs after the call,
 * scalar arguments refreshed between replays (the command is marked refreshed, which keeps it out of command
 * buffers), and the release of everything the trace holds. Above storage.c (it releases storages), capture.c
 * (whose recording it finishes) and cmdbuf.c (a trace's command buffers). */
#include "trace.h"
#include "cmdbuf.h"
#include <stdlib.h>

void
tl_trace_free(tl_trace *tr)
{
    if (tr == NULL) return;
    tl_cmdbuf_free(tr->cmdbuf);                        /* first: its variants may hold the kernels' clones */
    for (int i = 0; i < tr->ncmds; i++) tl_cmd_clear(&tr->cmds[i]);
    for (int i = 0; i < tr->ncopies; i++)
        if (tr->copies[i].slot >= tr->ninputs) tl_storage_release(tr->copies[i].traced);
    for (int i = 0; i < tr->nheld; i++) tl_storage_release(tr->held[i]);
    for (int i = 0; i < tr->nwrites; i++)
        if (tr->writes[i].owned) tl_storage_release(tr->writes[i].s);
    free(tr->cmds);
    free(tr->held);
    free(tr->writes);
    free(tr->copies);
    free(tr->remap);
    tl_arena_release(tr->arena);
    free(tr);
}

void
tl_trace_bump_writes(const tl_trace *tr, tl_storage *const *slots)
{
    for (int i = 0; i < tr->nwrites; i++) {
        tl_storage *w = tr->writes[i].slot >= 0 ? slots[tr->writes[i].slot] : tr->writes[i].s;
        if (w == NULL) continue;
        w->writer = tr->writes[i].op;
        tl_storage_bump_version(w);
    }
}

int
tl_trace_stale(const tl_trace *tr)
{
    for (int h = 0; h < tr->nheld; h++) {                 /* the trace's own reference: its hold */
        const tl_storage *s = tr->held[h];
        int copy = 0;
        for (int i = 0; i < tr->ncopies && !copy; i++) copy = tr->copies[i].traced == s;
        if (!copy && atomic_load(&s->refs) <= 1) return 1;
    }
    return 0;
}

void
tl_trace_compose_remap(tl_trace *tr, int *remap, int nold)
{
    if (tr->remap == NULL) {                          /* the first pass: recorded indices are its old ones */
        tr->remap = remap;
        tr->nrecorded = nold;
        return;
    }
    for (int i = 0; i < tr->nrecorded; i++) tr->remap[i] = tr->remap[i] < 0 ? -1 : remap[tr->remap[i]];
    free(remap);
}

tl_status
tl_trace_drop_gone(tl_trace *tr, tl_err *err)
{
    int gone = 0, at = 0;
    for (int i = 0; i < tr->ncmds; i++) gone += tr->cmds[i].kind == TL_CMD_GONE;
    if (gone == 0) return TL_OK;
    int *remap = malloc((size_t)tr->ncmds * sizeof *remap);
    if (remap == NULL) return tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "host memory for the trace's passes");
    const int nold = tr->ncmds;
    for (int i = 0; i < nold; i++) {
        remap[i] = tr->cmds[i].kind == TL_CMD_GONE ? -1 : at;
        if (remap[i] >= 0) tr->cmds[at++] = tr->cmds[i];
    }
    tr->ncmds = at;
    tl_trace_compose_remap(tr, remap, nold);
    return TL_OK;
}

/* The in-place writes a replay repeats: a slot's storage becomes the slot (the caller's buffer of each replay);
 * of the others only those a recorded command touched (held) stay, by the trace's hold (the record's own
 * reference dropped: tl_trace_stale counts the hold alone); another write (a host upload, say) is not
 * replayed, so neither is its version bump. */
static void
bind_writes(tl_trace *tr, tl_storage *const *slots, int nslots)
{
    int at = 0;
    for (int i = 0; i < tr->nwrites; i++) {
        tl_trace_write w = tr->writes[i];
        int held = 0;
        for (int s = 0; s < nslots && w.slot < 0; s++)
            if (slots[s] == w.s) w.slot = s;
        for (int h = 0; h < tr->nheld && w.slot < 0 && !held; h++) held = tr->held[h] == w.s;
        tl_storage_release(w.s);
        w.owned = 0;
        if (w.slot >= 0 || !held) w.s = NULL;
        if (w.slot >= 0 || held) tr->writes[at++] = w;
    }
    tr->nwrites = at;
}

/* Slots: a cl_mem argument equal to a slot's buffer is rebound at each replay, unless a native kernel
 * touches that buffer: then the slot is copied in (inputs: the traced buffer, held, receives the new
 * input first; and back out last where the call wrote it in place) or out (outputs: the arena's block is
 * copied to the fresh one last). */
tl_status
tl_trace_bind(tl_trace *tr, tl_storage *const *slots, int nslots, int ninputs, tl_err *err)
{
    unsigned char *copied = calloc((size_t)(nslots ? nslots : 1), 1);
    tr->copies = calloc((size_t)(nslots ? nslots : 1), sizeof *tr->copies);
    if (copied == NULL || tr->copies == NULL) {
        free(copied);
        return tl_err_set(err, TL_E_NOMEM, "tlgpu.jit", "host memory for a trace's slots");
    }
    tr->nslots = nslots;
    tr->ninputs = ninputs;
    for (int i = 0; i < tr->ncmds; i++) {
        const tl_cmd *m = &tr->cmds[i];
        for (int j = 0; j < m->nmem && m->kind == TL_CMD_NATIVE; j++)
            for (int s = 0; s < nslots; s++)
                if (slots[s] != NULL && m->mems[j].mem == slots[s]->mem) copied[s] = 1;
    }
    for (int i = 0; i < tr->ncmds; i++) {
        tl_cmd *m = &tr->cmds[i];
        for (int j = 0; j < m->nmem; j++)
            for (int s = 0; s < nslots; s++)
                if (slots[s] != NULL && !copied[s] && m->mems[j].mem == slots[s]->mem) m->mems[j].slot = s;
    }
    bind_writes(tr, slots, nslots);
    for (int s = 0; s < nslots; s++) {
        if (slots[s] == NULL) continue;
        if (copied[s]) {
            int back = 0;                                    /* an input written in place goes back out */
            for (int i = 0; i < tr->nwrites && s < ninputs; i++) back |= tr->writes[i].slot == s;
            tr->copies[tr->ncopies++] = (tl_slot_copy){s, back, slots[s]};
            if (s >= ninputs) tl_storage_retain(slots[s]);   /* an output's traced block, read at each replay */
            continue;
        }
        for (int h = 0; h < tr->nheld; h++)                  /* rebound: the trace no longer needs it */
            if (tr->held[h] == slots[s]) {
                tl_storage_release(tr->held[h]);
                tr->held[h] = tr->held[--tr->nheld];
                break;
            }
    }
    free(copied);
    return TL_OK;
}

tl_status
tl_trace_set_arg(tl_trace *tr, int cmd, cl_uint idx, size_t size, const void *value, tl_err *err)
{
    if (tr->remap != NULL && cmd >= 0 && cmd < tr->nrecorded && tr->remap[cmd] < 0)
        return tl_err_set(err, TL_E_ARG, "tlgpu.jit", "that command was fused into a generated kernel (fuse=False "
                          "keeps it)");
    if (tr->remap != NULL) cmd = cmd >= 0 && cmd < tr->nrecorded ? tr->remap[cmd] : -1;
    if (cmd < 0 || cmd >= tr->ncmds || tr->cmds[cmd].kind != TL_CMD_KERNEL)
        return tl_err_set(err, TL_E_ARG, "tlgpu.jit", "no such kernel command in the trace");
    if (!tr->cmds[cmd].refreshed) {                    /* changes per replay from now: no command buffer holds it */
        tr->cmds[cmd].refreshed = 1;
        tl_cmdbuf_invalidate(tr->cmdbuf);
    }
    cl_int rc = clSetKernelArg(tr->cmds[cmd].k, idx, size, value);
    return rc == CL_SUCCESS ? TL_OK : tl_err_set(err, rc, "clSetKernelArg", tr->cmds[cmd].what);
}
