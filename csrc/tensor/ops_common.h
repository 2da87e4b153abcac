/* ops_common.h: what every ops family shares: kernel preparation with the GIL released, 1-D launches with
 * the kernel's fixed work-group size, N-d layouts with broadcasting and dimension collapsing, the
 * argument-checking helpers that name the op and the shapes in their errors, and the copies and fills that
 * record no graph. Including it gives a family the whole tensor/ layer (tensor_io.h too). */
#ifndef TL_OPS_COMMON_H
#define TL_OPS_COMMON_H
#include "tensor.h"
#include "tensor_io.h"
#include "state.h"
#include "programs.h"
#include "stream.h"

cl_kernel tl_kernel_py(tl_kernel *kh);                             /* NULL with an exception set */
int tl_device_is_cpu(void);                                        /* 1 on a CPU device, 0 elsewhere, -1 raised */
int tl_launch_1d(tl_kernel *kh, size_t n, tl_storage *const *st, int nst, unsigned written);
int tl_launch_flat(tl_kernel *kh, size_t n, tl_storage *const *st, int nst);  /* CPU, no local memory: small groups */
int tl_set_args(cl_kernel k, int first, int n, const size_t *sizes, const void *const *values);
#define TL_MEM(t) ((t) != NULL && (t)->storage != NULL ? &(t)->storage->mem : NULL)

/* Layout over `shape` of ops[0] (the output) and ops[1..n): each operand broadcast against shape
 * (numpy rules, right-aligned; size-1 or missing dims get stride 0). NULL operands are scalars. */
void tl_layout_make(tl_layout *L, int ndim, const Py_ssize_t *shape, tl_tensor *const *ops, int nops);
int  tl_broadcast(const char *op, tl_tensor *const *ts, int n, int *ndim, Py_ssize_t *shape);
int  tl_check_dtype(const char *op, const tl_tensor *t, int dtype);
int  tl_want_tensor(const char *op, PyObject *x, tl_tensor **out);  /* TypeError "<op>: expected a Tensor" */
int  tl_parse_shape(const char *op, PyObject *args, int *ndim, Py_ssize_t *shape);  /* ints or one sequence */
int  tl_parse_dtype(PyObject *obj, int dflt);              /* float32/int32 only; -1 with exception */
int  tl_parse_dtype_all(PyObject *obj, int dflt);          /* any of the five storage dtypes */
tl_tensor *tl_tensor_contiguous(tl_tensor *t);                     /* new ref, maybe t; not recorded */
int  tl_copy_into(tl_tensor *dst, tl_tensor *src);                 /* broadcasting strided bit copy */
int  tl_tensor_fill(tl_tensor *t, double value);                    /* int32: OverflowError out of range */
/* An int (*v), or an int32 tensor of one element (*t, borrowed) a kernel reads on the device (no sync). */
int  tl_device_scalar(const char *op, const char *name, PyObject *o, tl_tensor **t, Py_ssize_t *v);
int  tl_check_int32_value(const char *op, double v);               /* NaN: ValueError; out of range: Overflow */
int  tl_is_dense(const tl_tensor *t);                              /* contiguous, or zero-size (any strides) */
int  tl_require_grad_new(const char *op, tl_tensor *t);            /* a new leaf: floating only, TypeError else */
int  tl_check_writable(const char *op, const tl_tensor *t);        /* refuses expanded (stride-0) views */
tl_tensor *tl_unalias(tl_tensor *dst, tl_tensor *src);             /* new ref: src, or a copy if it overlaps dst */

/* A copy of t (2 or 3 dims, 4-byte elements) with its last two dims stored the other way round (the GEMMs'
 * operand copies): where dim -2 has stride 1, contiguous(t); else the [.., R, C] view of a contiguous
 * [.., C, R] (t.T.contiguous().T). One tiled transpose either way (tl_copy_into). New reference or NULL. */
tl_tensor *tl_copy_flipped(tl_tensor *t);

/* The GEMM size rules (gemm_sg.c, gemm_tc.c): 1 when a grid of `groups` work-groups fills `units` compute
 * units as a tile row asks: at least fill percent of the units and, when `slots` of its work-groups share
 * an SM (0: no such check), past one wave of slots x units, waves at least pct % full on average (1.3 waves
 * can run as slowly as 2). */
static inline int
tl_grid_fills(size_t groups, size_t units, int fill, int slots, int pct)
{
    const size_t wave = (size_t)slots * units;
    if (groups * 100 < (size_t)fill * units) return 0;
    return slots == 0 || groups <= wave || groups * 100 >= (groups + wave - 1) / wave * wave * (size_t)pct;
}
#endif
