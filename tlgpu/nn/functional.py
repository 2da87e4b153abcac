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
    """x @ weight.T (+ bias); weight is [out_features, in_features] like torch. One C op and one autograd node;
    on CPU devices with the BLAS path (docs/cpu.md) one command, the bias written before the product."""
    return _C.linear(x, weight, bias)


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


def _conv_padding(padding, weight, dilation, stride):
    """torch's padding='valid' / 'same' as the symmetric int pair the C op takes."""
    if not isinstance(padding, str):
        return padding
    if padding == "valid":
        return 0
    if padding != "same":
        raise ValueError(f"conv2d: padding must be an int, a pair, 'valid' or 'same', not {padding!r}")
    d = (dilation, dilation) if hasattr(type(dilation), "__index__") else tuple(dilation)
    if stride not in (1, (1, 1), [1, 1]):
        raise ValueError(f"conv2d: padding='same' needs stride 1, got {stride}")
    total = [d[i] * (weight.shape[2 + i] - 1) for i in range(2)]
    if any(t % 2 for t in total):
        raise NotImplementedError(f"conv2d: padding='same' with kernel {tuple(weight.shape[2:])} and dilation {d} "
                                  "needs uneven padding; pad the input explicitly")
    return (total[0] // 2, total[1] // 2)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation over NCHW (or CHW) input, weight [out, in, kH, kW]: im2col + one GEMM."""
    if groups != 1:
        raise NotImplementedError(f"conv2d: groups={groups}; only groups=1 is supported")
    return _C.conv2d(input, weight, bias, stride, _conv_padding(padding, weight, dilation, stride), dilation)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Window maxima; stride defaults to kernel_size; the gradient goes to each window's first maximum."""
    if dilation not in (1, (1, 1), [1, 1]) or ceil_mode or return_indices:
        raise NotImplementedError("max_pool2d: dilation != 1, ceil_mode and return_indices are not supported")
    return _C.max_pool2d(input, kernel_size, stride, padding)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Window means; stride defaults to kernel_size; count_include_pad like torch."""
    if ceil_mode or divisor_override is not None:
        raise NotImplementedError("avg_pool2d: ceil_mode and divisor_override are not supported")
    return _C.avg_pool2d(input, kernel_size, stride, padding, count_include_pad)
