"""Checks for docs/porting.md's rows (see porting_checks.py): torch names added in the fourteenth session (sched)."""
import numpy as np

import tlgpu
from porting_checks import T, close, f32, raises, rng, row  # noqa: F401


def _sched_lrs(make, n, adam=False):
    p = T(np.zeros(2), requires_grad=True)
    opt = tlgpu.optim.Adam([p], lr=0.1) if adam else tlgpu.optim.SGD([p], lr=0.1, momentum=0.9)
    s = make(opt)
    out = [opt.param_groups[0]["lr"]]
    for _ in range(n):
        opt.step()
        s.step()
        out.append(opt.param_groups[0]["lr"])
    return np.array(out), opt


@row('`lr_scheduler.ExponentialLR/MultiStepLR/ConstantLR(opt, ...)`, '
     '`lr_scheduler.SequentialLR(opt, schedulers, milestones)`')
def _():
    LS = tlgpu.optim.lr_scheduler
    e = np.arange(11)
    close(_sched_lrs(lambda o: LS.ExponentialLR(o, 0.9), 10)[0], 0.1 * 0.9 ** e, 1e-14, 0)
    close(_sched_lrs(lambda o: LS.MultiStepLR(o, [2, 5, 5], 0.5), 10)[0],
          0.1 * 0.5 ** ((e >= 2) + 2 * (e >= 5)), 1e-14, 0)
    close(_sched_lrs(lambda o: LS.ConstantLR(o, 0.25, 3), 10)[0], 0.1 * np.where(e < 3, 0.25, 1.0), 1e-14, 0)
    lrs, _ = _sched_lrs(lambda o: LS.SequentialLR(o, [LS.ConstantLR(o, 0.5, 2), LS.ExponentialLR(o, 0.8)], [4]), 10)
    close(lrs, np.where(e < 4, 0.1 * np.where(e < 2, 0.5, 1.0), 0.1 * 0.8 ** (e - 4)), 1e-14, 0)
    p = T(np.zeros(1), requires_grad=True)
    opt = tlgpu.optim.SGD([p], lr=0.1)
    s = LS.SequentialLR(opt, [LS.ConstantLR(opt, 0.5, 2), LS.ExponentialLR(opt, 0.8)], [4])
    sd = s.state_dict()
    assert "optimizer" not in sd and len(sd["_schedulers"]) == 2 and sd["_schedulers"][1]["gamma"] == 0.8


@row('`lr_scheduler.OneCycleLR(opt, max_lr, total_steps, epochs, steps_per_epoch, pct_start, anneal_strategy, '
     'cycle_momentum, base_momentum, max_momentum, div_factor, final_div_factor, three_phase)`')
def _():
    LS = tlgpu.optim.lr_scheduler
    lrs, opt = _sched_lrs(lambda o: LS.OneCycleLR(o, 1.0, total_steps=10, pct_start=0.3), 9, adam=True)
    up = np.arange(3) / 2.0                                     # phase ends at steps 2 (0.3 * 10 - 1) and 9
    down = (np.arange(3, 10) - 2) / 7.0
    want = np.concatenate([1.0 + (0.04 - 1.0) / 2 * (np.cos(np.pi * up) + 1),
                           4e-6 + (1.0 - 4e-6) / 2 * (np.cos(np.pi * down) + 1)])
    close(lrs, want, 1e-14, 0)
    assert abs(opt.param_groups[0]["betas"][0] - 0.95) < 1e-15 and opt.param_groups[0]["betas"][1] == 0.999
    lrs, opt = _sched_lrs(lambda o: LS.OneCycleLR(o, 1.0, total_steps=10, anneal_strategy="linear"), 9)
    close(lrs[:3], 0.04 + (1.0 - 0.04) * up, 1e-14, 0)
    assert abs(opt.param_groups[0]["momentum"] - 0.95) < 1e-15
    raises(ValueError, "total_steps", lambda: LS.OneCycleLR(opt, 1.0))


@row('`torch.lgamma(x)`, `torch.digamma(x)`, `torch.erfinv(x)`, `x.lgamma()` ...')
def _():
    import math
    r = rng()
    x = f32(np.exp(r.uniform(-5, 5, 200)))
    close(tlgpu.lgamma(T(x)), [math.lgamma(v) for v in x.astype(np.float64)], 2e-6, 1e-6)
    v = f32(np.round(r.uniform(0.5, 50, 200) * 1024) / 1024)          # psi(x + 1) - psi(x) = 1 / x; v + 1 exact
    d = T(v + 1).digamma().numpy().astype(np.float64) - T(v).digamma().numpy()
    close(d, 1 / v.astype(np.float64), 0, 1e-6)
    u = f32(r.uniform(-0.999, 0.999, 200))
    y = T(u).erfinv().numpy().astype(np.float64)
    close(np.array([math.erf(v) for v in y]), u.astype(np.float64), 1e-6, 1e-7)
    close(T([0.0, -1.0, 1.0]).digamma(), [-np.inf, np.nan, -0.5772157], 1e-6, 0)
    close(T([1.0, -1.0, 2.0]).erfinv(), [np.inf, -np.inf, np.nan], 0, 0)
    x = f32(np.exp(r.uniform(-3, 2.5, 200)))                           # tanh(x / 10) < 1 in float32
    p = T(x, requires_grad=True)
    (p.lgamma() + (p * 0.1).tanh().erfinv()).sum().backward()
    t = np.tanh(x.astype(np.float64) * 0.1)
    e = T(t).erfinv().numpy().astype(np.float64)
    close(p.grad, T(x).digamma().numpy() + 0.1 * (1 - t * t) * math.sqrt(math.pi) / 2 * np.exp(e * e), 1e-5, 1e-6)
    assert T(u).to(tlgpu.float16).erfinv().dtype == tlgpu.float16
    f = tlgpu.jit(lambda t: (t.abs() + 0.5).lgamma() + (t.abs() + 0.5).digamma())
    for _ in range(3):
        close(f(T(u)), T(np.abs(u) + 0.5).lgamma().numpy() + T(np.abs(u) + 0.5).digamma().numpy(), 1e-6, 1e-6)
    assert len(f.commands()) == 1


def _lgam(a):
    import math
    return np.vectorize(math.lgamma, otypes=[np.float64])(np.asarray(a, dtype=np.float64))


@row('`Gamma(concentration, rate)`, `Beta(concentration1, concentration0)`, `Dirichlet(concentration)`: `sample()`, '
     '`log_prob(x)`, `entropy()`, `mean`, `variance`, `mode`')
def _():
    import tlgpu.distributions as D
    r = rng()
    a, b = f32(np.exp(r.uniform(-1, 2, 20))), f32(np.exp(r.uniform(-1, 2, 20)))
    x = f32(r.uniform(0.05, 0.95, 20))
    A, B, X = (v.astype(np.float64) for v in (a, b, x))
    close(D.Gamma(T(a), T(b)).log_prob(T(x)), A * np.log(B) + (A - 1) * np.log(X) - B * X - _lgam(A), 2e-5, 5e-5)
    close(D.Beta(T(a), T(b)).log_prob(T(x)),
          (A - 1) * np.log(X) + (B - 1) * np.log1p(-X) - _lgam(A) - _lgam(B) + _lgam(A + B), 2e-5, 5e-5)
    close(D.Gamma(T(a), T(b)).mean, A / B, 1e-6, 0)
    close(D.Beta(T(a), T(b)).variance, A * B / ((A + B) ** 2 * (A + B + 1)), 2e-6, 0)
    tlgpu.manual_seed(0)
    s = D.Gamma(T([0.5, 3.0]), 2.0).sample((20000,)).numpy().astype(np.float64)
    assert np.all(s > 0) and np.all(np.abs(s.mean(0) - [0.25, 1.5]) < 5 * np.sqrt(np.array([0.125, 0.75]) / 20000))
    d = D.Dirichlet(T([[1.0, 2.0, 3.0]]))
    v = d.sample((1000,)).numpy()
    close(v.sum(-1), np.ones((1000, 1)), 0, 1e-5)
    raises(NotImplementedError, "rsample", lambda: D.Beta(1.0, 2.0).rsample())
    ent = d.entropy().numpy()
    assert ent.shape == (1,) and ent[0] < 0                            # a Dirichlet's density exceeds 1 at its mode


@row('`kl_divergence` of `Gamma`, `Beta`, `Dirichlet` pairs')
def _():
    import tlgpu.distributions as D
    p, q = D.Gamma(T([2.0, 0.5]), T([1.0, 3.0])), D.Gamma(T([1.0, 1.5]), T([2.0, 1.0]))
    close(D.kl_divergence(p, p), [0.0, 0.0], 0, 1e-6)
    kl = D.kl_divergence(p, q).numpy().astype(np.float64)
    assert np.all(kl > 0)
    close(D.kl_divergence(D.Beta(T([2.0]), T([3.0])), D.Beta(T([2.0]), T([3.0]))), [0.0], 0, 1e-6)
    bb = D.kl_divergence(D.Dirichlet(T([[2.0, 3.0]])), D.Dirichlet(T([[1.0, 1.0]]))).numpy()
    close(D.kl_divergence(D.Beta(T([2.0]), T([3.0])), D.Beta(T([1.0]), T([1.0]))), bb, 1e-5, 1e-6)
    close(D.kl_divergence(D.Beta(T([2.0]), T([3.0])), D.Beta(T([1.0]), T([1.0]))),
          -D.Beta(T([2.0]), T([3.0])).entropy().numpy(), 1e-5, 1e-6)        # KL to the uniform density: -entropy


@row('`torch.distributions.constraints`: `real`, `positive`, `nonnegative`, `unit_interval`, `simplex`, `boolean`, '
     '`interval(lo, hi)`, `greater_than(x)`, `integer_interval(lo, hi)`')
def _():
    from tlgpu.distributions import constraints as C
    x = T([-1.0, 0.0, 0.5, 1.0, 3.0])
    for c, want in ((C.real, [1, 1, 1, 1, 1]), (C.positive, [0, 0, 1, 1, 1]), (C.nonnegative, [0, 1, 1, 1, 1]),
                    (C.unit_interval, [0, 1, 1, 1, 0]), (C.boolean, [0, 1, 0, 1, 0]),
                    (C.interval(0.0, 3.0), [0, 1, 1, 1, 1]), (C.greater_than(0.5), [0, 0, 0, 1, 1]),
                    (C.integer_interval(0, 1), [0, 1, 0, 1, 0])):
        m = c.check(x)
        assert m.dtype == tlgpu.float32
        close(m, want, 0, 0)
    close(C.simplex.check(T([[0.25, 0.75], [0.5, 0.6]])), [1, 0], 0, 0)
