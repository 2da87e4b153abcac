"""torch.distributions.one_hot_categorical: OneHotCategorical(probs=None, logits=None), a Categorical (held as
torch holds one: its logits and probs) with one-hot float32 samples over the last dim (event_shape (K,)), as
Dreamer's discrete latents and actions use it; OneHotCategoricalStraightThrough adds rsample = sample + probs -
probs.detach() (the value of the sample, the gradient of the probabilities). Sampling is Gumbel-max on the
device, as Categorical's. log_prob picks the logit where the value is nonzero (torch reads the argmax), so masked
-inf logits elsewhere give no NaN."""
from .. import _C
from ..autograd import no_grad
from .categorical import Categorical
from .distribution import _F32_MIN, Distribution, _as_tensor, _kl_categorical, register_kl


class OneHotCategorical(Distribution):
    def __init__(self, probs=None, logits=None, validate_args=None):
        name = type(self).__name__
        if (probs is None) == (logits is None):
            raise ValueError(f"{name}: pass exactly one of probs or logits")
        which = "probs" if probs is not None else "logits"
        p = _as_tensor(probs if probs is not None else logits, which, name)
        if p.ndim < 1 or p.shape[-1] == 0:
            raise ValueError(f"{name}: {which} must have a last dim of categories, got shape {p.shape}")
        self._categorical = Categorical(probs=p) if probs is not None else Categorical(logits=p)
        self._num_events = p.shape[-1]
        super().__init__(p.shape[:-1], p.shape[-1:], validate_args)

    @property
    def logits(self):
        return self._categorical.logits

    @property
    def probs(self):
        return self._categorical.probs

    @property
    def param_shape(self):
        return self._categorical.param_shape

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        return _C.arange(self._num_events, dtype=self.probs.dtype) == self.probs.argmax(-1).float().unsqueeze(-1)

    @property
    def variance(self):
        return self.probs * (1.0 - self.probs)

    def expand(self, batch_shape):
        c = self._categorical.expand(batch_shape)
        return type(self)(logits=c.logits) if c._probs is None else type(self)(probs=c.probs)

    def sample(self, sample_shape=()):
        """float32 one-hot vectors of shape sample_shape + batch_shape + (K,), outside the graph."""
        with no_grad():
            u = _C.rand(*self._extended_shape(sample_shape))
            idx = (self.logits - (-u.log()).log()).argmax(-1)    # Gumbel-max, as Categorical.sample
            return _C.arange(self._num_events, dtype=u.dtype) == idx.float().unsqueeze(-1)

    def log_prob(self, value):
        value = _as_tensor(value, "value", f"{type(self).__name__}.log_prob")
        if value.ndim < 1 or value.shape[-1] != self._num_events:
            raise ValueError(f"{type(self).__name__}.log_prob: value of shape {value.shape} is not one-hot over "
                             f"{self._num_events} categories")
        return _C.where(value != 0, self.logits, 0.0).sum(-1)         # where() broadcasts value and logits

    def entropy(self):
        return -(self.logits.clamp(_F32_MIN) * self.probs).sum(-1)

    def __repr__(self):
        return f"{type(self).__name__}(batch_shape={self._batch_shape}, num_events={self._num_events})"


class OneHotCategoricalStraightThrough(OneHotCategorical):
    has_rsample = True

    def rsample(self, sample_shape=()):
        s = self.sample(sample_shape)
        p = self.probs
        return s + (p - p.detach())


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p, q):
    return _kl_categorical(p, q)
