"""The settings table (csrc/core/settings.c): every environment variable in one place, tlgpu.settings(), the
README's Environment table checked against it, and each row read once or at each use as its table says."""
import json
import os
import re

import tlgpu
from tlgpu import _C

from conftest import ROOT, run_python

TEST_BUILD = hasattr(_C, "_matmul_test_view")             # a TLGPU_TEST_HOOKS=1 build


def test_settings_rows():
    s = tlgpu.settings()
    assert s and all(re.fullmatch(r"TLGPU_[A-Z0-9_]+", name) for name in s)     # HOME, OCL_ICD_* stay out
    for name, row in s.items():
        assert set(row) == {"value", "default", "doc", "kind", "read", "test_only"}, name
        assert row["value"] is None or row["value"] == os.environ.get(name) or row["read"] == "once", name
        assert row["doc"] and row["default"] and row["kind"] in ("str", "int", "flag"), name
        assert row["read"] in ("once", "each use", "python"), name
    assert s["TLGPU_COMPUTE_PER_BUFFER"]["default"] == "50" and s["TLGPU_COMPUTE_PER_BUFFER"]["read"] == "once"
    assert s["TLGPU_BLAS"]["read"] == "python" and s["TLGPU_CACHE_DIR"]["read"] == "each use"
    test_only = {n for n, row in s.items() if row["test_only"]}
    assert test_only == ({"TLGPU_TC_EMULATE", "TLGPU_TC_PACK4", "TLGPU_SG_SPLIT", "TLGPU_PUB_TEST_HOLD_US"}
                         if TEST_BUILD else set())


def readme_environment_names():
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    section = text.split("\n## Environment\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    assert rows
    names = [n for line in rows for n in re.findall(r"TLGPU_[A-Z0-9_]+", line.split(" | ")[0])]
    assert len(names) == len(set(names)), "a variable listed twice"
    return set(names)


def test_readme_environment_table_lists_exactly_the_settings():
    settings = {n for n, row in tlgpu.settings().items() if not row["test_only"]}
    listed = readme_environment_names()
    assert listed == settings, {"missing from README": sorted(settings - listed),
                                "not a setting": sorted(listed - settings)}


def test_only_settings_c_reads_the_environment():
    readers = []
    for top, _, files in os.walk(os.path.join(ROOT, "csrc")):
        for f in files:
            if f.endswith((".c", ".h")) and f not in ("settings.c", "settings.h"):
                path = os.path.join(top, f)
                text = open(path, encoding="utf-8").read()
                if re.search(r"\bgetenv\s*\(|secure_getenv|\benviron\b", text):
                    readers.append(os.path.relpath(path, ROOT))
    assert readers == []


def test_python_reads_the_environment_through_the_table():
    """tlgpu/*.py asks tlgpu.settings() (C's reader) instead of reading os.environ itself."""
    readers = []
    for top, _, files in os.walk(os.path.join(ROOT, "tlgpu")):
        for f in files:
            if f.endswith(".py"):
                text = open(os.path.join(top, f), encoding="utf-8").read()
                if re.search(r"os\.environ|os\.getenv|getenv\(", text):
                    readers.append(f)
    assert readers == []


ONCE_AND_EACH = """
import json, os, numpy as np, tlgpu
before = tlgpu.settings()["TLGPU_COMPUTE_PER_BUFFER"]["value"]   # peeking latches nothing
os.environ["TLGPU_COMPUTE_PER_BUFFER"] = "7"
a = tlgpu.tensor(np.ones(64, np.float32))
tlgpu.synchronize()
tlgpu.reset_stream_stats()
for _ in range(21):
    a = a + 1.0
first = tlgpu.stream_stats()["flushes"]
os.environ["TLGPU_COMPUTE_PER_BUFFER"] = "3"                      # read once: no effect now
tlgpu.reset_stream_stats()
for _ in range(21):
    a = a + 1.0
second = tlgpu.stream_stats()["flushes"]
os.environ["TLGPU_SG_COPY"] = "off"                               # read at each use
s = tlgpu.settings()
print(json.dumps({"before": before, "first": first, "second": second,
                  "per_buffer": s["TLGPU_COMPUTE_PER_BUFFER"]["value"], "sg_copy": s["TLGPU_SG_COPY"]["value"],
                  "ok": bool((a.numpy() == 43).all())}))
"""


def test_once_rows_latch_and_each_use_rows_follow_the_environment():
    env = {"TLGPU_COMPUTE_PER_BUFFER": "", "TLGPU_SG_COPY": "", "TLGPU_SYNC": "0"}
    out = run_python(ONCE_AND_EACH, env=env)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.splitlines()[-1])
    assert got == {"before": "", "first": 3, "second": 3, "per_buffer": "7", "sg_copy": "off", "ok": True}


def test_malformed_numbers_take_the_default():
    code = ("import os, numpy as np, tlgpu\na = tlgpu.tensor(np.ones(8, np.float32))\ntlgpu.synchronize()\n"
            "tlgpu.reset_stream_stats()\nfor _ in range(100):\n    a = a + 1.0\n"
            "print(tlgpu.stream_stats()['flushes'])")
    for bad in ("abc", "12x", "-3", "0"):                             # 0 flushes every 50 too
        out = run_python(code, env={"TLGPU_COMPUTE_PER_BUFFER": bad, "TLGPU_SYNC": "0"})
        assert out.returncode == 0, out.stderr
        assert out.stdout.split()[-1] == "2", bad
