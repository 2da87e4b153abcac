"""Weight publisher failure behaviour (docs/publish.md, "Failure behaviour"): a Subscriber checks every
field of a segment against its real size (planted and fuzzed segments raise, never crash or hang), wait()
raises PublisherClosed when the publisher closes or its process dies (SIGKILL included), a dead learner's
segment is reclaimed while a live one's is refused, and names and steps are checked and kept."""
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tlgpu
from conftest import HANG_S, ROOT, SAFE_PATH
from tlgpu.publish import PublisherClosed, Subscriber, WeightPublisher

HDR, META, PAGE = 1344, 104, 4096          # header (with 64 ack slots), one tensor row, data-slot alignment


def shm_name(tag):
    return f"tlgpu_test_{tag}_{os.getpid()}"


def align(n, a):
    return (n + a - 1) // a * a


def build_segment(arrays, pid=None, step=7):
    """A layout-1 segment, written as docs/publish.md describes it, holding `arrays` as version 1 in slot 0."""
    names = [k.encode() for k in arrays]
    blob = b"".join(n + b"\0" for n in names)
    n, flat = len(arrays), sum(a.size for a in arrays.values())
    names_off = HDR + n * META
    d0 = align(names_off + len(blob), PAGE)
    slot = align(flat * 4, PAGE)
    buf = bytearray(d0 + 2 * slot)
    struct.pack_into("<QII", buf, 0, 0x3142505550474C54, 1, n)
    struct.pack_into("<8Q", buf, 16, flat, HDR, names_off, d0, d0 + slot, len(buf),
                     os.getpid() if pid is None else pid, 0)
    struct.pack_into("<Q", buf, 128, 1 << 1 | 0)                          # latest: version 1 in slot 0
    struct.pack_into("<QQq", buf, 192, 2, 1, step)                        # slot 0: seq (even), version, step
    off = name_off = 0
    for i, (k, a) in enumerate(arrays.items()):
        shape = list(a.shape) + [0] * (8 - a.ndim)
        struct.pack_into("<4Q8qII", buf, HDR + i * META, off, a.size, name_off, len(names[i]), *shape, a.ndim, 0)
        buf[d0 + off * 4:d0 + (off + a.size) * 4] = a.astype(np.float32).tobytes()
        off += a.size
        name_off += len(names[i]) + 1
    buf[names_off:names_off + len(blob)] = blob
    return buf


def plant(name, buf):
    with open(f"/dev/shm/{name}", "wb") as f:
        f.write(bytes(buf))


@pytest.fixture
def planted():
    made = []

    def make(tag, buf):
        name = shm_name(tag)
        plant(name, buf)
        made.append(name)
        return name
    yield make
    for name in made:
        if os.path.exists(f"/dev/shm/{name}"):
            os.unlink(f"/dev/shm/{name}")


def sample(rng):
    return {"w": rng.standard_normal((3, 5)).astype(np.float32), "b": rng.standard_normal(7).astype(np.float32),
            "s": np.array(rng.standard_normal(), np.float32)}


def test_hand_made_segment_reads_back(rng, planted):
    """The builder the corruption tests start from is itself right: a Subscriber reads its data exactly."""
    arrs = sample(rng)
    with Subscriber(planted("good", build_segment(arrs, step=-5))) as sub:
        version, step, got = sub.latest()
        assert (version, step) == (1, -5) and set(got) == set(arrs)
        for k in arrs:
            assert got[k].shape == arrs[k].shape
            np.testing.assert_array_equal(got[k], arrs[k])
        assert sub.publisher_pid == os.getpid()


def corrupt(buf, off, fmt, value):
    b = bytearray(buf)
    struct.pack_into(fmt, b, off, value)
    return b


ROW = HDR                                   # tensor row 0 ("w": 15 elements, name at 0, length 1)


@pytest.mark.parametrize("what,edit,match", [
    ("magic", lambda b: corrupt(b, 0, "<Q", 0x1234), "magic"),
    ("layout", lambda b: corrupt(b, 8, "<I", 2), "layout version"),
    ("truncated", lambda b: b[:HDR - 1], "smaller than its header"),
    ("short", lambda b: b[:len(b) - PAGE], "header says"),
    ("huge_count", lambda b: corrupt(b, 12, "<I", 0xFFFFFFFF), "tensor table"),
    ("count_past_end", lambda b: corrupt(b, 12, "<I", 1000), "tensor table"),
    ("meta_off_outside", lambda b: corrupt(b, 24, "<Q", 1 << 40), "tensor table"),
    ("names_off_outside", lambda b: corrupt(b, 32, "<Q", 1 << 40), "name table"),
    ("flat_huge", lambda b: corrupt(b, 16, "<Q", 1 << 62), "do not fit"),
    ("data_off_outside", lambda b: corrupt(b, 48, "<Q", 1 << 40), "data slot 1"),
    ("data_off_misaligned", lambda b: corrupt(b, 40, "<Q", PAGE + 2), "data slot 0"),
    ("tensor_past_slot", lambda b: corrupt(b, ROW, "<Q", 2 ** 64 - 3), "outside its data slot"),
    ("numel_past_slot", lambda b: corrupt(b, ROW + 8, "<Q", 1 << 50), "outside its data slot"),
    ("shape_mismatch", lambda b: corrupt(b, ROW + 32, "<q", 4), "shape"),
    ("negative_dim", lambda b: corrupt(b, ROW + 32, "<q", -3), "shape"),
    ("ndim_too_big", lambda b: corrupt(b, ROW + 96, "<I", 9), "shape"),
    ("name_outside", lambda b: corrupt(b, ROW + 16, "<Q", 1 << 40), "name"),
    ("name_unterminated", lambda b: corrupt(b, HDR + 3 * META + 1, "<B", ord("x")), "name"),
    ("name_len_past_nul", lambda b: corrupt(b, ROW + 24, "<Q", 3), "name"),
    ("duplicate_names", lambda b: corrupt(b, HDR + 3 * META + 2, "<B", ord("w")), "two tensors are named 'w'"),
])
def test_planted_segment_is_refused(rng, planted, what, edit, match):
    name = planted(what, edit(build_segment(sample(rng))))
    with pytest.raises(ValueError, match=match):
        Subscriber(name)


def test_slot_named_latest_stuck_mid_write_raises(rng, planted):
    buf = corrupt(build_segment(sample(rng)), 192, "<Q", 3)             # slot 0's seqlock odd for good
    with Subscriber(planted("stuck", buf)) as sub:
        with pytest.raises(ValueError, match="half-written"):
            sub.latest()
        with pytest.raises(ValueError, match="half-written"):
            sub.wait(0, timeout=None)


def test_non_utf8_name_and_missing_segment(rng, planted):
    buf = build_segment(sample(rng))
    buf[HDR + 3 * META] = 0xFF                                          # "w" -> invalid UTF-8
    with pytest.raises(UnicodeDecodeError):
        Subscriber(planted("utf8", buf))
    with pytest.raises(FileNotFoundError):
        Subscriber(shm_name("nothing_here"))


FUZZ = r"""
import json, os, struct, sys
import numpy as np
from tlgpu.publish import Subscriber
src, name, seed, n_iter, data_off = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
good = open(src, "rb").read()
rng = np.random.default_rng(seed)
outcomes = {"data": 0, "none": 0}

def attempt(buf):
    with open("/dev/shm/" + name, "wb") as f:
        f.write(buf)
    try:
        with Subscriber(name) as sub:
            r = sub.latest()
            outcomes["none" if r is None else "data"] += 1
            if r is not None:
                assert sorted(r[2]) == sorted(sub.names) and all(a.dtype == np.float32 for a in r[2].values())
            sub.wait(0 if r is None else r[0], timeout=0)    # none newer: closed and dead owners are seen
    except (ValueError, OSError, RuntimeError) as e:          # PublisherClosed is a RuntimeError
        outcomes[type(e).__name__] = outcomes.get(type(e).__name__, 0) + 1

for off in range(0, 320):                                     # every header byte: all ones, then zero
    for v in (0xFF, 0x00):
        b = bytearray(good)
        b[off] = v
        attempt(bytes(b))
for _ in range(n_iter):                                        # random bytes anywhere before the data
    b = bytearray(good)
    for _ in range(int(rng.integers(1, 9))):
        b[int(rng.integers(0, data_off))] = int(rng.integers(0, 256))
    if rng.random() < 0.2:                                     # and sometimes a cut
        b = b[:int(rng.integers(0, len(b)))]
    attempt(bytes(b))
os.unlink("/dev/shm/" + name)
print(json.dumps(outcomes))
"""


def test_fuzzed_segment_never_crashes_or_hangs(rng, tmp_path):
    """A real segment, then every header byte set to 0xFF and 0x00, then 1500 random mutations of the header,
    tensor table and names (fixed seed), each opened and read in a child process: a crash or a hang fails."""
    arrs = {f"t{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate([5, 64, 1, 300])}
    params = {k: tlgpu.tensor(v) for k, v in arrs.items()}
    name = shm_name("fuzzsrc")
    with WeightPublisher(params, name=name) as pub:
        pub.publish(3)
        assert pub.drain(30)
        good = open(f"/dev/shm/{name}", "rb").read()
    data_off = struct.unpack_from("<Q", good, 40)[0]
    (tmp_path / "seg").write_bytes(good)
    r = subprocess.run([sys.executable, *SAFE_PATH, "-c", FUZZ, str(tmp_path / "seg"), shm_name("fuzz"), "20240611",
                        "1500", str(data_off)], capture_output=True, text=True, timeout=HANG_S, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    outcomes = json.loads(r.stdout)
    print(outcomes)
    assert outcomes["data"] > 0                                # most single-byte edits leave a readable segment
    assert outcomes.get("ValueError", 0) > 100                 # the checks were reached, not just passed
    assert outcomes.get("PublisherClosed", 0) > 0              # an edited pid or closed flag
    assert not os.path.exists(f"/dev/shm/{shm_name('fuzz')}")


def wait_in_thread(fn):
    out = {}

    def run():
        try:
            out["result"] = fn()
        except BaseException as e:                             # noqa: B036 - handed to the test
            out["error"] = e
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th, out


def test_wait_raises_when_the_publisher_closes(rng):
    params = {"a": tlgpu.tensor(rng.standard_normal(100).astype(np.float32))}
    name = shm_name("closewait")
    pub = WeightPublisher(params, name=name)
    pub.publish(0)
    assert pub.drain(30)
    sub = Subscriber(name)
    th_sub, out_sub = wait_in_thread(lambda: sub.wait(1, timeout=None))
    th_pub, out_pub = wait_in_thread(lambda: pub.wait(1, timeout=None))
    time.sleep(0.3)                                            # both are asleep in their waits
    assert th_sub.is_alive() and th_pub.is_alive()
    pub.close()
    th_sub.join(10)
    th_pub.join(10)
    assert not th_sub.is_alive() and not th_pub.is_alive()
    assert isinstance(out_sub.get("error"), PublisherClosed), out_sub
    assert isinstance(out_pub.get("error"), PublisherClosed), out_pub
    assert issubclass(PublisherClosed, RuntimeError)
    np.testing.assert_array_equal(sub.latest()[2]["a"], params["a"].numpy())   # what it had stays readable
    sub.close()


LEARNER = r"""
import sys, time
import numpy as np
import tlgpu
from tlgpu.publish import WeightPublisher
params = {"w": tlgpu.tensor(np.arange(1000, dtype=np.float32))}
pub = WeightPublisher(params, name=sys.argv[1])
pub.publish(11)
pub.drain(30)
print("ready", flush=True)
time.sleep(300)
"""


def start_learner(name):
    # the default device: on the NVIDIA machine, a child of a process that has loaded NVIDIA's OpenCL platform
    # does not see that platform (raw OpenCL too, benchmarks/NOTES.md), so TLGPU_DEVICE=nvidia would fail there
    env = {k: v for k, v in os.environ.items() if k != "TLGPU_DEVICE"}
    child = subprocess.Popen([sys.executable, *SAFE_PATH, "-c", LEARNER, name], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT, env=env)
    assert child.stdout.readline().strip() == "ready"
    return child


def test_sigkilled_learner_wakes_waiters_and_its_segment_is_reclaimed(rng):
    name = shm_name("killed")
    child = start_learner(name)
    try:
        sub = Subscriber(name)
        assert sub.publisher_pid == child.pid
        assert sub.latest()[:2] == (1, 11)
        params = {"w": tlgpu.tensor(rng.standard_normal(10).astype(np.float32))}
        with pytest.raises(FileExistsError, match=f"live publisher process {child.pid}"):
            WeightPublisher(params, name=name)
        th, out = wait_in_thread(lambda: sub.wait(1, timeout=None))
        time.sleep(0.3)
        assert th.is_alive()
        os.kill(child.pid, signal.SIGKILL)                     # not reaped yet: a zombie, which is dead too
        th.join(10)
        assert not th.is_alive()
        assert isinstance(out.get("error"), PublisherClosed) and str(child.pid) in str(out["error"])
        assert os.path.exists(f"/dev/shm/{name}")              # the leftover ...
        with WeightPublisher(params, name=name) as pub:        # ... is reclaimed by a new publisher
            pub.publish(-1)
            with Subscriber(name) as sub2:
                version, step, got = sub2.wait(0, timeout=30)
                assert (version, step) == (1, -1) and sub2.publisher_pid == os.getpid()
                np.testing.assert_array_equal(got["w"], params["w"].numpy())
            with pytest.raises(PublisherClosed):               # the old mapping still names the dead learner
                sub.wait(1, timeout=5)
        sub.close()
    finally:
        child.kill()
        child.wait(30)
    assert not os.path.exists(f"/dev/shm/{name}")


@pytest.mark.parametrize("bad", ["a\0b", "a/b", "", "/", "x" * 255, ".", ".."])
def test_bad_names_raise_value_error(bad):
    params = {"w": tlgpu.zeros(4)}
    with pytest.raises(ValueError):
        WeightPublisher(params, name=bad)
    with pytest.raises(ValueError):
        Subscriber(bad)


def test_long_name_at_the_limit_and_duplicate_tensor_names(rng):
    name = ("tlgpu_test_long_%d_" % os.getpid()).ljust(254, "x")
    arrs = {"w": rng.standard_normal(6).astype(np.float32)}
    with WeightPublisher({"w": tlgpu.tensor(arrs["w"])}, name=name) as pub:
        pub.publish(1)
        with Subscriber("/" + name) as sub:                    # one leading '/' is the same name
            np.testing.assert_array_equal(sub.wait(0, timeout=30)[2]["w"], arrs["w"])

    class Dup:
        def named_parameters(self):
            t = tlgpu.zeros(3)
            return [("w", t), ("b", tlgpu.zeros(2)), ("w", tlgpu.zeros(3))]
    with pytest.raises(ValueError, match="two parameters are named 'w'"):
        WeightPublisher(Dup())


@pytest.mark.parametrize("step", [-1, 2 ** 62, -(2 ** 63), 2 ** 63 - 1, 0])
def test_steps_are_signed_64_bit_and_delivered_as_given(rng, step):
    arrs = {"w": rng.standard_normal(9).astype(np.float32)}
    name = shm_name("step")
    with WeightPublisher({"w": tlgpu.tensor(arrs["w"])}, name=name) as pub:
        with Subscriber(name) as sub:
            pub.publish(step)
            assert pub.wait(0, timeout=30)[:2] == (1, step)
            assert pub.latest()[:2] == (1, step)
            assert sub.wait(0, timeout=30)[:2] == (1, step)
            assert sub.latest()[1] == step and pub.stats()["step"] == step
        with pytest.raises(OverflowError):
            pub.publish(2 ** 63)
