"""The CPU BLAS path (docs/cpu.md): matmul on a CPU OpenCL device runs a host BLAS in a native kernel on the
compute queue. Results against numpy float64 with the path on and off (the OpenCL kernels), launch counts,
laziness (no host wait until a sync point) and the fallback when no BLAS loads. Timings are never asserted."""
import numpy as np
import pytest

import tlgpu
from tlgpu import _C
from conftest import run_python

state = _C._cpu_blas()
pytestmark = [pytest.mark.skipif(not state["loaded"], reason=f"no CPU BLAS path here: {state['reason']}"),
              pytest.mark.usefixtures("blas_on")]


def T(x):
    return tlgpu.tensor(np.asarray(x, dtype=np.float32))


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def launches():
    return _C._cpu_blas()["launches"]


def check(got, ref, k):
    got = got.numpy()
    assert got.dtype == np.float32 and got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * max(1.0, np.sqrt(k)))


def both_paths(fn, blas=True):
    """fn() with the BLAS path, then with the OpenCL kernels; the BLAS run must have launched (unless the
    product is decode-shaped: those keep the mul_mv kernel)."""
    n0 = launches()
    on = fn()
    assert launches() > n0 if blas else launches() == n0
    _C._cpu_blas(enable=False)
    n1 = launches()
    off = fn()
    assert launches() == n1
    _C._cpu_blas(enable=True)
    return on, off


MKN = [(1, 1, 1), (7, 13, 5), (33, 65, 17), (1, 33, 17), (17, 33, 1), (64, 1, 32), (9, 1025, 11), (300, 200, 500)]


@pytest.mark.parametrize("m,k,n", MKN)
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_2d_layouts(rng, m, k, n, layout):
    a = randn(rng, m, k) if layout[0] == "n" else randn(rng, k, m)
    b = randn(rng, k, n) if layout[1] == "n" else randn(rng, n, k)
    ta, tb = T(a), T(b)
    ta, a = (ta, a) if layout[0] == "n" else (ta.T, a.T)
    tb, b = (tb, b) if layout[1] == "n" else (tb.T, b.T)
    ref = a.astype(np.float64) @ b
    mv = m <= 8 and n >= 4 and (k == 1 or (a.strides[1] == 4 and b.strides[0] == 4))   # ops_matmul's mul_mv case
    on, off = both_paths(lambda: ta @ tb, blas=not mv)
    check(on, ref, k)
    check(off, ref, k)


@pytest.mark.parametrize("threads,split", [(1, False), (2, True), (2, False), (3, True)])
def test_split_products(rng, threads, split):
    """Products of 2 MFLOP and more are split over helper threads by rows, columns or batches."""
    _C._cpu_blas(threads=threads, split=split)
    for (bs, m, k, n) in [((), 300, 70, 200), ((), 40, 300, 400), ((3,), 70, 90, 60), ((5, 2), 33, 65, 129)]:
        a, b = randn(rng, *bs, m, k), randn(rng, *bs, k, n)
        check(T(a) @ T(b), a.astype(np.float64) @ b, k)


def test_helpers_added_later_run_only_new_products(rng):
    """More parts than helpers so far: new helpers start after earlier products and must not rerun them."""
    a, b = randn(rng, 120, 90), randn(rng, 90, 110)
    ref = a.astype(np.float64) @ b
    for threads in (2, 3, 2, 5, 6, 4):
        _C._cpu_blas(threads=threads, split=True)
        for _ in range(3):
            check(T(a) @ T(b), ref, 90)


def test_batched_and_broadcast(rng):
    a, b = randn(rng, 4, 5, 6), randn(rng, 4, 6, 7)
    check(both_paths(lambda: T(a) @ T(b))[0], a.astype(np.float64) @ b, 6)
    c = randn(rng, 6, 7)
    check(T(a) @ T(c), a.astype(np.float64) @ c, 6)                          # B broadcast over the batch
    d = randn(rng, 3, 1, 5, 6)
    check(T(d) @ T(b), d.astype(np.float64) @ b, 6)                          # 3 x 4 batches
    ta = T(np.ascontiguousarray(np.swapaxes(a, 1, 2)))
    check(ta.transpose(1, 2) @ T(b), a.astype(np.float64) @ b, 6)           # transposed batches


def test_vectors_dot_outer(rng):
    v, m, w = randn(rng, 33), randn(rng, 33, 17), randn(rng, 17)
    check(T(v) @ T(m), v.astype(np.float64) @ m, 33)
    check(T(m) @ T(w), m.astype(np.float64) @ w, 17)
    check(T(v).dot(T(v)), np.dot(v.astype(np.float64), v), 33)
    check(T(v).outer(T(w)), np.outer(v.astype(np.float64), w), 1)


def test_same_buffer_twice_and_offsets(rng):
    a = randn(rng, 40, 30)
    ta = T(a)
    check(ta @ ta.T, a.astype(np.float64) @ a.T, 30)                        # one buffer as A and B
    check(ta[5:25] @ ta[3:33].T, a[5:25].astype(np.float64) @ a[3:33].T, 30)  # views at offsets


def test_strided_operands_fall_back(rng):
    """A K stride the BLAS cannot take (every other element) runs the OpenCL kernel, still exact."""
    a, b = randn(rng, 9, 40), randn(rng, 20, 11)
    va = _C._matmul_test_view(T(a), (9, 20), (40, 2), 0)
    n0 = launches()
    check(va @ T(b), a[:, ::2].astype(np.float64) @ b, 20)
    assert launches() == n0


def test_k0_and_zero_size(rng):
    n0 = launches()
    out = T(np.zeros((3, 0))) @ T(np.zeros((0, 4)))
    np.testing.assert_array_equal(out.numpy(), np.zeros((3, 4), np.float32))
    assert (T(np.zeros((0, 5))) @ T(randn(rng, 5, 3))).shape == (0, 3)
    assert (T(randn(rng, 2, 5)) @ T(np.zeros((5, 0)))).shape == (2, 0)
    assert launches() == n0


def test_decode_shapes_keep_mul_mv(rng):
    x, w = randn(rng, 4, 64), randn(rng, 96, 64)
    n0 = launches()
    check(T(x) @ T(w).T, x.astype(np.float64) @ w.T, 64)
    assert launches() == n0


def test_addmm_residual_fused(rng):
    """addmm beyond the mul_mv rows: the native kernel copies the residual into C and runs beta = 1."""
    x, w, r = randn(rng, 20, 30), randn(rng, 40, 30), randn(rng, 20, 40)
    n0 = launches()
    got = tlgpu.addmm(T(r), T(x), T(w).T)
    assert launches() == n0 + 1
    check(got, r + x.astype(np.float64) @ w.T, 30)


def test_autograd(rng):
    a, b = randn(rng, 13, 17), randn(rng, 17, 9)
    ta, tb = T(a), T(b)
    ta.requires_grad_()
    tb.requires_grad_()
    g = randn(rng, 13, 9)
    ((ta @ tb) * T(g)).sum().backward()
    check(ta.grad, g.astype(np.float64) @ b.T, 9)
    check(tb.grad, a.T.astype(np.float64) @ g, 13)


def test_lazy_no_host_wait(rng):
    """A product on the BLAS path followed by other ops enqueues no host wait until numpy()."""
    a, b = randn(rng, 64, 48), randn(rng, 48, 32)
    ta, tb = T(a), T(b)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    c = ta @ tb
    d = (c * 2.0 + 1.0) @ T(np.ones((32, 8), np.float32))
    e = d.relu()
    assert tlgpu.stream_stats()["waits"] == 0
    ref = np.maximum(((a.astype(np.float64) @ b) * 2 + 1) @ np.ones((32, 8)), 0)
    check(e, ref, 48)
    assert tlgpu.stream_stats()["waits"] == 1


def test_repeatable_and_after_empty_cache(rng):
    """Buffers released to the driver drop their pointer cells; new ones learn theirs (same results)."""
    a, b = randn(rng, 50, 60), randn(rng, 60, 70)
    first = (T(a) @ T(b)).numpy()
    tlgpu.empty_cache()
    for _ in range(3):
        np.testing.assert_array_equal((T(a) @ T(b)).numpy(), first)
        tlgpu.empty_cache()


def test_numpy_thread_count_kept():
    """numpy's OpenBLAS has one thread count for all callers: a product puts it back."""
    import ctypes
    if "scipy_openblas" not in state["path"]:
        pytest.skip("not numpy's OpenBLAS")
    get = ctypes.CDLL(state["path"]).scipy_openblas_get_num_threads64_
    before = get()
    _C._cpu_blas(threads=1, split=False)
    (T(np.ones((200, 200))) @ T(np.ones((200, 200)))).numpy()
    assert get() == before


@pytest.mark.parametrize("value", ["0", "", "/nonexistent/libopenblas.so"])
def test_disabled_or_missing_blas_falls_back(value):
    r = run_python("import numpy as np, tlgpu\n"
                   "a = np.arange(12, dtype=np.float32).reshape(3, 4)\n"
                   "c = (tlgpu.tensor(a) @ tlgpu.tensor(a.T)).numpy()\n"
                   "assert np.array_equal(c, a @ a.T), c\n"
                   "s = tlgpu._C._cpu_blas()\n"
                   "assert not s['loaded'] and s['launches'] == 0 and s['reason'], s\n"
                   "print('ok')\n", env={"TLGPU_BLAS": value})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


@pytest.mark.parametrize("split", [False, True])
def test_linear_relu_applies_the_relu_after_the_product(rng, split):
    """nn.Sequential's Linear + ReLU is one BLAS command: the ReLU runs on each band after its product (split
    parts or one), NaN kept; no elementwise kernel follows."""
    _C._cpu_blas(split=split, threads=2)
    model = tlgpu.nn.Sequential(tlgpu.nn.Linear(48, 300), tlgpu.nn.ReLU())
    x = randn(rng, 40, 48)
    x[3, :] = np.nan
    w, b = model[0].weight.numpy().astype(np.float64), model[0].bias.numpy().astype(np.float64)
    ref = np.maximum(x.astype(np.float64) @ w.T + b, 0)
    ref[3, :] = np.nan
    jf = tlgpu.jit(lambda t: model(t))
    n0 = launches()
    for _ in range(3):
        got = jf(T(x)).numpy()
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
        assert np.isnan(got[3]).all() and (got[np.arange(40) != 3] >= 0).all()
    assert launches() - n0 == 2 and jf.commands() == ["cpu_blas_sgemm"]   # eager, traced; replays re-enqueue
