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
