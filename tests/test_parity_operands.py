"""numpy operands on either side of every arithmetic and comparison operator and of @ stay on the device
(float64 becomes float32, int64 becomes int32) and keep the autograd graph; modules take numpy batches."""
import operator

import numpy as np
import pytest

import tlgpu

# (operator, d(result)/d(tensor side) given the tensor value x, the numpy value a and which side x is on)
ARITH = {
    "add": (operator.add, lambda x, a, left: np.ones_like(x)),
    "sub": (operator.sub, lambda x, a, left: np.ones_like(x) if left else -np.ones_like(x)),
    "mul": (operator.mul, lambda x, a, left: a * np.ones_like(x)),
    "truediv": (operator.truediv, lambda x, a, left: 1 / a * np.ones_like(x) if left else -a / x ** 2),
    "pow": (operator.pow, lambda x, a, left: a * x ** (a - 1) if left else a ** x * np.log(a)),
}


@pytest.mark.parametrize("name", sorted(ARITH))
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("np_shape", [(3, 4), (4,), ()])
def test_arithmetic_with_numpy_on_either_side_keeps_the_graph(rng, name, left, np_shape):
    fn, dfn = ARITH[name]
    x = rng.uniform(0.5, 2.0, (3, 4))
    a = rng.uniform(0.5, 2.0, np_shape)                 # float64: becomes float32 on the device
    t = tlgpu.tensor(x.astype(np.float32), requires_grad=True)
    xf = x.astype(np.float32).astype(np.float64)
    af = np.float32(a).astype(np.float64) if np_shape == () else a.astype(np.float32).astype(np.float64)
    tlgpu.synchronize()
    tlgpu.reset_stream_stats()
    out = fn(t, a) if left else fn(a, t)
    assert isinstance(out, tlgpu.Tensor) and out.dtype == np.float32 and out.grad_fn is not None
    assert tlgpu.stream_stats()["waits"] == 0           # computed on the device, not through __array__
    up = rng.standard_normal(out.shape)
    out.backward(tlgpu.tensor(up.astype(np.float32)))
    want = fn(xf, af) if left else fn(af, xf)
    np.testing.assert_allclose(out.numpy(), want, rtol=2e-5)
    np.testing.assert_allclose(t.grad.numpy(), up * dfn(xf, af, left), rtol=2e-4, atol=1e-5)


@pytest.mark.parametrize("op", [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne])
def test_comparisons_with_numpy_on_either_side(rng, op):
    x = rng.integers(-3, 3, (5, 6)).astype(np.float32)
    a = rng.integers(-3, 3, (6,)).astype(np.float64)
    t = tlgpu.tensor(x)
    for got, want in ((op(t, a), op(x, a)), (op(a, t), op(a, x))):
        assert isinstance(got, tlgpu.Tensor) and got.dtype == np.float32
        np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))


def test_numpy_scalars_and_int_arrays(rng):
    x = rng.standard_normal(5).astype(np.float32)
    t = tlgpu.tensor(x, requires_grad=True)
    for got, want in ((t * np.float32(2.5), x * 2.5), (np.float32(2.5) * t, x * 2.5), (np.float64(1.5) - t, 1.5 - x)):
        assert isinstance(got, tlgpu.Tensor) and got.grad_fn is not None
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    i = rng.integers(-50, 50, 7)
    ti = tlgpu.tensor(i.astype(np.int32))
    got = ti + i                                       # int64 numpy -> int32 on the device
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.numpy(), 2 * i)
    np.testing.assert_array_equal((np.int64(3) * ti).numpy(), 3 * i)


def test_matmul_with_numpy_on_either_side(rng):
    x = rng.standard_normal((5, 4))
    w = rng.standard_normal((4, 3))
    v = rng.standard_normal((2, 5))
    t = tlgpu.tensor(x.astype(np.float32), requires_grad=True)
    xf = x.astype(np.float32).astype(np.float64)
    wf, vf = w.astype(np.float32).astype(np.float64), v.astype(np.float32).astype(np.float64)
    a, b, c = t @ w, v @ t, tlgpu.matmul(t, w)
    for got, want in ((a, xf @ wf), (b, vf @ xf), (c, xf @ wf), (t.matmul(w), xf @ wf)):
        assert isinstance(got, tlgpu.Tensor) and got.grad_fn is not None
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-5)
    ua, ub = rng.standard_normal((5, 3)), rng.standard_normal((2, 4))
    ((a * ua.astype(np.float32)).sum() + (b * ub.astype(np.float32)).sum()).backward()
    np.testing.assert_allclose(t.grad.numpy(), ua @ wf.T + vf.T @ ub, rtol=1e-4, atol=1e-5)
    with pytest.raises(TypeError, match="matmul"):
        t @ "w"


def test_modules_take_numpy_batches(rng):
    tlgpu.manual_seed(3)
    net = tlgpu.nn.Sequential(tlgpu.nn.Linear(4, 8), tlgpu.nn.Tanh(), tlgpu.nn.Linear(8, 2))
    batch = rng.standard_normal((6, 4))                 # float64, as environments return it
    out = net(batch)
    assert isinstance(out, tlgpu.Tensor) and out.dtype == np.float32
    want = net(tlgpu.tensor(batch.astype(np.float32))).numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    lin = net[0] if hasattr(net, "__getitem__") else net._modules["0"]
    out.sum().backward()
    h = np.tanh(batch.astype(np.float32) @ lin.weight.numpy().T + lin.bias.numpy())
    w2 = net._modules["2"].weight.numpy()
    want_gw = ((1 - h ** 2) * w2.sum(0)).T @ batch.astype(np.float32)
    np.testing.assert_allclose(lin.weight.grad.numpy(), want_gw, rtol=1e-4, atol=1e-5)
    mask = rng.random((6, 4)) < 0.5                      # bool batches become float32 masks
    np.testing.assert_allclose(net(mask).numpy(), net(tlgpu.tensor(mask.astype(np.float32))).numpy(), rtol=1e-6)
    emb = tlgpu.nn.Embedding(10, 3)
    idx = rng.integers(0, 10, 5)                        # int64 indices
    np.testing.assert_array_equal(emb(idx).numpy(), emb.weight.numpy()[idx])


def test_numpy_bool_arrays_are_float_masks(rng):
    x = rng.standard_normal((4, 5)).astype(np.float32)
    done = rng.random(5) < 0.5                         # gymnasium's terminated | truncated
    t = tlgpu.tensor(x, requires_grad=True)
    out = t * (1 - done) + tlgpu.where(done, 0.5, t)
    want = x * (1 - done) + np.where(done, 0.5, x)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-6)
    out.backward(tlgpu.ones(4, 5))
    np.testing.assert_array_equal(t.grad.numpy(), np.broadcast_to(2.0 * (1 - done), (4, 5)))
    assert (t > 0).numpy().dtype == np.float32
    np.testing.assert_array_equal((tlgpu.tensor(done.astype(np.float32)) == done).numpy(), np.ones(5))


@pytest.mark.parametrize("name,ref", [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
                                      ("div", np.true_divide), ("lt", np.less), ("ge", np.greater_equal),
                                      ("floor_divide", np.floor_divide), ("remainder", np.remainder)])
def test_functional_binary_ops_take_a_scalar_first(rng, name, ref):
    """tlgpu.add(2, t) as torch.add(2, t): the scalar on the left, the Tensor's reflected op computes it."""
    a = rng.uniform(-5, 5, (3, 7)).astype(np.float32)
    a[np.abs(a) < 0.1] = 0.5                                   # no division by (almost) zero
    got = getattr(tlgpu, name)(2.5, tlgpu.tensor(a)).numpy()
    np.testing.assert_allclose(got, ref(np.float32(2.5), a).astype(np.float32), rtol=1e-6, atol=1e-6)
    with pytest.raises(TypeError, match=f"{name}: expected a Tensor"):
        getattr(tlgpu, name)(2.5, 3.0)
