"""torch.distributions.bernoulli: Bernoulli(probs=None, logits=None), float32 samples of 0/1 (SB3's MultiBinary,
Dreamer's continue flag). log_prob is -BCE-with-logits in its stable form, so a logit of +-100 gives a finite
value and gradient; built from probs, the logits are log p - log1p(-p) with p clamped to [eps, 1 - eps] (torch's
probs_to_logits)."""
from .. import _C
from ..autograd import no_grad
from .distribution import (Distribution, _as_tensor, _broadcast_all, _probs_to_logits_binary, _softplus,
                           _validate, register_kl)


class Bernoulli(Distribution):
    """Bernoulli(probs=None, logits=None): one of the two, of any shape (= batch_shape); event_shape ()."""

    def __init__(self, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Bernoulli: pass exactly one of probs or logits")
        if probs is not None:
            self._probs, self._logits = _as_tensor(probs, "probs", "Bernoulli"), None
            _validate(validate_args, (self._probs >= 0) * (self._probs <= 1), "Bernoulli",
                      "probs in the interval [0, 1]")
            shape = self._probs.shape
        else:
            self._logits, self._probs = _as_tensor(logits, "logits", "Bernoulli"), None
            shape = self._logits.shape
        super().__init__(shape, (), validate_args)

    @property
    def probs(self):
        if self._probs is None:
            self._probs = self._logits.sigmoid()
        return self._probs

    @property
    def logits(self):
        if self._logits is None:
            self._logits = _probs_to_logits_binary(self._probs)
        return self._logits

    @property
    def param_shape(self):
        return self._batch_shape

    @property
    def mean(self):
        return self.probs

    @property
    def mode(self):
        """1 where probs > 1/2, 0 where below, NaN at exactly 1/2 (torch's rule)."""
        p = self.probs
        return _C.where(p == 0.5, float("nan"), p > 0.5)

    @property
    def variance(self):
        return self.probs * (1.0 - self.probs)

    def expand(self, batch_shape):
        shape = tuple(batch_shape)
        if self._probs is not None:
            return Bernoulli(probs=self._probs.expand(*shape))
        return Bernoulli(logits=self._logits.expand(*shape))

    def sample(self, sample_shape=()):
        """float32 0/1 of shape sample_shape + batch_shape: uniform < probs on the device, outside the graph."""
        with no_grad():
            return _C.rand(*self._extended_shape(sample_shape)) < self.probs

    def log_prob(self, value):
        """value log sigmoid(l) + (1 - value) log sigmoid(-l) = -(max(l, 0) - l value + log1p(exp(-|l|)))."""
        value = _as_tensor(value, "value", "Bernoulli.log_prob")
        shape, (lg, v) = _broadcast_all("Bernoulli.log_prob", logits=self.logits, value=value)
        return lg * v - _softplus(lg)

    def entropy(self):
        lg = self.logits
        return _softplus(lg) - lg * self.probs

    def __repr__(self):
        return f"Bernoulli(batch_shape={self._batch_shape})"


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    """torch's form: p (softplus(-lq) - softplus(-lp)) + (1 - p) (softplus(lq) - softplus(lp)); a term is +inf
    where q puts 0 on an outcome p does not, and 0 where p puts 0 on it."""
    pp, qp = p.probs, q.probs
    t1 = pp * (_softplus(-q.logits) - _softplus(-p.logits))
    t1 = _C.where(pp == 0, 0.0, _C.where(qp == 0, float("inf"), t1))
    t2 = (1.0 - pp) * (_softplus(q.logits) - _softplus(p.logits))
    t2 = _C.where(pp == 1, 0.0, _C.where(qp == 1, float("inf"), t2))
    return t1 + t2
