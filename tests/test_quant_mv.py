"""The integer-dot mul_mv kernels (llama.cpp's mmvq design), forced on this device with tlgpu.quant._MV_IMPL (on
PoCL: the portable dot and the local-memory reductions): "dp4a" (kernels/quant_mvq.h, one launch, x staged per
work-group), "q8x" / "q8x8" (kernels/quant_mvx.h, x quantized once, then 4 or 8 weight rows a warp) and "mma"
(kernels/quant_mvm.cl, the same x, then int8 tensor-core tiles; here their emulation through local memory,
fragment by fragment), for q4_0 and q8_0 with 1-8 activation rows, several staging chunks (K past a chunk and not
a multiple of it) and edge work-groups (N not a multiple of the rows a group owns): against a float64 product of
the dequantized weights with x quantized as the kernels do (int8 blocks of 32, dx = amax / 127, round to even),
and against the exact float64 product within the activation-quantization bound sum |w| * amax / 254; the four
give the same bits, with and without the prologue. The prologue (glu, rms_norm) against numpy on every kernel
path; its bad inputs; the addmm store."""
import numpy as np
import pytest

import tlgpu
from tlgpu import quant

QUANTIZE = {"q4_0": quant.quantize_q4_0, "q8_0": quant.quantize_q8_0}


@pytest.fixture
def impl():
    old = quant._MV_IMPL
    yield lambda name: setattr(quant, "_MV_IMPL", name)
    quant._MV_IMPL = old


def quantize_x(x):
    """x (R, K) as the kernel stages it: (q int8 values as float64, dx float32 per block of 32)."""
    r, k = x.shape
    b = x.astype(np.float32).reshape(r, k // 32, 32)
    dx = np.abs(b).max(-1) / np.float32(127.0)
    with np.errstate(divide="ignore"):
        inv = np.where(dx != 0, np.float32(1.0) / dx, np.float32(0.0)).astype(np.float32)
    q = np.clip(np.rint(b * inv[..., None]), -127, 127)
    return q.astype(np.float64), dx.astype(np.float32)


def emulated(x, deq):
    """p(x) @ deq.T with x quantized like the kernel (float64 sums), and a tolerance per output: float32
    accumulation, plus one rounding step of x's quantization at up to two elements a row (the device's
    1 / dx may differ from numpy's by an ulp)."""
    q, dx = quantize_x(x)
    xq = (q * dx[..., None].astype(np.float64)).reshape(x.shape)
    ref = xq @ deq.T
    mag = np.abs(xq) @ np.abs(deq).T
    step = (dx.max(-1)[:, None] * np.abs(deq).max(-1)[None, :]).astype(np.float64)
    return ref, 1e-5 * mag + 2 * step + 1e-6


def bound(x, deq):
    """The activation-quantization bound of |p(x) @ deq.T - the kernel's|: sum_k |w_k| dx_block / 2."""
    r, k = x.shape
    half = np.abs(x.astype(np.float64)).reshape(r, k // 32, 32).max(-1) / 254
    return half @ np.abs(deq).reshape(deq.shape[0], k // 32, 32).sum(-1).T


SHAPES = [(1, 5, 32), (2, 9, 64), (3, 33, 1024), (4, 7, 64), (5, 300, 96), (8, 70, 4096), (2, 9, 16384),
          (7, 129, 256)]


INT_IMPLS = ["dp4a", "q8x", "q8x8", "mma"]
LAUNCHES = {"dp4a": 1, "q8x": 2, "q8x8": 2, "mma": 2}   # q8x, mma: the quantize kernel, then the product


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
@pytest.mark.parametrize("name", INT_IMPLS)
def test_dp4a_products(rng, impl, kind, name):
    impl(name)
    for (m, n, k) in SHAPES:                  # (8, 70, 4096) and (2, 9, 16384): x staged in two chunks
        w, x = rng.standard_normal((n, k)).astype(np.float32), rng.standard_normal((m, k)).astype(np.float32)
        w[0, :32] = 0.0                                  # a zero weight block
        x[0, 32:64] = 0.0                                # a zero activation block: dx = 0
        x[-1, 5] = 40.0                                  # an outlier: one coarse block
        q = QUANTIZE[kind](w)
        deq = q.dequantize().numpy().astype(np.float64)
        got = quant.matmul(tlgpu.tensor(x), q).numpy()
        ref, tol = emulated(x, deq)
        assert (np.abs(got - ref) <= tol).all(), (m, n, k, np.abs(got - ref).max())
        exact = x.astype(np.float64) @ deq.T
        assert (np.abs(got - exact) <= bound(x, deq) + 1e-4 * np.abs(exact) + 1e-5).all()
        res = rng.standard_normal((m, n)).astype(np.float32)
        tr, tx = tlgpu.tensor(res), tlgpu.tensor(x)
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        y = quant.addmm(tr, tx, q)
        assert tlgpu.stream_stats()["enqueued"] == LAUNCHES[name]   # the residual added as the kernel stores
        assert (np.abs(y.numpy() - res - ref) <= tol + 1e-5 * np.abs(res)).all()


def np_prologue(x, k, norm=None, glu=False, eps=1e-5):
    x = x.astype(np.float64)
    if glu:
        x = x[:, :k] / (1 + np.exp(-x[:, :k])) * x[:, k:]
    if norm is not None:
        x = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * norm
    return x


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
@pytest.mark.parametrize("path", ["old", "dp4a", "q8x8", "mma", "gemm"])
def test_prologue(rng, impl, kind, path):
    """norm and glu against numpy on each kernel path: the float kernels (a prologue launch, then the product,
    within 1e-4), the integer-dot one (within the quantization bound of the prologue's output) and the
    many-row GEMM path (the prologue kernel, then the GEMM)."""
    impl("old" if path == "gemm" else path)
    n, k = 37, 1024
    q = QUANTIZE[kind](rng.standard_normal((n, k)).astype(np.float32))
    deq = q.dequantize().numpy().astype(np.float64)
    nw = (1 + 0.5 * rng.standard_normal(k)).astype(np.float32)
    rows = 80 if path == "gemm" else 3
    for glu, norm, eps in ((True, None, 1e-5), (False, nw, 1e-5), (True, nw, 1e-2)):
        x = (3 * rng.standard_normal((rows, 2 * k if glu else k))).astype(np.float32)
        p = np_prologue(x, k, norm, glu, eps)
        ref = p @ deq.T
        kw = dict(norm=None if norm is None else tlgpu.tensor(norm), eps=eps, glu=glu)
        got = quant.matmul(tlgpu.tensor(x), q, **kw).numpy()
        tol = 1e-4 * (np.abs(p) @ np.abs(deq).T) + 1e-5
        if path in INT_IMPLS:
            tol = tol + bound(p, deq)
        assert (np.abs(got - ref) <= tol).all(), (glu, norm is None, np.abs(got - ref).max())
        res = rng.standard_normal((rows, n)).astype(np.float32)
        got = quant.addmm(tlgpu.tensor(res), tlgpu.tensor(x), q, **kw).numpy()
        assert (np.abs(got - res - ref) <= tol + 1e-6 * np.abs(res)).all()
    if path in INT_IMPLS:                                # the prologue staged with x: no launch of its own
        x = tlgpu.tensor(rng.standard_normal((2, 2 * k)).astype(np.float32))
        tn = tlgpu.tensor(nw)
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        quant.matmul(x, q, glu=True, norm=tn)
        assert tlgpu.stream_stats()["enqueued"] == LAUNCHES[path]


@pytest.mark.parametrize("kind", ["q4_0", "q8_0"])
def test_int_kernels_same_bits(rng, impl, kind):
    """The one-launch and the two-launch integer kernels (4 and 8 weight rows a warp, tensor cores) give identical
    results, so a prompt's rows and its decode steps agree whichever runs: each row count 1-8, chunked staging
    (K 5120 with 8 rows, 16384 with 2: a last chunk shorter than the others), N not a multiple of a group's
    rows, with the glu and norm prologue and the residual."""
    cases = [(r, 37, 64 * r) for r in range(1, 9)] + [(8, 45, 5120), (2, 21, 16384)]
    for i, (m, n, k) in enumerate(cases):
        q = QUANTIZE[kind](rng.standard_normal((n, k)).astype(np.float32))
        glu, norm = i % 2 == 1, i % 3 != 0
        x = tlgpu.tensor((2 * rng.standard_normal((m, 2 * k if glu else k))).astype(np.float32))
        kw = dict(glu=glu, norm=tlgpu.tensor((1 + rng.standard_normal(k)).astype(np.float32)) if norm else None)
        res = tlgpu.tensor(rng.standard_normal((m, n)).astype(np.float32))
        outs = []
        for name in INT_IMPLS:
            impl(name)
            outs.append((quant.matmul(x, q, **kw).numpy(), quant.addmm(res, x, q, **kw).numpy()))
        for name, (y, z) in zip(INT_IMPLS[1:], outs[1:]):
            assert np.array_equal(y, outs[0][0]) and np.array_equal(z, outs[0][1]), (name, m, n, k, glu, norm)
        assert np.abs(outs[0][0]).max() > 0


def test_prologue_errors(rng):
    q = quant.quantize_q4_0(rng.standard_normal((6, 64)).astype(np.float32))
    x = tlgpu.tensor(rng.standard_normal((2, 64)).astype(np.float32))
    with pytest.raises(ValueError, match="row length 64"):
        quant.matmul(x, q, norm=tlgpu.tensor(np.ones(32, np.float32)))
    with pytest.raises(TypeError, match="norm must be float32, got int32"):
        quant.matmul(x, q, norm=tlgpu.tensor(np.ones(64, np.int32)))
    with pytest.raises(ValueError, match="glu takes x of an even width"):
        quant.matmul(tlgpu.tensor(np.ones((2, 129), np.float32)), q, glu=True)
    with pytest.raises(ValueError, match="2 x 64"):
        quant.matmul(x, q, glu=True)
    with pytest.raises(TypeError, match="x must be float32, got int32"):
        quant.addmm(x, tlgpu.tensor(np.ones((2, 64), np.int32)), q)
    with pytest.raises(ValueError, match="row length"):           # the C function checks too
        q._fn("mul_mv")(x, q.qs, q.d, 6, 64, None, tlgpu.tensor(np.ones(3, np.float32)))
    with pytest.raises(TypeError, match="float32"):
        q._fn("mul_mv")(x, q.qs, q.d, 6, 64, None, tlgpu.tensor(np.ones(64, np.int32)))
    with pytest.raises(ValueError, match="glu"):
        q._fn("mul_mv")(x, q.qs, q.d, 6, 64, None, None, 1e-5, 1)
    with pytest.raises(ValueError, match="even width"):
        tlgpu._C._quant_mv_prologue(tlgpu.tensor(np.ones((2, 5), np.float32)), None, 1e-5, 1)
    with pytest.raises(ValueError, match="_MV_IMPL"):
        old, quant._MV_IMPL = quant._MV_IMPL, "fast"
        try:
            quant.matmul(x, q)
        finally:
            quant._MV_IMPL = old


@pytest.mark.slow                # a cold build of the GPU choice on PoCL (~17 s): make test-slow
def test_auto_picks_dp4a_on_gpu_settings():
    """With the GPU's kernel choice (DIRECT=0) "auto" runs the integer-dot kernel: its result is the emulated
    one, not the float kernel's, for one row and for two."""
    from conftest import run_python
    code = """
import numpy as np, sys, tlgpu
sys.path.insert(0, 'tests')
from tlgpu import quant
from test_quant_mv import emulated
rng = np.random.default_rng(2)
w, x = rng.standard_normal((20, 256)).astype(np.float32), rng.standard_normal((1, 256)).astype(np.float32)
q = quant.quantize_q8_0(w)
deq = q.dequantize().numpy().astype(np.float64)
ref, tol = emulated(x, deq)
got = quant.matmul(tlgpu.tensor(x), q).numpy()
assert (np.abs(got - ref) <= tol).all()
assert np.abs(got - x @ deq.T).max() > 1e-4        # x was quantized
x2 = rng.standard_normal((2, 256)).astype(np.float32)
ref2, tol2 = emulated(x2, deq)
assert (np.abs(quant.matmul(tlgpu.tensor(x2), q).numpy() - ref2) <= tol2).all()
print("ok")
"""
    r = run_python(code, env={"TLGPU_GEMM_PARAMS": "DIRECT=0"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


@pytest.mark.slow                # a cold build with other options on PoCL (~30 s): make test-slow
def test_stage8_form_on_pocl():
    """The one-launch kernel's NVIDIA staging form (8 lanes a block; -DMVQ_STAGE8=1, the 8-lane max and sum by
    local memory here instead of shuffles) against the emulation, and bit for bit against the two-launch
    kernel with the glu and norm prologue: chunked (8 rows of 5120), a short K, one row."""
    from conftest import run_python
    code = """
import numpy as np, sys, tlgpu
sys.path.insert(0, 'tests')
from tlgpu import quant
from test_quant_mv import emulated
rng = np.random.default_rng(5)
for kind, (m, n, k) in [("q4_0", (8, 45, 5120)), ("q8_0", (3, 37, 96)), ("q4_0", (1, 70, 2048))]:
    q = (quant.quantize_q4_0 if kind == "q4_0" else quant.quantize_q8_0)(rng.standard_normal((n, k)).astype(np.float32))
    deq = q.dequantize().numpy().astype(np.float64)
    x = rng.standard_normal((m, k)).astype(np.float32)
    ref, tol = emulated(x, deq)
    quant._MV_IMPL = "dp4a"
    assert (np.abs(quant.matmul(tlgpu.tensor(x), q).numpy() - ref) <= tol).all(), (kind, m, n, k)
    kw = dict(glu=True, norm=tlgpu.tensor((1 + rng.standard_normal(k)).astype(np.float32)))
    xg = tlgpu.tensor(rng.standard_normal((m, 2 * k)).astype(np.float32))
    a = quant.matmul(xg, q, **kw).numpy()
    quant._MV_IMPL = "q8x"
    assert np.array_equal(a, quant.matmul(xg, q, **kw).numpy()), (kind, m, n, k)
print("ok")
"""
    r = run_python(code, env={"TLGPU_BUILD_OPTIONS": "-DMVQ_STAGE8=1"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


@pytest.mark.slow                # a cold build with other options on PoCL (~30 s): make test-slow
def test_mma_async_form_on_pocl():
    """The tensor-core kernel's MVM_ASYNC layout (-DMVM_ASYNC=1: the weights copied into two chunk buffers in
    their own order, 16-byte units swizzled by the row, the scales as halves; plain copies here, cp.async on
    NVIDIA) gives the other integer kernels' bits: each format, chunked K (a short last chunk), N not a
    multiple of a group's rows, 2-8 rows, with the glu and norm prologue and the residual."""
    from conftest import run_python
    code = """
import numpy as np, tlgpu
from tlgpu import quant
rng = np.random.default_rng(7)
for kind, (m, n, k) in [("q4_0", (8, 45, 5120)), ("q8_0", (8, 45, 5120)), ("q4_0", (2, 21, 16384)),
                        ("q8_0", (3, 37, 1056)), ("q4_0", (5, 70, 96))]:
    q = (quant.quantize_q4_0 if kind == "q4_0" else quant.quantize_q8_0)(rng.standard_normal((n, k)).astype(np.float32))
    kw = dict(glu=True, norm=tlgpu.tensor((1 + rng.standard_normal(k)).astype(np.float32)))
    xg = tlgpu.tensor(rng.standard_normal((m, 2 * k)).astype(np.float32))
    res = tlgpu.tensor(rng.standard_normal((m, n)).astype(np.float32))
    outs = []
    for name in ("q8x8", "mma"):
        quant._MV_IMPL = name
        outs.append((quant.matmul(xg, q, **kw).numpy(), quant.addmm(res, xg, q, **kw).numpy()))
    assert np.abs(outs[0][0]).max() > 0
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1]), (kind, m, n, k)
print("ok")
"""
    r = run_python(code, env={"TLGPU_BUILD_OPTIONS": "-DMVM_ASYNC=1"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
