/* autograd.h: reverse-mode autograd. A node is a C struct (atomic refcount) recorded by a forward op on its
 * output: edges to the nodes (or leaf tensors) of its inputs, the tensors it saved (storage refs plus the
 * version each had), and small op parameters. Nodes never reference their outputs, so graphs have no
 * cycles and are freed by refcounting alone. Backward functions live next to their forwards (ops_*.c)
 * and are rows of TL_OPS in autograd.c. */
#ifndef TL_AUTOGRAD_H
#define TL_AUTOGRAD_H
#include "tensor.h"

#define TL_NODE_MAX_SAVED 5

typedef struct { tl_storage *storage; int dtype, ndim; Py_ssize_t shape[TL_MAX_DIMS], strides[TL_MAX_DIMS], offset;
                 uint64_t version; } tl_saved;

typedef struct tl_edge {
    struct tl_node *next;                      /* the input's grad_fn (owned ref), or NULL */
    PyObject *leaf;                            /* the input itself when it is a leaf requiring grad (owned) */
    int ndim;                                  /* the input's shape: its gradient is reduced back to it */
    Py_ssize_t shape[TL_MAX_DIMS];
} tl_edge;

typedef struct tl_node {
    atomic_int refs;
    int op, n_in, n_saved, released;
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
typedef struct { const char *name; tl_backward_fn backward; } tl_op_info;

enum {
    TL_OP_EW,                                   /* elementwise: iarg[0] is the TL_EW_* code */
    TL_OP_RESHAPE, TL_OP_PERMUTE, TL_OP_EXPAND, TL_OP_NARROW, TL_OP_CAT, TL_OP_STACK,   /* ops_shape.c */
    TL_OP_INDEX, TL_OP_INDEX_SELECT,                                                   /* ops_index.c */
    TL_OP_MATMUL, TL_OP_LINEAR,                                                        /* ops_matmul.c */
    TL_OP_REDUCE, TL_OP_SOFTMAX,                                                       /* ops_reduce.c */
    TL_OP_CROSS_ENTROPY,                                                               /* ops_nn.c */
    TL_OP_IM2COL, TL_OP_MAX_POOL2D, TL_OP_AVG_POOL2D, TL_OP_CONV_LAYOUT,                /* ops_conv.c */
    TL_OP_CUMSUM,                                                                      /* ops_scan.c */
    TL_OP_GATHER, TL_OP_SETITEM,                                                       /* ops_index.c */
    TL_OP_GRU_GATES, TL_OP_LSTM_GATES,                                                 /* ops_rnn.c */
    TL_OP_GRU_SEQ, TL_OP_LSTM_SEQ,                                                     /* ops_rnn_seq.c */
    TL_OP_TRI,                                                                         /* ops_tri.c */
    TL_OP_INDEX_ADD, TL_OP_TOPK,                                        /* ops_index_add.c, ops_sort.c */
    TL_OP_COUNT
};

int        tl_grad_enabled(void);
int        tl_grad_set(int enabled);                               /* returns the previous mode */
int        tl_autograd_wanted(PyObject *const *ins, int n);       /* grad mode on and an input requires grad */
tl_node   *tl_node_new(int op, PyObject *const *ins, int n);      /* NULL + exception on failure */
PyObject  *tl_record1(PyObject *out, int op, PyObject *in, const int *iarg, int n_iarg, PyObject *extra);
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

int tl_ew_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);       /* ops_elementwise.c */
int tl_reshape_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);  /* ops_shape.c */
int tl_permute_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_expand_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_narrow_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_cat_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_stack_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_index_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);    /* ops_index.c */
int tl_index_select_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_gather_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_setitem_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_matmul_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);       /* ops_matmul.c */
int tl_linear_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_reduce_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);       /* ops_reduce.c */
int tl_softmax_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_cross_entropy_backward(tl_node *nd, PyObject *grad, PyObject **grad_in); /* ops_nn.c */
int tl_im2col_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);        /* ops_conv.c */
int tl_max_pool2d_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_avg_pool2d_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_conv_layout_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_cumsum_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);       /* ops_scan.c */
int tl_gru_gates_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);    /* ops_rnn.c */
int tl_lstm_gates_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_gru_seq_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);      /* ops_rnn_seq.c */
int tl_lstm_seq_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);
int tl_tri_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);          /* ops_tri.c */
int tl_index_add_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);     /* ops_index_add.c */
int tl_topk_backward(tl_node *nd, PyObject *grad, PyObject **grad_in);          /* ops_sort.c */
#endif
