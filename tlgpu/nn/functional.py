"""tlgpu.nn.functional: the differentiable building blocks layers are made of. Each is one C op or a short
composition of C ops; autograd comes from the ops themselves."""
from .. import _C

relu = _C.Tensor.relu
tanh = _C.Tensor.tanh
sigmoid = _C.Tensor.sigmoid
silu = _C.Tensor.silu
gelu = _C.Tensor.gelu
cross_entropy = _C.cross_entropy
dropout = _C.dropout


def softmax(x, axis=-1):
    return x.softmax(axis)


def log_softmax(x, axis=-1):
    return x.log_softmax(axis)


def linear(x, weight, bias=None):
    """x @ weight.T (+ bias); weight is [out_features, in_features] like torch."""
    y = x @ weight.T
    return y if bias is None else y + bias


def mse_loss(input, target, reduction="mean"):
    d = (input - target).square()
    if reduction == "mean":
        return d.mean()
    if reduction == "sum":
        return d.sum()
    if reduction == "none":
        return d
    raise ValueError(f"mse_loss: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")


def embedding(indices, weight):
    """Rows of weight picked by int32 indices of any shape: result shape indices.shape + (dim,).
    Reads the indices back to check them (a sync point), like index_select."""
    flat = indices.reshape(-1)
    return weight.index_select(0, flat).reshape(*indices.shape, weight.shape[1])


def _recording(*ts):
    return _C.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def rms_norm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x**2, last axis) + eps) * weight: the fused kernel, or differentiable ops when a graph is
    being recorded."""
    if not _recording(x, weight):
        return _C.rms_norm(x, weight, eps)
    y = x * ((x * x).mean(-1, keepdims=True) + eps).rsqrt()
    return y if weight is None else y * weight


def silu_mul(x, y):
    """silu(x) * y, the gated MLP's activation (fused kernel unless a graph is being recorded)."""
    if not _recording(x, y) and x.shape == y.shape:
        return _C.silu_mul(x, y)
    return x.silu() * y


rope = _C.rope
attention = _C.attention
kv_write = _C.kv_write
get_rows = _C.get_rows
