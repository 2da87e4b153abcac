"""Weight publisher (tlgpu.publish): snapshot isolation, latest-only mailbox, threshold/force_every,
incremental transfers, the double-buffered staging's consistency, shared memory across processes with a
checksum in every version, acks, error surfacing, and clean shutdown (no thread, no /dev/shm entry)."""
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import tlgpu
from conftest import HANG_S, PKG_ROOT, ROOT, SAFE_PATH
from tlgpu.publish import PublisherClosed, Subscriber, WeightPublisher


# The test-only hooks (_inject_error, _slow_reads, TLGPU_PUB_TEST_HOLD_US) exist only in a TLGPU_TEST_HOOKS=1 build.
needs_hooks = pytest.mark.skipif(not hasattr(WeightPublisher, "_inject_error"),
                                 reason="tlgpu was built without TLGPU_TEST_HOOKS=1: the publisher's test hooks "
                                        "(_inject_error, _slow_reads, TLGPU_PUB_TEST_HOLD_US) are not compiled in")


def make_params(rng, sizes, shapes=None):
    arrs = {}
    for i, n in enumerate(sizes):
        shape = shapes[i] if shapes else (n,)
        arrs[f"layer{i}.w"] = rng.standard_normal(shape).astype(np.float32)
    return arrs, {k: tlgpu.tensor(v) for k, v in arrs.items()}


def shm_name(tag):
    return f"tlgpu_test_{tag}_{os.getpid()}"


def n_tasks():
    return len(os.listdir("/proc/self/task"))


def check_equal(got, want):
    assert set(got) == set(want)
    for k in want:
        assert got[k].shape == want[k].shape, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_first_delivery_is_an_exact_copy(rng):
    arrs, params = make_params(rng, [1, 7, 33, 1025, 65537], [(1,), (7,), (3, 11), (1025,), (65537,)])
    arrs["empty"] = np.zeros((0, 3), np.float32)
    params["empty"] = tlgpu.zeros((0, 3))
    with WeightPublisher(params) as pub:
        assert pub.latest() is None
        assert pub.wait(0, timeout=0.05) is None
        pub.publish(7)
        version, step, got = pub.wait(0, timeout=30)
        assert (version, step) == (1, 7)
        check_equal(got, arrs)
        got["layer0.w"][0] = 123.0                          # our copy: the next latest() is unaffected
        check_equal(pub.latest()[2], arrs)
        assert pub.stats()["bytes_moved"] == sum(a.nbytes for a in arrs.values())


def test_snapshot_isolation(rng):
    arrs, params = make_params(rng, [4096, 1000, 77])
    pub = WeightPublisher(params)
    try:
        for step in range(10):
            pub.publish(step)
            want = {k: v.copy() for k, v in arrs.items()}
            # right after publish: in-place changes that must not leak into this version
            params["layer0.w"].add_(1.0)
            new = rng.standard_normal(1000).astype(np.float32)
            params["layer1.w"].copy_(tlgpu.tensor(new))
            params["layer2.w"].mul_(-2.0)
            arrs["layer0.w"] = arrs["layer0.w"] + np.float32(1.0)
            arrs["layer1.w"] = new
            arrs["layer2.w"] = arrs["layer2.w"] * np.float32(-2.0)
            version, got_step, got = pub.wait(step, timeout=30)
            assert (version, got_step) == (step + 1, step)
            check_equal(got, want)
    finally:
        pub.close()


def test_latest_only_200_rapid_publishes(rng):
    arrs, params = make_params(rng, [20000, 3000, 5])
    params["tag"] = tlgpu.zeros(1)
    pub = WeightPublisher(params)
    seen, errors, stop = [], [], threading.Event()

    def reader():
        v = 0
        while not stop.is_set() or v < 200:
            r = pub.wait(v, timeout=5)
            if r is None:
                break
            v, step, got = r
            seen.append(v)
            if got["tag"][0] != step or step != v - 1:   # every version is the state of its own publish
                errors.append((v, step, float(got["tag"][0])))
    th = threading.Thread(target=reader)
    th.start()
    for step in range(200):
        params["layer0.w"].add_(0.25)
        params["tag"].fill_(float(step))
        pub.publish(step)
    stop.set()
    assert pub.drain(timeout=30)
    th.join(30)
    s = pub.stats()
    pub.close()
    assert not errors
    assert seen and all(a < b for a, b in zip(seen, seen[1:]))
    assert seen[-1] == 200 and s["version"] == 200
    assert s["published"] == 200
    assert s["dropped"] + s["delivered"] + s["skipped"] == 200
    assert s["dropped"] > 0 or s["delivered"] == 200
    assert 0 < s["blocking_mean_s"] <= s["blocking_max_s"]


def test_threshold_skips_small_and_force_every_delivers(rng):
    arrs, params = make_params(rng, [5000, 300])
    a, b = "layer0.w", "layer1.w"
    pub = WeightPublisher(params, threshold=0.5, force_every=3)
    try:
        pub.publish(0)                                       # version 1: the first is always delivered
        assert pub.drain(30)
        assert pub.stats()["delivered"] == 1
        for step in (1, 2):                                  # versions 2, 3: tiny changes, skipped
            params[a].add_(0.01)
            pub.publish(step)
            assert pub.drain(30)
        s = pub.stats()
        assert (s["delivered"], s["skipped"], s["version"]) == (1, 2, 1)
        check_equal(pub.latest()[2], arrs)                   # still version 1
        params[a].add_(0.01)
        pub.publish(3)                                       # version 4: 3 publishes since 1: forced
        assert pub.drain(30)
        s = pub.stats()
        assert (s["delivered"], s["skipped"], s["version"]) == (2, 2, 4)
        got = pub.latest()[2]
        want_a = arrs[a] + np.float32(0.01) + np.float32(0.01) + np.float32(0.01)
        np.testing.assert_allclose(got[a], want_a, atol=1e-6)
        np.testing.assert_array_equal(got[b], arrs[b])
        bytes_before = s["bytes_moved"]
        params[b].add_(2.0)                                  # large: delivered at once, only b moves
        params[a].add_(0.01)                                 # below the threshold: not moved
        pub.publish(4)
        assert pub.drain(30)
        s = pub.stats()
        assert (s["delivered"], s["version"]) == (3, 5)
        assert s["bytes_moved"] - bytes_before == arrs[b].nbytes
        got = pub.latest()[2]
        np.testing.assert_allclose(got[b], arrs[b] + np.float32(2.0), atol=1e-6)
        np.testing.assert_allclose(got[a], want_a, atol=1e-6)  # a's small drift is not delivered yet
    finally:
        pub.close()


def test_incremental_moves_only_changed_tensors_and_slots_stay_consistent(rng):
    sizes = [100 * (i + 1) + i for i in range(10)]
    arrs, params = make_params(rng, sizes)
    names = list(arrs)
    pub = WeightPublisher(params)
    try:
        pub.publish(0)
        assert pub.drain(30)
        total = pub.stats()["bytes_moved"]
        assert total == sum(v.nbytes for v in arrs.values())
        for r in range(12):                                  # each round: one tensor changes
            k = names[(3 * r + 1) % 10]
            delta = rng.standard_normal(arrs[k].shape).astype(np.float32)
            params[k].add_(tlgpu.tensor(delta))
            arrs[k] = arrs[k] + delta
            before = pub.stats()["bytes_moved"]
            pub.publish(r + 1)
            assert pub.drain(30)
            assert pub.stats()["bytes_moved"] - before == arrs[k].nbytes
            # alternate staging slots hold older versions: unchanged tensors must be carried over
            check_equal(pub.latest()[2], arrs)
        s = pub.stats()
        assert s["delivered"] == 13 and s["skipped"] == 0
        pub.publish(99)                                      # nothing changed: threshold 0 skips it
        assert pub.drain(30)
        assert pub.stats()["skipped"] == 1
    finally:
        pub.close()
    with WeightPublisher(params, incremental=False) as pub:
        pub.publish(0)
        pub.drain(30)
        params[names[0]].add_(1.0)
        pub.publish(1)
        pub.drain(30)
        assert pub.stats()["bytes_moved"] == 2 * total


def test_fast_path_for_slices_of_one_storage(rng):
    flat = rng.standard_normal(10000).astype(np.float32)
    big = tlgpu.tensor(flat)
    with WeightPublisher({"all": big}) as pub:              # one storage: one copy, no gather
        s = pub.stats()
        assert s["fast_path"] and s["snapshot_enqueues"] == 1
        pub.publish(0)
        big.add_(1.0)
        check_equal(pub.wait(0, timeout=30)[2], {"all": flat})
    if hasattr(tlgpu.Tensor, "__getitem__") and hasattr(tlgpu.Tensor, "reshape"):   # views, when they exist
        params = {"a": big[0:1000], "b": big[1000:7000].reshape(60, 100), "c": big[7000:10000]}
        flat = flat + np.float32(1.0)
        with WeightPublisher(params) as pub:
            assert pub.stats()["fast_path"] and pub.stats()["snapshot_enqueues"] == 1
            pub.publish(0)
            big.add_(1.0)
            _, _, got = pub.wait(0, timeout=30)
            check_equal(got, {"a": flat[:1000], "b": flat[1000:7000].reshape(60, 100), "c": flat[7000:]})
    _, params = make_params(rng, [10] * 20)
    with WeightPublisher(params) as pub:                    # separate storages: 16 per gather launch
        assert not pub.stats()["fast_path"] and pub.stats()["snapshot_enqueues"] == 2
    with WeightPublisher({"x": big, "y": big}) as pub:      # overlapping: gathered, still correct
        assert not pub.stats()["fast_path"]
        pub.publish(0)
        got = pub.wait(0, timeout=30)[2]
        np.testing.assert_array_equal(got["x"], got["y"])


class _Module:
    def __init__(self, params):
        self.params = params

    def named_parameters(self):
        return iter(self.params.items())


def test_module_like_params_and_argument_errors(rng):
    arrs, params = make_params(rng, [64, 32])
    with WeightPublisher(_Module(params)) as pub:
        pub.publish(0)
        check_equal(pub.wait(0, timeout=30)[2], arrs)
    with pytest.raises(TypeError, match="float32"):
        WeightPublisher({"i": tlgpu.tensor(np.arange(4, dtype=np.int32))})
    with pytest.raises(TypeError, match="Tensor"):
        WeightPublisher({"x": np.zeros(3, np.float32)})
    with pytest.raises(TypeError):
        WeightPublisher([1, 2])
    if hasattr(tlgpu.Tensor, "T"):                          # views, when they exist
        with pytest.raises(ValueError, match="contiguous"):
            WeightPublisher({"t": tlgpu.tensor(arrs["layer0.w"].reshape(8, 8)).T})
    with pytest.raises(ValueError):
        WeightPublisher({})
    with pytest.raises(ValueError):
        WeightPublisher(params, threshold=-1.0)
    with pytest.raises(ValueError):
        WeightPublisher(params, force_every=0)
    pub = WeightPublisher(params)
    params["layer1.w"] = tlgpu.zeros(33)                     # shape changed since construction
    with pytest.raises(ValueError, match="layer1.w"):
        pub.publish(0)
    params["layer1.w"] = tlgpu.zeros(32)                     # same shape, other storage
    with pytest.raises(ValueError, match="storage"):
        pub.publish(0)
    del params["layer1.w"]
    with pytest.raises(ValueError):
        pub.publish(0)
    pub.close()
    pub.close()                                              # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pub.publish(1)
    with pytest.raises(RuntimeError, match="closed"):
        pub.latest()
    assert pub.stats()["published"] == 0


@needs_hooks
def test_errors_surface_and_close_leaves_no_thread_or_segment(rng):
    _, params = make_params(rng, [1000, 10])
    name = shm_name("err")
    with WeightPublisher(params) as warm:                    # runtime, PoCL workers, kernels: warmed up
        warm.publish(0)
        warm.drain(30)
    base = n_tasks()
    pub = WeightPublisher(params, name=name)
    assert n_tasks() == base + 1 and os.path.exists(f"/dev/shm/{name}")
    pub.publish(0)
    pub.drain(30)
    pub._inject_error()
    with pytest.raises(tlgpu.DeviceError, match="injected") as ei:
        deadline, step = time.monotonic() + 30, 0           # the thread fails at once; a loaded machine may lag
        while time.monotonic() < deadline:
            step += 1
            pub.publish(step)
            time.sleep(0.002)
    assert ei.value.code == -59
    with pytest.raises(RuntimeError, match="stopped after an error"):
        pub.publish(1000)
    pub.close()                                              # already raised once: clean close
    assert n_tasks() == base and not os.path.exists(f"/dev/shm/{name}")

    pub = WeightPublisher(params, name=name)                 # error raised by close() if nothing else did
    pub._inject_error()
    time.sleep(0.05)
    with pytest.raises(tlgpu.DeviceError):
        pub.close()
    assert n_tasks() == base and not os.path.exists(f"/dev/shm/{name}")

    pub = WeightPublisher(params, name=name)                 # forgot close(): dealloc cleans up
    with pytest.raises(FileExistsError):
        WeightPublisher(params, name=name)
    pub.publish(0)
    del pub
    assert n_tasks() == base and not os.path.exists(f"/dev/shm/{name}")
    with pytest.raises(FileNotFoundError):
        Subscriber(name)


SUBSCRIBER = r"""
import json, sys
import numpy as np
from tlgpu.publish import Subscriber
sub = Subscriber(sys.argv[1])
last_step = int(sys.argv[2])
sub._slow_reads(3000)      # every read's first attempt sleeps mid-copy: the writer laps it, the seqlock must see
print("ready", flush=True)
versions, bad, v = [], [], 0
while True:
    r = sub.wait(v, timeout=30)
    if r is None:
        break
    v, step, got = r
    versions.append(v)
    chk = got["checksum"]
    for k in range(len(chk) - 1):
        if np.float32(np.sum(got[f"t{k}"], dtype=np.float64)) != chk[k]:
            bad.append((v, k))
    if chk[-1] != step:
        bad.append((v, "step"))
    if step == last_step:
        break
sub.ack(v)
print(json.dumps({"versions": versions, "bad": bad, "retries": sub.retries, "final": v}), flush=True)
sys.stdin.readline()
sub.close()
"""


@needs_hooks
@pytest.mark.parametrize("direct", ["1", "0"])
def test_cross_process_subscriber_never_sees_a_torn_version(rng, monkeypatch, direct):
    monkeypatch.setenv("TLGPU_SHM_DIRECT", direct)     # device reads into the slots, or copies into them
    name, K, steps = shm_name("xproc" + direct), 8, 500
    sizes = [int(s) for s in rng.integers(2000, 12000, K)]
    params = {f"t{k}": tlgpu.zeros(sizes[k]) for k in range(K)}
    params["checksum"] = tlgpu.zeros(K + 1)
    pub = WeightPublisher(params, name=name)
    env = dict(os.environ, PYTHONPATH=PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    child = subprocess.Popen([sys.executable, *SAFE_PATH, "-c", SUBSCRIBER, name, str(steps - 1)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        assert child.stdout.readline().strip() == "ready"
        for step in range(steps):
            chk = np.zeros(K + 1, np.float32)
            for k in range(K):
                a = rng.standard_normal(sizes[k]).astype(np.float32)
                params[f"t{k}"].copy_(tlgpu.tensor(a))
                chk[k] = np.float32(np.sum(a, dtype=np.float64))
            chk[K] = step
            params["checksum"].copy_(tlgpu.tensor(chk))
            pub.publish(step)
        assert pub.drain(60)
        report = json.loads(child.stdout.readline())
        print("subscriber:", len(report["versions"]), "versions,", report["retries"], "retries")
        s = pub.stats()
        assert s["version"] == steps and report["final"] == steps
        assert not report["bad"]
        assert report["retries"] > 0                         # the seqlock was exercised
        vs = report["versions"]
        assert len(vs) > 1 and all(a < b for a, b in zip(vs, vs[1:]))
        assert s["acked"] == [steps]
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(30) == 0
        assert pub.stats()["acked"] == []                    # the subscriber closed: its slot is free
    finally:
        if child.poll() is None:
            child.kill()
        pub.close()
    assert not os.path.exists(f"/dev/shm/{name}")


@needs_hooks
def test_reader_never_accepts_a_slot_being_written(monkeypatch):
    """Deterministic seqlock check of the direct path. V1 lands in slot 0 and a reader takes it, sleeping
    900 ms halfway through its copy. Every delivery holds 600 ms between its device reads and its commit
    (TLGPU_PUB_TEST_HOLD_US): V2 goes to slot 1 (about 0.05-0.65 s after the reader starts), V3 to slot 0
    (read at 0.65 s, committed at 1.25 s). The reader finishes at 0.9 s, while slot 0 half-holds V3: it must
    find the slot's seqlock odd and retry, never return V1 mixed with V3. (Margins of 0.2 s or more.)"""
    monkeypatch.setenv("TLGPU_PUB_TEST_HOLD_US", "600000")
    params = {f"t{k}": tlgpu.zeros(4096) for k in range(4)}
    name = shm_name("hold")

    def fill(v):
        for t in params.values():
            t.copy_(tlgpu.full((4096,), float(v)))

    with WeightPublisher(params, name=name) as pub:
        assert pub.stats()["shm_direct"]
        fill(1)
        pub.publish(1)
        assert pub.drain(30)
        sub = Subscriber(name)
        sub._slow_reads(900000)
        got = []
        reader = threading.Thread(target=lambda: got.append(sub.latest()))
        reader.start()
        time.sleep(0.05)                                     # the reader holds V1 from slot 0, asleep
        fill(2)
        pub.publish(2)
        assert pub.wait(1, timeout=30) is not None           # the thread has taken V2 (slot 1): the mailbox
                                                             # has it, shared memory is next
        fill(3)
        pub.publish(3)                                       # pending until V2 commits, then into slot 0
        reader.join(30)
        assert pub.drain(30) and pub.stats()["dropped"] == 0
        version, _, arrs = got[0]
        values = {float(a[0]) for a in arrs.values()} | {float(a[-1]) for a in arrs.values()}
        assert values == {float(version)}, (version, values)   # one whole version, never V1 and V3 mixed
        assert sub.retries > 0
        sub.close()


def test_in_process_subscriber_and_acks(rng):
    arrs, params = make_params(rng, [300, 40])
    name = shm_name("inproc")
    with WeightPublisher(params, name=name) as pub:
        subs = [Subscriber(name) for _ in range(3)]
        assert subs[0].latest() is None and subs[0].wait(0, timeout=0.05) is None
        pub.publish(5)
        version, step, got = subs[1].wait(0, timeout=30)
        assert (version, step) == (1, 5)
        check_equal(got, arrs)
        for i, s in enumerate(subs):
            s.ack(i + 1)
        assert sorted(pub.stats()["acked"]) == [1, 2, 3]
        subs[0].close()
        with pytest.raises(RuntimeError):
            subs[0].latest()
        assert sorted(pub.stats()["acked"]) == [2, 3]
    t0 = time.monotonic()
    with pytest.raises(PublisherClosed, match="closed"):     # closed publisher: no wait until timeout
        subs[1].wait(1, timeout=30)
    assert time.monotonic() - t0 < 10
    assert subs[1].wait(0, timeout=30)[0] == 1               # a version it has not seen yet is still delivered
    check_equal(subs[1].latest()[2], arrs)                   # the mapping outlives the unlink
    for s in subs[1:]:
        s.close()


@pytest.mark.parametrize("threads,direct", [("3", "1"), ("8", "1"), ("3", "0"), ("8", "0")])
def test_threaded_copies_through_shared_memory(rng, monkeypatch, threads, direct):
    """Deliveries straight into the segment's slots (direct) or copied there from pinned staging
    (TLGPU_SHM_DIRECT=0); copies split over threads (TLGPU_SHM_COPY_THREADS forces it at any size): shares
    that start and end inside tensors, full and incremental publishes, all bit-exact."""
    monkeypatch.setenv("TLGPU_SHM_COPY_THREADS", threads)
    monkeypatch.setenv("TLGPU_SHM_DIRECT", direct)
    arrs, params = make_params(rng, [1, 7001, 333, 25013, 2])
    name = shm_name("threads" + threads + direct)
    with WeightPublisher(params, name=name, incremental=True) as pub:
        assert pub.stats()["shm_direct"] == (direct == "1")
        sub = Subscriber(name)
        pub.publish(1)
        v, _, got = sub.wait(0, timeout=30)
        check_equal(got, arrs)
        for k in ("layer1.w", "layer4.w"):                  # an incremental publish: two tensors change
            arrs[k] = rng.standard_normal(arrs[k].shape).astype(np.float32)
            params[k].copy_(tlgpu.tensor(arrs[k]))
        pub.publish(2)
        v, _, got = sub.wait(v, timeout=30)
        check_equal(got, arrs)
        sub.close()


@pytest.mark.skipif(__import__("importlib").util.find_spec("gymnasium") is None,
                    reason="the demo's actors step gymnasium environments (make test installs it)")
def test_rl_learner_demo_smoke():
    """make demo's script runs end to end (actor processes, shared memory, PPO updates) in a tiny config."""
    import os
    import subprocess
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # the script's logic is what is tested, so it runs on the CPU device where there is one (on the GPU machine,
    # a child started late in this module once failed to see the NVIDIA platform: benchmarks/NOTES.md)
    env = dict(os.environ)
    if any("Portable Computing Language" in d["platform"] for d in tlgpu.devices()):
        env["TLGPU_DEVICE"] = "Portable Computing Language"
    cmd = [sys.executable, os.path.join(root, "examples", "rl_learner.py"), "--actors", "1", "--envs", "4",
           "--horizon", "32", "--max-updates", "3"]
    child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root, env=env)
    out, err = child.communicate(timeout=HANG_S)
    assert "summary: 3 updates" in out, out + err
    assert "published 4, delivered" in out
    assert "actors' policy forward: tlgpu on " in out, out        # the default: the jitted tlgpu forward
    assert not os.path.exists(f"/dev/shm/tlgpu_rl_{child.pid}")     # its own segment (others may run the demo too)
