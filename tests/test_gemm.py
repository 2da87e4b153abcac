"""The per-device GEMM kernels against numpy float64: every layout (nn, nt = x @ w.T, transposed A),
batched, odd sizes at tile edges; the CLBlast-style local-memory kernel with several -D parameter sets
(TLGPU_GEMM_PARAMS, subprocesses: parameters are read once per process); a bad override's error."""
import numpy as np
import pytest

import tlgpu
from conftest import run_python

SHAPES = [(1, 1, 1), (7, 33, 5), (33, 70, 65), (65, 16, 63), (130, 7, 129), (5, 1025, 33)]


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def check(got, ref, k):
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-5 * max(1.0, np.sqrt(k)))


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_layouts(rng, m, k, n):
    a, b, w = randn(rng, m, k), randn(rng, k, n), randn(rng, n, k)
    a64 = a.astype(np.float64)
    ta = tlgpu.tensor(a)
    at = tlgpu.tensor(np.ascontiguousarray(a.T)).T                  # A with unit stride along m
    check(ta @ tlgpu.tensor(b), a64 @ b, k)                        # nn
    check(ta @ tlgpu.tensor(w).T, a64 @ w.T, k)                    # nt: x @ w.T without a copy
    check(at @ tlgpu.tensor(b), a64 @ b, k)
    check(at @ tlgpu.tensor(w).T, a64 @ w.T, k)                    # both transposed: the local-memory kernel


def test_batched(rng):
    a, w = randn(rng, 3, 17, 40), randn(rng, 3, 9, 40)
    check(tlgpu.tensor(a) @ tlgpu.tensor(w).transpose(1, 2), a.astype(np.float64) @ w.transpose(0, 2, 1), 40)
    b = randn(rng, 40, 33)
    check(tlgpu.tensor(a) @ tlgpu.tensor(b), a.astype(np.float64) @ b, 40)


CODE = """
import numpy as np, tlgpu
rng = np.random.default_rng(2)
for (m, k, n) in [(1, 1, 1), (7, 33, 5), (33, 70, 65), (130, 17, 129), (9, 300, 260), (128, 64, 128), (256, 96, 192)]:
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose((ta @ tlgpu.tensor(b.T.copy()).T).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    tb3 = tlgpu.tensor(np.stack([b, 2 * b]))
    np.testing.assert_allclose((ta @ tb3).numpy(), np.stack([a @ b, 2 * a @ b]), rtol=1e-4, atol=1e-4)
print("ok", tlgpu._C._gemm_params())
"""


@pytest.mark.parametrize("params", ["DIRECT=0", "DIRECT=0,MWG=32,NWG=64,KWG=8,MDIMC=8,NDIMC=4,VW=8",
                                    "DIRECT=0,MWG=16,NWG=16,KWG=4,MDIMC=16,NDIMC=16,VW=1",
                                    "DIRECT=0,MVEC=1", "DIRECT=0,PREFETCH=1,MVEC=1", "DIRECT=0,PREFETCH=1,MVEC=1,DBUF=1",
                                    "DIRECT=0,PREFETCH=1,DBUF=1,INTERIOR=1,MWG=32,NWG=32,MDIMC=8,NDIMC=8",
                                    "DIRECT=0,PREFETCH=1,INTERIOR=1,MWG=32,NWG=32,KWG=32,MDIMC=8,NDIMC=8",
                                    "DIRECT=1,CMR=3,CNV=1,CVW=8,CNR=5"])
def test_parameter_sets(params):
    r = run_python(CODE, env={"TLGPU_GEMM_PARAMS": params})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_bad_override():
    r = run_python("import tlgpu\ntry:\n    tlgpu.ones(2, 2) @ tlgpu.ones(2, 2)\nexcept ValueError as e:\n"
                   "    print('ValueError', e)\n", env={"TLGPU_GEMM_PARAMS": "MWG=60,MDIMC=16"})
    assert "ValueError" in r.stdout and "MWG must be a multiple of MDIMC" in r.stdout, r.stdout + r.stderr


TIER_CODE = """
import numpy as np, tlgpu
rng = np.random.default_rng(3)
assert tlgpu._C._gemm_params(1)["MWG"] == 32 and tlgpu._C._gemm_params(2)["MWG"] == 16
# PoCL here has 2 compute units: a tier runs when its grid has >= 2 work-groups (3/4 of them, rounded up)
for (m, k, n, batch, tier) in [(65, 40, 64, 1, 0), (64, 48, 64, 1, 1), (64, 48, 64, 2, 0), (32, 33, 64, 1, 1),
                               (32, 20, 32, 1, 2), (17, 19, 9, 1, 2), (16, 64, 16, 3, 0)]:
    assert tlgpu._C._gemm_tier(m, n, batch) == tier, (m, n, batch, tlgpu._C._gemm_tier(m, n, batch))
    a, b = rng.standard_normal((batch, m, k)), rng.standard_normal((batch, k, n))
    ta = tlgpu.tensor(a)
    np.testing.assert_allclose((ta @ tlgpu.tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose((ta @ tlgpu.tensor(b.transpose(0, 2, 1).copy()).transpose(1, 2)).numpy(), a @ b,
                               rtol=1e-4, atol=1e-4)
print("ok")
"""


def test_tiers():
    """Three parameter sets, each its own program: the tier whose grid fills the device runs, and all three
    agree with numpy (the CPU table runs the direct kernels, so the tiled kernel is forced with DIRECT=0)."""
    env = {"TLGPU_GEMM_PARAMS": "DIRECT=0,PREFETCH=1,DBUF=1,INTERIOR=1",
           "TLGPU_GEMM_PARAMS_MID": "MWG=32,NWG=32,PREFETCH=1,DBUF=1,INTERIOR=1,MVEC=1",
           "TLGPU_GEMM_PARAMS_SMALL": "MWG=16,NWG=16,VW=2,PREFETCH=1"}
    if tlgpu.device().compute_units != 2:
        pytest.skip("the tier picks below assume 2 compute units")
    r = run_python(TIER_CODE, env=env)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


def test_bad_tier_override():
    r = run_python("import tlgpu\ntry:\n    tlgpu._C._gemm_params(1)\nexcept ValueError as e:\n    print('ValueError', e)\n",
                   env={"TLGPU_GEMM_PARAMS_MID": "NWG=24"})
    assert "TLGPU_GEMM_PARAMS_MID='NWG=24'" in r.stdout and "NWG must be a multiple" in r.stdout, r.stdout + r.stderr


MV_CODE = """
import numpy as np, tlgpu
rng = np.random.default_rng(5)
for k, n in [(4096, 37), (33, 9), (1027, 130)]:
    w = rng.standard_normal((n, k)).astype(np.float32)
    tw = tlgpu.tensor(w)
    for m in range(1, 9):                                   # every padded row-count variant, and its edges
        x = rng.standard_normal((m, k)).astype(np.float32)
        got = (tlgpu.tensor(x) @ tw.T).numpy()
        np.testing.assert_allclose(got, x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4 * np.sqrt(k))
        r = rng.standard_normal((m, n)).astype(np.float32)       # addmm: the residual added in the store
        got = tlgpu.addmm(tlgpu.tensor(r), tlgpu.tensor(x), tw.T).numpy()
        np.testing.assert_allclose(got, r + x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4 * np.sqrt(k))
print("ok")
"""


@pytest.mark.parametrize("params", ["", "DIRECT=0"])
def test_mul_mv_every_row_count(params):
    r = run_python(MV_CODE, env={"TLGPU_GEMM_PARAMS": params})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr
