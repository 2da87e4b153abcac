"""Checks for docs/porting.md's rows (tests/test_porting_table.py runs them): CHECKS maps a row's first cell
(its PyTorch column, verbatim) to a function that checks the row's claim against numpy on random inputs.
This file: the helpers and the tensor, device and operator rows; porting_checks_more.py: the rest."""
import math

import numpy as np
import pytest

import tlgpu


def rng():
    return np.random.default_rng(2024)


def f32(a):
    return np.asarray(a, dtype=np.float32)


def T(a, **kw):
    return tlgpu.tensor(f32(a), **kw)


def close(t, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(t.numpy() if isinstance(t, tlgpu.Tensor) else t, want, rtol=rtol, atol=atol)


def raises(exc, match, fn):
    with pytest.raises(exc, match=match):
        fn()


CHECKS = {}


def row(key):
    def deco(fn):
        assert key not in CHECKS, key
        CHECKS[key] = fn
        return fn
    return deco


# ---- Tensors and devices ----

@row('`torch.tensor(a)`, `torch.as_tensor(a)`, `torch.from_numpy(a)`')
def _():
    a = rng().standard_normal((3, 4))
    for make in (tlgpu.tensor, tlgpu.as_tensor, tlgpu.from_numpy):
        t = make(a)
        assert t.dtype == np.float32
        close(t, a.astype(np.float32), 0, 0)
        a2 = a.copy()
        t = make(a2)
        a2 += 1                                                   # a copy: the host array is not shared
        close(t, a.astype(np.float32), 0, 0)
    assert tlgpu.tensor(np.arange(3, dtype=np.int64)).dtype == np.int32
    close(tlgpu.tensor(np.array([True, False])), f32([1, 0]), 0, 0)
    t = tlgpu.ones(2)
    assert tlgpu.as_tensor(t) is t


@row('`torch.zeros/ones/full/empty/arange/rand/randn/randint`')
def _():
    close(tlgpu.zeros(2, 3), np.zeros((2, 3)), 0, 0)
    close(tlgpu.ones((2, 3)), np.ones((2, 3)), 0, 0)
    close(tlgpu.full((2,), 2.5), np.full(2, 2.5), 0, 0)
    assert tlgpu.empty(4, 2).shape == (4, 2)
    assert tlgpu.arange(5).dtype == np.int32 and tlgpu.arange(5).tolist() == list(range(5))
    close(tlgpu.arange(0.0, 1.0, 0.25), np.arange(0.0, 1.0, 0.25), 0, 0)
    tlgpu.manual_seed(1)
    u, n = tlgpu.rand(4000).numpy(), tlgpu.randn(4000).numpy()
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.03 and abs(n.std() - 1) < 0.05
    r1, r2 = tlgpu.randint(7, (3000,)).numpy(), tlgpu.randint(2, 5, (3000,)).numpy()
    assert set(np.unique(r1)) == set(range(7)) and set(np.unique(r2)) == {2, 3, 4}
    z = tlgpu.zeros(3, requires_grad=True)
    (z * 2).sum().backward()
    close(z.grad, np.full(3, 2.0), 0, 0)


@row('`torch.zeros_like/ones_like/full_like/empty_like/rand_like/randn_like`')
def _():
    x = tlgpu.ones(3, 2)
    close(tlgpu.zeros_like(x), np.zeros((3, 2)), 0, 0)
    close(tlgpu.ones_like(tlgpu.zeros(3)), np.ones(3), 0, 0)
    close(tlgpu.full_like(x, 4.0), np.full((3, 2), 4.0), 0, 0)
    assert tlgpu.zeros_like(x, dtype=tlgpu.long).dtype == np.int32
    for fn in (tlgpu.empty_like, tlgpu.rand_like, tlgpu.randn_like):
        assert fn(x).shape == (3, 2) and fn(x).dtype == np.float32
    assert tlgpu.randn_like(x, requires_grad=True).requires_grad


@row('`device=` on any of the above')
def _():
    for spec in ("cpu", "cuda", "cuda:0", 0, tlgpu.device(), None):
        close(tlgpu.full((2,), 3.0, device=spec), np.full(2, 3.0), 0, 0)
        close(tlgpu.tensor([1.0, 2.0], device=spec, pin_memory=True), f32([1, 2]), 0, 0)
        assert tlgpu.zeros_like(tlgpu.ones(2), device=spec).shape == (2,)
        assert tlgpu.randint(0, 3, (4,), device=spec).shape == (4,)
    raises(ValueError, "TLGPU_DEVICE", lambda: tlgpu.zeros(2, device="cuda:1"))
    raises(ValueError, "TLGPU_DEVICE", lambda: tlgpu.rand(2, device="mps"))


@row('`torch.device("cuda" if torch.cuda.is_available() else "cpu")`')
def _():
    dev = tlgpu.device("cuda" if tlgpu.cuda.is_available() else "cpu")
    assert dev == tlgpu.device() == tlgpu.device("cuda") == tlgpu.device("cpu")
    assert tlgpu.cuda.is_available() == (tlgpu.device().type == "gpu")
    close(tlgpu.ones(2, device=dev), np.ones(2), 0, 0)
    raises(ValueError, "one device", lambda: tlgpu.device("xla"))


@row('`x.to(device)`, `x.cuda()`, `x.cpu()`, `non_blocking=True`')
def _():
    a = rng().standard_normal(5)
    x = T(a)
    assert x.to("cuda") is x and x.cuda() is x and x.cpu() is x and x.to(tlgpu.device(), non_blocking=True) is x
    c = x.to("cuda", copy=True)
    c.mul_(0.0)
    close(x.cpu().numpy(), a.astype(np.float32), 0, 0)
    raises(ValueError, "TLGPU_DEVICE", lambda: x.to("cuda:1"))


@row('`x.device`')
def _():
    assert T([1.0]).device == tlgpu.device() and T([1.0]).device.type in ("cpu", "gpu", "accelerator")


@row('`x.pin_memory()`')
def _():
    a = rng().standard_normal(4)
    x = T(a)
    assert x.pin_memory() is x
    close(x.pin_memory(), a.astype(np.float32), 0, 0)


@row('`x.to(dtype)`, `x.to(device, dtype)`, `x.to(other)`')
def _():
    a = rng().standard_normal(6) * 10
    x = T(a)
    assert x.to(tlgpu.long).tolist() == f32(a).astype(np.int32).tolist()
    assert x.to("cuda", tlgpu.int32).dtype == np.int32 and x.to(tlgpu.zeros(1, dtype=tlgpu.int32)).dtype == np.int32
    assert x.to(tlgpu.float32) is x
    close(x.to(tlgpu.int32).to(tlgpu.float), np.trunc(f32(a)), 0, 0)


@row('`torch.long`, `torch.int64`, `torch.int`, `torch.int32`, `torch.float`, `torch.float32`')
def _():
    for name in ("long", "int64", "int", "int32"):
        t = tlgpu.tensor(np.array([3, -4], dtype=np.int64), dtype=getattr(tlgpu, name))
        assert t.dtype == np.int32 and t.tolist() == [3, -4]
    for name in ("float", "float32"):
        assert tlgpu.tensor([1, 2], dtype=getattr(tlgpu, name)).dtype == np.float32
    raises(OverflowError, "int32", lambda: tlgpu.tensor(np.array([2**33]), dtype=tlgpu.long))


@row('`torch.float16`, `half`, `bfloat16`, `uint8`')
def _():
    x = tlgpu.tensor([1.5, -2.25])
    for name, want in (("float16", np.float16), ("half", np.float16), ("bfloat16", tlgpu.bfloat16),
                       ("uint8", np.uint8)):
        dt = getattr(tlgpu, name)
        assert tlgpu.zeros(2, dtype=dt).dtype == want and x.to(dt).dtype == want and x.type(dt).dtype == want
    assert x.half().float().tolist() == [1.5, -2.25] and x.byte().tolist() == [1, 254]


@row('`torch.float64`, `double`, `bool`')
def _():
    x = tlgpu.ones(2)
    for name in ("float64", "double", "bool"):
        dt = getattr(tlgpu, name)
        raises(TypeError, "use tlgpu", lambda: tlgpu.zeros(2, dtype=dt))
        raises(TypeError, "use tlgpu", lambda: x.to(dt))
        raises(TypeError, "use tlgpu", lambda: x.type(dt))


@row('`torch.Tensor(a)`, `torch.Tensor(2, 3)`, `torch.FloatTensor(a)`')
def _():
    done = rng().random(6) < 0.5
    close(tlgpu.Tensor(done), done.astype(np.float32), 0, 0)
    ints = rng().integers(-4, 4, 5)
    close(tlgpu.Tensor(ints), ints.astype(np.float32), 0, 0)
    assert tlgpu.Tensor(2, 3).shape == (2, 3) and tlgpu.Tensor(2, 3).dtype == np.float32
    a = rng().standard_normal(3)
    close(tlgpu.FloatTensor(a), a.astype(np.float32), 0, 0)
    assert isinstance(tlgpu.Tensor([1.0]), tlgpu.Tensor)


@row('`torch.LongTensor(a)`, `torch.IntTensor(a)`')
def _():
    a = rng().integers(-100, 100, 7)
    for cls in (tlgpu.LongTensor, tlgpu.IntTensor):
        t = cls(a)
        assert t.dtype == np.int32 and t.tolist() == a.tolist()


@row('`torch.manual_seed(s)`')
def _():
    tlgpu.manual_seed(11)
    a = tlgpu.randn(100).numpy()
    tlgpu.manual_seed(11)
    np.testing.assert_array_equal(tlgpu.randn(100).numpy(), a)


@row('`torch.backends.cudnn.deterministic = True`, `cudnn.benchmark`')
def _():
    tlgpu.backends.cudnn.deterministic = True
    tlgpu.backends.cudnn.benchmark = False
    assert tlgpu.backends.cudnn.deterministic is True and tlgpu.backends.cudnn.benchmark is False
    r = rng()
    a, b, up = r.standard_normal((70, 90)), r.standard_normal((90, 50)), r.standard_normal(70)

    def run():
        tlgpu.manual_seed(5)
        x = T(a, requires_grad=True)
        y = ((x @ T(b)).tanh() + tlgpu.randn(70, 50)).sum(dim=1).softmax(dim=0)
        (y * T(up)).sum().backward()
        return y.numpy(), x.grad.numpy()
    (y1, g1), (y2, g2) = run(), run()
    np.testing.assert_array_equal(y1, y2)
    np.testing.assert_array_equal(g1, g2)
    close(y1.sum(), 1.0, 1e-5)


@row('`torch.backends.cuda.matmul.allow_tf32 = True`, `torch.set_float32_matmul_precision("high")`')
def _():
    r = rng()
    a, b = r.standard_normal((64, 96)), r.standard_normal((96, 32))
    try:
        tlgpu.backends.cuda.matmul.allow_tf32 = True
        assert tlgpu.get_matmul_precision() == "high" and tlgpu.backends.cuda.matmul.allow_tf32
        close(T(a) @ T(b), a @ b, 2e-2, 5e-2)                    # TF32 where the device has it
        tlgpu.set_float32_matmul_precision("highest")
        assert not tlgpu.backends.cuda.matmul.allow_tf32 and tlgpu.get_float32_matmul_precision() == "highest"
        close(T(a) @ T(b), a @ b, 1e-4, 1e-4)
    finally:
        tlgpu.set_matmul_precision("highest")
    tlgpu.backends.cudnn.allow_tf32 = True                        # permits what the matmul switch does
    assert tlgpu.get_matmul_precision() == "highest"


@row('`x.detach().cpu().numpy()`')
def _():
    a = rng().standard_normal((2, 3))
    x = T(a, requires_grad=True) * 2
    out = x.detach().cpu().numpy()
    assert isinstance(out, np.ndarray)
    close(out, 2 * f32(a), 0, 0)
    close(x.numpy(), 2 * f32(a), 0, 0)


@row('`x.item()`, `float(x)`, `f"{x:.3f}"`')
def _():
    x = T([1.23456])
    assert x.item() == float(f32(1.23456)) and float(x) == x.item() and f"{x.sum():.3f}" == "1.235"


@row('`x.float()`, `x.int()`, `x.long()`')
def _():
    a = rng().standard_normal(5) * 5
    x = T(a)
    assert x.int().tolist() == x.long().tolist() == f32(a).astype(np.int32).tolist()
    assert x.long().dtype == np.int32 and x.int().float().dtype == np.float32


@row('`x.type()`, `x.type(dtype)`, `x.type(torch.LongTensor)`')
def _():
    a = rng().standard_normal(4) * 3
    x = T(a)
    assert x.type() == "tlgpu.FloatTensor" and x.int().type() == "tlgpu.IntTensor"
    for target in (tlgpu.long, tlgpu.LongTensor, "torch.LongTensor", "torch.cuda.IntTensor"):
        assert x.type(target).tolist() == f32(a).astype(np.int32).tolist()
    assert x.int().type("torch.cuda.FloatTensor").dtype == np.float32


@row('`x.size()`, `x.size(d)`, `x.shape`, `x.dim()`, `x.ndim`, `x.numel()`')
def _():
    a = np.zeros((2, 3, 4))
    x = T(a)
    assert x.size() == a.shape == x.shape and x.size(1) == 3 and x.size(-1) == 4
    assert x.dim() == x.ndim == 3 and x.numel() == a.size


@row('`x.clone()`')
def _():
    a = rng().standard_normal((3, 4))
    x = T(a, requires_grad=True)
    c = x.T.clone()
    assert c.is_contiguous()
    (c * 3).sum().backward()
    close(x.grad, np.full((3, 4), 3.0), 0, 0)


@row('`x.view(...)`, `reshape`, `permute`, `transpose`, `unsqueeze`, `squeeze`, `flatten`, `expand`')
def _():
    a = rng().standard_normal((2, 3, 4))
    x = T(a)
    close(x.view(6, 4), a.reshape(6, 4))
    close(x.reshape(4, 6), a.reshape(4, 6))
    close(x.permute(2, 0, 1), a.transpose(2, 0, 1))
    close(x.transpose(0, 2), a.swapaxes(0, 2))
    close(x.unsqueeze(1), a[:, None])
    close(x[:, :1].squeeze(1), a[:, 0])
    close(x.flatten(), a.ravel())
    close(x[:, :1].expand(2, 5, 4), np.broadcast_to(a[:, :1], (2, 5, 4)))


@row('`x.view_as(o)`, `x.ravel()`')
def _():
    a = rng().standard_normal((3, 4))
    x = T(a)
    close(x.view_as(tlgpu.zeros(2, 6)), a.reshape(2, 6))
    close(x.T.ravel(), a.T.ravel())


@row('`x.repeat(*sizes)`')
def _():
    a = rng().standard_normal((2, 3))
    close(T(a).repeat(2, 1, 2), np.tile(a, (2, 1, 2)))


@row('`torch.cat(ts, dim)`, `torch.stack`')
def _():
    a, b = rng().standard_normal((2, 3)), rng().standard_normal((2, 3)) + 1
    close(tlgpu.cat([T(a), T(b)], 1), np.concatenate([a, b], 1))
    close(tlgpu.stack([T(a), T(b)]), np.stack([a, b]))


@row('`repr(x)`')
def _():
    x = T([1.0, 2.0], requires_grad=True) * 2
    r = repr(x)
    assert r.startswith("tensor([2. 4.]") and "shape=(2,)" in r and "dtype=float32" in r and "grad_fn=<Mul" in r


# ---- Operators and math ----

@row('`+ - * / ** @`, unary `-`, `abs`')
def _():
    r = rng()
    a, b, m = r.standard_normal((3, 4)), r.random((3, 4)) + 0.5, r.standard_normal((4, 2))
    x, y = T(a), T(b)
    close(x + y, a + b); close(x - y, a - b); close(x * y, a * b); close(x / y, a / b, 1e-5)
    close(y ** 1.5, b ** 1.5, 1e-5); close(x @ T(m), a @ m, 1e-4, 1e-5); close(-x, -a); close(abs(x), abs(a))
    mask = r.random((3, 4)) < 0.5
    close(x * mask, a * mask)                                     # numpy bool operand: a float32 mask
    close(f32(m).T @ x.T, m.T @ a.T, 1e-4, 1e-5)


@row('`//`, `%`')
def _():
    r = rng()
    a, b = r.standard_normal(50) * 5, r.choice([-3.0, -1.5, 2.0, 2.5], 50)
    close(T(a) // T(b), np.floor_divide(f32(a), f32(b)))
    close(T(a) % T(b), np.mod(f32(a), f32(b)), 1e-5, 1e-5)
    i, j = r.integers(-20, 20, 50).astype(np.int32), r.choice([-3, -2, 2, 5], 50).astype(np.int32)
    assert (tlgpu.tensor(i) // tlgpu.tensor(j)).tolist() == (i // j).tolist()
    assert (tlgpu.tensor(i) % tlgpu.tensor(j)).tolist() == (i % j).tolist()


@row('int32 `+ - * // % **`, `-x`, `abs`, comparisons')
def _():
    r = rng()
    i, j = r.integers(-9, 9, 20).astype(np.int32), r.integers(1, 5, 20).astype(np.int32)
    x, y = tlgpu.tensor(i), tlgpu.tensor(j)
    for got, want in ((x + y, i + j), (x - 3, i - 3), (x * y, i * j), (x ** 2, i ** 2), (-x, -i), (abs(x), abs(i))):
        assert got.dtype == np.int32 and got.tolist() == want.tolist()
    assert (x + 0.5).dtype == np.float32 and (x / y).dtype == np.float32
    close(x < y, (i < j).astype(np.float32), 0, 0)
    raises(ValueError, "negative integer powers", lambda: x ** -2)


@row('integer division by zero')
def _():
    x = tlgpu.tensor(np.array([5, -7, 3], np.int32))
    raises(ZeroDivisionError, "division by zero", lambda: x // 0)
    assert (x // tlgpu.tensor(np.array([0, 2, 0], np.int32))).tolist() == [0, -4, 0]


@row('`x < y` (bool tensor)')
def _():
    r = rng()
    a, b = r.standard_normal(30), r.standard_normal(30)
    m1, m2 = T(a) < T(b), T(a) > 0
    want1, want2 = (f32(a) < f32(b)).astype(np.float32), (a > 0).astype(np.float32)
    close(m1, want1, 0, 0); close(1 - m1, 1 - want1, 0, 0); close(m1 * m2, want1 * want2, 0, 0)
    assert m1.sum().item() == want1.sum() and abs(m1.mean().item() - want1.mean()) < 1e-6


@row('`(pred == y).float().mean()`')
def _():
    r = rng()
    p, y = r.integers(0, 3, 40).astype(np.int32), r.integers(0, 3, 40).astype(np.int32)
    acc = (tlgpu.tensor(p) == tlgpu.tensor(y)).float().mean().item()
    assert abs(acc - (p == y).mean()) < 1e-6
    m = T(p) == T(y)
    assert m.float() is m


@row('`torch.where(c, a, b)`, `a.where(c, b)`, `torch.where(c)`')
def _():
    r = rng()
    a, b = r.standard_normal(20), r.standard_normal(20)
    c = a > b
    close(tlgpu.where(T(a) > T(b), T(a), T(b)), np.where(c, a, b))
    close(tlgpu.where(c, T(a), T(b)), np.where(c, a, b))
    close(T(a).where(T(a) > T(b), T(b)), np.where(c, a, b))
    ia = r.integers(-2**31, 2**31, 20).astype(np.int32)          # beyond float32's 2**24: exact
    w = tlgpu.where(T(a) > T(b), tlgpu.tensor(ia), -7)
    assert w.dtype == np.int32 and (w.numpy() == np.where(c, ia, -7)).all()
    assert (tlgpu.where(T(a) > T(b))[0].numpy() == np.nonzero(c)[0]).all()


@row('`x.masked_fill(mask, v)`, `masked_fill_`')
def _():
    r = rng()
    a = r.standard_normal((3, 4))
    m = r.random((3, 4)) < 0.4
    close(T(a).masked_fill(m, -1.0), np.where(m, -1.0, a))
    x = T(a)
    x.masked_fill_(T(m.astype(np.float32)), 9.0)
    close(x, np.where(m, 9.0, a))


@row('`torch.clamp`, `x.clamp(min, max)`, `clamp_`, `clip`, `clip_`')
def _():
    a = rng().standard_normal(30)
    a[3] = np.nan
    for got in (tlgpu.clamp(T(a), -0.5, 0.5), T(a).clamp(-0.5, 0.5), T(a).clip(-0.5, 0.5), tlgpu.clip(T(a), -0.5, 0.5)):
        close(got, np.clip(f32(a), -0.5, 0.5), 0, 0)
    for name in ("clamp_", "clip_"):
        x = T(a)
        getattr(x, name)(min=0.0)
        close(x, np.clip(f32(a), 0.0, None), 0, 0)


@row('`torch.maximum/minimum`, `x.max(other)`')
def _():
    r = rng()
    a, b = r.standard_normal(20), r.standard_normal(20)
    a[0] = np.nan
    close(tlgpu.maximum(T(a), T(b)), np.maximum(f32(a), f32(b)), 0, 0)
    close(tlgpu.minimum(T(a), T(b)), np.minimum(f32(a), f32(b)), 0, 0)
    close(T(a).max(T(b)), np.maximum(f32(a), f32(b)), 0, 0)


@row('`relu exp log sqrt rsqrt tanh sigmoid silu gelu sin cos`')
def _():
    a = rng().standard_normal(40)
    p = np.abs(a) + 0.1
    x, y = T(a), T(p)
    close(x.relu(), np.maximum(a, 0)); close(x.exp(), np.exp(a), 1e-5); close(y.log(), np.log(p), 1e-5, 1e-5)
    close(y.sqrt(), np.sqrt(p), 1e-5); close(y.rsqrt(), 1 / np.sqrt(p), 1e-5); close(x.tanh(), np.tanh(a), 1e-5)
    sig = 1 / (1 + np.exp(-a))
    close(x.sigmoid(), sig, 1e-5); close(x.silu(), a * sig, 1e-5, 1e-5); close(x.sin(), np.sin(a), 1e-5, 1e-6)
    close(x.cos(), np.cos(a), 1e-5, 1e-6)
    gelu = 0.5 * a * (1 + np.vectorize(math.erf)(a / math.sqrt(2)))
    close(x.gelu(), gelu, 1e-3, 1e-3)
    assert math.isnan(T([np.nan]).relu().item())


@row('`x.cumsum(dim)`')
def _():
    a = rng().standard_normal((3, 5))
    close(T(a).cumsum(1), np.cumsum(a, 1), 1e-5, 1e-5)
    i = np.arange(6, dtype=np.int32)
    c = tlgpu.tensor(i).cumsum(0)
    assert c.dtype == np.int32 and c.tolist() == np.cumsum(i).tolist()


@row('in-place `add_ sub_ mul_ div_ clamp_ clamp_min_ clamp_max_ relu_ sigmoid_ tanh_ exp_ neg_ abs_ sqrt_ zero_ fill_ copy_ masked_fill_`, `+= -= *= /= //= %=`')
def _():
    r = rng()
    a, b = r.standard_normal(10), r.random(10) + 0.5
    x, want = T(a), f32(a).copy()
    for op, ref in (("add_", np.add), ("sub_", np.subtract), ("mul_", np.multiply), ("div_", np.divide)):
        getattr(x, op)(T(b))
        want = ref(want, f32(b))
    close(x, want, 1e-5, 1e-6)
    x += 1; x -= 0.5; x *= 2; x /= 4; want = (want + 1 - 0.5) * 2 / 4
    close(x, want, 1e-5, 1e-6)
    y = T(a)
    y //= 0.5; y %= 3
    close(y, np.mod(np.floor_divide(f32(a), 0.5), 3), 1e-5, 1e-6)
    x.fill_(2.0); close(x, np.full(10, 2.0), 0, 0)
    x.copy_(T(b)); close(x, f32(b), 0, 0)
    x.zero_(); close(x, np.zeros(10), 0, 0)
    for op, ref in (("relu_", lambda v: np.maximum(v, 0)), ("sigmoid_", lambda v: 1 / (1 + np.exp(-v))),
                    ("tanh_", np.tanh), ("exp_", np.exp), ("neg_", np.negative), ("abs_", np.abs)):
        z = T(a)
        assert getattr(z, op)() is z
        close(z, ref(f32(a)), 1e-5, 1e-6)
    z = T(b)
    close(z.sqrt_(), np.sqrt(f32(b)), 1e-5, 1e-6)
    close(T(a).clamp_min_(0.1).clamp_max_(0.5), np.clip(f32(a), 0.1, 0.5), 0, 0)
