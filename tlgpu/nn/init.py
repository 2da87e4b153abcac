"""tlgpu.nn.init: torch.nn.init's in-place initialisers. Random draws come from the device RNG
(tlgpu.manual_seed makes them repeatable); orthogonal_ does its QR on the host (numpy), once, at init, and
trunc_normal_ its inverse normal CDF (float64, Wichura's AS 241)."""
import math
import warnings

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


# Wichura's AS 241 (PPND16): the inverse standard normal CDF to about 1e-16 relative, as rational functions of r
# in three regions; coefficients from the lowest power up.
_AS241 = (
    ((3.3871328727963666080e0, 1.3314166789178437745e2, 1.9715909503065514427e3, 1.3731693765509461125e4,
      4.5921953931549871457e4, 6.7265770927008700853e4, 3.3430575583588128105e4, 2.5090809287301226727e3),
     (1.0, 4.2313330701600911252e1, 6.8718700749205790830e2, 5.3941960214247511077e3, 2.1213794301586595867e4,
      3.9307895800092710610e4, 2.8729085735721942674e4, 5.2264952788528545610e3)),
    ((1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0, 3.64784832476320460504e0,
      1.27045825245236838258e0, 2.41780725177450611770e-1, 2.27238449892691845833e-2, 7.74545014278341407640e-4),
     (1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
      1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4, 1.05075007164441684324e-9)),
    ((6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0, 2.96560571828504891230e-1,
      2.65321895265761230930e-2, 1.24266094738807843860e-3, 2.71155556874348757815e-5, 2.01033439929228813265e-7),
     (1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
      7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7, 2.04426310338993978564e-15)),
)


def _ratio(coef, r):
    num, den = coef
    return np.polynomial.polynomial.polyval(r, num) / np.polynomial.polynomial.polyval(r, den)


def _ndtri(p):
    """x with Phi(x) = p, elementwise over a float64 array in [0, 1] (-inf at 0, inf at 1)."""
    p = np.asarray(p, dtype=np.float64)
    q = p - 0.5
    out = np.empty_like(p)
    mid = np.abs(q) <= 0.425
    r = 0.180625 - q[mid] * q[mid]
    out[mid] = q[mid] * _ratio(_AS241[0], r)
    tail = ~mid
    with np.errstate(divide="ignore"):
        r = np.sqrt(-np.log(np.minimum(p[tail], 1.0 - p[tail])))
    edge = np.isinf(r)                                  # p = 0 or 1
    r = np.where(edge, 1.0, r)
    near = r <= 5.0
    x = np.where(near, _ratio(_AS241[1], np.where(near, r - 1.6, 0.0)), _ratio(_AS241[2], np.where(near, 0.0, r - 5.0)))
    x = np.where(edge, np.inf, x)
    out[tail] = np.where(q[tail] < 0, -x, x)
    return out


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """torch.nn.init.trunc_normal_: N(mean, std) truncated to [a, b] (absolute bounds), torch's inverse-CDF method:
    p uniform in [Phi((a - mean) / std), Phi((b - mean) / std)] from the device RNG, x = mean + std * Phi^-1(p)
    (float64 on the host), clamped to [a, b], copied in. Warns as torch when mean is more than 2 std outside
    [a, b]. generator is not supported (seed with tlgpu.manual_seed)."""
    _check(tensor, "trunc_normal_")
    if generator is not None:
        raise NotImplementedError("trunc_normal_: generator= is not supported; seed the device RNG with "
                                  "tlgpu.manual_seed")
    mean, std, a, b = float(mean), float(std), float(a), float(b)
    if not std > 0 or math.isnan(std):
        raise ValueError(f"trunc_normal_: std must be > 0, got {std}")
    if not a < b:
        raise ValueError(f"trunc_normal_: the bounds must satisfy a < b, got a={a}, b={b}")
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution of values "
                      "may be incorrect.", stacklevel=2)
    if tensor.numel() == 0:
        return tensor

    def cdf(v):
        return 0.5 * (1.0 + math.erf((v - mean) / (std * math.sqrt(2.0))))

    lo, hi = cdf(a), cdf(b)
    u = _C.rand(*tensor.shape).numpy().astype(np.float64)
    x = np.clip(mean + std * _ndtri(lo + (hi - lo) * u), a, b)
    return _fill(tensor, x.astype(np.float32))
