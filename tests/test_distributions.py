"""tlgpu.distributions against float64 numpy: Categorical sample frequencies (chi-square, fixed seed),
log_prob/entropy values and their gradients wrt logits/probs, Normal sampling moments, log_prob/entropy and
the reparameterised gradient, batch shapes like torch, and sampling with no host wait."""
import math

import numpy as np
import pytest

import tlgpu
from tlgpu.distributions import Categorical, Normal
from gradcheck import check

R = np.random.default_rng(11)


def _log_softmax(x):
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _chi2(counts, p):
    want = counts.sum() * p
    return (((counts - want) ** 2) / want).sum()


def test_categorical_sample_frequencies_match_probs():
    tlgpu.manual_seed(1234)
    logits = R.standard_normal((3, 5)) * 1.5
    p = np.exp(_log_softmax(logits))
    d = Categorical(logits=tlgpu.tensor(logits.astype(np.float32)))
    s = d.sample((20000,))
    assert s.dtype == np.int32 and s.shape == (20000, 3) and not s.requires_grad
    s = s.numpy()
    for row in range(3):
        counts = np.bincount(s[:, row], minlength=5)
        assert counts.size == 5
        # chi-square with 4 degrees of freedom: 18.47 is its 0.999 quantile
        assert _chi2(counts, p[row]) < 18.47, (counts, p[row])
    # a different seed draws different samples; the same seed the same ones
    tlgpu.manual_seed(1234)
    assert np.array_equal(d.sample((20000,)).numpy(), s)


def test_categorical_probs_zero_and_masked_logits_never_sampled():
    tlgpu.manual_seed(5)
    probs = np.array([[0.2, 0.0, 0.8], [0.0, 1.0, 0.0]], np.float32)
    s = Categorical(probs=tlgpu.tensor(probs)).sample((5000,)).numpy()
    assert not (s[:, 0] == 1).any() and (s[:, 1] == 1).all()
    assert abs((s[:, 0] == 2).mean() - 0.8) < 0.03
    masked = tlgpu.tensor(np.array([[0.0, -np.inf, 1.0]], np.float32), requires_grad=True)
    d = Categorical(logits=masked)
    assert not (d.sample((2000,)).numpy() == 1).any()
    lp = d.log_prob(tlgpu.tensor(np.array([2], np.int32)))
    lp.sum().backward()
    assert np.isfinite(lp.numpy()).all() and np.isfinite(masked.grad.numpy()).all()
    np.testing.assert_allclose(masked.grad.numpy(), [[-1 / (1 + math.e), 0.0, 1 / (1 + math.e)]], rtol=1e-5)
    assert np.isfinite(d.entropy().numpy()).all()


def test_categorical_sample_has_no_host_wait():
    d = Categorical(logits=tlgpu.randn(4096, 6))
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    s = d.sample()
    lp = d.log_prob(s)
    assert tlgpu.stream_stats()["waits"] == 0
    assert s.shape == (4096,) and lp.shape == (4096,)


@pytest.mark.parametrize("batch,value_shape", [((4,), (4,)), ((2, 3), (2, 3)), ((3,), (5, 3)), ((), (6,))])
def test_categorical_log_prob_and_entropy_vs_numpy_with_gradients(batch, value_shape):
    K = 4
    logits = R.standard_normal(batch + (K,))
    v = R.integers(0, K, value_shape)
    vt = tlgpu.tensor(v.astype(np.int32))

    def lp_ref(lg):
        return np.take_along_axis(np.broadcast_to(_log_softmax(lg), value_shape + (K,)), v[..., None], -1)[..., 0]

    out = check(lambda lg: Categorical(logits=lg).log_prob(vt), lp_ref, [logits])
    assert out.shape == value_shape

    def ent_ref(lg):
        lp = _log_softmax(lg)
        return -(np.exp(lp) * lp).sum(-1)
    check(lambda lg: Categorical(logits=lg).entropy(), ent_ref, [logits])
    d = Categorical(logits=tlgpu.tensor(logits.astype(np.float32)))
    assert d.batch_shape == batch and d.event_shape == () and d.param_shape == batch + (K,)
    np.testing.assert_allclose(d.probs.numpy(), np.exp(_log_softmax(logits)), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(d.logits.numpy(), _log_softmax(logits), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(d.mode.numpy(), logits.argmax(-1))


def test_categorical_from_probs_normalises_and_differentiates():
    p = R.uniform(0.1, 1.0, (3, 4))
    v = np.array([0, 3, 2])
    vt = tlgpu.tensor(v.astype(np.int32))
    check(lambda q: Categorical(probs=q).log_prob(vt),
          lambda q: np.log(q / q.sum(-1, keepdims=True))[np.arange(3), v], [p])

    def ent(q):
        q = q / q.sum(-1, keepdims=True)
        return -(q * np.log(q)).sum(-1)
    check(lambda q: Categorical(probs=q).entropy(), ent, [p])


def test_categorical_log_prob_of_an_index_out_of_range_is_nan():
    d = Categorical(logits=tlgpu.randn(4, 3))
    lp = d.log_prob(tlgpu.tensor(np.array([0, 3, -1, 2], np.int32))).numpy()
    assert np.isfinite(lp[[0, 3]]).all() and np.isnan(lp[[1, 2]]).all()


def test_categorical_errors():
    with pytest.raises(ValueError, match="exactly one of probs or logits"):
        Categorical()
    with pytest.raises(ValueError, match="exactly one"):
        Categorical(probs=tlgpu.ones(3), logits=tlgpu.ones(3))
    with pytest.raises(ValueError, match=r"at least one dim .*shape \(\)"):
        Categorical(logits=tlgpu.tensor(1.0))


def test_normal_moments_log_prob_entropy_and_shapes():
    tlgpu.manual_seed(3)
    loc, scale = R.standard_normal((3, 1)), R.uniform(0.5, 2.0, (4,))
    d = Normal(tlgpu.tensor(loc.astype(np.float32)), tlgpu.tensor(scale.astype(np.float32)))
    assert d.batch_shape == (3, 4) and d.mean.shape == (3, 4) and d.stddev.shape == (3, 4)
    s = d.sample((4000,))
    assert s.shape == (4000, 3, 4) and not s.requires_grad
    sn = s.numpy()
    L, S = np.broadcast_to(loc, (3, 4)), np.broadcast_to(scale, (3, 4))
    assert np.abs(sn.mean(0) - L).max() < 5 * S.max() / math.sqrt(4000)
    assert np.abs(sn.std(0) / S - 1).max() < 0.08
    np.testing.assert_allclose(d.variance.numpy(), S ** 2, rtol=1e-6)

    x = R.standard_normal((2, 3, 4))

    def lp_ref(m, sd, xv):
        return -((xv - m) ** 2) / (2 * sd ** 2) - np.log(sd) - 0.5 * np.log(2 * np.pi)
    check(lambda m, sd, xv: Normal(m, sd).log_prob(xv), lp_ref, [loc, scale, x])
    lt = tlgpu.tensor(loc.astype(np.float32))         # entropy does not depend on loc (no gradient, as torch)
    check(lambda sd: Normal(lt, sd).entropy(),
          lambda sd: np.broadcast_to(0.5 + 0.5 * np.log(2 * np.pi) + np.log(sd), (3, 4)), [scale])
    assert Normal(0.0, 1.0).sample((5,)).shape == (5,)


def test_normal_rsample_is_reparameterised():
    tlgpu.manual_seed(9)
    loc = tlgpu.tensor(R.standard_normal(6).astype(np.float32), requires_grad=True)
    scale = tlgpu.tensor(R.uniform(0.5, 2.0, 6).astype(np.float32), requires_grad=True)
    x = Normal(loc, scale).rsample((3,))
    assert x.requires_grad and x.shape == (3, 6)
    w = R.standard_normal((3, 6))
    (x * tlgpu.tensor(w.astype(np.float32))).sum().backward()
    eps = (x.numpy() - loc.numpy()) / scale.numpy()
    np.testing.assert_allclose(loc.grad.numpy(), w.sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(scale.grad.numpy(), (w * eps).sum(0), rtol=1e-4, atol=1e-5)
    tlgpu.manual_seed(9)
    np.testing.assert_array_equal(Normal(loc, scale).sample((3,)).numpy(), x.numpy())


def test_normal_errors():
    with pytest.raises(ValueError, match=r"Normal: loc \(3,\) and scale \(4,\) cannot be broadcast"):
        Normal(tlgpu.zeros(3), tlgpu.ones(4))
    with pytest.raises(TypeError, match="float32"):
        Normal(tlgpu.zeros(3, dtype=np.int32), 1.0)


def test_torch_parity():
    torch = pytest.importorskip("torch")
    logits = R.standard_normal((3, 5)).astype(np.float32)
    v = np.array([[0, 4, 2], [1, 1, 3]], np.int32)
    td, d = torch.distributions.Categorical(logits=torch.tensor(logits)), Categorical(logits=tlgpu.tensor(logits))
    np.testing.assert_allclose(d.log_prob(tlgpu.tensor(v)).numpy(), td.log_prob(torch.tensor(v).long()).numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d.entropy().numpy(), td.entropy().numpy(), rtol=1e-5, atol=1e-6)
    probs = np.array([[0.0, 0.3, 0.7], [0.5, 0.5, 0.0]], np.float32)
    tp, p = torch.distributions.Categorical(probs=torch.tensor(probs)), Categorical(probs=tlgpu.tensor(probs))
    np.testing.assert_allclose(p.entropy().numpy(), tp.entropy().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(p.logits.numpy(), tp.logits.numpy(), rtol=1e-5, atol=1e-6)
    loc, scale = R.standard_normal(4).astype(np.float32), R.uniform(0.5, 2, 4).astype(np.float32)
    x = R.standard_normal((2, 4)).astype(np.float32)
    tn, n = torch.distributions.Normal(torch.tensor(loc), torch.tensor(scale)), Normal(tlgpu.tensor(loc),
                                                                                       tlgpu.tensor(scale))
    np.testing.assert_allclose(n.log_prob(tlgpu.tensor(x)).numpy(), tn.log_prob(torch.tensor(x)).numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n.entropy().numpy(), tn.entropy().numpy(), rtol=1e-5, atol=1e-6)
