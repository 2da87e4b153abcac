"""Every public op given float16 (and bfloat16) input either works, matching the float32 op on the same values
within half precision, or raises TypeError naming the op and the dtype: never reads 2-byte data as 4-byte.
The float32 reference runs on the inputs widened exactly, so the only difference allowed is the result's
rounding to the half dtype (and float32 accumulation order)."""
import ml_dtypes
import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F

BF16 = np.dtype(ml_dtypes.bfloat16)
RTOL = {np.dtype(np.float16): 2e-3, BF16: 1.6e-2}


def x2(s=0):
    return np.random.default_rng(10 + s).standard_normal((4, 6)).astype(np.float32)


def pos(s=0):
    return np.abs(x2(s)) + 0.5


IDX = np.array([2, 0, 3, 1], np.int32)
# (name, function of the float inputs, the float inputs). Integer and index arguments stay int32.
OPS = [
    ("add", lambda a, b: a + b, [x2(0), x2(1)]), ("sub", lambda a, b: a - b, [x2(0), x2(1)]),
    ("mul", lambda a, b: a * b, [x2(0), x2(1)]), ("div", lambda a, b: a / b, [x2(0), pos(1)]),
    ("pow", lambda a: a ** 2, [x2()]), ("neg", lambda a: -a, [x2()]), ("exp", lambda a: a.exp(), [x2()]),
    ("log", lambda a: a.log(), [pos()]), ("sqrt", lambda a: a.sqrt(), [pos()]), ("tanh", lambda a: a.tanh(), [x2()]),
    ("sigmoid", lambda a: a.sigmoid(), [x2()]), ("relu", lambda a: a.relu(), [x2()]), ("gelu", lambda a: a.gelu(), [x2()]),
    ("silu", lambda a: a.silu(), [x2()]), ("abs", lambda a: a.abs(), [x2()]), ("clamp", lambda a: a.clamp(-0.5, 0.5), [x2()]),
    ("maximum", lambda a, b: tlgpu.maximum(a, b), [x2(0), x2(1)]), ("where", lambda a, b: tlgpu.where(a > 0, a, b), [x2(0), x2(1)]),
    ("lt", lambda a, b: a < b, [x2(0), x2(1)]), ("scalar", lambda a: 2.5 * a - 1, [x2()]),
    ("leaky_relu", lambda a: a.leaky_relu(0.1), [x2()]), ("round", lambda a: (a * 3).round(), [x2()]),
    ("sum", lambda a: a.sum(), [x2()]), ("sum_axis", lambda a: a.sum(axis=1), [x2()]), ("mean", lambda a: a.mean(0), [x2()]),
    ("max", lambda a: a.max(axis=1), [x2()]), ("min", lambda a: a.min(), [x2()]), ("argmax", lambda a: a.argmax(axis=1), [x2()]),
    ("argmin", lambda a: a.argmin(axis=0), [x2()]), ("softmax", lambda a: a.softmax(axis=1), [x2()]),
    ("log_softmax", lambda a: a.log_softmax(axis=-1), [x2()]), ("logsumexp", lambda a: a.logsumexp(axis=1), [x2()]),
    ("prod", lambda a: a.prod(axis=1), [x2()]), ("var", lambda a: a.var(axis=1), [x2()]), ("std", lambda a: a.std(), [x2()]),
    ("norm", lambda a: a.norm(), [x2()]), ("cumsum", lambda a: a.cumsum(1), [x2()]),
    ("cross_entropy", lambda a: F.cross_entropy(a, tlgpu.tensor(IDX)), [x2()]),
    ("mse_loss", lambda a, b: F.mse_loss(a, b), [x2(0), x2(1)]), ("l1_loss", lambda a, b: F.l1_loss(a, b), [x2(0), x2(1)]),
    ("huber_loss", lambda a, b: F.huber_loss(a, b), [x2(0), x2(1)]),
    ("reshape", lambda a: a.reshape(3, 8), [x2()]), ("transpose", lambda a: a.T.contiguous(), [x2()]),
    ("cat", lambda a, b: tlgpu.cat([a, b], 1), [x2(0), x2(1)]), ("stack", lambda a, b: tlgpu.stack([a, b]), [x2(0), x2(1)]),
    ("split", lambda a: a.split(2, 1)[1], [x2()]), ("repeat", lambda a: a.repeat(2, 1), [x2()]),
    ("flatten", lambda a: a.flatten(), [x2()]), ("expand", lambda a: a[:1].expand(3, 6), [x2()]),
    ("getitem_int", lambda a: a[tlgpu.tensor(IDX[:2])], [x2()]), ("getitem_mask", lambda a: a[a > 0], [x2()]),
    ("index_select", lambda a: a.index_select(0, tlgpu.tensor(IDX)), [x2()]),
    ("gather", lambda a: a.gather(1, tlgpu.tensor(np.array([[0], [5], [2], [1]], np.int32))), [x2()]),
    ("masked_fill", lambda a: a.masked_fill(a > 0, 0.5), [x2()]),
    ("index_add", lambda a, b: a.index_add(0, tlgpu.tensor(IDX), b), [x2(0), x2(1)]),
    ("setitem", lambda a, b: _setitem(a, b), [x2(0), x2(1)]),
    ("sort", lambda a: a.sort(1)[0], [x2()]), ("topk", lambda a: a.topk(2, 1)[0], [x2()]), ("argsort", lambda a: a.argsort(1), [x2()]),
    ("tril", lambda a: a.tril(), [x2()]), ("triu", lambda a: a.triu(1), [x2()]),
    ("matmul", lambda a, b: a @ b.T, [x2(0), x2(1)]), ("dot", lambda a, b: a[0].dot(b[0]), [x2(0), x2(1)]),
    ("outer", lambda a, b: a[0].outer(b[0]), [x2(0), x2(1)]),
    ("linear", lambda a, w, b: F.linear(a, w, b), [x2(0), x2(1)[:3], x2(2)[0, :3]]),
    ("addmm", lambda c, a, b: tlgpu.addmm(c, a, b.T), [x2(0)[:, :4], x2(1), x2(2)[:4]]),
    ("conv2d", lambda a, w: F.conv2d(a.reshape(1, 1, 4, 6), w.reshape(2, 1, 2, 2)), [x2(0), x2(1)[:2, :4]]),
    ("max_pool2d", lambda a: F.max_pool2d(a.reshape(1, 1, 4, 6), 2), [x2()]),
    ("avg_pool2d", lambda a: F.avg_pool2d(a.reshape(1, 1, 4, 6), 2), [x2()]),
    ("rms_norm", lambda a, w: F.rms_norm(a, w), [x2(0), x2(1)[0]]),
    ("layer_norm", lambda a: F.layer_norm(a, (6,)), [x2()]),
    ("rope", lambda a: F.rope(a.reshape(4, 1, 6), tlgpu.tensor(np.arange(4, dtype=np.int32))), [x2()]),
    ("silu_mul", lambda a, b: F.silu_mul(a, b), [x2(0), x2(1)]),
    ("embedding", lambda w: F.embedding(tlgpu.tensor(IDX), w), [x2()]),
    ("softmax_rows", lambda a: tlgpu.softmax_rows(a), [x2()]),
    ("attention", lambda q, k: tlgpu.attention(q[:2], k.reshape(1, 4, 6), k.reshape(1, 4, 6), 3), [x2(0), x2(1)]),
    ("kv_write", lambda c, x: tlgpu.kv_write(c.reshape(1, 4, 6).clone(), x[:2].reshape(1, 2, 6), 1), [x2(0), x2(1)]),
    ("rope_kv_write", lambda x, c: tlgpu.rope_kv_write(x.clone(), c.reshape(2, 2, 6).clone(), 1, 2), [x2(0), x2(1)]),
    ("get_rows", lambda w: tlgpu.get_rows(w, tlgpu.tensor(IDX)), [x2()]),
    ("gru_gates", lambda a, b, h: tlgpu.gru_gates(a, b, h), [x2(0), x2(1), x2(2)[:, :2]]),
    ("lstm_gates", lambda a, c: tlgpu.lstm_gates(a[:, :4], c[:, :1])[0], [x2(0), x2(1)]),
    ("gru_sequence", lambda a, w: tlgpu._C.gru_sequence(a.reshape(2, 2, 6), None, w.T[:, :2]), [x2(0), x2(1)]),
    ("lstm_sequence", lambda a, h, w: tlgpu._C.lstm_sequence(a.reshape(3, 1, 8), h[:1, :2], None,
                                                            w.reshape(8, 3)[:, :2]), [x2(0), x2(1), x2(2)]),
    ("dropout_eval", lambda a: F.dropout(a, 0.5, training=False), [x2()]),
    ("fill_", lambda a: a.clone().fill_(0.25), [x2()]), ("zero_", lambda a: a.clone().zero_(), [x2()]),
    ("copy_", lambda a, b: a.clone().copy_(b), [x2(0), x2(1)]),
    ("add_", lambda a, b: a.clone().add_(b), [x2(0), x2(1)]),
    ("clamp_", lambda a: a.clone().clamp_(-0.1, 0.1), [x2()]),
    ("uniform_", lambda a: a.clone().uniform_(), [x2()]), ("normal_", lambda a: a.clone().normal_(), [x2()]),
    ("multinomial", lambda a: a.softmax(axis=1).multinomial(1), [x2()]),
]
RANDOM = {"uniform_", "normal_", "multinomial"}     # compared by dtype and shape only
MASKS = {"lt"}                                      # comparisons give float32 masks whatever the input


def _setitem(a, b):
    a = a.clone()
    a[1:3] = b[:2]
    return a


def run(fn, arrays, dt):
    return fn(*[tlgpu.tensor(a.astype(dt)) for a in arrays])


def upload(arrays, dt):
    ts = [tlgpu.tensor(a.astype(dt)) for a in arrays]
    assert all(t.dtype == dt for t in ts)
    return ts


@pytest.mark.parametrize("dt", [np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("name,fn,arrays", OPS, ids=[o[0] for o in OPS])
def test_op_works_in_half_or_raises_type_error(name, fn, arrays, dt):
    arrays = [a.astype(dt).astype(np.float32) for a in arrays]     # the same values in both runs
    ins = upload(arrays, dt)
    try:
        got = fn(*ins)
    except TypeError as e:
        msg = str(e)
        assert str(dt) in msg, f"{name}: the TypeError must name the dtype: {msg}"
        return
    want = run(fn, arrays, np.float32)
    assert got.shape == want.shape, name
    if name in RANDOM:
        return
    w = want.numpy()
    if w.dtype == np.float32:
        assert got.dtype == (np.float32 if name in MASKS else dt), f"{name}: {dt} input gives {got.dtype}"
        np.testing.assert_allclose(got.numpy().astype(np.float32), w, rtol=RTOL[dt], atol=RTOL[dt], err_msg=name)
    else:
        np.testing.assert_array_equal(got.numpy(), w, err_msg=name)


NO_GRAD = {"lt", "argmax", "argmin", "argsort", "round", "fill_", "zero_", "multinomial", "uniform_", "normal_",
           "getitem_mask",
           "rope", "softmax_rows", "attention", "kv_write", "rope_kv_write", "get_rows"}   # inference ops: no backward


@pytest.mark.parametrize("dt", [np.dtype(np.float16), BF16], ids=str)
@pytest.mark.parametrize("name,fn,arrays", OPS, ids=[o[0] for o in OPS])
def test_gradients_in_half_match_float32(name, fn, arrays, dt):
    """Where an op works on half inputs, its gradients do too: each input's .grad has the input's dtype and
    matches the float32 gradient within half precision (upstream gradient: a fixed random tensor)."""
    if name in NO_GRAD:
        return
    arrays = [a.astype(dt).astype(np.float32) for a in arrays]
    ins = [tlgpu.tensor(a.astype(dt), requires_grad=True) for a in arrays]
    try:
        out = fn(*ins)
    except TypeError:
        return                                      # refused forward: test_op_works_in_half_or_raises_type_error
    ref_ins = [tlgpu.tensor(a, requires_grad=True) for a in arrays]
    ref = fn(*ref_ins)
    if not ref.requires_grad:
        return
    w = np.random.default_rng(3).standard_normal(ref.shape).astype(np.float32)
    (out * tlgpu.tensor(w.astype(dt))).sum().backward()
    (ref * tlgpu.tensor(w)).sum().backward()
    tol = 4 * RTOL[dt]
    for t, r in zip(ins, ref_ins):
        if r.grad is None:
            continue
        assert t.grad is not None and t.grad.dtype == dt, (name, None if t.grad is None else t.grad.dtype)
        np.testing.assert_allclose(t.grad.numpy().astype(np.float32), r.grad.numpy(), rtol=tol,
                                   atol=tol * max(1.0, float(np.abs(r.grad.numpy()).max())), err_msg=name)
