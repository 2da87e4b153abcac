"""bfloat16 / float16 GEMM on the tensor cores (csrc/gemm/gemm_tc.c's tl_gemm_tc_half, kernels/matmul_wgb.cl built
with -DWG_HALF: operands packed two values a word, wgmma m64nNk16, float32 accumulation, the result rounded to
the operands' dtype). On a device of compute capability 9.0 the checks run on the real kernels; elsewhere, in a
test-hooks build, in a child process on the emulated kernels (-DTC_EMULATE=1: the pack, the tiling, the swizzle
and the rounded store run in plain OpenCL C on PoCL); else they skip."""
import json

import numpy as np
import pytest

import tlgpu
from conftest import HALF_CHILD

CHECKS = HALF_CHILD + r"""
import tlgpu.nn.functional as F
info = tlgpu._C._gemm_tc()
if info["capability"] not in (1, 90) or not info["wgmma"]:
    print("RESULT " + json.dumps({"skip": "no 16-bit tensor-core path here (capability %s)" % info["capability"]}))
    raise SystemExit
rng, out = np.random.default_rng(5), {}
def launches():
    return tlgpu._C._gemm_tc()["half_launches"]
# exact on small integers (products and sums exact in float32, then one rounding): every production packed row,
# the four layouts, K odd (a half word of zeros), below one k-tile and across several, tile edges
tags = [t for t in info["configs"] if t.startswith("wgb")][:2]
n0 = launches()
for dt, npdt in DTS:
    for tag in tags:
        tlgpu._C._gemm_tc(tag)
        for m, k, n in [(131, 77, 65), (40, 9, 140), (64, 64, 128), (70, 300, 33)]:
            a = rng.integers(-3, 4, (m, k)).astype(npdt); b = rng.integers(-3, 4, (k, n)).astype(npdt)
            ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
            tat, tbt = tlgpu.tensor(np.ascontiguousarray(a.T)).T, tlgpu.tensor(np.ascontiguousarray(b.T)).T
            ref = (a.astype(np.float64) @ b.astype(np.float64)).astype(npdt)
            for lay, x, y in [("nn", ta, tb), ("nt", ta, tbt), ("tn", tat, tb), ("tt", tat, tbt)]:
                exact(x, y, ref, f"{npdt.__name__} {tag} {lay} {m}x{k}x{n}")
    tlgpu._C._gemm_tc(tags[-1])          # forced: products this small leave the real device's rows idle
    # batches (equal and broadcast), odd offsets and strides (the pack's 8-load path), aligned rows (its 16-byte one)
    x = rng.integers(-3, 4, (3, 70, 33)).astype(npdt); y = rng.integers(-3, 4, (33, 50)).astype(npdt)
    z = rng.integers(-3, 4, (3, 33, 50)).astype(npdt)
    tx, ty, tz = tlgpu.tensor(x), tlgpu.tensor(y), tlgpu.tensor(z)
    f64 = lambda v: v.astype(np.float64)
    exact(tx, ty, (f64(x) @ f64(y)).astype(npdt), "broadcast b")
    exact(tx, tz, (f64(x) @ f64(z)).astype(npdt), "batched")
    exact(tx[1, 1:, 2:], ty[2:, 3:], (f64(x[1, 1:, 2:]) @ f64(y[2:, 3:])).astype(npdt), "views")
    big = rng.integers(-3, 4, (96, 128)).astype(npdt)
    tbig = tlgpu.tensor(big)
    exact(tbig, tbig.T, (f64(big) @ f64(big).T).astype(npdt), "aligned x @ x.T")
out["launches"] = launches() - n0
tlgpu._C._gemm_tc(None)
# the size rule: a product that fills a quarter of the device runs on the tensor cores unforced
m = 64 * max(1, int(np.ceil(tlgpu.device().compute_units / 4 / 8)))
a = rng.integers(-3, 4, (m, 50)).astype(ml_dtypes.bfloat16); b = rng.integers(-3, 4, (50, 1024)).astype(ml_dtypes.bfloat16)
h0 = launches()
exact(tlgpu.tensor(a), tlgpu.tensor(b), (a.astype(np.float64) @ b.astype(np.float64)).astype(ml_dtypes.bfloat16), "size rule")
out["unforced"] = launches() - h0
tlgpu._C._gemm_tc(tags[-1])
# random data: float32 accumulation, one rounding; error against float64 of the same rounded operands
errs = {}
for dt, npdt in DTS:
    a = rng.standard_normal((200, 300)).astype(npdt); b = rng.standard_normal((300, 150)).astype(npdt)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    got = (tlgpu.tensor(a) @ tlgpu.tensor(b)).numpy().astype(np.float64)
    errs[npdt.__name__] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
out["errs"] = errs
# linear (bias, forward and backward) in one half dtype; autocast with float32 parameters
lin_err = {}
for dt, npdt in DTS:
    x = rng.standard_normal((130, 40)).astype(npdt); w = (rng.standard_normal((70, 40)) * 0.2).astype(npdt)
    b = rng.standard_normal(70).astype(npdt); g = rng.standard_normal((130, 70)).astype(np.float32)
    tx, tw, tb = (tlgpu.tensor(v, requires_grad=True) for v in (x, w, b))
    h0 = launches()
    y = F.linear(tx, tw, tb)
    (y.float() * tlgpu.tensor(g)).sum().backward()
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    rel = lambda got, ref: float(np.abs(got.numpy().astype(np.float64) - ref).max() / np.abs(ref).max())
    lin_err[npdt.__name__] = {"dtypes": [str(t.dtype) for t in (y, tx.grad, tw.grad, tb.grad)], "launches": launches() - h0,
                              "y": rel(y, x64 @ w64.T + b64), "dx": rel(tx.grad, g @ w64), "dw": rel(tw.grad, g.T @ x64),
                              "db": rel(tb.grad, g.sum(0))}
out["linear"] = lin_err
lin = tlgpu.nn.Linear(40, 70)
xa = tlgpu.tensor(rng.standard_normal((130, 40)).astype(np.float32))
h0 = launches()
with tlgpu.autocast(dtype=tlgpu.bfloat16):
    y = lin(xa)
(y.float() ** 2).mean().backward()
out["autocast"] = {"y": str(y.dtype), "wgrad": str(lin.weight.grad.dtype), "launches": launches() - h0}
out["bad"] = bad
tlgpu._C._gemm_tc(None)
print("RESULT " + json.dumps(out))
"""


def result():
    if tlgpu._C._gemm_tc()["capability"] == 90:          # the real kernels, here
        import subprocess, sys
        r = subprocess.run([sys.executable, "-c", CHECKS], capture_output=True, text=True)
    else:
        from conftest import run_python
        r = run_python(CHECKS, env={"TLGPU_TC_EMULATE": "1", "TLGPU_BUILD_OPTIONS": "-DTC_EMULATE=1"})
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.split("RESULT ")[-1])
    if "skip" in res:
        pytest.skip(res["skip"])
    return res


@pytest.fixture(scope="module")
def res():
    return result()


def test_exact_every_layout_batch_and_view(res):
    """Integer operands: every layout on both production packed rows, odd K, several k-tiles, batches equal and
    broadcast, strided views and aligned rows give numpy's product rounded once to the dtype, on the tensor cores."""
    assert res["bad"] == []
    assert res["launches"] == 2 * (2 * 4 * 4 + 4)
    assert res["unforced"] == 1


def test_random_error_is_half_rounding(res):
    """Random normal operands: relative Frobenius error of one rounding to the dtype (2^-9 bfloat16, 2^-12 float16,
    with room for the float32 accumulation), far from a wrong product."""
    assert 1e-5 < res["errs"]["bfloat16"] < 4e-3
    assert 1e-6 < res["errs"]["float16"] < 5e-4


def test_linear_half_forward_backward(res):
    """F.linear on bfloat16/float16 x, weight and bias: output and gradients in that dtype within half precision
    of float64, the three products (y, dx, dw) on the tensor cores."""
    for name, tol in [("bfloat16", 1.6e-2), ("float16", 2e-3)]:
        r = res["linear"][name]
        assert r["dtypes"] == [name] * 4
        assert r["launches"] == 3
        for k in ("y", "dx", "dw", "db"):
            assert r[k] < tol, (name, k, r[k])


def test_autocast_linear_on_tensor_cores(res):
    """Under autocast(bfloat16), a float32 nn.Linear runs its product (and the weight gradient's) in bfloat16 on
    the tensor cores; its parameters keep float32 gradients."""
    assert res["autocast"] == {"y": "bfloat16", "wgrad": "float32", "launches": 2}
