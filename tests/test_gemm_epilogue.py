"""The store epilogue (kernels/mm_epi.h: scale, bias, residual, ReLU/Tanh as C is stored) in the NVIDIA GEMM
kernels: matmul_sg.cl (float32; forced here with TLGPU_SG=force), matmul_tc.cl (TF32 mma.sync), matmul_wg.cl
(wgmma, x @ w.T) and matmul_wgb.cl (packed wgmma). On PoCL the tensor-core kernels run emulated
(-DTC_EMULATE=1, a child process with the test hooks' TLGPU_TC_EMULATE); on an NVIDIA GPU of compute
capability 8.0 or more the real ones run in-process. Per kernel kind: linear with a bias and ReLU/Tanh
(_C.linear(activation=)) and addmm with a bias, against numpy (operands of small integers: the products are
exact in TF32, so the float32 steps after them are reproduced bit for bit where the device computes as numpy
does); a jitted relu(x @ w * 0.5 + b + h) whose trace shows the product taking all four steps
("*scale+bias+residual+relu") and whose replays equal eager calls; a batched product with a residual."""
import json
import os
import sys

import numpy as np
import pytest

import tlgpu
from tlgpu import _C

HERE = os.path.dirname(os.path.abspath(__file__))
MMA, WG, WGB = "64x64x32w2x2s2", "wg64x128x16s4", "wgb64x128x16s3"   # the rows the emulation builds


def _same(got, want, exact):
    got, want = np.asarray(got), np.asarray(want)
    if exact:
        return got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32))
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)


def checks(kind, exact, fused=True):
    """The checks of one kernel kind ("sg", "mma", "wg", "wgb"; the caller forces it); a list of what failed
    (empty: all passed) and the commands of the jitted product. exact: the device computes float32 steps
    (and its ReLU) as numpy does (PoCL, the emulation); else a few ulps are allowed, as in test_jit_fuse.
    fused=False: a kernel without the store epilogue (matmul_sg): the same values, nothing moved into it."""
    rng, bad = np.random.default_rng(29), []
    M, K, N = 40, 24, 72
    ints = lambda *s: rng.integers(-3, 4, s).astype(np.float32)          # noqa: E731
    f32 = lambda *s: rng.standard_normal(s).astype(np.float32)           # noqa: E731
    x, w, b = ints(M, K), ints(N, K), f32(N)
    tx, tw, tb = tlgpu.tensor(x), tlgpu.tensor(w), tlgpu.tensor(b)
    prod = (x.astype(np.float64) @ w.T.astype(np.float64)).astype(np.float32)   # exact: small integers
    with tlgpu.no_grad():
        for act in ("relu", "tanh"):
            got = _C.linear(tx, tw, tb, activation=act).numpy()
            z = prod + b
            if act == "relu" and not _same(got, np.maximum(z, np.float32(0)), exact):
                bad.append(f"{kind} linear+bias+relu")
            if act == "tanh" and not np.allclose(got, np.tanh(z.astype(np.float64)), rtol=0, atol=2e-6):
                bad.append(f"{kind} linear+bias+tanh")
        got = _C.addmm(tb, tx, tw.T).numpy()
        if not _same(got, prod + b, exact):
            bad.append(f"{kind} addmm bias")
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        _C.linear(tx, tw, tb, activation="relu")
        n = tlgpu.stream_stats()["enqueued"]          # the product storing bias and ReLU (after the packs)
        if fused and n != (3 if kind == "wgb" else 1):
            bad.append(f"{kind} linear+bias+relu took {n} commands")
        for name, bv in [("at an offset", tlgpu.tensor(f32(N + 1))[1:]), ("strided", tlgpu.tensor(f32(2 * N))[::2])]:
            got = _C.linear(tx, tw, bv, activation="relu").numpy()    # not fused: added, then the ReLU
            if not _same(got, np.maximum(prod + bv.numpy(), np.float32(0)), exact):
                bad.append(f"{kind} linear, bias {name}, relu")
        if kind != "wg":                                     # wgmma rows: x @ w.T only
            wn = ints(K, N)
            got = _C.linear(tx, tlgpu.tensor(wn).T, tb, activation="relu").numpy()   # x @ wn: B along n
            ref = np.maximum((x.astype(np.float64) @ wn).astype(np.float32) + b, np.float32(0))
            if not _same(got, ref, exact):
                bad.append(f"{kind} linear, weight along n")

    def f(x, w, b, h):
        return (x @ w.T * 0.5 + b + h).relu()

    jf, cmds = tlgpu.jit(f), []
    for rep in range(4):
        h = f32(M, N)
        ins = [tlgpu.tensor(a) for a in (x, w, b, h)]
        eager, jitted = f(*ins).numpy(), jf(*ins).numpy()
        ref = np.maximum((prod * np.float32(0.5) + b) + h, np.float32(0))
        if not _same(jitted, eager, exact) or not _same(eager, ref, exact):
            bad.append(f"{kind} jit scale+bias+residual+relu, call {rep}")
    cmds = jf.commands()
    if fused != any(c.startswith("tl_gemm") and c.endswith("*scale+bias+residual+relu") for c in cmds):
        bad.append(f"{kind} fused is not {fused}: {cmds}")

    def g(x3, w, h3):
        return (x3 @ w.T + h3).relu()

    x3 = ints(3, 20, K)
    jg = tlgpu.jit(g)
    for rep in range(4):
        h3 = f32(3, 20, N)
        ins = [tlgpu.tensor(a) for a in (x3, w, h3)]
        eager, jitted = g(*ins).numpy(), jg(*ins).numpy()
        ref = np.maximum((x3.astype(np.float64) @ w.T).astype(np.float32) + h3, np.float32(0))
        if not _same(jitted, eager, exact) or not _same(eager, ref, exact):
            bad.append(f"{kind} jit batched residual+relu, call {rep}")
    if fused != any(c.startswith("tl_gemm") and c.endswith("+residual+relu") for c in jg.commands()):
        bad.append(f"{kind} batched fused is not {fused}: {jg.commands()}")

    def inplace(h, x, w):                                # the residual is the output itself
        h += x @ w.T
        return h

    ji = tlgpu.jit(inplace)
    for rep in range(4):
        h = f32(M, N)
        he, hj = tlgpu.tensor(h), tlgpu.tensor(h)
        inplace(he, tlgpu.tensor(x), tlgpu.tensor(w))
        ji(hj, tlgpu.tensor(x), tlgpu.tensor(w))
        if not _same(hj.numpy(), he.numpy(), exact) or not _same(he.numpy(), h + prod, exact):
            bad.append(f"{kind} jit in place, call {rep}")
    moved = any(c.startswith("tl_gemm") and c.endswith("+residual") for c in ji.commands())
    if moved != (kind == "wgb"):                         # the store note's res_alias: packed rows only here
        bad.append(f"{kind} in place: {ji.commands()}")
    return bad, cmds


def split_checks(kind, exact):
    """A product split in K (its partials' reduction stores it, without an epilogue): linear with a bias and
    ReLU still right (added after), and a jitted chain whose product claims no epilogue; what failed."""
    rng, bad = np.random.default_rng(30), []
    x, w = (rng.integers(-3, 4, (40, 24)).astype(np.float32), rng.integers(-3, 4, (72, 24)).astype(np.float32))
    b = rng.standard_normal(72).astype(np.float32)
    prod = (x.astype(np.float64) @ w.T).astype(np.float32)
    with tlgpu.no_grad():
        got = _C.linear(tlgpu.tensor(x), tlgpu.tensor(w), tlgpu.tensor(b), activation="relu").numpy()
    if not _same(got, np.maximum(prod + b, np.float32(0)), exact):
        bad.append(f"{kind} split: linear+bias+relu")

    def f(x, w, b):
        return (x @ w.T + b).relu()
    jf = tlgpu.jit(f)
    for rep in range(3):
        ins = [tlgpu.tensor(a) for a in (x, w, b)]
        if not _same(jf(*ins).numpy(), f(*ins).numpy(), exact):
            bad.append(f"{kind} split: jit, call {rep}")
    cmds = jf.commands()
    if "tl_gemm_splitk_reduce_f32" not in cmds or any(c.startswith("tl_gemm") and "+" in c for c in cmds):
        bad.append(f"{kind} split: {cmds}")
    return bad


def tc_names():
    return {"mma": "tl_gemm_tc_", "wg": "tl_gemm_wg_", "wgb": "tl_gemm_wgb_"}


def run_tc(kind, tag, exact):
    """checks() on the tensor-core row `tag` (forced); also that the product ran there."""
    tlgpu.set_matmul_precision("tf32")
    _C._gemm_tc(tag)
    try:
        bad, cmds = checks(kind, exact)
    finally:
        _C._gemm_tc(None)
    if not any(c.startswith(tc_names()[kind]) for c in cmds):
        bad.append(f"{kind}: the product did not run on {tag}: {cmds}")
    return bad


CHILD = """
import json, sys
sys.path.insert(0, HERE)
import tlgpu
info = tlgpu._C._gemm_tc()
if info["capability"] != 1:
    print("RESULT " + json.dumps({"skip": "no test hooks (TLGPU_TEST_HOOKS=1 build) or a real TF32 device"}))
    raise SystemExit
tlgpu._C._cpu_blas(enable=False)
import test_gemm_epilogue as t
if SPLIT:
    tlgpu.set_matmul_precision("tf32")
    tlgpu._C._gemm_tc(TAG)
    print("RESULT " + json.dumps({"bad": t.split_checks(KIND, True)}))
else:
    print("RESULT " + json.dumps({"bad": t.run_tc(KIND, TAG, True)}))
"""


@pytest.mark.parametrize("kind,tag,split", [("mma", MMA, 0), ("wg", WG, 0), ("wgb", WGB, 0), ("wgb", WGB, 3)])
def test_tensor_core_epilogue_emulated(kind, tag, split):
    """matmul_tc.cl, matmul_wg.cl, matmul_wgb.cl (float32 build) emulated on this device (PoCL in make test):
    the epilogue's values bit for bit against numpy and eager, the jit moving four steps into the store; the
    packed row split in K (TLGPU_GEMM_SPLITK=3) claims no epilogue."""
    from conftest import run_python
    code = (CHILD.replace("HERE", repr(HERE)).replace("KIND", repr(kind)).replace("TAG", repr(tag))
            .replace("SPLIT", str(split)))
    env = {"TLGPU_TC_EMULATE": "1", "TLGPU_BUILD_OPTIONS": "-DTC_EMULATE=1"}
    r = run_python(code, env=dict(env, TLGPU_GEMM_SPLITK=str(split)) if split else env)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.split("RESULT ")[-1])
    if "skip" in res:
        pytest.skip(res["skip"])
    assert res["bad"] == []


def _gpu_tf32():
    return _C._gemm_tc()["capability"] >= 80


@pytest.mark.parametrize("kind,tags", [("mma", ["128x128x16w2x2s2", MMA]), ("wg", ["wg128x128x16s3", WG]),
                                       ("wgb", ["wgb128x128x8s5", WGB])])
def test_tensor_core_epilogue_gpu(kind, tags):
    """The real kernels (inline PTX) on an NVIDIA GPU: every production row of each kind; the wgmma rows on
    compute capability 9.0 only."""
    if not _gpu_tf32():
        pytest.skip("no NVIDIA device of compute capability 8.0 or more")
    if kind != "mma" and _C._gemm_tc()["capability"] < 90:
        pytest.skip("wgmma: compute capability 9.0")
    bad = []
    for tag in tags:
        bad += run_tc(kind, tag, False)
    assert bad == []


@pytest.fixture
def sg_forced(monkeypatch):
    monkeypatch.setenv("TLGPU_SG", "force")
    if _C._gemm_sg()["mode"] != "force":
        pytest.skip("TLGPU_SG=force needs the test hooks (TLGPU_TEST_HOOKS=1 build, see Makefile)")
    before = _C._cpu_blas()
    _C._cpu_blas(enable=False)
    yield
    _C._gemm_sg(None)
    _C._cpu_blas(enable=before["enabled"], threads=before["threads"], split=before["split"])


@pytest.mark.parametrize("tag", ["128x128x16t16x8", "64x64x8"])
def test_matmul_sg_epilogue(sg_forced, tag):
    """matmul_sg.cl (float32; NVIDIA's default, forced here) has no store epilogue: a version with one made its
    4096 a @ b 22 % slower on the H200 (benchmarks/NOTES.md, fourth session). Bias, activation, scale and
    residual then run after the product, with the same values, and the jit moves nothing into it."""
    _C._gemm_sg(tag)
    n0 = _C._gemm_sg()["launches"]
    bad, cmds = checks("sg", tlgpu.device().type == "cpu", fused=False)
    assert bad == []
    assert any(c.startswith("tl_gemm_sg_") for c in cmds), cmds
    assert _C._gemm_sg()["launches"] > n0


def test_matmul_sg_whole_tiles_and_in_place(sg_forced, rng):
    """A 128 x 128 product (whole, aligned tiles: the float4 stores) with a bias and ReLU; and `h += x @ w`
    jitted, whose residual is the output itself: matmul_sg's restrict C may not read it (the store note says
    so), so the add stays apart and the values still equal eager."""
    _C._gemm_sg("64x64x8")
    x = rng.integers(-3, 4, (128, 32)).astype(np.float32)
    w = rng.integers(-3, 4, (128, 32)).astype(np.float32)
    b = rng.standard_normal(128).astype(np.float32)
    with tlgpu.no_grad():
        got = _C.linear(tlgpu.tensor(x), tlgpu.tensor(w), tlgpu.tensor(b), activation="relu").numpy()
    ref = np.maximum((x.astype(np.float64) @ w.T).astype(np.float32) + b, np.float32(0))
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)

    def f(h, x, w):
        h += x @ w.T
        return h

    jf = tlgpu.jit(f)
    for _ in range(4):
        h = rng.standard_normal((128, 128)).astype(np.float32)
        he, hj = tlgpu.tensor(h), tlgpu.tensor(h)
        f(he, tlgpu.tensor(x), tlgpu.tensor(w))
        jf(hj, tlgpu.tensor(x), tlgpu.tensor(w))
        np.testing.assert_array_equal(hj.numpy().view(np.uint32), he.numpy().view(np.uint32))
    assert not any("+residual" in c for c in jf.commands()), jf.commands()


def test_matmul_sg_split_in_k(sg_forced, monkeypatch):
    """matmul_sg split in K (TLGPU_SG_SPLIT=2, a test hook): gemm_splitk sets the kernels' epilogue off and the
    bias and ReLU follow the reduction."""
    monkeypatch.setenv("TLGPU_SG_SPLIT", "2")
    _C._gemm_sg("64x64x8")
    assert split_checks("sg", tlgpu.device().type == "cpu") == []
