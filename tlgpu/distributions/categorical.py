"""torch.distributions.categorical: Categorical(probs=None, logits=None), K categories over the last dim (the
sampling and log_prob rules are in tlgpu/distributions/__init__.py's docstring); OneHotCategorical wraps it."""
import numpy as np

from .. import _C
from ..autograd import no_grad
from .distribution import (_F32_EPS, _F32_MIN, Distribution, Tensor, _as_tensor, _broadcast_shape, _kl_categorical,
                           _shape, register_kl)

__all__ = ["Categorical"]


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


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    return _kl_categorical(p, q)
