/* autograd.h: reverse-mode autograd. A node is a C struct (atomic refcount) recorded by a forward op on its
 * output: edges to the nodes (or leaf tensors) of its inputs, the tensors it saved (storage refs plus the
 * version each had), and small op parameters. Nodes never reference their outputs, so graphs have no
 * cycles and are freed by refcounting alone. Backward functions live next to their forwards (ops/ops_*.c),
 * which register them as rows (tl_op_row) of their tl_family.
 * The engine layer (autograd/): it uses tensor/ and core/, and calls no op family by name; the op families
 * above it use this API. */
#ifndef TL_AUTOGRAD_H
#define TL_AUTOGRAD_H
#include "tensor.h"
#include "state.h"

#define TL_NODE_MAX_SAVED 5

typedef struct { tl_storage *storage; int dtype, ndim; Py_ssize_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS], offset;
                 uint64_t version; } tl_saved;

typedef struct tl_edge {
    struct tl_node *next;                      /* the input's grad_fn (owned ref), or NULL */
    PyObject *leaf;                            /* the input itself when it is a leaf requiring grad (owned) */
    int ndim, dtype;                           /* the input's shape and dtype: its gradient is reduced and
                                                * converted back to them */
    Py_ssize_t shape[TL_MAX_DIMS];
} tl_edge;

struct tl_op_row;
typedef struct tl_node {
    atomic_int refs;
    const struct tl_op_row *row;               /* the op that recorded it (a row its family registered) */
    int n_in, n_saved, released;
    tl_saved saved[TL_NODE_MAX_SAVED];
    int iarg[TL_MAX_DIMS + 4];                 /* op parameters (op code, dims, ...) */
    double farg[4];
    PyObject *extra;                           /* op data that is a Python object (an index key), or NULL */
    PyObject *grad;                            /* engine scratch: gradient summed so far */
    int deps;
    unsigned long mark;                        /* engine scratch: the run that last visited it */
    tl_edge in[];                              /* n_in edges */
} tl_node;

typedef int (*tl_backward_fn)(tl_node *nd, PyObject *grad, PyObject **grad_in);  /* grad_in: new refs or NULL */

/* An op's autograd row: the op's identity (there are no op ids). A family defines each row as a static const
 * object beside its forward and backward, passes its address to tl_node_new / tl_record1, and lists it in its
 * tl_family.rows (a NULL-terminated array of row pointers). The engine checks the rows at import and refuses
 * to import (ImportError naming the row) unless each has a name and a backward, no row is listed twice (by
 * one family or two) and no two rows share a name; test-hooks builds also refuse to record a node whose row
 * no family listed (SystemError). */
enum { TL_ROW_VIEW = 1 };                    /* the output is a view of the input (in-place checks) */
typedef struct tl_op_row {
    const char *name;                        /* grad_fn's name: "ReshapeBackward" */
    tl_backward_fn backward;
    unsigned flags;                          /* TL_ROW_* */
    const char *(*node_name)(const tl_node *nd);   /* optional: a name per node (elementwise: "MulBackward") */
} tl_op_row;

/* The few ops the engine itself runs (gradient sums, sum-to-shape over broadcast dims), registered by the
 * families that own them through tl_family.grad_prims; each must be given by exactly one family. */
typedef struct tl_grad_prims {
    int       (*add_)(tl_tensor *acc, tl_tensor *x);                          /* acc += x in place */
    PyObject *(*sum)(tl_tensor *x, unsigned axes, int keepdims);              /* ops.h's tl_sum */
    PyObject *(*reshape)(tl_tensor *x, int ndim, const Py_ssize_t *shape);    /* ops.h's tl_reshape */
    PyObject *(*convert)(tl_tensor *x, int dtype);    /* x in another dtype, not recorded (optional) */
} tl_grad_prims;

/* module.c at import: the engine's table from the families' rows and primitives (-1 + ImportError). */
int        tl_autograd_register(const tl_family *const *families, size_t n);

int        tl_grad_enabled(void);
int        tl_grad_set(int enabled);                               /* returns the previous mode */
int        tl_autocast_dtype(void);           /* this thread's autocast dtype (TL_F16/TL_BF16), -1 when off */
int        tl_autocast_set(int dtype);        /* -1: off; returns the previous */
int        tl_autograd_wanted(PyObject *const *ins, int n);       /* grad mode on and an input requires grad */
tl_node   *tl_node_new(const tl_op_row *row, PyObject *const *ins, int n);   /* NULL + exception on failure */
PyObject  *tl_record1(PyObject *out, const tl_op_row *row, PyObject *in, const int *iarg, int n_iarg,
                      PyObject *extra);
int        tl_wants_grad(const tl_node *nd, int i);                /* does input i need a gradient? */
int        tl_node_save(tl_node *nd, tl_tensor *t);
tl_tensor *tl_node_saved(tl_node *nd, int i);                      /* new ref: a view of saved tensor i */
void       tl_node_attach(tl_node *nd, tl_tensor *out);            /* steals nd */
void       tl_node_release(tl_node *nd);                           /* GIL held */
const char *tl_node_name(const tl_node *nd);
PyObject  *tl_sum_to_shape(PyObject *g, int ndim, const Py_ssize_t *shape);  /* new ref: broadcast reduction */
int        tl_check_inplace(const char *op, tl_tensor *t);         /* refuse in-place writes autograd can't track */
int        tl_check_recorded_inplace(const char *op, tl_tensor *t, int track);   /* a write recorded when track */
void       tl_mark_write(tl_tensor *t, const char *op);            /* bump the version, remember the writer */

#endif
