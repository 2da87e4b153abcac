"""More of torch.nn.functional, for ports of RL learners (CleanRL, Stable-Baselines3, TorchRL) and nanoGPT-style
models: activations, padding, one_hot, and the BCE / NLL / KL / Gaussian-NLL losses. Each is a short composition of
differentiable C ops (autograd comes from the ops), in the numerically stable form torch uses. Names, defaults and
keywords follow torch; functional.py re-exports everything in __all__.

Invariant: where() picks between two branches and still back-propagates a zero into the branch it did not pick,
so neither branch may hold an inf or a NaN the picked one would not (0 * inf is NaN): the stable forms below keep
every branch finite (exp(-|x|), never exp(x))."""
import math
import warnings

import numpy as np

from .. import _C
from ..amp import _to_float32
from ..autograd import _is_int, no_grad
from ._fbase import _UNSET, _check_tensor, _dim, _float_dtype, _reduce, _reduction

__all__ = ["one_hot", "softplus", "logsigmoid", "mish", "elu", "selu", "celu", "hardtanh", "relu6", "hardswish",
           "hardsigmoid", "softsign", "tanhshrink", "threshold", "glu", "softmin", "prelu", "normalize", "pad",
           "binary_cross_entropy", "binary_cross_entropy_with_logits", "nll_loss", "kl_div", "gaussian_nll_loss",
           "cosine_similarity", "pairwise_distance", "gumbel_softmax"]

_REDUCTIONS = ("mean", "sum", "none")


def _inplace(fn, x, inplace):
    """fn(x), or with inplace=True fn's result written into x and x returned (nn._apply's rule: under autograd
    fn reads a clone, so what fn's backward saved is not the tensor the write changes)."""
    if not inplace:
        return fn(x)
    src = x.clone() if x.requires_grad and _C.is_grad_enabled() else x
    return x.copy_(fn(src))


def _softplus(z):
    """log(1 + exp(z)) as relu(z) + log1p(exp(-|z|)): finite for every finite z. -|z| is where(z > 0, -z, z), so
    the gradient at z = 0 is sigmoid(0) = 0.5 (abs's gradient there is 0)."""
    return z.relu() + _C.where(z > 0, -z, z).exp().log1p()


# ---- activations ----

def softplus(input, beta=1.0, threshold=20.0):
    """log(1 + exp(beta x)) / beta, and x itself where beta x > threshold (torch's linear tail); computed as
    relu(z) + log1p(exp(-|z|)) with z = beta x, so no exp overflows (|x| = 100 gives 100 and 3.7e-44)."""
    _check_tensor(input, "softplus")
    (input,) = _to_float32(input)
    z = input * float(beta) if beta != 1 else input
    sp = _softplus(z)
    if beta != 1:
        sp = sp / float(beta)
    return _C.where(z > float(threshold), input, sp)


def logsigmoid(input):
    """log(sigmoid(x)) = -softplus(-x), stable at both ends (x = -100 gives -100, not -inf)."""
    _check_tensor(input, "logsigmoid")
    return -_softplus(-input)


def mish(input, inplace=False):
    """x * tanh(softplus(x))."""
    _check_tensor(input, "mish")
    return _inplace(lambda x: x * softplus(x).tanh(), input, inplace)


def _elu(x, alpha, scale=1.0, inv=1.0):
    # expm1 of min(x, 0): the branch where() drops never overflows; clamp's gradient at 0 is 1, so the
    # gradient at x = 0 is alpha (torch's x <= 0 branch)
    neg = x.clamp(max=0.0)
    neg = (neg * inv if inv != 1.0 else neg).expm1() * float(alpha)
    out = _C.where(x > 0, x, neg)
    return out * scale if scale != 1.0 else out


def elu(input, alpha=1.0, inplace=False):
    """x where x > 0, alpha * (exp(x) - 1) elsewhere."""
    _check_tensor(input, "elu")
    return _inplace(lambda x: _elu(x, alpha), input, inplace)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def selu(input, inplace=False):
    """scale * elu(x, alpha) with torch's constants (alpha 1.6733, scale 1.0507)."""
    _check_tensor(input, "selu")
    return _inplace(lambda x: _elu(x, _SELU_ALPHA, _SELU_SCALE), input, inplace)


def celu(input, alpha=1.0, inplace=False):
    """max(0, x) + min(0, alpha * (exp(x / alpha) - 1)); alpha must not be 0."""
    _check_tensor(input, "celu")
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0 (it divides x)")
    return _inplace(lambda x: _elu(x, alpha, inv=1.0 / float(alpha)), input, inplace)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """clamp(x, min_val, max_val)."""
    _check_tensor(input, "hardtanh")
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
    return _inplace(lambda x: x.clamp(min=float(min_val), max=float(max_val)), input, inplace)


def relu6(input, inplace=False):
    """min(max(x, 0), 6)."""
    return hardtanh(_check_tensor(input, "relu6"), 0.0, 6.0, inplace)


def hardswish(input, inplace=False):
    """x * relu6(x + 3) / 6 (gradient (2x + 3) / 6 on [-3, 3], as torch)."""
    _check_tensor(input, "hardswish")
    return _inplace(lambda x: x * (x + 3.0).clamp(min=0.0, max=6.0) * (1.0 / 6.0), input, inplace)


def hardsigmoid(input, inplace=False):
    """relu6(x + 3) / 6 = clamp(x / 6 + 1/2, 0, 1)."""
    _check_tensor(input, "hardsigmoid")
    return _inplace(lambda x: (x * (1.0 / 6.0) + 0.5).clamp(min=0.0, max=1.0), input, inplace)


def softsign(input):
    """x / (1 + |x|)."""
    return _check_tensor(input, "softsign") / (input.abs() + 1.0)


def tanhshrink(input):
    """x - tanh(x)."""
    return _check_tensor(input, "tanhshrink") - input.tanh()


def threshold(input, threshold, value, inplace=False):
    """x where x > threshold, value elsewhere (torch's argument order: threshold, then value)."""
    _check_tensor(input, "threshold")
    return _inplace(lambda x: _C.where(x > float(threshold), x, float(value)), input, inplace)


def glu(input, dim=-1):
    """a * sigmoid(b), a and b the two halves of input along dim (whose size must be even)."""
    _check_tensor(input, "glu")
    if input.ndim == 0:
        raise ValueError("glu: a 0-d tensor has no dim to halve")
    if not -input.ndim <= dim < input.ndim:
        raise IndexError(f"glu: dim {dim} out of range for a {input.ndim}-d input")
    n = input.shape[dim]
    if n % 2:
        raise ValueError(f"glu: halving dimension must be even, but dim {dim} of {tuple(input.shape)} has size {n}")
    a, b = input.narrow(dim, 0, n // 2), input.narrow(dim, n // 2, n // 2)
    return a * b.sigmoid()


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """softmax(-x) along dim (the last dim when None, as functional.softmax)."""
    _float_dtype(dtype, "softmin")
    return (-_check_tensor(input, "softmin")).softmax(_dim(dim, _UNSET, "softmin"))


def prelu(input, weight):
    """x where x > 0, weight * x elsewhere; weight holds 1 slope or one per channel (dim 1; dim 0 of 1-d input)."""
    _check_tensor(input, "prelu")
    _check_tensor(weight, "prelu", "weight")
    k = weight.numel()
    if k != 1:
        cdim = 1 if input.ndim >= 2 else 0
        if weight.ndim != 1 or input.ndim == 0 or input.shape[cdim] != k:
            raise ValueError(f"prelu: weight of shape {tuple(weight.shape)} must hold 1 slope or one per channel "
                             f"(dim {cdim} of input {tuple(input.shape)})")
        weight = weight.reshape(k, *([1] * (input.ndim - cdim - 1)))
    return _C.where(input > 0, input, input * weight)


# ---- one_hot, normalize, pad ----

def one_hot(tensor, num_classes=-1):
    """int32 (tlgpu's long) tensor of tensor.shape + (num_classes,), 1 at each index. num_classes=-1 infers
    max + 1, which reads tensor back: a sync point (a negative index raises IndexError there). With num_classes
    given nothing waits: the indices are checked on the device, and one outside [0, num_classes) raises IndexError
    at the next sync point."""
    _check_tensor(tensor, "one_hot", "tensor")
    if tensor.dtype != np.int32:
        raise TypeError(f"one_hot: tensor must hold int32 class indices (tlgpu's long), got {tensor.dtype}")
    if not _is_int(num_classes) or isinstance(num_classes, bool) or num_classes < -1:
        raise ValueError(f"one_hot: num_classes must be an int >= 0, or -1 to infer it, got {num_classes!r}")
    num_classes = int(num_classes)
    if num_classes == -1:
        if tensor.numel() == 0:
            raise ValueError("one_hot: cannot infer the number of classes from an empty tensor; pass num_classes")
        v = tensor.numpy()                              # the sync point
        if v.min() < 0:
            raise IndexError(f"one_hot: class values must be non-negative, got {int(v.min())}")
        num_classes = int(v.max()) + 1
    classes = _C.arange(num_classes)
    flat = tensor.reshape(-1)
    flat = flat.masked_fill(flat < 0, num_classes)      # negatives out of range too (index_select would wrap them)
    checked = classes.index_select(0, flat).reshape(*tensor.shape)
    return (checked.unsqueeze(-1) == classes).int()


def _vnorm(x, p, dim, keepdim, op):
    """The vector p-norm along dim: Tensor.norm for p in 1, 2, inf, -inf, else (sum |x|**p) ** (1/p)."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise TypeError(f"{op}: p must be a number, not {type(p).__name__}")
    if p in (1, 2, math.inf, -math.inf):
        return x.norm(p=p, dim=dim, keepdim=keepdim)
    if not p > 0:
        raise ValueError(f"{op}: p must be > 0 (or inf, -inf), got {p}")
    return (x.abs() ** float(p)).sum(dim, keepdims=keepdim) ** (1.0 / p)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    """x / max(||x||_p, eps) along dim."""
    _check_tensor(input, "normalize")
    if out is not None:
        raise TypeError("normalize: out= is not supported; use the returned tensor (out.copy_(it) to write one)")
    (input,) = _to_float32(input)
    return input / _vnorm(input, p, dim, True, "normalize").clamp(min=float(eps))


def _pad_constant(x, d, lo, hi, value):
    n = x.shape[d]
    if lo < 0 or hi < 0:                                # negative padding crops
        start, stop = max(-lo, 0), n - max(-hi, 0)
        x = x.narrow(d, start, stop - start)
    parts = []
    for k in (lo, None, hi):
        if k is None:
            parts.append(x)
        elif k > 0:
            shape = list(x.shape)
            shape[d] = k
            parts.append(_C.full(tuple(shape), value, dtype=x.dtype))
    return _C.cat(parts, d) if len(parts) > 1 else x


def _pad_index(n, lo, hi, mode):
    """Source index of each output position along one dim (reflect mirrors without repeating the edge)."""
    i = np.arange(-lo, n + hi)
    if mode == "reflect":
        i = np.abs(i)
        i = np.where(i > n - 1, 2 * (n - 1) - i, i)
    elif mode == "replicate":
        i = np.clip(i, 0, n - 1)
    else:
        i = i % n
    return _C.tensor(i.astype(np.int32))


def pad(input, pad, mode="constant", value=None):
    """torch's F.pad: pad = (left, right, top, bottom, front, back...) from the last dim backwards. 'constant'
    (value, default 0) pads any number of trailing dims and a negative amount crops; 'reflect', 'replicate' and
    'circular' pad the last 1-3 dims of a (C, ...) or (N, C, ...) input, as torch. Differentiable (cat, or an
    index_select of each padded dim)."""
    op = "pad"
    _check_tensor(input, op)
    if not isinstance(pad, (tuple, list)) or not all(_is_int(p) and not isinstance(p, bool) for p in pad):
        raise TypeError(f"pad: pad must be a tuple of ints, got {pad!r}")
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2:
        raise ValueError(f"pad: padding length must be divisible by 2, got {len(pad)}")
    k = len(pad) // 2
    if k > input.ndim:
        raise ValueError(f"pad: padding length {len(pad)} too large for a {input.ndim}-d input")
    sizes = [input.shape[input.ndim - 1 - j] + pad[2 * j] + pad[2 * j + 1] for j in range(k)]
    if any(s < 0 for s in sizes):
        raise ValueError(f"pad: padding {pad} of input {tuple(input.shape)} gives a negative size")
    x = input
    if mode == "constant":
        v = 0 if value is None else value
        for j in range(k):
            x = _pad_constant(x, input.ndim - 1 - j, pad[2 * j], pad[2 * j + 1], v)
        return x
    if mode not in ("reflect", "replicate", "circular"):
        raise ValueError(f"pad: mode must be 'constant', 'reflect', 'replicate' or 'circular', not {mode!r}")
    if value not in (None, 0):
        raise ValueError(f"pad: padding mode {mode!r} doesn't take a value argument")
    if not 1 <= k <= 3 or input.ndim not in (k + 1, k + 2):
        raise ValueError(f"pad: mode {mode!r} pads the last 1-3 dims of a (C, ...) or (N, C, ...) input; padding "
                         f"length {len(pad)} does not fit a {input.ndim}-d input")
    for j in range(k):
        d, lo, hi = input.ndim - 1 - j, pad[2 * j], pad[2 * j + 1]
        n = input.shape[d]
        bad = (mode == "reflect" and max(lo, hi) >= n or mode == "circular" and max(lo, hi) > n
               or mode == "replicate" and n == 0)
        if bad:
            raise ValueError(f"pad: {mode} padding ({lo}, {hi}) too large for dim {d} of size {n} of input "
                             f"{tuple(input.shape)}")
        x = x.index_select(d, _pad_index(n, lo, hi, mode))
    return x


# ---- losses ----

def _check_reduction(reduction, op, extra=()):
    if reduction not in _REDUCTIONS + tuple(extra):
        want = ", ".join(repr(r) for r in _REDUCTIONS + tuple(extra))
        raise ValueError(f"{op}: reduction must be one of {want}, not {reduction!r}")


def _float_tensor(t, op, name):
    """t as a floating tensor (numpy and lists uploaded as float32); int32 is refused, as torch refuses long."""
    if t is None:
        return None
    if not isinstance(t, _C.Tensor):
        t = _C.tensor(np.asarray(t, dtype=np.float32))
    if t.dtype not in ("float32", "float16", "bfloat16"):
        raise TypeError(f"{op}: {name} must be a floating tensor, got {t.dtype}")
    return t


def _same_shape(input, target, op):
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"{op}: target size {tuple(target.shape)} must be the same as input size "
                         f"{tuple(input.shape)}")


def _broadcasts_to(t, shape, op, name):
    if t is None:
        return
    try:
        ok = np.broadcast_shapes(tuple(t.shape), tuple(shape)) == tuple(shape)
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{op}: {name} of shape {tuple(t.shape)} does not broadcast to the input {tuple(shape)}")


def _log100(x, one_minus=False):
    """max(log(x), -100), or max(log1p(-x), -100) (torch's BCE clamp), with a 0 gradient, not NaN, where x is
    exactly 0 (or 1); outside [0, 1] the log gives NaN, as the value is meaningless there."""
    ok = x != (1.0 if one_minus else 0.0)
    safe = _C.where(ok, x, 0.0 if one_minus else 1.0)
    lg = (-safe).log1p() if one_minus else safe.log()
    return _C.where(ok, lg, -100.0).clamp(min=-100.0)


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None, reduction="mean"):
    """-weight * (y log(x) + (1 - y) log(1 - x)), each log clamped at -100 as torch. input holds probabilities
    (not checked: that would be a sync point); target has input's shape; weight broadcasts to it."""
    op = "binary_cross_entropy"
    reduction = _reduction(size_average, reduce, reduction, op)
    _check_reduction(reduction, op)
    _check_tensor(input, op)
    target, weight = _float_tensor(target, op, "target"), _float_tensor(weight, op, "weight")
    _same_shape(input, target, op)
    _broadcasts_to(weight, input.shape, op, "weight")
    input, target, weight = _to_float32(input, target, weight)
    loss = -(target * _log100(input) + (1.0 - target) * _log100(input, one_minus=True))
    return _reduce(loss if weight is None else loss * weight, reduction, op)


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None, reduction="mean",
                                     pos_weight=None):
    """BCE of sigmoid(x) in the stable form (1 - y) x + l * softplus(-x), with l = 1 + (pos_weight - 1) y:
    without pos_weight that is max(x, 0) - x y + log1p(exp(-|x|)), finite for any finite x. pos_weight weighs the
    positive term and broadcasts over the last (class) dim; weight broadcasts to the input."""
    op = "binary_cross_entropy_with_logits"
    reduction = _reduction(size_average, reduce, reduction, op)
    _check_reduction(reduction, op)
    _check_tensor(input, op)
    target = _float_tensor(target, op, "target")
    weight, pos_weight = _float_tensor(weight, op, "weight"), _float_tensor(pos_weight, op, "pos_weight")
    _same_shape(input, target, op)
    _broadcasts_to(weight, input.shape, op, "weight")
    _broadcasts_to(pos_weight, input.shape, op, "pos_weight")
    input, target, weight, pos_weight = _to_float32(input, target, weight, pos_weight)
    sp = _softplus(-input)
    if pos_weight is not None:
        sp = sp * ((pos_weight - 1.0) * target + 1.0)
    loss = (1.0 - target) * input + sp
    return _reduce(loss if weight is None else loss * weight, reduction, op)


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None, reduction="mean"):
    """-weight[y] * input[y], input log-probabilities (C,), (N, C) or (N, C, d...) and int32 targets of input's
    shape without the class dim (numpy int64 uploaded). Targets equal to ignore_index count neither in the sum
    nor in the mean's divisor (the sum of the other targets' weights); a target outside [0, C) raises IndexError
    at the next sync point (gather checks it on the device)."""
    op = "nll_loss"
    reduction = _reduction(size_average, reduce, reduction, op)
    _check_reduction(reduction, op)
    _check_tensor(input, op)
    if input.ndim == 0:
        raise ValueError(f"{op}: input must have a class dim, got a 0-d tensor")
    if not isinstance(target, _C.Tensor):
        target = _C.tensor(np.asarray(target))
    if target.dtype != np.int32:
        raise TypeError(f"{op}: target must hold int32 class indices (tlgpu's long), got {target.dtype}")
    cdim = 0 if input.ndim == 1 else 1
    c = input.shape[cdim]
    want = tuple(input.shape[:cdim]) + tuple(input.shape[cdim + 1:])
    if tuple(target.shape) != want:
        raise ValueError(f"{op}: input {tuple(input.shape)} wants targets of shape {want}, got {tuple(target.shape)}")
    weight = _float_tensor(weight, op, "weight")
    if weight is not None and tuple(weight.shape) != (c,):
        raise ValueError(f"{op}: weight must be ({c},), one per class, got {tuple(weight.shape)}")
    (input,) = _to_float32(input)
    ignored = target == ignore_index                    # float mask
    safe = target.masked_fill(ignored, 0)               # ignored targets read class 0, weighted 0
    keep = 1.0 - ignored
    wt = keep if weight is None else weight.gather(0, safe.reshape(-1)).reshape(*want) * keep
    loss = -input.gather(cdim, safe.unsqueeze(cdim)).squeeze(cdim) * wt
    if reduction == "mean":
        return loss.sum() / wt.sum()
    return loss.sum() if reduction == "sum" else loss


def _xlogx(t):
    """t log t with 0 log 0 = 0 (torch's xlogy) and no NaN gradient at 0; a negative t gives NaN, as torch."""
    return t * _C.where(t == 0, 1.0, t).log()


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    """target * (log(target) - input) pointwise, input log-probabilities, target probabilities (or
    log-probabilities with log_target=True). reduction='batchmean' is the sum over the batch size (input.shape[0]),
    the KL divergence's definition; 'mean' divides by every element and warns, as torch."""
    op = "kl_div"
    reduction = _reduction(size_average, reduce, reduction, op)
    _check_reduction(reduction, op, ("batchmean",))
    if reduction == "mean":
        warnings.warn("kl_div: reduction='mean' divides the total loss by both the batch size and the support size; "
                      "'batchmean' divides only by the batch size, and aligns with the KL div math definition "
                      "(as torch warns)", stacklevel=2)
    _check_tensor(input, op)
    target = _float_tensor(target, op, "target")
    try:
        np.broadcast_shapes(tuple(input.shape), tuple(target.shape))
    except ValueError:
        raise ValueError(f"{op}: input {tuple(input.shape)} and target {tuple(target.shape)} do not broadcast") \
            from None
    input, target = _to_float32(input, target)
    loss = target.exp() * (target - input) if log_target else _xlogx(target) - target * input
    if reduction == "batchmean":
        s = loss.sum()
        return s / input.shape[0] if input.ndim else s
    return _reduce(loss, reduction, op)


def _clamp_min_straight(t, eps):
    """max(t, eps) with t's own gradient (torch clamps these in place under no_grad)."""
    return t + (t.detach().clamp(min=float(eps)) - t.detach())


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """0.5 * (log(max(var, eps)) + (input - target)**2 / max(var, eps)) (+ 0.5 log(2 pi) with full=True); var has
    input's shape, or lacks its last dim, or has 1 there (one variance for all). var is clamped with its
    gradient unchanged, as torch. torch raises ValueError on a negative var tensor entry, which would be a sync
    point: tlgpu reads nothing back, and clamps it like any other var below eps (a float var is checked)."""
    op = "gaussian_nll_loss"
    _check_reduction(reduction, op)
    _check_tensor(input, op)
    target = _float_tensor(target, op, "target")
    if isinstance(var, (int, float)) and not isinstance(var, bool):
        if var < 0:
            raise ValueError(f"{op}: var has a negative entry ({var})")
        var = _C.full(tuple(input.shape), float(var), dtype=input.dtype)
    var = _float_tensor(var, op, "var")
    shp, vs = tuple(input.shape), tuple(var.shape)
    if vs != shp:
        if shp[:-1] == vs:
            var = var.unsqueeze(-1)
        elif not (len(vs) == len(shp) and vs[:-1] == shp[:-1] and vs[-1] == 1):
            raise ValueError(f"{op}: var of shape {vs} is of incorrect size for input {shp} (it has the input's "
                             "shape, the input's shape without its last dim, or 1 as its last dim)")
    _broadcasts_to(target, input.shape, op, "target")
    if eps < 0:
        raise ValueError(f"{op}: eps must be >= 0, got {eps}")
    input, target, var = _to_float32(input, target, var)
    var = _clamp_min_straight(var, eps)
    loss = (var.log() + (input - target).square() / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction, op)


# ---- distances ----

def _broadcast_pair(x1, x2, op):
    _check_tensor(x1, op, "x1")
    _check_tensor(x2, op, "x2")
    try:
        shape = tuple(np.broadcast_shapes(tuple(x1.shape), tuple(x2.shape)))
    except ValueError:
        raise ValueError(f"{op}: x1 {tuple(x1.shape)} and x2 {tuple(x2.shape)} do not broadcast") from None
    return _to_float32(*(x if tuple(x.shape) == shape else x.expand(*shape) for x in (x1, x2)))


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """sum(x1 / max(||x1||, eps) * x2 / max(||x2||, eps)) along dim, after broadcasting x1 and x2 (torch's
    form: each divided by its own clamped norm, the clamp not touching the gradient)."""
    x1, x2 = _broadcast_pair(x1, x2, "cosine_similarity")
    n1 = _clamp_min_straight(x1.norm(dim=dim, keepdim=True), eps)
    n2 = _clamp_min_straight(x2.norm(dim=dim, keepdim=True), eps)
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """||x1 - x2 + eps||_p over the last dim (torch adds eps to the difference)."""
    x1, x2 = _broadcast_pair(x1, x2, "pairwise_distance")
    d = x1 - x2 + float(eps)
    if d.ndim == 0:
        d = d.reshape(1)
    return _vnorm(d, p, -1, keepdim, "pairwise_distance")


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """softmax((logits + g) / tau) along dim, g Gumbel(0, 1) noise from the device RNG (tlgpu.manual_seed). hard:
    the one-hot of the argmax in the forward pass, the soft sample's gradient (y_hard - y_soft.detach() + y_soft).
    eps is deprecated and ignored, as in torch."""
    _check_tensor(logits, "gumbel_softmax", "logits")
    if eps != 1e-10:
        warnings.warn("gumbel_softmax: `eps` parameter is deprecated and has no effect.", stacklevel=2)
    if not tau > 0:
        raise ValueError(f"gumbel_softmax: tau must be > 0, got {tau}")
    with no_grad():                                  # -log(E), E ~ Exp(1) = -log1p(-U), never 0 or inf
        e = (-(-_C.rand(*logits.shape)).log1p()).clamp(min=np.finfo(np.float32).tiny)
        g = -e.log()
    if g.dtype != logits.dtype:
        g = g.to(logits.dtype)
    y = ((logits + g) / float(tau)).softmax(dim)
    if not hard:
        return y
    d = dim % y.ndim
    idx = y.argmax(d, keepdims=True)
    ar = _C.arange(y.shape[d]).reshape(*([1] * d), y.shape[d], *([1] * (y.ndim - d - 1)))
    y_hard = (idx == ar)
    if y_hard.dtype != y.dtype:
        y_hard = y_hard.to(y.dtype)
    return y_hard - y.detach() + y
