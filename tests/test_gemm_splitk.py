"""Split-K of the tiled GEMM (csrc/gemm/gemm_splitk.c) against numpy float64: S forced on PoCL (the switch takes the
product past the BLAS path to the OpenCL tiled kernel) over layouts, odd sizes, K not divisible by S, batches,
autograd, bit-identical repeats and the command count; the rule as a pure function on an H100-like device
(132 units, NVIDIA's tiles); the rule end to end on PoCL's tiled kernels (subprocesses with DIRECT=0)."""
import numpy as np
import pytest

import tlgpu
from tlgpu import _C
from conftest import run_python

if not hasattr(_C, "_gemm_splitk"):
    pytest.skip("tlgpu._C has no _gemm_splitk: the extension was built without TLGPU_TEST_HOOKS=1",
                allow_module_level=True)

SLICES = [2, 3, 7, 16]
SHAPES = [(5, 1000, 7), (33, 777, 65), (64, 2048, 96), (2, 37, 3), (70, 129, 31), (9, 5, 4)]


@pytest.fixture
def split():
    """Sets the switch for one test and puts the rule back after it."""
    def force(s):
        _C._gemm_splitk(s)
    yield force
    _C._gemm_splitk(None)


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def check(got, ref, k):
    np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-5 * max(1.0, np.sqrt(k)))


def products():
    return _C._gemm_splitk()["products"]


@pytest.mark.parametrize("s", SLICES)
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_forced_layouts(rng, split, s, m, k, n):
    """nn, nt (x @ w.T), tn and tt views, every S, K divisible by S or not (the last slice takes the rest)."""
    split(s)
    a, b = randn(rng, m, k), randn(rng, k, n)
    ref = a.astype(np.float64) @ b
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    ta_t, tb_t = tlgpu.tensor(np.ascontiguousarray(a.T)).T, tlgpu.tensor(np.ascontiguousarray(b.T)).T
    before = products()
    for x, y in [(ta, tb), (ta, tb_t), (ta_t, tb), (ta_t, tb_t)]:
        check(x @ y, ref, k)
    assert products() == before + 4
    assert _C._gemm_plan(m, k, n)[1:] == (min(s, k), k // min(s, k))


def test_strided_views(rng, split):
    """Operands with gaps between rows and a negative stride along k (the slice offsets move backwards)."""
    split(7)
    base = randn(rng, 40 * 300)
    a = base.reshape(40, 300)[:, ::2][:33]                    # [33, 150], k stride 2
    va = _C._matmul_test_view(tlgpu.tensor(base), (33, 150), (300, 2), 0)
    w = randn(rng, 150, 21)
    vw = _C._matmul_test_view(tlgpu.tensor(np.ascontiguousarray(w[::-1])), (150, 21), (-21, 1), 149 * 21)
    check(va @ vw, a.astype(np.float64) @ w, 150)


@pytest.mark.parametrize("s", [3, 16])
def test_batched(rng, split, s):
    """One batch dim: slices x batch in one grid, broadcast B (batch stride 0) and a merged 4-D batch."""
    split(s)
    a, b, w = randn(rng, 3, 17, 301), randn(rng, 3, 301, 9), randn(rng, 301, 12)
    before = products()
    check(tlgpu.tensor(a) @ tlgpu.tensor(b), a.astype(np.float64) @ b, 301)
    check(tlgpu.tensor(a) @ tlgpu.tensor(w), a.astype(np.float64) @ w, 301)
    check(tlgpu.tensor(b).transpose(1, 2) @ tlgpu.tensor(a).transpose(1, 2),       # tn x nt views
          b.transpose(0, 2, 1).astype(np.float64) @ a.transpose(0, 2, 1), 301)
    a4, b4 = randn(rng, 2, 3, 5, 260), randn(rng, 2, 3, 260, 6)
    check(tlgpu.tensor(a4) @ tlgpu.tensor(b4), a4.astype(np.float64) @ b4, 260)
    assert products() == before + 4
    assert _C._gemm_plan(17, 301, 9, 3)[1] == s


def test_two_batch_dims_not_split(rng, split):
    """Batch dims that do not merge into one: no split (the kernel walks one), the product is still right."""
    split(5)
    a, b = randn(rng, 2, 3, 7, 200), randn(rng, 3, 200, 8)
    before = products()
    check(tlgpu.tensor(a) @ tlgpu.tensor(b), a.astype(np.float64) @ b, 200)
    assert products() == before


def test_edges(rng, split):
    """Zero-size results, K == 0 (zeros), K == 1 and vectors (no split) and K < S (S clamps to K)."""
    split(7)
    assert (tlgpu.zeros(0, 5) @ tlgpu.zeros(5, 3)).shape == (0, 3)
    assert (tlgpu.zeros(4, 5) @ tlgpu.zeros(5, 0)).shape == (4, 0)
    np.testing.assert_array_equal((tlgpu.ones(4, 0) @ tlgpu.ones(0, 3)).numpy(), np.zeros((4, 3)))
    a, b, v = randn(rng, 6, 1), randn(rng, 1, 5), randn(rng, 300)
    before = products()
    check(tlgpu.tensor(a) @ tlgpu.tensor(b), a.astype(np.float64) @ b, 1)
    check(tlgpu.tensor(v) @ tlgpu.tensor(v), v.astype(np.float64) @ v, 300)
    m = randn(rng, 4, 300)
    check(tlgpu.tensor(m) @ tlgpu.tensor(v), m.astype(np.float64) @ v, 300)
    assert products() == before
    a, b = randn(rng, 6, 4), randn(rng, 4, 5)
    check(tlgpu.tensor(a) @ tlgpu.tensor(b), a.astype(np.float64) @ b, 4)
    assert products() == before + 1 and _C._gemm_plan(6, 4, 5)[1:] == (4, 1)


def test_autograd(rng, split):
    """matmul's backward products (g @ b.T, a.T @ g) split too: gradients against numpy."""
    split(3)
    a, b, r = randn(rng, 12, 1001), randn(rng, 1001, 10), randn(rng, 12, 10)
    ta, tb = tlgpu.tensor(a, requires_grad=True), tlgpu.tensor(b, requires_grad=True)
    before = products()
    y = ta @ tb
    (y * tlgpu.tensor(r)).sum().backward()
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    check(y, a64 @ b64, 1001)
    check(ta.grad, r @ b64.T, 10)
    check(tb.grad, a64.T @ r, 12)
    assert products() == before + 3


def test_linear_and_addmm(rng, split):
    """Products with a residual or bias: split-K does not fuse them, the caller adds them after."""
    split(4)
    x, w, bias, res = randn(rng, 3, 500), randn(rng, 8, 500), randn(rng, 8), randn(rng, 3, 8)
    ref = x.astype(np.float64) @ w.T
    before = products()
    check(tlgpu.addmm(tlgpu.tensor(res), tlgpu.tensor(x), tlgpu.tensor(w).T), res + ref, 500)
    check(tlgpu.nn.functional.linear(tlgpu.tensor(x), tlgpu.tensor(w), tlgpu.tensor(bias)), ref + bias, 500)
    assert products() == before + 2


def test_conv_weight_gradient(rng, split):
    """A convolution's weight gradient (g @ cols.T, the product split-K is for) with S forced equals the
    gradient without the split to float rounding, and the split ran."""
    x, wt = randn(rng, 4, 3, 12, 12), randn(rng, 5, 3, 3, 3)

    def grads():
        tx, tw = tlgpu.tensor(x), tlgpu.tensor(wt, requires_grad=True)
        tlgpu.nn.functional.conv2d(tx, tw, stride=1).sum().backward()
        return tw.grad.numpy()

    split(1)
    ref = grads()
    split(16)
    before = products()
    got = grads()
    assert products() > before
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k", [1024, 1029])
def test_bit_identical_and_commands(rng, split, k):
    """The same split product twice gives the same bits; one split product is its partial launches (one when
    S divides K, two when the last slice differs) and one reduction."""
    split(4)
    a, w = randn(rng, 19, k), randn(rng, 23, k)
    ta, tw = tlgpu.tensor(a), tlgpu.tensor(w)
    tlgpu.synchronize()
    launches = _C._gemm_splitk()["launches"]
    tlgpu.reset_stream_stats()
    y1 = ta @ tw.T
    assert tlgpu.stream_stats()["enqueued"] == (2 if k % 4 == 0 else 3)
    assert _C._gemm_splitk()["launches"] == launches + (1 if k % 4 == 0 else 2)
    y2 = ta @ tw.T
    assert y1.numpy().tobytes() == y2.numpy().tobytes()
    check(y1, a.astype(np.float64) @ w.T, k)


def test_switch_values(split):
    with pytest.raises(ValueError):
        _C._gemm_splitk(0)
    with pytest.raises(ValueError):
        _C._gemm_splitk(1025)
    assert _C._gemm_splitk(5)["forced"] == 5 and _C._gemm_splitk(None)["forced"] is None


# The rule on an H100: 132 units; pick_tier takes the first of NVIDIA's tiers whose tiles number >= 3/4 of them.
H100_UNITS, NV_TIERS = 132, [(128, 128), (128, 64), (64, 32)]


def h100_plan(m, k, n, batch=1):
    for mwg, nwg in NV_TIERS:
        tiles = batch * -(-m // mwg) * -(-n // nwg)
        if tiles * 4 >= H100_UNITS * 3:
            break
    s, ks = _C._gemm_splitk_rule(m, k, n, mwg, nwg, 16, H100_UNITS, batch)
    return (mwg, nwg), tiles, s, ks


@pytest.mark.parametrize("m,k,n,want", [(32, 102400, 256, (64, 1600)), (64, 20736, 512, (27, 768)),
                                        (64, 12544, 576, (28, 448)), (256, 3136, 512, (7, 448))])
def test_rule_splits_conv_weight_gradients(m, k, n, want):
    """The Nature-CNN dW products at batch 256 (7.7 of the 9.2 ms step on an H100), and fc1's forward (64 tiles),
    split into equal slices of whole 16-deep tiles, filling the device with 2 to 4 work-groups per unit."""
    tile, tiles, s, ks = h100_plan(m, k, n)
    assert tile == (64, 32) and (s, ks) == want
    assert s * ks == k and ks % 16 == 0 and ks >= 256
    assert 2 * H100_UNITS <= tiles * s <= 4 * H100_UNITS


@pytest.mark.parametrize("m,k,n", [(1024, 1024, 1024), (4096, 4096, 4096), (512, 256, 3136),
                                   (32, 256, 102400), (256, 32, 102400), (64, 512, 20736), (256, 512, 3136),
                                   (64, 1500, 64), (128, 2048, 1024), (8, 2047, 8)])
def test_rule_leaves_filled_or_short_products(m, k, n):
    """Square products, the CNN's forward, input-gradient and linear products, and short K stay whole."""
    assert h100_plan(m, k, n)[2:] == (1, k)


def test_rule_limits():
    """Slices keep >= 256 of K and S <= 64; without an even split the last slice is the shorter one; batches
    count as tiles; the partials stay <= 64 MiB."""
    assert _C._gemm_splitk_rule(8, 4096, 8, 64, 32, 16, 132) == (16, 256)       # want 66: capped by 256-long slices
    assert _C._gemm_splitk_rule(16, 1 << 20, 16, 64, 32, 16, 1000) == (64, 16384)   # capped at 64
    s, ks = _C._gemm_splitk_rule(32, 100003, 256, 64, 32, 16, 132)             # a prime K
    assert s >= 2 and ks % 16 == 0 and 0 < 100003 - (s - 1) * ks <= ks
    assert _C._gemm_splitk_rule(32, 20000, 256, 64, 32, 16, 132, 200) == (1, 20000)   # 1600 tiles: full
    assert _C._gemm_splitk_rule(32, 20000, 256, 64, 32, 16, 132, 4)[0] > 1
    s, ks = _C._gemm_splitk_rule(1024, 1 << 22, 2048, 128, 128, 16, 132)          # 128 tiles, 8 MiB partials
    assert s * 1024 * 2048 * 4 <= 64 << 20 and s >= 2
    assert _C._gemm_splitk_rule(1, 1, 1, 1, 1, 1, 1) == (1, 1)


AUTO_CODE = """
import numpy as np, tlgpu
from tlgpu import _C
rng = np.random.default_rng(4)
# PoCL: 2 units; the small tier is 16x16, so a 16x16 result is one tile: the rule splits a long K
assert _C._gemm_plan(16, 4096, 16) == (2, 8, 512), _C._gemm_plan(16, 4096, 16)   # 8 equal slices
tier, s, ks = _C._gemm_plan(16, 4099, 16)                                          # a prime K: a shorter last
assert tier == 2 and s == 8 and ks == 528, (tier, s, ks)
assert _C._gemm_plan(16, 2000, 16)[1] == 1 and _C._gemm_plan(64, 8192, 64)[1] == 1   # short K; 4 tiles
for k in (4096, 4099):
    a, w = rng.standard_normal((16, k)).astype(np.float32), rng.standard_normal((16, k)).astype(np.float32)
    ta, tw = tlgpu.tensor(a), tlgpu.tensor(w)
    tlgpu.synchronize()
    before = _C._gemm_splitk()["products"]
    tlgpu.reset_stream_stats()
    y = ta @ tw.T
    assert tlgpu.stream_stats()["enqueued"] == (2 if k == 4096 else 3)
    assert _C._gemm_splitk()["products"] == before + 1
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-3)
    assert (ta @ tw.T).numpy().tobytes() == y.numpy().tobytes()
print("ok", _C._gemm_splitk())
"""
TIERS = {"TLGPU_GEMM_PARAMS": "DIRECT=0,PREFETCH=1,DBUF=1,INTERIOR=1",
         "TLGPU_GEMM_PARAMS_MID": "MWG=32,NWG=32,PREFETCH=1,DBUF=1,INTERIOR=1,MVEC=1",
         "TLGPU_GEMM_PARAMS_SMALL": "MWG=16,NWG=16,VW=2,PREFETCH=1,DBUF=1,INTERIOR=1"}


def test_rule_end_to_end():
    """The rule as a GPU runs it: PoCL with the tiled kernels (DIRECT=0) and its 2 units."""
    if tlgpu.device().compute_units != 2:
        pytest.skip("the plans below assume 2 compute units")
    r = run_python(AUTO_CODE, env=TIERS)
    assert r.returncode == 0 and "ok" in r.stdout, r.stdout + r.stderr


ENV_CODE = """
import numpy as np, tlgpu
from tlgpu import _C
try:
    print(_C._gemm_plan(16, 4096, 16), _C._gemm_splitk()["forced"])
except ValueError as e:
    print("ValueError", e)
"""


@pytest.mark.parametrize("value,want", [("off", "(2, 1, 4096) 1"), ("0", "(2, 1, 4096) 1"),
                                        ("auto", "(2, 8, 512) None"), ("5", "(2, 5, 819) 5"), ("x", "ValueError"),
                                        ("1025", "ValueError")])
def test_env_switch(value, want):
    """TLGPU_GEMM_SPLITK=auto|off|S: the rule, never, or S slices everywhere; anything else is a ValueError."""
    if tlgpu.device().compute_units != 2:
        pytest.skip("the plans below assume 2 compute units")
    r = run_python(ENV_CODE, env={**TIERS, "TLGPU_GEMM_SPLITK": value})
    assert r.returncode == 0 and r.stdout.startswith(want), r.stdout + r.stderr


NV_CODE = """
import numpy as np, tlgpu
from tlgpu import _C
rng = np.random.default_rng(6)
for (m, k, n, s, batch) in [(32, 8192, 256, 16, 1), (64, 4099, 96, 8, 1), (70, 2600, 40, 5, 3), (128, 3000, 130, 3, 1)]:
    a = rng.standard_normal((batch, m, k)).astype(np.float32)
    c = rng.standard_normal((batch, n, k)).astype(np.float32)
    ref = a.astype(np.float64) @ c.transpose(0, 2, 1)
    ta, tc = tlgpu.tensor(a), tlgpu.tensor(c)
    for forced in (s, 1):
        _C._gemm_splitk(forced)
        for y in (ta @ tc.transpose(1, 2), tlgpu.tensor(a.transpose(0, 2, 1).copy()).transpose(1, 2) @
                  tlgpu.tensor(c.transpose(0, 2, 1).copy())):
            np.testing.assert_allclose(y.numpy(), ref, rtol=1e-4, atol=1e-3)
print("ok", _C._gemm_splitk())
"""
NV_SMALL = "MWG=64,NWG=32,KWG=16,MDIMC=16,NDIMC=8,VW=4,MVEC=1,PREFETCH=1,DBUF=1,INTERIOR=1"
NV_BIG = "MWG=128,NWG=128,KWG=16,MDIMC=16,NDIMC=16,VW=2,MVEC=1,PREFETCH=1,DBUF=1,INTERIOR=1"


@pytest.mark.parametrize("params", [NV_SMALL, NV_BIG])
def test_nvidia_tiles(params):
    """The split with the tile parameters NVIDIA runs (the 64x32 tier the conv weight gradients take, and the
    128x128 one) on PoCL's tiled kernel: nt and tn layouts, equal and uneven slices, a batch."""
    env = {t: params for t in TIERS}
    env["TLGPU_GEMM_PARAMS"] = "DIRECT=0," + params
    r = run_python(NV_CODE, env=env)
    assert r.returncode == 0 and "ok" in r.stdout and "'products': 8" in r.stdout, r.stdout + r.stderr
