"""Inference ops (rms_norm, rope, softmax_rows, silu_mul, kv_write, attention, get_rows, mul_mv) against
numpy float64 references on random inputs, odd sizes and views; the tiny decoder's first-step logits
against a numpy float64 implementation; TLGPU_FAST_MATH=1 in a subprocess. Tolerances: 1e-5 relative
(2e-4 for rope at large positions) in the default build, 1e-3 under fast math."""
import os
import sys

import numpy as np
import pytest

import tlgpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))


def T(x, dtype=np.float32):
    return tlgpu.tensor(np.asarray(x, dtype=dtype))


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(got, ref, rtol=1e-5, atol=1e-5):
    got = got.numpy() if hasattr(got, "numpy") else got
    assert got.shape == np.shape(ref)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=atol)


def ref_rms(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * (1.0 if w is None else w)


@pytest.mark.parametrize("rows,d", [(1, 1), (3, 7), (2, 33), (5, 1025)])
def test_rms_norm(rng, rows, d):
    x, w = randn(rng, rows, d), randn(rng, d)
    close(tlgpu.rms_norm(T(x), T(w), eps=1e-5), ref_rms(x, w, 1e-5))
    close(tlgpu.rms_norm(T(x)), ref_rms(x, None, 1e-6))


def test_rms_norm_view_and_errors(rng):
    x, w = randn(rng, 9, 6), randn(rng, 9)
    close(tlgpu.rms_norm(T(x).T, T(w)), ref_rms(x.T, w, 1e-6))     # non-contiguous input
    with pytest.raises(ValueError, match=r"rms_norm.*\(9,\)"):
        tlgpu.rms_norm(T(x), T(w))
    with pytest.raises(TypeError):
        tlgpu.rms_norm(x)


def ref_rope(x, pos, theta, interleaved):
    x = x.astype(np.float64)
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2) / d)
    ang = np.asarray(pos, np.float64)[:, None] * inv[None, :]            # (T, D/2)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : d // 2], x[..., d // 2:]
    ra, rb = a * c - b * s, a * s + b * c
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., : d // 2], out[..., d // 2:] = ra, rb
    return out


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("t,h,d", [(1, 1, 2), (3, 5, 6), (7, 2, 64)])
def test_rope(rng, t, h, d, interleaved):
    x = randn(rng, t, h, d)
    pos = rng.integers(0, 50, t).astype(np.int32)
    ref = ref_rope(x, pos, 10000.0, interleaved)
    close(tlgpu.rope(T(x), T(pos, np.int32), interleaved=interleaved), ref, 1e-4, 1e-4)
    close(tlgpu.rope(T(x), pos.tolist(), interleaved=interleaved), ref, 1e-4, 1e-4)
    tx = T(x)
    assert tlgpu.rope(tx, pos.tolist(), interleaved=interleaved, inplace=True) is tx
    close(tx, ref, 1e-4, 1e-4)


def enqueues(fn):
    """fn()'s result and the commands it enqueued."""
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    r = fn()
    return r, tlgpu.stream_stats()["enqueued"]


def test_rope_2d_large_position_and_errors(rng):
    x = randn(rng, 4, 16)
    tx = T(x)
    y, n = enqueues(lambda: tlgpu.rope(tx, 1000, theta=500000.0))     # an int position: no upload
    close(y, ref_rope(x[None], [1000], 500000.0, False)[0], 2e-4, 2e-4)
    assert n == 1
    close(tlgpu.rope(T(x[None]), -3), ref_rope(x[None], [-3], 10000.0, False), 2e-4, 2e-4)
    with pytest.raises(OverflowError, match="int32"):
        tlgpu.rope(tx, 2 ** 31)
    with pytest.raises(ValueError, match="even"):
        tlgpu.rope(T(randn(rng, 2, 3)), 0)
    with pytest.raises(ValueError, match="positions"):
        tlgpu.rope(T(randn(rng, 3, 2, 4)), [0, 1])


def ref_softmax(x, scale=1.0, causal=False):
    z = x.astype(np.float64) * scale
    if causal:
        tq, tk = x.shape[-2:]
        mask = np.arange(tk)[None, :] > np.arange(tq)[:, None] + tk - tq
        z = np.where(mask, -np.inf, z)
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


@pytest.mark.parametrize("shape", [(1,), (3, 7), (2, 33, 65), (2, 1025)])
def test_softmax_rows(rng, shape):
    x = randn(rng, *shape) * 4
    close(tlgpu.softmax_rows(T(x)), ref_softmax(x))
    close(tlgpu.softmax_rows(T(x), scale=0.3), ref_softmax(x, 0.3))


@pytest.mark.parametrize("tq,tk", [(1, 1), (5, 5), (3, 9), (2, 33)])
def test_softmax_causal(rng, tq, tk):
    x = randn(rng, 2, tq, tk)
    close(tlgpu.softmax_rows(T(x), scale=0.5, causal=True), ref_softmax(x, 0.5, True))
    with pytest.raises(ValueError, match="queries"):
        tlgpu.softmax_rows(T(randn(rng, 4, 3)), causal=True)


@pytest.mark.parametrize("n", [1, 7, 1025])
def test_silu_mul(rng, n):
    x, y = randn(rng, 3, n), randn(rng, 3, n)
    x64 = x.astype(np.float64)
    close(tlgpu.silu_mul(T(x), T(y)), x64 / (1 + np.exp(-x64)) * y)
    close(tlgpu.silu_mul(T(x).T, T(y).T), (x64 / (1 + np.exp(-x64)) * y).T)   # views
    with pytest.raises(ValueError, match="same shape"):
        tlgpu.silu_mul(T(x), T(y[:2]))


def test_kv_write(rng):
    cache = np.zeros((3, 10, 5), np.float32)
    tc = T(cache)
    a, b = randn(rng, 3, 5), randn(rng, 3, 4, 5)
    assert tlgpu.kv_write(tc, T(a), 2) is tc
    tlgpu.kv_write(tc, T(b), 6)
    cache[:, 2], cache[:, 6:10] = a, b
    close(tc, cache, 0, 0)
    with pytest.raises(IndexError, match="max_len"):
        tlgpu.kv_write(tc, T(b), 7)
    with pytest.raises(ValueError, match="kv_write"):
        tlgpu.kv_write(tc, T(randn(rng, 2, 5)), 0)


def ref_attention(q, k, v, length, scale=None):
    h, d = q.shape
    g = h // k.shape[0]
    scale = 1 / np.sqrt(d) if scale is None else scale
    out = np.empty((h, d))
    for i in range(h):
        kk, vv = k[i // g, :length].astype(np.float64), v[i // g, :length].astype(np.float64)
        s = kk @ q[i].astype(np.float64) * scale
        p = np.exp(s - s.max())
        out[i] = p / p.sum() @ vv
    return out


@pytest.mark.parametrize("h,hkv,d,ml,length", [(1, 1, 1, 1, 1), (8, 2, 32, 40, 33), (4, 4, 7, 9, 5),
                                                (2, 1, 300, 20, 17), (3, 1, 16, 1100, 1025)])
def test_attention(rng, h, hkv, d, ml, length):
    q, k, v = randn(rng, h, d), randn(rng, hkv, ml, d) * 2, randn(rng, hkv, ml, d)
    close(tlgpu.attention(T(q), T(k), T(v), length), ref_attention(q, k, v, length), 1e-4, 1e-5)
    close(tlgpu.attention(T(q), T(k), T(v), length, scale=0.7), ref_attention(q, k, v, length, 0.7), 1e-4, 1e-5)


@pytest.mark.parametrize("h,hkv,d,ml", [(8, 2, 32, 40), (3, 1, 16, 1100)])
def test_attention_length_on_device_same_bits(rng, h, hkv, d, ml):
    """A length given as an int and the same length in an int32 tensor (a device step) sum alike: a decode
    loop that keeps its position on the device gives the sync loop's logits bit for bit."""
    q, k, v = randn(rng, h, d), randn(rng, hkv, ml, d) * 2, randn(rng, hkv, ml, d)
    for length in (1, 5, ml // 2 + 3, ml):
        host = tlgpu.attention(T(q), T(k), T(v), length).numpy()
        dev = tlgpu.attention(T(q), T(k), T(v), tlgpu.tensor([length - 1], dtype=tlgpu.int32), offset=1).numpy()
        np.testing.assert_array_equal(dev, host)


@pytest.mark.parametrize("t,h,hkv,d,ml,length", [(3, 4, 2, 8, 10, 3), (5, 8, 2, 32, 40, 33), (17, 2, 1, 300, 20, 20),
                                                  (2, 3, 1, 16, 1100, 1025)])
def test_attention_prefill(rng, t, h, hkv, d, ml, length):
    """T queries at the last T of `length` positions: query i sees keys up to length - T + i (causal)."""
    q, k, v = randn(rng, t, h, d), randn(rng, hkv, ml, d) * 2, randn(rng, hkv, ml, d)
    ref = np.stack([ref_attention(q[i], k, v, length - t + 1 + i, 0.3) for i in range(t)])
    y = tlgpu.attention(T(q), T(k), T(v), length, scale=0.3)
    close(y, ref, 1e-4, 1e-5)
    assert y.shape == (t, h, d)
    with pytest.raises(ValueError, match="length"):
        tlgpu.attention(T(q), T(k), T(v), t - 1)


def test_attention_errors(rng):
    q, k = T(randn(rng, 3, 4)), T(randn(rng, 2, 5, 4))
    with pytest.raises(ValueError, match="divide"):
        tlgpu.attention(q, k, k, 2)
    with pytest.raises(ValueError, match="length"):
        tlgpu.attention(T(randn(rng, 4, 4)), k, k, 6)


def test_no_grad_refusal(rng):
    x = tlgpu.tensor(randn(rng, 2, 4), requires_grad=True)
    with pytest.raises(NotImplementedError, match="rms_norm"):
        tlgpu.rms_norm(x)
    with tlgpu.no_grad():
        tlgpu.rms_norm(x)


def test_get_rows(rng):
    table = randn(rng, 11, 7)
    ids = np.array([[3, 0], [10, 3]], np.int32)
    close(tlgpu.get_rows(T(table), T(ids, np.int32)), table[ids], 0, 0)
    tt = T(table)
    y, n = enqueues(lambda: tlgpu.get_rows(tt, 4))               # one id as an int: no upload
    close(y, table[[4]], 0, 0)
    assert n == 1
    with pytest.raises(IndexError, match="11 rows"):
        tlgpu.get_rows(tt, -1)
    close(tlgpu.get_rows(T(table).T.contiguous().T, [1, 2]), table[[1, 2]], 0, 0)
    with pytest.raises(IndexError, match="11 rows"):
        tlgpu.get_rows(T(table), [11])


@pytest.mark.parametrize("m", [1, 2, 3, 8])
@pytest.mark.parametrize("k,n", [(7, 5), (33, 1025), (1025, 33), (256, 64)])
def test_mul_mv(rng, m, k, n):
    x, w = randn(rng, m, k), randn(rng, n, k)
    ref = x.astype(np.float64) @ w.T.astype(np.float64)
    close(T(x) @ T(w).T, ref, 1e-4, 1e-5 * np.sqrt(k))
    wide = T(randn(rng, n, k + 3))[:, 1:k + 1]                 # strided weight rows
    close(T(x) @ wide.T, x.astype(np.float64) @ wide.numpy().T, 1e-4, 1e-5 * np.sqrt(k))


@pytest.mark.parametrize("m,k,n", [(1, 33, 1025), (3, 256, 64), (8, 7, 5), (20, 40, 9)])
def test_addmm(rng, m, k, n):
    x, w, r = randn(rng, m, k), randn(rng, n, k), randn(rng, m, n)
    ref = r.astype(np.float64) + x.astype(np.float64) @ w.T.astype(np.float64)
    tx, tw, tr = T(x), T(w), T(r)
    y, cmds = enqueues(lambda: tlgpu.addmm(tr, tx, tw.T))
    close(y, ref, 1e-4, 1e-5 * np.sqrt(k))
    if m <= 8:
        assert cmds == 1                                       # the residual added in the mul_mv store
    bias = randn(rng, n)                                       # broadcast input: the product, then an add
    close(tlgpu.addmm(T(bias), tx, tw.T), bias + x.astype(np.float64) @ w.T, 1e-4, 1e-5 * np.sqrt(k))
    tr.requires_grad = True                                    # autograd: recorded as @ and +
    tx.requires_grad = True
    tlgpu.addmm(tr, tx, tw.T).sum().backward()
    close(tr.grad, np.ones((m, n)), 0, 0)
    close(tx.grad, np.broadcast_to(w.sum(0), (m, k)), 1e-4, 1e-4)
    with pytest.raises(TypeError, match="addmm"):
        tlgpu.addmm(r, tx, tw.T)


# On GPUs the quantized mul_mv quantizes activations to int8 blocks, as llama.cpp's mmvq does (docs/inference.md),
# and so does the CPU devices' native product (docs/cpu.md): the logits of a quantized decoder then move by
# ~1e-3 of their scale, against 1e-7 for the float kernels.
QTOL = 2e-2 if tlgpu.device().type == "gpu" or tlgpu._C._cpu_quant()["active"] else 1e-4


def small_decoder_check(q4, rtol):
    import tiny_decoder as td
    cfg = td.Config(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=8)
    w = td.make_weights(cfg, seed=7)
    model = td.Decoder(cfg, w, q4=q4)
    tokens = [5, 7, 11]
    got = np.stack([model.step(t, p).numpy()[0] for p, t in enumerate(tokens)])
    ref = td.reference_logits(cfg, td.dequantized(w) if q4 else w, tokens)
    np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol * np.abs(ref).max())
    return model


@pytest.mark.parametrize("q4", [False, True])
def test_tiny_decoder_logits(q4):
    small_decoder_check(q4, QTOL if q4 else 1e-4)


@pytest.mark.parametrize("q4,n", [(False, 5), (False, 11), (True, 11)])
def test_tiny_decoder_prefill(q4, n):
    """The prompt in one pass (GEMM rows, causal attention over T queries; 11 rows take the GEMM path, 5 the
    mul_mv one) gives the reference's logits, continues from there like step(), and generates the same tokens
    as feeding the prompt one token at a time."""
    import tiny_decoder as td
    cfg = td.Config(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=24)
    w = td.make_weights(cfg, seed=3)
    model = td.Decoder(cfg, w, q4=q4)
    tokens = [int(t) for t in np.random.default_rng(n).integers(0, cfg.vocab, n + 1)]
    ref = td.reference_logits(cfg, td.dequantized(w) if q4 else w, tokens)
    got = model.prefill(tokens[:n]).numpy()[0]
    tol = QTOL if q4 else 1e-4
    np.testing.assert_allclose(got, ref[n - 1], rtol=tol, atol=tol * np.abs(ref).max())
    np.testing.assert_allclose(model.step(tokens[n], n).numpy()[0], ref[n], rtol=tol, atol=tol * np.abs(ref).max())
    assert model.generate(tokens[:4], 6) == model.generate_stepwise(tokens[:4], 6)


def test_tiny_decoder_repeatable():
    import tiny_decoder as td
    cfg = td.Config(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=16)
    tokens, _, model = td.run(cfg, q4=False, n_tokens=6, runs=3)
    assert len(tokens) == 6
    _, n = enqueues(lambda: model.step(3, 9))         # 6 launches per layer; embedding, head (norm fused)
    assert n == 6 * cfg.n_layers + 2


def test_fast_math_subprocess():
    from conftest import run_python
    code = """
import sys, numpy as np, tlgpu
sys.path.insert(0, 'tests')
import test_llm as t
rng = np.random.default_rng(5)
x, w = rng.standard_normal((3, 65)).astype(np.float32), rng.standard_normal(65).astype(np.float32)
np.testing.assert_allclose(tlgpu.rms_norm(t.T(x), t.T(w)).numpy(), t.ref_rms(x, w, 1e-6), rtol=1e-3, atol=1e-3)
s = rng.standard_normal((2, 5, 9)).astype(np.float32)
np.testing.assert_allclose(tlgpu.softmax_rows(t.T(s), causal=True).numpy(), t.ref_softmax(s, 1.0, True), atol=1e-3)
q, k, v = (rng.standard_normal(sh).astype(np.float32) for sh in [(4, 16), (2, 9, 16), (2, 9, 16)])
np.testing.assert_allclose(tlgpu.attention(t.T(q), t.T(k), t.T(v), 7).numpy(), t.ref_attention(q, k, v, 7),
                           rtol=1e-3, atol=1e-3)
a, b = rng.standard_normal((33, 70)).astype(np.float32), rng.standard_normal((65, 70)).astype(np.float32)
np.testing.assert_allclose((t.T(a) @ t.T(b).T).numpy(), a.astype(np.float64) @ b.T, rtol=1e-3, atol=1e-3)
t.small_decoder_check(False, 1e-3)
t.small_decoder_check(True, max(1e-3, t.QTOL))
print("ok", tlgpu._C._program_stats())
"""
    r = run_python(code, env={"TLGPU_FAST_MATH": "1"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
