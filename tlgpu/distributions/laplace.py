"""torch.distributions.laplace: Laplace(loc, scale). rsample is torch's inverse-cdf draw
loc - scale sign(u) log1p(-|u|) with u uniform on [eps - 1, 1) from the device RNG (differentiable wrt loc and
scale); log_prob, entropy, cdf/icdf and the Laplace-Laplace KL are torch's formulas."""
import math

from .. import _C
from .distribution import _F32_EPS, _as_tensor, _broadcast_all, _LocScale, _validate, register_kl


class Laplace(_LocScale):
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        shape, (self.loc, self.scale) = _broadcast_all("Laplace", loc=loc, scale=scale)
        _validate(validate_args, self.scale > 0, "Laplace", "scale > 0")
        super().__init__(shape, (), validate_args)

    @property
    def variance(self):
        return self.scale.square() * 2.0

    @property
    def stddev(self):
        return self.scale * math.sqrt(2.0)

    def rsample(self, sample_shape=()):
        u = (_C.rand(*self._extended_shape(sample_shape)) * 2.0 - 1.0).clamp(min=_F32_EPS - 1.0)
        return self.loc - self.scale * u.sign() * (-u.abs()).log1p()

    def log_prob(self, value):
        value = _as_tensor(value, "value", "Laplace.log_prob")
        return -(self.scale * 2.0).log() - (value - self.loc).abs() / self.scale

    def cdf(self, value):
        value = _as_tensor(value, "value", "Laplace.cdf")
        d = value - self.loc
        return 0.5 - 0.5 * d.sign() * (-d.abs() / self.scale).expm1()

    def icdf(self, value):
        value = _as_tensor(value, "value", "Laplace.icdf")
        t = value - 0.5
        return self.loc - self.scale * t.sign() * (-2.0 * t.abs()).log1p()

    def entropy(self):
        return (self.scale * 2.0).log() + 1.0

    def __repr__(self):
        return f"Laplace(batch_shape={self._batch_shape})"


@register_kl(Laplace, Laplace)
def _kl_laplace_laplace(p, q):
    """-log r + |dloc| / q.scale + r exp(-|dloc| / p.scale) - 1, r = p.scale / q.scale (torch's form)."""
    r = p.scale / q.scale
    d = (p.loc - q.loc).abs()
    return -r.log() + d / q.scale + r * (-d / p.scale).exp() - 1.0
