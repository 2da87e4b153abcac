"""tlgpu.jit: replays equal eager results (forward, training, random draws), retraces on new signatures, keeps
in-place state, allocates only its outputs per replay, and refuses host reads inside a trace."""
import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F
from tlgpu import nn
from conftest import needs_pool


def test_forward_replays_match_numpy(rng):
    def f(x, y):
        return (x * y + x).relu().sum(1), x - 1, (x @ y.T).tanh()
    jf = tlgpu.jit(f)
    for _ in range(6):
        a = rng.standard_normal((5, 7)).astype(np.float32)
        b = rng.standard_normal((5, 7)).astype(np.float32)
        s, d, m = jf(tlgpu.tensor(a), tlgpu.tensor(b))
        np.testing.assert_allclose(s.numpy(), np.maximum(a * b + a, 0).sum(1), rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(d.numpy(), a - 1)
        np.testing.assert_allclose(m.numpy(), np.tanh(a @ b.T), rtol=1e-5, atol=1e-5)
    assert jf.traces() == 1
    assert jf.memory_plan()["replays"] == 4          # call 1 eager, call 2 traced, 4 replays


def test_outputs_are_fresh_tensors_each_call(rng):
    jf = tlgpu.jit(lambda x: x * 2)
    outs = []
    for _ in range(5):
        a = rng.standard_normal(9).astype(np.float32)
        outs.append((a, jf(tlgpu.tensor(a))))
    for a, o in outs:                                 # an earlier result is not overwritten by a later replay
        np.testing.assert_array_equal(o.numpy(), a * 2)


def _mlp(seed, opt_cls, **kw):
    tlgpu.manual_seed(seed)
    m = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 3))
    return m, opt_cls(m.parameters(), **kw)


def _step(model, opt, clip=0.5):
    """One cross-entropy training step of model with opt (gradients clipped to `clip` unless None)."""
    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        if clip is not None:
            tlgpu.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss
    return step


@pytest.mark.parametrize("opt_cls,kw", [(tlgpu.optim.Adam, dict(lr=1e-2)), (tlgpu.optim.AdamW, dict(lr=1e-2)),
                                        (tlgpu.optim.SGD, dict(lr=0.1, momentum=0.9)),
                                        (tlgpu.optim.RAdam, dict(lr=1e-2)),
                                        (tlgpu.optim.RMSprop, dict(lr=1e-2, momentum=0.5, centered=True))])
def test_training_replays_equal_eager(rng, opt_cls, kw):
    m1, o1 = _mlp(3, opt_cls, **kw)
    m2, o2 = _mlp(3, opt_cls, **kw)
    eager, jitted = _step(m1, o1), tlgpu.jit(_step(m2, o2))
    sched = tlgpu.optim.lr_scheduler.StepLR(o2, step_size=4, gamma=0.5)
    sched1 = tlgpu.optim.lr_scheduler.StepLR(o1, step_size=4, gamma=0.5)
    warm = 8 if opt_cls is tlgpu.optim.RAdam else 0   # RAdam's first steps switch kernels: trace after them
    for i in range(warm + 12):
        x = rng.standard_normal((16, 8)).astype(np.float32)
        y = rng.integers(0, 3, 16).astype(np.int32)
        l1 = eager(tlgpu.tensor(x), tlgpu.tensor(y)).item()
        step = eager if i < warm else jitted
        if i < warm:
            _step(m2, o2)(tlgpu.tensor(x), tlgpu.tensor(y))
            l2 = l1
        else:
            l2 = jitted(tlgpu.tensor(x), tlgpu.tensor(y)).item()
        assert step is not None
        sched.step()
        sched1.step()
        assert l1 == pytest.approx(l2, rel=1e-6, abs=1e-7)
    for a, b in zip(m1.parameters(), m2.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    assert jitted.traces() == 1
    st1, st2 = o1.state_dict(), o2.state_dict()     # the step counts advanced through the replays too
    assert [s.get("step") for s in st1["state"].values()] == [s.get("step") for s in st2["state"].values()]


def test_new_shapes_and_grad_mode_trace_again(rng):
    jf = tlgpu.jit(lambda x: (x * x).sum())
    for n in (3, 4, 3, 4, 3, 4):
        a = rng.standard_normal(n).astype(np.float32)
        assert jf(tlgpu.tensor(a)).item() == pytest.approx(float((a * a).sum()), rel=1e-5)
    assert jf.traces() == 2
    with tlgpu.no_grad():
        for _ in range(3):
            jf(tlgpu.tensor(a))
    assert jf.traces() == 3
    a = rng.standard_normal((2, 4)).astype(np.float32)
    t = tlgpu.tensor(a)
    for _ in range(3):                                # a transposed view: its strides are another signature
        assert jf(t.T).item() == pytest.approx(float((a * a).sum()), rel=1e-5)
    assert jf.traces() == 4


def test_random_ops_draw_what_eager_calls_draw():
    def f(x):
        return x + tlgpu.randn(*x.shape), tlgpu.rand(3), F.dropout(x, 0.5, training=True)
    x = tlgpu.ones(64)
    tlgpu.manual_seed(7)
    eager = [[t.numpy() for t in f(x)] for _ in range(5)]
    tlgpu.manual_seed(7)
    jf = tlgpu.jit(f)
    jitted = [[t.numpy() for t in jf(x)] for _ in range(5)]
    for e, j in zip(eager, jitted):
        for a, b in zip(e, j):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(jitted[3][0], jitted[4][0])   # fresh numbers on every replay


def test_in_place_state_persists(rng):
    acc = tlgpu.zeros(6)
    jf = tlgpu.jit(lambda x: acc.add_(x * 2))
    total = np.zeros(6, np.float32)
    for _ in range(7):
        a = rng.standard_normal(6).astype(np.float32)
        total += a * 2
        out = jf(tlgpu.tensor(a))
    np.testing.assert_allclose(acc.numpy(), total, rtol=1e-5, atol=1e-6)
    assert out is acc                                 # an output that is captured state comes back as itself


def test_replayed_in_place_writes_bump_versions_as_eager(rng):
    """A replay bumps the versions the call's eager run bumped (captured state and inputs written in place),
    and no others: a forward that saved a parameter refuses to backward after a replayed optimizer step, as
    after an eager one, naming the writer; a replay that only reads leaves every version alone."""
    m, opt = _mlp(3, tlgpu.optim.SGD, lr=0.1)
    x = tlgpu.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    m(x).sum().backward()
    step, fwd = tlgpu.jit(opt.step), tlgpu.jit(lambda x: m(x) * 2.0)
    scale = tlgpu.jit(lambda a, b: (a.mul_(b), b * 3.0)[1])
    params = list(m.parameters())
    for it in range(5):                                         # a jitted call runs eager, captures, then replays
        before = [p._version for p in params]
        with tlgpu.no_grad():
            fwd(x)
        assert [p._version for p in params] == before, it      # reads only
        y = m(x)
        step() if it else opt.step()                            # eager the first time (the trace's capture)
        assert [p._version for p in params] == [v + 1 for v in before], it
        with pytest.raises(RuntimeError, match=r"modified in place by tl_sgd"):
            y.sum().backward()
    assert step.traces() == fwd.traces() == 1
    a, b = (tlgpu.tensor(rng.standard_normal(5).astype(np.float32)) for _ in range(2))
    for _ in range(4):
        va, vb = a._version, b._version
        scale(a, b)
        assert (a._version, b._version) == (va + 1, vb)        # the input written in place, the other read


def test_input_read_by_blas_and_written_in_place_reaches_the_caller(rng):
    """An input that a native BLAS call reads (CPU devices: copied into the traced buffer, not rebound) and that
    the call then writes in place is copied back out at each replay: the caller's tensor gets the write."""
    def f(a, b, s):
        c = a @ b
        a.mul_(s).add_(1.0)
        return c

    jf = tlgpu.jit(f)
    b, s = (tlgpu.tensor(rng.standard_normal((24, 24)).astype(np.float32)) for _ in range(2))
    for it in range(5):
        an = rng.standard_normal((24, 24)).astype(np.float32)
        a = tlgpu.tensor(an)
        c = jf(a, b, s)
        np.testing.assert_allclose(c.numpy(), an @ b.numpy(), rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(a.numpy(), an * s.numpy() + 1.0, rtol=1e-6, atol=1e-6, err_msg=str(it))
    plan = jf.memory_plan()
    assert plan["slot_copies"] == (4 if plan["native"] else 0)       # a in and back out, b in, c out


def test_a_tensor_the_call_no_longer_reaches_is_traced_again(rng):
    """A parameter reassigned (or a module replaced) after tracing: the trace still holds the old buffer, which
    nothing else references, so the next call traces again and reads the new one, as the eager call does."""
    x = tlgpu.tensor(rng.standard_normal((5, 6)).astype(np.float32))
    m = nn.Linear(6, 4)
    box = [nn.Linear(6, 4)]
    jm, jb = tlgpu.jit(lambda x: m(x) * 2.0), tlgpu.jit(lambda x: box[0](x).relu())
    for swap in range(3):
        for _ in range(3):                              # eager, capture, replay
            np.testing.assert_allclose(jm(x).numpy(), m(x).numpy() * 2.0, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(jb(x).numpy(), box[0](x).relu().numpy(), rtol=1e-6, atol=1e-6)
        assert jm.traces() == jb.traces() == 1
        m.weight = nn.Parameter(tlgpu.tensor(rng.standard_normal((4, 6)).astype(np.float32)))
        box[0] = nn.Linear(6, 4)


def test_outputs_that_are_inputs_or_views_of_them(rng):
    jf = tlgpu.jit(lambda x, y: (x[1:], y, x.T))
    for _ in range(4):
        a = rng.standard_normal((3, 4)).astype(np.float32)
        b = rng.standard_normal(2).astype(np.float32)
        x, y = tlgpu.tensor(a), tlgpu.tensor(b)
        v, w, t = jf(x, y)
        np.testing.assert_array_equal(v.numpy(), a[1:])
        np.testing.assert_array_equal(t.numpy(), a.T)
        np.testing.assert_array_equal(w.numpy(), b)


def test_aliased_inputs_are_another_signature(rng):
    jf = tlgpu.jit(lambda x, y: x + y)
    a = tlgpu.tensor(rng.standard_normal(5).astype(np.float32))
    b = tlgpu.tensor(rng.standard_normal(5).astype(np.float32))
    for _ in range(3):
        np.testing.assert_allclose(jf(a, a).numpy(), 2 * a.numpy())
        np.testing.assert_allclose(jf(a, b).numpy(), a.numpy() + b.numpy())
    assert jf.traces() == 2


@pytest.mark.parametrize("read", ["item", "numpy", "bool", "tolist", "synchronize"])
def test_host_read_inside_a_trace_raises(read):
    def f(x):
        y = x * 2
        if read == "item":
            y.sum().item()
        elif read == "numpy":
            y.numpy()
        elif read == "bool":
            if (y.sum() > 0):
                pass
        elif read == "tolist":
            y.tolist()
        else:
            tlgpu.synchronize()
        return y
    jf = tlgpu.jit(f)
    x = tlgpu.ones(4)
    jf(x)                                             # the eager call may read
    with pytest.raises(RuntimeError, match="tlgpu.jit"):
        jf(x)
    assert not tlgpu._C._jit_capturing()             # the failed trace was dropped
    np.testing.assert_array_equal((x * 3).numpy(), 3 * np.ones(4))


@pytest.mark.parametrize("how", ["tensor", "index"])
def test_host_data_uploaded_inside_a_trace_raises(rng, how):
    idx = np.array([2, 0, 1])

    def f(x):
        if how == "tensor":
            return x + tlgpu.tensor(rng.standard_normal(3).astype(np.float32))
        return x[idx]                                 # an index array: uploaded, would replay as a constant
    jf = tlgpu.jit(f)
    x = tlgpu.ones(3)
    jf(x)
    with pytest.raises(RuntimeError, match="tlgpu.jit.*argument"):
        jf(x)
    i = tlgpu.tensor(idx.astype(np.int32))           # the fix the message names: a tensor argument
    jg = tlgpu.jit(lambda x, i: x.gather(0, i))      # (gather checks its index on the device: no host read)
    for _ in range(3):
        a = rng.standard_normal(3).astype(np.float32)
        np.testing.assert_array_equal(jg(tlgpu.tensor(a), i).numpy(), a[idx])


def test_error_inside_the_traced_call_drops_the_trace():
    calls = []

    def f(x):
        calls.append(1)
        if len(calls) == 2:
            raise KeyError("boom")
        return x + 1
    jf = tlgpu.jit(f)
    x = tlgpu.ones(3)
    jf(x)
    with pytest.raises(KeyError):
        jf(x)
    assert not tlgpu._C._jit_capturing()
    assert jf.traces() == 0
    np.testing.assert_array_equal(jf(x).numpy(), 2 * np.ones(3))   # traces now
    np.testing.assert_array_equal(jf(x).numpy(), 2 * np.ones(3))   # replays
    assert jf.traces() == 1


def test_nested_jit_is_part_of_the_outer_trace(rng):
    inner = tlgpu.jit(lambda x: x * 3)
    outer = tlgpu.jit(lambda x: inner(x) + 1)
    for _ in range(5):
        a = rng.standard_normal(4).astype(np.float32)
        np.testing.assert_allclose(outer(tlgpu.tensor(a)).numpy(), a * 3 + 1, rtol=1e-6)


def test_non_tensor_arguments_are_part_of_the_signature(rng):
    jf = tlgpu.jit(lambda x, k: x * k)
    a = rng.standard_normal(4).astype(np.float32)
    for k in (2.0, 3.0, 2.0, 3.0, 2.0):
        np.testing.assert_allclose(jf(tlgpu.tensor(a), k).numpy(), a * k, rtol=1e-6)
    assert jf.traces() == 2
    with pytest.raises(TypeError, match="hashable"):
        jf(tlgpu.tensor(a), {1.0})                    # a set: not a container jit walks, not hashable


def test_replay_counts_and_enqueues(rng):
    m, opt = _mlp(0, tlgpu.optim.Adam, lr=1e-3)
    jf = tlgpu.jit(_step(m, opt))
    x = tlgpu.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    y = tlgpu.tensor(rng.integers(0, 3, 16).astype(np.int32))
    jf(x, y)
    jf(x, y)
    tlgpu.synchronize()
    plan = jf.memory_plan()
    xs = [tlgpu.tensor(rng.standard_normal((16, 8)).astype(np.float32)) for _ in range(5)]
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    for x in xs:                                      # new inputs: a slot a BLAS call reads is copied in
        jf(x, y)
    st = tlgpu.stream_stats()
    assert st["waits"] == 0                           # a replay never waits for the device
    assert st["enqueued"] == 5 * (plan["commands"] + plan["slot_copies"])
    per = int(tlgpu.settings()["TLGPU_COMPUTE_PER_BUFFER"]["value"] or 50)
    assert 1 <= st["flushes"] <= st["enqueued"] // per   # eager's flush policy: a flush once `per` are queued


@needs_pool
def test_replay_allocates_only_its_outputs(rng):
    m, opt = _mlp(0, tlgpu.optim.Adam, lr=1e-3)
    jf = tlgpu.jit(_step(m, opt))
    x = tlgpu.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    y = tlgpu.tensor(rng.integers(0, 3, 16).astype(np.int32))
    for _ in range(3):
        jf(x, y)
    tlgpu.synchronize()
    before = tlgpu.memory_stats()
    for _ in range(20):
        loss = jf(x, y)
    del loss
    tlgpu.synchronize()
    after = tlgpu.memory_stats()
    assert after["allocations"] - before["allocations"] == 20   # the loss, one block per call
    assert after["live"] == before["live"]
    plan = jf.memory_plan()
    assert plan["arena_bytes"] > 0 and plan["reused_blocks"] > 0 and plan["held_bytes"] > 0


@needs_pool
def test_dropping_the_jitted_function_frees_its_trace(rng):
    import gc
    gc.collect()
    tlgpu.synchronize()
    live0 = tlgpu.memory_stats()["live"]
    w = tlgpu.tensor(rng.standard_normal((32, 32)).astype(np.float32))
    jf = tlgpu.jit(lambda x: ((x @ w).relu() @ w).sum(0))
    x = tlgpu.tensor(rng.standard_normal((8, 32)).astype(np.float32))
    for _ in range(4):
        jf(x)
    assert tlgpu.memory_stats()["live"] > live0
    del jf, w, x
    gc.collect()
    assert tlgpu.memory_stats()["live"] == live0


def test_decorator_forms_and_methods(rng):
    class Policy:
        def __init__(self):
            tlgpu.manual_seed(0)
            self.net = nn.Linear(4, 2)

        @tlgpu.jit
        def act(self, obs):
            return self.net(obs).softmax(-1)

    @tlgpu.jit(max_traces=1)
    def sq(x):
        return x * x
    p = Policy()
    for _ in range(4):
        a = rng.standard_normal((3, 4)).astype(np.float32)
        w, b = p.net.weight.numpy(), p.net.bias.numpy()
        z = a @ w.T + b
        e = np.exp(z - z.max(-1, keepdims=True))
        np.testing.assert_allclose(p.act(tlgpu.tensor(a)).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5)
        np.testing.assert_array_equal(sq(tlgpu.tensor(a)).numpy(), a * a)
    for n in (2, 3, 2):
        sq(tlgpu.ones(n))
    assert sq.traces() == 1
    with pytest.raises(TypeError):
        tlgpu.jit(3)


def test_kv_write_and_attention_read_positions_on_the_device(rng):
    """pos / length as int32 tensors of one element give what the ints give (the path a traced decode uses)."""
    H, Hkv, D, ML = 4, 2, 8, 12
    cache_a = tlgpu.tensor(rng.standard_normal((Hkv, ML, D)).astype(np.float32))
    cache_b = tlgpu.tensor(cache_a.numpy())
    for pos in (0, 5, 11):
        x = tlgpu.tensor(rng.standard_normal((Hkv, D)).astype(np.float32))
        tlgpu.kv_write(cache_a, x, pos)
        tlgpu.kv_write(cache_b, x, tlgpu.tensor([pos], dtype=tlgpu.int32))
        np.testing.assert_array_equal(cache_a.numpy(), cache_b.numpy())
        q = tlgpu.tensor(rng.standard_normal((H, D)).astype(np.float32))
        want = tlgpu.attention(q, cache_a, cache_a, pos + 1).numpy()
        got = tlgpu.attention(q, cache_b, cache_b, tlgpu.tensor([pos], dtype=tlgpu.int32), offset=1).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    before = cache_b.numpy()
    tlgpu.kv_write(cache_b, x, tlgpu.tensor([ML], dtype=tlgpu.int32))   # past the cache: not written
    np.testing.assert_array_equal(cache_b.numpy(), before)
    with pytest.raises(TypeError, match="int32 tensor of one element"):
        tlgpu.kv_write(cache_b, x, tlgpu.tensor([1.0]))
    with pytest.raises(TypeError, match="int32 tensor of one element"):
        tlgpu.attention(q, cache_b, cache_b, tlgpu.tensor([1, 2], dtype=tlgpu.int32))


@pytest.mark.parametrize("q4", [False, True])
def test_jitted_decode_step_equals_eager(q4):
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import tiny_decoder as td
    cfg = td.Config(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=24)
    model = td.Decoder(cfg, td.make_weights(cfg, seed=3), q4=q4)
    prompt = [4, 9, 1]
    want = model.generate(prompt, 12)                  # a host read per token, positions as ints
    assert model.generate(prompt, 12, device=True) == want
    for _ in range(2):                                 # traced in the first run, replayed in the second
        assert model.generate(prompt, 12, jit=True) == want
    assert model._jstep.traces() == 1
    assert model._jstep.memory_plan()["replays"] >= 10
    model.reset()                                      # logits too, step by step, against numpy float64
    w = td.make_weights(cfg, seed=3)
    seq = [4, 9, 1, 7, 7, 2]
    ref = td.reference_logits(cfg, td.dequantized(w) if q4 else w, seq)
    pos = tlgpu.tensor([0], dtype=tlgpu.int32)
    for i, t in enumerate(seq):
        logits, _ = model._jstep(tlgpu.tensor([t], dtype=tlgpu.int32), pos)
        int8 = tlgpu.device().type == "gpu" or tlgpu._C._cpu_quant()["active"]   # int8 activations (test_llm.QTOL)
        tol = 2e-2 if q4 and int8 else 2e-3
        np.testing.assert_allclose(logits.numpy()[0], ref[i], rtol=tol, atol=tol * np.abs(ref[i]).max())
    assert pos.item() == len(seq)


def test_index_select_with_a_device_index_reads_nothing_back(rng):
    """index_select / t[idx] given a 1-D int32 tensor: checked on the device, backward on the device (repeated
    indices add up), no host wait, so a traced minibatch step works; a list index still works as before."""
    a = rng.standard_normal((9, 4)).astype(np.float32)
    idx = np.array([3, 0, 3, 8, -1, 2], np.int32)
    t = tlgpu.tensor(a, requires_grad=True)
    i = tlgpu.tensor(idx)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    y = t.index_select(0, i)
    z = t[i]
    w = t.T.index_select(1, i)
    ((y * 2).sum() + (z * z).sum() + w.sum()).backward()
    assert tlgpu.stream_stats()["waits"] == 0
    np.testing.assert_array_equal(y.numpy(), a[idx])
    np.testing.assert_array_equal(z.numpy(), a[idx])
    np.testing.assert_array_equal(w.numpy(), a.T[:, idx])
    g = np.zeros_like(a)
    np.add.at(g, idx, 2 + 2 * a[idx] + 1)
    np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(t[[3, 0]].numpy(), a[[3, 0]])
    bad = t.index_select(0, tlgpu.tensor(np.array([1, 9], np.int32)))
    with pytest.raises(IndexError, match="index_select"):
        bad.numpy()

    jf = tlgpu.jit(lambda x, i: (x.index_select(0, i) * 3).sum(0))   # a minibatch as a tensor argument
    for _ in range(4):
        b = rng.standard_normal((9, 4)).astype(np.float32)
        k = rng.integers(0, 9, 5).astype(np.int32)
        np.testing.assert_allclose(jf(tlgpu.tensor(b), tlgpu.tensor(k)).numpy(), (b[k] * 3).sum(0), rtol=1e-5)


def test_half_precision_tensors_trace_and_replay(rng):
    """float16/bfloat16/uint8 inputs are part of the signature; conversions and promoted ops replay."""
    import ml_dtypes
    jf = tlgpu.jit(lambda h, b, u: ((h * 2).float() + b.float(), (u.float() / 255).half()))
    for _ in range(4):
        h = rng.standard_normal(6).astype(np.float16)
        b = rng.standard_normal(6).astype(ml_dtypes.bfloat16)
        u = rng.integers(0, 256, 6).astype(np.uint8)
        s, q = jf(tlgpu.tensor(h), tlgpu.tensor(b), tlgpu.tensor(u))
        np.testing.assert_allclose(s.numpy(), (h * 2).astype(np.float32) + b.astype(np.float32), rtol=1e-6)
        assert q.dtype == tlgpu.float16
        np.testing.assert_array_equal(q.numpy(), (u.astype(np.float32) / 255).astype(np.float16))
    assert jf.traces() == 1
    jf(tlgpu.tensor(h.astype(np.float32)), tlgpu.tensor(b), tlgpu.tensor(u))   # float32 in: another signature
    assert jf.traces() == 1 and len(jf._seen) == 2


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("device_pos", [False, True])
def test_rope_kv_write_equals_rope_then_kv_write(rng, interleaved, device_pos):
    nq, nkv, D, ML = 4, 2, 8, 10
    for pos in (0, 3, 9):
        qkv = rng.standard_normal((nq + 2 * nkv, D)).astype(np.float32)
        cache0 = rng.standard_normal((2 * nkv, ML, D)).astype(np.float32)
        a, ca = tlgpu.tensor(qkv), tlgpu.tensor(cache0)
        tlgpu.rope(a[:nq + nkv], pos, theta=500.0, interleaved=interleaved, inplace=True)
        tlgpu.kv_write(ca, a[nq:], pos)
        b, cb = tlgpu.tensor(qkv), tlgpu.tensor(cache0)
        p = tlgpu.tensor([pos], dtype=tlgpu.int32) if device_pos else pos
        assert tlgpu.rope_kv_write(b, cb, p, nq, theta=500.0, interleaved=interleaved) is b
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(cb.numpy(), ca.numpy(), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="rope_kv_write"):
        tlgpu.rope_kv_write(b, cb, 1, nq + 1)
    with pytest.raises(IndexError, match="max_len"):
        tlgpu.rope_kv_write(b, cb, ML, nq)


@pytest.mark.parametrize("mode", ["chunked", "multi", "per_param"])
@pytest.mark.parametrize("cls,kw", [(tlgpu.optim.Adam, dict(lr=1e-2, weight_decay=0.01)),
                                    (tlgpu.optim.AdamW, dict(lr=1e-2, amsgrad=True)),
                                    (tlgpu.optim.Adam, dict(lr=1e-2, amsgrad=True)),
                                    (tlgpu.optim.SGD, dict(lr=0.05, momentum=0.9, nesterov=True)),
                                    (tlgpu.optim.RAdam, dict(lr=1e-2, weight_decay=0.01))],
                         ids=["adam", "adamw-amsgrad", "adam-amsgrad", "sgd-nesterov", "radam"])
def test_grouped_optimizer_replays_equal_eager_bit_for_bit(rng, monkeypatch, mode, cls, kw):
    """The optimizers' launch modes under tlgpu.jit (tlgpu/optim's _launch_mode: chunked on CPU devices,
    tl_adam8 for Adam on GPUs, one a parameter): each replay refreshes the step's scalars (bias corrections,
    RAdam's step size, the scheduled lr), so the replayed steps leave the parameters, the state and the step
    counts exactly as eager steps do; the step is one optimizer command for the five parameters where grouped
    (chunked; tl_adam8 without amsgrad), five otherwise. The 4100-wide layer spans two chunks and a tail."""
    monkeypatch.setattr(tlgpu.optim, "_PER_PARAM", None)
    monkeypatch.setattr(tlgpu.optim, "_MODE", mode)
    models, opts, scheds = [], [], []
    for _ in range(2):
        tlgpu.manual_seed(5)
        m = nn.Sequential(nn.Linear(8, 4100), nn.Tanh(), nn.Linear(4100, 3), nn.Tanh(), nn.Linear(3, 3))
        list(m.parameters())[-1].requires_grad = False
        models.append(m)
        opts.append(cls([p for p in m.parameters() if p.requires_grad], **kw))
        scheds.append(tlgpu.optim.lr_scheduler.StepLR(opts[-1], step_size=3, gamma=0.7))

    step = lambda model, opt: _step(model, opt, clip=None)   # noqa: E731
    eager, jitted = step(models[0], opts[0]), tlgpu.jit(step(models[1], opts[1]))
    warm = 8 if cls is tlgpu.optim.RAdam else 0       # RAdam's first steps switch kernels: trace after them
    for i in range(warm + 16):
        x = tlgpu.tensor(rng.standard_normal((6, 8)).astype(np.float32))
        y = tlgpu.tensor(rng.integers(0, 3, 6).astype(np.int32))
        second = step(models[1], opts[1]) if i < warm else jitted
        assert eager(x, y).item() == second(x, y).item()
        for sc in scheds:
            sc.step()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for a, b in zip(opts[0].state.values(), opts[1].state.values()):
        assert a.get("step") == b.get("step") and a.get("step", warm + 16) == warm + 16
        for k, t in a.items():
            if isinstance(t, tlgpu.Tensor):
                np.testing.assert_array_equal(t.numpy(), b[k].numpy())
    assert jitted.traces() == 1 and jitted.memory_plan()["replays"] == 14
    opt_cmds = [c for c in jitted.commands() if c.startswith(("tl_adam", "tl_sgd", "tl_radam"))]
    grouped = mode == "chunked" or (mode == "multi" and cls is not tlgpu.optim.SGD and cls is not tlgpu.optim.RAdam
                                    and not kw.get("amsgrad"))
    assert len(opt_cmds) == (1 if grouped else 5), opt_cmds


def test_mlp_adam_step_is_one_optimizer_command(rng, monkeypatch):
    """bench_train's MLP step (784-256-256-10, Adam) jitted: in the default launch mode the optimizer over its
    six parameters is one command on any device (chunked on CPU devices, tl_adam8 on GPUs), five fewer than with
    a launch a parameter; on PoCL with the BLAS path (which also applies the ReLUs) the step is 14 commands,
    at most 0.6x the 27 the eager step took before tlgpu.jit (issue 29)."""
    monkeypatch.setattr(tlgpu.optim, "_PER_PARAM", None)
    x = tlgpu.tensor(rng.standard_normal((32, 784)).astype(np.float32))
    y = tlgpu.tensor(rng.integers(0, 10, 32).astype(np.int32))
    cmds = {}
    for mode in ("per_param", None):
        monkeypatch.setattr(tlgpu.optim, "_MODE", mode)
        model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))
        opt = tlgpu.optim.Adam(model.parameters(), lr=1e-3)
        jf = tlgpu.jit(_step(model, opt, clip=None))
        for _ in range(3):
            jf(x, y)
        cmds[mode] = jf.commands()
    assert len([c for c in cmds[None] if c.startswith("tl_adam")]) == 1, cmds[None]
    assert len(cmds[None]) == len(cmds["per_param"]) - 5
    if tlgpu.device().type == "cpu":
        assert cmds[None][-1] == "tl_adamc_f32"
        if "cpu_blas_sgemm" in cmds[None]:
            assert len(cmds[None]) <= 0.6 * 27, cmds[None]
