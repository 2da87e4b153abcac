"""tlgpu.distributions: the torch.distributions that RL policies use, with torch's names, shapes and
differentiability: Normal here; Categorical, Bernoulli, Independent, Uniform, OneHotCategorical(StraightThrough),
Laplace, Gamma, Beta, Dirichlet, TransformedDistribution, .transforms and .constraints in their own files
(torch's module names), which import the Distribution base and the KL registry from distribution.py, never from
here. Everything stays on the device:
sampling draws from the device RNG (tlgpu.manual_seed makes it repeatable) and never waits for the host.

Categorical samples by Gumbel-max (argmax of logits - log(-log(U)), one uniform per category), which is
exact (up to the uniforms' 2**-24 grid) and needs no cumulative sum. log_prob picks the action's log-probability
with a one-hot mask built on the device (arange == action) and where(), so masked logits of -inf give no NaN and
the gradient wrt the logits is the usual onehot - softmax. Normal.rsample is loc + eps * scale (reparameterised:
differentiable wrt loc and scale); sample() is the same draw outside the graph.

kl_divergence(p, q) dispatches on the pair of types like torch.distributions.kl_divergence (register_kl adds
pairs); Categorical-Categorical and Normal-Normal are torch's formulas, differentiable wrt both arguments.
"""
from .. import _C
from .distribution import (_F32_EPS, _F32_MIN, _LOG_SQRT_2PI, Distribution, Tensor, _as_tensor,  # noqa: F401
                           _LocScale, _broadcast_shape, _kl_categorical, _shape, kl_divergence, register_kl)
from .bernoulli import Bernoulli  # noqa: F401
from .beta import Beta  # noqa: F401
from .categorical import Categorical  # noqa: F401
from .dirichlet import Dirichlet  # noqa: F401
from .gamma import Gamma  # noqa: F401
from .independent import Independent  # noqa: F401
from .laplace import Laplace  # noqa: F401
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough  # noqa: F401
from .transformed_distribution import TransformedDistribution  # noqa: F401
from .uniform import Uniform  # noqa: F401
from . import constraints, transforms  # noqa: F401


class Normal(_LocScale):
    """Normal(loc, scale): loc and scale (tensors or numbers) broadcast to batch_shape."""
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        loc, scale = _as_tensor(loc, "loc", "Normal"), _as_tensor(scale, "scale", "Normal")
        try:
            shape = _broadcast_shape(loc.shape, scale.shape)
        except ValueError:
            raise ValueError(f"Normal: loc {loc.shape} and scale {scale.shape} cannot be broadcast") from None
        self.loc = loc if loc.shape == shape else loc.expand(*shape)
        self.scale = scale if scale.shape == shape else scale.expand(*shape)
        super().__init__(shape)

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale.square()

    def rsample(self, sample_shape=()):
        """loc + eps * scale with eps ~ N(0, 1) from the device RNG: differentiable wrt loc and scale."""
        eps = _C.randn(*self._extended_shape(sample_shape))
        return self.loc + eps * self.scale

    def log_prob(self, value):
        value = _as_tensor(value, "value", "Normal.log_prob")
        return -((value - self.loc).square()) / (2.0 * self.variance) - self.scale.log() - _LOG_SQRT_2PI

    def entropy(self):
        return self.scale.log() + (0.5 + _LOG_SQRT_2PI)

    def __repr__(self):
        return f"Normal(batch_shape={self._batch_shape})"


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    """log(q.scale / p.scale) + (p.scale**2 + (p.loc - q.loc)**2) / (2 q.scale**2) - 1/2, written as torch
    writes it: 0.5 (r + ((p.loc - q.loc) / q.scale)**2 - 1 - log r), r = (p.scale / q.scale)**2."""
    var_ratio = (p.scale / q.scale).square()
    t1 = ((p.loc - q.loc) / q.scale).square()
    return (var_ratio + t1 - 1.0 - var_ratio.log()) * 0.5
