"""GRUCell, LSTMCell, GRU and LSTM against float64 numpy implementations of torch's equations: forward
values, gradients of the input, the initial state and every parameter (central differences), torch's
parameter names, init bounds and shapes (batch_first, unbatched, stacked layers), and the errors."""
import math

import numpy as np
import pytest

import tlgpu
from tlgpu import nn
from conftest import needs_pool
from gradcheck import check

R = np.random.default_rng(21)


def _sig(x):
    return 1 / (1 + np.exp(-x))


def gru_cell_ref(x, h, w_ih, w_hh, b_ih, b_hh):
    gi, gh = x @ w_ih.T + b_ih, h @ w_hh.T + b_hh
    H = h.shape[-1]
    r = _sig(gi[..., :H] + gh[..., :H])
    z = _sig(gi[..., H:2 * H] + gh[..., H:2 * H])
    n = np.tanh(gi[..., 2 * H:] + r * gh[..., 2 * H:])
    return (1 - z) * n + z * h


def lstm_cell_ref(x, h, c, w_ih, w_hh, b_ih, b_hh):
    g = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    H = h.shape[-1]
    i, f, gg, o = _sig(g[..., :H]), _sig(g[..., H:2 * H]), np.tanh(g[..., 2 * H:3 * H]), _sig(g[..., 3 * H:])
    c2 = f * c + i * gg
    return o * np.tanh(c2), c2


def seq_ref(cell, x, states, params):
    """Stacked layers over x (T, B, F); params[k] = (w_ih, w_hh, b_ih, b_hh); states[k] = h or (h, c)."""
    finals = []
    for k, p in enumerate(params):
        s, outs = states[k], []
        for t in range(x.shape[0]):
            s = cell(x[t], *s, *p) if isinstance(s, tuple) else cell(x[t], s, *p)
            outs.append(s[0] if isinstance(s, tuple) else s)
        finals.append(s)
        x = np.stack(outs)
    return x, finals


def _set(module, names, tensors):
    for n, t in zip(names, tensors):
        setattr(module, n, t)


CELL_NAMES = ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]


@pytest.mark.parametrize("batched", [True, False])
def test_gru_cell_forward_and_all_gradients(batched):
    I, H, B = 3, 5, 2
    m = nn.GRUCell(I, H)
    lead = (B,) if batched else ()
    arrays = [R.standard_normal(lead + (I,)), R.standard_normal(lead + (H,)), R.standard_normal((3 * H, I)),
              R.standard_normal((3 * H, H)), R.standard_normal(3 * H), R.standard_normal(3 * H)]

    def run(x, h, *p):
        _set(m, CELL_NAMES, p)
        return m(x, h)
    out = check(run, gru_cell_ref, arrays)
    assert out.shape == lead + (H,)


def test_lstm_cell_forward_and_all_gradients():
    I, H, B = 4, 3, 3
    m = nn.LSTMCell(I, H)
    arrays = [R.standard_normal((B, I)), R.standard_normal((B, H)), R.standard_normal((B, H)),
              R.standard_normal((4 * H, I)), R.standard_normal((4 * H, H)), R.standard_normal(4 * H),
              R.standard_normal(4 * H)]
    for which in (0, 1):                    # h' and c' each carry every gradient

        def run(x, h, c, *p):
            _set(m, CELL_NAMES, p)
            return m(x, (h, c))[which]
        check(run, lambda *a: lstm_cell_ref(*a)[which], arrays)


def test_cells_default_state_is_zeros_and_no_bias():
    m = nn.GRUCell(3, 4, bias=False)
    assert m.bias_ih is None and [n for n, _ in m.named_parameters()] == ["weight_ih", "weight_hh"]
    x = R.standard_normal((2, 3))
    z = np.zeros((2, 4))
    want = gru_cell_ref(x, z, m.weight_ih.numpy(), m.weight_hh.numpy(), 0.0, 0.0)
    np.testing.assert_allclose(m(tlgpu.tensor(x.astype(np.float32))).numpy(), want, rtol=1e-5, atol=1e-6)
    lc = nn.LSTMCell(3, 4)
    p = [lc.weight_ih.numpy(), lc.weight_hh.numpy(), lc.bias_ih.numpy(), lc.bias_hh.numpy()]
    h, c = lc(tlgpu.tensor(x.astype(np.float32)))
    wh, wc = lstm_cell_ref(x, z, z, *p)
    np.testing.assert_allclose(h.numpy(), wh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(c.numpy(), wc, rtol=1e-5, atol=1e-6)


def _layer_names(L, bias=True):
    names = []
    for k in range(L):
        names += [f"weight_ih_l{k}", f"weight_hh_l{k}"] + ([f"bias_ih_l{k}", f"bias_hh_l{k}"] if bias else [])
    return names


@pytest.mark.parametrize("layers,batch_first", [(1, False), (2, True)])
def test_gru_sequence_forward_and_gradients(layers, batch_first):
    I, H, B, T = 3, 4, 2, 4
    m = nn.GRU(I, H, num_layers=layers, batch_first=batch_first)
    names = _layer_names(layers)
    assert list(m.state_dict()) == names
    x = R.standard_normal((B, T, I) if batch_first else (T, B, I))
    h0 = R.standard_normal((layers, B, H))
    params = [R.standard_normal(tuple(getattr(m, n).shape)) for n in names]

    def ref(x, h0, *p, which):
        xs = x.transpose(1, 0, 2) if batch_first else x
        out, finals = seq_ref(gru_cell_ref, xs, list(h0), [p[4 * k:4 * k + 4] for k in range(layers)])
        return (out.transpose(1, 0, 2) if batch_first else out) if which == 0 else np.stack(finals)

    for which in (0, 1):
        def run(x, h0, *p):
            _set(m, names, p)
            return m(x, h0)[which]
        out = check(run, lambda *a: ref(*a, which=which), [x, h0] + params)
        assert out.shape == ((B, T, H) if batch_first else (T, B, H)) if which == 0 else (layers, B, H)


def test_lstm_sequence_forward_and_gradients():
    I, H, B, T, layers = 2, 3, 2, 3, 2
    m = nn.LSTM(I, H, num_layers=layers)
    names = _layer_names(layers)
    assert list(m.state_dict()) == names
    x, h0, c0 = R.standard_normal((T, B, I)), R.standard_normal((layers, B, H)), R.standard_normal((layers, B, H))
    params = [R.standard_normal(tuple(getattr(m, n).shape)) for n in names]

    def ref(x, h0, c0, *p, which):
        out, finals = seq_ref(lstm_cell_ref, x, list(zip(h0, c0)), [p[4 * k:4 * k + 4] for k in range(layers)])
        return out if which == 0 else np.stack([f[which - 1] for f in finals])

    for which in (0, 1, 2):
        def run(x, h0, c0, *p):
            _set(m, names, p)
            out, (h_n, c_n) = m(x, (h0, c0))
            return (out, h_n, c_n)[which]
        check(run, lambda *a: ref(*a, which=which), [x, h0, c0] + params)


def test_sequence_unbatched_default_state_init_and_errors():
    tlgpu.manual_seed(2)
    m = nn.LSTM(3, 64, bias=False)
    assert list(m.state_dict()) == ["weight_ih_l0", "weight_hh_l0"]
    k = 1 / math.sqrt(64)
    w = m.weight_hh_l0.numpy()
    assert np.abs(w).max() <= k and w.max() > 0.99 * k and abs(w.std() - k / math.sqrt(3)) < 0.03 * k
    x = R.standard_normal((5, 3))
    out, (h, c) = m(tlgpu.tensor(x.astype(np.float32)))
    assert out.shape == (5, 64) and h.shape == (1, 64) and c.shape == (1, 64)
    z = np.zeros((1, 64))
    want, _ = seq_ref(lstm_cell_ref, x[:, None], [(z, z)], [(m.weight_ih_l0.numpy(), w, 0.0, 0.0)])
    np.testing.assert_allclose(out.numpy(), want[:, 0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(h.numpy()[0], want[-1, 0], rtol=1e-4, atol=1e-5)
    g = nn.GRU(3, 4)
    with pytest.raises(ValueError, match=r"GRU: input must be \(L, N, 3\).*got shape \(5, 2, 4\)"):
        g(tlgpu.zeros(5, 2, 4))
    with pytest.raises(ValueError, match=r"GRU: h_0 must have shape \(1, 2, 4\), got \(2, 4\)"):
        g(tlgpu.zeros(5, 2, 3), tlgpu.zeros(2, 4))
    with pytest.raises(ValueError, match=r"GRUCell: input must be \(batch, 3\)"):
        nn.GRUCell(3, 4)(tlgpu.zeros(2, 5))
    with pytest.raises(NotImplementedError, match="bidirectional"):
        nn.LSTM(3, 4, bidirectional=True)


def test_gru_policy_trains_without_host_waits():
    m, head = nn.GRU(4, 8, batch_first=True), nn.Linear(8, 3)
    opt = tlgpu.optim.Adam(list(m.parameters()) + list(head.parameters()), lr=1e-2)
    x = tlgpu.randn(6, 5, 4)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    out, h = m(x)
    loss = head(out).square().mean()
    loss.backward()
    opt.step()
    assert tlgpu.stream_stats()["waits"] == 0
    assert all(p.grad is not None for p in m.parameters())


def test_torch_parity_and_state_dict_interchange():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    for t_mod, our_cls, kw in [(torch.nn.GRU(3, 5, num_layers=2, batch_first=True), nn.GRU,
                                dict(num_layers=2, batch_first=True)),
                               (torch.nn.LSTM(3, 5, num_layers=2), nn.LSTM, dict(num_layers=2))]:
        ours = our_cls(3, 5, **kw)
        sd = {k: v.detach().numpy() for k, v in t_mod.state_dict().items()}
        assert list(ours.state_dict()) == list(sd)
        ours.load_state_dict(sd)
        x = R.standard_normal((2, 4, 3)).astype(np.float32)
        want, want_state = t_mod(torch.tensor(x))
        got, got_state = ours(tlgpu.tensor(x))
        np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-4, atol=1e-5)
        flat = (lambda s: s if isinstance(s, tuple) else (s,))
        for g, w in zip(flat(got_state), flat(want_state)):
            np.testing.assert_allclose(g.numpy(), w.detach().numpy(), rtol=1e-4, atol=1e-5)
    cell = torch.nn.GRUCell(3, 4)
    ours = nn.GRUCell(3, 4)
    ours.load_state_dict({k: v.detach().numpy() for k, v in cell.state_dict().items()})
    x, h = R.standard_normal((2, 3)).astype(np.float32), R.standard_normal((2, 4)).astype(np.float32)
    np.testing.assert_allclose(ours(tlgpu.tensor(x), tlgpu.tensor(h)).numpy(),
                               cell(torch.tensor(x), torch.tensor(h)).detach().numpy(), rtol=1e-5, atol=1e-6)


# ---- the fused gate ops (ops_rnn.c): values and every gradient against float64 references ----

def gru_gates_ref(gi, gh, h, b_ih=0.0, b_hh=0.0):
    H = h.shape[-1]
    gi, gh = gi + b_ih, gh + b_hh
    r, z = _sig(gi[:, :H] + gh[:, :H]), _sig(gi[:, H:2 * H] + gh[:, H:2 * H])
    n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
    return (1 - z) * n + z * h


def lstm_gates_ref(gates, c, gh=0.0, b_ih=0.0, b_hh=0.0):
    g = gates + gh + b_ih + b_hh
    H = c.shape[-1]
    i, f, gg, o = _sig(g[:, :H]), _sig(g[:, H:2 * H]), np.tanh(g[:, 2 * H:3 * H]), _sig(g[:, 3 * H:])
    c2 = f * c + i * gg
    return o * np.tanh(c2), c2


def _gate_inputs(B, H, G, bias):
    arrays = [2 * R.standard_normal((B, G * H)), 2 * R.standard_normal((B, G * H)), R.standard_normal((B, H))]
    return arrays + ([R.standard_normal(G * H), R.standard_normal(G * H)] if bias else [])


@pytest.mark.parametrize("B,H", [(1, 1), (3, 5), (4, 7), (2, 33)])
@pytest.mark.parametrize("bias", [True, False])
def test_gru_gates_forward_and_gradients(B, H, bias):
    check(tlgpu._C.gru_gates, gru_gates_ref, _gate_inputs(B, H, 3, bias))


def test_gru_gates_read_strided_views():
    """gi transposed (column stride B), gh a column slice of a wider projection, h a row slice: no copies."""
    B, H = 3, 4
    gi_t, gh_w, h_w = R.standard_normal((3 * H, B)), R.standard_normal((B, 3 * H + 3)), R.standard_normal((2 * B, H))
    b = R.standard_normal(3 * H)
    ref = lambda gi_t, gh_w, h_w, b: gru_gates_ref(gi_t.T, gh_w[:, 3:], h_w[::2], 0.0, b)   # noqa: E731
    check(lambda gi_t, gh_w, h_w, b: tlgpu._C.gru_gates(gi_t, gh_w, h_w, None, b), ref, [gi_t, gh_w, h_w, b],
          views=[lambda t: t.T, lambda t: t[:, 3:], lambda t: t[::2], None])


@pytest.mark.parametrize("B,H", [(1, 1), (3, 5), (2, 33)])
@pytest.mark.parametrize("extra", [0, 1, 3])              # gates alone, + gh, + gh and both biases
def test_lstm_gates_forward_and_gradients(B, H, extra):
    a = _gate_inputs(B, H, 4, True)
    arrays = [a[0], a[2]] + [a[1], a[3], a[4]][:extra]
    both = lambda *t: tlgpu.stack(list(tlgpu._C.lstm_gates(*t)), 0)          # noqa: E731
    check(both, lambda *x: np.stack(lstm_gates_ref(*x)), arrays)        # h' and c' each with its own upstream
    for which in (0, 1):                                                # one output unused: zeros for the other
        check(lambda *t: tlgpu._C.lstm_gates(*t)[which], lambda *x: lstm_gates_ref(*x)[which], arrays)


def test_lstm_gates_strided_gates_and_state():
    B, H = 2, 3
    wide, c_t = R.standard_normal((B, 4 * H + 2)), R.standard_normal((H, B))
    check(lambda w, c: tlgpu._C.lstm_gates(w[:, 2:], c.T)[0],
          lambda w, c: lstm_gates_ref(w[:, 2:], c.T)[0], [wide, c_t])


def _enqueued(fn):
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    out = fn()
    return tlgpu.stream_stats()["enqueued"], out


def test_gate_ops_one_kernel_each_way():
    gi, gh, h = (tlgpu.tensor(a.astype(np.float32), requires_grad=True) for a in _gate_inputs(4, 6, 3, False))
    n, out = _enqueued(lambda: tlgpu._C.gru_gates(gi, gh, h))
    assert n == 1 and out.grad_fn == "GruGatesBackward"
    n, _ = _enqueued(lambda: out.backward(tlgpu.randn(4, 6)))
    assert n - 1 == 1 and all(t.grad is not None for t in (gi, gh, h))     # randn is one of them
    gates, c = tlgpu.randn(4, 24), tlgpu.randn(4, 6)
    n, (h2, c2) = _enqueued(lambda: tlgpu._C.lstm_gates(gates, c))
    assert n == 1 and h2.shape == c2.shape == (4, 6)


def test_gate_ops_check_arguments_before_enqueueing():
    gi, gh, h = tlgpu.randn(2, 15), tlgpu.randn(2, 15), tlgpu.randn(2, 5)
    gh14, gates, h_int = tlgpu.randn(2, 14), tlgpu.randn(2, 20), tlgpu.zeros(2, 5, dtype=tlgpu.int32)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    with pytest.raises(ValueError, match=r"gru_gates: gh must have shape \(2, 15\) for h of shape \(2, 5\), "
                                         r"got \(2, 14\)"):
        tlgpu._C.gru_gates(gi, gh14, h)
    with pytest.raises(ValueError, match=r"gru_gates: b_hh must have shape \(15,\) .* got \(2, 15\)"):
        tlgpu._C.gru_gates(gi, gh, h, None, gh)
    with pytest.raises(ValueError, match=r"gru_gates: h must be 2-D \[batch, hidden\], got \(5,\)"):
        tlgpu._C.gru_gates(gi, gh, h[0])
    with pytest.raises(TypeError, match=r"gru_gates: expected a float32 tensor, got int32"):
        tlgpu._C.gru_gates(gi, gh, h_int)
    with pytest.raises(TypeError, match=r"lstm_gates: expected a Tensor or None, got list"):
        tlgpu._C.lstm_gates(gates, h, [1.0])
    with pytest.raises(ValueError, match=r"lstm_gates: gates must have shape \(2, 20\) for c of shape \(2, 5\)"):
        tlgpu._C.lstm_gates(gi, h)
    assert tlgpu.stream_stats()["enqueued"] == 0


@pytest.mark.parametrize("B,H", [(0, 4), (3, 0)])
def test_gate_ops_zero_size_enqueue_nothing(B, H):
    gi, gh, h = tlgpu.zeros(B, 3 * H), tlgpu.zeros(B, 3 * H), tlgpu.zeros(B, H)
    gates, c = tlgpu.zeros(B, 4 * H), tlgpu.zeros(B, H)
    n, out = _enqueued(lambda: (tlgpu._C.gru_gates(gi, gh, h), tlgpu._C.lstm_gates(gates, c)))
    assert n == 0 and out[0].shape == (B, H) and out[1][0].shape == out[1][1].shape == (B, H)


@needs_pool       # counted with pooled buffers: TLGPU_POOL=0 (and sanitizer builds) enqueue more per step
def test_launches_per_step():
    """A GRUCell/LSTMCell step without grad: two products and one gate kernel. A GRU sequence step: the
    h W_hh^T product and the gates forward (writing the output in place); backward the gates and dh W_hh."""
    cell, lcell, x, h = nn.GRUCell(32, 16), nn.LSTMCell(32, 16), tlgpu.randn(8, 32), tlgpu.randn(8, 16)
    for m, state in ((cell, h), (lcell, (h, h))):
        with tlgpu.no_grad():
            m(x, state)
            assert _enqueued(lambda: m(x, state))[0] <= 3

    def per_step(make, grad):
        counts = []
        for T in (4, 8):
            m, s = make(), tlgpu.randn(T, 8, 32)

            def run():
                out, _ = m(s)
                if grad:
                    out.square().mean().backward()
            run()
            run()                   # the first backward makes the .grads, the second accumulates as later ones do
            counts.append(_enqueued(run)[0])
        return (counts[1] - counts[0]) / 4
    with tlgpu.no_grad():
        assert per_step(lambda: nn.GRU(32, 16), False) == 2
    assert per_step(lambda: nn.GRU(32, 16), True) == 4


# ---- the whole-sequence ops (ops_rnn_seq.c): one node per layer, two launches per step each way ----

def gru_seq_ref(gi, h0, w, b=0.0):
    h, outs = h0, []
    for t in range(gi.shape[0]):
        h = gru_gates_ref(gi[t], h @ w.T, h, 0.0, b)
        outs.append(h)
    return np.stack(outs)


def lstm_seq_ref(gi, h0, c0, w, b=0.0):
    """y [T + 1, B, H]: the outputs, then the last cell state."""
    h, c, outs = h0, c0, []
    for t in range(gi.shape[0]):
        h, c = lstm_gates_ref(gi[t], c, h @ w.T, 0.0, b)
        outs.append(h)
    return np.stack(outs + [c])


def _seq_inputs(T, B, H, G, bias, states=1):
    arrays = [2 * R.standard_normal((T, B, G * H))] + [R.standard_normal((B, H)) for _ in range(states)]
    arrays.append(R.standard_normal((G * H, H)) / math.sqrt(H))
    return arrays + ([R.standard_normal(G * H)] if bias else [])


SEQ_SIZES = [(1, 1, 1), (1, 3, 4), (3, 1, 5), (4, 3, 7), (2, 2, 33)]


@pytest.mark.parametrize("T,B,H", SEQ_SIZES)
@pytest.mark.parametrize("bias", [True, False])
def test_gru_sequence_op_forward_and_every_gradient(T, B, H, bias):
    out = check(tlgpu._C.gru_sequence, gru_seq_ref, _seq_inputs(T, B, H, 3, bias))
    assert out.shape == (T, B, H) and out.grad_fn == "GruSequenceBackward"


@pytest.mark.parametrize("T,B,H", SEQ_SIZES)
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_sequence_op_forward_and_every_gradient(T, B, H, bias):
    y = check(tlgpu._C.lstm_sequence, lstm_seq_ref, _seq_inputs(T, B, H, 4, bias, states=2))
    assert y.shape == (T + 1, B, H) and y.grad_fn == "LstmSequenceBackward"


@pytest.mark.parametrize("state", ["constant", "none", "mixed"])
def test_sequence_ops_initial_state_without_grad(state):
    """h0 (and c0) given without requires_grad, or None (zeros; step 0 then runs no product): the other inputs'
    gradients are unchanged. mixed: the LSTM's h0 None and c0 given."""
    T, B, H = 3, 2, 5
    gi, h0, w, b = _seq_inputs(T, B, H, 3, True)
    h0 = np.zeros_like(h0) if state == "none" else h0
    h0_t = None if state == "none" else tlgpu.tensor(h0.astype(np.float32))
    check(lambda gi, w, b: tlgpu._C.gru_sequence(gi, h0_t, w, b), lambda gi, w, b: gru_seq_ref(gi, h0, w, b),
          [gi, w, b])
    gi, h0, c0, w = _seq_inputs(T, B, H, 4, False, states=2)
    h0 = h0 if state == "constant" else np.zeros_like(h0)
    c0 = np.zeros_like(c0) if state == "none" else c0
    wrap = lambda a: None if not a.any() else tlgpu.tensor(a.astype(np.float32))     # noqa: E731
    h0_t, c0_t = wrap(h0), wrap(c0)
    check(lambda gi, w: tlgpu._C.lstm_sequence(gi, h0_t, c0_t, w), lambda gi, w: lstm_seq_ref(gi, h0, c0, w),
          [gi, w])


@pytest.mark.parametrize("T", [1, 3])
def test_sequence_ops_none_state_gradients_of_the_rest(T):
    """h0 None and c0 a leaf (and the reverse): every gradient, including T == 1 (W_hh's is then zero for the
    GRU: no product ran)."""
    B, H = 2, 3
    gi, c0, w, b = _seq_inputs(T, B, H, 4, True)
    z = np.zeros((B, H))
    check(lambda gi, c0, w, b: tlgpu._C.lstm_sequence(gi, None, c0, w, b),
          lambda gi, c0, w, b: lstm_seq_ref(gi, z, c0, w, b), [gi, c0, w, b])
    check(lambda gi, h0, w, b: tlgpu._C.lstm_sequence(gi, h0, None, w, b),
          lambda gi, h0, w, b: lstm_seq_ref(gi, h0, z, w, b), [gi, c0, w, b])
    gi, w, b = _seq_inputs(T, B, H, 3, True, states=0)
    check(lambda gi, w, b: tlgpu._C.gru_sequence(gi, None, w, b), lambda gi, w, b: gru_seq_ref(gi, z, w, b),
          [gi, w, b])


def test_sequence_ops_read_strided_inputs():
    """gi_all a transposed (batch-first) view, h0 a row slice, b_hh a strided slice: read in place."""
    T, B, H = 3, 2, 4
    gi, h0, w, b = _seq_inputs(T, B, H, 3, True)
    arrays = [np.ascontiguousarray(gi.transpose(1, 0, 2)), np.repeat(h0, 2, axis=0), w, np.repeat(b, 2)]
    check(lambda gi, h0, w, b: tlgpu._C.gru_sequence(gi, h0, w, b),
          lambda gi, h0, w, b: gru_seq_ref(gi.transpose(1, 0, 2), h0[::2], w, b[::2]), arrays,
          views=[lambda t: t.transpose(0, 1), lambda t: t[::2], None, lambda t: t[::2]])


@pytest.mark.parametrize("op,G,states", [(tlgpu._C.gru_sequence, 3, 1), (tlgpu._C.lstm_sequence, 4, 2)])
def test_sequence_ops_deterministic(op, G, states):
    ins = [tlgpu.tensor(a.astype(np.float32), requires_grad=True) for a in _seq_inputs(6, 5, 9, G, True, states)]
    runs = []
    for _ in range(2):
        for t in ins:
            t.grad = None
        out = op(*ins)
        out.square().mean().backward()
        runs.append([out.numpy()] + [t.grad.numpy() for t in ins])
    for a, b in zip(*runs):
        assert np.array_equal(a, b)


def test_sequence_modules_zero_steps_return_the_initial_state():
    for cls in (nn.GRU, nn.LSTM):
        m, h0 = cls(3, 4, num_layers=2), tlgpu.randn(2, 2, 4)
        out, st = m(tlgpu.zeros(0, 2, 3), h0 if cls is nn.GRU else (h0, h0))
        assert out.shape == (0, 2, 4)
        for s in st if isinstance(st, tuple) else (st,):
            np.testing.assert_array_equal(s.numpy(), h0.numpy())
        out, st = m(tlgpu.zeros(0, 2, 3))
        for s in st if isinstance(st, tuple) else (st,):
            assert s.shape == (2, 2, 4) and not s.numpy().any()


def test_sequence_ops_check_arguments_before_enqueueing():
    gi, h0, w, b = tlgpu.randn(3, 2, 12), tlgpu.randn(2, 4), tlgpu.randn(12, 4), tlgpu.randn(12)
    w3, h_int, lgi, lw = tlgpu.zeros(12, 3), tlgpu.zeros(2, 4, dtype=tlgpu.int32), tlgpu.randn(3, 2, 16), tlgpu.randn(16, 4)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    with pytest.raises(ValueError, match=r"gru_sequence: w_hh must be 2-D \[3 \* hidden, hidden\], got \(12, 3\)"):
        tlgpu._C.gru_sequence(gi, h0, w3)
    with pytest.raises(ValueError, match=r"gru_sequence: gi_all must have shape \(T, batch, 12\) for w_hh of shape "
                                         r"\(12, 4\), got \(2, 12\)"):
        tlgpu._C.gru_sequence(gi[0], h0, w)
    with pytest.raises(ValueError, match=r"gru_sequence: h0 must have shape \(2, 4\) for gi_all of shape "
                                         r"\(3, 2, 12\), got \(4,\)"):
        tlgpu._C.gru_sequence(gi, h0[0], w)
    with pytest.raises(ValueError, match=r"gru_sequence: b_hh must have shape \(12,\) .* got \(2, 12\)"):
        tlgpu._C.gru_sequence(gi, h0, w, gi[0])
    with pytest.raises(ValueError, match=r"gru_sequence: gi_all must have at least one time step"):
        tlgpu._C.gru_sequence(gi[:0], h0, w)
    with pytest.raises(TypeError, match=r"gru_sequence: expected a float32 tensor, got int32"):
        tlgpu._C.gru_sequence(gi, h_int, w)
    with pytest.raises(TypeError, match=r"lstm_sequence: c0 must be a Tensor or None, got list"):
        tlgpu._C.lstm_sequence(lgi, h0, [1.0], lw)
    with pytest.raises(ValueError, match=r"lstm_sequence: w_hh must be 2-D \[4 \* hidden, hidden\]"):
        tlgpu._C.lstm_sequence(gi, h0, h0, w)
    assert tlgpu.stream_stats()["enqueued"] == 0


@pytest.mark.parametrize("B,H", [(0, 4), (3, 0)])
def test_sequence_ops_zero_size(B, H):
    gi, w = tlgpu.zeros(2, B, 3 * H, requires_grad=True), tlgpu.randn(3 * H, H, requires_grad=True)
    lgi, lw = tlgpu.zeros(2, B, 4 * H), tlgpu.randn(4 * H, H)
    n, (out, y) = _enqueued(lambda: (tlgpu._C.gru_sequence(gi, None, w), tlgpu._C.lstm_sequence(lgi, None, None, lw)))
    assert n == 0 and out.shape == (2, B, H) and y.shape == (3, B, H)
    out.sum().backward()
    assert gi.grad.shape == gi.shape and np.all(w.grad.numpy() == 0) and w.grad.shape == w.shape


def test_sequence_op_output_written_in_place_refuses_backward():
    gi, w = tlgpu.randn(3, 2, 12, requires_grad=True), tlgpu.randn(12, 4, requires_grad=True)
    out = tlgpu._C.gru_sequence(gi, None, w)
    with tlgpu.no_grad():
        out.add_(1.0)
    with pytest.raises(RuntimeError, match="GruSequenceBackward: a tensor it saved was modified in place"):
        out.sum().backward()


@needs_pool       # counted with pooled buffers: TLGPU_POOL=0 (and sanitizer builds) enqueue more
def test_sequence_launch_counts():
    """nn.GRU / nn.LSTM forward + out.square().mean() + backward: 2 launches per step forward (h W_hh^T, the
    gates; none at step 0 for h0 = None) and 2 backward (the gates, dh through W_hh; none at step 0), plus a fixed
    few per sequence: the input projection and its backward (with its bias as launches of their own on GPUs,
    and on PoCL below 9 rows), W_hh's and b_hh's gradients, the loss (3 forward, 5 backward), h_n's copy (and
    the LSTM's c_n's), and for the LSTM the y[:T] view's backward (zeros and a copy)."""
    def count(make, T):
        m, x = make(), tlgpu.randn(T, 8, 32)

        def run():
            m.zero_grad()
            out, _ = m(x)
            out.square().mean().backward()
        run()
        return _enqueued(run)[0]
    for make in (lambda: nn.GRU(32, 16), lambda: nn.LSTM(32, 16)):
        counts = {T: count(make, T) for T in (1, 4, 12)}
        assert counts[12] - counts[4] == 4 * 8, counts          # exactly 4 per step
        fixed = 18 if isinstance(make(), nn.LSTM) else 15       # PoCL's BLAS path: 15 and 12 (T > 1)
        assert all(n <= 4 * T + fixed for T, n in counts.items()), counts
    with tlgpu.no_grad():
        m, x = nn.GRU(32, 16), tlgpu.randn(12, 8, 32)
        m(x)
        assert _enqueued(lambda: m(x))[0] <= 2 * 12 + 3     # + the input projection (+ its bias), h_n's copy
