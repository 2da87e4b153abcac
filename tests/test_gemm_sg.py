"""The NVIDIA float32 GEMM (kernels/matmul_sg.cl, csrc/gemm/gemm_sg.c) forced onto this device with TLGPU_SG=force
(test builds only): every operand layout against float64 numpy, each production tile configuration, the
sweep-only rows and knobs in child builds (layouts, edges, batches), tile edges, K not a multiple of the
k-tile, batches (3-D, 4-D, broadcast), strided and offset views, Linear forward
and backward, the products it must leave to the other kernels (unaligned, K % 4 != 0) and, without the hook,
that it stays off here (it is NVIDIA-only). Each product asserts the kernel ran (the hook's launch count)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tlgpu
from tlgpu import _C
from conftest import HANG_S

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 2e-5                                      # max |error| / max |reference|, float32 accumulation
CONFIGS = _C._gemm_sg()["configs"]
PRODUCTION = [c["tag"] for c in CONFIGS if not c["sweep"]]
SWEEP = [c["tag"] for c in CONFIGS if c["sweep"]]


@pytest.fixture(autouse=True)
def force(monkeypatch):
    monkeypatch.setenv("TLGPU_SG", "force")
    if _C._gemm_sg()["mode"] != "force":
        pytest.skip("TLGPU_SG=force needs the test hooks (TLGPU_TEST_HOOKS=1 build, see Makefile)")
    yield
    _C._gemm_sg(None)


def launches():
    return _C._gemm_sg()["launches"]


def check(fn, ref, ran=1):
    """fn() (a tlgpu product) against the float64 reference; `ran` products went to matmul_sg."""
    before = launches()
    got = fn().numpy()
    assert launches() - before == ran
    assert got.shape == ref.shape
    err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30)
    assert err < TOL, err


def draw(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def layouts(rng, m, k, n):
    """(product, reference) per layout: nn a @ b, nt a @ w.T, tn at.T @ b, tt at.T @ w.T."""
    a, b, w, at = draw(rng, m, k), draw(rng, k, n), draw(rng, n, k), draw(rng, k, m)
    ta, tb, tw, tat = (tlgpu.tensor(x) for x in (a, b, w, at))
    a64, b64, w64, at64 = (x.astype(np.float64) for x in (a, b, w, at))
    return {"nn": (lambda: ta @ tb, a64 @ b64), "nt": (lambda: ta @ tw.T, a64 @ w64.T),
            "tn": (lambda: tat.T @ tb, at64.T @ b64), "tt": (lambda: tat.T @ tw.T, at64.T @ w64.T)}


# (M, K, N): whole tiles, edges in m and n, K below, at and past the k-tile (8, 16), one k-tile less a float4
SHAPES = [(128, 64, 128), (132, 100, 68), (260, 36, 196), (64, 4, 64), (68, 12, 200), (12, 300, 8)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("lay", ["nn", "nt", "tn", "tt"])
def test_layouts(shape, lay):
    fn, ref = layouts(np.random.default_rng(sum(shape)), *shape)[lay]
    check(fn, ref)


@pytest.mark.parametrize("tag", PRODUCTION)
def test_each_production_config(tag):
    _C._gemm_sg(tag)
    assert _C._gemm_sg()["forced"] == tag
    for lay, (fn, ref) in layouts(np.random.default_rng(1), 196, 44, 132).items():
        check(fn, ref)


# Rows with bigger work-item tiles (t<TM>x<TN>) and the knobs of the generalised body (sg_gemm_x):
# SG_RDB (fragments a k step ahead), SG_T4 (4x4-transposed float4 local stores; 128x128x8 and
# 256x128x8t16x8 have fewer 4x4 blocks than work-items, 128x64x16 and 128x128x16t16x8 one each),
# SG_GEN (the 8x8 rows on the generalised body).
BIG = [t for t in SWEEP if "t" in t]
BUILDS = {"sweep-tags": ("-DSG_SWEEP", SWEEP),
          "knobs": ("-DSG_LN=4 -DSG_PAD=0 -DSG_GROUP=2", ["128x128x8", "64x64x8"]),
          "rdb-t4": ("-DSG_SWEEP -DSG_RDB=1 -DSG_T4=1", ["128x128x8", "128x128x16t16x8", "256x128x8t16x8"]),
          "gen-ln4": ("-DSG_SWEEP -DSG_GEN=1 -DSG_LN=4", ["64x64x8", "128x128x8t8x16"])}
# (M, K, N) in the child builds: edges in m and n (not multiples of any tile), K past the k-tile and not a
# multiple of it, a K of one float4, a product smaller than one tile
CHILD_SHAPES = [(260, 36, 196), (132, 100, 68), (68, 4, 132), (12, 300, 8)]


def child_checks(tags):
    """Each tag forced: every layout on CHILD_SHAPES, a batched a @ b and a batched x @ w.T."""
    rng = np.random.default_rng(2)
    for tag in tags:
        _C._gemm_sg(tag)
        for shape in CHILD_SHAPES:
            for fn, ref in layouts(rng, *shape).values():
                check(fn, ref)
        a, b, w = draw(rng, 3, 68, 40), draw(rng, 3, 40, 132), draw(rng, 132, 40)
        check(lambda: tlgpu.tensor(a) @ tlgpu.tensor(b), a.astype(np.float64) @ b)
        check(lambda: tlgpu.tensor(a) @ tlgpu.tensor(w).T, a.astype(np.float64) @ w.T.astype(np.float64))
    return launches()


def test_size_rule_by_layout():
    """The multistage row is tn's (both operands by 16-byte copies) where its grid reaches 90 % of the compute
    units and, past one wave of two work-groups a unit, fills its waves 70 % on average; the other layouts
    never get it, and a grid below those shares goes to the next row."""
    rows = {c["tag"]: c["layouts"] for c in CONFIGS}
    assert rows["128x128x8t16x8s4"] == [False, False, True, False]
    assert all(rows[t] == [True] * 4 for t in PRODUCTION if t != "128x128x8t16x8s4")
    cu = tlgpu.device().compute_units
    s4 = "128x128x8t16x8s4"
    for m, lay, want in [(128 * cu, "tn", s4), (128 * cu, "nn", None), (128 * cu, "nt", None),
                         (128 * cu, "tt", None), (128 * 3 * cu, "tn", s4),        # 1.5 waves: 75 % full
                         (128 * (2 * cu + 1), "tn", None)] + ([(64, "tn", None)] if cu >= 2 else []):
        fn, ref = layouts(np.random.default_rng(m), m, 12, 128 if m > 64 else 64)[lay]
        check(fn, ref)
        got = _C._gemm_sg()["last"]
        assert (got == want) if want else got != "128x128x8t16x8s4", (m, lay, got)


def test_nn_takes_the_tn_row_through_a_transposed_copy(monkeypatch):
    """a @ b (2-D, nn) from 2048 columns, where the multistage tn row takes a.T.T @ b: A's tiled transposed
    copy (one launch), then the tn row; not with TLGPU_SG_COPY=off, a forced row, TF32 asked for, fewer
    columns or a batched A (grids the tn row does not take: test_size_rule_by_layout). Exact either way,
    and in the gradients."""
    rng = np.random.default_rng(11)
    cu = tlgpu.device().compute_units
    m = 128 * 3 * min(cu, 4)                  # the tn row's grid: >= 0.9 of the units, waves >= 70 % full
    a, b = draw(rng, m, 12), draw(rng, 12, 2048)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    ref = a.astype(np.float64) @ b

    def run(want_copy, fn=lambda: ta @ tb, want=ref):
        c0, n0 = _C._gemm_sg()["copies"], tlgpu.stream_stats()["enqueued"]
        check(fn, want)
        info = _C._gemm_sg()
        assert info["copies"] - c0 == want_copy
        assert (info["last"] == "128x128x8t16x8s4") == bool(want_copy)
        assert tlgpu.stream_stats()["enqueued"] - n0 >= 1 + want_copy

    run(1)
    monkeypatch.setenv("TLGPU_SG_COPY", "off")
    run(0)
    monkeypatch.delenv("TLGPU_SG_COPY")
    _C._gemm_sg("128x128x16t16x8")
    run(0)
    _C._gemm_sg(None)
    tlgpu.set_matmul_precision("high")
    try:
        if _C._gemm_tc()["active"]:                               # tensor cores take it: no copy either
            c0 = _C._gemm_sg()["copies"]
            assert np.abs((ta @ tb).numpy() - ref).max() / np.abs(ref).max() < 1e-2
            assert _C._gemm_sg()["copies"] == c0
        else:
            run(0)
    finally:
        tlgpu.set_matmul_precision("highest")
    run(0, lambda: ta @ tlgpu.tensor(b[:, :2044]), a.astype(np.float64) @ b[:, :2044])   # N < 2048
    a3 = draw(rng, 2, m, 12)
    run(0, lambda: tlgpu.tensor(a3) @ tb, a3.astype(np.float64) @ b)
    x = tlgpu.tensor(a, requires_grad=True)
    w = tlgpu.tensor(b, requires_grad=True)
    g = draw(rng, m, 2048)
    (x @ w).backward(tlgpu.tensor(g))
    g64 = g.astype(np.float64)
    for got, want in [(x.grad.numpy(), g64 @ b.T.astype(np.float64)), (w.grad.numpy(), a.T.astype(np.float64) @ g64)]:
        assert np.abs(got - want).max() / np.abs(want).max() < TOL


def test_split_in_k_where_the_grid_leaves_waves_empty(monkeypatch):
    """A product whose 128x128 grid is too small for its rule takes that row split in K (2, 4 or 8 slices,
    gemm_splitk's partials and reduction) when the split grid fills its waves and slices keep 512 of K: here
    cu / 2 tiles, 4 slices (2 would not reach 1.8 x the units). Exact; not with slices under 512 of K, and
    TLGPU_SG_SPLIT=1 turns it off."""
    cu = tlgpu.device().compute_units
    if cu % 2:
        pytest.skip("an odd number of compute units")
    rng = np.random.default_rng(12)

    def run(k, want_split):
        a, w = draw(rng, 128, k), draw(rng, 64 * cu, k)
        s0 = _C._gemm_splitk()["products"]
        check(lambda: tlgpu.tensor(a) @ tlgpu.tensor(w).T, a.astype(np.float64) @ w.T.astype(np.float64))
        assert _C._gemm_splitk()["products"] - s0 == want_split
        if want_split:
            assert _C._gemm_sg()["last"] == "128x128x16t16x8"

    run(4096, 1)
    run(1024, 0)                                                  # 4 slices of 256: too short
    monkeypatch.setenv("TLGPU_SG_SPLIT", "1")
    run(4096, 0)


def test_new_rows_listed():
    """The bigger work-item tiles are sweep rows, launched with BM BN / (TM TN) work-items."""
    want = {"128x128x8t16x8": 128, "128x128x8t8x16": 128, "128x128x16t16x8": 128, "256x128x8t16x8": 256,
            "128x256x8t8x16": 256, "128x128x8": 256, "128x64x16": 128, "256x128x8t16x8s3": 256,
            "128x256x8t8x16s3": 256, "128x128x8t16x8s3": 128, "128x128x8t16x8s4": 128,
            "128x128x8t16x8s5": 128}
    assert {c["tag"]: c["threads"] for c in CONFIGS if c["tag"] in want} == want
    assert set(want) - set(PRODUCTION) == set(BIG)


@pytest.fixture(scope="module")
def children():
    """sweep_sgemm.py's builds (TLGPU_BUILD_OPTIONS), one child process each, all started together: most of
    their time is PoCL compiling kernels (about 10 minutes of a cold-cache `make test` on 2 cores, hence
    `make test-slow`)."""
    code = (f"import sys; sys.path.insert(0, {ROOT!r}); sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
            "import test_gemm_sg as t\n"
            "print('ok', t.child_checks(sys.argv[1].split(',')))\n")
    procs = {name: subprocess.Popen([sys.executable, "-c", code, ",".join(tags)], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True,
                                    env=dict(os.environ, TLGPU_SG="force", TLGPU_BUILD_OPTIONS=opts))
             for name, (opts, tags) in BUILDS.items()}
    yield procs
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.communicate()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(BUILDS))
def test_sweep_builds(children, name):
    """The -DSG_SWEEP tags, the knobs (8 x 4 warps, unpadded tiles, another tile order), and the
    generalised body's knobs, each tag on child_checks' products."""
    out, err = children[name].communicate(timeout=HANG_S)
    assert children[name].returncode == 0, err[-3000:]
    assert out.split() == ["ok", str((4 * len(CHILD_SHAPES) + 2) * len(BUILDS[name][1]))]


def test_batched():
    rng = np.random.default_rng(3)
    a, b = draw(rng, 3, 68, 40), draw(rng, 3, 40, 132)
    check(lambda: tlgpu.tensor(a) @ tlgpu.tensor(b), a.astype(np.float64) @ b)
    a4, b4 = draw(rng, 2, 3, 36, 20), draw(rng, 2, 3, 20, 72)
    check(lambda: tlgpu.tensor(a4) @ tlgpu.tensor(b4), a4.astype(np.float64) @ b4)
    w = draw(rng, 72, 20)                          # batched x @ w.T
    check(lambda: tlgpu.tensor(a4) @ tlgpu.tensor(w).T, a4.astype(np.float64) @ w.T.astype(np.float64))


def test_broadcast_batch():
    rng = np.random.default_rng(4)
    a, b = draw(rng, 4, 68, 24), draw(rng, 1, 24, 76)          # B's batch stride 0
    check(lambda: tlgpu.tensor(a) @ tlgpu.tensor(b), a.astype(np.float64) @ b)
    a2, b2 = draw(rng, 2, 1, 36, 16), draw(rng, 1, 3, 16, 40)  # both broadcast, 2 x 3 batch
    check(lambda: tlgpu.tensor(a2) @ tlgpu.tensor(b2), a2.astype(np.float64) @ b2)


def view(x, shape, strides, offset):
    """A strided view of x's flat storage (the _matmul_test_view hook) and its numpy twin."""
    t = _C._matmul_test_view(tlgpu.tensor(x), shape, strides, offset)
    ref = np.lib.stride_tricks.as_strided(x.reshape(-1)[offset:], shape, [s * 4 for s in strides])
    return t, ref.astype(np.float64)


def test_strided_views():
    rng = np.random.default_rng(5)
    base, wbase = draw(rng, 140 * 72), draw(rng, 100 * 80)
    a, a64 = view(base, (132, 64), (72, 1), 8)                 # rows padded, offset 8 floats
    b, b64 = view(wbase, (64, 68), (80, 1), 4)
    w, w64 = view(wbase, (68, 64), (80, 1), 12)                # x @ w.T with a padded w
    check(lambda: a @ b, a64 @ b64)
    check(lambda: a @ w.T, a64 @ w64.T)
    at, at64 = view(base, (64, 132), (136, 1), 4)              # tn from a padded transpose
    check(lambda: at.T @ b, at64.T @ b64)


def test_left_to_the_other_kernels():
    """No 16-byte alignment, or a float4 run that would leave the matrix: the tiers, still right."""
    rng = np.random.default_rng(6)
    base = draw(rng, 140 * 72)
    a, a64 = view(base, (132, 64), (72, 1), 2)                 # offset 2 floats
    b = draw(rng, 64, 68)
    check(lambda: a @ tlgpu.tensor(b), a64 @ b, ran=0)
    a, a64 = view(base, (132, 64), (70, 1), 0)                 # row stride 70
    check(lambda: a @ tlgpu.tensor(b), a64 @ b, ran=0)
    x, y = draw(rng, 64, 30), draw(rng, 30, 64)                # K % 4 != 0
    check(lambda: tlgpu.tensor(x) @ tlgpu.tensor(y), x.astype(np.float64) @ y, ran=0)
    x, y = draw(rng, 64, 32), draw(rng, 32, 66)                # nn with N % 4 != 0
    check(lambda: tlgpu.tensor(x) @ tlgpu.tensor(y), x.astype(np.float64) @ y, ran=0)


def test_linear_forward_backward():
    """x @ w.T (nt) forward; the backward's g @ w (nn) and g.T @ x (tn, the weight gradient)."""
    rng = np.random.default_rng(7)
    x, w, g = draw(rng, 132, 36), draw(rng, 68, 36), draw(rng, 132, 68)
    tx, tw = tlgpu.tensor(x, requires_grad=True), tlgpu.tensor(w, requires_grad=True)
    before = launches()
    y = tlgpu.linear(tx, tw)
    y.backward(tlgpu.tensor(g))
    assert launches() - before == 3
    x64, w64, g64 = (v.astype(np.float64) for v in (x, w, g))
    for got, ref in [(y.numpy(), x64 @ w64.T), (tx.grad.numpy(), g64 @ w64), (tw.grad.numpy(), g64.T @ x64)]:
        assert np.abs(got - ref).max() / np.abs(ref).max() < TOL


def test_off_and_not_nvidia_here(monkeypatch):
    """Without the force hook the kernel is NVIDIA-only: on this device nothing goes to it."""
    monkeypatch.setenv("TLGPU_SG", "off")
    assert _C._gemm_sg()["mode"] == "off"
    fn, ref = layouts(np.random.default_rng(8), 256, 64, 256)["nn"]
    check(fn, ref, ran=0)
    monkeypatch.delenv("TLGPU_SG")
    info = _C._gemm_sg()
    assert info["mode"] == "auto"
    if not info["nvidia"]:
        check(fn, ref, ran=0)


def test_unknown_config():
    with pytest.raises(ValueError, match="_gemm_sg: unknown configuration"):
        _C._gemm_sg("nope")
    with pytest.raises(ValueError, match="_gemm_sg: unknown configuration"):
        _C._gemm_sg(3)
    assert _C._gemm_sg()["forced"] is None
