import contextlib
import os
import subprocess
import sys
import time

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where `import tlgpu` comes from: the tree (in-place build) unless TLGPU_PKG_ROOT names another copy
# (make test-sanitize points it at the sanitizer build in build/sanitize, leaving the tree's build alone).
PKG_ROOT = os.path.abspath(os.environ.get("TLGPU_PKG_ROOT", ROOT))
sys.path.insert(0, PKG_ROOT)
os.environ["PYTHONPATH"] = PKG_ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")   # for subprocesses

# A deadline in a test is only a hang guard: many times the normal time, so that a loaded machine (CI sharing
# its 2 cores, say) is never a failure. Every subprocess, child and remote wait in the suite uses it.
HANG_S = 3600

# Shapes that are not multiples of any work-group size, plus zero-size and 0-d.
ODD_SIZES = [1, 7, 33, 1025, 65537]


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


# The start of the 16-bit GEMM checks' child processes (tests/test_gemm_half.py, test_gemm_half_mma.py): the
# dtypes, and exact(x, y, ref, name), which adds name to `bad` unless x @ y is ref in x's dtype bit for bit.
HALF_CHILD = r"""
import json, numpy as np, ml_dtypes, tlgpu
DTS = [(tlgpu.bfloat16, ml_dtypes.bfloat16), (tlgpu.float16, np.float16)]
bad = []
def exact(x, y, ref, name):
    r = x @ y
    if r.dtype != x.dtype or r.shape != ref.shape or not np.array_equal(r.numpy(), ref):
        bad.append(name)
"""


# For `python -c` children started in the tree: -P keeps the cwd (the tree, whose tlgpu has no _C in a
# sanitizer run) off the front of sys.path, so PKG_ROOT's build (PYTHONPATH) is the one they import.
SAFE_PATH = ["-P"] if sys.version_info >= (3, 11) else []


def run_python(code, env=None, timeout=HANG_S):
    """Runs code in a fresh interpreter (for tests of env-var behaviour read once per process)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env["PYTHONPATH"] = PKG_ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, *SAFE_PATH, "-c", code], env=full_env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


def pool_enabled():
    import tlgpu
    return tlgpu.memory_stats()["enabled"]


needs_pool = pytest.mark.skipif("not __import__('conftest').pool_enabled()",
                                reason="the pool is bypassed (TLGPU_POOL=0 or a sanitizer build)")


def _cpu_blas(enable):
    """The CPU BLAS path (docs/cpu.md) on or off for a test, its whole state put back after."""
    import tlgpu
    before = tlgpu._C._cpu_blas()
    tlgpu._C._cpu_blas(enable=enable)
    yield
    tlgpu._C._cpu_blas(enable=before["enabled"], threads=before["threads"], split=before["split"])


@pytest.fixture
def blas_on():
    yield from _cpu_blas(True)


@pytest.fixture
def blas_off():
    yield from _cpu_blas(False)

# make test-sanitize preloads libasan into every process, Ray's raylets and GCS server too: on a loaded 2-core
# machine their startup then outran Ray's fixed 30 s (CI, stops 39 and 40) or the driver's connect to them hung
# (a local run, 2026-11-29). The sinks are Python over Ray: make test runs the Ray tests, the sanitizer run not.
no_ray_under_sanitizer = pytest.mark.skipif(os.environ.get("TLGPU_SANITIZE") == "1",
                                            reason="Ray's own processes under a preloaded libasan (make test-sanitize)")


@contextlib.contextmanager
def patient_node_start(timeout=600):
    """Ray's Node gives its raylet a fixed 30 s to register with the GCS (a constant in ray/_private/node.py)
    and raises "The current node timed out during startup" after it; a loaded CI machine once took longer.
    Node asks services.get_node until it answers, so while this is active each ask waits up to `timeout` s
    itself: a hang guard, not a timing. Wrap ray.init or a Cluster's node starts in it."""
    import ray._private.services as services
    get_node = services.get_node

    def patient(gcs_address, node_id):
        deadline = time.monotonic() + timeout
        while True:
            try:
                return get_node(gcs_address, node_id)
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    services.get_node = patient
    try:
        yield
    finally:
        services.get_node = get_node


@pytest.fixture(autouse=True)
def _matmul_precision_back():
    """The matmul precision is process-wide; a test (or an example run in-process, as nanoGPT's sets
    allow_tf32) that changes it must not change the tests after it."""
    import tlgpu
    before = tlgpu.get_matmul_precision()
    yield
    if tlgpu.get_matmul_precision() != before:
        tlgpu.set_matmul_precision(before)


@pytest.fixture
def float_mv_kernels():
    """tlgpu.quant's float mul_mv kernels for the test: "old" pins them on GPUs too, whose default is the
    integer-dot kernel that quantizes x to int8 (tests/test_quant_mv.py)."""
    from tlgpu import quant
    old = quant._MV_IMPL
    quant._MV_IMPL = "old"
    yield
    quant._MV_IMPL = old
