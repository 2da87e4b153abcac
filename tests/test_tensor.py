"""Tensor creation, dtype conversion rules, numpy round trips, attributes and the value-reading protocols."""
import pickle

import numpy as np
import pytest

import tlgpu


@pytest.mark.parametrize("shape", [(), (1,), (7,), (33, 5), (2, 3, 4), (1025,), (2, 1, 3, 1, 2)])
def test_round_trip_exact(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    t = tlgpu.tensor(x)
    assert t.shape == shape and t.ndim == len(shape) and t.numel() == x.size and t.dtype == np.float32
    got = t.numpy()
    assert got.dtype == np.float32 and got.shape == shape
    np.testing.assert_array_equal(got, x)
    i = rng.integers(-2**31, 2**31 - 1, shape, dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(tlgpu.from_numpy(i).numpy(), i)


def test_non_contiguous_numpy_input(rng):
    x = rng.standard_normal((6, 8)).astype(np.float32)
    for view in (x.T, x[::2, 1::3], x[:, ::-1], np.broadcast_to(x[0], (3, 8))):
        np.testing.assert_array_equal(tlgpu.tensor(view).numpy(), view)
        np.testing.assert_array_equal(tlgpu.from_numpy(view).numpy(), view)


def test_dtype_conversions(rng):
    x64 = rng.standard_normal(10)
    t = tlgpu.tensor(x64)
    assert t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), x64.astype(np.float32))
    i64 = rng.integers(-1000, 1000, 10)
    assert tlgpu.tensor(i64).dtype == np.int32
    np.testing.assert_array_equal(tlgpu.tensor(i64).numpy(), i64)
    assert tlgpu.tensor([1, 2, 3]).dtype == np.int32
    assert tlgpu.tensor([1.0, 2]).dtype == np.float32
    assert tlgpu.tensor(3.5).shape == () and tlgpu.tensor(3.5).item() == 3.5
    assert tlgpu.tensor([1, 2], dtype=np.float32).dtype == np.float32
    assert tlgpu.tensor([1.7, -2.7], dtype="int32").tolist() == [1, -2]
    assert tlgpu.tensor([[1, 2]], dtype=tlgpu.float32).tolist() == [[1.0, 2.0]]


def test_dtype_refusals():
    with pytest.raises(OverflowError, match="does not fit int32"):
        tlgpu.tensor(np.array([2**31], dtype=np.int64))
    with pytest.raises(TypeError, match="not supported"):    # uint8 is kept (tests/test_dtypes.py); int16 is not
        tlgpu.tensor(np.array([1, 2], dtype=np.int16))
    with pytest.raises(TypeError, match="not supported"):
        tlgpu.tensor(np.array([1 + 2j]))
    with pytest.raises(TypeError, match="unsupported dtype"):
        tlgpu.zeros(3, dtype=np.float64)
    with pytest.raises(TypeError, match="from_numpy: expected a numpy array"):
        tlgpu.from_numpy([1.0])
    with pytest.raises(ValueError, match="at most 8"):
        tlgpu.zeros(*([1] * 9))
    with pytest.raises(ValueError, match="negative dimension"):
        tlgpu.zeros(2, -1)


def test_factories(rng):
    np.testing.assert_array_equal(tlgpu.zeros(2, 3).numpy(), np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(tlgpu.ones((2, 3)).numpy(), np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(tlgpu.full((4,), -2.5).numpy(), np.full(4, -2.5, np.float32))
    assert tlgpu.full((2,), 7).dtype == np.int32 and tlgpu.full((2,), 7).tolist() == [7, 7]
    assert tlgpu.zeros(3, dtype=np.int32).dtype == np.int32
    assert tlgpu.empty(5).shape == (5,)
    np.testing.assert_array_equal(tlgpu.arange(7).numpy(), np.arange(7))
    np.testing.assert_array_equal(tlgpu.arange(2, 11, 3).numpy(), np.arange(2, 11, 3))
    np.testing.assert_allclose(tlgpu.arange(0, 1, 0.1).numpy(), np.arange(0, 1, 0.1), atol=1e-6)
    np.testing.assert_array_equal(tlgpu.arange(5, 0, -2).numpy(), np.arange(5, 0, -2))
    assert tlgpu.arange(3, 1).shape == (0,)
    x = tlgpu.tensor(rng.standard_normal((3, 2)).astype(np.float32))
    for like, val in [(tlgpu.zeros_like, 0), (tlgpu.ones_like, 1)]:
        y = like(x)
        assert y.shape == (3, 2) and y.dtype == np.float32 and (y.numpy() == val).all()
    assert tlgpu.full_like(x, 4.0).tolist() == [[4.0] * 2] * 3
    assert tlgpu.empty_like(x).shape == (3, 2)
    with pytest.raises(ValueError, match="step must not be zero"):
        tlgpu.arange(0, 3, 0)


def test_scalar_protocols():
    t = tlgpu.tensor([[2.5]])
    assert float(t) == 2.5 and int(t) == 2 and bool(t) is True and t.item() == 2.5
    assert bool(tlgpu.tensor([0.0])) is False
    assert tlgpu.tensor([3]).item() == 3 and isinstance(tlgpu.tensor([3]).item(), int)
    with pytest.raises(ValueError, match=r"bool\(\): only one-element tensors.*\(2,\)"):
        bool(tlgpu.zeros(2))
    with pytest.raises(ValueError, match="item"):
        tlgpu.zeros(2, 2).item()
    assert len(tlgpu.zeros(4, 2)) == 4
    with pytest.raises(TypeError, match="len"):
        len(tlgpu.tensor(1.0))


def test_numpy_interop_and_tolist(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    t = tlgpu.tensor(x)
    np.testing.assert_array_equal(np.asarray(t), x)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert t.tolist() == x.tolist()
    assert t.to_numpy() is not t.to_numpy()


def test_attributes_and_repr(rng):
    t = tlgpu.tensor(rng.standard_normal((2, 3)).astype(np.float32))
    assert t.is_contiguous() and t.stride() == (3, 1) and t.is_leaf and t.grad is None and not t.requires_grad
    r = repr(t)
    assert r.startswith("tensor(") and "shape=(2, 3)" in r and "float32" in r
    tlgpu.reset_stream_stats()
    assert "shape=(0, 2)" in repr(tlgpu.zeros(0, 2))
    assert tlgpu.stream_stats()["waits"] == 0          # zero-size: nothing to read
    t.requires_grad = True
    assert t.requires_grad and "requires_grad=True" in repr(t)
    with pytest.raises(TypeError, match="float32"):
        tlgpu.zeros(2, dtype=np.int32).requires_grad = True
    assert tlgpu.tensor([1.0], requires_grad=True).requires_grad
    assert hash(t) != hash(tlgpu.tensor([1.0])) and {t: 1}[t] == 1


def test_pickle_round_trip(rng):
    x = rng.standard_normal((4, 3)).astype(np.float32)
    t2 = pickle.loads(pickle.dumps(tlgpu.tensor(x)))
    assert isinstance(t2, tlgpu.Tensor)
    np.testing.assert_array_equal(t2.numpy(), x)


def test_views_share_storage_lifetime(rng):
    # a result that outlives its inputs keeps its own storage; dropping inputs frees theirs
    x = rng.standard_normal(1000).astype(np.float32)
    before = tlgpu.memory_stats()["live"]
    a = tlgpu.tensor(x)
    b = a * 2
    del a
    np.testing.assert_array_equal(b.numpy(), x * 2)
    del b
    assert tlgpu.memory_stats()["live"] == before
