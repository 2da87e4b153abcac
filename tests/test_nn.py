"""nn modules, functional losses, fused optimizers against numpy references, gradient clipping, and a
training loop whose memory stays flat."""
import gc

import numpy as np
import pytest

import tlgpu
from tlgpu import nn
from tlgpu.nn import functional as F
from gradcheck import check

R = np.random.default_rng(3)


def _log_softmax(x):
    m = x.max(1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(1, keepdims=True))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_forward_backward(reduction):
    x = R.standard_normal((7, 5))
    t = R.integers(0, 5, 7)
    t[2] = -100
    tt = tlgpu.tensor(t.astype(np.int32))

    def ref(a):
        lp = _log_softmax(a)
        per = np.where(t == -100, 0.0, -lp[np.arange(7), np.where(t == -100, 0, t)])
        return per.mean() * 7 / (t != -100).sum() if reduction == "mean" else per.sum() if reduction == "sum" else per
    check(lambda a: F.cross_entropy(a, tt, reduction=reduction), ref, [x])


def test_cross_entropy_large_logits_and_errors():
    x = tlgpu.tensor(np.array([[1e4, 0.0, -1e4]], np.float32))
    assert float(F.cross_entropy(x, tlgpu.tensor([0], dtype=np.int32))) == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(TypeError, match="int32"):
        F.cross_entropy(x, tlgpu.tensor([0.0]))
    with pytest.raises(ValueError, match=r"\(N, C\)"):
        F.cross_entropy(x, tlgpu.tensor([0, 1], dtype=np.int32))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(x, tlgpu.tensor([0], dtype=np.int32), reduction="avg")
    assert np.isnan(float(F.cross_entropy(x, tlgpu.tensor([7], dtype=np.int32))))   # out of range: NaN


def test_mse_linear_embedding_rmsnorm_dropout_grads():
    a, b = R.standard_normal((4, 3)), R.standard_normal((4, 3))
    check(lambda x, y: F.mse_loss(x, y), lambda x, y: ((x - y) ** 2).mean(), [a, b])
    x, w, bias = R.standard_normal((5, 4)), R.standard_normal((3, 4)), R.standard_normal(3)
    check(F.linear, lambda x, w, b: x @ w.T + b, [x, w, bias])
    idx = np.array([[1, 0], [3, 1], [1, 1]])
    it = tlgpu.tensor(idx.astype(np.int32))
    check(lambda w: F.embedding(it, w) * 1.0, lambda w: w[idx], [R.standard_normal((4, 3))])
    x, w = R.standard_normal((3, 6)), R.standard_normal(6)
    check(lambda x, w: F.rms_norm(x, w, 1e-5),
          lambda x, w: x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w, [x, w])
    xt = tlgpu.tensor(R.standard_normal((50, 40)).astype(np.float32), requires_grad=True)
    tlgpu.manual_seed(1)
    y = F.dropout(xt, 0.3, True)
    y.backward(tlgpu.ones(50, 40))
    mask = (y.numpy() != 0)
    np.testing.assert_allclose(xt.grad.numpy(), mask / 0.7, rtol=1e-6)
    assert 0.6 < mask.mean() < 0.8


def test_module_api():
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2, bias=False), nn.Tanh())
    names = [n for n, _ in m.named_parameters()]
    assert names == ["0.weight", "0.bias", "2.weight"]
    assert len(m.parameters()) == 3 and len(m.children()) == 4 and len(m.modules()) == 5
    assert "Linear(in_features=4, out_features=8, bias=True)" in repr(m)
    w = m[0].weight.numpy()
    assert w.shape == (8, 4) and np.abs(w).max() <= 0.5 and w.std() > 0.1       # U(-1/2, 1/2)
    sd = m.state_dict()
    assert list(sd) == names and all(isinstance(v, np.ndarray) for v in sd.values())
    m2 = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2, bias=False), nn.Tanh())
    m2.load_state_dict(sd)
    x = tlgpu.randn(3, 4)
    np.testing.assert_array_equal(m(x).numpy(), m2(x).numpy())
    with pytest.raises(KeyError, match="missing keys"):
        m2.load_state_dict({"0.weight": sd["0.weight"]})
    with pytest.raises(KeyError, match="unexpected keys"):
        m2.load_state_dict(dict(sd, extra=np.zeros(1)))
    with pytest.raises(ValueError, match=r"0.bias has shape \(3,\)"):
        m2.load_state_dict(dict(sd, **{"0.bias": np.zeros(3)}))
    m2.load_state_dict({"0.bias": np.ones(8, np.float32)}, strict=False)
    assert (m2[0].bias.numpy() == 1).all()
    m.eval()
    assert not any(x.training for x in m.modules())
    m.train()
    out = m(x).sum()
    out.backward()
    assert m[0].weight.grad is not None
    m.zero_grad()
    assert m[0].weight.grad is None


def test_load_state_dict_invalidates_saved_graph():
    lin = nn.Linear(3, 2)
    y = lin(tlgpu.randn(4, 3)).sum()
    lin.load_state_dict(lin.state_dict())
    with pytest.raises(RuntimeError, match="modified in place"):
        y.backward()


def test_state_dict_names_tied_weights_under_each_name(rng):
    """As torch's: a tensor two modules share (an embedding tied to the head, nanoGPT-style) is in state_dict
    under both names, in module order (each module's parameters, then its buffers, then its children's), and a
    strict load of such a dict (torch's, this one, or one naming the tied tensor once) writes the shared tensor."""
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(10, 4)
            self.ln = nn.LayerNorm(4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.wte.weight

    m = Tied()
    sd = m.state_dict()
    assert list(sd) == ["wte.weight", "ln.weight", "ln.bias", "head.weight"]
    assert [n for n, _ in m.named_parameters()] == ["wte.weight", "ln.weight", "ln.bias"]   # listed once
    w = rng.standard_normal((10, 4)).astype(np.float32)
    sd["wte.weight"] = sd["head.weight"] = w
    assert m.load_state_dict(sd) == ([], [])
    assert m.head.weight is m.wte.weight
    np.testing.assert_array_equal(m.head.weight.numpy(), w)
    one = {k: v * 2 for k, v in sd.items() if k != "head.weight"}   # the tied tensor under one name
    assert m.load_state_dict(one) == ([], [])
    np.testing.assert_array_equal(m.head.weight.numpy(), w * 2)
    with pytest.raises(KeyError, match="missing keys \\['ln.bias'\\]"):
        m.load_state_dict({k: v for k, v in sd.items() if k != "ln.bias"})


def _np_adam(p, grads, lr, b1, b2, eps, wd, decoupled, amsgrad):
    m = np.zeros_like(p); v = np.zeros_like(p); vmax = np.zeros_like(p)
    for t, g in enumerate(grads, 1):
        if decoupled:
            p = p - lr * wd * p
        else:
            g = g + wd * p
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        vv = np.maximum(vmax, v) if amsgrad else v
        vmax = vv
        p = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(vv / (1 - b2 ** t)) + eps)
    return p


def _np_sgd(p, grads, lr, momentum, dampening, wd, nesterov):
    buf = None
    for g in grads:
        d = g + wd * p
        if momentum:
            buf = d if buf is None else momentum * buf + (1 - dampening) * d
            d = d + momentum * buf if nesterov else buf
        p = p - lr * d
    return p


OPTS = [
    ("sgd", dict(lr=0.1), lambda p, gs: _np_sgd(p, gs, 0.1, 0, 0, 0, False)),
    ("sgd-mom", dict(lr=0.05, momentum=0.9, weight_decay=0.01),
     lambda p, gs: _np_sgd(p, gs, 0.05, 0.9, 0, 0.01, False)),
    ("sgd-nesterov", dict(lr=0.05, momentum=0.8, nesterov=True), lambda p, gs: _np_sgd(p, gs, 0.05, 0.8, 0, 0, True)),
    ("sgd-damp", dict(lr=0.05, momentum=0.5, dampening=0.3), lambda p, gs: _np_sgd(p, gs, 0.05, 0.5, 0.3, 0, False)),
    ("adam", dict(lr=0.01), lambda p, gs: _np_adam(p, gs, 0.01, 0.9, 0.999, 1e-8, 0, False, False)),
    ("adam-wd-ams", dict(lr=0.01, weight_decay=0.1, amsgrad=True, betas=(0.8, 0.99)),
     lambda p, gs: _np_adam(p, gs, 0.01, 0.8, 0.99, 1e-8, 0.1, False, True)),
    ("adamw", dict(lr=0.01, weight_decay=0.05), lambda p, gs: _np_adam(p, gs, 0.01, 0.9, 0.999, 1e-8, 0.05, True, False)),
]


@pytest.mark.parametrize("name,kw,ref", OPTS, ids=[o[0] for o in OPTS])
def test_optimizers_match_numpy_over_20_steps(name, kw, ref):
    p0 = R.standard_normal((33, 7)).astype(np.float32)
    grads = [R.standard_normal((33, 7)).astype(np.float32) for _ in range(20)]
    p = tlgpu.tensor(p0, requires_grad=True)
    cls = {"sgd": tlgpu.optim.SGD, "adam": tlgpu.optim.Adam, "adamw": tlgpu.optim.AdamW}[name.split("-")[0]]
    opt = cls([p], **kw)
    v0 = p._version
    for g in grads:
        p.grad = tlgpu.tensor(g)
        opt.step()
    assert p._version == v0 + 20
    want = ref(p0.astype(np.float64), [g.astype(np.float64) for g in grads])
    np.testing.assert_allclose(p.numpy(), want, rtol=1e-5, atol=1e-6)


def test_optimizer_errors_and_skip_missing_grads():
    with pytest.raises(ValueError, match="empty"):
        tlgpu.optim.SGD([])
    with pytest.raises(TypeError, match="require grad"):
        tlgpu.optim.SGD([tlgpu.zeros(3)])
    with pytest.raises(ValueError, match="nesterov"):
        tlgpu.optim.SGD([tlgpu.zeros(3, requires_grad=True)], nesterov=True)
    p = tlgpu.tensor([1.0, 2.0], requires_grad=True)
    opt = tlgpu.optim.Adam([p], lr=0.1)
    opt.step()                                         # no grad yet: nothing happens
    assert p.tolist() == [1.0, 2.0]


def test_clip_grad_norm():
    ps = [tlgpu.tensor(R.standard_normal(5).astype(np.float32), requires_grad=True) for _ in range(3)]
    gs = [R.standard_normal(5).astype(np.float32) * 3 for _ in range(3)]
    for p, g in zip(ps, gs):
        p.grad = tlgpu.tensor(g)
    total = np.sqrt(sum((g.astype(np.float64) ** 2).sum() for g in gs))
    tlgpu.reset_stream_stats()
    norm = nn.utils.clip_grad_norm_(ps, 1.0)
    assert tlgpu.stream_stats()["waits"] == 0
    assert float(norm) == pytest.approx(total, rel=1e-5)
    for p, g in zip(ps, gs):
        np.testing.assert_allclose(p.grad.numpy(), g / total, rtol=1e-4)
    nn.utils.clip_grad_norm_(ps, 100.0)                # below the limit: unchanged
    np.testing.assert_allclose(ps[0].grad.numpy(), gs[0] / total, rtol=1e-4)


def test_training_memory_flat_over_2000_steps():
    gc.collect()                                   # other tests' garbage: freed now, not while we count
    tlgpu.synchronize()
    start = tlgpu.memory_stats()["live"]
    m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = tlgpu.optim.Adam(m.parameters(), lr=1e-3)
    x = tlgpu.randn(64, 16)
    t = tlgpu.tensor(R.integers(0, 4, 64).astype(np.int32))

    def step():
        loss = F.cross_entropy(m(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    for _ in range(3):
        step()
    tlgpu.synchronize()
    gc.collect()
    base = tlgpu.memory_stats()["live"]
    tlgpu.reset_peak_memory_stats()
    tlgpu.reset_stream_stats()
    for i in range(2000):
        step()
        if i % 250 == 0:
            assert tlgpu.memory_stats()["live"] == base
    s = tlgpu.memory_stats()
    assert s["live"] == base and (s["hits"] / s["allocations"] >= 0.99 or not s["enabled"])
    assert tlgpu.stream_stats()["waits"] == 0                    # the loss is never read
    # what stays between steps: the inputs, and per parameter itself, its grad and Adam's two moments, each one
    # pool block of the size class the pool gives its bytes on this device, and nothing else
    block = tlgpu._C._pool_block_bytes
    held = block(x.numel() * 4) + block(t.numel() * 4) + sum(4 * block(p.numel() * 4) for p in m.parameters())
    assert base - start == held


def test_training_example_reaches_95_percent():
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "examples", "train_mlp.py")
    spec = importlib.util.spec_from_file_location("train_mlp", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.main(steps=300) >= 0.95


@pytest.mark.parametrize("per_param", [False, True])
@pytest.mark.parametrize("cls,decoupled", [(tlgpu.optim.Adam, False), (tlgpu.optim.AdamW, True)])
def test_adam_over_many_parameters_in_shared_launches(cls, decoupled, per_param, monkeypatch):
    """Adam without amsgrad steps up to 8 parameters at the same step in one launch (_adam_multi, GPUs; forced
    here), or one launch a parameter (CPU devices, where the fused kernel's branches cost more than launches):
    11 parameters of odd sizes (one zero-size), some without a gradient at some steps (so their step counts
    differ), each against numpy over 12 steps; the launches per step are counted."""
    monkeypatch.setattr(tlgpu.optim, "_PER_PARAM", per_param)
    shapes = [(5, 3), (7,), (0, 4), (33,), (2, 2, 2), (1,), (65, 3), (9,), (4, 4), (3,), (17, 2)]
    p0 = [R.standard_normal(s).astype(np.float32) for s in shapes]
    ps = [tlgpu.tensor(a, requires_grad=True) for a in p0]
    opt = cls(ps, lr=0.02, weight_decay=0.03)
    ref, grads = [a.astype(np.float64) for a in p0], [[] for _ in shapes]
    for step in range(12):
        steps = {}
        for k, p in enumerate(ps):
            if (k + step) % 5 == 0:                    # no gradient for this one now: it skips the step
                p.grad = None
                continue
            g = R.standard_normal(shapes[k]).astype(np.float32)
            p.grad = tlgpu.tensor(g)
            grads[k].append(g.astype(np.float64))
            if p.numel():
                steps[len(grads[k])] = steps.get(len(grads[k]), 0) + 1
        held = {id(q) for q in opt.state}
        fresh = sum(2 for p in ps if p.grad is not None and p.numel() and id(p) not in held)   # zeros(): m, v
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        opt.step()                                     # one launch per 8 parameters at the same step count
        launches = sum(steps.values()) if per_param else sum((n + 7) // 8 for n in steps.values())
        assert tlgpu.stream_stats()["enqueued"] == fresh + launches, (step, steps)
    for k in range(len(shapes)):
        want = _np_adam(ref[k], grads[k], 0.02, 0.9, 0.999, 1e-8, 0.03, decoupled, False)
        np.testing.assert_allclose(ps[k].numpy(), want, rtol=1e-5, atol=1e-6)
        if shapes[k][0]:
            assert opt.state[ps[k]]["step"] == len(grads[k])


@pytest.mark.parametrize("n,c", [(37, 10), (5, 2000), (300, 300)])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_small_and_large_paths(n, c, reduction):
    """Small batches run in one launch (tl_ce_small_f32), large ones as log_softmax + nll + sums: both against
    numpy float64, with ignored targets, and the same gradient."""
    x = R.standard_normal((n, c)).astype(np.float32) * 3
    t = R.integers(0, c, n).astype(np.int32)
    t[::4] = -100
    xt = tlgpu.tensor(x, requires_grad=True)
    tt = tlgpu.tensor(t)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    loss = F.cross_entropy(xt, tt, reduction=reduction)
    if n * c <= 1 << 16 and c <= 1024:
        assert tlgpu.stream_stats()["enqueued"] == 1
    x64 = x.astype(np.float64)
    lse = np.log(np.exp(x64 - x64.max(1, keepdims=True)).sum(1)) + x64.max(1)
    keep = t != -100
    per = lse[keep] - x64[keep, t[keep]]
    want = per.mean() if reduction == "mean" else per.sum()
    np.testing.assert_allclose(loss.item(), want, rtol=1e-5, atol=1e-5)
    loss.backward()
    p = np.exp(x64 - lse[:, None])
    p[keep, t[keep]] -= 1
    p[~keep] = 0
    if reduction == "mean":
        p /= keep.sum()
    np.testing.assert_allclose(xt.grad.numpy(), p, rtol=1e-4, atol=1e-6)
