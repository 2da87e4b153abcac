/* fuse.h: tlgpu.jit's fusion pass over a recorded trace (fuse.c). Runs of 2 or more consecutive elementwise
 * commands over one contiguous index space (the metadata their op family attached: capture.h's tl_ew_note)
 * become one generated kernel each, computing the whole chain per element in registers. Called after the
 * capture ends and before tl_trace_bind (the fused commands' buffers are bound like any command's). Pure C;
 * may block (it builds a program): callers release the GIL. */
#ifndef TL_FUSE_H
#define TL_FUSE_H
#include "capture.h"

/* Fuses tr's runs in place: tr->fused_away commands fewer, tr->dead_stores regions left unstored (dead
 * intermediates), tr->remap from recorded command indices to the new ones (-1: fused). On an error the
 * trace is as recorded. */
tl_status tl_fuse_trace(tl_trace *tr, tl_err *err);
#endif
