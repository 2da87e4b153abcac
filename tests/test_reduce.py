"""Reductions (sum mean max min argmax argmin logsumexp) and softmax/log_softmax against numpy (float64)."""
import itertools
import os
import warnings

import numpy as np
import pytest

import tlgpu

SHAPES = [(1,), (7,), (33,), (1025,), (65537,), (3, 1025), (1025, 3), (2, 3, 4), (2, 3, 4, 5)]
OPS = ["sum", "mean", "max", "min", "argmax", "argmin", "logsumexp"]


def axes_for(ndim):
    """None, every axis (positive and negative) and every tuple of two or more axes."""
    out = [None] + list(range(ndim)) + list(range(-ndim, 0))
    for k in range(2, ndim + 1):
        out += list(itertools.combinations(range(ndim), k))
    if ndim >= 2:
        out += [(-1, 0), [ndim - 1, 0]]
    return out


def ref(op, x, axis, keepdims=False):
    x64 = x.astype(np.float64)
    ax = tuple(axis) if isinstance(axis, list) else axis
    if op in ("argmax", "argmin"):
        return getattr(np, op)(x, axis=ax, keepdims=keepdims)
    if op == "logsumexp":
        m = np.max(x64, axis=ax, keepdims=True, initial=-np.inf)
        r = np.log(np.sum(np.exp(x64 - m), axis=ax, keepdims=True)) + m
        return r if keepdims else np.squeeze(r, axis=ax) if ax is not None else r.reshape(())
    return getattr(np, op)(x64, axis=ax, keepdims=keepdims)


def check(op, x, got, axis, keepdims=False):
    want = ref(op, x, axis, keepdims)
    assert got.shape == want.shape, (op, x.shape, axis, keepdims, got.shape, want.shape)
    if op in ("argmax", "argmin"):
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, want, err_msg=f"{op} {x.shape} axis={axis}")
    elif op in ("max", "min"):
        np.testing.assert_array_equal(got, want.astype(np.float32), err_msg=f"{op} {x.shape} axis={axis}")
    else:
        ax = tuple(axis) if isinstance(axis, list) else axis
        scale = np.sum(np.abs(x.astype(np.float64)), axis=ax, keepdims=keepdims)
        if op == "mean":
            scale = scale / max(1, x.size // max(1, np.asarray(want).size))
        atol = 1e-5 * scale + 1e-6 if op != "logsumexp" else 1e-5
        assert np.all(np.abs(got - want) <= atol + 1e-5 * np.abs(want)), (op, x.shape, axis, got, want)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_reduce_matches_numpy(rng, shape, op):
    x = (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32)
    t = tlgpu.tensor(x)
    for axis in axes_for(len(shape)):
        if op in ("argmax", "argmin") and isinstance(axis, (tuple, list)):
            continue
        for keepdims in (False, True):
            got = getattr(t, op)(axis=axis, keepdims=keepdims).numpy()
            check(op, x, got, axis, keepdims)


def test_positive_data_long_rows(rng):
    """Sums whose terms all have one sign, in the split (two-pass) and the column paths."""
    for shape, axis in [((2, 300000), 1), ((300000, 2), 0), ((5, 70000, 3), 1), ((1 << 20,), None)]:
        x = rng.random(shape, dtype=np.float32) + 0.25
        t = tlgpu.tensor(x)
        for op in OPS:
            check(op, x, getattr(t, op)(axis=axis).numpy(), axis)


def test_spellings_and_module_functions(rng):
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    t = tlgpu.tensor(x)
    np.testing.assert_allclose(tlgpu.sum(t, axis=1).numpy(), x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.sum(1).numpy(), x.sum(1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(t.sum(dim=(0, 2), keepdim=True).numpy(), x.sum((0, 2), keepdims=True),
                               rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(tlgpu.max(t, -1).numpy(), x.max(-1))
    np.testing.assert_array_equal(tlgpu.argmax(t).numpy(), x.argmax())
    assert tlgpu.argmax(t).shape == () and tlgpu.argmax(t).dtype == np.int32
    np.testing.assert_allclose(tlgpu.mean(t).item(), x.astype(np.float64).mean(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tlgpu.softmax(t, dim=1).numpy(), t.softmax(axis=1).numpy())
    np.testing.assert_allclose(tlgpu.log_softmax(t).numpy(), t.log_softmax(-1).numpy())
    np.testing.assert_allclose(tlgpu.logsumexp(t, axis=(0, 1)).numpy(), ref("logsumexp", x, (0, 1)), rtol=1e-5)
    with pytest.raises(TypeError, match="axis or dim"):
        t.sum(axis=0, dim=1)
    with pytest.raises(TypeError, match="sum"):
        tlgpu.sum(x)


def test_numpy_reductions_on_a_tensor(rng):
    """np.sum(t), np.mean(t, axis=1), np.std(t, ddof=...) ... call the tensor's own method with numpy's keywords
    (out=None, dtype=None, ddof): device tensors come back, numpy's values; a real out= or dtype= is refused."""
    x = rng.standard_normal((4, 5, 6)).astype(np.float32)
    t = tlgpu.tensor(x)
    for fn, kw in ((np.sum, dict(axis=1)), (np.mean, dict(axis=(0, 2), keepdims=True)), (np.max, {}),
                   (np.min, dict(axis=-1)), (np.amax, dict(axis=0)), (np.prod, dict(axis=2)),
                   (np.std, dict(axis=1)), (np.var, dict(axis=0, ddof=1)), (np.std, dict(ddof=1))):
        got = fn(t, **kw)
        assert isinstance(got, tlgpu.Tensor), fn.__name__
        np.testing.assert_allclose(got.numpy(), fn(x.astype(np.float64), **kw), rtol=2e-5, atol=2e-5,
                                   err_msg=f"{fn.__name__} {kw}")
    with pytest.raises(TypeError, match="out= and dtype="):
        t.sum(out=t)
    with pytest.raises(TypeError, match="out= and dtype="):
        t.var(dtype=np.float64)
    with pytest.raises(TypeError, match="ddof or correction"):
        t.var(ddof=0, correction=1)


def test_zero_d():
    t = tlgpu.tensor(np.float32(2.5))
    for op in ("sum", "mean", "max", "min", "logsumexp"):
        r = getattr(t, op)()
        assert r.shape == () and r.item() == pytest.approx(2.5)
    assert t.argmax().item() == 0
    with pytest.raises(IndexError, match=r"sum: axis 0 .*\(\)"):
        t.sum(axis=0)


def test_zero_size():
    for shape in [(0,), (0, 5), (5, 0), (2, 0, 3)]:
        x = np.zeros(shape, np.float32)
        t = tlgpu.tensor(x)
        for axis in axes_for(len(shape)):
            ax = tuple(axis) if isinstance(axis, list) else axis
            for op in ("sum", "mean", "logsumexp"):
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    want = ref(op, x, ax)
                got = getattr(t, op)(axis=axis).numpy()
                assert got.shape == np.shape(want)
                np.testing.assert_array_equal(got, np.asarray(want, np.float32))
            for op in ("max", "min", "argmax", "argmin"):
                if op.startswith("arg") and isinstance(axis, (tuple, list)):
                    continue
                try:
                    want = getattr(np, op)(x, axis=ax)
                except ValueError:
                    with pytest.raises(ValueError, match=op):
                        getattr(t, op)(axis=axis)
                    continue
                got = getattr(t, op)(axis=axis).numpy()
                assert got.shape == want.shape and got.size == 0
        assert t.softmax(axis=-1).shape == shape
    # an empty result enqueues nothing; an empty reduction with a result needs only its fill
    t = tlgpu.zeros(0, 5)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    assert t.sum(axis=1).shape == (0,) and t.max(axis=1).shape == (0,) and t.softmax().shape == (0, 5)
    assert tlgpu.stream_stats()["enqueued"] == 0
    np.testing.assert_array_equal(t.sum(axis=0).numpy(), np.zeros(5, np.float32))


def test_argmax_ties_first_occurrence():
    x = np.zeros((3, 65537), np.float32)
    x[0, [5, 40000, 65536]] = 7.0                  # ties in different segments of a split row
    x[1, :] = -1.0                                 # all equal: index 0
    x[2, [65536, 3]] = -2.0
    t = tlgpu.tensor(x)
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), [5, 0, 0])
    np.testing.assert_array_equal(t.argmin(axis=1).numpy(), [0, 0, 3])
    assert t.argmax().item() == 5
    y = np.tile(np.array([1, 3, 3, 2], np.float32), (1000, 1)).T.copy()   # column ties, axis 0
    np.testing.assert_array_equal(tlgpu.tensor(y).argmax(axis=0).numpy(), np.full(1000, 1))
    z = np.zeros((70000, 3), np.float32)
    z[[100, 50000], 1] = 5.0                       # column ties in different segments (column path)
    z[[69999, 7], 2] = -5.0
    np.testing.assert_array_equal(tlgpu.tensor(z).argmax(axis=0).numpy(), [0, 100, 0])
    np.testing.assert_array_equal(tlgpu.tensor(z).argmin(axis=0).numpy(), [0, 0, 7])
    big = np.full(1 << 20, -np.inf, np.float32)
    assert tlgpu.tensor(big).argmax().item() == 0 and tlgpu.tensor(big).max().item() == -np.inf


def test_nan_propagation():
    x = np.arange(40000, dtype=np.float32).reshape(2, 20000)
    x[0, 123] = np.nan
    x[0, 30000 - 20000] = np.nan
    t = tlgpu.tensor(x)
    for op in ("sum", "max", "min", "argmax", "argmin", "logsumexp"):
        got = getattr(t, op)(axis=1).numpy()
        want = ref(op, x, 1)
        np.testing.assert_array_equal(np.isnan(got) if got.dtype != np.int32 else got,
                                      np.isnan(want) if want.dtype.kind == "f" else want, err_msg=op)


def test_logsumexp_stable_and_infinities():
    x = np.array([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4, -1e4], [-np.inf, -np.inf, -np.inf],
                  [np.inf, 0.0, 1.0]], np.float32)
    got = tlgpu.tensor(x).logsumexp(axis=1).numpy()
    want = [1e4 + np.log1p(np.exp(-1.0)), -1e4 + np.log(3.0), -np.inf, np.inf]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    big = np.full(1 << 20, 1e4, np.float32)
    np.testing.assert_allclose(tlgpu.tensor(big).logsumexp().item(), 1e4 + np.log(2.0 ** 20), rtol=1e-6)


def softmax_ref(x, axis):
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape", [(1,), (7,), (33,), (1025,), (65537,), (3, 1025), (1025, 3), (2, 3, 4),
                                   (600, 300, 3)], ids=str)
def test_softmax_matches_numpy(rng, shape):
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    t = tlgpu.tensor(x)
    for axis in [None] + list(range(len(shape))) + [-1]:
        ref_axis = axis
        xs = x if axis is not None else x.reshape(-1)
        want = softmax_ref(xs, -1 if axis is None else ref_axis).reshape(shape)
        got = t.softmax(axis=axis).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7, err_msg=f"{shape} axis={axis}")
        got = t.log_softmax(axis=axis).numpy()
        np.testing.assert_allclose(got, np.log(want), rtol=1e-5, atol=2e-5, err_msg=f"{shape} axis={axis}")


def test_softmax_large_values():
    x = np.array([[1e4, 1e4 + 1.0, 1e4 - 3.0], [-1e4, 0.0, 1e4], [5.0, 5.0, 5.0]], np.float32)
    t = tlgpu.tensor(x)
    np.testing.assert_allclose(t.softmax().numpy(), softmax_ref(x, -1), rtol=1e-6, atol=1e-30)
    lse0 = 1.0 + np.log1p(np.exp(-1.0) + np.exp(-4.0))          # row 0 relative to 1e4
    np.testing.assert_allclose(t.log_softmax().numpy(), [[-lse0 + 0.0, 1.0 - lse0, -3.0 - lse0],
                                                         [-2e4, -1e4, 0.0], [-np.log(3)] * 3], rtol=1e-6)
    row = np.full((2, 5000), 1e4, np.float32)
    np.testing.assert_allclose(tlgpu.tensor(row).softmax().numpy(), 1.0 / 5000, rtol=1e-5)
    assert np.isnan(tlgpu.tensor(np.array([1.0, np.nan], np.float32)).softmax().numpy()).all()


def test_errors(rng):
    t = tlgpu.tensor(rng.standard_normal((2, 3)).astype(np.float32))
    for op in OPS + ["softmax", "log_softmax"]:
        with pytest.raises(IndexError, match=rf"{op}: axis 2 .*\(2, 3\)"):
            getattr(t, op)(axis=2)
        with pytest.raises(ValueError, match=rf"{op}: axis -3 .*\(2, 3\)"):
            getattr(t, op)(axis=-3)
        with pytest.raises(TypeError, match=f"{op}: expected a float32 tensor, got int32"):
            getattr(tlgpu.tensor(np.arange(6, dtype=np.int32)), op)()
        with pytest.raises(TypeError, match=op):
            getattr(t, op)(axis="x")
    for op in ("sum", "mean", "max", "logsumexp"):
        with pytest.raises(ValueError, match=rf"{op}: duplicate axis 1 .*\(2, 3\)"):
            getattr(t, op)(axis=(1, -1))
        with pytest.raises(IndexError, match=f"{op}: axis 5"):
            getattr(t, op)(axis=(0, 5))
    for op in ("argmax", "argmin", "softmax"):
        with pytest.raises(TypeError, match=op):
            getattr(t, op)(axis=(0, 1))
    with pytest.raises(ValueError, match=r"max: .*empty.*\(0, 3\)"):
        tlgpu.zeros(0, 3).max()
    with pytest.raises(ValueError, match="argmax"):
        tlgpu.zeros(4, 0).argmax(axis=1)


def test_full_sum_16m_accurate_and_bit_identical(rng):
    n = 1 << 24
    x = rng.random(n, dtype=np.float32) * 2 + 0.5
    y = rng.standard_normal(n).astype(np.float32)
    t, u = tlgpu.tensor(x), tlgpu.tensor(y)
    runs = [t.sum().numpy() for _ in range(3)]
    assert all(r.tobytes() == runs[0].tobytes() for r in runs)
    want = x.astype(np.float64).sum()
    assert abs(float(runs[0]) - want) <= 1e-4 * abs(want)
    got = u.sum().item()
    assert abs(got - y.astype(np.float64).sum()) <= 1e-6 * np.abs(y.astype(np.float64)).sum()
    assert u.max().item() == y.max() and u.argmax().item() == y.argmax()
    np.testing.assert_allclose(u.mean().item(), y.astype(np.float64).mean(), atol=1e-6)


def test_deterministic_and_lazy(rng):
    x = rng.standard_normal((64, 70000)).astype(np.float32)
    t = tlgpu.tensor(x)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    outs = [(t.sum(axis=1), t.logsumexp(axis=0), t.softmax(axis=1), t.mean(axis=(0, 1))) for _ in range(3)]
    if os.environ.get("TLGPU_SYNC") != "1":       # eager debug mode waits after every command
        assert tlgpu.stream_stats()["waits"] == 0
    first = [o.numpy().tobytes() for o in outs[0]]
    for rest in outs[1:]:
        assert [o.numpy().tobytes() for o in rest] == first


def test_non_contiguous_views_when_available(rng):
    """Strided inputs: a transposed view if the shape family provides one, else a reduced non-last axis."""
    x = rng.standard_normal((37, 1029)).astype(np.float32)
    t = tlgpu.tensor(x)
    view = None
    for make in (lambda: t.T, lambda: t.transpose(0, 1), lambda: t.permute(1, 0)):
        try:
            view = make()
            break
        except (AttributeError, TypeError):
            continue
    if view is None:
        np.testing.assert_allclose(t.sum(axis=0).numpy(), x.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
        pytest.skip("no transposed views yet (shape family); non-last axes are covered above")
    xt = x.T
    for op in OPS:
        for axis in (None, 0, 1, -1):
            check(op, xt, getattr(view, op)(axis=axis).numpy(), axis)
    np.testing.assert_allclose(view.softmax(axis=1).numpy(), softmax_ref(xt, 1), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("blocked", ["0", "1"])
def test_both_lane_layouts(blocked):
    """The interleaved (GPU) and blocked (CPU) lane layouts agree with numpy, whatever the device is."""
    from conftest import run_python
    code = """
import numpy as np, tlgpu
from test_reduce import OPS, check, softmax_ref
rng = np.random.default_rng(7)
for shape, axis in [((65537,), None), ((3, 1025), 1), ((1025, 3), 0), ((4, 70001), 1), ((2, 3, 4), (0, 2)),
                    ((1 << 20,), None), ((700, 5000), 1)]:
    x = (rng.standard_normal(shape) * 3 + 0.5).astype(np.float32)
    t = tlgpu.tensor(x)
    for op in OPS:
        if op.startswith("arg") and isinstance(axis, tuple):
            continue
        check(op, x, getattr(t, op)(axis=axis).numpy(), axis)
    if not isinstance(axis, tuple):
        ax = -1 if axis is None else axis
        want = softmax_ref(x.reshape(-1) if axis is None else x, ax).reshape(shape)
        np.testing.assert_allclose(t.softmax(axis=axis).numpy(), want, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(t.log_softmax(axis=axis).numpy(), np.log(want), rtol=1e-5, atol=2e-5)
print("ok")
"""
    r = run_python("import sys; sys.path.insert(0, 'tests')\n" + code, env={"TLGPU_REDUCE_BLOCKED": blocked})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]
