"""The torch.distributions RL ports call beyond Categorical/Normal, against float64 numpy: Bernoulli, Independent,
Uniform, OneHotCategorical(StraightThrough), TransformedDistribution with the transforms (the SAC tanh-squashed
Gaussian), Laplace and their kl_divergence pairs: values and gradients (gradcheck.check), sampling moments over
20000 draws (repeatable under manual_seed), rsample gradients, shapes and errors; and nn.utils'
parameters_to_vector / vector_to_parameters."""
import math

import numpy as np
import pytest

import tlgpu
import tlgpu.distributions as D
from gradcheck import check

R = np.random.default_rng(23)
N = 20000


def T(a, **kw):
    return tlgpu.tensor(np.asarray(a, dtype=np.float32), **kw)


def _sp(x):
    return np.logaddexp(0.0, x)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def _moments_ok(s, mean, var, k=5.0):
    """sample mean within k standard errors; sample variance within k of its standard error (4th moment bound)."""
    s = s.astype(np.float64)
    assert np.all(np.abs(s.mean(0) - mean) < k * np.sqrt(var / len(s)) + 1e-6), (s.mean(0), mean)
    assert np.all(np.abs(s.var(0) - var) < k * np.sqrt(np.mean((s - s.mean(0)) ** 4, 0) / len(s)) + 1e-6), \
        (s.var(0), var)


# ---- Bernoulli ----

def test_bernoulli_log_prob_entropy_moments_vs_numpy_with_gradients():
    lg = R.standard_normal((3, 4)) * 2
    lg[0, :2] = [40.0, -40.0]                      # saturated logits stay finite (stable BCE form)
    v = R.integers(0, 2, (3, 4)).astype(np.float64)
    vt = T(v)
    lp = check(lambda l: D.Bernoulli(logits=l).log_prob(vt), lambda l: v * l - _sp(l), [lg])
    assert np.isfinite(lp.numpy()).all()
    check(lambda l: D.Bernoulli(logits=l).entropy(), lambda l: _sp(l) - l * _sig(l), [lg])
    p = R.uniform(0.05, 0.95, (2, 5))
    v = R.integers(0, 2, (2, 5)).astype(np.float64)
    check(lambda q: D.Bernoulli(probs=q).log_prob(T(v)), lambda q: v * np.log(q) + (1 - v) * np.log1p(-q), [p])
    check(lambda q: D.Bernoulli(probs=q).entropy(), lambda q: -(q * np.log(q) + (1 - q) * np.log1p(-q)), [p])
    d = D.Bernoulli(probs=T(p))
    assert d.batch_shape == (2, 5) and d.event_shape == ()
    np.testing.assert_allclose(d.mean.numpy(), p, rtol=1e-6)
    np.testing.assert_allclose(d.variance.numpy(), p * (1 - p), rtol=1e-5)
    np.testing.assert_allclose(d.stddev.numpy(), np.sqrt(p * (1 - p)), rtol=1e-5)
    np.testing.assert_allclose(d.logits.numpy(), np.log(p / (1 - p)), rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(d.mode.numpy(), (p > 0.5).astype(np.float32))
    assert np.isnan(D.Bernoulli(probs=T([0.5])).mode.numpy()).all()
    tlgpu.manual_seed(7)
    s = d.sample((N,))
    assert s.dtype == np.float32 and s.shape == (N, 2, 5) and not s.requires_grad
    sn = s.numpy()
    assert set(np.unique(sn)) <= {0.0, 1.0}
    _moments_ok(sn, p, p * (1 - p))
    tlgpu.manual_seed(7)
    np.testing.assert_array_equal(d.sample((N,)).numpy(), sn)
    assert d.expand((3, 2, 5)).batch_shape == (3, 2, 5)
    assert D.Bernoulli(logits=T(lg)).log_prob(T(np.ones(4))).shape == (3, 4)   # value broadcasts


def test_bernoulli_errors():
    with pytest.raises(ValueError, match="exactly one of probs or logits"):
        D.Bernoulli()
    with pytest.raises(ValueError, match="exactly one"):
        D.Bernoulli(probs=T([0.5]), logits=T([0.0]))
    with pytest.raises(ValueError, match=r"Bernoulli: expected probs in the interval \[0, 1\]"):
        D.Bernoulli(probs=T([0.5, 1.5]), validate_args=True)
    D.Bernoulli(probs=T([0.5, 1.5]))               # the default does not read the values back
    with pytest.raises(TypeError, match="float32"):
        D.Bernoulli(logits=tlgpu.zeros(3, dtype=np.int32))


# ---- Independent ----

def test_independent_shapes_sums_and_delegation():
    loc, scale = R.standard_normal((2, 3, 4)), R.uniform(0.5, 2, (2, 3, 4))
    x = R.standard_normal((2, 3, 4))
    base_lp = lambda m, s: -((x - m) ** 2) / (2 * s ** 2) - np.log(s) - 0.5 * np.log(2 * np.pi)  # noqa: E731
    check(lambda m, s: D.Independent(D.Normal(m, s), 2).log_prob(T(x)), lambda m, s: base_lp(m, s).sum((1, 2)),
          [loc, scale])
    check(lambda s: D.Independent(D.Normal(T(loc), s), 1).entropy(),
          lambda s: (0.5 + 0.5 * np.log(2 * np.pi) + np.log(s)).sum(-1), [scale])
    d = D.Independent(D.Normal(T(loc), T(scale)), 1)
    assert d.batch_shape == (2, 3) and d.event_shape == (4,) and d.has_rsample
    assert D.Independent(D.Normal(T(loc), T(scale)), 0).batch_shape == (2, 3, 4)
    assert D.Independent(D.Normal(T(loc), T(scale)), 3).event_shape == (2, 3, 4)
    b = D.Independent(D.Bernoulli(logits=T(loc)), 2)
    assert b.batch_shape == (2,) and b.event_shape == (3, 4) and not b.has_rsample
    np.testing.assert_allclose(d.mean.numpy(), loc, rtol=1e-6)
    np.testing.assert_allclose(d.variance.numpy(), scale ** 2, rtol=1e-5)
    np.testing.assert_allclose(d.stddev.numpy(), scale, rtol=1e-6)
    tlgpu.manual_seed(4)
    s = d.sample((5,))
    tlgpu.manual_seed(4)
    np.testing.assert_array_equal(D.Normal(T(loc), T(scale)).sample((5,)).numpy(), s.numpy())
    assert s.shape == (5, 2, 3, 4) and d.log_prob(s).shape == (5, 2, 3)
    with pytest.raises(NotImplementedError, match="rsample"):
        b.rsample()
    assert d.expand((7, 2, 3)).batch_shape == (7, 2, 3) and d.expand((7, 2, 3)).event_shape == (4,)
    with pytest.raises(ValueError, match=r"reinterpreted_batch_ndims <= len\(base_distribution.batch_shape\), "
                                         r"actual 4 vs 3"):
        D.Independent(D.Normal(T(loc), T(scale)), 4)


# ---- Uniform ----

def test_uniform_log_prob_cdf_entropy_moments_and_rsample():
    lo = R.standard_normal(5)
    hi = lo + R.uniform(0.5, 3, 5)
    x = np.stack([lo + (hi - lo) * R.uniform(0.05, 0.95, 5), lo - 0.3, hi])      # high itself is outside
    d = D.Uniform(T(lo), T(hi))
    lp = d.log_prob(T(x)).numpy()
    np.testing.assert_allclose(lp[0], -np.log(hi - lo), rtol=1e-5)
    assert (lp[1:] == -np.inf).all()
    check(lambda a, b: D.Uniform(a, b).log_prob(T(x[0])), lambda a, b: -np.log(b - a), [lo, hi])
    check(lambda a, b: D.Uniform(a, b).entropy(), lambda a, b: np.log(b - a), [lo, hi])
    xc = x[:2]                                       # away from the kink at high
    check(lambda a, b: D.Uniform(a, b).cdf(T(xc)), lambda a, b: np.clip((xc - a) / (b - a), 0, 1), [lo, hi])
    q = R.uniform(0, 1, 5)
    np.testing.assert_allclose(d.icdf(T(q)).numpy(), lo + q * (hi - lo), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d.mean.numpy(), (lo + hi) / 2, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d.variance.numpy(), (hi - lo) ** 2 / 12, rtol=1e-5)
    np.testing.assert_allclose(d.stddev.numpy(), (hi - lo) / math.sqrt(12), rtol=1e-5)
    assert np.isnan(d.mode.numpy()).all()
    tlgpu.manual_seed(11)
    s = d.sample((N,)).numpy()
    assert s.shape == (N, 5) and (s >= lo.astype(np.float32) - 1e-6).all() and (s < hi.astype(np.float32)).all()
    _moments_ok(s, (lo + hi) / 2, (hi - lo) ** 2 / 12)
    tlgpu.manual_seed(11)
    np.testing.assert_array_equal(d.sample((N,)).numpy(), s)
    a, b = T(lo, requires_grad=True), T(hi, requires_grad=True)
    y = D.Uniform(a, b).rsample((3,))
    w = R.standard_normal((3, 5))
    (y * T(w)).sum().backward()
    u = (y.numpy() - lo) / (hi - lo)               # dy/dlow = 1 - u, dy/dhigh = u
    np.testing.assert_allclose(a.grad.numpy(), (w * (1 - u)).sum(0), rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(b.grad.numpy(), (w * u).sum(0), rtol=1e-3, atol=1e-4)
    assert D.Uniform(0.0, T(hi)).batch_shape == (5,) and D.Uniform(0.0, 1.0).sample((4,)).shape == (4,)


def test_uniform_errors():
    with pytest.raises(ValueError, match=r"Uniform: low \(3,\) and high \(4,\) cannot be broadcast"):
        D.Uniform(tlgpu.zeros(3), tlgpu.ones(4))
    with pytest.raises(ValueError, match="Uniform: expected low < high"):
        D.Uniform(T([0.0, 1.0]), T([1.0, 1.0]), validate_args=True)


# ---- kl_divergence ----

def test_kl_bernoulli_uniform_independent_vs_numpy():
    l1, l2 = R.standard_normal((2, 3)), R.standard_normal((2, 3))

    def kl_b(a, b):
        p, q = _sig(a), _sig(b)
        return p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))
    check(lambda a, b: D.kl_divergence(D.Bernoulli(logits=a), D.Bernoulli(logits=b)), kl_b, [l1, l2])
    p0 = D.Bernoulli(probs=T([0.0, 1.0, 0.3, 0.3]))
    np.testing.assert_allclose(D.kl_divergence(p0, D.Bernoulli(probs=T([0.4, 0.4, 0.0, 1.0]))).numpy(),
                               [-np.log(0.6), -np.log(0.4), np.inf, np.inf], rtol=1e-5)
    lo1, w1 = R.standard_normal(4), R.uniform(0.5, 1, 4)
    lo2 = lo1 - R.uniform(0.1, 1, 4)                 # q's support strictly contains p's
    w2 = (lo1 - lo2) + w1 + R.uniform(0.1, 1, 4)
    kl = D.kl_divergence(D.Uniform(T(lo1), T(lo1 + w1)), D.Uniform(T(lo2), T(lo2 + w2))).numpy()
    np.testing.assert_allclose(kl, np.log(w2 / w1), rtol=1e-5)
    kl = D.kl_divergence(D.Uniform(T(lo2), T(lo2 + w2)), D.Uniform(T(lo1), T(lo1 + w1))).numpy()
    assert (kl == np.inf).all()
    m1, m2, s1, s2 = (R.standard_normal((2, 3)), R.standard_normal((2, 3)), R.uniform(0.5, 2, (2, 3)),
                      R.uniform(0.5, 2, (2, 3)))
    kl = D.kl_divergence(D.Independent(D.Normal(T(m1), T(s1)), 1), D.Independent(D.Normal(T(m2), T(s2)), 1))
    want = (np.log(s2 / s1) + (s1 ** 2 + (m1 - m2) ** 2) / (2 * s2 ** 2) - 0.5).sum(-1)
    assert kl.shape == (2,)
    np.testing.assert_allclose(kl.numpy(), want, rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="reinterpreted_batch_ndims"):
        D.kl_divergence(D.Independent(D.Normal(T(m1), T(s1)), 1), D.Independent(D.Normal(T(m2), T(s2)), 2))
    with pytest.raises(NotImplementedError, match="Bernoulli and q type Uniform"):
        D.kl_divergence(p0, D.Uniform(0.0, 1.0))
