"""The RNN gate ops, sequence ops and modules on float16/bfloat16 (issue 26): storage in the half dtype,
compute in float32, result and gradients in the input's dtype; each against the float32 op on the same
(rounded) values within docs/precision.md's tolerances, forward and backward. Mixed dtypes promote as
PyTorch; under tlgpu.autocast the cells and layers run in the autocast dtype with float32 parameters and
float32 parameter gradients; integer operands raise TypeError naming the op and the dtype."""
import ml_dtypes
import numpy as np
import pytest

import tlgpu
from tlgpu import nn

BF16 = np.dtype(ml_dtypes.bfloat16)
F16 = np.dtype(np.float16)
HALVES = [F16, BF16]
TOL = {F16: 2e-3, BF16: 1.6e-2}          # docs/precision.md: ops against float32 on the same values
GTOL = 3e-2                              # gradients through half tensors


def _vals(rng, shape, dt, scale=1.0):
    """Random float32 values that dt holds exactly."""
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(dt).astype(np.float32)


def _close(got, want, dt, tol=None, what=""):
    tol = TOL[dt] if tol is None else tol
    np.testing.assert_allclose(np.asarray(got.numpy(), np.float32), want.numpy(), rtol=tol, atol=tol, err_msg=what)


def _grad_close(got, want, dt, what):
    """A half gradient against the float32 one: its dtype, and within GTOL of the largest value."""
    assert got is not None and got.dtype == dt, (what, None if got is None else got.dtype)
    w = want.numpy()
    np.testing.assert_allclose(got.numpy().astype(np.float32), w, rtol=GTOL,
                               atol=GTOL * max(1.0, float(np.abs(w).max())), err_msg=what)


def _run_both(fn, arrays, dt, rng, given=None):
    """fn on the arrays as dt tensors and as float32 tensors (the same values), both requiring grad
    (given: which ones; None entries stay None); backward of a fixed random weighting of each output.
    Returns (half inputs, float32 inputs, half outputs, float32 outputs)."""
    given = [True] * len(arrays) if given is None else given
    hs = [None if a is None else tlgpu.tensor(a.astype(dt), requires_grad=g) for a, g in zip(arrays, given)]
    fs = [None if a is None else tlgpu.tensor(a, requires_grad=g) for a, g in zip(arrays, given)]
    oh, of = fn(*hs), fn(*fs)
    oh, of = (oh if isinstance(oh, tuple) else (oh,)), (of if isinstance(of, tuple) else (of,))
    lh, lf = 0, 0
    for a, b in zip(oh, of):
        w = _vals(rng, b.shape, dt)
        lh = lh + (a * tlgpu.tensor(w.astype(dt))).float().sum()
        lf = lf + (b * tlgpu.tensor(w)).sum()
    lh.backward()
    lf.backward()
    return hs, fs, oh, of


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_gru_gates_half(rng, dt, bias):
    B, H = 5, 7
    arrays = [_vals(rng, (B, 3 * H), dt), _vals(rng, (B, 3 * H), dt), _vals(rng, (B, H), dt, 0.5)]
    arrays += [_vals(rng, (3 * H,), dt), _vals(rng, (3 * H,), dt)] if bias else [None, None]
    hs, fs, oh, of = _run_both(tlgpu.gru_gates, arrays, dt, rng)
    assert oh[0].dtype == dt and oh[0].shape == (B, H)
    _close(oh[0], of[0], dt)
    for i, (a, b) in enumerate(zip(hs, fs)):
        if a is not None:
            _grad_close(a.grad, b.grad, dt, f"gru_gates input {i}")


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("extra", [True, False])
def test_lstm_gates_half(rng, dt, extra):
    """Both outputs (h', c') in dt; the gradients of gates, c (and gh and the biases) in dt."""
    B, H = 4, 6
    arrays = [_vals(rng, (B, 4 * H), dt), _vals(rng, (B, H), dt)]
    arrays += [_vals(rng, (B, 4 * H), dt), _vals(rng, (4 * H,), dt), _vals(rng, (4 * H,), dt)] if extra else []
    hs, fs, oh, of = _run_both(tlgpu.lstm_gates, arrays, dt, rng)
    assert [o.dtype for o in oh] == [dt, dt]
    for a, b in zip(oh, of):
        _close(a, b, dt)
    for i, (a, b) in enumerate(zip(hs, fs)):
        _grad_close(a.grad, b.grad, dt, f"lstm_gates input {i}")


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("op", ["gru", "lstm"])
def test_gate_ops_on_one_half_dtype_are_one_kernel(rng, dt, op):
    """Operands all of one half dtype run the half build of the gate kernel (rnn_bf16 / rnn_f16): one command
    forward (the widening path takes 6 or more), with the bits of the float32 op on the widened values rounded
    once (outputs; the operands' gradients too, the biases' summed over the rows in dt by the engine)."""
    B, H, G = 6, 5, 3 if op == "gru" else 4
    fn = tlgpu.gru_gates if op == "gru" else tlgpu.lstm_gates
    shapes = [(B, G * H), (B, G * H), (B, H)] if op == "gru" else [(B, G * H), (B, H), (B, G * H)]
    arrays = [(rng.standard_normal(s) * 1.5).astype(dt) for s in shapes + [(G * H,), (G * H,)]]
    hs = [tlgpu.tensor(a, requires_grad=True) for a in arrays]
    fs = [tlgpu.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    oh = fn(*hs)
    assert tlgpu.stream_stats()["enqueued"] == 1
    of = fn(*fs)
    oh, of = (oh, of) if op == "lstm" else ((oh,), (of,))
    w = (rng.standard_normal((B, H)) * 0.5).astype(dt)
    for a, b in zip(oh, of):
        assert a.dtype == dt and np.array_equal(a.numpy().view(np.uint16), b.numpy().astype(dt).view(np.uint16))
    lh = sum((a * tlgpu.tensor(w)).float().sum() for a in oh)
    lf = sum((b * tlgpu.tensor(w.astype(np.float32))).sum() for b in of)
    lf.backward()
    lh.backward()
    for i, (a, b) in enumerate(zip(hs, fs)):
        assert a.grad.dtype == dt
        if i < 3:
            assert np.array_equal(a.grad.numpy().view(np.uint16), b.grad.numpy().astype(dt).view(np.uint16)), i
        else:
            _grad_close(a.grad, b.grad, dt, f"{op} bias {i}")


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_gate_ops_half_strided_views(rng, dt):
    """Transposed and sliced half operands (the widening copies read their strides)."""
    B, H = 3, 4
    gi = tlgpu.tensor(_vals(rng, (3 * H, B), dt).astype(dt)).T
    big = tlgpu.tensor(_vals(rng, (B, 5 * H), dt).astype(dt))
    h = tlgpu.tensor(_vals(rng, (B, 2 * H), dt).astype(dt))[:, ::2]
    got = tlgpu.gru_gates(gi, big[:, H:4 * H], h)
    want = tlgpu.gru_gates(gi.float(), big.float()[:, H:4 * H], h.float())
    assert got.dtype == dt
    _close(got, want, dt)


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("op,G", [("gru_sequence", 3), ("lstm_sequence", 4)])
@pytest.mark.parametrize("states", [True, False])
def test_sequence_ops_half(rng, dt, op, G, states):
    """The whole layer in float32 on the widened operands: the output rounded once to dt, every gradient
    (gi_all, the initial states, w_hh, b_hh) in dt."""
    T, B, H = 6, 3, 5
    lstm = op == "lstm_sequence"
    arrays = [_vals(rng, (T, B, G * H), dt), _vals(rng, (B, H), dt, 0.5) if states else None]
    arrays += [_vals(rng, (B, H), dt, 0.5) if states else None] if lstm else []
    arrays += [_vals(rng, (G * H, H), dt, 0.4), _vals(rng, (G * H,), dt, 0.3)]
    hs, fs, oh, of = _run_both(getattr(tlgpu._C, op), arrays, dt, rng)
    assert oh[0].dtype == dt and oh[0].shape == ((T + 1, B, H) if lstm else (T, B, H))
    _close(oh[0], of[0], dt)
    for i, (a, b) in enumerate(zip(hs, fs)):
        if a is not None:
            _grad_close(a.grad, b.grad, dt, f"{op} input {i}")


def _copy_params(dst, src, dt):
    """dst's parameters := src's rounded to dt (so both modules hold the same values)."""
    for (name, p), q in zip(src.named_parameters(), dst.parameters()):
        q.requires_grad_(False)
        q.copy_(tlgpu.tensor(p.numpy().astype(dt).astype(np.float32)))
        q.requires_grad_(True)


MODULES = [("GRUCell", lambda: nn.GRUCell(6, 5)), ("LSTMCell", lambda: nn.LSTMCell(6, 5)),
           ("GRU", lambda: nn.GRU(6, 5, num_layers=2)), ("LSTM", lambda: nn.LSTM(6, 5, batch_first=True))]


def _forward(name, m, x):
    """The module over x; a cell runs 4 steps from its default (zero) state. Returns the outputs to check."""
    if name.endswith("Cell"):
        s = None
        for t in range(x.shape[0]):
            s = m(x[t], s)
        return s if isinstance(s, tuple) else (s,)
    out, st = m(x)
    return (out,) + (st if isinstance(st, tuple) else (st,))


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("name,make", MODULES, ids=[m[0] for m in MODULES])
def test_half_modules_match_float32(rng, dt, name, make):
    """A module converted to dt on a dt input: outputs and parameter gradients in dt, against the float32
    module holding the same values. The half module rounds its products (x W_ih^T, a cell's h W_hh^T) and a
    cell's state between steps to dt, so the outputs get twice the single-op tolerance."""
    tlgpu.manual_seed(1)
    ref = make()
    m = make().to(dt)
    _copy_params(ref, m, np.float32)
    x = _vals(rng, (4, 3, 6), dt)
    outs = _forward(name, m, tlgpu.tensor(x.astype(dt)))
    want = _forward(name, ref, tlgpu.tensor(x))
    loss_h, loss_f = 0, 0
    for a, b in zip(outs, want):
        assert a.dtype == dt, (name, a.dtype)
        _close(a, b, dt, 2 * TOL[dt], name)
        w = _vals(rng, b.shape, dt)
        loss_h = loss_h + (a.float() * tlgpu.tensor(w)).sum()
        loss_f = loss_f + (b * tlgpu.tensor(w)).sum()
    loss_h.backward()
    loss_f.backward()
    for (pn, p), q in zip(m.named_parameters(), ref.parameters()):
        _grad_close(p.grad, q.grad, dt, f"{name}.{pn}")


def test_mixed_dtypes_promote_to_float32(rng):
    """A float16 input through float32 weights gives float32 (PyTorch's promotion), and the input's gradient
    is float16; float16 with bfloat16 also gives float32."""
    gru = nn.GRU(4, 3)
    x = tlgpu.tensor(_vals(rng, (5, 2, 4), F16).astype(F16), requires_grad=True)
    out, h = gru(x)
    assert out.dtype == np.float32 and h.dtype == np.float32
    out.sum().backward()
    assert x.grad.dtype == F16
    gi = tlgpu.tensor(_vals(rng, (2, 9), F16).astype(F16))
    gh = tlgpu.tensor(_vals(rng, (2, 9), BF16).astype(BF16))
    assert tlgpu.gru_gates(gi, gh, tlgpu.zeros(2, 3, dtype=F16)).dtype == np.float32


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("name,make", MODULES, ids=[m[0] for m in MODULES])
def test_autocast_runs_rnns_in_the_low_dtype(rng, dt, name, make):
    """float32 modules under tlgpu.autocast(dt): outputs in dt, parameters and their gradients float32;
    values as the float32 module on dt-rounded weights and input, within dt's precision (the products and
    the gates' results are rounded to dt inside)."""
    tlgpu.manual_seed(2)
    m, ref = make(), make()
    _copy_params(ref, m, dt)
    x = _vals(rng, (4, 3, 6), dt)
    with tlgpu.autocast(dtype=dt):
        outs = _forward(name, m, tlgpu.tensor(x))
    want = _forward(name, ref, tlgpu.tensor(x))
    loss_h, loss_f = 0, 0
    for a, b in zip(outs, want):
        assert a.dtype == dt, (name, a.dtype)
        _close(a, b, dt, 2 * TOL[dt], name)
        w = _vals(rng, b.shape, dt)
        loss_h = loss_h + (a.float() * tlgpu.tensor(w)).sum()
        loss_f = loss_f + (b * tlgpu.tensor(w)).sum()
    loss_h.backward()
    loss_f.backward()
    for (pn, p), q in zip(m.named_parameters(), ref.parameters()):
        assert p.dtype == np.float32 and p.grad.dtype == np.float32, pn
        g, w = p.grad.numpy(), q.grad.numpy()
        np.testing.assert_allclose(g, w, rtol=GTOL, atol=GTOL * max(1.0, float(np.abs(w).max())),
                                   err_msg=f"{name}.{pn}")


def test_autocast_gate_ops_cast_every_operand(rng):
    """Under autocast a float32 state and float32 biases are cast too: the result is in the autocast dtype."""
    gi, gh = tlgpu.randn(3, 12), tlgpu.randn(3, 12)
    with tlgpu.autocast(dtype=tlgpu.float16):
        h, c = tlgpu.lstm_gates(gi.bfloat16(), tlgpu.randn(3, 3), gh, tlgpu.randn(12), tlgpu.randn(12))
        y = tlgpu._C.gru_sequence(tlgpu.randn(2, 3, 9), None, tlgpu.randn(9, 3))
    assert h.dtype == c.dtype == y.dtype == F16
    assert tlgpu.lstm_gates(gi, tlgpu.randn(3, 3))[0].dtype == np.float32      # outside: float32 again


def test_integer_operands_raise_type_error(rng):
    gi = tlgpu.tensor(_vals(rng, (2, 9), F16).astype(F16))
    bad = tlgpu.tensor(np.ones((2, 3), np.int32))
    with pytest.raises(TypeError, match=r"gru_gates: expected a float32 tensor, got int32 with shape \(2, 3\)"):
        tlgpu.gru_gates(gi, gi, bad)
    with pytest.raises(TypeError, match=r"lstm_sequence: expected a float32 tensor, got uint8 with shape"):
        tlgpu._C.lstm_sequence(tlgpu.tensor(np.ones((2, 2, 12), np.uint8)), None, None,
                               tlgpu.zeros(12, 3, dtype=F16))
    with pytest.raises(ValueError, match="gru_sequence: w_hh must be 2-D"):      # shapes still checked
        tlgpu._C.gru_sequence(tlgpu.zeros(2, 2, 9, dtype=BF16), None, tlgpu.zeros(9, dtype=BF16))


def test_float16_gru_policy_trains(rng):
    """A float16 GRU policy head (float16 parameters, Adam state in float16) learns to sum a sequence's
    signs: the loss falls at least threefold (about fourfold on PoCL and on the H100)."""
    tlgpu.manual_seed(3)
    gru, head = nn.GRU(2, 16).half(), nn.Linear(16, 1).half()
    opt = tlgpu.optim.Adam(list(gru.parameters()) + list(head.parameters()), lr=1e-2)
    xs = rng.standard_normal((6, 64, 2)).astype(np.float32)
    ys = np.tanh(xs[..., 0].sum(0, keepdims=True).T * 0.5).astype(np.float32)
    x, y = tlgpu.tensor(xs.astype(F16)), tlgpu.tensor(ys)
    losses = []
    for _ in range(60):
        out, h = gru(x)
        loss = ((head(out[5]).float() - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert np.isfinite(losses).all()
    assert np.mean(losses[-5:]) < 0.33 * losses[0], (losses[0], losses[-5:])
