"""The package as users get it: `python -m build` makes an sdist and a wheel built from that sdist's own
contents; the wheel and the sdist install into fresh virtual environments and work from a directory outside
the tree (every public module imports, a model trains, a weight is quantized, a version is published).
Also `python -m tlgpu`, with and without an OpenCL device or ICD loader."""
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import HANG_S, ROOT

pytestmark = pytest.mark.skipif(os.environ.get("TLGPU_SANITIZE") == "1",
                                reason="packaging is tested in the normal build, not under the sanitizer")

PUBLIC_MODULES = ["tlgpu", "tlgpu.nn", "tlgpu.nn.functional", "tlgpu.nn.utils", "tlgpu.optim",
                  "tlgpu.publish", "tlgpu.quant", "tlgpu.autograd", "tlgpu.__main__"]

# Runs inside the installed package's venv, from a directory outside the source tree.
USE_INSTALLED = r"""
import importlib, os, pkgutil, sys, uuid
import numpy as np
import tlgpu
from importlib.metadata import version

root = sys.argv[1]
assert not tlgpu.__file__.startswith(root), f"imported from the source tree: {tlgpu.__file__}"
assert tlgpu.__version__ == version("tlgpu"), (tlgpu.__version__, version("tlgpu"))
found = sorted(m.name for m in pkgutil.walk_packages(tlgpu.__path__, "tlgpu."))
for name in ["tlgpu"] + found:
    importlib.import_module(name)
for attr in ("nn", "optim", "publish", "quant", "distributions"):
    assert hasattr(tlgpu, attr), attr
assert not hasattr(tlgpu._C, "_matmul_test_view"), "a test hook in the release build"

rng = np.random.default_rng(7)
x = rng.standard_normal((64, 8)).astype(np.float32)
y = (x[:, :3].sum(axis=1) > 0).astype(np.int32)
model = tlgpu.nn.Sequential(tlgpu.nn.Linear(8, 32), tlgpu.nn.ReLU(), tlgpu.nn.Linear(32, 2))
opt = tlgpu.optim.Adam(model.parameters(), lr=0.05)
xt, yt = tlgpu.tensor(x), tlgpu.tensor(y)
losses = []
for _ in range(30):
    loss = tlgpu.nn.functional.cross_entropy(model(xt), yt)
    opt.zero_grad(); loss.backward(); opt.step()
    losses.append(loss.item())
assert losses[-1] < 0.5 * losses[0], losses

w = rng.standard_normal((16, 64)).astype(np.float32)
q = tlgpu.quant.quantize_q4_0(w)
deq = tlgpu.quant.dequantize(q).numpy()
assert np.abs(deq - w).max() <= np.abs(w).max() / 7 + 1e-6
v = rng.standard_normal((3, 64)).astype(np.float32)
got = tlgpu.quant.matmul(tlgpu.tensor(v), q).numpy()
tol = 2e-2 if tlgpu.device().type == "gpu" or tlgpu._C._cpu_quant()["active"] else 1e-4   # int8 activations
np.testing.assert_allclose(got, v @ deq.T, rtol=tol, atol=tol * np.abs(v @ deq.T).max())

name = "tlgpu-pkg-" + uuid.uuid4().hex[:8]
with tlgpu.publish.WeightPublisher(model, name=name) as pub:
    pub.publish(5)
    version_, step, arrays = pub.wait(0, timeout=60)
    sub = tlgpu.publish.Subscriber(name)
    got = sub.wait(0, timeout=60)
    assert got is not None and got[1] == 5
    for k, p in model.named_parameters():
        np.testing.assert_array_equal(arrays[k], p.numpy())
        np.testing.assert_array_equal(got[2][k], p.numpy())
    sub.close()
print("ok", len(found), "modules")
"""


def run(cmd, cwd=None, env=None, timeout=HANG_S):
    full = {k: v for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "TLGPU_SANITIZE", "TLGPU_TEST_HOOKS", "LD_PRELOAD")}
    full.update(env or {})
    p = subprocess.run(cmd, cwd=cwd, env=full, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory):
    """A folder of wheels for what a fresh venv needs to install tlgpu (numpy and ml_dtypes at the running
    interpreter's versions; setuptools and wheel for pip's isolated sdist build), so the installs below never reach a
    package index. TLGPU_WHEELHOUSE names a prepared folder (the GPU machine has no network); otherwise
    pip downloads them once. With neither an index nor such a folder the install tests skip, saying so."""
    import ml_dtypes
    import numpy
    given = os.environ.get("TLGPU_WHEELHOUSE")
    if given:
        for name in ("numpy", "ml_dtypes"):
            if not list(Path(given).glob(f"{name}-*.whl")):
                pytest.skip(f"TLGPU_WHEELHOUSE={given} holds no {name} wheel")
        return Path(given)
    out = tmp_path_factory.mktemp("wheelhouse")
    p = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--timeout", "20",
                        "--retries", "1", "-d", str(out), f"numpy=={numpy.__version__}",
                        f"ml_dtypes=={ml_dtypes.__version__}", "setuptools>=61", "wheel"],
                       capture_output=True, text=True, timeout=HANG_S)
    if p.returncode != 0:
        pytest.skip("no package index reachable and no TLGPU_WHEELHOUSE folder of wheels (numpy, ml_dtypes, "
                    f"setuptools, wheel) to install from: {p.stderr.strip().splitlines()[-1:]}")
    return out


def install_in_fresh_venv(tmp_path, package, wheelhouse):
    """A fresh venv (no system site-packages) with `package` pip-installed, its dependencies from the wheelhouse
    and nothing from an index; returns its python and an empty working directory outside the tree."""
    run([sys.executable, "-m", "venv", str(tmp_path / "venv")])
    py = tmp_path / "venv" / "bin" / "python"
    run([py, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(wheelhouse), str(package)])
    outside = tmp_path / "work"
    outside.mkdir()
    return py, outside


@pytest.fixture(scope="module")
def dist(tmp_path_factory):
    """sdist + wheel from `python -m build` (the wheel is built from the unpacked sdist, not from the tree)."""
    out = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), ROOT], cwd=ROOT)
    sdist, = out.glob("tlgpu-*.tar.gz")
    wheel, = out.glob("tlgpu-*.whl")
    return sdist, wheel


def test_wheel_packages_every_subpackage(dist):
    _, wheel = dist
    tree = {str(p.parent.relative_to(ROOT)) for p in Path(ROOT, "tlgpu").rglob("__init__.py")}
    names = zipfile.ZipFile(wheel).namelist()
    packaged = {os.path.dirname(n) for n in names if n.endswith("/__init__.py")}
    assert tree and tree <= packaged, f"not in the wheel: {tree - packaged}"
    assert any(n.startswith("tlgpu/_C.") and n.endswith(".so") for n in names)


def test_wheel_ships_type_stubs(dist):
    """PEP 561: the extension's stubs and the py.typed marker are in the wheel (tests/test_stubs.py checks
    the stubs themselves)."""
    names = set(zipfile.ZipFile(dist[1]).namelist())
    assert {"tlgpu/_C.pyi", "tlgpu/py.typed"} <= names, sorted(n for n in names if not n.endswith(".py"))
    # setuptools < 77 puts it at dist-info/LICENSE, newer ones under dist-info/licenses/
    assert any(n.endswith(("dist-info/LICENSE", "dist-info/licenses/LICENSE")) for n in names), names


# What only a TLGPU_TEST_HOOKS=1 build may contain: the hooks' Python names and the test-only settings' names.
HOOK_MARKERS = [b"_matmul_test_view", b"_inject_error", b"_slow_reads", b"TLGPU_PUB_TEST_HOLD_US",
                b"_gemm_splitk: S must be", b"_autograd_check_rows", b"TLGPU_TC_EMULATE", b"TLGPU_TC_PACK4",
                b"TLGPU_SG_SPLIT",
                b"_bench_raw", b"_cl_handles", b"_cl_queue", b"_bench_pinned_read"]   # benchmark-only entry points


def test_release_build_has_no_test_hooks(dist):
    _, wheel = dist
    with zipfile.ZipFile(wheel) as z:
        so, = [n for n in z.namelist() if n.startswith("tlgpu/_C.") and n.endswith(".so")]
        binary = z.read(so)
    assert not [m for m in HOOK_MARKERS if m in binary]
    import tlgpu                                      # the tree's build: `make test` builds it with the hooks
    if hasattr(tlgpu._C, "_matmul_test_view"):        # so the markers are what a hook build really contains
        tree_binary = Path(tlgpu._C.__file__).read_bytes()
        assert all(m in tree_binary for m in HOOK_MARKERS)


def test_sdist_carries_sources(dist):
    sdist, _ = dist
    names = {n.split("/", 1)[1] for n in tarfile.open(sdist).getnames() if "/" in n}
    need = {str(p.relative_to(ROOT)) for pat in ("csrc/**/*.c", "csrc/**/*.h", "kernels/*.cl", "kernels/*.h")
            for p in Path(ROOT).glob(pat)}
    need |= {"setup.py", "pyproject.toml", "LICENSE", "README.md", "tlgpu/_version.py", "tlgpu/_C.pyi",
             "tlgpu/py.typed"}
    assert need <= names, f"missing from the sdist: {sorted(need - names)}"


def test_wheel_in_fresh_venv(dist, tmp_path, wheelhouse):
    py, outside = install_in_fresh_venv(tmp_path, dist[1], wheelhouse)
    p = run([py, "-c", USE_INSTALLED, ROOT], cwd=outside)
    assert p.stdout.startswith("ok"), p.stdout
    p = run([py, "-m", "tlgpu"], cwd=outside)
    assert "self-check passed" in p.stdout, p.stdout


def test_sdist_in_fresh_venv(dist, tmp_path, wheelhouse):
    """pip builds the .tar.gz from its own contents (in pip's isolated build environment)."""
    py, outside = install_in_fresh_venv(tmp_path, dist[0], wheelhouse)
    p = run([py, "-c", "import tlgpu, numpy as np; a = tlgpu.tensor(np.arange(5.0)); "
                       "print(tlgpu.__file__, (a * a).sum().item())"], cwd=outside)
    path, value = p.stdout.split()
    assert path.startswith(str(tmp_path / "venv")) and float(value) == 30.0, p.stdout


def run_main(env=None, unshare_cmd=None):
    full = dict(os.environ, PYTHONPATH=ROOT)
    full.update(env or {})
    if "OCL_ICD_VENDORS" in (env or {}):   # OCL_ICD_FILENAMES (set on the NVIDIA machine) would win over it
        full.pop("OCL_ICD_FILENAMES", None)
    cmd = [sys.executable, "-m", "tlgpu"]
    if unshare_cmd is not None:
        cmd = ["unshare", "-m", "sh", "-c", unshare_cmd + " && exec " + " ".join(cmd)]
    return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=HANG_S, cwd=str(Path(ROOT).parent))


def test_python_m_tlgpu_reports_devices_and_self_check():
    import tlgpu
    p = run_main()
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert out.startswith(f"tlgpu {tlgpu.__version__} ")
    for d in tlgpu.devices():
        assert d["name"] in out and f"platform: {d['platform']}" in out
    assert f"default device: {tlgpu.device().name}" in out
    for check in ("op and sync: ok", "kernel cache: ok", "self-check passed"):
        assert check in out, out


def test_python_m_tlgpu_cold_cache_then_hit(tmp_path):
    """An empty cache dir: the self-check builds, writes the entry and a fresh process loads it."""
    p = run_main({"TLGPU_CACHE_DIR": str(tmp_path / "cache")})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "kernel cache: ok: miss, built and written" in p.stdout and "then hit it" in p.stdout, p.stdout
    p = run_main({"TLGPU_CACHE_DIR": str(tmp_path / "cache")})
    assert "kernel cache: ok: hit" in p.stdout, p.stdout


def test_python_m_tlgpu_without_a_device(tmp_path):
    """No ICD registered (ocl-icd reads OCL_ICD_VENDORS): exit 2 and the Debian package to install."""
    p = run_main({"OCL_ICD_VENDORS": str(tmp_path)})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "pocl-opencl-icd" in p.stderr and "Traceback" not in p.stderr, p.stderr


def test_python_m_tlgpu_without_the_icd_loader(tmp_path):
    """libOpenCL.so.1 unloadable (an empty file bound over it in a private mount namespace): exit 2 and a
    message naming the loader package, not a traceback; `import tlgpu` raises ImportError saying the same."""
    import tlgpu
    lib = next((line.split("=>")[1].split()[0] for line in
                subprocess.run(["ldd", tlgpu._C.__file__], capture_output=True, text=True).stdout.splitlines()
                if "libOpenCL" in line and "=>" in line), None)
    if lib is None or shutil.which("unshare") is None or \
            subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs unshare -m (root) to hide libOpenCL in a private mount namespace")
    empty = tmp_path / "empty.so"
    empty.write_bytes(b"")
    hide = f"mount --bind {empty} {os.path.realpath(lib)}"
    p = run_main(unshare_cmd=hide)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "ocl-icd-libopencl1" in p.stderr and "Traceback" not in p.stderr, p.stderr
    code = "import tlgpu"
    p = subprocess.run(["unshare", "-m", "sh", "-c", f'{hide} && exec {sys.executable} -c "{code}"'],
                       env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=HANG_S)
    assert p.returncode == 1 and "ImportError: tlgpu needs an OpenCL ICD loader" in p.stderr, p.stderr


def test_version_has_one_source():
    import tlgpu
    text = Path(ROOT, "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and "tlgpu._version.__version__" in text
    assert tlgpu.__version__ == tlgpu._version.__version__
