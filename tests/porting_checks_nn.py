"""Checks for docs/porting.md's rows (see porting_checks.py): torch names added in the thirteenth session (nn):
the activations, one_hot / pad / normalize, the BCE / NLL / KL / Gaussian-NLL losses, the distances and
gumbel_softmax (nn/_functional_more.py), and PReLU, Unflatten, ParameterList / ParameterDict (nn/_modules_more.py)."""
import math
import warnings

import numpy as np

import tlgpu
import tlgpu.nn.functional as F
from porting_checks import T, close, f32, raises, rng, row
from tlgpu import nn


def _sp(x):
    return np.logaddexp(0.0, x)


def _sig(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


ROW_ACT = ('`F.softplus(x, beta, threshold)`, `F.logsigmoid/mish/elu/selu/celu/hardtanh/relu6/hardswish/hardsigmoid/'
           'softsign/tanhshrink/threshold/glu/softmin/prelu`')


@row(ROW_ACT)
def _():
    x = rng().standard_normal((4, 6)) * 3
    x[0, :4] = [-100.0, -50.0, 50.0, 100.0]
    xf = f32(x).astype(np.float64)
    refs = {
        "softplus": (lambda t: F.softplus(t, 2.0, 30.0), np.where(2 * xf > 30, xf, _sp(2 * xf) / 2)),
        "logsigmoid": (F.logsigmoid, -_sp(-xf)), "mish": (F.mish, xf * np.tanh(_sp(xf))),
        "elu": (lambda t: F.elu(t, 0.5), np.where(xf > 0, xf, 0.5 * np.expm1(np.minimum(xf, 0)))),
        "selu": (F.selu, 1.0507009873554805 * np.where(xf > 0, xf, 1.6732632423543772 * np.expm1(np.minimum(xf, 0)))),
        "celu": (lambda t: F.celu(t, 2.0), np.maximum(xf, 0) + np.minimum(0, 2 * np.expm1(np.minimum(xf, 0) / 2))),
        "hardtanh": (lambda t: F.hardtanh(t, -2.0, 1.0), np.clip(xf, -2, 1)), "relu6": (F.relu6, np.clip(xf, 0, 6)),
        "hardswish": (F.hardswish, xf * np.clip(xf + 3, 0, 6) / 6),
        "hardsigmoid": (F.hardsigmoid, np.clip(xf / 6 + 0.5, 0, 1)), "softsign": (F.softsign, xf / (1 + abs(xf))),
        "tanhshrink": (F.tanhshrink, xf - np.tanh(xf)),
        "threshold": (lambda t: F.threshold(t, 0.5, -1.0), np.where(xf > 0.5, xf, -1.0)),
        "glu": (F.glu, xf[:, :3] * _sig(xf[:, 3:])),
        "softmin": (lambda t: F.softmin(t, 1), np.exp(-xf + xf.min(1, keepdims=True)) /
                    np.exp(-xf + xf.min(1, keepdims=True)).sum(1, keepdims=True)),
        "prelu": (lambda t: F.prelu(t, T([0.2])), np.where(xf > 0, xf, 0.2 * xf)),
    }
    for name, (fn, want) in refs.items():
        close(fn(T(x)), want, 2e-5, 1e-6)
    t = T(x, requires_grad=True)                                  # the stable forms' gradients at |x| = 100
    (F.softplus(t) + F.logsigmoid(t)).sum().backward()
    close(t.grad, np.where(xf > 20, 1.0, _sig(xf)) + _sig(-xf), 1e-5, 1e-6)
    y = T(x)
    assert F.elu(y, inplace=True) is y
    raises(ValueError, "even", lambda: F.glu(T(x[:, :5])))
    raises(ValueError, "min_val", lambda: F.hardtanh(T(x), 1.0, 0.0))


@row('`nn.Softplus/Mish/ELU/SELU/CELU/Sigmoid/LogSigmoid/Hardtanh/ReLU6/Hardswish/Hardsigmoid/Softsign/Tanhshrink/'
     'Threshold/GLU/Softmax/LogSoftmax/Softmin/PReLU/Unflatten`')
def _():
    x = T(rng().standard_normal((2, 4, 3)))
    for m, fn, text in ((nn.Softplus(beta=2.0), lambda t: F.softplus(t, 2.0), "Softplus(beta=2.0, threshold=20.0)"),
                        (nn.ELU(inplace=True), F.elu, "ELU(alpha=1.0, inplace=True)"),
                        (nn.Hardtanh(), F.hardtanh, "Hardtanh(min_val=-1.0, max_val=1.0)"),
                        (nn.ReLU6(), F.relu6, "ReLU6()"), (nn.Mish(), F.mish, "Mish()"),
                        (nn.Sigmoid(), tlgpu.sigmoid, "Sigmoid()"), (nn.GLU(1), lambda t: F.glu(t, 1), "GLU(dim=1)"),
                        (nn.Softmax(dim=1), lambda t: F.softmax(t, 1), "Softmax(dim=1)"),
                        (nn.Threshold(0.1, 2.0), lambda t: F.threshold(t, 0.1, 2.0),
                         "Threshold(threshold=0.1, value=2.0)")):
        close(m(x.clone()), fn(x.clone()).numpy(), 0, 0)
        assert repr(m) == text
    u = nn.Unflatten(1, (2, 2))
    assert u(x).shape == (2, 2, 2, 3) and repr(u) == "Unflatten(dim=1, unflattened_size=(2, 2))"
    p = nn.PReLU(4, init=0.1)
    assert [n for n, _ in p.named_parameters()] == ["weight"] and repr(p) == "PReLU(num_parameters=4)"
    xn = x.numpy().astype(np.float64)
    close(p(x), np.where(xn > 0, xn, 0.1 * xn), 1e-6, 1e-7)
    p(x).sum().backward()
    close(p.weight.grad, np.where(xn > 0, 0, xn).sum((0, 2)), 1e-5, 1e-5)


@row('`F.one_hot(t, num_classes=-1)`')
def _():
    idx = rng().integers(0, 5, (3, 4))
    t = tlgpu.tensor(idx)                                         # int64 uploaded as int32
    y = F.one_hot(t)
    assert y.dtype == np.int32 and y.shape == (3, 4, idx.max() + 1)
    np.testing.assert_array_equal(y.numpy(), np.eye(idx.max() + 1)[idx])
    np.testing.assert_array_equal(F.one_hot(t, 7).numpy(), np.eye(7)[idx])
    raises(TypeError, "int32", lambda: F.one_hot(T([1.0])))
    raises(IndexError, "out of range", lambda: F.one_hot(tlgpu.tensor([1, 4]), 4).numpy())


@row('`F.pad(x, pad, mode="constant"/"reflect"/"replicate"/"circular", value)`, `F.normalize(x, p, dim, eps)`')
def _():
    x = rng().standard_normal((2, 3, 4))
    xf = f32(x).astype(np.float64)
    close(F.pad(T(x), (1, 2, 0, 1), value=0.5), np.pad(xf, ((0, 0), (0, 1), (1, 2)), constant_values=0.5), 0, 0)
    close(F.pad(T(x), (-1, 1)), np.pad(xf, ((0, 0), (0, 0), (0, 1)))[:, :, 1:], 0, 0)
    for mode, npm in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
        close(F.pad(T(x), (2, 1), mode=mode), np.pad(xf, ((0, 0), (0, 0), (2, 1)), mode=npm), 0, 0)
    t = T(x, requires_grad=True)
    F.pad(t, (1, 1), mode="reflect").sum().backward()             # the edge-adjacent columns count twice
    close(t.grad, np.broadcast_to([1.0, 2.0, 2.0, 1.0], (2, 3, 4)), 0, 0)
    raises(ValueError, "divisible by 2", lambda: F.pad(T(x), (1,)))
    for p in (2.0, 1.0, 3.0):
        n = (abs(xf) ** p).sum(1, keepdims=True) ** (1 / p)
        close(F.normalize(T(x), p, dim=1), xf / np.maximum(n, 1e-12), 1e-5, 1e-6)


@row('`F.binary_cross_entropy(p, y, weight)`, `F.binary_cross_entropy_with_logits(x, y, weight, pos_weight=)`, '
     '`nn.BCELoss`, `nn.BCEWithLogitsLoss`')
def _():
    r = rng()
    x, y, pw = r.standard_normal((5, 3)) * 4, r.random((5, 3)), r.random(3) + 0.5
    x[0] = [-100.0, 50.0, 100.0]
    xf, yf, pwf = (f32(a).astype(np.float64) for a in (x, y, pw))
    lw = 1 + (pwf - 1) * yf
    want = (1 - yf) * xf + lw * _sp(-xf)
    for red, fn in (("none", lambda a: a), ("mean", np.mean), ("sum", np.sum)):
        close(F.binary_cross_entropy_with_logits(T(x), T(y), reduction=red, pos_weight=T(pw)), fn(want), 1e-5, 1e-5)
    t = T(x, requires_grad=True)
    nn.BCEWithLogitsLoss(pos_weight=T(pw), reduction="sum")(t, T(y)).backward()
    close(t.grad, (1 - yf) - lw * _sig(-xf), 1e-5, 1e-6)
    p = _sig(xf[1:])
    pt = T(p, requires_grad=True)
    w = T(r.random(3))
    loss = F.binary_cross_entropy(pt, T(y[1:]), w, reduction="none")
    pf = f32(p).astype(np.float64)
    close(loss, -(yf[1:] * np.log(pf) + (1 - yf[1:]) * np.log1p(-pf)) * w.numpy(), 1e-4, 1e-5)
    close(nn.BCELoss()(T([0.0, 1.0]), T([1.0, 0.0])), 100.0, 0, 0)     # each log clamped at -100
    raises(ValueError, "same as input size", lambda: F.binary_cross_entropy(pt, T(y)))


@row('`F.nll_loss(logp, y, weight, ignore_index)`, `F.kl_div(logp, q, reduction="batchmean", log_target)`, '
     '`F.gaussian_nll_loss(mu, y, var)`, `nn.NLLLoss/KLDivLoss/GaussianNLLLoss`')
def _():
    r = rng()
    lp = r.standard_normal((6, 4))
    y = r.integers(0, 4, 6)
    y[2] = -100
    w = r.random(4) + 0.5
    lpf, wf = f32(lp).astype(np.float64), f32(w).astype(np.float64)
    keep = y != -100
    ws = wf[np.where(keep, y, 0)] * keep
    per = -lpf[np.arange(6), np.where(keep, y, 0)] * ws
    close(F.nll_loss(T(lp), tlgpu.tensor(y), T(w)), per.sum() / ws.sum(), 1e-5, 1e-6)
    close(nn.NLLLoss(reduction="none")(T(lp), tlgpu.tensor(y)), per / np.where(keep, wf[np.where(keep, y, 0)], 1),
          1e-5, 1e-6)
    q = r.random((6, 4))
    q /= q.sum(1, keepdims=True)
    qf = f32(q).astype(np.float64)
    kl = (qf * (np.log(qf) - lpf)).sum()
    close(F.kl_div(T(lp), T(q), reduction="batchmean"), kl / 6, 1e-5, 1e-5)
    close(nn.KLDivLoss(reduction="sum", log_target=True)(T(lp), T(np.log(q))), kl, 1e-4, 1e-5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        close(F.kl_div(T(lp), T(q)), kl / 24, 1e-5, 1e-5)           # 'mean' warns, as torch
    assert any("batchmean" in str(c.message) for c in caught)
    mu, var = r.standard_normal((6, 2)), r.random((6, 1)) + 0.1
    muf, varf, tf = f32(mu).astype(np.float64), f32(var).astype(np.float64), f32(q[:, :2]).astype(np.float64)
    g = 0.5 * (np.log(varf) + (muf - tf) ** 2 / varf) + 0.5 * math.log(2 * math.pi)
    close(nn.GaussianNLLLoss(full=True)(T(mu), T(q[:, :2]), T(var)), g.mean(), 1e-5, 1e-6)
    raises(ValueError, "reduction", lambda: F.nll_loss(T(lp), tlgpu.tensor(y), reduction="avg"))
    raises(ValueError, "incorrect size", lambda: F.gaussian_nll_loss(T(mu), T(mu), T(np.ones(2))))


@row('`F.cosine_similarity(a, b, dim, eps)`, `F.pairwise_distance(a, b, p)`, `F.gumbel_softmax(logits, tau, hard)`, '
     '`nn.CosineSimilarity/PairwiseDistance`')
def _():
    r = rng()
    a, b = r.standard_normal((5, 4)), r.standard_normal((5, 4))
    af, bf = f32(a).astype(np.float64), f32(b).astype(np.float64)
    cos = (af * bf).sum(1) / np.linalg.norm(af, axis=1) / np.linalg.norm(bf, axis=1)
    close(F.cosine_similarity(T(a), T(b)), cos, 1e-5, 1e-6)
    close(nn.CosineSimilarity(dim=1)(T(a), T(b[0])), (af * bf[0]).sum(1) / np.linalg.norm(af, axis=1) /
          np.linalg.norm(bf[0]), 1e-5, 1e-6)
    for p in (2.0, 1.0, 3.0):
        close(nn.PairwiseDistance(p)(T(a), T(b)), (abs(af - bf + 1e-6) ** p).sum(1) ** (1 / p), 1e-5, 1e-6)
    tlgpu.manual_seed(4)
    logits = T(np.tile(np.log([0.25, 0.75]), (4000, 1)), requires_grad=True)
    h = F.gumbel_softmax(logits, tau=0.7, hard=True)
    hn = h.numpy()
    assert set(np.unique(hn)) == {0.0, 1.0} and (hn.sum(1) == 1).all() and abs(hn[:, 1].mean() - 0.75) < 0.03
    h[:, 1].sum().backward()
    assert logits.grad is not None and abs(logits.grad.numpy().sum()) < 1e-3      # softmax rows: grads sum to 0


@row('`nn.ParameterList([...])`, `nn.ParameterDict({...})`')
def _():
    a = rng().standard_normal((2, 3))
    pl = nn.ParameterList([tlgpu.zeros(3), T(a)])
    pd = nn.ParameterDict({"scale": tlgpu.ones(1)})
    assert [n for n, _ in pl.named_parameters()] == ["0", "1"] and all(p.requires_grad for p in pl)
    assert list(pd.state_dict()) == ["scale"] and pd["scale"].requires_grad

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.ps, self.pd = nn.ParameterList([tlgpu.zeros(2, 3)]), nn.ParameterDict({"b": tlgpu.zeros(3)})

    net, net2 = Net(), Net()
    net.load_state_dict({"ps.0": a, "pd.b": a[0]})
    assert list(net.state_dict()) == ["ps.0", "pd.b"] and len(net.parameters()) == 2
    net2.load_state_dict(net.state_dict())
    close(net2.ps[0], f32(a), 0, 0)
    close(net2.pd["b"], f32(a[0]), 0, 0)
    assert repr(pd) == "ParameterDict(\n    (scale): Parameter containing: [tlgpu.float32 of size 1]\n)"


# ---- nn/_layers_more.py and nn/_functional_layers.py: normalization, conv1d, pooling, attention, RNN ----

def _bn_np(x, w, b, mean, var, eps):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * w.reshape(shape) + b.reshape(shape)


@row('`F.batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)`, '
     '`nn.BatchNorm1d/2d/3d(num_features, eps, momentum, affine, track_running_stats)`')
def _():
    r = rng()
    m = nn.BatchNorm2d(3, momentum=None)
    w, b = r.standard_normal(3), r.standard_normal(3)
    m.load_state_dict({**m.state_dict(), "weight": w, "bias": b})
    wf, bf = f32(w).astype(np.float64), f32(b).astype(np.float64)
    xs = []
    for _ in range(2):
        x = f32(r.standard_normal((4, 3, 2, 5)) * 2 + 1).astype(np.float64)
        xs.append(x)
        close(m(T(x)), _bn_np(x, wf, bf, x.mean((0, 2, 3)), x.var((0, 2, 3)), 1e-5), 1e-4, 2e-5)
    close(m.running_mean, np.mean([x.mean((0, 2, 3)) for x in xs], 0), 1e-5, 1e-6)   # momentum=None: average
    close(m.running_var, np.mean([x.var((0, 2, 3), ddof=1) for x in xs], 0), 1e-5, 1e-6)
    assert m.num_batches_tracked.item() == 2
    x = r.standard_normal((4, 3, 2, 5))
    close(m.eval()(T(x)), _bn_np(f32(x).astype(np.float64), wf, bf, m.running_mean.numpy().astype(np.float64),
                                  m.running_var.numpy().astype(np.float64), 1e-5), 1e-4, 2e-5)
    assert list(m.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    rm, rv = T(np.zeros(4)), T(np.ones(4))
    x1 = r.standard_normal((6, 4))
    F.batch_norm(T(x1), rm, rv, training=True, momentum=0.25)
    close(rv, 0.75 + 0.25 * f32(x1).astype(np.float64).var(0, ddof=1), 1e-5, 1e-6)
    raises(ValueError, "2D or 3D", lambda: nn.BatchNorm1d(3)(T(r.standard_normal((2, 3, 2, 2)))))


@row('`F.group_norm(x, num_groups, weight, bias, eps)`, `nn.GroupNorm(num_groups, num_channels, eps, affine)`')
def _():
    x = f32(rng().standard_normal((2, 6, 5)) * 3).astype(np.float64)
    xr = x.reshape(2, 2, -1)
    want = ((xr - xr.mean(-1, keepdims=True)) / np.sqrt(xr.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    close(nn.GroupNorm(2, 6)(T(x)), want, 1e-4, 2e-5)
    x3 = x.reshape(2, 3, -1)
    want3 = ((x3 - x3.mean(-1, keepdims=True)) / np.sqrt(x3.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    close(F.group_norm(T(x), 3, T(np.arange(6.0)), None), want3 * np.arange(6.0).reshape(1, 6, 1), 1e-4, 2e-5)
    raises(ValueError, "divisible", lambda: nn.GroupNorm(4, 6))


def _conv1d_np(x, w, s, lo, hi, d, g):
    xp = np.pad(x, ((0, 0), (0, 0), (lo, hi)))
    o, cg, k = w.shape
    lout = (xp.shape[2] - d * (k - 1) - 1) // s + 1
    y = np.zeros((x.shape[0], o, lout))
    for oc in range(o):
        grp = oc // (o // g)
        for t in range(lout):
            y[:, oc, t] = (xp[:, grp * cg:(grp + 1) * cg, t * s: t * s + d * (k - 1) + 1: d] * w[oc]).sum((1, 2))
    return y


@row('`F.conv1d(x, w, b, stride, padding, dilation, groups)`, '
     '`nn.Conv1d(in, out, k, stride, padding, dilation, groups, bias, padding_mode)`')
def _():
    r = rng()
    x = f32(r.standard_normal((2, 4, 9))).astype(np.float64)
    for s, p, d, g, k in ((2, 1, 1, 1, 3), (1, "same", 1, 1, 4), (1, 2, 2, 2, 3), (1, "same", 1, 4, 3)):
        w = f32(r.standard_normal((4, 4 // g, k))).astype(np.float64)
        lo, hi = ((k - 1) // 2, k - 1 - (k - 1) // 2) if p == "same" else (p, p)
        close(F.conv1d(T(x), T(w), None, s, p, d, g), _conv1d_np(x, w, s, lo, hi, d, g), 1e-4, 2e-5)
    m = nn.Conv1d(4, 2, 3, padding=1, padding_mode="circular", bias=False)
    close(m(T(x)), _conv1d_np(np.pad(x, ((0, 0), (0, 0), (1, 1)), mode="wrap"),
                              m.weight.numpy().astype(np.float64), 1, 0, 0, 1, 1), 1e-4, 2e-5)
    assert repr(m) == "Conv1d(4, 2, kernel_size=(3,), stride=(1,), padding=(1,), bias=False, padding_mode=circular)"
    raises(ValueError, "strided", lambda: F.conv1d(T(x), T(np.ones((2, 4, 3))), stride=2, padding="same"))


@row('`F.max_pool1d(x, k, stride, padding)`, `F.avg_pool1d(x, k, stride, padding, count_include_pad=)`, '
     '`nn.MaxPool1d`, `nn.AvgPool1d`')
def _():
    x = rng().standard_normal((2, 3, 10))
    xf = f32(x)
    xp = np.pad(xf, ((0, 0), (0, 0), (1, 1)), constant_values=-np.inf)
    close(nn.MaxPool1d(3, 2, 1)(T(x)), np.stack([xp[..., 2 * t: 2 * t + 3].max(-1) for t in range(5)], -1), 0, 0)
    xz = np.pad(xf.astype(np.float64), ((0, 0), (0, 0), (1, 1)))
    close(F.avg_pool1d(T(x), 3, 2, 1), np.stack([xz[..., 2 * t: 2 * t + 3].mean(-1) for t in range(5)], -1))
    close(nn.AvgPool1d(2)(T(x[0])), xf[0].reshape(3, 5, 2).mean(-1))
    raises(NotImplementedError, "ceil_mode", lambda: F.max_pool1d(T(x), 2, ceil_mode=True))


@row('`F.adaptive_avg_pool2d(x, output_size)`, `nn.AdaptiveAvgPool2d((1, 1))`, `F.adaptive_avg_pool1d`, '
     '`nn.AdaptiveAvgPool1d`')
def _():
    x = f32(rng().standard_normal((2, 3, 6, 7))).astype(np.float64)
    close(nn.AdaptiveAvgPool2d((1, 1))(T(x)), x.mean((2, 3), keepdims=True), 1e-5, 1e-6)
    close(F.adaptive_avg_pool2d(T(x), (3, None)), x.reshape(2, 3, 3, 2, 7).mean(3), 1e-5, 1e-6)
    win = [(0, 2), (1, 4), (3, 6), (5, 7)]                       # torch's windows for 7 -> 4
    close(F.adaptive_avg_pool1d(T(x[0, 0]), 4), np.stack([x[0, 0, :, a:b].mean(-1) for a, b in win], -1), 1e-5, 1e-6)
    close(nn.AdaptiveAvgPool2d(4)(T(x))[:, :, :, 1], np.stack([x[..., 1:4].mean(-1)[..., a:b].mean(-1) for a, b in
                                                               [(0, 2), (1, 3), (3, 5), (4, 6)]], -1), 1e-5, 1e-6)


def _mha_np(x, sd, h, kpm):
    """torch's algorithm for self-attention on (L, N, E) x with a bool key_padding_mask (True = masked out)."""
    lq, n, e = x.shape
    hd = e // h
    q, k, v = (x @ w.T + b for w, b in zip(np.split(sd["in_proj_weight"], 3), np.split(sd["in_proj_bias"], 3)))
    q, k, v = (a.reshape(lq, n * h, hd).transpose(1, 0, 2) for a in (q, k, v))
    mask = np.repeat(np.where(kpm, -np.inf, 0.0)[:, None, None, :], h, 1).reshape(n * h, 1, lq)
    sc = q @ k.transpose(0, 2, 1) / math.sqrt(hd) + mask
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    o = (p @ v).transpose(1, 0, 2).reshape(lq, n, e)
    return o @ sd["out_proj.weight"].T + sd["out_proj.bias"], p.reshape(n, h, lq, lq).mean(1)


def _random_state(m, r):
    sd = {k: f32(r.standard_normal(v.shape) * 0.5).astype(np.float64) for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    return sd


@row('`nn.MultiheadAttention(embed_dim, num_heads, dropout, batch_first=True)(q, k, v, key_padding_mask=, '
     'attn_mask=, need_weights=, average_attn_weights=)`')
def _():
    r = rng()
    m = nn.MultiheadAttention(8, 2, dropout=0.3, batch_first=True).eval()
    assert list(m.state_dict()) == ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]
    sd = _random_state(m, r)
    x = f32(r.standard_normal((2, 4, 8))).astype(np.float64)
    kpm = np.array([[False, False, True, False], [False, True, True, False]])
    want, ww = _mha_np(x.transpose(1, 0, 2), sd, 2, kpm)
    out, w = m(T(x), T(x), T(x), key_padding_mask=kpm)
    close(out, want.transpose(1, 0, 2), 1e-4, 2e-5)
    close(w, ww, 1e-4, 2e-5)
    out2, w2 = m(T(x), T(x), T(x), key_padding_mask=tlgpu.tensor(kpm.astype(np.int32)), need_weights=False)
    close(out2, want.transpose(1, 0, 2), 1e-4, 2e-5)
    assert w2 is None
    raises(TypeError, "mask_kind", lambda: m(T(x), T(x), T(x), key_padding_mask=T(kpm)))
    close(m(T(x), T(x), T(x), key_padding_mask=T(kpm), mask_kind="bool")[0], want.transpose(1, 0, 2), 1e-4, 2e-5)


@row('`nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, '
     'norm_first)`, `nn.TransformerEncoder(layer, num_layers, norm)`')
def _():
    r = rng()
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, norm_first=True)
    enc = nn.TransformerEncoder(layer, 2).eval()
    assert list(enc.state_dict())[:4] == ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias",
                                          "layers.0.self_attn.out_proj.weight", "layers.0.self_attn.out_proj.bias"]
    assert len(enc.state_dict()) == 24
    np.testing.assert_array_equal(enc.layers[1].linear1.weight.numpy(), layer.linear1.weight.numpy())
    sd = _random_state(enc, r)
    x = f32(r.standard_normal((4, 2, 8))).astype(np.float64)
    kpm = np.array([[False, False, False, True], [False] * 4])

    def ln(y, p):
        return (y - y.mean(-1, keepdims=True)) / np.sqrt(y.var(-1, keepdims=True) + 1e-5) * sd[p + ".weight"] + \
            sd[p + ".bias"]

    y = x
    for i in range(2):
        p = f"layers.{i}."
        sub = {k[len(p) + 10:]: v for k, v in sd.items() if k.startswith(p + "self_attn.")}
        y = y + _mha_np(ln(y, p + "norm1"), sub, 2, kpm)[0]
        hdn = np.maximum(ln(y, p + "norm2") @ sd[p + "linear1.weight"].T + sd[p + "linear1.bias"], 0)
        y = y + hdn @ sd[p + "linear2.weight"].T + sd[p + "linear2.bias"]
    close(enc(T(x), src_key_padding_mask=kpm), y, 1e-4, 3e-5)


@row('`nn.RNN(input_size, hidden_size, num_layers, nonlinearity, bias, batch_first, dropout)`, `nn.RNNCell`')
def _():
    r = rng()
    m = nn.RNN(3, 4, num_layers=2, nonlinearity="relu", batch_first=True)
    assert list(m.state_dict()) == [f"{a}_{b}_l{i}" for i in range(2) for a in ("weight", "bias") for b in ("ih", "hh")]
    sd = _random_state(m, r)
    x = f32(r.standard_normal((2, 5, 3))).astype(np.float64)
    y = x.transpose(1, 0, 2)
    finals = []
    for i in range(2):
        h, outs = np.zeros((2, 4)), []
        for t in range(5):
            h = np.maximum(y[t] @ sd[f"weight_ih_l{i}"].T + sd[f"bias_ih_l{i}"] + h @ sd[f"weight_hh_l{i}"].T +
                           sd[f"bias_hh_l{i}"], 0)
            outs.append(h)
        y = np.stack(outs)
        finals.append(h)
    out, hn = m(T(x))
    close(out, y.transpose(1, 0, 2), 1e-4, 2e-5)
    close(hn, np.stack(finals), 1e-4, 2e-5)
    c = nn.RNNCell(3, 4)
    sdc = _random_state(c, r)
    close(c(T(x[:, 0])), np.tanh(x[:, 0] @ sdc["weight_ih"].T + sdc["bias_ih"] + sdc["bias_hh"]), 1e-4, 2e-5)
    raises(NotImplementedError, "bidirectional", lambda: nn.RNN(3, 4, bidirectional=True))


# ---- distributions beyond Categorical / Normal (tlgpu/distributions/*.py) ----

@row('`Bernoulli(probs=p)` / `Bernoulli(logits=l)`: `sample()`, `log_prob(a)`, `entropy()`, `mean`, `mode`')
def _():
    import tlgpu.distributions as D
    r = rng()
    lg = f32(r.standard_normal((3, 4)) * 3).astype(np.float64)
    lg[0, 0] = 60.0
    a = f32(r.integers(0, 2, (3, 4)))
    p = _sig(lg)
    d = D.Bernoulli(logits=T(lg))
    close(d.log_prob(T(a)), a * lg - _sp(lg), 1e-5, 1e-5)
    close(d.entropy(), _sp(lg) - lg * p, 1e-5, 1e-5)
    close(d.mean, p, 1e-5, 1e-7)
    close(d.mode, (p > 0.5).astype(np.float64), 0, 0)
    q = f32(r.uniform(0.1, 0.9, 3)).astype(np.float64)
    close(D.Bernoulli(probs=T(q)).log_prob(T([1.0, 0.0, 1.0])), np.log([q[0], 1 - q[1], q[2]]), 1e-5, 1e-6)
    tlgpu.manual_seed(2)
    s = D.Bernoulli(probs=T(np.full(20000, 0.3))).sample().numpy()
    assert s.dtype == np.float32 and abs(s.mean() - 0.3) < 0.02
    from tlgpu.distributions.bernoulli import Bernoulli
    assert Bernoulli is D.Bernoulli
    raises(ValueError, "expected probs", lambda: D.Bernoulli(probs=T([2.0]), validate_args=True))


@row('`Independent(Normal(mu, std), 1)`: `log_prob(a)`, `entropy()`, `rsample()`')
def _():
    import tlgpu.distributions as D
    r = rng()
    mu, sd, a = f32(r.standard_normal((4, 3))), f32(r.random((4, 3)) + 0.5), f32(r.standard_normal((4, 3)))
    d = D.Independent(D.Normal(T(mu), T(sd)), 1)
    assert d.batch_shape == (4,) and d.event_shape == (3,) and d.has_rsample
    mu64, sd64, a64 = (x.astype(np.float64) for x in (mu, sd, a))
    close(d.log_prob(T(a)), (-(a64 - mu64) ** 2 / (2 * sd64 ** 2) - np.log(sd64) - 0.5 * np.log(2 * np.pi)).sum(1),
          1e-5, 1e-5)
    close(d.entropy(), (0.5 + 0.5 * np.log(2 * np.pi) + np.log(sd64)).sum(1), 1e-5, 1e-5)
    assert d.rsample((2,)).shape == (2, 4, 3)
    raises(ValueError, "reinterpreted_batch_ndims", lambda: D.Independent(D.Normal(T(mu), T(sd)), 3))


@row('`Uniform(low, high)`: `rsample()`, `log_prob(x)`, `entropy()`, `cdf`/`icdf`')
def _():
    import tlgpu.distributions as D
    r = rng()
    lo = f32(r.standard_normal(4)).astype(np.float64)
    hi = lo + f32(r.uniform(0.5, 2, 4))
    d = D.Uniform(T(lo), T(hi))
    x = np.array([lo[0] + 0.1, lo[1] - 0.1, hi[2], (lo[3] + hi[3]) / 2])
    close(d.log_prob(T(x)), [-np.log(hi[0] - lo[0]), -np.inf, -np.inf, -np.log(hi[3] - lo[3])], 1e-5, 1e-6)
    close(d.entropy(), np.log(hi - lo), 1e-5, 1e-6)
    close(d.cdf(T(x)), np.clip((x - lo) / (hi - lo), 0, 1), 1e-5, 1e-6)
    close(d.icdf(T([0.25] * 4)), lo + 0.25 * (hi - lo), 1e-5, 1e-6)
    tlgpu.manual_seed(3)
    s = D.Uniform(T(np.full(20000, -1.0)), 3.0).rsample().numpy()
    assert s.min() >= -1 and s.max() < 3 and abs(s.mean() - 1) < 0.05


@row('`OneHotCategorical(logits=l)`, `OneHotCategoricalStraightThrough(logits=l).rsample()` (Dreamer)')
def _():
    import tlgpu.distributions as D
    r = rng()
    lg = f32(r.standard_normal((3, 4))).astype(np.float64)
    lp = lg - lg.max(-1, keepdims=True)
    lp = lp - np.log(np.exp(lp).sum(-1, keepdims=True))
    v = np.eye(4)[[1, 3, 0]]
    d = D.OneHotCategorical(logits=T(lg))
    close(d.log_prob(T(v)), (lp * v).sum(-1), 1e-5, 1e-6)
    close(d.entropy(), -(np.exp(lp) * lp).sum(-1), 1e-5, 1e-6)
    s = d.sample((2,))
    assert s.dtype == np.float32 and s.shape == (2, 3, 4) and (s.numpy().sum(-1) == 1).all()
    L = T(lg, requires_grad=True)
    y = D.OneHotCategoricalStraightThrough(logits=L).rsample()
    close(y, np.eye(4)[y.numpy().argmax(-1)], 0, 1e-6)
    (y * T(v)).sum().backward()
    p = np.exp(lp)
    close(L.grad, p * (v - (v * p).sum(-1, keepdims=True)), 1e-4, 1e-6)


@row('`TransformedDistribution(Normal(mu, std), [TanhTransform(cache_size=1)])` (SAC), `AffineTransform`, '
     '`ExpTransform`, `SigmoidTransform`')
def _():
    import tlgpu.distributions as D
    from tlgpu.distributions.transforms import AffineTransform, ExpTransform, SigmoidTransform, TanhTransform
    r = rng()
    mu, sd = f32(r.standard_normal(4)).astype(np.float64), f32(r.random(4) + 0.5).astype(np.float64)

    def nlp(x):
        return -((x - mu) ** 2) / (2 * sd ** 2) - np.log(sd) - 0.5 * np.log(2 * np.pi)
    d = D.TransformedDistribution(D.Normal(T(mu), T(sd)), [TanhTransform(cache_size=1)])
    a = d.rsample()
    u = np.arctanh(a.numpy().astype(np.float64))
    close(d.log_prob(a), nlp(u) - np.log1p(-a.numpy().astype(np.float64) ** 2), 1e-3, 1e-3)
    y = f32([0.5, 2.0, 0.3, 4.0]).astype(np.float64)
    e = D.TransformedDistribution(D.Normal(T(mu), T(sd)), [AffineTransform(0.5, 2.0), ExpTransform()])
    close(e.log_prob(T(y)), nlp((np.log(y) - 0.5) / 2) - np.log(2) - np.log(y), 1e-5, 1e-5)
    q = f32([0.1, 0.5, 0.7, 0.9]).astype(np.float64)
    g = D.TransformedDistribution(D.Normal(T(mu), T(sd)), SigmoidTransform())
    close(g.log_prob(T(q)), nlp(np.log(q / (1 - q))) - np.log(q * (1 - q)), 1e-4, 1e-5)


@row('`Laplace(loc, scale)`: `rsample()`, `log_prob(x)`, `entropy()`')
def _():
    import tlgpu.distributions as D
    r = rng()
    m, b = f32(r.standard_normal(5)).astype(np.float64), f32(r.random(5) + 0.5).astype(np.float64)
    x = f32(r.standard_normal(5) * 2).astype(np.float64)
    d = D.Laplace(T(m), T(b))
    close(d.log_prob(T(x)), -np.log(2 * b) - np.abs(x - m) / b, 1e-5, 1e-6)
    close(d.entropy(), 1 + np.log(2 * b), 1e-5, 1e-6)
    tlgpu.manual_seed(4)
    s = D.Laplace(T(np.full(20000, 1.0)), 2.0).rsample().numpy()
    assert abs(np.median(s) - 1) < 0.1 and abs(s.var() - 8) < 0.8


@row('`kl_divergence` of `Bernoulli`, `Independent`, `Uniform`, `OneHotCategorical`, `Laplace` pairs')
def _():
    import tlgpu.distributions as D
    p, q = f32([0.2, 0.6]).astype(np.float64), f32([0.5, 0.3]).astype(np.float64)
    close(D.kl_divergence(D.Bernoulli(probs=T(p)), D.Bernoulli(probs=T(q))),
          p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q)), 1e-4, 1e-6)
    close(D.kl_divergence(D.Uniform(0.0, 1.0), D.Uniform(-1.0, 2.0)), np.log(3.0), 1e-6)
    close(D.kl_divergence(D.Uniform(0.0, 1.0), D.Uniform(0.5, 2.0)), np.inf, 0, 0)
    lp, lq = D.Independent(D.Laplace(T([0.0, 1.0]), 1.0), 1), D.Independent(D.Laplace(0.0, T([1.0, 2.0])), 1)
    close(D.kl_divergence(lp, lq), np.log(2) + 0.5 + 0.5 * np.exp(-1) - 1, 1e-5, 1e-6)   # the first pair is equal
    close(D.kl_divergence(D.OneHotCategorical(probs=T([0.5, 0.5])), D.OneHotCategorical(probs=T([0.25, 0.75]))),
          0.5 * np.log(2) + 0.5 * np.log(0.5 / 0.75), 1e-5, 1e-6)
    raises(NotImplementedError, "Uniform", lambda: D.kl_divergence(D.Uniform(0.0, 1.0), D.Laplace(0.0, 1.0)))


@row('`torch.nn.utils.parameters_to_vector(params)`, `vector_to_parameters(vec, params)`')
def _():
    from tlgpu.nn.utils import parameters_to_vector, vector_to_parameters
    m = nn.Linear(3, 2)
    v = parameters_to_vector(m.parameters())
    close(v, np.concatenate([m.weight.numpy().ravel(), m.bias.numpy()]), 0, 0)
    w = f32(rng().standard_normal(8))
    vector_to_parameters(T(w), m.parameters())
    close(m.weight, w[:6].reshape(2, 3), 0, 0)
    close(m.bias, w[6:], 0, 0)
