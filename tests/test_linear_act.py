"""Linear + activation as one op (_C.linear(..., activation=), which nn.Sequential uses for Linear followed by
ReLU or Tanh): the GEMM kernels of matmul.cl add the bias and apply the activation as they store (one
command); other paths (mul_mv, the CPU BLAS path, tensor cores) apply it after. Values and gradients against
float64 numpy, with the BLAS path on and off; launch counts; Sequential's fused forward against its layers
called one by one."""
import numpy as np
import pytest

import tlgpu
from tlgpu import _C, nn


@pytest.fixture(autouse=True)
def blas_on():
    before = _C._cpu_blas()
    yield
    _C._cpu_blas(enable=before["enabled"])


ACTS = {"relu": (lambda z: np.maximum(z, 0), lambda y: (y > 0).astype(np.float64)),
        "tanh": (np.tanh, lambda y: 1 - y * y)}


@pytest.mark.parametrize("blas", [True, False])
@pytest.mark.parametrize("act", ["relu", "tanh"])
@pytest.mark.parametrize("shape", [(3, 5, 7), (64, 33, 17), (2, 9, 19, 6)])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_activation_matches_numpy(rng, blas, act, shape, bias):
    _C._cpu_blas(enable=blas)
    *lead, k, n = shape
    x = rng.standard_normal((*lead, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    g = rng.standard_normal((*lead, n)).astype(np.float32)
    xt, wt = tlgpu.tensor(x, requires_grad=True), tlgpu.tensor(w, requires_grad=True)
    bt = tlgpu.tensor(b, requires_grad=True) if bias else None
    y = _C.linear(xt, wt, bt, activation=act)
    (y * tlgpu.tensor(g)).sum().backward()
    f, df = ACTS[act]
    z = x.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    want = f(z)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
    gz = g * df(want)
    gz2 = gz.reshape(-1, n)
    np.testing.assert_allclose(xt.grad.numpy(), gz @ w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(wt.grad.numpy(), gz2.T @ x.reshape(-1, k), rtol=1e-4, atol=1e-3)
    if bias:
        np.testing.assert_allclose(bt.grad.numpy(), gz2.sum(0), rtol=1e-4, atol=1e-4)


def test_one_command_where_the_gemm_stores_the_epilogue(rng):
    _C._cpu_blas(enable=False)                         # the OpenCL GEMM kernels (on a GPU they run anyway)
    x = tlgpu.tensor(rng.standard_normal((64, 40)).astype(np.float32))
    lin = nn.Linear(40, 24)
    with tlgpu.no_grad():
        _C.linear(x, lin.weight, lin.bias, activation="relu")
        tlgpu.synchronize()
        tlgpu.reset_stream_stats()
        _C.linear(x, lin.weight, lin.bias, activation="relu")
        fused = tlgpu.stream_stats()["enqueued"]
        tlgpu.reset_stream_stats()
        lin(x).relu()
        apart = tlgpu.stream_stats()["enqueued"]
    assert fused == 1 and apart == 2                  # product (+ bias in its store), relu; against one store


@pytest.mark.parametrize("blas", [True, False])
def test_sequential_fuses_linear_and_activation(rng, blas):
    _C._cpu_blas(enable=blas)
    tlgpu.manual_seed(4)
    net = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 3), nn.ReLU())
    x = tlgpu.tensor(rng.standard_normal((20, 12)).astype(np.float32))
    y = net(x)
    h = x
    for layer in net:                                  # the layers one by one: the unfused reference
        h = layer(h)
    np.testing.assert_allclose(y.numpy(), h.numpy(), rtol=1e-5, atol=1e-6)
    y.square().sum().backward()
    fused = [p.grad.numpy() for p in net.parameters()]
    net.zero_grad()
    h.square().sum().backward()
    for a, p in zip(fused, net.parameters()):
        np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert y.grad_fn is not None and "Linear" in type(y.grad_fn).__name__ + str(y.grad_fn)


def test_linear_activation_errors(rng):
    x, w = tlgpu.randn(3, 4), tlgpu.randn(5, 4)
    with pytest.raises(ValueError, match="activation"):
        _C.linear(x, w, None, activation="gelu")
    with pytest.raises(ValueError, match="out_features"):
        _C.linear(x, w, tlgpu.randn(3, 5), activation="relu")
