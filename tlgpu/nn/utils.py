"""Gradient utilities."""
from .. import _C


def clip_grad_norm_(parameters, max_norm, eps=1e-6):
    """Scale the gradients in place so their global 2-norm is at most max_norm. Returns the norm before
    clipping as a 0-d tensor; nothing waits for the device (the scale is computed there)."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return _C.zeros(())
    with _GradOff():
        total = _C.stack([(g * g).sum() for g in grads]).sum().sqrt()
        scale = (float(max_norm) / (total + eps)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale)
    return total


class _GradOff:
    def __enter__(self):
        self.prev = _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)
