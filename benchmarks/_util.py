"""Shared benchmark helpers: medians of repeated timings, table/JSON output, the device line."""
import json
import statistics
import sys
import time

import tlgpu


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
