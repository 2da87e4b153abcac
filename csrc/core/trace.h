/* trace.h: finishing and freeing a captured trace (capture.h records it). tl_trace_bind names the slots:
 * slots[0..ninputs) the inputs (rebound to the caller's buffers at each replay), then the outputs, storages
 * the arena gave (fresh blocks at each replay). A slot a native kernel touches is copied instead of rebound
 * (the BLAS path learns buffer pointers per cl_mem): an input into the traced buffer before the commands,
 * an output out of it after them. */
#ifndef TL_TRACE_H
#define TL_TRACE_H
#include "capture.h"

tl_status tl_trace_bind(tl_trace *tr, tl_storage *const *slots, int nslots, int ninputs, tl_err *err);
tl_status tl_trace_set_arg(tl_trace *tr, int cmd, cl_uint idx, size_t size, const void *value, tl_err *err);
void      tl_trace_free(tl_trace *tr);
/* After a replay with slots bound: the storages the call wrote in place get their versions bumped (and their
 * writer named) as the call's eager run did, so autograd refuses a graph that saved their old values. */
void      tl_trace_bump_writes(const tl_trace *tr, tl_storage *const *slots);
/* Whether a storage the trace reads from outside (held: parameters, state, captured tensors) is referenced by
 * nothing but the trace: the call can no longer reach it (a parameter reassigned, a module replaced), so it
 * would read another buffer now, and a replay would read a stale one. The copied inputs' traced buffers are the
 * trace's own. */
int       tl_trace_stale(const tl_trace *tr);
/* After a pass removed commands from tr (nold of them before it): remap[old] the new index, -1 removed.
 * tr->remap, from recorded indices, becomes its composition with remap (nrecorded stays the recording's
 * count). Takes remap (freed). */
void      tl_trace_compose_remap(tl_trace *tr, int *remap, int nold);
/* Drops the commands a pass marked TL_CMD_GONE (their places kept until then, so command indices stay those
 * of the recording, which the arena's release log counts in), composing tr->remap. */
tl_status tl_trace_drop_gone(tl_trace *tr, tl_err *err);                 /* releases what it holds; NULL is a no-op */
#endif
