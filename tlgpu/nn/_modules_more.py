"""More torch.nn modules: the activations, losses and distances over nn/_functional_more.py's functional forms,
plus PReLU, Unflatten, ParameterList and ParameterDict. Imported at the end of nn/__init__.py, after Module
exists; each module's extra_repr prints what torch's prints."""
import warnings

import numpy as np

from .. import _C
from ..autograd import _is_int, no_grad
from . import Module, Parameter, functional as F
from ._fbase import _reduction

__all__ = ["Sigmoid", "Softplus", "LogSigmoid", "Mish", "ELU", "SELU", "CELU", "Hardtanh", "ReLU6", "Hardswish",
           "Hardsigmoid", "Softsign", "Tanhshrink", "Threshold", "GLU", "Softmax", "LogSoftmax", "Softmin", "PReLU",
           "Unflatten", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "KLDivLoss", "GaussianNLLLoss",
           "CosineSimilarity", "PairwiseDistance", "ParameterList", "ParameterDict"]


def _inplace_str(inplace, sep=", "):
    return f"{sep}inplace=True" if inplace else ""


class _Inplace(Module):
    """An activation with only torch's inplace= argument, printed as torch prints it (`inplace=True` or nothing)."""
    _fn = None
    _show = True                                        # torch's Mish, Hardswish and Hardsigmoid print nothing

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, input):
        return type(self)._fn(input, inplace=self.inplace)

    def extra_repr(self):
        return _inplace_str(self.inplace, "") if self._show else ""


class Mish(_Inplace):
    _fn, _show = F.mish, False


class SELU(_Inplace):
    _fn = F.selu


class ReLU6(_Inplace):
    _fn = F.relu6


class Hardswish(_Inplace):
    _fn, _show = F.hardswish, False


class Hardsigmoid(_Inplace):
    _fn, _show = F.hardsigmoid, False


class Sigmoid(Module):
    def forward(self, input):
        return input.sigmoid()


class LogSigmoid(Module):
    def forward(self, input):
        return F.logsigmoid(input)


class Softsign(Module):
    def forward(self, input):
        return F.softsign(input)


class Tanhshrink(Module):
    def forward(self, input):
        return F.tanhshrink(input)


class Softplus(Module):
    """log(1 + exp(beta x)) / beta, linear where beta x > threshold (F.softplus)."""

    def __init__(self, beta=1.0, threshold=20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return F.softplus(input, self.beta, self.threshold)

    def extra_repr(self):
        return f"beta={self.beta}, threshold={self.threshold}"


class ELU(Module):
    def __init__(self, alpha=1.0, inplace=False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace

    def forward(self, input):
        return F.elu(input, self.alpha, self.inplace)

    def extra_repr(self):
        return f"alpha={self.alpha}{_inplace_str(self.inplace)}"


class CELU(ELU):
    def __init__(self, alpha=1.0, inplace=False):
        if alpha == 0:
            raise ValueError("CELU: alpha must not be 0 (it divides x)")
        super().__init__(alpha, inplace)

    def forward(self, input):
        return F.celu(input, self.alpha, self.inplace)


class Hardtanh(Module):
    """clamp(x, min_val, max_val); min_value / max_value are torch's deprecated spellings (they warn)."""

    def __init__(self, min_val=-1.0, max_val=1.0, inplace=False, min_value=None, max_value=None):
        super().__init__()
        if min_value is not None or max_value is not None:
            warnings.warn("Hardtanh: keyword arguments min_value and max_value are deprecated; use min_val and "
                          "max_val", DeprecationWarning, stacklevel=2)
            min_val = min_val if min_value is None else min_value
            max_val = max_val if max_value is None else max_value
        if not max_val > min_val:
            raise ValueError(f"Hardtanh: max_val ({max_val}) must be greater than min_val ({min_val})")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace

    def forward(self, input):
        return F.hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}{_inplace_str(self.inplace)}"


class Threshold(Module):
    """x where x > threshold, value elsewhere."""

    def __init__(self, threshold, value, inplace=False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace

    def forward(self, input):
        return F.threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self):
        return f"threshold={self.threshold}, value={self.value}{_inplace_str(self.inplace)}"


class _Dim(Module):
    """A module whose only argument is dim (printed `dim=...`, as torch)."""
    _fn = None

    def __init__(self, dim=None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return type(self)._fn(input, self.dim)

    def extra_repr(self):
        return f"dim={self.dim}"


class Softmax(_Dim):
    """softmax along dim (None: the last dim; torch's deprecated implicit choice is not reproduced)."""
    _fn = F.softmax


class LogSoftmax(_Dim):
    _fn = F.log_softmax


class Softmin(_Dim):
    _fn = F.softmin


class GLU(_Dim):
    _fn = F.glu

    def __init__(self, dim=-1):
        super().__init__(dim)


class PReLU(Module):
    """x where x > 0, weight * x elsewhere, weight a learnable (num_parameters,) parameter filled with init: one
    slope, or one per channel (dim 1 of the input)."""

    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        if not _is_int(num_parameters) or num_parameters < 1:
            raise ValueError(f"PReLU: num_parameters must be an int >= 1, got {num_parameters!r}")
        self.num_parameters, self.init = int(num_parameters), init
        self.weight = _C.full((self.num_parameters,), float(init)).requires_grad_()
        if dtype is not None or device is not None:
            self.to(device, dtype=dtype)

    def reset_parameters(self):
        with no_grad():
            self.weight.fill_(float(self.init))

    def forward(self, input):
        return F.prelu(input, self.weight)

    def extra_repr(self):
        return f"num_parameters={self.num_parameters}"


class Unflatten(Module):
    """Dim dim unflattened into unflattened_size (a tuple of ints; one may be -1)."""

    def __init__(self, dim, unflattened_size):
        super().__init__()
        if not _is_int(dim):
            raise TypeError(f"Unflatten: dim must be an int (tlgpu has no named tensors), got {dim!r}")
        if not isinstance(unflattened_size, (tuple, list)) or not all(_is_int(s) for s in unflattened_size):
            raise TypeError(f"Unflatten: unflattened_size must be a tuple of ints, got {unflattened_size!r}")
        self.dim, self.unflattened_size = dim, tuple(int(s) for s in unflattened_size)

    def forward(self, input):
        n = input.ndim
        if not -n <= self.dim < n:
            raise IndexError(f"Unflatten: dim {self.dim} out of range for a {n}-d input")
        d = self.dim % n
        sizes, size = list(self.unflattened_size), input.shape[d]
        known = int(np.prod([s for s in sizes if s != -1]))
        if sizes.count(-1) == 1 and known and size % known == 0:
            sizes[sizes.index(-1)] = size // known
        if any(s < 0 for s in sizes) or int(np.prod(sizes)) != size:
            raise ValueError(f"Unflatten: unflattened_size {self.unflattened_size} does not multiply to dim {d}'s "
                             f"size {size} of input {tuple(input.shape)}")
        return input.reshape(*input.shape[:d], *sizes, *input.shape[d + 1:])

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


# ---- losses ----

class _Loss(Module):
    """reduction (and torch's deprecated size_average / reduce) checked at construction; prints as torch's do,
    with no arguments."""
    _extra = ()

    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        reduction = _reduction(size_average, reduce, reduction, type(self).__name__)
        valid = ("mean", "sum", "none") + self._extra
        if reduction not in valid:
            raise ValueError(f"{type(self).__name__}: reduction must be one of {', '.join(map(repr, valid))}, "
                             f"not {reduction!r}")
        self.reduction = reduction


def _buffer(t):
    return t if t is None or isinstance(t, _C.Tensor) else _C.tensor(np.asarray(t, dtype=np.float32))


class _WeightedLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight))  # in state_dict when given, as torch's


class NLLLoss(_WeightedLoss):
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
        super().__init__(weight, size_average, reduce, reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class BCELoss(_WeightedLoss):
    def forward(self, input, target):
        return F.binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean", pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", _buffer(weight))
        self.register_buffer("pos_weight", _buffer(pos_weight))

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight, reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class KLDivLoss(_Loss):
    _extra = ("batchmean",)

    def __init__(self, size_average=None, reduce=None, reduction="mean", log_target=False):
        super().__init__(size_average, reduce, reduction)
        self.log_target = log_target

    def forward(self, input, target):
        return F.kl_div(input, target, reduction=self.reduction, log_target=self.log_target)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, full=self.full, eps=self.eps, reduction=self.reduction)


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.norm, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.norm, self.eps, self.keepdim)


# ---- parameter containers ----

def _as_parameter(value, what):
    """A leaf that requires grad stays itself (an optimizer may hold it); any other tensor or array becomes a new
    Parameter sharing its data, as torch's containers wrap plain tensors."""
    if isinstance(value, Parameter):
        return value
    if isinstance(value, (_C.Tensor, np.ndarray)):
        return Parameter(value)
    raise TypeError(f"{what}: values must be tensors (parameters), not {type(value).__name__}")


def _param_line(key, p):
    shape = "x".join(str(s) for s in p.shape)
    return f"  ({key}): Parameter containing: [tlgpu.{p.dtype} of size {shape}]"


class _ParameterContainer(Module):
    def _put(self, name, value, what):
        self._check_name(what, name)
        p = _as_parameter(value, what)
        for table in (self._buffers, self._modules):
            table.pop(name, None)
        self._parameters[name] = p                      # a parameter even with requires_grad=False (torch)
        object.__setattr__(self, name, p)

    def __len__(self):
        return len(self._parameters)

    def extra_repr(self):
        return "\n".join(_param_line(k, p) for k, p in self._parameters.items())

    def __repr__(self):                                 # torch's layout: one line per parameter
        lines = [_param_line(k, p) for k, p in self._parameters.items()]
        body = "".join(f"\n  {line}" for line in lines)
        return f"{type(self).__name__}({body}\n)" if lines else f"{type(self).__name__}()"


class ParameterList(_ParameterContainer):
    """A list of parameters registered as "0", "1", ... (torch.nn.ParameterList); tensors and arrays given to it
    become parameters."""

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def _index(self, i):
        n = len(self)
        if not _is_int(i):
            raise TypeError(f"ParameterList: indices must be ints or slices, not {type(i).__name__}")
        if not -n <= i < n:
            raise IndexError(f"ParameterList: index {i} out of range for length {n}")
        return str(i % n)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ParameterList(list(self._parameters.values())[i])
        return self._parameters[self._index(i)]

    def __setitem__(self, i, value):
        self._put(self._index(i), value, "ParameterList")

    def __iter__(self):
        return iter(list(self._parameters.values()))

    def append(self, value):
        self._put(str(len(self)), value, "ParameterList")
        return self

    def extend(self, values):
        if isinstance(values, (_C.Tensor, np.ndarray)) or not hasattr(values, "__iter__"):
            raise TypeError(f"ParameterList.extend: expected an iterable of tensors, got {type(values).__name__}")
        for v in values:
            self.append(v)
        return self


class ParameterDict(_ParameterContainer):
    """An ordered dict of parameters registered under their keys (torch.nn.ParameterDict); tensors and arrays
    given to it become parameters."""

    def __init__(self, parameters=None):
        super().__init__()
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key):
        return self._parameters[key]

    def __setitem__(self, key, value):
        self._put(key, value, "ParameterDict")

    def __delitem__(self, key):
        del self._parameters[key]
        object.__delattr__(self, key)

    def __iter__(self):
        return iter(list(self._parameters))

    def __contains__(self, key):
        return key in self._parameters

    def keys(self):
        return self._parameters.keys()

    def values(self):
        return self._parameters.values()

    def items(self):
        return self._parameters.items()

    def get(self, key, default=None):
        return self._parameters.get(key, default)

    def pop(self, key):
        p = self._parameters[key]
        del self[key]
        return p

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for k in list(self._parameters):
            del self[k]

    def update(self, parameters):
        items = parameters.items() if hasattr(parameters, "items") else parameters
        for k, v in items:
            self[k] = v
