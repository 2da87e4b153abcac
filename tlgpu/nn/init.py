"""tlgpu.nn.init: torch.nn.init's in-place initialisers. Random draws come from the device RNG
(tlgpu.manual_seed makes them repeatable); orthogonal_ does its QR on the host (numpy), once, at init."""
import math

import numpy as np

from .. import _C
from ..autograd import no_grad


def calculate_gain(nonlinearity, param=None):
    """torch.nn.init.calculate_gain."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
              "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"calculate_gain: negative_slope {param!r} is not a number")
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _check(t, op):
    if not isinstance(t, _C.Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(t).__name__}")
    if t.dtype != "float32":
        raise TypeError(f"{op}: expected a float32 tensor, got {t.dtype}")


def _fans(t, op):
    if t.ndim < 2:
        raise ValueError(f"{op}: fan in and fan out need a tensor of 2 or more dims, got shape {t.shape}")
    receptive = 1
    for d in t.shape[2:]:
        receptive *= d
    return t.shape[1] * receptive, t.shape[0] * receptive


def _fill(t, value):
    with no_grad():
        if isinstance(value, (_C.Tensor, np.ndarray)):
            t.copy_(value)
        else:
            t.fill_(float(value))
    return t


def uniform_(tensor, a=0.0, b=1.0):
    _check(tensor, "uniform_")
    if tensor.numel() == 0:
        return tensor
    with no_grad():
        return _fill(tensor, _C.rand(*tensor.shape) * float(b - a) + float(a))


def normal_(tensor, mean=0.0, std=1.0):
    _check(tensor, "normal_")
    if tensor.numel() == 0:
        return tensor
    with no_grad():
        return _fill(tensor, _C.randn(*tensor.shape) * float(std) + float(mean))


def constant_(tensor, val):
    _check(tensor, "constant_")
    return _fill(tensor, val)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor, gain=1.0):
    fan_in, fan_out = _fans(tensor, "xavier_uniform_")
    bound = gain * math.sqrt(6.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0
    return uniform_(tensor, -bound, bound)


def xavier_normal_(tensor, gain=1.0):
    fan_in, fan_out = _fans(tensor, "xavier_normal_")
    return normal_(tensor, 0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)) if fan_in + fan_out else 0.0)


def _kaiming_std(tensor, a, mode, nonlinearity, op):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"{op}: mode must be 'fan_in' or 'fan_out', not {mode!r}")
    fan_in, fan_out = _fans(tensor, op)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan) if fan else 0.0


def kaiming_uniform_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    bound = math.sqrt(3.0) * _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_uniform_")
    return uniform_(tensor, -bound, bound)


def kaiming_normal_(tensor, a=0.0, mode="fan_in", nonlinearity="leaky_relu"):
    return normal_(tensor, 0.0, _kaiming_std(tensor, a, mode, nonlinearity, "kaiming_normal_"))


def orthogonal_(tensor, gain=1.0):
    """A (semi-)orthogonal matrix from the QR of a device-drawn normal matrix, signs fixed by R's diagonal
    (torch.nn.init.orthogonal_, as PPO implementations call it with gain sqrt(2) or 0.01)."""
    _check(tensor, "orthogonal_")
    if tensor.ndim < 2:
        raise ValueError(f"orthogonal_: needs 2 or more dims, got shape {tensor.shape}")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = _C.randn(rows, cols).numpy().astype(np.float64)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q *= np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    return _fill(tensor, (gain * q).astype(np.float32).reshape(tensor.shape))
