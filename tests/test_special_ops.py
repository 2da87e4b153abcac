"""lgamma, digamma, erfinv (kernels/ew_special.h; lgamma is OpenCL's builtin): float32 results against float64
references written here (math.lgamma; digamma and trigamma by recurrence and the asymptotic series; erfinv by
Newton on math.erf / math.erfc), measured in ulps of the float32 result; torch's values at 0, the poles, +-1 and
the infinities; gradients (lgamma' = digamma, digamma' = trigamma, erfinv' = sqrt(pi)/2 exp(erfinv^2)); the module
functions; float16 / bfloat16; one tlgpu.jit chain fusing the three."""
import math

import ml_dtypes
import numpy as np
import pytest

import tlgpu

R = np.random.default_rng(7)
F64 = np.float64
INF, NAN = np.inf, np.nan

# Bernoulli terms of the asymptotic series: psi(x) ~ ln x - 1/(2x) - sum B2k / (2k x^2k); psi'(x) ~ 1/x + 1/(2x^2)
# + sum B2k / x^(2k+1)
B2K = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6]


def _psi_pos(x):
    acc = 0.0
    while x < 30.0:
        acc -= 1.0 / x
        x += 1.0
    s = sum(b / (2 * (k + 1) * x ** (2 * (k + 1))) for k, b in enumerate(B2K))
    return acc + math.log(x) - 0.5 / x - s


def digamma64(x):
    x = float(x)
    if x == 0:
        return math.copysign(INF, -x)
    if x < 0:
        if x == math.trunc(x):
            return NAN
        r = x - math.trunc(x)
        return _psi_pos(1.0 - x) - math.pi / math.tan(math.pi * r)
    return x if math.isinf(x) or math.isnan(x) else _psi_pos(x)


def trigamma64(x):
    x = float(x)
    sign, acc = 1.0, 0.0
    if x < 0.5:
        sign, acc, x = -1.0, -(math.pi / math.sin(math.pi * (x - math.trunc(x)))) ** 2, 1.0 - x
    while x < 30.0:
        acc += 1.0 / (x * x)
        x += 1.0
    s = sum(b / x ** (2 * k + 3) for k, b in enumerate(B2K))
    return sign * (acc + 1.0 / x + 0.5 / (x * x) + s)


def erfinv64(x):
    x = float(x)
    if abs(x) >= 1:
        return math.copysign(INF, x) if abs(x) == 1 else NAN
    a = abs(x)
    y = math.sqrt(-math.log((1 - a) * (1 + a)))                   # a start above the root; Newton from there
    y = min(y, 0.9 * a + 0.1) if a < 0.5 else y
    for _ in range(60):
        d = (1 - a) - math.erfc(y) if a > 0.5 else math.erf(y) - a
        step = d * math.sqrt(math.pi) / 2 * math.exp(y * y)
        y -= step
        if abs(step) <= 1e-17 * y:
            break
    return math.copysign(y, x)


def vec(fn):
    return np.vectorize(fn, otypes=[F64])


REF = {"lgamma": vec(lambda v: math.lgamma(v) if v > 0 or v != math.trunc(v) else INF),   # math raises at poles
       "digamma": vec(digamma64), "erfinv": vec(erfinv64)}


def ulps(got, want):
    """|got - want| in units of the float32 spacing at want."""
    return np.abs(got.astype(F64) - want) / np.spacing(np.abs(want).astype(np.float32)).astype(F64)


def run(name, x):
    x = np.asarray(x, dtype=np.float32)
    got = getattr(tlgpu.tensor(x), name)().numpy()
    np.testing.assert_array_equal(getattr(tlgpu, name)(tlgpu.tensor(x)).numpy().view(np.uint32), got.view(np.uint32))
    return got, REF[name](x.astype(F64))


def logu(lo, hi, n):
    return np.exp(R.uniform(math.log(lo), math.log(hi), n))


def test_lgamma_accuracy():
    x = np.concatenate([logu(1e-6, 1e6, 4000), R.uniform(0, 12, 2000)])
    got, want = run("lgamma", x)
    far = np.abs(want) > 0.1                                       # lgamma's roots at 1 and 2: absolute error
    assert ulps(got[far], want[far]).max() <= 4
    assert np.abs(got - want).max() <= 4 * np.spacing(np.float32(8.0)) + 1e-6 * np.abs(want).max()
    x = -logu(1e-3, 60, 3000)
    x = x[x != np.trunc(x)]
    got, want = run("lgamma", x)
    assert np.all(np.abs(got - want) <= 1e-6 * np.maximum(np.abs(want), 8.0) + 4e-5 * np.abs(np.log(np.abs(x))))


def test_digamma_accuracy_positive():
    """Relative accuracy everywhere on x > 0, also next to the root x0 = 1.4616 (where summing the recurrence
    would cancel): measured max 2.9 ulps on PoCL."""
    root = 1.4616321449683623
    near = (root + R.uniform(-1e-3, 1e-3, 500)).astype(np.float32)
    x = np.concatenate([logu(1e-6, 1e7, 6000), R.uniform(0, 12, 4000), near, [1, 2, 10, 9.999999, 0.5, 1e-30]])
    got, want = run("digamma", x)
    e = ulps(got, want)
    assert e.max() <= 4, (e.max(), x.astype(np.float32)[np.argmax(e)])


def test_digamma_accuracy_negative():
    """Reflection: psi(1 - x) - pi / tan(pi x); the two terms cancel near psi's negative roots, so the error is
    bounded by a few ulps of the terms' size, not of the result (torch's kernel has the same property)."""
    x = np.concatenate([-logu(1e-4, 1e4, 6000), -np.arange(1, 30) + R.choice([-1, 1], 29) * 1e-3])
    x = x.astype(np.float32)
    x = x[x != np.trunc(x)]
    got, want = run("digamma", x)
    x64 = x.astype(F64)
    scale = np.abs(vec(digamma64)(1 - x64)) + np.abs(math.pi / np.tan(math.pi * (x64 - np.trunc(x64))))
    assert np.all(np.abs(got - want) <= 6 * np.spacing(scale.astype(np.float32)))


def test_erfinv_accuracy():
    """Giles' polynomials and one Newton step: measured max 1.3 ulps on PoCL, also next to +-1 and at tiny x."""
    x = np.concatenate([R.uniform(-1, 1, 6000), 1 - logu(2 ** -24, 1, 3000), -(1 - logu(2 ** -24, 1, 1000)),
                        logu(1e-38, 1, 2000), [np.nextafter(np.float32(1), np.float32(0))]])
    got, want = run("erfinv", x)
    e = ulps(got, want)
    assert e.max() <= 2.5, (e.max(), x.astype(np.float32)[np.argmax(e)])


def test_special_values():
    """torch's: lgamma(0 and negative integers) = inf, lgamma(+-inf) = inf; digamma(+0) = -inf, digamma(-0) = inf,
    NaN at negative integers and -inf; erfinv(+-1) = +-inf, NaN outside [-1, 1]; NaN in, NaN out."""
    x = np.array([0.0, -0.0, -1.0, -2.0, -3.0, 1.0, 2.0, INF, -INF, NAN], dtype=np.float32)
    np.testing.assert_array_equal(T(x).lgamma().numpy(), [INF, INF, INF, INF, INF, 0, 0, INF, INF, NAN])
    np.testing.assert_allclose(T(x).digamma().numpy(), [-INF, INF, NAN, NAN, NAN, -0.5772157, 0.4227843, INF, NAN,
                                                        NAN], rtol=1e-6)
    e = np.array([1.0, -1.0, 1.5, -2.0, INF, -INF, NAN, 0.0, -0.0], dtype=np.float32)
    got = T(e).erfinv().numpy()
    np.testing.assert_array_equal(got, [INF, -INF, NAN, NAN, NAN, NAN, NAN, 0.0, -0.0])
    assert np.signbit(got[-1]) and not np.signbit(got[-2])


def T(a, **kw):
    return tlgpu.tensor(np.asarray(a, dtype=np.float32), **kw)


def test_gradients():
    v = np.concatenate([logu(0.05, 50, 200), -R.uniform(0.05, 0.95, 50) - R.integers(0, 5, 50)]).astype(np.float32)
    x = T(v, requires_grad=True)
    x.lgamma().sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), vec(digamma64)(v.astype(F64)), rtol=1e-5, atol=1e-5)
    x = T(v, requires_grad=True)
    (x.digamma() * 2).sum().backward()                            # trigamma, the kernel's backward helper
    want = 2 * vec(trigamma64)(v.astype(F64))                    # measured max 6.4 ulps on PoCL
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6, atol=0)
    u = R.uniform(-0.999, 0.999, 300).astype(np.float32)
    x = T(u, requires_grad=True)
    tlgpu.erfinv(x).backward(T(np.full(300, 3.0)))
    y = vec(erfinv64)(u.astype(F64))
    np.testing.assert_allclose(x.grad.numpy(), 3 * math.sqrt(math.pi) / 2 * np.exp(y * y), rtol=2e-6)


@pytest.mark.parametrize("dt,tdt,rtol", [(np.float16, tlgpu.float16, 1e-3), (ml_dtypes.bfloat16, tlgpu.bfloat16,
                                                                                8e-3)], ids=["float16", "bfloat16"])
def test_half_dtypes(dt, tdt, rtol):
    """Computed in float32 and rounded once: within half an ulp of the half dtype."""
    for name, lo, hi in (("lgamma", 0.1, 8), ("digamma", 0.1, 8), ("erfinv", -0.99, 0.99)):
        x = R.uniform(lo, hi, (5, 33)).astype(dt)
        got = getattr(tlgpu.tensor(x), name)()
        assert got.dtype == tdt, name
        want = REF[name](x.astype(F64))
        np.testing.assert_allclose(got.numpy().astype(F64), want, rtol=rtol, atol=2e-3 if name != "erfinv" else 1e-6,
                                   err_msg=name)


def test_views_and_int32():
    a = R.uniform(0.5, 5, (6, 8)).astype(np.float32)
    t = T(a)
    for name in ("lgamma", "digamma", "erfinv"):
        v = (t * 0.1) if name == "erfinv" else t
        np.testing.assert_array_equal(getattr(v.T, name)().numpy(), getattr(v, name)().numpy().T)
    i = tlgpu.tensor(np.arange(1, 7, dtype=np.int32))
    got = i.lgamma()
    assert got.dtype == tlgpu.float32
    np.testing.assert_allclose(got.numpy(), [math.lgamma(k) for k in range(1, 7)], rtol=1e-6, atol=1e-6)


def test_jit_fuses_the_special_ops():
    def f(x):
        return x.abs().add(0.5).lgamma() + (x.abs() + 0.25).digamma() * 0.5 + (x * 0.3).tanh().erfinv()
    jf = tlgpu.jit(f)
    exact = tlgpu.device().type == "cpu"
    for _ in range(3):                                             # eager, trace, replays
        x = R.standard_normal((7, 37)).astype(np.float32)
        want, got = f(T(x)).numpy(), jf(T(x)).numpy()
        if exact:
            np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5)
    assert len(jf.commands()) == 1 and jf.commands()[0].startswith("fused(")
