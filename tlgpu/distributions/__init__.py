"""tlgpu.distributions: the torch.distributions that RL policies use, with torch's names, shapes and
differentiability: Categorical and Normal here; Bernoulli, Independent, Uniform, OneHotCategorical(StraightThrough),
Laplace, TransformedDistribution and .transforms in their own files (torch's module names), which import the
Distribution base and the KL registry from distribution.py, never from here. Everything stays on the device:
sampling draws from the device RNG (tlgpu.manual_seed makes it repeatable) and never waits for the host.

Categorical samples by Gumbel-max (argmax of logits - log(-log(U)), one uniform per category), which is
exact (up to the uniforms' 2**-24 grid) and needs no cumulative sum. log_prob picks the action's log-probability
with a one-hot mask built on the device (arange == action) and where(), so masked logits of -inf give no NaN and
the gradient wrt the logits is the usual onehot - softmax. Normal.rsample is loc + eps * scale (reparameterised:
differentiable wrt loc and scale); sample() is the same draw outside the graph.

kl_divergence(p, q) dispatches on the pair of types like torch.distributions.kl_divergence (register_kl adds
pairs); Categorical-Categorical and Normal-Normal are torch's formulas, differentiable wrt both arguments.
"""
import numpy as np

from .. import _C
from ..autograd import no_grad
from .distribution import (_F32_EPS, _F32_MIN, _LOG_SQRT_2PI, Distribution, Tensor, _as_tensor,  # noqa: F401
                           _broadcast_shape, _kl_categorical, _shape, kl_divergence, register_kl)
from .bernoulli import Bernoulli  # noqa: F401
from .independent import Independent  # noqa: F401
from .laplace import Laplace  # noqa: F401
from .one_hot_categorical import OneHotCategorical, OneHotCategoricalStraightThrough  # noqa: F401
from .transformed_distribution import TransformedDistribution  # noqa: F401
from .uniform import Uniform  # noqa: F401
from . import transforms  # noqa: F401


class Categorical(Distribution):
    """Categorical(probs=None, logits=None): K categories over the last dim, batch_shape = shape[:-1].
    logits are normalised (logits - logsumexp); probs are normalised to sum to 1. Samples are int32."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Categorical: pass exactly one of probs or logits")
        p = _as_tensor(probs if probs is not None else logits, "probs" if probs is not None else "logits",
                       "Categorical")
        if p.ndim < 1:
            raise ValueError(f"Categorical: {'probs' if probs is not None else 'logits'} must have at least one dim "
                             f"(the categories), got shape {p.shape}")
        if p.shape[-1] == 0:
            raise ValueError(f"Categorical: no categories (shape {p.shape})")
        if probs is not None:
            self._probs = p / p.sum(-1, keepdims=True)
            self._logits = None
        else:
            self._logits = p - p.logsumexp(-1, keepdims=True)
            self._probs = None
        self._num_events = p.shape[-1]
        super().__init__(p.shape[:-1])

    @property
    def logits(self):
        """Normalised log-probabilities; from probs, log(clamp(probs, eps, 1 - eps)) like torch."""
        if self._logits is None:
            self._logits = self._probs.clamp(_F32_EPS, 1.0 - _F32_EPS).log()
        return self._logits

    @property
    def probs(self):
        if self._probs is None:
            self._probs = self._logits.softmax(-1)
        return self._probs

    @property
    def param_shape(self):
        return self._batch_shape + (self._num_events,)

    @property
    def mode(self):
        return self.probs.argmax(-1)

    def expand(self, batch_shape):
        shape = tuple(batch_shape) + (self._num_events,)
        if self._logits is not None:
            return Categorical(logits=self._logits.expand(*shape))
        return Categorical(probs=self._probs.expand(*shape))

    def sample(self, sample_shape=()):
        """int32 indices of shape sample_shape + batch_shape, by Gumbel-max on the device (no host wait)."""
        shape = _shape(sample_shape) + self.param_shape
        with no_grad():
            u = _C.rand(*shape)
            # -log(-log(u)) is Gumbel(0, 1); u == 0 gives -inf (never chosen), and rand never returns 1
            return (self.logits - (-u.log()).log()).argmax(-1)

    def log_prob(self, value):
        """log p(value) for int32 category indices broadcastable against batch_shape. An index outside
        [0, K) gives NaN (checking it on the host would be a sync point), as cross_entropy does."""
        if not isinstance(value, Tensor):
            value = _C.tensor(np.asarray(value, dtype=np.int32))
        shape = _broadcast_shape(value.shape, self._batch_shape)
        v = value.float().unsqueeze(-1)
        k = _C.arange(self._num_events, dtype=np.float32)
        onehot = k == v                                   # float mask [..., K] built on the device
        logits = self.logits.expand(*shape, self._num_events)
        # dividing by the mask's row sum (1, or 0 for an index out of range) turns a bad index into 0/0 = NaN
        return _C.where(onehot, logits, 0.0).sum(-1) / onehot.sum(-1)

    def entropy(self):
        """-sum(p log p) over the categories (logits clamped to the finite range, so p = 0 adds 0)."""
        return -(self.logits.clamp(_F32_MIN) * self.probs).sum(-1)

    def __repr__(self):
        return f"Categorical(batch_shape={self._batch_shape}, num_events={self._num_events})"


class Normal(Distribution):
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
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.scale.square()

    def expand(self, batch_shape):
        shape = tuple(batch_shape)
        return Normal(self.loc.expand(*shape), self.scale.expand(*shape))

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


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    return _kl_categorical(p, q)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    """log(q.scale / p.scale) + (p.scale**2 + (p.loc - q.loc)**2) / (2 q.scale**2) - 1/2, written as torch
    writes it: 0.5 (r + ((p.loc - q.loc) / q.scale)**2 - 1 - log r), r = (p.scale / q.scale)**2."""
    var_ratio = (p.scale / q.scale).square()
    t1 = ((p.loc - q.loc) / q.scale).square()
    return (var_ratio + t1 - 1.0 - var_ratio.log()) * 0.5
