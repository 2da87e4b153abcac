"""Optimizers: hyperparameters and state tensors here; every step() runs fused C kernels (kernels/optim.cl)
and never waits for the device. On CPU devices a step is one launch per 8 parameters at the same step count
and dtype (the chunked kernels: 6 for Adam/AdamW with amsgrad and RMSprop centered with momentum); on GPUs
Adam/AdamW without amsgrad take one launch per 8 parameters (tl_adam8), the others one a parameter
(_launch_mode says why).

Parameters may be float32, float16 or bfloat16 (mixed in one optimizer). As torch's fused optimizers, the
state (momentum_buffer, exp_avg, exp_avg_sq, max_exp_avg_sq) has its parameter's dtype and the kernels
compute in float32, rounding each stored value once (docs/precision.md).

state_dict() follows torch's layout: {"state": {index: {name: value}}, "param_groups": [{hyperparameters,
"params": [index, ...]}]}, parameters numbered in param_groups order; state tensors come out as numpy
arrays (a sync point, like Module.state_dict) and load_state_dict() copies them back to the device, so a
resumed run continues exactly as the uninterrupted one. tlgpu.save flattens it into safetensors keys.
"""
import numpy as np

from .. import _C
from .. import _jit
from . import lr_scheduler  # noqa: F401,E402


class _Replay:
    """An optimizer step inside a traced function (tlgpu.jit): the kernels replay, but the Python that
    computed their scalar arguments does not. Each launch is recorded as (command, param, state, group);
    before every replay, refresh(trace) advances the state's step counts and sets the scalars that depend on
    them or on the group's hyperparameters (so an lr scheduler keeps working), by argument index."""

    def __init__(self, scalars):
        self.scalars = scalars                         # (group, state, t) -> {argument index: float}
        self.items = []

    def launched(self, before, states, group):
        """After a launch for the parameters whose states are `states` (a list)."""
        cmd = _C._jit_last_command()
        if cmd != before:                              # zero-size parameters launch nothing
            self.items.append((cmd, states, group))

    def __call__(self, trace):
        for cmd, states, group in self.items:
            for st in states:
                if "step" in st:
                    st["step"] += 1
            for idx, value in self.scalars(group, states[0]).items():
                trace.set_arg(cmd, idx, value, "f")


_FLOATS = ("float32", "float16", "bfloat16")


def _launch_mode():
    """How the optimizers launch a step. "chunked" on CPU devices: SGD, Adam/AdamW, RAdam and RMSprop put every
    parameter of a step in one launch, 8 a launch (6 for Adam with amsgrad), each work-item looping over 4096
    elements of one parameter, which PoCL vectorises (tl_sgdc, tl_adamc, tl_radamc, tl_rmspropc). "multi" on
    GPUs: Adam/AdamW without amsgrad take 8 parameters a launch, an element a work-item (tl_adam8), which saves
    ~9 us a launch; the others take one a parameter. "per_param": one launch a parameter. tl_adam8 is not used
    on PoCL because its per-element branch is never vectorised there: 5.7x the per-parameter kernel's time on
    one parameter of 200,704 floats (1099 against 193 us). Tests force a mode with _MODE, or with the older
    _PER_PARAM switch (True: "per_param", False: "multi")."""
    global _MODE
    if _PER_PARAM is not None:
        return "per_param" if _PER_PARAM else "multi"
    if _MODE is None:
        from .. import device
        _MODE = "chunked" if device().type == "cpu" else "multi"
    return _MODE


_MODE = None
_PER_PARAM = None


def _grouped(items, key, per):
    """(key, run) for the items (tuples starting with the parameter) whose parameters have elements, grouped by
    key(item) and the parameter's dtype (one launch holds one dtype), in runs of at most `per`."""
    by = {}
    for it in items:
        if it[0].numel():                              # zero-size: nothing to update
            by.setdefault((key(it), it[0].dtype), []).append(it)    # (str(dtype) costs 6 us: not that)
    for (k, _), same in by.items():
        for i in range(0, len(same), per):
            yield k, same[i:i + per]


def _zeros_like(p):
    """A state tensor for p: zeros of its shape and dtype."""
    return _C.zeros(*p.shape, dtype=p.dtype)


def _recorder(scalars):
    """A _Replay registered with the trace being recorded, or None outside tlgpu.jit's tracing."""
    if not _C._jit_capturing():
        return None
    rec = _Replay(scalars)
    _jit._on_replay(rec)
    return rec


class Optimizer:
    def __init__(self, params, defaults):
        params = list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: got an empty parameter list")
        groups = params if isinstance(params[0], dict) else [{"params": params}]
        self.param_groups = []
        for g in groups:
            group = dict(defaults)
            group.update(g)
            group["params"] = list(group["params"])
            for p in group["params"]:
                if not isinstance(p, _C.Tensor) or str(p.dtype) not in _FLOATS or not p.requires_grad:
                    got = p.dtype if isinstance(p, _C.Tensor) else type(p).__name__
                    raise TypeError(f"{type(self).__name__}: parameters must be float32, float16 or bfloat16 "
                                    f"tensors that require grad, got {got}")
                if not p.is_contiguous():
                    raise ValueError(f"{type(self).__name__}: parameters must be contiguous")
            self.param_groups.append(group)
        self.state = {}

    def _params(self):
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self):
        index = {id(p): i for i, p in enumerate(self._params())}
        state = {}
        for p, st in self.state.items():
            state[index[id(p)]] = {k: (v.numpy() if isinstance(v, _C.Tensor) else v)
                                   for k, v in st.items() if v is not None}
        groups = [dict({k: v for k, v in g.items() if k != "params"}, params=[index[id(p)] for p in g["params"]])
                  for g in self.param_groups]
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict):
        """Hyperparameters and state from state_dict (as state_dict() or tlgpu.load made it); the parameter
        counts and shapes must match this optimizer's, group by group."""
        name = type(self).__name__
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups) or \
                any(len(g["params"]) != len(o["params"]) for g, o in zip(groups, self.param_groups)):
            raise ValueError(f"{name}.load_state_dict: the state's groups/parameter counts differ from the optimizer's")
        params = {}
        for g, own in zip(groups, self.param_groups):
            params.update({int(i): p for i, p in zip(g["params"], own["params"])})
        new_state = {}
        for i, st in state_dict["state"].items():
            p = params.get(int(i))
            if p is None:
                raise ValueError(f"{name}.load_state_dict: state for parameter {i}, which no group holds")
            entry = {}
            for k, v in st.items():
                if isinstance(v, (np.ndarray, _C.Tensor)):
                    if tuple(v.shape) != tuple(p.shape):
                        raise ValueError(f"{name}.load_state_dict: state {k!r} of parameter {i} has shape "
                                         f"{tuple(v.shape)}, the parameter {p.shape}")
                    t = _zeros_like(p)
                    t.copy_(v)                         # floating state takes the parameter's dtype (torch)
                    v = t
                entry[k] = v
            new_state[p] = self._complete_state(entry, p)
        for g, own in zip(groups, self.param_groups):
            own.update({k: (tuple(v) if isinstance(v, list) else v) for k, v in g.items() if k != "params"})
        self.state = new_state

    def _complete_state(self, entry, p):
        return entry

    def zero_grad(self, set_to_none=True):
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.zero_()

    def _grads(self, group):
        for p in group["params"]:
            if p.grad is not None:
                yield p, p.grad


class SGD(Optimizer):
    """SGD with momentum, dampening, nesterov and (coupled) weight decay, as torch.optim.SGD."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        if lr < 0 or momentum < 0 or weight_decay < 0:
            raise ValueError("SGD: lr, momentum and weight_decay must be >= 0")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("SGD: nesterov needs momentum > 0 and dampening = 0")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov))

    # kernel argument indices of tl_sgd_f32's scalars (csrc/ops/ops_optim.c)
    _ARGS = {"lr": 4, "momentum": 5, "dampening": 6, "weight_decay": 7}

    @classmethod
    def _scalars(cls, group, st):
        return {i: group[k] for k, i in cls._ARGS.items()}

    @staticmethod
    def _chunked_scalars(group, st):
        """tl_sgdc_f32's (kernels/optim.cl: cend, nel, chunk, 8 x 3 buffers, then these): lr, momentum,
        dampening, weight_decay at 27-30."""
        return {27: group["lr"], 28: group["momentum"], 29: group["dampening"], 30: group["weight_decay"]}

    def step(self):
        """On CPU devices all parameters at once, 8 a launch (tl_sgdc; the first step of a momentum buffer
        apart); elsewhere one launch a parameter."""
        chunked = _launch_mode() == "chunked"
        rec = _recorder(self._chunked_scalars if chunked else self._scalars)
        for group in self.param_groups:
            items = []
            for p, g in self._grads(group):
                st = self.state.setdefault(p, {})
                first = "momentum_buffer" not in st
                if group["momentum"] != 0 and first:
                    st["momentum_buffer"] = _zeros_like(p)
                if chunked:
                    items.append((p, g, st, first))
                    continue
                before = _C._jit_last_command() if rec else None
                _C._sgd_step(p, g, st.get("momentum_buffer"), group["lr"], group["momentum"], group["dampening"],
                             group["weight_decay"], group["nesterov"], first)
                if rec:
                    rec.launched(before, [st], group)
            momentum = group["momentum"] != 0
            for first, chunk in _grouped(items, lambda it: it[3], 8):
                before = _C._jit_last_command() if rec else None
                _C._sgd_chunked([c[0] for c in chunk], [c[1] for c in chunk],
                                [c[2]["momentum_buffer"] for c in chunk] if momentum else None, group["lr"],
                                group["momentum"], group["dampening"], group["weight_decay"], group["nesterov"],
                                first)
                if rec:
                    rec.launched(before, [c[2] for c in chunk], group)


class Adam(Optimizer):
    """Adam with bias correction and optional amsgrad; weight_decay is added to the gradient (L2)."""
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False):
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"{type(self).__name__}: invalid lr, eps or betas")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      amsgrad=amsgrad))

    @staticmethod
    def _scalars(group, st):
        """tl_adam_f32's step-dependent arguments (csrc/ops/ops_optim.c): lr, beta1, beta2, eps, weight_decay
        at 6-10, the bias corrections at 12-13."""
        b1, b2 = group["betas"]
        t = st["step"]
        return {6: group["lr"], 7: b1, 8: b2, 9: group["eps"], 10: group["weight_decay"], 12: 1 - b1 ** t,
                13: 1 - b2 ** t}

    @staticmethod
    def _multi_scalars(group, st):
        """tl_adam8_f32's (csrc/ops/ops_optim.c): lr, beta1, beta2, eps, weight_decay at 33-37, bias
        corrections at 39-40."""
        b1, b2 = group["betas"]
        t = st["step"]
        return {33: group["lr"], 34: b1, 35: b2, 36: group["eps"], 37: group["weight_decay"], 39: 1 - b1 ** t,
                40: 1 - b2 ** t}

    @staticmethod
    def _chunked_scalars(group, st):
        """tl_adamc_f32's (kernels/optim.cl: cend, nel, chunk, 8 x 5 buffers, then these): lr, beta1, beta2,
        eps, weight_decay at 43-47, bias corrections at 49-50."""
        b1, b2 = group["betas"]
        t = st["step"]
        return {43: group["lr"], 44: b1, 45: b2, 46: group["eps"], 47: group["weight_decay"], 49: 1 - b1 ** t,
                50: 1 - b2 ** t}

    def step(self):
        """Grouped launches where _launch_mode() says so: on CPU devices every parameter at the same step in one
        chunked launch (8 a launch, 6 with amsgrad); on GPUs without amsgrad one launch per 8 parameters
        (_adam_multi). Otherwise one launch per parameter."""
        mode = _launch_mode()
        rec = _recorder(self._scalars) if mode != "chunked" else None
        rec_group = _recorder(self._chunked_scalars if mode == "chunked" else self._multi_scalars)
        for group in self.param_groups:
            b1, b2 = group["betas"]
            items = []
            for p, g in self._grads(group):
                st = self.state.get(p)
                if st is None:
                    st = self.state[p] = {"step": 0, "exp_avg": _zeros_like(p), "exp_avg_sq": _zeros_like(p),
                                          "max_exp_avg_sq": _zeros_like(p) if group["amsgrad"] else None}
                st["step"] += 1
                items.append((p, g, st))
            if mode == "chunked" or (mode == "multi" and not group["amsgrad"]):
                self._step_grouped(group, items, rec_group, mode == "chunked")
                continue
            for p, g, st in items:
                t = st["step"]
                before = _C._jit_last_command() if rec else None
                _C._adam_step(p, g, st["exp_avg"], st["exp_avg_sq"], st["max_exp_avg_sq"], group["lr"], b1, b2,
                              group["eps"], group["weight_decay"], self._decoupled, 1 - b1 ** t, 1 - b2 ** t,
                              group["amsgrad"])
                if rec:
                    rec.launched(before, [st], group)

    def _step_grouped(self, group, items, rec, chunked):
        """The parameters grouped by step count (they differ only where some had no gradient at some step)
        and dtype (one launch holds one): chunked, 8 a launch (6 with amsgrad: the stream's 32 buffers a
        launch); else tl_adam8's 8 a launch."""
        b1, b2 = group["betas"]
        ams = group["amsgrad"]
        for t, chunk in _grouped(items, lambda it: it[2]["step"], 6 if chunked and ams else 8):
            ps, gs, sts = [c[0] for c in chunk], [c[1] for c in chunk], [c[2] for c in chunk]
            ms, vs = [st["exp_avg"] for st in sts], [st["exp_avg_sq"] for st in sts]
            before = _C._jit_last_command() if rec else None
            if chunked:
                _C._adam_chunked(ps, gs, ms, vs, [st["max_exp_avg_sq"] for st in sts] if ams else None,
                                 group["lr"], b1, b2, group["eps"], group["weight_decay"], self._decoupled,
                                 1 - b1 ** t, 1 - b2 ** t, ams)
            else:
                _C._adam_multi(ps, gs, ms, vs, group["lr"], b1, b2, group["eps"], group["weight_decay"],
                               self._decoupled, 1 - b1 ** t, 1 - b2 ** t)
            if rec:
                rec.launched(before, sts, group)

    def _complete_state(self, entry, p):
        entry["step"] = int(entry.get("step", 0))
        entry.setdefault("max_exp_avg_sq", None)
        return entry


class AdamW(Adam):
    """Adam with decoupled weight decay (p -= lr * weight_decay * p before the Adam update)."""
    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad)


class RAdam(Optimizer):
    """RAdam as torch.optim.RAdam: Adam's moments with the variance rectification term r_t; while the
    approximated SMA length rho_t <= 5 (the first steps) the update is the un-adapted bias-corrected
    momentum. decoupled_weight_decay=True multiplies p by (1 - lr * weight_decay) instead of adding
    weight_decay * p to the gradient. One fused kernel per parameter per step (per 8 on CPU devices); the
    step's scalars are computed here in double precision."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled_weight_decay=False):
        if lr < 0 or eps < 0 or weight_decay < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ValueError(f"RAdam: invalid lr={lr}, eps={eps}, weight_decay={weight_decay} or betas={betas}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      decoupled_weight_decay=bool(decoupled_weight_decay)))

    @staticmethod
    def _step_scalars(lr, b1, b2, t):
        """(step_size, adaptive) of step t, torch's formulas."""
        bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
        rho_inf = 2 / (1 - b2) - 1
        rho_t = rho_inf - 2 * t * b2 ** t / bc2
        if rho_t > 5:
            rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
            return lr * rect * bc2 ** 0.5 / bc1, True
        return lr / bc1, False

    @classmethod
    def _scalars(cls, group, st):
        """tl_radam_f32's arguments (csrc/ops/ops_optim.c): lr, beta1, beta2, eps, weight_decay at 5-9,
        step_size at 11. `adaptive` (12, an int) changes once, after the first steps: a trace made earlier
        is refused (see step)."""
        b1, b2 = group["betas"]
        step_size, _ = cls._step_scalars(group["lr"], b1, b2, st["step"])
        return {5: group["lr"], 6: b1, 7: b2, 8: group["eps"], 9: group["weight_decay"], 11: step_size}

    @classmethod
    def _chunked_scalars(cls, group, st):
        """tl_radamc_f32's (kernels/optim.cl: cend, nel, chunk, 8 x 4 buffers, then these): _scalars' 30
        places on (lr at 35, step_size at 41)."""
        return {k + 30: v for k, v in cls._scalars(group, st).items()}

    def step(self):
        """On CPU devices the parameters at one step count 8 a launch (tl_radamc); elsewhere one launch a
        parameter."""
        chunked = _launch_mode() == "chunked"
        rec = _recorder(self._chunked_scalars if chunked else self._scalars)
        for group in self.param_groups:
            b1, b2 = group["betas"]
            items = []
            for p, g in self._grads(group):
                st = self.state.get(p)
                if st is None:
                    st = self.state[p] = {"step": 0, "exp_avg": _zeros_like(p), "exp_avg_sq": _zeros_like(p)}
                st["step"] += 1
                step_size, adaptive = self._step_scalars(group["lr"], b1, b2, st["step"])
                if rec and not adaptive:
                    raise RuntimeError("tlgpu.jit: RAdam's first steps (rho_t <= 5) switch kernels when they end; "
                                       "trace the step after them (a few eager steps first)")
                if chunked:
                    items.append((p, g, st))
                    continue
                before = _C._jit_last_command() if rec else None
                _C._radam_step(p, g, st["exp_avg"], st["exp_avg_sq"], group["lr"], b1, b2, group["eps"],
                               group["weight_decay"], group["decoupled_weight_decay"], step_size, adaptive)
                if rec:
                    rec.launched(before, [st], group)
            for t, chunk in _grouped(items, lambda it: it[2]["step"], 8):
                step_size, adaptive = self._step_scalars(group["lr"], b1, b2, t)
                before = _C._jit_last_command() if rec else None
                _C._radam_chunked([c[0] for c in chunk], [c[1] for c in chunk], [c[2]["exp_avg"] for c in chunk],
                                  [c[2]["exp_avg_sq"] for c in chunk], group["lr"], b1, b2, group["eps"],
                                  group["weight_decay"], group["decoupled_weight_decay"], step_size, adaptive)
                if rec:
                    rec.launched(before, [c[2] for c in chunk], group)

    def _complete_state(self, entry, p):
        entry["step"] = int(entry.get("step", 0))
        return entry


class RMSprop(Optimizer):
    """RMSprop as torch.optim.RMSprop (Stable-Baselines3's A2C default: alpha=0.99, eps=1e-5): square_avg =
    alpha * square_avg + (1 - alpha) * g^2 (g with weight_decay * p added), the step g / (sqrt(square_avg) + eps),
    centered subtracting the running mean of g squared under the root, momentum accumulating the steps in a
    buffer. Fused kernels: 8 parameters a launch on CPU devices (tl_rmspropc_*), one elsewhere (tl_rmsprop_*);
    state as torch's: step, square_avg, momentum_buffer (momentum > 0), grad_avg (centered), in the parameter's
    dtype."""

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
        if lr < 0 or eps < 0 or weight_decay < 0 or momentum < 0 or not 0 <= alpha <= 1:
            raise ValueError(f"RMSprop: invalid lr={lr}, alpha={alpha}, eps={eps}, weight_decay={weight_decay} or "
                             f"momentum={momentum}")
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum,
                                      centered=centered))

    # tl_rmsprop_f32's scalars (csrc/ops/ops_optim.c): lr, alpha, eps, weight_decay, momentum at 6-10;
    # tl_rmspropc_f32's after cend, nel, chunk and 8 x 5 buffers: at 43-47
    _ARGS = {"lr": 6, "alpha": 7, "eps": 8, "weight_decay": 9, "momentum": 10}

    @classmethod
    def _scalars(cls, group, st):
        return {i: group[k] for k, i in cls._ARGS.items()}

    @classmethod
    def _chunked_scalars(cls, group, st):
        return {i + 37: group[k] for k, i in cls._ARGS.items()}

    def step(self):
        """On CPU devices every parameter of a dtype in one launch, 8 a launch (6 when centered with momentum:
        the stream's 32 buffers); elsewhere one launch a parameter."""
        chunked = _launch_mode() == "chunked"
        rec = _recorder(self._chunked_scalars if chunked else self._scalars)
        for group in self.param_groups:
            items = []
            for p, g in self._grads(group):
                st = self.state.setdefault(p, {"step": 0})
                for key, on in (("square_avg", True), ("momentum_buffer", group["momentum"] > 0),
                                ("grad_avg", group["centered"])):
                    if on and key not in st:               # first step, or a flag turned on since (loaded state)
                        st[key] = _zeros_like(p)
                st["step"] += 1
                items.append((p, g, st))
            scal = (group["lr"], group["alpha"], group["eps"], group["weight_decay"], group["momentum"],
                    group["centered"])
            if chunked:
                both = group["centered"] and group["momentum"] > 0
                for _, chunk in _grouped(items, lambda it: 0, 6 if both else 8):
                    sts = [c[2] for c in chunk]
                    before = _C._jit_last_command() if rec else None
                    _C._rmsprop([c[0] for c in chunk], [c[1] for c in chunk], [s["square_avg"] for s in sts],
                                [s["grad_avg"] for s in sts] if group["centered"] else None,
                                [s["momentum_buffer"] for s in sts] if group["momentum"] > 0 else None, *scal, True)
                    if rec:
                        rec.launched(before, sts, group)
                continue
            for p, g, st in items:
                before = _C._jit_last_command() if rec else None
                _C._rmsprop(p, g, st["square_avg"], st.get("grad_avg"), st.get("momentum_buffer"), *scal, False)
                if rec:
                    rec.launched(before, [st], group)

    def _complete_state(self, entry, p):
        entry["step"] = int(entry.get("step", 0))         # the buffers a flag needs: made at the next step
        return entry

