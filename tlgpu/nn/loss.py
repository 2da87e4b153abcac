"""Loss modules, with torch's names, arguments and reductions, over their functional forms in
nn/functional.py (l1_loss, huber_loss and smooth_l1_loss are importable from here too)."""
from . import Module, functional   # imported at the end of nn/__init__.py, after Module exists
from .functional import huber_loss, l1_loss, smooth_l1_loss  # noqa: F401  their functional forms, named here too


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
