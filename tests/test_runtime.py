"""Runtime, stream, pool and program-cache behaviour: device selection, laziness proved by counts,
cross-queue ordering, pool statistics and reuse, out-of-memory, kernel build errors and the disk cache."""
import json
import os

import numpy as np
import pytest

import tlgpu
from conftest import needs_pool, run_python


def test_devices_and_device():
    devs = tlgpu.devices()
    assert devs and all({"name", "platform", "type", "global_mem_bytes"} <= set(d) for d in devs)
    d = tlgpu.device()
    assert d.name and d.platform and d.type in ("cpu", "gpu", "accelerator", "other") and d.global_mem_bytes > 0


def test_unknown_selector_lists_devices():
    r = run_python("import tlgpu\ntlgpu.zeros(1)", env={"TLGPU_DEVICE": "no-such-device-xyz"})
    assert r.returncode != 0
    assert "DeviceError" in r.stderr and "no-such-device-xyz" in r.stderr and "devices:" in r.stderr
    assert tlgpu.device().name in r.stderr


# Six 1024² products and tanhs enqueued and not waited for (x: the last result).
QUEUED = ("import numpy as np, tlgpu\n"
          "a = tlgpu.tensor(np.random.default_rng(0).standard_normal((1024, 1024)).astype(np.float32))\n"
          "x = a\n"
          "for _ in range(6):\n"
          "    x = (x @ a).tanh()\n")


def test_exit_with_work_in_flight():
    """A script that ends with products still queued exits cleanly: the queues finish before the libraries
    unload (Py_AtExit). Without it PoCL's pthread device crashed in 1 of 5 such exits (SIGSEGV in its kernel
    cache lookup while exit() ran the libraries' finalizers); eight exits here."""
    code = QUEUED + "print(tlgpu.stream_stats()['enqueued'] > 0)\n"
    for _ in range(8):
        r = run_python(code)
        assert r.returncode == 0 and r.stdout.strip() == "True", (r.returncode, r.stderr[-2000:])


def test_forked_child_exits_without_the_parents_queues():
    """A child forked with work in flight that exits normally does not wait on its copies of the parent's queues
    (no driver thread is behind them in the child: without the check the child hung in clFinish)."""
    code = (QUEUED + "import os, sys\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"
            "    sys.exit(0)\n"
            "print(os.waitpid(pid, 0)[1], float(x.sum().numpy()) != 0.0)\n")
    r = run_python(code, timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["0", "True"], (r.returncode, r.stdout, r.stderr[-2000:])


def test_selector_with_index():
    name = tlgpu.device().platform.split()[0]
    r = run_python("import tlgpu; print(tlgpu.device().index)", env={"TLGPU_DEVICE": f"{name}:0"})
    assert r.returncode == 0, r.stderr
    r = run_python("import tlgpu; tlgpu.zeros(1)", env={"TLGPU_DEVICE": f"{name}:99"})
    assert r.returncode != 0 and "DeviceError" in r.stderr


def test_200_ops_are_lazy_and_one_read_waits_once(rng):
    x = rng.standard_normal(1024).astype(np.float32)
    a = tlgpu.tensor(x)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    for _ in range(200):
        a = a * 1.0001 + 0.001
    # a*s + s is two ops: 400 enqueues, flushed every TLGPU_COMPUTE_PER_BUFFER (default 50); the 12 batches
    # of both loops stay within TLGPU_MAX_INFLIGHT (16), so no back-pressure either
    s = tlgpu.stream_stats()
    assert s == {"enqueued": 400, "flushes": 400 // 50, "waits": 0, "backpressure_waits": 0}
    tlgpu.reset_stream_stats()
    for _ in range(200):
        a = a.tanh()
    assert tlgpu.stream_stats() == {"enqueued": 200, "flushes": 200 // 50, "waits": 0, "backpressure_waits": 0}
    got = a.numpy()
    assert tlgpu.stream_stats()["waits"] == 1
    want = x.astype(np.float64)
    for _ in range(200):
        want = want * np.float32(1.0001) + np.float32(0.001)
    for _ in range(200):
        want = np.tanh(want)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_every_sync_point_waits():
    t = tlgpu.tensor([2.5])
    tlgpu.synchronize()
    for read in (lambda: t.numpy(), lambda: np.asarray(t), lambda: t.tolist(), lambda: t.item(),
                 lambda: float(t), lambda: bool(t), lambda: int(t), tlgpu.synchronize):
        tlgpu.reset_stream_stats()
        read()
        assert tlgpu.stream_stats()["waits"] == 1


def test_flush_interval_env_and_sync_mode():
    code = ("import tlgpu, json\nt = tlgpu.zeros(64)\ntlgpu.synchronize(); tlgpu.reset_stream_stats()\n"
            "for _ in range(100): t = t + 1\n"
            "s = tlgpu.stream_stats(); s['value'] = float(t.numpy()[0]); print(json.dumps(s))")
    r = run_python(code, env={"TLGPU_COMPUTE_PER_BUFFER": "7"})
    s = json.loads(r.stdout)
    assert s["enqueued"] == 100 and s["flushes"] == 100 // 7 and s["value"] == 100.0
    r = run_python(code, env={"TLGPU_SYNC": "1"})
    s = json.loads(r.stdout)
    assert s["enqueued"] == 100 and s["waits"] == 100 and s["value"] == 100.0


def test_debug_batching_logs_to_stderr():
    r = run_python("import tlgpu\nt = tlgpu.zeros(4)\nfor _ in range(60): t = t + 1\nt.numpy()",
                   env={"TLGPU_DEBUG_BATCHING": "1"})
    assert r.returncode == 0, r.stderr
    assert "tlgpu: flush after 50 enqueues" in r.stderr and "tlgpu: wait (read)" in r.stderr


def test_upload_then_compute_orders_across_queues(rng):
    # uploads run on the transfer queue; the first compute command must wait for them
    for _ in range(20):
        x = rng.standard_normal(1 << 16).astype(np.float32)
        y = (tlgpu.tensor(x) * 2.0).numpy()
        np.testing.assert_array_equal(y, x * 2)


def test_recycled_buffer_upload_waits_for_pending_reader(rng):
    # a block freed while a kernel still reads it is recycled for an upload: the upload must wait
    for _ in range(10):
        x = rng.standard_normal(1 << 18).astype(np.float32)
        a = tlgpu.tensor(x)
        b = a.exp().sin().cos()          # pending readers of a's block
        del a
        c = tlgpu.tensor(np.zeros(1 << 18, np.float32))   # likely gets a's block
        np.testing.assert_allclose(b.numpy(), np.cos(np.sin(np.exp(x))), rtol=1e-5, atol=1e-6)
        assert not c.numpy().any()


@needs_pool
def test_pool_reuse_flat_live_bytes_and_hit_rate(rng):
    x = tlgpu.tensor(rng.standard_normal((64, 64)).astype(np.float32))
    for _ in range(10):
        x = (x * 0.5 + 1.0).tanh()
    tlgpu.synchronize()
    base = tlgpu.memory_stats()["live"]
    tlgpu.reset_peak_memory_stats()
    for i in range(10000):
        x = (x * 0.5 + 1.0).tanh()
        if i % 1000 == 0:
            assert tlgpu.memory_stats()["live"] == base
    s = tlgpu.memory_stats()
    assert s["live"] == base
    assert s["hits"] / s["allocations"] >= 0.99
    assert s["peak"] <= base + 2 * 64 * 64 * 4
    x.numpy()


@needs_pool
def test_pool_stats_and_empty_cache():
    tlgpu.empty_cache()
    s0 = tlgpu.memory_stats()
    t = tlgpu.empty(1000)
    s1 = tlgpu.memory_stats()
    assert s1["live"] - s0["live"] >= 4000
    assert s1["live"] - s0["live"] <= 4000 * 17 // 16 + 256
    del t
    s2 = tlgpu.memory_stats()
    assert s2["live"] == s0["live"] and s2["cached"] > s0["cached"] and s2["frees"] == s1["frees"] + 1
    t = tlgpu.empty(1000)
    assert tlgpu.memory_stats()["hits"] == s2["hits"] + 1
    del t
    tlgpu.empty_cache()
    assert tlgpu.memory_stats()["cached"] == 0


@needs_pool
def test_size_classes_bound_waste():
    # rounding waste is at most 1/16 (4 mantissa bits), 256 bytes minimum
    for n in [1, 255, 257, 1000, 4097, 10**6 + 3, 3 * 2**20 + 1]:
        t = tlgpu.empty(n)
        tlgpu.empty_cache()
        before = tlgpu.memory_stats()["live"]
        del t
        held = before - tlgpu.memory_stats()["live"]
        assert 4 * n <= held <= max(256, 4 * n * 17 // 16 + 1)


def test_zero_size_tensors_own_nothing():
    before = tlgpu.memory_stats()
    ts = [tlgpu.zeros(0), tlgpu.ones(3, 0, 2), tlgpu.empty(0, dtype=np.int32), tlgpu.tensor(np.zeros((0, 4)))]
    after = tlgpu.memory_stats()
    assert after["live"] == before["live"] and after["allocations"] == before["allocations"]
    assert [t.numpy().shape for t in ts] == [(0,), (3, 0, 2), (0,), (0, 4)]


def test_out_of_memory_raises_after_one_retry():
    dev = tlgpu.device()
    if dev.max_alloc_bytes // 4 + 1024 < 2**31:
        with pytest.raises(tlgpu.OutOfMemoryError, match="largest buffer"):
            tlgpu.empty(dev.max_alloc_bytes // 4 + 1024)
    if dev.global_mem_bytes > 16 * 2**30:
        pytest.skip("filling a large device's memory takes too long for a test")
    chunk = dev.max_alloc_bytes // 4 // 2
    held = []
    before = tlgpu.memory_stats()["oom_retries"]
    with pytest.raises(tlgpu.OutOfMemoryError) as info:
        for _ in range(4 * dev.global_mem_bytes // dev.max_alloc_bytes + 8):
            held.append(tlgpu.empty(chunk))
    assert isinstance(info.value, MemoryError) and isinstance(info.value, tlgpu.DeviceError)
    assert tlgpu.memory_stats()["oom_retries"] > before
    held.clear()
    tlgpu.empty_cache()
    assert tlgpu.empty(chunk).shape == (chunk,)


def test_more_than_int32_elements_is_refused():
    with pytest.raises(ValueError, match="2\\*\\*31"):
        tlgpu.empty(2**31)


@needs_pool
def test_pool_bypass_and_limit():
    code = ("import tlgpu\nfor _ in range(5): t = tlgpu.zeros(1000); del t\n"
            "import json; print(json.dumps(tlgpu.memory_stats()))")
    s = json.loads(run_python(code, env={"TLGPU_POOL": "0"}).stdout)
    assert s["enabled"] is False and s["hits"] == 0 and s["cached"] == 0 and s["live"] == 0
    s = json.loads(run_python(code, env={"TLGPU_POOL_LIMIT_MB": "0"}).stdout)
    assert s["hits"] == 4
    code2 = ("import tlgpu\na = tlgpu.zeros(200000); b = tlgpu.zeros(200000); del a, b\n"
             "import json; print(json.dumps(tlgpu.memory_stats()))")
    s = json.loads(run_python(code2, env={"TLGPU_POOL_LIMIT_MB": "1"}).stdout)
    assert s["limit"] == 1 << 20 and 800000 <= s["cached"] <= 1 << 20 and s["frees"] == 2


def test_program_disk_cache_and_corrupt_entry(tmp_path):
    code = ("import tlgpu, json\nprint(float((tlgpu.tensor([1.0, 2.0]) * 3).numpy()[1]))\n"
            "print(json.dumps(tlgpu._C._program_stats()))")
    env = {"TLGPU_CACHE_DIR": str(tmp_path)}
    r1 = run_python(code, env=env)
    assert r1.returncode == 0, r1.stderr
    s1 = json.loads(r1.stdout.splitlines()[1])
    assert s1["builds"] >= 1 and s1["cache_writes"] >= 1
    entries = list(tmp_path.glob("*.clbin"))
    assert entries
    r2 = run_python(code, env=env)
    s2 = json.loads(r2.stdout.splitlines()[1])
    assert r2.stdout.splitlines()[0] == "6.0" and s2["builds"] == 0 and s2["binary_loads"] >= 1
    for e in entries:
        e.write_bytes(b"TLGPUCLB garbage that is not a program")
    r3 = run_python(code, env=env)
    s3 = json.loads(r3.stdout.splitlines()[1])
    assert r3.stdout.splitlines()[0] == "6.0"
    assert s3["cache_rejects"] >= 1 and s3["builds"] >= 1 and s3["cache_writes"] >= 1


def test_kernel_dir_cache_key_covers_headers(tmp_path):
    """With TLGPU_KERNEL_DIR, a source's headers are part of its cache key: an edited header is a rebuild, not
    a stale binary; an edit that changes a result shows in the result."""
    src = os.path.join(os.path.dirname(os.path.dirname(__file__)), "kernels")
    kdir, cache = tmp_path / "k", tmp_path / "cache"
    kdir.mkdir()
    for name in os.listdir(src):
        (kdir / name).write_bytes(open(os.path.join(src, name), "rb").read())
    code = ("import tlgpu, json\nprint(float((tlgpu.tensor([1.0, 2.0]) * 3).numpy()[1]))\n"
            "print(json.dumps(tlgpu._C._program_stats()))")
    env = {"TLGPU_KERNEL_DIR": str(kdir), "TLGPU_CACHE_DIR": str(cache)}

    def run():
        r = run_python(code, env=env)
        assert r.returncode == 0, r.stderr
        return r.stdout.splitlines()[0], json.loads(r.stdout.splitlines()[1])

    out, s = run()
    assert out == "6.0" and s["builds"] >= 1
    out, s = run()
    assert out == "6.0" and s["builds"] == 0                       # the same text: a cache hit
    ops = (kdir / "ew_ops.h").read_text()
    (kdir / "ew_ops.h").write_text(ops + "\n/* an edit */\n")
    out, s = run()
    assert out == "6.0" and s["builds"] >= 1                       # a header edited: rebuilt
    apply, mul = (kdir / "ew_apply.h").read_text(), "case TL_EW_MUL: return x * y;"
    assert mul in apply, "the multiply's definition moved: update this test"
    (kdir / "ew_apply.h").write_text(apply.replace(mul, mul[:-1] + " + 1.0f;", 1))
    out, _ = run()
    assert out == "7.0"                                             # and the edit is what runs


def test_kernel_build_error_carries_log(tmp_path):
    src = os.path.join(os.path.dirname(os.path.dirname(__file__)), "kernels")
    for name in os.listdir(src):
        (tmp_path / name).write_bytes(open(os.path.join(src, name), "rb").read())
    (tmp_path / "elementwise.cl").write_text("kernel void tl_fill_u32(global uint *o) { this is not C; }\n")
    code = ("import tlgpu\ntry:\n    tlgpu.zeros(3)\nexcept tlgpu.KernelBuildError as e:\n"
            "    print('LOG', 'elementwise.cl' in e.kernel_file, len(e.log) > 0, e.code, '-cl-std' in e.options)\n"
            "    print(str(e)[:2000])")
    r = run_python(code, env={"TLGPU_KERNEL_DIR": str(tmp_path), "TLGPU_CACHE_DIR": ""})
    assert r.returncode == 0, r.stderr
    assert "LOG True True -11 True" in r.stdout
    assert "error" in r.stdout.lower()


def test_device_error_names_call():
    err = tlgpu.DeviceError("x")
    assert isinstance(err, RuntimeError)
    assert issubclass(tlgpu.KernelBuildError, tlgpu.DeviceError)
    assert issubclass(tlgpu.OutOfMemoryError, MemoryError)


def test_two_threads_enqueue_concurrently(rng):
    """Kernel objects are shared by threads that hold the GIL from argument setting to enqueue; blocking
    reads release it, so two threads interleave their ops. Results must stay exact."""
    import threading
    xs = [rng.standard_normal(4097).astype(np.float32) for _ in range(2)]
    results, errors = [None, None], []

    def work(i):
        try:
            t = tlgpu.tensor(xs[i])
            for _ in range(300):
                t = (t * 0.5 + 1.0).tanh()
                if _ % 50 == 0:
                    t.numpy()                              # a blocking read: lets the other thread run
            results[i] = t.numpy()
        except Exception as e:                             # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    for i in range(2):
        want = xs[i]
        for _ in range(300):
            want = np.tanh(want * np.float32(0.5) + np.float32(1.0))
        np.testing.assert_allclose(results[i], want, rtol=1e-5, atol=1e-6)
