"""Device-to-host read bandwidth into the kinds of host memory the weight publisher can stage into, in one
run (tlgpu._C._bench_pinned_read(nbytes, iters, mode)): 0 a CL_MEM_ALLOC_HOST_PTR buffer mapped once (the
pinned reference); 1 a MAP_SHARED mapping, as the shared-memory slots are; 2 the same mapping registered
first as a CL_MEM_USE_HOST_PTR buffer, reading into its pointer (how the publisher fills the slots);
3 a copy into that registered buffer, then a map and unmap of it. Each mode checks the data it read.

Usage: python3 benchmarks/bench_host_reads.py [--mib 64 400] [--iters 5]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import tlgpu  # noqa: E402
from _util import bench_hook  # noqa: E402

MODES = ["pinned (ALLOC_HOST_PTR, mapped)", "MAP_SHARED mapping", "MAP_SHARED, registered (USE_HOST_PTR)",
         "copy into registered + map/unmap"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, nargs="+", default=[64, 400])
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    print(f"## Device-to-host reads\ndevice: {tlgpu.device().name}\n\n| MiB | destination | GB/s | ms |\n|---|---|---|---|")
    for mib in args.mib:
        n = mib << 20
        for m, what in enumerate(MODES):
            t = bench_hook("_bench_pinned_read")(n, args.iters, m)
            print(f"| {mib} | {what} | {n / t / 1e9:.1f} | {t * 1e3:.2f} |", flush=True)


if __name__ == "__main__":
    main()
