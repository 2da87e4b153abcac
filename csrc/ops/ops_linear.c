/* ops_linear.c: the linear layer as one op and one autograd node: linear(x, weight, bias=None,
 * activation=None) = act(x @ weight.T + bias). The product comes from ops_matmul.c (tl_matmul_res), which
 * fuses what its kernel can: the CPU BLAS path writes the bias into C before sgemm adds the product;
 * matmul.cl's kernels add the bias and apply relu/tanh as they store (nn.Sequential asks for the activation
 * of a Linear followed by ReLU or Tanh); elsewhere an add and the activation follow. Half operands and
 * autocast run in the half dtype where the device multiplies it natively (linear_half), else through float32
 * (tl_call_f32). The backward starts from g * act'(out) when there is an
 * activation, then dx = g @ w, dw = g^T @ x and db = the column sums of g (one command on the BLAS path). */
#include "ops_common.h"
#include "autograd.h"
#include "ops.h"
#include "ops_mv_half.h"
#include <string.h>

static const tl_op_row ROW_LINEAR;   /* the autograd row (below) */

typedef struct { int bias_tensor, act; } linear_ctx;   /* linear_fn's: the bias is a Tensor; TL_ACT_* */

/* linear(x, weight, bias=None, activation=None): x @ weight.T (+ bias), weight [N, K], x [..., K], bias [N] (any
 * shape that broadcasts, or a number: added as by +, outside the fused op), then relu or tanh when asked
 * (nn.Sequential asks for a Linear followed by ReLU or Tanh). On the CPU BLAS path with a bias of N elements
 * the product is one command (the bias is written into C's rows, then sgemm adds the product); matmul.cl's
 * kernels add the bias and apply the activation as they store (one command); elsewhere the product, an add
 * and the activation. One autograd node either way (ROW_LINEAR; the pieces are not recorded): with an
 * activation it saves the output, and its backward starts from g * act'(out). */
static PyObject *
linear_fn(PyObject *const *in, void *ctx)                /* in: x, weight, bias or NULL; ctx: a linear_ctx */
{
    const linear_ctx *c = ctx;
    PyObject *xo = in[0], *wo = in[1], *bo = in[2] != NULL ? in[2] : Py_None, *wt = NULL, *out = NULL;
    tl_tensor *x = tl_tensor_CAST(xo), *w = tl_tensor_CAST(wo), *b = c->bias_tensor ? tl_tensor_CAST(bo) : NULL;
    int fused = 0, act = c->act;
    if (w->ndim != 2) {
        char sw[128];
        tl_shape_str(w->shape, w->ndim, sw, sizeof sw);
        return PyErr_Format(PyExc_ValueError, "linear: weight must be 2-D [out_features, in_features], got %s", sw);
    }
    const int row_bias = b != NULL && b->dtype == x->dtype && b->ndim == 1 && b->shape[0] == w->shape[0];
    if (act != TL_ACT_NONE && bo != Py_None && !row_bias)
        return PyErr_Format(PyExc_ValueError, "linear: with an activation the bias must be None or a tensor of "
                            "out_features elements in the input's dtype");
    PyObject *ins[3] = {xo, wo, row_bias ? bo : NULL};
    const int prev = tl_grad_set(0);
    if ((wt = tl_transpose(w, 0, 1)) != NULL)
        out = tl_matmul_res("linear", x, tl_tensor_CAST(wt), row_bias ? b : NULL, act, &fused);
    if (out != NULL && row_bias && !(fused & 1) && tl_add_(tl_tensor_CAST(out), b) < 0) Py_CLEAR(out);
    if (out != NULL && act != TL_ACT_NONE && !(fused & 2)) Py_SETREF(out, tl_activation(tl_tensor_CAST(out), act));
    tl_grad_set(prev);
    Py_XDECREF(wt);
    if (out != NULL && tl_autograd_wanted(ins, 3)) {
        tl_node *nd = tl_node_new(&ROW_LINEAR, ins, 3);
        if (nd == NULL) { Py_DECREF(out); return NULL; }
        nd->iarg[0] = act;
        tl_node_save(nd, x);
        tl_node_save(nd, w);
        if (act != TL_ACT_NONE) tl_node_save(nd, tl_tensor_CAST(out));
        tl_node_attach(nd, tl_tensor_CAST(out));
    }
    if (out != NULL && bo != Py_None && !row_bias) Py_SETREF(out, PyNumber_Add(out, bo));   /* recorded */
    return out;
}

/* linear_fn in one half dtype where the device multiplies it natively (tl_matmul_half_native: the tensor cores,
 * or the CPU BLAS command, which takes the bias and ReLU too): x and weight both bfloat16 or both float16, or
 * cast to the autocast dtype, a tensor bias cast to theirs (as torch's autocast does); the product, the bias
 * add and the activation in that dtype. NULL with no exception set when that does not apply (the caller widens
 * to float32 instead). */
static PyObject *
linear_half(PyObject *const *in, linear_ctx *c)
{
    tl_tensor *x = tl_tensor_CAST(in[0]), *w = tl_tensor_CAST(in[1]);
    const int low = tl_autocast_dtype(), dt = low >= 0 ? low : x->dtype;
    if (!TL_IS_HALF(dt) || !TL_IS_FLOAT(x->dtype) || !TL_IS_FLOAT(w->dtype) || (low < 0 && w->dtype != dt) ||
        (c->bias_tensor && !TL_IS_FLOAT(tl_tensor_CAST(in[2])->dtype)) || x->ndim < 2 || w->ndim != 2)
        return NULL;
    const int ok = tl_matmul_half_native(x->dtype != dt || w->dtype != dt);
    if (ok <= 0) return NULL;                            /* (with the exception set when -1) */
    PyObject *h[3] = {NULL, NULL, NULL}, *r = NULL;
    int i = 0;
    for (; i < 3; i++) {
        const int conv = in[i] != NULL && (i < 2 || c->bias_tensor) && tl_tensor_CAST(in[i])->dtype != dt;
        if ((h[i] = conv ? tl_autocast_operand(tl_tensor_CAST(in[i]), dt, 0) : Py_XNewRef(in[i])) == NULL && in[i])
            break;
    }
    if (i == 3) r = linear_fn(h, c);
    for (int j = 0; j < 3; j++) Py_XDECREF(h[j]);
    return r;
}

static PyObject *
fn_linear(PyObject *Py_UNUSED(m), PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"input", "weight", "bias", "activation", NULL};
    PyObject *xo, *wo, *bo = Py_None, *ao = Py_None;
    tl_tensor *x, *w;
    linear_ctx c = {0, TL_ACT_NONE};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|OO:linear", kw, &xo, &wo, &bo, &ao)) return NULL;
    if (tl_want_tensor("linear", xo, &x) < 0 || tl_want_tensor("linear", wo, &w) < 0) return NULL;
    if (ao != Py_None) {
        const char *a = PyUnicode_Check(ao) ? PyUnicode_AsUTF8(ao) : NULL;
        c.act = a == NULL ? -1 : strcmp(a, "relu") == 0 ? TL_ACT_RELU : strcmp(a, "tanh") == 0 ? TL_ACT_TANH : -1;
        if (c.act < 0) return PyErr_Format(PyExc_ValueError, "linear: activation must be None, 'relu' or 'tanh'");
    }
    PyObject *ins[3] = {xo, wo, bo == Py_None ? NULL : bo};
    c.bias_tensor = tl_tensor_check(bo);              /* numbers and arrays are added by + */
    if (x->dtype == TL_F32 && w->dtype == TL_F32 && (!c.bias_tensor || tl_tensor_CAST(bo)->dtype == TL_F32) &&
        tl_autocast_dtype() < 0)
        return linear_fn(ins, &c);                       /* the float32 path: no casts, no second check */
    PyObject *r = NULL;
    const int k = tl_mv_half_linear(x, w, bo, c.act, &r);   /* a half weight, few rows: read as stored */
    if (k != 0) return k < 0 ? NULL : r;
    if ((r = linear_half(ins, &c)) != NULL || PyErr_Occurred()) return r;   /* the tensor cores */
    return tl_call_f32("linear", linear_fn, ins, 3, &c);
}

/* d linear: dx = g @ w; over the rows of x and g (leading dims flattened), dw = g^T @ x and db = sum of g
 * (one command for both on the CPU BLAS path). */
static int
tl_linear_backward(tl_node *nd, PyObject *g, PyObject **gin)
{
    tl_tensor *x = tl_node_saved(nd, 0), *w = x != NULL ? tl_node_saved(nd, 1) : NULL, *y = NULL;
    PyObject *g2 = NULL, *x2 = NULL, *gt = NULL, *ga = NULL;
    int rc = -1;
    if (w == NULL) goto done;
    if (nd->iarg[0] != TL_ACT_NONE) {                  /* through the activation first, from its saved output */
        if ((y = tl_node_saved(nd, 2)) == NULL || (ga = tl_activation_grad(nd->iarg[0], y, g)) == NULL) goto done;
        g = ga;
    }
    if (tl_wants_grad(nd, 0) && (gin[0] = tl_matmul(tl_tensor_CAST(g), w)) == NULL) goto done;
    if (tl_wants_grad(nd, 1) || tl_wants_grad(nd, 2)) {
        Py_ssize_t rows = 1;
        for (int d = 0; d < x->ndim - 1; d++) rows *= x->shape[d];
        if ((g2 = tl_reshape(tl_tensor_CAST(g), 2, (Py_ssize_t[]){rows, w->shape[0]})) == NULL) goto done;
        if ((x2 = tl_reshape(x, 2, (Py_ssize_t[]){rows, w->shape[1]})) == NULL) goto done;
        int both = tl_wants_grad(nd, 1) && tl_wants_grad(nd, 2) ?
                   tl_linear_grads_blas(tl_tensor_CAST(g2), tl_tensor_CAST(x2), &gin[1], &gin[2]) : 0;
        if (both < 0) goto done;
        if (!both && tl_wants_grad(nd, 1) &&
            ((gt = tl_transpose(tl_tensor_CAST(g2), 0, 1)) == NULL ||
             (gin[1] = tl_matmul(tl_tensor_CAST(gt), tl_tensor_CAST(x2))) == NULL))
            goto done;
        if (!both && tl_wants_grad(nd, 2) && (gin[2] = tl_sum(tl_tensor_CAST(g2), 1u, 0)) == NULL) goto done;
    }
    rc = 0;
done:
    Py_XDECREF(x); Py_XDECREF(w); Py_XDECREF(y); Py_XDECREF(g2); Py_XDECREF(x2); Py_XDECREF(gt); Py_XDECREF(ga);
    return rc;
}

static const PyMethodDef linear_functions[] = {
    {"linear", TL_KW(fn_linear),
     "linear(x, weight, bias=None, activation=None): x @ weight.T + bias, then relu or tanh when asked, as one "
     "autograd node (one command where the GEMM's store adds the bias and applies the activation)."},
    {NULL, NULL, 0, NULL},
};

static const tl_op_row ROW_LINEAR = {"LinearBackward", tl_linear_backward};
static const tl_op_row *const linear_rows[] = {&ROW_LINEAR, NULL};

const tl_family tl_family_linear = {.functions = linear_functions, .rows = linear_rows};
