"""python -m tlgpu: the version, every OpenCL platform and device, the default device and a short self-check.

Exit status: 0 when the self-check passed, 1 when it failed, 2 when there is no OpenCL ICD loader or no
device (the message says which Debian package to install).
"""
import os
import subprocess
import sys
import time

NO_DEVICE_HINT = ("install an OpenCL driver: on Debian/Ubuntu `apt-get install pocl-opencl-icd` (any CPU) "
                  "or the GPU vendor's ICD (e.g. nvidia-opencl-icd)")


def _check_op(tlgpu, np):
    """a*b+a summed on the device against numpy, with the sync counted: 0 waits before numpy(), 1 after."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(4099).astype(np.float32), rng.standard_normal(4099).astype(np.float32)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    a, b = tlgpu.tensor(x), tlgpu.tensor(y)
    s = (a * b + a).sum()
    waits_before = tlgpu.stream_stats()["waits"]
    got = float(s.numpy())
    waits_after = tlgpu.stream_stats()["waits"]
    want = float((x.astype(np.float64) * y + x).sum())
    ok = abs(got - want) <= 1e-3 * (1 + abs(want)) and waits_before == 0 and waits_after == 1
    return ok, f"sum(a*b+a) = {got:.5f} (numpy {want:.5f}); host waits {waits_before} before numpy(), " \
               f"{waits_after} after"


def _check_cache(tlgpu):
    """The elementwise program came from the disk cache, or was built and a fresh process now loads it."""
    st = tlgpu._C._program_stats()
    where = st["cache_dir"]                          # as the C side resolves it (csrc/core/settings.c reads)
    if where is None:
        return True, "disabled (TLGPU_CACHE_DIR is empty)"
    if st["binary_loads"] > 0:
        return True, f"hit ({st['binary_loads']} program(s) loaded from {where})"
    if st["cache_writes"] == 0:
        return False, f"miss, and nothing was written to {where} (not writable?)"
    code = ("import numpy as np, tlgpu; a = tlgpu.tensor(np.arange(3.0)); (a * a + a).sum().numpy(); "
            "print(tlgpu._C._program_stats()['binary_loads'])")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    loads = child.stdout.strip().splitlines()[-1:] or ["?"]
    if child.returncode == 0 and loads[0].isdigit() and int(loads[0]) > 0:
        return True, f"miss, built and written to {where}; a fresh process then hit it"
    return False, f"built and written to {where}, but a fresh process did not load it: {child.stderr[-300:]}"


def main():
    try:
        import numpy as np
        import tlgpu
    except ImportError as exc:
        print(f"tlgpu: cannot import: {exc}", file=sys.stderr)
        return 2
    print(f"tlgpu {tlgpu.__version__} ({os.path.dirname(tlgpu.__file__)})")
    print(f"python {sys.version.split()[0]}, numpy {np.__version__}")
    try:
        devs = tlgpu.devices()
        dev = tlgpu.device()
    except tlgpu.DeviceError as exc:
        hint = "" if "install" in str(exc) else f"; {NO_DEVICE_HINT}"
        print(f"tlgpu: no usable OpenCL device: {exc}{hint}", file=sys.stderr)
        return 2
    platform = None
    for d in devs:
        if d["platform"] != platform:
            platform = d["platform"]
            print(f"platform: {platform}")
        mark = "*" if (d["platform"], d["index"]) == (dev.platform, dev.index) and d["name"] == dev.name else " "
        print(f"  {mark} [{d['index']}] {d['name']} ({d['type']}, {d['version']}, driver {d['driver']}, "
              f"{d['global_mem_bytes'] / 2**30:.1f} GiB, {d['compute_units']} compute units)")
    sel = tlgpu.settings()["TLGPU_DEVICE"]["value"]
    print(f"default device: {dev.name} on {dev.platform}" + (f" (TLGPU_DEVICE={sel})" if sel else ""))
    failed = 0
    t0 = time.perf_counter()
    for label, check in (("op and sync", lambda: _check_op(tlgpu, np)), ("kernel cache", lambda: _check_cache(tlgpu))):
        try:
            ok, what = check()
        except Exception as exc:  # a self-check reports every failure as a line, never a traceback
            ok, what = False, f"{type(exc).__name__}: {exc}"
        failed += not ok
        print(f"self-check {label}: {'ok' if ok else 'FAILED'}: {what}")
    print(f"self-check {'passed' if not failed else 'FAILED'} in {time.perf_counter() - t0:.2f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
