"""CPU devices: the q4_0 / q8_0 matrix-vector product as one native command (csrc/gemm/cpu_quant.c,
docs/cpu.md): x quantized to int8 blocks of 32 as the GPU's integer kernel does, so test_quant_mv's exact
emulation holds, on each dot product this CPU runs (vnni, avx2, the portable one); 1-8 rows, K of 32, 96 and
2048, N not a multiple of the rows a part takes; the prologue (rms_norm, glu) and the residual; the switch back
to the OpenCL kernels; bit-identical results whatever the thread count; tlgpu.jit replays of a quantized decode
step giving the eager loops' tokens."""
import os
import sys

import numpy as np
import pytest

import tlgpu
from tlgpu import quant
from test_quant_mv import QUANTIZE, bound, emulated, np_prologue

C = tlgpu._C
STATE = C._cpu_quant()
pytestmark = pytest.mark.skipif(not STATE["active"], reason="not a CPU device with native kernels")
ALL_ISAS = ["scalar", "avx2", "vnni"]
ISAS = ALL_ISAS[:ALL_ISAS.index(STATE["isa_max"]) + 1]


@pytest.fixture
def native():
    """Sets the path's isa/threads/enable for a test and puts the defaults back."""
    yield lambda **kw: C._cpu_quant(**kw)
    C._cpu_quant(enable=True, isa=STATE["isa_max"], threads=STATE["threads"])


def launches():
    return C._cpu_quant()["launches"]


SHAPES = [(1, 5, 32), (2, 37, 96), (3, 1001, 2048), (4, 7, 32), (5, 130, 96), (6, 9, 2048), (7, 300, 2048),
          (8, 70, 2048), (1, 1001, 2048), (8, 33, 96)]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
def test_products(rng, native, kind, isa):
    native(isa=isa)
    for (m, n, k) in SHAPES:
        w, x = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((m, k)).astype(np.float32)
        w[0, :32] = 0.0                                  # a zero weight block
        if k > 32:
            x[0, 32:64] = 0.0                            # a zero activation block: dx = 0
        x[-1, 5] = 40.0                                  # an outlier: one coarse block
        q = QUANTIZE[kind](w)
        deq = q.dequantize().numpy().astype(np.float64)
        before = launches()
        got = quant.matmul(tlgpu.tensor(x), q).numpy()
        assert launches() == before + 1
        ref, tol = emulated(x, deq)
        assert (np.abs(got - ref) <= tol).all(), (m, n, k, np.abs(got - ref).max())
        exact = x.astype(np.float64) @ deq.T
        assert (np.abs(got - exact) <= bound(x, deq) + 1e-4 * np.abs(exact) + 1e-5).all()
        res = rng.standard_normal((m, n)).astype(np.float32)
        y = quant.addmm(tlgpu.tensor(res), tlgpu.tensor(x), q).numpy()
        assert (np.abs(y - res - ref) <= tol + 1e-5 * np.abs(res)).all()


def test_one_command(rng):
    """addmm is one command once the buffers' pointers are known: the residual added as y is stored. (A buffer
    the pool has not handed out before, as every one under the sanitizer build, first costs one command that
    learns its host pointer: _cpu_blas()["pointers"] counts those.)"""
    q = quant.quantize_q4_0(rng.standard_normal((40, 64)).astype(np.float32))
    tx, tr = tlgpu.tensor(rng.standard_normal((2, 64)).astype(np.float32)), tlgpu.tensor(np.ones((2, 40), np.float32))
    quant.addmm(tr, tx, q)                               # learns the pointers of new buffers
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    learnt = C._cpu_blas()["pointers"]
    quant.addmm(tr, tx, q)
    assert tlgpu.stream_stats()["enqueued"] == 1 + C._cpu_blas()["pointers"] - learnt
    assert tlgpu.stream_stats()["waits"] == 0            # lazy: no host wait


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
def test_prologue(rng, native, kind, isa):
    """norm / glu / both before x's quantization, against numpy within the quantization bound of the
    prologue's output; with a residual too."""
    native(isa=isa)
    n, k = 45, 96 if isa == "scalar" else 2048
    q = QUANTIZE[kind](rng.standard_normal((n, k)).astype(np.float32))
    deq = q.dequantize().numpy().astype(np.float64)
    nw = (1 + 0.5 * rng.standard_normal(k)).astype(np.float32)
    for rows, glu, norm, eps in ((1, True, None, 1e-5), (3, False, nw, 1e-5), (8, True, nw, 1e-2)):
        x = (3 * rng.standard_normal((rows, 2 * k if glu else k))).astype(np.float32)
        p = np_prologue(x, k, norm, glu, eps)
        ref = p @ deq.T
        kw = dict(norm=None if norm is None else tlgpu.tensor(norm), eps=eps, glu=glu)
        before = launches()
        got = quant.matmul(tlgpu.tensor(x), q, **kw).numpy()
        assert launches() == before + 1                  # the prologue inside the command
        tol = bound(p, deq) + 1e-4 * (np.abs(p) @ np.abs(deq).T) + 1e-5
        assert (np.abs(got - ref) <= tol).all(), (rows, glu, norm is None, np.abs(got - ref).max())
        res = rng.standard_normal((rows, n)).astype(np.float32)
        got = quant.addmm(tlgpu.tensor(res), tlgpu.tensor(x), q, **kw).numpy()
        assert (np.abs(got - res - ref) <= tol + 1e-6 * np.abs(res)).all()


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
def test_switched_off_gives_the_opencl_kernel(rng, native, kind):
    """enable=False (and quant._MV_IMPL = "old") run the OpenCL row kernel: float activations, so within
    float32 rounding of the dequantized product, where the native command's int8 x is not."""
    w, x = rng.standard_normal((50, 256)).astype(np.float32), rng.standard_normal((3, 256)).astype(np.float32)
    q = QUANTIZE[kind](w)
    deq = q.dequantize().numpy().astype(np.float64)
    exact = x.astype(np.float64) @ deq.T
    tol = 1e-5 * (np.abs(x) @ np.abs(deq).T) + 1e-6
    on = quant.matmul(tlgpu.tensor(x), q).numpy()
    native(enable=False)
    before = launches()
    off = quant.matmul(tlgpu.tensor(x), q).numpy()
    assert launches() == before and not C._cpu_quant()["active"]
    assert (np.abs(off - exact) <= tol).all()
    assert not (np.abs(on - exact) <= tol).all()         # the int8 path is measurably different
    native(enable=True)
    old = quant._MV_IMPL
    quant._MV_IMPL = "old"
    try:
        before = launches()
        assert (np.abs(quant.matmul(tlgpu.tensor(x), q).numpy() - exact) <= tol).all()
        assert launches() == before
    finally:
        quant._MV_IMPL = old


def test_threads_bit_identical(rng, native):
    """Each weight row is one part's whole work: 1 or 2 threads (and repeated runs) give the same bits."""
    q = quant.quantize_q4_0(rng.standard_normal((1001, 2048)).astype(np.float32))
    tx = tlgpu.tensor(rng.standard_normal((3, 2048)).astype(np.float32))
    native(threads=1)
    one = quant.matmul(tx, q).numpy()
    native(threads=2)
    for _ in range(3):
        np.testing.assert_array_equal(quant.matmul(tx, q).numpy(), one)


def test_bad_settings():
    with pytest.raises(ValueError, match="isa must be"):
        C._cpu_quant(isa="sse9")
    if STATE["isa_max"] != "vnni":
        with pytest.raises(ValueError, match="at most"):
            C._cpu_quant(isa="vnni")
    assert C._cpu_quant()["isa"] == STATE["isa_max"]


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
def test_jitted_decode_tokens(kind):
    """A quantized decoder's tokens: the sync, device and jit loops agree; the jit replays run native commands
    and leave the outputs the traced call returned as they were."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
    import tiny_decoder as td
    cfg = td.Config(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=24)
    model = td.Decoder(cfg, td.make_weights(cfg, seed=5), kind=kind)
    prompt = [3, 8, 2]
    want = model.generate(prompt, 10)
    assert model.generate(prompt, 10, device=True) == want
    before = launches()
    for _ in range(2):
        assert model.generate(prompt, 10, jit=True) == want
    assert model._jstep.memory_plan()["native"] > 0 and launches() > before
    fresh = td.Decoder(cfg, td.make_weights(cfg, seed=5), kind=kind)   # a new jitted step
    fresh.prefill(prompt)
    tok, pos = tlgpu.tensor([want[0]], dtype=tlgpu.int32), tlgpu.tensor([len(prompt)], dtype=tlgpu.int32)
    logits, tok = fresh._jstep(tok, pos)                 # eager
    logits, tok = fresh._jstep(tok, pos)                 # traced: its outputs must stay as they are
    held, held_tok = logits.numpy().copy(), tok.tolist()
    fresh._jstep(tok, pos)                               # a replay, given the traced call's token
    assert fresh._jstep.traces() == 1 and fresh._jstep.memory_plan()["replays"] == 1
    np.testing.assert_array_equal(logits.numpy(), held)
    assert tok.tolist() == held_tok == [want[2]]
