"""Checks for docs/porting.md's rows (see porting_checks.py): torch names added in the thirteenth session (names):
tlgpu/_torch_more.py's creation, shape, indexing, scan, order-statistic and search names."""
import numpy as np

import tlgpu
from porting_checks import T, close, f32, raises, rng, row


def I(a):
    return tlgpu.tensor(np.asarray(a, dtype=np.int32))


def waits(fn):
    """Host waits on the device while fn runs."""
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    fn()
    return tlgpu.stream_stats()["waits"]


# ---- Tensors and devices ----

@row('`torch.randperm(n)`, `x.new_zeros(size)`, `new_ones/new_full/new_empty/new_tensor`, `x.type_as(o)`')
def _():
    tlgpu.manual_seed(4)
    p = tlgpu.randperm(300)
    assert p.dtype == np.int32 and sorted(p.tolist()) == list(range(300))
    tlgpu.manual_seed(4)
    assert tlgpu.randperm(300).tolist() == p.tolist()
    x = T(rng().standard_normal(3))
    assert x.new_zeros(2, 3).shape == (2, 3) and I([1]).new_ones((2,)).dtype == np.int32
    close(x.new_full((2,), 1.5), [1.5, 1.5])
    assert x.new_empty(4, dtype=tlgpu.long).dtype == np.int32 and x.new_zeros(1, requires_grad=True).requires_grad
    close(I([1, 2]).new_tensor([[0.5, 2.7]]), [[0, 2]])
    assert I([3]).type_as(x).dtype == np.float32


@row('`x.repeat_interleave(r, dim)`, `x.tile(dims)`, `x.roll(shifts, dims)`, `x.tensor_split(n_or_indices, dim)`')
def _():
    a = rng().standard_normal((3, 5))
    x = T(a, requires_grad=True)
    close(x.repeat_interleave(2, dim=0), np.repeat(f32(a), 2, 0))
    y = tlgpu.repeat_interleave(x, I([1, 0, 3, 1, 2]), dim=-1)          # a tensor of repeats: a sync point
    close(y, np.repeat(f32(a), [1, 0, 3, 1, 2], 1))
    y.sum().backward()
    close(x.grad, np.broadcast_to(f32([1, 0, 3, 1, 2]), (3, 5)))
    close(x.tile((2, 1, 2)), np.tile(f32(a), (2, 1, 2)))
    close(x.roll((1, -2), (0, -1)), np.roll(f32(a), (1, -2), (0, 1)))
    close(tlgpu.roll(x, 7), np.roll(f32(a), 7))
    for ios in (2, [1, 4]):
        for got, want in zip(x.tensor_split(ios, dim=1), np.array_split(f32(a), ios, 1)):
            close(got, want)
    assert waits(lambda: (x.repeat_interleave(3, 1), x.roll(1, 0), x.tile(2))) == 0


@row('`x.diag(k)`, `x.diagonal(offset, dim1, dim2)`, `x.trace()`, `torch.meshgrid(a, b, indexing=)`, '
     '`torch.cartesian_prod`')
def _():
    r = rng()
    a, v = r.standard_normal((4, 5)), r.standard_normal(3)
    x = T(a, requires_grad=True)
    for k in (-1, 0, 2):
        close(x.diag(k), np.diag(f32(a), k))
        close(T(v).diag(k), np.diag(f32(v), k))
    b = r.standard_normal((2, 3, 4))
    close(T(b).diagonal(1, -1, 0), np.diagonal(f32(b), 1, -1, 0))
    x[:, :4].trace().backward()
    close(x.grad, np.eye(4, 5))
    for ind in ("ij", "xy"):
        for got, want in zip(tlgpu.meshgrid(T(v), T(a[0]), indexing=ind), np.meshgrid(f32(v), f32(a[0]), indexing=ind)):
            close(got, want)
    close(tlgpu.cartesian_prod(T(v), T(v[:2])), [[p, q] for p in f32(v) for q in f32(v[:2])])


@row('`torch.einsum(eq, *operands)`')
def _():
    r = rng()
    cases = [("bij,bjk->bik", (2, 3, 4), (2, 4, 5)), ("i,j", (3,), (4,)), ("ii", (4, 4)), ("...ij->...ji", (2, 3, 4)),
             ("bhqd,bhkd->bhqk", (2, 2, 3, 4), (2, 2, 5, 4)), ("ij,ij->", (3, 4), (3, 4)), ("ii->i", (3, 3))]
    for eq, *shapes in cases:
        ops = [f32(r.standard_normal(s)) for s in shapes]
        close(tlgpu.einsum(eq, *[T(o) for o in ops]), np.einsum(eq, *ops), 1e-4, 1e-5)
    a, b = r.standard_normal((3, 4)), r.standard_normal((4, 2))
    A = T(a, requires_grad=True)
    tlgpu.einsum("ij,jk->ik", A, T(b)).sum().backward()
    close(A.grad, np.broadcast_to(f32(b).sum(1), (3, 4)), 1e-5, 1e-6)
    raises(ValueError, "operand", lambda: tlgpu.einsum("ij,jk", A))


@row('`x.scatter(dim, index, src)`, `x.scatter(dim, index, value)`, `scatter_`, `scatter_add(_)`, '
     '`torch.take_along_dim`')
def _():
    r = rng()
    a, src = r.standard_normal((3, 4)), r.standard_normal((2, 4))
    idx = np.array([[0, 2, 2, 1], [0, 1, 2, 1]], np.int32)             # column 0 and 3: a repeated target
    want_add, want_set = f32(a).copy(), f32(a).copy()
    for i in range(2):
        for j in range(4):
            want_add[idx[i, j], j] += f32(src)[i, j]
            want_set[idx[i, j], j] = f32(src)[i, j]                     # the last one in index order wins
    x, s = T(a, requires_grad=True), T(src, requires_grad=True)
    close(x.scatter_add(0, I(idx), s), want_add)
    close(tlgpu.scatter(x, 0, I(idx), s), want_set)
    x.scatter_add(0, I(idx), s).sum().backward()
    close(s.grad, np.ones((2, 4)))
    oh = tlgpu.zeros(4, 3)
    assert oh.scatter_(1, I([[2], [0], [1], [2]]), 1.0) is oh
    close(oh, np.eye(3)[[2, 0, 1, 2]])
    raises(IndexError, "out of range", lambda: tlgpu.zeros(2, 2).scatter_add_(1, I([[0, 2]]), tlgpu.ones(1, 2)).numpy())
    order = np.argsort(a, 1).astype(np.int32)
    close(x.take_along_dim(I(order), 1), np.sort(f32(a), 1))
    close(tlgpu.take_along_dim(x, I([[1, 0, 2, 2]]), 0), np.take_along_axis(f32(a), np.array([[1, 0, 2, 2]]), 0))


@row('`x.masked_select(mask)`')
def _():
    a = rng().standard_normal((3, 4))
    x = T(a, requires_grad=True)
    y = x.masked_select(x > 0.2)
    close(y, f32(a)[a > 0.2])
    y.sum().backward()
    close(x.grad, (a > 0.2).astype(np.float32))
    assert waits(lambda: x.masked_select(x > 0)) >= 1                  # the sync point the row names


@row('`torch.sgn`, `x.logit(eps)`, `x.heaviside(values)`, `x.nan_to_num(nan, posinf, neginf)`, `deg2rad`, `rad2deg`')
def _():
    a = rng().standard_normal(6)
    a[1] = 0
    close(tlgpu.sgn(T(a)), np.sign(a))
    p = rng().uniform(0.05, 0.95, 6)
    close(T(p).logit(), np.log(p / (1 - p)), 1e-5, 1e-5)
    z = T([0.01, 0.5], requires_grad=True)
    z.logit(eps=0.1).sum().backward()
    close(z.grad, [0, 4], 1e-5, 1e-5)
    close(T(a).heaviside(T(np.full(6, 0.5))), np.heaviside(f32(a), 0.5))
    b = f32([np.nan, np.inf, -np.inf, 2.0])
    close(T(b).nan_to_num(), np.nan_to_num(b))
    close(T(b).nan_to_num(1.0, 5.0, -5.0), [1, 5, -5, 2])
    close(T(a).deg2rad(), np.deg2rad(f32(a)))
    close(T(a).rad2deg(), np.rad2deg(f32(a)), 1e-5, 1e-5)


# ---- Reductions ----

@row('`x.cumprod(dim)`, `x.count_nonzero(dim)`, `x.diff(n, dim, prepend, append)`, `torch.std_mean`, '
     '`torch.var_mean`')
def _():
    r = rng()
    a = r.uniform(-2, 2, (3, 7))
    a[1, 2] = 0.0
    x = T(a, requires_grad=True)
    close(x.cumprod(1), np.cumprod(f32(a), 1), 1e-5, 1e-6)                # zeros and negatives, no log/exp
    x.cumprod(1)[:, -1].sum().backward()                                # d prod / d x_j: the product of the others
    close(x.grad, [[np.prod(np.delete(a[i], j)) for j in range(7)] for i in range(3)], 1e-4, 1e-6)
    c = r.integers(-1, 2, (3, 5)).astype(np.float32)
    assert T(c).count_nonzero(1).dtype == np.int32
    close(T(c).count_nonzero((0, 1)), np.count_nonzero(c))
    close(tlgpu.diff(x, 2, 0, append=T(a[:1])), np.diff(f32(a), 2, 0, append=a[:1]), 1e-5, 1e-6)
    s, m = tlgpu.std_mean(x, 1)
    close(s, f32(a).std(1, ddof=1), 1e-5, 1e-6)
    close(m, f32(a).mean(1), 1e-5, 1e-6)
    v, m = tlgpu.var_mean(x, correction=0)
    close(v, f32(a).var(), 1e-5, 1e-6)


@row('`x.median()`, `x.median(dim)`, `x.kthvalue(k, dim)`, `x.quantile(q, dim, interpolation=)`')
def _():
    r = rng()
    a = r.integers(0, 5, (4, 6)).astype(np.float32)                     # ties
    x = T(a)
    close(x.median(), np.sort(a.ravel())[(a.size - 1) // 2])
    res = x.median(dim=1)
    close(res.values, np.sort(a, 1)[:, 2])
    close(a[np.arange(4), res.indices.numpy()], np.sort(a, 1)[:, 2])
    assert res.indices.dtype == np.int32 and np.isnan(T([1.0, np.nan, 2.0]).median().item())
    kv = x.kthvalue(4, 0)
    close(kv.values, np.sort(a, 0)[3])
    b = r.standard_normal((3, 8))
    for interp in ("linear", "lower", "higher", "midpoint", "nearest"):
        close(T(b).quantile(T([0.1, 0.5, 0.75]), 1, interpolation=interp),
              np.quantile(f32(b), [0.1, 0.5, 0.75], axis=1, method=interp), 1e-5, 1e-6)


@row('`x.unique(sorted, return_inverse, return_counts, dim)`, `x.bincount(weights, minlength)`')
def _():
    r = rng()
    a = r.integers(0, 6, 30).astype(np.int32)
    u, inv, cnt = tlgpu.unique(I(a), return_inverse=True, return_counts=True)
    U, INV, CNT = np.unique(a, return_inverse=True, return_counts=True)
    close(u, U)
    close(inv, INV.reshape(a.shape))
    close(cnt, CNT)
    rows = I([[1, 2], [0, 3], [1, 2]])
    close(rows.unique(dim=0), [[0, 3], [1, 2]])
    assert I(a).bincount().dtype == np.int32
    close(I(a).bincount(minlength=9), np.bincount(a, minlength=9))
    w = r.standard_normal(30)
    close(I(a).bincount(T(w)), np.bincount(a, f32(w)), 1e-5, 1e-5)
    raises(ValueError, "non-negative", lambda: I([0, -2]).bincount())


@row('`torch.searchsorted(seq, values, right=, side=, sorter=)`, `torch.bucketize(x, boundaries, right=)`')
def _():
    r = rng()
    seq = np.sort(r.integers(0, 9, 21)).astype(np.float32)              # duplicates
    vals = r.integers(-1, 10, (4, 3)).astype(np.float32)
    for right in (False, True):
        side = "right" if right else "left"
        got = tlgpu.searchsorted(T(seq), T(vals), right=right)
        assert got.dtype == np.int32
        close(got, np.searchsorted(seq, vals, side))
        close(tlgpu.bucketize(T(vals), T(seq), right=right), np.searchsorted(seq, vals, side))
    rows = np.sort(r.standard_normal((2, 9)), 1).astype(np.float32)
    q = r.standard_normal((2, 5)).astype(np.float32)
    close(tlgpu.searchsorted(T(rows), T(q), side="right"), np.stack([np.searchsorted(rows[i], q[i], "right")
                                                                       for i in range(2)]))
    assert waits(lambda: tlgpu.searchsorted(T(seq), T(vals))) == 0


@row('`copy.deepcopy(module)`, `copy.deepcopy(t)`, `pickle.dumps(t)`')
def _():
    import copy
    import pickle
    from tlgpu import nn
    r = rng()
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    c = copy.deepcopy(m)
    pm, pc = list(m.parameters()), list(c.parameters())
    assert len(pc) == len(pm) == 4 and all(p.requires_grad and p.is_leaf for p in pc)
    for a, b in zip(pm, pc):
        close(b, a.numpy(), 0, 0)
    x = T(r.standard_normal((5, 3)))
    c(x).sum().backward()                                                 # the copy trains on its own
    assert all(p.grad is not None for p in pc) and all(p.grad is None for p in pm)
    with tlgpu.no_grad():
        pc[0].add_(1.0)
    assert np.abs(pc[0].numpy() - pm[0].numpy() - 1.0).max() < 1e-6      # no shared storage
    t = T(r.standard_normal(4), requires_grad=True)
    (t * 3).sum().backward()
    u = copy.deepcopy(t)
    assert u.requires_grad and u.is_leaf
    close(u.grad, np.full(4, 3.0), 0, 0)
    raises(RuntimeError, "leaves", lambda: copy.deepcopy(t * 2))
    v = pickle.loads(pickle.dumps(t))
    assert v.requires_grad
    close(v, t.numpy(), 0, 0)
    h = pickle.loads(pickle.dumps(T(r.standard_normal(3)).half()))
    assert h.dtype == np.float16 and not h.requires_grad

