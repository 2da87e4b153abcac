"""Checks for docs/porting.md's rows (see porting_checks.py): torch names added in the thirteenth session (math)."""
import math

import numpy as np

import tlgpu
from porting_checks import T, close, f32, raises, rng, row


def _ref(fn, *args):
    with np.errstate(all="ignore"):
        return fn(*[np.asarray(a, dtype=np.float64) for a in args])


@row('`torch.atan/asin/acos/tan/sinh/cosh/asinh/acosh/atanh(x)`, `log2/log10/exp2/erfc`, `x.atan()` ...')
def _():
    r = rng()
    a = f32(r.standard_normal(200) * 3)
    u = f32(r.uniform(-1, 1, 200))                                      # asin, acos, atanh's domain
    p = f32(np.exp(r.uniform(-20, 20, 200)))                            # log2, log10; 1 + p: acosh's
    tiny = f32(r.standard_normal(200) * 1e-6)                           # sinh, asinh, atanh: x, not a difference
    huge = f32(np.exp(r.uniform(50, 85, 50)))                           # asinh, acosh: x * x would overflow
    erfc = np.vectorize(math.erfc)
    cases = [("atan", np.arctan, a), ("asin", np.arcsin, u), ("acos", np.arccos, u), ("tan", np.tan, a / 3),
             ("sinh", np.sinh, a), ("cosh", np.cosh, a), ("asinh", np.arcsinh, a), ("acosh", np.arccosh, 1 + p),
             ("atanh", np.arctanh, u), ("log2", np.log2, p), ("log10", np.log10, p), ("exp2", np.exp2, a * 10),
             ("erfc", erfc, a), ("sinh", np.sinh, tiny), ("asinh", np.arcsinh, tiny), ("atanh", np.arctanh, tiny),
             ("asinh", np.arcsinh, huge), ("acosh", np.arccosh, huge), ("erfc", erfc, f32(r.uniform(3, 9, 50)))]
    for name, fn, x in cases:                                           # OpenCL's bounds: 3-6 ulps, erfc 16
        close(getattr(T(x), name)(), _ref(fn, x), 4e-6 if name == "erfc" else 2e-6, 0)
        close(getattr(tlgpu, name)(T(x)), _ref(fn, x), 4e-6 if name == "erfc" else 2e-6, 0)
    special = f32([2.0, -2.0, np.inf, -np.inf, 0.0, np.nan])
    with np.errstate(all="ignore"):
        for name, fn in (("asin", np.arcsin), ("acosh", np.arccosh), ("atanh", np.arctanh), ("log2", np.log2),
                         ("atan", np.arctan), ("exp2", np.exp2), ("erfc", erfc), ("cosh", np.cosh)):
            close(getattr(T(special), name)(), fn(special.astype(np.float64)).astype(np.float32), 4e-6, 0)
    v = f32(u * 0.9)
    x = T(v, requires_grad=True)
    (x.atan() + x.asin() - x.acos() + x.tan() + x.sinh() + x.cosh() + x.asinh() + x.atanh() + x.exp2() + x.erfc()
     + (x + 2).acosh() + (x + 2).log2() + (x + 2).log10()).sum().backward()
    v = v.astype(np.float64)
    w = v + 2
    want = (1 / (1 + v * v) + 2 / np.sqrt(1 - v * v) + 1 / np.cos(v) ** 2 + np.cosh(v) + np.sinh(v)
            + 1 / np.sqrt(v * v + 1) + 1 / (1 - v * v) + np.exp2(v) * math.log(2)
            - 2 / math.sqrt(math.pi) * np.exp(-v * v) + 1 / np.sqrt(w * w - 1) + 1 / (w * math.log(2))
            + 1 / (w * math.log(10)))
    close(x.grad, want, 1e-5, 1e-5)
    for dt in (tlgpu.float16, tlgpu.bfloat16):
        h = T(u).to(dt)
        assert h.atan().dtype == dt and h.T.erfc().dtype == dt and h.exp2().dtype == dt
    f = tlgpu.jit(lambda t: (t.atan() + t.sinh()) * 0.5 + t.erfc().log2())
    want = (np.arctan(a.astype(np.float64)) + np.sinh(a)) * 0.5 + np.log2(erfc(a))
    for _ in range(3):                                                 # eager, trace, replays (fused)
        close(f(T(a)), want, 1e-5, 1e-6)
    assert len(f.commands()) == 1 and f.commands()[0].startswith("fused(")


@row('`torch.trunc(x)`, `torch.frac(x)`, `x.trunc()`, `x.frac()`')
def _():
    a = f32(np.concatenate([rng().standard_normal(100) * 10, [2.5, -2.5, 0.5, -0.5, 3.0, -0.0]]))
    close(T(a).trunc(), np.trunc(a), 0, 0)
    close(tlgpu.frac(T(a)), a - np.trunc(a), 0, 0)
    assert np.isnan(T([np.inf]).frac().numpy()[0]) and T([-np.inf]).trunc().numpy()[0] == -np.inf
    assert T([-2.5]).frac().numpy()[0] == -0.5                             # the sign of x
    i = tlgpu.tensor(np.array([-3, 4], dtype=np.int32))
    assert i.trunc().dtype == tlgpu.int32 and i.trunc().numpy().tolist() == [-3, 4]
    x = T(a[:100] + 0.01, requires_grad=True)
    (x.trunc() * 3 + x.frac() * 2).sum().backward()
    close(x.grad, np.full(100, 2.0), 0, 0)                                 # trunc: 0; frac: 1


@row('`torch.atan2(a, b)`, `torch.hypot(a, b)`, `torch.logaddexp(a, b)`, `torch.xlogy(x, y)`')
def _():
    r = rng()
    a, b = f32(r.standard_normal((4, 1, 5)) * 3), f32(r.uniform(0.2, 3, (3, 1)))
    def xlogy(x, y):
        return np.where(np.isnan(y), np.nan, np.where(x == 0, 0.0, x * np.log(y)))
    for name, fn in (("atan2", np.arctan2), ("hypot", np.hypot), ("logaddexp", np.logaddexp), ("xlogy", xlogy)):
        close(getattr(tlgpu, name)(T(a), T(b)), _ref(fn, a, b), 2e-6, 1e-6)      # broadcast to (4, 3, 5)
        close(getattr(T(a), name)(2.0), _ref(fn, a, 2.0), 2e-6, 1e-6)
        close(getattr(tlgpu, name)(1.5, T(b)), _ref(fn, 1.5, b), 2e-6, 1e-6)
        close(getattr(tlgpu, name)(a, T(b)), _ref(fn, a, b), 2e-6, 1e-6)         # numpy, uploaded
    big = f32([3e30, 4e-30, np.inf])
    close(tlgpu.hypot(T(big), T(big * 0.75)), _ref(np.hypot, big, big * 0.75).astype(np.float32), 1e-6, 0)
    close(tlgpu.logaddexp(T([1e30, -np.inf, np.inf, -100]), T([1e30, -np.inf, np.inf, -100])),
          f32([1e30, -np.inf, np.inf, -100 + math.log(2)]), 1e-6, 0)
    close(tlgpu.xlogy(T([0, 0, 0, 2]), T([0, np.nan, np.inf, 0])), f32([0, np.nan, 0, -np.inf]), 0, 0)
    x, y = T(a, requires_grad=True), T(b, requires_grad=True)
    (tlgpu.atan2(x, y) + tlgpu.hypot(x, y) + tlgpu.logaddexp(x, y)).sum().backward()
    va, vb = np.broadcast_arrays(a.astype(np.float64), b.astype(np.float64))
    sig = 1 / (1 + np.exp(vb - va))
    close(x.grad, (vb / (va ** 2 + vb ** 2) + va / np.hypot(va, vb) + sig).sum(axis=1, keepdims=True), 1e-5, 1e-5)
    close(y.grad, (-va / (va ** 2 + vb ** 2) + vb / np.hypot(va, vb) + 1 - sig).sum(axis=(0, 2))[:, None], 1e-5, 1e-5)
    x, y = T([0.0, 0.0, 2.0], requires_grad=True), T([3.0, 0.0, 4.0], requires_grad=True)
    x.xlogy(y).sum().backward()
    close(x.grad, [0, 0, math.log(4)], 1e-6, 0)                            # 0 where x == 0 (torch's)
    close(y.grad[2:], [0.5], 1e-6, 0)


@row('`torch.fmod(a, b)`, `x.fmod(b)`')
def _():
    r = rng()
    a, b = f32(r.standard_normal((5, 6)) * 10), f32(r.uniform(0.5, 3, 6) * r.choice([-1, 1], 6))
    close(tlgpu.fmod(T(a), T(b)), np.fmod(a, b), 0, 0)                     # the dividend's sign
    close(T(a).fmod(2.5), np.fmod(a, f32(2.5)), 0, 0)
    assert not np.array_equal(np.fmod(a, b), np.remainder(a, b))
    close(T(a).remainder(T(b)), np.remainder(a, b), 1e-6, 1e-5)            # remainder: the divisor's
    i = tlgpu.tensor(np.array([-7, 7, -7, 9], dtype=np.int32))
    d = tlgpu.tensor(np.array([3, -3, 0, 4], dtype=np.int32))
    assert i.fmod(d).dtype == tlgpu.int32 and i.fmod(d).numpy().tolist() == [-1, 1, 0, 1]
    raises(ZeroDivisionError, "fmod", lambda: i.fmod(0))
    x, y = T([-7.5, 7.5, 1.0], requires_grad=True), T([2.0, -2.0, 0.25], requires_grad=True)
    tlgpu.fmod(x, y).sum().backward()
    close(x.grad, [1, 1, 1], 0, 0)
    close(y.grad, [3, 3, -4], 0, 0)                                          # -trunc(a / b)
