"""Indexing vs numpy: basic keys give views (nothing enqueued), negative steps, integer-tensor gathers,
__setitem__ (in place, version bump, overlap-safe), index_select/gather, iteration, errors, zero-size."""
import os

import numpy as np
import pytest

import tlgpu
from conftest import ODD_SIZES


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def enqueued():
    return tlgpu.stream_stats()["enqueued"]


def check(t, ref):
    got = t.numpy()
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape, got.dtype, ref.dtype)
    np.testing.assert_array_equal(got, ref)


E = Ellipsis
KEYS = [
    0, -1, 2, slice(None), slice(1, 3), slice(None, None, 2), slice(None, None, -1), slice(-2, None),
    slice(3, 0, -2), slice(5, 100), slice(100, 200), slice(2, 2), (1, 2), (-1, -2, -3), (0, slice(None), 1),
    (slice(None), None, 2), (None,), (None, 0, None), (E,), (E, 1), (1, E), (E, None), (0, E, 0), (E, slice(None, None, -1)),
    (slice(1, None, 2), slice(None, None, -3), slice(3, None, -1)), (None, E, None), (), (slice(None), -1, None),
    (slice(-1, -4, -1), E), (np.int64(1), np.int32(-1)),
]


@pytest.mark.parametrize("key", KEYS, ids=[repr(k) for k in KEYS])
def test_basic_keys_are_views(rng, key):
    a = rand(rng, 4, 5, 6)
    t = tlgpu.tensor(a)
    n0 = enqueued()
    v = t[key]
    assert enqueued() == n0                          # no kernel for a basic index
    ref = a[key]
    check(v, np.asarray(ref, np.float32).reshape(np.shape(ref)))
    check(v * 2 + 1, (np.asarray(ref) * 2 + 1).astype(np.float32))


@pytest.mark.parametrize("n", ODD_SIZES)
def test_slicing_sizes(rng, n):
    a = rand(rng, n, 2)
    t = tlgpu.tensor(a)
    for key in [slice(None, None, -1), slice(1, None, 3), slice(n // 2, None), (slice(None, None, -2), 1), -1]:
        check(t[key], a[key])
    check(t[::-1].T + t.T, a[::-1].T + a.T)
    check(t[::-3].reshape(-1), a[::-3].reshape(-1))


def test_chained_views(rng):
    a = rand(rng, 6, 7, 8)
    t = tlgpu.tensor(a)
    v = t[1:, ::-1][..., 2:7:2].T[::2, None]
    ref = a[1:, ::-1][..., 2:7:2].T[::2, None]
    check(v, ref)
    check(v.reshape(-1), ref.reshape(-1))            # needs a copy: strides do not merge
    check(t[2][3][-1:], a[2][3][-1:])


def test_negative_step_view_writes(rng):
    a = rand(rng, 10)
    t = tlgpu.tensor(a)
    t[::-3] = tlgpu.tensor(np.arange(4, dtype=np.float32))
    a[::-3] = np.arange(4)
    check(t, a)


def test_index_errors(rng):
    t = tlgpu.tensor(rand(rng, 3, 4))
    with pytest.raises(IndexError, match=r"index 3 is out of bounds for dim 0 with size 3"):
        t[3]
    with pytest.raises(IndexError, match="out of bounds"):
        t[0, -5]
    with pytest.raises(IndexError, match=r"too many indices for a tensor of shape \(3, 4\): 3"):
        t[0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        t[..., ...]
    with pytest.raises(IndexError, match="valid indices"):
        t[1.5]
    with pytest.raises(IndexError, match="valid indices"):
        t["a"]
    with pytest.raises(IndexError):
        t[True]
    with pytest.raises(ValueError, match="step cannot be zero"):
        t[::0]
    with pytest.raises(IndexError, match="whole key"):      # two lists: numpy's paired indexing, not offered
        t[[0, 1], [0, 1]]
    with pytest.raises(IndexError, match="too many indices"):
        tlgpu.tensor(1.0)[0]


def test_iteration(rng):
    a = rand(rng, 5, 3)
    t = tlgpu.tensor(a)
    n0 = enqueued()
    rows = list(t)
    assert enqueued() == n0 and len(rows) == 5
    for r, ra in zip(rows, a):
        check(r, ra)
    assert [len(r) for r in t.T] == [5, 5, 5]
    assert list(tlgpu.zeros(0, 2)) == []
    with pytest.raises(TypeError, match="0-d"):
        iter(tlgpu.tensor(2.0)).__next__()
    assert [x.item() for x in tlgpu.tensor(np.arange(4, dtype=np.int32))] == [0, 1, 2, 3]


def test_zero_size(rng):
    a = rand(rng, 4, 3)
    t = tlgpu.tensor(a)
    n0 = enqueued()
    e = t[2:2]
    assert enqueued() == n0
    check(e, a[2:2])
    check(e.reshape(0, 7), a[2:2].reshape(0, 7))
    check(e.T[::-1], a[2:2].T[::-1])
    check(t[:, 5:], a[:, 5:])
    e[:] = 1.0                                       # writes nothing, fails nothing
    z = tlgpu.zeros(0, 5)
    check(z[:, 1:3], np.zeros((0, 2), np.float32))
    check(z[..., None], np.zeros((0, 5, 1), np.float32))


# ---- __setitem__ ----

def test_setitem_scalar_and_version(rng):
    a = rand(rng, 4, 6)
    t = tlgpu.tensor(a)
    view = t[1:3]
    v0 = t._version
    t[1:3, ::2] = 5.0
    a[1:3, ::2] = 5.0
    assert t._version > v0 and view._version == t._version
    check(t, a)
    check(view, a[1:3])
    t[-1, -1] = np.float32(-2)
    a[-1, -1] = -2
    t[0] = 3
    a[0] = 3
    check(t, a)
    i = tlgpu.tensor(np.arange(6, dtype=np.int32))
    i[::2] = 7
    check(i, np.array([7, 1, 7, 3, 7, 5], np.int32))


def test_setitem_tensor_broadcast_and_arraylike(rng):
    a, b = rand(rng, 5, 4), rand(rng, 4)
    t = tlgpu.tensor(a)
    t[1:4] = tlgpu.tensor(b)                         # broadcast over rows
    a[1:4] = b
    check(t, a)
    c = rand(rng, 4, 5)
    t[:, :] = tlgpu.tensor(c).T                      # non-contiguous source
    a[:, :] = c.T
    check(t, a)
    t[0] = [1, 2, 3, 4]                              # array-like, uploaded
    a[0] = [1, 2, 3, 4]
    t[..., 1] = np.arange(5)
    a[..., 1] = np.arange(5)
    t[2:3] = rand(rng, 1, 1, 4) * 0 + 9              # leading size-1 dims of the value are dropped
    a[2:3] = 9
    check(t, a)


def test_setitem_overlap_is_safe(rng):
    a = rand(rng, 1025)
    t = tlgpu.tensor(a)
    t[1:] = t[:-1]
    a[1:] = a[:-1].copy()
    check(t, a)
    m = rand(rng, 33, 33)
    tm = tlgpu.tensor(m)
    tm[:] = tm.T
    check(tm, np.ascontiguousarray(m.T))


def test_setitem_errors(rng):
    t = tlgpu.tensor(rand(rng, 3, 4))
    with pytest.raises(ValueError, match=r"__setitem__: .*\(2, 4\).*\(3,\)"):
        t[:2] = tlgpu.zeros(3)
    t[0] = tlgpu.tensor([1, -2, 3, 4], dtype="int32")           # another dtype converts, as torch's
    assert t[0].tolist() == [1.0, -2.0, 3.0, 4.0] and t.dtype == np.float32
    with pytest.raises(TypeError, match="delete"):
        del t[0]
    with pytest.raises(IndexError):
        t[5] = 1.0
    with pytest.raises(ValueError, match="expanded view"):
        tlgpu.zeros(3, 1).expand(3, 4)[0] = 1.0
    with pytest.raises(TypeError, match="integer-tensor"):
        t[[0, 1]] = 1.0


# ---- integer-tensor indexing, index_select, gather ----

def test_integer_tensor_index(rng):
    a = rand(rng, 6, 3)
    t = tlgpu.tensor(a)
    idx = np.array([5, 0, -1, 2, 2], np.int32)
    check(t[tlgpu.tensor(idx)], a[idx])
    check(t[[1, -6]], a[[1, -6]])
    check(t[np.array([[0, 1], [3, 4]])], a[np.array([[0, 1], [3, 4]])])
    check(t.T[tlgpu.tensor(np.array([2, 0], np.int32))], a.T[[2, 0]])
    check(t[[]], a[np.array([], np.int64)])
    with pytest.raises(IndexError, match=r"index 6 is out of range for dim 0 of shape \(6, 3\)"):
        t[[0, 6]]
    with pytest.raises(IndexError, match="int32"):
        t[tlgpu.tensor(np.array([0.0, 1.0], np.float32))]
    keep = np.array([True, False, True, False, True, False])     # a boolean mask selects rows, as in torch
    np.testing.assert_array_equal(t[keep].numpy(), t.numpy()[keep])


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_index_select(rng, dim):
    a = rand(rng, 4, 5, 6)
    t = tlgpu.tensor(a)
    idx = rng.integers(-4, 4, size=7).astype(np.int32)      # valid for every dim of a and a.T
    check(t.index_select(dim, tlgpu.tensor(idx)), np.take(a, idx, axis=dim))
    check(tlgpu.index_select(t.T, dim, idx), np.take(a.T, idx, axis=dim))   # non-contiguous source
    check(t[:, ::-1].index_select(dim, tlgpu.tensor(idx[::2].copy())), np.take(a[:, ::-1], idx[::2], axis=dim))


@pytest.mark.parametrize("n", ODD_SIZES)
def test_index_select_sizes(rng, n):
    a = rand(rng, n, 2)
    idx = rng.integers(0, n, size=n).astype(np.int32)
    t = tlgpu.tensor(a)
    check(t.index_select(0, tlgpu.tensor(idx)), a[idx])
    ia = rng.integers(-100, 100, size=(3, n)).astype(np.int32)
    check(tlgpu.tensor(ia).index_select(1, tlgpu.tensor(idx[::-1].copy())), ia[:, idx[::-1]])


def test_index_select_checks_and_syncs(rng):
    t = tlgpu.tensor(rand(rng, 4, 3))
    idx = tlgpu.tensor(np.array([0, 4], np.int32))
    r = t.index_select(0, idx)                         # a device index is checked on the device: no wait here
    with pytest.raises(IndexError, match=r"index_select: index 4 is out of range for a dim of size 4"):
        r.numpy()                                      # ... and raised at the next sync point
    with pytest.raises(IndexError, match=r"index_select: index 4 is out of range for dim 0 of shape \(4, 3\)"):
        t.index_select(0, [0, 4])                      # a host index: checked as it is uploaded
    with pytest.raises(IndexError, match="index -4"):
        t.index_select(1, [-4])
    with pytest.raises(TypeError, match="int32"):
        t.index_select(0, tlgpu.zeros(2))
    with pytest.raises(ValueError, match="1-D"):
        t.index_select(0, tlgpu.zeros(2, 2, dtype="int32"))
    with pytest.raises(IndexError, match="index_select: dim 2"):
        t.index_select(2, [0])
    with pytest.raises(IndexError):
        tlgpu.zeros(0, 3).index_select(0, [0])
    check(tlgpu.zeros(0, 3).index_select(1, [0, 2]), np.zeros((0, 2), np.float32))
    check(t.index_select(0, []), np.zeros((0, 3), np.float32))
    w0 = tlgpu.stream_stats()["waits"]
    t.index_select(0, tlgpu.tensor(np.array([1], np.int32)))
    if os.environ.get("TLGPU_SYNC") != "1":          # eager mode waits after every command
        assert tlgpu.stream_stats()["waits"] - w0 == 0   # a device index is checked on the device: no read
    w0 = tlgpu.stream_stats()["waits"]
    x = tlgpu.tensor(rand(rng, 4, 3), requires_grad=True)
    y = x.index_select(0, np.array([3, 1, 3], np.int64))   # a host index is checked where it is: no read
    t[[2, 0]]
    (y * tlgpu.tensor(np.arange(9, dtype=np.float32).reshape(3, 3))).sum().backward()
    if os.environ.get("TLGPU_SYNC") != "1":
        assert tlgpu.stream_stats()["waits"] - w0 == 0
    np.testing.assert_array_equal(x.grad.numpy(), [[0, 0, 0], [3, 4, 5], [0, 0, 0], [6, 8, 10]])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gather_take_along_axis(rng, dim):
    a = rand(rng, 4, 5)
    t = tlgpu.tensor(a)
    shape = list(a.shape)
    shape[dim] = 3
    idx = rng.integers(0, a.shape[dim], size=shape).astype(np.int32)
    check(t.gather(dim, tlgpu.tensor(idx)), np.take_along_axis(a, idx, axis=dim))
    check(tlgpu.gather(t, dim, idx), np.take_along_axis(a, idx, axis=dim))
    am = np.expand_dims(np.argmax(a, axis=dim), dim).astype(np.int32)
    check(t.gather(dim, am), np.take_along_axis(a, am, axis=dim))
    ib = idx[(slice(0, 1),) * 2 if dim == 1 or dim == -1 else (slice(None), slice(0, 1))]
    check(t.gather(dim, ib), np.take_along_axis(a, ib, axis=dim))   # the index's size-1 dims broadcast
    with pytest.raises(ValueError, match="gather"):
        t.gather(dim, tlgpu.zeros(2, 2, 2, dtype="int32"))
    bad = np.full(shape, 99, np.int32)
    bad[0] = 1
    with pytest.raises(IndexError, match="gather: index 99 is out of range"):
        t.gather(dim, bad)                           # a host array is checked at the call, without a wait
    g = t.gather(dim, tlgpu.tensor(bad))             # a device index is checked on the device
    with pytest.raises(IndexError, match="gather: index 99 is out of range for a dim of size"):
        g.numpy()                                    # ... and raises at the next sync point
    check(t.gather(dim, tlgpu.tensor(idx)), np.take_along_axis(a, idx, axis=dim))   # the check word is clear


def test_gather_bad_index_raises_at_synchronize_and_only_once(rng):
    t = tlgpu.tensor(rand(rng, 3, 4))
    out = t.gather(1, tlgpu.tensor(np.array([[0], [-5], [2]], np.int32)))
    with pytest.raises(IndexError, match="index -5 is out of range for a dim of size 4"):
        tlgpu.synchronize()
    got = out.numpy()                                # the error was reported once; the bad row holds 0
    np.testing.assert_array_equal(got[:, 0], [t.numpy()[0, 0], 0.0, t.numpy()[2, 2]])
    neg = t.gather(1, tlgpu.tensor(np.array([[-1], [-4], [0]], np.int32)))   # negative: from the end
    np.testing.assert_array_equal(neg.numpy()[:, 0], t.numpy()[[0, 1, 2], [3, 0, 0]])


def gather_grad_ref(a_shape, idx, g, dim):
    """float64 scatter-add: the gradient of take_along_axis(a, idx, dim) for an upstream g (idx broadcast)."""
    out = np.zeros(a_shape, np.float64)
    idx = np.broadcast_to(idx, g.shape)
    for pos in np.ndindex(*g.shape):
        src = list(pos)
        src[dim] = idx[pos] % a_shape[dim]
        src = tuple(0 if a_shape[k] == 1 else src[k] for k in range(len(src)))
        out[src] += g[pos]
    return out


@pytest.mark.parametrize("a_shape,idx_shape,dim", [
    ((6, 5), (6, 1), 1),          # Q(s, a): one action per row
    ((6, 5), (6, 7), 1),          # repeated picks: a scatter-add
    ((4, 5, 3), (4, 2, 3), 1),
    ((4, 5, 3), (2, 1, 3), 0),    # the index broadcasts along dim 1
    ((4, 1, 3), (4, 2, 3), 2),    # the input broadcasts along dim 1
    ((7,), (9,), 0),
    ((4, 5), (4, 0), 1),          # an empty index: a zero gradient
])
def test_gather_backward_matches_float64_scatter_add(rng, a_shape, idx_shape, dim):
    a = rand(rng, *a_shape)
    idx = rng.integers(-a_shape[dim], a_shape[dim], size=idx_shape).astype(np.int32)
    x = tlgpu.tensor(a, requires_grad=True)
    y = x.gather(dim, idx)
    np.testing.assert_array_equal(y.numpy(), np.take_along_axis(a, idx % a_shape[dim], axis=dim))
    g = rng.standard_normal(y.shape).astype(np.float32)
    (y * tlgpu.tensor(g)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), gather_grad_ref(a_shape, idx, g.astype(np.float64), dim),
                               rtol=1e-5, atol=1e-5)
    assert "GatherBackward" in repr(y.grad_fn)


def test_gather_forward_and_backward_wait_for_nothing_and_repeat_bit_identically(rng):
    q = tlgpu.tensor(rand(rng, 256, 18), requires_grad=True)
    acts = tlgpu.tensor(rng.integers(0, 18, size=(256, 1)).astype(np.int32))
    grads = []
    for _ in range(2):
        q.grad = None
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        v = q.gather(1, acts)
        (v * v).sum().backward()
        if os.environ.get("TLGPU_SYNC") != "1":
            assert tlgpu.stream_stats()["waits"] == 0        # no host wait in forward or backward
        grads.append(q.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    want = np.zeros((256, 18))
    qa, ia = q.numpy(), acts.numpy()[:, 0]
    want[np.arange(256), ia] = 2 * qa[np.arange(256), ia]
    np.testing.assert_allclose(grads[0], want, rtol=1e-6)


def test_gather_backward_refuses_a_modified_index(rng):
    x = tlgpu.tensor(rand(rng, 3, 4), requires_grad=True)
    idx = tlgpu.tensor(np.array([[1], [2], [3]], np.int32))
    y = x.gather(1, idx)
    idx.fill_(0)
    with pytest.raises(RuntimeError, match="modified"):
        y.sum().backward()


def test_setitem_follows_the_in_place_rules():
    leaf = tlgpu.tensor([1.0, 2.0, 3.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="in place"):
        leaf[0] = 5.0
    w = tlgpu.tensor([1.0, 2.0, 3.0])
    y = leaf * w
    w[1:] = 0.0                                      # w was saved by the product
    with pytest.raises(RuntimeError, match="modified in place by __setitem__"):
        y.backward(tlgpu.ones(3))
