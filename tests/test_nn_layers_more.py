"""nn/_layers_more.py and nn/_functional_layers.py against float64 numpy references on random inputs: BatchNorm
(training, eval, running statistics over several steps incl. momentum=None), GroupNorm, Conv1d (a direct numpy
convolution over strides, paddings, dilations and groups), 1-d and adaptive pooling, MultiheadAttention (torch's
algorithm in numpy, masks, need_weights), TransformerEncoderLayer / TransformerEncoder (eval) and RNN / RNNCell;
gradients by central differences (gradcheck.py); torch's state_dict keys (hard-coded); train/eval; errors; reprs."""
import math

import numpy as np
import pytest

import tlgpu
from tlgpu import nn
from tlgpu.nn import functional as F
from gradcheck import check

R = np.random.default_rng(31)


def T(a, **kw):
    return tlgpu.tensor(np.asarray(a, dtype=np.float32), **kw)


def f64(a):
    """a as float32 values in float64 (what tlgpu computes from)."""
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def close(t, want, rtol=1e-4, atol=2e-5):
    np.testing.assert_allclose(t.numpy() if isinstance(t, tlgpu.Tensor) else t, want, rtol=rtol, atol=atol)


def randomize(module, seed=0):
    """Every parameter and float buffer to random values (so a wrong init cannot pass for a right one); returns
    the float64 state."""
    r = np.random.default_rng(seed)
    sd = {k: (v if v.dtype != np.float32 else f64(r.standard_normal(v.shape) * 0.5)) for k, v in
          module.state_dict().items()}
    module.load_state_dict(sd)
    return sd


# ---- BatchNorm ----

def bn_ref(x, w, b, rm, rv, training, momentum, eps, n_steps):
    """torch's algorithm in float64; returns y, rm, rv. momentum None: factor 1 / n_steps (cumulative average)."""
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean, var = x.mean(axes), x.var(axes)
        n = x.size // x.shape[1]
        f = 1.0 / n_steps if momentum is None else momentum
        rm, rv = (1 - f) * rm + f * mean, (1 - f) * rv + f * var * n / (n - 1)
    else:
        mean, var = rm, rv
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    return y * w.reshape(shape) + b.reshape(shape), rm, rv


@pytest.mark.parametrize("cls,shape,momentum", [
    (nn.BatchNorm1d, (6, 3), 0.1), (nn.BatchNorm1d, (4, 3, 5), None), (nn.BatchNorm2d, (3, 3, 4, 5), 0.3),
    (nn.BatchNorm2d, (2, 3, 2, 3), None), (nn.BatchNorm3d, (2, 3, 2, 2, 3), 0.2)])
def test_batchnorm_training_running_stats_and_eval(cls, shape, momentum):
    m = cls(3, eps=1e-3, momentum=momentum)
    sd = randomize(m, 1)
    sd["running_var"] = np.abs(sd["running_var"]) + 0.5
    m.load_state_dict(sd)
    w, b, rm, rv = sd["weight"], sd["bias"], sd["running_mean"], sd["running_var"]
    for step in range(1, 4):
        x = f64(R.standard_normal(shape) * 2 + 1)
        want, rm, rv = bn_ref(x, w, b, rm, rv, True, momentum, 1e-3, step)
        close(m(T(x)), want)
        close(m.running_mean, rm, 1e-5, 1e-6)
        close(m.running_var, rv, 1e-5, 1e-6)
        assert m.num_batches_tracked.item() == step and m.num_batches_tracked.dtype == np.int32
    m.eval()
    x = f64(R.standard_normal(shape))
    want, _, _ = bn_ref(x, w, b, rm, rv, False, momentum, 1e-3, 0)
    close(m(T(x)), want)
    close(m.running_mean, rm, 1e-5, 1e-6)                         # eval leaves the statistics alone
    assert m.num_batches_tracked.item() == 3


def test_batchnorm_no_running_stats_affine_off_and_functional():
    x = f64(R.standard_normal((5, 4, 3)))
    m = nn.BatchNorm1d(4, affine=False, track_running_stats=False)
    assert m.parameters() == [] and list(m.state_dict()) == [] and m.running_mean is None
    want, _, _ = bn_ref(x, np.ones(4), np.zeros(4), np.zeros(4), np.ones(4), True, 0.1, 1e-5, 1)
    close(m(T(x)), want)
    close(m.eval()(T(x)), want)                                   # no running stats: batch statistics in eval too
    rm, rv = T(np.zeros(4)), T(np.ones(4))
    close(F.batch_norm(T(x), rm, rv, training=True, momentum=0.5), want)
    close(rm, 0.5 * x.mean((0, 2)), 1e-5, 1e-6)
    close(rv, 0.5 + 0.5 * x.var((0, 2), ddof=1), 1e-5, 1e-6)
    close(F.batch_norm(T(x), rm, rv), bn_ref(x, np.ones(4), np.zeros(4), f64(rm.numpy()), f64(rv.numpy()),
                                              False, 0, 1e-5, 0)[0])


def test_batchnorm_gradient():
    def ref(x, w, b):
        return bn_ref(x, w, b, 0, 0, True, 0.1, 1e-5, 1)[0]
    check(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), ref,
          [R.standard_normal((3, 2, 4)), R.standard_normal(2), R.standard_normal(2)])


def test_batchnorm_state_dict_repr_and_errors():
    m = nn.BatchNorm2d(3)
    assert list(m.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    close(m.weight, np.ones(3), 0, 0)
    close(m.bias, np.zeros(3), 0, 0)
    close(m.running_var, np.ones(3), 0, 0)
    m.load_state_dict({**m.state_dict(), "num_batches_tracked": np.array(7, dtype=np.int64)})   # torch's long
    assert m.num_batches_tracked.item() == 7
    assert repr(m) == "BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)"
    with pytest.raises(ValueError, match="expected 4D input"):
        m(T(np.ones((2, 3, 4))))
    with pytest.raises(ValueError, match="expected 3 channels"):
        m(T(R.standard_normal((2, 4, 2, 2))))
    with pytest.raises(ValueError, match="2D or 3D"):
        nn.BatchNorm1d(3)(T(R.standard_normal((2, 3, 2, 2))))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(T(R.standard_normal((1, 3))))
    with pytest.raises(ValueError, match="running_mean"):
        F.batch_norm(T(R.standard_normal((2, 3))), None, None)
    with pytest.raises(TypeError, match="momentum"):
        F.batch_norm(T(R.standard_normal((2, 3))), None, None, training=True, momentum=None)


# ---- GroupNorm ----

def gn_ref(x, g, w, b, eps=1e-5):
    n, c = x.shape[:2]
    xr = x.reshape(n, g, -1)
    y = ((xr - xr.mean(-1, keepdims=True)) / np.sqrt(xr.var(-1, keepdims=True) + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return y * w.reshape(shape) + b.reshape(shape)


def test_groupnorm():
    m = nn.GroupNorm(3, 6, eps=1e-4)
    sd = randomize(m)
    x = f64(R.standard_normal((2, 6, 4, 3)) * 3 - 1)
    close(m(T(x)), gn_ref(x, 3, sd["weight"], sd["bias"], 1e-4))
    assert list(m.state_dict()) == ["weight", "bias"]
    assert repr(m) == "GroupNorm(3, 6, eps=0.0001, affine=True, bias=True)"
    assert nn.GroupNorm(2, 4, affine=False).parameters() == []
    check(lambda x, w, b: F.group_norm(x, 2, w, b), lambda x, w, b: gn_ref(x, 2, w, b),
          [R.standard_normal((2, 4, 3)), R.standard_normal(4), R.standard_normal(4)])
    with pytest.raises(ValueError, match="divisible by num_groups"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ValueError, match="expected 6 channels"):
        m(T(R.standard_normal((2, 4, 3))))
    with pytest.raises(ValueError, match="divisible by num_groups"):
        F.group_norm(T(R.standard_normal((2, 6, 3))), 4)


# ---- Conv1d ----

def conv1d_ref(x, w, b, s, lo, hi, d, g):
    n, c, _ = x.shape
    o, cg, k = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (lo, hi)))
    lout = (xp.shape[2] - d * (k - 1) - 1) // s + 1
    y = np.zeros((n, o, lout))
    og = o // g
    for oc in range(o):
        grp = oc // og
        for t in range(lout):
            win = xp[:, grp * cg:(grp + 1) * cg, t * s: t * s + d * (k - 1) + 1: d]      # (N, cg, K)
            y[:, oc, t] = (win * w[oc]).sum((1, 2))
    return y if b is None else y + b.reshape(1, -1, 1)


@pytest.mark.parametrize("stride,padding,dilation,groups,k", [
    (1, 0, 1, 1, 3), (2, 1, 1, 1, 3), (1, "same", 2, 1, 3), (1, "same", 1, 1, 4), (3, 2, 2, 2, 3),
    (1, "same", 1, 4, 4), (2, "valid", 1, 4, 2), (1, 1, 3, 2, 2), (1, "same", 1, 8, 3)])
def test_conv1d_against_direct_convolution(stride, padding, dilation, groups, k):
    cin, cout = 8, 8 if groups == 8 else 4
    m = nn.Conv1d(cin, cout, k, stride=stride, padding=padding, dilation=dilation, groups=groups)
    sd = randomize(m, 3)
    x = f64(R.standard_normal((2, cin, 11)))
    if padding == "same":
        tot = dilation * (k - 1)
        lo, hi = tot // 2, tot - tot // 2
    else:
        lo = hi = 0 if padding == "valid" else padding
    want = conv1d_ref(x, sd["weight"], sd["bias"], stride, lo, hi, dilation, groups)
    close(m(T(x)), want)
    close(m(T(x[1])), want[1])                                    # unbatched (C, L)
    if padding == "same":
        assert want.shape[2] == 11


def test_conv1d_init_padding_mode_repr_and_state_dict():
    m = nn.Conv1d(6, 4, 5, groups=2, bias=True)
    assert m.weight.shape == (4, 3, 5) and list(m.state_dict()) == ["weight", "bias"]
    bound = 1 / math.sqrt(3 * 5)
    w = m.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.7 * bound and np.abs(m.bias.numpy()).max() <= bound
    assert repr(m) == "Conv1d(6, 4, kernel_size=(5,), stride=(1,), groups=2)"
    assert repr(nn.Conv1d(2, 3, 3, 2, 1, bias=False)) == \
        "Conv1d(2, 3, kernel_size=(3,), stride=(2,), padding=(1,), bias=False)"
    r = nn.Conv1d(2, 3, 3, padding=2, padding_mode="reflect")
    sd = randomize(r)
    x = f64(R.standard_normal((2, 2, 7)))
    xr = np.pad(x, ((0, 0), (0, 0), (2, 2)), mode="reflect")
    close(r(T(x)), conv1d_ref(xr, sd["weight"], sd["bias"], 1, 0, 0, 1, 1))
    assert repr(r).endswith("padding=(2,), padding_mode=reflect)")


def test_conv1d_gradients():
    check(lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=1, dilation=2, groups=2),
          lambda x, w, b: conv1d_ref(x, w, b, 2, 1, 1, 2, 2),
          [R.standard_normal((2, 4, 9)), R.standard_normal((4, 2, 3)), R.standard_normal(4)])
    check(lambda x, w: F.conv1d(x, w, padding="same"), lambda x, w: conv1d_ref(x, w, None, 1, 1, 2, 1, 1),
          [R.standard_normal((2, 3, 6)), R.standard_normal((2, 3, 4))])


def test_conv1d_errors():
    x = T(R.standard_normal((2, 4, 9)))
    with pytest.raises(ValueError, match="expects input with 6 channels"):
        F.conv1d(x, T(R.standard_normal((4, 3, 3))), groups=2)
    with pytest.raises(ValueError, match="strided"):
        F.conv1d(x, T(R.standard_normal((4, 4, 3))), stride=2, padding="same")
    with pytest.raises(ValueError, match=r"\(N, C_in, L\)"):
        F.conv1d(T(R.standard_normal((2, 4, 9, 1))), T(R.standard_normal((4, 4, 3))))
    with pytest.raises(ValueError, match="shorter than the dilated kernel"):
        F.conv1d(x, T(R.standard_normal((4, 4, 5))), dilation=3)
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv1d(4, 6, 3, groups=4)
    with pytest.raises(ValueError, match="strided"):
        nn.Conv1d(4, 4, 3, stride=2, padding="same")
    with pytest.raises(TypeError, match="Tensor"):
        F.conv1d(np.zeros((2, 4, 9)), T(R.standard_normal((4, 4, 3))))


# ---- pooling ----

def adaptive_ref(x, sizes):
    """torch's windows: start floor(i n / o), end ceil((i + 1) n / o), per pooled axis (the last len(sizes))."""
    for ax, o in zip(range(x.ndim - len(sizes), x.ndim), sizes):
        n = x.shape[ax]
        parts = [np.take(x, range((i * n) // o, -((-(i + 1) * n) // o)), axis=ax).mean(ax, keepdims=True)
                 for i in range(o)]
        x = np.concatenate(parts, ax)
    return x


@pytest.mark.parametrize("size", [(1, 1), 1, (2, 3), (3, 4), (5, 7), (None, 2), (9, 12), 4])
def test_adaptive_avg_pool2d(size):
    x = f64(R.standard_normal((2, 3, 6, 9)))
    sizes = (size, size) if isinstance(size, int) else tuple(6 if s is None else s for s in size)
    want = adaptive_ref(x, sizes)
    m = nn.AdaptiveAvgPool2d(size)
    close(m(T(x)), want, 1e-5, 1e-6)
    close(F.adaptive_avg_pool2d(T(x[0]), size), want[0], 1e-5, 1e-6)
    assert repr(m) == f"AdaptiveAvgPool2d(output_size={size})"


def test_adaptive_pool_1d_gradient_and_errors():
    x = f64(R.standard_normal((2, 3, 10)))
    for o in (1, 5, 3, 7, 10):
        close(nn.AdaptiveAvgPool1d(o)(T(x)), adaptive_ref(x, (o,)), 1e-5, 1e-6)
    check(lambda t: F.adaptive_avg_pool2d(t, (3, 2)), lambda a: adaptive_ref(a, (3, 2)),
          [R.standard_normal((1, 2, 5, 5))])
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        F.adaptive_avg_pool2d(T(x[0]), 2)
    with pytest.raises(ValueError, match="positive"):
        F.adaptive_avg_pool2d(T(R.standard_normal((1, 2, 4, 4))), (0, 2))


def pool1d_ref(x, k, s, p, fn, count_include_pad=True):
    fill = -np.inf if fn is np.max else 0.0
    xp = np.pad(x, ((0, 0),) * (x.ndim - 1) + ((p, p),), constant_values=fill)
    lout = (xp.shape[-1] - k) // s + 1
    if fn is np.max:
        return np.stack([xp[..., t * s: t * s + k].max(-1) for t in range(lout)], -1)
    ones = np.pad(np.ones(x.shape[-1]), (p, p))
    return np.stack([xp[..., t * s: t * s + k].sum(-1) / (k if count_include_pad else ones[t * s: t * s + k].sum())
                     for t in range(lout)], -1)


@pytest.mark.parametrize("k,s,p", [(3, None, 0), (3, 2, 1), (2, 1, 1), (4, 3, 2)])
def test_pool1d(k, s, p):
    x = f64(R.standard_normal((2, 3, 11)))
    st = k if s is None else s
    close(nn.MaxPool1d(k, s, p)(T(x)), pool1d_ref(x, k, st, p, np.max), 0, 0)
    close(F.max_pool1d(T(x[0]), k, s, p), pool1d_ref(x[0], k, st, p, np.max), 0, 0)
    close(nn.AvgPool1d(k, s, p)(T(x)), pool1d_ref(x, k, st, p, np.mean), 1e-5, 1e-6)
    close(F.avg_pool1d(T(x), k, s, p, count_include_pad=False), pool1d_ref(x, k, st, p, np.mean, False), 1e-5, 1e-6)


def test_pool1d_repr_and_errors():
    assert repr(nn.MaxPool1d(3)) == "MaxPool1d(kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False)"
    assert repr(nn.AvgPool1d(3, 2)) == "AvgPool1d(kernel_size=(3,), stride=(2,), padding=(0,))"
    with pytest.raises(ValueError, match="at most half"):
        F.max_pool1d(T(R.standard_normal((2, 3, 8))), 2, padding=2)
    with pytest.raises(ValueError, match=r"\(N, C, L\)"):
        F.avg_pool1d(T(R.standard_normal((1, 2, 3, 8))), 2)
    with pytest.raises(NotImplementedError, match="ceil_mode"):
        F.max_pool1d(T(R.standard_normal((2, 3, 8))), 2, ceil_mode=True)


# ---- MultiheadAttention ----

def softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def canon(m):
    return None if m is None else np.where(m, -np.inf, 0.0) if m.dtype == np.bool_ else f64(m)


def mha_ref(q, k, v, sd, h, kpm=None, am=None, avg=True):
    """torch's multi_head_attention_forward in float64, (L, N, E) inputs; returns (out, weights)."""
    lq, n, e = q.shape
    hd = e // h
    ws = np.split(sd["in_proj_weight"], 3) if "in_proj_weight" in sd else [sd[f"{c}_proj_weight"] for c in "qkv"]
    bs = np.split(sd["in_proj_bias"], 3) if "in_proj_bias" in sd else [0, 0, 0]
    qp, kp, vp = (a @ w.T + b for a, w, b in zip((q, k, v), ws, bs))
    am, kpm = canon(am), canon(kpm)
    if "bias_k" in sd:
        kp = np.concatenate([kp, np.tile(sd["bias_k"], (1, n, 1))])
        vp = np.concatenate([vp, np.tile(sd["bias_v"], (1, n, 1))])
        am = None if am is None else np.pad(am, [(0, 0)] * (am.ndim - 1) + [(0, 1)])
        kpm = None if kpm is None else np.pad(kpm, ((0, 0), (0, 1)))
    s = kp.shape[0]
    qh = qp.reshape(lq, n * h, hd).transpose(1, 0, 2)
    kh, vh = (a.reshape(s, n * h, hd).transpose(1, 0, 2) for a in (kp, vp))
    if kpm is not None:
        kpm = np.broadcast_to(kpm.reshape(n, 1, 1, s), (n, h, 1, s)).reshape(n * h, 1, s)
        am = kpm if am is None else am + kpm
    w = softmax((qh * math.sqrt(1 / hd)) @ kh.transpose(0, 2, 1) + (0 if am is None else am))
    o = (w @ vh).transpose(1, 0, 2).reshape(lq * n, e)
    out = (o @ sd["out_proj.weight"].T + sd.get("out_proj.bias", 0)).reshape(lq, n, e)
    w = w.reshape(n, h, lq, s)
    return out, (w.mean(1) if avg else w)


def test_mha_against_numpy_with_masks_and_weights():
    e, h, n, lq, s = 8, 2, 3, 4, 5
    m = nn.MultiheadAttention(e, h)
    sd = randomize(m, 5)
    q, k, v = (f64(R.standard_normal(sh)) for sh in ((lq, n, e), (s, n, e), (s, n, e)))
    kpm = np.zeros((n, s), bool)
    kpm[0, 3:], kpm[2, 0] = True, True
    am_bool = R.random((lq, s)) < 0.3
    am_bool[:, 1] = False                                        # every query keeps a key
    am_float = R.standard_normal((n * h, lq, s))
    cases = [dict(), dict(kpm=kpm), dict(am=am_bool), dict(kpm=kpm, am=am_float), dict(am=am_bool, avg=False)]
    for c in cases:
        want, wantw = mha_ref(q, k, v, sd, h, c.get("kpm"), c.get("am"), c.get("avg", True))
        out, w = m(T(q), T(k), T(v), key_padding_mask=c.get("kpm"), attn_mask=c.get("am"),
                   average_attn_weights=c.get("avg", True))
        close(out, want)
        close(w, wantw)
        out2, w2 = m(T(q), T(k), T(v), key_padding_mask=c.get("kpm"), attn_mask=c.get("am"), need_weights=False)
        assert w2 is None
        close(out2, want)
    want, _ = mha_ref(q, k, v, sd, h, kpm, am_bool)
    close(m(T(q), T(k), T(v), kpm, False, am_bool)[0], want)     # numpy bool masks given positionally stay bool
    close(m(q, k, v, kpm, True, am_bool)[0], want)                 # numpy q, k, v are uploaded
    with pytest.raises(TypeError, match="multiple values"):
        m(T(q), T(k), T(v), kpm, key_padding_mask=kpm)
    # the same masks as tlgpu tensors
    close(m(T(q), T(k), T(v), key_padding_mask=tlgpu.tensor(kpm.astype(np.int32)),
            attn_mask=T(am_bool), mask_kind="bool")[0], want)
    close(m(T(q), T(k), T(v), key_padding_mask=T(canon(kpm)), attn_mask=T(canon(am_bool)),
            mask_kind="additive")[0], want)
    with pytest.raises(TypeError, match="ambiguous"):
        m(T(q), T(k), T(v), attn_mask=T(am_bool))


def test_mha_self_attention_batch_first_unbatched_and_variants():
    e, h = 6, 3
    x = f64(R.standard_normal((2, 5, e)))
    m = nn.MultiheadAttention(e, h, batch_first=True)
    sd = randomize(m, 6)
    want, wantw = mha_ref(x.transpose(1, 0, 2), x.transpose(1, 0, 2), x.transpose(1, 0, 2), sd, h)
    t = T(x)
    out, w = m(t, t, t)
    close(out, want.transpose(1, 0, 2))
    close(w, wantw)
    out, w = m(T(x[1]), T(x[1]), T(x[1]), average_attn_weights=False)          # unbatched (L, E)
    close(out, want[:, 1])
    assert w.shape == (h, 5, 5)
    # kdim / vdim, no bias, add_bias_kv, add_zero_attn
    m = nn.MultiheadAttention(e, 2, bias=False, add_bias_kv=True, add_zero_attn=True, kdim=4, vdim=3)
    assert list(m.state_dict()) == ["q_proj_weight", "k_proj_weight", "v_proj_weight", "bias_k", "bias_v",
                                    "out_proj.weight"]
    sd = randomize(m, 7)
    q, k, v = f64(R.standard_normal((3, 2, e))), f64(R.standard_normal((4, 2, 4))), f64(R.standard_normal((4, 2, 3)))
    kpm = np.array([[False, True, False, False], [False, False, False, True]])
    out, w = m(T(q), T(k), T(v), key_padding_mask=kpm)
    ws = [sd[f"{c}_proj_weight"] for c in "qkv"]
    qp, kp, vp = q @ ws[0].T, k @ ws[1].T, v @ ws[2].T
    kp = np.concatenate([kp, np.tile(sd["bias_k"], (1, 2, 1)), np.zeros((1, 2, e))])
    vp = np.concatenate([vp, np.tile(sd["bias_v"], (1, 2, 1)), np.zeros((1, 2, e))])
    kpm2 = np.pad(kpm, ((0, 0), (0, 2)))
    ident = {"in_proj_weight": np.concatenate([np.eye(e)] * 3), "out_proj.weight": sd["out_proj.weight"]}
    want, wantw = mha_ref(qp, kp, vp, ident, 2, kpm2)
    close(out, want)
    close(w, wantw)


def test_mha_init_names_dropout_gradient_and_errors():
    m = nn.MultiheadAttention(16, 4)
    assert list(m.state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    assert m.in_proj_weight.shape == (48, 16) and m.in_proj_bias.shape == (48,)
    bound = math.sqrt(6 / (16 + 48))
    w = m.in_proj_weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert not m.in_proj_bias.numpy().any() and not m.out_proj.bias.numpy().any()
    assert repr(m) == ("MultiheadAttention(\n  (out_proj): NonDynamicallyQuantizableLinear(in_features=16, "
                       "out_features=16, bias=True)\n)")
    d = nn.MultiheadAttention(8, 2, dropout=0.5)
    x = T(R.standard_normal((3, 2, 8)))
    a, b = d(x, x, x)[1].numpy(), d.eval()(x, x, x)[1].numpy()
    assert not np.allclose(a, b) and np.allclose(b, d(x, x, x)[1].numpy())     # dropout only in training
    g = nn.MultiheadAttention(4, 2)
    sd = randomize(g, 8)
    kpm = np.array([[False, False, True], [False, False, False]])
    check(lambda q: g(q, q, q, key_padding_mask=kpm)[0], lambda q: mha_ref(q, q, q, sd, 2, kpm)[0],
          [R.standard_normal((3, 2, 4))])
    with pytest.raises(ValueError, match="divisible by num_heads"):
        nn.MultiheadAttention(10, 3)
    with pytest.raises(ValueError, match="key_padding_mask must have shape"):
        m(T(R.standard_normal((3, 2, 16))), *[T(R.standard_normal((4, 2, 16)))] * 2, key_padding_mask=kpm)
    with pytest.raises(ValueError, match="expected query"):
        m(T(R.standard_normal((3, 2, 8))), *[T(R.standard_normal((4, 2, 16)))] * 2)
    with pytest.raises(ValueError, match="3-D"):
        m(T(R.standard_normal((3, 2, 16))), *[T(R.standard_normal((4, 16)))] * 2)
    with pytest.raises(ValueError, match="is_causal"):
        m(x, x, x, is_causal=True)


# ---- Transformer ----

def ln_ref(x, w, b, eps):
    return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def gelu_ref(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def tel_ref(x, sd, h, norm_first, act, eps, kpm=None, am=None, p=""):
    """(L, N, E) input; sd's keys under prefix p."""
    sub = {k[len(p) + 10:]: v for k, v in sd.items() if k.startswith(p + "self_attn.")}

    def sa(y):
        return mha_ref(y, y, y, sub, h, kpm, am)[0]

    def ff(y):
        z = y @ sd[p + "linear1.weight"].T + sd[p + "linear1.bias"]
        z = np.maximum(z, 0) if act == "relu" else gelu_ref(z)
        return z @ sd[p + "linear2.weight"].T + sd[p + "linear2.bias"]

    def n1(y):
        return ln_ref(y, sd[p + "norm1.weight"], sd[p + "norm1.bias"], eps)

    def n2(y):
        return ln_ref(y, sd[p + "norm2.weight"], sd[p + "norm2.bias"], eps)

    if norm_first:
        x = x + sa(n1(x))
        return x + ff(n2(x))
    x = n1(x + sa(x))
    return n2(x + ff(x))


TEL_KEYS = ["self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
            "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
            "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"]


@pytest.mark.parametrize("norm_first,act,batch_first", [(False, "relu", False), (True, "gelu", True),
                                                        (True, "relu", False), (False, "gelu", True)])
def test_transformer_encoder_layer(norm_first, act, batch_first):
    m = nn.TransformerEncoderLayer(8, 2, dim_feedforward=12, dropout=0.2, activation=act, layer_norm_eps=1e-4,
                                   batch_first=batch_first, norm_first=norm_first).eval()
    assert list(m.state_dict()) == TEL_KEYS
    sd = randomize(m, 9)
    x = f64(R.standard_normal((5, 2, 8)))
    kpm = np.array([[False] * 5, [False, False, False, True, True]])
    causal = np.triu(np.ones((5, 5), bool), 1)
    xin = x.transpose(1, 0, 2) if batch_first else x
    for c in (dict(), dict(src_key_padding_mask=kpm, src_mask=causal)):
        want = tel_ref(x, sd, 2, norm_first, act, 1e-4, c.get("src_key_padding_mask"), c.get("src_mask"))
        out = m(T(xin), **c)
        close(out, want.transpose(1, 0, 2) if batch_first else want)
        if c:
            close(m(T(xin), causal, kpm), want.transpose(1, 0, 2) if batch_first else want)     # positional masks
    m.train()
    a, b = m(T(xin)).numpy(), m(T(xin)).numpy()
    assert not np.allclose(a, b)                                  # dropout in training


def test_transformer_encoder_stack_clones_and_norm():
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8)).eval()
    keys = [f"layers.{i}.{k}" for i in range(2) for k in TEL_KEYS] + ["norm.weight", "norm.bias"]
    assert list(enc.state_dict()) == keys
    sd0 = enc.state_dict()
    for k in TEL_KEYS:                                            # copies of the layer: the same initial values
        np.testing.assert_array_equal(sd0[f"layers.0.{k}"], layer.state_dict()[k])
        np.testing.assert_array_equal(sd0[f"layers.1.{k}"], sd0[f"layers.0.{k}"])
    assert enc.layers[0].linear1.weight is not enc.layers[1].linear1.weight
    assert len(enc.parameters()) == 2 * 12 + 2 and all(p.requires_grad and p.is_leaf for p in enc.parameters())
    sd = randomize(enc, 10)
    x = f64(R.standard_normal((2, 4, 8)))
    kpm = np.array([[False, False, True, False], [False] * 4])
    y = x.transpose(1, 0, 2)
    for i in range(2):
        y = tel_ref(y, sd, 2, False, "relu", 1e-5, kpm, p=f"layers.{i}.")
    want = ln_ref(y, sd["norm.weight"], sd["norm.bias"], 1e-5).transpose(1, 0, 2)
    close(enc(T(x), src_key_padding_mask=kpm), want)
    close(enc(T(x), src_key_padding_mask=tlgpu.tensor(kpm.astype(np.int32))), want)
    loss = enc.train()(T(x)).square().mean()
    loss.backward()
    assert all(p.grad is not None for p in enc.parameters())
    with pytest.raises(ValueError, match="activation"):
        nn.TransformerEncoderLayer(8, 2, activation="swish")
    with pytest.raises(ValueError, match="num_layers"):
        nn.TransformerEncoder(layer, 0)


# ---- RNN ----

def rnn_ref(x, h0, sd, layers, act):
    """x (T, B, F), h0 (layers, B, H) float64; torch's equations."""
    f = np.tanh if act == "tanh" else (lambda z: np.maximum(z, 0))
    finals = []
    for layer in range(layers):
        h, outs = h0[layer], []
        for t in range(x.shape[0]):
            h = f(x[t] @ sd[f"weight_ih_l{layer}"].T + sd[f"bias_ih_l{layer}"] + h @ sd[f"weight_hh_l{layer}"].T +
                  sd[f"bias_hh_l{layer}"])
            outs.append(h)
        x = np.stack(outs)
        finals.append(h)
    return x, np.stack(finals)


@pytest.mark.parametrize("act,batch_first", [("tanh", False), ("relu", True)])
def test_rnn(act, batch_first):
    m = nn.RNN(3, 5, num_layers=2, nonlinearity=act, batch_first=batch_first)
    assert list(m.state_dict()) == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_ih_l1",
                                    "weight_hh_l1", "bias_ih_l1", "bias_hh_l1"]
    assert m.weight_ih_l0.shape == (5, 3) and m.weight_hh_l1.shape == (5, 5)
    assert np.abs(m.weight_hh_l0.numpy()).max() <= 1 / math.sqrt(5)
    sd = randomize(m, 11)
    x, h0 = f64(R.standard_normal((6, 2, 3))), f64(R.standard_normal((2, 2, 5)))
    want, hn = rnn_ref(x, h0, sd, 2, act)
    out, h = m(T(x.transpose(1, 0, 2) if batch_first else x), T(h0))
    close(out, want.transpose(1, 0, 2) if batch_first else want)
    close(h, hn)
    out, h = m(T(x[:, 0]))                                        # unbatched, zero initial state
    want, hn = rnn_ref(x[:, :1], np.zeros((2, 1, 5)), sd, 2, act)
    close(out, want[:, 0])
    close(h, hn[:, 0])


def test_rnn_cell_gradient_repr_and_errors():
    c = nn.RNNCell(3, 4, nonlinearity="relu")
    sd = randomize(c, 12)
    x, h = f64(R.standard_normal((2, 3))), f64(R.standard_normal((2, 4)))
    close(c(T(x), T(h)), np.maximum(x @ sd["weight_ih"].T + sd["bias_ih"] + h @ sd["weight_hh"].T + sd["bias_hh"], 0))
    assert repr(c) == "RNNCell(3, 4, nonlinearity=relu)" and repr(nn.RNN(3, 4, 2)) == "RNN(3, 4, num_layers=2)"
    m = nn.RNN(2, 3)
    sd = randomize(m, 13)
    check(lambda t: m(t)[0], lambda a: rnn_ref(a, np.zeros((1, 2, 3)), sd, 1, "tanh")[0],
          [R.standard_normal((4, 2, 2))])
    with pytest.raises(ValueError, match="nonlinearity"):
        nn.RNN(2, 3, nonlinearity="sigmoid")
    with pytest.raises(NotImplementedError, match="bidirectional"):
        nn.RNN(2, 3, bidirectional=True)
    with pytest.raises(ValueError, match="input must be"):
        m(T(R.standard_normal((4, 2, 5))))
    with pytest.raises(ValueError, match="h_0 must have shape"):
        m(T(R.standard_normal((4, 2, 2))), T(np.zeros((2, 2, 3))))
