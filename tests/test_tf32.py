"""tlgpu.set_matmul_precision: the setting's validation everywhere; on devices without the tensor-core path
(PoCL, other GPUs) "tf32" changes nothing, bit for bit; on NVIDIA devices of compute capability >= 8.0 the
TF32 kernel against a float64 reference: exact on operands TF32 holds exactly (small integers), every
operand layout, batches, tile edges, unaligned views, each tile configuration; TF32 error on random data;
nn.Linear forward and backward."""
import numpy as np
import pytest

import tlgpu

TC = tlgpu._C._gemm_tc()["capability"] >= 80
needs_tc = pytest.mark.skipif(not TC, reason="no TF32 tensor-core path on this device (NVIDIA, compute "
                                             "capability >= 8.0 only); the setting is inert here")
# (M, K, N): tile edges, K not a multiple of 4 (unaligned rows: 4-byte copies), one tile, several
SHAPES = [(1, 8, 9), (16, 8, 8), (33, 70, 65), (131, 77, 65), (200, 136, 72), (257, 64, 130)]


def small_tiles():
    """Products this small stay on the float32 tiers (too few tiles to fill the device); forcing the
    smallest tensor-core row makes them exercise the TF32 kernel's edges anyway."""
    tlgpu._C._gemm_tc(tlgpu._C._gemm_tc()["configs"][1])


@pytest.fixture(autouse=True)
def restore_precision():
    before = tlgpu.get_matmul_precision()
    yield
    tlgpu.set_matmul_precision(before)
    tlgpu._C._gemm_tc(None)


def test_get_set():
    assert tlgpu.get_matmul_precision() == "highest"
    for name, canon in [("tf32", "high"), ("highest", "highest"), ("high", "high")]:
        tlgpu.set_matmul_precision(name)
        assert tlgpu.get_matmul_precision() == canon
    with pytest.raises(ValueError, match="set_matmul_precision: 'medium' is not one of"):
        tlgpu.set_matmul_precision("medium")
    with pytest.raises(TypeError, match="set_matmul_precision: expected a str"):
        tlgpu.set_matmul_precision(32)
    assert tlgpu.get_matmul_precision() == "high"             # a refused value changes nothing
    with pytest.raises(ValueError, match="_gemm_tc: unknown configuration"):
        tlgpu._C._gemm_tc("nope")


def layouts(rng, m, k, n, ints):
    """(tlgpu product, float64 reference) per operand layout: nn, nt (x @ w.T), tn, tt."""
    def draw(*shape):
        x = rng.integers(-3, 4, shape) if ints else rng.standard_normal(shape)
        return x.astype(np.float32)
    a, b, w, at = draw(m, k), draw(k, n), draw(n, k), draw(k, m)
    ta, tb, tw, tat = (tlgpu.tensor(x) for x in (a, b, w, at))
    a64, b64, w64, at64 = (x.astype(np.float64) for x in (a, b, w, at))
    return [(lambda: ta @ tb, a64 @ b64), (lambda: ta @ tw.T, a64 @ w64.T),
            (lambda: tat.T @ tb, at64.T @ b64), (lambda: tat.T @ tw.T, at64.T @ w64.T)]


def products(rng):
    """Products of every path the setting could reach: matmul layouts, batched, addmm, Linear forward and
    backward (float32 results as numpy arrays)."""
    out = [f().numpy() for m, k, n in SHAPES for f, _ in layouts(rng, m, k, n, False)]
    x = tlgpu.tensor(rng.standard_normal((4, 33, 40)).astype(np.float32))
    y = tlgpu.tensor(rng.standard_normal((4, 40, 24)).astype(np.float32))
    out.append((x @ y).numpy())
    c = tlgpu.tensor(rng.standard_normal((33, 24)).astype(np.float32))
    out.append(tlgpu.addmm(c, x[0], y[0]).numpy())
    tlgpu.manual_seed(3)
    lin = tlgpu.nn.Linear(40, 24)
    xi = tlgpu.tensor(rng.standard_normal((65, 40)).astype(np.float32), requires_grad=True)
    lin(xi).square().sum().backward()
    out += [lin(xi).numpy(), xi.grad.numpy(), lin.weight.grad.numpy(), lin.bias.grad.numpy()]
    return out


@pytest.mark.skipif(TC, reason="the device has the TF32 path: the TF32 tests below cover it")
def test_inert_without_tensor_cores():
    """On PoCL (make test) and GPUs without the path, "tf32" gives float32 results bit for bit."""
    ref = products(np.random.default_rng(5))
    tlgpu.set_matmul_precision("tf32")
    assert not tlgpu._C._gemm_tc()["active"]
    got = products(np.random.default_rng(5))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        np.testing.assert_array_equal(g, r)


@needs_tc
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_exact_on_tf32_values(rng, m, k, n):
    """Small integers are exact in TF32 and their sums exact in float32: any wrong index shows."""
    tlgpu.set_matmul_precision("tf32")
    assert tlgpu._C._gemm_tc()["active"]
    small_tiles()
    for f, ref in layouts(rng, m, k, n, True):
        np.testing.assert_array_equal(f().numpy(), ref)


@needs_tc
@pytest.mark.parametrize("tag", tlgpu._C._gemm_tc()["configs"][:2])
def test_each_configuration(rng, tag):
    tlgpu.set_matmul_precision("tf32")
    tlgpu._C._gemm_tc(tag)
    for m, k, n in [(131, 77, 65), (300, 64, 260)]:
        for f, ref in layouts(rng, m, k, n, True):
            np.testing.assert_array_equal(f().numpy(), ref)


HOPPER = tlgpu._C._gemm_tc()["capability"] == 90


@pytest.mark.skipif(not HOPPER, reason="the wgmma rows run on compute capability 9.0 only (emulated on PoCL)")
@pytest.mark.parametrize("tag", ["wg128x128x16s3", "wg64x128x16s4"])
def test_wgmma_rows_on_hopper(rng, tag):
    """Each production wgmma row forced, on the real tensor cores: exact on integer operands at tile edges, K
    below one k-step and unaligned rows (x @ w.T), and through the K-major copies (a @ b, a.T @ b.T, batched,
    from 1024 rows up); the launches are counted."""
    tlgpu.set_matmul_precision("tf32")
    tlgpu._C._gemm_tc(tag)
    before = tlgpu._C._gemm_tc()["wgmma_launches"]
    for m, k, n in [(131, 77, 65), (300, 64, 260), (270, 8, 260)]:
        a, w = (rng.integers(-3, 4, s).astype(np.float32) for s in ((m, k), (n, k)))
        np.testing.assert_array_equal((tlgpu.tensor(a) @ tlgpu.tensor(w).T).numpy(), a.astype(np.float64) @ w.T)
    x = rng.integers(-3, 4, (2, 1030, 72)).astype(np.float32)
    y = rng.integers(-3, 4, (2, 72, 1100)).astype(np.float32)
    tx, ty = tlgpu.tensor(x), tlgpu.tensor(y)
    np.testing.assert_array_equal((tx @ ty).numpy(), x.astype(np.float64) @ y)
    np.testing.assert_array_equal((tx[0] @ ty[1]).numpy(), x[0].astype(np.float64) @ y[1])
    xt, yt = tlgpu.tensor(np.ascontiguousarray(x[0].T)), tlgpu.tensor(np.ascontiguousarray(y[0].T))
    np.testing.assert_array_equal((xt.T @ yt.T).numpy(), x[0].astype(np.float64) @ y[0])
    assert tlgpu._C._gemm_tc()["wgmma_launches"] - before == 6


@pytest.mark.skipif(not HOPPER, reason="the packed wgmma rows run on compute capability 9.0 only (emulated on PoCL)")
@pytest.mark.parametrize("tag", ["wgb128x128x8s5", "wgb64x128x16s3", None])
def test_packed_rows_on_hopper(rng, tag):
    """Each production packed row forced, then the size rule, on the real tensor cores (bulk copies and
    mbarrier handoffs): exact on integer operands in every layout at tile edges and K below one k-tile,
    batched, broadcast and on strided views; one launch a product; random data within TF32's error (the
    pack rounds to nearest, as cuBLAS does: 2.9e-4 relative on the H200, against 7.8e-4 for the rows that
    truncate). Under the size rule, a 256-row product too small for any row's grid runs split in K."""
    tlgpu.set_matmul_precision("tf32")
    tlgpu._C._gemm_tc(tag)
    before, splits = tlgpu._C._gemm_tc()["packed_launches"], tlgpu._C._gemm_tc()["packed_splits"]
    shapes = [(131, 77, 65), (300, 64, 260), (270, 8, 260)] if tag else [(2048, 72, 2100), (1030, 40, 2050)]
    for m, k, n in shapes:
        for f, ref in layouts(rng, m, k, n, True):
            np.testing.assert_array_equal(f().numpy(), ref)
    x = rng.integers(-3, 4, (3, 1030, 72)).astype(np.float32)
    y = rng.integers(-3, 4, (72, 1100)).astype(np.float32)
    tx, ty = tlgpu.tensor(x), tlgpu.tensor(y)
    np.testing.assert_array_equal((tx @ ty).numpy(), x.astype(np.float64) @ y)
    np.testing.assert_array_equal((tx[1, 3:, 1:] @ ty[1:, 5:]).numpy(), x[1, 3:, 1:].astype(np.float64) @ y[1:, 5:])
    assert tlgpu._C._gemm_tc()["packed_launches"] - before == 4 * len(shapes) + 2
    if tag is None:                                    # 32 work-groups of 64x128 on 132 units: 5 slices of K
        a, w = rng.integers(-3, 4, (256, 1024)).astype(np.float32), rng.integers(-3, 4, (1024, 1024)).astype(np.float32)
        np.testing.assert_array_equal((tlgpu.tensor(a) @ tlgpu.tensor(w).T).numpy(), a.astype(np.float64) @ w.T)
        assert tlgpu._C._gemm_tc()["packed_splits"] - splits == 1
    a, b = rng.standard_normal((2048, 1024), dtype=np.float32), rng.standard_normal((1024, 2048), dtype=np.float32)
    ref = a.astype(np.float64) @ b
    err = np.linalg.norm((tlgpu.tensor(a) @ tlgpu.tensor(b)).numpy() - ref) / np.linalg.norm(ref)
    assert 1e-5 < err < 5e-4, err                      # TF32, rounded: not float32's 1e-6, not truncation's 8e-4
    tlgpu._C._gemm_tc(None)


@needs_tc
def test_batched_and_unaligned_views(rng):
    tlgpu.set_matmul_precision("tf32")
    small_tiles()
    a = rng.integers(-3, 4, (3, 50, 41)).astype(np.float32)
    b = rng.integers(-3, 4, (3, 41, 37)).astype(np.float32)
    np.testing.assert_array_equal((tlgpu.tensor(a) @ tlgpu.tensor(b)).numpy(), a.astype(np.float64) @ b)
    big = rng.integers(-3, 4, (70, 65)).astype(np.float32)          # views at odd offsets and strides
    tv = tlgpu.tensor(big)[1:, 1:]
    np.testing.assert_array_equal((tv @ tv.T).numpy(), big[1:, 1:].astype(np.float64) @ big[1:, 1:].T)
    np.testing.assert_array_equal((tv.T @ tv).numpy(), big[1:, 1:].T.astype(np.float64) @ big[1:, 1:])


@needs_tc
@pytest.mark.parametrize("n", [1024, 2048])
def test_tf32_error_on_random_data(rng, n):
    """Relative Frobenius error near TF32's (operands rounded to 10 mantissa bits, ~3e-4) and well above
    float32's: the tensor cores ran; "highest" goes back to float32."""
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)

    def err():
        return float(np.linalg.norm((ta @ tb).numpy() - ref) / np.linalg.norm(ref))
    e32 = err()
    tlgpu.set_matmul_precision("tf32")
    e_tf32 = err()
    tlgpu.set_matmul_precision("highest")
    assert e32 < 1e-5
    assert 3e-5 < e_tf32 < 2e-3
    assert err() == e32


@needs_tc
def test_linear_forward_backward(rng):
    tlgpu.set_matmul_precision("tf32")
    small_tiles()
    x = rng.standard_normal((96, 200)).astype(np.float32)
    w = (rng.standard_normal((72, 200)) * 0.1).astype(np.float32)
    g = rng.standard_normal((96, 72)).astype(np.float32)
    tx, tw = tlgpu.tensor(x, requires_grad=True), tlgpu.tensor(w, requires_grad=True)
    y = tlgpu.nn.functional.linear(tx, tw)                        # what nn.Linear.forward runs
    (y * tlgpu.tensor(g)).sum().backward()
    x64, w64, g64 = x.astype(np.float64), w.astype(np.float64), g.astype(np.float64)
    for got, ref in [(y.numpy(), x64 @ w64.T), (tx.grad.numpy(), g64 @ w64), (tw.grad.numpy(), g64.T @ x64)]:
        assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 2e-3


# an emulation script: skips where the kernels run for real or without the test hooks
EMULATED_PROLOGUE = """
import json, numpy as np, tlgpu
info = tlgpu._C._gemm_tc()
if info["capability"] != 1:
    print("RESULT " + json.dumps({"skip": "no test hooks (TLGPU_TEST_HOOKS=1 build) or a real TF32 device"}))
    raise SystemExit
tlgpu.set_matmul_precision("tf32")
"""
def emulated_run(code, env):
    """code's RESULT line (JSON) from a child process with the emulated kernels (env added to that), or the
    test skipped when the child says so (no test hooks, or a real TF32 device)."""
    import json
    from conftest import run_python
    r = run_python(code, env={"TLGPU_TC_EMULATE": "1", "TLGPU_BUILD_OPTIONS": "-DTC_EMULATE=1", **env})
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.split("RESULT ")[-1])
    if "skip" in res:
        pytest.skip(res["skip"])
    return res


EMULATED = EMULATED_PROLOGUE + """
rng, bad = np.random.default_rng(7), []
WG = 1 if "wg" in str(TAGS) else 0           # a wgmma row: x @ w.T only (emulation builds one mma.sync row)
for tag in TAGS:
    tlgpu._C._gemm_tc(tag)
    for m, k, n in SHAPES:
        a = rng.integers(-3, 4, (m, k)).astype(np.float32)
        b = rng.integers(-3, 4, (k, n)).astype(np.float32)
        ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
        tat, tbt = tlgpu.tensor(np.ascontiguousarray(a.T)).T, tlgpu.tensor(np.ascontiguousarray(b.T)).T
        lays = [("nn", ta, tb), ("nt", ta, tbt), ("tn", tat, tb), ("tt", tat, tbt)]
        for lay, x, y in lays[1:2] if WG else lays:
            if not np.array_equal((x @ y).numpy(), a.astype(np.float64) @ b):
                bad.append(f"{tag} {lay} {m}x{k}x{n}")
    v = tlgpu.tensor(rng.integers(-3, 4, (70, 66)).astype(np.float32))[1:, 1:]
    vn = v.numpy().astype(np.float64)
    if not np.array_equal((v @ v.T).numpy(), vn @ vn.T):
        bad.append(f"{tag} unaligned view")
a = rng.standard_normal((96, 200)).astype(np.float32)
b = rng.standard_normal((200, 72)).astype(np.float32)
ref = a.astype(np.float64) @ b
tb = tlgpu.tensor(np.ascontiguousarray(b.T)).T if WG else tlgpu.tensor(b)
err = float(np.linalg.norm((tlgpu.tensor(a) @ tb).numpy() - ref) / np.linalg.norm(ref))
print("RESULT " + json.dumps({"bad": bad, "err": err}))
"""


def test_emulated_kernel_any_device():
    """The tensor-core kernels' tiling, pipeline and fragment indexing in plain OpenCL C (-DTC_EMULATE=1:
    mma.sync computed from the lanes' fragments through local memory, TF32 rounding by bit masks), run on
    whatever device this is (PoCL in make test): exact on integer operands in all four layouts with 64x64
    tiles (the GPU tests run the others), unaligned views; TF32-sized error on random data."""
    emulated(EMULATED.replace("TAGS", 'info["configs"][1:2]')          # 64x64: matmul_tc.cl's only row there
                     .replace("SHAPES", "[(131, 77, 65), (40, 24, 140)]"), {})


def test_emulated_wgmma_rows():
    """The wgmma rows of kernels/matmul_wg.cl (compute capability 9.0: x @ w.T) emulated the same way
    (-DTC_EMULATE=1: each work-item sums its accumulators from the swizzled local tiles as the matrix
    descriptors describe them): exact at tile edges, K below one k-step and across several (the pipeline's
    wrap), rows not 16-byte aligned (4-byte copies), TF32-sized error on random data."""
    emulated(EMULATED.replace("TAGS", '["wg128x128x16s3", "wg64x128x16s4"]')
                     .replace("SHAPES", "[(131, 77, 65), (40, 24, 140), (270, 8, 260)]"), {})


def test_emulated_swizzle_knobs():
    """matmul_tc.cl's sweep knobs (-DTC_SWZ=1: unpadded swizzled tiles; -DTC_DBUF=1: fragments double-
    buffered in registers) on the 64x64 row, emulated: exact."""
    emulated(EMULATED.replace("TAGS", 'info["configs"][1:2]').replace("SHAPES", "[(131, 77, 65), (40, 24, 140)]"),
             {"TLGPU_BUILD_OPTIONS": "-DTC_EMULATE=1 -DTC_SWZ=1 -DTC_DBUF=1"})


PACKED = EMULATED_PROLOGUE + """
rng, bad, n0 = np.random.default_rng(11), [], tlgpu._C._gemm_tc()["wgmma_launches"]
for i, tag in enumerate(t for t in info["configs"] if t.startswith(("wgb", "wgc"))):
    tlgpu._C._gemm_tc(tag)
    for m, k, n in [(131, 77, 65), (40, 24, 140), (270, 8, 260)][i % 2:]:
        a = rng.integers(-3, 4, (m, k)).astype(np.float32)
        b = rng.integers(-3, 4, (k, n)).astype(np.float32)
        ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
        tat, tbt = tlgpu.tensor(np.ascontiguousarray(a.T)).T, tlgpu.tensor(np.ascontiguousarray(b.T)).T
        for lay, x, y in [("nn", ta, tb), ("nt", ta, tbt), ("tn", tat, tb), ("tt", tat, tbt)]:
            if not np.array_equal((x @ y).numpy(), a.astype(np.float64) @ b):
                bad.append(f"{tag} {lay} {m}x{k}x{n}")
    x = rng.integers(-3, 4, (3, 70, 33)).astype(np.float32)
    y = rng.integers(-3, 4, (33, 50)).astype(np.float32)
    tx, ty = tlgpu.tensor(x), tlgpu.tensor(y)
    yt = tlgpu.tensor(np.ascontiguousarray(y.T))
    for name, f, ref in [("batched", lambda: tx @ ty, x @ y), ("views", lambda: tx[1, 1:, 2:] @ ty[2:, 3:], x[1, 1:, 2:] @ y[2:, 3:]),
                         ("broadcast a", lambda: yt @ tx.transpose(1, 2), y.T @ x.transpose(0, 2, 1))]:
        got = f().numpy()
        if got.shape != ref.shape or not np.array_equal(got, ref.astype(np.float64)):
            bad.append(f"{tag} {name}")
print("RESULT " + json.dumps({"bad": bad, "launches": tlgpu._C._gemm_tc()["wgmma_launches"] - n0,
                              "splits": tlgpu._C._gemm_tc()["packed_splits"],
                              "tags": sum(t.startswith(("wgb", "wgc")) for t in info["configs"])}))
"""


@pytest.mark.parametrize("split", ["auto", "3"])
def test_emulated_packed_rows(split):
    """Every packed row (kernels/matmul_wgb.cl: operands packed into swizzled, zero-padded tiles, then 1-D
    bulk copies, "wgc" in clusters of two; forced with _gemm_tc(tag)), emulated: the pack of every layout
    (a @ b, a @ b.T, a.T @ b, a.T @ b.T), batches (broadcast too), strided views and tile edges exact, one
    product launch each; with TLGPU_GEMM_SPLITK=3 the same split in K (partials, then their sum). The
    mbarrier handoffs between the producer warp and the consumers run on the GPU only."""
    res = emulated_run(PACKED, {"TLGPU_BUILD_OPTIONS": "-DTC_EMULATE=1 -DTC_SWEEP", "TLGPU_GEMM_SPLITK": split})
    assert res["bad"] == [] and res["tags"] == 9
    assert res["launches"] == 5 * 3 * 4 + 4 * 2 * 4 + 9 * 3     # one per product, the pack launches apart
    assert (res["splits"] > 40) if split == "3" else res["splits"] == 0   # forced rows split only when told


WGMMA_RULE = EMULATED_PROLOGUE + """
rng, out = np.random.default_rng(3), {"wgmma": info["wgmma"]}
a = rng.integers(-3, 4, (128, 64)).astype(np.float32)      # 2 work-groups of 64x128: PoCL has 2 units here
w = rng.integers(-3, 4, (128, 64)).astype(np.float32)
s = rng.integers(-3, 4, (64, 128)).astype(np.float32)      # 64 x 128 results: 1 work-group, the device not full
ta, tw, ts = tlgpu.tensor(a), tlgpu.tensor(w), tlgpu.tensor(s)
x = rng.integers(-3, 4, (3, 1025, 24)).astype(np.float32)            # big enough for the K-major copies
y = rng.integers(-3, 4, (3, 24, 1030)).astype(np.float32)
tx, ty = tlgpu.tensor(x), tlgpu.tensor(y)
txt = tlgpu.tensor(np.ascontiguousarray(x[0].T))                        # [24, 1025]: x[0] along m
cases = [("nt", lambda: ta @ tw.T, a @ w.T), ("nn", lambda: ta @ tw.T.contiguous(), a @ w.T),
         ("small_nt", lambda: ts @ ts.T[:, :64], s @ s.T[:, :64]), ("small_nn", lambda: ts @ ta, s @ a),
         ("big_nn", lambda: tx[0] @ ty[0], x[0] @ y[0]), ("big_tn", lambda: txt.T @ ty[0], x[0] @ y[0]),
         ("big_tt", lambda: txt.T @ tlgpu.tensor(np.ascontiguousarray(y[0].T)).T, x[0] @ y[0]),
         ("big_batched_nn", lambda: tx @ ty, x @ y), ("big_nn_view", lambda: tx[1, 1:] @ ty[2, :, 3:], x[1, 1:] @ y[2, :, 3:])]
for row in [None, "wg64x128x16s4"]:                 # the size rule (packed rows), then K-major copies on wgmma
    tlgpu._C._gemm_tc(row)
    for name, f, ref in cases if info["wgmma"] else cases[:4]:   # the emulation builds no big mma.sync row
        if row is not None and not name.startswith("big"):
            continue
        keys = ("wgmma_launches", "packed_launches", "packed_splits")
        before = [tlgpu._C._gemm_tc()[k] for k in keys]
        got = f().numpy()
        out[name + ("" if row is None else "_copies")] = [
            tlgpu._C._gemm_tc()[k] - b for k, b in zip(keys, before)] + [bool(np.array_equal(got, ref.astype(np.float64)))]
print("RESULT " + json.dumps(out))
"""


@pytest.mark.parametrize("switch", ["1", "0"])
def test_wgmma_rule(switch):
    """Where the wgmma rows may run (emulated on any device; PoCL here has 2 compute units), a product of
    any layout whose grid fills the device takes the packed rows (a launch each, exact: 2-D, batched,
    strided views); an x @ w.T too small for them takes matmul_wg.cl's rows; an a @ b that small, which
    those rows would take only through a K-major copy of B (from 1024 rows), runs on the packed rows split
    in K (2 slices, then their sum); with a matmul_wg.cl row forced, a @ b, a.T @ b and a.T @ b.T from
    1024 rows up run on K-major copies (tiled transposes); TLGPU_TC_WGMMA=0 keeps every product on the
    mma.sync rows. Entries: [wgmma launches, packed launches, packed splits, exact]."""
    res = emulated_run(WGMMA_RULE, {"TLGPU_TC_WGMMA": switch})
    on = 1 if switch == "1" else 0
    assert res.pop("wgmma") is (switch == "1")
    assert res.pop("nt") == [on, on, 0, True] and res.pop("nn") == [on, on, 0, True]
    assert res.pop("small_nt") == [on, 0, 0, True] and res.pop("small_nn") == [on, on, on, True]
    assert all(v == [on, 0 if k.endswith("_copies") else on, 0, True] for k, v in res.items()), res
    assert len(res) == (10 if on else 0), res


@pytest.mark.parametrize("broken", ["matmul_wg.cl", "matmul_wgb.cl"])
def test_wgmma_build_failure_falls_back(tmp_path, broken):
    """A wgmma family that does not build (here: a kernel directory with that file broken, emulated on any
    device) leaves its products to the other rows, exactly, and keeps the reason where _gemm_tc() shows
    it; the rows are not tried again. matmul_wg.cl broken: x @ w.T too small for the packed rows runs on
    mma.sync; matmul_wgb.cl broken: one big enough for them runs on matmul_wg.cl's rows."""
    import shutil
    from conftest import ROOT
    kd = tmp_path / "kernels"
    shutil.copytree(ROOT + "/kernels", kd)
    (kd / broken).write_text((kd / broken).read_text() + "\nthis does not compile\n")
    m = 64 if broken == "matmul_wg.cl" else 128                # 1 work-group of 64x128, or 2 (2 PoCL units)
    code = EMULATED_PROLOGUE + f"""
rng = np.random.default_rng(5)
a = rng.integers(-3, 4, ({m}, 40)).astype(np.float32)
w = rng.integers(-3, 4, (128, 40)).astype(np.float32)
ok = [bool(np.array_equal((tlgpu.tensor(a) @ tlgpu.tensor(w).T).numpy(), a.astype(np.float64) @ w.T)) for _ in range(2)]
info = tlgpu._C._gemm_tc()
print("RESULT " + json.dumps({{"ok": ok, "wgmma": info["wgmma"], "error": info["wgmma_error"],
                              "packed_error": info["packed_error"], "launches": info["wgmma_launches"]}}))
"""
    res = emulated_run(code, {"TLGPU_KERNEL_DIR": str(kd), "TLGPU_CACHE_DIR": ""})
    assert res["ok"] == [True, True]
    if broken == "matmul_wg.cl":
        assert res["wgmma"] is False and res["launches"] == 0 and res["packed_error"] is None
        assert "matmul_wg" in res["error"]
    else:
        assert res["wgmma"] is True and res["launches"] == 2 and res["error"] is None
        assert "matmul_wgb" in res["packed_error"]


PTX = """//
.version 9.0
.target sm_90, texmode_independent
.address_size 64
	// begin inline asm
	//TLPTX wgmma.fence.sync.aligned;
	// end inline asm
	//TLPTX wgmma.commit_group.sync.aligned;
"""


def test_ptx_patch():
    """ptx_patch.h's rewrite: the target gets its "a", every marker is cut (the rest of its line becomes an
    instruction), nothing else changes; PTX for another target, or without a marker, is refused."""
    patch = getattr(tlgpu._C, "_ptx_patch", None)
    if patch is None:
        pytest.skip("_ptx_patch needs the test hooks (TLGPU_TEST_HOOKS=1 build)")
    out = patch(PTX + "\0")                                       # the driver's binary may end in a NUL
    assert out == PTX.replace("sm_90,", "sm_90a,").replace("//TLPTX ", "")
    assert patch(PTX.replace("sm_90, texmode_independent", "sm_90")).startswith("//\n.version 9.0\n.target sm_90a\n")
    with pytest.raises(ValueError, match="no '.target sm_90' line"):
        patch(PTX.replace("sm_90,", "sm_80,"))
    with pytest.raises(ValueError, match="no '.target sm_90' line"):
        patch(PTX.replace("sm_90,", "sm_90a,"))                    # already patched: not sm_90 itself
    with pytest.raises(ValueError, match="no //TLPTX marker"):
        patch(PTX.replace("//TLPTX ", ""))
    # a marked directive moves to just before its kernel's body, whatever comes first in the body
    two = "".join(f".entry k{i}(\n\t.param .u32 k{i}_param_0\n)\n.reqntid 288, 1, 1\n{{\n\t.reg .b32 %r<9>;\n"
                  f"\t// begin inline asm\n\t{mark}\n\t// end inline asm\n\t//TLPTX wgmma.fence.sync.aligned;\n}}\n"
                  for i, mark in enumerate(["//TLPTX_ENTRY .reqnctapercluster 2, 1, 1", "// nothing"]))
    out = patch(PTX + two)
    k0, k1 = out.split(".entry k0(")[1].split(".entry k1(")
    assert ".reqntid 288, 1, 1\n.reqnctapercluster 2, 1, 1\n{\n\t.reg .b32" in k0
    assert k0.count("reqnctapercluster") == 1 and "\t\n\t// end inline asm" in k0
    assert "reqnctapercluster" not in k1 and "TLPTX" not in out
    only = PTX.split("\t// begin")[0] + two.replace("\t//TLPTX wgmma.fence.sync.aligned;\n", "")
    assert ".reqntid 288, 1, 1\n.reqnctapercluster 2, 1, 1\n{" in patch(only)   # a directive alone is a marker


def emulated(code, env):
    res = emulated_run(code, env)
    assert res["bad"] == []
    assert 3e-5 < res["err"] < 2e-3


@needs_tc
def test_small_products_stay_float32(rng):
    """A product whose tiles cannot fill half the device runs on the float32 tiers even under "tf32" (the
    MLP step's 256-row products were slower on tensor cores): float32-sized error."""
    a = rng.standard_normal((256, 256)).astype(np.float32)
    tlgpu.set_matmul_precision("tf32")
    got = (tlgpu.tensor(a) @ tlgpu.tensor(a)).numpy()
    ref = a.astype(np.float64) @ a
    assert np.linalg.norm(got - ref) / np.linalg.norm(ref) < 1e-5
