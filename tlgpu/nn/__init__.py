"""tlgpu.nn: modules (micrograd's parameters()/zero_grad() grown up). Layers call C ops; no math here.

A parameter is a Tensor with requires_grad=True assigned as a module attribute (or an nn.Parameter); other
tensors assigned as attributes, and tensors given to register_buffer(), are buffers (saved in state_dict,
not trained). state_dict() returns numpy arrays (a sync point); load_state_dict() copies in place, so graphs
that saved the old values refuse to backward.
"""
import math
from collections import OrderedDict

import numpy as np

from .. import _C, _device
from .. import _torch_compat as _compat
from ..autograd import _is_int, no_grad
from . import functional, init, utils  # noqa: F401

Tensor = _C.Tensor


class _ParameterMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor) and obj.is_leaf and obj.requires_grad


class Parameter(metaclass=_ParameterMeta):
    """Parameter(data, requires_grad=True): a leaf tensor sharing data's storage (torch.nn.Parameter).
    tlgpu has no Parameter subclass of Tensor: the result is a Tensor, and isinstance(t, nn.Parameter)
    holds for every leaf tensor that requires grad (which is what a module registers as a parameter)."""

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _C.zeros(0)
        elif not isinstance(data, Tensor):
            data = _C.tensor(np.asarray(data, dtype=np.float32))
        return data.detach().requires_grad_(requires_grad)


_FLOATING = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(_compat.bfloat16))


class Module:
    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call Module.__init__() before assigning attributes")
        if name in self._buffers and (value is None or isinstance(value, Tensor)):
            self._buffers[name] = value                 # a registered buffer stays a buffer (torch)
            object.__setattr__(self, name, value)
            return
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        self._non_persistent.discard(name)
        if isinstance(value, Module):
            self._modules[name] = value
        elif isinstance(value, Tensor):
            (self._parameters if value.requires_grad else self._buffers)[name] = value
        object.__setattr__(self, name, value)

    def _check_name(self, what, name):
        if not isinstance(name, str) or not name or "." in name:
            raise KeyError(f"{what}: name must be a non-empty str without '.', got {name!r}")
        if hasattr(self, name) and not any(name in t for t in (self._parameters, self._buffers, self._modules)):
            raise KeyError(f"{what}: attribute {name!r} already exists")

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor that is state but not a parameter: in state_dict() (unless persistent=False), in
        buffers(), never in parameters(), even when it requires grad."""
        self._check_name("register_buffer", name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer: {name!r} must be a Tensor or None, not {type(tensor).__name__}")
        for table in (self._parameters, self._modules):
            table.pop(name, None)
        self._buffers[name] = tensor
        (self._non_persistent.discard if persistent else self._non_persistent.add)(name)
        object.__setattr__(self, name, tensor)

    def register_parameter(self, name, param):
        self._check_name("register_parameter", name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter: {name!r} must be a leaf tensor that requires grad")
        setattr(self, name, param)

    def add_module(self, name, module):
        self._check_name("add_module", name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module: {name!r} must be a Module, not {type(module).__name__}")
        setattr(self, name, module)

    register_module = add_module

    def __delattr__(self, name):
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        object.__delattr__(self, name)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        # numpy batches go to the device here (float64 -> float32, int64 -> int32, bool -> a float32 mask), so
        # every module takes them
        args = tuple(_C.tensor(a.astype(np.float32) if a.dtype == np.bool_ else a)
                     if isinstance(a, (np.ndarray, np.generic)) else a for a in args)
        return self.forward(*args, **kwargs)

    def named_modules(self, prefix="", _memo=None):
        memo = set() if _memo is None else _memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self):
        return [m for _, m in self.named_modules()]

    def children(self):
        return [m for m in self._modules.values() if m is not None]

    def named_children(self):
        return [(k, m) for k, m in self._modules.items() if m is not None]

    def _named(self, table, prefix):
        seen = set()                                    # a tensor shared by two modules is listed once (torch)
        for mp, m in self.named_modules(prefix):
            for name, t in getattr(m, table).items():
                if t is not None and id(t) not in seen:
                    seen.add(id(t))
                    yield (f"{mp}.{name}" if mp else name), t

    def named_parameters(self, prefix=""):
        return self._named("_parameters", prefix)

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def named_buffers(self, prefix=""):
        return self._named("_buffers", prefix)

    def buffers(self):
        return [b for _, b in self.named_buffers()]

    def _state_items(self, prefix=""):
        """(name, tensor) for state_dict, in torch's order and naming: each module's parameters, then its persistent
        buffers, then its children's; a tensor shared by two modules (tied weights) under each of its names."""
        for name, t in self._parameters.items():
            if t is not None:
                yield prefix + name, t
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                yield prefix + name, b
        for name, m in self._modules.items():
            if m is not None:
                yield from m._state_items(f"{prefix}{name}.")

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

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

    def to(self, *args, device=None, dtype=None, non_blocking=False):
        """to(device), to(dtype), to(device, dtype), to(tensor): checks the device names tlgpu's one device,
        and with a floating dtype (float32, float16, bfloat16) converts the floating parameters and buffers
        on the device, as torch does (integer buffers stay as they are). tlgpu has no Parameter.data to swap:
        each converted parameter is a new leaf tensor (its .grad converted too), so build optimizers after
        the conversion. Any other dtype raises TypeError: nothing is converted silently. Returns self."""
        if len(args) > 2:
            raise TypeError(f"Module.to: at most a device and a dtype, got {len(args)} arguments")
        for a in args:
            if isinstance(a, Tensor):
                dtype = a.dtype
            elif a is None or isinstance(a, (str, int, _device.Device)) and not isinstance(a, bool):
                device = a
            else:
                dtype = a
        _device.check_device(device, "Module.to")
        if dtype is None:
            return self
        dt = np.dtype(_compat.as_dtype(dtype, "Module.to"))
        if dt not in _FLOATING:
            raise TypeError(f"Module.to: dtype {dtype!r}: modules hold floating parameters (float32, float16 or "
                            "bfloat16; torch accepts only floating dtypes here too)")
        for m in self.modules():
            for table in (m._parameters, m._buffers):
                for name, t in list(table.items()):
                    if t is None or t.dtype not in _FLOATING or t.dtype == dt:
                        continue
                    new = t.detach()._convert(dt).requires_grad_(t.requires_grad)
                    if t.grad is not None:
                        new.grad = t.grad._convert(dt)
                    table[name] = new
                    object.__setattr__(m, name, new)
        return self

    def cpu(self):
        """self: the parameters already live on tlgpu's one device (see Module.to)."""
        return self

    def cuda(self, device=None):
        """self, after checking that device names tlgpu's one device."""
        return self.to(device)

    def float(self):
        """Floating parameters and buffers to float32 (Module.to)."""
        return self.to(_compat.float32)

    def half(self):
        return self.to(_compat.float16)

    def bfloat16(self):
        return self.to(_compat.bfloat16)

    def double(self):
        return self.to(_compat.float64)

    def state_dict(self):
        """Name -> numpy array copy of every parameter and persistent buffer (a sync point); tied weights under
        each of their names, as torch's."""
        return OrderedDict((k, v.numpy()) for k, v in self._state_items())

    def load_state_dict(self, state, strict=True):
        """Copy arrays (numpy or Tensor) into the parameters and buffers in place. strict: the keys must match
        exactly, except that a tied tensor given under one of its names is not missing under the others (a
        file saved with one name for it: safetensors' save_model, tlgpu before it named every one). Shapes must
        always match. Returns (missing_keys, unexpected_keys)."""
        own = OrderedDict(self._state_items())
        given = {id(t) for k, t in own.items() if k in state}
        missing = [k for k, t in own.items() if k not in state and id(t) not in given]
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
        q = "" if isinstance(self.weight, Tensor) else f", weight={type(self.weight).__name__}"   # tlgpu.quant
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}{q}"


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
        """Each layer in turn; a Linear followed by ReLU or Tanh runs as one fused op (_C.linear with its
        activation: the GEMM's store adds the bias and applies it where the kernel can, one autograd node),
        with the same values and gradients as the two layers."""
        layers = list(self._modules.values())
        i = 0
        while i < len(layers):
            layer, nxt = layers[i], layers[i + 1] if i + 1 < len(layers) else None
            act = _FUSED_ACTIVATIONS.get(type(nxt)) if type(layer) is Linear and isinstance(x, Tensor) else None
            if act is not None and _fusable(x, layer, act):
                x = _C.linear(x, layer.weight, layer.bias, activation=act)
                i += 2
            else:
                x = layer(x)
                i += 1
        return x


def _fusable(x, linear, act):
    """The fused Linear + activation takes operands of one dtype and a bias of out_features elements or None:
    float32, or a half dtype with ReLU (which commutes with the rounding, so the fused op gives the two layers'
    bits wherever the product runs; a tanh after an unrounded product would not)."""
    w, b = linear.weight, linear.bias                  # a quantized weight (tlgpu.quant) is not a Tensor
    dt = x.dtype
    return ((dt == "float32" or (act == "relu" and dt in ("float16", "bfloat16"))) and isinstance(w, Tensor) and
            w.dtype == dt and (b is None or b.dtype == dt))


def _apply(fn, x, inplace):
    """fn(x), or with inplace=True fn's result written into x and x returned, as torch does. Under autograd
    fn reads a clone, so what fn's backward saved is not the tensor the write changes (torch's relu_ keeps its
    result for the same reason); x's own producer may still refuse the write, as in torch."""
    if not inplace:
        return fn(x)
    src = x.clone() if x.requires_grad and _C.is_grad_enabled() else x
    return x.copy_(fn(src))


class ReLU(Module):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        return _apply(Tensor.relu, x, self.inplace)

    def extra_repr(self):
        return "inplace=True" if self.inplace else ""


class LeakyReLU(Module):
    """x where x > 0, negative_slope * x elsewhere (tlgpu.leaky_relu); NaN propagates."""

    def __init__(self, negative_slope=0.01, inplace=False):
        super().__init__()
        self.negative_slope, self.inplace = negative_slope, inplace

    def forward(self, x):
        return _apply(lambda t: functional.leaky_relu(t, self.negative_slope), x, self.inplace)

    def extra_repr(self):
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class Tanh(Module):
    def forward(self, x):
        return x.tanh()


_FUSED_ACTIVATIONS = {ReLU: "relu", Tanh: "tanh"}   # Sequential: Linear + one of these is one op


class SiLU(Module):
    def forward(self, x):
        return x.silu()


class GELU(Module):
    """approximate='none': the exact erf GELU; 'tanh': torch's tanh approximation (functional.gelu)."""

    def __init__(self, approximate="none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', not {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        return functional.gelu(x, self.approximate)

    def extra_repr(self):
        return f"approximate={self.approximate!r}"


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
    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x):
        return functional.dropout(x, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Identity(Module):
    def forward(self, x):
        return x


class Flatten(Module):
    """Flattens dims start_dim..end_dim (torch's defaults: keep the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x):
        return x.flatten(self.start_dim, self.end_dim)


class ModuleList(Module):
    """A list of modules registered as children "0", "1", ... (torch.nn.ModuleList)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _index(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"ModuleList: index {i} out of range for length {n}")
        return str(i % n)

    def _renumber(self, mods):
        for k in list(self._modules):
            delattr(self, k)
        for i, m in enumerate(mods):
            self.add_module(str(i), m)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return ModuleList(list(self._modules.values())[i])
        return self._modules[self._index(i)]

    def __setitem__(self, i, module):
        self.add_module(self._index(i), module)

    def __delitem__(self, i):
        mods = list(self._modules.values())
        del mods[i if isinstance(i, slice) else int(self._index(i))]
        self._renumber(mods)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._renumber(mods)


class ModuleDict(Module):
    """An ordered dict of modules registered as children under their keys (torch.nn.ModuleDict)."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        delattr(self, key)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def pop(self, key):
        m = self._modules[key]
        delattr(self, key)
        return m

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self[k] = m


class LayerNorm(Module):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last len(normalized_shape) dims; var is the
    biased one, as torch.nn.LayerNorm."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True):
        super().__init__()
        if _is_int(normalized_shape):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps = tuple(int(d) for d in normalized_shape), eps
        self.elementwise_affine = elementwise_affine
        self.weight = _C.ones(*self.normalized_shape).requires_grad_() if elementwise_affine else None
        self.bias = _C.zeros(*self.normalized_shape).requires_grad_() if elementwise_affine and bias else None

    def forward(self, x):
        return functional.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


from .loss import CrossEntropyLoss, HuberLoss, L1Loss, MSELoss, SmoothL1Loss  # noqa: E402,F401
from .conv import AvgPool2d, Conv2d, MaxPool2d; from .rnn import GRU, LSTM, GRUCell, LSTMCell  # noqa: E402,F401,E702
from ._modules_more import *  # noqa: E402,F401,F403  activations, losses, PReLU, Parameter{List,Dict}
from ._layers_more import *  # noqa: E402,F401,F403  BatchNorm, GroupNorm, Conv1d, 1-d/adaptive pools, attention, RNN
from ._conv_transpose_modules import *  # noqa: E402,F401,F403  ConvTranspose1d/2d, Upsample
from ._decoder import *  # noqa: E402,F401,F403  TransformerDecoderLayer, TransformerDecoder
