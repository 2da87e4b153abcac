"""torch.distributions.beta: Beta(concentration1, concentration0) on [0, 1]. sample() is x / (x + y) of Gamma
draws (gamma.py's on-device Marsaglia-Tsang; no host wait); rsample raises NotImplementedError as Gamma's does.
log_prob, entropy, mean, variance, mode and the Beta-Beta KL are torch's formulas (torch computes them through a
two-category Dirichlet; the same values)."""
from .. import _C
from ..autograd import no_grad
from . import constraints
from .distribution import _F32_TINY, Distribution, _as_tensor, _broadcast_all, _validate, register_kl
from .gamma import _standard_gamma


class Beta(Distribution):
    """Beta(concentration1, concentration0): density x^(a - 1) (1 - x)^(b - 1) / B(a, b), a = concentration1."""
    arg_constraints = {"concentration1": constraints.positive, "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = False

    def __init__(self, concentration1, concentration0, validate_args=None):
        shape, (self.concentration1, self.concentration0) = _broadcast_all(
            "Beta", concentration1=concentration1, concentration0=concentration0)
        _validate(validate_args, (self.concentration1 > 0) * (self.concentration0 > 0), "Beta",
                  "concentration1 > 0 and concentration0 > 0")
        super().__init__(shape, (), validate_args)

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        """(a - 1)+ / ((a - 1)+ + (b - 1)+); 1 where both are below 1 (torch's Dirichlet mode, its first vertex)."""
        m1, m0 = (self.concentration1 - 1.0).clamp(min=0.0), (self.concentration0 - 1.0).clamp(min=0.0)
        both_below = (self.concentration1 < 1.0) * (self.concentration0 < 1.0)
        return _C.where(both_below, 1.0, m1 / (m1 + m0))

    @property
    def variance(self):
        a, b = self.concentration1, self.concentration0
        total = a + b
        return a * b / (total.square() * (total + 1.0))

    def expand(self, batch_shape):
        shape = tuple(batch_shape)
        return Beta(self.concentration1.expand(*shape), self.concentration0.expand(*shape))

    def rsample(self, sample_shape=()):
        raise NotImplementedError("Beta.rsample: tlgpu has no reparameterised Gamma sampler (see "
                                  "tlgpu.distributions.gamma); use sample() with a score-function estimator")

    def sample(self, sample_shape=()):
        with no_grad():
            shape = self._extended_shape(sample_shape)
            x = _standard_gamma(self.concentration1.detach(), shape)
            y = _standard_gamma(self.concentration0.detach(), shape)
            return (x / (x + y)).clamp(_F32_TINY, 1.0 - 2.0 ** -24)

    def log_prob(self, value):
        value = _as_tensor(value, "value", "Beta.log_prob")
        a, b = self.concentration1, self.concentration0
        return (_C.xlogy(a - 1.0, value) + _C.xlogy(b - 1.0, 1.0 - value) + (a + b).lgamma() - a.lgamma()
                - b.lgamma())

    def entropy(self):
        a, b = self.concentration1, self.concentration0
        a0 = a + b
        return (a.lgamma() + b.lgamma() - a0.lgamma() - (2.0 - a0) * a0.digamma() - (a - 1.0) * a.digamma()
                - (b - 1.0) * b.digamma())

    def __repr__(self):
        return f"Beta(batch_shape={self._batch_shape})"


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    """torch's: lgamma terms of both, then (p.a - q.a) digamma(p.a) + (p.b - q.b) digamma(p.b) + (sum q - sum p)
    digamma(sum p)."""
    sp = p.concentration1 + p.concentration0
    sq = q.concentration1 + q.concentration0
    t1 = q.concentration1.lgamma() + q.concentration0.lgamma() + sp.lgamma()
    t2 = p.concentration1.lgamma() + p.concentration0.lgamma() + sq.lgamma()
    t3 = (p.concentration1 - q.concentration1) * p.concentration1.digamma()
    t4 = (p.concentration0 - q.concentration0) * p.concentration0.digamma()
    t5 = (sq - sp) * sp.digamma()
    return t1 - t2 + t3 + t4 + t5
