"""Optimizers on float16/bfloat16 parameters (issue 26): SGD, Adam, AdamW, RAdam and RMSprop keep their state in the
parameter's dtype and compute in float32, rounding each stored value once (torch's fused optimizers). Each is
checked over several steps on random parameters and gradients against a float64 numpy reference of the
algorithm that rounds the state and the parameters to the half dtype after every step: nearly every element
is bit-identical (float32 vs float64 arithmetic may round a value near a tie the other way), the rest within
two units in the last place. Also: mixed float32/half parameter lists (the fused multi-tensor Adam groups by
dtype), state_dict round trips, tlgpu.jit replays, GradScaler on half parameters and a float16 model that
trains with GradScaler."""
import ml_dtypes
import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F
from tlgpu import nn

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALVES = [F16, BF16]
ULP = {F16: 2.0 ** -10, BF16: 2.0 ** -7, np.dtype(np.float32): 2.0 ** -23}
SHAPES = [(40, 30), (1001,), (3, 4, 50)]


def _r(x, dt):
    """x rounded to dt (nearest even), back in float64."""
    return np.asarray(x, np.float64).astype(np.float32).astype(dt).astype(np.float64)


def _close(got, ref, dt, what):
    """got (a tlgpu tensor in dt) against the rounded float64 reference: at most 2 % of the elements differ
    (float32 arithmetic rounds a near-tie the other way, and the difference carries into later steps: 0.6 %
    at most here; an implementation that rounds after every operation, as torch's foreach kernels do, differs
    in 12-25 %),
    each by a few ulps of its value or of the values around it (a cancellation near 0 keeps the operands'
    absolute error)."""
    g = got.numpy()
    assert g.dtype == dt, (what, g.dtype)
    g = g.astype(np.float64)
    if dt == np.float32:
        np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6, err_msg=what)
        return
    diff = g != ref
    assert diff.mean() <= 0.02, f"{what}: {diff.mean():.2%} of the elements differ"
    tol = 4 * ULP[dt] * (np.abs(ref) + np.sqrt(np.mean(ref * ref)))
    np.testing.assert_array_less(np.abs(g - ref), tol + 1e-30, err_msg=what)


def _params(rng, dt, shapes=SHAPES):
    vals = [_r(rng.standard_normal(s), dt) for s in shapes]
    return vals, [tlgpu.tensor(v.astype(dt), requires_grad=True) for v in vals]


def _grads(rng, dt, ts, scale=1.0):
    """Random gradients in dt set on ts; returns their float64 values."""
    gs = [_r(rng.standard_normal(t.shape) * scale, dt) for t in ts]
    for t, g in zip(ts, gs):
        t.grad = tlgpu.tensor(g.astype(dt))
    return gs


# ---- float64 references: float64 arithmetic, state and parameters rounded to dt after each step -------------
# The hyperparameters are the float32 values the kernels receive (_f), so 0.9 * m + 0.1 * g does not land on
# float16 rounding ties the way exact decimal betas make it (9 m + g is a multiple of 5 one time in five).

def _f(x):
    return float(np.float32(x))


def ref_sgd(p, g, st, dt, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    lr, momentum, dampening, weight_decay = map(_f, (lr, momentum, dampening, weight_decay))
    d = g + weight_decay * p
    if momentum:
        b = d if "buf" not in st else momentum * st["buf"] + (1 - dampening) * d
        st["buf"] = _r(b, dt)
        d = d + momentum * b if nesterov else b
    return _r(p - lr * d, dt)


def _moments(p, g, st, dt, lr, betas, weight_decay, decoupled):
    b1, b2 = _f(betas[0]), _f(betas[1])
    if decoupled:
        p = p - lr * weight_decay * p
    else:
        g = g + weight_decay * p
    m = b1 * st.get("m", 0.0) + (1 - b1) * g
    v = b2 * st.get("v", 0.0) + (1 - b2) * g * g
    st["m"], st["v"] = _r(m, dt), _r(v, dt)
    return p, m, v


def ref_adam(p, g, st, dt, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, decoupled=False):
    t = st["t"] = st.get("t", 0) + 1
    bc1, bc2 = _f(1 - betas[0] ** t), _f(1 - betas[1] ** t)
    lr, eps, weight_decay = _f(lr), _f(eps), _f(weight_decay)
    p, m, v = _moments(p, g, st, dt, lr, betas, weight_decay, decoupled)
    if amsgrad:                                     # the max of the stored max and the new (unrounded) v
        v = np.maximum(st.get("vmax", 0.0), v)
        st["vmax"] = _r(v, dt)
    return _r(p - lr * (m / bc1) / (np.sqrt(v / bc2) + eps), dt)


def ref_radam(p, g, st, dt, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False):
    """torch.optim.RAdam's formulas: the rectified step once rho_t > 5, the plain momentum step before."""
    b1, b2 = betas
    t = st["t"] = st.get("t", 0) + 1
    bc1, bc2 = 1 - b1 ** t, 1 - b2 ** t
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2 ** t / bc2
    rect = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) if rho_t > 5 else 0
    step_size = _f(lr * rect * np.sqrt(bc2) / bc1 if rho_t > 5 else lr / bc1)
    lr, eps, weight_decay = _f(lr), _f(eps), _f(weight_decay)
    p, m, v = _moments(p, g, st, dt, lr, betas, weight_decay, decoupled)
    return _r(p - step_size * m / (np.sqrt(v) + eps) if rho_t > 5 else p - step_size * m, dt)


def ref_rmsprop(p, g, st, dt, lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False):
    """torch.optim.RMSprop's formulas (grad_avg by torch's lerp), each stored value rounded to dt."""
    lr, alpha, eps, weight_decay, momentum = map(_f, (lr, alpha, eps, weight_decay, momentum))
    g = g + weight_decay * p
    sq = alpha * st.get("sq", 0.0) + (1 - alpha) * g * g
    den = sq
    if centered:
        ga = st.get("ga", 0.0)
        ga = ga + (1 - alpha) * (g - ga)
        st["ga"] = _r(ga, dt)
        den = sq - ga * ga
    st["sq"] = _r(sq, dt)
    den = np.sqrt(den) + eps
    if momentum:
        b = momentum * st.get("buf", 0.0) + g / den
        st["buf"] = _r(b, dt)
        return _r(p - lr * b, dt)
    return _r(p - lr * g / den, dt)


def _run(rng, dt, make, ref, kw, steps, shapes=SHAPES, lr=0.03):
    vals, ts = _params(rng, dt, shapes)
    opt = make(ts, lr=lr, **kw)
    states = [{} for _ in ts]
    first = [v.copy() for v in vals]
    for _ in range(steps):
        gs = _grads(rng, dt, ts)
        opt.step()
        vals = [ref(v, g, st, dt, lr, **{k: a for k, a in kw.items()}) for v, g, st in zip(vals, gs, states)]
    return ts, vals, states, opt, first


SGD_CASES = [dict(), dict(momentum=0.9), dict(momentum=0.9, dampening=0.3, weight_decay=0.05),
             dict(momentum=0.8, nesterov=True, weight_decay=0.01)]


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("kw", SGD_CASES, ids=lambda k: ",".join(k) or "plain")
def test_sgd_half_matches_rounded_reference(rng, dt, kw):
    ts, vals, states, opt, first = _run(rng, dt, tlgpu.optim.SGD, ref_sgd, kw, steps=6)
    for i, (t, v, st) in enumerate(zip(ts, vals, states)):
        _close(t, v, dt, f"param {i}")
        assert np.abs(v - first[i]).max() > 8 * ULP[dt]          # the parameters moved
        if kw.get("momentum"):
            buf = opt.state[t]["momentum_buffer"]
            _close(buf, st["buf"], dt, f"momentum_buffer {i}")


ADAM_CASES = [(tlgpu.optim.Adam, dict()), (tlgpu.optim.Adam, dict(weight_decay=0.1, betas=(0.8, 0.99))),
              (tlgpu.optim.Adam, dict(amsgrad=True)), (tlgpu.optim.AdamW, dict(weight_decay=0.05)),
              (tlgpu.optim.AdamW, dict(weight_decay=0.05, amsgrad=True, eps=1e-6))]


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("cls,kw", ADAM_CASES, ids=lambda c: c.__name__ if isinstance(c, type) else ",".join(c))
def test_adam_half_matches_rounded_reference(rng, dt, cls, kw):
    decoupled = cls is tlgpu.optim.AdamW
    ref = lambda *a, **k: ref_adam(*a, decoupled=decoupled, **k)     # noqa: E731
    ts, vals, states, opt, first = _run(rng, dt, cls, ref, kw, steps=6)
    for i, (t, v, st) in enumerate(zip(ts, vals, states)):
        _close(t, v, dt, f"param {i}")
        assert np.abs(v - first[i]).max() > 8 * ULP[dt]
        s = opt.state[t]
        assert s["step"] == 6
        _close(s["exp_avg"], st["m"], dt, f"exp_avg {i}")
        _close(s["exp_avg_sq"], st["v"], dt, f"exp_avg_sq {i}")
        if kw.get("amsgrad"):
            _close(s["max_exp_avg_sq"], st["vmax"], dt, f"max_exp_avg_sq {i}")


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("kw", [dict(), dict(weight_decay=0.1, decoupled_weight_decay=True),
                                dict(weight_decay=0.05)], ids=lambda k: ",".join(k) or "plain")
def test_radam_half_matches_rounded_reference(rng, dt, kw):
    """10 steps: the un-adapted first steps (rho_t <= 5) and the rectified ones after."""
    rkw = {k: v for k, v in kw.items() if k != "decoupled_weight_decay"}
    ref = lambda *a, **k: ref_radam(*a, decoupled=kw.get("decoupled_weight_decay", False), **rkw)  # noqa: E731
    ts, vals, states, opt, first = _run(rng, dt, tlgpu.optim.RAdam, ref, kw, steps=10)
    for i, (t, v, st) in enumerate(zip(ts, vals, states)):
        _close(t, v, dt, f"param {i}")
        assert np.abs(v - first[i]).max() > 8 * ULP[dt]
        _close(opt.state[t]["exp_avg"], st["m"], dt, f"exp_avg {i}")
        _close(opt.state[t]["exp_avg_sq"], st["v"], dt, f"exp_avg_sq {i}")


@pytest.mark.parametrize("dt", HALVES + [np.dtype(np.float32)], ids=str)
@pytest.mark.parametrize("kw", [dict(), dict(alpha=0.9, eps=1e-5, weight_decay=0.05), dict(momentum=0.9),
                                dict(centered=True, momentum=0.5)], ids=lambda k: ",".join(k) or "plain")
def test_rmsprop_matches_rounded_reference(rng, dt, kw):
    """RMSprop in each dtype (float32 too: one fused kernel per parameter on every device, so no other test
    covers its float32 build), each state buffer against the reference."""
    ts, vals, states, opt, first = _run(rng, dt, tlgpu.optim.RMSprop, ref_rmsprop, kw, steps=6, lr=0.01)

    def close(got, ref, what):                     # float32: the momentum sum of O(10) steps cancels to ~1e-3
        if dt != np.float32:
            return _close(got, ref, dt, what)
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=2e-6 * (1 + np.sqrt(np.mean(ref * ref))),
                                   err_msg=what)
    for i, (t, v, st) in enumerate(zip(ts, vals, states)):
        close(t, v, f"param {i}")
        assert np.abs(v - first[i]).max() > 8 * ULP[dt]
        s = opt.state[t]
        assert s["step"] == 6 and s["square_avg"].dtype == t.dtype
        close(s["square_avg"], st["sq"], f"square_avg {i}")
        if kw.get("centered"):
            close(s["grad_avg"], st["ga"], f"grad_avg {i}")
        if kw.get("momentum"):
            close(s["momentum_buffer"], st["buf"], f"momentum_buffer {i}")


@pytest.mark.parametrize("cls", [tlgpu.optim.Adam, tlgpu.optim.AdamW, tlgpu.optim.SGD, tlgpu.optim.RAdam,
                                 tlgpu.optim.RMSprop], ids=lambda c: c.__name__)
def test_mixed_dtypes_in_one_optimizer(rng, cls):
    """float32, float16 and bfloat16 parameters in one optimizer (Adam: 11 parameters, so the fused launches
    take 8 of one dtype at most and the groups split by dtype); each follows its own dtype's reference."""
    dts = [np.dtype(np.float32), F16, BF16, F16, np.dtype(np.float32), BF16, F16, F16, BF16, F16, F16]
    shapes = [(5, 3), (9,), (4, 4), (2, 7), (6,), (3, 3), (8,), (1,), (5,), (2, 2), (11,)]
    vals, ts = [], []
    for dt, s in zip(dts, shapes):
        v, t = _params(rng, dt, [s])
        vals += v
        ts += t
    kw = dict(momentum=0.9) if cls is tlgpu.optim.SGD else dict(weight_decay=0.02)
    opt = cls(ts, lr=0.03, **kw)
    ref = {tlgpu.optim.SGD: ref_sgd, tlgpu.optim.RAdam: ref_radam, tlgpu.optim.Adam: ref_adam,
           tlgpu.optim.RMSprop: ref_rmsprop,
           tlgpu.optim.AdamW: lambda *a, **k: ref_adam(*a, decoupled=True, **k)}[cls]
    states = [{} for _ in ts]
    for _ in range(4):
        gs = [_grads(rng, dt, [t])[0] for dt, t in zip(dts, ts)]
        opt.step()
        vals = [ref(v, g, st, dt, 0.03, **kw) if dt != np.float32 else _ref32(ref, v, g, st, kw)
                for v, g, st, dt in zip(vals, gs, states, dts)]
    for i, (t, v, dt) in enumerate(zip(ts, vals, dts)):
        assert t.dtype == dt
        _close(t, v, dt, f"param {i} ({dt})")
        for k, s in opt.state[t].items():
            if isinstance(s, tlgpu.Tensor):
                assert s.dtype == dt, (k, s.dtype, dt)


def _ref32(ref, v, g, st, kw):
    """The float32 parameters' reference: the same algorithm rounded to float32."""
    return ref(v, g, st, np.dtype(np.float32), 0.03, **kw)


def test_adam_half_launch_count_and_zero_size(rng, monkeypatch):
    """Eight float16 parameters and one zero-size: one fused launch (the GPUs' path, forced here); with a float32
    one beside: two."""
    monkeypatch.setattr(tlgpu.optim, "_PER_PARAM", False)
    _, ts = _params(rng, F16, [(3,)] * 8 + [(0, 4)])
    _, t32 = _params(rng, np.dtype(np.float32), [(5,)])
    opt = tlgpu.optim.Adam(ts, lr=0.01)
    _grads(rng, F16, ts)
    opt.step()                                      # the first step also fills the new state with zeros
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    opt.step()
    assert tlgpu.stream_stats()["enqueued"] == 1
    opt2 = tlgpu.optim.Adam(ts[:3] + t32, lr=0.01)
    _grads(rng, np.dtype(np.float32), t32)
    opt2.step()
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    opt2.step()
    assert tlgpu.stream_stats()["enqueued"] == 2
    assert ts[8].shape == (0, 4) and opt.state[ts[8]]["exp_avg"].dtype == F16


def test_wrong_gradient_or_parameter_dtype_raises(rng):
    p = tlgpu.tensor(rng.standard_normal(6).astype(np.float16), requires_grad=True)
    with pytest.raises(TypeError, match="int32"):
        tlgpu.optim.SGD([tlgpu.tensor(np.arange(3, dtype=np.int32))], lr=0.1)
    for cls in (tlgpu.optim.SGD, tlgpu.optim.Adam, tlgpu.optim.RAdam):
        opt = cls([p], lr=0.1)
        p.grad = tlgpu.tensor(rng.standard_normal(6).astype(np.float32))
        with pytest.raises(TypeError, match=r"expected a float16 tensor, got float32 with shape \(6,\)"):
            opt.step()
    with pytest.raises(TypeError, match="expected a float16 tensor, got bfloat16"):
        tlgpu._C._adam_multi([p], [tlgpu.tensor(np.ones(6, BF16))], [tlgpu.zeros(6, dtype=F16)],
                             [tlgpu.zeros(6, dtype=F16)], 0.1, 0.9, 0.99, 1e-8, 0.0, False, 0.1, 0.01)
    q = tlgpu.tensor(np.ones(6, np.float32), requires_grad=True)
    with pytest.raises(TypeError, match="expected a float16 tensor, got float32"):   # one launch, one dtype
        tlgpu._C._adam_multi([p, q], [tlgpu.zeros(6, dtype=F16), tlgpu.zeros(6)],
                             [tlgpu.zeros(6, dtype=F16), tlgpu.zeros(6)], [tlgpu.zeros(6, dtype=F16), tlgpu.zeros(6)],
                             0.1, 0.9, 0.99, 1e-8, 0.0, False, 0.1, 0.01)


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_state_dict_round_trip_keeps_half_state(rng, dt):
    """A resumed half run continues bit for bit: the state comes out in dt and loads back as dt (a float32
    state array given to load_state_dict is rounded to the parameter's dtype, as torch casts it)."""
    _, a = _params(rng, dt, [(4, 5), (7,)])
    b = [tlgpu.tensor(t.numpy(), requires_grad=True) for t in a]
    oa, ob = tlgpu.optim.Adam(a, lr=0.02, amsgrad=True), tlgpu.optim.Adam(b, lr=0.02, amsgrad=True)
    grads = [[rng.standard_normal(t.shape).astype(dt) for t in a] for _ in range(5)]
    for k in range(5):
        for ps, opt in ((a, oa), (b, ob)):
            for t, g in zip(ps, grads[k]):
                t.grad = tlgpu.tensor(g)
            opt.step()
        if k == 2:
            sd = ob.state_dict()
            assert sd["state"][0]["exp_avg"].dtype == dt and sd["state"][0]["step"] == 3
            sd["state"][1]["exp_avg_sq"] = sd["state"][1]["exp_avg_sq"].astype(np.float32)
            ob = tlgpu.optim.Adam(b, lr=0.02, amsgrad=True)
            ob.load_state_dict(sd)
            assert ob.state[b[1]]["exp_avg_sq"].dtype == dt
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x.numpy(), y.numpy())


def _half_mlp(seed, dt, cls, **kw):
    tlgpu.manual_seed(seed)
    m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3)).to(dt)
    return m, cls(m.parameters(), **kw)


@pytest.mark.parametrize("cls,kw", [(tlgpu.optim.Adam, dict(lr=1e-2)), (tlgpu.optim.SGD, dict(lr=0.1, momentum=0.9)),
                                    (tlgpu.optim.RAdam, dict(lr=1e-2))], ids=lambda c: getattr(c, "__name__", ""))
def test_jit_replays_half_training_equal_eager(rng, cls, kw):
    """A float16 training step through tlgpu.jit: the replays refresh the half kernels' step-dependent
    scalars at the same argument indices as the float32 ones, so the parameters equal the eager run's."""
    m1, o1 = _half_mlp(3, F16, cls, **kw)
    m2, o2 = _half_mlp(3, F16, cls, **kw)

    def step_of(model, opt):
        def step(x, y):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return step
    eager, jitted = step_of(m1, o1), tlgpu.jit(step_of(m2, o2))
    warm = 8 if cls is tlgpu.optim.RAdam else 0
    for i in range(warm + 8):
        x = tlgpu.tensor(rng.standard_normal((16, 8)).astype(np.float16))
        y = tlgpu.tensor(rng.integers(0, 3, 16).astype(np.int32))
        eager(x, y)
        (step_of(m2, o2) if i < warm else jitted)(x, y)
    for a, b in zip(m1.parameters(), m2.parameters()):
        assert b.dtype == F16
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert jitted.traces() == 1
    steps = [s["step"] for s in o2.state.values() if "step" in s]     # advanced by the replays (SGD has none)
    assert steps == ([] if cls is tlgpu.optim.SGD else [warm + 8] * 4)


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_gradscaler_unscales_half_grads_and_steps(rng, dt):
    """GradScaler on half parameters: unscale_ divides the half gradients (powers of two: exact), step runs the
    half Adam on them, an inf gradient skips the step."""
    vals, ts = _params(rng, dt, [(6, 3), (5,)])
    opt = tlgpu.optim.Adam(ts, lr=0.05)
    scaler = tlgpu.amp.GradScaler(init_scale=2.0 ** 8)
    gs = [_r(rng.standard_normal(t.shape), dt) for t in ts]
    for t, g in zip(ts, gs):
        t.grad = tlgpu.tensor((g * 2.0 ** 8).astype(dt))
    scaler.unscale_(opt)
    for t, g in zip(ts, gs):
        assert t.grad.dtype == dt
        np.testing.assert_array_equal(t.grad.numpy().astype(np.float64), g)
    scaler.step(opt)
    scaler.update()
    for t, v, g in zip(ts, vals, gs):
        _close(t, ref_adam(v, g, {}, dt, 0.05), dt, "after the scaled step")
    before = [t.numpy().copy() for t in ts]
    bad = gs[1].copy()
    bad[2] = np.inf
    ts[0].grad, ts[1].grad = tlgpu.tensor(gs[0].astype(dt)), tlgpu.tensor(bad.astype(dt))
    assert scaler.step(opt) is None
    scaler.update()
    assert scaler.get_scale() == 2.0 ** 7
    for t, b in zip(ts, before):
        np.testing.assert_array_equal(t.numpy(), b)


def test_float16_model_trains_with_gradscaler(rng):
    """A float16 MLP (float16 parameters, Adam state in float16) fits a smooth function with GradScaler: the
    first scale overflows float16 (steps skipped, the scale backs off), then the loss falls tenfold."""
    tlgpu.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1)).half()
    opt = tlgpu.optim.Adam(model.parameters(), lr=1e-2)
    scaler = tlgpu.amp.GradScaler(init_scale=2.0 ** 24)
    xs = rng.uniform(-1, 1, (128, 4)).astype(np.float32)
    ys = (np.sin(2 * xs[:, :1]) * xs[:, 1:2] + 0.5 * xs[:, 2:3]).astype(np.float32)
    x, y = tlgpu.tensor(xs.astype(np.float16)), tlgpu.tensor(ys)
    losses, skipped = [], 0
    for _ in range(150):
        loss = F.mse_loss(model(x).float(), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        skipped += scaler.step(opt) is None
        scaler.update()
        losses.append(loss.item())
    assert all(p.dtype == F16 for p in model.parameters())
    assert all(s.dtype == F16 for st in opt.state.values() for s in st.values() if isinstance(s, tlgpu.Tensor))
    assert skipped >= 1 and scaler.get_scale() < 2.0 ** 24
    assert np.isfinite(losses).all()
    assert np.mean(losses[-10:]) < 0.1 * losses[0], (losses[0], losses[-10:])
