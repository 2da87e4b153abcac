"""tlgpu/_torch_extra.py: torch's tensor-level names composed from C ops (eye, logspace, randint_like, bernoulli,
Generator, hstack/vstack, broadcast_to/broadcast_tensors, unflatten, mm, kron, cdist, clamp_min/max, the logical
ops, lerp_/addcmul_/addcdiv_, bool, nelement, is_tensor, numel, share_memory_, get/set_default_dtype, compile)
against numpy on random inputs, gradients against float64 finite differences, and the error cases."""
import math

import numpy as np
import pytest

import tlgpu


def f32(a):
    return np.asarray(a, dtype=np.float32)


def T(a, **kw):
    return tlgpu.tensor(f32(a), **kw)


def close(t, want, rtol=1e-5, atol=1e-6):
    got = t.numpy() if isinstance(t, tlgpu.Tensor) else np.asarray(t)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


def numgrad(fn, a, eps=1e-6):
    """d sum(fn(a)) / d a by central differences in float64."""
    a = np.asarray(a, dtype=np.float64)
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        hi, lo = a.copy(), a.copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (np.sum(fn(hi)) - np.sum(fn(lo))) / (2 * eps)
    return g


@pytest.fixture
def r():
    return np.random.default_rng(5)


# ---- creation ----

@pytest.mark.parametrize("n,m", [(3, None), (2, 5), (4, 1), (0, 3)])
def test_eye(n, m):
    e = tlgpu.eye(n, m)
    assert e.dtype == np.float32
    close(e, np.eye(n, m), 0, 0)
    assert tlgpu.eye(n, m, dtype=tlgpu.long).dtype == np.int32
    close(tlgpu.eye(n, m, dtype=tlgpu.long), np.eye(n, m), 0, 0)
    assert tlgpu.eye(3, requires_grad=True).requires_grad
    for bad, exc in ((-1, ValueError), (2.0, TypeError)):
        with pytest.raises(exc, match="eye"):
            tlgpu.eye(bad)
    with pytest.raises(TypeError, match="eye"):
        tlgpu.eye(2, dtype=tlgpu.float64)


def test_logspace(r):
    for _ in range(5):
        a, b = r.uniform(-3, 3, 2)
        n, base = int(r.integers(0, 9)), float(r.choice([10.0, 2.0, math.e, 3.5]))
        close(tlgpu.logspace(a, b, n, base=base), np.logspace(a, b, n, base=base).astype(np.float32), 0, 0)
    assert tlgpu.logspace(0, 2, 3, dtype=tlgpu.int32).tolist() == [1, 10, 100]
    assert tlgpu.logspace(0, 1, 3, dtype=tlgpu.long).tolist() == [1, 3, 10]          # truncated, as torch
    close(tlgpu.logspace(T(1.0), 2, 2), [10.0, 100.0])
    with pytest.raises(ValueError, match="logspace"):
        tlgpu.logspace(0, 1, -2)
    with pytest.raises(TypeError, match="logspace: start"):
        tlgpu.logspace("0", 1, 3)


def test_randint_like(r):
    x = T(r.standard_normal((40, 50)))
    tlgpu.manual_seed(2)
    a = tlgpu.randint_like(x, 7)
    assert a.dtype == np.float32 and a.shape == (40, 50)
    v = a.numpy()
    assert set(np.unique(v)) == set(np.arange(7.0))
    b = tlgpu.randint_like(x, -3, 2, dtype=tlgpu.long)
    assert b.dtype == np.int32 and set(np.unique(b.numpy())) == {-3, -2, -1, 0, 1}
    tlgpu.manual_seed(2)
    assert (tlgpu.randint_like(x, 7).numpy() == v).all()
    with pytest.raises(ValueError, match="randint_like: expected low < high"):
        tlgpu.randint_like(x, 3, 3)
    with pytest.raises(TypeError, match="randint_like: high"):
        tlgpu.randint_like(x, 0, 2.5)
    with pytest.raises(TypeError, match="randint_like: input"):
        tlgpu.randint_like(np.zeros(3), 2)


def test_bernoulli_frequencies_and_seed(r):
    p = r.uniform(0, 1, (4, 3))
    P = T(np.broadcast_to(p, (4000, 4, 3)))
    tlgpu.manual_seed(9)
    s = tlgpu.bernoulli(P)
    v = s.numpy()
    assert s.dtype == np.float32 and set(np.unique(v)) <= {0.0, 1.0}
    np.testing.assert_allclose(v.mean(0), p, atol=0.035)
    tlgpu.manual_seed(9)
    assert (P.bernoulli().numpy() == v).all()
    assert (P.bernoulli().numpy() != v).any()                       # the stream moved on
    assert abs(tlgpu.bernoulli(P, 0.25).numpy().mean() - 0.25) < 0.01
    assert tlgpu.bernoulli(P.half()).dtype == np.float16
    close(tlgpu.bernoulli(T([-1.0, 0.0, 1.0, 2.0])), [0, 0, 1, 1], 0, 0)
    z = tlgpu.zeros(20000)
    assert z.bernoulli_(0.7) is z and abs(z.numpy().mean() - 0.7) < 0.02
    z.bernoulli_(T(np.r_[np.zeros(10000), np.ones(10000)]))
    close(z, np.r_[np.zeros(10000), np.ones(10000)], 0, 0)
    with pytest.raises(TypeError, match="bernoulli: the probabilities"):
        tlgpu.bernoulli(tlgpu.arange(3))
    with pytest.raises(TypeError, match="bernoulli: p"):
        tlgpu.bernoulli(P, "0.5")
    with pytest.raises(TypeError, match="bernoulli: generator"):
        tlgpu.bernoulli(P, generator=3)


def test_generator_draws_its_own_stream():
    g = tlgpu.Generator()
    assert g.initial_seed() == 67280421310721
    assert g.manual_seed(5) is g and g.initial_seed() == 5
    tlgpu.manual_seed(5)
    want1, want2 = tlgpu.rand(100).numpy() < 0.5, tlgpu.rand(100).numpy() < 0.5
    tlgpu.manual_seed(77)
    state = tlgpu.get_rng_state()
    p = tlgpu.full((100,), 0.5)
    close(tlgpu.bernoulli(p, generator=g), want1, 0, 0)             # the same draws as manual_seed(5)
    close(tlgpu.bernoulli(p, generator=g), want2, 0, 0)             # and its stream advanced
    assert tlgpu.get_rng_state() == state                            # the global stream did not move
    g2 = tlgpu.Generator().manual_seed(5)
    a = tlgpu.randint_like(p, 10, generator=g2).numpy()
    assert (tlgpu.randint_like(p, 10, generator=tlgpu.Generator().manual_seed(5)).numpy() == a).all()
    s = g.seed()
    assert g.initial_seed() == s and g.get_state() == (s, 0)
    assert g.set_state((3, 8)).get_state() == (3, 8)
    with pytest.raises(TypeError, match="Generator.manual_seed"):
        g.manual_seed(1.5)
    with pytest.raises(ValueError):
        tlgpu.Generator("mps")


# ---- shape ----

def test_hstack_vstack(r):
    a, b = r.standard_normal((3, 2)), r.standard_normal((3, 4))
    close(tlgpu.hstack([T(a), T(b)]), np.hstack([f32(a), f32(b)]))
    v1, v2 = r.standard_normal(3), r.standard_normal(5)
    close(tlgpu.hstack((T(v1), T(v2), T(2.0))), np.hstack([f32(v1), f32(v2), [2.0]]))
    c = r.standard_normal((2, 3))
    close(tlgpu.vstack([T(v1), T(c), T(a.T)]), np.vstack([f32(v1), f32(c), f32(a.T)]))
    mixed = tlgpu.hstack([tlgpu.arange(3), T(v1)])                    # int32 with float32: float32
    assert mixed.dtype == np.float32
    close(mixed, np.hstack([np.arange(3), f32(v1)]))
    assert tlgpu.vstack([T(v1).half(), tlgpu.arange(3)]).dtype == np.float16
    x = T(a, requires_grad=True)
    (tlgpu.vstack([x, x * 2]) * T(r.standard_normal((6, 2)))).sum().backward()
    assert x.grad is not None and x.grad.shape == (3, 2)
    x.grad = None
    w = r.standard_normal((3, 6))
    (tlgpu.hstack([x, T(b)]) * T(w[:, :6])).sum().backward()
    close(x.grad, w[:, :2])
    with pytest.raises(ValueError, match="hstack: expected a non-empty"):
        tlgpu.hstack([])
    with pytest.raises(TypeError, match="vstack: expected a list"):
        tlgpu.vstack(T(a))
    with pytest.raises(TypeError, match="hstack: each element"):
        tlgpu.hstack([T(a), a])


def test_broadcast_to_and_broadcast_tensors(r):
    a = r.standard_normal((3, 1))
    x = T(a, requires_grad=True)
    y = tlgpu.broadcast_to(x, (2, 3, 4))
    close(y, np.broadcast_to(f32(a), (2, 3, 4)))
    close(x.broadcast_to((-1, 5)), np.broadcast_to(f32(a), (3, 5)))
    y.sum().backward()
    close(x.grad, np.full((3, 1), 8.0))
    close(T(1.5).broadcast_to(3), [1.5] * 3)
    for bad in ((2, 4), (3,), (3, -2)):
        with pytest.raises(ValueError, match="broadcast_to"):
            x.broadcast_to(bad)
    b, c = r.standard_normal((4, 1, 2)), r.standard_normal((5, 1))
    got = tlgpu.broadcast_tensors(T(b), T(c), T(1.0))
    for g, w in zip(got, np.broadcast_arrays(f32(b), f32(c), f32(1.0))):
        close(g, w)
    assert len(tlgpu.broadcast_tensors([T(b), T(c)])) == 2
    with pytest.raises(ValueError, match=r"broadcast_tensors: shapes \(4, 1, 2\), \(3,\)"):
        tlgpu.broadcast_tensors(T(b), T(np.zeros(3)))


def test_unflatten(r):
    a = r.standard_normal((2, 12, 3))
    x = T(a, requires_grad=True)
    close(x.unflatten(1, (3, 4)), f32(a).reshape(2, 3, 4, 3))
    close(tlgpu.unflatten(x, -1, (1, -1)), f32(a).reshape(2, 12, 1, 3))
    y = x.unflatten(1, [2, -1, 2])
    assert y.shape == (2, 2, 3, 2, 3)
    (y * T(np.arange(y.numel()).reshape(y.shape))).sum().backward()
    close(x.grad, np.arange(72.0).reshape(2, 12, 3))
    for bad in ((5, 3), (-1, -1), (0, -1), (2, -2)):
        with pytest.raises(ValueError, match="unflatten"):
            x.unflatten(1, bad)
    with pytest.raises(TypeError, match="unflatten"):
        x.unflatten(1, (2.0, 6))


# ---- math ----

def test_mm(r):
    a, b = r.standard_normal((3, 4)), r.standard_normal((4, 5))
    x, y = T(a, requires_grad=True), T(b, requires_grad=True)
    close(tlgpu.mm(x, y), f32(a) @ f32(b), 1e-5, 1e-5)
    x.mm(y).sum().backward()
    close(x.grad, np.ones((3, 5)) @ b.T, 1e-5, 1e-5)
    close(y.grad, a.T @ np.ones((3, 5)), 1e-5, 1e-5)
    for p, q in (((2, 3, 4), (4, 5)), ((3,), (3, 1)), ((3, 4), (5, 2))):
        with pytest.raises(ValueError, match="mm: expected"):
            tlgpu.mm(tlgpu.zeros(p), tlgpu.zeros(q))
    with pytest.raises(TypeError, match="mm: mat2"):
        tlgpu.mm(x, b)


@pytest.mark.parametrize("sa,sb", [((2, 3), (4, 5)), ((3,), (2,)), ((2, 1, 3), (4, 2)), ((2,), (3, 2))])
def test_kron(r, sa, sb):
    a, b = r.standard_normal(sa), r.standard_normal(sb)
    x, y = T(a, requires_grad=True), T(b, requires_grad=True)
    out = tlgpu.kron(x, y)
    close(out, np.kron(f32(a), f32(b)), 1e-6, 1e-6)
    w = r.standard_normal(out.shape)
    (out * T(w)).sum().backward()
    close(x.grad, numgrad(lambda v: np.kron(v, b) * w, a), 1e-4, 1e-5)
    close(y.grad, numgrad(lambda v: np.kron(a, v) * w, b), 1e-4, 1e-5)
    ia, ib = r.integers(-5, 5, sa).astype(np.int32), r.integers(-5, 5, sb).astype(np.int32)
    k = tlgpu.tensor(ia).kron(tlgpu.tensor(ib))
    assert k.dtype == np.int32 and (k.numpy() == np.kron(ia, ib)).all()


def _cdist64(a, b, p):
    d = np.abs(a[..., :, None, :] - b[..., None, :, :])
    if p == 0:
        return (d != 0).sum(-1).astype(np.float64)
    if p == math.inf:
        return d.max(-1)
    return (d ** p).sum(-1) ** (1.0 / p)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, math.inf, 0])
@pytest.mark.parametrize("shapes", [((4, 3), (5, 3)), ((2, 3, 2), (1, 4, 2))])
def test_cdist_values_and_gradients(r, p, shapes):
    a, b = r.standard_normal(shapes[0]), r.standard_normal(shapes[1])
    x, y = T(a, requires_grad=True), T(b, requires_grad=True)
    out = tlgpu.cdist(x, y, p=p)
    close(out, _cdist64(a, b, p), 1e-5, 1e-5)
    if p == 0:
        return
    w = r.standard_normal(out.shape)
    (out * T(w)).sum().backward()
    close(x.grad, numgrad(lambda v: _cdist64(v, b, p) * w, a), 2e-3, 2e-4)
    close(y.grad, numgrad(lambda v: _cdist64(a, v, p) * w, b), 2e-3, 2e-4)


def test_cdist_matmul_path_and_zero_distance(r):
    a, b = r.standard_normal((30, 4)), r.standard_normal((7, 4))
    x = T(a, requires_grad=True)
    out = tlgpu.cdist(x, T(b))                                          # P > 25: torch's matmul form
    close(out, _cdist64(a, b, 2), 1e-4, 1e-4)
    close(tlgpu.cdist(T(a[:5]), T(b), compute_mode="use_mm_for_euclid_dist"), _cdist64(a[:5], b, 2), 1e-4, 1e-4)
    w = r.standard_normal(out.shape)
    (out * T(w)).sum().backward()
    close(x.grad, numgrad(lambda v: _cdist64(v, b, 2) * w, a), 1e-3, 1e-3)
    for mode in ("donot_use_mm_for_euclid_dist", "use_mm_for_euclid_dist"):
        for p in (2.0, 3.0):
            z = T(a[:3], requires_grad=True)
            d = tlgpu.cdist(z, z.detach(), p=p, compute_mode=mode)        # zero on the diagonal
            d.sum().backward()
            assert np.isfinite(z.grad.numpy()).all()
            close(d.diagonal(), np.zeros(3), 0, 3e-3)
    assert tlgpu.cdist(T(a).half(), T(b).half()).dtype == np.float16
    for p in (0.5, 1.0, 3.0):                                           # a zero coordinate difference: torch's 0
        z = T([[0.0, 1.0]], requires_grad=True)
        tlgpu.cdist(z, T([[0.0, 2.0]]), p=p).sum().backward()
        close(z.grad, [[0.0, -1.0]])
    with pytest.raises(ValueError, match="cdist: expected"):
        tlgpu.cdist(T(a), T(b[:, :3]))
    with pytest.raises(ValueError, match="cdist: p"):
        tlgpu.cdist(T(a), T(b), p=-1)
    with pytest.raises(ValueError, match="cdist: compute_mode"):
        tlgpu.cdist(T(a), T(b), compute_mode="fast")
    with pytest.raises(TypeError, match="cdist: expected floating"):
        tlgpu.cdist(tlgpu.tensor(np.zeros((2, 2), np.int32)), T(b[:, :2]))


def test_clamp_min_max(r):
    a = r.standard_normal((5, 6))
    lo, hi = r.standard_normal(6)[None], 0.3
    x = T(a, requires_grad=True)
    close(tlgpu.clamp_min(x, T(lo)), np.maximum(f32(a), f32(lo)))
    close(x.clamp_max(hi), np.minimum(f32(a), f32(hi)))
    x.clamp_min(-0.2).sum().backward()
    close(x.grad, (a > -0.2).astype(np.float32))
    with pytest.raises(TypeError, match="clamp_max"):
        tlgpu.clamp_max(a, 1.0)


def test_logical_ops(r):
    a = r.integers(-2, 3, (4, 5)).astype(np.float32)
    b = r.integers(0, 2, (5,)).astype(np.float32)
    a[0, 0] = np.nan                                                   # NaN is non-zero: true
    ia = r.integers(-2, 3, (4, 5)).astype(np.int32)
    x, y = T(a), T(b)
    for name, fn in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
                     ("logical_xor", np.logical_xor)):
        got = getattr(tlgpu, name)(x, y)
        assert got.dtype == np.float32
        close(got, fn(a, b).astype(np.float32), 0, 0)
        close(getattr(x, name)(b), fn(a, b).astype(np.float32), 0, 0)      # numpy other
        close(getattr(tlgpu.tensor(ia), name)(y), fn(ia, b).astype(np.float32), 0, 0)        # int32 self
    close(tlgpu.logical_not(x), np.logical_not(a).astype(np.float32), 0, 0)
    close(x.logical_not(), np.logical_not(a).astype(np.float32), 0, 0)
    with pytest.raises(TypeError, match="logical_and"):
        tlgpu.logical_and(a, y)
    with pytest.raises(TypeError, match="logical_or"):
        x.logical_or("x")


# ---- in place ----

def test_lerp_polyak_update(r):
    a, b = r.standard_normal((3, 4)), r.standard_normal((3, 4))
    for w in (0.005, 0.3, 0.7, 1.0):
        t = T(a)
        src = T(b, requires_grad=True)
        assert t.data.lerp_(src.data, w) is not None
        close(t, f32(a) + w * (f32(b) - f32(a)), 1e-5, 1e-6)
    t = T(a)
    t.lerp_(T(b), 1.0)
    close(t, f32(b), 0, 0)                                              # weight 1: end exactly
    wt = r.uniform(0, 1, (4,))
    t = T(a)
    assert t.lerp_(T(b), T(wt)) is t
    close(t, a + wt * (b - a), 1e-5, 1e-6)
    h = T(a).half()
    h.lerp_(T(b).half(), 0.5)
    assert h.dtype == np.float16
    close(h.float(), ((f32(a).astype(np.float16) + f32(b).astype(np.float16)) / 2), 2e-3, 2e-3)


def test_inplace_gradients(r):
    a, b, c, d = (r.standard_normal((2, 3)) for _ in range(4))
    x, e = T(a, requires_grad=True), T(b, requires_grad=True)
    y = x * 2
    y.lerp_(e, 0.3)
    close(y, 2 * a + 0.3 * (b - 2 * a), 1e-5, 1e-6)
    y.sum().backward()
    close(x.grad, np.full((2, 3), 1.4), 1e-6)
    close(e.grad, np.full((2, 3), 0.3), 1e-6)
    x.grad = None
    t1, t2 = T(c, requires_grad=True), T(d, requires_grad=True)
    y = x * 1.0
    y.addcmul_(t1, t2, value=0.5)
    close(y, a + 0.5 * c * d, 1e-5, 1e-6)
    y.sum().backward()
    close(x.grad, np.ones((2, 3)))
    close(t1.grad, 0.5 * d, 1e-6)
    close(t2.grad, 0.5 * c, 1e-6)
    t1.grad = t2.grad = None
    y = x * 1.0
    y.addcdiv_(t1, t2, value=-2)
    close(y, a - 2 * c / d, 1e-4, 1e-5)
    y.sum().backward()
    close(t1.grad, -2 / d, 1e-5)
    close(t2.grad, 2 * c / d ** 2, 1e-4)


def test_inplace_errors(r):
    x = T(r.standard_normal((2, 3)))
    with pytest.raises(ValueError, match=r"lerp_: operands of shapes \[\(4, 2, 3\)"):
        x.lerp_(tlgpu.zeros(4, 2, 3), 0.5)
    with pytest.raises(ValueError, match="addcmul_"):
        x.addcmul_(tlgpu.ones(3, 1), tlgpu.ones(3))
    with pytest.raises(TypeError, match="addcdiv_: the result is float32"):
        tlgpu.arange(3).addcdiv_(tlgpu.ones(3), tlgpu.ones(3))
    with pytest.raises(TypeError, match="lerp_: end"):
        x.lerp_(1.0, 0.5)
    with pytest.raises(TypeError, match="lerp_: weight"):
        x.lerp_(x, "0.5")
    leaf = tlgpu.zeros(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        leaf.lerp_(tlgpu.ones(3), 0.5)
    with tlgpu.no_grad():
        leaf.lerp_(tlgpu.ones(3), 0.25)
    close(leaf.detach(), [0.25] * 3)
    i = tlgpu.tensor(np.array([1, 2, 3], np.int32))
    i.addcmul_(i, i, value=2)
    assert i.dtype == np.int32 and i.tolist() == [3, 10, 21]


# ---- sugar ----

def test_bool_nelement_share_memory(r):
    a = r.integers(-1, 2, (3, 4)).astype(np.float32)
    a[1, 1] = np.nan
    x = T(a)
    m = x.bool()
    assert m.dtype == np.float32
    close(m, (a != 0).astype(np.float32), 0, 0)
    close(tlgpu.tensor(np.nan_to_num(a).astype(np.int32)).bool(),
          (np.nan_to_num(a) != 0).astype(np.float32), 0, 0)
    assert x.nelement() == 12 and tlgpu.numel(x) == 12 and tlgpu.zeros(0, 3).nelement() == 0
    assert x.share_memory_() is x
    assert tlgpu.is_tensor(x) and not tlgpu.is_tensor(a) and not tlgpu.is_tensor(3)
    with pytest.raises(TypeError, match="numel"):
        tlgpu.numel(a)


def test_default_dtype():
    assert tlgpu.get_default_dtype() == tlgpu.float32
    assert tlgpu.set_default_dtype(tlgpu.float32) is None
    tlgpu.set_default_dtype(np.float32)
    for bad in (tlgpu.float64, tlgpu.float16, tlgpu.long, tlgpu.bool):
        with pytest.raises(TypeError, match="set_default_dtype"):
            tlgpu.set_default_dtype(bad)
    with pytest.raises(TypeError, match="float64"):
        tlgpu.set_default_dtype(tlgpu.double)
    with pytest.raises(TypeError, match="set_default_dtype"):
        tlgpu.set_default_dtype("not a dtype")
    assert tlgpu.get_default_dtype() == tlgpu.float32


def test_compile_returns_the_model():
    model = tlgpu.nn.Linear(3, 2)
    assert tlgpu.compile(model) is model
    assert tlgpu.compile(model, mode="max-autotune", fullgraph=True, dynamic=False) is model

    @tlgpu.compile
    def f(x):
        return x * 2

    @tlgpu.compile(backend="inductor")
    def g(x):
        return x + 1
    assert f(3) == 6 and g(3) == 4
    with pytest.raises(TypeError, match="compile: unexpected keyword"):
        tlgpu.compile(model, speed=3)
    with pytest.raises(TypeError, match="compile: expected a callable"):
        tlgpu.compile(3)


def test_names_are_installed():
    for name in ("eye", "logspace", "randint_like", "bernoulli", "hstack", "vstack", "mm", "broadcast_to",
                 "broadcast_tensors", "logical_and", "logical_or", "logical_not", "logical_xor", "is_tensor",
                 "numel", "clamp_min", "clamp_max", "unflatten", "kron", "cdist", "get_default_dtype",
                 "set_default_dtype", "compile", "Generator"):
        assert callable(getattr(tlgpu, name)), name
    for name in ("bool", "nelement", "lerp_", "addcmul_", "addcdiv_", "share_memory_", "bernoulli", "bernoulli_",
                 "mm", "kron", "unflatten", "broadcast_to", "clamp_min", "logical_not"):
        assert callable(getattr(tlgpu.Tensor, name)), name


def test_star_import_keeps_the_builtins():
    ns = {}
    exec("from tlgpu import *", ns)
    for name in ("compile", "float", "int", "bool", "any", "all"):
        assert name not in ns, name
    assert ns["eye"] is tlgpu.eye and ns["hstack"] is tlgpu.hstack


# ---- where: integer dtypes kept ----

def test_where_keeps_integer_dtypes_exactly():
    r = np.random.default_rng(11)
    cond = r.standard_normal((5, 7)).astype(np.float32)
    cond[0, :3] = [np.nan, -0.0, 0.0]                     # NaN is nonzero; -0.0 is zero
    c = tlgpu.tensor(np.where(r.random((5, 7)) < 0.5, cond, 0.0).astype(np.float32))
    sel = c.numpy() != 0
    a = r.integers(-2**31, 2**31, (5, 7)).astype(np.int32)
    b = r.integers(-2**31, 2**31, (1, 7)).astype(np.int32)  # broadcast
    w = tlgpu.where(c, tlgpu.tensor(a), tlgpu.tensor(b))
    assert w.dtype == np.int32 and (w.numpy() == np.where(sel, a, b)).all()
    w = tlgpu.where(c, 2**31 - 1, -2**31)                  # two Python ints: int32
    assert w.dtype == np.int32 and (w.numpy() == np.where(sel, 2**31 - 1, -2**31)).all()
    u = r.integers(0, 256, (5, 7)).astype(np.uint8)
    w = tlgpu.where(c, tlgpu.tensor(u), 255)               # uint8 with a Python int: uint8
    assert w.dtype == np.uint8 and (w.numpy() == np.where(sel, u, 255)).all()
    w = tlgpu.where(c, tlgpu.tensor(u), tlgpu.tensor(a))   # uint8 with int32: int32
    assert w.dtype == np.int32 and (w.numpy() == np.where(sel, u.astype(np.int32), a)).all()
    w = tlgpu.tensor(a).where(sel, 3)                     # the method; a numpy bool condition
    assert w.dtype == np.int32 and (w.numpy() == np.where(sel, a, 3)).all()
    f = r.standard_normal((5, 7)).astype(np.float32)       # a floating operand: float32, the C kernel's
    w = tlgpu.where(c, tlgpu.tensor(a), tlgpu.tensor(f))
    assert w.dtype == np.float32
    np.testing.assert_array_equal(w.numpy(), np.where(sel, a.astype(np.float32), f))
    assert tlgpu.where(c, tlgpu.tensor(a), 0.5).dtype == np.float32


def test_where_one_argument_and_errors():
    c = tlgpu.tensor(np.array([[0.0, 2.0], [-1.0, 0.0]], np.float32))
    rows, cols = tlgpu.where(c)
    assert rows.tolist() == [0, 1] and cols.tolist() == [1, 0]
    with pytest.raises(TypeError, match="where"):
        tlgpu.where(c, 1)
    with pytest.raises(TypeError, match="where"):
        tlgpu.where([1, 0])
    with pytest.raises(OverflowError):
        tlgpu.where(c, tlgpu.tensor(np.array([1, 2], np.int32)), 2**40)
