"""bfloat16 / float16 GEMM on the mma.sync rows (csrc/gemm/gemm_tc.c's mma_half, kernels/matmul_tc.cl built with
-DTC_HALF: operands packed two values a word along k by tl_tc_pack_h16, mma.sync m16n8k16 with float32
accumulation, C rounded to the operands' dtype): the half path of compute capability 8.x, and of 9.0 with
TLGPU_TC_WGMMA=0 (how the GPU machine runs these checks on the real kernels). Elsewhere, in a test-hooks build,
a child process runs them on the emulated kernels (-DTC_EMULATE=1: the pack, the tiling and the m16n8k16
fragments in plain OpenCL C on PoCL); else they skip."""
import json

import numpy as np
import pytest

import tlgpu
from conftest import HALF_CHILD

CHECKS = HALF_CHILD + r"""
info = tlgpu._C._gemm_tc()
if info["capability"] == 0 or info["wgmma"]:
    print("RESULT " + json.dumps({"skip": "no mma.sync half path here (capability %s)" % info["capability"]}))
    raise SystemExit
rng, out = np.random.default_rng(7), {}
f64 = lambda v: v.astype(np.float64)
def launches():
    return tlgpu._C._gemm_tc()["mma_half_launches"]
tlgpu._C._gemm_tc("64x64x32w2x2s2")      # the row the emulation builds (small products leave bigger rows idle)
n0 = launches()
for dt, npdt in DTS:
    # exact on small integers (products and sums exact in float32, then one rounding): the four layouts, K odd
    # (a half word of zeros), K below one k-tile and across several, tile edges
    for m, k, n in [(131, 77, 65), (40, 9, 140), (64, 64, 128), (70, 300, 33)]:
        a = rng.integers(-3, 4, (m, k)).astype(npdt); b = rng.integers(-3, 4, (k, n)).astype(npdt)
        ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
        tat, tbt = tlgpu.tensor(np.ascontiguousarray(a.T)).T, tlgpu.tensor(np.ascontiguousarray(b.T)).T
        ref = (f64(a) @ f64(b)).astype(npdt)
        for lay, x, y in [("nn", ta, tb), ("nt", ta, tbt), ("tn", tat, tb), ("tt", tat, tbt)]:
            exact(x, y, ref, f"{npdt.__name__} {lay} {m}x{k}x{n}")
    # batches (equal and broadcast) and strided views at odd offsets
    x = rng.integers(-3, 4, (3, 70, 33)).astype(npdt); y = rng.integers(-3, 4, (33, 50)).astype(npdt)
    z = rng.integers(-3, 4, (3, 33, 50)).astype(npdt)
    tx, ty, tz = tlgpu.tensor(x), tlgpu.tensor(y), tlgpu.tensor(z)
    exact(tx, ty, (f64(x) @ f64(y)).astype(npdt), f"{npdt.__name__} broadcast b")
    exact(tx, tz, (f64(x) @ f64(z)).astype(npdt), f"{npdt.__name__} batched")
    exact(tx[1, 1:, 2:], ty[2:, 3:], (f64(x[1, 1:, 2:]) @ f64(y[2:, 3:])).astype(npdt), f"{npdt.__name__} views")
out["launches"] = launches() - n0
# random data: float32 accumulation, one rounding; error against float64 of the same rounded operands
errs = {}
for dt, npdt in DTS:
    a = rng.standard_normal((200, 300)).astype(npdt); b = rng.standard_normal((300, 150)).astype(npdt)
    ref = f64(a) @ f64(b)
    got = f64((tlgpu.tensor(a) @ tlgpu.tensor(b)).numpy())
    errs[npdt.__name__] = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    # inf and NaN pass through the products as float32 arithmetic gives them
    a[0, 0], b[5, 1] = np.inf, np.nan
    r = (tlgpu.tensor(a) @ tlgpu.tensor(b)).numpy()
    if not (np.isnan(r[:, 1]).all() and np.isinf(r[0]).sum() + np.isnan(r[0]).sum() == r.shape[1]):
        bad.append(f"{npdt.__name__} inf/nan")
out["errs"] = errs
# F.linear in a half dtype: forward and both weight-side gradients on the mma.sync rows
import tlgpu.nn.functional as F
lin = {}
for dt, npdt in DTS:
    x = rng.standard_normal((130, 40)).astype(npdt); w = (rng.standard_normal((70, 40)) * 0.2).astype(npdt)
    g = rng.standard_normal((130, 70)).astype(np.float32)
    tx, tw = tlgpu.tensor(x, requires_grad=True), tlgpu.tensor(w, requires_grad=True)
    h0 = launches()
    y = F.linear(tx, tw)
    (y.float() * tlgpu.tensor(g)).sum().backward()
    rel = lambda got, ref: float(np.abs(f64(got.numpy()) - ref).max() / np.abs(ref).max())
    lin[npdt.__name__] = {"dtypes": [str(t.dtype) for t in (y, tx.grad, tw.grad)], "launches": launches() - h0,
                          "y": rel(y, f64(x) @ f64(w).T), "dx": rel(tx.grad, g @ f64(w)), "dw": rel(tw.grad, g.T @ f64(x))}
out["linear"] = lin
out["bad"] = bad
info = tlgpu._C._gemm_tc()
out["errors"] = [info["mma_bf16_error"], info["mma_f16_error"]]
tlgpu._C._gemm_tc(None)
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def res():
    cap = tlgpu._C._gemm_tc()["capability"]
    from conftest import run_python
    env = {"TLGPU_TC_WGMMA": "0"} if cap >= 80 else {"TLGPU_TC_EMULATE": "1", "TLGPU_BUILD_OPTIONS": "-DTC_EMULATE=1",
                                                     "TLGPU_TC_WGMMA": "0"}
    r = run_python(CHECKS, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.split("RESULT ")[-1])
    if "skip" in out:
        pytest.skip(out["skip"])
    return out


def test_exact_every_layout_batch_and_view(res):
    """Integer operands: the four layouts, odd K, several k-tiles, batches equal and broadcast and strided views
    give numpy's product rounded once to the dtype, every product on the mma.sync half rows."""
    assert res["bad"] == [] and res["errors"] == [None, None]
    assert res["launches"] == 2 * (4 * 4 + 3)


def test_random_error_is_half_rounding(res):
    """Random normal operands: relative Frobenius error of one rounding to the dtype (float32 accumulation), far
    from a wrong product (a fragment mix-up gives errors near 1)."""
    assert 1e-5 < res["errs"]["bfloat16"] < 4e-3
    assert 1e-6 < res["errs"]["float16"] < 5e-4


def test_linear_forward_backward(res):
    """F.linear on half x and weight: the output and both gradients in that dtype within half precision of
    float64, the three products (y, dx, dw) on the mma.sync rows."""
    for name, tol in [("bfloat16", 1.6e-2), ("float16", 2e-3)]:
        r = res["linear"][name]
        assert r["dtypes"] == [name] * 3 and r["launches"] == 3
        for k in ("y", "dx", "dw"):
            assert r[k] < tol, (name, k, r[k])
