"""Issue 24's PyTorch names, part red: index_add_/index_add (deterministic scatter-add), prod (with its
zero-safe gradient), topk/sort/argsort (stable, named tuples, differentiable values) and optim.RAdam, each
against float64 numpy references on random inputs."""
import numpy as np
import pytest

import tlgpu


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def enqueued():
    return tlgpu.stream_stats()["enqueued"]


# ---- index_add_ ----

def index_add_ref(self, dim, idx, src, alpha=1.0):
    out = self.astype(np.float64)
    moved = np.moveaxis(out, dim, 0)                  # a view: np.add.at writes through it
    np.add.at(moved, idx, alpha * np.moveaxis(src.astype(np.float64), dim, 0))
    return out


@pytest.mark.parametrize("shape,dim,k", [((50,), 0, 400), ((6, 7, 5), 0, 20), ((6, 7, 5), 1, 30),
                                         ((6, 7, 5), 2, 9), ((6, 7, 5), -1, 1), ((33, 130), 1, 1025)])
@pytest.mark.parametrize("alpha", [1.0, -0.5])
def test_index_add_matches_numpy(rng, shape, dim, k, alpha):
    a = rand(rng, *shape)
    n = shape[dim]
    idx = rng.integers(-n, n, size=k).astype(np.int32)      # many duplicates, negative entries too
    sshape = list(shape)
    sshape[dim] = k
    src = rand(rng, *sshape)
    t = tlgpu.tensor(a)
    r = t.index_add_(dim, tlgpu.tensor(idx), tlgpu.tensor(src), alpha=alpha)
    assert r is t
    want = index_add_ref(a, dim, np.where(idx < 0, idx + n, idx), src, alpha)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-5, atol=1e-5)
    out = tlgpu.tensor(a).index_add(dim, idx, tlgpu.tensor(src), alpha)   # array-like index, positional alpha
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def test_index_add_c51_projection_is_deterministic_and_lazy(rng):
    """CleanRL's C51: proj_dist.view(-1).index_add_(0, idx.view(-1), vals.view(-1)), a sorted index with
    many duplicates; and a random one. Bit-identical run to run, and no host wait."""
    B, atoms = 64, 51
    b = np.clip(rng.uniform(-1, atoms, size=(B, atoms)), 0, atoms - 1)
    lo = np.floor(b).astype(np.int32)
    offset = (np.arange(B, dtype=np.int32) * atoms)[:, None]
    vals = rng.random((B, atoms)).astype(np.float32)
    rand_idx = rng.integers(0, B * atoms, size=B * atoms).astype(np.int32)
    for idx in [np.sort(lo + offset, axis=None), (lo + offset).reshape(-1), rand_idx]:
        want = index_add_ref(np.zeros(B * atoms, np.float32), 0, idx.reshape(-1), vals.reshape(-1))
        ti, tv = tlgpu.tensor(idx.reshape(B, atoms)), tlgpu.tensor(vals)
        results = []
        for _ in range(3):
            proj = tlgpu.zeros(B, atoms)
            tlgpu.synchronize()
            tlgpu.reset_stream_stats()
            with tlgpu.no_grad():
                proj.view(-1).index_add_(0, ti.view(-1), tv.view(-1))
            assert tlgpu.stream_stats()["waits"] == 0
            results.append(proj.numpy().reshape(-1))
        np.testing.assert_allclose(results[0], want, rtol=1e-5, atol=1e-6)
        assert all(np.array_equal(results[0], r) for r in results[1:])


def test_index_add_strided_self_and_aliased_source(rng):
    a = rand(rng, 5, 8)
    t = tlgpu.tensor(a)
    view = t.T                                       # (8, 5), not contiguous
    idx = np.array([0, 7, 7, 3], np.int32)
    src = rand(rng, 4, 5)
    view.index_add_(0, tlgpu.tensor(idx), tlgpu.tensor(src))
    np.testing.assert_allclose(t.numpy(), index_add_ref(a.T, 0, idx, src).T, rtol=1e-5, atol=1e-6)
    b = rand(rng, 6, 3)
    u = tlgpu.tensor(b)
    u.index_add_(0, tlgpu.tensor(np.array([5, 0, 1], np.int32)), u[1:4])   # source is part of self
    np.testing.assert_allclose(u.numpy(), index_add_ref(b, 0, np.array([5, 0, 1]), b[1:4].copy()), rtol=1e-6)


def test_index_add_autograd(rng):
    a, src = rand(rng, 4, 6), rand(rng, 4, 9)
    idx = rng.integers(0, 6, size=9).astype(np.int32)
    x = tlgpu.tensor(a, requires_grad=True)
    s = tlgpu.tensor(src, requires_grad=True)
    y = x * 2.0
    y.index_add_(1, tlgpu.tensor(idx), s, alpha=3.0)
    assert y.grad_fn is not None
    up = rand(rng, 4, 6)
    (y * tlgpu.tensor(up)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * up, rtol=1e-6)
    np.testing.assert_allclose(s.grad.numpy(), 3.0 * up[:, idx], rtol=1e-6)
    # out of place on a leaf
    x2 = tlgpu.tensor(a, requires_grad=True)
    s2 = tlgpu.tensor(src, requires_grad=True)
    out = x2.index_add(1, tlgpu.tensor(idx), s2)
    np.testing.assert_allclose(out.numpy(), index_add_ref(a, 1, idx, src), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x2.numpy(), a)
    (out * tlgpu.tensor(up)).sum().backward()
    np.testing.assert_allclose(x2.grad.numpy(), up, rtol=1e-6)
    np.testing.assert_allclose(s2.grad.numpy(), up[:, idx], rtol=1e-6)
    with pytest.raises(RuntimeError, match="leaf"):
        tlgpu.tensor(a, requires_grad=True).index_add_(1, tlgpu.tensor(idx), s2)


def test_index_add_errors(rng):
    t = tlgpu.zeros(4, 3)
    src = tlgpu.tensor(rand(rng, 2, 3))
    i2 = tlgpu.tensor(np.array([0, 1], np.int32))
    with pytest.raises(ValueError, match=r"index_add_.*\(2, 3\).*\(4, 3\)"):
        t.index_add_(1, i2, src)
    with pytest.raises(IndexError, match="index_add_: dim 2"):
        t.index_add_(2, i2, src)
    with pytest.raises(TypeError, match="int32"):
        t.index_add_(0, tlgpu.tensor(np.array([0.0, 1.0], np.float32)), src)
    with pytest.raises(TypeError, match="index_add_"):
        tlgpu.zeros(4, 3, dtype="int32").index_add_(0, i2, src)
    with pytest.raises(ValueError, match="1-D"):
        t.index_add_(0, tlgpu.tensor(np.zeros((1, 2), np.int32)), src)
    t.index_add_(0, tlgpu.tensor(np.array([0, 4], np.int32)), src)   # checked on the device
    with pytest.raises(IndexError, match="index_add_: index 4 is out of range"):
        t.numpy()
    with pytest.raises(IndexError, match="size 0"):
        tlgpu.zeros(0, 3).index_add_(0, i2, src)


def test_index_add_scalar_index_and_source():
    t = tlgpu.zeros(3)
    t.index_add_(0, tlgpu.tensor(np.int32(-1)), tlgpu.tensor(np.float32(1.5)))
    t.index_add_(0, [2], tlgpu.tensor(np.array([0.25], np.float32)), alpha=2.0)
    np.testing.assert_array_equal(t.numpy(), np.array([0, 0, 2.0], np.float32))


def test_index_add_zero_size_enqueues_nothing():
    t = tlgpu.zeros(4, 3)
    tlgpu.synchronize()
    n0 = enqueued()
    t.index_add_(0, tlgpu.tensor(np.zeros(0, np.int32)), tlgpu.zeros(0, 3))
    tlgpu.zeros(4, 0).index_add_(0, np.array([1, 2], np.int32), tlgpu.zeros(2, 0))
    assert enqueued() - n0 <= 1                       # at most the upload of the array-like index
    np.testing.assert_array_equal(t.numpy(), np.zeros((4, 3), np.float32))


# ---- prod ----

@pytest.mark.parametrize("shape,axis", [((7,), None), ((4, 5), 1), ((4, 5), 0), ((3, 4, 5), (0, 2)),
                                        ((3, 4, 5), -1), ((2, 3, 4), (1, 2)), ((65537,), None), ((5, 1025), 1)])
@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("blocked", ["1", "0"])       # the CPU layout and the GPU one (lane trees)
def test_prod_matches_numpy(rng, monkeypatch, shape, axis, keepdims, blocked):
    monkeypatch.setenv("TLGPU_REDUCE_BLOCKED", blocked)
    w = 0.3 / np.sqrt(np.prod(shape))                  # no underflow or overflow of the float32 product
    a = rng.uniform(1 - w, 1 + w, size=shape).astype(np.float32) * np.where(rng.random(shape) < 0.5, -1, 1)
    t = tlgpu.tensor(a)
    want = np.prod(a.astype(np.float64), axis=axis, keepdims=keepdims)
    got = t.prod(axis=axis, keepdims=keepdims)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-4 if a.size > 10000 else 1e-5)
    if isinstance(axis, int):
        np.testing.assert_array_equal(t.prod(dim=axis, keepdim=keepdims).numpy(), got.numpy())
        np.testing.assert_array_equal(tlgpu.prod(t, axis, keepdims=keepdims).numpy(), got.numpy())
    np.testing.assert_array_equal(t.prod(axis=axis, keepdims=keepdims).numpy(), got.numpy())   # deterministic


def test_prod_empty_and_zero_size():
    np.testing.assert_array_equal(tlgpu.zeros(3, 0).prod(1).numpy(), np.ones(3, np.float32))
    tlgpu.synchronize()
    n0 = enqueued()
    assert tlgpu.zeros(0, 4).prod(1).shape == (0,)
    assert enqueued() == n0
    with pytest.raises(TypeError, match="prod"):
        tlgpu.zeros(3, dtype="int32").prod()


def prod_grad_ref(a, axis):
    """d prod / d a_i as the product of the others, computed directly (no division)."""
    a = a.astype(np.float64)
    moved = np.moveaxis(a, axis, -1)
    g = np.empty_like(moved)
    for j in range(moved.shape[-1]):
        g[..., j] = np.prod(np.delete(moved, j, axis=-1), axis=-1)
    return np.moveaxis(g, -1, axis)


def test_prod_gradient_with_zeros(rng):
    a = rand(rng, 6, 5)
    a[1, 2] = 0.0                      # one zero in row 1
    a[2, 0] = a[2, 4] = 0.0            # two zeros in row 2
    a[3, :] = 0.0                      # all zeros in row 3
    up = rand(rng, 6)
    x = tlgpu.tensor(a, requires_grad=True)
    (x.prod(1) * tlgpu.tensor(up)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), prod_grad_ref(a, 1) * up[:, None], rtol=1e-5, atol=1e-6)
    x = tlgpu.tensor(a, requires_grad=True)
    y = x.prod(0, keepdims=True)
    up0 = rand(rng, 1, 5)
    (y * tlgpu.tensor(up0)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), prod_grad_ref(a, 0) * up0, rtol=1e-5, atol=1e-6)
    b = rng.uniform(0.5, 1.5, size=(3, 4)).astype(np.float32)
    x = tlgpu.tensor(b, requires_grad=True)
    x.prod().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.prod(b.astype(np.float64)) / b, rtol=1e-5)


# ---- topk / sort / argsort ----

def order_ref(a, axis, desc):
    """Stable order along axis: value (NaN largest), ties by index."""
    a = np.moveaxis(a.astype(np.float64), axis, -1)
    key = np.where(np.isnan(a), np.inf, a)
    nan = np.isnan(a)
    idx = np.empty(a.shape, np.int64)
    n = a.shape[-1]
    for pos in np.ndindex(*a.shape[:-1]):
        k, m = key[pos], nan[pos]
        primary = (-k, -m.astype(np.int8)) if desc else (k, m.astype(np.int8))
        idx[pos] = np.lexsort((np.arange(n), primary[0], primary[1]))
    return np.moveaxis(idx, -1, axis)


@pytest.mark.parametrize("shape,dim", [((10,), 0), ((4, 7), -1), ((4, 7), 0), ((3, 33, 5), 1), ((2, 1025), 1),
                                       ((300, 6), 1)])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_numpy(rng, shape, dim, largest):
    a = rng.integers(-4, 5, size=shape).astype(np.float32)   # many ties: indices must follow index order
    a += (rng.random(shape) < 0.5) * rand(rng, *shape)
    n = shape[dim]
    order = order_ref(a, dim, largest)
    for k in sorted({0, 1, min(3, n), n}):
        r = tlgpu.tensor(a).topk(k, dim=dim, largest=largest)
        assert isinstance(r, tuple) and r._fields == ("values", "indices")
        want_i = np.take(order, np.arange(k), axis=dim)
        assert r.indices.dtype == np.int32
        np.testing.assert_array_equal(r.indices.numpy(), want_i)
        np.testing.assert_array_equal(r.values.numpy(), np.take_along_axis(a, want_i, axis=dim))
    v, i = tlgpu.topk(tlgpu.tensor(a), 1, dim, largest, True)
    np.testing.assert_array_equal(i.numpy(), np.take(order, [0], axis=dim))


@pytest.mark.parametrize("n", [1, 7, 33, 1025, 5000])
def test_sort_and_argsort(rng, n):
    a = rand(rng, 3, n)
    a[:, ::3] = np.round(a[:, ::3])                  # ties
    if n > 4:
        a[0, 2] = a[1, 4] = np.nan
    t = tlgpu.tensor(a)
    for desc in [False, True]:
        order = order_ref(a, 1, desc)
        s = t.sort(dim=1, descending=desc)
        assert s._fields == ("values", "indices")
        np.testing.assert_array_equal(s.indices.numpy(), order)
        np.testing.assert_array_equal(s.values.numpy(), np.take_along_axis(a, order, axis=1))
        np.testing.assert_array_equal(t.argsort(descending=desc).numpy(), order)
        np.testing.assert_array_equal(tlgpu.argsort(t, 0, desc).numpy(), order_ref(a, 0, desc))
    if not np.isnan(a).any():
        np.testing.assert_array_equal(t.sort(0).values.numpy(), np.sort(a, axis=0))
        np.testing.assert_array_equal(t.argsort(0).numpy(), np.argsort(a, axis=0, kind="stable"))
    again = t.sort(dim=1, descending=True)            # bit-identical run to run
    np.testing.assert_array_equal(again.values.numpy(), t.sort(dim=1, descending=True).values.numpy())


def test_topk_sort_gradients(rng):
    a = rand(rng, 5, 8)
    up = rand(rng, 3, 8)
    x = tlgpu.tensor(a, requires_grad=True)
    v, i = x.topk(3, dim=0)
    (v * tlgpu.tensor(up)).sum().backward()
    want = np.zeros_like(a)
    np.put_along_axis(want, i.numpy(), up, axis=0)
    np.testing.assert_array_equal(x.grad.numpy(), want)
    x = tlgpu.tensor(a, requires_grad=True)
    s = x.sort(descending=True)
    up2 = rand(rng, 5, 8)
    (s.values * tlgpu.tensor(up2)).sum().backward()
    want = np.zeros_like(a)
    np.put_along_axis(want, s.indices.numpy(), up2, axis=1)
    np.testing.assert_array_equal(x.grad.numpy(), want)
    x = tlgpu.tensor(np.float32(2.5), requires_grad=True)   # 0-d
    v, i = x.topk(1)
    assert v.shape == () and i.shape == () and i.item() == 0
    (v * 3.0).backward()
    assert x.grad.item() == 3.0


def test_topk_errors_and_zero_size(rng):
    t = tlgpu.tensor(rand(rng, 3, 4))
    with pytest.raises(ValueError, match=r"topk: k=5 .*\(3, 4\)"):
        t.topk(5)
    with pytest.raises(ValueError, match="topk"):
        t.topk(-1)
    with pytest.raises(IndexError, match="topk: dim 2"):
        t.topk(1, dim=2)
    with pytest.raises(TypeError, match="sort"):
        tlgpu.zeros(3, dtype="int32").sort()
    tlgpu.synchronize()
    n0 = enqueued()
    r = t.topk(0)
    assert r.values.shape == (3, 0) and r.indices.shape == (3, 0)
    assert tlgpu.zeros(0, 5).sort(1).values.shape == (0, 5)
    assert tlgpu.zeros(4, 0).argsort().shape == (4, 0)
    assert enqueued() == n0


# ---- RAdam ----

class RAdamRef:
    """torch.optim.RAdam's documented algorithm in float64."""

    def __init__(self, p, lr, betas, eps, wd, decoupled):
        self.p, self.lr, self.b1, self.b2, self.eps, self.wd, self.dec = p.astype(np.float64), lr, *betas, eps, wd, \
            decoupled
        self.m = np.zeros_like(self.p)
        self.v = np.zeros_like(self.p)
        self.t = 0
        self.rhos = []

    def step(self, g):
        self.t += 1
        t, b1, b2 = self.t, self.b1, self.b2
        g = g.astype(np.float64)
        if self.wd:
            if self.dec:
                self.p = self.p * (1 - self.lr * self.wd)
            else:
                g = g + self.wd * self.p
        self.m = b1 * self.m + (1 - b1) * g
        self.v = b2 * self.v + (1 - b2) * g * g
        mhat = self.m / (1 - b1 ** t)
        rho_inf = 2 / (1 - b2) - 1
        rho = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
        self.rhos.append(rho)
        if rho > 5:
            lt = np.sqrt(1 - b2 ** t) / (np.sqrt(self.v) + self.eps)
            rt = np.sqrt((rho - 4) * (rho - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho))
            self.p = self.p - self.lr * mhat * rt * lt
        else:
            self.p = self.p - self.lr * mhat


@pytest.mark.parametrize("wd,decoupled", [(0.0, False), (0.1, False), (0.1, True)])
def test_radam_matches_reference(rng, wd, decoupled):
    p0 = rand(rng, 7, 33)
    p = tlgpu.tensor(p0, requires_grad=True)
    opt = tlgpu.optim.RAdam([p], lr=1e-2, betas=(0.9, 0.99), eps=1e-8, weight_decay=wd,
                            decoupled_weight_decay=decoupled)
    ref = RAdamRef(p0, 1e-2, (0.9, 0.99), 1e-8, wd, decoupled)
    for _ in range(20):
        g = rand(rng, 7, 33)
        p.grad = tlgpu.tensor(g)
        opt.step()
        ref.step(g)
    assert min(ref.rhos) <= 5 < max(ref.rhos)        # both branches ran
    np.testing.assert_allclose(p.numpy(), ref.p, rtol=1e-5, atol=1e-6)
    st = opt.state_dict()
    assert set(st["state"][0]) == {"step", "exp_avg", "exp_avg_sq"} and st["state"][0]["step"] == 20
    np.testing.assert_allclose(st["state"][0]["exp_avg"], ref.m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(st["state"][0]["exp_avg_sq"], ref.v, rtol=1e-5, atol=1e-7)
    grp = st["param_groups"][0]
    assert grp["betas"] == (0.9, 0.99) and grp["decoupled_weight_decay"] == decoupled and grp["params"] == [0]
    # a resumed optimizer continues exactly as the uninterrupted one
    q = tlgpu.tensor(p.numpy(), requires_grad=True)
    opt2 = tlgpu.optim.RAdam([q], lr=0.5)
    opt2.load_state_dict(st)
    g = rand(rng, 7, 33)
    p.grad, q.grad = tlgpu.tensor(g), tlgpu.tensor(g)
    opt.step()
    opt2.step()
    np.testing.assert_array_equal(q.numpy(), p.numpy())


def test_radam_default_betas_one_kernel_per_param(rng):
    ps = [tlgpu.tensor(rand(rng, 5), requires_grad=True), tlgpu.tensor(rand(rng, 3, 4), requires_grad=True)]
    refs = [RAdamRef(p.numpy(), 1e-3, (0.9, 0.999), 1e-8, 0.0, False) for p in ps]
    opt = tlgpu.optim.RAdam(ps)
    for step in range(8):
        gs = [rand(rng, *p.shape) for p in ps]
        for p, g in zip(ps, gs):
            p.grad = tlgpu.tensor(g)
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        opt.step()
        stats = tlgpu.stream_stats()
        assert stats["waits"] == 0
        if step > 0:                                   # (the first step also creates the state)
            # one fused kernel per parameter; on CPU devices one for both (the chunked kernels, tlgpu/optim)
            assert stats["enqueued"] == (1 if tlgpu.optim._launch_mode() == "chunked" else len(ps))
        for r, g in zip(refs, gs):
            r.step(g)
    for p, r in zip(ps, refs):
        np.testing.assert_allclose(p.numpy(), r.p, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="RAdam"):
        tlgpu.optim.RAdam(ps, lr=-1)
