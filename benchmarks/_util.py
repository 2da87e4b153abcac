"""Shared benchmark helpers: medians of repeated timings, table/JSON output, the device line, the
benchmark-only entry points of test-hooks builds."""
import json
import os
import statistics
import sys
import time

import tlgpu


def bench_hook(name):
    """tlgpu._C.<name>: a benchmark-only entry point (_bench_raw, _bench_pinned_read, _cl_handles, _cl_queue)
    that only test-hooks builds carry. Exits, saying how to get one, where this build lacks it (a wheel, or a
    tree built without TLGPU_TEST_HOOKS=1)."""
    fn = getattr(tlgpu._C, name, None)
    if fn is None:
        sys.exit(f"{os.path.basename(sys.argv[0])}: this tlgpu build has no tlgpu._C.{name}, a benchmark-only entry "
                 f"point that release builds leave out: rebuild with TLGPU_TEST_HOOKS=1 (make build)")
    return fn


def median_time(fn, reps=7, warmup=2):
    """Median wall seconds of fn() (fn must end at a sync point)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def report(title, rows, columns, extra=None):
    """Prints a table (or JSON with --json). rows: list of dicts keyed by columns."""
    dev = tlgpu.device()
    if "--json" in sys.argv:
        print(json.dumps({"benchmark": title, "device": dev.name, "platform": dev.platform, "rows": rows,
                          **(extra or {})}, indent=1))
        return
    print(f"## {title}\ndevice: {dev.name} ({dev.platform})\n")
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for r in rows:
        print("| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |")
    for k, v in (extra or {}).items():
        print(f"\n{k}: {_fmt(v)}")
    print()


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"
    return str(v)
