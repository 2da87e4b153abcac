"""Grad-mode switches (no_grad, enable_grad, inference_mode, set_grad_enabled: grad mode is per thread, kept in
C; these only flip it and restore it), and the Tensor methods that are compositions of differentiable C ops:
var/std, repeat, masked_fill, max/min with dim=, size, dim, __format__, and the named tuples of topk/sort
(attached to Tensor at import)."""
import collections
import functools

import numpy as _np
from ml_dtypes import bfloat16 as _bf16

from . import _C


class _GradMode:
    _enabled = True
    _bare = True          # @no_grad without parentheses decorates too (torch 2.x)

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        if cls._bare and not kwargs and len(args) == 1 and callable(args[0]) and not isinstance(args[0], bool):
            self.__init__()
            return self(args[0])
        return self

    def __enter__(self):
        self._prev = _C._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)():
                return fn(*args, **kwargs)
        return wrapper


class no_grad(_GradMode):
    """Context manager and decorator: ops inside record no graph (this thread only)."""
    _enabled = False


class enable_grad(_GradMode):
    """Context manager and decorator: turn grad mode back on inside a no_grad region."""
    _enabled = True


class inference_mode(_GradMode):
    """inference_mode(mode=True): context manager and decorator. tlgpu has no separate inference mode (no
    version counters or views to skip), so mode=True is no_grad() and mode=False leaves grad mode as it is."""

    def __init__(self, mode=True):
        self._mode = bool(mode)

    def __enter__(self):
        self._prev = _C._set_grad_enabled(False) if self._mode else _C.is_grad_enabled()
        return self

    def __call__(self, fn):
        mode = self._mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(mode):
                return fn(*args, **kwargs)
        return wrapper


class set_grad_enabled(_GradMode):
    """set_grad_enabled(mode): sets grad mode at once (this thread), like torch; used as a context manager or
    decorator it restores the previous mode on exit."""

    _bare = False

    def __init__(self, mode):
        self._prev = _C._set_grad_enabled(bool(mode))
        self._enabled = bool(mode)

    def __enter__(self):
        return self

    def __call__(self, fn):
        _C._set_grad_enabled(self._prev)             # as a decorator, the call above set nothing for good
        mode = self._enabled

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper


# ---- Tensor methods composed of differentiable C ops (their gradients come from those ops' backwards) ----

_Tensor = _C.Tensor
_c_max, _c_min, _c_argmax, _c_argmin = _Tensor.max, _Tensor.min, _Tensor.argmax, _Tensor.argmin
max_result = collections.namedtuple("max", ["values", "indices"])   # torch.return_types.max
min_result = collections.namedtuple("min", ["values", "indices"])
topk_result = collections.namedtuple("topk", ["values", "indices"])  # torch.return_types.topk
sort_result = collections.namedtuple("sort", ["values", "indices"])
_c_topk, _c_sort = _Tensor.topk, _Tensor.sort


def _named(c_fn, result):
    @functools.wraps(c_fn)
    def fn(self, *args, **kwargs):
        return result(*c_fn(self, *args, **kwargs))
    return fn


def _is_int(v):
    """An int, or anything that is one (numpy integers: __index__), as PyTorch and numpy take for a size or dim;
    the one test of that in the Python layer. A tensor (whose __index__ is a sync point) is not one here."""
    return isinstance(v, int) or (hasattr(type(v), "__index__") and not isinstance(v, _Tensor))


def _dims(op, dim, ndim):
    """dim (None, int or a sequence of ints) as a sorted tuple of non-negative axes."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if _is_int(dim) else tuple(dim)
    out = []
    for d in dims:
        if not _is_int(d) or not -max(ndim, 1) <= d < max(ndim, 1):
            raise IndexError(f"{op}: dim {d!r} is out of range for a tensor with {ndim} dimensions")
        out.append(int(d) % max(ndim, 1))
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: dim {dim!r} repeats an axis")
    return tuple(sorted(out))


def var(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None, keepdims=None, ddof=None,
        dtype=None, out=None):
    """Variance over dim (None: all elements), dividing by N - correction: 1 by default (unbiased, like
    torch), 0 with unbiased=False or correction=0. axis=/keepdims=/ddof= are numpy's spellings of the same
    (np.var(t) passes ddof=0: numpy's population variance; its dtype=None and out=None are accepted)."""
    if dtype is not None or out is not None:
        raise TypeError("var: out= and dtype= are not supported (convert the result instead)")
    if ddof is not None:
        if correction is not None:
            raise TypeError("var: give ddof or correction, not both")
        correction = ddof
    if isinstance(dim, bool):                      # torch's var(unbiased) form
        dim, unbiased = None, dim
    if axis is not None:
        if dim is not None:
            raise TypeError("var: give dim or axis, not both")
        dim = axis
    keepdim = bool(keepdims) if keepdims is not None else keepdim
    if correction is not None and unbiased is not None:
        raise TypeError("var: give unbiased or correction, not both")
    corr = correction if correction is not None else (0 if unbiased is False else 1)
    x = self.float() if self.dtype != _np.float32 else self
    axes = _dims("var", dim, x.ndim)
    n = 1
    for d in axes:
        n *= x.shape[d] if x.ndim else 1
    red = axes if x.ndim else None
    d = x - x.mean(axis=red, keepdims=True)
    v = (d * d).sum(axis=red, keepdims=keepdim) / float(n - corr)
    return v._convert(self.dtype) if self.dtype in (_np.float16, _np.dtype(_bf16)) else v   # float16 in: float16 out


def std(self, dim=None, unbiased=None, keepdim=False, *, correction=None, axis=None, keepdims=None, ddof=None,
        dtype=None, out=None):
    """sqrt(var(...)) with var's arguments (unbiased by default)."""
    return var(self, dim, unbiased, keepdim, correction=correction, axis=axis, keepdims=keepdims, ddof=ddof,
               dtype=dtype, out=out).sqrt()


def _torch_reduction(args, kwargs):
    """(dim, keepdim) when a max/min call uses torch's form, dim= given; None for today's numpy form, positional
    axis included (tlgpu.max(t, 1) is t's maximum over axis 1, as it was before dim= existed)."""
    if "dim" not in kwargs:
        return None
    kw = dict(kwargs)
    dim = kw.pop("dim")
    keepdim = kw.pop("keepdim", False) or kw.pop("keepdims", False)
    if kw or args:
        raise TypeError(f"max/min: unexpected arguments {list(args)} {sorted(kw)} with dim=")
    return dim, bool(keepdim)


def _minmax(name, c_fn, c_arg, result, elementwise):
    def fn(self, *args, **kwargs):
        if args and isinstance(args[0], (_Tensor, _np.ndarray)) and len(args) == 1 and not kwargs:
            return elementwise(self, args[0])          # torch.max(a, b): elementwise
        torch_form = _torch_reduction(args, kwargs)
        if torch_form is None:
            return c_fn(self, *args, **kwargs)
        dim, keepdim = torch_form
        if not _is_int(dim):
            raise TypeError(f"{name}: dim must be an int, got {type(dim).__name__}")
        dim = int(dim)
        return result(c_fn(self, axis=dim, keepdims=keepdim), c_arg(self, axis=dim, keepdims=keepdim))
    fn.__name__ = name
    fn.__doc__ = (f"{name}(dim=d, keepdim=False) -> named tuple (values, indices) like torch; "
                  f"{name}(axis=None, keepdims=False), axis also positional -> values (numpy); "
                  f"{name}(other) -> elementwise.")
    return fn


def repeat(self, *sizes):
    """Tile the tensor: sizes[i] copies along dim i (extra leading sizes add dims), like torch's repeat."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    if len(sizes) < self.ndim or not all(_is_int(r) and r >= 0 for r in sizes):
        raise ValueError(f"repeat: sizes {sizes} must be non-negative ints, at least one per dimension of a "
                         f"tensor of shape {self.shape}")
    sizes = tuple(int(r) for r in sizes)
    shape = (1,) * (len(sizes) - self.ndim) + tuple(self.shape)
    inter = tuple(v for s in shape for v in (1, s))
    big = tuple(v for r, s in zip(sizes, shape) for v in (r, s))
    return self.reshape(inter).expand(big).reshape(tuple(r * s for r, s in zip(sizes, shape)))


def masked_fill(self, mask, value):
    """value where mask is nonzero (a float32/int32 mask tensor or a numpy bool array), self elsewhere;
    differentiable in self (and in value when it is a tensor). mask broadcasts to self's shape."""
    if isinstance(mask, (_np.ndarray, _np.generic)):
        mask = _C.tensor(_np.asarray(mask, dtype=_np.float32))
    if not isinstance(mask, _Tensor):
        raise TypeError(f"masked_fill: mask must be a Tensor or a numpy array, not {type(mask).__name__}")
    try:
        ok = _np.broadcast_shapes(tuple(mask.shape), tuple(self.shape)) == tuple(self.shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"masked_fill: mask of shape {mask.shape} does not broadcast to {self.shape}")
    out = _C.where(mask, value, self)
    return out if out.dtype == self.dtype else out._convert(self.dtype)     # keeps self's dtype, as torch


def masked_fill_(self, mask, value):
    """In-place masked_fill (recorded like copy_ on a non-leaf; refused on a leaf that requires grad)."""
    return self.copy_(masked_fill(self, mask, value))


def size(self, dim=None):
    """The shape as a tuple (torch.Size is a tuple too), or the length of dimension dim."""
    if dim is None:
        return tuple(self.shape)
    return self.shape[_dims("size", dim, self.ndim)[0]]


def dim(self):
    return self.ndim


def __format__(self, spec):
    """f"{t:.3f}" formats the value of a one-element tensor (a sync point); no spec gives repr."""
    if not spec:
        return repr(self)
    if self.numel() != 1:
        raise TypeError(f"unsupported format string {spec!r} for a tensor of shape {self.shape}: "
                        "only one-element tensors format as numbers")
    return format(self.item(), spec)


def _install():
    maximum, minimum = _C.maximum, _C.minimum
    methods = dict(var=var, std=std, repeat=repeat, masked_fill=masked_fill, masked_fill_=masked_fill_,
                   size=size, dim=dim, __format__=__format__,
                   max=_minmax("max", _c_max, _c_argmax, max_result, maximum),
                   min=_minmax("min", _c_min, _c_argmin, min_result, minimum),
                   topk=_named(_c_topk, topk_result), sort=_named(_c_sort, sort_result))
    for name, fn in methods.items():
        setattr(_Tensor, name, fn)
    return methods


_installed = _install()
