"""Checks for docs/porting.md's rows (see porting_checks.py): torch names added in the fourteenth session (tensor2)."""
import math

import numpy as np

import tlgpu
from porting_checks import T, close, f32, raises, rng, row  # noqa: F401


def I(a):
    return tlgpu.tensor(np.asarray(a, dtype=np.int32))


# ---- Tensors and devices ----

@row('`torch.eye(n, m)`, `torch.logspace(start, end, steps, base)`, `torch.randint_like(x, low, high)`')
def _():
    r = rng()
    n, m = (int(v) for v in r.integers(1, 6, 2))
    close(tlgpu.eye(n, m), np.eye(n, m), 0, 0)
    assert tlgpu.eye(n).dtype == np.float32 and tlgpu.eye(n, dtype=tlgpu.long).dtype == np.int32
    a, b = r.uniform(-2, 2, 2)
    close(tlgpu.logspace(a, b, 7, base=2.0), f32(np.logspace(a, b, 7, base=2.0)), 0, 0)
    assert tlgpu.logspace(0, 3, 4, dtype=tlgpu.int32).tolist() == [1, 10, 100, 1000]
    x = T(r.standard_normal((50, 40)))
    v = tlgpu.randint_like(x, -2, 3).numpy()
    assert v.dtype == np.float32 and set(np.unique(v)) == {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert tlgpu.randint_like(I([1, 2]), 4).dtype == np.int32
    raises(ValueError, "eye", lambda: tlgpu.eye(-1))


@row('`torch.bernoulli(p)`, `p.bernoulli()`, `x.bernoulli_(p)`, `torch.Generator().manual_seed(s)`, `generator=`')
def _():
    p = rng().uniform(0, 1, 5)
    P = T(np.broadcast_to(p, (5000, 5)))
    s = tlgpu.bernoulli(P).numpy()
    assert set(np.unique(s)) <= {0.0, 1.0}
    np.testing.assert_allclose(s.mean(0), p, atol=0.03)
    close(T([-0.5, 1.5]).bernoulli(), [0, 1], 0, 0)
    z = tlgpu.zeros(10000)
    assert abs(z.bernoulli_(0.3).numpy().mean() - 0.3) < 0.02
    tlgpu.manual_seed(6)
    want = tlgpu.bernoulli(P).numpy()
    state = tlgpu.get_rng_state()
    g = tlgpu.Generator().manual_seed(6)
    close(tlgpu.bernoulli(P, generator=g), want, 0, 0)
    assert tlgpu.get_rng_state() == state and g.initial_seed() == 6


@row('`torch.hstack(ts)`, `torch.vstack(ts)`, `torch.broadcast_to(x, shape)`, `torch.broadcast_tensors(*ts)`, '
     '`x.unflatten(dim, sizes)`')
def _():
    r = rng()
    a, b, v = r.standard_normal((3, 2)), r.standard_normal((3, 4)), r.standard_normal(2)
    close(tlgpu.hstack([T(a), T(b)]), np.hstack([f32(a), f32(b)]))
    close(tlgpu.vstack([T(a), T(v)]), np.vstack([f32(a), f32(v)]))
    assert tlgpu.hstack([I([1]), T(v)]).dtype == np.float32
    assert tlgpu.vstack([T(v).half(), T(v).bfloat16()]).dtype == np.float32
    x = T(v, requires_grad=True)
    y = tlgpu.broadcast_to(x, (3, -1))
    close(y, np.broadcast_to(f32(v), (3, 2)))
    y.sum().backward()
    close(x.grad, [3.0, 3.0])
    for g, w in zip(tlgpu.broadcast_tensors(T(a[:, :1]), T(v)), np.broadcast_arrays(f32(a[:, :1]), f32(v))):
        close(g, w)
    c = r.standard_normal((2, 6))
    close(T(c).unflatten(1, (3, -1)), f32(c).reshape(2, 3, 2))


@row('`x.bool()`, `x.nelement()`, `torch.numel(x)`, `torch.is_tensor(o)`, `x.share_memory_()`')
def _():
    a = rng().integers(-1, 2, (3, 4)).astype(np.float32)
    a[0, 0] = np.nan
    x = T(a)
    m = x.bool()
    assert m.dtype == np.float32
    close(m, f32(a != 0), 0, 0)
    assert x.nelement() == tlgpu.numel(x) == 12
    assert tlgpu.is_tensor(x) and not tlgpu.is_tensor(a)
    assert x.share_memory_() is x


@row('`torch.get_default_dtype()`, `torch.set_default_dtype(torch.float32)`')
def _():
    assert tlgpu.get_default_dtype() == tlgpu.float32
    tlgpu.set_default_dtype(tlgpu.float32)
    raises(TypeError, "float64", lambda: tlgpu.set_default_dtype(tlgpu.float64))
    raises(TypeError, "set_default_dtype", lambda: tlgpu.set_default_dtype(tlgpu.float16))


@row('`x.data_ptr()`, `x.storage_offset()`, `x.squeeze_()`, `x.unsqueeze_(d)`, `x.t_()`')
def _():
    for name in ("data_ptr", "storage_offset", "squeeze_", "unsqueeze_", "t_"):
        assert not hasattr(tlgpu.Tensor, name), name


# ---- Operators and math ----

@row('`torch.logical_and/or/xor(a, b)`, `torch.logical_not(x)`')
def _():
    r = rng()
    a, b = r.integers(-1, 2, (4, 3)).astype(np.float32), r.integers(0, 2, 3).astype(np.float32)
    a[1, 1] = np.nan
    for name in ("logical_and", "logical_or", "logical_xor"):
        want = f32(getattr(np, name)(a, b))
        close(getattr(tlgpu, name)(T(a), T(b)), want, 0, 0)
        close(getattr(T(a), name)(b), want, 0, 0)
    close(tlgpu.logical_not(T(a)), f32(np.logical_not(a)), 0, 0)
    assert tlgpu.logical_not(I([0, 3])).dtype == np.float32


@row('`torch.mm(a, b)`, `torch.kron(a, b)`, `torch.clamp_min(x, m)`, `torch.clamp_max(x, m)`')
def _():
    r = rng()
    a, b = r.standard_normal((3, 4)), r.standard_normal((4, 2))
    x = T(a, requires_grad=True)
    close(tlgpu.mm(x, T(b)), f32(a) @ f32(b), 1e-5, 1e-5)
    raises(ValueError, "mm", lambda: tlgpu.mm(T(r.standard_normal((2, 3, 4))), T(b)))
    k = tlgpu.kron(x, T(b))
    close(k, np.kron(f32(a), f32(b)), 1e-6, 1e-6)
    k.sum().backward()
    close(x.grad, np.full((3, 4), f32(b).sum()), 1e-5, 1e-5)
    ia, ib = r.integers(-3, 3, (2, 2)), r.integers(-3, 3, 3)
    assert (I(ia).kron(I(ib)).numpy() == np.kron(ia, ib)).all()
    close(tlgpu.clamp_min(T(a), 0.1), np.maximum(f32(a), f32(0.1)))
    close(T(a).clamp_max(T(b[:, 0]).reshape(1, 4)), np.minimum(f32(a), f32(b[:, 0]).reshape(1, 4)))


@row('`torch.cdist(x1, x2, p, compute_mode)`')
def _():
    r = rng()
    a, b = r.standard_normal((2, 4, 3)), r.standard_normal((2, 30, 3))
    d = np.abs(a[:, :, None] - b[:, None])
    for p, want in ((2.0, np.sqrt((d ** 2).sum(-1))), (1, d.sum(-1)), (math.inf, d.max(-1)),
                    (3.0, ((d ** 3).sum(-1)) ** (1 / 3))):
        close(tlgpu.cdist(T(a), T(b), p=p), want, 1e-4, 1e-4)
    x = T(a[0], requires_grad=True)
    out = tlgpu.cdist(x, T(b[0, :5]))
    out.sum().backward()
    diff = a[0][:, None] - b[0, :5][None]
    close(x.grad, (diff / np.sqrt((diff ** 2).sum(-1, keepdims=True))).sum(1), 1e-4, 1e-5)
    z = T(a[0], requires_grad=True)
    tlgpu.cdist(z, z.detach()).sum().backward()
    assert np.isfinite(z.grad.numpy()).all()


@row('`x.lerp_(end, w)`, `target.data.lerp_(src.data, tau)`, `x.addcmul_(a, b, value=v)`, `addcdiv_`')
def _():
    r = rng()
    a, b, c = r.standard_normal((3, 4)), r.standard_normal((3, 4)), r.uniform(1, 2, (3, 4))
    target, src = T(a), tlgpu.nn.Linear(4, 3).weight
    src.data.copy_(T(b))
    target.data.lerp_(src.data, 0.005)
    close(target, f32(a) + 0.005 * (f32(b) - f32(a)), 1e-5, 1e-6)
    target.lerp_(T(b), 1.0)
    close(target, f32(b), 0, 0)
    y = T(a)
    assert y.addcmul_(T(b), T(c), value=0.5) is y
    close(y, f32(a) + 0.5 * f32(b) * f32(c), 1e-5, 1e-6)
    y.addcdiv_(T(b), T(c), value=-1)
    close(y, f32(a) + 0.5 * f32(b) * f32(c) - f32(b) / f32(c), 1e-5, 1e-5)
    x = T(a, requires_grad=True)
    h = x * 2
    h.lerp_(T(b), 0.25)
    h.sum().backward()
    close(x.grad, np.full((3, 4), 1.5))
    raises(ValueError, "lerp_", lambda: T(a).lerp_(tlgpu.zeros(2, 3, 4), 0.5))
    raises(TypeError, "addcmul_", lambda: I([1, 2]).addcmul_(T([1.0, 2.0]), T([1.0, 1.0])))


# ---- Autograd ----

@row('`t.retain_grad()`, `t.register_hook(fn)`')
def _():
    assert not hasattr(tlgpu.Tensor, "retain_grad") and not hasattr(tlgpu.Tensor, "register_hook")
    v = rng().standard_normal(3)
    x = T(v, requires_grad=True)
    h = x * 3
    h2 = h.detach().requires_grad_()
    (h2 * h2).sum().backward()
    close(h2.grad, 2 * 3 * f32(v), 1e-5)
    h.backward(h2.grad)
    close(x.grad, 18 * f32(v), 1e-5)


# ---- nn, optim, saving ----

@row('`model = torch.compile(model)`, `@torch.compile(...)`')
def _():
    model = tlgpu.nn.Linear(3, 2)
    assert tlgpu.compile(model) is model and tlgpu.compile(model, mode="reduce-overhead") is model
    f = tlgpu.compile(fullgraph=True)(abs)
    assert f is abs
    raises(TypeError, "compile", lambda: tlgpu.compile(model, turbo=True))
    raises(TypeError, "compile: expected a callable", lambda: tlgpu.compile(3))
