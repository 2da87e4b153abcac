"""Bad input gets a named Python exception, never a crash, a hang or a silent wrong result (issue 11).

One test per fix: each input here used to segfault the interpreter, wrap an int32 value, or return a
result where numpy raises. Valid neighbours of each bad input are checked against numpy on random data,
so a check that refuses everything would fail too."""
import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F
from tlgpu import quant


def ids(*v):
    return tlgpu.tensor(np.array(v, np.int32).reshape(-1))


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---- segfaults ----

def test_cross_entropy_zero_classes_raises(rng):
    with pytest.raises(ValueError, match=r"cross_entropy.*\(4, 0\)"):
        F.cross_entropy(tlgpu.zeros(4, 0), tlgpu.tensor(np.zeros(4, np.int32)))
    with pytest.raises(ValueError, match="cross_entropy"):
        F.cross_entropy(tlgpu.zeros(4, 0, requires_grad=True), ids(0, 1, 2, 3), reduction="none")
    # neighbours: no rows (a NaN mean, as torch) and a real problem, against float64
    assert np.isnan(float(F.cross_entropy(tlgpu.zeros(0, 5), ids())))
    x = rand(rng, 4, 3)
    t = np.array([2, 0, 1, 1], np.int32)
    lp = x - np.log(np.exp(x.astype(np.float64)).sum(1, keepdims=True))
    np.testing.assert_allclose(float(F.cross_entropy(tlgpu.tensor(x), tlgpu.tensor(t))), -lp[range(4), t].mean(),
                               rtol=1e-5)


def test_get_rows_empty_table_raises(rng):
    with pytest.raises(IndexError, match=r"get_rows.*\(0, 4\).*\(2,\)"):
        tlgpu.get_rows(tlgpu.zeros(0, 4), ids(0, 0))
    with pytest.raises(IndexError, match="get_rows"):
        tlgpu.get_rows(tlgpu.zeros(0, 4), [0])
    with pytest.raises(IndexError, match="get_rows"):
        tlgpu.get_rows(tlgpu.zeros(0, 4), 0)
    assert tlgpu.get_rows(tlgpu.zeros(0, 4), ids()).shape == (0, 4)          # no ids: nothing to check


def test_get_rows_device_id_out_of_range_is_nan_not_zero(rng):
    table = rand(rng, 5, 3)
    got = tlgpu.get_rows(tlgpu.tensor(table), ids(4, 7, -1, 0)).numpy()
    np.testing.assert_array_equal(got[[0, 3]], table[[4, 0]])
    assert np.isnan(got[[1, 2]]).all()


def test_q4_0_embedding_empty_table_raises(rng):
    w = quant.quantize_q4_0(np.zeros((0, 32), np.float32))
    with pytest.raises(IndexError, match=r"embedding.*\(0, 32\)"):
        quant.embedding(w, ids(0, 1))
    with pytest.raises(IndexError, match="embedding"):
        quant.embedding(w, 0)
    assert quant.embedding(w, ids()).shape == (0, 32)


def test_q4_0_embedding_device_id_out_of_range_is_nan(rng):
    w = quant.quantize_q4_0(rand(rng, 3, 64))
    ref = w.dequantize().numpy()
    got = quant.embedding(w, ids(2, 3, -5)).numpy()
    np.testing.assert_array_equal(got[0], ref[2])
    assert np.isnan(got[1:]).all()


def test_index_select_backward_on_zero_size_input(rng):
    x = tlgpu.zeros(3, 0, requires_grad=True)
    x.index_select(1, ids()).sum().backward()
    assert x.grad.shape == (3, 0)
    a = rand(rng, 4, 3)                                 # the non-empty neighbour, with a repeated index
    y = tlgpu.tensor(a, requires_grad=True)
    y.index_select(0, ids(1, 1, 3)).sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.array([0, 2, 0, 1], np.float32)[:, None] * np.ones((1, 3)))


# ---- silent wrong results: int32 wrap-around ----

INT32_BAD = [2**31, -2**31 - 1, 2**40, -2**63]


@pytest.mark.parametrize("v", INT32_BAD)
def test_full_int32_out_of_range_raises(v):
    with pytest.raises(OverflowError, match="full.*int32"):
        tlgpu.full((2,), v, dtype=tlgpu.int32)
    with pytest.raises(OverflowError, match="full"):
        tlgpu.full((2,), v)                             # an int value means int32 by default
    with pytest.raises(OverflowError, match="full"):
        tlgpu.full((0, 3), v, dtype=tlgpu.int32)        # checked even when nothing is written


@pytest.mark.parametrize("v", [2**31 - 1, -2**31, 7, -123456789])
def test_full_int32_in_range(v):
    np.testing.assert_array_equal(tlgpu.full((3,), v, dtype=tlgpu.int32).numpy(), np.full(3, v, np.int32))


def test_full_int32_nan_inf():
    with pytest.raises(ValueError, match="full.*NaN"):
        tlgpu.full((2,), float("nan"), dtype=tlgpu.int32)
    for v in (float("inf"), -float("inf"), 3e9):
        with pytest.raises(OverflowError, match="full"):
            tlgpu.full((2,), v, dtype=tlgpu.int32)
    np.testing.assert_array_equal(tlgpu.full((2,), -2.7, dtype=tlgpu.int32).numpy(), [-2, -2])   # truncates


@pytest.mark.parametrize("data", [[2**31], [1, -2**31 - 1], np.array([2**40], np.int64), [2**63],
                                  np.array([2**32], np.uint64), np.array([1e10]), np.array([-3e9], np.float32)])
def test_tensor_int32_out_of_range_raises(data):
    with pytest.raises(OverflowError, match="tensor.*int32"):
        tlgpu.tensor(data, dtype=tlgpu.int32)


def test_tensor_int32_conversions(rng):
    with pytest.raises(OverflowError, match="tensor"):
        tlgpu.tensor([2**31])                           # inferred int32
    with pytest.raises(ValueError, match="tensor.*NaN"):
        tlgpu.tensor([1.0, float("nan")], dtype=tlgpu.int32)
    with pytest.raises(TypeError, match="uint64"):
        tlgpu.tensor(np.array([5], np.uint64))          # unsigned without dtype=: refused as before
    a = rng.integers(-2**31, 2**31, size=50, dtype=np.int64)
    np.testing.assert_array_equal(tlgpu.tensor(a).numpy(), a.astype(np.int32))
    f = rng.uniform(-2e9, 2e9, size=50)
    np.testing.assert_array_equal(tlgpu.tensor(f, dtype=tlgpu.int32).numpy(), f.astype(np.int32))
    u = rng.integers(0, 2**31, size=20, dtype=np.uint64)
    np.testing.assert_array_equal(tlgpu.tensor(u, dtype=tlgpu.int32).numpy(), u.astype(np.int32))
    np.testing.assert_array_equal(tlgpu.tensor(np.array([2**40], np.uint64), dtype=tlgpu.float32).numpy(),
                                  np.float32(2**40))


def test_setitem_int32_out_of_range_raises(rng):
    a = rng.integers(-100, 100, size=4).astype(np.int32)
    t = tlgpu.tensor(a)
    for key, v in [(0, 2**31), (slice(1, 3), -2**31 - 1), (Ellipsis, float("inf"))]:
        with pytest.raises(OverflowError, match="__setitem__"):
            t[key] = v
    with pytest.raises(ValueError, match="__setitem__"):
        t[1] = float("nan")
    with pytest.raises(OverflowError, match="__setitem__"):
        t[0:2] = [1e10, 0]
    np.testing.assert_array_equal(t.numpy(), a)         # nothing was written
    t[2] = 2**31 - 1
    a[2] = 2**31 - 1
    np.testing.assert_array_equal(t.numpy(), a)


def test_fill_int32_out_of_range_raises():
    t = tlgpu.tensor(np.arange(3, dtype=np.int32))
    with pytest.raises(OverflowError):
        t.fill_(2**31)
    np.testing.assert_array_equal(t.numpy(), [0, 1, 2])


def test_arange_int32_overflow_and_bad_bounds():
    with pytest.raises(OverflowError, match="arange"):
        tlgpu.arange(2**31, 2**31 + 3)
    with pytest.raises(OverflowError, match="arange"):
        tlgpu.arange(0, 2**31 + 5, 2**30)               # the last value wraps
    with pytest.raises(ValueError, match="arange"):
        tlgpu.arange(0, float("inf"))
    with pytest.raises(ValueError, match="arange.*length"):
        tlgpu.arange(float("nan"))
    with pytest.raises(ValueError, match="arange"):
        tlgpu.arange(2**40)
    np.testing.assert_array_equal(tlgpu.arange(2**31 - 3, 2**31).numpy(), np.arange(2**31 - 3, 2**31))
    np.testing.assert_array_equal(tlgpu.arange(5, -2**31, -2**29).numpy(), np.arange(5, -2**31, -2**29))


# ---- fancy indices on tensors with a zero-size dim ----

ZERO_CASES = [((3, 0), [5]), ((3, 0), [-4]), ((3, 0), [0, 3]), ((0, 3), [0]), ((0,), [0]), ((2, 0, 4), [[1], [2]])]


@pytest.mark.parametrize("shape,key", ZERO_CASES)
def test_fancy_index_out_of_range_on_zero_size(shape, key):
    with pytest.raises(IndexError):
        np.zeros(shape)[np.array(key)]                  # numpy's rule, which tlgpu follows
    with pytest.raises(IndexError, match=r"__getitem__.*out of range"):
        tlgpu.zeros(*shape)[key]
    with pytest.raises(IndexError, match="__getitem__"):
        tlgpu.zeros(*shape)[tlgpu.tensor(np.array(key, np.int32))]


@pytest.mark.parametrize("shape,key", [((3, 0), [2, -3, 0]), ((3, 0, 2), [[1, 1]]), ((4, 0), [])])
def test_fancy_index_in_range_on_zero_size(shape, key):
    ref = np.zeros(shape, np.float32)[np.array(key, np.int64)]
    got = tlgpu.zeros(*shape)[key].numpy()
    assert got.shape == ref.shape and got.dtype == ref.dtype


def test_index_select_and_gather_out_of_range_on_zero_size(rng):
    with pytest.raises(IndexError, match="index_select"):
        tlgpu.zeros(3, 0).index_select(0, [5])
    with pytest.raises(IndexError, match="index_select"):
        tlgpu.zeros(3, 0).index_select(1, [0])
    with pytest.raises(IndexError, match="gather"):
        tlgpu.zeros(3, 0).gather(1, tlgpu.tensor(np.zeros((3, 2), np.int32)))
    with pytest.raises(IndexError):
        np.take_along_axis(np.zeros((0, 3)), np.zeros((1, 3), np.int64), 0)
    with pytest.raises(IndexError, match="gather"):
        tlgpu.zeros(0, 3).gather(0, tlgpu.tensor(np.zeros((1, 3), np.int32)))
    a = rand(rng, 3, 4)                                 # the neighbour that works, against numpy
    np.testing.assert_array_equal(tlgpu.tensor(a).index_select(1, [3, -4]).numpy(), a[:, [3, -4]])
    assert tlgpu.zeros(3, 0).index_select(0, [2, 0]).shape == (2, 0)


# ---- zero-size tensors count as contiguous where ops require it ----

def test_zero_size_caches_and_optimizer_state(rng):
    assert tlgpu.kv_write(tlgpu.zeros(2, 3, 0), tlgpu.zeros(2, 0), 1).shape == (2, 3, 0)
    assert tlgpu.attention(tlgpu.zeros(2, 0), tlgpu.zeros(1, 3, 0), tlgpu.zeros(1, 3, 0), 2).shape == (2, 0)
    p, g, buf = tlgpu.zeros(3, 0), tlgpu.zeros(3, 0), tlgpu.zeros(3, 0)
    tlgpu._C._sgd_step(p, g, buf, 0.1, 0.9, 0.0, 0.0, False, True)
    with pytest.raises(ValueError, match="sgd"):
        tlgpu._C._sgd_step(p, tlgpu.zeros(0, 3), buf, 0.1, 0.9, 0.0, 0.0, False, True)
    c = rand(rng, 2, 4, 3)                             # the non-empty neighbour
    x = rand(rng, 2, 3)
    out = tlgpu.kv_write(tlgpu.tensor(c), tlgpu.tensor(x), 1).numpy()
    c[:, 1] = x
    np.testing.assert_array_equal(out, c)


# ---- arguments past int32 or non-finite: named errors, not wrap-around or NaN output ----

def test_huge_index_and_axis_arguments(rng):
    a = rand(rng, 3, 2)
    t = tlgpu.tensor(a)
    with pytest.raises(IndexError, match="__getitem__"):
        t[[2**40]]
    with pytest.raises(IndexError, match="index_select"):
        t.index_select(0, [-2**40])
    with pytest.raises(IndexError, match=r"sum: axis 1180591620717411303424"):
        t.sum(axis=2**70)
    with pytest.raises(IndexError, match="kv_write"):
        tlgpu.kv_write(tlgpu.zeros(2, 3, 4), tlgpu.zeros(2, 4), 2**40)
    with pytest.raises(ValueError, match="attention: length"):
        tlgpu.attention(tlgpu.zeros(2, 4), tlgpu.zeros(1, 3, 4), tlgpu.zeros(1, 3, 4), 2**40)
    with pytest.raises(OverflowError, match="cross_entropy: ignore_index"):
        F.cross_entropy(tlgpu.tensor(a), ids(0, 1, 1), ignore_index=2**40)
    np.testing.assert_array_equal(t[[2, -3]].numpy(), a[[2, -3]])
    np.testing.assert_allclose(t.sum(axis=-1).numpy(), a.sum(-1), rtol=1e-6)


@pytest.mark.parametrize("theta", [float("nan"), float("inf"), 0.0, -1.0])
def test_rope_theta_must_be_positive_and_finite(theta):
    with pytest.raises(ValueError, match=r"rope: theta must be positive and finite, got (nan|inf|0|-1)$"):
        tlgpu.rope(tlgpu.zeros(2, 3, 4), [0, 1], theta=theta)


def test_setitem_single_element_needs_a_scalar(rng):
    a = rand(rng, 2, 3)
    t = tlgpu.tensor(a)
    for key, value in [((0, 1), np.ones(1, np.float32)), (1, np.ones((1, 1), np.float32))]:
        b = np.zeros(4, np.float32) if key == 1 else a.copy()
        with pytest.raises(ValueError, match="sequence"):
            b[key] = value                              # numpy's rule
    with pytest.raises(ValueError, match=r"__setitem__: the key selects one element; a value of shape \(1,\)"):
        t[0, 1] = np.ones(1, np.float32)
    with pytest.raises(ValueError, match="__setitem__"):
        tlgpu.zeros(4)[1] = [[2.0]]
    t[0, 1] = tlgpu.tensor(np.float32(7))               # 0-d values, slices and `...` still broadcast
    t[1] = np.ones((1, 3), np.float32)
    a[0, 1] = 7
    a[1] = 1
    np.testing.assert_array_equal(t.numpy(), a)


def test_q4_0_refuses_non_finite_weights_and_non_integer_ids(rng):
    w = rand(rng, 2, 32)
    for bad in (np.nan, np.inf):
        w2 = w.copy()
        w2[1, 5] = bad
        with pytest.raises(ValueError, match=r"quantize_q4_0.*\(2, 32\).*NaN or inf"):
            quant.quantize_q4_0(w2)
    q = quant.quantize_q4_0(w)
    for ids_ in ([1.7], np.array([True, False])):
        with pytest.raises(IndexError, match="embedding: ids must be integers"):
            quant.embedding(q, ids_)
    with pytest.raises(TypeError, match="get_rows: ids must be integers, got float"):
        tlgpu.get_rows(tlgpu.tensor(w), [1.7])
    np.testing.assert_array_equal(quant.embedding(q, np.array([1, 0], np.int64)).numpy(),
                                  q.dequantize().numpy()[[1, 0]])
    np.testing.assert_array_equal(tlgpu.get_rows(tlgpu.tensor(w), [np.int64(1)]).numpy(), w[[1]])


def test_creation_requires_grad_needs_float32(rng):
    for make in (lambda: tlgpu.zeros(2, 3, dtype=tlgpu.int32, requires_grad=True),
                 lambda: tlgpu.full((2,), 3, requires_grad=True),
                 lambda: tlgpu.tensor([1, 2], requires_grad=True)):
        with pytest.raises(TypeError, match=r"^(zeros|full|tensor): requires_grad=True needs float32"):
            make()
    a = rand(rng, 2, 3)
    x = tlgpu.tensor(a, requires_grad=True)
    assert x.requires_grad and x.is_leaf and tlgpu.randn(2, requires_grad=True).requires_grad
    (x * x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * a, rtol=1e-6)


def test_bad_input_is_refused_before_anything_is_enqueued(rng):
    """The checks come first: a refused call leaves no command behind (stream_stats counts every enqueue)."""
    ids_view = tlgpu.tensor(rng.integers(0, 3, (2, 4)).astype(np.int32))[:, ::2]   # not contiguous: a copy
    args = dict(x=tlgpu.zeros(4, 0), t=ids(0, 1, 2, 3), table=tlgpu.zeros(0, 4), i32=tlgpu.zeros(3, dtype=tlgpu.int32),
                q=quant.quantize_q4_0(np.zeros((0, 32), np.float32)), cache=tlgpu.zeros(2, 3, 4),
                row=tlgpu.tensor(rand(rng, 2, 4)), x3=tlgpu.tensor(rand(rng, 2, 3, 4)), a=tlgpu.tensor(rand(rng, 2, 3)))
    calls = [
        (IndexError, lambda: tlgpu.get_rows(args["table"], ids_view)),
        (IndexError, lambda: quant.embedding(args["q"], ids_view)),
        (ValueError, lambda: F.cross_entropy(args["x"], args["t"])),
        (OverflowError, lambda: tlgpu.full((2,), 2**31)),
        (ValueError, lambda: tlgpu.arange(0.5, 3, dtype=tlgpu.int32)),
        (OverflowError, lambda: args["i32"].__setitem__(0, 2**31)),
        (IndexError, lambda: tlgpu.kv_write(args["cache"], args["row"], 3)),
        (ValueError, lambda: tlgpu.rope(args["x3"], [0, 1], theta=float("inf"))),
        (ValueError, lambda: args["a"] @ args["a"]),
    ]
    tlgpu.synchronize()
    for exc, call in calls:
        tlgpu.reset_stream_stats()
        with pytest.raises(exc):
            call()
        assert tlgpu.stream_stats()["enqueued"] == 0


def test_fill_nan_into_int32_is_a_value_error():
    t = tlgpu.arange(4)
    with pytest.raises(ValueError, match="NaN"):
        t.fill_(float("nan"))
    np.testing.assert_array_equal(t.numpy(), np.arange(4, dtype=np.int32))   # untouched


def test_contiguous_of_a_view_keeps_the_graph(rng):
    a = rng.standard_normal((3, 5)).astype(np.float32)
    x = tlgpu.tensor(a, requires_grad=True)
    y = x.T.contiguous()
    assert y.requires_grad and y.is_contiguous()
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * a, rtol=1e-6)


def test_zero_size_tensors_are_contiguous():
    assert tlgpu.zeros(3, 0).is_contiguous() and np.zeros((3, 0)).flags.c_contiguous
