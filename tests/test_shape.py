"""Shape ops vs numpy: reshape/view, transpose/permute/.T, (un)squeeze, expand, flatten, cat/stack, split/chunk.

Views must not enqueue anything (stream_stats()['enqueued'] stays put) and must share storage.
"""
import numpy as np
import pytest

import tlgpu
from conftest import ODD_SIZES


def rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def enqueued():
    return tlgpu.stream_stats()["enqueued"]


def check(t, ref, rtol=0):
    got = t.numpy()
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape, got.dtype, ref.dtype)
    if rtol:
        np.testing.assert_allclose(got, ref, rtol=rtol)
    else:
        np.testing.assert_array_equal(got, ref)


# ---- reshape / view / flatten ----

@pytest.mark.parametrize("src,dst", [
    ((2, 3, 4), (6, 4)), ((2, 3, 4), (24,)), ((2, 3, 4), (-1,)), ((2, 3, 4), (4, -1)), ((2, 3, 4), (2, 1, 3, 1, 4)),
    ((24,), (2, 3, 4)), ((1,), ()), ((), (1, 1)), ((5, 1), (1, 5)), ((0, 3), (3, 0)), ((0, 3), (-1, 6)),
])
def test_reshape_contiguous_is_a_view(rng, src, dst):
    a = rand(rng, *src)
    t = tlgpu.tensor(a)
    n0 = enqueued()
    r = t.reshape(*dst)
    assert enqueued() == n0
    check(r, a.reshape(dst))
    check(t.reshape(dst), a.reshape(dst))          # one tuple argument
    check(t.view(*dst), a.reshape(dst))


def test_reshape_noncontiguous_copies_when_needed(rng):
    a = rand(rng, 4, 6, 5)
    t = tlgpu.tensor(a)
    tt = t.transpose(0, 2)                           # (5, 6, 4), strides (1, 5, 30)
    n0 = enqueued()
    r = tt.reshape(5, 24)
    assert enqueued() == n0 + 1                      # one strided copy
    check(r, a.transpose(2, 1, 0).reshape(5, 24))
    with pytest.raises(ValueError, match=r"view: .*\(5, 6, 4\).*without a copy"):
        tt.view(-1)
    # splitting or keeping dims of a non-contiguous tensor needs no copy
    n0 = enqueued()
    v = tt.view(5, 2, 3, 4)
    v2 = t[:, ::2].reshape(4, 3, 5)                  # dims 1,2 are still one run
    assert enqueued() == n0
    check(v, a.transpose(2, 1, 0).reshape(5, 2, 3, 4))
    check(v2, a[:, ::2].reshape(4, 3, 5))


def test_chain_transpose_slice_reshape(rng):
    a = rand(rng, 6, 8)
    t = tlgpu.tensor(a)
    r = t.T[1:7:2].reshape(-1)                       # must copy: the slice of a transpose is not one run
    check(r, a.T[1:7:2].reshape(-1))
    check((r * 2).reshape(3, 6), (a.T[1:7:2].reshape(-1) * 2).reshape(3, 6))


def test_reshape_errors(rng):
    t = tlgpu.tensor(rand(rng, 2, 3))
    with pytest.raises(ValueError, match=r"reshape: .*\(2, 3\).*\(4, 2\)"):
        t.reshape(4, 2)
    with pytest.raises(ValueError, match="at most one -1"):
        t.reshape(-1, -1)
    with pytest.raises(ValueError):
        t.reshape(-2, -3)
    with pytest.raises(ValueError):
        tlgpu.zeros(0, 3).reshape(-1, 0)             # -1 is ambiguous with 0 elements
    with pytest.raises(TypeError):
        t.reshape("a")


@pytest.mark.parametrize("shape,s,e", [((2, 3, 4), 0, -1), ((2, 3, 4), 1, 2), ((2, 3, 4, 5), 1, -2), ((3,), 0, 0),
                                       ((), 0, -1), ((2, 0, 3), 0, 1)])
def test_flatten(rng, shape, s, e):
    a = rand(rng, *shape)
    t = tlgpu.tensor(a)
    if a.ndim == 0:
        ref = a.reshape(1)
    else:
        e2 = e % a.ndim
        ref = a.reshape(a.shape[:s] + (-1 if a.size else int(np.prod(a.shape[s:e2 + 1])),) + a.shape[e2 + 1:])
    check(t.flatten(s, e), ref)
    check(tlgpu.flatten(t, start_dim=s, end_dim=e), ref)


def test_flatten_noncontiguous(rng):
    a = rand(rng, 3, 4, 5)
    check(tlgpu.tensor(a).permute(2, 0, 1).flatten(1), a.transpose(2, 0, 1).reshape(5, 12))
    with pytest.raises(ValueError):
        tlgpu.tensor(a).flatten(2, 1)


# ---- transpose / permute / T ----

@pytest.mark.parametrize("n", ODD_SIZES)
def test_transpose_sizes_and_elementwise(rng, n):
    a = rand(rng, n, 3)
    t = tlgpu.tensor(a)
    n0 = enqueued()
    tt = t.T
    assert enqueued() == n0 and tt.is_contiguous() == (n == 1)
    check(tt, a.T)
    check(tt + 1, a.T + 1)
    check(t.transpose(-1, -2) * tt.T[:, :1].T, a.T * a[:, :1].T)
    check(tt[:, ::-1].contiguous(), np.ascontiguousarray(a.T[:, ::-1]))


@pytest.mark.parametrize("shape", [(2, 2), (31, 33), (32, 64), (65, 7), (3, 130, 45)], ids=str)
def test_transposed_copy_is_one_tiled_launch(rng, shape):
    """contiguous() of a view whose last two dims are swapped (stride 1 along dim -2): one launch of the tiled
    transpose, exact for float32 and int32, with tile edges, batches, an offset, a row stride past the
    width and an expanded batch."""
    a = rand(rng, *shape)
    t = tlgpu.tensor(a)
    view = t.transpose(-1, -2)
    n0 = enqueued()
    got = view.contiguous()
    assert enqueued() - n0 == 1 and got.is_contiguous()
    assert np.array_equal(got.numpy(), np.swapaxes(a, -1, -2))
    ints = rng.integers(-2**31, 2**31 - 1, shape, dtype=np.int64).astype(np.int32)
    assert np.array_equal(tlgpu.tensor(ints).transpose(-1, -2).contiguous().numpy(), np.swapaxes(ints, -1, -2))
    wide = rand(rng, *shape[:-1], shape[-1] + 6)
    sub = tlgpu.tensor(wide)[..., 3:3 + shape[-1]]               # offset 3, rows 6 floats longer
    assert np.array_equal(sub.transpose(-1, -2).numpy(), np.swapaxes(wide[..., 3:3 + shape[-1]], -1, -2))
    if len(shape) == 2:
        e = t.unsqueeze(0).expand(3, *shape).transpose(1, 2)      # batch stride 0
        assert np.array_equal(e.contiguous().numpy(), np.broadcast_to(a.T, (3,) + a.T.shape))


@pytest.mark.parametrize("perm", [(0, 1, 2), (2, 0, 1), (1, 2, 0), (-1, 0, -2), (2, 1, 0)])
def test_permute(rng, perm):
    a = rand(rng, 2, 3, 5)
    t = tlgpu.tensor(a)
    check(t.permute(*perm), a.transpose(perm))
    check(t.permute(perm), a.transpose(perm))
    check(tlgpu.permute(t, perm).exp(), np.exp(a.transpose(perm)), rtol=1e-6)


def test_T_reverses_all_dims(rng):
    a = rand(rng, 2, 3, 4)
    t = tlgpu.tensor(a)
    check(t.T, a.T)
    check(t.T.T, a)
    check(tlgpu.tensor(a[0, 0]).T, a[0, 0])
    assert tlgpu.tensor(np.float32(3)).T.shape == ()


def test_transpose_permute_errors(rng):
    t = tlgpu.tensor(rand(rng, 2, 3))
    with pytest.raises(IndexError, match=r"transpose: dim 2 .*\(2, 3\)"):
        t.transpose(0, 2)
    with pytest.raises(ValueError, match=r"permute: dims \(0, 0\)"):
        t.permute(0, 0)
    with pytest.raises(ValueError, match="permute"):
        t.permute(0)
    with pytest.raises(IndexError):
        t.permute(0, 5)


# ---- unsqueeze / squeeze / expand ----

@pytest.mark.parametrize("dim", [0, 1, 2, -1, -2, -3])
def test_unsqueeze(rng, dim):
    a = rand(rng, 4, 5)
    t = tlgpu.tensor(a)
    n0 = enqueued()
    u = t.unsqueeze(dim)
    assert enqueued() == n0
    check(u, np.expand_dims(a, dim))
    check(t.unsqueeze(dim=dim), np.expand_dims(a, dim))
    check(tlgpu.unsqueeze(t, axis=dim), np.expand_dims(a, dim))
    check(t.T.unsqueeze(dim) - 1, np.expand_dims(a.T, dim) - 1)


def test_unsqueeze_errors(rng):
    t = tlgpu.tensor(rand(rng, 4, 5))
    with pytest.raises(IndexError, match="unsqueeze"):
        t.unsqueeze(3)
    with pytest.raises(TypeError):
        t.unsqueeze(dim=0, axis=0)


def test_squeeze(rng):
    a = rand(rng, 1, 3, 1, 4, 1)
    t = tlgpu.tensor(a)
    check(t.squeeze(), a.squeeze())
    check(t.squeeze(0), a.squeeze(0))
    check(t.squeeze(-1), a.squeeze(-1))
    check(t.squeeze(axis=(0, 2)), a.squeeze(axis=(0, 2)))
    check(tlgpu.squeeze(t, dim=2), a.squeeze(2))
    with pytest.raises(ValueError, match=r"squeeze: dim 1 of shape \(1, 3, 1, 4, 1\) has size 3"):
        t.squeeze(1)
    with pytest.raises(IndexError):
        t.squeeze(5)
    check(tlgpu.tensor(np.float32(2)).squeeze(), np.float32(2).reshape(()))


@pytest.mark.parametrize("src,dst", [((3, 1), (3, 4)), ((1, 4), (5, 4)), ((3, 1), (2, 3, 6)), ((4,), (2, 3, 4)),
                                     ((3, 1), (-1, 7)), ((1,), (0,)), ((), (2, 2)), ((1, 1), (1, 65537))])
def test_expand_then_elementwise(rng, src, dst):
    a = rand(rng, *src)
    t = tlgpu.tensor(a)
    n0 = enqueued()
    e = t.expand(*dst)
    assert enqueued() == n0
    shape = tuple(s if d == -1 else d for s, d in zip((1,) * (len(dst) - len(src)) + src, dst))
    ref = np.broadcast_to(a, shape)
    check(e, ref)
    check(e + 1, ref + 1)
    check(e.contiguous(), ref)
    assert all(st == 0 for st, s0, s1 in zip(e.stride()[len(dst) - len(src):], src, shape) if s0 == 1 and s1 > 1)


def test_expand_errors(rng):
    t = tlgpu.tensor(rand(rng, 3, 2))
    with pytest.raises(ValueError, match=r"expand: cannot expand shape \(3, 2\) to \(3, 4\)"):
        t.expand(3, 4)
    with pytest.raises(ValueError):
        t.expand(2)
    with pytest.raises(ValueError):
        t.expand(-1, 3, 2)
    check(t.expand_as(tlgpu.zeros(4, 3, 2)), np.broadcast_to(t.numpy(), (4, 3, 2)))


# ---- views share storage ----

def test_views_share_storage(rng):
    a = rand(rng, 4, 6)
    t = tlgpu.tensor(a)
    v = t.reshape(2, 12).T.unsqueeze(0)
    v0 = t._version
    v.fill_(2.0)
    assert t._version > v0
    check(t, np.full((4, 6), 2.0, np.float32))


# ---- cat / stack ----

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cat(rng, axis):
    shapes = [(2, 3), (2, 3), (2, 3)]
    arrs = []
    for i, s in enumerate(shapes):
        s = list(s)
        s[axis] = [1, 4, 2][i]
        arrs.append(rand(rng, *s))
    ts = [tlgpu.tensor(x) for x in arrs]
    check(tlgpu.cat(ts, axis=axis), np.concatenate(arrs, axis=axis))
    check(tlgpu.cat(ts, dim=axis), np.concatenate(arrs, axis=axis))
    check(tlgpu.cat(tuple(ts), axis), np.concatenate(arrs, axis=axis))


def test_cat_noncontiguous_empty_and_int(rng):
    a = rand(rng, 5, 4)
    ta = tlgpu.tensor(a)
    parts = [a[:, ::2], a.T[::-1].T[:, 1:4], np.zeros((5, 0), np.float32)]
    tparts = [ta[:, ::2], ta.T[::-1].T[:, 1:4], tlgpu.zeros(5, 0)]
    check(tlgpu.cat(tparts, axis=1), np.concatenate(parts, axis=1))
    check(tlgpu.cat([tlgpu.zeros(0, 3), tlgpu.zeros(0, 3)]), np.zeros((0, 3), np.float32))
    i = np.arange(12, dtype=np.int32).reshape(3, 4)
    ti = tlgpu.tensor(i)
    got = tlgpu.cat([ti, ti[::-1]])
    assert got.dtype == np.int32
    check(got, np.concatenate([i, i[::-1]]))


@pytest.mark.parametrize("n", ODD_SIZES)
def test_cat_sizes(rng, n):
    a, b = rand(rng, n), rand(rng, 3)
    check(tlgpu.cat([tlgpu.tensor(a), tlgpu.tensor(b)]), np.concatenate([a, b]))


def test_cat_errors(rng):
    t = tlgpu.tensor(rand(rng, 2, 3))
    with pytest.raises(ValueError, match=r"cat: tensor 1 has shape \(3, 3\) but tensor 0 has shape \(2, 3\)"):
        tlgpu.cat([t, tlgpu.zeros(3, 3)], axis=1)
    with pytest.raises(ValueError, match="cat"):
        tlgpu.cat([t, tlgpu.zeros(6)])
    with pytest.raises(TypeError, match="cat: tensor 1 is int32"):
        tlgpu.cat([t, tlgpu.zeros(2, 3, dtype="int32")])
    with pytest.raises(ValueError, match="at least one"):
        tlgpu.cat([])
    with pytest.raises(TypeError, match="not a Tensor"):
        tlgpu.cat([t, 1.0])
    with pytest.raises(IndexError, match="cat: dim 2"):
        tlgpu.cat([t, t], axis=2)
    with pytest.raises(ValueError, match="zero-dimensional"):
        tlgpu.cat([tlgpu.tensor(1.0), tlgpu.tensor(2.0)])


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
def test_stack(rng, axis):
    arrs = [rand(rng, 3, 4) for _ in range(3)]
    ts = [tlgpu.tensor(x) for x in arrs]
    ts[1] = ts[1].T.contiguous().T                   # a non-contiguous part
    check(tlgpu.stack(ts, axis=axis), np.stack(arrs, axis=axis))
    check(tlgpu.stack(ts, dim=axis), np.stack(arrs, axis=axis))


def test_stack_scalars_empty_and_errors(rng):
    check(tlgpu.stack([tlgpu.tensor(1.5), tlgpu.tensor(2.5)]), np.array([1.5, 2.5], np.float32))
    check(tlgpu.stack([tlgpu.zeros(0, 2)] * 3, axis=1), np.zeros((0, 3, 2), np.float32))
    with pytest.raises(ValueError, match=r"stack: tensor 1 has shape \(3,\) but tensor 0 has shape \(2,\)"):
        tlgpu.stack([tlgpu.zeros(2), tlgpu.zeros(3)])
    with pytest.raises(TypeError, match="stack"):
        tlgpu.stack([tlgpu.zeros(2), tlgpu.zeros(2, dtype="int32")])
    with pytest.raises(IndexError):
        tlgpu.stack([tlgpu.zeros(2)], axis=2)


# ---- split / chunk ----

@pytest.mark.parametrize("n", ODD_SIZES)
def test_split_chunk_sizes(rng, n):
    a = rand(rng, 2, n)
    t = tlgpu.tensor(a)
    n0 = enqueued()
    parts = t.split(4, dim=1)
    chunks = t.chunk(3, axis=-1)
    assert enqueued() == n0
    assert [p.shape[1] for p in parts] == [min(4, n - i) for i in range(0, n, 4)]
    for p, r in zip(parts, [a[:, i:i + 4] for i in range(0, n, 4)]):
        check(p, r)
    size = -(-n // 3)
    assert len(chunks) == len(range(0, n, size))
    for p, i in zip(chunks, range(0, n, size)):
        check(p, a[:, i:i + size])


def test_split_sections_and_errors(rng):
    a = rand(rng, 7, 3)
    t = tlgpu.tensor(a)
    parts = tlgpu.split(t, [2, 0, 5])
    assert [p.shape for p in parts] == [(2, 3), (0, 3), (5, 3)]
    check(parts[2] * 3, a[2:] * 3)
    check(tlgpu.cat(t.T.chunk(2, 0), 0), a.T)
    parts[0].fill_(0.0)                              # views: the write lands in t
    a[:2] = 0
    check(t, a)
    with pytest.raises(ValueError, match=r"split: sizes must .* sum to 7"):
        t.split([2, 2])
    with pytest.raises(ValueError, match="split"):
        t.split(0)
    with pytest.raises(ValueError, match="chunk"):
        t.chunk(0)
    with pytest.raises(IndexError, match="split"):
        t.split(2, dim=2)
    assert len(tlgpu.zeros(0, 2).chunk(3)) == 1


def test_random_view_chains_then_reshape(rng):
    """Seeded fuzz: random permute/slice/unsqueeze chains, then reshape to random factorisations."""
    for _ in range(60):
        shape = tuple(int(s) for s in rng.integers(1, 5, size=rng.integers(1, 5)))
        a = rand(rng, *shape)
        t, r = tlgpu.tensor(a), a
        for _ in range(3):
            op = rng.integers(0, 3)
            if op == 0:
                perm = tuple(int(p) for p in rng.permutation(r.ndim))
                t, r = t.permute(*perm), r.transpose(perm)
            elif op == 1:
                key = tuple(slice(None, None, int(rng.choice([1, 2, -1, -2]))) for _ in range(r.ndim))
                t, r = t[key], r[key]
            elif r.ndim < 6:
                d = int(rng.integers(-r.ndim - 1, r.ndim + 1))
                t, r = t.unsqueeze(d), np.expand_dims(r, d)
        n, dims = r.size, []
        while n > 1:
            f = int(rng.choice([p for p in (2, 3, 4, n) if n % p == 0]))
            dims.append(f)
            n //= f
        dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
        check(t.reshape(*dims), r.reshape(dims))
        check(t.reshape(-1)[::-1] + 0, r.reshape(-1)[::-1])
