/* ops.h: the internal C op API, what one op family calls in another instead of looking a Tensor method up
 * by its Python name (the autograd engine calls none of it: it gets the few ops it runs as registered
 * primitives, autograd.h's tl_grad_prims). Each function behaves like its Python face: it checks its
 * arguments (errors name the op and the shapes), records autograd when grad mode is on and an input
 * requires grad, and returns a new reference to a Tensor, or NULL with an exception set. Dims may be
 * negative (counted from the end). GIL held. */
#ifndef TL_OPS_H
#define TL_OPS_H
#include "tensor.h"

#define TL_AXES_ALL (~0u)                /* a reduction over every dim (Python's axis=None) */

/* ops_reduce.c: axes is a bit mask of the dims to reduce (bit d: dim d; TL_AXES_ALL: all of them) */
PyObject *tl_sum(tl_tensor *x, unsigned axes, int keepdims);
PyObject *tl_softmax(tl_tensor *x, int axis);
PyObject *tl_log_softmax(tl_tensor *x, int axis);

/* ops_shape.c */
PyObject *tl_reshape(tl_tensor *x, int ndim, const Py_ssize_t *shape);    /* a view when strides allow */
PyObject *tl_transpose(tl_tensor *x, int dim0, int dim1);
PyObject *tl_unsqueeze(tl_tensor *x, int dim);
PyObject *tl_squeeze_dim(tl_tensor *x, int dim);                          /* dim must have size 1 */

/* ops_elementwise.c */
PyObject *tl_exp(tl_tensor *x);
PyObject *tl_eq(tl_tensor *a, tl_tensor *b);                            /* float32 mask, broadcast */
PyObject *tl_clone(tl_tensor *x);                                       /* a contiguous copy, differentiable */
enum { TL_ACT_NONE = 0, TL_ACT_RELU = 1, TL_ACT_TANH = 2 };              /* matmul.cl's mm_epi codes too */
PyObject *tl_activation(tl_tensor *x, int act);                         /* relu / tanh, recorded if grad mode */
PyObject *tl_activation_grad(int act, tl_tensor *out, PyObject *g);    /* g * act'(x) from out = act(x) */
int       tl_add_(tl_tensor *acc, tl_tensor *x);                        /* acc += x in place; 0 or -1 */
int       tl_record_overwrite(tl_tensor *t);      /* after an in-place write of new values (fill_): 0 or -1 */

/* ops_convert.c: x in dtype `to` (x itself when it has it); recorded between floating dtypes */
PyObject *tl_convert(tl_tensor *x, int to);
int       tl_convert_into(tl_tensor *dst, tl_tensor *src);   /* dst = src converted, broadcast; not recorded */
PyObject *tl_convert_steal(PyObject *r, int to);             /* r (a new ref, or NULL) converted; r released */
int       tl_check_float(const char *op, const tl_tensor *t); /* float32/16, bfloat16; else tl_check_dtype's error */
/* t as autocast's operand in the half dtype dt: round 1, a float32 t rounded through dt and kept float32 (the
 * float32 products' path), else converted to dt (recorded either way); a parameter cast once an autocast region
 * (torch's cast cache). */
PyObject *tl_autocast_operand(tl_tensor *t, int dt, int round);
/* The families that compute in float32 run a float16/bfloat16 input as: the op on tl_convert(x, TL_F32) (a
 * recorded, exact widening), its result converted back with tl_convert_steal (docs/precision.md). */
/* The float32 ops with autocast's low-precision rule (matmul, addmm, linear, conv2d): fn(in, ctx) runs the float32
 * implementation on n <= TL_F32_OP_MAX operands (tensors, other objects or NULL). tl_call_f32 calls it directly
 * when autocast is off and every tensor is float32; else casts floating tensors to the autocast dtype (when on),
 * widens half tensors to float32 (recorded), and converts fn's result to the operands' promoted dtype (one half
 * dtype: it; mixed: float32). An int tensor raises TypeError naming op, the dtype and the shape. */
#define TL_F32_OP_MAX 5
typedef PyObject *(*tl_f32_op)(PyObject *const *in, void *ctx);
PyObject *tl_call_f32(const char *op, tl_f32_op fn, PyObject *const *in, int n, void *ctx);
/* The same without autocast's rule, for the families that compute in float32 whatever autocast says (pooling,
 * outer, index_add): fn directly when every tensor is float32, else on the widened operands (recorded), the
 * result converted to their promoted dtype. */
PyObject *tl_call_wide(const char *op, tl_f32_op fn, PyObject *const *in, int n, void *ctx);

/* ops_matmul.c */
PyObject *tl_matmul(tl_tensor *a, tl_tensor *b);                       /* a @ b, numpy rules, not recorded */
/* a @ b (+ res: out's shape, or a bias of N) (then TL_ACT_* act) where the kernel fuses them; bit 0 of *fused:
 * res added, bit 1: act applied (the caller does what is not). Not recorded. */
PyObject *tl_matmul_res(const char *op, tl_tensor *a, tl_tensor *b, tl_tensor *res, int act, int *fused);
/* Whether products of half operands run in their dtype here (tensor cores, or the CPU BLAS command; casts: some
 * operand is float32 to be cast, tensor cores only); -1: error. */
int tl_matmul_half_native(int casts);
/* dw = g2^T @ x2 and db = column sums of g2 in one command on the CPU BLAS path: 1 done, 0 not there, -1 raised */
int       tl_linear_grads_blas(tl_tensor *g2, tl_tensor *x2, PyObject **gw, PyObject **gb);

/* ops_scan.c */
PyObject *tl_cumsum(PyObject *x, int dim, int reverse);                /* from the end when reverse */
#endif
