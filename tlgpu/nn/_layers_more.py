"""torch.nn layers PyTorch ports call: BatchNorm1d/2d/3d, GroupNorm, Conv1d, MaxPool1d / AvgPool1d,
AdaptiveAvgPool1d/2d, MultiheadAttention, TransformerEncoderLayer / TransformerEncoder, RNN and RNNCell. Each is a
composition of existing differentiable ops (nn/functional.py, nn/_functional_layers.py); names, defaults, parameter
and buffer names (state_dict keys), shapes, default inits and reprs are torch's, so a torch state_dict loads.
Imported at the end of nn/__init__.py, after Module, Linear, LayerNorm, Dropout and ModuleList exist.

Masks: tlgpu has no bool dtype (comparisons give float32 1/0), so a float32 tensor given as attn_mask or
key_padding_mask could mean either of torch's kinds; like scaled_dot_product_attention, such a mask needs
mask_kind='bool' (nonzero = masked out, torch's MultiheadAttention meaning) or 'additive'. numpy bool arrays and
int32 tensors are bool masks, numpy float arrays additive."""
import copy
import math
from collections import OrderedDict

import numpy as np

from .. import _C
from ..autograd import _is_int, no_grad
from . import Dropout, LayerNorm, Linear, Module, ModuleList, _uniform, functional as F, init
from .rnn import _CellBase, _RNNBase

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "GroupNorm", "Conv1d", "MaxPool1d", "AvgPool1d",
           "AdaptiveAvgPool1d", "AdaptiveAvgPool2d", "MultiheadAttention", "TransformerEncoderLayer",
           "TransformerEncoder", "RNN", "RNNCell"]


def _single(v):
    return (int(v),) if _is_int(v) else tuple(v)


class _BatchNorm(Module):
    """weight 1 and bias 0 (affine), running_mean 0, running_var 1 and num_batches_tracked 0 (an int32 0-d tensor:
    tlgpu's long) buffers, as torch's _BatchNorm. momentum=None: the cumulative average, factor 1 / batches."""
    _ranks = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, *, bias=True):
        super().__init__()
        self.num_features, self.eps, self.momentum = int(num_features), eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        self.weight = _C.ones(self.num_features).requires_grad_() if affine else None
        self.bias = _C.zeros(self.num_features).requires_grad_() if affine and bias else None
        if track_running_stats:
            self.register_buffer("running_mean", _C.zeros(self.num_features))
            self.register_buffer("running_var", _C.ones(self.num_features))
            self.register_buffer("num_batches_tracked", _C.tensor(0, dtype=np.int32))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1.0)
                self.num_batches_tracked.zero_()

    def _check(self, x):
        name = type(self).__name__
        if not isinstance(x, _C.Tensor):
            raise TypeError(f"{name}: input must be a tlgpu Tensor, not {type(x).__name__}")
        if x.ndim not in self._ranks:
            want = " or ".join(f"{r}D" for r in self._ranks)
            raise ValueError(f"{name}: expected {want} input, got {x.ndim}D input of shape {tuple(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{name}: expected {self.num_features} channels (dim 1), got input of shape "
                             f"{tuple(x.shape)}")

    def forward(self, input):
        self._check(input)
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:                   # cumulative average, computed on the device
                factor = 1.0 / self.num_batches_tracked.float()
        training = self.training or self.running_mean is None
        track = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if track else None, self.running_var if track else None,
                            self.weight, self.bias, training, factor, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Over (N, C) or (N, C, L) input."""
    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Over (N, C, H, W) input."""
    _ranks = (4,)


class BatchNorm3d(_BatchNorm):
    """Over (N, C, D, H, W) input."""
    _ranks = (5,)


class GroupNorm(Module):
    """F.group_norm over (N, C, *) input; weight 1 and bias 0 per channel (affine)."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, *, bias=True):
        super().__init__()
        if num_groups < 1 or num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        self.weight = _C.ones(num_channels).requires_grad_() if affine else None
        self.bias = _C.zeros(num_channels).requires_grad_() if affine and bias else None

    def forward(self, input):
        if isinstance(input, _C.Tensor) and input.ndim >= 2 and input.shape[1] != self.num_channels:
            raise ValueError(f"GroupNorm: expected {self.num_channels} channels (dim 1), got input of shape "
                             f"{tuple(input.shape)}")
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


_PAD_MODES = ("zeros", "reflect", "replicate", "circular")


class Conv1d(Module):
    """F.conv1d with weight (out, in / groups, K); init like torch (kaiming-uniform with a=sqrt(5)): weight and
    bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = in_channels / groups * K. padding_mode other than 'zeros'
    pads the input with F.pad first, as torch."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros"):
        super().__init__()
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv1d: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        if padding_mode not in _PAD_MODES:
            raise ValueError(f"Conv1d: padding_mode must be one of {_PAD_MODES}, not {padding_mode!r}")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size, self.stride, self.dilation = _single(kernel_size), _single(stride), _single(dilation)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Conv1d: padding must be an int, 'valid' or 'same', not {padding!r}")
            if padding == "same" and self.stride != (1,):
                raise ValueError("Conv1d: padding='same' is not supported for strided convolutions")
            self.padding = padding
        else:
            self.padding = _single(padding)
        self.padding_mode, self.output_padding, self.transposed = padding_mode, (0,), False
        fan_in = in_channels // groups * self.kernel_size[0]
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        self.weight = _uniform((out_channels, in_channels // groups, self.kernel_size[0]), bound)
        self.bias = _uniform((out_channels,), bound) if bias else None

    def forward(self, input):
        if self.padding_mode == "zeros":
            return F.conv1d(input, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        if self.padding == "same":
            total = self.dilation[0] * (self.kernel_size[0] - 1)
            lo, hi = total // 2, total - total // 2
        else:
            lo = hi = 0 if self.padding == "valid" else self.padding[0]
        x = F.pad(input, (lo, hi), mode=self.padding_mode)
        return F.conv1d(x, self.weight, self.bias, self.stride, 0, self.dilation, self.groups)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,):
            s += f", padding={self.padding}"
        if self.dilation != (1,):
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s + ("" if self.padding_mode == "zeros" else f", padding_mode={self.padding_mode}")


class MaxPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False):
        super().__init__()
        self.kernel_size, self.stride = kernel_size, stride if stride is not None else kernel_size
        self.padding, self.dilation = padding, dilation
        self.return_indices, self.ceil_mode = return_indices, ceil_mode

    def forward(self, input):
        return F.max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                            self.return_indices)

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__()
        self.kernel_size = _single(kernel_size)
        self.stride = _single(stride if stride is not None else kernel_size)
        self.padding, self.ceil_mode, self.count_include_pad = _single(padding), ceil_mode, count_include_pad

    def forward(self, input):
        return F.avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveAvgPool2d(AdaptiveAvgPool1d):
    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)




_NEG_INF = float("-inf")


def _additive_mask(mask, kind, what, op="MultiheadAttention"):
    """mask as a float32 tensor added to the scores (0: the key takes part; -inf: masked out, torch's True), or None.
    numpy bool arrays and non-float tensors are bool masks, numpy float arrays additive; a float tensor needs kind
    (tlgpu's comparisons give float32 1/0, so it could be either)."""
    if mask is None:
        return None
    if kind not in (None, "bool", "additive"):
        raise ValueError(f"{op}: mask_kind must be None, 'bool' or 'additive', not {kind!r}")
    if not isinstance(mask, _C.Tensor):
        arr = np.asarray(mask)
        if arr.dtype == np.bool_:
            return _C.tensor(np.where(arr, -np.inf, 0.0).astype(np.float32))
        if np.issubdtype(arr.dtype, np.floating):
            return _C.tensor(arr.astype(np.float32))
        raise TypeError(f"{op}: {what} must be a bool or float array or a tlgpu Tensor, got {arr.dtype}")
    if str(mask.dtype) in ("float32", "float16", "bfloat16"):
        if kind is None:
            raise TypeError(f"{op}: a float {what} tensor is ambiguous in tlgpu, which has no bool dtype "
                            "(comparisons give float32 1/0 masks). Pass mask_kind='bool' (nonzero = masked out, "
                            "torch's bool mask; or mask.int(), or a numpy bool array) or mask_kind='additive' "
                            "(added to the scores, torch's float mask)")
        if kind == "additive":
            return mask if str(mask.dtype) == "float32" else mask.float()
    return _C.zeros(*mask.shape).masked_fill(mask != 0, _NEG_INF)


class _MasksAsGiven(Module):
    """Module.__call__ uploads numpy positional arguments (a numpy bool array becoming a float32 1/0 tensor, which
    would lose its bool meaning here): arguments after the first _n_inputs go to forward by keyword, as given."""
    _n_inputs, _later = 1, ()

    def __call__(self, *args, **kwargs):
        name = type(self).__name__
        if len(args) > self._n_inputs + len(self._later):
            raise TypeError(f"{name}: forward takes at most {self._n_inputs + len(self._later)} positional arguments, "
                            f"got {len(args)}")
        for key, a in zip(self._later, args[self._n_inputs:]):
            if key in kwargs:
                raise TypeError(f"{name}: got multiple values for argument {key!r}")
            kwargs[key] = a
        return Module.__call__(self, *args[:self._n_inputs], **kwargs)


class NonDynamicallyQuantizableLinear(Linear):
    """MultiheadAttention.out_proj: a Linear under torch's class name (so the module prints as torch's)."""


class MultiheadAttention(_MasksAsGiven):
    """torch's nn.MultiheadAttention: parameters in_proj_weight (3E, E) (or q/k/v_proj_weight when kdim or vdim
    differs from embed_dim), in_proj_bias (3E,), out_proj (Linear E -> E), bias_k / bias_v (1, 1, E) with
    add_bias_kv; init as torch's (xavier-uniform projections, zero biases). forward(query, key, value,
    key_padding_mask=None, need_weights=True, attn_mask=None, average_attn_weights=True, is_causal=False) returns
    (output, weights or None): (L, N, E) or (N, L, E) with batch_first, or unbatched (L, E). Masks as torch's: bool
    True (or nonzero) = masked out, float added; key_padding_mask (N, S), attn_mask (L, S) or (N * num_heads, L, S);
    a float32 tensor mask needs the keyword mask_kind='bool' / 'additive' (module docstring). is_causal is torch's
    hint: attn_mask must be given and is what is used. need_weights=False runs
    F.scaled_dot_product_attention (a query whose keys are all masked gives 0); need_weights=True computes the
    weights itself (such a query gives NaN, as torch's)."""
    _n_inputs = 3
    _later = ("key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal")

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False, add_zero_attn=False,
                 kdim=None, vdim=None, batch_first=False):
        super().__init__()
        if embed_dim < 1 or num_heads < 1 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads "
                             f"({num_heads})")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"MultiheadAttention: dropout must be in [0, 1), got {dropout}")
        e = self.embed_dim = embed_dim
        self.kdim, self.vdim = kdim if kdim is not None else e, vdim if vdim is not None else e
        self._qkv_same_embed_dim = self.kdim == e and self.vdim == e
        self.num_heads, self.dropout, self.batch_first = num_heads, dropout, batch_first
        self.head_dim, self.add_zero_attn = e // num_heads, add_zero_attn

        def xavier(rows, cols):
            return _uniform((rows, cols), math.sqrt(6.0 / (rows + cols)))

        if self._qkv_same_embed_dim:
            self.in_proj_weight = xavier(3 * e, e)
            self.q_proj_weight = self.k_proj_weight = self.v_proj_weight = None
        else:
            self.q_proj_weight, self.k_proj_weight = xavier(e, e), xavier(e, self.kdim)
            self.v_proj_weight, self.in_proj_weight = xavier(e, self.vdim), None
        self.in_proj_bias = _C.zeros(3 * e).requires_grad_() if bias else None
        self.out_proj = NonDynamicallyQuantizableLinear(e, e, bias=bias)
        if bias:
            with no_grad():
                self.out_proj.bias.zero_()
        if add_bias_kv:
            self.bias_k = init.xavier_normal_(_C.zeros(1, 1, e).requires_grad_())
            self.bias_v = init.xavier_normal_(_C.zeros(1, 1, e).requires_grad_())
        else:
            self.bias_k = self.bias_v = None

    def _project(self, q, k, v, same):
        e, b = self.embed_dim, self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
        if not self._qkv_same_embed_dim:
            return (F.linear(q, self.q_proj_weight, bq), F.linear(k, self.k_proj_weight, bk),
                    F.linear(v, self.v_proj_weight, bv))
        w = self.in_proj_weight
        if same:                                        # self-attention: one product for q, k and v
            qkv = F.linear(q, w, b)
            return qkv[..., :e], qkv[..., e:2 * e], qkv[..., 2 * e:]
        return F.linear(q, w[:e], bq), F.linear(k, w[e:2 * e], bk), F.linear(v, w[2 * e:], bv)

    def _mask(self, key_padding_mask, attn_mask, kind, n, lq, s, batched):
        """The merged additive mask, broadcastable to (N, heads, L, S), or None."""
        h, op = self.num_heads, "MultiheadAttention"
        kpm, am = _additive_mask(key_padding_mask, kind, "key_padding_mask"), _additive_mask(attn_mask, kind,
                                                                                             "attn_mask")
        out = None
        if kpm is not None:
            want = (n, s) if batched else (s,)
            if tuple(kpm.shape) != want:
                raise ValueError(f"{op}: key_padding_mask must have shape {want}, got {tuple(kpm.shape)}")
            out = kpm.reshape(n, 1, 1, s)
        if am is not None:
            ok = ((lq, s), (n * h, lq, s)) if batched else ((lq, s), (h, lq, s))
            if tuple(am.shape) not in ok:
                raise ValueError(f"{op}: attn_mask must have shape {ok[0]} or {ok[1]}, got {tuple(am.shape)}")
            am = am if am.ndim == 2 else am.reshape(n, h, lq, s)
            out = am if out is None else out + am
        return out

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False, *, mask_kind=None):
        op = "MultiheadAttention"
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, _C.Tensor):
                raise TypeError(f"{op}: {name} must be a tlgpu Tensor, not {type(t).__name__}")
        if query.ndim not in (2, 3) or key.ndim != query.ndim or value.ndim != query.ndim:
            raise ValueError(f"{op}: query, key and value must all be 3-D (batched) or 2-D (unbatched), got shapes "
                             f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
        if is_causal and attn_mask is None:
            raise ValueError(f"{op}: is_causal=True is a hint that attn_mask is causal; pass the attn_mask")
        batched = query.ndim == 3
        same = query is key and key is value

        def batch_major(t):
            return t.unsqueeze(0) if not batched else t if self.batch_first else t.transpose(0, 1)

        q, k, v = batch_major(query), batch_major(key), batch_major(value)
        n, lq, e = q.shape
        s = k.shape[1]
        if e != self.embed_dim or k.shape[2] != self.kdim or v.shape[2] != self.vdim or \
                tuple(v.shape[:2]) != (n, s) or k.shape[0] != n:
            raise ValueError(f"{op}: expected query (..., {self.embed_dim}), key (..., {self.kdim}) and value "
                             f"(..., {self.vdim}) with matching batch and key lengths, got {tuple(query.shape)}, "
                             f"{tuple(key.shape)}, {tuple(value.shape)}")
        mask = self._mask(key_padding_mask, attn_mask, mask_kind, n, lq, s, batched)
        q, k, v = self._project(q, k, v, same)
        h, hd, extra = self.num_heads, self.head_dim, 0
        if self.bias_k is not None:
            k = _C.cat([k, self.bias_k.expand(n, 1, e)], 1)
            v = _C.cat([v, self.bias_v.expand(n, 1, e)], 1)
            extra += 1
        q, k, v = (t.reshape(n, t.shape[1], h, hd).transpose(1, 2) for t in (q, k, v))     # (N, heads, len, hd)
        if self.add_zero_attn:
            z = _C.zeros(n, h, 1, hd, dtype=k.dtype)
            k, v = _C.cat([k, z], 2), _C.cat([v, z], 2)
            extra += 1
        if mask is not None and extra:
            mask = F.pad(mask, (0, extra))
        p = self.dropout if self.training else 0.0
        if need_weights:
            scores = (q * (1.0 / math.sqrt(hd))) @ k.transpose(-2, -1)
            w = (scores if mask is None else scores + mask).softmax(-1)
            if p > 0.0:
                w = F.dropout(w, p, True)
            o = w @ v
        else:
            o, w = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, mask_kind="additive"), None
        out = self.out_proj(o.transpose(1, 2).reshape(n, lq, e))
        out = out.squeeze(0) if not batched else out if self.batch_first else out.transpose(0, 1)
        if w is not None:
            w = w.mean(1) if average_attn_weights else w
            w = w if batched else w.squeeze(0)
        return out, w


_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _activation(activation, op):
    """A transformer layer's activation: 'relu', 'gelu' or a callable."""
    if isinstance(activation, str):
        if activation not in _ACTIVATIONS:
            raise ValueError(f"{op}: activation should be 'relu' or 'gelu' (or a callable), not {activation!r}")
        return _ACTIVATIONS[activation]
    if not callable(activation):
        raise TypeError(f"{op}: activation must be a str or a callable, not {type(activation).__name__}")
    return activation


class _SelfAttnBlock(_MasksAsGiven):
    """The transformer layers' self-attention block (self_attn, then dropout1), as torch's _sa_block."""

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal, mask_kind):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal, mask_kind=mask_kind)[0]
        return self.dropout1(x)


class TransformerEncoderLayer(_SelfAttnBlock):
    """torch's nn.TransformerEncoderLayer: self_attn (MultiheadAttention), linear1 / linear2 (the feed-forward),
    norm1 / norm2 (LayerNorm, eps=layer_norm_eps), dropout / dropout1 / dropout2; post-norm
    (x = norm1(x + sa(x)); x = norm2(x + ff(x))) or norm_first (x = x + sa(norm1(x)); x = x + ff(norm2(x))).
    activation 'relu', 'gelu' or a callable. forward(src, src_mask=None, src_key_padding_mask=None,
    is_causal=False, *, mask_kind=None): masks as MultiheadAttention's."""
    _later = ("src_mask", "src_key_padding_mask", "is_causal")

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2 = Dropout(dropout), Dropout(dropout)
        self.activation = _activation(activation, "TransformerEncoderLayer")
        self.batch_first = batch_first

    def _ff_block(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False, *, mask_kind=None):
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal, mask_kind)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal, mask_kind))
        return self.norm2(x + self._ff_block(x))


class TransformerEncoder(_MasksAsGiven):
    """torch's nn.TransformerEncoder(encoder_layer, num_layers, norm=None): layers.0 .. layers.{num_layers - 1},
    copies of encoder_layer (the same initial values, as torch's deepcopy), then norm. forward(src, mask=None,
    src_key_padding_mask=None, is_causal=None, *, mask_kind=None). Padded positions are computed like any other
    (torch's nested-tensor fast path in eval mode returns 0 there)."""
    _later = ("mask", "src_key_padding_mask", "is_causal")

    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True, mask_check=True):
        super().__init__()
        if not isinstance(encoder_layer, Module):
            raise TypeError(f"TransformerEncoder: encoder_layer must be a Module, not {type(encoder_layer).__name__}")
        if not _is_int(num_layers) or num_layers < 1:
            raise ValueError(f"TransformerEncoder: num_layers must be a positive int, got {num_layers!r}")
        self.layers = ModuleList([_clone(encoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = int(num_layers), norm
        self.enable_nested_tensor, self.mask_check = enable_nested_tensor, mask_check

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None, *, mask_kind=None):
        mask = _additive_mask(mask, mask_kind, "mask", "TransformerEncoder")       # converted once for all layers
        kpm = _additive_mask(src_key_padding_mask, mask_kind, "src_key_padding_mask", "TransformerEncoder")
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=kpm, is_causal=bool(is_causal), mask_kind="additive")
        return x if self.norm is None else self.norm(x)

class RNNCell(_CellBase):
    """h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh or relu; shapes and init as GRUCell's."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh"):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNNCell: nonlinearity must be 'tanh' or 'relu', not {nonlinearity!r}")
        super().__init__(input_size, hidden_size, bias)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        batched = self._check_input(input)
        x = input if batched else input.unsqueeze(0)
        h = self._state(hx, x.shape[0], batched, "hx", x.dtype)
        z = F.linear(x, self.weight_ih, self.bias_ih) + F.linear(h, self.weight_hh, self.bias_hh)
        h2 = z.tanh() if self.nonlinearity == "tanh" else z.relu()
        return h2 if batched else h2.squeeze(0)

    def extra_repr(self):
        return super().extra_repr() + ("" if self.nonlinearity == "tanh" else f", nonlinearity={self.nonlinearity}")


class RNN(_RNNBase):
    """output, h_n = RNN(input, h_0=None): the Elman RNN, h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) per
    layer, act tanh or relu; shapes, parameter names and init as GRU's. Each layer is one input product for the whole
    sequence, then one h W_hh^T product and one activation per time step."""
    _gates = 1

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: nonlinearity must be 'tanh' or 'relu', not {nonlinearity!r}")
        super().__init__(input_size, hidden_size, num_layers, bias, batch_first, dropout, bidirectional)
        self.nonlinearity = nonlinearity

    def _sequence(self, gi_all, h0, w_hh, b_hh):
        h = _C.zeros(gi_all.shape[1], self.hidden_size, dtype=gi_all.dtype) if h0 is None else h0
        outs = []
        for t in range(gi_all.shape[0]):
            z = gi_all[t] + F.linear(h, w_hh, b_hh)
            h = z.tanh() if self.nonlinearity == "tanh" else z.relu()
            outs.append(h)
        return _C.stack(outs, 0), h

    def forward(self, input, hx=None):
        x, batched = self._prepare(input)
        out, finals = self._run(x, self._initial(hx, x.shape[1], batched, "h_0"))
        h_n = _C.stack(finals, 0)
        return self._finish(out, batched), h_n if batched else h_n[:, 0]


def _clone(module):
    """A copy with its own parameters and buffers (torch's copy.deepcopy of a layer: the same initial values)."""
    new = copy.copy(module)
    d = new.__dict__
    d["_parameters"], d["_buffers"], d["_modules"] = OrderedDict(), OrderedDict(), OrderedDict()
    d["_non_persistent"] = set(module._non_persistent)
    with no_grad():
        for table in ("_parameters", "_buffers"):
            for k, t in getattr(module, table).items():
                c = None if t is None else t.detach().clone().requires_grad_(t.requires_grad)
                getattr(new, table)[k] = c
                d[k] = c
    for k, m in module._modules.items():
        d["_modules"][k] = d[k] = None if m is None else _clone(m)
    return new

