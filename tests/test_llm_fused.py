"""tlgpu.rms_norm_linear and tlgpu.silu_mul_linear (the norm or the SwiGLU product folded into the projection
after it, one launch) against numpy float64 on random inputs: float32, float16 and bfloat16 weights, 1, 3 and 8
rows, with and without a residual, several eps; the separate ops where the kernels do not run (9 rows, a
broadcast residual, half activations); quantized weights through quant.matmul's prologue; bad inputs; the GPU kernels on PoCL (DIRECT=0); and
the tiny decoder's step: 6 launches a layer, the same tokens as the unfused step."""
import os
import sys

import ml_dtypes
import numpy as np
import pytest

import tlgpu
from tlgpu import quant

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

WDTYPES = [np.dtype(np.float32), np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)]
T = tlgpu.tensor


def ref_norm_linear(x, g, w, eps, r=None):
    x = x.astype(np.float64)
    h = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    h = h * g.astype(np.float64) if g is not None else h
    y = h @ w.astype(np.float64).T
    return y if r is None else y + r


def ref_glu_linear(x, w, r=None):
    x = x.astype(np.float64)
    k = x.shape[-1] // 2
    a, b = x[..., :k], x[..., k:]
    y = (a / (1 + np.exp(-a)) * b) @ w.astype(np.float64).T
    return y if r is None else y + r


def enqueued(fn):
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    out = fn()
    return out, tlgpu.stream_stats()["enqueued"]


def close(got, ref, tol=2e-6):
    """float32 accumulation: within a few float32 ulps of the result's scale."""
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("wdt", WDTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("with_res", [False, True])
def test_rms_norm_linear_one_launch(rng, wdt, rows, with_res):
    for n, k, eps in [(13, 40, 1e-5), (7, 33, 1e-6), (20, 136, 0.5)]:
        x = rng.standard_normal((rows, k)).astype(np.float32) * 3
        g = (1 + 0.2 * rng.standard_normal(k)).astype(np.float32)
        w = rng.standard_normal((n, k)).astype(wdt)
        r = rng.standard_normal((rows, n)).astype(np.float32) if with_res else None
        tx, tg, tw, tr = T(x), T(g), T(w), T(r) if with_res else None       # uploads: not counted below
        y, count = enqueued(lambda: tlgpu.rms_norm_linear(tx, tg, tw, eps=eps, residual=tr))
        assert count == 1 and y.shape == (rows, n)
        close(y.numpy(), ref_norm_linear(x, g, w, eps, r))
        sep = tlgpu.rms_norm(T(x), T(g), eps=eps) @ T(w).T                  # the separate ops
        close(y.numpy(), sep.numpy().astype(np.float64) + (r if with_res else 0))
    y = tlgpu.rms_norm_linear(T(x), None, T(w))                             # no norm weight, default eps
    close(y.numpy(), ref_norm_linear(x, None, w, 1e-6))


@pytest.mark.parametrize("wdt", WDTYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("with_res", [False, True])
def test_silu_mul_linear_one_launch(rng, wdt, rows, with_res):
    for n, k in [(13, 40), (7, 33), (20, 136)]:
        x = rng.standard_normal((rows, 2 * k)).astype(np.float32) * 2
        w = rng.standard_normal((n, k)).astype(wdt)
        r = rng.standard_normal((rows, n)).astype(np.float32) if with_res else None
        tx, tw, tr = T(x), T(w), T(r) if with_res else None
        y, count = enqueued(lambda: tlgpu.silu_mul_linear(tx, tw, residual=tr))
        assert count == 1 and y.shape == (rows, n)
        close(y.numpy(), ref_glu_linear(x, w, r))


def test_leading_dims_views_and_weight_rows(rng):
    """x (2, 2, K) is 4 rows; a weight that is a row slice of a wider one (offset, row stride) and x a view."""
    big = rng.standard_normal((30, 50)).astype(np.float32)
    w = T(big)[3:17, 5:45]                                                   # (14, 40), rows of stride 50
    x = rng.standard_normal((2, 2, 40)).astype(np.float32)
    g = rng.standard_normal(40).astype(np.float32)
    y = tlgpu.rms_norm_linear(T(x), T(g), w, eps=1e-4)
    assert y.shape == (2, 2, 14)
    close(y.numpy(), ref_norm_linear(x, g, big[3:17, 5:45], 1e-4))
    xx = rng.standard_normal((3, 100)).astype(np.float32)
    y = tlgpu.silu_mul_linear(T(xx)[:, 10:90], w)                           # a strided view of x
    close(y.numpy(), ref_glu_linear(xx[:, 10:90], big[3:17, 5:45]))


def test_fallbacks_match(rng):
    """Where the kernels do not take it the separate ops run, with the same results: 9 rows, a bias-shaped
    (broadcast) residual, float16 activations."""
    k, n = 40, 13
    w = rng.standard_normal((n, k)).astype(np.float32)
    g = rng.standard_normal(k).astype(np.float32)
    x9 = rng.standard_normal((9, k)).astype(np.float32)
    tx, tg, tw = T(x9), T(g), T(w)
    y, count = enqueued(lambda: tlgpu.rms_norm_linear(tx, tg, tw, eps=1e-5))
    assert count > 1                                                         # rms_norm, then the product
    close(y.numpy(), ref_norm_linear(x9, g, w, 1e-5), 1e-5)
    bias = rng.standard_normal(n).astype(np.float32)
    x = rng.standard_normal((2, 2 * k)).astype(np.float32)
    y = tlgpu.silu_mul_linear(T(x), T(w), residual=T(bias))
    close(y.numpy(), ref_glu_linear(x, w, bias), 1e-5)
    xh = rng.standard_normal((2, k)).astype(np.float16)
    y = tlgpu.rms_norm_linear(T(xh), T(g), T(w.astype(np.float16)))
    want = tlgpu.rms_norm(T(xh), T(g)) @ T(w.astype(np.float16)).T
    np.testing.assert_array_equal(y.numpy(), want.numpy())


@pytest.mark.parametrize("make", [quant.quantize_q4_0, quant.quantize_q8_0])
def test_quantized_weights_take_the_prologue(rng, make):
    """A Q4_0 / Q8_0 weight runs quant.matmul / quant.addmm with norm= / glu=: one mul_mv launch with the
    prologue on GPUs (kernels/quant_mvq.h) and CPU devices with native commands (docs/cpu.md), the prologue's own
    launch first on other CPU devices (the row kernels);
    the same values as that call, and near the float64 reference (GPUs: int8 activations, docs/inference.md)."""
    k, n = 64, 24
    w = make(rng.standard_normal((n, k)).astype(np.float32))
    wd = quant.dequantize(w).numpy().astype(np.float64)
    x = rng.standard_normal((2, k)).astype(np.float32)
    g = rng.standard_normal(k).astype(np.float32)
    r = rng.standard_normal((2, n)).astype(np.float32)
    tx, tg, tr = T(x), T(g), T(r)
    native = tlgpu._C._cpu_quant()["active"]           # CPU devices: one native command (docs/cpu.md)
    launches = 1 if tlgpu.device().type == "gpu" or native else 2
    tol = 2e-2 if tlgpu.device().type == "gpu" or native else 1e-5
    tlgpu.rms_norm_linear(tx, tg, w, eps=1e-5, residual=tr)      # native: the buffers' pointers learnt first
    learnt = tlgpu._C._cpu_blas()["pointers"]           # a buffer the pool never handed out (all of them under
    y, count = enqueued(lambda: tlgpu.rms_norm_linear(tx, tg, w, eps=1e-5, residual=tr))   # the sanitizer
    assert count == launches + tlgpu._C._cpu_blas()["pointers"] - learnt           # build) costs one more
    np.testing.assert_array_equal(y.numpy(), quant.addmm(T(r), T(x), w, norm=T(g), eps=1e-5).numpy())
    xd = x.astype(np.float64)
    ref = r + (xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-5) * g) @ wd.T
    np.testing.assert_allclose(y.numpy(), ref, rtol=tol, atol=tol * np.abs(ref).max())
    for rows in (1, 3):
        xx = rng.standard_normal((rows, 2 * k)).astype(np.float32)
        txx = T(xx)
        tlgpu.silu_mul_linear(txx, w)
        learnt = tlgpu._C._cpu_blas()["pointers"]
        y, count = enqueued(lambda: tlgpu.silu_mul_linear(txx, w))
        assert count == launches + tlgpu._C._cpu_blas()["pointers"] - learnt
        np.testing.assert_array_equal(y.numpy(), quant.matmul(T(xx), w, glu=True).numpy())
        ref = ref_glu_linear(xx, wd)
        np.testing.assert_allclose(y.numpy(), ref, rtol=tol, atol=tol * np.abs(ref).max())


def test_bad_inputs(rng):
    x, g = T(rng.standard_normal((2, 8)).astype(np.float32)), T(np.ones(8, np.float32))
    w = T(np.ones((3, 8), np.float32))
    with pytest.raises(ValueError, match=r"rms_norm_linear: x \(2, 8\) must end in 6"):
        tlgpu.rms_norm_linear(x, None, T(np.ones((3, 6), np.float32)))
    with pytest.raises(ValueError, match="rms_norm_linear: norm"):
        tlgpu.rms_norm_linear(x, T(np.ones(7, np.float32)), w)
    with pytest.raises(ValueError, match="rms_norm_linear.*2-D"):
        tlgpu.rms_norm_linear(x, g, T(np.ones(8, np.float32)))
    with pytest.raises(ValueError, match="silu_mul_linear: x \\(2, 8\\) must end in 16"):
        tlgpu.silu_mul_linear(x, w)
    with pytest.raises(ValueError, match="silu_mul_linear.*needs at least one dim"):
        tlgpu.silu_mul_linear(T(np.float32(1.0)), w)
    with pytest.raises(TypeError, match="rms_norm_linear.*int32"):
        tlgpu.rms_norm_linear(T(np.ones((2, 8), np.int32)), g, w)
    with pytest.raises(TypeError, match="silu_mul_linear: w must be a Tensor or a tlgpu.quant"):
        tlgpu.silu_mul_linear(x, np.ones((3, 4), np.float32))
    with pytest.raises(TypeError, match="rms_norm_linear: residual"):
        tlgpu.rms_norm_linear(x, g, w, residual=[1.0, 2.0, 3.0])
    wg = T(np.ones((3, 8), np.float32), requires_grad=True)
    with pytest.raises(NotImplementedError, match="rms_norm_linear"):
        tlgpu.rms_norm_linear(x, g, wg)
    with tlgpu.no_grad():                                                    # as rms_norm: fine without grad mode
        close(tlgpu.rms_norm_linear(x, g, wg).numpy(), ref_norm_linear(x.numpy(), g.numpy(), wg.numpy(), 1e-6))


@pytest.mark.slow                # ~35 s of cold PoCL builds: make test-slow (GPU runs have them natively)
def test_gpu_kernels_subprocess():
    """The work-group kernels (what GPUs run) on PoCL: DIRECT=0 picks them (float32 weights always; half
    weights where their rows are 16-byte aligned, K a multiple of 8, else the row kernel)."""
    from conftest import run_python
    code = """
import sys, numpy as np, tlgpu
sys.path.insert(0, 'tests')
import test_llm_fused as t
rng = np.random.default_rng(4)
for wdt in t.WDTYPES:
    for rows in (1, 2, 3, 8):
        for n, k in [(13, 40), (7, 33), (9, 136), (66, 256)]:
            x = rng.standard_normal((rows, k)).astype(np.float32)
            g = rng.standard_normal(k).astype(np.float32)
            w = rng.standard_normal((n, k)).astype(wdt)
            r = rng.standard_normal((rows, n)).astype(np.float32)
            y = tlgpu.rms_norm_linear(t.T(x), t.T(g), t.T(w), eps=1e-5, residual=t.T(r))
            t.close(y.numpy(), t.ref_norm_linear(x, g, w, 1e-5, r))
            xx = rng.standard_normal((rows, 2 * k)).astype(np.float32)
            t.close(tlgpu.silu_mul_linear(t.T(xx), t.T(w)).numpy(), t.ref_glu_linear(xx, w))
print("ok")
"""
    r = run_python(code, env={"TLGPU_GEMM_PARAMS": "DIRECT=0"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


@pytest.mark.parametrize("dtype", [None, "float16"])
def test_tiny_decoder_step_is_6_launches_a_layer(dtype):
    """The decode step: get_rows, per layer [rms_norm_linear(wqkv), rope_kv_write, attention, addmm(wo),
    rms_norm_linear(w13), silu_mul_linear(w2)], rms_norm_linear(head): 6 a layer and 2 (eager and in the
    jitted trace, which adds the position's increment and the argmax); fuse=False: 9 and 3. Both give the
    same tokens in every loop, and logits near the float64 reference."""
    import tiny_decoder as td
    cfg = td.Config(dim=64, n_layers=3, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=24)
    w = td.make_weights(cfg, seed=5)
    fused, plain = td.Decoder(cfg, w, dtype=dtype), td.Decoder(cfg, w, dtype=dtype, fuse=False)
    _, n = enqueued(lambda: fused.step(3, 2))
    _, n0 = enqueued(lambda: plain.step(3, 2))
    assert (n, n0) == (6 * cfg.n_layers + 2, 9 * cfg.n_layers + 3)
    prompt = [4, 9, 1]
    want = plain.generate(prompt, 10)
    assert fused.generate(prompt, 10) == want
    assert fused.generate(prompt, 10, device=True) == want
    for _ in range(2):                                                        # traced, then replayed
        assert fused.generate(prompt, 10, jit=True) == want
    names = fused._jstep.commands()
    assert len(names) == 6 * cfg.n_layers + 4
    assert sum("mul_mv_norm" in s for s in names) == 2 * cfg.n_layers + 1
    assert sum("mul_mv_glu" in s for s in names) == cfg.n_layers
    assert td.launches_per_token(fused) == len(names)
    fused.fuse = False                                                        # a new jitted step, unfused
    assert fused.generate(prompt, 10, jit=True) == want
    assert len(fused._jstep.commands()) == 9 * cfg.n_layers + 5
    fused.fuse = True
    fused.reset()
    seq = [4, 9, 1, 7]
    ref = td.reference_logits(cfg, td.rounded(w, dtype) if dtype else w, seq)
    got = np.stack([fused.step(t, p).numpy()[0] for p, t in enumerate(seq)])
    tol = 1e-4 if dtype is None else 2e-2                                     # a float16 KV cache
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
