#!/usr/bin/env bash
# Builds tlgpu on the NVIDIA GPU machine and runs the suite and the benchmarks there (see ../shared/GPU.md).
# Usage (on that machine, repo root): bash benchmarks/gpu_run.sh [pytest-args...]; logs go to $OUT (or /tmp/out).
# .deps/root (Debian's ICD loader + headers, git-ignored) is used only when the machine lacks them.
# WHEELS=dir: wheels installed first (--no-deps, into /tmp/pyx on PYTHONPATH: gymnasium and ale-py there);
# BEFORE="commands": run after the build, before the suite; AFTER="commands": run last (same environment).
# PYTEST_X=: run the whole suite past failures (default -x stops at the first).
# TLGPU_WHEELHOUSE=dir: wheels (numpy, ml_dtypes, setuptools, wheel) test_package installs fresh venvs from (no network).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=$(command -v /opt/torch/.venv/bin/python3 || command -v python3)
if ! ldconfig -p | grep -q 'libOpenCL.so.1' && [ -d .deps/root ]; then
    export LD_LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
    export LIBRARY_PATH=$PWD/.deps/root/usr/lib/x86_64-linux-gnu
fi
[ -f /usr/include/CL/cl.h ] || export C_INCLUDE_PATH=$PWD/.deps/root/usr/include
if [ -z "$(ls /etc/OpenCL/vendors 2>/dev/null | grep -i nvidia)" ] && [ -e /usr/local/nvidia/lib64/libnvidia-opencl.so.1 ]; then
    mkdir -p /tmp/icd && echo /usr/local/nvidia/lib64/libnvidia-opencl.so.1 > /tmp/icd/nvidia.icd
    cp /etc/OpenCL/vendors/*.icd /tmp/icd/ 2>/dev/null; export OCL_ICD_VENDORS=/tmp/icd
fi
[ -d .deps/clblast ] && export LD_LIBRARY_PATH=$PWD/.deps/clblast:${LD_LIBRARY_PATH:-}   # CLBlast for bench_gemm
export TLGPU_DEVICE=${TLGPU_DEVICE:-nvidia} PYTHONUNBUFFERED=1
if [ -n "${WHEELS:-}" ]; then
    $PY -m pip install -q --no-deps --no-index --target /tmp/pyx "$WHEELS"/*.whl > "$OUT/wheels.log" 2>&1 &&
        export PYTHONPATH=/tmp/pyx${PYTHONPATH:+:$PYTHONPATH} || tail -5 "$OUT/wheels.log"
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
$PY setup.py -q build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
$PY -c "import tlgpu; print(tlgpu.devices()); print(tlgpu.device())" 2>&1 | tee "$OUT/device.txt"
[ -n "${BEFORE:-}" ] && eval "$BEFORE"
$PY -m pytest -q ${PYTEST_X--x} "${@:-tests}" -p no:cacheprovider > "$OUT/pytest.log" 2>&1; echo "pytest rc=$?"; tail -5 "$OUT/pytest.log"
for b in ${BENCHES:-bench_dispatch bench_elementwise}; do
    timeout ${BENCH_TIMEOUT:-300} $PY benchmarks/$b.py ${BENCH_ARGS:-} 2>&1 | tee "$OUT/$b.txt"
done
[ -n "${AFTER:-}" ] && eval "$AFTER"
