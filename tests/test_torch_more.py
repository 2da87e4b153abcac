"""tlgpu/_torch_more.py: torch's tensor-level names composed from C ops (randperm, repeat_interleave, tile, new_*,
roll, tensor_split, diag/diagonal/trace, einsum, scatter*, masked_select, take_along_dim, cumprod, meshgrid,
cartesian_prod, count_nonzero, diff, std_mean/var_mean, median, kthvalue, quantile, unique, bincount,
searchsorted, bucketize, sgn, logit, heaviside, nan_to_num, deg2rad, rad2deg) against numpy on random inputs,
gradients against numpy's analytic ones, and the error cases."""
import math

import numpy as np
import pytest

import tlgpu


def f32(a):
    return np.asarray(a, dtype=np.float32)


def T(a, **kw):
    return tlgpu.tensor(f32(a), **kw)


def I(a):
    return tlgpu.tensor(np.asarray(a, dtype=np.int32))


def close(t, want, rtol=1e-5, atol=1e-6):
    got = t.numpy() if isinstance(t, tlgpu.Tensor) else np.asarray(t)
    assert got.shape == np.shape(want), (got.shape, np.shape(want))
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.fixture
def r():
    return np.random.default_rng(7)


# ---- creation ----

def test_randperm_is_a_seeded_permutation():
    tlgpu.manual_seed(11)
    p = tlgpu.randperm(1000)
    assert p.dtype == np.int32 and p.shape == (1000,)
    a = p.numpy()
    assert sorted(a) == list(range(1000)) and (a != np.arange(1000)).sum() > 900
    tlgpu.manual_seed(11)
    assert (tlgpu.randperm(1000).numpy() == a).all()
    assert (tlgpu.randperm(1000).numpy() != a).any()                  # the generator moved on
    assert tlgpu.randperm(0).shape == (0,) and tlgpu.randperm(1).tolist() == [0]
    assert tlgpu.randperm(5, dtype=tlgpu.float32).dtype == np.float32
    firsts = [tlgpu.randperm(3).tolist()[0] for _ in range(60)]
    assert set(firsts) == {0, 1, 2}
    with pytest.raises(ValueError, match="non-negative"):
        tlgpu.randperm(-1)
    with pytest.raises(TypeError, match="int"):
        tlgpu.randperm(2.5)


def test_new_and_type_as(r):
    x = T(r.standard_normal((2, 3)))
    for t, want in ((x.new_zeros(2, 3), np.zeros((2, 3))), (x.new_ones((4,)), np.ones(4)),
                    (x.new_full((2, 2), 1.5), np.full((2, 2), 1.5)), (x.new_tensor([[1, 2]]), [[1, 2]])):
        assert t.dtype == np.float32
        close(t, want)
    assert x.new_empty(3, 1).shape == (3, 1)
    i = I([1, 2])
    assert i.new_zeros(2).dtype == np.int32 and i.new_tensor([3.7]).tolist() == [3]
    assert x.new_zeros(2, dtype=tlgpu.long).dtype == np.int32
    g = x.new_ones(3, requires_grad=True)
    assert g.requires_grad and g.is_leaf
    n = x.new_tensor(x)
    n.add_(1)
    close(x + 1, n.numpy())                                             # a copy
    assert i.type_as(x).dtype == np.float32 and x.type_as(x) is x


def test_meshgrid_and_cartesian_prod(r):
    a, b, c = r.standard_normal(3), r.standard_normal(4), r.standard_normal(2)
    for ind in ("ij", "xy"):
        got = tlgpu.meshgrid(T(a), T(b), T(c), indexing=ind)
        for g, w in zip(got, np.meshgrid(f32(a), f32(b), f32(c), indexing=ind)):
            close(g, w)
    got = tlgpu.meshgrid([T(a), T(b)])                                  # ij by default (torch)
    close(got[1], np.meshgrid(f32(a), f32(b), indexing="ij")[1])
    close(tlgpu.cartesian_prod(T(a), T(b), T(c)), np.array([[x, y, z] for x in a for y in b for z in c]))
    close(tlgpu.cartesian_prod(T(a)), f32(a))
    with pytest.raises(ValueError, match="indexing"):
        tlgpu.meshgrid(T(a), indexing="ji")
    with pytest.raises(ValueError, match="0-d or 1-d"):
        tlgpu.meshgrid(T(np.ones((2, 2))))


# ---- shape ----

def test_repeat_interleave(r):
    a = r.standard_normal((3, 4))
    x = T(a, requires_grad=True)
    close(x.repeat_interleave(2), np.repeat(f32(a), 2))
    close(x.repeat_interleave(3, dim=-1), np.repeat(f32(a), 3, -1))
    close(tlgpu.repeat_interleave(x, I([2]), dim=0), np.repeat(f32(a), 2, 0))
    reps = [2, 0, 1, 3]
    y = x.repeat_interleave(I(reps), dim=1)                             # a tensor of repeats: a sync point
    close(y, np.repeat(f32(a), reps, 1))
    close(x.repeat_interleave([1, 0, 2], dim=-2), np.repeat(f32(a), [1, 0, 2], 0))
    (y * T(np.arange(y.numel()).reshape(y.shape))).sum().backward()
    w = np.arange(y.numel()).reshape(y.shape)
    want = np.stack([w[:, s:s + k].sum(1) for s, k in zip(np.cumsum([0] + reps[:-1]), reps)], 1)
    close(x.grad, want)
    close(tlgpu.repeat_interleave(I([3, 0, 2])), np.repeat(np.arange(3), [3, 0, 2]))
    assert x.repeat_interleave(0, dim=0).shape == (0, 4)
    with pytest.raises(ValueError, match="non-negative"):
        x.repeat_interleave(-1)
    with pytest.raises(ValueError, match="one per slice"):
        x.repeat_interleave([1, 2], dim=0)
    with pytest.raises(TypeError, match="int32"):
        x.repeat_interleave(T([1.0, 2.0, 1.0]), dim=0)


def test_tile_roll_tensor_split(r):
    a = r.standard_normal((3, 5))
    x = T(a, requires_grad=True)
    for dims in ((2,), (2, 1), (2, 1, 3)):
        close(tlgpu.tile(x, dims), np.tile(f32(a), dims))
    close(x.tile(1, 2), np.tile(f32(a), (1, 2)))
    for shifts, dims in ((2, 1), (-7, -1), ((1, -2), (0, 1)), (4, None), (0, 0)):
        close(x.roll(shifts, dims), np.roll(f32(a), shifts, dims))
    w = r.standard_normal((3, 5))
    (x.roll((1, 3), (-2, -1)) * T(w)).sum().backward()
    close(x.grad, np.roll(f32(w), (-1, -3), (0, 1)))
    for ios in (3, 5, 7, [1, 3], [0, 2, 2, 9], [-2]):
        got = x.tensor_split(ios, dim=-1)
        want = np.array_split(f32(a), ios, axis=1)
        assert len(got) == len(want)
        for g, wnt in zip(got, want):
            close(g, wnt)
    assert [t.shape[0] for t in tlgpu.tensor_split(x, I(2))] == [2, 1]
    assert [t.shape[1] for t in x.tensor_split(I([1, 4]), 1)] == [1, 3, 1]
    with pytest.raises(ValueError, match="same length"):
        x.roll((1, 2), 0)
    with pytest.raises(ValueError, match="positive"):
        x.tensor_split(0)
    with pytest.raises(IndexError, match="out of range"):
        x.roll(1, 2)


@pytest.mark.parametrize("offset", [-2, 0, 1, 4])
def test_diag_diagonal_trace(r, offset):
    a = r.standard_normal((3, 4))
    x = T(a, requires_grad=True)
    close(x.diagonal(offset), np.diagonal(f32(a), offset))
    close(tlgpu.diag(x, offset), np.diag(f32(a), offset))
    b = r.standard_normal((2, 4, 3, 5))
    close(T(b).diagonal(offset, -1, 1), np.diagonal(f32(b), offset, -1, 1))
    v = r.standard_normal(3)
    y = T(v, requires_grad=True)
    d = y.diag(offset)
    close(d, np.diag(f32(v), offset))
    w = r.standard_normal(d.shape)
    (d * T(w)).sum().backward()
    close(y.grad, np.diagonal(f32(w), offset))                         # the gradient picks the diagonal back
    x.diagonal(offset).sum().backward()
    close(x.grad, np.eye(3, 4, offset))


def test_trace_and_errors(r):
    a = r.standard_normal((4, 4))
    x = T(a, requires_grad=True)
    t = x.trace()
    assert t.shape == ()
    close(t, np.trace(f32(a)), 1e-5, 1e-5)
    t.backward()
    close(x.grad, np.eye(4))
    assert I([[1, 2], [3, 4]]).trace().item() == 5
    with pytest.raises(ValueError, match="matrix"):
        T(np.ones(3)).trace()
    with pytest.raises(ValueError, match="1-d or 2-d"):
        T(np.ones((2, 2, 2))).diag()
    with pytest.raises(ValueError, match="same dim"):
        x.diagonal(0, 1, -1)


# ---- einsum ----

EQS = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,j->ij", [(3,), (4,)]),
       ("ii->", [(4, 4)]), ("ii", [(4, 4)]), ("ii->i", [(3, 3)]), ("ij->ji", [(3, 4)]), ("ij", [(3, 4)]),
       ("ba", [(3, 4)]), ("...ij,...jk", [(2, 3, 4), (4, 5)]), ("ij,ij->", [(3, 4), (3, 4)]), ("i,i", [(5,), (5,)]),
       ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ijk->", [(2, 3, 4)]),
       ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
       ("ba,ca", [(3, 4), (5, 4)]), ("i...->...", [(3, 4, 5)]), ("iij->j", [(3, 3, 4)]), ("...ii->...i", [(2, 3, 3)]),
       ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]), ("ij,j->i", [(3, 4), (4,)]), ("i,ij,j", [(3,), (3, 4), (4,)]),
       ("bij,bj->bi", [(2, 3, 4), (1, 4)]), ("...i,...i->...", [(2, 1, 3), (4, 3)]), ("Ab,bC->CA", [(2, 3), (3, 4)])]


@pytest.mark.parametrize("eq,shapes", EQS, ids=[e for e, _ in EQS])
def test_einsum_against_numpy(r, eq, shapes):
    ops = [f32(r.standard_normal(s)) for s in shapes]
    close(tlgpu.einsum(eq, *[T(o) for o in ops]), np.einsum(eq, *ops), 1e-4, 1e-5)


def test_einsum_gradients_and_forms(r):
    a, b = r.standard_normal((2, 3, 4)), r.standard_normal((2, 4, 5))
    A, B = T(a, requires_grad=True), T(b, requires_grad=True)
    w = r.standard_normal((2, 5, 3))
    (tlgpu.einsum("bij,bjk->bki", A, B) * T(w)).sum().backward()     # d/dA = w^T B^T, d/dB = A^T w^T
    close(A.grad, np.einsum("bki,bjk->bij", w, b), 1e-4, 1e-5)
    close(B.grad, np.einsum("bij,bki->bjk", a, w), 1e-4, 1e-5)
    m = r.standard_normal((4, 4))
    M = T(m, requires_grad=True)
    tlgpu.einsum("ii", M).backward()
    close(M.grad, np.eye(4))
    close(tlgpu.einsum("ij,jk", [T(a[0]), T(b[0])]), a[0] @ b[0], 1e-4, 1e-5)   # operands as one list
    close(tlgpu.einsum(T(a), [0, 1, 2], T(b), [0, 2, 3], [0, 3, 1]), np.einsum("bij,bjk->bki", a, b), 1e-4, 1e-5)
    x = T(m)
    assert tlgpu.einsum("ij->ij", x) is not x


@pytest.mark.parametrize("eq,shapes,match", [
    ("ij,jk->ik", [(3, 4)], "operand"), ("ij->i", [(3, 4, 5)], "do not match"),
    ("ij,jk->iz", [(2, 3), (3, 4)], "output"),
    ("ij->ii", [(3, 3)], "output"), ("ij,jk", [(2, 3), (4, 5)], "sizes"), ("i1", [(2, 2)], "invalid"),
    ("ij->i->j", [(2, 2)], "->"), ("ii", [(1, 3)], "repeats"), ("ii", [(2, 3)], "sizes")])
def test_einsum_errors(eq, shapes, match):
    with pytest.raises(ValueError, match=match):
        tlgpu.einsum(eq, *[tlgpu.zeros(*s) for s in shapes])


# ---- indexing ----

def np_scatter(a, dim, idx, src, add):
    out = a.copy()
    for pos in np.ndindex(*idx.shape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        out[tuple(tgt)] = out[tuple(tgt)] + src[pos] if add else src[pos]
    return out


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_scatter_and_scatter_add(r, dim):
    a = r.standard_normal((4, 5, 3))
    d = dim % 3
    ish = [3, 4, 2]
    ish[d] = 6                                                         # longer than self along dim: repeats
    idx = r.integers(0, a.shape[d], ish).astype(np.int32)
    src = r.standard_normal((6, 7, 6))
    sub = src[tuple(slice(0, n) for n in ish)]
    x, s = T(a, requires_grad=True), T(src, requires_grad=True)
    close(x.scatter_add(dim, I(idx), s), np_scatter(f32(a), d, idx, f32(sub), True), 1e-5, 1e-5)
    close(tlgpu.scatter(x, dim, I(idx), s), np_scatter(f32(a), d, idx, f32(sub), False))   # last one wins
    close(x.scatter(dim, I(idx), 2.5), np_scatter(f32(a), d, idx, np.full(ish, 2.5, np.float32), False))
    w = r.standard_normal(a.shape)
    (x.scatter_add(dim, I(idx), s) * T(w)).sum().backward()
    close(x.grad, w)
    gs = np.zeros(src.shape)
    ws = w[tuple(slice(None) if k == d else slice(0, n) for k, n in enumerate(ish))]
    gs[tuple(slice(0, n) for n in ish)] = np.take_along_axis(ws, idx, d)
    close(s.grad, gs, 1e-5, 1e-6)
    x.grad, s.grad = None, None
    (x.scatter(dim, I(idx), s) * T(w)).sum().backward()
    hit = np_scatter(np.zeros(a.shape), d, idx, np.ones(ish), True) > 0
    close(x.grad, np.where(hit, 0, w))
    g = s.grad.numpy()[tuple(slice(0, n) for n in ish)]
    coords = list(np.indices(ish))
    coords[d] = idx
    flat_t = np.ravel_multi_index(tuple(coords), a.shape)
    last = np.zeros(flat_t.size, bool)
    last[[np.flatnonzero(flat_t.ravel() == t)[-1] for t in np.unique(flat_t)]] = True
    close(g, np.where(last.reshape(ish), np.take_along_axis(ws, idx, d), 0), 1e-5, 1e-6)


def test_scatter_in_place_one_hot_and_int32(r):
    labels = r.integers(0, 5, 8).astype(np.int32)
    oh = tlgpu.zeros(8, 5)
    assert oh.scatter_(1, I(labels[:, None]), 1.0) is oh
    close(oh, np.eye(5)[labels])
    acc = tlgpu.zeros(5)
    acc.scatter_add_(0, I(labels), tlgpu.ones(8))
    close(acc, np.bincount(labels, minlength=5))
    big = np.array([[2 ** 30 + 3, -7, 5]], np.int32)
    out = I(big).scatter(1, I([[2, 0]]), I([[2 ** 30 + 1, 9]]))
    assert out.dtype == np.int32 and out.tolist() == [[9, -7, 2 ** 30 + 1]]
    assert I([[1, 2]]).scatter_add(1, I([[1, 1]]), I([[3, 4]])).tolist() == [[1, 9]]


def test_scatter_errors():
    x = tlgpu.zeros(3, 4)
    with pytest.raises(IndexError):
        x.scatter_add(1, I([[0, 4]]), tlgpu.ones(1, 2)).numpy()         # checked on the device: raised at the sync
    with pytest.raises(IndexError):
        x.scatter(0, I([[-1]]), 1.0).numpy()
    with pytest.raises(ValueError, match="as many dims"):
        x.scatter(1, I([0, 1]), 1.0)
    with pytest.raises(ValueError, match="larger than self"):
        x.scatter(1, I(np.zeros((4, 1))), 1.0)
    with pytest.raises(ValueError, match="larger than src"):
        x.scatter(1, I([[0, 1, 2]]), tlgpu.ones(1, 2))
    with pytest.raises(TypeError, match="int32"):
        x.scatter(1, T([[0.0]]), 1.0)
    with pytest.raises(TypeError, match="dtype"):
        x.scatter(1, I([[0]]), I([[1]]))
    with pytest.raises(TypeError, match="src"):
        x.scatter(1, I([[0]]))


def test_masked_select_take_along_dim(r):
    a = r.standard_normal((3, 4))
    x = T(a, requires_grad=True)
    m = r.random(4) > 0.5
    y = x.masked_select(T(m))                                          # broadcast over rows
    close(y, f32(a)[np.broadcast_to(m, a.shape)])
    y.sum().backward()
    close(x.grad, np.broadcast_to(m, a.shape).astype(np.float32))
    close(tlgpu.masked_select(x, x > 0), f32(a)[a > 0])
    close(x.masked_select(np.array(True)), f32(a).ravel())
    idx = np.argsort(a, axis=1).astype(np.int32)
    close(x.take_along_dim(I(idx), dim=-1), np.take_along_axis(f32(a), idx, 1))
    col = r.integers(0, 3, (1, 4)).astype(np.int32)
    close(tlgpu.take_along_dim(x, I(col), 0), np.take_along_axis(f32(a), col, 0))
    close(x.take_along_dim(I([5, 0, 11])), f32(a).ravel()[[5, 0, 11]])
    with pytest.raises(ValueError, match="broadcast"):
        x.masked_select(T(np.ones(3)))
    with pytest.raises(ValueError, match="number of dims"):
        x.take_along_dim(I([0]), 1)


# ---- scans and reductions ----

def test_cumprod_with_zeros_and_negatives(r):
    a = r.uniform(-2, 2, (3, 9))
    a[0, 3] = 0.0
    a[2, [1, 6]] = 0.0
    x = T(a, requires_grad=True)
    for dim in (1, -2):
        close(x.cumprod(dim), np.cumprod(f32(a), dim), 1e-5, 1e-6)
    y = x.cumprod(1)
    w = r.standard_normal(a.shape)
    (y * T(w)).sum().backward()
    want = np.zeros(a.shape)                                           # d/dx_j: sum_{i>=j} w_i prod_{k<=i, k!=j}
    for row in range(3):
        for j in range(9):
            for i in range(j, 9):
                want[row, j] += w[row, i] * np.prod(np.delete(a[row, :i + 1], j))
    close(x.grad, want, 1e-4, 1e-5)
    close(T([2.0, math.inf, 0.0, 1.0]).cumprod(0), [2, np.inf, np.nan, np.nan])
    assert I([1, -2, 3, 0, 5]).cumprod(0).tolist() == [1, -2, -6, 0, 0]
    assert tlgpu.cumprod(T([]), 0).shape == (0,) and tlgpu.cumprod(T(3.0), 0).item() == 3.0


def test_count_nonzero_diff_var_mean(r):
    a = r.integers(-1, 2, (3, 4, 5)).astype(np.float32)
    x = T(a)
    for dim in (None, 1, -1, (0, 2)):
        got = x.count_nonzero(dim)
        assert got.dtype == np.int32
        close(got, np.count_nonzero(a, axis=dim))
    b = r.standard_normal((3, 6))
    y = T(b, requires_grad=True)
    close(y.diff(), np.diff(f32(b)), 1e-5, 1e-6)
    close(tlgpu.diff(y, 2, 0), np.diff(f32(b), 2, 0), 1e-5, 1e-6)
    close(y.diff(3, -1, prepend=T(b[:, :2]), append=1.5), np.diff(f32(b), 3, -1, prepend=b[:, :2], append=1.5),
          1e-5, 1e-5)
    close(y.diff(1, 0, append=b[:1]), np.diff(f32(b), 1, 0, append=f32(b[:1])), 1e-5, 1e-6)   # a numpy array
    assert y.diff(9).shape == (3, 0) and I([1, 4, 9]).diff().tolist() == [3, 5]
    w = r.standard_normal((3, 5))
    (y.diff() * T(w)).sum().backward()
    close(y.grad, np.concatenate([-w[:, :1], w[:, :-1] - w[:, 1:], w[:, -1:]], 1), 1e-5, 1e-6)
    with pytest.raises(ValueError, match="non-negative"):
        y.diff(-1)
    with pytest.raises(ValueError, match="0-d"):
        T(1.0).diff()
    for fn, np_fn in ((tlgpu.var_mean, np.var), (tlgpu.std_mean, np.std)):
        s, m = fn(y, 1)
        close(s, np_fn(f32(b), 1, ddof=1), 1e-5, 1e-6)
        close(m, f32(b).mean(1), 1e-5, 1e-6)
        s, m = fn(y, (0, 1), correction=0, keepdim=True)
        close(s, np_fn(f32(b), keepdims=True), 1e-5, 1e-6)
        close(m, f32(b).mean(keepdims=True), 1e-5, 1e-6)
        s, m = fn(y, unbiased=False)
        close(s, np_fn(f32(b)), 1e-5, 1e-6)


def test_median_kthvalue_with_ties(r):
    a = r.integers(0, 4, (5, 6)).astype(np.float32)                   # many ties
    x = T(a, requires_grad=True)
    close(x.median(), np.sort(a.ravel())[(a.size - 1) // 2])
    for dim in (0, 1, -1):
        res = x.median(dim)
        n = a.shape[dim]
        want = np.take(np.sort(a, dim), (n - 1) // 2, axis=dim)
        close(res.values, want)
        assert res.indices.dtype == np.int32
        close(np.take_along_axis(a, np.expand_dims(res.indices.numpy(), dim), dim).squeeze(dim), want)
    vals, idx = tlgpu.median(x, 1, keepdim=True)
    assert vals.shape == (5, 1) and idx.shape == (5, 1)
    vals.sum().backward()
    want = np.zeros(a.shape)
    want[np.arange(5), idx.numpy()[:, 0]] = 1
    close(x.grad, want)
    nan = T([[1.0, np.nan, 3.0, np.nan], [4.0, 2.0, 3.0, 1.0]])
    res = nan.median(1)
    assert np.isnan(res.values.numpy()[0]) and res.indices.tolist() == [1, 1] and res.values.numpy()[1] == 2.0
    assert np.isnan(nan.median().item())
    assert I([[5, 1, 3, 3]]).median(1).values.tolist() == [3]
    for k in (1, 3, 6):
        kv = x.kthvalue(k, 1)
        close(kv.values, np.sort(a, 1)[:, k - 1])
        close(np.take_along_axis(a, kv.indices.numpy()[:, None], 1)[:, 0], np.sort(a, 1)[:, k - 1])
    assert tlgpu.kthvalue(x, 2, 0, True).values.shape == (1, 6)
    with pytest.raises(IndexError, match="out of range"):
        x.kthvalue(7, 1)
    with pytest.raises(IndexError, match="empty"):
        tlgpu.zeros(3, 0).median(1)


@pytest.mark.parametrize("interp", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile(r, interp):
    a = r.standard_normal((4, 7))
    a[1, 2] = a[1, 5]                                                   # a tie
    x = T(a)
    q = [0.0, 0.1, 0.25, 0.5, 0.9, 1.0]
    close(x.quantile(T(q), interpolation=interp), np.quantile(f32(a), q, method=interp), 1e-5, 1e-6)
    close(x.quantile(0.3, dim=-1, interpolation=interp), np.quantile(f32(a), 0.3, axis=1, method=interp), 1e-5, 1e-6)
    close(tlgpu.quantile(x, q, 0, keepdim=True, interpolation=interp),
          np.quantile(f32(a), q, axis=0, keepdims=True, method=interp), 1e-5, 1e-6)
    close(x.quantile(0.5, keepdim=True, interpolation=interp), np.quantile(f32(a), 0.5, keepdims=True, method=interp))
    b = r.standard_normal((3, 9))                                      # positions 2.5, 3.5: halves to even
    close(T(b).quantile(T([0.3125, 0.4375]), -1, interpolation=interp),
          np.quantile(f32(b), [0.3125, 0.4375], axis=-1, method=interp), 1e-5, 1e-6)
    c = r.standard_normal((2, 6))                                      # float32 0.1 * 5 is 0.5 exactly, as in torch
    close(T(c).quantile(T([0.1, 0.7]), 1, interpolation=interp),
          np.quantile(f32(c), [0.1, 0.7], axis=1, method=interp), 1e-5, 1e-6)


def test_quantile_gradient_nan_and_errors(r):
    a = r.standard_normal(9)
    x = T(a, requires_grad=True)
    x.quantile(0.3).backward()                                          # pos 2.4: 0.6 lower + 0.4 upper
    order = np.argsort(f32(a))
    want = np.zeros(9)
    want[order[2]], want[order[3]] = 0.6, 0.4
    close(x.grad, want, 1e-5, 1e-6)
    res = T([[1.0, np.nan, 2.0], [1.0, 2.0, 3.0]]).quantile(0.5, 1).numpy()
    assert np.isnan(res[0]) and res[1] == 2.0
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        x.quantile(1.5)
    with pytest.raises(ValueError, match="interpolation"):
        x.quantile(0.5, interpolation="cubic")
    with pytest.raises(TypeError, match="float32"):
        I([1, 2]).quantile(0.5)


def test_unique(r):
    a = r.integers(-3, 4, (4, 5)).astype(np.float32)
    x = T(a)
    close(x.unique(), np.unique(a))
    u, inv, cnt = tlgpu.unique(x, return_inverse=True, return_counts=True)
    close(u, np.unique(a))
    assert inv.dtype == np.int32 and inv.shape == (4, 5) and cnt.dtype == np.int32
    close(u.numpy()[inv.numpy()], a)
    close(cnt, np.unique(a, return_counts=True)[1])
    rows = T(np.array([[1, 2], [0, 5], [1, 2], [0, 5], [0, 1]]))
    u, inv = rows.unique(dim=0, return_inverse=True)
    close(u, [[0, 1], [0, 5], [1, 2]])
    assert inv.tolist() == [2, 1, 2, 1, 0]
    assert I([3, 1, 3]).unique().dtype == np.int32


def test_bincount(r):
    v = r.integers(0, 6, 40).astype(np.int32)
    w = r.standard_normal(40)
    got = I(v).bincount()
    assert got.dtype == np.int32
    close(got, np.bincount(v))
    close(tlgpu.bincount(I(v), minlength=10), np.bincount(v, minlength=10))
    ws = T(w, requires_grad=True)
    b = I(v).bincount(ws)
    close(b, np.bincount(v, f32(w)), 1e-5, 1e-5)
    assert b.dtype == np.float32
    close(I([]).bincount(minlength=3), [0, 0, 0])
    with pytest.raises(ValueError, match="non-negative"):
        I([1, -1]).bincount()
    with pytest.raises(TypeError, match="1-d int32"):
        T([1.0]).bincount()
    with pytest.raises(ValueError, match="weights"):
        I([1, 2]).bincount(T([1.0]))


@pytest.mark.parametrize("n", [1, 2, 7, 16, 33])
def test_searchsorted_bucketize(r, n):
    seq = np.sort(r.integers(0, 6, n)).astype(np.float32)              # duplicates
    vals = r.integers(-1, 8, (3, 5)).astype(np.float32)                 # values equal to entries, below and above
    for side in ("left", "right"):
        right = side == "right"
        close(tlgpu.searchsorted(T(seq), T(vals), right=right), np.searchsorted(seq, vals, side))
        close(tlgpu.searchsorted(T(seq), T(vals), side=side), np.searchsorted(seq, vals, side))
        close(tlgpu.bucketize(T(vals), T(seq), right=right), np.searchsorted(seq, vals, side))
    rows = np.sort(r.standard_normal((3, n)), 1).astype(np.float32)
    v2 = r.standard_normal((3, 4)).astype(np.float32)
    got = tlgpu.searchsorted(T(rows), T(v2))
    assert got.dtype == np.int32
    close(got, np.stack([np.searchsorted(rows[i], v2[i]) for i in range(3)]))
    perm = r.permutation(n).astype(np.int32)
    shuffled = seq[perm]
    close(tlgpu.searchsorted(T(shuffled), T(vals), sorter=I(np.argsort(shuffled, kind="stable"))),
          np.searchsorted(seq, vals))
    assert tlgpu.searchsorted(T(seq), 2.5).shape == ()


def test_searchsorted_edges():
    assert tlgpu.searchsorted(T([1.0, 2.0]), T([np.nan, 0.0])).tolist() == [2, 0]
    assert tlgpu.searchsorted(I([1, 3, 3, 5]), I([3])).tolist() == [1]
    assert tlgpu.searchsorted(T([]), T([1.0])).tolist() == [0]
    with pytest.raises(ValueError, match="last dim"):
        tlgpu.searchsorted(T(np.ones((2, 3))), T(np.ones((3, 1))))
    with pytest.raises(ValueError, match="side"):
        tlgpu.searchsorted(T([1.0]), T([1.0]), side="middle")
    with pytest.raises(ValueError, match="1-d"):
        tlgpu.bucketize(T([1.0]), T(np.ones((2, 2))))


# ---- elementwise ----

def test_elementwise_compositions(r):
    a = r.standard_normal(8)
    a[2] = 0.0
    x = T(a)
    close(x.sgn(), np.sign(a))
    assert I([-3, 0, 2]).sgn().tolist() == [-1, 0, 1]
    p = r.uniform(0.01, 0.99, 8)
    y = T(p, requires_grad=True)
    close(y.logit(), np.log(p / (1 - p)), 1e-5, 1e-5)
    y.logit().sum().backward()
    close(y.grad, 1 / (p * (1 - p)), 1e-4, 1e-4)
    z = T([0.0, 0.05, 0.5, 1.0], requires_grad=True)
    close(tlgpu.logit(z, eps=0.1), np.log(np.array([0.1, 0.1, 0.5, 0.9]) / (1 - np.array([0.1, 0.1, 0.5, 0.9]))), 1e-5)
    tlgpu.logit(z, 0.1).sum().backward()
    close(z.grad, [0, 0, 4, 0], 1e-5, 1e-5)
    hv = r.standard_normal(8)
    close(x.heaviside(T(hv)), np.heaviside(f32(a), f32(hv)))
    assert T([np.nan]).heaviside(T([0.5])).tolist() == [0.0]
    assert I([-2, 0, 3]).heaviside(I([7, 7, 7])).tolist() == [0, 7, 1]
    b = f32([np.nan, np.inf, -np.inf, 1.5, -2.0])
    close(T(b).nan_to_num(), np.nan_to_num(b))
    close(tlgpu.nan_to_num(T(b), nan=1.0, posinf=2.0, neginf=-3.0), np.nan_to_num(b, nan=1.0, posinf=2.0, neginf=-3.0))
    w = T(b, requires_grad=True)
    w.nan_to_num().sum().backward()
    close(w.grad, [0, 0, 0, 1, 1])
    h = T(b).half().nan_to_num()
    assert h.dtype == np.float16 and h.float().numpy()[1] == 65504.0
    c = T(b.copy())
    assert c.nan_to_num_(0.5) is c and c.numpy()[0] == 0.5
    close(x.deg2rad(), np.deg2rad(f32(a)))
    close(tlgpu.rad2deg(x), np.rad2deg(f32(a)), 1e-5, 1e-5)
    assert I([180]).deg2rad().dtype == np.float32


def test_module_forms_and_namespace():
    with pytest.raises(TypeError, match="roll"):
        tlgpu.roll([1, 2], 1)
    for name in ("einsum", "randperm", "scatter_add", "median", "searchsorted", "nan_to_num", "cumprod"):
        assert callable(getattr(tlgpu, name))
    for name in ("scatter_", "new_zeros", "type_as", "unique", "kthvalue"):
        assert callable(getattr(tlgpu.Tensor, name))
    ns = {}
    exec("from tlgpu import *", ns)
    assert ns.get("diff") is tlgpu.diff and "any" not in ns


def test_device_side_names_do_not_wait_for_the_device(r):
    """Only the documented sync points read back: the rest enqueue and return (DESIGN: lazy synchronization)."""
    x, idx = T(r.standard_normal((4, 6)), requires_grad=True), I(r.integers(0, 4, (2, 6)))
    seq, v = T(np.sort(r.standard_normal(50))), T(r.standard_normal(7))
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    outs = [tlgpu.randperm(9), x.scatter(0, idx, x[:2] * 2), x.scatter_add(0, idx, x), x.scatter(0, idx, 1.0),
            x.cumprod(1), tlgpu.einsum("ij,kj->ik", x, x), tlgpu.searchsorted(seq, v), x.take_along_dim(idx[:, :1], 0),
            x.median(1).values, x.quantile(0.3, 1), x.kthvalue(2, 0).values, x.diag(1) if x.ndim == 1 else x.diagonal(),
            x.roll(2, 1), x.repeat_interleave(2, 0), x.count_nonzero(0), x.diff(), x.nan_to_num(), x.trace()]
    sum(o.float().sum() for o in outs).backward()
    assert tlgpu.stream_stats()["waits"] == 0
    tlgpu.reset_stream_stats()
    x.masked_select(x > 0)
    assert tlgpu.stream_stats()["waits"] >= 1                          # the documented sync point
