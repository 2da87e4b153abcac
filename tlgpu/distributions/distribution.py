"""torch.distributions.distribution's path and the pieces every distribution file shares: the Distribution
base (batch_shape, event_shape, sample/rsample with a sample_shape prefix), argument helpers, the KL registry
(register_kl / kl_divergence) and the Categorical KL formula that Categorical and OneHotCategorical both use.

The distribution files import from here and never from the package's __init__, which imports them all (so the
module graph has no loop). validate_args=True checks parameter values by reading them back (a sync point);
the default (None or False) checks shapes only and never waits for the device, where torch's default reads
values.
"""
import math

import numpy as np

from .. import _C
from ..autograd import _is_int, no_grad

Tensor = _C.Tensor

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_F32_MIN = float(np.finfo(np.float32).min)
_F32_EPS = float(np.finfo(np.float32).eps)
_F32_TINY = float(np.finfo(np.float32).tiny)


def _as_tensor(v, name, dist):
    if isinstance(v, Tensor):
        if v.dtype != np.float32:
            raise TypeError(f"{dist}: {name} must be float32, got {v.dtype}")
        return v
    if isinstance(v, (int, float)):
        return _C.tensor(float(v))
    return _C.tensor(np.asarray(v, dtype=np.float32))


def _shape(sample_shape):
    if _is_int(sample_shape):
        return (sample_shape,)
    return tuple(sample_shape)


def _broadcast_shape(*shapes):
    return tuple(np.broadcast_shapes(*shapes))


def _broadcast_all(dist, **params):
    """The named parameters as float32 tensors expanded to one shape (torch's broadcast_all); returns
    (shape, [tensors in the order given])."""
    ts = {k: _as_tensor(v, k, dist) for k, v in params.items()}
    try:
        shape = _broadcast_shape(*(t.shape for t in ts.values()))
    except ValueError:
        raise ValueError(f"{dist}: " + " and ".join(f"{k} {t.shape}" for k, t in ts.items()) +
                         " cannot be broadcast") from None
    return shape, [t if t.shape == shape else t.expand(*shape) for t in ts.values()]


def _validate(validate_args, cond, dist, what):
    """With validate_args, raise ValueError unless every element of the 0/1 tensor cond is 1 (reads it back)."""
    if validate_args and not bool(np.all(cond.numpy())):
        raise ValueError(f"{dist}: expected {what}, found values that are not")


def _sum_rightmost(x, n):
    """x summed over its n rightmost dims (torch.distributions.utils._sum_rightmost)."""
    if n == 0:
        return x
    return x.reshape(*x.shape[:x.ndim - n], -1).sum(-1)


def _softplus(x):
    """log(1 + exp(x)) in the form that never overflows: max(x, 0) + log1p(exp(-|x|))."""
    return x.clamp(min=0.0) + (-x.abs()).exp().log1p()


def _probs_to_logits_binary(p):
    """torch's probs_to_logits(is_binary=True): log p - log1p(-p) with p clamped to [eps, 1 - eps]."""
    pc = p.clamp(_F32_EPS, 1.0 - _F32_EPS)
    return pc.log() - (-pc).log1p()


class Distribution:
    """The shared face: batch_shape, event_shape, sample/rsample with a sample_shape prefix."""
    has_rsample = False

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape, self._event_shape = tuple(batch_shape), tuple(event_shape)
        self._validate_args = bool(validate_args)

    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    @property
    def stddev(self):
        return self.variance.sqrt()

    def _extended_shape(self, sample_shape=()):
        return _shape(sample_shape) + self._batch_shape + self._event_shape

    def sample(self, sample_shape=()):
        with no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError(f"{type(self).__name__} has no reparameterised sampler (rsample)")

    def __repr__(self):
        return f"{type(self).__name__}(batch_shape={self._batch_shape})"


class _LocScale(Distribution):
    """A location-scale family's shared face (Normal, Laplace): loc is the mean and the mode; expand keeps the
    type."""

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    def expand(self, batch_shape):
        shape = tuple(batch_shape)
        return type(self)(self.loc.expand(*shape), self.scale.expand(*shape))


_KL = {}


def register_kl(type_p, type_q):
    """Decorator registering fn(p, q) as KL(p || q) for instances of type_p and type_q (torch's register_kl)."""
    def deco(fn):
        _KL[type_p, type_q] = fn
        return fn
    return deco


def _kl_fn(tp, tq):
    """The registered pair nearest to (tp, tq) in both MROs (exact match first), or None."""
    best, rank = None, None
    for (p, q), fn in _KL.items():
        if issubclass(tp, p) and issubclass(tq, q):
            r = (tp.__mro__.index(p), tq.__mro__.index(q))
            if rank is None or r < rank:
                best, rank = fn, r
    return best


def kl_divergence(p, q):
    """KL(p || q) over the event, of shape batch_shape; NotImplementedError for pairs with no formula."""
    fn = _kl_fn(type(p), type(q))
    if fn is None:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type {type(p).__name__} and q type "
                                  f"{type(q).__name__}")
    return fn(p, q)


def _kl_categorical(p, q):
    """sum p (log p - log q) over the last dim: +inf where q has a zero that p does not, 0 where p is 0 (torch's
    rule). Logits are clamped to the finite range before the difference, so masked (-inf) logits give no NaN,
    not even in the gradient."""
    if p.param_shape[-1] != q.param_shape[-1]:
        raise ValueError(f"kl_divergence: {type(p).__name__}s over {p.param_shape[-1]} and {q.param_shape[-1]} "
                         "categories")
    pp = p.probs
    t = pp * (p.logits.clamp(_F32_MIN) - q.logits.clamp(_F32_MIN))
    t = _C.where(q.probs == 0, float("inf"), t)
    return _C.where(pp == 0, 0.0, t).sum(-1)
