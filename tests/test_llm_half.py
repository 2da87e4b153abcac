"""The inference ops on float16 and bfloat16 tensors (llm.cl's dtype-generic build) and the half-weight
matrix-vector kernel (mv_half.cl), against the float32 ops on the same (rounded) values and numpy float64,
with docs/precision.md's tolerances: rtol = atol = 2e-3 (float16), 1.6e-2 (bfloat16) on the result; cache
writes and lookups bit-exact. Mixed dtypes follow PyTorch's promotion; a float16 KV cache under float32 q/k/v;
the decode form with device positions; the tiny decoder with float16 / bfloat16 weights against the float32
decoder of the rounded weights."""
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))

F16, BF16, F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
TOL = {F16: 2e-3, BF16: 1.6e-2, F32: 1e-5}
HALVES = pytest.mark.parametrize("dt", [F16, BF16], ids=["float16", "bfloat16"])


def half(rng, dt, *shape, scale=1.0):
    """Random values exactly representable in dt, as a dt array."""
    return (rng.standard_normal(shape) * scale).astype(dt)


def T(a):
    return tlgpu.tensor(a)


def f32(a):
    """The same values as float32 (exact widening)."""
    return tlgpu.tensor(np.asarray(a).astype(np.float32))


def check(got, want, dt, exact=False):
    """got (a dt tensor) against want (float32 results on the same values): its dtype, then values."""
    want = want.numpy() if hasattr(want, "numpy") else np.asarray(want)
    assert got.dtype == dt, (got.dtype, dt)
    g = got.numpy()
    assert g.shape == want.shape
    if exact:                                            # bit-exact (no NaN, no signed zeros here)
        np.testing.assert_array_equal(g.astype(np.float32), want.astype(dt).astype(np.float32))
    else:
        np.testing.assert_allclose(g.astype(np.float64), want, rtol=TOL[dt], atol=TOL[dt])


@HALVES
@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 33), (4, 1025)])
def test_rms_norm(rng, dt, shape):
    x, w = half(rng, dt, *shape), half(rng, dt, shape[-1])
    check(tlgpu.rms_norm(T(x), T(w), eps=1e-5), tlgpu.rms_norm(f32(x), f32(w), eps=1e-5), dt)
    check(tlgpu.rms_norm(T(x)), tlgpu.rms_norm(f32(x)), dt)
    # promotion: a float32 activation with a half weight gives float32 (and the other way round)
    check(tlgpu.rms_norm(f32(x), T(w)), tlgpu.rms_norm(f32(x), f32(w)), F32)
    check(tlgpu.rms_norm(T(x), f32(w)), tlgpu.rms_norm(f32(x), f32(w)), F32)
    check(F.rms_norm(T(x), T(w)), tlgpu.rms_norm(f32(x), f32(w)), dt)        # nn.functional: the kernel


@HALVES
@pytest.mark.parametrize("t,h,d,interleaved", [(1, 1, 2, False), (3, 4, 16, False), (5, 2, 34, True)])
def test_rope(rng, dt, t, h, d, interleaved):
    x = half(rng, dt, t, h, d)
    pos = [int(p) for p in rng.integers(0, 500, t)]
    want = tlgpu.rope(f32(x), pos, theta=5000.0, interleaved=interleaved)
    check(tlgpu.rope(T(x), pos, theta=5000.0, interleaved=interleaved), want, dt)
    check(tlgpu.rope(T(x), tlgpu.tensor(np.array(pos, np.int32)), theta=5000.0, interleaved=interleaved), want, dt)
    xt = T(x)
    assert tlgpu.rope(xt, pos, theta=5000.0, interleaved=interleaved, inplace=True) is xt
    check(xt, want, dt)
    x2 = half(rng, dt, h, d)                                          # (H, D): one position as an int
    check(tlgpu.rope(T(x2), 77), tlgpu.rope(f32(x2), 77), dt)


@HALVES
@pytest.mark.parametrize("shape,causal", [((3, 9), False), ((2, 5, 9), True), ((1, 1030), False)])
def test_softmax_rows(rng, dt, shape, causal):
    x = half(rng, dt, *shape, scale=3.0)
    check(tlgpu.softmax_rows(T(x), scale=0.5, causal=causal), tlgpu.softmax_rows(f32(x), 0.5, causal), dt)


@HALVES
@pytest.mark.parametrize("n", [1, 7, 1025])
def test_silu_mul(rng, dt, n):
    x, y = half(rng, dt, 2, n), half(rng, dt, 2, n)
    want = tlgpu.silu_mul(f32(x), f32(y))
    check(tlgpu.silu_mul(T(x), T(y)), want, dt)
    check(tlgpu.silu_mul(T(x), f32(y)), want, F32)                          # mixed: float32
    check(F.silu_mul(T(x), T(y)), want, dt)


@HALVES
def test_kv_write_converts_into_the_cache(rng, dt):
    """The cache keeps its dtype: float32 values are rounded into a half cache (as copy_), half values into a
    float32 cache exactly; an int32 device position writes where it says."""
    a, b = rng.standard_normal((3, 5)).astype(np.float32), half(rng, dt, 3, 4, 5)
    want = np.zeros((3, 10, 5), dt)
    cache = tlgpu.zeros((3, 10, 5), dtype=dt)
    assert tlgpu.kv_write(cache, f32(a), 2) is cache
    tlgpu.kv_write(cache, T(b), tlgpu.tensor([6], dtype=tlgpu.int32))
    want[:, 2], want[:, 6:10] = a.astype(dt), b
    check(cache, want, dt, exact=True)
    c32 = tlgpu.zeros((3, 10, 5))
    tlgpu.kv_write(c32, T(b), 1)
    check(c32[:, 1:5], b.astype(np.float32), F32, exact=True)


@HALVES
@pytest.mark.parametrize("qkv_dt", ["half", "float32"])
@pytest.mark.parametrize("device_pos", [False, True])
def test_rope_kv_write(rng, dt, qkv_dt, device_pos):
    """One launch = rope of q and k in place, then kv_write of k and v, with a half cache and half or float32
    q/k/v: the cache holds what qkv holds after the rope, rounded to the cache's dtype."""
    nq, nkv, d, ml, p = 4, 2, 16, 9, 5
    x = half(rng, dt, nq + 2 * nkv, d)
    if qkv_dt == "float32":
        x = x.astype(np.float32) + rng.standard_normal(x.shape).astype(np.float32) * 1e-3
    qkv, cache = T(x), tlgpu.zeros((2 * nkv, ml, d), dtype=dt)
    pos = tlgpu.tensor([p], dtype=tlgpu.int32) if device_pos else p
    assert tlgpu.rope_kv_write(qkv, cache, pos, nq, theta=100.0) is qkv
    ref_x = T(x)
    tlgpu.rope(ref_x[:nq + nkv], p, theta=100.0, inplace=True)
    ref_c = tlgpu.zeros((2 * nkv, ml, d), dtype=dt)
    tlgpu.kv_write(ref_c, ref_x[nq:], p)
    check(qkv, ref_x.numpy().astype(np.float32), qkv.dtype, exact=True)   # the same kernels' rounding
    check(cache, ref_c.numpy(), dt, exact=True)
    assert np.abs(cache.numpy()[:, p].astype(np.float32)).sum() > 0
    want = tlgpu.rope(f32(x[:nq + nkv]), p, theta=100.0)                     # and rope's values
    check(qkv[:nq + nkv], want, qkv.dtype)


def _caches(rng, dt, hkv, ml, d):
    return half(rng, dt, hkv, ml, d, scale=2.0), half(rng, dt, hkv, ml, d)


@HALVES
@pytest.mark.parametrize("h,hkv,d,ml,length", [(1, 1, 1, 1, 1), (8, 2, 32, 40, 33), (4, 4, 7, 9, 5),
                                                (2, 1, 300, 20, 17), (4, 1, 16, 300, 260)])
def test_attention_decode(rng, dt, h, hkv, d, ml, length):
    q = half(rng, dt, h, d)
    k, v = _caches(rng, dt, hkv, ml, d)
    want = tlgpu.attention(f32(q), f32(k), f32(v), length)
    check(tlgpu.attention(T(q), T(k), T(v), length), want, dt)
    check(tlgpu.attention(f32(q), T(k), T(v), length), want, F32)          # float32 q over a half cache
    check(tlgpu.attention(T(q), f32(k), f32(v), length), want, F32)
    # the decode form: the length an int32 device tensor, offset added (a traced decode step's form)
    lt = tlgpu.tensor([length - 1], dtype=tlgpu.int32)
    check(tlgpu.attention(f32(q), T(k), T(v), lt, offset=1), want, F32)
    check(tlgpu.attention(T(q), T(k), T(v), lt, offset=1, scale=0.3),
          tlgpu.attention(f32(q), f32(k), f32(v), length, scale=0.3), dt)


@HALVES
@pytest.mark.parametrize("t,h,hkv,d,ml,length", [(3, 4, 2, 8, 10, 3), (5, 8, 2, 32, 40, 33)])
def test_attention_prefill(rng, dt, t, h, hkv, d, ml, length):
    q = half(rng, dt, t, h, d)
    k, v = _caches(rng, dt, hkv, ml, d)
    want = tlgpu.attention(f32(q), f32(k), f32(v), length, scale=0.3)
    check(tlgpu.attention(T(q), T(k), T(v), length, scale=0.3), want, dt)
    check(tlgpu.attention(f32(q), T(k), T(v), length, scale=0.3), want, F32)


@HALVES
def test_get_rows(rng, dt):
    table = half(rng, dt, 7, 5)
    ids = np.array([[3, 0], [6, 3]], np.int32)
    check(tlgpu.get_rows(T(table), T(ids)), table[ids], dt, exact=True)
    check(tlgpu.get_rows(T(table), [1, 4]), table[[1, 4]], dt, exact=True)
    check(tlgpu.get_rows(T(table), 2, dtype=tlgpu.float32), table[2:3].astype(np.float32), F32, exact=True)
    check(tlgpu.get_rows(f32(table), [5], dtype=dt), table[[5]], dt, exact=True)
    bad = tlgpu.get_rows(T(table), T(np.array([1, 9], np.int32))).numpy()  # a device id out of range: NaN
    assert np.isnan(bad[1].astype(np.float32)).all() and not np.isnan(bad[0].astype(np.float32)).any()
    with pytest.raises(TypeError, match="get_rows"):
        tlgpu.get_rows(T(table), [1], dtype=tlgpu.int32)


def test_integer_operands_raise_type_error(rng):
    i = tlgpu.tensor(np.arange(12, dtype=np.int32).reshape(3, 4))
    u = tlgpu.tensor(np.arange(12, dtype=np.uint8).reshape(3, 4))
    for fn, name in [(lambda a: tlgpu.rms_norm(a), "rms_norm"), (lambda a: tlgpu.silu_mul(a, a), "silu_mul"),
                     (lambda a: tlgpu.softmax_rows(a), "softmax_rows"), (lambda a: tlgpu.rope(a, 1), "rope"),
                     (lambda a: tlgpu.get_rows(a, [0]), "get_rows")]:
        for t in (i, u):
            with pytest.raises(TypeError, match=f"{name}.*{t.dtype}"):
                fn(t)
    with pytest.raises(TypeError, match="attention.*int32"):
        tlgpu.attention(f32(np.ones((2, 4))), i.reshape(1, 3, 4), i.reshape(1, 3, 4), 2)
    with pytest.raises(NotImplementedError, match="rms_norm"):
        tlgpu.rms_norm(tlgpu.tensor(half(rng, F16, 2, 4), requires_grad=True))


@HALVES
def test_composite_backward_in_half(rng, dt):
    """F.rms_norm / F.silu_mul record their composite ops when a graph is wanted: gradients in the inputs'
    dtype, matching float32 ones (the fused kernels have no backward)."""
    x, w, y = half(rng, dt, 3, 16), half(rng, dt, 16), half(rng, dt, 3, 16)
    g = rng.standard_normal((3, 16)).astype(np.float32)
    grads = []
    for cast in (lambda a: tlgpu.tensor(a, requires_grad=True), lambda a: tlgpu.tensor(a.astype(np.float32),
                                                                                      requires_grad=True)):
        tx, tw, ty = cast(x), cast(w), cast(y)
        out = F.rms_norm(tx, tw) + F.silu_mul(tx, ty)
        (out * tlgpu.tensor(g.astype(out.dtype))).sum().backward()
        grads.append([t.grad for t in (tx, tw, ty)])
    for h, f in zip(*grads):
        assert h.dtype == dt
        ref = f.numpy()
        np.testing.assert_allclose(h.numpy().astype(np.float64), ref, rtol=4 * TOL[dt],
                                   atol=4 * TOL[dt] * max(1.0, np.abs(ref).max()))


# ---- the half-weight matrix-vector product (kernels/mv_half.cl) ----

MV_SHAPES = [(1, 7, 33), (2, 13, 64), (3, 9, 136), (5, 1, 8), (8, 5, 200), (6, 64, 257), (1, 1, 1)]


def enqueued(fn):
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    r = fn()
    return r, tlgpu.stream_stats()["enqueued"]


def mv_ref(x, w, extra=0.0):
    return x.astype(np.float64) @ w.astype(np.float64).T + extra


@HALVES
@pytest.mark.parametrize("r,n,k", MV_SHAPES)
@pytest.mark.parametrize("xdt", ["float32", "half"])
def test_mv_half_against_numpy(rng, dt, r, n, k, xdt):
    """x @ w.T, addmm's residual and linear's bias on a half weight with up to 8 rows of x: one launch that
    reads the 2-byte weights (no widened copy of w), float32 accumulation; float32 x gives float32, half x
    the half dtype. float32 results: 1e-6 relative to the largest |y| (only accumulation order differs)."""
    w = half(rng, dt, n, k)
    x = rng.standard_normal((r, k)).astype(np.float32) if xdt == "float32" else half(rng, dt, r, k)
    odt = F32 if xdt == "float32" else dt
    tol = 1e-6 if odt == F32 else TOL[dt]
    tw, tx = T(w), T(x)
    y, n_cmd = enqueued(lambda: tx @ tw.T)
    assert n_cmd == 1 and y.dtype == odt
    ref = mv_ref(x, w)
    scale = max(1.0, np.abs(ref).max())
    np.testing.assert_allclose(y.numpy().astype(np.float64), ref, rtol=tol, atol=tol * scale)
    res = half(rng, odt, r, n) if odt != F32 else rng.standard_normal((r, n)).astype(np.float32)
    z, n_cmd = enqueued(lambda: tlgpu.addmm(T(res), tx, tw.T))               # the residual added as it stores
    assert n_cmd <= 2 and z.dtype == odt                                      # (+ the upload of res)
    np.testing.assert_allclose(z.numpy().astype(np.float64), mv_ref(x, w, res.astype(np.float64)), rtol=tol,
                               atol=tol * scale)
    b = res[0]
    z = F.linear(tx, tw, T(b))                                               # a bias of N: added by the kernel
    assert z.dtype == odt
    np.testing.assert_allclose(z.numpy().astype(np.float64), mv_ref(x, w, b.astype(np.float64)), rtol=tol,
                               atol=tol * scale)


@HALVES
def test_mv_half_shapes_views_and_fallbacks(rng, dt):
    w = half(rng, dt, 24, 40)
    x = rng.standard_normal((2, 3, 40)).astype(np.float32)
    tw = T(w)
    y = T(x) @ tw.T                                                          # leading dims: 6 rows
    assert y.shape == (2, 3, 24) and y.dtype == F32
    np.testing.assert_allclose(y.numpy(), mv_ref(x, w), rtol=1e-6, atol=1e-5)
    v = T(x[0, 0]) @ tw.T                                                   # a 1-D x
    assert v.shape == (24,)
    np.testing.assert_allclose(v.numpy(), mv_ref(x[0, 0], w), rtol=1e-6, atol=1e-5)
    ws = T(half(rng, dt, 24, 48))[:, 3:43]                                   # rows of a wider weight, offset 3
    np.testing.assert_allclose((T(x[0]) @ ws.T).numpy(), mv_ref(x[0], ws.numpy()), rtol=1e-6, atol=1e-5)
    big = rng.standard_normal((9, 40)).astype(np.float32)                   # 9 rows: the widening GEMM path
    np.testing.assert_allclose((T(big) @ tw.T).numpy(), mv_ref(big, w), rtol=1e-5, atol=1e-4)
    tx = tlgpu.tensor(x[0], requires_grad=True)                              # a graph: the recorded path
    (tx @ tw.T).sum().backward()
    np.testing.assert_allclose(tx.grad.numpy(), np.broadcast_to(w.astype(np.float64).sum(0), (3, 40)),
                               rtol=1e-5, atol=1e-4)
    with tlgpu.autocast(dtype=tlgpu.float16):                                # autocast: its own rule
        assert (T(x[0]) @ tw.T).dtype == F16


@pytest.mark.parametrize("opts", ["", "-DMVH_WIDE=0"])
def test_mv_half_gpu_kernels_subprocess(opts):
    """The work-group kernels (what GPUs run) on PoCL: DIRECT=0 picks them, for aligned weight rows (K a
    multiple of 8; others take the row kernel); MVH_WIDE=0 is their element-aligned load variant."""
    from conftest import run_python
    code = """
import sys, numpy as np, tlgpu, ml_dtypes
sys.path.insert(0, 'tests')
import test_llm_half as t
rng = np.random.default_rng(2)
for dt in (t.F16, t.BF16):
    for r, n, k in [(1, 7, 40), (2, 13, 64), (3, 9, 136), (8, 5, 200), (5, 66, 256), (4, 3, 1032), (1, 3, 33)]:
        w = t.half(rng, dt, n, k)
        for x in (rng.standard_normal((r, k)).astype(np.float32), t.half(rng, dt, r, k)):
            y = (t.T(x) @ t.T(w).T).numpy().astype(np.float64)
            ref = t.mv_ref(x, w)
            tol = 1e-6 if x.dtype == np.float32 else t.TOL[dt]
            np.testing.assert_allclose(y, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))
            res = rng.standard_normal((r, n)).astype(np.float32)
            if x.dtype == np.float32:
                z = tlgpu.addmm(t.T(res), t.T(x), t.T(w).T).numpy()
                np.testing.assert_allclose(z, ref + res, rtol=1e-6, atol=1e-5 * max(1.0, np.abs(ref).max()))
v = np.array([6e-8, 1e-5, -3e-6, 65504, -0.0, 2, np.inf, -4], np.float16)   # subnormals, the largest, inf
y = (t.T(np.ones((1, 8), np.float32)) @ t.T(np.diag(v)).T).numpy()[0]        # row j holds v[j] alone
np.testing.assert_array_equal(y, v.astype(np.float32))
print("ok")
"""
    env = {"TLGPU_GEMM_PARAMS": "DIRECT=0"}
    if opts:
        env["TLGPU_BUILD_OPTIONS"] = opts
    r = run_python(code, env=env)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


# ---- the tiny decoder in half precision ----

def small_cfg(max_len=16):
    import tiny_decoder as td
    return td.Config(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=max_len)


@HALVES
def test_tiny_decoder_half_weights(dt):
    """Half weights (float32 activations, the weights read as stored) and a half KV cache: the logits of
    each decode step match the float32 decoder of the same rounded weights (with a float32 cache) and the
    float64 reference within half precision of the logits' scale, and the float32 decoder with the same
    half cache to 1e-5; the decode step launches as many kernels as the float32 one; half the weight bytes."""
    import tiny_decoder as td
    cfg = small_cfg()
    w = td.make_weights(cfg, seed=7)
    model = td.Decoder(cfg, w, dtype=dt.name)
    assert model.kv_dtype == dt and model.kv[0].dtype == dt and model.out.dtype == dt
    ref32 = td.Decoder(cfg, td.rounded(w, dt))
    tokens = [5, 7, 11, 2, 9]
    got = np.stack([model.step(t, p).numpy()[0] for p, t in enumerate(tokens)])
    want = np.stack([ref32.step(t, p).numpy()[0] for p, t in enumerate(tokens)])
    assert got.dtype == np.float32
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=TOL[dt], atol=TOL[dt] * scale)
    same = td.Decoder(cfg, td.rounded(w, dt), kv_dtype=dt.name)          # float32 weights, the same cache
    same = np.stack([same.step(t, p).numpy()[0] for p, t in enumerate(tokens)])
    np.testing.assert_allclose(got, same, rtol=1e-5, atol=1e-5 * scale)   # only the products' order differs
    ref64 = td.reference_logits(cfg, td.rounded(w, dt), tokens)
    np.testing.assert_allclose(got, ref64, rtol=TOL[dt], atol=TOL[dt] * scale)
    assert model.bytes_per_token() * 2 == ref32.bytes_per_token()
    _, n32 = enqueued(lambda: ref32.step(3, 9))
    _, n16 = enqueued(lambda: model.step(3, 9))
    assert n16 == n32 == 6 * cfg.n_layers + 2


def test_tiny_decoder_float16_loops_agree():
    """sync, device and jit decoding of float16 weights with a float16 cache give the same tokens, as does
    feeding the prompt one token at a time; prefill with more than 8 rows (the widening GEMM) agrees with
    the step-by-step logits."""
    import tiny_decoder as td
    cfg = small_cfg(max_len=24)
    model = td.Decoder(cfg, td.make_weights(cfg, seed=3), dtype="float16")
    prompt = [1, 2, 3]
    sync = model.generate(prompt, 8)
    assert model.generate(prompt, 8, device=True) == sync
    assert model.generate(prompt, 8, jit=True) == sync
    assert model.generate(prompt, 8, jit=True) == sync                      # the replayed trace
    assert model.generate_stepwise(prompt, 8) == sync
    tokens = [int(t) for t in np.random.default_rng(1).integers(0, cfg.vocab, 11)]
    model.reset()
    pre = model.prefill(tokens).numpy()[0]
    model.reset()
    for p, t in enumerate(tokens):
        step = model.step(t, p).numpy()[0]
    np.testing.assert_allclose(pre, step, rtol=TOL[F16], atol=TOL[F16] * np.abs(step).max())


def test_tiny_decoder_kv_dtype_and_gguf(tmp_path):
    """float32 weights with a float16 cache; a float16 GGUF file (F16 matrices, F32 norms) loads as a float16
    decoder with the in-memory one's logits."""
    import tiny_decoder as td
    cfg = small_cfg()
    w = td.make_weights(cfg, seed=5)
    a, b = td.Decoder(cfg, w, kv_dtype="float16"), td.Decoder(cfg, w)
    assert a.kv_dtype == F16 and b.kv_dtype == F32
    la = np.stack([a.step(t, p).numpy()[0] for p, t in enumerate([4, 8, 15])])
    lb = np.stack([b.step(t, p).numpy()[0] for p, t in enumerate([4, 8, 15])])
    np.testing.assert_allclose(la, lb, rtol=TOL[F16], atol=TOL[F16] * np.abs(lb).max())
    path = str(tmp_path / "tiny_f16.gguf")
    td.save_gguf(path, cfg, w, kind="float16")
    g, m = td.Decoder.from_gguf(path), td.Decoder(cfg, w, dtype="float16")
    assert g.dtype == "float16" and g.kv_dtype == F16
    lg = np.stack([g.step(t, p).numpy()[0] for p, t in enumerate([4, 8, 15])])
    lm = np.stack([m.step(t, p).numpy()[0] for p, t in enumerate([4, 8, 15])])
    np.testing.assert_allclose(lg, lm, rtol=1e-6, atol=1e-6 * np.abs(lm).max())
    with pytest.raises(ValueError, match="dtype"):
        td.Decoder(cfg, w, kind="q8_0", dtype="float16")
