"""torch.nn / torch.optim parity for ports of RL learners: Parameter, containers, buffers, LayerNorm, init,
loss modules, optimizer state_dict, learning-rate schedulers, save/load in the safetensors format."""
import math
import struct

import numpy as np
import pytest

import tlgpu
from tlgpu import nn, optim
from tlgpu.optim import lr_scheduler

import gradcheck


def test_parameter_shares_storage_and_registers():
    base = tlgpu.randn(3, 2)
    p = nn.Parameter(base)
    assert p.requires_grad and p.is_leaf and isinstance(p, nn.Parameter)
    assert not isinstance(base, nn.Parameter) and not isinstance(np.zeros(2), nn.Parameter)
    with tlgpu.no_grad():
        p.mul_(2.0)
    np.testing.assert_array_equal(base.numpy(), p.numpy())       # one storage, as torch.nn.Parameter(t)
    m = nn.Module()
    m.w = nn.Parameter(np.arange(4.0))
    m.register_parameter("b", nn.Parameter(tlgpu.zeros(2)))
    assert [k for k, _ in m.named_parameters()] == ["w", "b"]
    np.testing.assert_array_equal(m.w.numpy(), np.arange(4.0, dtype=np.float32))
    with pytest.raises(TypeError):
        m.register_parameter("c", tlgpu.zeros(2))


def test_buffers_persistent_and_not():
    rng = np.random.default_rng(1)
    m = nn.Module()
    m.register_buffer("mean", tlgpu.tensor(rng.standard_normal(3)))
    m.register_buffer("scratch", tlgpu.zeros(2), persistent=False)
    m.register_buffer("tracked", tlgpu.randn(2).requires_grad_())   # a buffer even though it requires grad
    m.lin = nn.Linear(3, 2)
    assert [k for k, _ in m.named_parameters()] == ["lin.weight", "lin.bias"]
    assert [k for k, _ in m.named_buffers()] == ["mean", "scratch", "tracked"]
    sd = m.state_dict()
    assert list(sd) == ["mean", "tracked", "lin.weight", "lin.bias"]   # torch's: own tensors, then children
    m.mean = tlgpu.tensor(rng.standard_normal(3))                      # reassigning keeps it a buffer
    assert "mean" in dict(m.named_buffers())
    other = nn.Module()
    other.register_buffer("mean", tlgpu.zeros(3))
    other.register_buffer("scratch", tlgpu.zeros(2), persistent=False)
    other.register_buffer("tracked", tlgpu.zeros(2))
    other.lin = nn.Linear(3, 2)
    other.load_state_dict(sd)
    np.testing.assert_array_equal(other.mean.numpy(), sd["mean"])
    np.testing.assert_array_equal(other.lin.weight.numpy(), sd["lin.weight"])
    with pytest.raises(KeyError):
        m.register_buffer("a.b", tlgpu.zeros(1))


def test_module_list_and_dict_dotted_names():
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
            self.heads = nn.ModuleDict({"pi": nn.Linear(4, 2), "v": nn.Linear(4, 1)})

        def forward(self, x):
            for b in self.blocks:
                x = b(x).tanh()
            return self.heads["pi"](x), self.heads["v"](x)

    net = Net()
    names = [k for k, _ in net.named_parameters()]
    assert names == [f"blocks.{i}.{w}" for i in range(3) for w in ("weight", "bias")] + \
        ["heads.pi.weight", "heads.pi.bias", "heads.v.weight", "heads.v.bias"]
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    pi, v = net(tlgpu.tensor(x))
    h = x.astype(np.float64)
    for b in net.blocks:
        h = np.tanh(h @ b.weight.numpy().T + b.bias.numpy())
    np.testing.assert_allclose(pi.numpy(), h @ net.heads["pi"].weight.numpy().T + net.heads["pi"].bias.numpy(),
                               rtol=1e-4, atol=1e-5)
    assert v.shape == (5, 1)
    net.blocks.append(nn.Linear(4, 4))
    assert len(net.blocks) == 4 and net.blocks[-1] is list(net.blocks)[3]
    del net.blocks[0]
    assert [k for k, _ in net.blocks.named_parameters()][:2] == ["0.weight", "0.bias"] and len(net.blocks) == 3
    net.blocks.insert(1, nn.Identity())
    assert isinstance(net.blocks[1], nn.Identity) and len(net.blocks) == 4
    with pytest.raises(IndexError):
        net.blocks[7]
    assert "pi" in net.heads and net.heads.pop("v") is not None and list(net.heads.keys()) == ["pi"]
    shared = nn.Linear(2, 2)
    seq = nn.Sequential(shared, shared)
    assert len(seq.parameters()) == 2                                  # a shared module's parameters once


@pytest.mark.parametrize("shape,norm", [((6, 5), 5), ((2, 3, 4), (3, 4)), ((7, 1), 1)])
def test_layer_norm_forward_backward(shape, norm):
    rng = np.random.default_rng(3)
    ln = nn.LayerNorm(norm, eps=1e-5)
    n = 1 if isinstance(norm, int) else len(norm)
    w = rng.standard_normal(ln.weight.shape)
    b = rng.standard_normal(ln.bias.shape)
    axes = tuple(range(-n, 0))

    def ref(x, w, b):
        d = x - x.mean(axis=axes, keepdims=True)
        return d / np.sqrt((d * d).mean(axis=axes, keepdims=True) + 1e-5) * w + b

    def fn(x, w_, b_):
        ln.weight, ln.bias = w_, b_
        return ln(x)
    gradcheck.check(fn, ref, [rng.standard_normal(shape) * 3 + 1, w, b], rtol=5e-3, atol=5e-4)
    with pytest.raises(ValueError):
        nn.LayerNorm(4)(tlgpu.randn(2, 5))


def test_init_functions():
    tlgpu.manual_seed(0)
    w = tlgpu.zeros(64, 32).requires_grad_()
    bound = math.sqrt(6.0 / 96)
    a = nn.init.xavier_uniform_(w).numpy()
    assert a.min() >= -bound and a.max() <= bound and a.std() > 0.8 * bound / math.sqrt(3)
    a = nn.init.kaiming_uniform_(w, a=math.sqrt(5)).numpy()            # torch's Linear default
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + 5)) / math.sqrt(32)
    assert a.min() >= -bound and a.max() <= bound and abs(a.std() - bound / math.sqrt(3)) < 0.1 * bound
    a = nn.init.normal_(w, 0.5, 0.25).numpy()
    assert abs(a.mean() - 0.5) < 0.02 and abs(a.std() - 0.25) < 0.02
    a = nn.init.uniform_(w, -2.0, 3.0).numpy()
    assert a.min() >= -2 and a.max() <= 3 and abs(a.mean() - 0.5) < 0.1
    np.testing.assert_array_equal(nn.init.constant_(w, 0.7).numpy(), np.full((64, 32), 0.7, np.float32))
    assert not nn.init.zeros_(w).numpy().any()
    for shape in [(64, 32), (32, 64), (16, 4, 3)]:
        t = tlgpu.zeros(*shape).requires_grad_()
        q = nn.init.orthogonal_(t, gain=math.sqrt(2)).numpy().reshape(shape[0], -1).astype(np.float64)
        gram = q @ q.T if shape[0] <= q.shape[1] else q.T @ q
        np.testing.assert_allclose(gram, 2 * np.eye(gram.shape[0]), atol=1e-4)
    assert nn.init.calculate_gain("relu") == math.sqrt(2) and nn.init.calculate_gain("tanh") == 5 / 3
    with pytest.raises(ValueError):
        nn.init.xavier_uniform_(tlgpu.zeros(5))
    with pytest.raises(ValueError):
        nn.init.calculate_gain("swish")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_against_float64(reduction):
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((6, 3)) * 2, rng.standard_normal((6, 3)) * 2
    red = {"mean": np.mean, "sum": np.sum, "none": lambda a: a}[reduction]

    def huber(d, delta):
        a = np.abs(d)
        return np.where(a < delta, 0.5 * d * d, delta * (a - 0.5 * delta))
    cases = [
        (nn.MSELoss(reduction=reduction), lambda a, b: red((a - b) ** 2)),
        (nn.L1Loss(reduction=reduction), lambda a, b: red(np.abs(a - b))),
        (nn.HuberLoss(reduction=reduction, delta=0.8), lambda a, b: red(huber(a - b, 0.8))),
        (nn.SmoothL1Loss(reduction=reduction, beta=1.5), lambda a, b: red(huber(a - b, 1.5) / 1.5)),
    ]
    for mod, ref in cases:
        gradcheck.check(lambda a, b: mod(a, b), ref, [x, y])
    logits, labels = rng.standard_normal((7, 5)), rng.integers(0, 5, 7)
    labels[2] = -100
    out = nn.CrossEntropyLoss(reduction=reduction)(tlgpu.tensor(logits), tlgpu.tensor(labels.astype(np.int32)))
    lse = np.log(np.exp(logits).sum(1))
    per = np.where(labels >= 0, lse - logits[np.arange(7), np.maximum(labels, 0)], 0.0)
    want = {"mean": per.sum() / 6, "sum": per.sum(), "none": per}[reduction]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError):
        nn.MSELoss(reduction="avg")
    with pytest.raises(ValueError):
        nn.HuberLoss()(tlgpu.randn(3), tlgpu.randn(4))


def _train(model, opt, sched, batches, steps):
    for i in range(steps):
        x, y = batches[i]
        loss = nn.MSELoss()(model(tlgpu.tensor(x)), tlgpu.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()


def _make(kind, seed):
    tlgpu.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))
    if kind == "sgd":
        opt = optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    elif kind == "adam":
        opt = optim.Adam(model.parameters(), lr=0.01, amsgrad=True)
    else:
        opt = optim.AdamW([{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.003}],
                          lr=0.01, weight_decay=0.1)
    return model, opt, lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw"])
@pytest.mark.parametrize("through_file", [False, True])
def test_optimizer_resume_is_exact(kind, through_file, tmp_path):
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((16, 4)).astype(np.float32), rng.standard_normal((16, 2)).astype(np.float32))
               for _ in range(10)]
    model, opt, sched = _make(kind, 1)
    _train(model, opt, sched, batches, 10)
    want, want_lr = model.state_dict(), [g["lr"] for g in opt.param_groups]

    model, opt, sched = _make(kind, 1)
    _train(model, opt, sched, batches[:4], 4)
    msd, osd, ssd = model.state_dict(), opt.state_dict(), sched.state_dict()
    if through_file:
        tlgpu.save(msd, tmp_path / "model.safetensors")
        tlgpu.save(osd, tmp_path / "optim.safetensors")
        msd, osd = tlgpu.load(tmp_path / "model.safetensors"), tlgpu.load(tmp_path / "optim.safetensors")
    model2, opt2, sched2 = _make(kind, 99)                              # different initial weights
    model2.load_state_dict(msd)
    opt2.load_state_dict(osd)
    sched2.load_state_dict(ssd)
    _train(model2, opt2, sched2, batches[4:], 6)
    got = model2.state_dict()
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    assert [g["lr"] for g in opt2.param_groups] == want_lr


def test_optimizer_state_dict_layout_and_errors():
    model, opt, _ = _make("adam", 2)
    sd = opt.state_dict()
    assert sd["param_groups"][0]["params"] == [0, 1, 2, 3] and sd["state"] == {}
    _train(model, opt, None, [(np.ones((2, 4), np.float32), np.zeros((2, 2), np.float32))], 1)
    sd = opt.state_dict()
    assert set(sd["state"]) == {0, 1, 2, 3} and sd["state"][0]["step"] == 1
    assert sd["state"][0]["exp_avg"].shape == (8, 4)
    other = optim.Adam(nn.Linear(4, 8).parameters())
    with pytest.raises(ValueError):
        other.load_state_dict(sd)
    opt.param_groups[0]["lr"] = 0.5                                     # editable, read at every step
    assert opt.state_dict()["param_groups"][0]["lr"] == 0.5


def test_schedulers_match_torch_formulas():
    def lrs(make, n=12):
        o = optim.SGD(nn.Linear(2, 2).parameters(), lr=0.1)
        s = make(o)
        out = [s.get_last_lr()[0]]
        for _ in range(n):
            o.step()
            s.step()
            out.append(o.param_groups[0]["lr"])
        return np.array(out)
    e = np.arange(13)
    np.testing.assert_allclose(lrs(lambda o: lr_scheduler.StepLR(o, 4, 0.3)), 0.1 * 0.3 ** (e // 4))
    np.testing.assert_allclose(lrs(lambda o: lr_scheduler.CosineAnnealingLR(o, 10, 0.01)),
                               0.01 + 0.09 * (1 + np.cos(np.pi * e / 10)) / 2)
    np.testing.assert_allclose(lrs(lambda o: lr_scheduler.LambdaLR(o, lambda k: 1 - k / 20)), 0.1 * (1 - e / 20))
    np.testing.assert_allclose(lrs(lambda o: lr_scheduler.LinearLR(o, 0.25, 1.0, 8)),
                               0.1 * (0.25 + 0.75 * np.minimum(e, 8) / 8))
    with pytest.raises(ValueError):
        lr_scheduler.StepLR(optim.SGD(nn.Linear(2, 2).parameters()), 0)


def test_save_load_interoperates_with_safetensors(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(6)
    model = nn.Sequential(nn.Linear(5, 3), nn.ReLU(), nn.Linear(3, 2))
    model.register_buffer("count", tlgpu.tensor(np.array([3, -7], np.int32)))
    tlgpu.save(model.state_dict(), tmp_path / "m.safetensors", metadata={"step": 12})
    theirs = st.load_file(str(tmp_path / "m.safetensors"))
    for k, v in model.state_dict().items():
        assert theirs[k].dtype == v.dtype
        np.testing.assert_array_equal(theirs[k], v)
    written = {"w": rng.standard_normal((4, 3)), "h": rng.standard_normal(5).astype(np.float16),
               "i": rng.integers(-9, 9, (2, 2)), "f": rng.standard_normal(3).astype(np.float32),
               "e": np.zeros((0, 3), np.float32)}
    st.save_file(written, str(tmp_path / "theirs.safetensors"))
    got = tlgpu.load(tmp_path / "theirs.safetensors")
    for k, v in written.items():
        assert got[k].dtype == (np.int32 if v.dtype.kind == "i" else np.float16 if k == "h" else np.float32)
        np.testing.assert_array_equal(got[k].numpy(), v.astype(got[k].dtype))


def test_load_rejects_broken_files(tmp_path):
    path = tmp_path / "m.safetensors"
    tlgpu.save({"a": np.arange(6, dtype=np.float32)}, path)
    good = path.read_bytes()
    n = struct.unpack("<Q", good[:8])[0]
    for bad in (good[:5], good[:-4], struct.pack("<Q", 10**9) + good[8:], good[:8] + b"{" * n + good[8 + n:],
                good.replace(b"[0,24]", b"[0,28]")):
        path.write_bytes(bad)
        with pytest.raises(ValueError):
            tlgpu.load(path)
    with pytest.raises(OverflowError):
        tlgpu.save({"big": np.array([2**40])}, tmp_path / "o.safetensors")
    with pytest.raises(TypeError):
        tlgpu.save({"c": np.array([1 + 2j])}, tmp_path / "c.safetensors")


def test_import_tlgpu_reaches_the_subpackages():
    from conftest import run_python
    code = ("import tlgpu\n"
            "print(tlgpu.nn.Linear.__name__, tlgpu.optim.Adam.__name__, tlgpu.publish.WeightPublisher.__name__,\n"
            "      tlgpu.quant.quantize_q4_0.__name__, tlgpu.nn.functional.linear.__name__,\n"
            "      tlgpu.optim.lr_scheduler.StepLR.__name__, tlgpu.nn.utils.clip_grad_norm_.__name__)\n")
    r = run_python(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["Linear", "Adam", "WeightPublisher", "quantize_q4_0", "linear", "StepLR",
                                "clip_grad_norm_"]


@pytest.mark.parametrize("norm_type", [2.0, float("inf"), 1.0, 3.0])
@pytest.mark.parametrize("max_norm", [0.3, 1e4])
def test_clip_grad_norm_matches_torch_formula_without_waiting(rng, norm_type, max_norm):
    gs = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (7,), (2, 2, 2))]
    ps = [tlgpu.zeros(*g.shape, requires_grad=True) for g in gs]
    for p, g in zip(ps, gs):
        p.grad = tlgpu.tensor(g)
    flat = np.concatenate([g.ravel() for g in gs]).astype(np.float64)
    want = np.abs(flat).max() if np.isinf(norm_type) else (np.abs(flat) ** norm_type).sum() ** (1 / norm_type)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    total = nn.utils.clip_grad_norm_(iter(ps), max_norm, norm_type=norm_type)
    assert tlgpu.stream_stats()["waits"] == 0
    assert total.item() == pytest.approx(want, rel=1e-5)
    coef = min(max_norm / (want + 1e-6), 1.0)
    for p, g in zip(ps, gs):
        np.testing.assert_allclose(p.grad.numpy(), g * coef, rtol=1e-5)


def test_clip_grad_value_and_single_tensor(rng):
    g = rng.standard_normal((5, 3)).astype(np.float32) * 2
    p = tlgpu.zeros(5, 3, requires_grad=True)
    p.grad = tlgpu.tensor(g)
    nn.utils.clip_grad_value_(p, 0.7)
    np.testing.assert_array_equal(p.grad.numpy(), np.clip(g, -0.7, 0.7))
    norm = nn.utils.clip_grad_norm_(p, 0.1)
    assert norm.item() == pytest.approx(np.linalg.norm(np.clip(g, -0.7, 0.7).astype(np.float64)), rel=1e-5)
    assert np.linalg.norm(p.grad.numpy()) == pytest.approx(0.1, rel=1e-4)


def test_edited_lr_is_used_by_the_next_step(rng):
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    g = rng.standard_normal((4, 3)).astype(np.float32)
    w = tlgpu.tensor(w0, requires_grad=True)
    opt = tlgpu.optim.SGD([w], lr=0.1)
    for lr in (0.1, 0.025):
        opt.param_groups[0]["lr"] = lr                 # CleanRL's annealing
        w.grad = tlgpu.tensor(g)
        opt.step()
    np.testing.assert_allclose(w.numpy(), w0 - 0.125 * g, rtol=1e-5, atol=1e-6)


def test_losses_take_numpy_targets(rng):
    pred = rng.standard_normal((6, 3)).astype(np.float32)
    target = rng.standard_normal((6, 3))               # float64 as returned by an environment
    labels = rng.integers(0, 3, 6)                     # int64
    p = tlgpu.tensor(pred, requires_grad=True)
    mse = nn.MSELoss()(p, target)
    assert mse.item() == pytest.approx(((pred - target.astype(np.float32)) ** 2).mean(), rel=1e-5)
    ce = nn.CrossEntropyLoss()(p, labels)
    z = pred.astype(np.float64)
    logp = z - np.log(np.exp(z).sum(1, keepdims=True))
    assert ce.item() == pytest.approx(-logp[np.arange(6), labels].mean(), rel=1e-5)
    (mse + ce).backward()
    sm = np.exp(logp)
    sm[np.arange(6), labels] -= 1
    want = 2 * (pred - target.astype(np.float32)) / 18 + sm / 6
    np.testing.assert_allclose(p.grad.numpy(), want, rtol=1e-4, atol=1e-6)
