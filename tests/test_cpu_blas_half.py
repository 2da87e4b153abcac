"""float16 / bfloat16 products on the CPU BLAS path (cpu_blas.h, cpu_half.h): one native command widens the
elements the product touches, multiplies in float32 and rounds C once, after the bias and the ReLU it fuses.
Integer operands give numpy's product rounded once, bit for bit, in every layout, batch and view; random ones
are within one rounding of float64; the conversions are checked bit for bit against numpy and ml_dtypes."""
import ml_dtypes
import numpy as np
import pytest

import tlgpu
import tlgpu.nn.functional as F
from tlgpu import _C

state = _C._cpu_blas()
pytestmark = [pytest.mark.skipif(not state["loaded"], reason=f"no CPU BLAS path here: {state['reason']}"),
              pytest.mark.usefixtures("blas_on")]
DTS = [(tlgpu.bfloat16, ml_dtypes.bfloat16), (tlgpu.float16, np.float16)]
IDS = ["bfloat16", "float16"]


def launches():
    return _C._cpu_blas()["launches"]


def ints(rng, npdt, *shape):
    return rng.integers(-3, 4, shape).astype(npdt)


def f64(a):
    return np.asarray(a).astype(np.float64)


def bits(a):
    return np.asarray(a).view(np.uint16)


def eps(npdt):
    return float(ml_dtypes.finfo(npdt).eps)


def enqueued_beyond_pointers(fn):
    """fn()'s commands, less the one-buffer commands that learn a new buffer's host pointer (cpu_native.h)."""
    tlgpu.synchronize()
    _C.reset_stream_stats()
    p0 = _C._cpu_blas()["pointers"]
    out = fn()
    return out, _C.stream_stats()["enqueued"] - (_C._cpu_blas()["pointers"] - p0)


@pytest.mark.parametrize("dt,npdt", DTS, ids=IDS)
@pytest.mark.parametrize("m,k,n", [(9, 13, 5), (33, 65, 17), (17, 33, 1), (70, 300, 33), (130, 7, 200)])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_integer_products_exact_in_every_layout(rng, dt, npdt, m, k, n, layout):
    a, b = ints(rng, npdt, m, k), ints(rng, npdt, k, n)
    ta = tlgpu.tensor(a) if layout[0] == "n" else tlgpu.tensor(np.ascontiguousarray(a.T)).T
    tb = tlgpu.tensor(b) if layout[1] == "n" else tlgpu.tensor(np.ascontiguousarray(b.T)).T
    n0 = launches()
    got = ta @ tb
    assert got.dtype == np.dtype(npdt) and got.shape == (m, n)
    assert np.array_equal(bits(got.numpy()), bits((f64(a) @ f64(b)).astype(npdt)))
    assert launches() == n0 + 1


@pytest.mark.parametrize("dt,npdt", DTS, ids=IDS)
def test_batches_broadcast_and_views(rng, dt, npdt):
    x, y, z = ints(rng, npdt, 3, 40, 33), ints(rng, npdt, 33, 50), ints(rng, npdt, 3, 33, 50)
    tx, ty, tz = tlgpu.tensor(x), tlgpu.tensor(y), tlgpu.tensor(z)
    for got, ref in [(tx @ ty, f64(x) @ f64(y)), (tx @ tz, f64(x) @ f64(z)), (tx[:1] @ tz, f64(x[:1]) @ f64(z)),
                     (tx[1, 1:, 2:] @ ty[2:, 3:], f64(x[1, 1:, 2:]) @ f64(y[2:, 3:])),
                     (tx[:, ::2] @ ty, f64(x[:, ::2]) @ f64(y)),          # rows two apart
                     (tx[:, :, ::2] @ ty[::2], f64(x[:, :, ::2]) @ f64(y[::2]))]:   # no BLAS layout: widened
        assert got.dtype == np.dtype(npdt)
        assert np.array_equal(bits(got.numpy()), bits(ref.astype(npdt)))


@pytest.mark.parametrize("dt,npdt", DTS, ids=IDS)
def test_random_products_round_once(rng, dt, npdt):
    a, b = rng.standard_normal((200, 300)).astype(npdt), rng.standard_normal((300, 150)).astype(npdt)
    ref = f64(a) @ f64(b)
    got = f64((tlgpu.tensor(a) @ tlgpu.tensor(b)).numpy())
    assert np.abs(got - ref).max() <= eps(npdt) * np.abs(ref).max()     # one rounding, plus float32 sums' error
    a[0, 0], b[5, 1] = np.inf, np.nan
    r = (tlgpu.tensor(a) @ tlgpu.tensor(b)).numpy().astype(np.float32)
    assert np.isnan(r[:, 1]).all() and (np.isinf(r[0]) | np.isnan(r[0])).all()


@pytest.mark.parametrize("dt,npdt", DTS, ids=IDS)
def test_linear_bias_and_relu_in_the_one_command(rng, dt, npdt):
    """A half Linear with a bias and ReLU is one BLAS command and one rounding: relu(x @ w.T + b) rounded."""
    x, w, b = ints(rng, npdt, 37, 24), ints(rng, npdt, 19, 24), ints(rng, npdt, 19)
    tx, tw, tb = tlgpu.tensor(x), tlgpu.tensor(w), tlgpu.tensor(b)
    n0 = launches()
    got, n = enqueued_beyond_pointers(lambda: _C.linear(tx, tw, tb, activation="relu"))
    assert n == 1 and launches() == n0 + 1
    ref = np.maximum(f64(x) @ f64(w).T + f64(b), 0.0)
    assert np.array_equal(bits(got.numpy()), bits(ref.astype(npdt)))
    xr, wr, br = (rng.standard_normal(s).astype(npdt) for s in [(37, 24), (19, 24), (19,)])
    got = F.linear(tlgpu.tensor(xr), tlgpu.tensor(wr), tlgpu.tensor(br)).numpy()
    ref = f64(xr) @ f64(wr).T + f64(br)                 # the bias added in float32 before the one rounding
    assert np.abs(f64(got) - ref).max() <= eps(npdt) * np.abs(ref).max()


@pytest.mark.parametrize("dt,npdt", DTS, ids=IDS)
def test_half_linear_gradients(rng, dt, npdt):
    """A half Linear's backward: dx one command, dw and db together another (the sums in the same command)."""
    x, w = rng.standard_normal((30, 20)).astype(npdt), (rng.standard_normal((12, 20)) * 0.3).astype(npdt)
    b = rng.standard_normal(12).astype(npdt)
    g = rng.standard_normal((30, 12)).astype(npdt)
    tx, tw, tb = (tlgpu.tensor(a, requires_grad=True) for a in (x, w, b))
    y, tg = F.linear(tx, tw, tb), tlgpu.tensor(g)
    _, n = enqueued_beyond_pointers(lambda: y.backward(tg))
    assert n == 2
    assert tx.grad.dtype == tw.grad.dtype == tb.grad.dtype == np.dtype(npdt)
    for got, ref in [(tx.grad, f64(g) @ f64(w)), (tw.grad, f64(g).T @ f64(x)), (tb.grad, f64(g).sum(0))]:
        assert np.abs(f64(got.numpy()) - ref).max() <= 2 * eps(npdt) * np.abs(ref).max()
    gi = ints(rng, npdt, 30, 12)                        # integers: the sums exact, rounded once
    tb.grad = None
    F.linear(tx, tw, tb).backward(tlgpu.tensor(gi))
    assert np.array_equal(bits(tb.grad.numpy()), bits(f64(gi).sum(0).astype(npdt)))


@pytest.mark.parametrize("dt,npdt", DTS, ids=IDS)
def test_half_sequential_is_one_command_a_layer(rng, dt, npdt):
    """A half MLP (Linear, ReLU, Linear, ReLU, Linear): Sequential fuses each Linear + ReLU, one BLAS command a
    layer, with the bits and gradients of the layers run one by one."""
    from tlgpu import nn
    model = nn.Sequential(nn.Linear(40, 32), nn.ReLU(), nn.Linear(32, 24), nn.ReLU(), nn.Linear(24, 5)).to(dt)
    x = tlgpu.tensor(rng.standard_normal((64, 40)).astype(npdt))
    with tlgpu.no_grad():
        y, n = enqueued_beyond_pointers(lambda: model(x))
    assert n == 3
    g = tlgpu.tensor(rng.standard_normal((64, 5)).astype(np.float32))
    (model(x).float() * g).sum().backward()
    fused = [p.grad.numpy() for p in model.parameters()]
    model.zero_grad()
    h = x
    for layer in model:                                 # the same layers, unfused
        h = layer(h)
    assert np.array_equal(bits(h.detach().numpy()), bits(y.numpy()))
    (h.float() * g).sum().backward()
    for got, want in zip(fused, [p.grad.numpy() for p in model.parameters()]):
        assert np.array_equal(bits(got), bits(want))


@pytest.mark.parametrize("dt,npdt", DTS, ids=IDS)
def test_conversions_bit_for_bit(rng, dt, npdt):
    """The command's widening: every finite 16-bit pattern through x @ I (exact). Its rounding: the exact float32
    products of random halves of every exponent (K = 1), rounded once: numpy's rounding of the same values,
    subnormal results, ties and overflow to inf included."""
    pats = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(npdt)
    finite = pats[np.isfinite(pats.astype(np.float32))]
    finite = finite[:finite.size // 16 * 16].reshape(-1, 16)
    eye = np.eye(16, dtype=npdt)
    got = (tlgpu.tensor(finite) @ tlgpu.tensor(eye)).numpy()
    assert np.array_equal(bits(got), bits((f64(finite) @ f64(eye)).astype(npdt)))   # -0 + 0 is +0
    col = pats[rng.integers(0, 65536, 512)].reshape(512, 1)
    row = pats[rng.integers(0, 65536, 512)].reshape(1, 512)
    col, row = (np.where(np.isfinite(v.astype(np.float32)), v, 1).astype(npdt) for v in (col, row))
    with np.errstate(all="ignore"):
        ref = (f64(col) @ f64(row)).astype(npdt)        # exact products (22 bits), rounded once
    got = (tlgpu.tensor(col) @ tlgpu.tensor(row)).numpy()
    same = bits(got) == bits(ref)
    nan = np.isnan(ref.astype(np.float32))
    assert (same | (nan & np.isnan(got.astype(np.float32)))).all()
