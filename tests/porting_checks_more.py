"""Checks for docs/porting.md's reduction, autograd, nn, optim and saving rows (see porting_checks.py)."""
import math
import pickle

import numpy as np

import tlgpu
import tlgpu.nn.functional as F
from porting_checks import T, close, f32, raises, rng, row
from tlgpu import nn

# ---- Reductions ----

@row('`x.sum(dim=1, keepdim=True)`, `mean`')
def _():
    a = rng().standard_normal((3, 4, 2))
    x = T(a)
    close(x.sum(dim=1, keepdim=True), a.sum(1, keepdims=True), 1e-5, 1e-6)
    close(x.mean(axis=(0, 2)), a.mean((0, 2)), 1e-5, 1e-6)
    close(x.mean(dim=2), a.mean(2), 1e-5, 1e-6)


@row('`x.max(dim=1)`, `x.min(dim=1)`')
def _():
    a = rng().standard_normal((4, 5))
    v, i = T(a).max(dim=1)
    close(v, a.max(1)); assert i.dtype == np.int32 and i.tolist() == a.argmax(1).tolist()
    r = T(a).min(dim=1)
    close(r.values, a.min(1)); assert r.indices.tolist() == a.argmin(1).tolist()


@row('`x.max(1)` (positional)')
def _():
    a = rng().standard_normal((4, 5))
    close(T(a).max(1), a.max(1))                                 # values only, numpy's meaning
    close(T(a).max(1)[0], a.max(1)[0])                           # so `q.max(1)[0]` is one value, not the maxima
    close(T(a).max(dim=1).values, a.max(1))


@row('`x.max()`, `x.argmax(dim)`')
def _():
    a = rng().standard_normal((4, 5))
    assert T(a).max().item() == f32(a).max()
    i = T(a).argmax(1)
    assert i.dtype == np.int32 and i.tolist() == a.argmax(1).tolist()


@row('`x.var()`, `x.std(dim, keepdim=...)`')
def _():
    a = rng().standard_normal((5, 6))
    close(T(a).var(), a.var(ddof=1), 1e-4, 1e-6)
    close(T(a).std(1, keepdim=True), a.std(1, ddof=1, keepdims=True), 1e-4, 1e-6)
    close(T(a).var(unbiased=False), a.var(), 1e-4, 1e-6)
    close(T(a).std(0, correction=0), a.std(0), 1e-4, 1e-6)


@row('`x.norm()`, `x.norm(p, dim, keepdim)`, `torch.norm`')
def _():
    a = rng().standard_normal((4, 5))
    close(T(a).norm(), np.linalg.norm(a), 1e-5)
    close(T(a).norm(1, dim=1, keepdim=True), np.abs(a).sum(1, keepdims=True), 1e-5)
    close(tlgpu.norm(T(a), math.inf, 0), np.abs(a).max(0), 1e-6)
    x = T(a, requires_grad=True)
    x.norm().backward()
    close(x.grad, a / np.linalg.norm(a), 1e-4, 1e-6)
    z = tlgpu.zeros(3, requires_grad=True)
    z.norm().backward()
    close(z.grad, np.zeros(3), 0, 0)


@row('`torch.equal(a, b)`')
def _():
    a = rng().standard_normal((3, 3))
    b = a.copy()
    b[1, 1] = 7
    assert tlgpu.equal(T(a), T(a.copy())) is True and tlgpu.equal(T(a), T(b)) is False
    assert tlgpu.equal(T(a), T(a).reshape(9)) is False and tlgpu.equal(T([np.nan]), T([np.nan])) is False


@row('`softmax(dim)`, `log_softmax(dim)`, `logsumexp`')
def _():
    a = rng().standard_normal((3, 6))
    lse = np.log(np.exp(a).sum(1, keepdims=True))
    close(T(a).softmax(dim=1), np.exp(a - lse), 1e-5, 1e-6)
    close(T(a).log_softmax(1), a - lse, 1e-5, 1e-5)
    close(T(a).logsumexp(axis=1), lse[:, 0], 1e-5, 1e-5)


@row('int32 `sum`/`mean`')
def _():
    i = rng().integers(-9, 9, 12).astype(np.int32)
    x = tlgpu.tensor(i)
    raises(TypeError, "float32", lambda: x.sum())
    assert x.float().sum().item() == i.sum() and abs(x.float().mean().item() - i.mean()) < 1e-6


# ---- Autograd ----

@row('`requires_grad=True`, `backward()`, `.grad`, `grad_fn`, `is_leaf`, `detach()`')
def _():
    a = rng().standard_normal(5)
    x = T(a, requires_grad=True)
    y = (x * x).sum()
    assert x.is_leaf and not y.is_leaf and y.grad_fn is not None and not x.detach().requires_grad
    y.backward()
    close(x.grad, 2 * a, 1e-5, 1e-6)


@row('`torch.no_grad()`, `enable_grad()`, `@torch.no_grad()`')
def _():
    x = T([1.0], requires_grad=True)
    with tlgpu.no_grad():
        assert not (x * 2).requires_grad
        with tlgpu.enable_grad():
            assert (x * 2).requires_grad

    @tlgpu.no_grad()
    def f(t):
        return t * 3
    y = f(x)
    assert not y.requires_grad and y.item() == 3.0


@row('`torch.inference_mode()`, `@torch.inference_mode()`')
def _():
    x = T([2.0], requires_grad=True)
    with tlgpu.inference_mode():
        y = x * 2
    assert not y.requires_grad and y.item() == 4.0

    @tlgpu.inference_mode()
    def f(t):
        return t + 1
    assert not f(x).requires_grad and f(x).item() == 3.0 and tlgpu.is_grad_enabled()


@row('`torch.set_grad_enabled(mode)`')
def _():
    x = T([2.0], requires_grad=True)
    with tlgpu.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    with tlgpu.set_grad_enabled(True):
        assert (x * 2).requires_grad
    tlgpu.set_grad_enabled(False)
    try:
        assert not tlgpu.is_grad_enabled()
    finally:
        tlgpu.set_grad_enabled(True)


@row('`p.data`, `target_p.data.copy_(tau * p.data + (1 - tau) * target_p.data)`')
def _():
    tau = 0.01
    q, target = nn.Linear(3, 2), nn.Linear(3, 2)
    want = {k: tau * q.state_dict()[k] + (1 - tau) * v for k, v in target.state_dict().items()}
    for tp, p in zip(target.parameters(), q.parameters()):
        tp.data.copy_(tau * p.data + (1 - tau) * tp.data)
    for k, v in target.state_dict().items():
        close(v, want[k], 1e-6, 1e-7)
    w = tlgpu.ones(2, requires_grad=True)
    y = (w * w).sum()
    w.data.mul_(3.0)
    close(w, np.full(2, 3.0), 0, 0)
    raises(RuntimeError, "modified in place", y.backward)


@row('`p.data = t`')
def _():
    a = rng().standard_normal((2, 3))
    p = nn.Linear(3, 2).weight
    p.data = T(a)
    close(p, f32(a), 0, 0)
    assert p.requires_grad and p.is_leaf
    raises(ValueError, "shapes", lambda: setattr(p, "data", tlgpu.zeros(3)))


@row('in-place on a non-leaf (`y = x * 2; y.add_(1)`, `y[:, 0] = v`)')
def _():
    a = rng().standard_normal((3, 2))
    x = T(a, requires_grad=True)
    y = x * 2
    y.add_(1)
    y[:, 0] = T([5.0, 5.0, 5.0])
    close(y, np.stack([np.full(3, 5.0), 2 * a[:, 1] + 1], 1), 1e-6)
    y.sum().backward()
    close(x.grad, np.stack([np.zeros(3), np.full(3, 2.0)], 1), 0, 0)
    z = x.exp()
    z.mul_(2)
    raises(RuntimeError, "modified in place", lambda: z.sum().backward())


@row('in-place on a leaf that requires grad')
def _():
    x = T([1.0, 2.0], requires_grad=True)
    raises(RuntimeError, "leaf", lambda: x.add_(1))
    with tlgpu.no_grad():
        x.add_(1)
    close(x, f32([2, 3]), 0, 0)


@row('in-place on a view whose base is alive, under autograd')
def _():
    x = T(rng().standard_normal((4, 3)), requires_grad=True)
    y = x * 2
    raises(RuntimeError, "clone", lambda: y[:, 0].add_(1))
    v = y[:, 0].clone()
    v.add_(1)
    close(v, y.numpy()[:, 0] + 1, 1e-6)


@row('int tensors')
def _():
    raises(TypeError, "float32", lambda: tlgpu.tensor([1, 2]).requires_grad_())


@row('`torch.autograd.grad`, higher-order gradients')
def _():
    assert not hasattr(tlgpu.autograd, "grad")
    x = T([3.0], requires_grad=True)
    y = x * x
    y.backward()
    assert x.grad.grad_fn is None and not x.grad.requires_grad     # backward records no graph


@row('`q.gather(1, a.unsqueeze(1))` (DQN)')
def _():
    r = rng()
    q, a = r.standard_normal((5, 3)), r.integers(0, 3, 5).astype(np.int32)
    qt = T(q, requires_grad=True)
    g = qt.gather(1, tlgpu.tensor(a).unsqueeze(1))
    close(g, q[np.arange(5), a][:, None])
    g.sum().backward()
    want = np.zeros((5, 3))
    want[np.arange(5), a] = 1
    close(qt.grad, want, 0, 0)
    bad = qt.gather(1, tlgpu.tensor(np.array([[0], [3], [0], [0], [0]], np.int32)))
    raises(IndexError, "out of range", bad.numpy)


@row('`torch.distributions.Categorical(logits=l)`: `sample()`, `log_prob(a)`, `entropy()`')
def _():
    logits = rng().standard_normal((4, 3))
    logp = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    d = tlgpu.distributions.Categorical(logits=T(logits))
    s = d.sample()
    assert s.dtype == np.int32 and s.shape == (4,) and 0 <= s.numpy().min() and s.numpy().max() < 3
    a = np.array([0, 2, 1, 1], np.int32)
    close(d.log_prob(tlgpu.tensor(a)), logp[np.arange(4), a], 1e-5, 1e-6)
    close(d.entropy(), -(np.exp(logp) * logp).sum(1), 1e-5, 1e-6)


# ---- nn, optim, saving ----

@row('`nn.Module`, `nn.Parameter`, `register_buffer`, `ModuleList/Dict`, `Sequential`')
def _():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 3), nn.Linear(3, 1)])
            self.heads = nn.ModuleDict({"v": nn.Sequential(nn.Linear(1, 1))})
            self.scale = nn.Parameter(np.ones(1))
            self.register_buffer("count", tlgpu.zeros(1))
    m = Net()
    names = [k for k, _ in m.named_parameters()]
    assert names == ["scale", "layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias",
                     "heads.v.0.weight", "heads.v.0.bias"]
    assert "count" in m.state_dict() and all(p is not m.count for p in m.parameters())


@row('`nn.Linear/Embedding/LayerNorm/ReLU/Tanh/SiLU/GELU/Dropout/Flatten/Identity`')
def _():
    r = rng()
    x = r.standard_normal((4, 3)).astype(np.float32)
    lin = nn.Linear(3, 2)
    sd = lin.state_dict()
    close(lin(x), x @ sd["weight"].T + sd["bias"], 1e-5, 1e-6)               # a numpy batch
    emb = nn.Embedding(5, 2)
    idx = np.array([4, 0, 2], np.int32)
    close(emb(idx), emb.state_dict()["weight"][idx], 0, 0)
    ln = nn.LayerNorm(3)
    close(ln(x), (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5), 1e-4, 1e-5)
    close(nn.Sequential(nn.ReLU(), nn.Tanh())(x), np.tanh(np.maximum(x, 0)), 1e-5, 1e-6)
    close(nn.SiLU()(x), x / (1 + np.exp(-x)), 1e-5, 1e-6)
    erf = np.vectorize(math.erf)
    close(nn.GELU()(x), 0.5 * x * (1 + erf(x / math.sqrt(2))), 1e-5, 1e-6)
    close(nn.Dropout(0.5).eval()(x), x, 0, 0)
    close(nn.Flatten()(r.standard_normal((2, 3, 4)).astype(np.float32)).numpy().shape, (2, 12), 0, 0)
    close(nn.Identity()(tlgpu.tensor(x)), x, 0, 0)


@row('`F.leaky_relu(x, negative_slope)`, `nn.LeakyReLU(negative_slope)`, `nn.ReLU(inplace=True)`, '
     '`nn.LeakyReLU(s, inplace=True)`')
def _():
    a = rng().standard_normal((3, 4)).astype(np.float32)
    a[0, 0] = 0.0
    for y in (F.leaky_relu(T(a), 0.2), tlgpu.leaky_relu(T(a), negative_slope=0.2), T(a).leaky_relu(0.2)):
        close(y, np.where(a > 0, a, 0.2 * a), 1e-6)
    close(F.leaky_relu(T(a)), np.where(a > 0, a, 0.01 * a), 1e-6)
    leaf = T(a, requires_grad=True)
    F.leaky_relu(leaf, 0.2).sum().backward()
    close(leaf.grad, f32(np.where(a > 0, 1.0, 0.2)), 0, 0)        # the slope at 0, as torch
    close(nn.LeakyReLU(0.2)(a), np.where(a > 0, a, 0.2 * a), 1e-6)
    close(nn.LeakyReLU()(a), np.where(a > 0, a, 0.01 * a), 1e-6)
    x = tlgpu.tensor(a)
    assert nn.ReLU(inplace=True)(x) is x
    close(x, np.maximum(a, 0), 0, 0)
    w = tlgpu.tensor(a, requires_grad=True)
    h = w * 1.0
    out = nn.LeakyReLU(0.1, inplace=True)(h)
    assert out is h
    out.sum().backward()
    close(w.grad, np.where(a > 0, 1.0, 0.1), 1e-6)


@row('`model.to(device)`, `model.cpu()`, `model.cuda()`, `model.float()`, `model.to(torch.float32)`')
def _():
    m = nn.Linear(3, 2)
    before = m.state_dict()
    assert m.to("cuda") is m and m.cpu() is m and m.cuda() is m and m.float() is m and m.to(tlgpu.float32) is m
    for k, v in m.state_dict().items():
        close(v, before[k], 0, 0)
    raises(TypeError, "float64", m.double)
    raises(TypeError, "float32", lambda: m.to(tlgpu.long))
    raises(ValueError, "TLGPU_DEVICE", lambda: m.to("cuda:1"))


@row('`nn.MSELoss/L1Loss/HuberLoss/SmoothL1Loss/CrossEntropyLoss`')
def _():
    r = rng()
    p, t = r.standard_normal(8), r.standard_normal(8) * 2
    d = p - t
    close(nn.MSELoss()(T(p), f32(t)), (d ** 2).mean(), 1e-5)
    close(nn.L1Loss()(T(p), f32(t)), np.abs(d).mean(), 1e-5)
    hub = np.where(np.abs(d) < 1, 0.5 * d ** 2, np.abs(d) - 0.5)
    close(nn.HuberLoss()(T(p), f32(t)), hub.mean(), 1e-5)
    close(nn.SmoothL1Loss()(T(p), f32(t)), hub.mean(), 1e-5)
    logits, y = r.standard_normal((4, 3)), np.array([0, 2, 1, 2], np.int32)
    lse = np.log(np.exp(logits).sum(1))
    close(nn.CrossEntropyLoss()(T(logits), y), (lse - logits[np.arange(4), y]).mean(), 1e-5)


@row('`nn.init.*_`, `F.linear/mse_loss/cross_entropy/relu/...`')
def _():
    r = rng()
    w = tlgpu.empty(3, 4)
    nn.init.constant_(w, 0.5)
    close(w, np.full((3, 4), 0.5), 0, 0)
    nn.init.zeros_(w)
    close(w, np.zeros((3, 4)), 0, 0)
    x, wt, b = r.standard_normal((2, 4)), r.standard_normal((3, 4)), r.standard_normal(3)
    close(F.linear(T(x), T(wt), T(b)), x @ wt.T + b, 1e-5, 1e-5)
    close(F.mse_loss(T(x), T(x * 0)), (x ** 2).mean(), 1e-5)
    close(F.relu(T(x)), np.maximum(f32(x), 0), 0, 0)
    y = tlgpu.tensor(np.array([1, 0], np.int32))
    lse = np.log(np.exp(x).sum(1))
    close(F.cross_entropy(T(x), y), (lse - x[[0, 1], [1, 0]]).mean(), 1e-5)


@row('`optim.SGD/Adam/AdamW`, `param_groups[i]["lr"] = lr`')
def _():
    a, g = rng().standard_normal(4), rng().standard_normal(4)
    p = T(a, requires_grad=True)
    opt = tlgpu.optim.SGD([p], lr=0.1)
    p.grad = T(g)
    opt.step()
    close(p, a - 0.1 * g, 1e-6)
    opt.param_groups[0]["lr"] = 0.5
    opt.step()
    close(p, a - 0.6 * g, 1e-5, 1e-6)
    q = T(a, requires_grad=True)
    adam = tlgpu.optim.Adam([q], lr=0.01)
    q.grad = T(g)
    adam.step()
    close(q, a - 0.01 * np.sign(g), 1e-4, 1e-6)                # Adam's first step moves by lr * sign
    w = T(a, requires_grad=True)
    adamw = tlgpu.optim.AdamW([w], lr=0.01, weight_decay=0.1)
    w.grad = T(g)
    adamw.step()
    close(w, a * (1 - 0.01 * 0.1) - 0.01 * np.sign(g), 1e-4, 1e-6)   # decoupled decay, then Adam's step


@row('`optim.lr_scheduler.*`, `opt.state_dict()`')
def _():
    p = T([1.0], requires_grad=True)
    opt = tlgpu.optim.SGD([p], lr=1.0)
    sched = tlgpu.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    lrs = []
    for _ in range(5):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs == [1.0, 0.5, 0.5, 0.25, 0.25]
    sd = opt.state_dict()
    assert set(sd) == {"state", "param_groups"} and sd["param_groups"][0]["params"] == [0]


@row('`nn.utils.clip_grad_norm_(params, max_norm, norm_type)`, `clip_grad_value_`')
def _():
    g1, g2 = rng().standard_normal(3) * 4, rng().standard_normal(2) * 4
    p1, p2 = T(g1 * 0, requires_grad=True), T(g2 * 0, requires_grad=True)
    p1.grad, p2.grad = T(g1), T(g2)
    total = np.sqrt((g1 ** 2).sum() + (g2 ** 2).sum())
    n = nn.utils.clip_grad_norm_([p1, p2], 1.0)
    assert isinstance(n, tlgpu.Tensor) and n.shape == ()
    close(n, total, 1e-5)
    close(p1.grad, g1 * (1.0 / (total + 1e-6)), 1e-5, 1e-6)
    nn.utils.clip_grad_value_([p2], 0.01)
    close(p2.grad, np.clip(g2 / (total + 1e-6), -0.01, 0.01), 1e-5, 1e-6)


@row('`torch.save(sd, f)`, `torch.load(f)`')
def _(tmp_path):
    m = nn.Linear(3, 2)
    path = tmp_path / "m.safetensors"
    tlgpu.save(m.state_dict(), path)
    back = tlgpu.load(path)
    for k, v in m.state_dict().items():
        close(back[k], v, 0, 0)
    with open(path, "rb") as f:
        close(tlgpu.load(f)["weight"], m.state_dict()["weight"], 0, 0)
    m2 = nn.Linear(3, 2)
    m2.load_state_dict(back)
    close(m2.weight, m.state_dict()["weight"], 0, 0)


@row('`torch.load(f, map_location=device, weights_only=True)`')
def _(tmp_path):
    sd = {"w": rng().standard_normal((2, 2)).astype(np.float32)}
    path = tmp_path / "m.safetensors"
    tlgpu.save(sd, path)
    for loc in ("cpu", "cuda", tlgpu.device(), None):
        close(tlgpu.load(path, map_location=loc, weights_only=True)["w"], sd["w"], 0, 0)
    raises(ValueError, "TLGPU_DEVICE", lambda: tlgpu.load(path, map_location="cuda:1"))
    raises(TypeError, "function", lambda: tlgpu.load(path, map_location=lambda s, l: s))


@row('`model.state_dict()` values')
def _():
    m = nn.Linear(2, 2)
    sd = m.state_dict()
    assert all(isinstance(v, np.ndarray) for v in sd.values())
    with tlgpu.no_grad():
        m.weight.add_(1.0)
    close(m.weight, sd["weight"] + 1, 1e-6)                       # a copy, taken at the call
    assert pickle.loads(pickle.dumps(sd))["weight"].shape == (2, 2)
