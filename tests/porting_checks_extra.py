"""Checks for docs/porting.md's rows (see porting_checks.py): creation and random in-place ops, rounding,
tril/triu, multinomial, index_add, prod/topk/sort, Normal and kl_divergence, the functional forms and RAdam."""
import math
import warnings

import numpy as np

import tlgpu
import tlgpu.nn.functional as F
from porting_checks import T, close, f32, raises, rng, row
from tlgpu import distributions as D
from tlgpu import nn


def log_softmax(z, axis):
    z = z - z.max(axis, keepdims=True)
    return z - np.log(np.exp(z).sum(axis, keepdims=True))


# ---- Tensors and devices ----

@row('`torch.linspace(start, end, steps)`')
def _():
    for args in ((-1.5, 2.0, 7), (0, 10, 5), (3, 5, 1), (0.0, 1.0, 1001)):
        t = tlgpu.linspace(*args)
        assert t.dtype == np.float32 and t.shape == (args[2],)
        close(t, np.linspace(*args), 1e-6, 1e-6)
    t = tlgpu.linspace(0, 1, 3, device="cuda", requires_grad=True)
    assert t.requires_grad and t.is_leaf


@row('`torch.normal(mean, std)`, `torch.normal(m, s, size=...)`')
def _():
    tlgpu.manual_seed(1)
    s = tlgpu.normal(2.0, 3.0, size=(20000,))
    assert s.dtype == np.float32 and s.shape == (20000,)
    assert abs(s.numpy().mean() - 2.0) < 0.1 and abs(s.numpy().std() - 3.0) < 0.1
    r = rng()
    m, sd = r.standard_normal((4, 1)), r.random(3) + 0.5
    M, S = T(m, requires_grad=True), T(sd, requires_grad=True)
    x = tlgpu.normal(M, S)                                        # broadcast: (4, 3)
    assert x.shape == (4, 3) and x.dtype == np.float32
    eps = (x.numpy() - f32(m)) / f32(sd)
    x.sum().backward()                                            # x = mean + std * eps
    close(M.grad, np.full((4, 1), 3.0), 0, 0)
    close(S.grad, eps.sum(0), 1e-4, 1e-5)
    assert tlgpu.normal(T(m)).shape == (4, 1) and tlgpu.normal(0.0, T(sd)).shape == (3,)
    tlgpu.manual_seed(5)
    a = tlgpu.normal(0.0, 1.0, size=(6,)).numpy()
    tlgpu.manual_seed(5)
    close(tlgpu.normal(0.0, 1.0, size=(6,)), a, 0, 0)


@row('`t.uniform_(a, b)`, `t.normal_(mean, std)`')
def _():
    tlgpu.manual_seed(3)
    t = tlgpu.empty(20000)
    assert t.uniform_(-2, 3) is t
    u = t.numpy()
    assert -2 <= u.min() and u.max() < 3 and abs(u.mean() - 0.5) < 0.05
    assert t.normal_(1, 2) is t
    assert abs(t.numpy().mean() - 1) < 0.05 and abs(t.numpy().std() - 2) < 0.05
    for fill in (lambda v: v.uniform_(), lambda v: v.normal_()):
        tlgpu.manual_seed(9)
        a = fill(tlgpu.empty(8)).numpy()
        tlgpu.manual_seed(9)
        close(fill(tlgpu.empty(8)), a, 0, 0)                      # seeded
    z = tlgpu.zeros(4, 6)
    z.transpose(0, 1)[::2].uniform_(5, 6)                         # a strided view: its elements only
    zz = z.numpy()
    assert zz[:, ::2].min() >= 5 and not zz[:, 1::2].any()
    raises(TypeError, "float32", lambda: tlgpu.zeros(3, dtype=tlgpu.int32).uniform_())
    leaf = tlgpu.zeros(5, requires_grad=True)
    raises(RuntimeError, "no_grad", lambda: leaf.normal_())
    with tlgpu.no_grad():
        leaf.uniform_(1, 2)
    assert leaf.requires_grad and leaf.numpy().min() >= 1


# ---- Operators and math ----

@row('`torch.ceil/floor/round(x)`, `x.ceil()` ...')
def _():
    a = f32(rng().standard_normal((3, 5)) * 4)
    a[0] = [0.5, 1.5, 2.5, -0.5, -2.5]                           # halves go to the even neighbour
    for name in ("ceil", "floor", "round"):
        ref = getattr(np, name)(a)
        close(getattr(tlgpu, name)(T(a)), ref, 0, 0)
        close(getattr(T(a), name)(), ref, 0, 0)
        i = tlgpu.tensor(np.arange(-3, 4, dtype=np.int32))
        out = getattr(tlgpu, name)(i)
        assert out.dtype == np.int32 and out.tolist() == list(range(-3, 4))
        w = T(a, requires_grad=True)
        getattr(w, name)().sum().backward()
        close(w.grad, np.zeros_like(a), 0, 0)
    raises(TypeError, "argument", lambda: T(a).round(decimals=1))


@row('`torch.tril/triu(x, diagonal)`, `x.tril()`')
def _():
    r = rng()
    a = f32(r.standard_normal((2, 4, 5)))
    i = r.integers(-5, 5, (3, 4)).astype(np.int32)
    for name in ("tril", "triu"):
        for d in (0, 1, -2):
            close(getattr(tlgpu, name)(T(a), d), getattr(np, name)(a, d), 0, 0)
            close(getattr(T(a), name)(diagonal=d), getattr(np, name)(a, d), 0, 0)
        close(getattr(T(a).transpose(1, 2), name)(), getattr(np, name)(a.transpose(0, 2, 1)), 0, 0)
        out = getattr(tlgpu.tensor(i), name)(1)
        assert out.dtype == np.int32 and out.tolist() == getattr(np, name)(i, 1).tolist()
        w = T(a, requires_grad=True)
        getattr(w, name)(1).sum().backward()
        close(w.grad, getattr(np, name)(np.ones_like(a), 1), 0, 0)


@row('`torch.multinomial(probs, n, replacement)`, `probs.multinomial(n)`')
def _():
    tlgpu.manual_seed(0)
    p = f32([[0.1, 0.0, 0.6, 0.3], [1, 1, 1, 1]])
    s = tlgpu.multinomial(T(p), 20000, replacement=True)
    assert s.dtype == np.int32 and s.shape == (2, 20000)
    freq = np.stack([np.bincount(row_, minlength=4) / 20000 for row_ in s.numpy()])
    close(freq, p / p.sum(1, keepdims=True), 0, 0.02)
    q = f32([0.5, 0.3, 0.15, 0.05])                               # without replacement: distinct, in draw order
    s = T(np.tile(q, (20000, 1))).multinomial(2).numpy()
    assert (s[:, 0] != s[:, 1]).all()
    second = [sum(q[i] * q[j] / (1 - q[i]) for i in range(4) if i != j) for j in range(4)]
    close(np.bincount(s[:, 0], minlength=4) / 20000, q, 0, 0.02)
    close(np.bincount(s[:, 1], minlength=4) / 20000, second, 0, 0.02)
    s = T(p).multinomial(4).numpy()                               # row 0 has 3 positive weights
    assert s[0, 3] == -1 and sorted(s[0, :3]) == [0, 2, 3] and sorted(s[1]) == [0, 1, 2, 3]
    assert tlgpu.multinomial(tlgpu.zeros(2, 3), 2, True).tolist() == [[-1, -1], [-1, -1]]
    assert tlgpu.multinomial(T([[math.nan, 1.0]]), 1, True).tolist() == [[-1]]


@row('`x.index_add_(dim, idx, src, alpha=a)`, `x.index_add(...)`')
def _():
    r = rng()
    s, src = f32(r.standard_normal((5, 3))), f32(r.standard_normal((6, 3)))
    idx = np.array([0, 4, 0, -1, 2, 0], np.int32)                 # duplicates and a negative index
    want = s.copy()
    np.add.at(want, idx % 5, 2.5 * src)
    x = T(s)
    assert x.index_add_(0, tlgpu.tensor(idx), T(src), alpha=2.5) is x
    close(x, want, 1e-5, 1e-6)
    x = T(s)
    close(x.index_add(0, idx.astype(np.int64), T(src), alpha=2.5), want, 1e-5, 1e-6)
    close(x, s, 0, 0)                                             # out of place
    src1, idx1 = f32(r.standard_normal((5, 4))), np.array([2, 2, 1, 0], np.int32)
    want1 = s.copy()
    for j, k in enumerate(idx1):
        want1[:, k] += src1[:, j]
    close(tlgpu.index_add(T(s), 1, tlgpu.tensor(idx1), T(src1)), want1, 1e-5, 1e-6)
    big = f32(r.standard_normal((10000, 2)))
    runs = [tlgpu.zeros(1, 2).index_add_(0, tlgpu.zeros(10000, dtype=tlgpu.int32), T(big)).numpy() for _ in range(3)]
    assert all(np.array_equal(runs[0], o) for o in runs)          # deterministic, bit for bit
    close(runs[0][0], big.astype(np.float64).sum(0), 1e-4, 1e-4)
    sv, sr = T(s, requires_grad=True), T(src, requires_grad=True)
    g = f32(r.standard_normal((5, 3)))
    (sv.index_add(0, tlgpu.tensor(idx), sr, alpha=2.5) * T(g)).sum().backward()
    close(sv.grad, g, 0, 0)
    close(sr.grad, 2.5 * g[idx % 5], 1e-6)
    bad = tlgpu.zeros(5, 3).index_add_(0, tlgpu.tensor(np.array([0, 7, 0, 0, 0, 0], np.int32)), T(src))
    raises(IndexError, "7", bad.numpy)                            # at the sync point, not at the call
    close(tlgpu.ones(2), np.ones(2), 0, 0)                        # and the device goes on
    raises(TypeError, "int32", lambda: T(s).index_add_(0, T(idx), T(src)))


# ---- Reductions ----

@row('`x.prod(dim, keepdim)`, `torch.prod`')
def _():
    p = f32(rng().standard_normal((3, 4, 2)))
    p[0, 1, 0] = p[1, 2, 1] = p[1, 3, 1] = 0.0                     # one zero and two zeros in a slice
    x = T(p)
    close(x.prod(), p.prod(), 1e-5, 1e-7)
    close(x.prod(1), p.prod(1), 1e-5, 1e-6)
    close(x.prod(dim=1, keepdim=True), p.prod(1, keepdims=True), 1e-5, 1e-6)
    close(tlgpu.prod(x, axis=2, keepdims=True), p.prod(2, keepdims=True), 1e-5, 1e-6)
    w = T(p, requires_grad=True)
    w.prod(1).sum().backward()
    want = np.empty_like(p)
    for j in range(4):                                            # d/dx_j = product of the others
        want[:, j] = np.delete(p, j, axis=1).prod(1)
    close(w.grad, want, 1e-5, 1e-6)
    raises(TypeError, "float32", lambda: tlgpu.arange(3).prod())


@row('`torch.topk(x, k, dim, largest, sorted)`, `x.topk(...)`')
def _():
    a = rng().integers(0, 4, (3, 7)).astype(np.float32)           # many ties
    for largest in (True, False):
        for dim, k in ((1, 3), (0, 2)):
            res = tlgpu.topk(T(a), k, dim=dim, largest=largest, sorted=False)
            order = np.take(np.argsort(-a if largest else a, axis=dim, kind="stable"), np.arange(k), axis=dim)
            assert res.indices.dtype == np.int32 and res.indices.tolist() == order.tolist()
            close(res.values, np.take_along_axis(a, order, dim), 0, 0)
    v, i = T([1.0, math.nan, 3.0]).topk(2)
    assert np.isnan(v.numpy()[0]) and i.tolist() == [1, 2]           # NaN largest
    w = T(a, requires_grad=True)
    v, i = w.topk(2)
    v.sum().backward()
    want = np.zeros_like(a)
    np.put_along_axis(want, i.numpy(), 1.0, 1)
    close(w.grad, want, 0, 0)
    raises(TypeError, "float32", lambda: tlgpu.arange(5).topk(2))


@row('`x.sort(dim, descending)`, `torch.argsort(x, dim, descending)`')
def _():
    b = rng().integers(0, 5, (4, 6)).astype(np.float32)
    b[0, 2] = b[3, 1] = math.nan
    b[1, 0] = -math.inf
    b[2, 3] = math.inf
    for dim in (0, 1):
        res = T(b).sort(dim)
        asc = np.argsort(b, axis=dim, kind="stable")                # numpy: stable, NaN last
        assert res.indices.dtype == np.int32 and res.indices.tolist() == asc.tolist()
        close(res.values, np.take_along_axis(b, asc, dim), 0, 0)
        assert tlgpu.argsort(T(b), dim=dim).tolist() == asc.tolist()
        key = np.where(np.isnan(b), np.finfo(np.float32).max, b)     # no row or column holds NaN and +inf
        desc = np.argsort(-key, axis=dim, kind="stable")              # ties stay in index order
        assert T(b).sort(dim=dim, descending=True)[1].tolist() == desc.tolist()
        assert tlgpu.argsort(T(b), dim, descending=True).tolist() == desc.tolist()
    w = T(np.nan_to_num(b), requires_grad=True)
    v, i = w.sort(1)
    g = f32(rng().standard_normal(b.shape))
    (v * T(g)).sum().backward()
    want = np.zeros_like(g)
    np.put_along_axis(want, i.numpy(), g, 1)
    close(w.grad, want, 0, 0)
    raises(TypeError, "float32", lambda: tlgpu.arange(3).sort())


# ---- Autograd (distributions) ----

@row('`Normal(mean, std)`: `rsample()`, `log_prob(a).sum(1)`, `entropy().sum(1)`')
def _():
    r = rng()
    mu, sd, act = f32(r.standard_normal((4, 3))), f32(r.random((4, 3)) + 0.5), f32(r.standard_normal((4, 3)))
    M, S = T(mu, requires_grad=True), T(sd, requires_grad=True)
    d = D.Normal(M, S)
    want = (-(act - mu) ** 2 / (2 * sd ** 2) - np.log(sd) - 0.5 * np.log(2 * np.pi)).sum(1)
    close(d.log_prob(T(act)).sum(1), want, 1e-5, 1e-5)
    close(d.entropy().sum(1), (0.5 + 0.5 * np.log(2 * np.pi) + np.log(sd)).sum(1), 1e-5, 1e-5)
    x = d.rsample()
    eps = (x.numpy() - mu) / sd
    x.sum().backward()
    close(M.grad, np.ones_like(mu), 0, 0)
    close(S.grad, eps, 1e-4, 1e-5)
    assert not d.sample().requires_grad and d.rsample((2,)).shape == (2, 4, 3)
    tlgpu.manual_seed(1)
    big = D.Normal(T(np.full(20000, 3.0)), T(np.full(20000, 2.0))).rsample().numpy()
    assert abs(big.mean() - 3) < 0.1 and abs(big.std() - 2) < 0.1


@row('`torch.distributions.kl_divergence(p, q)`')
def _():
    r = rng()
    l1, l2 = f32(r.standard_normal((4, 3))), f32(r.standard_normal((4, 3)))
    lp, lq = log_softmax(l1, -1), log_softmax(l2, -1)
    kl = D.kl_divergence(D.Categorical(logits=T(l1)), D.Categorical(logits=T(l2)))
    close(kl, (np.exp(lp) * (lp - lq)).sum(-1), 1e-5, 1e-6)
    m1, s1, m2, s2 = r.standard_normal(5), r.random(5) + 0.5, r.standard_normal(5), r.random(5) + 0.5
    kl = D.kl_divergence(D.Normal(T(m1), T(s1)), D.Normal(T(m2), T(s2)))
    close(kl, np.log(s2 / s1) + (s1 ** 2 + (m1 - m2) ** 2) / (2 * s2 ** 2) - 0.5, 1e-5, 1e-6)
    raises(NotImplementedError, "Normal", lambda: D.kl_divergence(D.Normal(0.0, 1.0), D.Categorical(logits=T(l1))))

    class Wide(D.Normal):
        pass

    @D.register_kl(Wide, Wide)
    def _kl(p, q):
        return tlgpu.zeros(1) + 42.0
    close(D.kl_divergence(Wide(0.0, 1.0), Wide(0.0, 1.0)), [42.0], 0, 0)
    close(D.kl_divergence(Wide(0.0, 1.0), D.Normal(1.0, 2.0)), math.log(2) + 2 / 8 - 0.5, 1e-6)  # nearest pair


# ---- nn, optim ----

@row('`F.relu(x, inplace=True)`, `F.gelu(x, approximate="tanh")`, `nn.GELU(approximate="tanh")`, '
     '`F.dropout(x, p, training=self.training)`')
def _():
    a = f32(rng().standard_normal((3, 5)) * 2)
    a[0, 0] = math.nan
    x = T(a)
    assert F.relu(x, inplace=True) is x
    close(x, np.where(np.isnan(a), a, np.maximum(a, 0)), 0, 0)      # NaN propagates
    a[0, 0] = 0.0
    k = math.sqrt(2 / math.pi)
    th = np.tanh(k * (a + 0.044715 * a ** 3))
    close(F.gelu(T(a), approximate="tanh"), 0.5 * a * (1 + th), 1e-5, 1e-6)
    close(nn.GELU(approximate="tanh")(a), 0.5 * a * (1 + th), 1e-5, 1e-6)
    erf = np.vectorize(math.erf)
    close(nn.GELU()(a), 0.5 * a * (1 + erf(a / math.sqrt(2))), 1e-5, 1e-6)
    w = T(a, requires_grad=True)
    F.gelu(w, approximate="tanh").sum().backward()
    close(w.grad, 0.5 * (1 + th) + 0.5 * a * (1 - th ** 2) * k * (1 + 3 * 0.044715 * a ** 2), 1e-5, 1e-6)
    tlgpu.manual_seed(0)
    y = F.dropout(tlgpu.ones(200, 100), 0.3, training=True).numpy()
    close(np.unique(y), [0.0, 1 / 0.7], 1e-6)                      # kept elements scaled by 1/(1 - p)
    assert abs((y == 0).mean() - 0.3) < 0.02
    x = T(a)
    assert F.dropout(x, 0.3, training=False) is x


@row('`F.softmax(x, dim=1)`, `F.log_softmax(x, dim=1, dtype=None)`')
def _():
    x = f32(rng().standard_normal((3, 4, 5)))
    close(F.softmax(T(x), dim=1), np.exp(log_softmax(x, 1)), 1e-5, 1e-6)
    close(F.softmax(T(x), axis=0), np.exp(log_softmax(x, 0)), 1e-5, 1e-6)
    close(F.softmax(T(x)), np.exp(log_softmax(x, -1)), 1e-5, 1e-6)         # no dim: the last
    close(F.log_softmax(T(x), dim=1, dtype=None), log_softmax(x, 1), 1e-5, 1e-5)
    close(F.log_softmax(T(x), dim=1, dtype=tlgpu.float32), log_softmax(x, 1), 1e-5, 1e-5)
    close(F.log_softmax(T(x)), log_softmax(x, -1), 1e-5, 1e-5)
    raises(TypeError, "float32", lambda: F.log_softmax(T(x), dim=1, dtype=tlgpu.float64))


@row('`F.cross_entropy(logits, y, weight=, ignore_index=-1, reduction=, label_smoothing=)`')
def _():
    r = rng()
    n, c = 5, 4
    lg, y = f32(r.standard_normal((n, c))), np.array([0, 3, -1, 2, 1], np.int32)
    lp, keep = log_softmax(lg, 1), y != -1
    yy = np.where(keep, y, 0)
    nll = -lp[np.arange(n), yy]
    t = T(lg, requires_grad=True)
    loss = F.cross_entropy(t, tlgpu.tensor(y), ignore_index=-1)
    assert loss.grad_fn == "CrossEntropyBackward"                 # the fused kernel
    close(loss, nll[keep].mean(), 1e-5)
    loss.backward()
    close(t.grad, (np.exp(lp) - np.eye(c)[yy]) * keep[:, None] / keep.sum(), 1e-5, 1e-6)
    close(F.cross_entropy(T(lg), y.astype(np.int64), ignore_index=-1, reduction="none"), nll * keep, 1e-5, 1e-6)
    w = f32([1, 2, 0.5, 3])
    wt = w[yy] * keep
    want = (0.9 * nll * wt + 0.1 / c * -(lp * w).sum(1) * keep).sum() / wt.sum()
    close(F.cross_entropy(T(lg), tlgpu.tensor(y), weight=T(w), ignore_index=-1, reduction="mean",
                          label_smoothing=0.1), want, 1e-5)
    close(F.cross_entropy(T(lg[0]), tlgpu.tensor(np.array(2, np.int32))), -lp[0, 2], 1e-5)
    l3, y3 = f32(r.standard_normal((2, c, 3))), r.integers(0, c, (2, 3)).astype(np.int32)
    out = F.cross_entropy(T(l3, requires_grad=True), tlgpu.tensor(y3), reduction="none")
    assert out.grad_fn is not None and out.shape == (2, 3)
    close(out, -np.take_along_axis(log_softmax(l3, 1), y3[:, None], 1)[:, 0], 1e-5, 1e-6)
    pr = f32(r.random((n, c)))
    pr /= pr.sum(1, keepdims=True)
    close(F.cross_entropy(T(lg), T(pr), label_smoothing=0.2), -((pr * 0.8 + 0.2 / c) * lp).sum(1).mean(), 1e-5)


@row('`F.mse_loss(a, b, reduction="none")`')
def _():
    r = rng()
    a, b = f32(r.standard_normal((4, 1))), f32(r.standard_normal(4))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        close(F.mse_loss(T(a), T(b)), ((a - b) ** 2).mean(), 1e-5)  # broadcast to (4, 4), as torch
        assert any("differs" in str(m.message) for m in caught)
        caught.clear()
        close(F.mse_loss(T(a), T(a * 3), reduction="none"), (2 * a) ** 2, 1e-5, 1e-6)
        close(F.mse_loss(T(a), T(a * 0), reduction="sum"), (a ** 2).sum(), 1e-5)
        assert not caught


@row('`F.layer_norm(x, w.shape, w, b, 1e-5)`')
def _():
    r = rng()
    x, w, b = f32(r.standard_normal((3, 4, 6))), f32(r.standard_normal(6)), f32(r.standard_normal(6))
    rs = 1 / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    xh = (x - x.mean(-1, keepdims=True)) * rs
    W = T(w)
    close(F.layer_norm(T(x), W.shape, W, T(b), 1e-5), xh * w + b, 1e-5, 1e-5)
    xt, wt, bt = T(x, requires_grad=True), T(w, requires_grad=True), T(b, requires_grad=True)
    g = f32(r.standard_normal(x.shape))
    (F.layer_norm(xt, (6,), wt, bt, 1e-5) * T(g)).sum().backward()
    gxh = g * w
    close(xt.grad, rs * (gxh - gxh.mean(-1, keepdims=True) - xh * (gxh * xh).mean(-1, keepdims=True)), 1e-4, 1e-5)
    close(wt.grad, (g * xh).sum((0, 1)), 1e-4, 1e-5)
    close(bt.grad, g.sum((0, 1)), 1e-5, 1e-5)
    ln = nn.LayerNorm(6)
    with tlgpu.no_grad():
        ln.weight.copy_(w)
        ln.bias.copy_(b)
    close(ln(x), xh * w + b, 1e-5, 1e-5)


@row('`F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p if training else 0, is_causal=True)`')
def _():
    r = rng()
    L, S, E = 4, 6, 5
    q, k, v = (f32(r.standard_normal((2, 3, n, E))) for n in (L, S, S))

    def ref(add):
        s = q @ k.swapaxes(-1, -2) / math.sqrt(E) + add
        dead = np.isinf(s).all(-1, keepdims=True)
        p = np.exp(log_softmax(np.where(dead, 0, s), -1))
        return np.where(dead, 0, p) @ v
    Q, K, V = T(q), T(k), T(v)
    causal = np.where(np.tril(np.ones((L, S), bool)), 0, -np.inf)     # top-left aligned
    close(F.scaled_dot_product_attention(Q, K, V, attn_mask=None, dropout_p=0.0, is_causal=True), ref(causal),
          1e-5, 1e-6)
    bm = r.random((L, S)) > 0.4
    bm[1] = False                                                       # a fully masked row: zeros
    for mask in (bm, tlgpu.tensor(bm.astype(np.int32))):
        close(F.scaled_dot_product_attention(Q, K, V, attn_mask=mask), ref(np.where(bm, 0, -np.inf)), 1e-5, 1e-6)
    add = r.standard_normal((L, S))
    close(F.scaled_dot_product_attention(Q, K, V, attn_mask=add), ref(add), 1e-5, 1e-6)
    fm = T(bm.astype(np.float32))
    raises(TypeError, "mask_kind", lambda: F.scaled_dot_product_attention(Q, K, V, attn_mask=fm))
    close(F.scaled_dot_product_attention(Q, K, V, attn_mask=fm, mask_kind="bool"), ref(np.where(bm, 0, -np.inf)),
          1e-5, 1e-6)
    close(F.scaled_dot_product_attention(Q, K, V, attn_mask=T(add), mask_kind="additive"), ref(add), 1e-5, 1e-6)
    Qg = T(q, requires_grad=True)
    F.scaled_dot_product_attention(Qg, K, V, attn_mask=bm).sum().backward()
    assert np.isfinite(Qg.grad.numpy()).all() and not Qg.grad.numpy()[:, :, 1].any()
    tlgpu.manual_seed(0)
    dropped = F.scaled_dot_product_attention(Q, K, V, dropout_p=0.5, is_causal=True)
    assert np.abs(dropped.numpy() - ref(causal)).max() > 0.01


@row('`F.embedding(idx, w, padding_idx=0)`')
def _():
    r = rng()
    w, idx = f32(r.standard_normal((5, 3))), np.array([[0, 2], [4, 0]], np.int32)
    W = T(w, requires_grad=True)
    out = F.embedding(tlgpu.tensor(idx), W, padding_idx=0)
    close(out, w[idx], 0, 0)
    g = f32(r.standard_normal(out.shape))
    (out * T(g)).sum().backward()
    want = np.zeros_like(w)
    np.add.at(want, idx.reshape(-1), g.reshape(-1, 3))
    want[0] = 0                                                         # no gradient into the padding row
    close(W.grad, want, 1e-6)
    close(F.embedding(idx.astype(np.int64), T(w)), w[idx], 0, 0)
    for kw in ({"max_norm": 1.0}, {"sparse": True}, {"scale_grad_by_freq": True}):
        raises(NotImplementedError, "max_norm", lambda: F.embedding(tlgpu.tensor(idx), T(w), **kw))
    raises(IndexError, "7", lambda: F.embedding(tlgpu.tensor(np.array([7], np.int32)), T(w)).numpy())  # next sync


@row('`optim.RAdam(params, lr, betas, eps, weight_decay, decoupled_weight_decay)`')
def _():
    r = rng()
    a, grads = r.standard_normal(6), [r.standard_normal(6) for _ in range(12)]
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.99, 1e-8, 0.1
    for decoupled in (False, True):
        p, m, v = a.copy(), np.zeros(6), np.zeros(6)                  # torch's RAdam, in float64
        for t, g in enumerate(grads, 1):
            if decoupled:
                p = p * (1 - lr * wd)
            else:
                g = g + wd * p
            m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
            bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
            rho_inf = 2 / (1 - b2) - 1
            rho = rho_inf - 2 * t * b2 ** t / bc2
            if rho > 5:                                               # from step 6 with b2 = 0.99
                rect = math.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
                p = p - lr * m / bc1 * rect * math.sqrt(bc2) / (np.sqrt(v) + eps)
            else:
                p = p - lr * m / bc1
        w = T(a, requires_grad=True)
        opt = tlgpu.optim.RAdam([w], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd,
                                decoupled_weight_decay=decoupled)
        for g in grads:
            w.grad = T(g)
            opt.step()
        close(w, p, 1e-5, 1e-6)
        sd = opt.state_dict()
        st = sd["state"][0]
        assert set(st) == {"step", "exp_avg", "exp_avg_sq"} and st["step"] == 12
        close(st["exp_avg"], m, 1e-5, 1e-6)
        close(st["exp_avg_sq"], v, 1e-5, 1e-6)
        assert sd["param_groups"][0]["params"] == [0] and sd["param_groups"][0]["decoupled_weight_decay"] == decoupled


@row('`optim.RMSprop(params, lr, alpha, eps, weight_decay, momentum, centered)`')
def _():
    r = rng()
    a, grads = r.standard_normal(6), [r.standard_normal(6) for _ in range(12)]
    lr, alpha, eps = 0.01, 0.9, 1e-5
    for wd, momentum, centered in ((0.0, 0.0, False), (0.1, 0.9, False), (0.0, 0.5, True), (0.05, 0.0, True)):
        p, sq, ga, buf = a.copy(), np.zeros(6), np.zeros(6), np.zeros(6)   # torch's RMSprop, in float64
        for g in grads:
            g = g + wd * p
            sq = alpha * sq + (1 - alpha) * g * g
            den = sq
            if centered:
                ga = ga + (1 - alpha) * (g - ga)
                den = sq - ga * ga
            den = np.sqrt(den) + eps
            if momentum:
                buf = momentum * buf + g / den
                p = p - lr * buf
            else:
                p = p - lr * g / den
        w = T(a, requires_grad=True)
        opt = tlgpu.optim.RMSprop([w], lr=lr, alpha=alpha, eps=eps, weight_decay=wd, momentum=momentum,
                                  centered=centered)
        for g in grads:
            w.grad = T(g)
            opt.step()
        close(w, p, 1e-5, 1e-6)
        st = opt.state_dict()["state"][0]
        want = {"step", "square_avg"} | ({"momentum_buffer"} if momentum else set()) | \
            ({"grad_avg"} if centered else set())
        assert set(st) == want and st["step"] == 12, st.keys()
        close(st["square_avg"], sq, 1e-5, 1e-6)
        if centered:
            close(st["grad_avg"], ga, 1e-5, 1e-6)
        opt2 = tlgpu.optim.RMSprop([T(a, requires_grad=True)], lr=lr)     # a resumed run continues alike
        opt2.load_state_dict(opt.state_dict())
        assert opt2.param_groups[0]["centered"] == centered and opt2.state_dict()["state"][0]["step"] == 12
    raises(ValueError, "alpha", lambda: tlgpu.optim.RMSprop([T(a, requires_grad=True)], alpha=1.5))


@row('`x.amax(dim, keepdim)`, `x.amin(...)`, `torch.amax(x, dim)`')
def _():
    a = f32(rng().standard_normal((3, 4, 5)))
    a[1, 2, :2] = 2.5                                                 # a tie in one row
    x = T(a, requires_grad=True)
    close(x.amax(1), a.max(1), 0, 0)
    close(x.amin((0, 2), keepdim=True), a.min((0, 2), keepdims=True), 0, 0)
    close(tlgpu.amax(x, -1), a.max(-1), 0, 0)
    assert x.amax().shape == () and x.amax().item() == a.max()
    g = f32(rng().standard_normal((3, 5)))
    (x.amax(1) * T(g)).sum().backward()
    hit = (a == a.max(1, keepdims=True)).astype(np.float64)
    close(x.grad, g[:, None, :] * hit / hit.sum(1, keepdims=True))    # split evenly between ties


@row('`x.any(dim)`, `x.all(dim)`, `torch.isnan(x)`, `isinf`, `isfinite`')
def _():
    a = f32(rng().standard_normal((3, 4, 5)))
    a[0, 1, 2], a[1, 2, 3], a[2, 0, 0], a[2, 3] = np.nan, np.inf, -np.inf, 0
    x = T(a)
    for got, want in ((x.isnan(), np.isnan(a)), (tlgpu.isinf(x), np.isinf(a)), (x.isfinite(), np.isfinite(a)),
                      (x.any(), np.any(a)), (x.all(), np.all(a)), ((x > 1).any(1), (a > 1).any(1)),
                      (tlgpu.all(x, 2, keepdim=True), np.all(a, 2, keepdims=True)), ((x > -9).all(), (a > -9).all()),
                      ((x == x).any(), True)):
        assert got.dtype == tlgpu.float32
        close(got, f32(want), 0, 0)
    assert bool(x.isnan().any()) and not bool(tlgpu.tensor(np.array([1, 2], np.int32)).isnan().any())
    e = T(np.zeros((0, 3)))
    assert bool(e.all()) and not bool(e.any()) and e.any(0).shape == (3,)


@row('`x.flip(dims)`, `torch.flip(x, dims)`')
def _():
    a = f32(rng().standard_normal((3, 4, 5)))
    x = T(a, requires_grad=True)
    close(x.flip(0), a[::-1], 0, 0)
    close(x.flip((0, -1)), a[::-1, :, ::-1], 0, 0)
    close(tlgpu.flip(x, [1, 2]), a[:, ::-1, ::-1], 0, 0)
    g = f32(rng().standard_normal((3, 4, 5)))
    (x.flip((0, 2)) * T(g)).sum().backward()
    close(x.grad, g[::-1, :, ::-1], 0, 0)
    close(tlgpu.tensor(a.astype(np.int32)).flip(1), a.astype(np.int32)[:, ::-1], 0, 0)
    raises(IndexError, "out of range", lambda: x.flip(3))
    raises(ValueError, "repeat", lambda: x.flip((1, -2)))


@row('`x.element_size()`, `x.nbytes`')
def _():
    for dt, size in ((tlgpu.float32, 4), (tlgpu.int32, 4), (tlgpu.float16, 2), (tlgpu.bfloat16, 2), (tlgpu.uint8, 1)):
        x = tlgpu.zeros((3, 5), dtype=dt)
        assert x.element_size() == size and x.nbytes == 15 * size, dt


@row('`x.t()`, `x.mT`, `x.swapaxes(a, b)`, `x.movedim(src, dst)`')
def _():
    a = f32(rng().standard_normal((2, 3, 4)))
    x = T(a, requires_grad=True)
    close(x[0].t(), a[0].T, 0, 0)
    close(x.mT, np.swapaxes(a, -2, -1), 0, 0)
    close(x.swapaxes(0, 2), np.swapaxes(a, 0, 2), 0, 0)
    close(x.swapdims(-1, 0), np.swapaxes(a, -1, 0), 0, 0)
    close(x.movedim(0, -1), np.moveaxis(a, 0, -1), 0, 0)
    close(tlgpu.movedim(x, (0, 1), (2, 0)), np.moveaxis(a, (0, 1), (2, 0)), 0, 0)
    close(x.moveaxis(-1, 1), np.moveaxis(a, -1, 1), 0, 0)
    g = f32(rng().standard_normal((4, 2, 3)))
    (x.movedim(2, 0) * T(g)).sum().backward()
    close(x.grad, np.moveaxis(g, 0, 2), 0, 0)
    raises(ValueError, "at most 2", lambda: x.t())
    raises(ValueError, "distinct", lambda: x.movedim((0, 1), (1, 1)))


@row('`x.narrow(dim, start, length)`, `x.select(dim, i)`, `x.unbind(dim)`')
def _():
    a = f32(rng().standard_normal((3, 5, 2)))
    x = T(a, requires_grad=True)
    close(x.narrow(1, 1, 3), a[:, 1:4], 0, 0)
    close(x.narrow(-2, -2, 2), a[:, -2:], 0, 0)
    close(x.select(2, -1), a[..., -1], 0, 0)
    parts = tlgpu.unbind(x, 1)
    assert isinstance(parts, tuple) and len(parts) == 5
    for i, p in enumerate(parts):
        close(p, a[:, i], 0, 0)
    (x.narrow(1, 1, 3).sum() + parts[4].sum() * 2).backward()
    want = np.zeros_like(a)
    want[:, 1:4] = 1
    want[:, 4] += 2
    close(x.grad, want, 0, 0)
    raises(IndexError, "out of range", lambda: x.narrow(1, 3, 3))
    raises(IndexError, "out of range", lambda: x.select(0, 3))


@row('`x.nonzero()`, `x.nonzero(as_tuple=True)`, `torch.argwhere(x)`')
def _():
    a = f32(rng().standard_normal((4, 6)))
    m = T(a) > 0.3
    close(m.nonzero(), np.argwhere(a > 0.3), 0, 0)
    assert m.nonzero().dtype == tlgpu.int32 and tlgpu.argwhere(m).shape == (int((a > 0.3).sum()), 2)
    rows, cols = m.nonzero(as_tuple=True)
    close(rows, np.nonzero(a > 0.3)[0], 0, 0)
    close(cols, np.nonzero(a > 0.3)[1], 0, 0)
    assert T(np.zeros((2, 3))).nonzero().shape == (0, 2)


@row('`torch.bmm(a, b)`, `torch.lerp(a, b, w)`, `torch.addcmul(x, a, b, value=v)`, `addcdiv`')
def _():
    r = rng()
    a, b = f32(r.standard_normal((3, 4, 5))), f32(r.standard_normal((3, 5, 2)))
    close(tlgpu.bmm(T(a), T(b)), a @ b, 1e-5, 1e-5)
    raises(ValueError, "bmm", lambda: T(a).bmm(T(b[0])))
    x, y, w = (f32(r.standard_normal((4, 3))) for _ in range(3))
    close(T(x).lerp(T(y), 0.3), x + f32(0.3) * (y - x))
    close(tlgpu.lerp(T(x), T(y), T(w)), x + w * (y - x))
    close(T(x).addcmul(T(y), T(w), value=0.5), x + 0.5 * y * w)
    close(tlgpu.addcdiv(T(x), T(y), T(np.abs(w) + 1), value=-2), x - 2 * y / (np.abs(w) + 1))
    tx = T(x, requires_grad=True)
    tx.lerp(T(y), 0.25).sum().backward()
    close(tx.grad, np.full_like(x, 0.75))


@row('`torch.isclose(a, b, rtol, atol, equal_nan)`, `torch.allclose(...)`')
def _():
    a = f32(rng().standard_normal((5, 4)))
    b = a + f32(rng().standard_normal((5, 4))) * f32(1e-6)
    a[0, :3], b[0, :3] = [np.nan, np.inf, -np.inf], [np.nan, np.inf, np.inf]
    for kw in ({}, {"equal_nan": True}, {"rtol": 0, "atol": 1e-7}):
        got = T(a).isclose(T(b), **kw)
        assert got.dtype == tlgpu.float32
        close(got, f32(np.isclose(a, b, **kw)), 0, 0)
    assert tlgpu.allclose(T(a[1:]), T(b[1:])) and not T(a[1:]).allclose(T(b[1:] + 1e-3))
    assert T(a).allclose(T(a), equal_nan=True) and not T(a).allclose(T(a))


@row('`torch.log1p(x)`, `torch.expm1(x)`, `torch.erf(x)`, `x.log1p()` ...')
def _():
    r = rng()
    small = f32(r.standard_normal(500) * 1e-4)                         # where log(1 + x) loses every digit
    a = f32(r.standard_normal((6, 7)))
    erf = np.vectorize(math.erf)
    for fn, ref in ((lambda t: t.log1p(), np.log1p), (tlgpu.expm1, np.expm1), (tlgpu.erf, erf)):
        for v in (small, a if ref is not np.log1p else np.abs(a)):
            close(fn(T(v)), ref(v.astype(np.float64)), 2e-6, 0)
    x = T(a, requires_grad=True)
    (x.abs().log1p() * 2 + x.expm1() + x.erf()).sum().backward()
    b = a.astype(np.float64)
    close(x.grad, 2 * np.sign(b) / (1 + np.abs(b)) + np.exp(b) + 2 / math.sqrt(math.pi) * np.exp(-b * b), 1e-5, 1e-6)
    h = tlgpu.tensor(a.astype(np.float16))
    assert h.erf().dtype == tlgpu.float16 and h.T.log1p().dtype == tlgpu.float16
    f = tlgpu.jit(lambda t: (t.abs().log1p() + t.erf()) * 0.5 + t.expm1())
    want = (np.log1p(np.abs(b)) + erf(b)) * 0.5 + np.expm1(b)
    for _ in range(3):                                                 # eager, trace, replays (fused)
        close(f(T(a)), want, 2e-6, 1e-6)


# ---- indexing (tlgpu/_indexing.py) and the distributions' submodule paths ----

@row('`x[1:3, :, None]`, `x[i]`, `x[idx_list]`, `x[int_tensor]`')
def _():
    a = f32(rng().standard_normal((5, 4)))
    x = T(a)
    close(x[1:3, :, None], a[1:3, :, None], 0, 0)
    close(x[2], a[2], 0, 0)
    close(x[[4, 0, 0]], a[[4, 0, 0]], 0, 0)
    close(x[tlgpu.tensor(np.array([3, 1], np.int32))], a[[3, 1]], 0, 0)


@row('`x[:, [-1], :]` (one integer list inside a tuple)')
def _():
    a = f32(rng().standard_normal((2, 5, 3)))
    x = T(a, requires_grad=True)
    y = x[:, [-1], :]
    close(y, a[:, [-1], :], 0, 0)
    close(x[0, [1, 3]], a[0, [1, 3]], 0, 0)
    (y * 2.0).sum().backward()
    g = np.zeros_like(a)
    g[:, -1, :] = 2.0
    close(x.grad, g, 0, 0)
    raises(IndexError, "whole key", lambda: x[[0, 1], [0, 1]])


@row('`x[mask] = v`, `x[mask]`')
def _():
    r = rng()
    a = f32(r.standard_normal((4, 6)))
    v = f32(r.standard_normal((4, 1)))
    x = T(a)
    x[x < T(v)] = -float("inf")                           # nanoGPT's top-k cut
    ref = a.copy()
    ref[a < v] = -np.inf
    close(x, ref, 0, 0)
    rows = r.random(4) < 0.5
    y = T(a)
    y[rows] = 1.5
    ref = a.copy()
    ref[rows] = 1.5
    close(y, ref, 0, 0)
    close(T(a)[T(a) > 0], a[a > 0], 0, 0)
    close(T(a)[rows], a[rows], 0, 0)


@row('`data[i:i + n]` with a 0-d int tensor `i`')
def _():
    data = f32(rng().standard_normal(30))
    i = tlgpu.randint(0, 20, ())
    k = int(i.item())
    close(data[i:i + 4], data[k:k + 4], 0, 0)
    raises(TypeError, "int32", lambda: [0, 1][tlgpu.tensor(1.0)])


@row('`from torch.distributions.normal import Normal`, `.categorical import Categorical`, `.kl import kl_divergence`')
def _():
    from tlgpu.distributions.categorical import Categorical
    from tlgpu.distributions.kl import kl_divergence
    from tlgpu.distributions.normal import Normal
    r = rng()
    l1, l2 = f32(r.standard_normal((3, 4))), f32(r.standard_normal((3, 4)))
    p1, p2 = np.exp(log_softmax(l1, 1)), np.exp(log_softmax(l2, 1))
    close(kl_divergence(Categorical(logits=T(l1)), Categorical(logits=T(l2))),
          (p1 * (np.log(p1) - np.log(p2))).sum(1), 1e-5, 1e-6)
    assert Normal is D.Normal and Categorical is D.Categorical and kl_divergence is D.kl_divergence
