"""PyTorch's spellings that keep their meaning in tlgpu (issue 24: CleanRL and nanoGPT port by renaming torch to
tlgpu). Argument sugar over the C ops, nothing computed here:

- creation functions that take device= (checked against the one device, _device.py), requires_grad= and
  torch's dtype names; randint(high, size);
- dtype names: long/int64/int -> int32 (int64 data is range-checked into int32 at the boundary), float ->
  float32; float16/half, bfloat16 (ml_dtypes) and uint8 are storage dtypes (docs/precision.md); float64/double
  and bool exist as names, and asking for one raises TypeError (no storage planned) instead of converting
  silently;
- legacy constructors Tensor(data_or_sizes), FloatTensor, LongTensor, IntTensor;
- normal(mean, std, size) in torch's forms;
- Tensor methods: to, cpu, cuda, device, pin_memory, type, long, view_as, ravel, clip, norm, data; and equal;
  copy.deepcopy and pickle keeping requires_grad.
"""
import math

import numpy as np

from . import _C
from ._device import Device, check_device, device as _the_device
from .autograd import _dims, _is_int  # _is_int: an int or a numpy integer (anything with __index__), not a tensor

Tensor = _C.Tensor
float32 = np.dtype("float32")
int32 = np.dtype("int32")

from ml_dtypes import bfloat16 as _bf16  # noqa: E402 (the bfloat16 numpy dtype: a dependency)
bfloat16 = np.dtype(_bf16)
float16 = np.dtype("float16")
uint8 = np.dtype("uint8")
float64 = np.dtype("float64")
bool_ = np.dtype("bool")

_REFUSED = {
    float64: "tlgpu has no float64 tensors (OpenCL fp64 is optional and slow); use tlgpu.float32 (numpy float64 "
             "data becomes float32 at the boundary)",
    bool_: "tlgpu has no bool tensors: comparisons give float32 masks (1.0/0.0); use tlgpu.float32",
}


def _refusal(dt):
    try:
        return _REFUSED.get(np.dtype(dt))
    except TypeError:
        return None


def as_dtype(dt, op):
    """dt as a numpy dtype for the C ops (a legacy class like FloatTensor gives its dtype); the refused
    names raise TypeError saying what to use; anything else goes to C, which names what it accepts."""
    if dt is None:
        return None
    dt = getattr(dt, "_tlgpu_dtype", dt)
    why = _refusal(dt)
    if why is not None:
        raise TypeError(f"{op}: unsupported dtype {dt!r}: {why}")
    return dt


# ---- creation with device= ----

def _with_grad(t, requires_grad, op):
    """t.requires_grad_() for creation functions whose C form takes no requires_grad=, with the C forms'
    message naming the op."""
    if requires_grad and t.dtype not in (float32, float16, bfloat16):
        raise TypeError(f"{op}: requires_grad=True needs float32, float16 or bfloat16 (a floating dtype) "
                        f"(got {t.dtype})")
    return t.requires_grad_() if requires_grad else t


_ANY_DTYPE = ("zeros", "ones", "full", "empty", "tensor")     # creation that makes the storage dtypes too
_FLOAT_DTYPE = ("rand", "randn")                              # float32, float16, bfloat16
_STORAGE_ONLY = (float16, bfloat16, uint8)


def _creator(name, c_takes_grad):
    c_fn = getattr(_C, name)

    def fn(*args, dtype=None, device=None, requires_grad=False, pin_memory=False, **kwargs):
        if device is not None:
            check_device(device, name)
        if dtype is not None:
            kwargs["dtype"] = as_dtype(dtype, name)
            if name not in _ANY_DTYPE and np.dtype(kwargs["dtype"]) in _STORAGE_ONLY and \
                    not (name in _FLOAT_DTYPE and np.dtype(kwargs["dtype"]) != uint8):
                raise TypeError(f"{name}: dtype {kwargs['dtype']} is not supported here (float32 or int32); "
                                f"convert the result with .to({kwargs['dtype']})")
        if c_takes_grad:
            return c_fn(*args, requires_grad=requires_grad, **kwargs)
        return _with_grad(c_fn(*args, **kwargs), requires_grad, name)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"{c_fn.__doc__}\n\ndevice= ('cpu', 'cuda', 'cuda:0', a Device or None: tlgpu's one device), "
                  "requires_grad= and pin_memory= (tlgpu stages uploads itself) are accepted as in torch.")
    return fn


zeros = _creator("zeros", True)
ones = _creator("ones", True)
full = _creator("full", True)
empty = _creator("empty", True)
arange = _creator("arange", False)
tensor = _creator("tensor", True)
rand = _creator("rand", True)
randn = _creator("randn", True)
_c_randint = _creator("randint", False)
CREATORS = dict(zeros=zeros, ones=ones, full=full, empty=empty, arange=arange, tensor=tensor, rand=rand,
                randn=randn)
for _name in ("linspace", "eye", "logspace"):    # creation ops other families may add in C
    if hasattr(_C, _name):
        CREATORS[_name] = _creator(_name, False)


def randint(*args, size=None, dtype=None, device=None, **kwargs):
    """randint(low, high, size) or torch's randint(high, size): int32 uniform on [low, high)."""
    if size is not None:
        args = args + (size,)
    if len(args) == 2:
        args = (0,) + args
    return _c_randint(*args, dtype=dtype, device=device, **kwargs)


def as_tensor(data, dtype=None, device=None):
    """A tensor as is (converted to dtype when given), anything else copied onto the device (tlgpu.tensor)."""
    if isinstance(data, Tensor):
        check_device(device, "as_tensor")
        return data if dtype is None else _to_dtype(data, as_dtype(dtype, "as_tensor"), False)
    return tensor(data, dtype=dtype, device=device)


def normal(mean, std=1.0, size=None):
    """torch.normal's forms: tensor mean and/or std (broadcast together; the sample is differentiable in them,
    mean + std * randn), or numbers with size=. Float32; std >= 0 is checked only where it is a number (a
    tensor's values would need a sync)."""
    mt, st = isinstance(mean, Tensor), isinstance(std, Tensor)
    for name, v, is_t in (("mean", mean, mt), ("std", std, st)):
        if is_t and v.dtype != float32:
            raise TypeError(f"normal: {name} must be a float32 tensor, got {v.dtype} with shape {v.shape}")
        if not is_t and not isinstance(v, (int, float)):
            raise TypeError(f"normal: {name} must be a Tensor or a number, got {type(v).__name__}")
    if not st and not std >= 0:
        raise ValueError(f"normal: std must be >= 0, got {std}")
    if not mt and not st:
        if size is None:
            raise TypeError("normal: with a number mean and std, give the shape as size=")
        shape = (size,) if _is_int(size) else tuple(size)
        return _C.empty(*shape).normal_(float(mean), float(std))
    if size is not None:
        raise TypeError("normal: size= goes with number mean and std; a tensor mean or std gives the shape")
    try:
        shape = np.broadcast_shapes(mean.shape if mt else (), std.shape if st else ())
    except ValueError:
        raise ValueError(f"normal: mean of shape {mean.shape if mt else ()} and std of shape "
                         f"{std.shape if st else ()} cannot be broadcast together") from None
    return _C.empty(*shape).normal_() * std + mean


def _like_dtype(t, dtype, op):
    if dtype is not None:
        return as_dtype(dtype, op)
    if isinstance(t, Tensor):
        return t.dtype
    dt = np.asarray(t).dtype                        # a numpy operand: the dtype tlgpu would convert it to
    if dt in _STORAGE_ONLY:
        return dt
    return int32 if dt.kind in "iu" else float32


def _like(name, make, float_only=False):
    def fn(t, *args, dtype=None, device=None, requires_grad=False, memory_format=None, **kwargs):
        check_device(device, name)
        dt = _like_dtype(t, dtype, name)
        if float_only and dt not in (float32, float16, bfloat16):
            raise TypeError(f"{name}: dtype must be float32, float16 or bfloat16 (got {dt}; use randint for "
                            "integers)")
        return _with_grad(make(t, *args, dtype=dt, **kwargs), requires_grad, name)
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"{name}(t, ...): like torch.{name}; device= must name tlgpu's device."
    return fn


zeros_like = _like("zeros_like", lambda t, dtype: _C.zeros(tuple(t.shape), dtype=dtype))
ones_like = _like("ones_like", lambda t, dtype: _C.ones(tuple(t.shape), dtype=dtype))
empty_like = _like("empty_like", lambda t, dtype: _C.empty(tuple(t.shape), dtype=dtype))
full_like = _like("full_like", lambda t, value, dtype: _C.full(tuple(t.shape), value, dtype=dtype))
rand_like = _like("rand_like", lambda t, dtype: _C.rand(tuple(t.shape), dtype=dtype), float_only=True)
randn_like = _like("randn_like", lambda t, dtype: _C.randn(tuple(t.shape), dtype=dtype), float_only=True)
LIKE = dict(zeros_like=zeros_like, ones_like=ones_like, empty_like=empty_like, full_like=full_like,
            rand_like=rand_like, randn_like=randn_like)


# ---- legacy constructors: torch.Tensor(x), torch.FloatTensor(x), torch.LongTensor(x) ----

def _legacy_new(dt, what, args):
    if not args:
        return _C.zeros(0, dtype=dt)
    if all(isinstance(a, int) and not isinstance(a, bool) for a in args):
        return _C.empty(*args, dtype=dt)            # Tensor(2, 3): sizes, uninitialised as in torch
    if len(args) != 1:
        raise TypeError(f"{what}(...): give sizes (ints) or one data argument, got {args!r}")
    data = args[0]
    if isinstance(data, Tensor):
        return _to_dtype(data, dt, False)
    return _C.tensor(data, dtype=dt)


def _tensor_new(cls, *args, device=None, dtype=None):
    """tlgpu.Tensor(data) / Tensor(*sizes): torch's legacy constructor, always float32 (as torch.Tensor is
    torch.FloatTensor): numpy bool or int64 arrays, lists and scalars become float32; Tensor(2, 3) is an
    uninitialised 2x3 tensor; Tensor() is empty."""
    check_device(device, "Tensor")
    if dtype is not None and as_dtype(dtype, "Tensor") != float32:
        raise TypeError("Tensor(...) makes float32 tensors; use tlgpu.tensor(data, dtype=...) for another dtype")
    return _legacy_new(float32, "Tensor", args)


class _LegacyMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.dtype == cls._tlgpu_dtype

    def __repr__(cls):
        return f"<class 'tlgpu.{cls.__name__}'>"


class FloatTensor(metaclass=_LegacyMeta):
    """FloatTensor(data) or FloatTensor(*sizes): a float32 tensor (torch.FloatTensor). isinstance(t,
    FloatTensor) holds for float32 tensors; t.type(FloatTensor) converts."""
    _tlgpu_dtype = float32

    def __new__(cls, *args, device=None):
        check_device(device, cls.__name__)
        return _legacy_new(cls._tlgpu_dtype, cls.__name__, args)


class IntTensor(FloatTensor):
    """IntTensor(data) or IntTensor(*sizes): an int32 tensor."""
    _tlgpu_dtype = int32


class LongTensor(FloatTensor):
    """LongTensor(data) or LongTensor(*sizes): int32 (tlgpu's index dtype; int64 data is range-checked)."""
    _tlgpu_dtype = int32


_TYPE_NAMES = {float32: "tlgpu.FloatTensor", int32: "tlgpu.IntTensor", float16: "tlgpu.HalfTensor",
               bfloat16: "tlgpu.BFloat16Tensor", uint8: "tlgpu.ByteTensor"}
_TYPE_STRINGS = {f"{mod}.{name}": dt for mod in ("tlgpu", "torch", "torch.cuda")
                 for name, dt in (("FloatTensor", float32), ("IntTensor", int32), ("LongTensor", int32))}


# ---- Tensor methods ----

def _to_dtype(t, dt, copy):
    if dt is None or np.dtype(dt) == t.dtype:
        return t.clone() if copy else t
    return t._convert(dt)                         # on the device; differentiable between floating dtypes


def _is_device_arg(a):
    return a is None or isinstance(a, (str, int, Device)) and not isinstance(a, bool)


def to(self, *args, device=None, dtype=None, non_blocking=False, copy=False):
    """to(device), to(dtype), to(device, dtype), to(other): torch's forms. The device must be tlgpu's one
    device ('cpu', 'cuda', 'cuda:0', a Device, None), so only the dtype can change anything; with nothing to
    change the result is self (a clone with copy=True), as in torch."""
    if len(args) > 2:
        raise TypeError(f"to: at most a device and a dtype, got {len(args)} arguments")
    for a in args:
        if isinstance(a, Tensor):
            dtype = a.dtype
        elif _is_device_arg(a):
            device = a
        else:
            dtype = a
    check_device(device, "Tensor.to")
    return _to_dtype(self, as_dtype(dtype, "Tensor.to"), copy)


def cpu(self, memory_format=None):
    """self: tlgpu has no host tensors. `x.cpu().numpy()` waits for the device in numpy(), as in torch."""
    return self


def cuda(self, device=None, non_blocking=False, memory_format=None):
    """self, after checking that device names tlgpu's device."""
    check_device(device, "Tensor.cuda")
    return self


def pin_memory(self, device=None):
    """self: tlgpu stages host-device copies itself (pinned staging buffers), so there is nothing to pin."""
    return self


def _device_getter(self):
    return _the_device()


def type_(self, dtype=None, non_blocking=False):
    """type() -> 'tlgpu.FloatTensor' or 'tlgpu.IntTensor'; type(dtype or 'torch.LongTensor'-style name or
    FloatTensor/LongTensor/IntTensor) converts like to(dtype)."""
    if dtype is None:
        return _TYPE_NAMES[self.dtype]
    if isinstance(dtype, str):
        if dtype not in _TYPE_STRINGS:
            raise TypeError(f"type: unknown tensor type {dtype!r}; tlgpu has {sorted(set(_TYPE_NAMES.values()))}")
        dtype = _TYPE_STRINGS[dtype]
    return _to_dtype(self, as_dtype(dtype, "Tensor.type"), False)


def long(self):
    """int32: tlgpu's index dtype stands for torch's int64 (see docs/porting.md)."""
    return self.int()


def view_as(self, other):
    return self.view(tuple(other.shape))


def ravel(self):
    """A 1-D tensor of the elements (a view when contiguous)."""
    return self.reshape(-1)


def norm(self, p="fro", dim=None, keepdim=False, dtype=None):
    """Vector norm over dim (None: all elements): p = 2/'fro' (the default), 1, inf, -inf. Differentiable;
    the 2-norm's gradient at a zero vector is 0, as in torch."""
    if dtype is not None and as_dtype(dtype, "norm") != float32:
        raise TypeError("norm: tlgpu computes norms in float32")
    x = self if self.dtype == float32 else self.float()
    axis = None if dim is None else (dim if isinstance(dim, int) else tuple(dim))
    back = self.dtype in (float16, bfloat16)          # computed in float32, returned in the half dtype (torch)
    if p in ("fro", 2, 2.0, None):
        s = (x * x).sum(axis=axis, keepdims=keepdim)
        zero = s == 0                                # sqrt of 1 there: a finite gradient, masked to 0; NaN stays
        r = _C.where(zero, 1.0, s).sqrt() * (1.0 - zero)
    elif p in (1, 1.0):
        r = x.abs().sum(axis=axis, keepdims=keepdim)
    elif p == math.inf:
        r = x.abs().max(axis=axis, keepdims=keepdim)
    elif p == -math.inf:
        r = x.abs().min(axis=axis, keepdims=keepdim)
    else:
        raise ValueError(f"norm: p={p!r} is not supported (2, 'fro', 1, inf, -inf); compose others, e.g. "
                         "x.abs().pow(p).sum() ** (1 / p)")
    return r._convert(self.dtype) if back else r


def _data_get(self):
    """The tensor outside the graph, sharing storage (detach()): in-place writes through it change self, as
    torch's .data does; unlike torch they also bump the version counter, so a graph that saved self refuses
    to backward instead of using the new values."""
    return self.detach()


def _data_set(self, value):
    """t.data = other copies other's values into t (same shape and dtype): tlgpu cannot rebind a tensor's
    storage, so later writes to other do not show in t."""
    if not isinstance(value, Tensor):
        raise TypeError(f"data: assign a Tensor, not {type(value).__name__}")
    if tuple(value.shape) != tuple(self.shape) or value.dtype != self.dtype:
        raise ValueError(f"data: tlgpu copies on .data assignment, so the shapes and dtypes must match: "
                         f"{self.shape} {self.dtype} <- {value.shape} {value.dtype}")
    self.detach().copy_(value)


def equal(a, b):
    """True when a and b have the same shape and all elements are equal (NaN never equals): a Python bool,
    so a sync point."""
    a = a if isinstance(a, Tensor) else _C.tensor(a)
    b = b if isinstance(b, Tensor) else _C.tensor(b)
    if tuple(a.shape) != tuple(b.shape):
        return False
    if a.numel() == 0:
        return True
    return (a != b).sum().item() == 0


def clamp_min_(self, min):
    """In place clamp(min=min), torch's name."""
    return self.clamp_(min=min)


def clamp_max_(self, max):
    """In place clamp(max=max), torch's name."""
    return self.clamp_(max=max)


def flip(self, dims):
    """The elements in reverse order along each of dims (torch.flip): a copy (one gather a dim), differentiable."""
    out = self
    for d in _dims("flip", dims, self.ndim):
        n = self.shape[d] if self.ndim else 1
        if n > 1:
            out = out.index_select(d, np.arange(n - 1, -1, -1, dtype=np.int32))
    return out.clone() if out is self else out


def amax(self, dim=(), keepdim=False):
    """The maximum over dim (an int or a tuple; () or None: every dim), values only (torch.amax); the gradient is
    split evenly between tied maxima, as torch's."""
    return self.max(axis=None if dim in ((), None) else dim, keepdims=keepdim)


def amin(self, dim=(), keepdim=False):
    """The minimum over dim, as amax."""
    return self.min(axis=None if dim in ((), None) else dim, keepdims=keepdim)


def _np_reduction(op, dim, keepdim, axis, keepdims, out):
    """torch's (dim, keepdim) or numpy's (axis, keepdims: np.any(t) calls t.any(axis=..., out=...))."""
    if out is not None:
        raise TypeError(f"{op}: out= is not supported")
    return (dim if axis is None else axis), bool(keepdim if keepdims is None else keepdims)


def any_(self, dim=None, keepdim=False, *, axis=None, keepdims=None, out=None):
    """1.0 where any element over dim (None: all) is non-zero (NaN counts), else 0.0: a float32 mask, as tlgpu's
    comparisons give (torch: bool); `if t.any():` reads it (a sync point)."""
    dim, keepdim = _np_reduction("any", dim, keepdim, axis, keepdims, out)
    return (self != 0).sum(axis=dim, keepdims=keepdim) > 0


def all_(self, dim=None, keepdim=False, *, axis=None, keepdims=None, out=None):
    """1.0 where every element over dim (None: all) is non-zero, else 0.0 (a float32 mask; over none: 1.0)."""
    dim, keepdim = _np_reduction("all", dim, keepdim, axis, keepdims, out)
    return (self == 0).sum(axis=dim, keepdims=keepdim) == 0


def isnan(self):
    """1.0 where the element is NaN, else 0.0 (a float32 mask; torch: bool)."""
    return self != self


def isinf(self):
    """1.0 where the element is +inf or -inf, else 0.0 (a float32 mask)."""
    return self.abs() == float("inf") if self.dtype != "int32" else self != self


def isfinite(self):
    """1.0 where the element is neither NaN nor infinite, else 0.0 (a float32 mask)."""
    return (self - self) == 0


_ITEMSIZE = {"float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "uint8": 1}


def element_size(self):
    """Bytes an element takes in device memory (float32 / int32 4, float16 / bfloat16 2, uint8 1)."""
    return _ITEMSIZE[str(self.dtype)]


def _nbytes(self):
    return self.numel() * _ITEMSIZE[str(self.dtype)]


def _axis(op, dim, ndim):
    """One dim (an int, negative from the end) as a non-negative int."""
    if not _is_int(dim):
        raise TypeError(f"{op}: dim must be an int, got {type(dim).__name__}")
    return _dims(op, dim, ndim)[0]


def t(self):
    """The transpose of a matrix (0-d and 1-d tensors as they are), torch's t(); more dims raise ValueError."""
    if self.ndim > 2:
        raise ValueError(f"t: expected a tensor of at most 2 dims, got {self.ndim} (use transpose or mT)")
    return self.transpose(0, 1) if self.ndim == 2 else self


def _mT(self):
    if self.ndim < 2:
        raise ValueError(f"mT: expected a tensor of at least 2 dims, got {self.ndim}")
    return self.transpose(-2, -1)


def movedim(self, source, destination):
    """Dims source moved to positions destination (ints or equal-length sequences), the others in order: a
    view (torch.movedim)."""
    src = [_axis("movedim", s, self.ndim) for s in ((source,) if _is_int(source) else source)]
    dst = [_axis("movedim", d, self.ndim) for d in ((destination,) if _is_int(destination) else destination)]
    if len(src) != len(dst) or len(set(dst)) != len(dst) or len(set(src)) != len(src):
        raise ValueError(f"movedim: source {source} and destination {destination} must name as many distinct dims")
    order, rest = [None] * self.ndim, iter(d for d in range(self.ndim) if d not in src)
    for s_, d_ in zip(src, dst):
        order[d_] = s_
    return self.permute(*[o if o is not None else next(rest) for o in order])


def swapaxes(self, axis0, axis1):
    """transpose(axis0, axis1) under numpy's and torch's other names (swapaxes, swapdims)."""
    return self.transpose(axis0, axis1)


def narrow(self, dim, start, length):
    """Elements start .. start + length - 1 along dim: a view (torch.narrow); start may count from the end."""
    d = _axis("narrow", dim, self.ndim)
    n = self.shape[d]
    start = start + n if -n <= start < 0 else start
    if not (0 <= start <= n and 0 <= length <= n - start):
        raise IndexError(f"narrow: start {start} and length {length} out of range for dim {d} of size {n}")
    return self[(slice(None),) * d + (slice(start, start + length),)]


def select(self, dim, index):
    """The slice at index along dim, that dim removed: a view (torch.select)."""
    d = _axis("select", dim, self.ndim)
    n = self.shape[d]
    if not -n <= index < n:
        raise IndexError(f"select: index {index} out of range for dim {d} of size {n}")
    return self[(slice(None),) * d + (int(index) % n,)]


def unbind(self, dim=0):
    """The slices along dim, each a view without it (torch.unbind): a tuple."""
    d = _axis("unbind", dim, self.ndim)
    return tuple(select(self, d, i) for i in range(self.shape[d]))


def bmm(self, other):
    """Batched matrix product of two 3-D tensors [b, n, m] @ [b, m, p] (torch.bmm: no broadcasting)."""
    if self.ndim != 3 or other.ndim != 3 or self.shape[0] != other.shape[0] or self.shape[2] != other.shape[1]:
        raise ValueError(f"bmm: expected [b, n, m] and [b, m, p], got {tuple(self.shape)} and {tuple(other.shape)}")
    return self @ other


def lerp(self, end, weight):
    """self + weight * (end - self) (torch.lerp; weight a number or a tensor)."""
    return self + weight * (end - self)


def addcmul(self, tensor1, tensor2, value=1):
    """self + value * tensor1 * tensor2 (torch.addcmul)."""
    return self + value * (tensor1 * tensor2)


def addcdiv(self, tensor1, tensor2, value=1):
    """self + value * tensor1 / tensor2 (torch.addcdiv)."""
    return self + value * (tensor1 / tensor2)


def isclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    """1.0 where |self - other| <= atol + rtol |other| or the two are equal (infinities of one sign too), else 0.0:
    a float32 mask (torch.isclose gives bool); NaNs match each other with equal_nan."""
    other = other if isinstance(other, Tensor) else _C.tensor(np.asarray(other, np.float32))
    diff = (self - other).abs()
    near = (diff <= atol + rtol * other.abs()) * ((diff - diff) == 0) + (self == other)   # a finite difference
    if equal_nan:
        near = near + (self != self) * (other != other)
    return near > 0


def allclose(self, other, rtol=1e-5, atol=1e-8, equal_nan=False):
    """True when every element is close (isclose): a Python bool, so a sync point."""
    return bool(all_(isclose(self, other, rtol, atol, equal_nan)))


def nonzero(self, as_tuple=False):
    """The indices of the non-zero elements, [n, ndim] int32 (torch: int64), in row-major order; as_tuple: one
    int32 vector a dim. The count decides the shape, so this reads the tensor (a sync point), as torch's does."""
    idx = np.argwhere(self.numpy()).astype(np.int32)
    if as_tuple:
        return tuple(_C.tensor(np.ascontiguousarray(idx[:, d])) for d in range(max(self.ndim, 1)))
    return _C.tensor(idx)


def argwhere(self):
    """nonzero(self) (torch.argwhere)."""
    return nonzero(self)


any_.__name__ = any_.__qualname__ = "any"
all_.__name__ = all_.__qualname__ = "all"
PORTED = dict(flip=flip, amax=amax, amin=amin, any=any_, all=all_, isnan=isnan, isinf=isinf, isfinite=isfinite,
              t=t, movedim=movedim, moveaxis=movedim, swapaxes=swapaxes, swapdims=swapaxes, narrow=narrow,
              select=select, unbind=unbind, bmm=bmm, lerp=lerp, addcmul=addcmul, addcdiv=addcdiv, isclose=isclose,
              allclose=allclose, nonzero=nonzero, argwhere=argwhere)


def _deepcopy(self, memo):
    """copy.deepcopy(t), as torch's: a device copy (no trip through the host) that keeps requires_grad and copies
    .grad; a non-leaf that requires grad is refused (detach it first). A module's deepcopy (a DQN's target network)
    then has parameters, as torch's does."""
    if self.requires_grad and not self.is_leaf:
        raise RuntimeError("deepcopy: only tensors created explicitly by the user (graph leaves) can be deep-copied; "
                           "detach() first")
    new = self.detach().clone()
    if self.requires_grad:
        new.requires_grad_(True)
    memo[id(self)] = new
    if self.grad is not None:
        new.grad = _deepcopy(self.grad, memo)
    return new


def _rebuild(arr, requires_grad):
    """pickle's rebuild of a tensor: its data and requires_grad (torch keeps the flag through pickle too)."""
    return _C.from_numpy(arr).requires_grad_(True) if requires_grad else _C.from_numpy(arr)


def _reduce(self):
    """Pickle through numpy (a sync point), keeping requires_grad; a non-leaf pickles as its detached data."""
    return _rebuild, (self.numpy(), bool(self.requires_grad and self.is_leaf))


def install():
    """Attach the methods to the C Tensor type and give it torch's legacy constructor."""
    methods = dict(to=to, cpu=cpu, cuda=cuda, pin_memory=pin_memory, type=type_, long=long, view_as=view_as,
                   ravel=ravel, norm=norm, device=property(_device_getter, doc="The Device (tlgpu has one)."),
                   data=property(_data_get, _data_set, doc=_data_get.__doc__))
    if not hasattr(Tensor, "clip"):
        methods["clip"] = Tensor.clamp
    if not hasattr(Tensor, "clip_"):
        methods["clip_"] = Tensor.clamp_
    methods["clamp_min_"] = clamp_min_
    methods["clamp_max_"] = clamp_max_
    methods.update(__deepcopy__=_deepcopy, __reduce__=_reduce)
    methods.update(PORTED, element_size=element_size, nbytes=property(_nbytes, doc="numel() * element_size()"),
                   mT=property(_mT, doc="The last two dims swapped (a view)."))
    for name, fn in methods.items():
        setattr(Tensor, name, fn)
    Tensor.__new__ = staticmethod(_tensor_new)   # C makes tensors with tp_alloc, never through this
