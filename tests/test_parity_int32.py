"""int32 arithmetic on the device against numpy's int32: + - * // % (Python's floor rules with negatives),
unary minus, abs, comparisons (float32 masks), mixing with Python ints (int32) and floats (float32), casts,
division by zero, and int32 tensors never requiring grad."""
import operator

import numpy as np
import pytest

import tlgpu

OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
       "mod": operator.mod, "maximum": np.maximum, "minimum": np.minimum}
CMP = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]


def ints(rng, shape, lo=-1000, hi=1000, nonzero=False):
    a = rng.integers(lo, hi, shape).astype(np.int32)
    if nonzero:
        a[a == 0] = 7
    return a


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("sa,sb", [((1025,), (1025,)), ((33, 7), (7,)), ((5, 1), (1, 6)), ((), (4,))])
def test_tensor_tensor_matches_numpy(rng, name, sa, sb):
    fn = OPS[name]
    a, b = ints(rng, sa), ints(rng, sb, -40, 40, nonzero=True)
    tfn = getattr(tlgpu, name) if name in ("maximum", "minimum") else fn
    got = tfn(tlgpu.tensor(a), tlgpu.tensor(b))
    want = fn(a, b)
    assert got.dtype == np.int32 and got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("name", ["add", "sub", "mul", "floordiv", "mod"])
@pytest.mark.parametrize("k", [-7, -1, 1, 3, 100000])
def test_python_int_on_either_side_stays_int32(rng, name, k):
    fn = OPS[name]
    a = ints(rng, (257,), nonzero=True)
    t = tlgpu.tensor(a)
    for got, want in ((fn(t, k), fn(a, np.int32(k))), (fn(k, t), fn(np.int32(k), a))):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got.numpy(), want)


def test_unary_comparisons_and_wrapping(rng):
    a, b = ints(rng, (300,), -5, 5), ints(rng, (300,), -5, 5)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    for got, want in ((-ta, -a), (abs(ta), np.abs(a)), (ta.sign(), np.sign(a)), (ta.relu(), np.maximum(a, 0)),
                      (ta.square(), a * a), (ta.clamp(-2, 3), np.clip(a, -2, 3)), (ta.clamp(min=0), np.clip(a, 0, None))):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got.numpy(), want)
    for op in CMP:
        for got, want in ((op(ta, tb), op(a, b)), (op(ta, 2), op(a, 2)), (op(2, ta), op(2, a))):
            assert got.dtype == np.float32
            np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))
    big = np.array([2 ** 31 - 1, -2 ** 31, 123456789, -2 ** 31], np.int32)
    tb2 = tlgpu.tensor(big)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal((tb2 + 1).numpy(), big + np.int32(1))
        np.testing.assert_array_equal((tb2 * 3).numpy(), big * np.int32(3))
        np.testing.assert_array_equal((-tb2).numpy(), -big)
        np.testing.assert_array_equal((tb2 // -1).numpy(), big // np.int32(-1))


def test_mixing_with_floats_gives_float32(rng):
    a = ints(rng, (50,), -20, 20)
    x = rng.standard_normal(50).astype(np.float32)
    ta, tx = tlgpu.tensor(a), tlgpu.tensor(x, requires_grad=True)
    cases = [(ta * 1.5, a * np.float32(1.5)), (0.5 + ta, np.float32(0.5) + a), (ta + tx, a + x), (tx * ta, x * a),
             (ta / 4, a / np.float32(4)), (ta / ta.clamp(min=1), a / np.maximum(a, 1)), (ta ** 0.5, np.abs(a) ** 0.5 * np.where(a < 0, np.nan, 1)),
             (ta.exp(), np.exp(a.astype(np.float32))), (ta < 0.5, (a < 0.5).astype(np.float32))]
    for got, want in cases:
        assert got.dtype == np.float32
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    y = tx * ta + ta                                   # the float side keeps its graph
    y.backward(tlgpu.ones(50))
    np.testing.assert_array_equal(tx.grad.numpy(), a.astype(np.float32))


def test_int_pow_stays_int32(rng):
    a = ints(rng, (200,), -12, 12)
    e = ints(rng, (200,), 0, 9)
    ta, te = tlgpu.tensor(a), tlgpu.tensor(e)
    with np.errstate(over="ignore"):
        for got, want in ((ta ** te, a ** e), (ta ** 3, a ** np.int32(3)), (2 ** te, np.int32(2) ** e)):
            assert got.dtype == np.int32
            np.testing.assert_array_equal(got.numpy(), want)
    neg = tlgpu.tensor(np.array([1, -1, -1, 2, 0, 5], np.int32)) ** tlgpu.tensor(np.array([-3, -1, -2, -1, -2, -4], np.int32))
    np.testing.assert_array_equal(neg.numpy(), [1, -1, 1, 0, 0, 0])     # truncated like C (numpy raises)
    with pytest.raises(ValueError, match="pow: integers to negative integer powers are not allowed"):
        ta ** -2


def test_division_by_zero_is_defined_or_raises(rng):
    a = ints(rng, (64,))
    z = np.zeros(64, np.int32)
    z[::3] = rng.integers(1, 9, z[::3].shape)
    ta, tz = tlgpu.tensor(a), tlgpu.tensor(z)
    with np.errstate(divide="ignore"):                 # numpy's int32 results for a zero divisor: 0 and 0
        np.testing.assert_array_equal((ta // tz).numpy(), a // z)
        np.testing.assert_array_equal((ta % tz).numpy(), a % z)
    with pytest.raises(ZeroDivisionError, match="floordiv: integer division by zero"):
        ta // 0
    with pytest.raises(ZeroDivisionError, match="mod: integer division by zero"):
        ta % 0
    assert np.isinf((ta / 0).numpy()[a != 0]).all()   # true division is float32: inf like numpy
    with pytest.raises(OverflowError, match="add: Python int operand does not fit int32"):
        ta + 2 ** 40


def test_float_floordiv_and_mod_match_numpy_and_differentiate(rng):
    from gradcheck import check
    x = rng.uniform(-10, 10, (7, 9)).astype(np.float32)
    y = rng.uniform(0.5, 3, (7, 9)).astype(np.float32) * rng.choice([-1, 1], (7, 9)).astype(np.float32)
    tx, ty = tlgpu.tensor(x), tlgpu.tensor(y)
    np.testing.assert_array_equal((tx // ty).numpy(), x // y)
    np.testing.assert_allclose((tx % ty).numpy(), np.remainder(x, y), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((tx % 2.5).numpy(), np.remainder(x, np.float32(2.5)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose((-3.5 % ty).numpy(), np.remainder(np.float32(-3.5), y), rtol=1e-5, atol=1e-5)
    x64 = x.astype(np.float64)
    x64 = np.where(np.abs(np.remainder(x64, y) / y - 0.5) > 0.45, x64 + 0.3 * y, x64)  # keep away from the jumps
    check(lambda a, b: a % b, np.remainder, [x64, y.astype(np.float64)])


def test_inplace_int_ops_and_casts(rng):
    a, b = ints(rng, (40,)), ints(rng, (40,), -9, 9, nonzero=True)
    t = tlgpu.tensor(a)
    t += 3
    t *= tlgpu.tensor(b)
    t //= 4
    t %= 1000
    t -= tlgpu.tensor(b)
    np.testing.assert_array_equal(t.numpy(), (((a + 3) * b) // 4) % 1000 - b)
    with pytest.raises(TypeError, match="float32 result cannot be written in place into an int32"):
        t += 1.5
    x = rng.uniform(-100, 100, 40).astype(np.float32)
    np.testing.assert_array_equal(tlgpu.tensor(x).int().numpy(), x.astype(np.int32))
    np.testing.assert_array_equal(tlgpu.tensor(a).float().numpy(), a.astype(np.float32))


def test_arange_of_ints_is_int32_and_ints_never_require_grad():
    r = tlgpu.arange(-3, 7, 2)
    assert r.dtype == np.int32
    np.testing.assert_array_equal(r.numpy(), np.arange(-3, 7, 2))
    assert tlgpu.arange(5.0).dtype == np.float32
    with pytest.raises(TypeError, match="requires_grad=True needs float32"):
        tlgpu.tensor([1, 2], requires_grad=True)
    x = tlgpu.tensor([1.0, 2.0], requires_grad=True)
    assert not (x * 2).int().requires_grad
    assert not (r * 2).requires_grad and not (r == 1).requires_grad


def test_accuracy_idiom(rng):
    logits = rng.standard_normal((64, 10)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    acc = (tlgpu.tensor(logits).argmax(1) == tlgpu.tensor(y)).float().mean()
    assert acc.dtype == np.float32 and acc.shape == ()
    assert acc.item() == pytest.approx((logits.argmax(1) == y).mean())
