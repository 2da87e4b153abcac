import os, subprocess, sys
out = os.environ.get("OUT", "/tmp/out")
for i, opt in enumerate(["", "-DMVM_PIPE=0", "-DMVM_MT_q4_0=1", "-DMVM_MT_q4_0=1 -DMVM_PIPE=0"]):
    env = dict(os.environ, TLGPU_BUILD_OPTIONS=opt, TLGPU_CACHE_DIR=f"/tmp/cc{i}")
    r = subprocess.run([sys.executable, "benchmarks/bench_gemm.py", "--quant", "--quick", "--mv-rows", "8", "--impls",
                        "mma", "--seconds", "0.2"], env=env, capture_output=True, text=True, timeout=200)
    print("OPT", repr(opt), [l for l in r.stdout.splitlines() if "mma" in l], r.stderr[-300:])
subprocess.run("tar czf $OUT/cc.tgz /tmp/cc0 /tmp/cc1 /tmp/cc2 /tmp/cc3", shell=True)
