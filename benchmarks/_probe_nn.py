import sys, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__))); sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import numpy as np, tlgpu
from bench_gemm import best_time
rng = np.random.default_rng(0)
for n in (2048, 4096):
    a = rng.standard_normal((n, n), dtype=np.float32); b = rng.standard_normal((n, n), dtype=np.float32)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    f = 2.0 * n ** 3
    t_nn = best_time(lambda: ta @ tb, 0.3, tlgpu.synchronize)
    t_tr = best_time(lambda: ta.T.contiguous(), 0.3, tlgpu.synchronize)
    at = ta.T.contiguous()
    t_tn = best_time(lambda: at.T @ tb, 0.3, tlgpu.synchronize)
    t_both = best_time(lambda: ta.T.contiguous().T @ tb, 0.3, tlgpu.synchronize)
    print(f"n={n} nn {f/t_nn/1e12:.1f} TF  transpose {t_tr*1e6:.0f} us  tn {f/t_tn/1e12:.1f} TF  copy+tn {f/t_both/1e12:.1f} TF  err {np.abs((at.T@tb).numpy()-a@b).max():.2e}")
