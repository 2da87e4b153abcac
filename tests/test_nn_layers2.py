"""nn/_conv_transpose.py, nn/_conv_transpose_modules.py, nn/_decoder.py and init.trunc_normal_ against float64 numpy
references on random inputs: conv_transpose1d/2d against a direct scatter-form loop and as conv2d's adjoint
(<conv2d(v), x> == <v, conv_transpose2d(x)>), interpolate against a per-element implementation of torch's index rules
plus values read from torch 2.13 by hand, TransformerDecoderLayer / TransformerDecoder against a numpy forward of
the same weights, trunc_normal_ against the truncated normal's CDF and moments; gradients by central differences
(gradcheck.py); torch 2.13's reprs of the norms and Dropout (hard-coded strings); errors naming the layer."""
import math
import warnings

import numpy as np
import pytest

import tlgpu
from tlgpu import nn
from tlgpu.nn import functional as F
from tlgpu.nn.init import _ndtri
from gradcheck import check

R = np.random.default_rng(77)


def T(a, **kw):
    return tlgpu.tensor(np.asarray(a, dtype=np.float32), **kw)


def f64(a):
    """a as float32 values in float64 (what tlgpu computes from)."""
    return np.asarray(a, dtype=np.float32).astype(np.float64)


def close(t, want, rtol=1e-4, atol=2e-5):
    np.testing.assert_allclose(t.numpy() if isinstance(t, tlgpu.Tensor) else t, want, rtol=rtol, atol=atol)


# ---- conv_transpose ----

def convt_ref(x, w, b, s, p, q, d, g):
    """The scatter form: input element (ih, iw) times kernel tap (kh, kw) lands on output (ih s - p + kh d, ...).
    x (N, C_in, *sp) with 1 or 2 spatial dims, w (C_in, C_out / g, *k); s, p, q, d tuples of that length."""
    one = x.ndim == 3
    if one:
        x, w = x[:, :, None], w[:, :, None]
        s, p, q, d = (1,) + s, (0,) + p, (0,) + q, (1,) + d
    n, cin, h, wd = x.shape
    cg, kh_, kw_ = w.shape[1:]
    ho = (h - 1) * s[0] - 2 * p[0] + d[0] * (kh_ - 1) + q[0] + 1
    wo = (wd - 1) * s[1] - 2 * p[1] + d[1] * (kw_ - 1) + q[1] + 1
    out = np.zeros((n, cg * g, ho, wo))
    ig = cin // g
    for gi in range(g):
        xs = x[:, gi * ig:(gi + 1) * ig]
        for kh in range(kh_):
            rows = np.arange(h) * s[0] - p[0] + kh * d[0]
            rk = (rows >= 0) & (rows < ho)
            for kw in range(kw_):
                cols = np.arange(wd) * s[1] - p[1] + kw * d[1]
                ck = (cols >= 0) & (cols < wo)
                c = np.einsum("nchw,co->nohw", xs, w[gi * ig:(gi + 1) * ig, :, kh, kw])
                out[:, gi * cg:(gi + 1) * cg][:, :, rows[rk][:, None], cols[ck][None, :]] += c[:, :, rk][:, :, :, ck]
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out[:, :, 0] if one else out


CT2 = [((1, 1), (0, 0), (0, 0), (1, 1), 1, (3, 3)), ((2, 2), (1, 1), (1, 1), (1, 1), 1, (3, 3)),
       ((2, 3), (1, 0), (1, 2), (1, 1), 1, (3, 4)), ((3, 2), (2, 1), (1, 0), (2, 1), 1, (3, 2)),
       ((2, 2), (1, 1), (0, 1), (1, 1), 2, (4, 4)), ((1, 1), (3, 3), (0, 0), (2, 2), 1, (3, 3)),
       ((2, 2), (2, 2), (1, 2), (3, 3), 3, (2, 2)), ((4, 1), (0, 0), (3, 0), (1, 1), 1, (2, 1))]


@pytest.mark.parametrize("s,p,q,d,g,k", CT2)
def test_conv_transpose2d_against_direct_loop(s, p, q, d, g, k):
    cin, cg = 6, 2 if g > 1 else 4
    x, w = f64(R.standard_normal((2, cin, 4, 5))), f64(R.standard_normal((cin, cg, *k)))
    b = f64(R.standard_normal(cg * g))
    want = convt_ref(x, w, b, s, p, q, d, g)
    close(F.conv_transpose2d(T(x), T(w), T(b), s, p, q, g, d), want)
    close(F.conv_transpose2d(T(x[0]), T(w), None, s, p, q, g, d), convt_ref(x[:1], w, None, s, p, q, d, g)[0])


@pytest.mark.parametrize("s,p,q,d,g", [(1, 0, 0, 1, 1), (2, 1, 1, 1, 1), (3, 2, 2, 2, 2), (2, 4, 0, 3, 1)])
def test_conv_transpose1d_against_direct_loop(s, p, q, d, g):
    x, w, b = f64(R.standard_normal((3, 4, 6))), f64(R.standard_normal((4, 3, 3))), f64(R.standard_normal(3 * g))
    close(F.conv_transpose1d(T(x), T(w), T(b), s, p, q, g, d), convt_ref(x, w, b, (s,), (p,), (q,), (d,), g))
    close(F.conv_transpose1d(T(x[1]), T(w), T(b), (s,), p, q, g, (d,)),
          convt_ref(x[1:2], w, b, (s,), (p,), (q,), (d,), g)[0])


@pytest.mark.parametrize("s,p,d,k", [(1, 0, 1, 3), (2, 1, 1, 3), (2, 0, 2, 2), (3, 1, 1, 4),
                                     ((2, 1), (0, 1), (1, 2), 3)])
def test_conv_transpose2d_is_conv2d_adjoint(s, p, d, k):
    """For every x, v: <conv2d(v, w), x> == <v, conv_transpose2d(x, w)> (the same weight), the definition of the
    transposed convolution; output_padding picks the output size for which conv2d maps back onto x's shape."""
    x, w = f64(R.standard_normal((2, 5, 4, 3))), f64(R.standard_normal((5, 3, k, k)))
    y = F.conv_transpose2d(T(x), T(w), None, s, p, 0, 1, d)
    v = f64(R.standard_normal(y.shape))
    cv = F.conv2d(T(v), T(w), None, s, p, d).numpy()
    assert cv.shape == x.shape
    lhs, rhs = np.sum(f64(cv) * x), np.sum(v * f64(y.numpy()))
    assert abs(lhs - rhs) <= 1e-4 * (np.sum(np.abs(v)) + 1), (lhs, rhs)


def test_conv_transpose_gradients():
    s, p, q, d = (2, 1), (1, 0), (1, 0), (1, 2)
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, s, p, q, 1, d),
          lambda x, w, b: convt_ref(x, w, b, s, p, q, d, 1),
          [R.standard_normal((1, 2, 3, 3)), R.standard_normal((2, 2, 2, 3)), R.standard_normal(2)])
    check(lambda x, w: F.conv_transpose2d(x, w, None, 2, 1, 1, 2),
          lambda x, w: convt_ref(x, w, None, (2, 2), (1, 1), (1, 1), (1, 1), 2),
          [R.standard_normal((1, 4, 2, 3)), R.standard_normal((4, 1, 3, 2))])
    check(lambda x, w, b: F.conv_transpose1d(x, w, b, 3, 1, 2, 1, 2),
          lambda x, w, b: convt_ref(x, w, b, (3,), (1,), (2,), (2,), 1),
          [R.standard_normal((2, 2, 4)), R.standard_normal((2, 3, 2)), R.standard_normal(3)])


def test_conv_transpose_modules_init_output_size_repr_and_state_dict():
    m = nn.ConvTranspose2d(4, 6, (3, 2), stride=2, padding=1, groups=2)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    assert m.weight.shape == (4, 3, 3, 2) and m.bias.shape == (6,)
    bound = 1 / math.sqrt(3 * 3 * 2)                              # fan_in = out / groups * kH * kW, as torch
    wv = m.weight.numpy()
    assert np.abs(wv).max() <= bound and np.abs(wv).max() > 0.7 * bound and np.abs(m.bias.numpy()).max() <= bound
    x = f64(R.standard_normal((2, 4, 3, 4)))
    sd = {k: f64(R.standard_normal(v.shape)) for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    want = convt_ref(x, sd["weight"], sd["bias"], (2, 2), (1, 1), (0, 0), (1, 1), 2)
    close(m(T(x)), want)
    assert m(T(x)).shape == (2, 6, 5, 6)
    y = m(T(x), output_size=[6, 7])                              # output_padding (1, 1) chosen from the size
    close(y, convt_ref(x, sd["weight"], sd["bias"], (2, 2), (1, 1), (1, 1), (1, 1), 2))
    assert m(T(x), output_size=(2, 6, 6, 6)).shape == (2, 6, 6, 6)
    with pytest.raises(ValueError, match="ConvTranspose2d: requested an output size of \\[7, 7\\]"):
        m(T(x), output_size=(7, 7))
    assert repr(m) == "ConvTranspose2d(4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), groups=2)"
    assert repr(nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1, bias=False, dilation=2)) == (
        "ConvTranspose2d(3, 4, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2), "
        "output_padding=(1, 1), bias=False)")
    m1 = nn.ConvTranspose1d(3, 4, 3, stride=2, output_padding=1)
    assert repr(m1) == "ConvTranspose1d(3, 4, kernel_size=(3,), stride=(2,), output_padding=(1,))"
    x1 = f64(R.standard_normal((2, 3, 5)))
    close(m1(T(x1)), convt_ref(x1, f64(m1.weight.numpy()), f64(m1.bias.numpy()), (2,), (0,), (1,), (1,), 1))
    assert m1(T(x1), output_size=[11]).shape == (2, 4, 11)
    m1(T(x1)).sum().backward()
    assert m1.weight.grad.shape == (3, 4, 3) and m1.bias.grad is not None


def test_conv_transpose_errors():
    x, w = T(R.standard_normal((2, 4, 3, 3))), T(R.standard_normal((4, 2, 3, 3)))
    cases = [(TypeError, "conv_transpose2d: input must be a tlgpu Tensor", lambda: F.conv_transpose2d(x.numpy(), w)),
             (ValueError, "conv_transpose2d: input must be 4-D", lambda: F.conv_transpose2d(x[0, 0], w)),
             (ValueError, "conv_transpose2d: weight must be", lambda: F.conv_transpose2d(x, w[0])),
             (ValueError, "expects 4 input channels", lambda: F.conv_transpose2d(x[:, :3], w)),
             (ValueError, "divisible by groups", lambda: F.conv_transpose2d(x, w, groups=3)),
             (ValueError, "output_padding \\(2, 2\\) must be smaller", lambda: F.conv_transpose2d(x, w, None, 2, 0, 2)),
             (ValueError, "bias must have shape \\(2,\\)", lambda: F.conv_transpose2d(x, w, T(np.ones(3)))),
             (ValueError, "stride must be an int or 2 ints", lambda: F.conv_transpose2d(x, w, None, 0)),
             (ValueError, "too small", lambda: F.conv_transpose2d(x, w, None, 1, 3)),
             (ValueError, "conv_transpose1d: input must be 3-D", lambda: F.conv_transpose1d(x, w)),
             (ValueError, "ConvTranspose2d: in_channels \\(3\\)", lambda: nn.ConvTranspose2d(3, 4, 2, groups=2)),
             (ValueError, "ConvTranspose1d: only 'zeros' padding mode",
              lambda: nn.ConvTranspose1d(2, 2, 2, padding_mode="reflect")),
             (ValueError, "ConvTranspose2d: input must be 4-D", lambda: nn.ConvTranspose2d(4, 2, 3)(x[0, 0]))]
    for exc, match, fn in cases:
        with pytest.raises(exc, match=match):
            fn()


# ---- interpolate ----

def _inv(n, o, scale):
    return np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(o)


def src_nearest(dst, n, o, scale, exact, shortcuts):
    """torch's source index of one output position, its float32 arithmetic (CPU kernels)."""
    if shortcuts and o == n:
        return dst
    if shortcuts and o == 2 * n:
        return dst // 2
    v = (np.float32(dst) + np.float32(0.5)) * _inv(n, o, scale) if exact else np.float32(dst) * _inv(n, o, scale)
    return min(int(math.floor(v)), n - 1)


def src_linear(dst, n, o, scale, align):
    """(i0, i1, l0, l1) for one output position: torch's area_pixel_compute_source_index and
    guard_index_and_lambda in float32; a copy when o == n."""
    if o == n:
        return dst, dst, 1.0, 0.0
    if align:
        r = np.float32(n - 1) / np.float32(o - 1) if o > 1 else np.float32(0)
        v = r * np.float32(dst)
    else:
        v = max(_inv(n, o, scale) * (np.float32(dst) + np.float32(0.5)) - np.float32(0.5), np.float32(0))
    i0 = min(int(math.floor(v)), n - 1)
    l1 = min(max(float(v - np.float32(i0)), 0.0), 1.0)
    return i0, i0 + (i0 < n - 1), 1.0 - l1, l1


def src_cubic(dst, n, o, scale, align):
    """[(index, weight)] of torch's 4 bicubic taps for one output position (A = -0.75, indices clamped)."""
    if align:
        v = (np.float32(n - 1) / np.float32(o - 1) if o > 1 else np.float32(0)) * np.float32(dst)
    else:
        v = _inv(n, o, scale) * (np.float32(dst) + np.float32(0.5)) - np.float32(0.5)        # not clamped at 0
    i0 = min(int(math.floor(v)), n - 1)
    t = min(max(float(v - np.float32(i0)), 0.0), 1.0)
    a = -0.75

    def near(z):
        return ((a + 2) * z - (a + 3)) * z * z + 1

    def far(z):
        return ((a * z - 5 * a) * z + 8 * a) * z - 4 * a
    return [(min(max(i0 - 1 + k, 0), n - 1), w) for k, w in enumerate((far(t + 1), near(t), near(1 - t), far(2 - t)))]


def interp_ref(x, out, scales, mode, align):
    """float64 resampling, one (o, n) matrix per spatial axis, filled one output position at a time."""
    y = x
    for ax, (o, sc) in enumerate(zip(out, scales)):
        n = x.shape[2 + ax]
        m = np.zeros((o, n))
        for i in range(o):
            if mode.startswith("nearest"):
                m[i, src_nearest(i, n, o, sc, mode == "nearest-exact", mode == "nearest" and x.ndim == 4)] = 1
            elif mode == "bicubic":
                for j, w in src_cubic(i, n, o, sc, align):
                    m[i, j] += w
            else:
                i0, i1, l0, l1 = src_linear(i, n, o, sc, align)
                m[i, i0] += l0
                m[i, i1] += l1
        y = np.moveaxis(np.tensordot(m, np.moveaxis(y, 2 + ax, 0), 1), 0, 2 + ax)
    return y


INTERP = [("nearest", (7,), dict(size=10)), ("nearest", (4,), dict(scale_factor=2.1)),
          ("nearest", (5, 3), dict(scale_factor=(1.7, 2.1))), ("nearest", (4, 6), dict(size=(8, 4))),
          ("nearest", (3, 2, 4), dict(scale_factor=(1.5, 2.0, 0.75))), ("nearest-exact", (5, 4), dict(size=(3, 9))),
          ("nearest-exact", (6,), dict(scale_factor=1.3)), ("linear", (5,), dict(size=12)),
          ("linear", (4,), dict(scale_factor=1.7)), ("linear", (7,), dict(size=3)),
          ("bilinear", (4, 5), dict(size=(7, 3))), ("bilinear", (3, 4), dict(scale_factor=(2.5, 0.6))),
          ("bilinear", (5, 5), dict(scale_factor=2, recompute_scale_factor=True)),
          ("trilinear", (2, 3, 4), dict(scale_factor=(2.0, 1.4, 0.5))), ("bilinear", (1, 4), dict(size=(3, 1))),
          ("bicubic", (4, 5), dict(size=(9, 3))), ("bicubic", (5, 3), dict(scale_factor=(1.0, 1.13))),
          ("bicubic", (2, 6), dict(scale_factor=(2.7, 0.45), recompute_scale_factor=True))]


@pytest.mark.parametrize("mode,spatial,kw,align", [c + (a,) for c in INTERP for a in (False, True)
                                                   if not (a and c[0].startswith("nearest"))])
def test_interpolate_against_torch_index_rules(mode, spatial, kw, align):
    x = f64(R.standard_normal((2, 3) + spatial))
    sf = kw.get("scale_factor")
    dims = len(spatial)
    if sf is None:
        out = kw["size"] if isinstance(kw["size"], tuple) else (kw["size"],) * dims
        scales = (None,) * dims
    else:
        sf = sf if isinstance(sf, tuple) else (sf,) * dims
        out = tuple(math.floor(n * f) for n, f in zip(spatial, sf))
        scales = (None,) * dims if kw.get("recompute_scale_factor") else sf
    ac = None if mode.startswith("nearest") else align
    y = F.interpolate(T(x), mode=mode, align_corners=ac, **kw)
    assert y.shape == (2, 3) + out
    want = interp_ref(x, out, scales, mode, align)
    close(y, want, 1e-5, 1e-5)
    if mode.startswith("nearest"):
        assert np.array_equal(y.numpy(), want.astype(np.float32))    # a pure gather: exact


def test_interpolate_values_read_from_torch():
    """torch 2.13's outputs for an arange input, copied by hand: the 2-d nearest kernel's o == 2n shortcut (and its
    absence in 1-d), float32 index arithmetic (n=2, o=82: position 41 reads 0, not 41 * 2 / 82 = 1), the source
    index clamped at 0, the given scale_factor used over in / out."""
    def a(*shape):
        return T(np.arange(np.prod(shape)).reshape(1, 1, *shape))
    assert F.interpolate(a(4), scale_factor=2.1).numpy().ravel().tolist() == [0, 0, 0, 1, 1, 2, 2, 3]
    assert F.interpolate(a(1, 4), scale_factor=2.1).numpy()[0, 0, 0].tolist() == [0, 0, 1, 1, 2, 2, 3, 3]
    assert F.interpolate(a(4), scale_factor=2.1, recompute_scale_factor=True).numpy().ravel().tolist() == \
        [0, 0, 1, 1, 2, 2, 3, 3]
    assert F.interpolate(a(3), scale_factor=1.2).numpy().ravel().tolist() == [0, 0, 1]
    assert F.interpolate(a(1, 3), scale_factor=1.2).numpy().ravel().tolist() == [0, 1, 2]
    assert F.interpolate(a(7), size=10).numpy().ravel().tolist() == [0, 0, 1, 2, 2, 3, 4, 4, 5, 6]
    assert F.interpolate(a(2), size=82).numpy()[0, 0, 41] == 0
    assert F.interpolate(a(5), size=3, mode="nearest-exact").numpy().ravel().tolist() == [0, 2, 4]
    close(F.interpolate(a(3), size=5, mode="linear"), np.float32([[[0.0, 0.40000004, 1.0, 1.6000001, 2.0]]]), 0, 0)
    close(F.interpolate(a(4), scale_factor=1.7, mode="linear"),
          np.float32([[[0.0, 0.38235298, 0.97058833, 1.5588236, 2.147059, 2.7352943]]]), 1e-6, 0)  # 1 ulp: FMA
    close(F.interpolate(a(4), size=7, mode="linear", align_corners=True), [[np.arange(7) / 2]], 0, 0)
    close(F.interpolate(a(3), scale_factor=1.2, mode="linear"), [[[0.0, 1.0, 2.0]]], 0, 0)
    x = T([[[[0, 1, 4, 2], [3, -1, 0, 5]]]])                  # bicubic: taps clamped at the edges; no copy at 1.0
    close(F.interpolate(x, size=(3, 6), mode="bicubic"), [[[
        [-0.38489842, 0.15907121, 1.79883623, 4.14300489, 3.34092927, 1.51322675],
        [1.63020861, 0.5625, 0.13078713, 1.55671334, 2.9375, 3.63020849],
        [3.64531517, 0.96592879, -1.53726113, -1.0295769, 2.53407145, 5.74719048]]]], 1e-5, 1e-6)
    close(F.interpolate(x, size=(1, 5), mode="bicubic", align_corners=True),
          [[[[0.0, 0.45703125, 2.78125, 3.86328125, 2.0]]]], 1e-6, 1e-6)
    close(F.interpolate(x, scale_factor=(1.0, 1.3), mode="bicubic"), [[[
        [-0.06771994, 0.33828735, 2.50157928, 3.94545174, 2.06305408],
        [3.27087927, 0.20398617, -1.39600778, 0.93615007, 4.85143185]]]], 1e-5, 1e-6)


def test_interpolate_gradients_and_area():
    for mode, kw in (("bilinear", dict(size=(5, 3))), ("nearest", dict(scale_factor=1.6))):
        def ref(x, mode=mode, kw=kw):
            out = kw.get("size") or tuple(math.floor(n * 1.6) for n in x.shape[2:])
            return interp_ref(x, out, (None, None) if "size" in kw else (1.6, 1.6), mode, False)
        check(lambda x, mode=mode, kw=kw: F.interpolate(x, mode=mode, **kw), ref, [R.standard_normal((1, 2, 3, 4))])
    check(lambda x: F.interpolate(x, size=(5, 3), mode="bicubic"),
          lambda x: interp_ref(x, (5, 3), (None, None), "bicubic", False), [R.standard_normal((1, 2, 3, 4))])
    check(lambda x: F.interpolate(x, size=7, mode="linear", align_corners=True),
          lambda x: interp_ref(x, (7,), (None,), "linear", True), [R.standard_normal((2, 1, 4))])
    x = f64(R.standard_normal((2, 3, 6, 4)))
    close(F.interpolate(T(x), size=(3, 2), mode="area"), x.reshape(2, 3, 3, 2, 2, 2).mean((3, 5)))
    close(F.interpolate(T(x[:, :, 0]), scale_factor=0.5, mode="area"), x[:, :, 0].reshape(2, 3, 2, 2).mean(-1))


def test_upsample_modules():
    x = f64(R.standard_normal((1, 2, 3, 4)))
    for m, mode, kw, text in (
            (nn.Upsample(scale_factor=2), "nearest", dict(scale_factor=2.0),
             "Upsample(scale_factor=2.0, mode='nearest')"),
            (nn.Upsample(size=(5, 6), mode="bilinear", align_corners=True), "bilinear",
             dict(size=(5, 6), align_corners=True), "Upsample(size=(5, 6), mode='bilinear')"),
            (nn.Upsample(scale_factor=(1.5, 2), mode="bilinear"), "bilinear", dict(scale_factor=(1.5, 2.0)),
             "Upsample(scale_factor=(1.5, 2.0), mode='bilinear')"),
            (nn.UpsamplingNearest2d(scale_factor=3), "nearest", dict(scale_factor=3.0),
             "UpsamplingNearest2d(scale_factor=3.0, mode='nearest')"),
            (nn.UpsamplingBilinear2d(size=5), "bilinear", dict(size=5, align_corners=True),
             "UpsamplingBilinear2d(size=5, mode='bilinear')")):
        close(m(T(x)), F.interpolate(T(x), mode=mode, **kw).numpy(), 0, 0)
        assert repr(m) == text and m.parameters() == []
    close(F.upsample_bilinear(T(x), scale_factor=2), F.interpolate(T(x), scale_factor=2, mode="bilinear",
                                                                   align_corners=True).numpy(), 0, 0)
    close(F.upsample(T(x), size=(4, 4)), F.interpolate(T(x), size=(4, 4)).numpy(), 0, 0)
    t = T(x, requires_grad=True)
    assert F.interpolate(t, size=(3, 4), mode="bilinear") is not t                 # a new tensor, as torch's
    nn.Upsample(scale_factor=2, mode="bilinear")(t).sum().backward()
    close(t.grad, np.full(x.shape, 4.0), 1e-5, 1e-5)                     # each input spreads weights summing to 4


def test_interpolate_keeps_half_dtypes():
    x = T(R.standard_normal((1, 2, 3, 4)))
    for dt, tol in (("half", 2e-3), ("bfloat16", 2e-2)):
        for mode in ("nearest", "bilinear"):
            y = F.interpolate(getattr(x, dt)(), size=(5, 7), mode=mode)
            assert y.dtype == getattr(x, dt)().dtype
            close(y.float(), F.interpolate(x, size=(5, 7), mode=mode).numpy(), tol, tol)


def test_interpolate_errors():
    x = T(R.standard_normal((1, 2, 3, 4)))
    cases = [(ValueError, "interpolate: only one of size or scale_factor", lambda: F.interpolate(x, 2, 2)),
             (ValueError, "interpolate: either size or scale_factor", lambda: F.interpolate(x)),
             (ValueError, "align_corners option can only be set", lambda: F.interpolate(x, 2, align_corners=True)),
             (ValueError, "mode 'linear' needs 3-D input", lambda: F.interpolate(x, 2, mode="linear")),
             (ValueError, "mode 'bilinear' needs 4-D", lambda: F.interpolate(x[0], 2, mode="bilinear")),
             (ValueError, "interpolate: mode must be one of", lambda: F.interpolate(x, 2, mode="cubic")),
             (ValueError, "mode 'bicubic' needs 4-D", lambda: F.interpolate(x[0], 2, mode="bicubic")),
             (NotImplementedError, "antialias", lambda: F.interpolate(x, 2, mode="bilinear", antialias=True)),
             (ValueError, "needs 2 output sizes", lambda: F.interpolate(x, (2, 3, 4))),
             (TypeError, "size must be an int", lambda: F.interpolate(x, (2.5, 3))),
             (ValueError, "recompute_scale_factor is not meaningful",
              lambda: F.interpolate(x, 3, recompute_scale_factor=True)),
             (ValueError, "must be non-empty", lambda: F.interpolate(x, scale_factor=0.2)),
             (TypeError, "interpolate: input must be a tlgpu Tensor", lambda: F.interpolate(x.numpy(), 2))]
    for exc, match, fn in cases:
        with pytest.raises(exc, match=match):
            fn()


# ---- TransformerDecoderLayer / TransformerDecoder ----

def _softmax(a):
    e = np.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def mha_ref(q, kv, sd, p, h, mask):
    """torch's multi-head attention in float64; q (N, L, E), kv (N, S, E) batch-major; mask additive (N, 1, L, S)."""
    w, b = sd[p + "in_proj_weight"], sd[p + "in_proj_bias"]
    e = q.shape[-1]
    qs, ks, vs = q @ w[:e].T + b[:e], kv @ w[e:2 * e].T + b[e:2 * e], kv @ w[2 * e:].T + b[2 * e:]

    def heads(t):
        return t.reshape(t.shape[0], t.shape[1], h, e // h).transpose(0, 2, 1, 3)
    s = heads(qs) @ heads(ks).transpose(0, 1, 3, 2) / math.sqrt(e // h) + mask
    o = (_softmax(s) @ heads(vs)).transpose(0, 2, 1, 3).reshape(q.shape)
    return o @ sd[p + "out_proj.weight"].T + sd[p + "out_proj.bias"]


def _ln(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + eps) * w + b


_erf = np.vectorize(math.erf)


def dec_ref(x, mem, sd, h, norm_first, act, sa_mask=0.0, ca_mask=0.0, p=""):
    """One decoder layer, batch-major, float64, weights sd (state_dict keys with prefix p)."""
    def n(i, y):
        return _ln(y, sd[f"{p}norm{i}.weight"], sd[f"{p}norm{i}.bias"])

    def ff(y):
        z = y @ sd[p + "linear1.weight"].T + sd[p + "linear1.bias"]
        z = np.maximum(z, 0) if act == "relu" else 0.5 * z * (1 + _erf(z / math.sqrt(2)))
        return z @ sd[p + "linear2.weight"].T + sd[p + "linear2.bias"]

    def sa(y):
        return mha_ref(y, y, sd, p + "self_attn.", h, sa_mask)

    def ca(y):
        return mha_ref(y, mem, sd, p + "multihead_attn.", h, ca_mask)
    if norm_first:
        x = x + sa(n(1, x))
        x = x + ca(n(2, x))
        return x + ff(n(3, x))
    x = n(1, x + sa(x))
    x = n(2, x + ca(x))
    return n(3, x + ff(x))


def randomize(module, seed):
    r = np.random.default_rng(seed)
    sd = {k: f64(r.standard_normal(v.shape) * 0.5) for k, v in module.state_dict().items()}
    module.load_state_dict(sd)
    return sd


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("act", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_decoder_layer_against_numpy(norm_first, act, batch_first):
    m = nn.TransformerDecoderLayer(8, 2, 12, dropout=0.3, activation=act, batch_first=batch_first,
                                   norm_first=norm_first).eval()
    sd = randomize(m, 3)
    x, mem = f64(R.standard_normal((3, 5, 8))), f64(R.standard_normal((3, 4, 8)))

    def lay(a):
        return T(a if batch_first else a.transpose(1, 0, 2))

    def back(t):
        return t.numpy() if batch_first else t.numpy().transpose(1, 0, 2)
    close(back(m(lay(x), lay(mem))), dec_ref(x, mem, sd, 2, norm_first, act))
    causal = np.triu(np.ones((5, 5), bool), 1)
    kpm = np.zeros((3, 4), bool)
    kpm[1, 2:] = True
    tkpm = np.zeros((3, 5), bool)
    tkpm[2, 4] = True
    mm = f64(R.standard_normal((5, 4)))
    sa_mask = np.where(causal, -np.inf, 0.0)[None, None] + np.where(tkpm, -np.inf, 0.0)[:, None, None]
    ca_mask = mm[None, None] + np.where(kpm, -np.inf, 0.0)[:, None, None]
    want = dec_ref(x, mem, sd, 2, norm_first, act, sa_mask, ca_mask)
    got = m(lay(x), lay(mem), causal, mm, tkpm, kpm, tgt_is_causal=False)
    close(back(got), want)
    got = m(lay(x), lay(mem), tgt_mask=T(np.where(causal, -np.inf, 0.0)), memory_mask=T(mm),
            tgt_key_padding_mask=T(np.where(tkpm, -np.inf, 0.0)), memory_key_padding_mask=T(np.where(kpm, -np.inf, 0)),
            tgt_is_causal=True, mask_kind="additive")
    close(back(got), want)
    got = m(lay(x), lay(mem), tgt_mask=T(causal).int(), memory_mask=mm, tgt_key_padding_mask=T(tkpm),
            memory_key_padding_mask=T(kpm), mask_kind="bool")                 # numpy float: additive anyway
    close(back(got), want)
    close(m(T(x[1]), T(mem[1])), dec_ref(x[1:2], mem[1:2], sd, 2, norm_first, act)[0])      # unbatched (L, E)


def test_decoder_layer_gradient_state_dict_repr_and_train():
    m = nn.TransformerDecoderLayer(4, 2, 6, dropout=0.0, batch_first=True)
    assert list(m.state_dict()) == [
        "self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight", "self_attn.out_proj.bias",
        "multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias", "multihead_attn.out_proj.weight",
        "multihead_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
        "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias", "norm3.weight", "norm3.bias"]
    sd = randomize(m, 5)
    causal = np.triu(np.ones((3, 3), bool), 1)
    check(lambda x, mem: m(x, mem, tgt_mask=causal), lambda x, mem: dec_ref(
        x, mem, sd, 2, False, "relu", np.where(causal, -np.inf, 0.0)), [R.standard_normal((2, 3, 4)),
                                                                        R.standard_normal((2, 4, 4))])
    for p in m.parameters():
        p.grad = None
    m(T(R.standard_normal((2, 3, 4))), T(R.standard_normal((2, 4, 4)))).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
    assert repr(m).splitlines()[1:6] == [
        "  (self_attn): MultiheadAttention(",
        "    (out_proj): NonDynamicallyQuantizableLinear(in_features=4, out_features=4, bias=True)", "  )",
        "  (multihead_attn): MultiheadAttention(",
        "    (out_proj): NonDynamicallyQuantizableLinear(in_features=4, out_features=4, bias=True)"]
    assert repr(m).splitlines()[-4:] == ["  (dropout1): Dropout(p=0.0, inplace=False)",
                                         "  (dropout2): Dropout(p=0.0, inplace=False)",
                                         "  (dropout3): Dropout(p=0.0, inplace=False)", ")"]
    d = nn.TransformerDecoderLayer(4, 2, 6, dropout=0.5)                     # training: dropout changes the output
    x, mem = T(R.standard_normal((3, 2, 4))), T(R.standard_normal((2, 2, 4)))
    assert not np.allclose(d(x, mem).numpy(), d.eval()(x, mem).numpy())
    close(d(x, mem), d(x, mem).numpy(), 0, 0)
    nb = nn.TransformerDecoderLayer(4, 2, 6, bias=False)
    assert "linear1.bias" not in nb.state_dict() and "norm3.bias" not in nb.state_dict()


def test_decoder_stack_clones_and_norm():
    layer = nn.TransformerDecoderLayer(8, 4, 10, dropout=0.0, activation=F.gelu)
    dec = nn.TransformerDecoder(layer, 2, norm=nn.LayerNorm(8)).eval()
    keys = list(dec.state_dict())
    assert keys[0] == "layers.0.self_attn.in_proj_weight" and keys[-2:] == ["norm.weight", "norm.bias"]
    assert "layers.1.norm3.bias" in keys and len(keys) == 2 * 18 + 2
    close(dec.layers[0].linear1.weight, layer.linear1.weight.numpy(), 0, 0)      # copies with the same values
    assert dec.layers[0].linear1.weight is not dec.layers[1].linear1.weight
    sd = randomize(dec, 9)
    x, mem = f64(R.standard_normal((4, 2, 8))), f64(R.standard_normal((3, 2, 8)))
    causal = np.triu(np.ones((4, 4), bool), 1)
    kpm = np.array([[False, False, True], [False, False, False]])
    sa_mask = np.where(causal, -np.inf, 0.0)
    ca_mask = np.where(kpm, -np.inf, 0.0)[:, None, None]
    y = x.transpose(1, 0, 2)
    for i in range(2):
        y = dec_ref(y, mem.transpose(1, 0, 2), sd, 4, False, "gelu", sa_mask, ca_mask, p=f"layers.{i}.")
    want = _ln(y, sd["norm.weight"], sd["norm.bias"]).transpose(1, 0, 2)
    close(dec(T(x), T(mem), tgt_mask=causal, memory_key_padding_mask=kpm), want)
    close(dec(T(x), T(mem), T(causal), None, None, T(kpm), True, mask_kind="bool"), want)


def test_decoder_errors():
    m = nn.TransformerDecoderLayer(4, 2, 6)
    x = T(R.standard_normal((3, 2, 4)))
    cases = [(TypeError, "TransformerDecoderLayer: memory must be a tlgpu Tensor", lambda: m(x, "memory")),
             (ValueError, "TransformerDecoderLayer: tgt and memory must both be 3-D", lambda: m(x, x[0])),
             (ValueError, "TransformerDecoderLayer: activation should be", lambda: nn.TransformerDecoderLayer(
                 4, 2, activation="tanh")),
             (TypeError, "TransformerDecoderLayer: activation must be", lambda: nn.TransformerDecoderLayer(
                 4, 2, activation=3)),
             (ValueError, "MultiheadAttention: is_causal=True", lambda: m(x, x, tgt_is_causal=True)),
             (TypeError, "TransformerDecoderLayer: a float tgt_mask tensor is ambiguous",
              lambda: m(x, x, tgt_mask=T(np.zeros((3, 3))))),
             (TypeError, "TransformerDecoder: decoder_layer must be a Module", lambda: nn.TransformerDecoder(3, 2)),
             (ValueError, "TransformerDecoder: num_layers", lambda: nn.TransformerDecoder(m, 0)),
             (TypeError, "TransformerDecoder: a float tgt_mask", lambda: nn.TransformerDecoder(m, 1)(
                 x, x, T(np.zeros((3, 3))))),
             (TypeError, "TransformerDecoderLayer: forward takes at most 8", lambda: m(x, x, *[None] * 7))]
    for exc, match, fn in cases:
        with pytest.raises(exc, match=match):
            fn()


# ---- trunc_normal_ ----

def _phi_cdf(v):
    return 0.5 * math.erfc(-v / math.sqrt(2))


def test_ndtri_inverts_the_normal_cdf():
    p = np.concatenate([np.linspace(1e-6, 1 - 1e-6, 2001), np.logspace(-300, -6, 200), 1 - np.logspace(-15, -6, 50)])
    x = _ndtri(p)
    # x's error, to first order (Phi(x) - p) / phi(x) (a Newton step), within 1e-14 of max(1, |x|)
    step = [abs(_phi_cdf(v) - q) * math.sqrt(2 * math.pi) * math.exp(v * v / 2) / max(1, abs(v)) for v, q in zip(x, p)]
    assert max(step) < 1e-14, max(step)
    np.testing.assert_allclose([_phi_cdf(v) for v in x], p, rtol=2e-12)   # p itself: |x| up to 37 amplifies x**2
    q = np.logspace(-10, -1, 300)                                       # the upper tail: 1 - q is exact to 1e-6 q
    np.testing.assert_allclose(_ndtri(1 - q), -_ndtri(q), rtol=1e-6)
    assert _ndtri(np.array([0.0, 1.0, 0.5])).tolist() == [-np.inf, np.inf, 0.0]


@pytest.mark.parametrize("mean,std,a,b", [(0.0, 1.0, -2.0, 2.0), (1.0, 2.0, -1.0, 4.0), (0.0, 0.02, -0.04, 0.04),
                                          (3.0, 1.0, 3.5, 6.0), (-1.0, 0.5, -10.0, -1.2)])
def test_trunc_normal_matches_the_truncated_distribution(mean, std, a, b):
    tlgpu.manual_seed(11)
    t = tlgpu.zeros(200, 250)
    assert nn.init.trunc_normal_(t, mean, std, a, b) is t
    x = np.sort(t.numpy().astype(np.float64).ravel())
    assert x[0] >= np.float32(a) and x[-1] <= np.float32(b)
    al, be = (a - mean) / std, (b - mean) / std
    lo, z = _phi_cdf(al), _phi_cdf(be) - _phi_cdf(al)
    cdf = (np.array([_phi_cdf((v - mean) / std) for v in x]) - lo) / z
    ks = np.max(np.maximum(np.arange(1, x.size + 1) / x.size - cdf, cdf - np.arange(x.size) / x.size))
    assert ks < 0.01, ks                                                # 1.63 / sqrt(n) = 0.0073 at 1 %
    pdf = [math.exp(-v * v / 2) / math.sqrt(2 * math.pi) for v in (al, be)]
    mu = mean + std * (pdf[0] - pdf[1]) / z
    var = std ** 2 * (1 + (al * pdf[0] - be * pdf[1]) / z - ((pdf[0] - pdf[1]) / z) ** 2)
    assert abs(x.mean() - mu) < 5 * math.sqrt(var / x.size) and abs(x.var() / var - 1) < 0.03


def test_trunc_normal_seed_warning_and_errors():
    tlgpu.manual_seed(4)
    u = nn.init.trunc_normal_(tlgpu.zeros(3, 4)).numpy()
    tlgpu.manual_seed(4)
    close(nn.init.trunc_normal_(tlgpu.zeros(3, 4)), u, 0, 0)
    assert np.abs(u).max() <= 2 and np.unique(u).size == 12
    with pytest.warns(UserWarning, match="mean is more than 2 std from \\[a, b\\]"):
        nn.init.trunc_normal_(tlgpu.zeros(5), mean=4.5)                  # 2.5 std above b = 2
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nn.init.trunc_normal_(tlgpu.zeros(5), mean=3.9)
    assert nn.init.trunc_normal_(tlgpu.zeros(0)).shape == (0,)
    for exc, match, fn in ((TypeError, "trunc_normal_: expected a Tensor", lambda: nn.init.trunc_normal_(np.zeros(3))),
                           (TypeError, "float32", lambda: nn.init.trunc_normal_(tlgpu.zeros(3, dtype=np.int32))),
                           (ValueError, "trunc_normal_: the bounds", lambda: nn.init.trunc_normal_(tlgpu.zeros(3), a=1,
                                                                                                     b=1)),
                           (ValueError, "trunc_normal_: std must be > 0", lambda: nn.init.trunc_normal_(
                               tlgpu.zeros(3), std=0)),
                           (NotImplementedError, "generator", lambda: nn.init.trunc_normal_(tlgpu.zeros(3),
                                                                                            generator=object()))):
        with pytest.raises(exc, match=match):
            fn()


# ---- torch 2.13's reprs of the norms and Dropout ----

def test_norm_and_dropout_reprs_are_torch_2_13s():
    """Strings printed by torch 2.13.0 for the same constructor calls."""
    want = {
        nn.LayerNorm(4): "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)",
        nn.LayerNorm((2, 3), bias=False): "LayerNorm((2, 3), eps=1e-05, elementwise_affine=True, bias=False)",
        nn.LayerNorm(4, elementwise_affine=False): "LayerNorm((4,), eps=1e-05, elementwise_affine=False, bias=False)",
        nn.BatchNorm1d(3): "BatchNorm1d(3, eps=1e-05, momentum=0.1, affine=True, bias=True, track_running_stats=True)",
        nn.BatchNorm2d(3, momentum=None, affine=False):
            "BatchNorm2d(3, eps=1e-05, momentum=None, affine=False, bias=False, track_running_stats=True)",
        nn.BatchNorm3d(2, eps=1e-3, bias=False, track_running_stats=False):
            "BatchNorm3d(2, eps=0.001, momentum=0.1, affine=True, bias=False, track_running_stats=False)",
        nn.GroupNorm(2, 4): "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)",
        nn.GroupNorm(2, 4, affine=False, eps=1e-3): "GroupNorm(2, 4, eps=0.001, affine=False, bias=False)",
        nn.GroupNorm(2, 4, bias=False): "GroupNorm(2, 4, eps=1e-05, affine=True, bias=False)",
        nn.Dropout(): "Dropout(p=0.5, inplace=False)", nn.Dropout(0.2, inplace=True): "Dropout(p=0.2, inplace=True)"}
    for m, text in want.items():
        assert repr(m) == text


def test_bias_false_norms_and_inplace_dropout():
    x = f64(R.standard_normal((4, 3, 5)))
    bn = nn.BatchNorm1d(3, bias=False)
    assert list(bn.state_dict()) == ["weight", "running_mean", "running_var", "num_batches_tracked"]
    mean, var = x.mean((0, 2), keepdims=True), x.var((0, 2), keepdims=True)
    close(bn(T(x)), (x - mean) / np.sqrt(var + 1e-5))
    gn = nn.GroupNorm(3, 3, bias=False)
    assert [n for n, _ in gn.named_parameters()] == ["weight"]
    m, v = x.mean(2, keepdims=True), x.var(2, keepdims=True)
    close(gn(T(x)), (x - m) / np.sqrt(v + 1e-5))
    t = T(x)
    d = nn.Dropout(0.5, inplace=True)
    y = d(t)
    assert y is t and set(np.unique(np.round(t.numpy() / f64(x), 5)[np.abs(x) > 1e-3])) <= {0.0, 2.0}
    d.eval()
    assert d(t) is t
