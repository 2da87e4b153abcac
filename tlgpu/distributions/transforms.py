"""torch.distributions.transforms: the bijections TransformedDistribution applies, with torch's names and
formulas: TanhTransform (log|dy/dx| in the stable form 2 (log 2 - x - softplus(-2x)); the inverse is atanh
unclamped, as torch's, so y = +-1 gives +-inf: use cache_size=1 to take log_prob of the pre-tanh value the
forward call saw), AffineTransform(loc, scale), ExpTransform, SigmoidTransform (clipped to
[tiny, 1 - eps] as torch's). cache_size=1 keeps the last (x, y) pair: calling the inverse on that very y
tensor (identity, not value) returns x without recomputing it."""
import math

from .. import _C
from .distribution import _F32_EPS, _F32_TINY, Tensor, _broadcast_shape, _softplus, _sum_rightmost


class Transform:
    """y = t(x) with t.inv(y), log_abs_det_jacobian(x, y); event_dim 0 (elementwise) unless a subclass says."""
    bijective = True
    sign = 1
    event_dim = 0

    def __init__(self, cache_size=0):
        if cache_size not in (0, 1):
            raise ValueError(f"{type(self).__name__}: cache_size must be 0 or 1, got {cache_size}")
        self._cache_size = cache_size
        self._cached_x_y = None, None

    @property
    def inv(self):
        return _InverseTransform(self)

    def __call__(self, x):
        return self._cached(x, 0, self._call)

    def _inv_call(self, y):
        return self._cached(y, 1, self._inverse)

    def _cached(self, v, side, fn):
        """fn(v), or the other half of the cached (x, y) pair when v is its side's (0: x, 1: y) value."""
        if self._cache_size == 0:
            return fn(v)
        pair = self._cached_x_y
        if v is pair[side]:
            return pair[1 - side]
        w = fn(v)
        self._cached_x_y = (v, w) if side == 0 else (w, v)
        return w

    def _call(self, x):
        raise NotImplementedError

    def _inverse(self, y):
        raise NotImplementedError

    def log_abs_det_jacobian(self, x, y):
        raise NotImplementedError

    def __repr__(self):
        return f"{type(self).__name__}()"


class _InverseTransform(Transform):
    def __init__(self, transform):
        super().__init__(transform._cache_size)
        self._inv = transform
        self.event_dim = transform.event_dim

    @property
    def inv(self):
        return self._inv

    def __call__(self, x):
        return self._inv._inv_call(x)

    def _inv_call(self, y):
        return self._inv(y)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)


class ExpTransform(Transform):
    def _call(self, x):
        return x.exp()

    def _inverse(self, y):
        return y.log()

    def log_abs_det_jacobian(self, x, y):
        return x


class SigmoidTransform(Transform):
    def _call(self, x):
        return x.sigmoid().clamp(_F32_TINY, 1.0 - _F32_EPS)

    def _inverse(self, y):
        y = y.clamp(_F32_TINY, 1.0 - _F32_EPS)
        return y.log() - (-y).log1p()

    def log_abs_det_jacobian(self, x, y):
        return -_softplus(-x) - _softplus(x)


class TanhTransform(Transform):
    def _call(self, x):
        return x.tanh()

    def _inverse(self, y):
        return y.atanh()

    def log_abs_det_jacobian(self, x, y):
        return (math.log(2.0) - x - _softplus(-2.0 * x)) * 2.0


class AffineTransform(Transform):
    """y = loc + scale x; loc and scale are numbers or tensors (broadcast against x); event_dim > 0 sums
    log|scale| over that many rightmost dims."""

    def __init__(self, loc, scale, event_dim=0, cache_size=0):
        super().__init__(cache_size)
        self.loc, self.scale, self.event_dim = loc, scale, int(event_dim)

    @property
    def sign(self):
        if isinstance(self.scale, Tensor):
            return self.scale.sign()
        return 1 if self.scale > 0 else -1 if self.scale < 0 else 0

    def _call(self, x):
        return x * self.scale + self.loc

    def _inverse(self, y):
        return (y - self.loc) / self.scale

    def log_abs_det_jacobian(self, x, y):
        if not isinstance(self.scale, Tensor):
            return _sum_rightmost(_C.full(x.shape, math.log(abs(self.scale))), self.event_dim)
        r = self.scale.abs().log()
        if self.event_dim == 0:
            return r                                   # unexpanded, as torch's (the caller broadcasts)
        shape = _broadcast_shape(r.shape, x.shape)
        return _sum_rightmost(r if r.shape == shape else r.expand(*shape), self.event_dim)

    def __repr__(self):
        return f"AffineTransform(loc={self.loc}, scale={self.scale}, event_dim={self.event_dim})"
