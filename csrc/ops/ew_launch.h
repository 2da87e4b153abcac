/* ew_launch.h: the launch of one elementwise op (kernels/elementwise.cl): which kernel runs it for its layout,
 * dtypes and device, its arguments, and the note tlgpu.jit's fusion reads (ew_launch.c). */
#ifndef TL_EW_LAUNCH_H
#define TL_EW_LAUNCH_H
#include "ops_common.h"

/* An operand: a tensor (t != NULL) or a Python scalar (value; is_int for an int, which keeps int32 math in
 * int32, with ivalue its value and fits whether it is in int32's range). */
typedef struct { tl_tensor *t; float value; int ivalue, is_int, fits; } tl_ew_operand;

/* out = op(o[0], o[1], o[2]) over the broadcast shape (ndim dims); as_int: int32 math (tl_ew_i32). out has
 * storage (a zero-size result enqueues nothing: the caller skips it). 0, or -1 with an exception set. */
int tl_ew_launch(int op, tl_tensor *out, const tl_ew_operand *o, int ndim, const Py_ssize_t *shape, int as_int);
#endif
