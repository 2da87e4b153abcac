"""torch's elementwise math beyond the basics (kernels/ew_apply.h, csrc/ops/ops_elementwise.c): atan asin acos tan
log2 log10 exp2 sinh cosh asinh acosh atanh trunc frac erfc, and atan2 hypot fmod logaddexp xlogy. Each against
numpy in float64 on float32 inputs over its domain, near 0 and at large magnitudes where the op has a stable
formula, with the infinities and NaN torch defines; strided views and the module functions; broadcasting, number
and numpy operands on either side; gradients against central differences (gradcheck.py) and torch's conventions
(trunc 0, frac 1, xlogy's at x == 0); float16 / bfloat16; int32 fmod / trunc; one tlgpu.jit chain fusing them all."""
import math

import ml_dtypes
import numpy as np
import pytest

import tlgpu
from gradcheck import check

R = np.random.default_rng(11)
F64 = np.float64
INF, NAN = np.inf, np.nan


def f32(*parts):
    return np.concatenate([np.asarray(p, dtype=np.float32).ravel() for p in parts])


def uni(lo, hi, n=256):
    return R.uniform(lo, hi, n)


def mag(lo, hi, n=256):
    """Log-uniform magnitudes in [e^lo, e^hi], both signs."""
    return np.exp(R.uniform(lo, hi, n)) * R.choice([-1.0, 1.0], n)


def T(a, **kw):
    return tlgpu.tensor(np.asarray(a, dtype=np.float32), **kw)


def erfc(x):
    return np.vectorize(math.erfc, otypes=[F64])(x)


def xlogy(x, y):
    with np.errstate(all="ignore"):
        return np.where(np.isnan(y), NAN, np.where(x == 0, 0.0, x * np.log(y)))


# name: (float64 reference, inputs). Tiny magnitudes test the formulas that stay accurate near 0 (sinh, asinh,
# atanh, tan, asin: x itself, where exp(x) - exp(-x) would cancel); large ones test asinh / acosh past x*x's range.
UNARY = {
    "atan": (np.arctan, lambda: f32(uni(-10, 10), mag(-30, 80), [0, -0.0, INF, -INF, NAN])),
    "asin": (np.arcsin, lambda: f32(uni(-1, 1), mag(-30, -3), [1, -1, 1.5, -2, INF, NAN])),
    "acos": (np.arccos, lambda: f32(uni(-1, 1), mag(-30, -3), [1, -1, 1.5, -INF, NAN])),
    "tan": (np.tan, lambda: f32(uni(-1.5, 1.5), mag(-30, -3), [0, INF, NAN])),
    "log2": (np.log2, lambda: f32(np.abs(mag(-80, 80)), [1, 2, 0.5, 0, -0.0, -1, INF, -INF, NAN])),
    "log10": (np.log10, lambda: f32(np.abs(mag(-80, 80)), [1, 10, 0.1, 0, -1, INF, NAN])),
    "exp2": (np.exp2, lambda: f32(uni(-150, 130), mag(-30, -3), [0, 127, 128, -149, -150, INF, -INF, NAN])),
    "sinh": (np.sinh, lambda: f32(uni(-10, 10), mag(-30, -3), uni(-89, 89, 32), [95, -95, INF, -INF, NAN])),
    "cosh": (np.cosh, lambda: f32(uni(-10, 10), mag(-30, -3), uni(-89, 89, 32), [95, -95, INF, -INF, NAN])),
    "asinh": (np.arcsinh, lambda: f32(uni(-10, 10), mag(-30, -3), mag(5, 87), [0, INF, -INF, NAN])),
    "acosh": (np.arccosh, lambda: f32(1 + np.abs(mag(-20, 87)), [1, 0.5, -2, INF, NAN])),
    "atanh": (np.arctanh, lambda: f32(uni(-1, 1), mag(-30, -3), [1, -1, 2, 0, NAN])),
    "trunc": (np.trunc, lambda: f32(uni(-10, 10), mag(-5, 40), [0.5, -0.5, 1.5, -2.5, -0.0, INF, -INF, NAN])),
    "frac": (lambda x: x - np.trunc(x), lambda: f32(uni(-10, 10), mag(-5, 40), [0.5, -0.5, -2.25, INF, NAN])),
    "erfc": (erfc, lambda: f32(uni(-5, 9), mag(-30, -3), [0, 9.5, 20, INF, -INF, NAN])),
}


def ref32(fn, *args):
    """fn in float64, rounded to float32 (overflow to inf, underflow to subnormals, as a float32 result does)."""
    with np.errstate(all="ignore"):
        return fn(*[np.asarray(a, dtype=F64) for a in args]).astype(np.float32)


def close32(got, want, rtol=2e-6):
    """Within rtol (8 to 16 float32 ulps: OpenCL's bounds for these builtins are 3 to 6, erfc's 16) or a subnormal's
    spacing; NaN and infinities exactly where want has them."""
    got = got.numpy() if isinstance(got, tlgpu.Tensor) else got
    assert got.dtype == np.float32 and got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-44)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_against_numpy(name):
    fn, make = UNARY[name]
    x = make()
    want, rtol = ref32(fn, x), 4e-6 if name == "erfc" else 2e-6
    close32(getattr(T(x), name)(), want, rtol)
    close32(getattr(tlgpu, name)(T(x)[::3]), want[::3], rtol)                      # a strided view, module form
    m = x[: x.size // 4 * 4].reshape(-1, 4)
    close32(getattr(T(m).T, name)(), want[: m.size].reshape(-1, 4).T, rtol)         # transposed


def atan2_in():
    a = f32(R.standard_normal(256) * 3, mag(-30, 30), [0, -0.0, 0, -0.0, 1, -1, INF, -INF, INF, NAN, 5])
    b = f32(R.standard_normal(256) * 3, mag(-30, 30), [0, 0, -0.0, -0.0, INF, -INF, 1, INF, -INF, 1, 0])
    return a, b


def hypot_in():                  # squares past float32's range both ways: hypot scales, sqrt(a*a + b*b) would not
    return (f32(mag(-60, 60), [INF, NAN, 0, -3, 1e38]),
            f32(mag(-60, 60), [NAN, -INF, 0, 4, 1e38]))


def fmod_in():
    a = f32(R.standard_normal(256) * 10, mag(-5, 30), [5, -5, 5, -5, 0, -0.0, INF, 1, 3, 7.5])
    b = f32(R.uniform(0.3, 4, 256) * R.choice([-1, 1], 256), mag(-5, 5), [3, 3, -3, -3, 2, 2, 1, 0, INF, -2.5])
    return a, b


def logaddexp_in():
    a = f32(R.standard_normal(256) * 5, mag(-20, 60), [-INF, INF, -INF, INF, NAN, 1, 88, -100, 1e30])
    b = f32(R.standard_normal(256) * 5, mag(-20, 60), [-INF, INF, 1, -INF, 1, NAN, 88, -100, -1e30])
    return a, b


def xlogy_in():
    x = f32(R.standard_normal(256), np.zeros(16), mag(-30, 30), [0, 0, 0, 0, 1, -2, NAN, 3])
    y = f32(R.uniform(0, 5, 256), R.uniform(0, 5, 16), np.abs(mag(-30, 30)), [0, NAN, INF, -1, 0, INF, 1, -1])
    return x, y


BINARY = {"atan2": (np.arctan2, atan2_in), "hypot": (np.hypot, hypot_in), "fmod": (np.fmod, fmod_in),
          "logaddexp": (np.logaddexp, logaddexp_in), "xlogy": (xlogy, xlogy_in)}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_against_numpy(name):
    fn, make = BINARY[name]
    a, b = make()
    got, want = getattr(tlgpu, name)(T(a), T(b)).numpy(), ref32(fn, a, b)
    if name == "fmod":
        np.testing.assert_array_equal(got, want)                                    # exact, the dividend's sign
        assert np.array_equal(np.signbit(got[got == 0]), np.signbit(a[got == 0]))
    elif name == "logaddexp":
        # max + log1p(exp(-|a - b|)): within a few ulps of max(|a|, |b|) (the sum cancels when max < 0 < result)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        with np.errstate(invalid="ignore"):
            err = np.where(got == want, 0, np.abs(got.astype(F64) - want))
        scale = np.maximum(np.abs(a), np.abs(b)).astype(F64)
        assert np.all(err[~np.isnan(want)] <= (4e-7 * scale + 1e-7)[~np.isnan(want)])
        assert list(got[-9:-5]) == [-INF, INF, 1, INF] and got[-2] == -100 + math.log(2)   # not inf - inf
    else:
        close32(got, want)
    close32(getattr(T(a[::2]), name)(T(b[::2])), want[::2], rtol=1e-6 if name != "logaddexp" else 1e-4)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcast_numbers_and_numpy_operands(name):
    fn = BINARY[name][0]
    a = R.uniform(0.5, 3, (4, 1, 5)).astype(np.float32)
    b = R.uniform(0.5, 3, (3, 1)).astype(np.float32) * np.float32(-1 if name == "fmod" else 1)
    op = getattr(tlgpu, name)
    close32(op(T(a), T(b)), ref32(fn, a, b))                                          # (4, 3, 5)
    close32(getattr(T(b), name)(T(a)), ref32(fn, b, a))                               # method, other order
    close32(op(T(a), 2.5), ref32(fn, a, np.float32(2.5)))
    close32(getattr(T(a), name)(2), ref32(fn, a, 2.0))                                # a Python int
    close32(op(1.75, T(b)), ref32(fn, np.float32(1.75), b))                           # the number first
    close32(op(a, T(b)), ref32(fn, a, b))                                             # numpy, uploaded
    with pytest.raises(TypeError, match=name):
        op(1.0, 2.0)
    with pytest.raises(TypeError, match=name):
        getattr(T(a), name)("x")


GRAD_DOMAIN = {"atan": (-3, 3), "asin": (-0.9, 0.9), "acos": (-0.9, 0.9), "tan": (-1.2, 1.2), "log2": (0.2, 5),
               "log10": (0.2, 5), "exp2": (-3, 3), "sinh": (-3, 3), "cosh": (-3, 3), "asinh": (-4, 4),
               "acosh": (1.2, 5), "atanh": (-0.9, 0.9), "trunc": (-3, 3), "frac": (-3, 3), "erfc": (-2, 2)}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_grads(name):
    x = R.uniform(*GRAD_DOMAIN[name], (3, 5))
    if name in ("trunc", "frac"):                     # away from the jumps at integers (torch: 0 and 1 there too)
        x = np.trunc(x) + np.copysign(R.uniform(0.1, 0.9, x.shape), x)
    check(lambda t: getattr(t, name)(), UNARY[name][0], [x])


def fmod_grad_in(sa, sb):
    b = R.uniform(0.5, 2, sb) * R.choice([-1, 1], sb)
    a = R.uniform(-5, 5, sa)
    q = a / b                                         # away from trunc(a / b)'s jumps
    return [np.trunc(q) * b + np.copysign(R.uniform(0.1, 0.9, q.shape), q) * b, b]


GRAD_IN = {"atan2": lambda sa, sb: [R.uniform(-2, 2, sa), R.uniform(0.3, 2, sb) * R.choice([-1, 1], sb)],
           "hypot": lambda sa, sb: [R.uniform(-2, 2, sa), R.uniform(0.3, 2, sb) * R.choice([-1, 1], sb)],
           "fmod": fmod_grad_in,
           "logaddexp": lambda sa, sb: [R.uniform(-3, 3, sa), R.uniform(-3, 3, sb)],
           "xlogy": lambda sa, sb: [R.uniform(-2, 2, sa), R.uniform(0.3, 3, sb)]}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_grads_broadcast_and_numbers(name):
    fn, op = BINARY[name][0], getattr(tlgpu, name)
    check(op, fn, GRAD_IN[name]((4, 3), (3,)))                                      # broadcast: b's grad summed
    a, b = GRAD_IN[name]((2, 3), (2, 3))
    out = check(lambda t: op(t, 1.5 if name != "fmod" else -1.25), lambda v: fn(v, 1.5 if name != "fmod" else -1.25),
                [a])
    assert out.grad_fn == name.capitalize() + "Backward"
    if name != "fmod":                                                              # fmod's b: away from the jumps
        check(lambda t: op(1.25, t), lambda v: fn(1.25, v), [b])
    else:
        check(lambda t: op(7.5, t), lambda v: fn(7.5, v), [np.array([2.0, -2.0, 4.0, 1.75, -3.5, 2.75])])


def test_torch_gradient_conventions():
    x = T([0, 0, 1.0, -2.0, 0], requires_grad=True)
    y = T([2.0, 0.5, 3.0, 4.0, 0], requires_grad=True)
    tlgpu.xlogy(x, y).sum().backward()                    # d/dx: xlogy(x != 0, y), 0 at x == 0 (even at y == 0)
    np.testing.assert_allclose(x.grad.numpy(), [0, 0, math.log(3), math.log(4), 0], rtol=1e-6)
    np.testing.assert_allclose(y.grad.numpy()[:4], [0, 0, 1 / 3, -0.5], rtol=1e-6)
    assert np.isnan(y.grad.numpy()[4])                    # x / y = 0 / 0, as torch
    t = T([1.0, -2.0, 2.5, 3.0, INF], requires_grad=True)
    (t.trunc() * 3 + t.frac() * 5).sum().backward()       # trunc: zeros (not g * 0); frac: g
    np.testing.assert_array_equal(t.grad.numpy(), [5, 5, 5, 5, 5])
    a, b = T([3e20, -3e-20, 0.5], requires_grad=True), T([4e20, 4e-20, -1.0], requires_grad=True)
    tlgpu.atan2(a, b).sum().backward()                    # (b, -a) / (a^2 + b^2), where a^2 + b^2 is out of range
    np.testing.assert_allclose(a.grad.numpy(), [1.6e-21, 1.6e19, -0.8], rtol=1e-6)
    np.testing.assert_allclose(b.grad.numpy(), [-1.2e-21, 1.2e19, -0.4], rtol=1e-6)
    a, b = T([-7.5, 7.5, 1.0], requires_grad=True), T([2.0, -2.0, 0.25], requires_grad=True)
    tlgpu.fmod(a, b).sum().backward()                     # d/db = -trunc(a / b): toward 0, unlike remainder's floor
    np.testing.assert_array_equal(a.grad.numpy(), [1, 1, 1])
    np.testing.assert_array_equal(b.grad.numpy(), [3, 3, -4])


HALF = [(np.float16, tlgpu.float16, 1e-3), (ml_dtypes.bfloat16, tlgpu.bfloat16, 8e-3)]
HALF_DOMAIN = {"log2": (0.1, 8), "log10": (0.1, 8), "acosh": (1.0, 8), "exp2": (-8, 8), "sinh": (-5, 5),
               "cosh": (-5, 5), "trunc": (-9, 9), "frac": (-9, 9), "erfc": (-3, 3), "tan": (-1.4, 1.4)}


@pytest.mark.parametrize("dt,tdt,rtol", HALF, ids=["float16", "bfloat16"])
def test_half_dtypes(dt, tdt, rtol):
    """Computed in float32, rounded once to the half dtype: within one half ulp of the float64 result."""
    for name, (fn, _) in UNARY.items():
        x = R.uniform(*HALF_DOMAIN.get(name, (-0.95, 0.95)), (5, 33)).astype(dt)
        got = getattr(tlgpu.tensor(x), name)()
        assert got.dtype == tdt, name
        with np.errstate(all="ignore"):
            want = fn(x.astype(F64))
        np.testing.assert_allclose(got.numpy().astype(F64), want, rtol=rtol, atol=1e-6, err_msg=name)
    a, b = R.uniform(0.3, 3, (5, 33)).astype(dt), R.uniform(0.3, 3, (33,)).astype(dt)
    for name, (fn, _) in BINARY.items():
        for got, want in ((getattr(tlgpu, name)(tlgpu.tensor(a), tlgpu.tensor(b)), fn(a.astype(F64), b.astype(F64))),
                          (getattr(tlgpu.tensor(a), name)(1.5), fn(a.astype(F64), 1.5))):
            assert got.dtype == tdt, name
            np.testing.assert_allclose(got.numpy().astype(F64), want, rtol=rtol, atol=1e-6, err_msg=name)
    x = tlgpu.tensor(a, requires_grad=True)
    (x.atan() + tlgpu.hypot(x, 2.0) + tlgpu.xlogy(x, 3.0)).sum().backward()
    v = a.astype(F64)
    assert x.grad.dtype == tdt
    np.testing.assert_allclose(x.grad.numpy().astype(F64), 1 / (1 + v * v) + v / np.hypot(v, 2) + math.log(3),
                               rtol=4 * rtol)


def test_int32_fmod_and_trunc():
    a = np.array([-7, 7, -7, 7, 0, 5, -2147483647], dtype=np.int32)
    b = np.array([3, 3, -3, -3, 4, 0, -1], dtype=np.int32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    got = tlgpu.fmod(ta, tb)
    assert got.dtype == tlgpu.int32                   # C's: the dividend's sign; a zero divisor tensor gives 0
    np.testing.assert_array_equal(got.numpy(), [-1, 1, -1, 1, 0, 0, 0])
    np.testing.assert_array_equal(ta.fmod(4).numpy(), np.fmod(a, 4))
    assert ta.fmod(2.5).dtype == tlgpu.float32 and ta.trunc().dtype == tlgpu.int32
    np.testing.assert_array_equal(ta.trunc().numpy(), a)
    np.testing.assert_allclose(ta.atan2(tb).numpy(), np.arctan2(a.astype(F64), b).astype(np.float32), rtol=1e-6)
    with pytest.raises(ZeroDivisionError, match="fmod"):
        ta.fmod(0)
    with pytest.raises(TypeError, match="uint8"):
        tlgpu.tensor(np.arange(3, dtype=np.uint8)).fmod(2)


NEW_OPS = sorted(UNARY) + sorted(BINARY)


def test_jit_fuses_every_new_op():
    """One trace of all twenty ops replays as one generated kernel giving the eager values (bit for bit on CPU
    devices, tests/test_jit_fuse.py's rule; a few ulps elsewhere)."""
    def f(x, y):
        p = y.abs() + 1.5                                                   # >= 1.5: log2, log10, acosh
        s = x * 0.3                                                         # |s| < 1: asin, acos, atanh
        u = s.atan() + s.asin() + s.acos() + s.tan() + p.log2() + p.log10() + s.exp2() + s.sinh() + s.cosh()
        v = s.asinh() + p.acosh() + s.atanh() + (x * 3).trunc() + (x * 3).frac() + x.erfc()
        w = tlgpu.atan2(u, v) + tlgpu.hypot(u, 2.0) + tlgpu.fmod(u * 4, p) + tlgpu.logaddexp(u, v)
        return w + tlgpu.xlogy(x, p)
    jf = tlgpu.jit(f)
    exact = tlgpu.device().type == "cpu"
    for _ in range(4):                                                      # eager, trace, replays
        x, y = R.standard_normal((9, 33)).astype(np.float32), R.standard_normal((9, 33)).astype(np.float32)
        want, got = f(T(x), T(y)).numpy(), jf(T(x), T(y)).numpy()
        if exact:
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    cmds = jf.commands()
    assert len(cmds) == 1 and cmds[0].startswith("fused("), cmds
    assert set(NEW_OPS) <= set(cmds[0][len("fused("):-1].split(",")), cmds
