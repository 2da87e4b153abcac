"""Weight publisher in half precision (docs/publish.md, "Published dtype"): WeightPublisher(dtype=bfloat16 |
float16) converts on the device, bit-exact against ml_dtypes / numpy conversions of the float32 parameters
(random bits, rounding ties and their neighbours, subnormals, overflow, inf, NaN), through every route: in
process, a Python sink, shared memory read in another process (both the direct and the copying path; the
segment records the dtype and its slots are half size), Ray. The threshold decides on the float32 values,
not on the rounded ones; half parameters are published as they are (or converted); bad dtypes raise."""
import os
import struct
import sys

import numpy as np
import pytest

import tlgpu
from conftest import no_ray_under_sanitizer, patient_node_start, run_python
from tlgpu.publish import Subscriber, WeightPublisher

BF16, F16, F32 = np.dtype(tlgpu.bfloat16), np.dtype(np.float16), np.dtype(np.float32)
HALVES = [BF16, F16]
PAGE = 4096
SHAPES = {"w1": (3, 11), "b1": (7,), "one": (1,), "w2": (1025,), "big": (40000,), "empty": (0, 3)}


def shm_name(tag):
    return f"tlgpu_test_{tag}_{os.getpid()}"


def bits(a):
    return a.view({2: np.uint16, 4: np.uint32}[a.dtype.itemsize])


def f32_values(rng, n):
    """n float32s: random bit patterns (every exponent: subnormals, inf, NaNs with payloads), bfloat16 and
    float16 rounding ties with their neighbours, normals at many scales, the float16 overflow edge."""
    k = n // 8
    u = rng.integers(0, 2**32, 2 * k, dtype=np.uint64).astype(np.uint32)
    exp_bf = rng.integers(1, 255, k).astype(np.uint32) << 23
    ties_bf = exp_bf | (rng.integers(0, 2**7, k).astype(np.uint32) << 16) | 0x8000
    exp16 = rng.integers(100, 143, k).astype(np.uint32) << 23                 # float16's range, subnormals too
    ties16 = exp16 | (rng.integers(0, 2**10, k).astype(np.uint32) << 13) | 0x1000
    edges = np.array([0, 0x7f800000, 0x7fc00000, 0x7f800001, 0x7fa12345, 0x00000001, 0x007fffff, 0x477fe000,
                      0x477fefff, 0x477ff000, 0x33000000, 0x33000001, 0x7f7fffff, 0x7f7f8000], np.uint32)
    allu = np.concatenate([u, ties_bf, ties_bf - 1, ties_bf + 1, ties16, ties16 + 1, edges])
    allu ^= rng.integers(0, 2, allu.size).astype(np.uint32) << 31           # both signs
    x = np.concatenate([allu.view(np.float32),
                        (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 6, n)).astype(np.float32)])
    return rng.permutation(x)[:n]


def make(rng, dtype=F32, shapes=SHAPES):
    """{name: numpy array} of `dtype` (halves: ml_dtypes / numpy rounding of f32_values) and the tensors."""
    total = sum(int(np.prod(s)) for s in shapes.values())
    vals, at, arrs = f32_values(rng, total), 0, {}
    for k, s in shapes.items():
        m = int(np.prod(s))
        with np.errstate(invalid="ignore", over="ignore"):
            arrs[k] = vals[at:at + m].reshape(s).astype(dtype)
        at += m
    return arrs, {k: tlgpu.tensor(v) for k, v in arrs.items()}


def check_bits(got, want, from_f16=()):
    """Bit for bit, dtype and shape included. NaNs made by a float16 conversion (to float16, or from it: the
    keys in from_f16) may carry another payload and sign (a device's vload_half/vstore_half, as
    docs/precision.md says: NVIDIA's give the canonical +NaN, as CUDA's __float2half does): there NaN stays
    NaN. Every other pattern is exact, bfloat16 NaNs from float32 included."""
    assert set(got) == set(want)
    for k, w in want.items():
        g = got[k]
        assert g.dtype == w.dtype and g.shape == w.shape, (k, g.dtype, w.dtype, g.shape, w.shape)
        gb, wb = bits(g).ravel(), bits(w).ravel()
        loose = w.dtype == F16 or k in from_f16
        nan = np.isnan(w.astype(np.float32)).ravel() if loose else np.zeros(w.size, bool)
        assert np.array_equal(np.isnan(g.astype(np.float32)).ravel()[nan], nan[nan])
        bad = np.nonzero((gb != wb) & ~nan)[0]
        assert bad.size == 0, (k, [(hex(int(gb[i])), hex(int(wb[i]))) for i in bad[:8]])


def cast(arrs, dt):
    """The reference: numpy / ml_dtypes conversion (a half goes through its exact float32 value)."""
    with np.errstate(invalid="ignore", over="ignore"):               # NaN and overflow are part of the data
        return {k: a.astype(np.float32).astype(dt) if a.dtype != dt else a for k, a in arrs.items()}


class Recorder:
    def __init__(self):
        self.got = []

    def deliver(self, version, step, arrays):
        self.got.append((version, step, arrays))


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_in_process_and_python_sink_round_like_ml_dtypes(rng, dt):
    arrs, params = make(rng)
    rec = Recorder()
    with WeightPublisher(params, dtype=dt, sinks=[rec]) as pub, WeightPublisher(params) as pub32:
        assert pub.dtype == dt and pub32.dtype == F32
        # the learner's snapshot is the float32 one: same enqueues, only the thread's work changes
        assert pub.stats()["snapshot_enqueues"] == pub32.stats()["snapshot_enqueues"] == 1
        pub.publish(5)
        v, step, got = pub.wait(0, timeout=30)
        assert (v, step) == (1, 5)
        check_bits(got, cast(arrs, dt))
        assert pub.drain(30)
        check_bits(rec.got[0][2], cast(arrs, dt))
        n = sum(a.size for a in arrs.values())
        assert pub.stats()["bytes_moved"] == 2 * n                 # half of the float32 bytes
        pub32.publish(5)
        check_bits(pub32.wait(0, timeout=30)[2], arrs)
        assert pub32.stats()["bytes_moved"] == 4 * n
        # incremental: one tensor changes, only its halves move (and those of tensors holding a NaN, which
        # always count as changed); the others carry over
        arrs["w2"] = f32_values(rng, 1025)
        params["w2"].copy_(tlgpu.tensor(arrs["w2"]))
        moved = sum(a.size for k, a in arrs.items() if k == "w2" or np.isnan(a).any())
        assert moved < n
        pub.publish(6)
        v, _, got = pub.wait(v, timeout=30)
        check_bits(got, cast(arrs, dt))
        assert pub.stats()["bytes_moved"] == 2 * n + 2 * moved
        assert pub.drain(30)
        check_bits(rec.got[-1][2], cast(arrs, dt))


@pytest.mark.parametrize("dt", HALVES, ids=str)
@pytest.mark.parametrize("src", [F32, BF16, F16], ids=str)
def test_fast_path_slices_of_one_storage(rng, src, dt):
    """A flat parameter buffer (one copy per snapshot) of float32 or of a half dtype, published as dt."""
    with np.errstate(invalid="ignore", over="ignore"):
        flat = f32_values(rng, 12001).astype(src)
    big = tlgpu.tensor(flat)
    params = {"a": big[0:1001], "b": big[1001:7001].reshape(60, 100), "c": big[7001:12001]}
    with WeightPublisher(params, dtype=dt) as pub:
        assert pub.stats()["fast_path"]
        pub.publish(0)
        got = pub.wait(0, timeout=30)[2]
    want = {"a": flat[:1001], "b": flat[1001:7001].reshape(60, 100), "c": flat[7001:]}
    check_bits(got, cast(want, dt), want if src == F16 else ())


READER = r"""
import numpy as np
from tlgpu.publish import Subscriber
with Subscriber({name!r}) as sub:
    v, step, got = sub.latest()
    np.savez({out!r}, **{{k: a.view({{2: np.uint16, 4: np.uint32}}[a.dtype.itemsize]) for k, a in got.items()}},
             __meta__=np.array([str(sub.dtype), v, step]))
"""


def header(name):
    with open(f"/dev/shm/{name}", "rb") as f:
        h = f.read(88)
    layout, n = struct.unpack_from("<II", h, 8)
    flat, d0, d1, total = struct.unpack_from("<QQQQ", h, 16)[0:1] + struct.unpack_from("<QQQ", h, 40)
    dtype, elem = struct.unpack_from("<II", h, 80)
    return dict(layout=layout, n=n, flat=flat, slot=d1 - d0, total=total, dtype=dtype, elem=elem,
                size=os.path.getsize(f"/dev/shm/{name}"))


@pytest.mark.parametrize("direct", ["1", "0"])
def test_shared_memory_in_another_process(rng, monkeypatch, tmp_path, direct):
    """The segment records the dtype (layout 2) and its slots are half size; a Subscriber in another
    process reads bfloat16 / float16 arrays bit for bit, straight from device reads into the slots (direct)
    or from pinned staging copied into them (TLGPU_SHM_DIRECT=0), full and incremental versions."""
    monkeypatch.setenv("TLGPU_SHM_DIRECT", direct)
    arrs, params = make(rng)
    hdr = {}
    for dt in [F32] + HALVES:
        name = shm_name(f"dt{dt}{direct}")
        with WeightPublisher(params, dtype=dt, name=name) as pub:
            assert pub.stats()["shm_direct"] == (direct == "1")
            hdr[dt] = header(name)
            for step in (3, 4):
                if step == 4:                                    # incremental: one tensor changes
                    arrs["b1"] = f32_values(rng, 7)
                    params["b1"].copy_(tlgpu.tensor(arrs["b1"]))
                pub.publish(step)
                assert pub.drain(30)
                out = tmp_path / f"{dt}{step}.npz"
                r = run_python(READER.format(name=name, out=str(out)))
                assert r.returncode == 0, r.stderr
                z = np.load(out)
                assert list(z["__meta__"]) == [str(dt), str(step - 2), str(step)]
                got = {k: z[k].view(dt) for k in arrs}
                check_bits(got, cast(arrs, dt))
                with Subscriber(name) as sub:                    # and in this process
                    assert sub.dtype == dt
                    check_bits(sub.latest()[2], cast(arrs, dt))
        assert not os.path.exists(f"/dev/shm/{name}")
    flat = hdr[F32]["flat"]
    assert flat >= sum(a.size for a in arrs.values())
    assert (hdr[F32]["layout"], hdr[F32]["dtype"], hdr[F32]["elem"]) == (1, 0, 0)     # float32: layout 1 as before
    assert hdr[F32]["slot"] == (4 * flat + PAGE - 1) // PAGE * PAGE
    for dt, code in ((BF16, 3), (F16, 2)):
        h = hdr[dt]
        assert (h["layout"], h["dtype"], h["elem"], h["flat"]) == (2, code, 2, flat)
        assert h["slot"] == (2 * flat + PAGE - 1) // PAGE * PAGE                       # half-size slots
        assert h["size"] == h["total"] and h["total"] - hdr[F32]["total"] == 2 * (h["slot"] - hdr[F32]["slot"])


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_threshold_decides_on_float32_values(dt):
    """A float32 change above the threshold is delivered although it rounds to the same halves; one below it
    is skipped although it crosses a rounding tie of the published dtype (so its halves would differ)."""
    ulp = 2.0 ** -7 if dt == BF16 else 2.0 ** -10                 # the published spacing at 1.0
    x = np.full(64, 1.0, np.float32) + np.float32(ulp / 2) - np.float32(2.0 ** -20)   # just under a tie
    p = tlgpu.tensor(x)
    rec = Recorder()
    with WeightPublisher({"p": p}, dtype=dt, threshold=1e-5, sinks=[rec]) as pub:
        pub.publish(0)
        assert pub.drain(30)
        check_bits(rec.got[-1][2], {"p": x.astype(dt)})
        y = x + np.float32(2.0 ** -19)                            # across the tie: 1.9e-6 < threshold
        assert not np.array_equal(bits(y.astype(dt)), bits(x.astype(dt)))
        p.copy_(tlgpu.tensor(y))
        pub.publish(1)
        assert pub.drain(30)
        s = pub.stats()
        assert (s["skipped"], s["delivered"]) == (1, 1)
        check_bits(pub.latest()[2], {"p": x.astype(dt)})           # still the rounded x
        z = y + np.float32(3e-5)                                   # 3e-5 > threshold, same halves as y
        assert np.array_equal(bits(z.astype(dt)), bits(y.astype(dt)))
        p.copy_(tlgpu.tensor(z))
        pub.publish(2)
        assert pub.drain(30)
        s = pub.stats()
        assert (s["skipped"], s["delivered"]) == (1, 2)
        check_bits(rec.got[-1][2], {"p": z.astype(dt)})


def test_half_parameters_as_they_are_or_converted(rng):
    """bfloat16 / float16 parameters: published as they are (every bit, NaN payloads too) or converted to
    the dtype asked for; parameters of mixed dtypes publish float32 by default (PyTorch's promotion)."""
    shapes = {"a": (300,), "b": (17, 5)}
    for src in HALVES:
        arrs, params = make(rng, src, shapes)
        with WeightPublisher(params) as pub:
            assert pub.dtype == src
            pub.publish(0)
            got = pub.wait(0, timeout=30)[2]
            for k in arrs:                                        # the very bits
                assert got[k].dtype == src and np.array_equal(bits(got[k]), bits(arrs[k]))
            assert pub.stats()["bytes_moved"] == 2 * 385
        for dt in (F32,) + tuple(d for d in HALVES if d != src):
            with WeightPublisher(params, dtype=dt) as pub:
                pub.publish(0)
                check_bits(pub.wait(0, timeout=30)[2], cast(arrs, dt), arrs if src == F16 else ())
        # the compare widens the halves: one ulp at 1.0 is a change of 2^-7 / 2^-10
        one = tlgpu.tensor(np.ones(40, np.float32).astype(src))
        ulp = 2.0 ** -7 if src == BF16 else 2.0 ** -10
        with WeightPublisher({"x": one}, threshold=ulp * 0.9) as pub:
            pub.publish(0)
            assert pub.drain(30)
            one.copy_(tlgpu.tensor(np.full(40, 1.0 + ulp, np.float32).astype(src)))
            pub.publish(1)
            assert pub.drain(30)
            assert pub.stats()["delivered"] == 2
            one.copy_(tlgpu.tensor(np.full(40, 1.0, np.float32).astype(src)))
        with WeightPublisher({"x": one}, threshold=ulp * 1.1) as pub:
            pub.publish(0)
            assert pub.drain(30)
            one.copy_(tlgpu.tensor(np.full(40, 1.0 + ulp, np.float32).astype(src)))
            pub.publish(1)
            assert pub.drain(30)
            assert pub.stats()["skipped"] == 1
    with np.errstate(invalid="ignore", over="ignore"):
        mixed = {"f": f32_values(rng, 100), "h": f32_values(rng, 50).astype(F16),
                 "g": f32_values(rng, 70).astype(BF16)}
    params = {k: tlgpu.tensor(v) for k, v in mixed.items()}
    for dt, want in ((None, F32), (BF16, BF16), (F16, F16)):
        with WeightPublisher(params, dtype=dt) as pub:
            assert pub.dtype == want
            pub.publish(0)
            check_bits(pub.wait(0, timeout=30)[2], cast(mixed, want), from_f16=("h",))


@pytest.mark.parametrize("bad", [tlgpu.int32, tlgpu.uint8, np.float64, "int32", "not_a_dtype", 3, object()],
                         ids=repr)
def test_bad_dtypes_raise_naming_dtype(rng, bad):
    _, params = make(rng, shapes={"a": (10,)})
    name = shm_name("baddt")
    with pytest.raises(TypeError, match="dtype"):
        WeightPublisher(params, dtype=bad, name=name)
    assert not os.path.exists(f"/dev/shm/{name}")
    with pytest.raises(TypeError, match="float32, float16 or bfloat16"):     # an int32 parameter
        WeightPublisher({"i": tlgpu.tensor(np.arange(4, dtype=np.int32))}, dtype=tlgpu.bfloat16)
    assert WeightPublisher(params, dtype="bfloat16").dtype == BF16            # numpy's names are dtypes


@no_ray_under_sanitizer
def test_ray_route_bfloat16_zero_copy(rng):
    """A RaySink of a bfloat16 publisher: a Ray task in another process reads the version bit for bit, as
    read-only bfloat16 arrays (uint16 views in the object store: zero-copy both ways)."""
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install tlgpu[ray])")
    import ray.cloudpickle
    from tlgpu.publish import RaySink, RaySubscriber
    started = not ray.is_initialized()
    if started:
        with patient_node_start():
            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, object_store_memory=100 * 2**20)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    @ray.remote(num_cpus=0)
    def read(name):
        import numpy as np
        with RaySubscriber(name, timeout=60) as sub:
            v, step, got = sub.wait(0, timeout=60)
        return v, step, {k: (str(a.dtype), a.flags.writeable, np.array(a.view(np.uint16))) for k, a in got.items()}

    try:
        arrs, params = make(rng, shapes={"w": (33, 7), "b": (5,), "big": (20000,)})
        name = f"dtype{os.getpid()}"
        sink = RaySink(name)
        with WeightPublisher(params, dtype=tlgpu.bfloat16, sinks=[sink]) as pub:
            pub.publish(9)
            assert pub.drain(60)
            v, step, got = ray.get(read.remote(name), timeout=600)
        sink.close()
        assert (v, step) == (1, 9)
        assert all(d == "bfloat16" and not w for d, w, _ in got.values())
        check_bits({k: u.view(BF16) for k, (_, _, u) in got.items()}, cast(arrs, BF16))
    finally:
        ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        if started:
            ray.shutdown()
