"""The torch.nn.functional surface a nanoGPT / CleanRL port needs (issue 24), against float64 numpy: torch's
keywords (softmax dim=/dtype=, cross_entropy ignore_index/weight/label_smoothing, gelu approximate, inplace=),
layer_norm, leaky_relu, scaled_dot_product_attention (masks, causal alignment, dropout, GQA) with gradients,
and distributions.kl_divergence."""
import math
import warnings

import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F
from tlgpu.distributions import Categorical, Normal, kl_divergence, register_kl
from gradcheck import check

R = np.random.default_rng(24)


def t32(a, **kw):
    return tlgpu.tensor(np.asarray(a, dtype=np.float32), **kw)


def np_log_softmax(x, axis=-1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


# ---- softmax / log_softmax -------------------------------------------------------------------------------

def test_softmax_takes_dim_axis_and_dtype():
    x = R.standard_normal((3, 4, 5))
    t = t32(x)
    for d in (0, 1, -1):
        np.testing.assert_allclose(F.softmax(t, dim=d).numpy(), np.exp(np_log_softmax(x, d)), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(F.log_softmax(t, dim=d).numpy(), np_log_softmax(x, d), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(F.softmax(t, axis=d).numpy(), np.exp(np_log_softmax(x, d)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(F.softmax(t, 1).numpy(), np.exp(np_log_softmax(x, 1)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(F.softmax(t).numpy(), np.exp(np_log_softmax(x, -1)), rtol=1e-5, atol=1e-6)
    assert abs(F.softmax(t, axis=None).sum().item() - 1.0) < 1e-5        # numpy's axis=None: every element
    for dt in (np.float32, "float32", tlgpu.float32, None):
        assert F.log_softmax(t, dim=-1, dtype=dt).dtype == np.float32
    with pytest.raises(TypeError, match="float32 only"):
        F.softmax(t, dim=-1, dtype=np.float64)
    with pytest.raises(TypeError, match="both dim"):
        F.softmax(t, dim=0, axis=1)
    with pytest.raises(TypeError, match="Tensor"):
        F.softmax(x, dim=0)


def test_softmax_dim_gradient():
    x = R.standard_normal((3, 4))
    check(lambda a: F.log_softmax(a, dim=0), lambda a: np_log_softmax(a, 0), [x])
    check(lambda a: F.softmax(a, dim=1), lambda a: np.exp(np_log_softmax(a, 1)), [x])


# ---- cross_entropy ---------------------------------------------------------------------------------------

def np_ce(x, t, weight=None, ignore=-100, reduction="mean", ls=0.0):
    """torch's formula for (N, C) logits and class indices, float64."""
    c = x.shape[1]
    w = np.ones(c) if weight is None else weight
    lp = np_log_softmax(x, 1)
    keep = t != ignore
    safe = np.where(keep, t, 0)
    wt = w[safe] * keep
    loss = -lp[np.arange(len(t)), safe] * wt
    smooth = -(lp * w).sum(1) * keep
    loss = loss * (1 - ls) + smooth * (ls / c)
    if reduction == "mean":
        return loss.sum() / wt.sum()
    return loss.sum() if reduction == "sum" else loss


def test_cross_entropy_ignore_index_like_nanogpt():
    x = R.standard_normal((2, 5, 7))                    # (B, T, V) logits, targets -1 where padded
    t = R.integers(0, 7, (2, 5))
    t[0, 3:] = -1
    logits = t32(x, requires_grad=True)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), tlgpu.tensor(t).view(-1), ignore_index=-1)
    want = np_ce(x.reshape(-1, 7), t.reshape(-1), ignore=-1)
    np.testing.assert_allclose(loss.item(), want, rtol=1e-5)
    loss.backward()
    keep = (t.reshape(-1) != -1)
    g = (np.exp(np_log_softmax(x.reshape(-1, 7), 1)) - np.eye(7)[np.where(keep, t.reshape(-1), 0)]) * keep[:, None]
    np.testing.assert_allclose(logits.grad.numpy().reshape(-1, 7), g / keep.sum(), rtol=1e-4, atol=1e-6)
    # numpy int64 targets are uploaded as int32
    np.testing.assert_allclose(F.cross_entropy(t32(x.reshape(-1, 7)), t.reshape(-1), ignore_index=-1).item(), want,
                               rtol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted,ls", [(True, 0.0), (False, 0.1), (True, 0.25)])
def test_cross_entropy_weight_and_label_smoothing(reduction, weighted, ls):
    x = R.standard_normal((6, 4))
    t = np.array([0, 3, -100, 2, 1, 3])
    w = R.uniform(0.5, 2.0, 4) if weighted else None
    wt = t32(w) if weighted else None
    check(lambda a: F.cross_entropy(a, tlgpu.tensor(t), weight=wt, reduction=reduction, label_smoothing=ls),
          lambda a: np_ce(a, t, w, reduction=reduction, ls=ls), [x])


def test_cross_entropy_ranks_and_probability_targets():
    x = R.standard_normal((2, 3, 4))                    # (N, C, d): classes on dim 1
    t = R.integers(0, 3, (2, 4))
    x2, t1 = np.moveaxis(x, 1, -1).reshape(-1, 3), t.reshape(-1)
    check(lambda a: F.cross_entropy(a, tlgpu.tensor(t), reduction="none"),
          lambda a: np_ce(np.moveaxis(a, 1, -1).reshape(-1, 3), t1, reduction="none").reshape(2, 4), [x])
    np.testing.assert_allclose(F.cross_entropy(t32(x), tlgpu.tensor(t)).item(), np_ce(x2, t1), rtol=1e-5)
    v = R.standard_normal(5)                            # unbatched (C,) with a 0-d target
    np.testing.assert_allclose(F.cross_entropy(t32(v), tlgpu.tensor(np.int32(2))).item(), -np_log_softmax(v)[2],
                               rtol=1e-5)
    p = np.exp(np_log_softmax(R.standard_normal((5, 4)), 1))    # class probabilities, smoothing and weight
    w = R.uniform(0.5, 2.0, 4)

    def want(a):
        q = p * 0.9 + 0.1 / 4
        return -(np_log_softmax(a, 1) * w * q).sum(1).mean()
    check(lambda a: F.cross_entropy(a, t32(p), weight=t32(w), label_smoothing=0.1), want,
          [R.standard_normal((5, 4))])
    with pytest.raises(ValueError, match="shape"):
        F.cross_entropy(t32(x2), tlgpu.tensor(t))
    with pytest.raises(ValueError, match="ignore_index"):
        F.cross_entropy(t32(p), t32(p), ignore_index=1)
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(t32(x2), tlgpu.tensor(t1), label_smoothing=1.5)
    with pytest.raises(ValueError, match="weight"):
        F.cross_entropy(t32(x2), tlgpu.tensor(t1), weight=tlgpu.ones(4))


def test_legacy_reduction_keywords_map_like_torch():
    x, t = R.standard_normal((4, 3)), np.array([0, 1, 2, 1])
    with pytest.warns(UserWarning, match="deprecated"):
        out = F.cross_entropy(t32(x), tlgpu.tensor(t), reduce=False)
    np.testing.assert_allclose(out.numpy(), np_ce(x, t, reduction="none"), rtol=1e-5)
    with pytest.warns(UserWarning, match="deprecated"):
        s = F.mse_loss(t32(x), t32(x * 0), size_average=False)
    np.testing.assert_allclose(s.item(), (x ** 2).sum(), rtol=1e-5)


# ---- losses and activations ------------------------------------------------------------------------------

def test_mse_loss_reduction_and_shape_warning():
    a, b = R.standard_normal((4, 1)), R.standard_normal((4, 1))
    np.testing.assert_allclose(F.mse_loss(t32(a), t32(b), reduction="sum").item(), ((a - b) ** 2).sum(), rtol=1e-5)
    np.testing.assert_allclose(F.mse_loss(t32(a), t32(b), reduction="none").numpy(), (a - b) ** 2, rtol=1e-5)
    with pytest.warns(UserWarning, match="broadcast"):
        F.mse_loss(t32(a), t32(b[:, 0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        F.mse_loss(t32(a), t32(b))
    assert F.l1_loss is tlgpu.nn.loss.l1_loss and F.smooth_l1_loss and F.huber_loss


def np_gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def test_gelu_approximate():
    x = R.standard_normal((3, 5)) * 2
    check(lambda a: F.gelu(a, approximate="tanh"), np_gelu_tanh, [x])
    np.testing.assert_allclose(F.gelu(t32(x), approximate="none").numpy(), t32(x).gelu().numpy())
    with pytest.raises(ValueError, match="approximate"):
        F.gelu(t32(x), approximate="erf")


def test_leaky_relu_forward_gradient_inplace():
    x = R.standard_normal((4, 6))
    for slope in (0.01, 0.2):
        check(lambda a: F.leaky_relu(a, negative_slope=slope), lambda a: np.where(a > 0, a, a * slope), [x])
    leaf = t32(np.array([-1.0, 0.0, 2.0]), requires_grad=True)
    F.leaky_relu(leaf).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), [0.01, 0.01, 1.0])     # torch's gradient at 0: the slope
    y = t32(x) * 1.0
    out = F.leaky_relu(y, 0.1, inplace=True)
    assert out is y
    np.testing.assert_allclose(y.numpy(), np.where(x > 0, x, 0.1 * x), rtol=1e-6)
    nan = F.leaky_relu(t32([float("nan"), -1.0])).numpy()
    assert np.isnan(nan[0])


def test_relu_silu_dropout_inplace():
    x = R.standard_normal((3, 4))
    y = t32(x)
    assert F.relu(y, inplace=True) is y
    np.testing.assert_allclose(y.numpy(), np.maximum(x, 0))
    y = t32(x)
    F.silu(y, inplace=True)
    np.testing.assert_allclose(y.numpy(), x / (1 + np.exp(-x)), rtol=1e-5)
    y = t32(x)
    assert F.dropout(y, 0.5, training=False) is y
    tlgpu.manual_seed(7)
    m = tlgpu.dropout_mask((3, 4), 0.5).numpy()
    tlgpu.manual_seed(7)
    assert F.dropout(y, p=0.5, training=True, inplace=True) is y
    np.testing.assert_allclose(y.numpy(), x.astype(np.float32) * m, rtol=1e-6)


def test_embedding_padding_idx_gets_no_gradient():
    w = t32(R.standard_normal((5, 3)), requires_grad=True)
    idx = np.array([[0, 2, 2], [4, 0, 1]])
    out = F.embedding(tlgpu.tensor(idx), w, padding_idx=2)
    np.testing.assert_allclose(out.numpy(), w.numpy()[idx])
    out.sum().backward()
    np.testing.assert_allclose(w.grad.numpy()[:, 0], [2, 1, 0, 0, 1])
    with pytest.raises(NotImplementedError, match="max_norm"):
        F.embedding(tlgpu.tensor(idx), w, max_norm=1.0)


# ---- layer_norm ------------------------------------------------------------------------------------------

def np_layer_norm(x, w, b, n, eps=1e-5):
    axes = tuple(range(-n, 0))
    d = x - x.mean(axes, keepdims=True)
    return d / np.sqrt((d * d).mean(axes, keepdims=True) + eps) * w + b


def test_layer_norm_matches_numpy_and_module():
    x = R.standard_normal((3, 2, 4))
    w, b = R.standard_normal(4), R.standard_normal(4)
    check(lambda a, ww, bb: F.layer_norm(a, (4,), ww, bb, 1e-5), lambda a, ww, bb: np_layer_norm(a, ww, bb, 1),
          [x, w, b])
    check(lambda a: F.layer_norm(a, [2, 4]), lambda a: np_layer_norm(a, 1.0, 0.0, 2), [x])
    ln = tlgpu.nn.LayerNorm(4)
    with tlgpu.no_grad():
        ln.weight.copy_(t32(w))
        ln.bias.copy_(t32(b))
    np.testing.assert_allclose(F.layer_norm(t32(x), ln.weight.shape, ln.weight, ln.bias).numpy(),
                               ln(t32(x)).numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="does not end in"):
        F.layer_norm(t32(x), (3,))
    with pytest.raises(ValueError, match="weight"):
        F.layer_norm(t32(x), 4, tlgpu.ones(3))


# ---- scaled_dot_product_attention ------------------------------------------------------------------------

def np_sdpa(q, k, v, blocked=None, bias=None, causal=False, scale=None, drop=None):
    L, S = q.shape[-2], k.shape[-2]
    s = q @ np.swapaxes(k, -1, -2) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        blocked = np.triu(np.ones((L, S), bool), 1)
    if blocked is not None:
        s = np.where(blocked, -np.inf, s)
    if bias is not None:
        s = s + bias
    dead = np.isneginf(s).all(-1, keepdims=True)
    s = np.where(dead, 0.0, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p = np.where(dead, 0.0, p / p.sum(-1, keepdims=True))
    if drop is not None:
        p = p * drop
    return p @ v


def qkv(*shapes):
    return [R.standard_normal(s) for s in shapes]


def test_sdpa_nanogpt_causal_forward_and_gradients():
    q, k, v = qkv((2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3))
    check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=None, dropout_p=0, is_causal=True),
          lambda a, b, c: np_sdpa(a, b, c, causal=True), [q, k, v])
    check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, scale=0.3),
          lambda a, b, c: np_sdpa(a, b, c, scale=0.3), [q, k, v])
    # with no graph, the fused row softmax: the same values
    for causal in (False, True):
        out = F.scaled_dot_product_attention(t32(q), t32(k), t32(v), is_causal=causal)
        np.testing.assert_allclose(out.numpy(), np_sdpa(q, k, v, causal=causal), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("L,S", [(3, 5), (5, 3)])
def test_sdpa_causal_is_top_left_aligned(L, S):
    q, k, v = qkv((2, L, 4), (2, S, 4), (2, S, 2))
    for grad in (False, True):
        out = F.scaled_dot_product_attention(t32(q, requires_grad=grad), t32(k), t32(v), is_causal=True)
        np.testing.assert_allclose(out.numpy(), np_sdpa(q, k, v, causal=True), rtol=1e-4, atol=1e-5)
    check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True),
          lambda a, b, c: np_sdpa(a, b, c, causal=True), [q, k, v])


def test_sdpa_masks():
    q, k, v = qkv((2, 3, 4, 3), (2, 3, 5, 3), (2, 3, 5, 2))
    keep = R.random((4, 5)) < 0.6                    # broadcast over batch and heads
    keep[1] = False                                  # a fully masked row: zeros, as torch's _safe_softmax
    keep[2] = True
    blocked = ~keep
    want = np_sdpa(q, k, v, blocked=blocked)
    assert np.all(want[..., 1, :] == 0)
    check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=keep),
          lambda a, b, c: np_sdpa(a, b, c, blocked=blocked), [q, k, v])
    for m in (tlgpu.tensor(keep.astype(np.int32)), ):
        np.testing.assert_allclose(F.scaled_dot_product_attention(t32(q), t32(k), t32(v), attn_mask=m).numpy(),
                                   want, rtol=1e-4, atol=1e-5)
    fm = tlgpu.tensor(keep)                          # float32 1/0: ambiguous without mask_kind
    with pytest.raises(TypeError, match="mask_kind"):
        F.scaled_dot_product_attention(t32(q), t32(k), t32(v), attn_mask=fm)
    out = F.scaled_dot_product_attention(t32(q), t32(k), t32(v), attn_mask=fm, mask_kind="bool")
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
    # additive float masks: finite biases and -inf, as a numpy array or a tensor with mask_kind='additive'
    bias = R.standard_normal((3, 4, 5))
    bias[:, 0, 1] = -np.inf
    bias[0, 3, :] = -np.inf
    want = np_sdpa(q, k, v, bias=bias)
    assert np.all(want[:, 0, 3] == 0) and np.isfinite(want).all()
    check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=bias),
          lambda a, b, c: np_sdpa(a, b, c, bias=bias), [q, k, v])
    b_t = t32(bias, requires_grad=True)
    q_t = t32(q, requires_grad=True)
    out = F.scaled_dot_product_attention(q_t, t32(k), t32(v), attn_mask=b_t, mask_kind="additive")
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
    out.sum().backward()
    assert np.isfinite(q_t.grad.numpy()).all() and np.isfinite(b_t.grad.numpy()).all()


def test_sdpa_dropout_uses_the_device_rng():
    q, k, v = qkv((2, 2, 4, 3), (2, 2, 4, 3), (2, 2, 4, 3))
    tlgpu.manual_seed(99)
    drop = tlgpu.dropout_mask((2, 2, 4, 4), 0.25).numpy().astype(np.float64)
    tlgpu.manual_seed(99)
    check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, dropout_p=0.25, is_causal=True),
          lambda a, b, c: np_sdpa(a, b, c, causal=True, drop=drop), [q, k, v])
    tlgpu.manual_seed(99)                            # without a graph too (fused softmax, then the same mask)
    out = F.scaled_dot_product_attention(t32(q), t32(k), t32(v), dropout_p=0.25, is_causal=True)
    np.testing.assert_allclose(out.numpy(), np_sdpa(q, k, v, causal=True, drop=drop), rtol=1e-4, atol=1e-5)


def test_sdpa_gqa_and_errors():
    q, k, v = qkv((2, 4, 3, 2), (2, 2, 5, 2), (2, 2, 5, 3))
    rep = lambda a: np.repeat(a, 2, axis=-3)          # noqa: E731  torch's repeat_interleave over the heads
    check(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, enable_gqa=True),
          lambda a, b, c: np_sdpa(a, rep(b), rep(c)), [q, k, v])
    Q, K, V = t32(q), t32(k), t32(v)
    with pytest.raises(ValueError):
        F.scaled_dot_product_attention(Q, K, V)                      # heads differ without enable_gqa
    with pytest.raises(ValueError, match="is_causal"):
        F.scaled_dot_product_attention(Q, Q, Q, attn_mask=np.ones((3, 3), bool), is_causal=True)
    with pytest.raises(ValueError, match="disagree"):
        F.scaled_dot_product_attention(Q, K[..., :1], V, enable_gqa=True)
    with pytest.raises(ValueError, match="broadcast"):
        F.scaled_dot_product_attention(Q, Q, Q, attn_mask=np.ones((2, 3), bool))
    with pytest.raises(ValueError, match="dropout_p"):
        F.scaled_dot_product_attention(Q, Q, Q, dropout_p=1.0)
    with pytest.raises(TypeError, match="additive"):
        F.scaled_dot_product_attention(Q, Q, Q, attn_mask=np.ones((3, 3), bool), mask_kind="additive")


# ---- distributions ---------------------------------------------------------------------------------------

def np_kl_cat(lp, lq):
    p, q = np.exp(lp), np.exp(lq)
    with np.errstate(invalid="ignore"):                # 0 * -inf where p is 0: replaced just below
        t = p * (lp - lq)
    t = np.where(q == 0, np.inf, t)
    return np.where(p == 0, 0.0, t).sum(-1)


def test_kl_categorical():
    a, b = R.standard_normal((3, 4)), R.standard_normal((3, 4))
    check(lambda x, y: kl_divergence(Categorical(logits=x), Categorical(logits=y)),
          lambda x, y: np_kl_cat(np_log_softmax(x), np_log_softmax(y)), [a, b])
    pa = np.exp(np_log_softmax(a))
    pb = np.exp(np_log_softmax(b))
    check(lambda x, y: kl_divergence(Categorical(probs=x), Categorical(probs=y)),
          lambda x, y: np_kl_cat(np.log(x / x.sum(-1, keepdims=True)), np.log(y / y.sum(-1, keepdims=True))),
          [pa, pb], rtol=5e-3, atol=5e-4)
    # zeros: p = 0 adds nothing, q = 0 where p > 0 is +inf; masked (-inf) logits give no NaN gradient
    la = t32(np.array([[0.0, -np.inf, 1.0], [0.5, 0.2, 0.1]]), requires_grad=True)
    lb = t32(np.array([[0.3, 0.1, 2.0], [0.0, -np.inf, 0.0]]), requires_grad=True)
    kl = kl_divergence(Categorical(logits=la), Categorical(logits=lb))
    want = np_kl_cat(np_log_softmax(np.array([[0.0, -np.inf, 1.0]])), np_log_softmax(np.array([[0.3, 0.1, 2.0]])))
    np.testing.assert_allclose(kl.numpy()[0], want[0], rtol=1e-5)
    assert kl.numpy()[1] == np.inf
    kl[0].backward()
    assert np.isfinite(la.grad.numpy()).all() and np.isfinite(lb.grad.numpy()).all()


def test_kl_normal_and_dispatch():
    m1, s1, m2, s2 = R.standard_normal(5), R.uniform(0.3, 2, 5), R.standard_normal(5), R.uniform(0.3, 2, 5)

    def want(a, b, c, d):
        return np.log(d / b) + (b ** 2 + (a - c) ** 2) / (2 * d ** 2) - 0.5
    check(lambda a, b, c, d: kl_divergence(Normal(a, b), Normal(c, d)), want, [m1, s1, m2, s2])
    with pytest.raises(NotImplementedError, match="Categorical and q type Normal"):
        kl_divergence(Categorical(logits=tlgpu.zeros(3)), Normal(0.0, 1.0))

    class Wide(Normal):
        pass

    assert kl_divergence(Wide(0.0, 1.0), Normal(1.0, 1.0)).item() == pytest.approx(0.5)
    register_kl(Wide, Normal)(lambda p, q: tlgpu.tensor(-1.0))
    try:
        assert kl_divergence(Wide(0.0, 1.0), Normal(1.0, 1.0)).item() == -1.0
    finally:
        from tlgpu.distributions import distribution
        del distribution._KL[Wide, Normal]


def test_normal_as_cleanrl_uses_it():
    """PPO-continuous and SAC: Normal(mean, exp(logstd).expand_as(mean)), rsample through tanh, log_prob and
    entropy summed over the action dim."""
    mean = t32(R.standard_normal((4, 2)), requires_grad=True)
    logstd = t32(np.zeros((1, 2)), requires_grad=True)
    d = Normal(mean, logstd.exp().expand_as(mean))
    x = d.rsample()
    y = x.tanh()
    logp = (d.log_prob(x) - (1 - y.square() + 1e-6).log()).sum(1, keepdim=True)
    assert logp.shape == (4, 1) and d.entropy().sum(1).shape == (4,)
    np.testing.assert_allclose(d.entropy().sum(1).numpy(), np.full(4, 2 * (0.5 + 0.5 * math.log(2 * math.pi))),
                               rtol=1e-5)
    logp.sum().backward()
    assert mean.grad.shape == (4, 2) and logstd.grad.shape == (1, 2)
    a = d.sample()
    assert not a.requires_grad and a.shape == (4, 2)
    xs, ms = x.detach().numpy(), mean.detach().numpy()
    np.testing.assert_allclose(d.log_prob(xs).numpy(), -0.5 * (xs - ms) ** 2 - 0.5 * math.log(2 * math.pi),
                               rtol=1e-5, atol=1e-6)
