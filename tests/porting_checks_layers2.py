"""Checks for docs/porting.md's rows (see porting_checks.py): torch names added in the fourteenth session (layers2)."""
import numpy as np

import tlgpu
from porting_checks import T, close, f32, raises, rng, row  # noqa: F401
import math
import warnings

import tlgpu.nn.functional as F
from tlgpu import nn


def _convt_ref(x, w, s, p, q, d):
    """conv_transpose2d in float64 by its scatter form (groups 1, no bias)."""
    n, _, h, wd = x.shape
    k0, k1 = w.shape[2:]
    out = np.zeros((n, w.shape[1], (h - 1) * s - 2 * p + d * (k0 - 1) + q + 1,
                    (wd - 1) * s - 2 * p + d * (k1 - 1) + q + 1))
    for i in range(h):
        for j in range(wd):
            for a in range(k0):
                for b in range(k1):
                    r, c = i * s - p + a * d, j * s - p + b * d
                    if 0 <= r < out.shape[2] and 0 <= c < out.shape[3]:
                        out[:, :, r, c] += x[:, :, i, j] @ w[:, :, a, b]
    return out


@row('`F.conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation)`, '
     '`nn.ConvTranspose2d(in, out, k, stride, padding, output_padding, groups, bias, dilation)`, '
     '`F.conv_transpose1d`, `nn.ConvTranspose1d`')
def _():
    r = rng()
    x, w = f32(r.standard_normal((2, 3, 4, 3))).astype(np.float64), f32(r.standard_normal((3, 2, 3, 3)))
    for s, p, q, d in ((1, 0, 0, 1), (2, 1, 1, 1), (3, 2, 1, 2)):
        close(F.conv_transpose2d(T(x), T(w), None, s, p, q, 1, d), _convt_ref(x, w.astype(np.float64), s, p, q, d),
              1e-4, 1e-5)
    y = F.conv_transpose2d(T(x), T(w), None, 2, 1, 1)                  # conv2d's adjoint
    v = r.standard_normal(y.shape)
    lhs = np.sum(F.conv2d(T(v), T(w), None, 2, 1).numpy().astype(np.float64) * x)
    assert abs(lhs - np.sum(f32(v).astype(np.float64) * y.numpy())) < 1e-3
    m = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, groups=2)
    assert m.weight.shape == (4, 3, 3, 3) and m(T(r.standard_normal((1, 4, 5, 5)))).shape == (1, 6, 9, 9)
    assert m(T(r.standard_normal((1, 4, 5, 5))), output_size=(10, 10)).shape == (1, 6, 10, 10)
    assert repr(m) == "ConvTranspose2d(4, 6, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), groups=2)"
    m1 = nn.ConvTranspose1d(3, 2, 3, stride=2)
    x1 = r.standard_normal((2, 3, 5))
    close(m1(T(x1)), F.conv_transpose2d(T(x1).unsqueeze(2), m1.weight.unsqueeze(2), m1.bias, (1, 2)).squeeze(2)
          .numpy(), 1e-5, 1e-6)
    raises(ValueError, "output_padding", lambda: F.conv_transpose2d(T(x), T(w), None, 1, 0, 1))
    raises(ValueError, "padding mode", lambda: nn.ConvTranspose2d(2, 2, 2, padding_mode="reflect"))


@row('`F.interpolate(x, size, scale_factor, mode, align_corners, recompute_scale_factor)`, `nn.Upsample`, '
     '`nn.UpsamplingNearest2d/UpsamplingBilinear2d`')
def _():
    r = rng()
    x = f32(r.standard_normal((2, 3, 4, 5))).astype(np.float64)
    close(F.interpolate(T(x), scale_factor=2), x.repeat(2, 2).repeat(2, 3), 0, 0)
    ih = np.minimum(np.floor(np.arange(7, dtype=np.float32) * np.float32(4 / 7)).astype(int), 3)
    close(F.interpolate(T(x), size=(7, 5)), x[:, :, ih], 0, 0)
    # bilinear, align_corners=False, 4 -> 8 rows: source (i + 0.5) / 2 - 0.5 clamped at 0
    src = np.maximum((np.arange(8) + 0.5) / 2 - 0.5, 0)
    i0 = np.floor(src).astype(int)
    i1, l1 = np.minimum(i0 + 1, 3), src - i0
    want = x[:, :, i0] * (1 - l1)[:, None] + x[:, :, i1] * l1[:, None]
    close(F.interpolate(T(x), size=(8, 5), mode="bilinear"), want, 1e-5, 1e-6)
    ac = np.linspace(0, 4, 9)                                           # align_corners: the corners map onto corners
    j0 = np.minimum(np.floor(ac).astype(int), 3)
    want = x[..., j0] * (1 - (ac - j0)) + x[..., np.minimum(j0 + 1, 4)] * (ac - j0)
    close(F.interpolate(T(x), size=(4, 9), mode="bilinear", align_corners=True), want, 1e-5, 1e-6)
    a10 = np.linspace(0, 4, 10)
    k0 = np.minimum(np.floor(a10).astype(int), 3)
    want = x[:, :, 0, k0] * (1 - (a10 - k0)) + x[:, :, 0, k0 + 1] * (a10 - k0)
    close(F.interpolate(T(x[:, :, 0]), size=10, mode="linear", align_corners=True), want, 1e-5, 1e-6)
    assert repr(nn.Upsample(scale_factor=2, mode="bilinear")) == "Upsample(scale_factor=2.0, mode='bilinear')"
    close(nn.UpsamplingBilinear2d(scale_factor=2)(T(x)), F.interpolate(T(x), scale_factor=2, mode="bilinear",
                                                                       align_corners=True).numpy(), 0, 0)
    raises(ValueError, "align_corners", lambda: F.interpolate(T(x), 2, align_corners=True))
    src = np.arange(9) / 2                                              # bicubic, align_corners, 5 -> 9 columns
    j0, t = np.minimum(np.floor(src).astype(int), 4), src - np.minimum(np.floor(src), 4)

    def cub(z):                                                         # Keys' kernel, A = -0.75
        z = np.abs(z)
        return np.where(z <= 1, (1.25 * z - 2.25) * z * z + 1, ((-0.75 * z + 3.75) * z - 6) * z + 3)
    want = sum(x[..., np.clip(j0 - 1 + k, 0, 4)] * cub(t - (k - 1)) for k in range(4))
    close(F.interpolate(T(x), size=(4, 9), mode="bicubic", align_corners=True), want, 1e-5, 1e-6)
    raises(NotImplementedError, "antialias", lambda: F.interpolate(T(x), 2, mode="bilinear", antialias=True))


def _mha(q, kv, sd, p, h, mask=0.0):
    w, b, e = sd[p + "in_proj_weight"], sd[p + "in_proj_bias"], q.shape[-1]
    qs, ks, vs = (t @ w[i * e:(i + 1) * e].T + b[i * e:(i + 1) * e] for i, t in enumerate((q, kv, kv)))

    def heads(t):
        return t.reshape(t.shape[0], t.shape[1], h, e // h).transpose(0, 2, 1, 3)
    s = heads(qs) @ heads(ks).transpose(0, 1, 3, 2) / math.sqrt(e // h) + mask
    a = np.exp(s - s.max(-1, keepdims=True))
    o = (a / a.sum(-1, keepdims=True) @ heads(vs)).transpose(0, 2, 1, 3).reshape(q.shape)
    return o @ sd[p + "out_proj.weight"].T + sd[p + "out_proj.bias"]


@row('`nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first, '
     'norm_first)`, `nn.TransformerDecoder(layer, num_layers, norm)`')
def _():
    r = rng()
    m = nn.TransformerDecoderLayer(8, 2, 16, batch_first=True).eval()
    sd = {k: f32(r.standard_normal(v.shape) * 0.5).astype(np.float64) for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    x, mem = f32(r.standard_normal((2, 4, 8))).astype(np.float64), f32(r.standard_normal((2, 3, 8))).astype(np.float64)
    causal = np.triu(np.ones((4, 4), bool), 1)

    def ln(y, i):
        mu = y.mean(-1, keepdims=True)
        return (y - mu) / np.sqrt(((y - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * sd[f"norm{i}.weight"] + \
            sd[f"norm{i}.bias"]
    y = ln(x + _mha(x, x, sd, "self_attn.", 2, np.where(causal, -np.inf, 0.0)), 1)
    y = ln(y + _mha(y, mem, sd, "multihead_attn.", 2), 2)
    ff = np.maximum(y @ sd["linear1.weight"].T + sd["linear1.bias"], 0) @ sd["linear2.weight"].T + sd["linear2.bias"]
    close(m(T(x), T(mem), tgt_mask=causal, tgt_is_causal=True), ln(y + ff, 3), 1e-4, 2e-5)
    assert list(sd)[4:6] == ["multihead_attn.in_proj_weight", "multihead_attn.in_proj_bias"]
    assert list(sd)[-2:] == ["norm3.weight", "norm3.bias"]
    dec = nn.TransformerDecoder(m, 2, norm=nn.LayerNorm(8))
    assert len(dec.state_dict()) == 2 * 18 + 2 and dec(T(x), T(mem)).shape == (2, 4, 8)
    raises(TypeError, "TransformerDecoderLayer: a float tgt_mask", lambda: m(T(x), T(mem), tgt_mask=T(causal)))


@row('`nn.init.trunc_normal_(w, mean, std, a, b)`')
def _():
    tlgpu.manual_seed(3)
    t = nn.init.trunc_normal_(tlgpu.zeros(100, 400), 0.5, 1.0, -1.0, 1.5)
    x = np.sort(t.numpy().astype(np.float64).ravel())
    assert x[0] >= -1.0 and x[-1] <= 1.5

    def cdf(v):
        return 0.5 * math.erfc(-(v - 0.5) / math.sqrt(2))
    want = (np.array([cdf(v) for v in x]) - cdf(-1.0)) / (cdf(1.5) - cdf(-1.0))
    assert np.max(np.abs(np.arange(1, x.size + 1) / x.size - want)) < 0.012      # Kolmogorov-Smirnov, n = 40000
    tlgpu.manual_seed(3)
    close(nn.init.trunc_normal_(tlgpu.zeros(100, 400), 0.5, 1.0, -1.0, 1.5), t.numpy(), 0, 0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        nn.init.trunc_normal_(tlgpu.zeros(3), mean=5.0)
    assert "more than 2 std" in str(w[0].message)
    raises(NotImplementedError, "generator", lambda: nn.init.trunc_normal_(tlgpu.zeros(3), generator=1))


@row('`nn.LayerNorm/BatchNorm1d/2d/3d/GroupNorm(..., bias=False)`, `nn.Dropout(p, inplace=True)`')
def _():
    assert repr(nn.LayerNorm(4)) == "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)"
    assert repr(nn.BatchNorm2d(3, bias=False)) == ("BatchNorm2d(3, eps=1e-05, momentum=0.1, affine=True, bias=False, "
                                                   "track_running_stats=True)")
    assert repr(nn.GroupNorm(2, 4)) == "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)"
    assert repr(nn.Dropout(0.1, inplace=True)) == "Dropout(p=0.1, inplace=True)"
    x = rng().standard_normal((5, 4, 3))
    m = nn.GroupNorm(2, 4, bias=False)
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    g = x.reshape(5, 2, 6)
    close(m(T(x)), ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x.shape),
          1e-4, 1e-5)
    t = T(x)
    assert nn.Dropout(0.3, inplace=True)(t) is t
