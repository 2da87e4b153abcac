"""Argument checks the functional forms share (tlgpu/nn/functional.py and _functional_more.py import them)."""
import warnings

import numpy as np

from .. import _C


def _check_tensor(x, op, name="input"):
    if not isinstance(x, _C.Tensor):
        raise TypeError(f"{op}: {name} must be a tlgpu Tensor, not {type(x).__name__}")
    return x


def _float_dtype(dtype, op):
    """torch's dtype= of softmax / log_softmax: only float32 exists here, so anything else is refused."""
    if dtype is None:
        return
    try:
        ok = np.dtype(dtype) == np.float32
    except TypeError:
        ok = False
    if not ok:
        raise TypeError(f"{op}: dtype={dtype!r}; tlgpu computes in float32 only (pass dtype=None or float32)")


_UNSET = object()


def _dim(dim, axis, op):
    """dim (torch) or axis (numpy; axis=None is every element, as Tensor.softmax(None)); neither: the last dim."""
    if axis is _UNSET:
        return -1 if dim is None else dim
    if dim is not None:
        raise TypeError(f"{op}: got both dim={dim} and axis={axis}; pass one")
    return axis


def _reduction(size_average, reduce, reduction, op):
    """torch's legacy size_average / reduce pair, mapped as torch maps it (reduce=False wins: 'none')."""
    if size_average is None and reduce is None:
        return reduction
    warnings.warn(f"{op}: size_average and reduce are deprecated (as in torch); use reduction=", stacklevel=3)
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _reduce(x, reduction, op):
    if reduction == "mean":
        return x.mean()
    if reduction == "sum":
        return x.sum()
    if reduction == "none":
        return x
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
