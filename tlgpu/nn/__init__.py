"""tlgpu.nn: modules (micrograd's parameters()/zero_grad() grown up). Layers call C ops; no math here.

A parameter is a Tensor with requires_grad=True assigned as a module attribute; other tensors assigned as
attributes are buffers (saved in state_dict, not trained). state_dict() returns numpy arrays (a sync point);
load_state_dict() copies in place, so graphs that saved the old values refuse to backward.
"""
import math
from collections import OrderedDict

import numpy as np

from .. import _C
from ..autograd import no_grad
from . import functional, utils  # noqa: F401

Tensor = _C.Tensor


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call Module.__init__() before assigning attributes")
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor):
            (self._parameters if value.requires_grad else self._buffers)[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        object.__delattr__(self, name)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return [m for _, m in self.named_modules()]

    def children(self):
        return list(self._modules.values())

    def named_parameters(self, prefix=""):
        for mp, m in self.named_modules(prefix):
            for name, p in m._parameters.items():
                yield (f"{mp}.{name}" if mp else name), p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_buffers(self):
        for mp, m in self.named_modules():
            for name, b in m._buffers.items():
                yield (f"{mp}.{name}" if mp else name), b

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                with no_grad():
                    p.grad.zero_()

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def state_dict(self):
        """Name -> numpy array copy of every parameter and buffer (a sync point)."""
        out = OrderedDict((k, v.numpy()) for k, v in self.named_parameters())
        out.update((k, v.numpy()) for k, v in self.named_buffers())
        return out

    def load_state_dict(self, state, strict=True):
        """Copy arrays (numpy or Tensor) into the parameters and buffers in place. strict: the keys must match
        exactly. Shapes must always match. Returns (missing_keys, unexpected_keys)."""
        own = OrderedDict(self.named_parameters())
        own.update(self.named_buffers())
        missing = [k for k in own if k not in state]
        unexpected = [k for k in state if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for k, t in own.items():
            if k not in state:
                continue
            v = state[k]
            shape = tuple(v.shape) if hasattr(v, "shape") else np.shape(v)
            if shape != t.shape:
                raise ValueError(f"load_state_dict: {k} has shape {shape} in the state but {t.shape} in the module")
            with no_grad():
                t.copy_(v if isinstance(v, Tensor) else np.asarray(v))
        return missing, unexpected

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {body}")
        return "\n".join(lines) + ("\n)" if len(lines) > 1 else ")")


def _uniform(shape, bound):
    """U(-bound, bound) on the device, as a new leaf that requires grad."""
    with no_grad():
        t = _C.rand(*shape) * (2.0 * bound) - bound
    return t.requires_grad_()


class Linear(Module):
    """y = x @ weight.T + bias, weight [out, in]; PyTorch's default init (kaiming-uniform, a=sqrt(5))."""

    def __init__(self, in_features, out_features, bias=True):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.weight = _uniform((out_features, in_features), bound)
        self.bias = _uniform((out_features,), bound) if bias else None

    def forward(self, x):
        return functional.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Sequential(Module):
    def __init__(self, *layers):
        super().__init__()
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)

    def __len__(self):
        return len(self._modules)

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __iter__(self):
        return iter(self._modules.values())

    def forward(self, x):
        for layer in self._modules.values():
            x = layer(x)
        return x


class ReLU(Module):
    def forward(self, x):
        return x.relu()


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


class SiLU(Module):
    def forward(self, x):
        return x.silu()


class GELU(Module):
    def forward(self, x):
        return x.gelu()


class Embedding(Module):
    """Rows of a [num_embeddings, dim] table, N(0, 1) init like torch."""

    def __init__(self, num_embeddings, embedding_dim):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        with no_grad():
            w = _C.randn(num_embeddings, embedding_dim)
        self.weight = w.requires_grad_()

    def forward(self, indices):
        return functional.embedding(indices, self.weight)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class RMSNorm(Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = _C.ones(dim).requires_grad_()

    def forward(self, x):
        return functional.rms_norm(x, self.weight, self.eps)

    def extra_repr(self):
        return f"{self.dim}, eps={self.eps}"


class Dropout(Module):
    def __init__(self, p=0.5):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x):
        return functional.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"
