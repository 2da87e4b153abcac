"""Gamma, Beta, Dirichlet (tlgpu/distributions/gamma.py, beta.py, dirichlet.py) and distributions.constraints:
log_prob, entropy, mean / variance / mode and the KL pairs against float64 formulas (math.lgamma and the float64
digamma of test_special_ops.py) on random parameters; log_prob's gradients; sampling (Marsaglia-Tsang on the
device) against the moments over 40000 draws with a fixed seed, tolerances from the sample size, and against the
closed-form CDFs of Gamma(1) and Gamma(2); rsample's refusal; constraints' masks."""
import math

import numpy as np
import pytest

import tlgpu
import tlgpu.distributions as D
from tlgpu.distributions import constraints as C
from test_special_ops import digamma64, trigamma64

R = np.random.default_rng(31)
N = 40000
lgam = np.vectorize(math.lgamma, otypes=[np.float64])
psi = np.vectorize(digamma64, otypes=[np.float64])


def T(a, **kw):
    return tlgpu.tensor(np.asarray(a, dtype=np.float32), **kw)


def f32(a):
    return np.asarray(a, dtype=np.float32)


def pos(n, lo=-2.0, hi=3.0):
    return f32(np.exp(R.uniform(lo, hi, n)))


def close(t, want, rtol=2e-5, atol=2e-5):
    np.testing.assert_allclose(t.numpy().astype(np.float64), want, rtol=rtol, atol=atol)


def moments_ok(s, mean, var, k=5.0):
    """sample mean within k standard errors; sample variance within k of its standard error (4th moment)."""
    s = s.astype(np.float64)
    assert np.all(np.abs(s.mean(0) - mean) < k * np.sqrt(var / len(s)) + 1e-7), (s.mean(0), mean)
    assert np.all(np.abs(s.var(0) - var) < k * np.sqrt(np.mean((s - s.mean(0)) ** 4, 0) / len(s)) + 1e-7), \
        (s.var(0), var)


def test_gamma_formulas():
    a, b, a2, b2 = pos(64), pos(64), pos(64), pos(64)
    x = f32(R.gamma(a, 1 / b) + 1e-3)
    A, B, X = (v.astype(np.float64) for v in (a, b, x))
    g = D.Gamma(T(a), T(b))
    close(g.log_prob(T(x)), A * np.log(B) + (A - 1) * np.log(X) - B * X - lgam(A), 2e-5, 5e-5)
    close(g.entropy(), A - np.log(B) + lgam(A) + (1 - A) * psi(A), 2e-5, 5e-5)
    close(g.mean, A / B, 1e-6, 0)
    close(g.variance, A / B ** 2, 2e-6, 0)
    close(g.mode, np.maximum((A - 1) / B, 0), 1e-6, 0)
    A2, B2 = a2.astype(np.float64), b2.astype(np.float64)
    kl = A2 * np.log(B / B2) + lgam(A2) - lgam(A) + (A - A2) * psi(A) + (B2 - B) * A / B
    close(D.kl_divergence(g, D.Gamma(T(a2), T(b2))), kl, 2e-5, 1e-4)
    close(D.kl_divergence(g, g), np.zeros(64), 0, 2e-5)
    assert g.batch_shape == (64,) and g.event_shape == () and not g.has_rsample
    assert D.Gamma(2.0, T(b)).expand((3, 64)).batch_shape == (3, 64)


def test_gamma_log_prob_gradients():
    a, b = pos(32, -1, 2), pos(32, -1, 2)
    x = f32(R.gamma(a, 1 / b) + 1e-2)
    ta, tb = T(a, requires_grad=True), T(b, requires_grad=True)
    D.Gamma(ta, tb).log_prob(T(x)).sum().backward()
    A, B, X = (v.astype(np.float64) for v in (a, b, x))
    close(ta.grad, np.log(B) + np.log(X) - psi(A), 1e-4, 1e-4)
    close(tb.grad, A / B - X, 1e-4, 1e-4)
    ta = T(a, requires_grad=True)
    D.Gamma(ta, 1.0).entropy().sum().backward()                      # 1 + (1 - a) trigamma(a)
    close(ta.grad, 1 + (1 - A) * np.vectorize(trigamma64)(A), 2e-5, 2e-5)


@pytest.mark.parametrize("conc,rate", [(0.1, 1.0), (0.6, 2.0), (1.0, 0.5), (3.5, 1.0), (40.0, 4.0)])
def test_gamma_sample_moments(conc, rate):
    """Both Marsaglia-Tsang paths: boosted (concentration < 1) and direct; positive, finite."""
    tlgpu.manual_seed(5)
    s = D.Gamma(T([conc, conc * 2]), T([rate, rate])).sample((N,)).numpy()
    assert s.shape == (N, 2) and np.all(s > 0) and np.all(np.isfinite(s))
    c = np.array([conc, 2 * conc])
    moments_ok(s, c / rate, c / rate ** 2)


def test_gamma_sample_distribution():
    """Kolmogorov-Smirnov distance to Gamma(1) (1 - e^-x) and Gamma(2) (1 - e^-x (1 + x)) CDFs: within 1.63 / sqrt(N)
    (the 1% level)."""
    tlgpu.manual_seed(11)
    s = D.Gamma(T([1.0, 2.0]), 1.0).sample((N,)).numpy().astype(np.float64)
    grid = (np.arange(N) + 1) / N
    for j, cdf in enumerate((lambda x: 1 - np.exp(-x), lambda x: 1 - np.exp(-x) * (1 + x))):
        v = np.sort(s[:, j])
        ks = max(np.max(grid - cdf(v)), np.max(cdf(v) - (grid - 1 / N)))
        assert ks < 1.63 / math.sqrt(N), (j, ks)
    tlgpu.manual_seed(11)
    again = D.Gamma(T([1.0, 2.0]), 1.0).sample((N,)).numpy()
    np.testing.assert_array_equal(again, s.astype(np.float32))


def test_rsample_refused():
    for d in (D.Gamma(2.0, 1.0), D.Beta(2.0, 3.0), D.Dirichlet(T([1.0, 2.0]))):
        with pytest.raises(NotImplementedError, match="reparameterised"):
            d.rsample()
        assert not d.has_rsample
    ta = T([2.0], requires_grad=True)
    assert not D.Gamma(ta, 1.0).sample((3,)).requires_grad


def test_beta_formulas_and_samples():
    a, b, a2, b2 = pos(48, -1.5, 2.5), pos(48, -1.5, 2.5), pos(48, -1.5, 2.5), pos(48, -1.5, 2.5)
    x = f32(R.uniform(0.01, 0.99, 48))
    A, B, X, A2, B2 = (v.astype(np.float64) for v in (a, b, x, a2, b2))
    d = D.Beta(T(a), T(b))
    lbeta = lgam(A) + lgam(B) - lgam(A + B)
    close(d.log_prob(T(x)), (A - 1) * np.log(X) + (B - 1) * np.log1p(-X) - lbeta, 2e-5, 5e-5)
    S = A + B
    close(d.entropy(), lbeta - (A - 1) * psi(A) - (B - 1) * psi(B) + (S - 2) * psi(S), 2e-5, 5e-5)
    close(d.mean, A / S, 1e-6, 0)
    close(d.variance, A * B / (S ** 2 * (S + 1)), 2e-6, 0)
    m1, m0 = np.maximum(A - 1, 0), np.maximum(B - 1, 0)
    with np.errstate(invalid="ignore"):
        close(d.mode, np.where((A < 1) & (B < 1), 1.0, m1 / (m1 + m0)), 1e-6, 0)
    S2 = A2 + B2
    kl = (lgam(A2) + lgam(B2) + lgam(S) - lgam(A) - lgam(B) - lgam(S2) + (A - A2) * psi(A) + (B - B2) * psi(B)
          + (S2 - S) * psi(S))
    close(D.kl_divergence(d, D.Beta(T(a2), T(b2))), kl, 2e-5, 1e-4)
    close(D.kl_divergence(d, d), np.zeros(48), 0, 2e-5)
    tlgpu.manual_seed(3)
    c1, c0 = np.array([0.4, 2.0, 5.0]), np.array([0.7, 3.0, 1.5])
    s = D.Beta(T(c1), T(c0)).sample((N,)).numpy()
    assert np.all((s > 0) & (s < 1))
    moments_ok(s, c1 / (c1 + c0), c1 * c0 / ((c1 + c0) ** 2 * (c1 + c0 + 1)))


def test_dirichlet_formulas_and_samples():
    c, c2 = pos(60, -1.5, 2.5).reshape(12, 5), pos(60, -1.5, 2.5).reshape(12, 5)
    v = f32(R.dirichlet(np.ones(5), 12))
    Cc, C2, V = (t.astype(np.float64) for t in (c, c2, v))
    d = D.Dirichlet(T(c))
    assert d.batch_shape == (12,) and d.event_shape == (5,)
    S = Cc.sum(-1)
    close(d.log_prob(T(v)), ((Cc - 1) * np.log(V)).sum(-1) + lgam(S) - lgam(Cc).sum(-1), 2e-5, 1e-4)
    close(d.entropy(), lgam(Cc).sum(-1) - lgam(S) - (5 - S) * psi(S) - ((Cc - 1) * psi(Cc)).sum(-1), 2e-5, 1e-4)
    close(d.mean, Cc / S[:, None], 1e-6, 0)
    close(d.variance, Cc * (S[:, None] - Cc) / (S[:, None] ** 2 * (S[:, None] + 1)), 2e-6, 0)
    S2 = C2.sum(-1)
    kl = lgam(S) - lgam(S2) - (lgam(Cc) - lgam(C2)).sum(-1) + ((Cc - C2) * (psi(Cc) - psi(S)[:, None])).sum(-1)
    close(D.kl_divergence(d, D.Dirichlet(T(c2))), kl, 2e-5, 1e-4)
    mode = D.Dirichlet(T([[3.0, 2.0, 1.0], [0.5, 0.2, 0.9]])).mode.numpy()
    np.testing.assert_allclose(mode, [[2 / 3, 1 / 3, 0], [1, 0, 0]], rtol=1e-6)   # all < 1: torch's first vertex
    tlgpu.manual_seed(9)
    cc = np.array([0.3, 1.0, 4.0])
    s = D.Dirichlet(T(cc)).sample((N,)).numpy()
    np.testing.assert_allclose(s.sum(-1), 1.0, atol=1e-5)
    s0 = cc.sum()
    moments_ok(s, cc / s0, cc * (s0 - cc) / (s0 ** 2 * (s0 + 1)))
    assert D.Dirichlet(T(cc)).expand((4,)).sample((2,)).shape == (2, 4, 3)
    with pytest.raises(ValueError, match="one-dimensional"):
        D.Dirichlet(2.0)


def test_constraints():
    x = T([-1.0, 0.0, 0.5, 1.0, 2.0, float("nan"), 3.0])
    np.testing.assert_array_equal(C.real.check(x).numpy(), [1, 1, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(C.positive.check(x).numpy(), [0, 0, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(C.nonnegative.check(x).numpy(), [0, 1, 1, 1, 1, 0, 1])
    np.testing.assert_array_equal(C.unit_interval.check(x).numpy(), [0, 1, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(C.interval(-1.0, 0.5).check(x).numpy(), [1, 1, 1, 0, 0, 0, 0])
    np.testing.assert_array_equal(C.greater_than(0.5).check(x).numpy(), [0, 0, 0, 1, 1, 0, 1])
    np.testing.assert_array_equal(C.integer_interval(0, 2).check(x).numpy(), [0, 1, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(C.boolean.check(x).numpy(), [0, 1, 0, 1, 0, 0, 0])
    p = T([[0.2, 0.8], [0.5, 0.6], [-0.1, 1.1], [1.0, 0.0]])
    got = C.simplex.check(p)
    assert got.dtype == tlgpu.float32 and got.shape == (4,)
    np.testing.assert_array_equal(got.numpy(), [1, 0, 0, 1])
    assert C.simplex.event_dim == 1 and C.boolean.is_discrete and not C.real.is_discrete
    assert D.Gamma.support is C.nonnegative and D.Beta.support is C.unit_interval and D.Dirichlet.support is C.simplex
    assert D.Gamma.arg_constraints["rate"] is C.positive
    np.testing.assert_array_equal(C.positive.check(np.array([1, -2])).numpy(), [1, 0])   # numpy in
    with pytest.raises(ValueError, match="concentration"):
        D.Gamma(T([1.0, -1.0]), 1.0, validate_args=True)
    with pytest.raises(ValueError, match="concentration"):
        D.Beta(T([1.0, 0.0]), 1.0, validate_args=True)
