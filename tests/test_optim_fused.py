"""Optimizers in chunked launches (kernels/optim.cl's tl_adamc, tl_sgdc, tl_radamc and tl_rmspropc, the CPU
devices' path): every parameter of a step in one launch (8 a launch, 6 for Adam with amsgrad and for RMSprop
centered with momentum), bit for bit what the per-parameter kernels compute. Odd sizes (1, 3, 1000, 4097, 8193:
chunk edges and tails), zero-size parameters, parameters without a gradient at some steps (other step counts, so other launches), weight decay,
amsgrad, momentum, nesterov, RAdam's both steps, and float16/bfloat16 parameters; launch counts; argument
errors. tlgpu.jit replays of the chunked steps: tests/test_jit.py."""
import ml_dtypes
import numpy as np
import pytest

import tlgpu

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
F32 = np.dtype(np.float32)
SHAPES = [(1,), (3,), (1000,), (4097,), (0, 4), (8193,), (5, 7), (4096,), (2, 3), (33, 130)]


def _bits(t):
    a = t.numpy()
    return a.view(np.uint32 if a.dtype == F32 else np.uint16)


def _pair(rng, dt, cls, shapes, **kw):
    """Two optimizers over equal copies of random parameters."""
    vals = [(rng.standard_normal(s) * 2).astype(np.float32).astype(dt) for s in shapes]
    ps = [[tlgpu.tensor(v, requires_grad=True) for v in vals] for _ in range(2)]
    return ps, [cls(p, **kw) for p in ps]


CASES = [(tlgpu.optim.Adam, dict(lr=0.05, weight_decay=0.03)),
         (tlgpu.optim.Adam, dict(lr=0.05, weight_decay=0.03, amsgrad=True)),
         (tlgpu.optim.AdamW, dict(lr=0.05, weight_decay=0.03)),
         (tlgpu.optim.AdamW, dict(lr=0.05, weight_decay=0.03, amsgrad=True)),
         (tlgpu.optim.SGD, dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.03)),
         (tlgpu.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
         (tlgpu.optim.SGD, dict(lr=0.05, weight_decay=0.03)),
         (tlgpu.optim.RAdam, dict(lr=0.05, weight_decay=0.03)),
         (tlgpu.optim.RAdam, dict(lr=0.05, weight_decay=0.03, decoupled_weight_decay=True)),
         (tlgpu.optim.RMSprop, dict(lr=0.01, weight_decay=0.03)),
         (tlgpu.optim.RMSprop, dict(lr=0.01, momentum=0.9)),
         (tlgpu.optim.RMSprop, dict(lr=0.01, centered=True)),
         (tlgpu.optim.RMSprop, dict(lr=0.01, alpha=0.9, centered=True, momentum=0.5))]
IDS = [f"{c.__name__}-{'-'.join(f'{k}={v}' for k, v in kw.items() if k != 'lr')}" for c, kw in CASES]


@pytest.mark.parametrize("dt", [F32, F16, BF16], ids=str)
@pytest.mark.parametrize("cls,kw", CASES, ids=IDS)
def test_chunked_bits_equal_per_parameter_kernel(rng, monkeypatch, dt, cls, kw):
    """Both optimizers step equal parameters with equal gradients for 9 steps (RAdam's switch to the rectified
    step at step 6 included), the chunked one 8 parameters a launch: parameters and state equal bit for bit
    after every step."""
    monkeypatch.setattr(tlgpu.optim, "_PER_PARAM", None)
    (pc, pp), (oc, op) = _pair(rng, dt, cls, SHAPES, **kw)
    start = [p.numpy() for p in pc]
    for step in range(9):
        for k in range(len(SHAPES)):
            if (k + step) % 4 == 0 and step < 6:       # no gradient now: skips the step, other step counts
                pc[k].grad = pp[k].grad = None
                continue
            g = (rng.standard_normal(SHAPES[k]) * (0.1 + step)).astype(np.float32).astype(dt)
            pc[k].grad, pp[k].grad = tlgpu.tensor(g), tlgpu.tensor(g)
        monkeypatch.setattr(tlgpu.optim, "_MODE", "chunked")
        oc.step()
        monkeypatch.setattr(tlgpu.optim, "_MODE", "per_param")
        op.step()
        for k in range(len(SHAPES)):
            np.testing.assert_array_equal(_bits(pc[k]), _bits(pp[k]), err_msg=f"step {step}, param {k}")
            for name, s in op.state.get(pp[k], {}).items():
                if isinstance(s, tlgpu.Tensor):
                    np.testing.assert_array_equal(_bits(oc.state[pc[k]][name]), _bits(s), err_msg=name)
    moved = [not np.array_equal(p.numpy(), v) for p, v in zip(pc, start) if p.numel()]
    assert all(moved)                                  # every parameter took steps
    assert all(oc.state[p].get("step") == op.state[q].get("step") for p, q in zip(pc, pp) if p in oc.state)


def test_chunked_float32_matches_numpy(rng, monkeypatch):
    """The chunked step against a float64 numpy Adam with L2 weight decay and amsgrad (not only against the
    other kernel)."""
    monkeypatch.setattr(tlgpu.optim, "_PER_PARAM", None)
    monkeypatch.setattr(tlgpu.optim, "_MODE", "chunked")
    shapes = [(4097,), (3,), (1000,)]
    p0 = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ps = [tlgpu.tensor(a, requires_grad=True) for a in p0]
    opt = tlgpu.optim.Adam(ps, lr=0.02, weight_decay=0.05, amsgrad=True)
    ref = [a.astype(np.float64) for a in p0]
    m = [np.zeros_like(r) for r in ref]
    v = [np.zeros_like(r) for r in ref]
    vmax = [np.zeros_like(r) for r in ref]
    b1, b2 = 0.9, 0.999
    for t in range(1, 6):
        for k, p in enumerate(ps):
            g = rng.standard_normal(shapes[k]).astype(np.float32)
            p.grad = tlgpu.tensor(g)
            g = g.astype(np.float64) + 0.05 * ref[k]
            m[k] = b1 * m[k] + (1 - b1) * g
            v[k] = b2 * v[k] + (1 - b2) * g * g
            vmax[k] = np.maximum(vmax[k], v[k])
            ref[k] = ref[k] - 0.02 * (m[k] / (1 - b1 ** t)) / (np.sqrt(vmax[k] / (1 - b2 ** t)) + 1e-8)
        opt.step()
    for p, r in zip(ps, ref):
        np.testing.assert_allclose(p.numpy(), r, rtol=1e-5, atol=1e-6)


def _enqueued(opt):
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    opt.step()
    return tlgpu.stream_stats()["enqueued"]


@pytest.mark.parametrize("cls,kw,per", [(tlgpu.optim.Adam, {}, 8), (tlgpu.optim.AdamW, dict(amsgrad=True), 6),
                                        (tlgpu.optim.SGD, dict(momentum=0.9), 8), (tlgpu.optim.SGD, {}, 8),
                                        (tlgpu.optim.RAdam, {}, 8), (tlgpu.optim.RMSprop, {}, 8),
                                        (tlgpu.optim.RMSprop, dict(centered=True, momentum=0.9), 6)])
def test_chunked_launch_counts(rng, monkeypatch, cls, kw, per):
    """One launch for up to 8 parameters at one step and dtype (6 for Adam with amsgrad), zero-size ones left
    out; the default on CPU devices. An MLP's six parameters: one launch."""
    monkeypatch.setattr(tlgpu.optim, "_PER_PARAM", None)
    monkeypatch.setattr(tlgpu.optim, "_MODE", None)
    if tlgpu.device().type == "cpu":
        assert tlgpu.optim._launch_mode() == "chunked"
    monkeypatch.setattr(tlgpu.optim, "_MODE", "chunked")
    model = tlgpu.nn.Sequential(tlgpu.nn.Linear(20, 16), tlgpu.nn.ReLU(), tlgpu.nn.Linear(16, 16),
                                tlgpu.nn.ReLU(), tlgpu.nn.Linear(16, 4))
    opt = cls(model.parameters(), lr=0.01, **kw)
    for p in model.parameters():
        p.grad = tlgpu.tensor(rng.standard_normal(p.shape).astype(np.float32))
    opt.step()                                         # the first step also makes the state (zeros)
    assert _enqueued(opt) == 1
    ps = [tlgpu.tensor(rng.standard_normal(s).astype(np.float32), requires_grad=True) for s in SHAPES * 2]
    half = tlgpu.tensor(np.ones(5, F16), requires_grad=True)
    for p in ps + [half]:
        p.grad = tlgpu.tensor(rng.standard_normal(p.shape).astype(p.numpy().dtype))
    opt = cls(ps + [half], lr=0.01, **kw)
    opt.step()
    nonzero = sum(1 for s in SHAPES * 2 if np.prod(s))
    assert _enqueued(opt) == -(-nonzero // per) + 1    # the float32 ones in groups, the float16 one alone


def test_chunked_argument_errors(rng):
    f = lambda n, dt=np.float32: tlgpu.tensor(rng.standard_normal(n).astype(dt))   # noqa: E731
    p, g, m, v = f(6), f(6), f(6), f(6)
    a = (0.1, 0.9, 0.99, 1e-8, 0.0, False, 0.1, 0.01)
    with pytest.raises(ValueError, match="list lengths differ"):
        tlgpu._C._adam_chunked([p, p], [g], [m], [v], None, *a, False)
    with pytest.raises(ValueError, match="1 to 8 parameters"):
        tlgpu._C._adam_chunked([p] * 9, [g] * 9, [m] * 9, [v] * 9, None, *a, False)
    with pytest.raises(ValueError, match="at most 32 buffers"):
        tlgpu._C._adam_chunked([p] * 7, [g] * 7, [m] * 7, [v] * 7, [v] * 7, *a, True)
    with pytest.raises(ValueError, match="amsgrad needs"):
        tlgpu._C._adam_chunked([p], [g], [m], [v], None, *a, True)
    with pytest.raises(TypeError, match=r"expected a float32 tensor, got float16 with shape \(6,\)"):
        tlgpu._C._adam_chunked([p], [f(6, np.float16)], [m], [v], None, *a, False)
    with pytest.raises(TypeError, match="expected a float32 tensor, got float16"):   # one launch, one dtype
        h = [f(6, np.float16) for _ in range(4)]
        tlgpu._C._adam_chunked([p, h[0]], [g, h[1]], [m, h[2]], [v, h[3]], None, *a, False)
    with pytest.raises(ValueError, match="shape"):
        tlgpu._C._adam_chunked([p], [f(5)], [m], [v], None, *a, False)
    with pytest.raises(ValueError, match="start at element 0"):
        big = f(12)
        tlgpu._C._adam_chunked([big[6:]], [g], [m], [v], None, *a, False)
