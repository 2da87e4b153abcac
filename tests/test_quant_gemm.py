"""Prefill through the dequantize-on-the-fly GEMM (kernels/quant_gemm.cl, tlgpu._C._quant_gemm, issue 27): both
kernels (the GPU's local-memory tiles at every tile height, and the CPU's register-blocked one, each forced on
any device) against numpy's x @ dequantize(w).T in float64 (weights dequantized from the host quantizer's own
blocks), q4_0 and q8_0, M in {9, 33, 64, 130}, N and K not multiples of the tiles, bias; tlgpu.quant.matmul's
many-row dispatch (_PREFILL_IMPL) with batched leading dims, views and the prologue; the errors."""
import numpy as np
import pytest

import tlgpu
from tlgpu import _C, quant

QUANTIZE = {"q4_0": quant.quantize_q4_0, "q8_0": quant.quantize_q8_0}
# (kernel, mwg): the tiles at each height and by shape, the CPU kernel
KERNELS = [(1, 0), (1, 32), (1, 64), (2, 0)]


def ref_weights(w):
    """float64 (N, K) of a Q4_0 / Q8_0 from its blocks (llama.cpp's formulas, not the device's dequantize)."""
    qs, d = w.numpy_blocks()
    if w.KIND == "q4_0":
        q = np.concatenate([qs & 0xF, qs >> 4], -1).astype(np.float64) - 8
    else:
        q = qs.view(np.int8).astype(np.float64)
    return (q * d.astype(np.float64)[..., None]).reshape(w.shape)


def check(y, x, wd, bias=None, rel=1e-5):
    """|y - x @ wd.T (+ bias)| within rel of sum |x| |w| (+ |bias|), elementwise: float32 sums in any order."""
    x = np.asarray(x, np.float64)
    ref = x @ wd.T
    scale = np.abs(x) @ np.abs(wd).T
    if bias is not None:
        ref, scale = ref + bias, scale + np.abs(bias)
    assert y.shape == ref.shape
    err = np.abs(np.asarray(y, np.float64) - ref) / np.maximum(scale, 1e-30)
    assert err.max() <= rel, f"max relative error {err.max():.3g}"


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
@pytest.mark.parametrize("m,n,k", [(9, 70, 96), (33, 130, 160), (64, 67, 64), (130, 200, 32)])
def test_quant_gemm_kernels(rng, fmt, m, n, k):
    w = QUANTIZE[fmt](rng.standard_normal((n, k)).astype(np.float32))
    wd = ref_weights(w)
    x = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    tx, tb = tlgpu.tensor(x), tlgpu.tensor(b)
    for kernel, mwg in KERNELS:
        check(_C._quant_gemm(tx, w.qs, w.d, n, k, fmt, tb, kernel=kernel, mwg=mwg).numpy(), x, wd, b)
    check(_C._quant_gemm(tx, w.qs, w.d, n, k, fmt).numpy(), x, wd)          # the device's kernel, no bias


def test_quant_gemm_view_and_edges(rng):
    """x a row slice (an offset into its buffer) and a transposed view; N = 0, K = 0 (zeros, or the bias)."""
    w = quant.quantize_q4_0(rng.standard_normal((45, 64)).astype(np.float32))
    wd = ref_weights(w)
    xa = rng.standard_normal((40, 64)).astype(np.float32)
    big = tlgpu.tensor(xa)
    for kernel in (1, 2):
        check(_C._quant_gemm(big[3:31], w.qs, w.d, 45, 64, "q4_0", kernel=kernel).numpy(), xa[3:31], wd)
        xt = tlgpu.tensor(np.ascontiguousarray(xa[:20].T)).T               # (20, 64), not contiguous
        check(_C._quant_gemm(xt, w.qs, w.d, 45, 64, "q4_0", kernel=kernel).numpy(), xa[:20], wd)
    empty = quant.quantize_q8_0(np.zeros((0, 64), np.float32))
    assert _C._quant_gemm(tlgpu.tensor(xa), empty.qs, empty.d, 0, 64, "q8_0").shape == (40, 0)
    z = quant.quantize_q8_0(np.zeros((5, 0), np.float32))
    b = rng.standard_normal(5).astype(np.float32)
    y = _C._quant_gemm(tlgpu.zeros(12, 0), z.qs, z.d, 5, 0, "q8_0", tlgpu.tensor(b)).numpy()
    np.testing.assert_array_equal(y, np.broadcast_to(b, (12, 5)))


@pytest.fixture
def prefill_impl():
    old = quant._PREFILL_IMPL
    yield
    quant._PREFILL_IMPL = old


@pytest.mark.parametrize("fmt", ["q4_0", "q8_0"])
def test_matmul_prefill_dispatch(rng, prefill_impl, fmt):
    """quant.matmul with batched leading dims ((3, 11) rows) under every _PREFILL_IMPL, and the tiles with the
    RMSNorm + glu prologue against the dequantize path."""
    n, k = 90, 96
    w = QUANTIZE[fmt](rng.standard_normal((n, k)).astype(np.float32))
    wd = ref_weights(w)
    x = rng.standard_normal((3, 11, k)).astype(np.float32)
    tx = tlgpu.tensor(x)
    for impl in quant._PREFILL_IMPLS:
        quant._PREFILL_IMPL = impl
        y = quant.matmul(tx, w).numpy()
        assert y.shape == (3, 11, n)
        check(y.reshape(33, n), x.reshape(33, k), wd, rel=1e-5)
    quant._PREFILL_IMPL = "tiles"
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    quant.matmul(tx, w)
    assert tlgpu.stream_stats()["enqueued"] == 1                # one launch: no float32 copy of w
    xg = tlgpu.tensor(rng.standard_normal((20, 2 * k)).astype(np.float32))
    norm = tlgpu.tensor(rng.standard_normal(k).astype(np.float32))
    quant._PREFILL_IMPL = "dequant"
    ref = quant.matmul(xg, w, norm=norm, glu=True).numpy()
    quant._PREFILL_IMPL = "tiles"
    got = quant.matmul(xg, w, norm=norm, glu=True).numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_matmul_prefill_grad_and_switch(rng, prefill_impl):
    """An x that requires grad takes the float GEMM (its gradient flows); a bad _PREFILL_IMPL is a ValueError."""
    w = quant.quantize_q4_0(rng.standard_normal((24, 64)).astype(np.float32))
    wd = ref_weights(w)
    x = tlgpu.tensor(rng.standard_normal((12, 64)).astype(np.float32), requires_grad=True)
    quant._PREFILL_IMPL = "tiles"
    quant.matmul(x, w).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.broadcast_to(wd.sum(0), (12, 64)), rtol=1e-5, atol=1e-5)
    quant._PREFILL_IMPL = "fast"
    with pytest.raises(ValueError, match="_PREFILL_IMPL"):
        quant.matmul(tlgpu.zeros(12, 64), w)


def test_quant_gemm_errors(rng):
    w = quant.quantize_q4_0(rng.standard_normal((16, 64)).astype(np.float32))
    x = tlgpu.tensor(rng.standard_normal((10, 64)).astype(np.float32))
    with pytest.raises(ValueError, match="fmt"):
        _C._quant_gemm(x, w.qs, w.d, 16, 64, "q5_0")
    with pytest.raises(ValueError, match="do not hold"):
        _C._quant_gemm(x, w.qs, w.d, 16, 64, "q8_0")                         # q4_0 arrays as q8_0
    with pytest.raises(ValueError, match=r"\(10, 32\)"):
        _C._quant_gemm(tlgpu.zeros(10, 32), w.qs, w.d, 16, 64, "q4_0")
    with pytest.raises(TypeError, match="int32"):
        _C._quant_gemm(tlgpu.zeros(10, 64, dtype="int32"), w.qs, w.d, 16, 64, "q4_0")
    with pytest.raises(ValueError, match="bias"):
        _C._quant_gemm(x, w.qs, w.d, 16, 64, "q4_0", tlgpu.zeros(15))
    with pytest.raises(ValueError, match="kernel"):
        _C._quant_gemm(x, w.qs, w.d, 16, 64, "q4_0", kernel=3)
    with pytest.raises(ValueError, match="multiple of 32"):
        _C._quant_gemm(x, w.qs, w.d, 16, 60, "q4_0")
    with pytest.raises(NotImplementedError, match="no backward"):
        _C._quant_gemm(tlgpu.zeros(10, 64, requires_grad=True), w.qs, w.d, 16, 64, "q4_0")
