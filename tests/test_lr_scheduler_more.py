"""ExponentialLR, MultiStepLR, ConstantLR, OneCycleLR, SequentialLR against torch's forms written out by hand
(torch's recursive get_lr for the first three, its phase table for OneCycleLR, its step(0) at SequentialLR's
milestones); torch itself is not needed."""
import math

import numpy as np
import pytest

import tlgpu
from tlgpu.optim import lr_scheduler as LS


def _sgd(lr=0.1, momentum=0.9, groups=1):
    ps = [{"params": [tlgpu.tensor(np.zeros(2, np.float32), requires_grad=True)]} for _ in range(groups)]
    return tlgpu.optim.SGD(ps, lr=lr, momentum=momentum)


def _adam(lr=0.1):
    return tlgpu.optim.Adam([tlgpu.tensor(np.zeros(2, np.float32), requires_grad=True)], lr=lr)


def _run(opt, sched, n, key=None):
    """lr (and the cycled momentum) after construction and after each of n steps."""
    def m(g):
        return g["betas"][0] if "betas" in g else g.get("momentum")
    out = [(sched.get_last_lr()[0], m(opt.param_groups[0]))]
    for _ in range(n):
        opt.step()
        sched.step()
        out.append((opt.param_groups[0]["lr"], m(opt.param_groups[0])))
    lr = np.array([o[0] for o in out])
    assert sched.get_last_lr()[0] == lr[-1]
    return lr, np.array([o[1] for o in out], dtype=float)


def _recursive(n, first, rule):
    """torch's chainable form: lr_0 = first(base), lr_e = rule(lr_{e-1}, e)."""
    lrs = [first]
    for e in range(1, n + 1):
        lrs.append(rule(lrs[-1], e))
    return np.array(lrs)


def test_exponential_multistep_constant_match_torch_recursions():
    lr, _ = _run(o := _sgd(), LS.ExponentialLR(o, 0.93), 40)
    np.testing.assert_allclose(lr, _recursive(40, 0.1, lambda x, e: x * 0.93), rtol=1e-14, atol=0)
    ms = {3: 1, 7: 2, 12: 1}                                             # [3, 7, 7, 12]: torch's Counter
    lr, _ = _run(o := _sgd(), LS.MultiStepLR(o, [12, 7, 3, 7], 0.5), 20)
    np.testing.assert_allclose(lr, _recursive(20, 0.1, lambda x, e: x * 0.5 ** ms.get(e, 0)), rtol=1e-15, atol=0)
    assert lr[2] == 0.1 and lr[3] == 0.05 and lr[7] == 0.0125 and lr[12] == 0.00625
    lr, _ = _run(o := _sgd(), LS.ConstantLR(o, 0.3, 4), 10)
    want = _recursive(10, 0.1 * 0.3, lambda x, e: x * (1 / 0.3) if e == 4 else x)
    np.testing.assert_allclose(lr, want, rtol=1e-14, atol=0)
    lr, _ = _run(o := _sgd(), LS.ConstantLR(o), 6)                      # torch's defaults: 1/3 for 5 epochs
    np.testing.assert_allclose(lr, [0.1 / 3] * 5 + [0.1, 0.1], rtol=1e-14)
    with pytest.raises(ValueError, match="factor"):
        LS.ConstantLR(_sgd(), 1.5)


def _one_cycle_ref(total, max_lr, pct, div, final_div, strategy, three, mom=(0.85, 0.95)):
    """torch's OneCycleLR.get_lr, written out: phase ends, then anneal between the phase's endpoints."""
    init = max_lr / div
    lo = init / final_div
    base_m, max_m = mom
    if three:
        phases = [(pct * total - 1, init, max_lr, max_m, base_m), (2 * pct * total - 2, max_lr, init, base_m, max_m),
                  (total - 1, init, lo, max_m, max_m)]
    else:
        phases = [(pct * total - 1, init, max_lr, max_m, base_m), (total - 1, max_lr, lo, base_m, max_m)]

    def ann(a, b, p):
        return b + (a - b) / 2.0 * (math.cos(math.pi * p) + 1) if strategy == "cos" else (b - a) * p + a
    lrs, ms = [], []
    for s in range(total + 1):
        start = 0
        for i, (end, l0, l1, m0, m1) in enumerate(phases):
            if s <= end or i == len(phases) - 1:
                p = (s - start) / (end - start)
                lrs.append(ann(l0, l1, p))
                ms.append(ann(m0, m1, p))
                break
            start = end
    return np.array(lrs), np.array(ms)


@pytest.mark.parametrize("strategy,three", [("cos", False), ("linear", False), ("cos", True), ("linear", True)])
def test_one_cycle_matches_torch_phases(strategy, three):
    lr, m = _run(o := _sgd(), LS.OneCycleLR(o, 1.0, total_steps=37, anneal_strategy=strategy, three_phase=three), 37)
    want_lr, want_m = _one_cycle_ref(37, 1.0, 0.3, 25.0, 1e4, strategy, three)
    np.testing.assert_allclose(lr, want_lr, rtol=1e-14, atol=0)
    np.testing.assert_allclose(m, want_m, rtol=1e-14, atol=0)
    assert lr[0] == pytest.approx(1.0 / 25) and lr[-2] == pytest.approx(1.0 / 25 / 1e4)  # step 36; 37 is past the end
    assert max(lr) == pytest.approx(1.0, rel=1e-2)
    o = _adam()
    sched = LS.OneCycleLR(o, 2.0, epochs=5, steps_per_epoch=7, pct_start=0.25, anneal_strategy=strategy,
                          three_phase=three, div_factor=10.0, final_div_factor=100.0, base_momentum=0.8)
    lr, m = _run(o, sched, 35)
    want_lr, want_m = _one_cycle_ref(35, 2.0, 0.25, 10.0, 100.0, strategy, three, (0.8, 0.95))
    np.testing.assert_allclose(lr, want_lr, rtol=1e-14, atol=0)
    np.testing.assert_allclose(m, want_m, rtol=1e-14, atol=0)    # betas[0] cycled, betas[1] kept
    assert o.param_groups[0]["betas"][1] == 0.999
    with pytest.raises(ValueError, match="total_steps"):
        sched.step()


def test_one_cycle_arguments_and_groups():
    o = _sgd(groups=2)
    s = LS.OneCycleLR(o, [1.0, 0.5], total_steps=10, cycle_momentum=False)
    assert o.param_groups[0]["momentum"] == 0.9 and np.allclose(s.get_last_lr(), [0.04, 0.02], rtol=1e-14)
    with pytest.raises(ValueError, match="expected 2 values"):
        LS.OneCycleLR(_sgd(groups=2), [1.0], total_steps=10)
    for kw in ({}, {"total_steps": 0}, {"total_steps": 5, "pct_start": 1}, {"total_steps": 5, "anneal_strategy": "x"},
               {"epochs": 2, "steps_per_epoch": 0}):
        with pytest.raises(ValueError):
            LS.OneCycleLR(_sgd(), 1.0, **kw)
    with pytest.raises(ValueError, match="momentum"):
        LS.OneCycleLR(tlgpu.optim.Adagrad([tlgpu.tensor(np.zeros(1, np.float32), requires_grad=True)])
                      if hasattr(tlgpu.optim, "Adagrad") else _NoMomentum(), 1.0, total_steps=5)


class _NoMomentum:
    def __init__(self):
        self.param_groups = [{"lr": 0.1, "params": []}]


def test_sequential_restarts_each_scheduler_at_its_milestone():
    o = _sgd()
    s = LS.SequentialLR(o, [LS.LinearLR(o, 0.1, 1.0, 5), LS.ExponentialLR(o, 0.9), LS.CosineAnnealingLR(o, 6, 0.001)],
                        [5, 9])
    lr, _ = _run(o, s, 25)
    want = []                                                     # torch: a milestone calls step(0)
    for e in range(26):
        if e < 5:
            want.append(0.1 * (0.1 + 0.9 * e / 5))
        elif e < 9:
            want.append(0.1 * 0.9 ** (e - 5))
        else:
            want.append(0.001 + (0.1 - 0.001) * (1 + math.cos(math.pi * (e - 9) / 6)) / 2)
    np.testing.assert_allclose(lr, want, rtol=1e-14, atol=0)
    o = _sgd()
    s = LS.SequentialLR(o, [LS.ConstantLR(o, 0.5, 3), LS.MultiStepLR(o, [2, 4])], [4])
    lr, _ = _run(o, s, 12)
    np.testing.assert_allclose(lr, [0.05] * 3 + [0.1] + [0.1] * 2 + [0.01] * 2 + [0.001] * 5, rtol=1e-14)
    with pytest.raises(ValueError, match="milestones"):
        LS.SequentialLR(o, [LS.ConstantLR(o)], [3])
    with pytest.raises(ValueError, match="another optimizer"):
        LS.SequentialLR(o, [LS.ConstantLR(o), LS.ConstantLR(_sgd())], [3])


@pytest.mark.parametrize("make", [
    lambda o: LS.ExponentialLR(o, 0.9), lambda o: LS.MultiStepLR(o, [2, 5], 0.3), lambda o: LS.ConstantLR(o, 0.2, 3),
    lambda o: LS.OneCycleLR(o, 1.0, total_steps=12, three_phase=True),
    lambda o: LS.SequentialLR(o, [LS.ConstantLR(o, 0.5, 2), LS.ExponentialLR(o, 0.8)], [3])])
def test_state_dict_resumes_the_sequence(make):
    o1 = _sgd()
    s1 = make(o1)
    full, _ = _run(o1, s1, 10)
    o2 = _sgd()
    s2 = make(o2)
    _run(o2, s2, 4)
    sd = s2.state_dict()
    assert "optimizer" not in sd
    o3 = _sgd()
    s3 = make(o3)
    s3.load_state_dict(sd)
    for g2, g3 in zip(o2.param_groups, o3.param_groups):       # the optimizer's own state_dict carries lr
        g3["lr"] = g2["lr"]
    rest = []
    for _ in range(6):
        s3.step()
        rest.append(o3.param_groups[0]["lr"])
    np.testing.assert_allclose(rest, full[5:], rtol=1e-14)
    assert s3.last_epoch == 10
