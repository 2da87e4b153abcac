"""torch.distributions.dirichlet: Dirichlet(concentration) over the last dim. sample() normalises Gamma(c, 1)
draws (gamma.py's on-device Marsaglia-Tsang; no host wait); rsample raises NotImplementedError as Gamma's does.
log_prob, entropy, mean, variance, mode and the Dirichlet-Dirichlet KL are torch's formulas."""
from .. import _C
from ..autograd import no_grad
from . import constraints
from .distribution import _F32_TINY, Distribution, _as_tensor, _validate, register_kl
from .gamma import _standard_gamma


class Dirichlet(Distribution):
    """Dirichlet(concentration): concentration of shape batch_shape + (k,), k >= 1."""
    arg_constraints = {"concentration": constraints.greater_than(0.0)}
    support = constraints.simplex
    has_rsample = False

    def __init__(self, concentration, validate_args=None):
        c = _as_tensor(concentration, "concentration", "Dirichlet")
        if c.ndim < 1:
            raise ValueError("Dirichlet: concentration must be at least one-dimensional")
        self.concentration = c
        _validate(validate_args, c > 0, "Dirichlet", "concentration > 0")
        super().__init__(tuple(c.shape[:-1]), tuple(c.shape[-1:]), validate_args)

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self):
        """(c - 1)+ / sum (c - 1)+; where every c < 1, the first vertex (torch's argmax of its 0/0 row)."""
        c = self.concentration
        m = (c - 1.0).clamp(min=0.0)
        all_below = (c < 1.0).sum(-1, keepdim=True) == c.shape[-1]
        first = _C.arange(c.shape[-1]) == 0
        return _C.where(all_below, first, m / m.sum(-1, keepdim=True))

    @property
    def variance(self):
        c = self.concentration
        c0 = c.sum(-1, keepdim=True)
        return c * (c0 - c) / (c0.square() * (c0 + 1.0))

    def expand(self, batch_shape):
        shape = tuple(batch_shape)
        return Dirichlet(self.concentration.expand(*shape, *self._event_shape))

    def rsample(self, sample_shape=()):
        raise NotImplementedError("Dirichlet.rsample: tlgpu has no reparameterised Gamma sampler (see "
                                  "tlgpu.distributions.gamma); use sample() with a score-function estimator")

    def sample(self, sample_shape=()):
        with no_grad():
            g = _standard_gamma(self.concentration.detach(), self._extended_shape(sample_shape))
            return (g / g.sum(-1, keepdim=True)).clamp(_F32_TINY, 1.0 - 2.0 ** -24)

    def log_prob(self, value):
        value = _as_tensor(value, "value", "Dirichlet.log_prob")
        c = self.concentration
        return _C.xlogy(c - 1.0, value).sum(-1) + c.sum(-1).lgamma() - c.lgamma().sum(-1)

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        a0 = c.sum(-1)
        return c.lgamma().sum(-1) - a0.lgamma() - (k - a0) * a0.digamma() - ((c - 1.0) * c.digamma()).sum(-1)

    def __repr__(self):
        return f"Dirichlet(batch_shape={self._batch_shape}, event_shape={self._event_shape})"


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    """torch's: lgamma(sum p) - lgamma(sum q) - sum(lgamma(p) - lgamma(q)) + sum((p - q)(digamma(p) -
    digamma(sum p)))."""
    sp, sq = p.concentration.sum(-1), q.concentration.sum(-1)
    t1 = sp.lgamma() - sq.lgamma()
    t2 = (p.concentration.lgamma() - q.concentration.lgamma()).sum(-1)
    t3 = p.concentration - q.concentration
    t4 = p.concentration.digamma() - sp.digamma().unsqueeze(-1)
    return t1 - t2 + (t3 * t4).sum(-1)
