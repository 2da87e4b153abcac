"""matmul / @ / dot / outer against numpy in float64, on shapes that are not multiples of any tile."""
import os

import numpy as np
import pytest

import tlgpu
from tlgpu import _C


def T(x):
    return tlgpu.tensor(np.asarray(x, dtype=np.float32))


def check(got, a, b, op=np.matmul):
    ref = op(np.asarray(a, np.float64), np.asarray(b, np.float64))
    k = np.asarray(a).shape[-1] if np.asarray(a).ndim else 1
    got = got.numpy()
    assert got.dtype == np.float32
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * max(1.0, np.sqrt(k)))


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


MKN = [(1, 1, 1), (7, 33, 5), (33, 1025, 7), (64, 64, 64), (1025, 33, 65), (65, 16, 63), (2, 3, 1), (1, 9, 17)]


@pytest.mark.parametrize("m,k,n", MKN)
def test_2d(rng, m, k, n):
    a, b = randn(rng, m, k), randn(rng, k, n)
    check(T(a) @ T(b), a, b)


def test_method_and_function(rng):
    a, b = randn(rng, 5, 6), randn(rng, 6, 7)
    check(T(a).matmul(T(b)), a, b)
    check(tlgpu.matmul(T(a), T(b)), a, b)


@pytest.mark.parametrize("ba,bb", [(3, 3), (1, 4), (4, 1)])
def test_batched_3d(rng, ba, bb):
    a, b = randn(rng, ba, 17, 33), randn(rng, bb, 33, 9)
    check(T(a) @ T(b), a, b)


def test_3d_times_2d_shared_weight(rng):
    a, w = randn(rng, 5, 31, 20), randn(rng, 20, 66)
    check(T(a) @ T(w), a, w)
    check(T(w.T.copy()) @ T(a.transpose(0, 2, 1).copy()), w.T.copy(), a.transpose(0, 2, 1))


def test_4d_broadcast_batches(rng):
    a, b = randn(rng, 2, 3, 4, 5), randn(rng, 1, 3, 5, 6)
    check(T(a) @ T(b), a, b)
    # batch dims that collapse to three: the host issues one launch per outer index
    a, b = randn(rng, 2, 1, 3, 4, 5), randn(rng, 1, 4, 1, 5, 6)
    check(T(a) @ T(b), a, b)


def test_1d_operands(rng):
    v, m, w = randn(rng, 33), randn(rng, 33, 7), randn(rng, 7, 33)
    check(T(v) @ T(m), v, m)                         # vector-matrix: (7,)
    check(T(w) @ T(v), w, v)                         # matrix-vector: (7,)
    check(T(v) @ T(v), v, v)                         # dot: 0-d
    assert (T(v) @ T(v)).shape == ()
    bm = randn(rng, 3, 33, 5)
    check(T(v) @ T(bm), v, bm)                       # vector @ batch: (3, 5)
    check(T(bm.transpose(0, 2, 1).copy()) @ T(v), bm.transpose(0, 2, 1), v)


def test_dot_and_outer(rng):
    a, b = randn(rng, 1025), randn(rng, 1025)
    d = tlgpu.dot(T(a), T(b))
    assert d.shape == ()
    np.testing.assert_allclose(d.item(), np.dot(a.astype(np.float64), b), rtol=1e-4, atol=1e-3)
    x, y = randn(rng, 7), randn(rng, 65)
    check(T(x).outer(T(y)), x, y, op=np.outer)
    check(tlgpu.outer(T(x), T(y)), x, y, op=np.outer)


def test_zero_size():
    z = (T(np.ones((0, 3))) @ T(np.ones((3, 4)))).numpy()
    assert z.shape == (0, 4)
    r = (T(np.ones((3, 0))) @ T(np.ones((0, 4)))).numpy()  # K == 0: zeros
    assert r.shape == (3, 4) and not r.any()
    assert (T(np.ones((0, 2, 3))) @ T(np.ones((3, 4)))).shape == (0, 2, 4)
    assert tlgpu.dot(T(np.ones(0)), T(np.ones(0))).item() == 0.0
    assert tlgpu.outer(T(np.ones(0)), T(np.ones(3))).shape == (0, 3)


def test_k_zero_after_nonzero_buffer_reuse():
    # a pooled buffer may hold old values: K == 0 must still give zeros
    for _ in range(3):
        (T(np.full((4, 4), 7.0)) @ T(np.ones((4, 4)))).numpy()
        assert not (T(np.ones((4, 0))) @ T(np.ones((0, 4)))).numpy().any()


def test_errors():
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        T(np.ones((2, 3))) @ T(np.ones((4, 5)))
    with pytest.raises(ValueError, match="matmul"):
        T(np.ones((2, 2, 3))) @ T(np.ones((3, 3, 4)))   # batch 2 vs 3
    with pytest.raises(TypeError, match="int32"):
        tlgpu.tensor(np.ones((2, 2), np.int32)) @ T(np.ones((2, 2)))
    with pytest.raises(TypeError, match="int32"):
        T(np.ones((2, 2))) @ tlgpu.tensor(np.ones((2, 2), np.int32))
    with pytest.raises(ValueError, match="0-d"):
        T(np.float32(2.0)) @ T(np.ones(2))
    with pytest.raises(TypeError):
        T(np.ones((2, 2))) @ np.ones((2, 2), np.float32).tolist()
    with pytest.raises(ValueError, match="dot"):
        tlgpu.dot(T(np.ones((2, 2))), T(np.ones(2)))
    with pytest.raises(ValueError, match=r"dot.*\(3,\).*\(4,\)"):
        tlgpu.dot(T(np.ones(3)), T(np.ones(4)))
    with pytest.raises(ValueError, match="outer"):
        tlgpu.outer(T(np.ones((2, 2))), T(np.ones(2)))


@pytest.mark.skipif(os.environ.get("TLGPU_SYNC") == "1", reason="TLGPU_SYNC=1 waits after every op")
def test_lazy_no_waits(rng):
    a, b = T(randn(rng, 40, 50)), T(randn(rng, 50, 30))
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    for _ in range(20):
        c = a @ b
    assert tlgpu.stream_stats()["waits"] == 0
    c.numpy()
    assert tlgpu.stream_stats()["waits"] == 1


def _view(t, shape, strides, offset=0):
    if hasattr(_C, "_matmul_test_view"):
        return _C._matmul_test_view(t, shape, strides, offset)
    pytest.skip("tlgpu._C has no _matmul_test_view: the extension was built without TLGPU_TEST_HOOKS=1")


def test_transposed_operands_without_copy(rng):
    m, k, n = 33, 70, 17
    at, bt = randn(rng, k, m), randn(rng, n, k)           # stored transposed
    a = _view(T(at), (m, k), (1, m))
    b = _view(T(bt), (k, n), (1, k))
    assert not a.is_contiguous() and not b.is_contiguous()
    check(a @ b, at.T, bt.T)
    check(T(at.T.copy()) @ b, at.T, bt.T)


def test_strided_batch_and_offset(rng):
    base = randn(rng, 3, 8, 12)
    v = _view(T(base), (3, 4, 9), (96, 24, 1), 2)        # every other row, columns 2..10
    w = randn(rng, 9, 5)
    check(v @ T(w), base[:, ::2, 2:11], w)
    rev = _view(T(base), (3, 8, 12), (-96, 12, 1), 2 * 96)  # batch order reversed: a negative stride
    bw = randn(rng, 12, 6)
    check(rev @ T(bw), base[::-1], bw)
    col = _view(T(base), (8,), (12,), 5)                  # a column as a strided vector
    check(T(w.T.copy()[:, :8]) @ col, w.T[:, :8], base[0, :, 5])


@pytest.mark.skipif(not hasattr(tlgpu.Tensor, "T") and not hasattr(tlgpu.Tensor, "transpose"),
                    reason="the shape family (transpose/.T) has not landed")
def test_x_at_w_T(rng):
    x, w = randn(rng, 9, 20), randn(rng, 13, 20)
    wt = T(w).T if hasattr(tlgpu.Tensor, "T") else T(w).transpose(0, 1)
    check(T(x) @ wt, x, w.T)


def test_repeatable_bits(rng):
    a, b = T(randn(rng, 65, 129)), T(randn(rng, 129, 33))
    first = (a @ b).numpy()
    for _ in range(5):
        assert np.array_equal((a @ b).numpy(), first)


@pytest.mark.parametrize("variant", ["small", "naive"])
def test_fallback_kernels(variant):
    from conftest import run_python
    code = """
import numpy as np, tlgpu
rng = np.random.default_rng(1)
for (m, k, n, b) in [(1, 1, 1, 1), (7, 33, 5, 1), (33, 70, 65, 3), (64, 64, 64, 2)]:
    a, w = rng.standard_normal((b, m, k)), rng.standard_normal((k, n))
    got = (tlgpu.tensor(a) @ tlgpu.tensor(w)).numpy()
    np.testing.assert_allclose(got, a @ w, rtol=1e-4, atol=1e-4)
print("ok")
"""
    r = run_python(code, env={"TLGPU_MATMUL_KERNEL": variant})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
