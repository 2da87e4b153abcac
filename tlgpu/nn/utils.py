"""Gradient utilities (torch.nn.utils' names). Nothing here waits for the device: norms and scales are
computed there and applied with in-place kernels."""
import math

from .. import _C


def _grads(parameters):
    if isinstance(parameters, _C.Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, eps=1e-6):
    """Scale the gradients in place so their global norm_type-norm (2 by default; inf is the largest
    magnitude) is at most max_norm, with torch's coefficient max_norm / (norm + 1e-6) clamped to 1. Returns the
    norm before clipping as a 0-d tensor; nothing waits for the device (the scale is computed there)."""
    grads = _grads(parameters)
    norm_type = float(norm_type)
    if not grads:
        return _C.zeros(())
    with _GradOff():
        if math.isinf(norm_type):
            total = _C.stack([g.abs().max() for g in grads]).max()
        elif norm_type == 2.0:
            total = _C.stack([(g * g).sum() for g in grads]).sum().sqrt()
        elif norm_type > 0:
            total = _C.stack([(g.abs() ** norm_type).sum() for g in grads]).sum() ** (1.0 / norm_type)
        else:
            raise ValueError(f"clip_grad_norm_: norm_type must be > 0 or inf, got {norm_type}")
        scale = (float(max_norm) / (total + eps)).clamp(max=1.0)
        for g in grads:
            g.mul_(scale)
    return total


def clip_grad_value_(parameters, clip_value):
    """Clamp every gradient element into [-clip_value, clip_value] in place."""
    v = float(clip_value)
    with _GradOff():
        for g in _grads(parameters):
            g.copy_(g.clamp(-v, v))


class _GradOff:
    def __enter__(self):
        self.prev = _C._set_grad_enabled(False)

    def __exit__(self, *exc):
        _C._set_grad_enabled(self.prev)


def parameters_to_vector(parameters):
    """The parameters flattened and concatenated into one 1-d tensor (a new tensor, in the graph)."""
    return _C.cat([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of the 1-d tensor vec into the parameters, in place and outside the graph."""
    if not isinstance(vec, _C.Tensor) or vec.ndim != 1:
        raise TypeError(f"vector_to_parameters: expected a 1-d Tensor, got {type(vec).__name__}"
                        f"{' of shape ' + str(vec.shape) if isinstance(vec, _C.Tensor) else ''}")
    params, i = list(parameters), 0
    total = sum(p.numel() for p in params)
    if total != vec.shape[0]:
        raise ValueError(f"vector_to_parameters: vec has {vec.shape[0]} elements, the parameters {total}")
    with _GradOff():
        for p in params:
            n = p.numel()
            p.copy_(vec[i:i + n].reshape(*p.shape))
            i += n
