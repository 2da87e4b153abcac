"""Loss modules and their functional forms, with torch's names, arguments and reductions. Each loss is a
short composition of differentiable C ops (the Huber family uses clamp, so there is no branch per element)."""
from .. import _C
from . import Module, functional   # imported at the end of nn/__init__.py, after Module exists


def _reduce(x, reduction, op):
    if reduction == "mean":
        return x.mean()
    if reduction == "sum":
        return x.sum()
    if reduction == "none":
        return x
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")


def _diff(input, target, op):
    if not isinstance(input, _C.Tensor):
        raise TypeError(f"{op}: input must be a Tensor, not {type(input).__name__}")
    if isinstance(target, _C.Tensor) and tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"{op}: input {input.shape} and target {target.shape} differ in shape")
    return input - target


def l1_loss(input, target, reduction="mean"):
    return _reduce(_diff(input, target, "l1_loss").abs(), reduction, "l1_loss")


def huber_loss(input, target, reduction="mean", delta=1.0):
    """0.5 d**2 where |d| < delta, delta * (|d| - 0.5 delta) elsewhere: with q = min(|d|, delta),
    0.5 q**2 + delta (|d| - q), which has the same value and gradient everywhere."""
    if not delta > 0:
        raise ValueError(f"huber_loss: delta must be > 0, got {delta}")
    a = _diff(input, target, "huber_loss").abs()
    q = a.clamp(max=float(delta))
    return _reduce(q * q * 0.5 + (a - q) * float(delta), reduction, "huber_loss")


def smooth_l1_loss(input, target, reduction="mean", beta=1.0):
    """huber_loss / beta (torch's definition); beta = 0 is the L1 loss."""
    if beta < 0:
        raise ValueError(f"smooth_l1_loss: beta must be >= 0, got {beta}")
    if beta == 0:
        return l1_loss(input, target, reduction)
    a = _diff(input, target, "smooth_l1_loss").abs()
    q = a.clamp(max=float(beta))
    return _reduce(q * q * (0.5 / beta) + (a - q), reduction, "smooth_l1_loss")


class _Loss(Module):
    def __init__(self, reduction="mean"):
        super().__init__()
        if reduction not in ("mean", "sum", "none"):
            raise ValueError(f"{type(self).__name__}: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
        self.reduction = reduction

    def extra_repr(self):
        return f"reduction={self.reduction!r}"


class MSELoss(_Loss):
    def forward(self, input, target):
        return functional.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    def forward(self, input, target):
        return l1_loss(input, target, self.reduction)


class HuberLoss(_Loss):
    def __init__(self, reduction="mean", delta=1.0):
        super().__init__(reduction)
        self.delta = delta

    def forward(self, input, target):
        return huber_loss(input, target, self.reduction, self.delta)


class SmoothL1Loss(_Loss):
    def __init__(self, reduction="mean", beta=1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return smooth_l1_loss(input, target, self.reduction, self.beta)


class CrossEntropyLoss(_Loss):
    """Logits [N, C] and int32 class targets [N] (fused log-softmax + NLL); ignore_index as torch."""

    def __init__(self, ignore_index=-100, reduction="mean"):
        super().__init__(reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return functional.cross_entropy(input, target, ignore_index=self.ignore_index, reduction=self.reduction)
