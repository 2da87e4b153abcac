"""The fused linear layer (nn.functional.linear = _C.linear, one op and one autograd node) and the elementwise
kernels' row-broadcast and hot-op paths. Forward and every gradient against float64 numpy on random inputs
(odd shapes, 1-D and batched input, no bias, non-contiguous x and w), on the CPU BLAS path, on the OpenCL
kernels in the same process and with TLGPU_BLAS=0 in a fresh one; launch counts on the BLAS path; no host
waits. Timings are never asserted (benchmarks/bench_train.py)."""
import numpy as np
import pytest

import tlgpu
from tlgpu import _C
from tlgpu.nn import functional as F
from conftest import needs_pool, run_python

BLAS = _C._cpu_blas()["loaded"]
needs_blas = pytest.mark.skipif(not BLAS, reason="no CPU BLAS path on this device")


@pytest.fixture(autouse=True)
def blas_on():
    before = _C._cpu_blas()
    yield
    _C._cpu_blas(enable=before["enabled"])


def randn(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def close(got, ref, k=1):
    got = got.numpy() if hasattr(got, "numpy") else got
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5 * max(1.0, np.sqrt(k)))


def enqueued():
    return tlgpu.stream_stats()["enqueued"]


# (x shape, out_features, bias?, x layout, w layout): layouts "c" contiguous, "t" a transposed view of a
# contiguous array, "s" a strided slice (every other row of a larger array, a column offset)
CASES = [((5, 7), 3, True, "c", "c"), ((7,), 3, True, "c", "c"), ((2, 4, 7), 3, True, "c", "c"),
         ((5, 7), 3, False, "c", "c"), ((33, 65), 17, True, "c", "c"), ((300, 70), 130, True, "c", "c"),
         ((1, 9), 1, True, "c", "c"), ((256, 784), 256, True, "c", "c"), ((3, 5, 2, 11), 6, True, "c", "c"),
         ((31, 20), 9, True, "t", "c"), ((31, 20), 9, True, "c", "t"), ((31, 20), 9, True, "t", "t"),
         ((17, 12), 5, True, "s", "s"), ((40, 30), 25, False, "s", "t")]


def make(rng, shape, layout):
    """(tensor requiring grad that is a view of the given layout, its float32 values)."""
    if layout == "t":
        base = randn(rng, *shape[::-1])
        leaf = tlgpu.tensor(base, requires_grad=True)
        return leaf, leaf.T, base.T
    if layout == "s":
        base = randn(rng, 2 * shape[0], shape[1] + 3)
        leaf = tlgpu.tensor(base, requires_grad=True)
        return leaf, leaf[::2, 1:shape[1] + 1], base[::2, 1:shape[1] + 1]
    base = randn(rng, *shape)
    leaf = tlgpu.tensor(base, requires_grad=True)
    return leaf, leaf, base


def run_case(rng, xs, n, bias, xl, wl):
    k = xs[-1]
    xleaf, x, xv = make(rng, xs, xl)
    wleaf, w, wv = make(rng, (n, k), wl)
    b = tlgpu.tensor(randn(rng, n), requires_grad=True) if bias else None
    y = F.linear(x, w, b)
    assert y.grad_fn == "LinearBackward"
    x64, w64 = xv.astype(np.float64), wv.astype(np.float64)
    ref = x64 @ w64.T + (b.numpy().astype(np.float64) if bias else 0)
    close(y, ref, k)
    g = randn(rng, *ref.shape)
    y.backward(tlgpu.tensor(g))
    g64 = g.astype(np.float64).reshape(-1, n)
    gx = (g64 @ w64).reshape(xs)
    gw = g64.T @ x64.reshape(-1, k)
    close(x.grad if xleaf is x else xleaf.grad, _scatter(gx, xleaf, xl, xs), n)
    close(w.grad if wleaf is w else wleaf.grad, _scatter(gw, wleaf, wl, (n, k)), g64.shape[0])
    if bias:
        close(b.grad, g64.sum(0), g64.shape[0])


def _scatter(grad, leaf, layout, shape):
    """The leaf's gradient for a view's gradient."""
    if layout == "t":
        return grad.T
    if layout == "s":
        full = np.zeros(leaf.shape)
        full[::2, 1:shape[1] + 1] = grad
        return full
    return grad


@pytest.mark.parametrize("xs,n,bias,xl,wl", CASES)
def test_forward_and_grads(rng, xs, n, bias, xl, wl):
    run_case(rng, xs, n, bias, xl, wl)


@pytest.mark.parametrize("xs,n,bias,xl,wl", CASES[:6] + CASES[9:])
def test_forward_and_grads_opencl_kernels(rng, xs, n, bias, xl, wl):
    _C._cpu_blas(enable=False)
    run_case(rng, xs, n, bias, xl, wl)


def test_without_blas_in_a_fresh_process():
    r = run_python(
        "import numpy as np, tlgpu\n"
        "from tlgpu.nn import functional as F\n"
        "rng = np.random.default_rng(3)\n"
        "x, w, b = (rng.standard_normal(s).astype(np.float32) for s in ((37, 29), (19, 29), (19,)))\n"
        "tx, tw, tb = (tlgpu.tensor(a, requires_grad=True) for a in (x, w, b))\n"
        "y = F.linear(tx, tw, tb)\n"
        "ref = x.astype(np.float64) @ w.T + b\n"
        "assert np.allclose(y.numpy(), ref, rtol=1e-4, atol=1e-4)\n"
        "y.sum().backward()\n"
        "assert np.allclose(tb.grad.numpy(), 37)\n"
        "assert np.allclose(tw.grad.numpy(), np.tile(x.sum(0), (19, 1)), atol=1e-3)\n"
        "assert np.allclose(tx.grad.numpy(), np.tile(w.sum(0), (37, 1)), atol=1e-4)\n"
        "assert not tlgpu._C._cpu_blas()['loaded']\n"
        "print('ok')\n", env={"TLGPU_BLAS": "0"})
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def test_partial_grads(rng):
    """Only some inputs require grad: the others get none, and the node still records."""
    x, w, b = randn(rng, 9, 6), randn(rng, 4, 6), randn(rng, 4)
    tw = tlgpu.tensor(w, requires_grad=True)
    y = F.linear(tlgpu.tensor(x), tw, tlgpu.tensor(b))
    y.sum().backward()
    close(tw.grad, np.tile(x.astype(np.float64).sum(0), (4, 1)), 9)
    tx = tlgpu.tensor(x, requires_grad=True)
    F.linear(tx, tlgpu.tensor(w), tlgpu.tensor(b)).sum().backward()
    close(tx.grad, np.tile(w.astype(np.float64).sum(0), (9, 1)), 4)
    with tlgpu.no_grad():
        assert F.linear(tx, tw).grad_fn is None


@pytest.mark.parametrize("blas", [True, False])
def test_upstream_gradient_layouts(rng, blas):
    """The weight and bias gradients from an expanded upstream gradient (y.sum()) and from a transposed one
    (the BLAS path's row sums over a non-transposed operand), all three inputs requiring grad."""
    _C._cpu_blas(enable=blas)
    x, w, b, c = randn(rng, 23, 11), randn(rng, 7, 11), randn(rng, 7), randn(rng, 7, 23)
    for upstream in ("sum", "transposed"):
        tx, tw, tb = (tlgpu.tensor(a, requires_grad=True) for a in (x, w, b))
        y = F.linear(tx, tw, tb)
        if upstream == "sum":
            y.sum().backward()
            g = np.ones((23, 7))
        else:
            (y.T * tlgpu.tensor(c)).sum().backward()
            g = c.T.astype(np.float64)
        close(tx.grad, g @ w, 7)
        close(tw.grad, g.T @ x, 23)
        close(tb.grad, g.sum(0), 23)


def test_other_biases_are_added(rng):
    """A bias that is not a float32 [N] tensor (a [1, N] tensor, a number) is added by + after the product."""
    x, w, b = randn(rng, 5, 3), randn(rng, 4, 3), randn(rng, 1, 4)
    tb = tlgpu.tensor(b, requires_grad=True)
    y = F.linear(tlgpu.tensor(x), tlgpu.tensor(w), tb)
    close(y, x.astype(np.float64) @ w.T + b, 3)
    y.sum().backward()
    close(tb.grad, np.full((1, 4), 5.0))
    close(F.linear(tlgpu.tensor(x), tlgpu.tensor(w), 2.5), x.astype(np.float64) @ w.T + 2.5, 3)


def test_bad_arguments(rng):
    x, w = tlgpu.tensor(randn(rng, 5, 3)), tlgpu.tensor(randn(rng, 4, 3))
    with pytest.raises(ValueError, match="linear: weight must be 2-D"):
        F.linear(x, tlgpu.tensor(randn(rng, 4, 3, 1)))
    with pytest.raises(ValueError, match="linear"):
        F.linear(x, tlgpu.tensor(randn(rng, 4, 2)))
    with pytest.raises(TypeError):
        F.linear(x, "w")
    with pytest.raises(ValueError):
        F.linear(x, w, tlgpu.tensor(randn(rng, 3)))   # does not broadcast to [5, 4]


@needs_blas
@needs_pool      # a fresh (unpooled) buffer first learns its host pointer: one more command
def test_one_command_forward_and_weight_bias_grads(rng):
    """On the BLAS path the forward is one command (the bias written into C, then sgemm with beta = 1) and
    the weight and bias gradients of a layer whose input needs none are one more."""
    _C._cpu_blas(enable=True)
    x, w, b = randn(rng, 64, 48), randn(rng, 40, 48), randn(rng, 40)
    tx, tw, tb = tlgpu.tensor(x), tlgpu.tensor(w, requires_grad=True), tlgpu.tensor(b, requires_grad=True)
    g = tlgpu.tensor(randn(rng, 64, 40))
    for _ in range(3):                                 # buffers learn their host pointers once
        F.linear(tx, tw, tb).backward(g)
        tw.grad = tb.grad = None
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    e0 = enqueued()
    y = F.linear(tx, tw, tb)
    assert enqueued() - e0 == 1
    e0 = enqueued()
    y.backward(g)
    assert enqueued() - e0 == 1
    assert tlgpu.stream_stats()["waits"] == 0
    close(y, x.astype(np.float64) @ w.T + b, 48)
    gn = g.numpy().astype(np.float64)
    close(tw.grad, gn.T @ x, 64)
    close(tb.grad, gn.sum(0), 64)
    assert tlgpu.stream_stats()["waits"] >= 1


def test_training_step_has_no_host_wait(rng):
    model = tlgpu.nn.Sequential(tlgpu.nn.Linear(30, 20), tlgpu.nn.ReLU(), tlgpu.nn.Linear(20, 5))
    opt = tlgpu.optim.Adam(model.parameters(), lr=1e-2)
    x, y = tlgpu.tensor(randn(rng, 16, 30)), tlgpu.tensor(rng.integers(0, 5, 16).astype(np.int32))
    losses = []
    for i in range(30):
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert tlgpu.stream_stats()["waits"] == 0
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]


def test_addmm_unchanged(rng):
    """addmm(input, a, b) = input + a @ b with input broadcast: fused with a row input on the BLAS path,
    the same values and gradients as before either way."""
    a, b, r = randn(rng, 20, 30), randn(rng, 30, 40), randn(rng, 40)
    ref = r + a.astype(np.float64) @ b
    close(tlgpu.addmm(tlgpu.tensor(r), tlgpu.tensor(a), tlgpu.tensor(b)), ref, 30)
    tr = tlgpu.tensor(r, requires_grad=True)
    out = tlgpu.addmm(tr, tlgpu.tensor(a), tlgpu.tensor(b))
    close(out, ref, 30)
    out.sum().backward()
    close(tr.grad, np.full(40, 20.0))
    close(tlgpu.addmm(tlgpu.tensor(r[:1]), tlgpu.tensor(a), tlgpu.tensor(b)), r[:1] + a.astype(np.float64) @ b, 30)


# ---- elementwise: the row-broadcast kernel (tl_ew_rows_f32) and the hot ops (tl_ew_hot_f32) ----

BCAST = [((7, 13), (13,)), ((7, 13), (7, 1)), ((256, 256), (256,)), ((5, 3), (1, 3)), ((3, 5, 6), (5, 1)),
         ((3, 5, 7), (7,)), ((2, 3, 4, 5), (5,)), ((2, 3, 4, 5), (4, 1)), ((9,), (1,)), ((1, 1025), (1025,)),
         ((65, 66), (66,)), ((4, 70), (4, 1))]


@pytest.mark.parametrize("sa,sb", BCAST)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "truediv", "maximum", "lt"])
def test_broadcast_ops(rng, sa, sb, op):
    a, b = randn(rng, *sa), randn(rng, *sb) + (3.0 if op == "truediv" else 0.0)
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    tfn = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
           "truediv": lambda x, y: x / y, "maximum": tlgpu.maximum, "lt": lambda x, y: x < y}[op]
    fn = {"maximum": np.maximum, "lt": lambda x, y: (x < y).astype(np.float32)}.get(op, tfn)
    np.testing.assert_allclose(tfn(ta, tb).numpy(), fn(a, b), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tfn(tb, ta).numpy(), fn(b, a), rtol=1e-6, atol=1e-6)   # broadcast operand first


def test_broadcast_strided_and_ternary(rng):
    base = randn(rng, 20, 40)
    a = base[1::2, 3:30]                               # rows padded, odd offset
    ta = tlgpu.tensor(base)[1::2, 3:30]
    b, c = randn(rng, 27), randn(rng, 10, 1)
    np.testing.assert_allclose((ta + tlgpu.tensor(b)).numpy(), a + b, rtol=1e-6)
    np.testing.assert_allclose((ta * tlgpu.tensor(c)).numpy(), a * c, rtol=1e-6)
    cond = (randn(rng, 27) > 0).astype(np.float32)
    got = tlgpu.where(tlgpu.tensor(cond), ta, tlgpu.tensor(c))
    np.testing.assert_allclose(got.numpy(), np.where(cond != 0, a, c), rtol=1e-6)
    got = ta.clamp(min=-0.5, max=tlgpu.tensor(b))
    np.testing.assert_allclose(got.numpy(), np.minimum(np.maximum(a, -0.5), b), rtol=1e-6)
    r = randn(rng, 20)                                 # a transposed view: no unit stride, the strided kernel
    np.testing.assert_allclose((tlgpu.tensor(base).T[2:9] + tlgpu.tensor(r)).numpy(), base.T[2:9] + r, rtol=1e-6)


def test_broadcast_in_place(rng):
    a, b, c = randn(rng, 33, 17), randn(rng, 17), randn(rng, 33, 1)
    t = tlgpu.tensor(a)
    t += tlgpu.tensor(b)
    t.mul_(tlgpu.tensor(c))
    np.testing.assert_allclose(t.numpy(), (a + b) * c, rtol=1e-6)
    base = randn(rng, 10, 20)
    tb = tlgpu.tensor(base)
    view = tb[2:8, 5:16]
    view.sub_(tlgpu.tensor(b[:11]))
    ref = base.copy()
    ref[2:8, 5:16] -= b[:11]
    np.testing.assert_allclose(tb.numpy(), ref, rtol=1e-6)


@pytest.mark.parametrize("n", [1, 3, 4, 15, 16, 17, 63, 1025, 65537])
def test_hot_ops_contiguous(rng, n):
    """add/sub/mul/div/relu and relu's gradient on contiguous data, ragged tails included, with a scalar."""
    a, b = randn(rng, n), randn(rng, n) + 4.0
    ta, tb = tlgpu.tensor(a), tlgpu.tensor(b)
    for got, ref in [(ta + tb, a + b), (ta - tb, a - b), (ta * tb, a * b), (ta / tb, a / b),
                     (ta.relu(), np.maximum(a, 0)), (ta * 2.5, a * 2.5), (1.0 - ta, 1.0 - a),
                     (ta / 3.0, a / np.float32(3.0))]:
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-6, atol=1e-7)
    tr = tlgpu.tensor(a, requires_grad=True)
    (tr.relu() * tb).sum().backward()
    np.testing.assert_allclose(tr.grad.numpy(), np.where(a > 0, b, 0), rtol=1e-6)
    t = tlgpu.tensor(a)
    t.add_(tb)
    np.testing.assert_allclose(t.numpy(), a + b, rtol=1e-6)
