"""q4_0: quantization bit-exact against a scalar port of llama.cpp's quantize_row_q4_0_ref, the device
layout round trip, dequantize, mul_mv (1-8 rows, both the work-group and the per-row kernels) and the
many-row path against numpy's dequantized @ x within 1e-4 relative, and embedding rows."""
import numpy as np
import pytest

import tlgpu
from tlgpu import quant


# The float mul_mv kernels (exact but for float32 sums, within 1e-4), pinned on GPUs too (conftest.py)
pytestmark = pytest.mark.usefixtures("float_mv_kernels")


def ref_quantize_row(x):
    """Scalar port of llama.cpp ggml-quants.c quantize_row_q4_0_ref: per block (d float16, 16 bytes)."""
    out = []
    for b in range(len(x) // 32):
        blk = x[b * 32:(b + 1) * 32]
        amax, mx = np.float32(0), np.float32(0)
        for v in blk:
            if amax < abs(v):
                amax, mx = abs(v), v
        d = np.float32(mx / np.float32(-8))
        inv = np.float32(1) / d if d != 0 else np.float32(0)
        qs = bytearray(16)
        for j in range(16):
            x0, x1 = np.float32(blk[j] * inv), np.float32(blk[16 + j] * inv)
            q0 = min(15, int(np.float32(x0 + np.float32(8.5))))       # int() truncates like (int8_t)
            q1 = min(15, int(np.float32(x1 + np.float32(8.5))))
            qs[j] = q0 | (q1 << 4)
        out.append((np.float16(d), bytes(qs)))
    return out


def ref_dequantize(qs, d):
    q = np.concatenate([qs & 0xF, qs >> 4], -1).astype(np.float64) - 8
    return (q * d.astype(np.float64)[..., None]).reshape(qs.shape[0], -1)


def weights(rng, n, k):
    w = rng.standard_normal((n, k)).astype(np.float32)
    w[0, :32] = 0.0                                     # an all-zero block: d = 0
    if n > 1 and k > 32:
        w[1, 40] = -7.5                                 # a negative extreme
    return w


def test_quantize_bit_exact(rng):
    w = weights(rng, 3, 96)
    qs, d = quant.quantize_q4_0_numpy(w)
    for r in range(3):
        for b, (rd, rq) in enumerate(ref_quantize_row(w[r])):
            assert d[r, b].tobytes() == rd.tobytes()
            assert qs[r, b].tobytes() == rq


def test_device_roundtrip_and_bytes(rng):
    w = weights(rng, 5, 64)
    q = quant.quantize_q4_0(w)
    qs, d = quant.quantize_q4_0_numpy(w)
    gqs, gd = q.numpy_blocks()
    assert np.array_equal(gqs, qs) and np.array_equal(gd.view(np.uint16), d.view(np.uint16))
    data = q.to_bytes()
    assert len(data) == q.nbytes == 5 * 2 * 18
    assert data[:2] == d[0, 0].tobytes() and data[2:18] == qs[0, 0].tobytes()
    q2 = quant.Q4_0.from_bytes(data, (5, 64))
    assert np.array_equal(q2.dequantize().numpy(), q.dequantize().numpy())


@pytest.mark.parametrize("n,k", [(1, 32), (7, 64), (33, 1024)])
def test_dequantize(rng, n, k):
    w = weights(rng, n, k)
    q = quant.quantize_q4_0(w)
    ref = ref_dequantize(*quant.quantize_q4_0_numpy(w))
    np.testing.assert_array_equal(quant.dequantize(q).numpy(), ref.astype(np.float32))
    assert np.abs(ref - w).max() <= np.abs(w).max() / 8 + 1e-6       # within half a step of the largest block


@pytest.mark.parametrize("kernel", ["default", "workgroup"])
def test_matmul_rows(rng, kernel):
    if kernel == "workgroup":                          # the GPU kernel, run on whatever device this is
        from conftest import run_python
        code = """
import numpy as np, tlgpu
from tlgpu import quant
quant._MV_IMPL = "old"
rng = np.random.default_rng(3)
for (m, n, k) in [(1, 5, 32), (2, 9, 64), (3, 33, 1024), (4, 7, 64), (5, 6, 64), (8, 1025, 96), (21, 9, 64)]:
    w, x = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((m, k)).astype(np.float32)
    q = quant.quantize_q4_0(w)
    ref = x.astype(np.float64) @ q.dequantize().numpy().astype(np.float64).T
    np.testing.assert_allclose(quant.matmul(tlgpu.tensor(x), q).numpy(), ref, rtol=1e-4, atol=1e-4)
    r = rng.standard_normal((m, n)).astype(np.float32)
    np.testing.assert_allclose(quant.addmm(tlgpu.tensor(r), tlgpu.tensor(x), q).numpy(), r + ref, rtol=1e-4,
                               atol=1e-4)
print("ok")
"""
        r = run_python(code, env={"TLGPU_GEMM_PARAMS": "DIRECT=0"})
        assert r.returncode == 0 and "ok" in r.stdout, r.stderr
        return
    for (m, n, k) in [(1, 1, 32), (2, 7, 64), (5, 33, 1024), (8, 1025, 96), (13, 9, 64), (64, 40, 96), (65, 7, 64)]:
        w, x = weights(rng, n, k), rng.standard_normal((m, k)).astype(np.float32)
        q = quant.quantize_q4_0(w)
        ref = x.astype(np.float64) @ ref_dequantize(*quant.quantize_q4_0_numpy(w)).T
        got = quant.matmul(tlgpu.tensor(x), q).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k / 32))
    w, x = weights(rng, 1024, 1024), rng.standard_normal((20, 1024)).astype(np.float32)   # 1M: 8-row launches
    q = quant.quantize_q4_0(w)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    old, quant._PREFILL_IMPL = quant._PREFILL_IMPL, "chunks"   # the 8-row rule (the default: test_quant_gemm.py)
    try:
        got = quant.matmul(tlgpu.tensor(x), q)
    finally:
        quant._PREFILL_IMPL = old
    assert tlgpu.stream_stats()["enqueued"] == 1 + 3 + 3      # x's upload, 3 mul_mv launches, cat's 3 copies
    ref = x.astype(np.float64) @ ref_dequantize(*quant.quantize_q4_0_numpy(w)).T
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-4 * np.sqrt(1024 / 32))


def test_addmm(rng):
    q = quant.quantize_q4_0(weights(rng, 40, 96))
    deq = q.dequantize().numpy().astype(np.float64)
    for m in (1, 5, 8, 11):
        x, r = rng.standard_normal((m, 96)).astype(np.float32), rng.standard_normal((m, 40)).astype(np.float32)
        tx, tr = tlgpu.tensor(x), tlgpu.tensor(r)
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        y = quant.addmm(tr, tx, q)
        if m <= quant.MV_MAX_ROWS:
            assert tlgpu.stream_stats()["enqueued"] == 1        # the residual added in the mul_mv store
        np.testing.assert_allclose(y.numpy(), r + x @ deq.T, rtol=1e-4, atol=1e-4)
        bias = rng.standard_normal(40).astype(np.float32)      # broadcast: the product, then an add
        np.testing.assert_allclose(quant.addmm(tlgpu.tensor(bias), tx, q).numpy(), bias + x @ deq.T, rtol=1e-4,
                                   atol=1e-4)


def test_matmul_shapes_and_errors(rng):
    q = quant.quantize_q4_0(weights(rng, 6, 64))
    x = rng.standard_normal((2, 3, 64)).astype(np.float32)
    assert quant.matmul(tlgpu.tensor(x), q).shape == (2, 3, 6)
    view = tlgpu.tensor(rng.standard_normal((64, 2)).astype(np.float32)).T       # non-contiguous x
    ref = view.numpy().astype(np.float64) @ q.dequantize().numpy().T
    np.testing.assert_allclose(quant.matmul(view, q).numpy(), ref, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="last dims"):
        quant.matmul(tlgpu.tensor(x[..., :32]), q)
    with pytest.raises(ValueError, match="multiple of 32"):
        quant.quantize_q4_0(np.ones((2, 33), np.float32))
    with pytest.raises(TypeError, match="Q4_0"):
        quant.matmul(tlgpu.tensor(x), tlgpu.tensor(x))


def test_embedding(rng):
    w = weights(rng, 9, 64)
    q = quant.quantize_q4_0(w)
    deq = q.dequantize().numpy()
    ids = np.array([[8, 0, 3]], np.int32)
    np.testing.assert_array_equal(quant.embedding(q, tlgpu.tensor(ids)).numpy(), deq[ids])
    np.testing.assert_array_equal(quant.embedding(q, [2, 2]).numpy(), deq[[2, 2]])
    np.testing.assert_array_equal(quant.embedding(tlgpu.tensor(w), [4]).numpy(), w[[4]])
    with pytest.raises(IndexError):
        quant.embedding(q, [9])
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    y = quant.embedding(q, np.int64(7))                       # one id: a kernel argument, no upload
    assert tlgpu.stream_stats()["enqueued"] == 1
    np.testing.assert_array_equal(y.numpy(), deq[[7]])
    np.testing.assert_array_equal(quant.embedding(tlgpu.tensor(w), 5).numpy(), w[[5]])
    for bad in (9, -1):
        with pytest.raises(IndexError, match="9 rows"):
            quant.embedding(q, bad)
