"""Elementwise ops against numpy: unary, binary with broadcasting and scalars, comparisons, where/clamp,
in-place ops and their version counter, dtype and shape errors, determinism."""
import numpy as np
import pytest

import tlgpu
from conftest import ODD_SIZES

UNARY = {
    "neg": np.negative, "exp": np.exp, "tanh": np.tanh, "abs": np.abs, "sin": np.sin, "cos": np.cos,
    "square": np.square, "sign": np.sign,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "gelu": lambda x: 0.5 * x * (1 + np.vectorize(__import__("math").erf)(x / np.sqrt(2))),
    "expm1": np.expm1, "erf": np.vectorize(__import__("math").erf),
}
POSITIVE = {"log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "reciprocal": lambda x: 1 / x,
            "log1p": np.log1p}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum,
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("n", ODD_SIZES)
def test_unary(rng, name, n):
    x = rng.standard_normal(n).astype(np.float32) * 3
    got = getattr(tlgpu.tensor(x), name)().numpy()
    np.testing.assert_allclose(got, UNARY[name](x.astype(np.float64)), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name", sorted(POSITIVE))
def test_unary_positive_domain(rng, name):
    x = rng.uniform(0.1, 10, size=(33, 7)).astype(np.float32)
    got = getattr(tlgpu, name)(tlgpu.tensor(x)).numpy()
    np.testing.assert_allclose(got, POSITIVE[name](x.astype(np.float64)), rtol=2e-5)


SHAPE_PAIRS = [((7,), (7,)), ((3, 1025), (1025,)), ((33, 1), (1, 7)), ((2, 3, 4), (3, 1)), ((1,), (5, 4)),
               ((), (4, 3)), ((65537,), ())]


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_binary_broadcast(rng, name, sa, sb):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32) + 3.0
    got = getattr(tlgpu.tensor(a), name)(tlgpu.tensor(b)).numpy()
    want = BINARY[name](a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_operators_and_reflected_scalars(rng):
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.uniform(0.5, 2.0, (4, 5)).astype(np.float32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    cases = [(ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (ta / tb, a / b), (-ta, -a), (abs(ta), abs(a)),
             (2 + ta, 2 + a), (2 - ta, 2 - a), (3 * ta, 3 * a), (1 / tb, 1 / b), (ta - 1.5, a - 1.5),
             (tb ** 2, b ** 2), (tb ** 0.5, b ** 0.5), (2 ** ta, 2.0 ** a), (tb ** tb, b ** b), (+ta, a)]
    for got, want in cases:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_comparisons_are_float_masks(rng):
    a = rng.integers(-3, 3, (6, 7)).astype(np.float32)
    b = rng.integers(-3, 3, (7,)).astype(np.float32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    for got, want in [(ta < tb, a < b), (ta <= tb, a <= b), (ta > tb, a > b), (ta >= tb, a >= b),
                      (ta == tb, a == b), (ta != tb, a != b), (ta > 0, a > 0), (1 < ta, 1 < a)]:
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))


def test_where_clamp_maximum(rng):
    c = (rng.random((5, 6)) > 0.5).astype(np.float32)
    x = rng.standard_normal((5, 6)).astype(np.float32)
    y = rng.standard_normal((6,)).astype(np.float32)
    np.testing.assert_array_equal(tlgpu.where(tlgpu.tensor(c), tlgpu.tensor(x), tlgpu.tensor(y)).numpy(),
                                  np.where(c != 0, x, y))
    np.testing.assert_array_equal(tlgpu.where(tlgpu.tensor(c), tlgpu.tensor(x), 0.0).numpy(), np.where(c != 0, x, 0))
    t = tlgpu.tensor(x)
    np.testing.assert_array_equal(t.clamp(-0.5, 0.25).numpy(), np.clip(x, -0.5, 0.25))
    np.testing.assert_array_equal(t.clamp(min=0.1).numpy(), np.maximum(x, 0.1))
    np.testing.assert_array_equal(t.clamp(max=0.1).numpy(), np.minimum(x, 0.1))
    np.testing.assert_array_equal(tlgpu.maximum(t, 0.0).numpy(), np.maximum(x, 0))
    np.testing.assert_array_equal(tlgpu.minimum(0.0, t).numpy(), np.minimum(0, x))


def test_nan_propagates_in_maximum():
    a = tlgpu.tensor([np.nan, 1.0, 2.0])
    b = tlgpu.tensor([0.0, np.nan, 1.0])
    np.testing.assert_array_equal(tlgpu.maximum(a, b).numpy(), np.maximum([np.nan, 1, 2], [0, np.nan, 1]))


@pytest.mark.parametrize("n", [7, 1025])
def test_nan_propagates_in_relu_clamp_minimum(rng, n):
    """numpy's rules: NaN in, NaN out (fmax/fmin would return the other operand). n = 1025 also runs the
    float4 path and its ragged tail; the strided view runs the broadcasting kernel."""
    x = rng.standard_normal(n).astype(np.float32) * 3
    x[rng.random(n) < 0.3] = np.nan
    lo = rng.standard_normal(n).astype(np.float32) - 1
    lo[rng.random(n) < 0.2] = np.nan
    t, tlo = tlgpu.tensor(x), tlgpu.tensor(lo)
    cases = [(t.relu(), np.maximum(x, 0)), (t[::2].relu(), np.maximum(x[::2], 0)),
             (t.clamp(-0.5, 0.5), np.clip(x, -0.5, 0.5)), (t.clamp(min=0.0), np.clip(x, 0, None)),
             (t.clamp(max=0.25), np.clip(x, None, 0.25)), (t.clamp(tlo, 1.0), np.clip(x, lo, 1.0)),
             (t.clamp(max=float("nan")), np.minimum(x, np.nan)),
             (tlgpu.maximum(t, tlo), np.maximum(x, lo)), (tlgpu.minimum(tlo, t), np.minimum(lo, x)),
             (tlgpu.minimum(t[1:], tlo[:-1]), np.minimum(x[1:], lo[:-1]))]
    for got, want in cases:
        np.testing.assert_array_equal(got.numpy(), want)


def test_failed_checks_enqueue_nothing():
    a, b, c = tlgpu.zeros(2, 3), tlgpu.zeros(4), tlgpu.zeros(3, 3)
    ai = tlgpu.zeros(2, 3, dtype=np.int32)              # an int32 operand is cast only after the checks
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    for fn in (lambda: a + b, lambda: a.clamp(b), lambda: tlgpu.where(a, 1.0, b), lambda: a.add_(c),
               lambda: tlgpu.maximum(a, b), lambda: ai + b, lambda: ai / b, lambda: b.clamp(ai)):
        with pytest.raises(ValueError, match=r"shapes (\(2, 3\) and \((4,|3, 3)\)|\(4,\) and \(2, 3\)) cannot be "
                                             r"broadcast together"):
            fn()
    assert tlgpu.stream_stats()["enqueued"] == 0


def test_inplace_ops_bump_version(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    y = rng.standard_normal((4,)).astype(np.float32)
    t = tlgpu.tensor(x)
    v0 = t._version
    same = t.add_(tlgpu.tensor(y))
    assert same is t and t._version == v0 + 1
    t.mul_(2.0)
    t.sub_(tlgpu.tensor(y))
    t.div_(4.0)
    t += 1.0
    t *= tlgpu.tensor(y)
    want = (((x + y) * 2 - y) / 4 + 1) * y
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)
    assert t._version == v0 + 6
    t.fill_(3.5)
    np.testing.assert_array_equal(t.numpy(), np.full((3, 4), 3.5, np.float32))
    t.zero_()
    assert not t.numpy().any()
    t.copy_(tlgpu.tensor(y))
    np.testing.assert_array_equal(t.numpy(), np.broadcast_to(y, (3, 4)))
    t.copy_(x)
    np.testing.assert_array_equal(t.numpy(), x)
    assert t._version == v0 + 10


def test_inplace_shape_error():
    t = tlgpu.zeros(3)
    with pytest.raises(ValueError, match=r"add_.*\(3,\).*\(2, 3\)"):
        t.add_(tlgpu.zeros(2, 3))


def test_errors_name_op_and_shapes():
    with pytest.raises(ValueError, match=r"add: shapes \(2, 3\) and \(4,\)"):
        tlgpu.zeros(2, 3) + tlgpu.zeros(4)
    with pytest.raises(TypeError, match=r"add_: the float32 result cannot be written in place into an int32 tensor "
                                        r"of shape \(2,\)"):
        tlgpu.tensor([1, 2]).add_(1.5)
    with pytest.raises(TypeError, match="mul: numpy dtype .*complex"):
        tlgpu.zeros(2) * np.array([1 + 2j, 0])
    with pytest.raises(TypeError, match="expected a Tensor, a numpy array or a Python number"):
        tlgpu.zeros(2).add("x")
    with pytest.raises(TypeError):
        tlgpu.zeros(2) + "x"
    with pytest.raises(TypeError, match="exp: expected a Tensor"):
        tlgpu.exp(3.0)
    with pytest.raises(TypeError, match="modulo"):
        pow(tlgpu.zeros(2), 2, 3)


def test_zero_size_ops_enqueue_nothing():
    a, row = tlgpu.zeros(0, 3), tlgpu.zeros(3)
    tlgpu.reset_stream_stats()
    for r in [a + 1, a * a, a.exp(), tlgpu.where(a, a, a), a.clamp(0, 1), a + row]:
        assert r.shape == (0, 3)
        assert r.numpy().shape == (0, 3)
    a.add_(1.0)
    assert tlgpu.stream_stats()["enqueued"] == 0
    assert tlgpu.zeros(0).numpy().shape == (0,)


def test_casts(rng):
    x = rng.uniform(-100, 100, 50).astype(np.float32)
    t = tlgpu.tensor(x)
    i = t.int()
    assert i.dtype == np.int32
    np.testing.assert_array_equal(i.numpy(), x.astype(np.int32))
    np.testing.assert_array_equal(i.float().numpy(), x.astype(np.int32).astype(np.float32))
    assert t.float() is t


def test_determinism_500_ops(rng):
    x = rng.standard_normal((257,)).astype(np.float32)
    y = rng.standard_normal((3, 257)).astype(np.float32)

    def program():
        a, b = tlgpu.tensor(x), tlgpu.tensor(y)
        for i in range(100):
            a = (a * 0.9 + b).tanh()
            b = b - a * 0.01
            a = tlgpu.maximum(a, b.sigmoid() - 0.5)
            b = b.clamp(-3, 3)
            a = a.exp() * 0.1
        return a.numpy(), b.numpy()

    first = program()
    for _ in range(19):
        again = program()
        assert all(np.array_equal(u, v) for u, v in zip(first, again))


def test_inplace_with_overlapping_source_matches_numpy(rng):
    x = rng.standard_normal(50).astype(np.float32)
    t, y = tlgpu.tensor(x), x.copy()
    t[1:].add_(t[:-1])
    y[1:] += y[:-1].copy()
    np.testing.assert_array_equal(t.numpy(), y)
    t, y = tlgpu.tensor(x), x.copy()
    t[1:].copy_(t[:-1])
    y[1:] = y[:-1].copy()
    np.testing.assert_array_equal(t.numpy(), y)
    t = tlgpu.tensor(x)
    t.mul_(t)                                        # identical layout: no copy needed, still right
    np.testing.assert_allclose(t.numpy(), x * x)


def test_inplace_on_expanded_view_is_refused():
    e = tlgpu.zeros(4, 1).expand(4, 100)
    for f in (lambda: e.add_(1.0), lambda: e.fill_(2.0), lambda: e.copy_(tlgpu.ones(4, 100)), lambda: e.zero_()):
        with pytest.raises(ValueError, match="expanded view"):
            f()


def test_int_fill_range_checked():
    with pytest.raises(OverflowError, match="does not fit int32"):
        tlgpu.zeros(2, dtype=np.int32).fill_(2**40)


VIEWS = [
    ("transposed", lambda a: a.T, lambda t: t.T),
    ("stepped", lambda a: a[::2, 1::3], lambda t: t[::2, 1::3]),
    ("reversed", lambda a: a[::-1, ::-2], lambda t: t[::-1, ::-2]),
    ("column", lambda a: a[:, 5], lambda t: t[:, 5]),
    ("expanded", lambda a: np.broadcast_to(a[:1], (33, 65)), lambda t: t[:1].expand(33, 65)),
]


@pytest.mark.parametrize("name,np_view,t_view", VIEWS, ids=[v[0] for v in VIEWS])
def test_ops_on_non_contiguous_views(rng, name, np_view, t_view):
    a = rng.standard_normal((33, 65)).astype(np.float32)
    b = rng.standard_normal((33, 65)).astype(np.float32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    va, vb = t_view(ta), t_view(tb)
    assert not va.is_contiguous() or name == "column"
    np.testing.assert_allclose((va * vb + va.exp()).numpy(), np_view(a) * np_view(b) + np.exp(np_view(a)), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(tlgpu.where(va > 0, va, vb).numpy(), np.where(np_view(a) > 0, np_view(a), np_view(b)))
    np.testing.assert_allclose((va - 1.5).tanh().numpy(), np.tanh(np_view(a) - 1.5), rtol=1e-6, atol=1e-7)
    if name != "expanded":                              # in place through a strided view writes the base
        va.mul_(2.0)
        ref = a.copy()
        view = np_view(ref)
        view *= 2.0
        np.testing.assert_allclose(ta.numpy(), ref, rtol=1e-6)


ND_VIEWS = [
    ("contiguous", lambda a: a),
    ("inner_slice", lambda a: a[:, :, 1:4, :]),
    ("permuted", lambda a: a.swapaxes(1, 2) if isinstance(a, np.ndarray) else a.transpose(1, 2)),
    ("outer_step", lambda a: a[::2]),
]


@pytest.mark.parametrize("name,view", ND_VIEWS, ids=[v[0] for v in ND_VIEWS])
def test_4d_layouts_merge_and_match_numpy(rng, name, view):
    """tl_layout_make merges every run of dims that all operands walk as one (a contiguous [N, C, H, W] is one
    run: the contiguous kernel, not the row or strided ones); views that are not one run still match numpy."""
    a = rng.standard_normal((4, 6, 5, 7)).astype(np.float32)
    b = rng.standard_normal(7).astype(np.float32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    va, na = view(ta), view(a)
    np.testing.assert_allclose(va.relu().numpy(), np.maximum(na, 0))
    np.testing.assert_allclose((va * 1.5 + tb).numpy(), na * np.float32(1.5) + b, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(va.tanh().numpy(), np.tanh(na.astype(np.float64)), rtol=2e-5, atol=2e-6)
    if name == "contiguous" and tlgpu.device().type == "cpu":
        relu = tlgpu.jit(lambda t: t.relu())
        for _ in range(3):
            relu(va)
        assert relu.commands() == ["tl_ew_hot_f32"]          # was tl_ew_rows_f32: the dims stayed unmerged


@pytest.mark.parametrize("n", [17, 255, 257, 16 * 255 + 9, 16 * 256, 16 * 256 + 1])
def test_small_launches_match_numpy(rng, n):
    """Launches of fewer items than the work-group size run in groups of 16 on CPU devices (tl_launch_flat):
    contiguous (16 floats an item), hot-op and strided (one element an item) kernels around both edges."""
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    np.testing.assert_allclose((ta * tb).numpy(), a * b, rtol=1e-6)                      # tl_ew_hot_f32
    np.testing.assert_allclose(ta.tanh().numpy(), np.tanh(a.astype(np.float64)), rtol=2e-5, atol=2e-6)
    m = n // 2
    np.testing.assert_allclose((ta[:2 * m:2] + tb[1::2]).numpy(), a[:2 * m:2] + b[1::2], rtol=1e-6)  # strided
    out = tlgpu.zeros(n)
    out[1:].copy_(ta[:-1].exp())
    np.testing.assert_allclose(out.numpy(), np.concatenate([[0], np.exp(a[:-1])]), rtol=1e-5)
