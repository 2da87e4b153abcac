"""Elementwise ops on float16, bfloat16 and uint8 with PyTorch's promotion (issue 26): half with half stays
half (computed in float32, rounded once on store), float16 with bfloat16 or float32 gives float32, uint8 with
a float gives float, uint8 with int32 gives int32; Python scalars do not promote. Results against numpy /
ml_dtypes: the float32 result of the widened inputs, rounded to the result dtype, bit for bit (transcendental
functions within a float32 ulp before rounding, so within one half ulp after)."""
import warnings

import ml_dtypes
import numpy as np
import pytest

import tlgpu

BF16 = np.dtype(ml_dtypes.bfloat16)
F16, F32, I32, U8 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.uint8)


def cast(a, dt):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return np.asarray(a).astype(dt)


def data(dt, shape, seed):
    rng = np.random.default_rng(seed)
    if dt == U8:
        return rng.integers(0, 256, shape).astype(np.uint8)
    if dt == I32:
        return rng.integers(-1000, 1000, shape).astype(np.int32)
    return cast(rng.standard_normal(shape).astype(np.float32) * 4, dt)


PROMOTE = [(F16, F16, F16), (BF16, BF16, BF16), (F16, BF16, F32), (F16, F32, F32), (BF16, F32, F32),
           (U8, F16, F16), (U8, BF16, BF16), (U8, F32, F32), (U8, U8, U8), (U8, I32, I32), (I32, F16, F16)]


@pytest.mark.parametrize("da,db,want", PROMOTE, ids=lambda d: str(d))
@pytest.mark.parametrize("op", ["add", "sub", "mul", "maximum"])
def test_binary_promotion_matches_numpy_rounding(da, db, want, op):
    a, b = data(da, (5, 7), 1), data(db, (7,), 2)                 # broadcast too
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    got = {"add": lambda: ta + tb, "sub": lambda: ta - tb, "mul": lambda: ta * tb,
           "maximum": lambda: tlgpu.maximum(ta, tb)}[op]()
    assert got.dtype == want
    fa, fb = a.astype(np.float64), b.astype(np.float64)
    ref = {"add": fa + fb, "sub": fa - fb, "mul": fa * fb, "maximum": np.maximum(fa, fb)}[op]
    if want in (U8, I32):                                          # integers wrap like torch's
        assert np.array_equal(got.numpy(), ref.astype(np.int64).astype(want))
    else:
        assert np.array_equal(got.numpy().view(np.uint8), cast(ref.astype(np.float32), want).view(np.uint8))


@pytest.mark.parametrize("dt", [F16, BF16], ids=str)
def test_scalars_do_not_promote(dt):
    x = data(dt, (6,), 3)
    t = tlgpu.tensor(x)
    for got, ref in ((t * 2.5, x.astype(np.float32) * 2.5), (t + 1, x.astype(np.float32) + 1),
                     (1.0 - t, 1.0 - x.astype(np.float32)), (t / 3, x.astype(np.float32) / 3)):
        assert got.dtype == dt
        np.testing.assert_array_equal(got.numpy().view(np.uint16), cast(ref.astype(np.float32), dt).view(np.uint16))
    u = tlgpu.tensor(np.array([250, 3, 7], np.uint8))
    assert (u + 10).dtype == U8 and (u + 10).tolist() == [4, 13, 17]      # wraps, as torch's uint8
    assert (u * 0.5).dtype == F32 and (u * 0.5).tolist() == [125.0, 1.5, 3.5]
    assert (u / 2).dtype == F32 and (u > 5).dtype == F32


@pytest.mark.parametrize("dt", [F16, BF16], ids=str)
@pytest.mark.parametrize("fn", ["exp", "tanh", "sigmoid", "sqrt", "gelu", "silu", "log"])
def test_unary_in_half_within_one_ulp(dt, fn):
    x = np.abs(data(dt, (64,), 4)) + cast(0.01, dt)
    got = getattr(tlgpu.tensor(x), fn)()
    assert got.dtype == dt
    f = x.astype(np.float64)
    ref = {"exp": np.exp(f), "tanh": np.tanh(f), "sigmoid": 1 / (1 + np.exp(-f)), "sqrt": np.sqrt(f),
           "gelu": 0.5 * f * (1 + np.vectorize(__import__("math").erf)(f / np.sqrt(2))), "silu": f / (1 + np.exp(-f)),
           "log": np.log(f)}[fn]
    ulp = {F16: 2.0 ** -10, BF16: 2.0 ** -7}[dt]
    np.testing.assert_allclose(got.numpy().astype(np.float64), ref, rtol=ulp, atol=1e-6)


def test_comparisons_and_where_with_halves():
    a, b = data(F16, (9,), 5), data(F16, (9,), 6)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    assert (ta < tb).dtype == F32 and np.array_equal((ta < tb).numpy(), (a < b).astype(np.float32))
    w = tlgpu.where(ta > 0, ta, tb)                   # the float32 mask does not promote the result
    assert w.dtype == F16 and np.array_equal(w.numpy(), np.where(a > 0, a, b))


def test_in_place_keeps_the_target_dtype():
    a, b = data(F16, (4, 3), 7), data(np.float32, (3,), 8)
    t = tlgpu.tensor(a)
    t += tlgpu.tensor(b)                              # float32 result rounded into the float16 target (torch)
    assert t.dtype == F16
    assert np.array_equal(t.numpy(), (a.astype(np.float32) + b).astype(np.float16))
    u = tlgpu.tensor(np.array([1, 2], np.uint8))
    with pytest.raises(TypeError, match="uint8"):
        u.add_(1.5)


def test_uint8_refusals_name_the_op_and_dtype():
    u = tlgpu.tensor(np.array([7, 9], np.uint8))
    for f in (lambda: u // u, lambda: u % 2, lambda: u ** 2):
        with pytest.raises(TypeError, match="uint8"):
            f()


@pytest.mark.parametrize("dt", [F16, BF16], ids=str)
def test_gradients_flow_in_half_and_mixed(dt):
    rng = np.random.default_rng(9)
    x = cast(rng.standard_normal((3, 4)), dt)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    a = tlgpu.tensor(x, requires_grad=True)
    b = tlgpu.tensor(w, requires_grad=True)
    y = (a * a).tanh()                                # stays in dt
    assert y.dtype == dt
    (y * b).sum().backward()                          # y * b is float32: the gradient reaches a in dt
    assert a.grad.dtype == dt and b.grad.dtype == F32
    f = x.astype(np.float64)
    want_a = w * (1 - np.tanh(f * f) ** 2) * 2 * f
    np.testing.assert_allclose(a.grad.numpy().astype(np.float64), want_a, rtol=3e-2, atol=3e-2)
    np.testing.assert_allclose(b.grad.numpy(), np.tanh(f * f), rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("dt", [F16, BF16], ids=str)
def test_reductions_accumulate_in_float32(dt):
    x = cast(np.full(4096, 0.1, np.float32), dt)      # a half accumulator would stall at 256 (float16)
    t = tlgpu.tensor(x)
    s = t.sum()
    assert s.dtype == dt
    assert s.item() == float(cast(np.float32(x.astype(np.float64).sum()), dt))
    assert t.mean().dtype == dt
    ce = tlgpu.nn.functional.cross_entropy(tlgpu.tensor(data(dt, (4, 5), 10)), tlgpu.tensor(np.arange(4, dtype=np.int32)))
    assert ce.dtype == dt
    sm = tlgpu.tensor(data(dt, (3, 5), 11)).softmax(axis=1)
    assert sm.dtype == dt
    np.testing.assert_allclose(sm.sum(axis=1).float().numpy(), 1.0, atol=2e-2)
