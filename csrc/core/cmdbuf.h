/* cmdbuf.h: tlgpu.jit's replay through cl_khr_command_buffer (cmdbuf.c). A trace's recordable commands (kernels
 * and copies that no replay changes: no random stream, no scalar refreshed by Trace.set_arg) form segments;
 * each segment is recorded on q0 into a command buffer per binding of the slots it touches (a small cache of
 * variants), and stream.c's tl_stream_replay enqueues it in place of its commands. Below stream.c: no locks of
 * its own (the caller holds the stream's), no Python. */
#ifndef TL_CMDBUF_H
#define TL_CMDBUF_H
#include "capture.h"

typedef struct tl_cmdbuf tl_cmdbuf;
typedef struct {
    int segments, commands;          /* the plan: segments, and the commands inside them */
    long enqueues, records, hits;    /* segment enqueues; variants recorded (a miss each); hits */
    long loop_runs;                  /* segments run one command at a time: still pending (no simultaneous use)
                                      * or their bindings changed too often to keep recording */
    int variants;                    /* command buffers alive now */
    double record_s;                 /* host seconds spent recording variants (clones, commands, finalize) */
} tl_cmdbuf_stats;

/* *why: NULL where the device can replay through command buffers, else the reason it cannot. */
tl_status tl_cmdbuf_device(const char **why, tl_err *err);
/* Whether a trace made now uses command buffers: want 1 or 0 forces (1 where the device lacks the extension:
 * TL_E_ARG naming why), -1 follows TLGPU_JIT_CMDBUF (auto, 0, 1). */
tl_status tl_cmdbuf_choose(int want, int *use, tl_err *err);
tl_status tl_cmdbuf_attach(tl_trace *tr, tl_err *err);    /* tr->cmdbuf: segments are planned at first replay */
void      tl_cmdbuf_invalidate(tl_cmdbuf *cb);             /* a command became refreshed: plan again; NULL: no-op */
void      tl_cmdbuf_free(tl_cmdbuf *cb);                   /* NULL is a no-op; pending executions finish first */
void      tl_cmdbuf_get_stats(const tl_cmdbuf *cb, tl_cmdbuf_stats *out);
/* At command i of a replay with slots bound: enqueues the segment starting there on q and sets *took to its
 * command count, or sets *took to 0 (none starts at i, or it runs one by one this time). CL errors come back
 * with *routine named, as the loop's. */
cl_int    tl_cmdbuf_enqueue_at(tl_trace *tr, int i, tl_storage *const *slots, cl_command_queue q, int *took,
                               const char **routine);
#endif
