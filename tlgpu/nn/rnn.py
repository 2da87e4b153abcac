"""tlgpu.nn.rnn: GRUCell, LSTMCell, GRU and LSTM with torch's parameter names, gate order, shapes and init
(every weight and bias U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))).

GRU gates (r, z, n): r = sigmoid(W_ir x + b_ir + W_hr h + b_hr), z likewise, n = tanh(W_in x + b_in +
r * (W_hn h + b_hn)), h' = (1 - z) * n + z * h. LSTM gates (i, f, g, o): c' = f * c + i * g,
h' = o * tanh(c'). A cell step is the weight products (linear without bias: one GEMM each) and one fused gate
op (_C.gru_gates / _C.lstm_gates, ops_rnn.c) that adds the biases, applies the gates and has its own one-kernel
backward. The sequence modules project the whole input sequence through W_ih (+ b_ih) in one product per
layer, then run the layer as one op (_C.gru_sequence / _C.lstm_sequence, ops_rnn_seq.c; one autograd node):
each time step costs two launches forward (h W_hh^T and the gates) and two backward.

float16/bfloat16 inputs and weights: the gate and sequence ops compute in float32 and return the operands'
dtype (the zero initial states take the input's dtype); under tlgpu.autocast the cells and layers run in the
autocast dtype, as torch.autocast's rnn/gru/lstm rule (docs/precision.md).
"""
import math

from .. import _C
from ..amp import get_autocast_dtype
from . import Module, _uniform, functional


class _CellBase(Module):
    _gates = 1

    def __init__(self, input_size, hidden_size, bias=True):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        k = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
        G = self._gates * hidden_size
        self.weight_ih = _uniform((G, input_size), k)
        self.weight_hh = _uniform((G, hidden_size), k)
        self.bias_ih = _uniform((G,), k) if bias else None
        self.bias_hh = _uniform((G,), k) if bias else None

    def _check_input(self, x):
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(f"{type(self).__name__}: input must be (batch, {self.input_size}) or "
                             f"({self.input_size},), got shape {x.shape}")
        return x.ndim == 2

    def _state(self, h, batch, batched, what, dtype):
        if h is None:
            return _C.zeros(batch, self.hidden_size, dtype=dtype)
        want = (batch, self.hidden_size) if batched else (self.hidden_size,)
        if h.shape != want:
            raise ValueError(f"{type(self).__name__}: {what} must have shape {want}, got {h.shape}")
        return h if batched else h.unsqueeze(0)

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class GRUCell(_CellBase):
    """h' = GRUCell(x, h): x (batch, input_size) or (input_size,), h like x with hidden_size (zeros if None)."""
    _gates = 3

    def forward(self, input, hx=None):
        batched = self._check_input(input)
        x = input if batched else input.unsqueeze(0)
        h = self._state(hx, x.shape[0], batched, "hx", x.dtype)
        h2 = _C.gru_gates(functional.linear(x, self.weight_ih), functional.linear(h, self.weight_hh), h,
                          self.bias_ih, self.bias_hh)
        return h2 if batched else h2.squeeze(0)


class LSTMCell(_CellBase):
    """(h', c') = LSTMCell(x, (h, c)); the state defaults to zeros."""
    _gates = 4

    def forward(self, input, hx=None):
        batched = self._check_input(input)
        x = input if batched else input.unsqueeze(0)
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError("LSTMCell: hx must be a tuple (h, c) or None")
        h = self._state(None if hx is None else hx[0], x.shape[0], batched, "h", x.dtype)
        c = self._state(None if hx is None else hx[1], x.shape[0], batched, "c", x.dtype)
        h2, c2 = _C.lstm_gates(functional.linear(x, self.weight_ih), c, functional.linear(h, self.weight_hh),
                               self.bias_ih, self.bias_hh)
        return (h2, c2) if batched else (h2.squeeze(0), c2.squeeze(0))


class _RNNBase(Module):
    _gates = 1

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
                 bidirectional=False, proj_size=0):
        super().__init__()
        name = type(self).__name__
        if bidirectional or proj_size:
            raise NotImplementedError(f"{name}: bidirectional and proj_size are not supported")
        if num_layers < 1:
            raise ValueError(f"{name}: num_layers must be >= 1, got {num_layers}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"{name}: dropout must be in [0, 1), got {dropout}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, dropout
        self.bidirectional, self.proj_size = False, 0
        k = 1.0 / math.sqrt(hidden_size) if hidden_size > 0 else 0.0
        G = self._gates * hidden_size
        for layer in range(num_layers):         # torch's names and order: weight_ih_l0, weight_hh_l0, bias_...
            n_in = input_size if layer == 0 else hidden_size
            setattr(self, f"weight_ih_l{layer}", _uniform((G, n_in), k))
            setattr(self, f"weight_hh_l{layer}", _uniform((G, hidden_size), k))
            if bias:
                setattr(self, f"bias_ih_l{layer}", _uniform((G,), k))
                setattr(self, f"bias_hh_l{layer}", _uniform((G,), k))

    def _layer_params(self, layer):
        b_ih = getattr(self, f"bias_ih_l{layer}") if self.bias else None
        b_hh = getattr(self, f"bias_hh_l{layer}") if self.bias else None
        return getattr(self, f"weight_ih_l{layer}"), getattr(self, f"weight_hh_l{layer}"), b_ih, b_hh

    def _prepare(self, input):
        """input as (T, B, input_size) plus whether it was batched."""
        name = type(self).__name__
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ValueError(f"{name}: input must be (L, N, {self.input_size}) ((N, L, {self.input_size}) with "
                             f"batch_first) or (L, {self.input_size}), got shape {input.shape}")
        if input.ndim == 2:
            return input.unsqueeze(1), False
        return (input.transpose(0, 1) if self.batch_first else input), True

    def _initial(self, h, B, batched, what):
        """Per layer, the initial state (B, H), or None for zeros (the sequence ops fill them)."""
        want = (self.num_layers, B, self.hidden_size) if batched else (self.num_layers, self.hidden_size)
        if h is None:
            return [None] * self.num_layers
        if h.shape != want:
            raise ValueError(f"{type(self).__name__}: {what} must have shape {want}, got {h.shape}")
        return [h[k] if batched else h[k].unsqueeze(0) for k in range(self.num_layers)]

    def _run(self, x, states):
        """Runs every layer over x (T, B, F); returns the last layer's outputs (T, B, H) and the final states.
        A layer is one input product for the whole sequence and one sequence op (_C.gru_sequence /
        _C.lstm_sequence); T == 0 returns the initial states."""
        T, B = x.shape[0], x.shape[1]
        finals = []
        for layer in range(self.num_layers):
            w_ih, w_hh, b_ih, b_hh = self._layer_params(layer)
            if T == 0:                               # the dtype the ops would give: autocast's, or x's and w's
                dt = get_autocast_dtype() or (x.dtype if x.dtype == w_ih.dtype else "float32")
                zero = lambda s: _C.zeros(B, self.hidden_size, dtype=dt) if s is None else s     # noqa: E731
                s = states[layer]
                finals.append(tuple(map(zero, s)) if isinstance(s, tuple) else zero(s))
                x = _C.zeros(0, B, self.hidden_size, dtype=dt)
                continue
            gi_all = functional.linear(x.reshape(T * B, x.shape[2]), w_ih, b_ih).reshape(T, B, w_ih.shape[0])
            x, final = self._sequence(gi_all, states[layer], w_hh, b_hh)
            finals.append(final)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = functional.dropout(x, self.dropout, True)
        return x, finals

    def _finish(self, out, batched):
        if not batched:
            return out[:, 0]
        return out.transpose(0, 1) if self.batch_first else out

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.batch_first:
            s += ", batch_first=True"
        return s + (f", dropout={self.dropout}" if self.dropout else "")


class GRU(_RNNBase):
    """output, h_n = GRU(input, h_0=None): input (L, N, input_size) ((N, L, ...) with batch_first) or
    (L, input_size); h_0 and h_n (num_layers, N, hidden_size) (or (num_layers, hidden_size))."""
    _gates = 3

    @staticmethod
    def _sequence(gi_all, h0, w_hh, b_hh):
        out = _C.gru_sequence(gi_all, h0, w_hh, b_hh)
        return out, out[out.shape[0] - 1]

    def forward(self, input, hx=None):
        x, batched = self._prepare(input)
        out, finals = self._run(x, self._initial(hx, x.shape[1], batched, "h_0"))
        h_n = _C.stack(finals, 0)       # a copy, as torch's: never a view of output
        return self._finish(out, batched), h_n if batched else h_n[:, 0]


class LSTM(_RNNBase):
    """output, (h_n, c_n) = LSTM(input, (h_0, c_0)=None), shapes as GRU's."""
    _gates = 4

    @staticmethod
    def _sequence(gi_all, state, w_hh, b_hh):
        h0, c0 = state
        T = gi_all.shape[0]
        y = _C.lstm_sequence(gi_all, h0, c0, w_hh, b_hh)      # y[:T] the outputs, y[T] the last cell state
        return y[:T], (y[T - 1], y[T])

    def forward(self, input, hx=None):
        x, batched = self._prepare(input)
        if hx is not None and (not isinstance(hx, (tuple, list)) or len(hx) != 2):
            raise TypeError("LSTM: hx must be a tuple (h_0, c_0) or None")
        B = x.shape[1]
        hs = self._initial(None if hx is None else hx[0], B, batched, "h_0")
        cs = self._initial(None if hx is None else hx[1], B, batched, "c_0")
        out, finals = self._run(x, list(zip(hs, cs)))
        h_n, c_n = _C.stack([f[0] for f in finals], 0), _C.stack([f[1] for f in finals], 0)
        if not batched:
            h_n, c_n = h_n[:, 0], c_n[:, 0]
        return self._finish(out, batched), (h_n, c_n)
