"""tlgpu.jit's fusion (docs/jit.md, "Fusion"): a run of elementwise commands in a trace becomes one generated
kernel. Replays give the eager bits (the same float32 operations in the same order, each element computed with
the builtin its eager kernel used), replay after replay, for chains of binary, unary, scalar, broadcast,
in-place, aliased, int32 and half ops; commands that must not fuse stay apart; fuse=False and TLGPU_JIT_FUSE=0
keep every recorded command. On GPUs the fused float results are held to a few ulps instead: NVIDIA's compiler
contracts a multiply of one op and an add of the next into one FMA once they share a kernel (seen on the H200:
1 ulp), which memory between eager kernels prevents."""
import ml_dtypes
import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F
from tlgpu import _C, nn


def bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


EXACT = tlgpu.device().type == "cpu"        # PoCL: bit for bit (see the module's docstring)


def same(got, want, fused=True):
    """got equals want bit for bit; a fused float result on a GPU within a few ulps of its dtype."""
    got, want = np.asarray(got), np.asarray(want)
    if EXACT or not fused or got.dtype.kind not in "fV" and got.dtype != ml_dtypes.bfloat16:
        np.testing.assert_array_equal(bits(got), bits(want))
        return
    rtol = {2: 8e-3 if got.dtype == ml_dtypes.bfloat16 else 1e-3}.get(got.dtype.itemsize, 1e-5)
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=rtol * 1e-1)


def flat(r):
    return list(r) if isinstance(r, (list, tuple)) else [r]


def compare(f, make, reps=8, dtypes=None):
    """Runs f eagerly, jitted and jitted without fusion on `reps` fresh random inputs (make() -> numpy arrays):
    every output and every input (in-place ops mutate them) bit for bit equal. Returns (fused, unfused)."""
    jf, ju = tlgpu.jit(f), tlgpu.jit(f, fuse=False)
    for _ in range(reps):
        arrays = make()
        got = []
        for fn in (f, jf, ju):
            ts = [tlgpu.tensor(a) for a in arrays]
            got.append([o.numpy() for o in flat(fn(*ts))] + [t.numpy() for t in ts])
        for e, a, u in zip(*got):
            same(a, e)
            same(u, e, fused=False)
    assert jf.memory_plan()["replays"] == reps - 2
    return jf, ju


@pytest.fixture
def A(rng):
    return lambda *s: (rng.standard_normal(s) * 2).astype(np.float32)


def test_eight_op_chain_is_one_command(A):
    def f(x, y):
        return ((((x * y + 1.0).relu() - y) * 0.5).exp() + x).tanh()
    jf, ju = compare(f, lambda: [A(33, 17), A(33, 17)], reps=10)
    assert jf.commands() == ["fused(mul,add,relu,sub,mul,exp,add,tanh)"]
    assert len(ju.commands()) == 8 and not any(c.startswith("fused") for c in ju.commands())
    plan = jf.memory_plan()
    assert plan["commands"] == 1 and plan["fused_away"] == 7 and plan["dead_stores"] >= 1


@pytest.mark.parametrize("n", [1, 3, 4, 1025])
def test_unary_chain(A, n):
    def f(x):
        a = x.abs() + 0.25
        b = a.log() + a.sqrt() * a.rsqrt() - a.reciprocal()
        c = b.sigmoid() + b.tanh() * b.silu() - b.gelu() + b.sin() * b.cos()
        d = (-c).square().exp().clamp(-3.0, 3.0) + c.sign() + c.ceil() - c.floor() * c.round()
        return d.leaky_relu(0.1)
    jf, ju = compare(f, lambda: [A(n)], reps=6)
    assert len(jf.commands()) == 1 and jf.commands()[0].startswith("fused(abs,add,log")
    assert len(ju.commands()) == jf.memory_plan()["fused_away"] + 1 > 20


def test_scalars_comparisons_and_where(A):
    def f(x, y):
        a = 2.0 - x * 3 + 1.5 / (y.abs() + 1.0)
        b = tlgpu.maximum(a, 0.2) - tlgpu.minimum(a, y) + a // 0.7 + a % 1.3
        c = (a > 0.1) * b + (b <= y) - (a == a) + (x != 0.5)
        return tlgpu.where(c > 0, c, 0.5) + (b.abs() + 1.0) ** 0.5 + 2.0 ** (-c.abs())
    jf, _ = compare(f, lambda: [A(7, 13), A(7, 13)])
    assert len(jf.commands()) == 1


@pytest.mark.parametrize("cols", [7, 8, 2])
def test_broadcast_operands(A, cols):
    def f(x, b, c, s, y):
        return (((x + b).relu() * c - s) * y.T + b).sigmoid() * c
    jf, _ = compare(f, lambda: [A(6, cols), A(cols), A(6, 1), A(1), A(cols, 6)])
    assert len(jf.commands()) == 1 and jf.commands()[0] == "fused(add,relu,mul,sub,mul,add,sigmoid,mul)"


def test_broadcast_in_three_dims_and_zero_dim(A):
    def f(x, c, r, s):
        return ((x * c + r).tanh() - c) * r + s
    jf, _ = compare(f, lambda: [A(2, 3, 5), A(3, 1), A(5), np.array(A(1)[0])])
    assert jf.commands() == ["fused(mul,add,tanh,sub,mul,add)"]
    jf, _ = compare(lambda x: (x * 2 + 1).exp(), lambda: [np.array(A(1)[0])])
    assert jf.commands() == ["fused(mul,add,exp)"]


def test_in_place_on_a_strided_view_is_not_fused(A):
    def f(x, y):
        x[:, :3].mul_(2)                               # its output is not contiguous: a command of its own
        return x * y + 1
    jf, _ = compare(f, lambda: [A(4, 5), A(4, 5)])
    assert len(jf.commands()) == 2 and jf.commands()[1] == "fused(mul,add)"


def test_in_place_and_two_writes_of_one_buffer(A):
    def f(x, y):
        x.mul_(2).add_(y).sub_(1.5)                    # an input, in place: the caller's tensor changes
        z = x + y
        z.mul_(3)
        z.add_(x)                                      # z written three times, read between
        return z, x * z
    jf, _ = compare(f, lambda: [A(37), A(37)])
    assert len(jf.commands()) == 1


def test_disjoint_slices_of_one_buffer(A):
    def f(t):
        u = t[:10] + t[10:20]
        t[20:30].mul_(u)                               # a third, disjoint, slice written in place
        return u * t[10:20], t[20:30] - 1
    jf, _ = compare(f, lambda: [A(31)])
    assert len(jf.commands()) == 1


def test_overlapping_reads_fuse(A):
    def f(t):
        d = t[1:] - t[:-1]                             # two reads of one buffer, one element apart
        return (d * t[:-1] + t[1:]).abs()
    jf, _ = compare(f, lambda: [A(41)])
    assert jf.commands() == ["fused(sub,mul,add,abs)"]


def test_overlapping_operands_are_not_fused(A):
    def shifted(t):
        t[0:8].mul_(2)                                 # then read one element over: not element for element
        return t[1:9] + 1
    jf, _ = compare(shifted, lambda: [A(10)])
    assert len(jf.commands()) == 2 and not jf.commands()[0].startswith("fused")

    def transposed(x):
        x.mul_(2)                                      # then read through other strides
        return x.T + 1
    jf, _ = compare(transposed, lambda: [A(4, 4)])
    assert len(jf.commands()) == 2 and not jf.commands()[0].startswith("fused")


def test_int32_chains(rng, A):
    I = lambda *s: rng.integers(-50, 50, s).astype(np.int32)   # noqa: E731

    def f(i, j, x):
        k = ((i * 3 + j) // 4) % 7 - j.abs() + tlgpu.maximum(i, j)
        m = (k < j) * x + (i == 2)                     # int32 comparisons give float32 masks
        return k, m * 2 + k.float(), (m * 10).int() + k
    jf, ju = compare(f, lambda: [I(41), I(41), A(41)])
    assert len(jf.commands()) == 1 and len(ju.commands()) > 10


def test_float16_bfloat16_and_uint8_chains(A):
    def f(x, h, y):
        a = (x.half() * 2 + 1) * h                     # rounded to float16 after each op, as eager
        b = (y.bfloat16() - 0.3) * y.bfloat16()
        c = ((x * 10).byte() + 3).float() * 0.5
        return a.float().exp(), b.float(), c, a * b.float(), (h * 0.25).exp()   # exp of float16: float4 as eager
    jf, _ = compare(f, lambda: [A(41), A(41).astype(np.float16), A(41)])
    assert len(jf.commands()) == 1


def test_fill_fuses(A):
    def f(x, y):
        x.zero_().add_(y)
        x.fill_(0.5)
        return x.mul_(y) + 1
    jf, _ = compare(f, lambda: [A(13), A(13)])
    assert len(jf.commands()) == 1


def test_matmul_in_between(A):
    def f(x, w):
        h = ((x * 2 + 1).tanh() @ w).relu() * 3 - 1
        return h.sigmoid()
    jf, ju = compare(f, lambda: [A(5, 9), A(9, 6)])
    c = jf.commands()
    assert len(c) == 3 and c[0] == "fused(mul,add,tanh)"
    if c[1].endswith("+relu"):                         # matmul.cl's product took the ReLU (test_jit_epilogue)
        assert c[1] == ju.commands()[3] + "+relu" and c[2] == "fused(mul,sub,sigmoid)"
    else:                                              # a host BLAS or a kernel without the store epilogue
        assert c[1] == ju.commands()[3] and c[2] == "fused(relu,mul,sub,sigmoid)"


def test_random_ops_end_runs(A):
    def f(x):
        return ((x * 2 + tlgpu.rand(5, 7)) * 3 - tlgpu.randn(5, 7)).exp()
    xs = [A(5, 7) for _ in range(6)]
    runs, cmds = [], {}
    for name, fn in (("eager", f), ("fused", tlgpu.jit(f)), ("unfused", tlgpu.jit(f, fuse=False))):
        tlgpu.manual_seed(7)
        runs.append([bits(fn(tlgpu.tensor(x)).numpy()) for x in xs])
        cmds[name] = fn.commands() if fn is not f else None
    for e, a, u in zip(*runs):
        np.testing.assert_array_equal(a, e)
        np.testing.assert_array_equal(u, e)
    c = cmds["fused"]                                  # mul | rand | add, mul | randn | sub, exp
    assert len(c) == 5 and c[2] == "fused(add,mul)" and c[4] == "fused(sub,exp)" and len(cmds["unfused"]) == 7


def test_fuse_off_keeps_the_recorded_commands(A, monkeypatch):
    def f(x):
        return ((x + 1) * 2).exp() - x
    x = tlgpu.tensor(A(9))
    counts = {}
    for name, jf in (("on", tlgpu.jit(f)), ("off", tlgpu.jit(f, fuse=False))):
        for _ in range(3):
            jf(x)
        counts[name] = jf.memory_plan()["commands"]
    monkeypatch.setenv("TLGPU_JIT_FUSE", "0")
    je = tlgpu.jit(f)
    for _ in range(3):
        je(x)
    assert counts == {"on": 1, "off": 4} and je.memory_plan()["commands"] == 4
    assert tlgpu.settings()["TLGPU_JIT_FUSE"]["default"] == "1"


def test_generated_program_is_built_once(A):
    def f(x, b):
        return ((x + b) * 0.5).tanh() - b
    for rows in (5, 9, 5):                             # a new batch size: the same text (n is an argument)
        jf = tlgpu.jit(f)
        for _ in range(3):
            jf(tlgpu.tensor(A(rows, 7)), tlgpu.tensor(A(7)))
        s = _C._program_stats()
        if rows == 9:                                  # the first trace built it (or loaded it from disk)
            assert s == before
        before = s
        assert jf.commands() == ["fused(add,mul,tanh,sub)"]


def test_set_arg_on_a_fused_command_raises(A):
    jf = tlgpu.jit(lambda x: (x + 1) * 2)
    x = tlgpu.tensor(A(8))
    for _ in range(3):
        jf(x)
    trace = next(iter(jf._entries.values())).trace
    with pytest.raises(ValueError, match="fused"):
        trace.set_arg(0, 0, 1.0, "f")


def test_kept_intermediates_are_stored(A):
    keep = []

    def f(x):
        a = x * 2 + 1
        keep.append(a)                                 # alive after the call: its store stays
        return (a.exp() - 1) * 3, a
    jf, _ = compare(f, lambda: [A(11)])
    assert len(jf.commands()) == 1


from test_jit import _step as _mlp_step  # noqa: E402  (the same MLP training step)


def _lstm(seed, hidden=12, feat=5):
    tlgpu.manual_seed(seed)
    p = {"wx": tlgpu.randn(feat, 4 * hidden) * 0.3, "wh": tlgpu.randn(hidden, 4 * hidden) * 0.3,
         "b": tlgpu.zeros(4 * hidden), "wo": tlgpu.randn(hidden, 1) * 0.3}
    for t in p.values():
        t.requires_grad_()
    return p, tlgpu.optim.Adam(list(p.values()), lr=1e-2)


def _lstm_step(p, opt, hidden=12):
    def step(x, h, c, target):                         # an LSTM cell written with elementwise ops
        g = x @ p["wx"] + h @ p["wh"] + p["b"]
        i, f = g[:, :hidden].sigmoid(), g[:, hidden:2 * hidden].sigmoid()
        u, o = g[:, 2 * hidden:3 * hidden].tanh(), g[:, 3 * hidden:].sigmoid()
        c2 = f * c + i * u
        h2 = o * c2.tanh()
        loss = ((h2 @ p["wo"] - target) ** 2).mean() + (c2 * c2).mean() * 0.01
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, h2.detach(), c2.detach()
    return step


def test_training_steps_match_eager(rng):
    tlgpu.manual_seed(3)
    runs = []
    for mode in ("eager", "fused", "unfused"):
        tlgpu.manual_seed(3)
        m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3))
        step = _mlp_step(m, tlgpu.optim.Adam(m.parameters(), lr=1e-2))
        step = step if mode == "eager" else tlgpu.jit(step, fuse=mode == "fused")
        data = np.random.default_rng(0)
        losses = [step(tlgpu.tensor(data.standard_normal((16, 8)).astype(np.float32)),
                       tlgpu.tensor(data.integers(0, 3, 16).astype(np.int32))).item() for _ in range(10)]
        runs.append((losses, [t.numpy() for t in m.parameters()]))
    for fused, (losses, params) in zip((True, False), runs[1:]):
        same(np.array(losses, np.float32), np.array(runs[0][0], np.float32), fused)
        for a, b in zip(params, runs[0][1]):
            same(a, b, fused)

    runs, cmds = [], {}
    for mode in ("eager", "fused", "unfused"):
        p, opt = _lstm(5)
        step = _lstm_step(p, opt)
        step = step if mode == "eager" else tlgpu.jit(step, fuse=mode == "fused")
        data = np.random.default_rng(1)
        h, c = tlgpu.zeros(4, 12), tlgpu.zeros(4, 12)
        losses = []
        for _ in range(10):
            x = tlgpu.tensor(data.standard_normal((4, 5)).astype(np.float32))
            tgt = tlgpu.tensor(data.standard_normal((4, 1)).astype(np.float32))
            loss, h, c = step(x, h, c, tgt)
            losses.append(loss.item())
        if mode != "eager":
            cmds[mode] = step.memory_plan()["commands"]
        runs.append((losses, [t.numpy() for t in p.values()] + [h.numpy(), c.numpy()]))
    for fused, (losses, arrays) in zip((True, False), runs[1:]):
        same(np.array(losses, np.float32), np.array(runs[0][0], np.float32), fused)
        for a, b in zip(arrays, runs[0][1]):
            same(a, b, fused)
    assert cmds["fused"] < cmds["unfused"]
