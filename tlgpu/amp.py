"""tlgpu.amp: automatic mixed precision, as torch.amp.

autocast(dtype=tlgpu.bfloat16) is a context manager and decorator with torch.autocast's rules. Inside it
matmul/@/dot, addmm, linear and conv2d cast their floating operands to the autocast dtype and return it;
sum/mean/prod/logsumexp, softmax/log_softmax, cross_entropy, mse_loss and layer_norm take float16/bfloat16
inputs in float32 and return float32. The casts are recorded conversions, so float32 parameters stay float32
and get float32 gradients; a parameter is cast once a region (torch's cast cache, cache_enabled). The state
is per thread and kept in C beside grad mode (_C._set_autocast): the ops check it there, so the float32 paths
pay one thread-local read. backward() runs with autocast off.

GradScaler scales a float16 loss so small gradients survive, unscales the gradients before the optimizer
step, skips the step when one of them is inf or NaN (found on the device: one host read per step) and
adapts the scale, as torch.amp.GradScaler (docs/precision.md)."""
import functools
import threading

import numpy as _np
from ml_dtypes import bfloat16 as _bfloat16

from . import _C

_HALVES = ("float16", "bfloat16")
_nesting = threading.local()                               # autocast regions entered in this thread


def _bf16():
    return _np.dtype(_bfloat16)


def get_autocast_dtype():
    """This thread's autocast dtype, or None when autocast is off."""
    prev = _C._set_autocast(None)
    _C._set_autocast(prev)
    return prev


def is_autocast_enabled(device_type=None):
    """Whether autocast is on in this thread (device_type is accepted for torch compatibility)."""
    return get_autocast_dtype() is not None


def _to_float32(*xs):
    """xs with float16/bfloat16 tensors widened to float32 when autocast is on (the float32 ops' rule)."""
    if not any(isinstance(x, _C.Tensor) and x.dtype in _HALVES for x in xs) or get_autocast_dtype() is None:
        return xs
    return tuple(x.float() if isinstance(x, _C.Tensor) and x.dtype in _HALVES else x for x in xs)


class autocast:
    """autocast(device_type=None, dtype=tlgpu.bfloat16, enabled=True, cache_enabled=None): mixed precision in
    this thread, as torch.autocast (device_type is accepted and ignored: tlgpu has one device). A context manager
    and a decorator; enabled=False turns autocast off inside. cache_enabled (None: True, torch's default): within
    the outermost region each parameter is cast once (while grad mode is on and it is not written in place),
    the casts dropped when that region ends."""

    def __init__(self, device_type=None, dtype=None, enabled=True, cache_enabled=None):
        if device_type is not None and not isinstance(device_type, str) and dtype is None:
            device_type, dtype = None, device_type          # tlgpu.autocast(tlgpu.float16)
        dtype = _bf16() if dtype is None else _np.dtype(dtype)
        if str(dtype) not in _HALVES:
            raise ValueError(f"autocast: dtype must be float16 or bfloat16, got {dtype}")
        self.device_type = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)
        self._cache = True if cache_enabled is None else bool(cache_enabled)

    def __enter__(self):
        _nesting.depth = getattr(_nesting, "depth", 0) + 1
        self._prev_cache = _C._autocast_cache(self._cache)
        self._prev = _C._set_autocast(self.fast_dtype if self._enabled else None)
        return self

    def __exit__(self, *exc):
        _C._set_autocast(self._prev)
        _C._autocast_cache(self._prev_cache)
        _nesting.depth -= 1
        if _nesting.depth == 0:                           # the outermost region ends: its casts go (torch)
            _C._autocast_cache_clear()
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.fast_dtype, self._enabled):
                return fn(*args, **kwargs)
        return wrapper


class GradScaler:
    """GradScaler(device=None, init_scale=2.**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
    enabled=True), as torch.amp.GradScaler:

        scaler.scale(loss).backward()
        scaler.step(optimizer)        # unscales (unless unscale_ ran), skips the step on inf/NaN gradients
        scaler.update()               # backs off after a skipped step, grows after growth_interval clean ones

    The scale is a Python float (a power of two with the defaults, so scaling and unscaling are exact); the
    inf/NaN check is one device sum per gradient and one host read of the flag per optimizer step."""

    _READY, _UNSCALED, _STEPPED = 0, 1, 2

    def __init__(self, device=None, init_scale=2.0 ** 16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        if not growth_factor > 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), got {backoff_factor}")
        if int(growth_interval) <= 0:
            raise ValueError(f"GradScaler: growth_interval must be a positive int, got {growth_interval}")
        self._enabled = bool(enabled)
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_opt = {}            # id(optimizer) -> [stage, found_inf (device tensor, then bool) or None]

    def is_enabled(self):
        return self._enabled

    def get_scale(self):
        """The current scale (1.0 when disabled)."""
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self):
        return self._growth_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def get_growth_interval(self):
        return self._growth_interval

    def scale(self, outputs):
        """outputs (a tensor, or lists/tuples/dicts of them) times the scale; as they are when disabled."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, _C.Tensor):
            return outputs * self._scale
        if isinstance(outputs, dict):
            return {k: self.scale(v) for k, v in outputs.items()}
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(v) for v in outputs)
        raise TypeError(f"GradScaler.scale: outputs must be a Tensor or a list/tuple/dict of them, got "
                        f"{type(outputs).__name__}")

    def _state(self, optimizer):
        return self._per_opt.setdefault(id(optimizer), [self._READY, None])

    def unscale_(self, optimizer):
        """Divides optimizer's gradients by the scale in place (before clipping them, say) and records, on the
        device, whether any is inf or NaN. Once per optimizer between update() calls."""
        if not self._enabled:
            return
        st = self._state(optimizer)
        if st[0] == self._UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if st[0] == self._STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv = 1.0 / self._scale
        found = None
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                g.mul_(inv)
                z = (g * 0.0).float().sum()          # 0 when every element is finite, else NaN
                found = z if found is None else found + z
        st[0], st[1] = self._UNSCALED, found

    def step(self, optimizer, *args, **kwargs):
        """unscale_(optimizer) unless it ran, then optimizer.step(*args, **kwargs) unless a gradient is inf or
        NaN (one host read). Returns what optimizer.step returned, or None when skipped."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        st = self._state(optimizer)
        if st[0] == self._STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if st[0] == self._READY:
            self.unscale_(optimizer)
        found = st[1]
        st[1] = found is not None and found.item() != 0.0     # the one host read: NaN != 0 too
        st[0] = self._STEPPED
        if st[1]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None):
        """After the step(s): the scale times backoff_factor when any stepped optimizer had inf/NaN gradients
        (the growth count restarts), else times growth_factor every growth_interval clean updates. new_scale
        (a float) sets it instead."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, _C.Tensor) else new_scale)
        else:
            if not self._per_opt:
                raise RuntimeError("No inf checks were recorded prior to update.")
            found = False
            for st in self._per_opt.values():
                f = st[1]
                if f is not None and not isinstance(f, bool):   # unscale_ without step: read it here
                    f = f.item() != 0.0
                found = found or bool(f)
            if found:
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._per_opt = {}

    def state_dict(self):
        """torch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker ({} when
        disabled)."""
        if not self._enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self._growth_factor, "backoff_factor": self._backoff_factor,
                "growth_interval": self._growth_interval, "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
