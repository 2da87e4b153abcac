"""The on-disk kernel binary cache heals itself: an entry whose payload no longer matches the checksum in its
header (flipped bytes, truncation, an empty file, a garbage header) is rejected before it reaches the
driver, rebuilt from source and rewritten, silently; processes that fill one cache at the same time leave
only complete entries (temporary file in the same directory, then rename) and no temporary files."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import HANG_S, PKG_ROOT


def run_python(code, env):
    """Like conftest.run_python, but imports tlgpu from PKG_ROOT (the sanitizer build under make
    test-sanitize: its cwd, which `python -c` puts first on sys.path)."""
    full = dict(os.environ, **env)
    full["PYTHONPATH"] = PKG_ROOT + os.pathsep + full.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=HANG_S,
                          cwd=PKG_ROOT)

CODE = """
import json, numpy as np, tlgpu
x = np.random.default_rng(5).standard_normal(1000).astype(np.float32)
got = (tlgpu.tensor(x) * 3.0 + 1.0).tanh().numpy()
want = np.tanh(x * np.float32(3) + np.float32(1))
print(json.dumps({"ok": bool(np.allclose(got, want, rtol=1e-5, atol=1e-6)), "stats": tlgpu._C._program_stats()}))
"""


def run_cached(cache_dir):
    r = run_python(CODE, env={"TLGPU_CACHE_DIR": str(cache_dir)})
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["ok"]
    return out["stats"]


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """A cache directory holding the entries CODE needs, written by one cold run."""
    d = tmp_path_factory.mktemp("kcache")
    s = run_cached(d)
    entries = sorted(p.name for p in d.iterdir())
    assert entries and all(e.endswith(".clbin") for e in entries)
    assert s["builds"] == s["cache_writes"] == len(entries) and s["cache_rejects"] == 0
    return d, entries


def flip_payload(b):
    b = bytearray(b)
    for i in range(len(b) // 2, len(b), max(1, len(b) // 97)):     # well past any header
        b[i] ^= 0x5A
    return bytes(b)


CORRUPTIONS = {
    "flipped_payload": flip_payload,
    "truncated": lambda b: b[: len(b) * 2 // 3],
    "empty": lambda b: b"",
    "garbage_header": lambda b: bytes((i * 37 + 11) & 0xFF for i in range(64)) + b[64:],
}


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_corrupt_entry_is_rebuilt_silently(filled, tmp_path, how):
    src, entries = filled
    d = tmp_path / "kcache"
    shutil.copytree(src, d)
    for e in entries:
        p = d / e
        p.write_bytes(CORRUPTIONS[how](p.read_bytes()))
    s = run_cached(d)                                            # the results are checked inside
    n = len(entries)
    assert s["cache_rejects"] == n and s["builds"] == n and s["cache_writes"] == n and s["binary_loads"] == 0
    assert sorted(p.name for p in d.iterdir()) == entries        # rewritten in place, nothing else left
    s = run_cached(d)                                            # healed: every entry loads
    assert s["binary_loads"] == n and s["builds"] == 0 and s["cache_rejects"] == 0


def test_processes_filling_one_cache_at_once_leave_complete_entries(tmp_path):
    d = tmp_path / "kcache"                                      # not created: the writers make it
    # POCL_KERNEL_CACHE=0: PoCL really compiles (no cache of its own), so the four writers overlap longer
    env = dict(os.environ, TLGPU_CACHE_DIR=str(d), POCL_KERNEL_CACHE="0")
    env["PYTHONPATH"] = PKG_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    procs = [subprocess.Popen([sys.executable, "-c", CODE], env=env, cwd=PKG_ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=HANG_S) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
        assert json.loads(out.strip().splitlines()[-1])["ok"]
    names = sorted(p.name for p in d.iterdir())
    assert names and all(n.endswith(".clbin") for n in names), names     # no temporary files left
    s = run_cached(d)                                            # every entry complete and loadable
    assert s["binary_loads"] == len(names) and s["builds"] == 0 and s["cache_rejects"] == 0
