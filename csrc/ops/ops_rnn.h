/* ops_rnn.h: what the step ops (ops_rnn.c) and the sequence ops (ops_rnn_seq.c) share: the kernel operand
 * of kernels/rnn.cl (M_ARGS: memory, offset, row stride, column stride) made from a tensor. */
#ifndef TL_OPS_RNN_H
#define TL_OPS_RNN_H
#include "ops_common.h"

typedef struct { cl_mem mem; int off, rs, cs; } tl_rnn_mat;

/* A 2-D matrix of t: a 1-D tensor is a row broadcast over the batch (row stride 0); `slot` picks the [B, H]
 * matrix of a 3-D one. NULL or zero-size t gives `none` with zero strides (an operand never read). */
tl_rnn_mat tl_rnn_mat_of(const tl_tensor *t, Py_ssize_t slot, cl_mem none);
int        tl_rnn_set_mat(cl_kernel k, int first, tl_rnn_mat m);        /* kernel args first .. first + 3 */
#endif
