"""nn/_functional_more.py and nn/_modules_more.py against float64 numpy references on random inputs: forwards,
gradients (central differences, gradcheck.py, or the analytic derivative), the stable forms at |x| = 50 and 100,
every reduction, weight / pos_weight / ignore_index, error cases, and the module forms (parameters, state_dict,
repr)."""
import math
import warnings

import numpy as np
import pytest

import tlgpu
from tlgpu import nn
from tlgpu.nn import functional as F
from gradcheck import check

R = np.random.default_rng(7)


def T(a, **kw):
    return tlgpu.tensor(np.asarray(a, dtype=np.float32), **kw)


def close(t, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(t.numpy() if isinstance(t, tlgpu.Tensor) else t, want, rtol=rtol, atol=atol)


def sp(x):
    return np.logaddexp(0.0, x)


def sig(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def reduce_np(x, reduction):
    return x.mean() if reduction == "mean" else x.sum() if reduction == "sum" else x


SA, SS = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
ACTS = {   # name: (tlgpu, numpy float64)
    "softplus": (F.softplus, sp),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0, threshold=3.0),
                      lambda x: np.where(2 * x > 3, x, sp(2 * x) / 2)),
    "logsigmoid": (F.logsigmoid, lambda x: -sp(-x)),
    "mish": (F.mish, lambda x: x * np.tanh(sp(x))),
    "elu": (lambda x: F.elu(x, alpha=0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    "selu": (F.selu, lambda x: SS * np.where(x > 0, x, SA * np.expm1(x))),
    "celu": (lambda x: F.celu(x, 1.5), lambda x: np.maximum(x, 0) + np.minimum(0, 1.5 * np.expm1(x / 1.5))),
    "hardtanh": (lambda x: F.hardtanh(x, -0.5, 2.0), lambda x: np.clip(x, -0.5, 2.0)),
    "relu6": (F.relu6, lambda x: np.clip(x, 0, 6)),
    "hardswish": (F.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "hardsigmoid": (F.hardsigmoid, lambda x: np.clip(x / 6 + 0.5, 0, 1)),
    "softsign": (F.softsign, lambda x: x / (1 + np.abs(x))),
    "tanhshrink": (F.tanhshrink, lambda x: x - np.tanh(x)),
    "threshold": (lambda x: F.threshold(x, 0.3, -2.0), lambda x: np.where(x > 0.3, x, -2.0)),
    "glu": (lambda x: F.glu(x, 0), lambda x: x[:2] * sig(x[2:])),
    "softmin": (lambda x: F.softmin(x, dim=1), lambda x: np.exp(-x) / np.exp(-x).sum(1, keepdims=True)),
    "prelu": (lambda x: F.prelu(x, T([0.3, -0.2, 0.5, 0.1, 0.9])),
              lambda x: np.where(x > 0, x, x * np.array([0.3, -0.2, 0.5, 0.1, 0.9]))),
}


@pytest.mark.parametrize("name", list(ACTS))
def test_activation_forward_and_grad(name):
    fn_t, fn_np = ACTS[name]
    x = R.standard_normal((4, 5)) * 3           # kinks (0, +-1, +-3, 6) are far from any sample in float32
    check(fn_t, fn_np, [x], rtol=3e-3, atol=3e-4)


def test_activation_modules_match_functional_and_print_like_torch():
    x = T(R.standard_normal((3, 4)) * 3)
    cases = [
        (nn.Softplus(2.0, 5.0), lambda t: F.softplus(t, 2.0, 5.0), "Softplus(beta=2.0, threshold=5.0)"),
        (nn.Mish(), F.mish, "Mish()"), (nn.ELU(0.5), lambda t: F.elu(t, 0.5), "ELU(alpha=0.5)"),
        (nn.ELU(inplace=True), F.elu, "ELU(alpha=1.0, inplace=True)"), (nn.SELU(), F.selu, "SELU()"),
        (nn.CELU(2.0), lambda t: F.celu(t, 2.0), "CELU(alpha=2.0)"), (nn.Sigmoid(), tlgpu.sigmoid, "Sigmoid()"),
        (nn.LogSigmoid(), F.logsigmoid, "LogSigmoid()"),
        (nn.Hardtanh(-2.0, 2.0), lambda t: F.hardtanh(t, -2.0, 2.0), "Hardtanh(min_val=-2.0, max_val=2.0)"),
        (nn.ReLU6(inplace=True), F.relu6, "ReLU6(inplace=True)"), (nn.Hardswish(), F.hardswish, "Hardswish()"),
        (nn.Hardsigmoid(), F.hardsigmoid, "Hardsigmoid()"), (nn.Softsign(), F.softsign, "Softsign()"),
        (nn.Tanhshrink(), F.tanhshrink, "Tanhshrink()"), (nn.GLU(), F.glu, "GLU(dim=-1)"),
        (nn.Threshold(0.1, 20.0), lambda t: F.threshold(t, 0.1, 20.0), "Threshold(threshold=0.1, value=20.0)"),
        (nn.Softmax(dim=1), lambda t: F.softmax(t, 1), "Softmax(dim=1)"),
        (nn.LogSoftmax(0), lambda t: F.log_softmax(t, 0), "LogSoftmax(dim=0)"),
        (nn.Softmin(1), lambda t: F.softmin(t, 1), "Softmin(dim=1)"),
        (nn.Unflatten(1, (2, -1)), lambda t: t.reshape(3, 2, 2), "Unflatten(dim=1, unflattened_size=(2, -1))"),
    ]
    for m, fn, text in cases:
        close(m(x.clone()), fn(x.clone()).numpy(), 0, 0)
        assert repr(m) == text and m.parameters() == [] and list(m.state_dict()) == []


def test_stable_forms_at_extremes():
    xs = np.array([-100.0, -50.0, -20.5, 0.0, 20.5, 50.0, 100.0])
    for beta, thr in ((1.0, 20.0), (1.0, math.inf), (0.5, 1e9)):
        x = T(xs, requires_grad=True)
        y = F.softplus(x, beta, thr)
        y.sum().backward()
        want = np.where(beta * xs > thr, xs, sp(beta * xs) / beta)
        close(y, want, 1e-6, 1e-40)
        close(x.grad, np.where(beta * xs > thr, 1.0, sig(beta * xs)), 1e-6, 1e-40)
    x = T(xs, requires_grad=True)
    y = F.logsigmoid(x)
    y.sum().backward()
    close(y, -sp(-xs), 1e-6, 1e-40)
    close(x.grad, sig(-xs), 1e-6, 1e-40)
    x = T(xs, requires_grad=True)                       # mish and elu: no inf or NaN either way
    (F.mish(x) + F.elu(x) + F.selu(x)).sum().backward()
    assert np.isfinite(x.grad.numpy()).all()
    x = T([np.nan, 1.0])
    assert np.isnan(F.softplus(x).numpy()[0]) and np.isnan(F.logsigmoid(x).numpy()[0])


def test_half_dtypes():
    x = R.standard_normal((4, 6)) * 2
    for dt in (tlgpu.float16, tlgpu.bfloat16):
        h = T(x).to(dt)
        for fn in (F.softplus, F.logsigmoid, F.mish, F.elu, F.hardswish, F.softsign, F.glu, F.relu6):
            y = fn(h)
            assert y.dtype == dt, fn.__name__
            close(y.float(), fn(T(x)).numpy(), 2e-2, 3e-2)


def test_inplace_forms():
    x = R.standard_normal((3, 4))
    for fn, ref in ((F.elu, ACTS["elu"][1]), (F.hardtanh, lambda a: np.clip(a, -1, 1)),
                    (F.relu6, lambda a: np.clip(a, 0, 6)), (lambda t, inplace: F.threshold(t, 0.0, 5.0, inplace),
                                                           lambda a: np.where(a > 0, a, 5.0))):
        if fn is F.elu:
            ref = lambda a: np.where(a > 0, a, np.expm1(a))   # noqa: E731
        t = T(x)
        assert fn(t, inplace=True) is t
        close(t, ref(x), 1e-6, 1e-6)
        leaf = T(x, requires_grad=True)                 # through a non-leaf: the gradient is the out-of-place one
        y = leaf * 1.0
        fn(y, inplace=True).sum().backward()
        leaf2 = T(x, requires_grad=True)
        fn(leaf2, inplace=False).sum().backward()
        close(leaf.grad, leaf2.grad.numpy(), 0, 0)


def test_activation_errors():
    x = T(R.standard_normal((3, 5)))
    with pytest.raises(ValueError, match="even"):
        F.glu(x)
    with pytest.raises(ValueError, match="min_val"):
        F.hardtanh(x, 1.0, -1.0)
    with pytest.raises(ValueError, match="max_val"):
        nn.Hardtanh(1.0, 1.0)
    with pytest.raises(ValueError, match="alpha"):
        F.celu(x, 0.0)
    with pytest.raises(TypeError, match="Tensor"):
        F.softplus(np.zeros(3))
    with pytest.raises(ValueError, match="per channel"):
        F.prelu(x, T([0.1, 0.2]))
    with pytest.raises(ValueError, match="multiply"):
        nn.Unflatten(1, (2, 2))(x)


# ---- one_hot, normalize, pad ----

def test_one_hot():
    idx = R.integers(0, 6, (4, 3))
    t = tlgpu.tensor(idx.astype(np.int32))
    y = F.one_hot(t)
    assert y.dtype == np.int32 and y.shape == (4, 3, idx.max() + 1)
    np.testing.assert_array_equal(y.numpy(), np.eye(idx.max() + 1, dtype=np.int32)[idx])
    np.testing.assert_array_equal(F.one_hot(t, num_classes=9).numpy(), np.eye(9, dtype=np.int32)[idx])
    np.testing.assert_array_equal(F.one_hot(tlgpu.tensor(np.int32(2)), 4).numpy(), [0, 0, 1, 0])
    assert F.one_hot(tlgpu.zeros(0, dtype=tlgpu.int32), 3).shape == (0, 3)
    with pytest.raises(TypeError, match="int32"):
        F.one_hot(T([1.0, 2.0]))
    with pytest.raises(ValueError, match="empty"):
        F.one_hot(tlgpu.zeros(0, dtype=tlgpu.int32))
    with pytest.raises(IndexError, match="non-negative"):
        F.one_hot(tlgpu.tensor(np.array([1, -1], np.int32)))
    for bad in ([0, 5], [-1, 0]):                       # checked on the device, raised at the sync point
        with pytest.raises(IndexError):
            F.one_hot(tlgpu.tensor(np.array(bad, np.int32)), 5).numpy()


def _vnorm_np(x, p, axis, keepdims):
    if p == math.inf:
        return np.abs(x).max(axis, keepdims=keepdims)
    return (np.abs(x) ** p).sum(axis, keepdims=keepdims) ** (1 / p)


@pytest.mark.parametrize("p,dim", [(2.0, 1), (1, 0), (3.0, -1)])
def test_normalize(p, dim):
    x = R.standard_normal((3, 4))
    check(lambda a: F.normalize(a, p, dim), lambda a: a / np.maximum(_vnorm_np(a, p, dim, True), 1e-12), [x])
    z = F.normalize(tlgpu.zeros(2, 3))                  # a zero vector stays zero (eps), as torch
    close(z, np.zeros((2, 3)), 0, 0)
    with pytest.raises(TypeError, match="out="):
        F.normalize(T(x), out=T(x))


def test_pad_constant():
    x = R.standard_normal((2, 3, 4))
    check(lambda a: F.pad(a, (1, 2, 0, 1), value=-1.5),
          lambda a: np.pad(a, ((0, 0), (0, 1), (1, 2)), constant_values=-1.5), [x])
    check(lambda a: F.pad(a, (-1, 2, 1, -2, 1, 0)), lambda a: np.pad(a, ((1, 0), (1, 0), (0, 2)))[:, :2, 1:], [x])
    xi = tlgpu.tensor(np.arange(6, dtype=np.int32).reshape(2, 3))
    y = F.pad(xi, (1, 1), value=7)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y.numpy(), np.pad(np.arange(6).reshape(2, 3), ((0, 0), (1, 1)), constant_values=7))
    assert F.pad(T(x).half(), (1, 1)).dtype == tlgpu.float16


@pytest.mark.parametrize("mode,npmode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_pad_modes(mode, npmode):
    x = R.standard_normal((2, 3, 5))
    check(lambda a: F.pad(a, (2, 3), mode=mode), lambda a: np.pad(a, ((0, 0), (0, 0), (2, 3)), mode=npmode), [x])
    x4 = R.standard_normal((1, 2, 3, 4))
    close(F.pad(T(x4), (1, 2, 2, 1), mode=mode), np.pad(x4, ((0, 0), (0, 0), (2, 1), (1, 2)), mode=npmode), 1e-6, 1e-6)


def test_pad_errors():
    x = T(R.standard_normal((2, 3, 4)))
    with pytest.raises(ValueError, match="divisible by 2"):
        F.pad(x, (1, 2, 3))
    with pytest.raises(ValueError, match="too large"):
        F.pad(x, (1,) * 8)
    with pytest.raises(ValueError, match="negative size"):
        F.pad(x, (-3, -2))
    with pytest.raises(ValueError, match="too large for dim"):
        F.pad(x, (4, 0), mode="reflect")
    with pytest.raises(ValueError, match="mode"):
        F.pad(x, (1, 1), mode="symmetric")
    with pytest.raises(ValueError, match="value"):
        F.pad(x, (1, 1), mode="replicate", value=2.0)
    with pytest.raises(ValueError, match="1-3 dims"):
        F.pad(x, (1, 1, 1, 1, 1, 1), mode="reflect")
    with pytest.raises(TypeError, match="ints"):
        F.pad(x, (1.5, 1))


# ---- losses ----

REDS = ["mean", "sum", "none"]


def _bce_np(x, y, w=None):
    lx, l1 = np.maximum(np.log(x), -100), np.maximum(np.log1p(-x), -100)
    out = -(y * lx + (1 - y) * l1)
    return out if w is None else out * w


@pytest.mark.parametrize("reduction", REDS)
def test_binary_cross_entropy(reduction):
    x, y, w = R.uniform(0.05, 0.95, (4, 3)), R.uniform(0, 1, (4, 3)), R.uniform(0.5, 2, (3,))
    check(lambda a, b: F.binary_cross_entropy(a, b, reduction=reduction),
          lambda a, b: reduce_np(_bce_np(a, b), reduction), [x, y])
    check(lambda a: F.binary_cross_entropy(a, T(y), T(w), reduction=reduction),
          lambda a: reduce_np(_bce_np(a, y, w), reduction), [x])
    m = nn.BCELoss(weight=T(w), reduction=reduction)
    close(m(T(x), T(y)), reduce_np(_bce_np(x, y, w), reduction), 1e-5, 1e-6)
    assert repr(m) == "BCELoss()" and list(m.state_dict()) == ["weight"] and m.parameters() == []


def test_binary_cross_entropy_at_0_and_1():
    x = T([0.0, 1.0, 0.0, 1.0, 0.5], requires_grad=True)
    y = T([1.0, 0.0, 0.0, 1.0, 1.0])
    loss = F.binary_cross_entropy(x, y, reduction="none")
    close(loss, [100.0, 100.0, 0.0, 0.0, math.log(2)], 1e-6, 1e-6)   # torch clamps each log at -100
    loss.sum().backward()
    g = x.grad.numpy()
    assert np.isfinite(g).all() and g[4] == pytest.approx(-2.0)


def _bcel_np(x, y, w=None, pw=None):
    lw = 1.0 if pw is None else 1 + (pw - 1) * y
    out = (1 - y) * x + lw * sp(-x)
    return out if w is None else out * w


@pytest.mark.parametrize("reduction", REDS)
def test_bce_with_logits(reduction):
    x, y = R.standard_normal((4, 3)) * 3, R.uniform(0, 1, (4, 3))
    w, pw = R.uniform(0.5, 2, (4, 1)), R.uniform(0.5, 3, (3,))
    check(lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction=reduction),
          lambda a, b: reduce_np(_bcel_np(a, b), reduction), [x, y])
    check(lambda a: F.binary_cross_entropy_with_logits(a, T(y), T(w), reduction=reduction, pos_weight=T(pw)),
          lambda a: reduce_np(_bcel_np(a, y, w, pw), reduction), [x])
    m = nn.BCEWithLogitsLoss(pos_weight=T(pw), reduction=reduction)
    close(m(T(x), T(y)), reduce_np(_bcel_np(x, y, None, pw), reduction), 1e-5, 1e-5)
    assert repr(m) == "BCEWithLogitsLoss()" and list(m.state_dict()) == ["pos_weight"]


def test_bce_with_logits_at_extremes():
    xs = np.array([-100.0, -50.0, 50.0, 100.0, -100.0, 100.0])
    ys = np.array([1.0, 1.0, 0.0, 0.0, 0.0, 1.0])
    pw = np.array(2.5)
    x = T(xs, requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(x, T(ys), reduction="none", pos_weight=T(pw))
    close(loss, _bcel_np(xs, ys, None, pw), 1e-6, 1e-6)
    loss.sum().backward()
    close(x.grad, (1 - ys) - (1 + (pw - 1) * ys) * sig(-xs), 1e-6, 1e-6)   # the analytic derivative


def _nll_np(lp, t, w, ii, reduction):
    """lp (N, C, ...) or (C,); t of lp's shape without dim 1 (or 0-d)."""
    cdim = 0 if lp.ndim == 1 else 1
    lpm = np.moveaxis(lp, cdim, -1)
    keep = t != ii
    ts = np.where(keep, t, 0)
    wt = (np.ones(lp.shape[cdim]) if w is None else w)[ts] * keep
    per = -np.take_along_axis(lpm, ts[..., None], -1)[..., 0] * wt
    return per.sum() / wt.sum() if reduction == "mean" else per.sum() if reduction == "sum" else per


@pytest.mark.parametrize("shape", [(5, 4), (4,), (3, 4, 2)])
@pytest.mark.parametrize("reduction", REDS)
def test_nll_loss(shape, reduction):
    lp = R.standard_normal(shape)
    tshape = shape[:1] + shape[2:] if len(shape) > 1 else ()
    t = R.integers(0, 4, tshape)
    w = R.uniform(0.5, 2, 4)
    if len(shape) > 1:
        t.flat[1] = 2
        t.flat[0] = -3                                      # an ignored target
    tt = tlgpu.tensor(np.asarray(t, np.int32))
    check(lambda a: F.nll_loss(a, tt, T(w), ignore_index=-3, reduction=reduction),
          lambda a: _nll_np(a, t, w, -3, reduction), [lp])
    check(lambda a: F.nll_loss(a, tt, reduction=reduction, ignore_index=-3),
          lambda a: _nll_np(a, t, None, -3, reduction), [lp])
    m = nn.NLLLoss(weight=T(w), ignore_index=-3, reduction=reduction)
    close(m(T(lp), tt), _nll_np(lp, t, w, -3, reduction), 1e-5, 1e-6)


def test_nll_loss_matches_cross_entropy_and_errors():
    x = R.standard_normal((6, 5))
    t = tlgpu.tensor(R.integers(0, 5, 6).astype(np.int32))
    close(F.nll_loss(F.log_softmax(T(x), 1), t), F.cross_entropy(T(x), t).numpy(), 1e-5, 1e-6)
    with pytest.raises(TypeError, match="int32"):
        F.nll_loss(T(x), T(np.zeros(6)))
    with pytest.raises(ValueError, match="targets of shape"):
        F.nll_loss(T(x), tlgpu.zeros(5, dtype=tlgpu.int32))
    with pytest.raises(ValueError, match="one per class"):
        F.nll_loss(T(x), t, weight=T(np.ones(4)))
    with pytest.raises(IndexError):
        F.nll_loss(T(x), tlgpu.tensor(np.full(6, 5, np.int32))).numpy()


def _kl_np(x, t, log_target):
    if log_target:
        return np.exp(t) * (t - x)
    return np.where(t == 0, 0.0, t * np.log(np.where(t == 0, 1.0, t))) - t * x


@pytest.mark.parametrize("reduction", ["batchmean", "sum", "none", "mean"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(reduction, log_target):
    x = R.standard_normal((3, 4))
    t = R.uniform(0.05, 1, (3, 4)) if not log_target else R.standard_normal((3, 4))

    def ref(a, b):
        v = _kl_np(a, b, log_target)
        return v.sum() / 3 if reduction == "batchmean" else reduce_np(v, reduction)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(lambda a, b: F.kl_div(a, b, reduction=reduction, log_target=log_target), ref, [x, t])
        m = nn.KLDivLoss(reduction=reduction, log_target=log_target)
        close(m(T(x), T(t)), ref(x, t), 1e-5, 1e-6)
    assert any("batchmean" in str(w.message) for w in caught) == (reduction == "mean")
    z = T([[0.0, 0.5, 0.5]])                            # 0 log 0 = 0, and no NaN gradient
    xz = T([[-1.0, -2.0, -0.5]], requires_grad=True)
    loss = F.kl_div(xz, z, reduction="sum")
    loss.backward()
    close(loss, 0.5 * (math.log(0.5) + 2) + 0.5 * (math.log(0.5) + 0.5), 1e-6, 1e-6)
    assert np.isfinite(xz.grad.numpy()).all()


def _gnll_np(x, y, v, full, eps=1e-6):
    v = np.maximum(v, eps)
    out = 0.5 * (np.log(v) + (x - y) ** 2 / v)
    return out + 0.5 * math.log(2 * math.pi) if full else out


@pytest.mark.parametrize("reduction", REDS)
@pytest.mark.parametrize("vshape", [(4, 3), (4,), (4, 1)])
def test_gaussian_nll_loss(reduction, vshape):
    x, y, v = R.standard_normal((4, 3)), R.standard_normal((4, 3)), R.uniform(0.2, 2, vshape)
    vb = v[:, None] if vshape == (4,) else v
    full = vshape == (4, 1)
    check(lambda a, b, c: F.gaussian_nll_loss(a, b, c, full=full, reduction=reduction),
          lambda a, b, c: reduce_np(_gnll_np(a, b, c[:, None] if vshape == (4,) else c, full), reduction), [x, y, v])
    m = nn.GaussianNLLLoss(full=full, reduction=reduction)
    close(m(T(x), T(y), T(v)), reduce_np(_gnll_np(x, y, vb, full), reduction), 1e-5, 1e-6)


def test_gaussian_nll_loss_clamp_and_errors():
    var = T([1e-9, 0.5], requires_grad=True)          # clamped to eps in value; its gradient passes through
    x = T([0.1, 0.2])
    F.gaussian_nll_loss(x, T([0.0, 0.0]), var, reduction="sum").backward()
    vc = np.array([1e-6, 0.5])
    close(var.grad, 0.5 / vc - 0.5 * np.array([0.01, 0.04]) / vc ** 2, 1e-4, 1e-3)
    close(F.gaussian_nll_loss(x, T([0.0, 0.0]), 0.5), _gnll_np(np.array([0.1, 0.2]), 0, 0.5, False).mean(), 1e-6)
    with pytest.raises(ValueError, match="negative"):
        F.gaussian_nll_loss(x, x, -1.0)
    with pytest.raises(ValueError, match="incorrect size"):
        F.gaussian_nll_loss(T(np.ones((4, 3))), T(np.ones((4, 3))), T(np.ones((3,))))


def test_loss_errors():
    x, y = T(R.uniform(0.1, 0.9, (4, 3))), T(R.uniform(0, 1, (4, 3)))
    losses = [F.binary_cross_entropy, F.binary_cross_entropy_with_logits, F.kl_div,
              lambda a, b, reduction: F.gaussian_nll_loss(a, b, T(np.ones((4, 3))), reduction=reduction),
              lambda a, b, reduction: F.nll_loss(a, tlgpu.zeros(4, dtype=tlgpu.int32), reduction=reduction)]
    for fn in losses:
        with pytest.raises(ValueError, match="reduction"):
            fn(x, y, reduction="avg")
    for ctor in (nn.BCELoss, nn.BCEWithLogitsLoss, nn.NLLLoss, nn.KLDivLoss, nn.GaussianNLLLoss):
        with pytest.raises(ValueError, match="reduction"):
            ctor(reduction="avg")
    with pytest.raises(ValueError, match="reduction"):
        F.binary_cross_entropy(x, y, reduction="batchmean")
    for fn in (F.binary_cross_entropy, F.binary_cross_entropy_with_logits):
        with pytest.raises(ValueError, match="same as input size"):
            fn(x, T(np.ones((4, 1))))
        with pytest.raises(ValueError, match="weight"):
            fn(x, y, T(np.ones(2)))
        with pytest.raises(TypeError, match="floating"):
            fn(x, tlgpu.zeros(4, 3, dtype=tlgpu.int32))
    with pytest.raises(ValueError, match="pos_weight"):
        F.binary_cross_entropy_with_logits(x, y, pos_weight=T(np.ones(4)))
    with pytest.warns(UserWarning, match="deprecated"):                        # torch's legacy keywords
        assert F.binary_cross_entropy_with_logits(x, y, reduce=False).shape == (4, 3)


# ---- distances, gumbel_softmax ----

@pytest.mark.parametrize("s1,s2,dim", [((4, 5), (4, 5), 1), ((4, 5), (5,), -1), ((2, 3, 4), (2, 1, 4), 0)])
def test_cosine_similarity(s1, s2, dim):
    a, b = R.standard_normal(s1), R.standard_normal(s2)

    def ref(x1, x2):
        x1, x2 = np.broadcast_arrays(x1, x2)
        n1 = np.maximum(np.linalg.norm(x1, axis=dim, keepdims=True), 1e-8)
        n2 = np.maximum(np.linalg.norm(x2, axis=dim, keepdims=True), 1e-8)
        return (x1 / n1 * x2 / n2).sum(dim)
    check(lambda x1, x2: F.cosine_similarity(x1, x2, dim), ref, [a, b])
    close(nn.CosineSimilarity(dim)(T(a), T(b)), ref(a, b), 1e-5, 1e-6)
    assert F.cosine_similarity(tlgpu.zeros(2, 3), T(np.ones((2, 3)))).numpy().tolist() == [0.0, 0.0]
    with pytest.raises(ValueError, match="broadcast"):
        F.cosine_similarity(T(a), T(np.ones((3, 2))))


@pytest.mark.parametrize("p,keepdim", [(2.0, False), (1.0, True), (3.0, False), (math.inf, False)])
def test_pairwise_distance(p, keepdim):
    a, b = R.standard_normal((4, 5)), R.standard_normal((4, 5))
    ref = lambda x1, x2: _vnorm_np(x1 - x2 + 1e-6, p, -1, keepdim)   # noqa: E731
    check(lambda x1, x2: F.pairwise_distance(x1, x2, p, keepdim=keepdim), ref, [a, b])
    m = nn.PairwiseDistance(p, keepdim=keepdim)
    close(m(T(a), T(b)), ref(a, b), 1e-5, 1e-6)
    assert repr(m) == "PairwiseDistance()"


def test_gumbel_softmax():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    x = T(np.tile(logits, (4000, 1)), requires_grad=True)
    tlgpu.manual_seed(11)
    y = F.gumbel_softmax(x, tau=0.5)
    yn = y.numpy()
    close(yn.sum(1), np.ones(4000), 1e-5, 1e-5)
    freq = np.bincount(yn.argmax(1), minlength=4) / 4000    # argmax of logits + Gumbel ~ softmax(logits)
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.03)
    tlgpu.manual_seed(11)
    h = F.gumbel_softmax(x, tau=0.5, hard=True)
    hn = h.numpy()
    np.testing.assert_array_equal(hn, np.eye(4)[yn.argmax(1)])   # same noise, the soft sample's argmax
    g = R.standard_normal((4000, 4))
    h.backward(T(g))
    gh = x.grad.numpy()
    x.grad = None
    tlgpu.manual_seed(11)
    F.gumbel_softmax(x, tau=0.5).backward(T(g))
    close(gh, x.grad.numpy(), 1e-5, 1e-6)               # the hard sample passes the soft one's gradient
    y0 = F.gumbel_softmax(T(np.zeros((3, 5))), dim=0, hard=True).numpy()
    np.testing.assert_array_equal(y0.sum(0), np.ones(5))
    with pytest.warns(UserWarning, match="eps"):
        F.gumbel_softmax(T(logits), eps=1e-5)


# ---- PReLU and the parameter containers ----

def test_prelu_module():
    m = nn.PReLU(3, init=0.1)
    assert repr(m) == "PReLU(num_parameters=3)"
    assert [n for n, _ in m.named_parameters()] == ["weight"] and m.weight.shape == (3,)
    close(m.weight, np.full(3, 0.1, np.float32), 0, 0)
    x = R.standard_normal((2, 3, 4))
    w = np.array([0.1, -0.5, 0.7])
    check(lambda a, b: F.prelu(a, b), lambda a, b: np.where(a > 0, a, a * b[:, None]), [x, w])
    m.load_state_dict({"weight": w})
    close(m(T(x)), np.where(x > 0, x, x * w[:, None]), 1e-6, 1e-7)
    m2 = nn.PReLU(3)
    m2.load_state_dict(m.state_dict())
    close(m2.weight, w, 1e-7, 0)
    one = nn.PReLU()
    y = one(T(x))
    y.sum().backward()
    close(one.weight.grad, [x[x <= 0].sum()], 1e-5, 1e-5)


def test_parameter_list():
    a, b = R.standard_normal(3), R.standard_normal((2, 3))
    p0 = T(a, requires_grad=True)
    pl = nn.ParameterList([p0, T(b)])
    assert len(pl) == 2 and pl[0] is p0 and pl[1].requires_grad and pl[1].is_leaf
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"] and pl.buffers() == []
    pl.append(np.ones(4))
    assert len(pl) == 3 and pl[-1].shape == (4,) and len(pl[1:]) == 2 and [p.shape for p in pl][0] == (3,)
    assert repr(pl) == ("ParameterList(\n    (0): Parameter containing: [tlgpu.float32 of size 3]\n"
                        "    (1): Parameter containing: [tlgpu.float32 of size 2x3]\n"
                        "    (2): Parameter containing: [tlgpu.float32 of size 4]\n)")

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.ps = nn.ParameterList([tlgpu.zeros(3), tlgpu.zeros(2, 3)])

    net = Net()
    sd = net.state_dict()
    assert list(sd) == ["ps.0", "ps.1"] and len(net.parameters()) == 2
    net2 = Net()
    net2.load_state_dict({"ps.0": a, "ps.1": b})
    close(net2.ps[0], a, 1e-7, 0)
    net.load_state_dict(net2.state_dict())
    close(net.ps[1], b, 1e-7, 0)
    pl[0] = T(b)
    assert pl[0].shape == (2, 3)
    with pytest.raises(IndexError):
        pl[5]
    with pytest.raises(TypeError, match="tensors"):
        pl.append("x")


def test_parameter_dict():
    pd = nn.ParameterDict({"w": tlgpu.ones(2, 2), "b": T(R.standard_normal(2))})
    assert list(pd) == ["w", "b"] and "w" in pd and len(pd) == 2
    assert [n for n, _ in pd.named_parameters()] == ["w", "b"] and all(p.requires_grad for p in pd.values())
    assert repr(pd) == ("ParameterDict(\n    (w): Parameter containing: [tlgpu.float32 of size 2x2]\n"
                        "    (b): Parameter containing: [tlgpu.float32 of size 2]\n)")
    pd["c"] = tlgpu.zeros(3)
    assert list(pd.keys()) == ["w", "b", "c"] and pd.get("z") is None
    c = pd.pop("c")
    assert c.shape == (3,) and "c" not in pd and not hasattr(pd, "c")
    pd2 = nn.ParameterDict({"w": tlgpu.zeros(2, 2), "b": tlgpu.zeros(2)})
    pd2.load_state_dict(pd.state_dict())
    close(pd2["b"], pd["b"].numpy(), 0, 0)
    (pd["w"].sum() * 2).backward()
    close(pd["w"].grad, np.full((2, 2), 2.0), 0, 0)
    with pytest.raises(KeyError):
        pd["a.b"] = tlgpu.zeros(1)
    pd.clear()
    assert len(pd) == 0 and pd.parameters() == [] and repr(pd) == "ParameterDict()"
