"""q8_0: quantization bit-exact against the gguf package's reference quantizer (llama.cpp's
quantize_row_q8_0_ref ported to numpy) and a scalar port of it, to_bytes/from_bytes in llama.cpp's
block_q8_0 layout, dequantize, matmul/addmm (mul_mv for 1-8 rows, both kernels; dequantize + GEMM beyond)
and embedding against numpy on the dequantized weights; F.linear / nn.Linear with Q4_0 and Q8_0 weights
and quantize_linears on a small MLP."""
import math
import os

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (make test installs it; pip install gguf)")

import tlgpu
import tlgpu.nn.functional as F
from tlgpu import nn, quant

Q8 = gguf.GGMLQuantizationType.Q8_0


# The float mul_mv kernels (exact but for float32 sums, within 1e-4), pinned on GPUs too (conftest.py)
pytestmark = pytest.mark.usefixtures("float_mv_kernels")


def ref_quantize_row(x):
    """Scalar port of ggml-quants.c quantize_row_q8_0_ref: per block (d float16, 32 int8)."""
    out = []
    for b in range(len(x) // 32):
        blk = x[b * 32:(b + 1) * 32]
        amax = np.float32(0)
        for v in blk:
            amax = max(amax, np.float32(abs(v)))
        d = np.float32(amax / np.float32(127))
        inv = np.float32(1) / d if d != 0 else np.float32(0)
        qs = []
        for v in blk:
            x0 = float(np.float32(v * inv))
            qs.append(int(math.copysign(math.floor(abs(x0) + 0.5), x0)))       # C's roundf
        out.append((np.float16(d), np.array(qs, np.int8)))
    return out


def weights(rng, n, k):
    w = rng.standard_normal((n, k)).astype(np.float32) * rng.uniform(0.1, 3.0, (n, 1)).astype(np.float32)
    w[0, :32] = 0.0                                     # an all-zero block: d = 0
    if n > 1 and k > 32:
        w[1, 40] = -9.5                                 # a negative extreme
        w[1, 41] = 9.5 * 63.5 / 127                     # exactly half a step: rounds away from zero
    return w


def test_quantize_bit_exact(rng):
    w = weights(rng, 4, 128)
    qs, d = quant.quantize_q8_0_numpy(w)
    ref = gguf.quants.quantize(w, Q8)                   # (N, K/32*34) bytes: d then 32 int8 per block
    assert np.array_equal(np.frombuffer(quant.quantize_q8_0(w).to_bytes(), np.uint8).reshape(ref.shape), ref)
    for r in range(4):
        for b, (rd, rq) in enumerate(ref_quantize_row(w[r])):
            assert d[r, b].tobytes() == rd.tobytes()
            assert np.array_equal(qs[r, b], rq)


def test_device_roundtrip_and_bytes(rng):
    w = weights(rng, 5, 64)
    q = quant.quantize_q8_0(w)
    qs, d = quant.quantize_q8_0_numpy(w)
    gqs, gd = q.numpy_blocks()
    assert np.array_equal(gqs.view(np.int8), qs) and np.array_equal(gd.view(np.uint16), d.view(np.uint16))
    data = q.to_bytes()
    assert len(data) == q.nbytes == 5 * 2 * 34
    assert data[:2] == d[0, 0].tobytes() and data[2:34] == qs[0, 0].tobytes()
    q2 = quant.Q8_0.from_bytes(data, (5, 64))
    assert np.array_equal(q2.dequantize().numpy(), q.dequantize().numpy())
    with pytest.raises(ValueError, match="q8_0"):
        quant.Q8_0.from_bytes(data[:-1], (5, 64))
    with pytest.raises(ValueError, match="multiple of 32"):
        quant.quantize_q8_0(np.ones((2, 48), np.float32))


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
def test_cat_rows(rng, kind):
    """cat_rows joins matrices' rows on the device (even block counts) or through the host (an odd one): the
    bytes of the matrices one after the other, either way."""
    q = {"q4_0": quant.quantize_q4_0, "q8_0": quant.quantize_q8_0}[kind]
    for rows in ([4, 6, 2], [3, 5, 2]):                  # 2 blocks a row: even; odd rows * 1 block: the host
        k = 64 if rows[0] % 2 == 0 else 32
        mats = [q(weights(rng, n, k)) for n in rows]
        out = type(mats[0]).cat_rows(mats)
        assert out.shape == (sum(rows), k) and type(out) is type(mats[0])
        assert out.to_bytes() == b"".join(m.to_bytes() for m in mats)
        assert np.array_equal(out.dequantize().numpy(), np.concatenate([m.dequantize().numpy() for m in mats]))
    other = quant.quantize_q8_0 if kind == "q4_0" else quant.quantize_q4_0
    with pytest.raises(ValueError, match="one kind"):
        type(mats[0]).cat_rows([mats[0], other(weights(rng, 2, 32))])
    with pytest.raises(ValueError, match="one row length"):
        type(mats[0]).cat_rows([mats[0], q(weights(rng, 2, 64))])


@pytest.mark.parametrize("n,k", [(1, 32), (7, 64), (33, 1024)])
def test_dequantize(rng, n, k):
    w = weights(rng, n, k)
    q = quant.quantize_q8_0(w)
    ref = gguf.quants.dequantize(gguf.quants.quantize(w, Q8), Q8)
    np.testing.assert_array_equal(quant.dequantize(q).numpy(), ref)
    assert np.abs(ref - w).max() <= np.abs(w).max() / 127 + 1e-6


def _check_products(rng, shapes, q_of=quant.quantize_q8_0):
    for (m, n, k) in shapes:
        w, x = weights(rng, n, k), rng.standard_normal((m, k)).astype(np.float32)
        q = q_of(w)
        deq = q.dequantize().numpy().astype(np.float64)
        ref = x.astype(np.float64) @ deq.T
        tol = 1e-4 * np.sqrt(k / 32) * max(1.0, np.abs(ref).max())
        np.testing.assert_allclose(quant.matmul(tlgpu.tensor(x), q).numpy(), ref, rtol=1e-4, atol=tol)
        r = rng.standard_normal((m, n)).astype(np.float32)
        np.testing.assert_allclose(quant.addmm(tlgpu.tensor(r), tlgpu.tensor(x), q).numpy(), r + ref, rtol=1e-4,
                                   atol=tol)


SHAPES = [(1, 1, 32), (1, 33, 1024), (3, 7, 64), (8, 1025, 96), (17, 9, 64), (3, 5, 4096)]


def test_matmul_addmm(rng):
    _check_products(rng, SHAPES)


def test_matmul_workgroup_kernel():
    """The GPU (work-group) kernel, forced on whatever device this is."""
    from conftest import run_python
    code = f"""
import numpy as np, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
from test_quant_q8 import _check_products
from tlgpu import quant
quant._MV_IMPL = "old"
_check_products(np.random.default_rng(5), {SHAPES!r} + [(2, 9, 64), (4, 7, 64), (5, 6, 64)])
print("ok")
"""
    r = run_python(code, env={"TLGPU_GEMM_PARAMS": "DIRECT=0"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_matmul_chunked_and_errors(rng):
    w, x = weights(rng, 1024, 1024), rng.standard_normal((20, 1024)).astype(np.float32)   # 1M: 8-row launches
    q = quant.quantize_q8_0(w)
    ref = x.astype(np.float64) @ q.dequantize().numpy().astype(np.float64).T
    np.testing.assert_allclose(quant.matmul(tlgpu.tensor(x), q).numpy(), ref, rtol=1e-4, atol=1e-3)
    x3 = rng.standard_normal((2, 3, 1024)).astype(np.float32)
    assert quant.matmul(tlgpu.tensor(x3), q).shape == (2, 3, 1024)
    with pytest.raises(ValueError, match="q8_0.*last dims"):
        quant.matmul(tlgpu.tensor(x3[..., :32]), q)
    with pytest.raises(NotImplementedError, match="q8_0"):
        quant.matmul(tlgpu.tensor(x[:2], requires_grad=True), q)


def test_embedding(rng):
    w = weights(rng, 9, 64)
    q = quant.quantize_q8_0(w)
    deq = q.dequantize().numpy()
    ids = np.array([[8, 0, 3]], np.int32)
    np.testing.assert_array_equal(quant.embedding(q, tlgpu.tensor(ids)).numpy(), deq[ids])
    np.testing.assert_array_equal(quant.embedding(q, [2, 2]).numpy(), deq[[2, 2]])
    np.testing.assert_array_equal(quant.embedding(q, 7).numpy(), deq[[7]])
    for bad in (9, -1):
        with pytest.raises(IndexError, match="9 rows"):
            quant.embedding(q, bad)


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
def test_linear(rng, kind):
    qz = {"q4_0": quant.quantize_q4_0, "q8_0": quant.quantize_q8_0}[kind]
    w, b = rng.standard_normal((24, 96)).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    q = qz(w)
    deq = q.dequantize().numpy().astype(np.float64)
    for shape in [(1, 96), (5, 96), (2, 9, 96)]:
        x = rng.standard_normal(shape).astype(np.float32)
        with tlgpu.no_grad():
            np.testing.assert_allclose(F.linear(tlgpu.tensor(x), q, tlgpu.tensor(b)).numpy(), x @ deq.T + b,
                                       rtol=1e-4, atol=1e-4)
            np.testing.assert_allclose(F.linear(tlgpu.tensor(x), q).numpy(), x @ deq.T, rtol=1e-4, atol=1e-4)
    layer = nn.Linear(96, 24)
    layer.weight = q
    assert "weight=" in repr(layer) and len(list(layer.parameters())) == 1      # the bias only
    x = rng.standard_normal((3, 96)).astype(np.float32)
    tx = tlgpu.tensor(x, requires_grad=True)                 # x's gradient flows; the weight gets none
    y = layer(tx)
    y.sum().backward()
    np.testing.assert_allclose(y.detach().numpy(), x @ deq.T + layer.bias.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tx.grad.numpy(), np.ones((3, 24)) @ deq, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.bias.grad.numpy(), np.full(24, 3.0), rtol=1e-6)
    with pytest.raises(TypeError, match=f"linear \\({kind}.*float16"):
        F.linear(tlgpu.tensor(x.astype(np.float16)), q)
    with pytest.raises(ValueError, match="bias"):
        F.linear(tlgpu.tensor(x), q, tlgpu.tensor(b[:3]))


@pytest.mark.parametrize("kind,tol", [("q8_0", 0.02), ("q4_0", 0.25)])
def test_quantize_linears_mlp(rng, kind, tol):
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 96), nn.Tanh(), nn.Linear(96, 40),
                          nn.Linear(40, 10))                 # the last: in_features 40 stays float32
    x = tlgpu.tensor(rng.standard_normal((6, 64)).astype(np.float32))
    with tlgpu.no_grad():
        ref = model(x).numpy()
    assert quant.quantize_linears(model, kind) == ["0", "2", "4"]
    assert isinstance(model[0].weight, quant.Q8_0 if kind == "q8_0" else quant.Q4_0)
    assert isinstance(model[5].weight, tlgpu.Tensor)
    assert quant.quantize_linears(model, kind) == []         # already quantized
    with tlgpu.no_grad():
        got = model(x).numpy()
    err = np.abs(got - ref).max() / np.abs(ref).max()
    assert 0 < err < tol, err
    with pytest.raises(ValueError, match="kind"):
        quant.quantize_linears(model, "q5_0")
