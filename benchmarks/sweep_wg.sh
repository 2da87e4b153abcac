#!/usr/bin/env bash
# Sweeps TF32 wgmma rows that have never run on a GPU, safely: each row first alone in diag_wg.py under a
# timeout (a wrong mbarrier phase hangs the kernel, and only killing the process ends it), then
# bench_gemm.py --tc-sweep on the rows that came out exact, beside the production row. Run on the H100
# machine after gpu_run.sh has built tlgpu, e.g. AFTER='bash benchmarks/sweep_wg.sh wgb128x128x16s2 ...'.
# Env: PY (python), OUT (logs: sweep_wg_diag.txt, sweep_wg.txt), SIZES (default "2048 4096 8192"),
# DIAG_TIMEOUT (s, default 90), BASE (the row to compare against, default wg128x128x16s3).
set -u
PY=${PY:-python3}
OUT=${OUT:-/tmp/out}
export TLGPU_BUILD_OPTIONS="${TLGPU_BUILD_OPTIONS:-} -DTC_SWEEP"
good=${BASE:-wg128x128x16s3}
for t in "$@"; do
    timeout "${DIAG_TIMEOUT:-90}" "$PY" benchmarks/diag_wg.py "$t" > "$OUT/diag_$t.log" 2>&1
    rc=$?
    echo "== $t diag rc=$rc" | tee -a "$OUT/sweep_wg_diag.txt"
    grep -v '^{"capability"' "$OUT/diag_$t.log" | cut -c1-600 >> "$OUT/sweep_wg_diag.txt"
    rm -f "$OUT/diag_$t.log"
    [ "$rc" = 0 ] && good="$good,$t"
done
echo "exact: $good"
timeout 400 "$PY" benchmarks/bench_gemm.py --tc-sweep --tc-tags "$good" --sizes ${SIZES:-2048 4096 8192} \
    --seconds 0.3 2>&1 | tee "$OUT/sweep_wg.txt"
