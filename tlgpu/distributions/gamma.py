"""torch.distributions.gamma: Gamma(concentration, rate). sample() draws on the device by Marsaglia and Tsang's
method, never waiting for the host: _K candidate pairs (z normal, u uniform) per value, the first accepted one
kept (selected by a cumulative sum over the candidates; each is accepted with probability >= 0.95, so all _K are
rejected with probability < 1e-10, and then the proposal's centre d is returned); concentration < 1 is boosted
(alpha + 1, then times u^(1/alpha)); values are clamped to float32's smallest normal, as torch's. rsample raises
NotImplementedError: torch's reparameterised gradient wrt the concentration is the implicit derivative
-dF/dalpha / f of the incomplete gamma function, which tlgpu does not have (differentiating through the accepted
proposal would drop the acceptance's score term and bias the gradient). log_prob, entropy, the moments and the
Gamma-Gamma KL are torch's formulas, differentiable (lgamma, digamma)."""
from .. import _C
from ..autograd import no_grad
from . import constraints
from .distribution import _F32_TINY, Distribution, _as_tensor, _broadcast_all, _validate, register_kl

_K = 8


def _standard_gamma(alpha, shape):
    """Gamma(alpha, 1) draws of the given shape (alpha broadcasts to it), on the device, outside the graph."""
    small = alpha < 1.0
    a = alpha + small                                            # >= 1: Marsaglia-Tsang's domain
    d = a - 1.0 / 3.0
    c = (d * 9.0).rsqrt()
    z = _C.randn(_K, *shape)
    u = _C.rand(_K, *shape)
    t = z * c + 1.0
    v = t * t * t
    ok = (t > 0) * (u.log() < z * z * 0.5 + d - d * v + d * v.log())
    first = ok * (ok.cumsum(0) == 1)                             # 1 at each value's first accepted candidate
    x = (first * (d * v)).sum(0) + (1.0 - first.sum(0)) * d
    boost = (_C.rand(*shape).log() / alpha).exp()
    x = _C.where(small, x * boost, x)
    return x.clamp(min=_F32_TINY)


class Gamma(Distribution):
    """Gamma(concentration, rate): density b^a x^(a - 1) exp(-b x) / Gamma(a) on x > 0."""
    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = False

    def __init__(self, concentration, rate, validate_args=None):
        shape, (self.concentration, self.rate) = _broadcast_all("Gamma", concentration=concentration, rate=rate)
        _validate(validate_args, (self.concentration > 0) * (self.rate > 0), "Gamma", "concentration > 0 and rate > 0")
        super().__init__(shape, (), validate_args)

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1.0) / self.rate).clamp(min=0.0)

    @property
    def variance(self):
        return self.concentration / self.rate.square()

    def expand(self, batch_shape):
        shape = tuple(batch_shape)
        return Gamma(self.concentration.expand(*shape), self.rate.expand(*shape))

    def rsample(self, sample_shape=()):
        raise NotImplementedError("Gamma.rsample: tlgpu has no reparameterised Gamma sampler (torch's gradient wrt "
                                  "the concentration needs the incomplete gamma function's derivative); use "
                                  "sample() (no gradient) with a score-function estimator")

    def sample(self, sample_shape=()):
        """Marsaglia-Tsang on the device (see the module docstring); no gradient, no host wait."""
        with no_grad():
            shape = self._extended_shape(sample_shape)
            return (_standard_gamma(self.concentration.detach(), shape) / self.rate.detach()).clamp(min=_F32_TINY)

    def log_prob(self, value):
        value = _as_tensor(value, "value", "Gamma.log_prob")
        a, b = self.concentration, self.rate
        return _C.xlogy(a, b) + _C.xlogy(a - 1.0, value) - b * value - a.lgamma()

    def entropy(self):
        a = self.concentration
        return a - self.rate.log() + a.lgamma() + (1.0 - a) * a.digamma()

    def __repr__(self):
        return f"Gamma(batch_shape={self._batch_shape})"


@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    """torch's: q.a log(p.b / q.b) + lgamma(q.a) - lgamma(p.a) + (p.a - q.a) digamma(p.a) + (q.b - p.b) p.a / p.b."""
    t1 = q.concentration * (p.rate / q.rate).log()
    t2 = q.concentration.lgamma() - p.concentration.lgamma()
    t3 = (p.concentration - q.concentration) * p.concentration.digamma()
    t4 = (q.rate - p.rate) * (p.concentration / p.rate)
    return t1 + t2 + t3 + t4
