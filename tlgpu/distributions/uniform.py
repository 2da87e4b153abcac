"""torch.distributions.uniform: Uniform(low, high) on [low, high). rsample is low + u (high - low) with u from
the device RNG (differentiable wrt low and high); log_prob is -log(high - low) inside the support and -inf
outside it (torch with validate_args=False; tlgpu does not read the value back to raise)."""
import math

from .. import _C
from .distribution import Distribution, _as_tensor, _broadcast_all, _validate, register_kl


class Uniform(Distribution):
    has_rsample = True

    def __init__(self, low, high, validate_args=None):
        shape, (self.low, self.high) = _broadcast_all("Uniform", low=low, high=high)
        _validate(validate_args, self.low < self.high, "Uniform", "low < high")
        super().__init__(shape, (), validate_args)

    @property
    def mean(self):
        return (self.high + self.low) / 2.0

    @property
    def mode(self):
        return self.high * float("nan")

    @property
    def stddev(self):
        return (self.high - self.low) / math.sqrt(12.0)

    @property
    def variance(self):
        return (self.high - self.low).square() / 12.0

    def expand(self, batch_shape):
        shape = tuple(batch_shape)
        return Uniform(self.low.expand(*shape), self.high.expand(*shape))

    def rsample(self, sample_shape=()):
        u = _C.rand(*self._extended_shape(sample_shape))
        return self.low + u * (self.high - self.low)

    def log_prob(self, value):
        value = _as_tensor(value, "value", "Uniform.log_prob")
        inside = (self.low <= value) * (value < self.high)       # 0/1 float mask, not differentiable
        return inside.log() - (self.high - self.low).log()

    def cdf(self, value):
        value = _as_tensor(value, "value", "Uniform.cdf")
        return ((value - self.low) / (self.high - self.low)).clamp(0.0, 1.0)

    def icdf(self, value):
        value = _as_tensor(value, "value", "Uniform.icdf")
        return value * (self.high - self.low) + self.low

    def entropy(self):
        return (self.high - self.low).log()

    def __repr__(self):
        return f"Uniform(batch_shape={self._batch_shape})"


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    """log((q.high - q.low) / (p.high - p.low)), +inf where p's support is not inside q's."""
    r = ((q.high - q.low) / (p.high - p.low)).log()
    return _C.where((q.low > p.low) + (q.high < p.high) > 0, float("inf"), r)
