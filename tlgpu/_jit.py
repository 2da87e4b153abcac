"""tlgpu.jit: run a function's device work as one captured trace (docs/jit.md).

    @tlgpu.jit
    def train_step(x, y):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

The first call with a new signature runs eagerly (it creates the lazily made state: gradients, optimizer
moments, kernels); the second traces: it runs for real while every device command is recorded with its
arguments; later calls replay the recording from C, with the new input tensors bound in place of the traced
ones and fresh output tensors returned. Before the first replay, runs of elementwise commands in the trace are
fused into generated kernels that give the same bits (fuse=False, or TLGPU_JIT_FUSE=0, keeps every command). A signature is the structure of the arguments, each tensor's
shape/strides/offset/dtype/requires_grad, which inputs share storage, the values of the non-tensor
arguments and the grad mode: a different one traces again (at most `max_traces` are kept).

What replays: every kernel, copy and native BLAS call the function enqueued, in order; in-place updates of
parameters, optimizer state and buffers (they write the same buffers again); random ops (each replay draws
the next numbers of the generator, as eager calls would); autograd inside the function; the optimizers'
step counts and learning rates (they refresh their scalar arguments before each replay, so schedulers work).
What does not: Python side effects (appending to a list, rebinding an attribute to a new tensor: carry such
state in and out as arguments, or update it in place); host data turned into a tensor inside the function
(captured as a constant). A host read inside the function (numpy(), item(), tolist(), float(), bool(), an
`if` on a tensor) raises RuntimeError naming tlgpu.jit instead of freezing a stale value.
"""
import functools
import threading
from collections import OrderedDict

from . import _C

__all__ = ["jit", "Jitted", "is_tracing"]

_local = threading.local()


def is_tracing():
    """True while this thread records a trace (the traced call of a jitted function)."""
    return _C._jit_capturing()


def _on_replay(fn):
    """Registers fn(trace) to run before each replay of the trace being recorded (the optimizers refresh
    their step-dependent scalars this way). A no-op when nothing is being traced."""
    hooks = getattr(_local, "hooks", None)
    if hooks is not None and _C._jit_capturing():
        hooks.append(fn)


def _flatten(obj, tensors):
    """(structure, tensors appended in order): tensors become their index, lists/tuples/dicts recurse, other
    values stay as they are (they must be hashable to be part of a signature)."""
    if isinstance(obj, _C.Tensor):
        tensors.append(obj)
        return ("T", len(tensors) - 1)
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, tuple(_flatten(v, tensors) for v in obj))
    if isinstance(obj, dict):
        return ("dict", tuple((k, _flatten(v, tensors)) for k, v in obj.items()))
    return ("V", obj)


def _unflatten(struct, tensors):
    tag, val = struct
    if tag == "T":
        return tensors[val]
    if tag == "list":
        return [_unflatten(v, tensors) for v in val]
    if tag == "tuple":
        return tuple(_unflatten(v, tensors) for v in val)
    if tag == "dict":
        return {k: _unflatten(v, tensors) for k, v in val}
    return val


class _Entry:
    __slots__ = ("trace", "out_struct", "hooks")

    def __init__(self, trace, out_struct, hooks):
        self.trace, self.out_struct, self.hooks = trace, out_struct, hooks


class Jitted:
    """A jitted function (tlgpu.jit(fn)): call it as fn. traces() lists the signatures traced;
    memory_plan() reports the newest trace's device memory and command counts. fuse: fuse elementwise runs.
    command_buffer: replay through cl_khr_command_buffer (True, False, None: TLGPU_JIT_CMDBUF decides)."""

    def __init__(self, fn, max_traces=8, fuse=True, command_buffer=None):
        if not callable(fn):
            raise TypeError(f"tlgpu.jit: expected a callable, got {type(fn).__name__}")
        if max_traces < 1:
            raise ValueError(f"tlgpu.jit: max_traces must be >= 1, got {max_traces}")
        self.fn = fn
        self.max_traces = int(max_traces)
        self.fuse = bool(fuse)
        if command_buffer not in (None, True, False):
            raise TypeError(f"tlgpu.jit: command_buffer must be None, True or False, got {command_buffer!r}")
        self.command_buffer = command_buffer
        self._entries = OrderedDict()
        self._seen = set()
        functools.update_wrapper(self, fn)

    def __get__(self, obj, objtype=None):             # a jitted method: bind like a function would
        return self if obj is None else functools.partial(self.__call__, obj)

    def _key(self, args, kwargs):
        if not kwargs:                                # the common case: positional tensors only
            for a in args:
                if not isinstance(a, _C.Tensor):
                    break
            else:
                return (len(args), _C._jit_key(args), _C.is_grad_enabled()), args
        tensors = []
        struct = _flatten((args, kwargs), tensors)
        key = (struct, _C._jit_key(tensors), _C.is_grad_enabled())
        try:
            hash(key)
        except TypeError:
            raise TypeError("tlgpu.jit: every argument must be a tensor, a list/tuple/dict of them, or a hashable "
                            "value (non-tensor values are part of the signature)") from None
        return key, tensors

    def __call__(self, *args, **kwargs):
        if _C._jit_capturing():                      # inside another traced function: part of its trace
            return self.fn(*args, **kwargs)
        key, tensors = self._key(args, kwargs)
        entry = self._entries.get(key)
        if entry is not None and entry.trace.stale():  # a tensor it read is gone (reassigned): trace again
            del self._entries[key]
            return self._trace(key, args, kwargs, tensors)
        if entry is not None:
            self._entries.move_to_end(key)
            for hook in entry.hooks:
                hook(entry.trace)
            return _unflatten(entry.out_struct, entry.trace.replay(tensors))
        if key not in self._seen:                    # first call: eager, makes the lazy state
            if self.command_buffer:
                why = _C._jit_cmdbuf_device()
                if why is not None:
                    raise ValueError(f"tlgpu.jit: command_buffer=True: {why}")
            self._seen.add(key)
            return self.fn(*args, **kwargs)
        return self._trace(key, args, kwargs, tensors)

    def _trace(self, key, args, kwargs, tensors):
        _local.hooks = hooks = []
        _C._jit_begin()
        try:
            out = self.fn(*args, **kwargs)
            outs = []
            out_struct = _flatten(out, outs)
        except BaseException:
            _C._jit_abort()
            raise
        finally:
            _local.hooks = None
        cb = -1 if self.command_buffer is None else int(self.command_buffer)
        trace = _C._jit_end(tensors, outs, self.fuse, cb)
        self._entries[key] = _Entry(trace, out_struct, hooks)
        while len(self._entries) > self.max_traces:
            self._entries.popitem(last=False)
        again = trace.rewritten_outputs()
        if again:                                    # replays write those blocks again: the caller keeps a copy
            for i in again:
                outs[i] = outs[i].clone()
            return _unflatten(out_struct, outs)
        return out

    def traces(self):
        """The number of signatures with a trace kept."""
        return len(self._entries)

    def memory_plan(self):
        """The newest trace's plan: arena_bytes (intermediates and state the trace made, shared by liveness),
        arena_blocks, reused_blocks, held_bytes (buffers made before the trace that it touches: parameters,
        optimizer state), output_bytes (fresh blocks each replay returns), commands (kernels + copies + native
        BLAS calls), slot_copies (a replay's copies of inputs/outputs a native call touches: copied, not rebound),
        inputs, replays, fused_away (commands the fusion removed), dead_stores (intermediates it never writes back),
        command_buffer (None where the replay enqueues command by command, else a dict: segments and the commands
        inside them, planned at the first replay; enqueues of segments, records (a variant recorded for a new
        binding of its slots), hits, loop_runs (a segment run one command at a time), variants alive, record_s (host
        seconds spent recording)). None
        before the first trace."""
        if not self._entries:
            return None
        return next(reversed(self._entries.values())).trace.memory_plan()

    def commands(self):
        """The newest trace's commands (kernel names, "copy", "fused(op,op,...)" for a generated kernel), in replay
        order; None before a trace."""
        if not self._entries:
            return None
        return next(reversed(self._entries.values())).trace.commands()

    def reset(self):
        """Drops every trace (the next call runs eagerly again)."""
        self._entries.clear()
        self._seen.clear()


def jit(fn=None, *, max_traces=8, fuse=True, command_buffer=None):
    """tlgpu.jit(fn) or @tlgpu.jit / @tlgpu.jit(max_traces=N, fuse=False): see the module's doc. fuse=False keeps
    every recorded command (no generated kernels for elementwise chains; TLGPU_JIT_FUSE=0 does it for all).
    command_buffer=True replays the trace's unchanging runs of commands as cl_khr_command_buffer recordings
    (ValueError where the device lacks the extension), False never, None as TLGPU_JIT_CMDBUF says (auto: where
    measured not to lose; docs/jit.md)."""
    if fn is None:
        return lambda f: Jitted(f, max_traces, fuse, command_buffer)
    return Jitted(fn, max_traces, fuse, command_buffer)
