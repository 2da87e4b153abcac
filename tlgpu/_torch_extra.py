"""Still more of PyTorch's tensor-level names that ports call (a probe of CleanRL, nanoGPT and Stable-Baselines3
code), composed from tlgpu's C ops so that autograd works where torch has a gradient.

Creation: eye, logspace (numpy's float64 values, rounded once), randint_like, bernoulli; Generator is a seed and
a stream offset of tlgpu's counter-based generator, swapped in around a draw given generator= (so a Generator
seeded with s draws what tlgpu.manual_seed(s) would, without moving the global stream). Shape: hstack, vstack,
broadcast_to, broadcast_tensors, unflatten. Math: mm, kron, cdist, clamp_min / clamp_max, the logical ops
(float32 masks, as tlgpu's comparisons: there is no bool dtype). In place: lerp_, addcmul_, addcdiv_ (the value
computed out of place, then copy_, so autograd records them as copy_). Sugar: bool, nelement, is_tensor, numel,
share_memory_, get_default_dtype / set_default_dtype (float32 only), compile (returns the model: tlgpu.jit is
the tracer that fuses).

Not here, for want of C support: data_ptr / storage_offset (a tensor's storage and offset are not visible from
Python outside test-hook builds), squeeze_ / unsqueeze_ / t_ (a tensor's shape cannot change in place), retain_grad
/ register_hook (the C autograd engine has no hooks and keeps grads of leaves only).
"""
import math
import os

import numpy as np

from . import _C
from ._device import check_device
from ._torch_compat import _axis, _with_grad, as_dtype, bfloat16, float16, float32, int32
from ._torch_more import _module_form
from .autograd import _is_int

Tensor = _C.Tensor
_FLOATS = (float32, float16, bfloat16)


def _need(x, op, what="input"):
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}: {what} must be a Tensor, got {type(x).__name__}")
    return x


def _as(t, dt):
    """t in dtype dt (t itself when it is already)."""
    return t if dt is None or t.dtype == np.dtype(dt) else t._convert(dt)


def _promote(dtypes):
    """torch's result dtype of tensors of these dtypes (a float over the ints; float16 with bfloat16: float32)."""
    ds = set(np.dtype(d) for d in dtypes)
    floats = ds & set(_FLOATS)
    if floats:
        return floats.pop() if len(floats) == 1 else float32
    return int32 if int32 in ds else ds.pop()


def _count(n, op, what="n"):
    if not _is_int(n) or isinstance(n, bool):
        raise TypeError(f"{op}: {what} must be an int, got {type(n).__name__}")
    if n < 0:
        raise ValueError(f"{op}: {what} must be non-negative, got {n}")
    return int(n)


# ---- random numbers with generator= ----

class Generator:
    """torch.Generator for tlgpu's device generator: a (seed, offset) position in tlgpu's counter-based stream.
    Passed as generator= (bernoulli, randint_like, Tensor.bernoulli / bernoulli_), it is swapped in for the draw
    and the global stream left where it was; Generator().manual_seed(s) then draws what tlgpu.manual_seed(s)
    would. get_state() is that (seed, offset) tuple (torch: a ByteTensor)."""
    _DEFAULT_SEED = 67280421310721                     # torch's default_rng_seed_val

    def __init__(self, device=None):
        check_device(device, "Generator")
        self._state = (self._DEFAULT_SEED, 0)

    @property
    def device(self):
        from ._device import device
        return device()

    def manual_seed(self, seed):
        """Seed it and rewind its stream; returns self (so `g = Generator().manual_seed(0)` works)."""
        if not _is_int(seed) or isinstance(seed, bool):
            raise TypeError(f"Generator.manual_seed: seed must be an int, got {type(seed).__name__}")
        self._state = (int(seed) % 2 ** 64, 0)
        return self

    def initial_seed(self):
        """The seed it was last seeded with."""
        return self._state[0]

    def seed(self):
        """Seed it from os.urandom; returns the seed."""
        s = int.from_bytes(os.urandom(8), "little") >> 1
        self.manual_seed(s)
        return s

    def get_state(self):
        return self._state

    def set_state(self, state):
        seed, offset = state
        self._state = (int(seed), int(offset))
        return self


def _draw(generator, op, make):
    """make() with generator's stream swapped in (the global stream when generator is None)."""
    if generator is None:
        return make()
    if not isinstance(generator, Generator):
        raise TypeError(f"{op}: generator must be a tlgpu.Generator, got {type(generator).__name__}")
    saved = _C.get_rng_state()
    _C.set_rng_state(generator._state)
    try:
        out = make()
        generator._state = _C.get_rng_state()
    finally:
        _C.set_rng_state(saved)
    return out


# ---- creation ----

def eye(n, m=None, *, dtype=None, device=None, requires_grad=False, layout=None, pin_memory=False):
    """The n x m (m defaults to n) identity matrix: float32 unless dtype= is given (an arange comparison)."""
    n = _count(n, "eye")
    m = n if m is None else _count(m, "eye", "m")
    check_device(device, "eye")
    dt = as_dtype(dtype, "eye")
    out = _C.arange(n).reshape(n, 1) == _C.arange(m).reshape(1, m)
    return _with_grad(_as(out, dt), requires_grad, "eye")


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False, layout=None,
             pin_memory=False):
    """base ** linspace(start, end, steps): numpy's float64 values rounded to float32 (or dtype=), uploaded."""
    steps = _count(steps, "logspace", "steps")
    check_device(device, "logspace")
    nums = []
    for name, v in (("start", start), ("end", end), ("base", base)):
        if isinstance(v, Tensor) and v.numel() == 1:
            v = v.item()                                             # a one-element tensor: a sync point, as torch
        if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool):
            raise TypeError(f"logspace: {name} must be a number, got {type(v).__name__}")
        nums.append(float(v))
    start, end, base = nums
    vals = np.logspace(start, end, steps, base=base)
    dt = as_dtype(dtype, "logspace") or float32                      # an int dtype truncates, as torch
    return _with_grad(_as(_C.tensor(vals.astype(np.float32)), dt), requires_grad, "logspace")


def randint_like(input, low=0, high=None, *, dtype=None, device=None, requires_grad=False, generator=None,
                 memory_format=None, layout=None):
    """Integers uniform on [low, high) in input's shape and dtype (or dtype=): randint_like(x, high) or
    randint_like(x, low, high), as torch."""
    _need(input, "randint_like")
    if high is None:
        low, high = 0, low
    for name, v in (("low", low), ("high", high)):
        if not _is_int(v) or isinstance(v, bool):
            raise TypeError(f"randint_like: {name} must be an int, got {type(v).__name__}")
    if not low < high:
        raise ValueError(f"randint_like: expected low < high, got low={low}, high={high}")
    check_device(device, "randint_like")
    dt = as_dtype(dtype, "randint_like") or input.dtype
    out = _draw(generator, "randint_like", lambda: _C.randint(int(low), int(high), tuple(input.shape)))
    return _with_grad(_as(out, dt), requires_grad, "randint_like")


def bernoulli(input, p=None, *, generator=None):
    """1.0 with probability input (or the number p, in input's shape), else 0.0, in input's dtype: rand() < p,
    seeded by tlgpu.manual_seed or generator=. Not differentiable (torch's gradient is zero); probabilities
    outside [0, 1] are not checked (that would be a sync point): below 0 gives 0, above 1 gives 1."""
    _need(input, "bernoulli")
    if p is not None and (not isinstance(p, (int, float)) or isinstance(p, bool)):
        raise TypeError(f"bernoulli: p must be a number, got {type(p).__name__}")
    prob = input if p is None else float(p)
    if p is None and input.dtype not in _FLOATS:
        raise TypeError(f"bernoulli: the probabilities must be a floating tensor, got {input.dtype}")
    u = _draw(generator, "bernoulli", lambda: _C.rand(tuple(input.shape)))
    return _as(u < prob, input.dtype)


def bernoulli_(self, p=0.5, *, generator=None):
    """In place: each element 1 with probability p (a number or a tensor broadcast to self), else 0."""
    if isinstance(p, Tensor):
        return self.copy_(bernoulli(p.expand(*self.shape).float(), generator=generator))
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        raise TypeError(f"bernoulli_: p must be a number or a Tensor, got {type(p).__name__}")
    return self.copy_(bernoulli(_C.zeros(tuple(self.shape)), float(p), generator=generator))


def _bernoulli_method(self, p=None, *, generator=None):
    return bernoulli(self, p, generator=generator)


_bernoulli_method.__name__ = _bernoulli_method.__qualname__ = "bernoulli"
_bernoulli_method.__doc__ = bernoulli.__doc__


# ---- shape ----

def _tensors(tensors, op):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{op}: expected a list or tuple of Tensors, got {type(tensors).__name__}")
    if not tensors:
        raise ValueError(f"{op}: expected a non-empty list of Tensors")
    for t in tensors:
        _need(t, op, "each element")
    dt = _promote([t.dtype for t in tensors])
    return [_as(t, dt) for t in tensors]


def hstack(tensors):
    """Concatenation along dim 1 (dim 0 for 1-d tensors; 0-d ones count as 1-d), dtypes promoted as torch."""
    ts = [t.reshape(1) if t.ndim == 0 else t for t in _tensors(tensors, "hstack")]
    return _C.cat(ts, 0 if ts[0].ndim == 1 else 1)


def vstack(tensors):
    """Concatenation along dim 0 of the tensors made at least 2-d ((n,) -> (1, n)), dtypes promoted as torch."""
    ts = [t.reshape(1, -1) if t.ndim < 2 else t for t in _tensors(tensors, "vstack")]
    return _C.cat(ts, 0)


def _shape_arg(size, op):
    size = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list)) else tuple(size)
    if not all(_is_int(s) and not isinstance(s, bool) for s in size):
        raise TypeError(f"{op}: sizes must be ints, got {size}")
    return tuple(int(s) for s in size)


def broadcast_to(self, size):
    """self expanded to size (a view; -1 keeps a dim), as torch.broadcast_to."""
    shape = (int(size),) if _is_int(size) else _shape_arg((size,), "broadcast_to")
    lead = len(shape) - self.ndim
    if lead < 0:
        raise ValueError(f"broadcast_to: cannot broadcast shape {tuple(self.shape)} to fewer dims {shape}")
    want = tuple(self.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(shape))
    try:
        ok = np.broadcast_shapes(tuple(self.shape), want) == want and min(want, default=0) >= 0
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"broadcast_to: shape {tuple(self.shape)} does not broadcast to {shape}")
    return self.expand(*want) if want else self.reshape(())


def broadcast_tensors(*tensors):
    """The tensors expanded to their common shape (views), as torch.broadcast_tensors."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    for t in tensors:
        _need(t, "broadcast_tensors", "each input")
    try:
        shape = np.broadcast_shapes(*(tuple(t.shape) for t in tensors))
    except ValueError:
        raise ValueError("broadcast_tensors: shapes " + ", ".join(str(tuple(t.shape)) for t in tensors)
                         + " cannot be broadcast together") from None
    return tuple(t.expand(*shape) if shape else t.reshape(()) for t in tensors)


def unflatten(self, dim, sizes):
    """dim split into sizes (one may be -1), as a reshape (a view when contiguous), as torch.unflatten."""
    d = _axis("unflatten", dim, self.ndim)
    sizes = _shape_arg((sizes,), "unflatten")
    if not sizes:
        raise ValueError("unflatten: sizes must be non-empty")
    n = self.shape[d]
    known = math.prod(s for s in sizes if s != -1)
    if sizes.count(-1) > 1 or any(s < -1 for s in sizes) or \
            (n != known if -1 not in sizes else (known == 0 or n % known)):
        raise ValueError(f"unflatten: sizes {sizes} do not split dim {d} of size {n} (shape {tuple(self.shape)})")
    sizes = tuple(n // known if s == -1 else s for s in sizes)
    return self.reshape(tuple(self.shape[:d]) + sizes + tuple(self.shape[d + 1:]))


# ---- math ----

def mm(self, mat2):
    """The matrix product of two 2-d tensors [n, m] @ [m, p] (torch.mm: no broadcasting)."""
    _need(mat2, "mm", "mat2")
    if self.ndim != 2 or mat2.ndim != 2 or self.shape[1] != mat2.shape[0]:
        raise ValueError(f"mm: expected [n, m] and [m, p] matrices, got {tuple(self.shape)} and "
                         f"{tuple(mat2.shape)}")
    return self @ mat2


def kron(self, other):
    """The Kronecker product: the smaller rank padded with leading 1s, result[i * B + j] = a[i] * b[j] in every
    dim (a broadcast multiply and a reshape, so differentiable)."""
    _need(other, "kron", "other")
    nd = max(self.ndim, other.ndim)
    a = self.reshape((1,) * (nd - self.ndim) + tuple(self.shape))
    b = other.reshape((1,) * (nd - other.ndim) + tuple(other.shape))
    pa = sum(((s, 1) for s in a.shape), ())
    pb = sum(((1, s) for s in b.shape), ())
    return (a.reshape(pa) * b.reshape(pb)).reshape(tuple(p * q for p, q in zip(a.shape, b.shape)))


def clamp_min(self, min):
    """clamp(min=min), torch's name."""
    return self.clamp(min=min)


def clamp_max(self, max):
    """clamp(max=max), torch's name."""
    return self.clamp(max=max)


def _safe_root(s, p):
    """s ** (1 / p) with a zero gradient (not NaN) where s == 0, as torch's distance gradients."""
    zero = s == 0
    r = _C.where(zero, 1.0, s)
    r = r.sqrt() if p == 2 else r ** (1.0 / p)
    return r * (1.0 - zero)


_CDIST_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist")


def cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """The p-norm distances between the rows of x1 [..., P, M] and x2 [..., R, M]: [..., P, R] (batch dims
    broadcast). p = 2 uses matrix products when P or R exceeds 25 (torch's rule: |a|^2 + |b|^2 - 2 a.b, clamped
    at 0, less accurate for near rows); otherwise, and for other p (0, inf, any p > 0), the differences directly.
    Differentiable, the gradient 0 at distance 0."""
    _need(x1, "cdist", "x1")
    _need(x2, "cdist", "x2")
    if x1.ndim < 2 or x2.ndim < 2 or x1.shape[-1] != x2.shape[-1]:
        raise ValueError(f"cdist: expected [..., P, M] and [..., R, M] with the same M, got {tuple(x1.shape)} and "
                         f"{tuple(x2.shape)}")
    if x1.dtype not in _FLOATS or x2.dtype not in _FLOATS:
        raise TypeError(f"cdist: expected floating tensors, got {x1.dtype} and {x2.dtype}")
    if not isinstance(p, (int, float)) or isinstance(p, bool) or not p >= 0:
        raise ValueError(f"cdist: p must be a non-negative number, got {p!r}")
    if compute_mode not in _CDIST_MODES:
        raise ValueError(f"cdist: compute_mode must be one of {_CDIST_MODES}, got {compute_mode!r}")
    a, b = x1.float(), x2.float()
    big = x1.shape[-2] > 25 or x2.shape[-2] > 25
    if p == 2 and (compute_mode == _CDIST_MODES[1] or (compute_mode == _CDIST_MODES[0] and big)):
        sq = (a * a).sum(axis=-1, keepdims=True) + (b * b).sum(axis=-1, keepdims=True).transpose(-2, -1)
        out = _safe_root((sq - 2.0 * (a @ b.transpose(-2, -1))).clamp(min=0.0), 2)
    else:
        d = (a.unsqueeze(-2) - b.unsqueeze(-3)).abs()
        if p == 0:
            out = (d != 0).sum(axis=-1)
        elif p == math.inf:
            out = d.max(axis=-1)
        elif p == 1:
            out = d.sum(axis=-1)
        else:
            if p < 1:                                                # |d|^p's slope is infinite at 0: torch's 0
                dz = d == 0
                dp = (_C.where(dz, 1.0, d) ** float(p)) * (1.0 - dz)
            else:
                dp = d * d if p == 2 else d ** float(p)
            out = _safe_root(dp.sum(axis=-1), p)
    return _as(out, _promote([x1.dtype, x2.dtype]))


def _mask(x, op):
    if isinstance(x, Tensor):
        return x != 0
    if isinstance(x, (np.ndarray, np.generic, int, float, bool)):
        return _C.tensor(np.asarray(x) != 0)
    raise TypeError(f"{op}: expected a Tensor, got {type(x).__name__}")


def logical_and(self, other):
    """1.0 where both are non-zero (NaN counts), else 0.0: a float32 mask (torch: bool); broadcasting."""
    return _mask(_need(self, "logical_and"), "logical_and") * _mask(other, "logical_and")


def logical_or(self, other):
    """1.0 where either is non-zero, else 0.0 (a float32 mask)."""
    return (_mask(_need(self, "logical_or"), "logical_or") + _mask(other, "logical_or")) > 0


def logical_xor(self, other):
    """1.0 where exactly one is non-zero, else 0.0 (a float32 mask)."""
    return _mask(_need(self, "logical_xor"), "logical_xor") != _mask(other, "logical_xor")


def logical_not(self):
    """1.0 where the element is zero, else 0.0 (a float32 mask; NaN is non-zero, so gives 0.0)."""
    return _need(self, "logical_not") == 0


# ---- in place ----

def _fits(self, op, *operands):
    """torch's in-place rule: the operands broadcast to self's shape (they cannot grow it)."""
    shapes = [tuple(self.shape)] + [tuple(v.shape) for v in operands if isinstance(v, Tensor)]
    try:
        ok = np.broadcast_shapes(*shapes) == shapes[0]
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{op}: operands of shapes {shapes[1:]} do not broadcast to self's shape {shapes[0]} "
                         "(an in-place result keeps self's shape)")


def _inplace(self, value, op):
    """self.copy_(value), refusing a floating value for an integer self (torch's cast rule)."""
    if self.dtype not in _FLOATS and value.dtype in _FLOATS:
        raise TypeError(f"{op}: the result is {value.dtype} and cannot be written into a {self.dtype} tensor")
    return self.copy_(value)


def _operand(v, op, what):
    if isinstance(v, Tensor):
        return v
    if isinstance(v, (int, float, np.ndarray, np.generic)) and not isinstance(v, bool):
        return _C.tensor(np.asarray(v, dtype=np.float32)) if isinstance(v, (np.ndarray, np.generic)) else v
    raise TypeError(f"{op}: {what} must be a Tensor or a number, got {type(v).__name__}")


def lerp_(self, end, weight):
    """In place self + weight * (end - self), torch's formula (end - (end - self) * (1 - weight) for
    weight >= 0.5, so weight = 1 gives end exactly): a polyak update `target.data.lerp_(src.data, tau)`."""
    end = _need(end, "lerp_", "end")
    w = _operand(weight, "lerp_", "weight")
    _fits(self, "lerp_", end, w)
    diff = end - self
    if isinstance(w, Tensor):
        value = _C.where(w < 0.5, self + w * diff, end - diff * (1.0 - w))
    else:
        value = self + w * diff if w < 0.5 else end - diff * (1.0 - w)
    return _inplace(self, value, "lerp_")


def addcmul_(self, tensor1, tensor2, value=1):
    """In place self + value * tensor1 * tensor2."""
    t1, t2 = _operand(tensor1, "addcmul_", "tensor1"), _operand(tensor2, "addcmul_", "tensor2")
    _fits(self, "addcmul_", t1, t2)
    return _inplace(self, self + value * (t1 * t2), "addcmul_")


def addcdiv_(self, tensor1, tensor2, value=1):
    """In place self + value * tensor1 / tensor2."""
    t1, t2 = _operand(tensor1, "addcdiv_", "tensor1"), _operand(tensor2, "addcdiv_", "tensor2")
    _fits(self, "addcdiv_", t1, t2)
    return _inplace(self, self + value * (t1 / t2), "addcdiv_")


# ---- sugar ----

def bool_(self):
    """A float32 mask, 1.0 where self is non-zero (NaN too), else 0.0: tlgpu has no bool dtype, and the mask is
    what its comparisons give (`x[m.bool()]`, `m.bool().float()` work as in torch)."""
    return self != 0


bool_.__name__ = bool_.__qualname__ = "bool"


def nelement(self):
    """numel(), torch's other name."""
    return self.numel()


def share_memory_(self):
    """self: tensors live in device memory, which tlgpu does not share between processes (docs/ray.md's
    publisher sends weights instead)."""
    return self


def is_tensor(obj):
    """True when obj is a tlgpu Tensor."""
    return isinstance(obj, Tensor)


def numel(input):
    """The number of elements of a tensor."""
    return _need(input, "numel").numel()


def get_default_dtype():
    """float32: tlgpu's floating dtype."""
    return float32


def set_default_dtype(d):
    """float32 is accepted (nothing changes); any other dtype raises TypeError: tlgpu's floating math is
    float32, and making float16 / bfloat16 the default would change every creation function."""
    dt = as_dtype(d, "set_default_dtype")                       # float64 / bool: the refusal saying why
    try:
        ok = np.dtype(dt) == float32
    except TypeError:
        ok = False
    if not ok:
        raise TypeError(f"set_default_dtype: tlgpu's default dtype is float32 and cannot change (got {d!r}); "
                        "convert tensors with .to(dtype) or pass dtype= where they are made")


_COMPILE_ARGS = frozenset(("fullgraph", "dynamic", "backend", "mode", "options", "disable"))


def compile(model=None, **kwargs):
    """The model or function itself (torch.compile's arguments are accepted and ignored), as `model =
    torch.compile(model)` or `@torch.compile(...)`: tlgpu runs eagerly; tlgpu.jit is its tracer that fuses."""
    extra = set(kwargs) - _COMPILE_ARGS
    if extra:
        raise TypeError(f"compile: unexpected keyword arguments {sorted(extra)}")
    if model is None:
        return lambda fn: compile(fn)
    if not callable(model):
        raise TypeError(f"compile: expected a callable (a Module or a function), got {type(model).__name__}")
    return model


# ---- where, keeping integer dtypes ----

def _int_operand(o):
    """An integer operand of where: an int32 / uint8 tensor or a Python int (bool too)."""
    if isinstance(o, Tensor):
        return o.dtype in (np.dtype(int32), np.dtype("uint8"))
    return _is_int(o)


def where(condition, input=None, other=None):
    """torch.where(condition, input, other): input where condition is nonzero (NaN too; -0.0 is zero), else
    other, broadcasting. Integer operands (int32 / uint8 tensors, Python ints) give torch's integer dtype, exactly
    (mask * input + (1 - mask) * other in int32's wrapping arithmetic: one term is 0); the C kernel, which
    computes in float32, serves the floating cases. torch.where(condition) is condition.nonzero(as_tuple=True)
    (a sync point)."""
    if input is None and other is None:
        return _need(condition, "where", "condition").nonzero(as_tuple=True)
    if input is None or other is None:
        raise TypeError("where: expected where(condition, input, other) or where(condition)")
    if isinstance(input, np.ndarray):
        input = _C.tensor(input)
    if isinstance(other, np.ndarray):
        other = _C.tensor(other)
    if not (_int_operand(input) and _int_operand(other)):
        return _C.where(condition, input, other)
    dts = [o.dtype for o in (input, other) if isinstance(o, Tensor)]
    u8 = bool(dts) and all(d == np.dtype("uint8") for d in dts)
    m = _C.where(condition, 1.0, 0.0)._convert(int32)      # the kernel's test: nonzero, NaN too
    x, y = (_as(o, int32) if isinstance(o, Tensor) else int(o) for o in (input, other))
    r = m * x + (1 - m) * y
    return r._convert("uint8") if u8 else r


def _where_method(self, condition, other):
    """x.where(condition, y): torch.where(condition, x, y)."""
    return where(condition, self, other)


# ---- tables ----

_BOTH = (broadcast_to, unflatten, mm, kron, clamp_min, clamp_max, logical_and, logical_or, logical_xor,
         logical_not)
METHODS = {f.__name__: f for f in _BOTH + (lerp_, addcmul_, addcdiv_, bool_, nelement, share_memory_,
                                           bernoulli_)}
METHODS["bernoulli"] = _bernoulli_method
EXTRA = {f.__name__: _module_form(f) for f in _BOTH}
EXTRA.update({f.__name__: f for f in (eye, logspace, randint_like, bernoulli, hstack, vstack, broadcast_tensors,
                                      cdist, is_tensor, numel, get_default_dtype, set_default_dtype, compile)})
EXTRA["Generator"] = Generator
METHODS["where"] = _where_method
OVERRIDES = {"where": where}                           # replace the C layer's name (float32-only results)


def install():
    """Attach the methods to Tensor and return the module functions, leaving alone any name the C layer has."""
    for name, fn in METHODS.items():
        if not hasattr(Tensor, name):
            setattr(Tensor, name, fn)
    return {**{name: fn for name, fn in EXTRA.items() if not hasattr(_C, name)}, **OVERRIDES}
