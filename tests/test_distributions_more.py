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


# ---- OneHotCategorical ----

def _log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def test_one_hot_categorical_sample_log_prob_entropy_and_straight_through():
    lg = R.standard_normal((3, 5)) * 1.5
    p = np.exp(_log_softmax(lg))
    v = np.eye(5)[R.integers(0, 5, 3)]
    check(lambda l: D.OneHotCategorical(logits=l).log_prob(T(v)), lambda l: (_log_softmax(l) * v).sum(-1), [lg])
    check(lambda l: D.OneHotCategorical(logits=l).entropy(), lambda l: -(np.exp(_log_softmax(l)) *
                                                                         _log_softmax(l)).sum(-1), [lg])
    d = D.OneHotCategorical(probs=T(p * 3))               # probs are normalised
    assert d.batch_shape == (3,) and d.event_shape == (5,)
    np.testing.assert_allclose(d.mean.numpy(), p, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(d.variance.numpy(), p * (1 - p), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(d.mode.numpy(), np.eye(5)[p.argmax(-1)])
    tlgpu.manual_seed(8)
    s = d.sample((N,))
    assert s.dtype == np.float32 and s.shape == (N, 3, 5) and not s.requires_grad
    sn = s.numpy()
    assert (sn.sum(-1) == 1).all() and set(np.unique(sn)) <= {0.0, 1.0}
    _moments_ok(sn, p, p * (1 - p))
    tlgpu.manual_seed(8)
    np.testing.assert_array_equal(d.sample((N,)).numpy(), sn)
    np.testing.assert_allclose(d.log_prob(s[:4]).numpy(), np.log((sn[:4] * p).sum(-1)), rtol=1e-4, atol=1e-5)
    masked = T([[0.0, -np.inf, 1.0]])
    m = D.OneHotCategorical(logits=masked)
    assert np.isfinite(m.log_prob(T([[1.0, 0.0, 0.0]])).numpy()).all() and np.isfinite(m.entropy().numpy()).all()
    assert (m.sample((500,)).numpy()[..., 1] == 0).all()

    lt = T(lg, requires_grad=True)
    st = D.OneHotCategoricalStraightThrough(logits=lt)
    assert st.has_rsample and not D.OneHotCategorical(logits=lt).has_rsample
    y = st.rsample()
    assert y.requires_grad and y.shape == (3, 5)
    np.testing.assert_allclose(y.numpy(), np.eye(5)[y.numpy().argmax(-1)], atol=1e-6)   # value: the one-hot
    w = R.standard_normal((3, 5))
    (y * T(w)).sum().backward()                        # gradient: that of the probs, softmax's jacobian
    np.testing.assert_allclose(lt.grad.numpy(), p * (w - (w * p).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError, match="exactly one of probs or logits"):
        D.OneHotCategorical()
    with pytest.raises(ValueError, match="not one-hot over 5"):
        d.log_prob(T(np.eye(4)))


# ---- Laplace ----

def test_laplace_log_prob_entropy_cdf_moments_and_rsample():
    loc, scale = R.standard_normal(4), R.uniform(0.5, 2, 4)
    x = R.standard_normal((3, 4)) * 2
    check(lambda m, b: D.Laplace(m, b).log_prob(T(x)), lambda m, b: -np.log(2 * b) - np.abs(x - m) / b,
          [loc, scale])
    check(lambda b: D.Laplace(T(loc), b).entropy(), lambda b: 1 + np.log(2 * b), [scale])
    check(lambda m, b: D.Laplace(m, b).cdf(T(x)),
          lambda m, b: np.where(x < m, 0.5 * np.exp((x - m) / b), 1 - 0.5 * np.exp(-(x - m) / b)), [loc, scale])
    d = D.Laplace(T(loc), T(scale))
    q = R.uniform(0.05, 0.95, 4)
    np.testing.assert_allclose(d.icdf(T(q)).numpy(), loc - scale * np.sign(q - 0.5) * np.log1p(-2 * np.abs(q - 0.5)),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.variance.numpy(), 2 * scale ** 2, rtol=1e-5)
    np.testing.assert_allclose(d.stddev.numpy(), np.sqrt(2) * scale, rtol=1e-5)
    tlgpu.manual_seed(12)
    s = d.sample((N,)).numpy()
    _moments_ok(s, loc, 2 * scale ** 2)
    assert np.all(np.abs(np.median(s, 0) - loc) < 5 * scale / np.sqrt(N))
    tlgpu.manual_seed(12)
    np.testing.assert_array_equal(d.sample((N,)).numpy(), s)
    tlgpu.manual_seed(12)                              # the draw is the inverse cdf of the device's uniforms
    u = np.maximum(tlgpu.rand(N, 4).numpy().astype(np.float64) * 2 - 1, np.finfo(np.float32).eps - 1)
    np.testing.assert_allclose(s, loc - scale * np.sign(u) * np.log1p(-np.abs(u)), rtol=1e-4, atol=1e-4)
    m, b = T(loc, requires_grad=True), T(scale, requires_grad=True)
    y = D.Laplace(m, b).rsample((3,))
    w = R.standard_normal((3, 4))
    (y * T(w)).sum().backward()
    np.testing.assert_allclose(m.grad.numpy(), w.sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), (w * (y.numpy() - loc) / scale).sum(0), rtol=1e-3, atol=1e-4)
    with pytest.raises(ValueError, match="Laplace: expected scale > 0"):
        D.Laplace(0.0, T([1.0, -1.0]), validate_args=True)


# ---- TransformedDistribution and transforms ----

def _normal_lp(x, m, s):
    return -((x - m) ** 2) / (2 * s ** 2) - np.log(s) - 0.5 * np.log(2 * np.pi)


def test_tanh_squashed_normal_log_prob_near_the_bounds_and_with_the_cache():
    mu, sd = R.standard_normal(6) * 0.5, R.uniform(0.3, 1.5, 6)
    y = np.array([0.3, -0.7, 0.99, -0.999, 0.99999, -0.99999])  # |y| -> 1: atanh large, 1 - y^2 small
    y32 = np.float32(y).astype(np.float64)
    want = _normal_lp(np.arctanh(y32), mu, sd) - np.log1p(-y32 ** 2)
    d = D.TransformedDistribution(D.Normal(T(mu), T(sd)), [D.transforms.TanhTransform()])
    assert d.batch_shape == (6,) and d.event_shape == () and d.has_rsample
    np.testing.assert_allclose(d.log_prob(T(y)).numpy(), want, rtol=2e-3, atol=2e-3)
    check(lambda m, s: D.TransformedDistribution(D.Normal(m, s), D.transforms.TanhTransform()).log_prob(T(y[:3])),
          lambda m, s: _normal_lp(np.arctanh(y32[:3]), m, s) - np.log1p(-y32[:3] ** 2), [mu[:3], sd[:3]])

    # SAC: rsample then log_prob of that action; the cache hands back the pre-tanh value (no atanh of |a| = 1)
    m, s = T(mu * 0 + 12.0, requires_grad=True), T(sd)
    sac = D.TransformedDistribution(D.Normal(m, s), [D.transforms.TanhTransform(cache_size=1)])
    tlgpu.manual_seed(5)
    a = sac.rsample()
    tlgpu.manual_seed(5)
    u = D.Normal(T(mu * 0 + 12.0), T(sd)).sample().numpy().astype(np.float64)
    assert (a.numpy() >= np.float32(1 - 6e-8)).all()  # tanh saturated in float32: atanh(a) cannot give u back
    lp = sac.log_prob(a)
    ref = _normal_lp(u, 12.0, sd) - 2 * (np.log(2) - u - _sp(-2 * u))
    np.testing.assert_allclose(lp.numpy(), ref, rtol=1e-4, atol=1e-4)
    lp.sum().backward()     # d/dmu: the Normal term's is 0 (u - mu = eps sd), the jacobian's 2 - 4 sigmoid(-2u)
    np.testing.assert_allclose(m.grad.numpy(), 2 - 4 * _sig(-2 * u), rtol=1e-4, atol=1e-4)
    nocache = D.TransformedDistribution(D.Normal(T(mu * 0 + 12.0), T(sd)), [D.transforms.TanhTransform()])
    far = nocache.log_prob(a).numpy()                 # through atanh(a) instead: far off (or inf at a = 1)
    assert not np.isfinite(far).all() or np.abs(far - ref).min() > 1.0
    assert not np.isfinite(nocache.log_prob(T([1.0] * 6)).numpy()).any()   # torch's unclamped atanh
    tlgpu.manual_seed(1)
    big = D.TransformedDistribution(D.Normal(T(np.full(N, 0.4)), 0.8), D.transforms.TanhTransform()).sample()
    ref = np.tanh(0.4 + 0.8 * np.random.default_rng(0).standard_normal(400000))
    _moments_ok(big.numpy(), ref.mean(), ref.var())


def test_affine_exp_sigmoid_transforms():
    tr = D.transforms
    mu, sd = R.standard_normal(4), R.uniform(0.5, 1.5, 4)
    loc, scale = R.standard_normal(4), -R.uniform(0.5, 2, 4)
    y = R.standard_normal(4) * 2
    check(lambda m, s: D.TransformedDistribution(D.Normal(m, s), [tr.AffineTransform(T(loc), T(scale))]).log_prob(
        T(y)), lambda m, s: _normal_lp((y - loc) / scale, m, s) - np.log(np.abs(scale)), [mu, sd])
    d = D.TransformedDistribution(D.Normal(T(mu), T(sd)), [tr.AffineTransform(1.5, 3.0), tr.ExpTransform()])
    z = R.uniform(0.5, 30, 4)
    np.testing.assert_allclose(d.log_prob(T(z)).numpy(), _normal_lp((np.log(z) - 1.5) / 3, mu, sd) - np.log(3) -
                               np.log(z), rtol=1e-4, atol=1e-5)
    q = R.uniform(0.05, 0.95, 4)
    d = D.TransformedDistribution(D.Normal(T(mu), T(sd)), tr.SigmoidTransform())
    np.testing.assert_allclose(d.log_prob(T(q)).numpy(), _normal_lp(np.log(q / (1 - q)), mu, sd) -
                               np.log(q * (1 - q)), rtol=1e-4, atol=1e-5)
    tlgpu.manual_seed(6)
    lg = D.TransformedDistribution(D.Normal(T(np.full((N, 2), 0.2)), 0.5), [tr.ExpTransform()]).sample().numpy()
    _moments_ok(lg, np.exp(0.2 + 0.125), (np.exp(0.25) - 1) * np.exp(0.4 + 0.25))   # log-normal moments
    t = tr.AffineTransform(2.0, 4.0)
    x = T([1.0, -3.0])
    np.testing.assert_allclose(t.inv(t(x)).numpy(), x.numpy())
    np.testing.assert_allclose(t.inv.log_abs_det_jacobian(t(x), x).numpy(), -np.log(4.0) * np.ones(2), rtol=1e-6)
    ind = D.TransformedDistribution(D.Independent(D.Normal(T(np.zeros((2, 3))), 1.0), 1), tr.TanhTransform())
    assert ind.batch_shape == (2,) and ind.event_shape == (3,) and ind.log_prob(T(np.zeros((2, 3)))).shape == (2,)
    with pytest.raises(ValueError, match="cache_size must be 0 or 1"):
        tr.TanhTransform(cache_size=2)
    with pytest.raises(ValueError, match="Transform or a list of Transforms"):
        D.TransformedDistribution(D.Normal(0.0, 1.0), [np.tanh])


# ---- KL: OneHotCategorical, Laplace ----

def test_kl_one_hot_categorical_and_laplace_vs_numpy():
    l1, l2 = R.standard_normal((2, 4)), R.standard_normal((2, 4))
    check(lambda a, b: D.kl_divergence(D.OneHotCategorical(logits=a), D.OneHotCategorical(logits=b)),
          lambda a, b: (np.exp(_log_softmax(a)) * (_log_softmax(a) - _log_softmax(b))).sum(-1), [l1, l2])
    m1, m2, b1, b2 = R.standard_normal(5), R.standard_normal(5), R.uniform(0.5, 2, 5), R.uniform(0.5, 2, 5)

    def kl_l(m1, b1, m2, b2):                          # integral of p log(p/q), in closed form
        d = np.abs(m1 - m2)
        return np.log(b2 / b1) + d / b2 + b1 / b2 * np.exp(-d / b1) - 1
    check(lambda a, b, c, e: D.kl_divergence(D.Laplace(a, b), D.Laplace(c, e)), kl_l, [m1, b1, m2, b2])
    xs = np.linspace(-40, 40, 400001)[:, None]          # the same KL by quadrature, as a check on the formula
    lp = -np.log(2 * b1) - np.abs(xs - m1) / b1
    lq = -np.log(2 * b2) - np.abs(xs - m2) / b2
    np.testing.assert_allclose((np.exp(lp) * (lp - lq)).sum(0) * (xs[1, 0] - xs[0, 0]), kl_l(m1, b1, m2, b2),
                               rtol=1e-4, atol=1e-6)
    with pytest.raises(NotImplementedError, match="Laplace and q type Normal"):
        D.kl_divergence(D.Laplace(0.0, 1.0), D.Normal(0.0, 1.0))


def test_parameters_to_vector_and_back():
    from tlgpu import nn
    from tlgpu.nn.utils import parameters_to_vector, vector_to_parameters
    m = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    ps = list(m.parameters())
    v = parameters_to_vector(ps)
    want = np.concatenate([p.numpy().reshape(-1) for p in ps])
    assert v.shape == (want.size,)
    np.testing.assert_array_equal(v.numpy(), want)
    new = R.standard_normal(want.size).astype(np.float32)
    vector_to_parameters(T(new), ps)
    np.testing.assert_array_equal(parameters_to_vector(m.parameters()).numpy(), new)
    assert all(p.requires_grad for p in m.parameters())
    with pytest.raises(ValueError, match="vec has 3 elements"):
        vector_to_parameters(T([1.0, 2.0, 3.0]), ps)
    with pytest.raises(TypeError, match="1-d Tensor"):
        vector_to_parameters(new, ps)
