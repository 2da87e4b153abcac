/* epilogue.h: tlgpu.jit's epilogue pass over a recorded trace (epilogue.c). A matrix product whose command
 * carries a tl_store_note (matmul.cl's kernels), followed by a bias add and/or a ReLU or Tanh of its result,
 * becomes that one product storing through its bias-and-activation epilogue. Runs before fuse.h's pass
 * (which then sees the commands left). Pure C; callers release the GIL. */
#ifndef TL_EPILOGUE_H
#define TL_EPILOGUE_H
#include "capture.h"

/* Moves such bias adds and activations into their products in place. The commands moved are marked
 * TL_CMD_GONE (trace.h's tl_trace_drop_gone removes them after the passes); tr->fused_away counts them. */
tl_status tl_epilogue_trace(tl_trace *tr, tl_err *err);
#endif
