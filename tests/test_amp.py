"""Mixed precision (issue 26): matmul/addmm/linear/conv2d on float16/bfloat16 operands against float32 numpy
references, autocast's rules (result dtypes inside, float32 outside, float32 parameters' float32 gradients,
per thread), a small MLP trained under autocast(bfloat16), and GradScaler (exact scaling, a skipped step on an
inf gradient with the scale backing off, growth after growth_interval clean steps, state_dict)."""
import sys
import threading

import numpy as np
import pytest
from ml_dtypes import bfloat16

import tlgpu
import tlgpu.nn as nn
import tlgpu.nn.functional as F

HALVES = [np.float16, bfloat16]
TOL = {np.float16: 2e-3, bfloat16: 1.6e-2}        # docs/precision.md: ops against float32 on the same values


def _half(rng, shape, dt):
    return rng.standard_normal(shape).astype(dt)


def _f(a):
    return np.asarray(a).astype(np.float32)


def _close(got, ref, dt, scale=1.0):
    tol = TOL[dt] * scale
    np.testing.assert_allclose(_f(got), _f(ref), rtol=tol, atol=tol * max(1.0, float(np.abs(_f(ref)).max())))


# ---- half operands -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", HALVES)
@pytest.mark.parametrize("shapes", [((7, 33), (33, 5)), ((3, 4, 9), (3, 9, 6)), ((2, 5, 8), (8,)), ((8,), (8, 3)),
                                    ((2, 1, 4, 6), (3, 6, 2))])
def test_matmul_half_against_numpy(rng, dt, shapes):
    a, b = _half(rng, shapes[0], dt), _half(rng, shapes[1], dt)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    for out in (ta @ tb, tlgpu.matmul(ta, tb), ta.matmul(tb)):
        assert out.dtype == np.dtype(dt)
        ref = (_f(a) @ _f(b)).astype(dt)              # float32 accumulation, one rounding
        _close(out.numpy(), ref, dt)


@pytest.mark.parametrize("dt", HALVES)
def test_matmul_mixed_promotes_to_float32(rng, dt):
    a, b = _half(rng, (6, 10), dt), rng.standard_normal((10, 4)).astype(np.float32)
    out = tlgpu.tensor(a) @ tlgpu.tensor(b)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out.numpy(), _f(a) @ b, rtol=1e-5, atol=1e-5)
    other = np.float16 if dt is bfloat16 else bfloat16
    c = _half(rng, (10, 4), other)
    out2 = tlgpu.tensor(a) @ tlgpu.tensor(c)
    assert out2.dtype == np.float32
    np.testing.assert_allclose(out2.numpy(), _f(a) @ _f(c), rtol=1e-5, atol=1e-5)


def test_matmul_int_operand_names_op_dtype_shape(rng):
    with pytest.raises(TypeError, match=r"matmul: expected a float32 tensor, got int32 with shape \(2, 3\)"):
        tlgpu.tensor(np.ones((2, 3), np.int32)) @ tlgpu.tensor(_half(rng, (3, 2), np.float16))


def test_linear_conv_int_operands_name_op_dtype_shape(rng):
    h = tlgpu.tensor(_half(rng, (2, 3), np.float16))
    with pytest.raises(TypeError, match=r"linear: expected a float32 tensor, got int32 with shape \(4, 3\)"):
        F.linear(h, tlgpu.tensor(np.ones((4, 3), np.int32)))
    with pytest.raises(TypeError, match=r"conv2d: expected a float32 tensor, got uint8 with shape \(1, 1, 3, 3\)"):
        F.conv2d(tlgpu.tensor(np.ones((1, 1, 3, 3), np.uint8)), tlgpu.tensor(_half(rng, (1, 1, 2, 2), bfloat16)))
    with pytest.raises(TypeError, match=r"addmm: expected a float32 tensor, got int32 with shape \(2,\)"):
        tlgpu.addmm(tlgpu.tensor(np.ones(2, np.int32)), h, h.T)


@pytest.mark.parametrize("dt", HALVES)
def test_matmul_half_grads_in_input_dtype(rng, dt):
    a, b, g = _half(rng, (5, 7), dt), _half(rng, (7, 3), dt), rng.standard_normal((5, 3)).astype(np.float32)
    ta, tb = tlgpu.tensor(a, requires_grad=True), tlgpu.tensor(b, requires_grad=True)
    (ta @ tb).backward(tlgpu.tensor(g.astype(dt)))
    assert ta.grad.dtype == np.dtype(dt) and tb.grad.dtype == np.dtype(dt)
    gh = _f(g.astype(dt))
    _close(ta.grad.numpy(), gh @ _f(b).T, dt, 2)
    _close(tb.grad.numpy(), _f(a).T @ gh, dt, 2)


def test_matmul_mixed_grads_keep_each_dtype(rng):
    a, b = _half(rng, (4, 6), bfloat16), rng.standard_normal((6, 3)).astype(np.float32)
    ta, tb = tlgpu.tensor(a, requires_grad=True), tlgpu.tensor(b, requires_grad=True)
    (ta @ tb).sum().backward()
    assert ta.grad.dtype == np.dtype(bfloat16) and tb.grad.dtype == np.float32
    np.testing.assert_allclose(tb.grad.numpy(), _f(a).T @ np.ones((4, 3), np.float32), rtol=1e-5, atol=1e-5)
    _close(ta.grad.numpy(), np.ones((4, 3), np.float32) @ b.T, bfloat16)


@pytest.mark.parametrize("dt", HALVES)
def test_linear_and_addmm_half(rng, dt):
    x, w, b = _half(rng, (2, 5, 12), dt), _half(rng, (4, 12), dt), _half(rng, (4,), dt)
    out = F.linear(tlgpu.tensor(x), tlgpu.tensor(w), tlgpu.tensor(b))
    assert out.dtype == np.dtype(dt) and out.shape == (2, 5, 4)
    _close(out.numpy(), _f(x) @ _f(w).T + _f(b), dt)
    c, m1, m2 = _half(rng, (3, 4), dt), _half(rng, (3, 9), dt), _half(rng, (9, 4), dt)
    out = tlgpu.addmm(tlgpu.tensor(c), tlgpu.tensor(m1), tlgpu.tensor(m2))
    assert out.dtype == np.dtype(dt)
    _close(out.numpy(), _f(c) + _f(m1) @ _f(m2), dt)


@pytest.mark.parametrize("dt", HALVES)
def test_linear_half_module_grads(rng, dt):
    lin = nn.Linear(6, 3).to(dt)
    x = _half(rng, (5, 6), dt)
    y = lin(tlgpu.tensor(x))
    assert y.dtype == np.dtype(dt)
    y.float().sum().backward()
    w = _f(lin.weight.numpy())
    assert lin.weight.grad.dtype == np.dtype(dt) and lin.bias.grad.dtype == np.dtype(dt)
    _close(y.numpy(), _f(x) @ w.T + _f(lin.bias.numpy()), dt)
    _close(lin.weight.grad.numpy(), np.ones((5, 3), np.float32).T @ _f(x), dt, 2)
    _close(lin.bias.grad.numpy(), np.full(3, 5.0, np.float32), dt)


def _conv_ref(x, w, b, stride=1, padding=0):
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (wd - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = x[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, w[:, :, i, j])
    return out + b[None, :, None, None]


@pytest.mark.parametrize("dt", HALVES)
def test_conv2d_half(rng, dt):
    x, w, b = _half(rng, (2, 3, 9, 8), dt), _half(rng, (4, 3, 3, 3), dt), _half(rng, (4,), dt)
    tx, tw = tlgpu.tensor(x, requires_grad=True), tlgpu.tensor(w, requires_grad=True)
    out = F.conv2d(tx, tw, tlgpu.tensor(b), stride=2, padding=1)
    assert out.dtype == np.dtype(dt)
    _close(out.numpy(), _conv_ref(_f(x), _f(w), _f(b), 2, 1), dt)
    out.float().sum().backward()
    assert tx.grad.dtype == np.dtype(dt) and tw.grad.dtype == np.dtype(dt)
    # the float32 convolution on the same values gives the reference gradients
    fx, fw = tlgpu.tensor(_f(x), requires_grad=True), tlgpu.tensor(_f(w), requires_grad=True)
    F.conv2d(fx, fw, tlgpu.tensor(_f(b)), stride=2, padding=1).sum().backward()
    _close(tw.grad.numpy(), fw.grad.numpy(), dt, 2)
    _close(tx.grad.numpy(), fx.grad.numpy(), dt, 2)


@pytest.mark.parametrize("dt", HALVES)
def test_conv2d_module_half(rng, dt):
    conv = nn.Conv2d(2, 3, 3, padding=1).to(dt)
    x = _half(rng, (1, 2, 6, 5), dt)
    out = conv(tlgpu.tensor(x))
    assert out.dtype == np.dtype(dt)
    _close(out.numpy(), _conv_ref(_f(x), _f(conv.weight.numpy()), _f(conv.bias.numpy()), 1, 1), dt)


# ---- autocast ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", HALVES)
def test_autocast_low_precision_ops(rng, dt):
    a, b = rng.standard_normal((6, 10)).astype(np.float32), rng.standard_normal((10, 4)).astype(np.float32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    w, bias = tlgpu.tensor(b.T.copy()), tlgpu.tensor(rng.standard_normal(4).astype(np.float32))
    ref = _f(a.astype(dt)) @ _f(b.astype(dt))
    with tlgpu.autocast(dtype=dt):
        assert tlgpu.is_autocast_enabled() and tlgpu.get_autocast_dtype() == np.dtype(dt)
        for out in (ta @ tb, tlgpu.matmul(ta, tb), ta.matmul(tb)):
            assert out.dtype == np.dtype(dt)
            _close(out.numpy(), ref, dt)
        lin = F.linear(ta, w, bias)
        assert lin.dtype == np.dtype(dt)
        _close(lin.numpy(), ref + _f(bias.numpy().astype(dt)), dt)
        assert tlgpu.addmm(bias, ta, tb).dtype == np.dtype(dt)
        assert ta[0].dot(ta[1]).dtype == np.dtype(dt)
        conv = F.conv2d(tlgpu.tensor(rng.standard_normal((1, 2, 5, 5)).astype(np.float32)),
                        tlgpu.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32)))
        assert conv.dtype == np.dtype(dt)
        assert (ta + ta).dtype == np.float32                      # elementwise: not autocast (torch)
    assert not tlgpu.is_autocast_enabled() and tlgpu.get_autocast_dtype() is None
    assert (ta @ tb).dtype == np.float32
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dt", HALVES)
def test_autocast_rounding_is_the_explicit_casts(rng, dt):
    """Under autocast a float32 operand is rounded through the low dtype in one step (one launch on CPU devices,
    its gradient rounded the same way): the same bits, forward and backward, as casting the operands to the
    low dtype by hand outside autocast (two conversions each way; on GPUs within half precision: same())."""
    def leaves(*arrays):
        return [tlgpu.tensor(a, requires_grad=True) for a in arrays]

    x, w, b = (rng.standard_normal(s).astype(np.float32) * 3 for s in ((7, 13), (5, 13), (5,)))
    img, k = rng.standard_normal((2, 3, 6, 7)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    g = tlgpu.tensor(rng.standard_normal((7, 5)).astype(np.float32))
    gc = tlgpu.tensor(rng.standard_normal((2, 4, 4, 5)).astype(np.float32))
    cases = [(lambda a, c, e: tlgpu._C.linear(a, c, e, activation="relu"), (x, w, b), g),   # nn.Sequential's
             (lambda a, c, e: F.linear(a, c, e), (x, w, b), g),
             (lambda a, c, e: tlgpu.addmm(e, a, c.T), (x, w, b), g),
             (lambda a, c, e: F.conv2d(a, c, e), (img, k, b[:4].copy()), gc)]
    for fn, arrays, grad in cases:
        auto = leaves(*arrays)
        with tlgpu.autocast(dtype=dt):
            ya = fn(*auto)
        (ya.float() * grad).sum().backward()
        manual = leaves(*arrays)
        ym = fn(*(t.to(dt) for t in manual))
        (ym.float() * grad).sum().backward()
        assert ya.dtype == ym.dtype == np.dtype(dt)
        same(ya.numpy(), ym.numpy())
        for p, q in zip(auto, manual):
            assert p.grad is not None and p.grad.dtype == np.float32
            same(p.grad.numpy(), q.grad.numpy())


def same(a, b):
    """Bit for bit on CPU devices; on GPUs, where hand-cast half operands may take another product kernel (a
    half weight read as stored) than autocast's float32 ones, within half precision."""
    if tlgpu.device().type == "cpu":
        assert np.array_equal(a.view(np.uint16 if a.itemsize == 2 else np.uint32),
                              b.view(np.uint16 if b.itemsize == 2 else np.uint32))
    else:
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=2 ** -6,
                                   atol=2 ** -6 * float(np.abs(b.astype(np.float32)).max()))


def _enqueued(fn):
    tlgpu.synchronize()
    tlgpu._C.reset_stream_stats()
    out = fn()
    return out, tlgpu._C.stream_stats()["enqueued"]


def test_autocast_casts_a_parameter_once_a_region(rng):
    """torch's cast cache: within the outermost region a parameter is cast once (one conversion command fewer
    for each later use; its gradient the uses' sum rounded once); cache_enabled=False casts at every use; a nested
    region's end keeps the casts, the outermost's drops them (the parameter's references come back)."""
    w = tlgpu.tensor(rng.standard_normal((6, 9)).astype(np.float32), requires_grad=True)
    xs = [tlgpu.tensor(rng.standard_normal((4, 9)).astype(np.float32)) for _ in range(3)]
    refs = sys.getrefcount(w)
    grads, launches = [], []
    for cache in (True, False):
        w.grad = None
        with tlgpu.autocast(dtype=bfloat16, cache_enabled=cache):
            first, n1 = _enqueued(lambda: F.linear(xs[0], w))
            with tlgpu.autocast(dtype=bfloat16):
                second, n2 = _enqueued(lambda: F.linear(xs[1], w))
            third, n3 = _enqueued(lambda: F.linear(xs[2], w))
        (first.float().sum() + (second.float() * 2).sum() + (third.float() * 3).sum()).backward()
        grads.append(w.grad.numpy())
        launches.append((n1, n2, n3))
        del first, second, third
        assert sys.getrefcount(w) == refs
    assert launches[0][1] == launches[0][2] < launches[0][0], launches     # the cast: 1 command here, 2 on GPUs
    assert launches[1][0] == launches[1][1] == launches[1][2], launches
    # one cast node: the three uses' bfloat16 gradients summed, then widened (as torch, where the products run in
    # bfloat16: tensor cores, the CPU BLAS command); without the cache each use's is widened, then summed
    want = sum(k * xs[k - 1].numpy().astype(bfloat16).astype(np.float32).sum(0) for k in (1, 2, 3))
    for got in grads:
        np.testing.assert_allclose(got, np.broadcast_to(want, (6, 9)), rtol=2 ** -6, atol=2 ** -5)


def test_autocast_cache_sees_in_place_updates_no_grad_and_jit(rng):
    """A parameter written in place inside the region is cast again (its new values); a cast made under no_grad
    is not kept (a later use still gets a gradient); tlgpu.jit's trace makes its own casts, so a replay inside
    one long region follows the parameter's updates; a replayed update (which bumps the version) is seen too."""
    w = tlgpu.tensor(rng.standard_normal((5, 7)).astype(np.float32), requires_grad=True)
    x = tlgpu.tensor(rng.standard_normal((3, 7)).astype(np.float32))

    def want():
        return x.numpy().astype(bfloat16).astype(np.float32) @ w.numpy().astype(bfloat16).astype(np.float32).T

    def f(x):
        return F.linear(x, w)

    def update(d):
        with tlgpu.no_grad():
            w.add_(d)

    jf, jupdate = tlgpu.jit(f), tlgpu.jit(update)     # a replayed update bumps the version: the cache sees it
    with tlgpu.autocast(dtype=bfloat16):
        with tlgpu.no_grad():
            np.testing.assert_allclose(F.linear(x, w).numpy().astype(np.float32), want(), rtol=1e-2, atol=1e-2)
        y = F.linear(x, w)
        y.float().sum().backward()
        assert w.grad is not None                       # the no_grad cast was not reused
        for step in range(8):
            d = tlgpu.tensor(rng.standard_normal((5, 7)).astype(np.float32))
            update(d) if step % 2 else jupdate(d)
            got = [F.linear(x, w), jf(x)]
            for g in got:
                np.testing.assert_allclose(g.numpy().astype(np.float32), want(), rtol=1e-2, atol=1e-2)
            assert np.array_equal(got[0].numpy().view(np.uint16), got[1].numpy().view(np.uint16)), step


def test_autocast_float32_ops(rng):
    x = rng.standard_normal((5, 6)).astype(np.float32)
    w = tlgpu.tensor(rng.standard_normal((6, 6)).astype(np.float32))
    t = tlgpu.tensor(rng.integers(0, 6, 5).astype(np.int32))
    with tlgpu.autocast(dtype=tlgpu.bfloat16):
        y = tlgpu.tensor(x) @ w                                    # bfloat16
        assert y.dtype == np.dtype(bfloat16)
        for out in (y.sum(), y.mean(), y.sum(1), y.mean(0), F.softmax(y, -1), F.log_softmax(y, -1),
                    F.cross_entropy(y, t), F.mse_loss(y, y * 0.5), F.layer_norm(y, (6,))):
            assert out.dtype == np.float32
        assert y.max().dtype == np.dtype(bfloat16)                 # not in autocast's float32 list
        yn = _f(y.numpy())
        np.testing.assert_allclose(F.softmax(y, -1).numpy(), np.exp(yn) / np.exp(yn).sum(-1, keepdims=True),
                                   rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y.sum().numpy(), yn.sum(), rtol=1e-5, atol=1e-4)
    assert y.sum().dtype == np.dtype(bfloat16)                      # outside: the input's dtype again


def test_autocast_params_stay_float32_with_float32_grads(rng):
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    x = tlgpu.tensor(rng.standard_normal((4, 8)).astype(np.float32))
    t = tlgpu.tensor(rng.integers(0, 3, 4).astype(np.int32))
    with tlgpu.autocast(dtype=tlgpu.bfloat16):
        out = model(x)
        loss = F.cross_entropy(out, t)
    assert out.dtype == np.dtype(bfloat16) and loss.dtype == np.float32
    loss.backward()
    for p in model.parameters():
        assert p.dtype == np.float32 and p.grad is not None and p.grad.dtype == np.float32
    # the same gradients as float32 on the bfloat16-rounded values, within bfloat16 precision
    ref = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    with tlgpu.no_grad():
        for p, q in zip(model.parameters(), ref.parameters()):
            q.copy_(tlgpu.tensor(_f(p.numpy().astype(bfloat16))))
    F.cross_entropy(ref(tlgpu.tensor(_f(x.numpy().astype(bfloat16)))), t).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=0.05, atol=0.05 * np.abs(q.grad.numpy()).max())


def test_autocast_decorator_disable_nesting_and_backward():
    a = tlgpu.tensor(np.random.default_rng(1).standard_normal((3, 3)).astype(np.float32), requires_grad=True)

    @tlgpu.autocast(dtype=tlgpu.float16)
    def f(x):
        return x @ x

    assert f(a).dtype == np.float16 and tlgpu.get_autocast_dtype() is None
    with tlgpu.autocast("cuda", dtype=tlgpu.float16):
        with tlgpu.autocast(enabled=False):
            assert (a @ a).dtype == np.float32
        with tlgpu.amp.autocast(device_type="cpu"):                    # default bfloat16, device_type ignored
            assert (a @ a).dtype == np.dtype(bfloat16)
        y = a @ a
        assert y.dtype == np.float16
        y.float().sum().backward()                                    # backward inside autocast: grads float32
        assert a.grad.dtype == np.float32
    with pytest.raises(ValueError, match="float16 or bfloat16"):
        tlgpu.autocast(dtype=np.float32)


def test_autocast_is_per_thread():
    a = tlgpu.tensor(np.eye(4, dtype=np.float32))
    seen = {}
    entered, done = threading.Event(), threading.Event()

    def other():
        entered.wait()
        seen["other"] = (a @ a).dtype
        done.set()

    th = threading.Thread(target=other)
    th.start()
    with tlgpu.autocast(dtype=tlgpu.bfloat16):
        entered.set()
        done.wait()
        seen["mine"] = (a @ a).dtype
    th.join()
    assert seen == {"other": np.float32, "mine": np.dtype(bfloat16)}


def test_mlp_trains_under_autocast_bfloat16():
    rng = np.random.default_rng(7)
    n, d = 256, 8
    x = rng.standard_normal((n, d)).astype(np.float32)
    y = (np.sin(x[:, :1] * 1.5) + 0.5 * x[:, 1:2] * x[:, 2:3]).astype(np.float32)   # a fixed regression
    tx, ty = tlgpu.tensor(x), tlgpu.tensor(y)
    tlgpu.manual_seed(0)
    model = nn.Sequential(nn.Linear(d, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1))
    opt = tlgpu.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(300):
        with tlgpu.autocast(dtype=tlgpu.bfloat16):
            pred = model(tx)
            loss = F.mse_loss(pred, ty)
        assert pred.dtype == np.dtype(bfloat16) and loss.dtype == np.float32
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(p.dtype == np.float32 for p in model.parameters())
    assert np.isfinite(losses).all()
    assert np.mean(losses[-10:]) < 0.1 * losses[0], (losses[0], losses[-10:])


# ---- GradScaler --------------------------------------------------------------------------------------------

def _param(values):
    return tlgpu.tensor(np.asarray(values, np.float32), requires_grad=True)


def test_gradscaler_scale_and_unscale_exact(rng):
    w = _param(rng.standard_normal(37))
    x = rng.standard_normal(37).astype(np.float32)
    opt = tlgpu.optim.SGD([w], lr=0.5)
    scaler = tlgpu.amp.GradScaler(init_scale=2.0 ** 10)
    loss = (w * tlgpu.tensor(x)).sum()
    scaled = scaler.scale(loss)
    assert scaled.item() == np.float32(loss.item()) * np.float32(1024.0)
    scaled.backward()
    np.testing.assert_array_equal(w.grad.numpy(), x * np.float32(1024.0))
    scaler.unscale_(opt)
    np.testing.assert_array_equal(w.grad.numpy(), x)                 # powers of two: exact
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    before = w.numpy().copy()
    scaler.step(opt)
    np.testing.assert_allclose(w.numpy(), before - 0.5 * x, rtol=1e-6, atol=1e-6)
    scaler.update()
    assert scaler.get_scale() == 1024.0
    assert scaler.scale([loss, {"a": loss}])[1]["a"].item() == scaled.item()


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_gradscaler_skips_step_on_inf_and_backs_off(rng, bad):
    w1, w2 = _param(rng.standard_normal(5)), _param(rng.standard_normal((3, 4)))
    opt = tlgpu.optim.SGD([{"params": [w1]}, {"params": [w2], "lr": 0.1}], lr=0.5)
    scaler = tlgpu.amp.GradScaler(init_scale=256.0, growth_interval=3)
    g2 = rng.standard_normal((3, 4)).astype(np.float32)
    g2[1, 2] = bad
    scaler.scale((w1 * 2.0).sum() + (w2 * tlgpu.tensor(g2)).sum()).backward()
    b1, b2 = w1.numpy().copy(), w2.numpy().copy()
    assert scaler.step(opt) is None
    np.testing.assert_array_equal(w1.numpy(), b1)                    # skipped: nothing moved
    np.testing.assert_array_equal(w2.numpy(), b2)
    scaler.update()
    assert scaler.get_scale() == 128.0
    assert scaler.state_dict()["_growth_tracker"] == 0


def test_gradscaler_one_host_read_per_step(rng):
    ws = [_param(rng.standard_normal((3, 4))), _param(rng.standard_normal(5)), _param(rng.standard_normal(2))]
    opt = tlgpu.optim.SGD(ws, lr=0.1)
    scaler = tlgpu.amp.GradScaler()
    scaler.scale(sum((w * 1.5).sum() for w in ws)).backward()
    tlgpu.synchronize()
    tlgpu._C.reset_stream_stats()
    scaler.step(opt)
    scaler.update()
    assert tlgpu._C.stream_stats()["waits"] == 1                      # found_inf.item(), nothing else
    for w in ws:
        np.testing.assert_allclose(w.grad.numpy(), np.full(w.shape, 1.5, np.float32))


def test_gradscaler_growth_after_interval_and_state_dict(rng):
    w = _param(rng.standard_normal(6))
    opt = tlgpu.optim.SGD([w], lr=0.01)
    scaler = tlgpu.amp.GradScaler(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=3)
    x = tlgpu.tensor(rng.standard_normal(6).astype(np.float32))
    scales = []
    for _ in range(7):
        opt.zero_grad()
        scaler.scale((w * x).sum()).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    assert scales == [8.0, 8.0, 32.0, 32.0, 32.0, 128.0, 128.0]
    sd = scaler.state_dict()
    assert sd == {"scale": 128.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 3,
                  "_growth_tracker": 1}
    other = tlgpu.amp.GradScaler()
    other.load_state_dict(sd)
    assert other.state_dict() == sd and other.get_scale() == 128.0
    off = tlgpu.amp.GradScaler(enabled=False)
    assert off.get_scale() == 1.0 and off.state_dict() == {} and off.scale(x) is x


def test_gradscaler_float16_model_with_overflow(rng):
    """A float16 loss scaled past float16's range overflows: the step is skipped and the scale backs off until
    the scaled gradients fit, then the steps go through (the float16 training loop GradScaler exists for)."""
    lin = nn.Linear(4, 1).to(np.float16)
    x = tlgpu.tensor(rng.standard_normal((8, 4)).astype(np.float16))
    scaler = tlgpu.amp.GradScaler(init_scale=2.0 ** 20)

    class Plain:                                     # counts the steps GradScaler lets through
        param_groups = [{"params": list(lin.parameters())}]
        steps = 0

        def step(self):
            Plain.steps += 1

    opt = Plain()
    skipped = 0
    for _ in range(12):
        for p in lin.parameters():
            p.grad = None
        scaler.scale(lin(x).float().sum()).backward()
        before = Plain.steps
        scaler.step(opt)
        skipped += Plain.steps == before
        scaler.update()
    assert skipped >= 1 and Plain.steps >= 1
    assert scaler.get_scale() < 2.0 ** 20
