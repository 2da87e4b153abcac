"""torch.nn.functional's normalization, 1-d convolution and pooling forms that PyTorch ports call: batch_norm,
group_norm, conv1d, max_pool1d / avg_pool1d, adaptive_avg_pool1d / adaptive_avg_pool2d. Each is a composition of
differentiable C ops (autograd comes from them): the 1-d forms run the 2-d C ops over a unit height, grouped conv1d
is an unfold (K strided slices) and one batched matmul, and adaptive pooling is a reshape and mean when the
output divides the input, otherwise a product with a constant averaging matrix per axis (torch's window rule:
start = floor(i n / o), end = ceil((i + 1) n / o)). functional.py re-exports everything in __all__; the modules
are in nn/_layers_more.py.

Invariant: batch_norm updates running_mean / running_var in place under no_grad, on the device, from the batch
statistics (no host wait), and only when training; momentum may be a 0-d tensor (the module's cumulative average
for momentum=None is 1 / num_batches_tracked, computed on the device)."""
import numpy as np

from .. import _C
from ..amp import _to_float32
from ..autograd import _is_int, no_grad
from ._fbase import _check_tensor
from ._functional_more import pad as _pad

__all__ = ["batch_norm", "group_norm", "conv1d", "max_pool1d", "avg_pool1d", "adaptive_avg_pool1d",
           "adaptive_avg_pool2d"]


def _shape(t):
    return tuple(t.shape)


def _channel_param(t, c, op, name):
    if t is None:
        return None
    _check_tensor(t, op, name)
    if _shape(t) != (c,):
        raise ValueError(f"{op}: {name} must have shape ({c},) for {c} channels, got {_shape(t)}")
    return t


def _norm_affine(y, weight, bias, shape):
    if weight is not None:
        y = y * weight.reshape(*shape)
    return y if bias is None else y + bias.reshape(*shape)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1, eps=1e-5):
    """torch's F.batch_norm over (N, C, *) input, per channel (dim 1). training: normalize with the batch's mean and
    biased variance, and (when given) update running_mean / running_var in place, running = (1 - momentum) *
    running + momentum * batch, with the unbiased variance for running_var. Not training: normalize with the
    running statistics. Then * weight + bias. Differentiable wrt input, weight and bias."""
    op = "batch_norm"
    _check_tensor(input, op)
    if input.ndim < 2:
        raise ValueError(f"{op}: input must be (N, C, *) with at least 2 dims, got shape {_shape(input)}")
    c = input.shape[1]
    running_mean = _channel_param(running_mean, c, op, "running_mean")
    running_var = _channel_param(running_var, c, op, "running_var")
    weight, bias = _channel_param(weight, c, op, "weight"), _channel_param(bias, c, op, "bias")
    if not training and (running_mean is None or running_var is None):
        raise ValueError(f"{op}: running_mean and running_var must be given when not training")
    if not isinstance(momentum, _C.Tensor):
        try:
            momentum = float(momentum)
        except (TypeError, ValueError):
            raise TypeError(f"{op}: momentum must be a number, got {type(momentum).__name__}") from None
    input, weight, bias = _to_float32(input, weight, bias)
    shape = (1, c) + (1,) * (input.ndim - 2)
    if not training:
        scale = (running_var + eps).rsqrt()
        if weight is not None:
            scale = scale * weight
        shift = -running_mean * scale
        if bias is not None:
            shift = shift + bias
        return input * scale.reshape(*shape) + shift.reshape(*shape)
    n = input.numel() // c if c else 0
    if n <= 1:
        raise ValueError(f"{op}: expected more than 1 value per channel when training, got input of shape "
                         f"{_shape(input)}")
    axes = (0,) + tuple(range(2, input.ndim))
    mean = input.mean(axis=axes, keepdims=True)
    d = input - mean
    var = (d * d).mean(axis=axes, keepdims=True)
    if running_mean is not None or running_var is not None:
        with no_grad():
            keep = 1.0 - momentum
            if running_mean is not None:
                running_mean.copy_(running_mean * keep + mean.reshape(c) * momentum)
            if running_var is not None:
                running_var.copy_(running_var * keep + var.reshape(c) * (momentum * (n / (n - 1))))
    scale = (var + eps).rsqrt()
    if weight is not None:
        scale = scale * weight.reshape(*shape)
    y = d * scale
    return y if bias is None else y + bias.reshape(*shape)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """torch's F.group_norm: (N, C, *) input, the C channels split into num_groups groups; each sample's group is
    normalized by its mean and biased variance, then * weight + bias per channel. Differentiable."""
    op = "group_norm"
    _check_tensor(input, op)
    if input.ndim < 2:
        raise ValueError(f"{op}: input must be (N, C, *) with at least 2 dims, got shape {_shape(input)}")
    if not _is_int(num_groups) or num_groups < 1:
        raise ValueError(f"{op}: num_groups must be a positive int, got {num_groups!r}")
    n, c = input.shape[0], input.shape[1]
    if c % num_groups:
        raise ValueError(f"{op}: expected the number of channels ({c}) of input {_shape(input)} to be divisible by "
                         f"num_groups ({num_groups})")
    weight, bias = _channel_param(weight, c, op, "weight"), _channel_param(bias, c, op, "bias")
    input, weight, bias = _to_float32(input, weight, bias)
    x = input.reshape(n, int(num_groups), -1)
    d = x - x.mean(-1, keepdims=True)
    y = (d * ((d * d).mean(-1, keepdims=True) + eps).rsqrt()).reshape(*input.shape)
    return _norm_affine(y, weight, bias, (1, c) + (1,) * (input.ndim - 2))


def _single(v, op, name, low=0):
    """An int or a 1-element sequence (torch's _single) as an int >= low."""
    if not _is_int(v):
        try:
            (v,) = tuple(v)
        except (TypeError, ValueError):
            raise ValueError(f"{op}: {name} must be an int or a 1-element tuple, got {v!r}") from None
    if not _is_int(v) or v < low:
        raise ValueError(f"{op}: {name} must be an int >= {low}, got {v!r}")
    return int(v)


def _conv1d_padding(padding, k, stride, dilation, op="conv1d"):
    """(left, right) zero padding: torch's 'valid' (none) and 'same' (total dilation * (k - 1), the odd one extra
    on the right; stride 1 only), or an int on both sides."""
    if isinstance(padding, str):
        if padding == "valid":
            return 0, 0
        if padding != "same":
            raise ValueError(f"{op}: padding must be an int, a 1-tuple, 'valid' or 'same', not {padding!r}")
        if stride != 1:
            raise ValueError(f"{op}: padding='same' is not supported for strided convolutions (stride={stride})")
        total = dilation * (k - 1)
        return total // 2, total - total // 2
    p = _single(padding, op, "padding")
    return p, p


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch's F.conv1d: cross-correlation of (N, C_in, L) or (C_in, L) input with weight (C_out, C_in / groups,
    K), padding an int, 'valid' or 'same'. groups=1 runs the conv2d C op (im2col + one GEMM) over a unit height;
    groups > 1 unfolds the input into K strided slices and runs one batched matmul over the groups."""
    op = "conv1d"
    _check_tensor(input, op)
    _check_tensor(weight, op, "weight")
    if input.ndim not in (2, 3):
        raise ValueError(f"{op}: input must be (N, C_in, L) or (C_in, L), got shape {_shape(input)}")
    if weight.ndim != 3:
        raise ValueError(f"{op}: weight must be (C_out, C_in / groups, K), got shape {_shape(weight)}")
    if not _is_int(groups) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    s, d = _single(stride, op, "stride", 1), _single(dilation, op, "dilation", 1)
    o, cg, k = weight.shape
    c = input.shape[-2]
    if cg * groups != c:
        raise ValueError(f"{op}: given groups={groups}, weight of shape {_shape(weight)} expects input with "
                         f"{cg * groups} channels, but input {_shape(input)} has {c}")
    if o % groups:
        raise ValueError(f"{op}: out channels ({o}) must be divisible by groups ({groups})")
    bias = _channel_param(bias, o, op, "bias")
    lo, hi = _conv1d_padding(padding, k, s, d)
    x = input if input.ndim == 3 else input.unsqueeze(0)
    length = x.shape[2] + lo + hi - d * (k - 1)
    if length < 1:
        raise ValueError(f"{op}: input {_shape(input)} padded by ({lo}, {hi}) is shorter than the dilated kernel "
                         f"({d * (k - 1) + 1})")
    lout = (length - 1) // s + 1
    if lo != hi or groups != 1:
        if lo or hi:
            x = _pad(x, (lo, hi))
        lo = hi = 0
    if groups == 1:
        y = _C.conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), (0, lo), (1, d)).squeeze(2)
    else:
        n = x.shape[0]
        cols = [x[:, :, j * d: j * d + s * (lout - 1) + 1: s] for j in range(k)]         # K of (N, C, Lout)
        u = _C.stack(cols, 2).reshape(n, groups, cg * k, lout)
        y = (weight.reshape(groups, o // groups, cg * k) @ u).reshape(n, o, lout)
        if bias is not None:
            y = y + bias.reshape(o, 1)
    return y if input.ndim == 3 else y.squeeze(0)


def _pool1d_args(input, kernel_size, stride, padding, op):
    _check_tensor(input, op)
    if input.ndim not in (2, 3):
        raise ValueError(f"{op}: input must be (N, C, L) or (C, L), got shape {_shape(input)}")
    k = _single(kernel_size, op, "kernel_size", 1)
    s = k if stride is None or (not _is_int(stride) and len(stride) == 0) else _single(stride, op, "stride", 1)
    p = _single(padding, op, "padding")
    if 2 * p > k:
        raise ValueError(f"{op}: padding ({p}) must be at most half the kernel size ({k})")
    if input.shape[-1] + 2 * p < k:
        raise ValueError(f"{op}: input {_shape(input)} padded by {p} is shorter than the kernel ({k})")
    return k, s, p


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Window maxima over the last dim of (N, C, L) or (C, L) input (max_pool2d over a unit height); stride
    defaults to kernel_size; the gradient goes to each window's first maximum."""
    op = "max_pool1d"
    if dilation not in (1, (1,), [1]) or ceil_mode or return_indices:
        raise NotImplementedError(f"{op}: dilation != 1, ceil_mode and return_indices are not supported")
    k, s, p = _pool1d_args(input, kernel_size, stride, padding, op)
    return _C.max_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, p)).squeeze(-2)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
    """Window means over the last dim of (N, C, L) or (C, L) input (avg_pool2d over a unit height); stride
    defaults to kernel_size; count_include_pad as torch."""
    op = "avg_pool1d"
    if ceil_mode:
        raise NotImplementedError(f"{op}: ceil_mode is not supported")
    k, s, p = _pool1d_args(input, kernel_size, stride, padding, op)
    return _C.avg_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, p), bool(count_include_pad)).squeeze(-2)


_AVG_MATRICES = {}


def _avg_matrix(n, o, dtype):
    """(o, n) with row i averaging input positions floor(i n / o) .. ceil((i + 1) n / o) - 1 (torch's windows)."""
    key = (n, o, str(dtype))
    if key not in _AVG_MATRICES:
        a = np.zeros((o, n), dtype=np.float32)
        for i in range(o):
            lo, hi = (i * n) // o, -((-(i + 1) * n) // o)
            a[i, lo:hi] = 1.0 / (hi - lo)
        t = _C.tensor(a)
        _AVG_MATRICES[key] = t if str(dtype) == "float32" else t._convert(dtype)
    return _AVG_MATRICES[key]


def _adaptive_last(x, o):
    """Adaptive average over the last dim to o outputs."""
    n = x.shape[-1]
    if n == o:
        return x
    if n % o == 0:
        return x.reshape(*x.shape[:-1], o, n // o).mean(-1)
    return _C.linear(x, _avg_matrix(n, o, x.dtype), None)


def _output_sizes(output_size, dims, in_sizes, op):
    sizes = (output_size,) * dims if _is_int(output_size) or output_size is None else tuple(output_size)
    if len(sizes) != dims:
        raise ValueError(f"{op}: output_size must be an int or {dims} ints (None keeps the input size), got "
                         f"{output_size!r}")
    out = []
    for s, n in zip(sizes, in_sizes):
        if s is None:
            s = n
        if not _is_int(s) or s < 1:
            raise ValueError(f"{op}: output sizes must be positive ints or None, got {output_size!r}")
        out.append(int(s))
    return out


def adaptive_avg_pool1d(input, output_size):
    """torch's F.adaptive_avg_pool1d over the last dim of (N, C, L) or (C, L) input."""
    op = "adaptive_avg_pool1d"
    _check_tensor(input, op)
    if input.ndim not in (2, 3):
        raise ValueError(f"{op}: input must be (N, C, L) or (C, L), got shape {_shape(input)}")
    if input.shape[-1] == 0:
        raise ValueError(f"{op}: input {_shape(input)} has an empty last dim")
    (o,) = _output_sizes(output_size, 1, input.shape[-1:], op)
    return _adaptive_last(input, o)


def adaptive_avg_pool2d(input, output_size):
    """torch's F.adaptive_avg_pool2d over the last two dims of (N, C, H, W) or (C, H, W) input: output_size an
    int or (oh, ow), None keeping that input size. Output sizes that divide the input are a reshape and a mean
    ((1, 1) is the global average); others use torch's overlapping windows (a product with an averaging matrix)."""
    op = "adaptive_avg_pool2d"
    _check_tensor(input, op)
    if input.ndim not in (3, 4):
        raise ValueError(f"{op}: input must be (N, C, H, W) or (C, H, W), got shape {_shape(input)}")
    h, w = input.shape[-2], input.shape[-1]
    if h == 0 or w == 0:
        raise ValueError(f"{op}: input {_shape(input)} has an empty spatial dim")
    oh, ow = _output_sizes(output_size, 2, (h, w), op)
    lead = tuple(input.shape[:-2])
    if h % oh == 0 and w % ow == 0:
        return input.reshape(*lead, oh, h // oh, ow, w // ow).mean((-3, -1))
    y = _adaptive_last(input, ow)
    return _adaptive_last(y.transpose(-1, -2), oh).transpose(-1, -2)

