"""tlgpu.nn.functional: the differentiable building blocks layers are made of. Each is one C op or a short
composition of C ops; autograd comes from the ops themselves. Names and keywords follow torch.nn.functional
(a port renames torch to tlgpu); a torch keyword with no honest meaning here raises, naming what to do instead."""
import math
import warnings

import numpy as np

from .. import _C
from .. import quant as _quant
from ..amp import _to_float32  # autocast's float32 ops: half inputs widened (tlgpu/amp.py)
from ..autograd import _is_int  # an int or a numpy integer (anything with __index__), not a tensor
from ._fbase import _UNSET, _check_tensor, _dim, _float_dtype, _reduce, _reduction  # noqa: F401

tanh = _C.Tensor.tanh
sigmoid = _C.Tensor.sigmoid

def _recording(*ts):
    return _C.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def softmax(input, dim=None, _stacklevel=3, dtype=None, *, axis=_UNSET):
    """exp(x - max) / sum(exp(x - max)) along dim (torch) or axis (numpy); the last dim when neither is given
    (torch's deprecated implicit choice, dim 0 for 0-, 1- and 3-d input, is not reproduced)."""
    _float_dtype(dtype, "softmax")
    return _check_tensor(input, "softmax").softmax(_dim(dim, axis, "softmax"))


def log_softmax(input, dim=None, _stacklevel=3, dtype=None, *, axis=_UNSET):
    """x - logsumexp(x) along dim (torch) or axis (numpy); the last dim when neither is given."""
    _float_dtype(dtype, "log_softmax")
    return _check_tensor(input, "log_softmax").log_softmax(_dim(dim, axis, "log_softmax"))


def relu(input, inplace=False):
    """max(x, 0), NaN propagating; inplace=True writes into input (clamp_ with min 0, recorded like any
    in-place op) and returns it."""
    if inplace:
        return input.clamp_(min=0.0)
    return input.relu()


def silu(input, inplace=False):
    if inplace:
        return input.copy_(input.silu())
    return input.silu()


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def gelu(input, approximate="none"):
    """approximate='none': the exact erf GELU (one C op); 'tanh': torch's tanh approximation,
    0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x**3))), composed of differentiable ops."""
    if approximate == "none":
        return input.gelu()
    if approximate == "tanh":
        inner = (input + input * input * input * 0.044715) * _SQRT_2_OVER_PI
        return input * 0.5 * (inner.tanh() + 1.0)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """x where x > 0, negative_slope * x elsewhere (the gradient at 0 is negative_slope, as torch's); NaN
    propagates. Tensor.leaky_relu (one C op); inplace=True multiplies input in place by 1 or negative_slope."""
    _check_tensor(input, "leaky_relu")
    if not inplace:
        return input.leaky_relu(float(negative_slope))
    return input.mul_(_C.where(input > 0, 1.0, float(negative_slope)))


def dropout(input, p=0.5, training=True, inplace=False):
    """Inverted dropout: each element kept with probability 1 - p and scaled by 1/(1 - p), from the device RNG;
    input itself when not training or p == 0. inplace=True multiplies input by the mask in place."""
    if not inplace:
        return _C.dropout(input, p, training)
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    if not training or p == 0.0:
        return input
    return input.mul_(_C.dropout_mask(input.shape, p))


def linear(input, weight, bias=None):
    """input @ weight.T (+ bias); weight is [out_features, in_features] like torch. One C op and one autograd
    node; on CPU devices with the BLAS path (docs/cpu.md) one command, the bias written before the product.
    A Q4_0/Q8_0 weight (tlgpu.quant) runs quant.linear: inference only."""
    if _quant.is_quantized(weight):
        return _quant.linear(input, weight, bias)
    return _C.linear(input, weight, bias)


def mse_loss(input, target, reduction="mean", *, size_average=None, reduce=None):
    """(input - target)**2, reduced. Shapes broadcast like torch, which warns when they differ (a (N, 1)
    input with a (N,) target is an (N, N) loss): so does this. reduction is the third positional argument
    (torch's third is the deprecated size_average, which is keyword-only here)."""
    reduction = _reduction(size_average, reduce, reduction, "mse_loss")
    input, target = _to_float32(input, target)
    ts = getattr(target, "shape", None)                  # a tensor or an array; a Python number broadcasts
    if ts is not None and tuple(ts) != tuple(input.shape):
        warnings.warn(f"mse_loss: target size {tuple(ts)} differs from input size {tuple(input.shape)}; they "
                      "are broadcast, which is likely wrong (as torch warns)", stacklevel=2)
    return _reduce((input - target).square(), reduction, "mse_loss")


# The L1 / Huber family: short compositions of differentiable C ops (clamp, so no branch per element).
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


def _as_target(target):
    # numpy targets are uploaded (int64 -> int32, float64 -> float32) as tlgpu.tensor converts them
    return target if isinstance(target, _C.Tensor) else _C.tensor(np.asarray(target))


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean",
                  label_smoothing=0.0):
    """torch's cross_entropy: log_softmax over the class dim (1, or 0 for unbatched (C,) input) and the negative
    log-likelihood. input (C,), (N, C) or (N, C, d1, ...); target int32 class indices of input's shape without
    the class dim (targets equal to ignore_index count neither in the sum nor in the mean's divisor), or float32
    class probabilities of input's shape. weight (C,) scales each class (the mean divides by the targets' summed
    weights); label_smoothing mixes in the uniform distribution, as torch. Class indices without weight or
    label_smoothing run the fused C op (one autograd node; (C,) and (N, C, d...) input reshaped to (M, C) rows
    first); weight, label_smoothing and probability targets are compositions."""
    _check_tensor(input, "cross_entropy")
    reduction = _reduction(size_average, reduce, reduction, "cross_entropy")
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if input.ndim == 0:
        raise ValueError("cross_entropy: input must have a class dim, got a 0-d tensor")
    target = _as_target(target)
    input, target = _to_float32(input, target)
    cdim = 0 if input.ndim == 1 else 1
    c = input.shape[cdim]
    if weight is not None:
        if not isinstance(weight, _C.Tensor):
            weight = _C.tensor(np.asarray(weight, dtype=np.float32))
        if tuple(weight.shape) != (c,):
            raise ValueError(f"cross_entropy: weight must be ({c},) for input {tuple(input.shape)}, got "
                             f"{tuple(weight.shape)}")
    if target.dtype == np.float32:
        if tuple(target.shape) != tuple(input.shape):
            raise TypeError(f"cross_entropy: class-index targets must be int32 (float32 targets are class "
                            f"probabilities of the input's shape {tuple(input.shape)}), got float32 "
                            f"{tuple(target.shape)}")
        return _ce_probs(input, target, weight, ignore_index, reduction, label_smoothing, cdim)
    want = tuple(input.shape[:cdim]) + tuple(input.shape[cdim + 1:])
    if tuple(target.shape) != want:
        raise ValueError(f"cross_entropy: logits (N, C) (or (C,), (N, C, d...)) {tuple(input.shape)} want class-index "
                         f"targets of shape {want} (or class probabilities of the logits' shape), got "
                         f"{tuple(target.shape)}")
    if input.ndim == 2:
        x2, t1 = input, target
    elif input.ndim == 1:
        x2, t1 = input.unsqueeze(0), target.reshape(1)
    else:                                                   # (N, C, d...) -> (N d..., C) rows
        x2 = input.permute(0, *range(2, input.ndim), 1).reshape(-1, c)
        t1 = target.reshape(-1)
    if weight is None and label_smoothing == 0.0:
        out = _C.cross_entropy(x2, t1, ignore_index=ignore_index, reduction=reduction)
    else:
        out = _ce_weighted(x2, t1, weight, ignore_index, reduction, label_smoothing)
    return out.reshape(*want) if reduction == "none" else out


def _ce_weighted(x, t, weight, ignore_index, reduction, smoothing):
    """(1 - s) * nll + s / C * (-sum_c w_c logp_c) per row, ignored rows 0; the mean divides both by the sum of
    the non-ignored targets' weights (torch's normalisation). A target outside [0, C) that is not ignore_index
    raises IndexError at the next sync point (gather checks it on the device)."""
    c = x.shape[1]
    logp = x.log_softmax(1)
    ignored = t == ignore_index                          # float mask (M,)
    safe = t.masked_fill(ignored, 0)                     # int32; ignored rows read class 0, weighted 0
    keep = 1.0 - ignored
    wt = keep if weight is None else weight.gather(0, safe) * keep
    loss = -logp.gather(1, safe.unsqueeze(1)).squeeze(1) * wt
    if smoothing > 0.0:
        smooth = -(logp if weight is None else logp * weight).sum(1) * keep
        loss = loss * (1.0 - smoothing) + smooth * (smoothing / c)
    if reduction == "mean":
        return loss.sum() / wt.sum()
    return loss.sum() if reduction == "sum" else loss


def _ce_probs(input, target, weight, ignore_index, reduction, smoothing, cdim):
    """Class-probability targets: -sum_c w_c t_c logp_c over the class dim; the mean is over the other elements
    (not weighted), as torch."""
    if ignore_index >= 0:
        raise ValueError("cross_entropy: ignore_index is not supported for probability (float32) targets")
    c = input.shape[cdim]
    logp = input.log_softmax(cdim)
    if weight is not None:
        logp = logp * weight.reshape(c, *([1] * (input.ndim - cdim - 1)))
    if smoothing > 0.0:
        target = target * (1.0 - smoothing) + smoothing / c
    return _reduce(-(logp * target).sum(cdim), reduction, "cross_entropy")


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
              sparse=False):
    """Rows of weight picked by int32 indices of any shape: result shape input.shape + (dim,). Index tensors
    are checked on the device, as index_select's (an invalid one raises IndexError at the next sync point);
    lists and arrays as they are uploaded. padding_idx: that row's gradient is 0
    (its forward value is returned unchanged, as torch)."""
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding: max_norm, scale_grad_by_freq and sparse are not supported "
                                  "(gradients are dense; renormalise the weight explicitly under no_grad)")
    indices = _as_target(input)
    out = weight.index_select(0, indices.reshape(-1)).reshape(*indices.shape, weight.shape[1])
    if padding_idx is not None and _recording(weight):
        pad = padding_idx + weight.shape[0] if padding_idx < 0 else padding_idx
        if not 0 <= pad < weight.shape[0]:
            raise ValueError(f"embedding: padding_idx {padding_idx} outside [-{weight.shape[0]}, {weight.shape[0]})")
        keep = (indices != pad).unsqueeze(-1)
        out = _C.where(keep, out, out.detach())         # same values; no gradient into the padding row
    return out


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last len(normalized_shape) dims, var biased, as
    torch's layer_norm (nn.LayerNorm's own ops): differentiable wrt input, weight and bias."""
    _check_tensor(input, "layer_norm")
    input, weight, bias = _to_float32(input, weight, bias)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(int(d) for d in normalized_shape)
    n = len(shape)
    if input.ndim < n or tuple(input.shape[input.ndim - n:]) != shape:
        raise ValueError(f"layer_norm: input of shape {tuple(input.shape)} does not end in {shape}")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and tuple(p.shape) != shape:
            raise ValueError(f"layer_norm: {name} of shape {tuple(p.shape)} must be normalized_shape {shape}")
    axes = tuple(range(-n, 0))
    d = input - input.mean(axis=axes, keepdims=True)
    y = d * ((d * d).mean(axis=axes, keepdims=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _causal_blocked(L, S):
    """float mask (L, S), 1 where key j comes after query i: torch's is_causal (tril(ones(L, S)), top-left
    aligned, so with L > S the last queries see every key and with L < S the last keys are never seen)."""
    return _C.arange(S) > _C.arange(L).reshape(L, 1)


def _sdpa_mask(mask, kind, shape):
    """attn_mask as (blocked, bias): blocked a float mask (1 = the key does not take part), or bias added to the
    scores. tlgpu has no bool dtype, so a float32 tensor could be either torch meaning: mask_kind says which."""
    op = "scaled_dot_product_attention"
    if kind not in (None, "bool", "additive"):
        raise ValueError(f"{op}: mask_kind must be None, 'bool' or 'additive', not {kind!r}")
    if not isinstance(mask, _C.Tensor):
        arr = np.asarray(mask)
        if arr.dtype == np.bool_:
            if kind == "additive":
                raise TypeError(f"{op}: a bool attn_mask cannot be additive (it would add 1/0 to the scores)")
            mask, kind = _C.tensor(~arr), "blocked"
        elif np.issubdtype(arr.dtype, np.floating):
            mask, kind = _C.tensor(arr.astype(np.float32)), kind or "additive"
        else:
            raise TypeError(f"{op}: attn_mask must be a bool or float array or a tlgpu Tensor, got {arr.dtype}")
    elif kind is None:
        if mask.dtype == np.float32:
            raise TypeError(f"{op}: a float32 attn_mask is ambiguous in tlgpu, which has no bool dtype "
                            "(comparisons give float32 1/0 masks). Pass mask_kind='bool' (nonzero = takes part, "
                            "torch's bool mask; or mask.int(), or a numpy bool array) or mask_kind='additive' "
                            "(added to the scores, torch's float mask)")
        kind = "bool"                                   # int32: nonzero takes part (torch has no int masks)
    elif kind == "additive" and mask.dtype != np.float32:
        raise TypeError(f"{op}: an additive attn_mask must be float32, got {mask.dtype}")
    try:
        ok = np.broadcast_shapes(tuple(mask.shape), shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{op}: attn_mask of shape {tuple(mask.shape)} does not broadcast to the scores {shape}")
    if kind == "blocked":
        return mask, None
    return (mask == 0, None) if kind == "bool" else (None, mask)


def _gqa(query, t, name):
    """torch's enable_gqa: each of t's Hkv heads serves Hq / Hkv consecutive query heads (repeat_interleave
    over dim -3), by an expanded view and one copy."""
    hq, hk = query.shape[-3], t.shape[-3]
    if hk == 0 or hq % hk:
        raise ValueError(f"scaled_dot_product_attention: enable_gqa needs {name}'s heads ({hk}) to divide the "
                         f"query's ({hq})")
    if hq == hk:
        return t
    lead, tail = tuple(t.shape[:-3]), tuple(t.shape[-2:])
    return t.unsqueeze(-3).expand(*lead, hk, hq // hk, *tail).reshape(*lead, hq, *tail)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                                 enable_gqa=False, *, mask_kind=None):
    """softmax(query @ key^T * scale + mask) @ value, torch's semantics: query (..., L, E), key (..., S, E),
    value (..., S, Ev), batch dims broadcast; scale defaults to 1/sqrt(E). attn_mask broadcasts to (..., L, S):
    a numpy bool array or an int32 tensor (nonzero = the key takes part), a float array (added to the scores),
    or a float32 tensor with mask_kind='bool' / 'additive' (tlgpu-only keyword: a float32 tensor is both a
    comparison mask and a float mask here). is_causal: the top-left aligned causal mask (key j <= query i), not
    combinable with attn_mask. A row whose keys are all masked gives zeros (torch's _safe_softmax), not NaN.
    dropout_p > 0 drops attention weights with the device RNG whenever it is given (as torch: pass
    dropout_p=p if training else 0). Differentiable wrt query, key, value (and a float mask) through matmul,
    masked_fill, softmax and dropout; with no graph recorded and no mask, the row softmax is the fused
    softmax_rows kernel (scale and causal folded in)."""
    op = "scaled_dot_product_attention"
    for name, t in (("query", query), ("key", key), ("value", value)):
        _check_tensor(t, op, name)
        if t.dtype != np.float32 or t.ndim < 2:
            raise ValueError(f"{op}: {name} must be float32 with at least 2 dims, got {t.dtype} {tuple(t.shape)}")
    L, E, S = query.shape[-2], query.shape[-1], key.shape[-2]
    if key.shape[-1] != E or value.shape[-2] != S:
        raise ValueError(f"{op}: query (..., L, E), key (..., S, E) and value (..., S, Ev) disagree: "
                         f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}")
    if is_causal and attn_mask is not None:
        raise ValueError(f"{op}: is_causal=True with an attn_mask; fold the causal mask into attn_mask instead")
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{op}: dropout_p must be in [0, 1), got {dropout_p}")
    if enable_gqa:
        if query.ndim < 3 or key.ndim < 3 or value.ndim < 3:
            raise ValueError(f"{op}: enable_gqa needs (..., heads, L, E) inputs")
        key, value = _gqa(query, key, "key"), _gqa(query, value, "value")
    scale = (1.0 / math.sqrt(E) if E else 1.0) if scale is None else float(scale)
    try:
        batch = tuple(np.broadcast_shapes(tuple(query.shape[:-2]), tuple(key.shape[:-2]),
                                          tuple(value.shape[:-2])))
    except ValueError:
        raise ValueError(f"{op}: batch dims of query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                         f"{tuple(value.shape)} do not broadcast") from None
    blocked = bias = None
    if attn_mask is not None:
        blocked, bias = _sdpa_mask(attn_mask, mask_kind, batch + (L, S))
    kt = key.transpose(-2, -1)
    if attn_mask is None and S > 0 and (not is_causal or L == S) and not _recording(query, key, value):
        p = _C.softmax_rows(query @ kt, scale, bool(is_causal))     # fused row softmax (no graph)
    else:
        s, dead = (query * scale) @ kt, None
        if is_causal:
            s = s.masked_fill(_causal_blocked(L, S), float("-inf"))
        elif blocked is not None:
            s = s.masked_fill(blocked, float("-inf"))
            dead = blocked.min(-1, keepdims=True) if S > 0 else None
        elif bias is not None:
            s = s + bias
            dead = (s == float("-inf")).min(-1, keepdims=True) if S > 0 else None
        if dead is not None:                          # all keys masked: softmax of zeros, then zeroed (no NaN)
            s = _C.where(dead, 0.0, s)
        p = s.softmax(-1)
        if dead is not None:
            p = _C.where(dead, 0.0, p)
    if dropout_p > 0.0:
        p = _C.dropout(p, dropout_p, True)
    return p @ value


def rms_norm(x, weight=None, eps=1e-6):
    """x / sqrt(mean(x**2, last axis) + eps) * weight: the fused kernel, or differentiable ops when a graph is
    being recorded."""
    if not _recording(x, weight):
        return _C.rms_norm(x, weight, eps)
    y = x * ((x * x).mean(-1, keepdims=True) + eps).rsqrt()
    return y if weight is None else y * weight


def silu_mul(x, y):
    """silu(x) * y, the gated MLP's activation (fused kernel unless a graph is being recorded)."""
    if not _recording(x, y) and x.shape == y.shape:
        return _C.silu_mul(x, y)
    return x.silu() * y


rope = _C.rope
attention = _C.attention
kv_write = _C.kv_write
get_rows = _C.get_rows


def _conv_padding(padding, weight, dilation, stride):
    """torch's padding='valid' / 'same' as the symmetric int pair the C op takes."""
    if not isinstance(padding, str):
        return padding
    if padding == "valid":
        return 0
    if padding != "same":
        raise ValueError(f"conv2d: padding must be an int, a pair, 'valid' or 'same', not {padding!r}")
    d = (dilation, dilation) if _is_int(dilation) else tuple(dilation)
    if stride not in (1, (1, 1), [1, 1]):
        raise ValueError(f"conv2d: padding='same' needs stride 1, got {stride}")
    total = [d[i] * (weight.shape[2 + i] - 1) for i in range(2)]
    if any(t % 2 for t in total):
        raise NotImplementedError(f"conv2d: padding='same' with kernel {tuple(weight.shape[2:])} and dilation {d} "
                                  "needs uneven padding; pad the input explicitly")
    return (total[0] // 2, total[1] // 2)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation over NCHW (or CHW) input, weight [out, in, kH, kW]: im2col + one GEMM."""
    if groups != 1:
        raise NotImplementedError(f"conv2d: groups={groups}; only groups=1 is supported")
    return _C.conv2d(input, weight, bias, stride, _conv_padding(padding, weight, dilation, stride), dilation)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False, return_indices=False):
    """Window maxima; stride defaults to kernel_size; the gradient goes to each window's first maximum."""
    if dilation not in (1, (1, 1), [1, 1]) or ceil_mode or return_indices:
        raise NotImplementedError("max_pool2d: dilation != 1, ceil_mode and return_indices are not supported")
    return _C.max_pool2d(input, kernel_size, stride, padding)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """Window means; stride defaults to kernel_size; count_include_pad like torch."""
    if ceil_mode or divisor_override is not None:
        raise NotImplementedError("avg_pool2d: ceil_mode and divisor_override are not supported")
    return _C.avg_pool2d(input, kernel_size, stride, padding, count_include_pad)


from ._functional_more import *  # noqa: E402,F401,F403  more torch names, composed of the ops above
from ._functional_layers import *  # noqa: E402,F401,F403  batch/group norm, conv1d, 1-d and adaptive pooling
from ._conv_transpose import *  # noqa: E402,F401,F403  conv_transpose1d/2d, interpolate, upsample
