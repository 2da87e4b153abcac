import tlgpu
print(tlgpu.device().name)
for n in (64 << 20, 400 << 20):
    for m in range(4):
        try:
            t = tlgpu._C._bench_pinned_read(n, 5, m)
            print(f"{n >> 20} MiB mode {m}: {n / t / 1e9:.1f} GB/s ({t * 1e3:.2f} ms)", flush=True)
        except Exception as e:
            print(n >> 20, m, type(e).__name__, e, flush=True)
