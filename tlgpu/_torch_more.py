"""More of PyTorch's tensor-level names (issue 24: RL and nanoGPT ports), composed from tlgpu's C ops so that
autograd works where torch has a gradient. Nothing runs on the host except where the result's shape depends on
the values (a sync point, as in torch: masked_select, unique, bincount's length, a tensor of repeats or of
quantiles). Creation and shape: randperm (stable argsorts of tlgpu.rand: manual_seed applies), repeat_interleave,
tile, new_*, type_as, roll, tensor_split, diag, diagonal, trace, meshgrid, cartesian_prod, einsum (diagonal /
sum / permute / reshape / matmul). Indexing: scatter / scatter_add (index_add over flat positions; scatter finds
the last writer of each target by a stable argsort and gathers it), take_along_dim, masked_select. Scans and
order statistics: cumprod (a log2(n)-round product scan of multiplies, no log/exp, so zeros and negatives are
right), count_nonzero, diff, std_mean, var_mean, median, kthvalue, quantile (sort's values), unique, bincount,
searchsorted / bucketize (a binary search of gathers). Elementwise: sgn, logit, heaviside, nan_to_num, deg2rad,
rad2deg. tlgpu's index dtype is int32 (torch's int64); where a C op takes only float32 (sort, sum, index_add),
int32 data goes through float32 and back: exact while values (and positions) stay below 2**24 in magnitude.
"""
import collections
import math
import string

import numpy as np
from ml_dtypes import finfo as _finfo

from . import _C
from ._device import check_device
from ._torch_compat import _axis, _to_dtype, _with_grad, as_dtype
from .autograd import _dims, _is_int

Tensor = _C.Tensor
f32, i32 = np.dtype("float32"), np.dtype("int32")
median_result = collections.namedtuple("median", ["values", "indices"])       # torch.return_types.median
kthvalue_result = collections.namedtuple("kthvalue", ["values", "indices"])


def _need(x, op, what="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(x).__name__}")
    return x


def _int_tensor(x, op, what):
    """An int32 index tensor from a Tensor, numpy integer array or list (an upload, not a sync)."""
    if not isinstance(x, Tensor):
        a = np.asarray(x)
        if a.dtype.kind not in "iu" and a.size:
            raise TypeError(f"{op}: {what} must hold integers, got {a.dtype}")
        x = _C.tensor(a.astype(np.int32))
    if x.dtype != i32:
        raise TypeError(f"{op}: {what} must be an int32 tensor (torch: int64), got {x.dtype} with shape {x.shape}")
    return x


def _f32(x):
    return x if x.dtype == f32 else x.float()


def _back(r, dtype):
    """r (computed in float32) back in dtype; where() and the float32-only ops give float32."""
    return r if r.dtype == dtype else r._convert(dtype)


def _along(d, s):
    """A key applying slice or int s along dim d."""
    return (slice(None),) * d + (s,)


def _sizes(size):
    return tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)


# ---- creation ----

def randperm(n, *, generator=None, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
    """A random permutation of 0..n-1 on the device (int32; torch: int64), seeded by tlgpu.manual_seed: two
    uniform keys sorted stably one after the other (ties in both keys, ~2**-48 a pair, keep index order)."""
    if not _is_int(n) or isinstance(n, bool):
        raise TypeError(f"randperm: n must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"randperm: n must be non-negative, got {n}")
    if generator is not None:
        raise TypeError("randperm: generator= is not supported; seed with tlgpu.manual_seed")
    check_device(device, "randperm")
    dt = as_dtype(dtype, "randperm") or i32
    if n == 0:
        return _with_grad(_C.zeros(0, dtype=dt), requires_grad, "randperm")
    lo, hi = _C.rand(int(n)), _C.rand(int(n))
    p2 = lo.argsort()
    p = p2.gather(0, hi.gather(0, p2).argsort())
    return _with_grad(_to_dtype(p, dt, False), requires_grad, "randperm")


def _new(name, make):
    def fn(self, *args, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
        check_device(device, f"Tensor.{name}")
        dt = as_dtype(dtype, f"Tensor.{name}") or self.dtype
        return _with_grad(make(self, args, dt), requires_grad, f"Tensor.{name}")
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{name}(...): like torch's Tensor.{name}: self's dtype unless dtype= is given."
    return fn


new_zeros = _new("new_zeros", lambda s, a, dt: _C.zeros(_sizes(a), dtype=dt))
new_ones = _new("new_ones", lambda s, a, dt: _C.ones(_sizes(a), dtype=dt))
new_empty = _new("new_empty", lambda s, a, dt: _C.empty(_sizes(a), dtype=dt))
new_full = _new("new_full", lambda s, a, dt: _C.full(tuple(a[0]) if not _is_int(a[0]) else (a[0],), a[1], dtype=dt))
new_tensor = _new("new_tensor", lambda s, a, dt: _to_dtype(a[0].detach(), dt, True) if isinstance(a[0], Tensor)
                  else _C.tensor(a[0], dtype=dt))


def type_as(self, other):
    """self in other's dtype (self itself when they match)."""
    return _to_dtype(self, _need(other, "type_as", "other").dtype, False)


def meshgrid(*tensors, indexing="ij"):
    """Grids of the 0-d/1-d tensors, as expanded views: 'ij' (torch's default) or 'xy' (the first two dims
    swapped, numpy's default)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if indexing not in ("ij", "xy"):
        raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    for t in tensors:
        if _need(t, "meshgrid", "each input").ndim > 1:
            raise ValueError(f"meshgrid: expected 0-d or 1-d tensors, got shape {tuple(t.shape)}")
    lens = [t.numel() for t in tensors]
    pos = list(range(len(tensors)))
    if indexing == "xy" and len(tensors) >= 2:
        pos[0], pos[1] = 1, 0
    shape = [0] * len(tensors)
    for i, p in enumerate(pos):
        shape[p] = lens[i]
    return tuple(t.reshape(tuple(-1 if k == p else 1 for k in range(len(shape)))).expand(*shape)
                 for t, p in zip(tensors, pos))


def cartesian_prod(*tensors):
    """The rows of every combination of the 1-d tensors' elements (itertools.product order)."""
    if len(tensors) == 1:
        return _need(tensors[0], "cartesian_prod")
    return _C.stack([g.reshape(-1) for g in meshgrid(*tensors, indexing="ij")], 1)


# ---- shape ----

def repeat_interleave(self, repeats=None, dim=None, *, output_size=None):
    """Each element (slice along dim; dim=None: of the flattened tensor) repeated: an int repeats is a view
    expanded and reshaped (differentiable); a tensor or list of repeats (one per slice) is read on the host (a
    tensor: a sync point) and becomes an index_select. repeat_interleave(repeats) repeats arange(len)."""
    if repeats is None:
        reps = _int_tensor(self, "repeat_interleave", "repeats")
        return repeat_interleave(_C.arange(reps.numel(), dtype=i32), reps, 0)
    x, d = (self.reshape(-1), 0) if dim is None else (self, _axis("repeat_interleave", dim, self.ndim))
    if isinstance(repeats, Tensor) and repeats.numel() == 1 and repeats.ndim <= 1:
        repeats = int(_int_tensor(repeats, "repeat_interleave", "repeats").item())        # a sync point
    if _is_int(repeats):
        if repeats < 0:
            raise ValueError(f"repeat_interleave: repeats must be non-negative, got {repeats}")
        shape = tuple(x.shape)
        big = shape[:d + 1] + (int(repeats),) + shape[d + 1:]
        return x.unsqueeze(d + 1).expand(*big).reshape(shape[:d] + (shape[d] * int(repeats),) + shape[d + 1:])
    r = _int_tensor(repeats, "repeat_interleave", "repeats").numpy() if isinstance(repeats, Tensor) \
        else np.asarray(repeats)
    if r.ndim != 1 or r.shape[0] != x.shape[d] or (r < 0).any():
        raise ValueError(f"repeat_interleave: repeats must be {x.shape[d]} non-negative ints (one per slice of "
                         f"dim {d} of {tuple(x.shape)}), got shape {r.shape}")
    return x.index_select(d, np.repeat(np.arange(x.shape[d]), r).astype(np.int32))


def tile(self, *dims):
    """repeat(dims) with dims padded with leading 1s to self's rank (torch.tile)."""
    dims = _sizes(dims)
    return self.repeat((1,) * (self.ndim - len(dims)) + dims)


def roll(self, shifts, dims=None):
    """Elements shifted along dims, wrapping around (dims=None: the flattened tensor): one cat a dim."""
    if dims is None:
        if not _is_int(shifts) and len(shifts) != 1:
            raise ValueError(f"roll: with dims=None give one shift, got {shifts}")
        return roll(self.reshape(-1), shifts if _is_int(shifts) else shifts[0], 0).reshape(tuple(self.shape))
    shifts, dims = ((shifts,) if _is_int(shifts) else tuple(shifts)), ((dims,) if _is_int(dims) else tuple(dims))
    if len(shifts) != len(dims):
        raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
    out = self
    for s, d in zip(shifts, dims):
        d = _axis("roll", d, self.ndim)
        n = self.shape[d] if self.ndim else 1
        s = int(s) % n if n else 0
        if s:
            out = _C.cat([out[_along(d, slice(n - s, None))], out[_along(d, slice(0, n - s))]], d)
    return out.clone() if out is self else out


def tensor_split(self, indices_or_sections=None, dim=0, *, sections=None, indices=None):
    """Views along dim: n sections (the first size % n one longer: numpy's array_split), or split before each
    of the indices. A tensor argument is read on the host (a sync point)."""
    ios = [v for v in (indices_or_sections, sections, indices) if v is not None]
    if len(ios) != 1:
        raise TypeError("tensor_split: give one of indices_or_sections, sections= or indices=")
    ios = ios[0]
    d = _axis("tensor_split", dim, self.ndim)
    if isinstance(ios, Tensor):
        ios = _int_tensor(ios, "tensor_split", "indices_or_sections")
        ios = int(ios.item()) if ios.ndim == 0 else [int(v) for v in ios.tolist()]
    n = self.shape[d]
    if _is_int(ios):
        if ios <= 0:
            raise ValueError(f"tensor_split: number of sections must be positive, got {ios}")
        q, r = divmod(n, int(ios))
        ios = list(np.cumsum([q + 1] * r + [q] * (int(ios) - r))[:-1])
    bounds = [None] + [int(i) for i in ios] + [None]
    return tuple(self[_along(d, slice(a, b))] for a, b in zip(bounds[:-1], bounds[1:]))


def diagonal(self, offset=0, dim1=0, dim2=1):
    """The diagonal of dims dim1, dim2 (offset > 0 above) as the last dim: a strided slice of the two dims flattened
    (a view when they are the last two of a contiguous tensor, else a copy; torch: always a view)."""
    d1, d2 = _axis("diagonal", dim1, self.ndim), _axis("diagonal", dim2, self.ndim)
    if d1 == d2:
        raise ValueError(f"diagonal: dim1 and dim2 cannot be the same dim ({dim1}, {dim2})")
    x = self.movedim((d1, d2), (-2, -1))
    n, m = x.shape[-2], x.shape[-1]
    count = max(0, min(n, m - offset) if offset >= 0 else min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    flat = x.reshape(tuple(x.shape[:-2]) + (n * m,))
    if count == 0:
        return flat[..., :0]
    return flat[..., start:start + (count - 1) * (m + 1) + 1:m + 1]


_diagonal = diagonal                                           # diag's argument named diagonal hides it


def diag(self, diagonal=0):
    """1-d: the square matrix with self on the diagonal-th diagonal (zeros elsewhere); 2-d: that diagonal."""
    if self.ndim == 2:
        return _diagonal(self, diagonal)
    if self.ndim != 1:
        raise ValueError(f"diag: expected a 1-d or 2-d tensor, got shape {tuple(self.shape)}")
    m, k, dt = self.shape[0], abs(int(diagonal)), self.dtype
    z = _C.zeros(m, m, dtype=dt)                              # v then m zeros a row: row i holds v_i at column i
    mat = _C.cat([self.unsqueeze(1), z], 1).reshape(-1)[:m * m].reshape(m, m)
    if diagonal > 0:                                          # v_i at (i, i + k): k zero columns left
        mat = _C.cat([_C.cat([_C.zeros(m, k, dtype=dt), mat], 1), _C.zeros(k, m + k, dtype=dt)], 0)
    elif diagonal < 0:                                        # v_i at (i + k, i): k zero rows on top
        mat = _C.cat([_C.zeros(k, m + k, dtype=dt), _C.cat([mat, _C.zeros(m, k, dtype=dt)], 1)], 0)
    return mat


def trace(self):
    """The sum of a matrix's diagonal (int32 through float32)."""
    if self.ndim != 2:
        raise ValueError(f"trace: expected a matrix, got shape {tuple(self.shape)}")
    return _back(_f32(diagonal(self)).sum(), self.dtype if self.dtype in (f32, i32) else f32)


# ---- einsum ----

def _einsum_terms(equation, operands):
    """Sublist form (op, [0, 1], op, [1, 2], [0, 2]) as an equation string."""
    args = (equation,) + tuple(operands)
    out = args[-1] if len(args) % 2 else None
    args = args[:-1] if len(args) % 2 else args

    def letters(sub):
        return "".join("..." if s is Ellipsis else string.ascii_letters[s] for s in sub)
    eq = ",".join(letters(s) for s in args[1::2]) + ("" if out is None else "->" + letters(out))
    return eq, args[0::2]


def _parse(term, ndim, k, E=None):
    """A term's labels, '...' replaced by ('...', j) labels right-aligned to E broadcast dims."""
    if term.count("...") > 1 or any(not (c.isascii() and c.isalpha()) for c in term.replace("...", "")):
        raise ValueError(f"einsum: invalid subscripts {term!r} (letters and at most one '...')")
    named = len(term) - (3 if "..." in term else 0)
    if ("..." in term and named > ndim) or ("..." not in term and named != ndim):
        raise ValueError(f"einsum: subscripts {term!r} do not match operand {k}'s {ndim} dims")
    if "..." not in term:
        return list(term), 0
    e = ndim - named
    head, tail = term.split("...")
    return list(head) + [("...", (E or e) - e + j) for j in range(e)] + list(tail), e


def einsum(equation, *operands):
    """einsum(equation, *operands) or the sublist form: implicit (labels seen once, sorted, '...' first) or explicit
    output, '...', repeated labels (diagonals, traces), size-1 broadcasting. Lowered to diagonal / sum / permute /
    reshape / broadcast multiply / matmul, operands left to right, so autograd works."""
    if not isinstance(equation, str):
        equation, operands = _einsum_terms(equation, operands)
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    for t in operands:
        _need(t, "einsum", "each operand")
    eq = equation.replace(" ", "")
    if eq.count("->") > 1:
        raise ValueError(f"einsum: more than one '->' in {equation!r}")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ValueError(f"einsum: {equation!r} has {len(terms)} operand subscripts, got {len(operands)} operands")
    E = max([_parse(t, op.ndim, k)[1] for k, (t, op) in enumerate(zip(terms, operands))] + [0])
    labels = [_parse(t, op.ndim, k, E)[0] for k, (t, op) in enumerate(zip(terms, operands))]
    ell = [("...", j) for j in range(E)]
    if arrow:
        if rhs.count("...") > 1 or any(not (c.isascii() and c.isalpha()) for c in rhs.replace("...", "")):
            raise ValueError(f"einsum: invalid output subscripts {rhs!r}")
        head, _, tail = rhs.partition("...")
        out = list(head) + (ell if "..." in rhs else []) + list(tail)
        seen = {c for ls in labels for c in ls}
        if len(set(out)) != len(out) or any(c not in seen for c in out if isinstance(c, str)):
            raise ValueError(f"einsum: output subscripts {rhs!r} repeat a label or name one no operand has")
    else:
        flat = [c for ls in labels for c in ls if isinstance(c, str)]
        out = ell + sorted(c for c in set(flat) if flat.count(c) == 1)
    size = {}
    for k, (ls, op) in enumerate(zip(labels, operands)):
        for c, s in zip(ls, op.shape):
            if size.get(c, 1) not in (1, s) and s != 1:
                raise ValueError(f"einsum: label {c if isinstance(c, str) else '...'} has sizes {size[c]} and {s} "
                                 f"(operand {k}, shape {tuple(op.shape)})")
            size[c] = max(size.get(c, 1), s)
    ops = []
    for k, (ls, op) in enumerate(zip(labels, operands)):
        ls = list(ls)
        for c in [c for c in dict.fromkeys(ls) if ls.count(c) > 1]:          # repeated label: its diagonal
            while ls.count(c) > 1:
                i, j = [p for p, v in enumerate(ls) if v == c][:2]
                if op.shape[i] != op.shape[j]:
                    raise ValueError(f"einsum: label {c} repeats in operand {k} with sizes {op.shape[i]} and "
                                     f"{op.shape[j]}")
                op = diagonal(op, 0, i, j)
                ls = [v for p, v in enumerate(ls) if p not in (i, j)] + [c]
        ops.append((op, ls))
    cur, cl = ops[0]
    for k in range(1, len(ops)):
        later = set(out) | {c for _, ls in ops[k + 1:] for c in ls}
        cur, cl = _contract(cur, cl, *ops[k], later)
    cur, cl = _sum_out(cur, cl, set(out))
    cur = cur.permute(*[cl.index(c) for c in out]) if cl != out else cur
    if any(cur.shape[i] != size[c] for i, c in enumerate(out)):      # a size-1 operand dim against a larger one
        cur = cur.expand(*[size[c] for c in out])
    return cur.clone() if cur is operands[0] else cur


def _sum_out(x, ls, keep):
    axes = tuple(i for i, c in enumerate(ls) if c not in keep)
    if not axes:
        return x, ls
    return x.sum(axis=axes), [c for c in ls if c in keep]


def _contract(a, al, b, bl, later):
    """a (labels al) with b (bl), keeping the labels in later: a broadcast product or one (batched) matmul."""
    a, al = _sum_out(a, al, set(bl) | later)
    b, bl = _sum_out(b, bl, set(al) | later)
    batch = [c for c in al if c in bl and c in later]
    red = [c for c in al if c in bl and c not in later]
    ao, bo = [c for c in al if c not in bl], [c for c in bl if c not in al]
    sz = {c: max(a.shape[al.index(c)] if c in al else 1, b.shape[bl.index(c)] if c in bl else 1) for c in al + bl}

    def arrange(x, ls, order, shape):
        if ls != order:
            x = x.permute(*[ls.index(c) for c in order])
        return x.expand(*[sz[c] for c in order]).reshape(shape) if shape is not None else x
    if not red:
        a = arrange(a, al, batch + ao, None).reshape(tuple(a.shape[al.index(c)] for c in batch + ao) + (1,) * len(bo))
        b = arrange(b, bl, batch + bo, None)
        b = b.reshape(tuple(b.shape[:len(batch)]) + (1,) * len(ao) + tuple(b.shape[len(batch):]))
        return a * b, batch + ao + bo
    nb, m, kk, n = (math.prod(sz[c] for c in g) for g in (batch, ao, red, bo))
    lead = (nb,) if batch else ()
    r = arrange(a, al, batch + ao + red, lead + (m, kk)) @ arrange(b, bl, batch + red + bo, lead + (kk, n))
    return r.reshape(tuple(sz[c] for c in batch + ao + bo)), batch + ao + bo


# ---- indexing ----

def _scatter_positions(self, dim, index, src, op):
    """(d, index's shape, positions): self's flat position of each index element (numel where the index is out of
    range, which index_add reports as IndexError at the next sync point), src checked against index."""
    d = _axis(op, dim, self.ndim)
    index = _int_tensor(index, op, "index")
    if index.ndim != max(self.ndim, 1) and not (index.ndim == 0 and self.ndim == 0):
        raise ValueError(f"{op}: index {tuple(index.shape)} must have as many dims as self {tuple(self.shape)}")
    shape = tuple(self.shape) or (1,)
    ish = tuple(index.shape) or (1,)
    if any(i > s for k, (i, s) in enumerate(zip(ish, shape)) if k != d):
        raise ValueError(f"{op}: index {ish} must not be larger than self {shape} apart from dim {d}")
    if isinstance(src, Tensor):
        if src.ndim != index.ndim or any(i > s for i, s in zip(ish, tuple(src.shape) or (1,))):
            raise ValueError(f"{op}: index {ish} must not be larger than src {tuple(src.shape)} in any dim")
        if src.dtype != self.dtype:
            raise TypeError(f"{op}: src dtype {src.dtype} must match self's {self.dtype}")
    strides = [int(np.prod(shape[k + 1:])) for k in range(len(shape))]
    idx = index.reshape(ish)
    pos = idx * strides[d]
    for k, n in enumerate(ish):
        if k != d and n > 1:
            pos = pos + (_C.arange(n, dtype=i32) * strides[k]).reshape(
                tuple(n if j == k else 1 for j in range(len(ish))))
    bad = ((idx < 0) + (idx >= shape[d])).int()                 # to numel: index_add wraps -1 but refuses numel
    return d, ish, (pos + bad * (int(np.prod(shape)) - pos)).reshape(-1)


def _src_part(src, ish):
    return (src.reshape(1) if src.ndim == 0 else src)[tuple(slice(0, n) for n in ish)].reshape(-1)


def scatter_add(self, dim, index, src):
    """self with src[.., i, ..] added at self[.., index[.., i, ..], ..] along dim (repeated indices accumulate, in
    order): index_add over flat positions. Differentiable in self and src; int32 through float32."""
    _need(src, "scatter_add", "src")
    d, ish, pos = _scatter_positions(self, dim, index, src, "scatter_add")
    flat = _f32(self).reshape(-1)
    if pos.numel() == 0:
        return self.clone()
    return _back(flat.index_add(0, pos, _f32(_src_part(src, ish))).reshape(tuple(self.shape)), self.dtype)


def _blend(mask, a, b, dtype):
    """a where mask else b, in dtype (int32 by arithmetic, exact; floats by where, NaN/inf-safe)."""
    if dtype == i32:
        return b + mask.int() * (a - b)
    return _back(_C.where(mask, a, b), dtype)


def scatter(self, dim, index, src=None, *, value=None, reduce=None):
    """self with self[.., index[.., i, ..], ..] = src[.., i, ..] along dim (or = value, a number). Where an index
    repeats, the last src in index order is written (torch's CPU result): a stable argsort of the positions finds
    it, and the values are gathered (exact in every dtype). Differentiable in self and src (the written ones).
    reduce='add' is scatter_add."""
    if reduce is not None:
        if reduce != "add":
            raise ValueError(f"scatter: reduce={reduce!r} is not supported ('add', or scatter_add)")
        return scatter_add(self, dim, index, src)
    if (src is None) == (value is None):
        raise TypeError("scatter: give src (a tensor) or value (a number)")
    if not isinstance(src, Tensor) and src is not None:
        src, value = None, src
    if value is not None and not isinstance(value, (int, float, np.number)):
        raise TypeError(f"scatter: value must be a number, got {type(value).__name__}")
    d, ish, pos = _scatter_positions(self, dim, index, src, "scatter")
    if pos.numel() == 0:
        return self.clone()
    n, k = self.numel(), pos.numel()
    if value is not None:
        hit = _C.zeros(n).index_add_(0, pos, _C.ones(k)).reshape(tuple(self.shape)) > 0
        return _blend(hit, _C.full(tuple(self.shape), value, dtype=self.dtype), self, self.dtype)
    order = pos.float().argsort()                          # stable: a target's sources in index order
    sp = pos.gather(0, order)
    last = _C.cat([sp[1:] != sp[:-1], _C.ones(1)]) if k > 1 else _C.ones(1)
    keep = _C.zeros(k).index_add_(0, order, last)          # 1.0 at the last source of each target
    won = _C.zeros(n).index_add_(0, pos, keep * _C.arange(1, k + 1).float())   # that source, 1-based; 0: none
    put = _src_part(src, ish).gather(0, (won - 1.0).clamp(min=0).int())       # gathered: exact in any dtype
    return _blend(won.reshape(tuple(self.shape)) > 0, put.reshape(tuple(self.shape)), self, self.dtype)


def take_along_dim(self, indices, dim=None):
    """gather along dim with self and indices broadcast over the other dims (dim=None: the flattened tensor)."""
    indices = _int_tensor(indices, "take_along_dim", "indices")
    if dim is None:
        return self.reshape(-1).gather(0, indices.reshape(-1))
    d = _axis("take_along_dim", dim, self.ndim)
    if indices.ndim != self.ndim:
        raise ValueError(f"take_along_dim: indices {tuple(indices.shape)} and input {tuple(self.shape)} must have "
                         "the same number of dims")
    try:
        b = list(np.broadcast_shapes(*[tuple(s[:d]) + (1,) + tuple(s[d + 1:]) for s in (self.shape, indices.shape)]))
    except ValueError:
        raise ValueError(f"take_along_dim: input {tuple(self.shape)} and indices {tuple(indices.shape)} do not "
                         f"broadcast apart from dim {d}") from None
    x = self.expand(*(b[:d] + [self.shape[d]] + b[d + 1:]))
    return x.gather(d, indices.expand(*(b[:d] + [indices.shape[d]] + b[d + 1:])))


def masked_select(self, mask):
    """The elements where mask (broadcast with self) is nonzero, as a 1-d tensor: the mask is read back (a sync
    point, as torch's data-dependent shape is); differentiable in self."""
    if not isinstance(mask, (Tensor, np.ndarray)):
        raise TypeError(f"masked_select: mask must be a Tensor or a numpy array, got {type(mask).__name__}")
    try:
        shape = np.broadcast_shapes(tuple(self.shape), tuple(mask.shape))
    except ValueError:
        raise ValueError(f"masked_select: mask {tuple(mask.shape)} does not broadcast with {tuple(self.shape)}") \
            from None
    m = np.broadcast_to(np.asarray(mask.numpy() if isinstance(mask, Tensor) else mask) != 0, shape)
    return self.expand(*shape).reshape(-1).index_select(0, np.flatnonzero(m).astype(np.int32))


# ---- scans and reductions ----

def cumprod(self, dim, *, dtype=None):
    """Inclusive products along dim: a Hillis-Steele scan (log2(n) rounds of a multiply and a cat): the products of
    the same elements grouped otherwise (right with zeros, negatives, inf, NaN; a few ulp from a sequential
    product). Differentiable, through zeros too."""
    x = _to_dtype(self, as_dtype(dtype, "cumprod"), False) if dtype is not None else self
    back = x.dtype
    if x.dtype not in (f32, i32):                          # uint8 gives int32 (torch: int64); halves in float32
        x, back = (x.int(), i32) if x.dtype == np.uint8 else (x.float(), x.dtype)
    d = _axis("cumprod", dim, self.ndim)
    flat = x.reshape(1) if x.ndim == 0 else x
    n, step = flat.shape[d], 1
    while step < n:
        head, rest = flat[_along(d, slice(0, step))], flat[_along(d, slice(step, None))]
        flat = _C.cat([head, rest * flat[_along(d, slice(0, n - step))]], d)
        step *= 2
    out = _back(flat.reshape(()) if x.ndim == 0 else flat, back)
    return out.clone() if out is self else out


def count_nonzero(self, dim=None):
    """The number of nonzero elements over dim (None: all; an int or a tuple), int32."""
    return (self != 0).sum(axis=None if dim is None else _dims("count_nonzero", dim, self.ndim)).int()


def diff(self, n=1, dim=-1, prepend=None, append=None):
    """The n-th forward difference along dim, after prepend/append (tensors or arrays; a number: one slice) join."""
    if self.ndim == 0:
        raise ValueError("diff: expected a tensor of at least one dim, got a 0-d tensor")
    if not _is_int(n) or n < 0:
        raise ValueError(f"diff: n must be a non-negative int, got {n!r}")
    d = _axis("diff", dim, self.ndim)
    one = tuple(1 if k == d else s for k, s in enumerate(self.shape))
    parts = []
    for v in (prepend, self, append):
        if v is not None and not isinstance(v, Tensor):
            v = _C.full(one, v, dtype=self.dtype) if np.ndim(v) == 0 else _C.tensor(np.asarray(v), dtype=self.dtype)
        if v is not None:
            if v.ndim != self.ndim:
                raise ValueError(f"diff: prepend/append {tuple(v.shape)} must have the input's {self.ndim} dims")
            parts.append(v)
    x = _C.cat(parts, d) if len(parts) > 1 else self
    for _ in range(int(n)):
        if x.shape[d] == 0:
            break
        x = x[_along(d, slice(1, None))] - x[_along(d, slice(0, -1))]
    return x.clone() if x is self else x


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(var, mean) over dim, var's correction as Tensor.var (unbiased by default)."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    v = _need(input, "var_mean").var(dim, unbiased, keepdim, correction=correction)
    return v, _f32(input).mean(axis=None if dim is None else _dims("var_mean", dim, input.ndim), keepdims=keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    """(std, mean) over dim, as var_mean."""
    v, m = var_mean(input, dim, unbiased, keepdim, correction=correction)
    return v.sqrt(), m


def _kth(self, k, dim, keepdim, op, nan_wins):
    """(values, indices) of the k-th smallest (0-based) along dim via a stable sort; nan_wins: a NaN in the line
    makes the result NaN at the first NaN's index (torch.median)."""
    x = _f32(self)
    d = _axis(op, dim, self.ndim)
    if x.ndim == 0:
        x, d = x.reshape(1), 0
    vals, idx = x.sort(dim=d)
    v, i = vals.select(d, k), idx.select(d, k)
    if nan_wins and self.dtype != i32:
        isn = x != x
        has = isn.sum(axis=d) > 0
        v = _C.where(has, float("nan"), v)
        i = _C.where(has, isn.argmax(axis=d).float(), i.float()).int()
    if keepdim and self.ndim:
        v, i = v.unsqueeze(d), i.unsqueeze(d)
    return _back(v, self.dtype), i


def median(self, dim=None, keepdim=False):
    """The lower median (torch's: the ((n - 1) // 2)-th smallest); NaN if the line holds one. dim=None: over all
    elements, values only; with dim: named tuple (values, indices) (int32). Values differentiable."""
    if dim is None:
        if self.numel() == 0:
            return _C.full((), float("nan"), dtype=self.dtype)
        return _kth(self.reshape(-1), (self.numel() - 1) // 2, 0, False, "median", True)[0]
    d = _axis("median", dim, self.ndim)
    n = self.shape[d] if self.ndim else 1
    if n == 0:
        raise IndexError(f"median: dim {d} of {tuple(self.shape)} is empty")
    return median_result(*_kth(self, (n - 1) // 2, d, keepdim, "median", True))


def kthvalue(self, k, dim=-1, keepdim=False):
    """Named tuple (values, indices) of the k-th smallest (1-based) along dim (NaN largest, as sort)."""
    d = _axis("kthvalue", dim, self.ndim)
    n = self.shape[d] if self.ndim else 1
    if not _is_int(k) or not 1 <= k <= n:
        raise IndexError(f"kthvalue: k={k!r} is out of range for dim {d} of size {n}")
    return kthvalue_result(*_kth(self, int(k) - 1, d, keepdim, "kthvalue", False))


_INTERP = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile(self, q, dim=None, keepdim=False, *, interpolation="linear"):
    """The q-quantiles (q a number or a 1-d tensor/list in [0, 1]: its dim first in the result) over dim (None:
    all elements) from sort's values: linear, lower, higher, midpoint or nearest (half to even), as torch;
    NaN where the line holds one. float32; differentiable. A tensor q is read on the host (a sync point)."""
    if self.dtype != f32:
        raise TypeError(f"quantile: input must be float32, got {self.dtype}")
    if interpolation not in _INTERP:
        raise ValueError(f"quantile: interpolation must be one of {_INTERP}, got {interpolation!r}")
    qa = np.asarray(q.numpy() if isinstance(q, Tensor) else q, dtype=np.float32)   # torch's ranks: in float32
    if qa.ndim > 1 or not ((qa >= 0) & (qa <= 1)).all():
        raise ValueError(f"quantile: q must be a number or a 1-d sequence of values in [0, 1], got {q!r}")
    x, d = (self.reshape(-1), 0) if dim is None else (self, _axis("quantile", dim, self.ndim))
    if x.ndim == 0:
        x = x.reshape(1)
    n = x.shape[d]
    if n == 0:
        raise ValueError(f"quantile: dim {d} of {tuple(self.shape)} is empty")
    qs = qa.reshape(-1)
    pos = qs * np.float32(n - 1)
    lo, hi = np.floor(pos), np.ceil(pos)
    if interpolation == "lower":
        hi = lo
    elif interpolation == "higher":
        lo = hi
    elif interpolation == "nearest":
        lo = hi = np.round(pos)
    vals = x.sort(dim=d).values
    vlo = vals.index_select(d, lo.astype(np.int32))
    v = vlo
    if (hi != lo).any():
        w = 0.5 * (hi != lo) if interpolation == "midpoint" else pos - lo
        wt = _C.tensor(w.astype(np.float32)).reshape(tuple(-1 if k == d else 1 for k in range(x.ndim)))
        v = vlo + (vals.index_select(d, hi.astype(np.int32)) - vlo) * wt
    has = (x != x).sum(axis=d, keepdims=True) > 0
    v = _C.where(has, float("nan"), v).movedim(d, 0)                   # q's dim first
    if keepdim:
        v = v.reshape((len(qs),) + (1,) * self.ndim) if dim is None else v.unsqueeze(d + 1)
    return v.reshape(tuple(v.shape[1:])) if qa.ndim == 0 else v


def unique(self, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """The distinct elements (dim=None) or slices along dim, sorted; with return_inverse each element's position
    in them (int32, self's shape; along dim: one a slice) and return_counts their counts (int32). A sync point
    (the count sets the shape): computed by numpy on the host copy."""
    a = self.numpy()
    if dim is not None:
        dim = _axis("unique", dim, self.ndim)
    u, inv, cnt = np.unique(a, return_inverse=True, return_counts=True, axis=dim)
    out = [_C.tensor(np.ascontiguousarray(u), dtype=self.dtype)]
    if return_inverse:
        out.append(_C.tensor(inv.astype(np.int32).reshape(a.shape if dim is None else (-1,))))
    if return_counts:
        out.append(_C.tensor(cnt.astype(np.int32)))
    return out[0] if len(out) == 1 else tuple(out)


def bincount(self, weights=None, minlength=0):
    """Counts of each value 0..max of a 1-d non-negative int32 tensor (int32), or the sums of weights there
    (float32): index_add on the device; the length (max + 1, at least minlength) is read back (a sync point)."""
    if self.ndim != 1 or self.dtype not in (i32, np.uint8):
        raise TypeError(f"bincount: expected a 1-d int32 tensor, got {self.dtype} with shape {tuple(self.shape)}")
    if not _is_int(minlength) or minlength < 0:
        raise ValueError(f"bincount: minlength must be a non-negative int, got {minlength!r}")
    if weights is not None and (_need(weights, "bincount", "weights").shape != self.shape):
        raise ValueError(f"bincount: weights {tuple(weights.shape)} must match the input {tuple(self.shape)}")
    n = int(minlength)
    if self.numel():
        hi, lo = _C.stack([_f32(self).max(), _f32(self).min()]).numpy()
        if lo < 0:
            raise ValueError(f"bincount: the input must be non-negative, found {int(lo)}")
        n = max(n, int(hi) + 1)
    w = _C.ones(self.numel()) if weights is None else _f32(weights)
    out = _C.zeros(n).index_add_(0, self.int(), w) if self.numel() else _C.zeros(n)
    return out.int() if weights is None else out


def searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    """For each value, the number of elements of the sorted last dim below it (right: not above it): a binary
    search on the device, log2(n) rounds of a gather and a compare. A 1-d sequence serves any values; an N-d one
    searches each row (its leading dims match the values'). int32; NaN values go last, as torch's."""
    seq = _need(sorted_sequence, "searchsorted", "sorted_sequence")
    if side is not None:
        if side not in ("left", "right") or (right and side == "left"):
            raise ValueError(f"searchsorted: side must be 'left' or 'right' (and agree with right=), got {side!r}")
        right = side == "right"
    if sorter is not None:
        seq = seq.gather(-1, _int_tensor(sorter, "searchsorted", "sorter"))
    scalar = not isinstance(values, Tensor)
    v = _C.tensor(np.asarray(values, dtype=np.float32)) if scalar else values
    if seq.ndim == 0:
        raise ValueError("searchsorted: sorted_sequence must have at least one dim")
    if seq.ndim > 1 and (v.ndim != seq.ndim or tuple(v.shape[:-1]) != tuple(seq.shape[:-1])):
        raise ValueError(f"searchsorted: sorted_sequence {tuple(seq.shape)} and values {tuple(v.shape)} must match "
                         "apart from the last dim")
    n = seq.shape[-1]
    vv = v.reshape(1, -1) if seq.ndim == 1 else v
    s = seq.reshape(1, n) if seq.ndim == 1 else seq
    pos = _C.zeros(tuple(vv.shape))
    step = 1 << (n.bit_length() - 1) if n else 0
    while step:
        cand = pos + step
        g = s.gather(-1, (cand - 1).clamp(max=n - 1).int())
        below = 1.0 - ((g > vv) if right else (g >= vv))       # not(g >= v): NaN values move right
        pos = pos + (below * (cand <= n)) * step
        step >>= 1
    return pos.int().reshape(tuple(v.shape))


def bucketize(input, boundaries, *, out_int32=False, right=False):
    """searchsorted(boundaries, input, right=right): boundaries[i-1] < x <= boundaries[i] gives i (right: <=, <)."""
    if _need(boundaries, "bucketize", "boundaries").ndim != 1:
        raise ValueError(f"bucketize: boundaries must be 1-d, got shape {tuple(boundaries.shape)}")
    return searchsorted(boundaries, input, right=right)


# ---- elementwise ----

def sgn(self):
    """sign(self) (for real tensors torch's sgn is sign)."""
    return self.sign()


def logit(self, eps=None):
    """log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given (its gradient 0 outside)."""
    x = _f32(self)
    if eps is not None:
        x = x.clamp(eps, 1.0 - eps)
    return _back((x / (1.0 - x)).log(), self.dtype if self.dtype != i32 else f32)


def heaviside(self, values):
    """0 where self < 0, values where self == 0, 1 where self > 0 (NaN gives 0, as torch)."""
    out = _C.where(self == 0, values, self > 0)
    return _back(out, self.dtype)


def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced (by default with 0 and the dtype's largest / lowest finite value); int32 as it
    is. The gradient is 0 at the replaced elements."""
    if self.dtype in (i32, np.uint8):
        return self.clone()
    big = float(_finfo(self.dtype).max)
    x = _f32(self)
    out = _C.where(x != x, float(nan), x)
    out = _C.where(x == math.inf, big if posinf is None else float(posinf), out)
    out = _C.where(x == -math.inf, -big if neginf is None else float(neginf), out)
    return _back(out, self.dtype)


def deg2rad(self):
    """Degrees to radians (int32 gives float32)."""
    return _f32(self) * (math.pi / 180.0) if self.dtype == i32 else self * (math.pi / 180.0)


def rad2deg(self):
    """Radians to degrees (int32 gives float32)."""
    return _f32(self) * (180.0 / math.pi) if self.dtype == i32 else self * (180.0 / math.pi)


def _in_place(fn):
    def method(self, *args, **kwargs):
        return self.copy_(fn(self, *args, **kwargs))
    method.__name__ = method.__qualname__ = fn.__name__ + "_"
    method.__doc__ = f"In-place {fn.__name__} (recorded like copy_); returns self."
    return method


scatter_, scatter_add_, nan_to_num_ = _in_place(scatter), _in_place(scatter_add), _in_place(nan_to_num)


def _module_form(fn):
    """tlgpu.name(x, ...) for method fn, refusing a non-tensor x with a TypeError naming the op."""
    def wrapper(input, *args, **kwargs):
        _need(input, fn.__name__)
        return fn(input, *args, **kwargs)
    wrapper.__name__ = wrapper.__qualname__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper


_BOTH = (repeat_interleave, tile, roll, tensor_split, diag, diagonal, trace, scatter, scatter_add, take_along_dim,
         masked_select, cumprod, count_nonzero, diff, median, kthvalue, quantile, unique, bincount, sgn, logit,
         heaviside, nan_to_num, nan_to_num_, deg2rad, rad2deg)
METHODS = {f.__name__: f for f in _BOTH + (new_zeros, new_ones, new_full, new_empty, new_tensor, type_as,
                                           scatter_, scatter_add_)}
MORE = {f.__name__: _module_form(f) for f in _BOTH}
MORE.update({f.__name__: f for f in (randperm, einsum, meshgrid, cartesian_prod, std_mean, var_mean, searchsorted,
                                     bucketize)})


def install():
    """Attach the methods to Tensor and return the module functions, leaving alone any name the C layer has
    (an op added there later wins)."""
    for name, fn in METHODS.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)
    return {name: fn for name, fn in MORE.items() if not hasattr(_C, name)}
