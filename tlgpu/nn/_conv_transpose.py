"""torch.nn.functional's transposed convolutions and resampling: conv_transpose1d / conv_transpose2d, interpolate
and the deprecated upsample / upsample_nearest / upsample_bilinear. All are compositions of differentiable C ops
(autograd comes from them); functional.py re-exports __all__; the modules are in nn/_conv_transpose_modules.py.

conv_transpose2d is the adjoint of conv2d: the input with stride - 1 zeros inserted between its elements (a pad of
a unit axis and a reshape), padded by dilation * (k - 1) - padding (+ output_padding at the end; a negative amount
crops), then a stride-1 conv2d with the kernel flipped and its in / out axes swapped. groups > 1 runs one conv2d
per group. The inserted zeros cost stride**2 times the products of a direct col2im; no new kernel is needed.

interpolate picks source indices and weights on the host with torch's float32 arithmetic (its CPU kernels' index
rules, float32 `scale * (dst + 0.5) - 0.5` clamped at 0 and all), cached per size, and resamples one spatial axis at
a time with index_select (linear: two index_selects and their weights; bicubic: four)."""
import math

import numpy as np

from .. import _C
from ..autograd import _is_int
from ._fbase import _check_tensor
from ._functional_layers import adaptive_avg_pool1d, adaptive_avg_pool2d
from ._functional_more import pad as _pad

__all__ = ["conv_transpose1d", "conv_transpose2d", "interpolate", "upsample", "upsample_nearest", "upsample_bilinear"]


def _shape(t):
    return tuple(t.shape)


def _ints(v, n, op, name, low):
    """An int or n ints, each >= low, as a tuple of n ints (torch's _pair / _single)."""
    t = (v,) * n if _is_int(v) else tuple(v) if isinstance(v, (tuple, list)) else None
    if t is None or len(t) != n or not all(_is_int(e) and not isinstance(e, bool) and e >= low for e in t):
        raise ValueError(f"{op}: {name} must be an int or {n} ints, each >= {low}, got {v!r}")
    return tuple(int(e) for e in t)


def _insert_zeros(x, strides):
    """(N, C, *sizes) with stride - 1 zeros after each element of the trailing axes: sizes * stride long, the
    last stride - 1 entries of each axis zeros (the caller crops them)."""
    if all(s == 1 for s in strides):
        return x
    lead, sizes = _shape(x)[:2], _shape(x)[2:]
    y = x.reshape(*lead, *[v for n in sizes for v in (n, 1)])
    amounts = []
    for s in reversed(strides):                         # (unit axis, size axis) pairs from the last dim back
        amounts += [0, s - 1, 0, 0]
    return _pad(y, tuple(amounts[:-2])).reshape(*lead, *[n * s for n, s in zip(sizes, strides)])


def _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, dims, op):
    """The shared body: dims = 1 or 2 spatial axes; input (N, C_in, *) or unbatched (C_in, *); weight
    (C_in, C_out / groups, *k)."""
    _check_tensor(input, op)
    _check_tensor(weight, op, "weight")
    if input.ndim not in (dims + 1, dims + 2):
        raise ValueError(f"{op}: input must be {dims + 2}-D (N, C_in, ...) or {dims + 1}-D (C_in, ...), got shape "
                         f"{_shape(input)}")
    if weight.ndim != dims + 2:
        raise ValueError(f"{op}: weight must be (C_in, C_out / groups, {', '.join(['k'] * dims)}), got shape "
                         f"{_shape(weight)}")
    if not _is_int(groups) or isinstance(groups, bool) or groups < 1:
        raise ValueError(f"{op}: groups must be a positive int, got {groups!r}")
    s, p = _ints(stride, dims, op, "stride", 1), _ints(padding, dims, op, "padding", 0)
    q, d = _ints(output_padding, dims, op, "output_padding", 0), _ints(dilation, dims, op, "dilation", 1)
    cin, cg, k = weight.shape[0], weight.shape[1], _shape(weight)[2:]
    c = input.shape[-dims - 1]
    if c != cin:
        raise ValueError(f"{op}: weight of shape {_shape(weight)} expects {cin} input channels, but input "
                         f"{_shape(input)} has {c}")
    if cin % groups:
        raise ValueError(f"{op}: in channels ({cin}) must be divisible by groups ({groups})")
    if any(qi >= si and qi >= di for qi, si, di in zip(q, s, d)):
        raise ValueError(f"{op}: output_padding {q} must be smaller than either stride {s} or dilation {d}")
    cout = cg * groups
    if bias is not None:
        _check_tensor(bias, op, "bias")
        if _shape(bias) != (cout,):
            raise ValueError(f"{op}: bias must have shape ({cout},) for {cout} output channels, got {_shape(bias)}")
    sizes = _shape(input)[-dims:]
    out = tuple((n - 1) * si - 2 * pi + di * (ki - 1) + qi + 1 for n, si, pi, di, ki, qi in zip(sizes, s, p, d, k, q))
    if any(n < 1 for n in sizes) or any(o < 1 for o in out):
        raise ValueError(f"{op}: input {_shape(input)} gives output size {out}, which is too small (stride {s}, "
                         f"padding {p}, dilation {d}, kernel {k})")
    x = input if input.ndim == dims + 2 else input.unsqueeze(0)
    if dims == 1:
        x, weight = x.unsqueeze(2), weight.unsqueeze(2)
        s, p, q, d, k = (1,) + s, (0,) + p, (0,) + q, (1,) + d, (1,) + k
    x = _insert_zeros(x, s)
    amounts = []
    for si, pi, qi, di, ki in reversed(list(zip(s, p, q, d, k))):
        lo = di * (ki - 1) - pi
        amounts += [lo, lo + qi - (si - 1)]
    if any(amounts):
        x = _pad(x, tuple(amounts))
    w = weight.flip((2, 3))
    if groups == 1:
        y = _C.conv2d(x, w.transpose(0, 1), bias, 1, 0, d)
    else:
        ig = cin // groups
        ys = [_C.conv2d(x[:, g * ig:(g + 1) * ig], w[g * ig:(g + 1) * ig].transpose(0, 1), None, 1, 0, d)
              for g in range(groups)]
        y = _C.cat(ys, 1)
        if bias is not None:
            y = y + bias.reshape(cout, 1, 1)
    if dims == 1:
        y = y.squeeze(2)
    return y if input.ndim == dims + 2 else y.squeeze(0)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """torch's F.conv_transpose2d: (N, C_in, H, W) or (C_in, H, W) input, weight (C_in, C_out / groups, kH, kW);
    output size (H - 1) * stride - 2 * padding + dilation * (kH - 1) + output_padding + 1 per axis. The adjoint of
    conv2d with the same weight, run as a conv2d over the zero-inserted, padded input (module docstring)."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 2,
                           "conv_transpose2d")


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1):
    """torch's F.conv_transpose1d: (N, C_in, L) or (C_in, L) input, weight (C_in, C_out / groups, K):
    conv_transpose2d over a unit height."""
    return _conv_transpose(input, weight, bias, stride, padding, output_padding, groups, dilation, 1,
                           "conv_transpose1d")


# ---- interpolate ----

_MODES = {"nearest": (1, 2, 3), "nearest-exact": (1, 2, 3), "linear": (1,), "bilinear": (2,), "trilinear": (3,),
          "bicubic": (2,), "area": (1, 2)}
_TABLES = {}


def _cached(key, make):
    if key not in _TABLES:
        if len(_TABLES) > 512:                            # many sizes seen: start over rather than grow
            _TABLES.clear()
        _TABLES[key] = make()
    return _TABLES[key]


def _inv_scale(n, o, scale):
    """torch's compute_scales_value<float>: 1 / scale_factor when one was given (and > 0), else in / out."""
    return np.float32(1.0 / scale) if scale is not None and scale > 0 else np.float32(n) / np.float32(o)


def _nearest_index(n, o, scale, exact, shortcuts):
    """Source index of each output position: min(floor(dst * r), n - 1), or floor((dst + 0.5) * r) for
    nearest-exact, r = 1 / scale_factor or n / o in float32 (torch's CPU kernels). torch's 2-d 'nearest' kernel
    (nearest_idx) copies when o == n and takes dst // 2 when o == 2 n whatever the scale_factor; its 1-d and 3-d
    kernels do not (shortcuts says which)."""
    if shortcuts and o == n:
        return None
    if shortcuts and o == 2 * n:
        return np.arange(o) >> 1
    r = _inv_scale(n, o, scale)
    dst = np.arange(o, dtype=np.float32)
    src = np.floor((dst + np.float32(0.5)) * r if exact else dst * r)
    return np.minimum(src.astype(np.int64), n - 1)


def _source_index(n, o, scale, align_corners, cubic):
    """torch's area_pixel_compute_source_index in float32 (clamped at 0 except for cubic)."""
    dst = np.arange(o, dtype=np.float32)
    if align_corners:
        r = np.float32(n - 1) / np.float32(o - 1) if o > 1 else np.float32(0.0)
        return r * dst
    src = _inv_scale(n, o, scale) * (dst + np.float32(0.5)) - np.float32(0.5)
    return src if cubic else np.maximum(src, np.float32(0.0))


def _cubic(x, first):
    """torch's cubic_convolution1 (|x| <= 1) or cubic_convolution2 (1 < |x| < 2), A = -0.75, in float32."""
    a = np.float32(-0.75)
    if first:
        return ((a + np.float32(2)) * x - (a + np.float32(3))) * x * x + np.float32(1)
    return ((a * x - np.float32(5) * a) * x + np.float32(8) * a) * x - np.float32(4) * a


def _taps(n, o, scale, align_corners, cubic):
    """[(source indices, weights)] per tap, torch's compute_source_index_and_lambda (linear: 2 taps) or its bicubic
    coefficients (4 taps at floor(src) - 1 .. + 2, indices clamped into the input), in float32. None when o == n
    (a copy) for linear; torch's bicubic kernel never copies (a scale_factor other than 1 may keep the size)."""
    if o == n and not cubic:
        return None
    src = _source_index(n, o, scale, align_corners, cubic)
    i0 = np.minimum(np.floor(src).astype(np.int64), n - 1)
    t = np.clip(src - i0.astype(np.float32), np.float32(0.0), np.float32(1.0)).astype(np.float32)
    if not cubic:
        return [(i0, (np.float32(1.0) - t).astype(np.float32)), (i0 + (i0 < n - 1), t)]
    u = (np.float32(1.0) - t).astype(np.float32)
    ws = (_cubic(t + np.float32(1), False), _cubic(t, True), _cubic(u, True), _cubic(u + np.float32(1), False))
    return [(np.clip(i0 - 1 + k, 0, n - 1), w.astype(np.float32)) for k, w in enumerate(ws)]


def _index_tensor(i):
    return _C.tensor(np.ascontiguousarray(i, dtype=np.int32))


def _resample_axis(x, axis, o, scale, mode, align_corners):
    n = x.shape[axis]
    if mode in ("nearest", "nearest-exact"):
        key = ("nearest", n, o, scale, mode == "nearest-exact", mode == "nearest" and x.ndim == 4)

        def make_index():
            idx = _nearest_index(n, o, scale, key[4], key[5])
            return None if idx is None or np.array_equal(idx, np.arange(n)) else _index_tensor(idx)
        idx = _cached(key, make_index)
        return x if idx is None else x.index_select(axis, idx)

    dtype, cubic = str(x.dtype), mode == "bicubic"

    def make():
        taps = _taps(n, o, scale, align_corners, cubic)
        if taps is None:
            return None
        tail = (1,) * (x.ndim - 1 - axis)
        out = []
        for i, w in taps:
            lam = _C.tensor(w.reshape(o, *tail))
            out.append((_index_tensor(i), lam if dtype == "float32" else lam._convert(x.dtype)))   # torch's dtype
        return out
    key = ("taps", n, o, None if align_corners else scale, bool(align_corners), cubic, x.ndim - 1 - axis, dtype)
    taps = _cached(key, make)
    if taps is None:
        return x
    y = None
    for i, w in taps:
        term = x.index_select(axis, i) * w
        y = term if y is None else y + term
    return y


def _sizes(input, size, scale_factor, recompute_scale_factor, dims, op):
    """(output sizes, scale factors or Nones) as torch's interpolate computes them."""
    spatial = _shape(input)[2:]
    if size is not None and scale_factor is not None:
        raise ValueError(f"{op}: only one of size or scale_factor should be defined")
    if size is None and scale_factor is None:
        raise ValueError(f"{op}: either size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError(f"{op}: recompute_scale_factor is not meaningful with an explicit size")
        out = tuple(size) if isinstance(size, (tuple, list)) else (size,) * dims
        if len(out) != dims:
            raise ValueError(f"{op}: input with spatial dims {list(spatial)} needs {dims} output sizes, got size "
                             f"{size!r}")
        if not all(_is_int(v) and not isinstance(v, bool) for v in out):
            raise TypeError(f"{op}: size must be an int or a tuple of ints, got {size!r}")
        scales = (None,) * dims
    else:
        scales = tuple(scale_factor) if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * dims
        if len(scales) != dims:
            raise ValueError(f"{op}: input with spatial dims {list(spatial)} needs {dims} scale factors, got "
                             f"scale_factor {scale_factor!r}")
        if not all(isinstance(v, (int, float, np.number)) and not isinstance(v, bool) for v in scales):
            raise TypeError(f"{op}: scale_factor must be a number or a tuple of numbers, got {scale_factor!r}")
        scales = tuple(float(v) for v in scales)
        out = tuple(math.floor(float(n) * f) for n, f in zip(spatial, scales))
        if recompute_scale_factor:
            scales = (None,) * dims
    out = tuple(int(v) for v in out)
    if any(v < 1 for v in out) or any(n < 1 for n in spatial):
        raise ValueError(f"{op}: input {_shape(input)} and output sizes {out} must be non-empty")
    return out, scales


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None, recompute_scale_factor=None,
                antialias=False):
    """torch's F.interpolate over (N, C, *spatial) input: mode 'nearest' / 'nearest-exact' (1-3 spatial dims),
    'linear' (3-D input), 'bilinear' and 'bicubic' (4-D; bicubic A = -0.75, edge taps clamped into the input),
    'trilinear' (5-D), 'area' (3-D or 4-D: adaptive average pooling). size or scale_factor (the output size is
    floor(in * scale_factor); the given factor, not in / out, sets the source index unless recompute_scale_factor).
    Source indices and weights follow torch's float32 index rules (module docstring). Differentiable wrt input.
    antialias=True is not supported."""
    op = "interpolate"
    _check_tensor(input, op)
    if mode not in _MODES:
        raise ValueError(f"{op}: mode must be one of {sorted(_MODES)}, not {mode!r}")
    if mode in ("nearest", "nearest-exact", "area"):
        if align_corners is not None:
            raise ValueError(f"{op}: align_corners option can only be set with the interpolating modes: linear | "
                             f"bilinear | bicubic | trilinear (got mode {mode!r})")
    elif align_corners is None:
        align_corners = False
    if antialias:
        raise NotImplementedError(f"{op}: antialias=True is not supported")
    dims = input.ndim - 2
    if dims not in _MODES[mode]:
        want = " or ".join(f"{d + 2}-D" for d in _MODES[mode])
        raise ValueError(f"{op}: mode {mode!r} needs {want} input (N, C, ...), got shape {_shape(input)}")
    out, scales = _sizes(input, size, scale_factor, recompute_scale_factor, dims, op)
    if mode == "area":
        return (adaptive_avg_pool1d if dims == 1 else adaptive_avg_pool2d)(input, out)
    y = input
    for i in range(dims):
        y = _resample_axis(y, 2 + i, out[i], scales[i], mode, align_corners)
    return input.clone() if y is input else y                  # a new tensor, as torch's


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """torch's deprecated F.upsample: interpolate."""
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    """torch's deprecated F.upsample_nearest: interpolate(mode='nearest')."""
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    """torch's deprecated F.upsample_bilinear: interpolate(mode='bilinear', align_corners=True)."""
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
