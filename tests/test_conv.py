"""conv2d (im2col + GEMM), its im2col/col2im pieces, max/avg pooling and the nn modules, against float64
numpy references on random inputs: forward values and the gradients of every input, over strides,
paddings, dilations, odd sizes, views and unbatched inputs; the errors; determinism and laziness."""
import math
import os

import numpy as np
import pytest

import tlgpu
from tlgpu import nn
from tlgpu.nn import functional as F
from conftest import needs_pool, run_python
from gradcheck import check

R = np.random.default_rng(7)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv_ref(x, w, b=None, stride=1, padding=0, dilation=1):
    s, p, d = _pair(stride), _pair(padding), _pair(dilation)
    N, C, H, W = x.shape
    O, _, KH, KW = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    OH = (H + 2 * p[0] - d[0] * (KH - 1) - 1) // s[0] + 1
    OW = (W + 2 * p[1] - d[1] * (KW - 1) - 1) // s[1] + 1
    out = np.zeros((N, O, OH, OW))
    for ki in range(KH):
        for kj in range(KW):
            patch = xp[:, :, ki * d[0]:ki * d[0] + s[0] * (OH - 1) + 1:s[0],
                       kj * d[1]:kj * d[1] + s[1] * (OW - 1) + 1:s[1]]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, ki, kj])
    return out if b is None else out + b[None, :, None, None]


def im2col_ref(x, k, stride=1, padding=0, dilation=1):
    s, p, d, k = _pair(stride), _pair(padding), _pair(dilation), _pair(k)
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    OH = (H + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
    OW = (W + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
    cols = np.zeros((C, k[0], k[1], N, OH, OW))
    for ki in range(k[0]):
        for kj in range(k[1]):
            cols[:, ki, kj] = xp[:, :, ki * d[0]:ki * d[0] + s[0] * (OH - 1) + 1:s[0],
                                 kj * d[1]:kj * d[1] + s[1] * (OW - 1) + 1:s[1]].transpose(1, 0, 2, 3)
    return cols.reshape(C * k[0] * k[1], N * OH * OW)


CONV_CASES = [  # N, C, H, W, O, kernel, stride, padding, dilation, bias
    (2, 3, 7, 9, 4, (3, 2), (1, 2), (1, 0), (1, 2), True),
    (1, 2, 5, 5, 3, 3, 2, 1, 1, True),
    (1, 2, 6, 5, 3, 3, 1, 0, 1, False),
    (3, 1, 8, 6, 2, (2, 3), 1, (0, 2), (2, 1), False),
    (2, 4, 11, 10, 5, 4, 3, 2, 1, True),
    (2, 2, 5, 4, 3, 1, 1, 0, 1, False),
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_forward_and_gradients(case):
    N, C, H, W, O, k, s, p, d, bias = case
    kh, kw = _pair(k)
    arrays = [R.standard_normal((N, C, H, W)), R.standard_normal((O, C, kh, kw))]
    if bias:
        arrays.append(R.standard_normal(O))
    check(lambda *a: F.conv2d(a[0], a[1], a[2] if bias else None, s, p, d),
          lambda *a: conv_ref(a[0], a[1], a[2] if bias else None, s, p, d), arrays)


def test_conv2d_strided_view_and_unbatched_inputs():
    x, w, b = R.standard_normal((7, 2, 5, 6)), R.standard_normal((2, 6, 3, 3)), R.standard_normal(2)
    # the input is a permuted view (N, C, H, W) of an (H, N, W, C)-ordered tensor: read through its strides
    check(lambda a, ww, bb: F.conv2d(a, ww, bb, padding=1),
          lambda a, ww, bb: conv_ref(a.transpose(1, 3, 0, 2), ww, bb, padding=1), [x, w, b],
          views=[lambda t: t.permute(1, 3, 0, 2), None, None])
    u = R.standard_normal((2, 5, 6))
    check(lambda a, ww: F.conv2d(a, ww, stride=2), lambda a, ww: conv_ref(a[None], ww, stride=2)[0],
          [u, R.standard_normal((3, 2, 2, 2))])


def test_conv2d_output_is_contiguous_nchw():
    x, w = tlgpu.randn(3, 2, 6, 6), tlgpu.randn(4, 2, 3, 3)
    for b in (None, tlgpu.randn(4)):
        y = F.conv2d(x, w, b)
        assert y.shape == (3, 4, 4, 4) and y.is_contiguous()
        y.view(3, -1)                             # torch users flatten conv outputs with view


@pytest.mark.parametrize("k,s,p,d", [(3, 1, 0, 1), ((2, 3), (2, 1), (1, 2), (1, 2)), (1, 3, 0, 1)])
def test_im2col_and_col2im(k, s, p, d):
    x = R.standard_normal((2, 3, 7, 8))
    cols = tlgpu._C._im2col(tlgpu.tensor(x.astype(np.float32)), k, s, p, d)
    np.testing.assert_allclose(cols.numpy(), im2col_ref(x, k, s, p, d), rtol=1e-6, atol=1e-6)
    check(lambda a: tlgpu._C._im2col(a, k, s, p, d), lambda a: im2col_ref(a, k, s, p, d), [x])


def test_conv2d_zero_batch_and_backward_is_deterministic():
    w = tlgpu.randn(4, 2, 3, 3)
    assert F.conv2d(tlgpu.zeros(0, 2, 9, 9), w).shape == (0, 4, 7, 7)
    x = tlgpu.tensor(R.standard_normal((4, 2, 9, 9)).astype(np.float32), requires_grad=True)
    w.requires_grad_()
    grads = []
    for _ in range(3):
        x.grad = None
        w.grad = None
        F.conv2d(x, w, stride=2, padding=2, dilation=2).square().sum().backward()
        grads.append((x.grad.numpy(), w.grad.numpy()))
    for gx, gw in grads[1:]:
        assert np.array_equal(gx, grads[0][0]) and np.array_equal(gw, grads[0][1])


def test_conv_and_pool_training_graph_has_no_host_waits():
    x = tlgpu.rand(3, 2, 9, 9, requires_grad=True)
    w, b = tlgpu.rand(4, 2, 3, 3, requires_grad=True), tlgpu.rand(4, requires_grad=True)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    y = F.max_pool2d(F.conv2d(x, w, b, stride=2, padding=1), 2)
    (y.sum() + F.avg_pool2d(x, 3, 2, 1).sum()).backward()
    assert tlgpu.stream_stats()["waits"] == 0
    assert x.grad.numpy().shape == (3, 2, 9, 9)


def test_conv2d_errors_name_op_and_shapes():
    x, w = tlgpu.zeros(2, 3, 5, 5), tlgpu.zeros(4, 3, 3, 3)
    with pytest.raises(ValueError, match=r"conv2d: weight \(4, 2, 3, 3\) expects 2 input channels, input "
                                         r"\(2, 3, 5, 5\) has 3"):
        F.conv2d(x, tlgpu.zeros(4, 2, 3, 3))
    with pytest.raises(ValueError, match=r"conv2d: kernel \(3, 3\) with dilation \(3, 3\) spans \(7, 7\), larger "
                                         r"than the padded input \(5, 5\) of input \(2, 3, 5, 5\)"):
        F.conv2d(x, w, dilation=3)
    with pytest.raises(ValueError, match=r"conv2d: input must be 4-D.*got shape \(5, 5\)"):
        F.conv2d(tlgpu.zeros(5, 5), w)
    with pytest.raises(ValueError, match=r"conv2d: weight must be 4-D.*got shape \(4, 27\)"):
        F.conv2d(x, tlgpu.zeros(4, 27))
    with pytest.raises(ValueError, match=r"conv2d: bias must be \(4,\) for weight \(4, 3, 3, 3\), got \(3,\)"):
        F.conv2d(x, w, tlgpu.zeros(3))
    with pytest.raises(ValueError, match=r"conv2d: stride must be >= 1, got \(0, 1\)"):
        F.conv2d(x, w, stride=(0, 1))
    with pytest.raises(ValueError, match="conv2d: padding must be >= 0"):
        F.conv2d(x, w, padding=-1)
    with pytest.raises(TypeError, match="conv2d: expected a float32"):
        F.conv2d(tlgpu.zeros(2, 3, 5, 5, dtype=np.int32), w)
    with pytest.raises(TypeError, match="stride must be an int or a pair"):
        F.conv2d(x, w, stride=(1, 2, 3))
    with pytest.raises(NotImplementedError, match="groups"):
        F.conv2d(x, w, groups=3)


def maxpool_ref(x, k, s=None, p=0):
    """Forward and, for an upstream g, the gradient: each window's first maximum (row-major) gets it."""
    k = _pair(k)
    s, p = _pair(s if s is not None else k), _pair(p)
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=-np.inf)
    OH, OW = (H + 2 * p[0] - k[0]) // s[0] + 1, (W + 2 * p[1] - k[1]) // s[1] + 1
    out, arg = np.zeros((N, C, OH, OW)), np.zeros((N, C, OH, OW, 2), int)
    for oh in range(OH):
        for ow in range(OW):
            win = xp[:, :, oh * s[0]:oh * s[0] + k[0], ow * s[1]:ow * s[1] + k[1]].reshape(N, C, -1)
            i = win.argmax(-1)
            out[:, :, oh, ow] = win.max(-1)
            arg[:, :, oh, ow] = np.stack([oh * s[0] + i // k[1] - p[0], ow * s[1] + i % k[1] - p[1]], -1)
    return out, arg


@pytest.mark.parametrize("k,s,p", [(2, None, 0), (3, 2, 1), ((2, 3), (1, 2), (1, 1)), (3, 1, 0)])
def test_max_pool2d_forward_backward_ties_to_first(k, s, p):
    # small integers make many ties inside windows: torch sends the gradient to the first maximum
    x = R.integers(-3, 4, (2, 3, 7, 8)).astype(np.float64)
    want, arg = maxpool_ref(x, k, s, p)
    xt = tlgpu.tensor(x.astype(np.float32), requires_grad=True)
    y = F.max_pool2d(xt, k, s, p)
    np.testing.assert_array_equal(y.numpy(), want)
    g = R.standard_normal(want.shape)
    y.backward(tlgpu.tensor(g.astype(np.float32)))
    gx = np.zeros_like(x)
    for n, c, oh, ow in np.ndindex(*want.shape):
        h, w = arg[n, c, oh, ow]
        gx[n, c, h, w] += g[n, c, oh, ow]
    np.testing.assert_allclose(xt.grad.numpy(), gx, rtol=1e-5, atol=1e-5)


def test_max_pool2d_random_gradcheck_and_nan():
    check(lambda a: F.max_pool2d(a, 3, 2, 1), lambda a: maxpool_ref(a, 3, 2, 1)[0], [R.standard_normal((2, 2, 7, 5))])
    x = np.zeros((1, 1, 2, 2), np.float32)
    x[0, 0, 1, 0] = np.nan
    assert np.isnan(F.max_pool2d(tlgpu.tensor(x), 2).numpy()).all()


def avgpool_ref(x, k, s=None, p=0, count_include_pad=True):
    k = _pair(k)
    s, p = _pair(s if s is not None else k), _pair(p)
    N, C, H, W = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])))
    ones = np.pad(np.ones((H, W)), ((p[0], p[0]), (p[1], p[1])))
    OH, OW = (H + 2 * p[0] - k[0]) // s[0] + 1, (W + 2 * p[1] - k[1]) // s[1] + 1
    out = np.zeros((N, C, OH, OW))
    for oh in range(OH):
        for ow in range(OW):
            sl = (slice(oh * s[0], oh * s[0] + k[0]), slice(ow * s[1], ow * s[1] + k[1]))
            div = k[0] * k[1] if count_include_pad else ones[sl].sum()
            out[:, :, oh, ow] = xp[(slice(None), slice(None)) + sl].sum((-1, -2)) / div
    return out


@pytest.mark.parametrize("k,s,p,cip", [(2, None, 0, True), (3, 2, 1, True), ((2, 3), (1, 2), (1, 1), True),
                                       (3, 2, 1, False), ((3, 2), 1, (1, 1), False)])
def test_avg_pool2d_forward_backward(k, s, p, cip):
    check(lambda a: F.avg_pool2d(a, k, s, p, count_include_pad=cip),
          lambda a: avgpool_ref(a, k, s, p, cip), [R.standard_normal((2, 3, 7, 6))])


def test_pool_unbatched_view_and_errors():
    x = R.standard_normal((3, 6, 5))
    check(lambda a: F.max_pool2d(a.transpose(1, 2), 2), lambda a: maxpool_ref(a.transpose(0, 2, 1)[None], 2)[0][0],
          [x])
    t = tlgpu.zeros(1, 1, 4, 4)
    with pytest.raises(ValueError, match=r"max_pool2d: padding \(2, 2\) must be at most half the kernel \(3, 3\)"):
        F.max_pool2d(t, 3, padding=2)
    with pytest.raises(ValueError, match=r"avg_pool2d: kernel \(5, 5\).*larger than the padded input \(4, 4\)"):
        F.avg_pool2d(t, 5)
    with pytest.raises(ValueError, match=r"avg_pool2d: input must be 4-D .* got shape \(4,\)"):
        F.avg_pool2d(tlgpu.zeros(4), 2)
    with pytest.raises(ValueError, match="kernel_size must be >= 1"):
        F.max_pool2d(t, 0)


def test_conv2d_module_init_and_state_dict():
    tlgpu.manual_seed(0)
    m = nn.Conv2d(16, 64, 5, stride=2, padding=1)
    assert m.weight.shape == (64, 16, 5, 5) and m.bias.shape == (64,)
    assert list(m.state_dict()) == ["weight", "bias"]
    bound = 1 / math.sqrt(16 * 25)
    w = m.weight.numpy()
    assert np.abs(w).max() <= bound and w.max() > 0.99 * bound and w.min() < -0.99 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.03 * bound
    assert np.abs(m.bias.numpy()).max() <= bound
    assert nn.Conv2d(3, 4, (2, 3), bias=False).bias is None
    x = R.standard_normal((2, 16, 9, 9)).astype(np.float32)
    np.testing.assert_allclose(m(tlgpu.tensor(x)).numpy(), conv_ref(x, w, m.bias.numpy(), 2, 1), rtol=1e-4,
                               atol=1e-4)


def test_nature_cnn_shapes_and_pool_modules():
    net = nn.Sequential(nn.Conv2d(4, 32, 8, stride=4), nn.ReLU(), nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
                        nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(), nn.Flatten(), nn.Linear(3136, 6))
    y = net(tlgpu.rand(2, 4, 84, 84))
    assert y.shape == (2, 6)
    y.sum().backward()
    assert all(p.grad is not None and p.grad.shape == p.shape for p in net.parameters())
    x = R.standard_normal((2, 3, 8, 7)).astype(np.float32)
    np.testing.assert_array_equal(nn.MaxPool2d(2)(tlgpu.tensor(x)).numpy(), maxpool_ref(x, 2)[0])
    np.testing.assert_allclose(nn.AvgPool2d(3, 2, 1)(tlgpu.tensor(x)).numpy(), avgpool_ref(x, 3, 2, 1), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("variant", ["rows", "elements"])
def test_kernel_variants_agree_with_numpy(variant):
    # im2col, col2im and the output layout have kernels for CPUs ("rows") and for GPUs ("elements"): the conv
    # tests above run in a fresh process under each, whatever the device
    code = """
import test_conv as t
for case in t.CONV_CASES:
    t.test_conv2d_forward_and_gradients(case)
for args in [(3, 1, 0, 1), ((2, 3), (2, 1), (1, 2), (1, 2)), (1, 3, 0, 1)]:
    t.test_im2col_and_col2im(*args)
t.test_conv2d_strided_view_and_unbatched_inputs()
print("ok")
"""
    tests = os.path.dirname(os.path.abspath(__file__))
    r = run_python(code, env={"TLGPU_CONV_KERNELS": variant, "PYTHONPATH": tests})
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


@needs_pool
def test_policy_training_loop_memory_is_flat():
    from tlgpu.distributions import Categorical
    net = nn.Sequential(nn.Conv2d(4, 8, 8, stride=4), nn.ReLU(), nn.Conv2d(8, 8, 4, stride=2), nn.ReLU(),
                        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 6))
    gru = nn.GRU(6, 5)
    opt = tlgpu.optim.Adam(list(net.parameters()) + list(gru.parameters()))
    x = tlgpu.rand(8, 4, 84, 84)
    live = []
    for _ in range(4):
        out, _ = gru(net(x).reshape(2, 4, 6))
        d = Categorical(logits=out.reshape(8, 5))
        loss = -d.log_prob(d.sample()).mean() - d.entropy().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        del out, d, loss
        tlgpu.synchronize()
        live.append(tlgpu.memory_stats()["live"])
    assert live[1] == live[2] == live[3], live


def test_torch_parity_conv_pool_and_same_padding():
    torch = pytest.importorskip("torch")
    x = R.standard_normal((2, 3, 9, 8)).astype(np.float32)
    w, b = R.standard_normal((4, 3, 3, 5)).astype(np.float32), R.standard_normal(4).astype(np.float32)
    tx, tw, tb = (torch.tensor(a) for a in (x, w, b))
    for kw in [dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2)), dict(padding="same"), dict(padding="valid")]:
        want = torch.nn.functional.conv2d(tx, tw, tb, **kw).numpy()
        got = F.conv2d(tlgpu.tensor(x), tlgpu.tensor(w), tlgpu.tensor(b), **kw).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    for k, s, p in [(3, 2, 1), ((2, 3), 1, (1, 1))]:
        np.testing.assert_array_equal(F.max_pool2d(tlgpu.tensor(x), k, s, p).numpy(),
                                      torch.nn.functional.max_pool2d(tx, k, s, p).numpy())
        for cip in (True, False):
            np.testing.assert_allclose(F.avg_pool2d(tlgpu.tensor(x), k, s, p, count_include_pad=cip).numpy(),
                                       torch.nn.functional.avg_pool2d(tx, k, s, p, count_include_pad=cip).numpy(),
                                       rtol=1e-5, atol=1e-6)
    m = torch.nn.Conv2d(3, 4, 3, stride=2, padding=1)
    ours = nn.Conv2d(3, 4, 3, stride=2, padding=1)
    ours.load_state_dict({k: v.detach().numpy() for k, v in m.state_dict().items()})
    np.testing.assert_allclose(ours(tlgpu.tensor(x)).numpy(), m(tx).detach().numpy(), rtol=1e-4, atol=1e-5)


# Without autograd on a CPU device with the BLAS path, conv2d is one native command (cpu_blas.c: per image or
# group of images, im2col into a small buffer and one sgemm into the NCHW output). It must match the float64
# reference and the composite path over the shapes it cuts differently: groups of images, bands of output rows
# (an image whose columns exceed the buffer), padding rows and columns, strides 1, 2, 4 and 3, dilation,
# batch 1 and 16, views, unbatched inputs, no bias.
NATIVE_CASES = [  # N, C, H, W, O, kernel, stride, padding, dilation, bias
    (16, 4, 84, 84, 32, 8, 4, 0, 1, True),       # the Nature CNN's layers, batch 16 and 1
    (16, 32, 20, 20, 64, 4, 2, 0, 1, True),
    (1, 64, 9, 9, 64, 3, 1, 0, 1, True),
    (1, 4, 84, 84, 32, 8, 4, 0, 1, False),
    (3, 3, 30, 29, 5, 5, (2, 3), (3, 1), (2, 1), True),
    (2, 8, 131, 70, 3, 3, 1, 1, 1, True),        # columns 72 x 9100 a image: bands of output rows
    (5, 2, 11, 10, 4, (2, 3), 3, (2, 0), 1, False),
    (2, 3, 12, 10, 4, 4, 2, 2, 1, True),         # rows of kj >= stride copied from kj - stride; last column padding
    (2, 2, 3, 1, 3, 8, 1, 4, 1, True),           # padding wider than the input: a last column left of it
]


def _native_state():
    return tlgpu._C._cpu_blas()


def _dirty_pool():
    # blocks of many sizes full of NaN go back to the pool, so a buffer element the native path fails to write
    # shows in its output (fresh memory is zeros, which would hide a missed zero of padding)
    for k in range(6, 23):
        del_me = tlgpu.full((1 << k,), float("nan")) + 0.0
        del del_me


@pytest.mark.parametrize("case", NATIVE_CASES)
def test_conv2d_no_grad_native_path_matches_reference(case):
    N, C, H, W, O, k, s, p, d, bias = case
    kh, kw = _pair(k)
    x = R.standard_normal((N, C, H, W)).astype(np.float32)
    w = R.standard_normal((O, C, kh, kw)).astype(np.float32)
    b = R.standard_normal(O).astype(np.float32) if bias else None
    want = conv_ref(x.astype(np.float64), w.astype(np.float64), b, s, p, d)
    state = _native_state()
    args = (tlgpu.tensor(x), tlgpu.tensor(w), tlgpu.tensor(b) if bias else None, s, p, d)
    _dirty_pool()
    with tlgpu.no_grad():
        got = F.conv2d(*args)
    assert got.shape == want.shape and got.is_contiguous()
    tol = 1e-5 * math.sqrt(C * kh * kw)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=tol)
    if state["loaded"] and state["enabled"]:
        assert _native_state()["convs"] == state["convs"] + 1
        try:                                     # the composite path (OpenCL im2col, GEMM, layout) agrees
            tlgpu._C._cpu_blas(enable=False)
            with tlgpu.no_grad():
                np.testing.assert_allclose(F.conv2d(*args).numpy(), got.numpy(), rtol=1e-4, atol=tol)
        finally:
            tlgpu._C._cpu_blas(enable=True)


def test_conv2d_native_views_unbatched_threads_and_grad_mode():
    x = R.standard_normal((6, 3, 13, 12)).astype(np.float32)
    w, b = R.standard_normal((4, 3, 3, 3)).astype(np.float32), R.standard_normal(4).astype(np.float32)
    want = conv_ref(x.astype(np.float64), w, b, 2, 1)
    xt = tlgpu.tensor(x.transpose(2, 0, 3, 1).copy()).permute(1, 3, 0, 2)   # an (N, C, H, W) view, strided
    junk = R.standard_normal((4, 3, 3, 3)).astype(np.float32)
    wv = tlgpu.tensor(np.concatenate([junk, w], 0))[4:]                     # weight, bias, input at offsets
    bv = tlgpu.tensor(np.concatenate([junk[:, 0, 0, 0], b]))[4:]
    xv = tlgpu.tensor(np.concatenate([x[:1] + 1, x], 0))[1:]
    state = _native_state()
    with tlgpu.no_grad():
        np.testing.assert_allclose(F.conv2d(xt, wv, bv, 2, 1).numpy(), want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(F.conv2d(xv, wv, bv, 2, 1).numpy(), want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(F.conv2d(tlgpu.tensor(x[2]), tlgpu.tensor(w), tlgpu.tensor(b), 2, 1).numpy(),
                                   want[2], rtol=1e-4, atol=1e-4)
        wt = tlgpu.tensor(w.transpose(1, 0, 2, 3).copy()).permute(1, 0, 2, 3)  # a weight that is not contiguous
        np.testing.assert_allclose(F.conv2d(tlgpu.tensor(x), wt, tlgpu.tensor(b), 2, 1).numpy(), want, rtol=1e-4,
                                   atol=1e-4)
    if not (state["loaded"] and state["enabled"]):
        return
    assert _native_state()["convs"] == state["convs"] + 3          # the transposed weight took the composite path
    big = R.standard_normal((16, 4, 84, 84)).astype(np.float32)
    wb = R.standard_normal((32, 4, 8, 8)).astype(np.float32)
    outs = []
    try:                                         # split over the PoCL worker and helper threads, or one part
        for threads, split in [(1, True), (2, True), (3, True), (1, False)]:
            tlgpu._C._cpu_blas(threads=threads, split=split)
            with tlgpu.no_grad():
                outs.append(F.conv2d(tlgpu.tensor(big), tlgpu.tensor(wb), None, 4).numpy())
    finally:
        tlgpu._C._cpu_blas(threads=state["threads"], split=state["split"])
    want = conv_ref(big.astype(np.float64), wb.astype(np.float64), None, 4)
    for o in outs:
        np.testing.assert_allclose(o, want, rtol=1e-4, atol=1e-3)
    before = _native_state()["convs"]             # with autograd: the composite path and its backward
    xg = tlgpu.tensor(x, requires_grad=True)
    F.conv2d(xg, tlgpu.tensor(w), tlgpu.tensor(b), 2, 1).sum().backward()
    assert _native_state()["convs"] == before and xg.grad is not None


def test_conv2d_native_path_in_a_jitted_forward():
    net = nn.Sequential(nn.Conv2d(4, 8, 8, stride=4), nn.ReLU(), nn.Conv2d(8, 6, 3, stride=2), nn.Flatten())

    def fwd(x):
        with tlgpu.no_grad():
            return net(x)
    j = tlgpu.jit(fwd)
    sd = {k: np.asarray(v, dtype=np.float64) for k, v in net.state_dict().items()}
    for i in range(4):                            # eager, traced, then replays on new inputs
        x = R.standard_normal((3, 4, 36, 36)).astype(np.float32)
        h = np.maximum(conv_ref(x.astype(np.float64), sd["0.weight"], sd["0.bias"], 4), 0)
        want = conv_ref(h, sd["2.weight"], sd["2.bias"], 2).reshape(3, -1)
        np.testing.assert_allclose(j(tlgpu.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-3)
    assert j.traces() == 1
    state = _native_state()
    if state["loaded"] and state["enabled"]:
        assert j.memory_plan()["native"] == 2     # both convolutions replay as native commands
