"""Philox4x32-10 random numbers: bit-exact against a numpy reference of the generator, stream positions
(seeding, consumption, checkpoints), repeatability across processes, statistics, dropout."""
import os

import numpy as np
import pytest

import tlgpu
from conftest import run_python

M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85
U32 = np.uint64(0xFFFFFFFF)


def philox(ctr, key):
    """Philox4x32-10 of counters ctr (n, 4) under key (k0, k1), in numpy uint64 arithmetic."""
    c = [np.asarray(ctr, np.uint64)[:, i] for i in range(4)]
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    for _ in range(10):
        p0, p1 = np.uint64(M0) * c[0], np.uint64(M1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & U32, (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & U32]
        k0, k1 = (k0 + np.uint64(W0)) & U32, (k1 + np.uint64(W1)) & U32
    return np.stack(c, 1).astype(np.uint32)


def stream(seed, first_block, nblocks):
    """The generator's values for blocks [first_block, first_block + nblocks): shape (nblocks, 4)."""
    b = np.arange(first_block, first_block + nblocks, dtype=np.uint64)
    ctr = np.stack([b & U32, b >> np.uint64(32), 0 * b, 0 * b], 1)
    return philox(ctr, (seed & 0xFFFFFFFF, seed >> 32))


def unit(x):
    return (x >> 8).astype(np.float64) * 2.0 ** -24


def test_reference_matches_random123_known_answers():
    kat = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
           ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, want in kat:
        assert tuple(int(v) for v in philox([ctr], key)[0]) == want


SEED = 0x1234_5678_9ABC_DEF0


def test_rand_is_the_philox_stream():
    tlgpu.manual_seed(SEED)
    a = tlgpu.rand(37).numpy()                         # blocks 0..9, last one partly used
    assert tlgpu.get_rng_state() == (SEED, 40)
    b = tlgpu.rand(5, 1).numpy()                       # blocks 10, 11
    ref = unit(stream(SEED, 0, 12).ravel())
    assert np.array_equal(a.astype(np.float64), ref[:37])
    assert np.array_equal(b.ravel().astype(np.float64), ref[40:45])
    assert a.dtype == np.float32 and a.min() >= 0.0 and a.max() < 1.0


def test_randint_is_the_philox_stream():
    tlgpu.manual_seed(7)
    got = tlgpu.randint(-5, 1000, (3, 7)).numpy()      # 21 values: 11 blocks of two
    assert got.dtype == np.int32 and got.shape == (3, 7)
    assert tlgpu.get_rng_state() == (7, 44)
    x = stream(7, 0, 11).astype(np.uint64).reshape(-1, 2)
    ref = -5 + (((x[:, 1] << np.uint64(32)) | x[:, 0]) % np.uint64(1005)).astype(np.int64)
    assert np.array_equal(got.ravel(), ref[:21])


def test_randn_is_box_muller_of_the_stream():
    tlgpu.manual_seed(99)
    got = tlgpu.randn(1001).numpy().astype(np.float64)
    x = stream(99, 0, 251).reshape(-1, 2, 2)
    u1 = ((x[..., 0] >> 8).astype(np.float64) + 1) * 2.0 ** -24
    u2 = unit(x[..., 1])
    r = np.sqrt(-2 * np.log(u1))
    ref = np.stack([r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2)], -1).ravel()[:1001]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=2e-6)


def test_dropout_mask_is_the_stream():
    tlgpu.manual_seed(3)
    got = tlgpu.dropout_mask((5, 9), 0.3).numpy().ravel()
    u = unit(stream(3, 0, 12).ravel())[:45]
    ref = np.where(u >= np.float32(0.3), np.float32(1 / 0.7), 0).astype(np.float32)
    assert np.array_equal(got, ref)


def test_seeding_and_consumption():
    tlgpu.manual_seed(5)
    a, b = tlgpu.rand(100).numpy(), tlgpu.rand(100).numpy()
    assert not np.array_equal(a, b)                    # consecutive calls take fresh counters
    tlgpu.manual_seed(5)
    assert np.array_equal(tlgpu.rand(100).numpy(), a)  # re-seeding replays
    tlgpu.manual_seed(6)
    assert not np.array_equal(tlgpu.rand(100).numpy(), a)
    tlgpu.manual_seed(5)
    tlgpu.rand(100)
    state = tlgpu.get_rng_state()
    c = tlgpu.randn(50).numpy()
    tlgpu.randint(0, 3, (17,))
    tlgpu.set_rng_state(state)
    assert np.array_equal(tlgpu.randn(50).numpy(), c)  # a checkpointed position resumes exactly
    tlgpu.manual_seed(-1)                              # any int, taken mod 2**64
    assert tlgpu.initial_seed() == 2 ** 64 - 1
    s = tlgpu.seed()
    assert tlgpu.get_rng_state() == (s, 0)


def test_zero_size_consumes_nothing():
    tlgpu.manual_seed(1)
    assert tlgpu.rand(0, 3).shape == (0, 3)
    assert tlgpu.randn(4, 0).shape == (4, 0)
    assert tlgpu.randint(0, 2, (0,)).shape == (0,)
    assert tlgpu.get_rng_state() == (1, 0)
    assert tlgpu.rand().shape == () and tlgpu.get_rng_state() == (1, 4)


CODE = """
import hashlib, numpy as np, tlgpu
tlgpu.manual_seed(2024)
h = hashlib.sha256()
for t in (tlgpu.rand(1000, 3), tlgpu.randn(777), tlgpu.randint(-9, 9, (501,)), tlgpu.dropout_mask(64, 0.1)):
    h.update(t.numpy().tobytes())
print(h.hexdigest())
"""


def test_same_seed_same_numbers_across_processes():
    outs = [run_python(CODE) for _ in range(2)]
    for r in outs:
        assert r.returncode == 0, r.stderr
    assert outs[0].stdout == outs[1].stdout
    local = {}
    exec(CODE.replace("print(h.hexdigest())", "out = h.hexdigest()"), local)
    assert local["out"] + "\n" == outs[0].stdout


N = 1 << 20


def test_uniform_statistics():
    tlgpu.manual_seed(11)
    x = tlgpu.rand(N).numpy().astype(np.float64)
    assert abs(x.mean() - 0.5) < 0.005 and abs(x.var() - 1 / 12) < 0.003
    hist = np.bincount((x * 16).astype(int), minlength=16)
    assert np.all(np.abs(hist - N / 16) < 6 * np.sqrt(N / 16))


def test_normal_statistics():
    tlgpu.manual_seed(12)
    z = tlgpu.randn(N).numpy().astype(np.float64)
    assert abs(z.mean()) < 0.01 and abs(z.var() - 1) < 0.01
    assert abs(np.mean(z ** 3)) < 0.02 and abs(np.mean(z ** 4) - 3) < 0.05
    assert abs(np.mean(np.abs(z) < 1) - 0.6827) < 0.003
    assert np.all(np.isfinite(z))


@pytest.mark.parametrize("low,high", [(0, 10), (-3, 4), (100, 137)])
def test_randint_statistics(low, high):
    tlgpu.manual_seed(13)
    x = tlgpu.randint(low, high, (N,)).numpy()
    assert x.min() == low and x.max() == high - 1
    counts = np.bincount(x - low, minlength=high - low)
    expect = N / (high - low)
    chi2 = ((counts - expect) ** 2 / expect).sum()
    dof = high - low - 1
    assert chi2 < dof + 6 * np.sqrt(2 * dof)           # far out in the tail of chi-square(dof)


def test_randint_full_int32_range():
    x = tlgpu.randint(-2 ** 31, 2 ** 31, (4096,)).numpy()
    assert x.min() < -2 ** 30 and x.max() > 2 ** 30


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_mask_statistics(p):
    tlgpu.manual_seed(14)
    m = tlgpu.dropout_mask((N,), p).numpy()
    keep = m != 0
    assert set(np.unique(m)) == {np.float32(0), np.float32(1 / (1 - p))}
    assert abs(keep.mean() - (1 - p)) < 6 * np.sqrt(p * (1 - p) / N)
    assert abs(m.astype(np.float64).mean() - 1) < 0.01  # inverted dropout keeps the expectation


def test_dropout():
    tlgpu.manual_seed(15)
    xn = np.random.default_rng(0).standard_normal((33, 65)).astype(np.float32)
    x = tlgpu.tensor(xn)
    y = tlgpu.dropout(x, 0.25).numpy()
    tlgpu.manual_seed(15)
    m = tlgpu.dropout_mask(x.shape, 0.25).numpy()
    assert np.array_equal(y, xn * m)
    assert tlgpu.dropout(x, 0.25, training=False) is x
    assert tlgpu.dropout(x, 0.0) is x
    assert tlgpu.dropout(x, p=0.5, training=True).shape == (33, 65)


def test_like_and_keywords():
    t = tlgpu.zeros(3, 4)
    assert tlgpu.rand_like(t).shape == (3, 4) and tlgpu.randn_like(t).dtype == np.float32
    assert tlgpu.rand(2, 3, dtype=tlgpu.float32).shape == (2, 3)
    assert tlgpu.randn((2, 3)).shape == (2, 3)
    assert tlgpu.rand_like(tlgpu.zeros(2, dtype=np.int32), dtype=np.float32).dtype == np.float32
    if hasattr(tlgpu.Tensor, "requires_grad"):
        assert tlgpu.randn(3, requires_grad=True).requires_grad


def test_errors():
    with pytest.raises(TypeError, match="rand"):
        tlgpu.rand(3, dtype=np.int32)
    with pytest.raises(TypeError, match="rand_like"):
        tlgpu.rand_like(tlgpu.zeros(2, dtype=np.int32))
    with pytest.raises(ValueError, match="randint"):
        tlgpu.randint(3, 3, (2,))
    with pytest.raises(ValueError, match="int32"):
        tlgpu.randint(0, 2 ** 31 + 1, (2,))
    with pytest.raises(TypeError, match="randint"):
        tlgpu.randint(0, 3, (2,), dtype=np.float32)
    with pytest.raises(ValueError, match="rand"):
        tlgpu.rand(-1)
    for p in (1.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match=r"\[0, 1\)"):
            tlgpu.dropout(tlgpu.ones(3), p)
        with pytest.raises(ValueError, match="dropout_mask"):
            tlgpu.dropout_mask((3,), p)
    with pytest.raises(TypeError, match="int32"):
        tlgpu.dropout(tlgpu.zeros(2, dtype=np.int32), 0.5)
    with pytest.raises(TypeError):
        tlgpu.dropout(np.ones(3), 0.5)
    with pytest.raises(TypeError):
        tlgpu.manual_seed(1.5)
    with pytest.raises(ValueError):
        tlgpu.set_rng_state((1, 3))


@pytest.mark.skipif(os.environ.get("TLGPU_SYNC") == "1", reason="TLGPU_SYNC=1 waits after every op")
def test_lazy_no_waits():
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    for _ in range(10):
        tlgpu.rand(1000)
        tlgpu.randn(1000)
        tlgpu.randint(0, 5, (100,))
        tlgpu.dropout(tlgpu.ones(100), 0.5)
    assert tlgpu.stream_stats()["waits"] == 0
