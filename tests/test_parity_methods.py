"""Tensor methods with PyTorch's names against numpy/float64 on random inputs, gradients by central
differences (gradcheck.check): clone, size/dim, var/std, cumsum, repeat, masked_fill, max/min with dim=,
__format__ and a repr that shows grad_fn."""
import numpy as np
import pytest

import tlgpu
from gradcheck import check


def test_clone_is_a_differentiable_copy(rng):
    x = rng.standard_normal((4, 5))
    t = tlgpu.tensor(x.astype(np.float32))
    c = t[:, 1:4].clone()
    assert c.is_contiguous() and c.shape == (4, 3)
    c.add_(1.0)                                        # its own storage
    np.testing.assert_array_equal(t.numpy(), x.astype(np.float32))
    check(lambda a: a.clone() * a, lambda a: a * a, [x])
    i = tlgpu.tensor(rng.integers(-9, 9, 6).astype(np.int32))
    assert i.clone().dtype == np.int32 and (i.clone() == i).numpy().all()


def test_size_and_dim(rng):
    t = tlgpu.zeros(2, 3, 5)
    assert t.size() == (2, 3, 5) and t.size(1) == 3 and t.size(-1) == 5 and t.dim() == 3
    assert tlgpu.zeros(()).dim() == 0 and tlgpu.zeros(()).size() == ()
    with pytest.raises(IndexError, match="size: dim 3"):
        t.size(3)


@pytest.mark.parametrize("dim,keepdim", [(None, False), (0, False), (1, True), ((0, 2), False), (-1, True)])
def test_var_std_match_numpy(rng, dim, keepdim):
    x = rng.standard_normal((4, 5, 3)) * 2 + 1
    t = tlgpu.tensor(x.astype(np.float32))
    xf = x.astype(np.float32).astype(np.float64)
    ax = dim if dim is None or isinstance(dim, int) else tuple(dim)
    for kw, ddof in ((dict(), 1), (dict(unbiased=False), 0), (dict(correction=0), 0), (dict(correction=2), 2)):
        np.testing.assert_allclose(t.var(dim, keepdim=keepdim, **kw).numpy(),
                                   xf.var(axis=ax, ddof=ddof, keepdims=keepdim), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(t.std(dim=dim, keepdim=keepdim, **kw).numpy(),
                                   xf.std(axis=ax, ddof=ddof, keepdims=keepdim), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(tlgpu.std(t, axis=ax, keepdims=keepdim).numpy(),
                               xf.std(axis=ax, ddof=1, keepdims=keepdim), rtol=1e-4, atol=1e-5)


def test_var_std_gradients(rng):
    x = rng.standard_normal((3, 6))
    check(lambda a: a.var(1), lambda a: a.var(1, ddof=1), [x])
    check(lambda a: a.std(0, unbiased=False, keepdim=True), lambda a: a.std(0, keepdims=True), [x])
    check(lambda a: a.std(), lambda a: a.std(ddof=1), [x])


@pytest.mark.parametrize("shape,dim", [((1025,), 0), ((7, 33), 0), ((7, 33), 1), ((3, 4, 5), 1), ((3, 4, 5), -1)])
def test_cumsum_matches_numpy(rng, shape, dim):
    x = rng.standard_normal(shape).astype(np.float32)
    t = tlgpu.tensor(x)
    np.testing.assert_allclose(t.cumsum(dim).numpy(), np.cumsum(x, dim), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tlgpu.cumsum(t, dim=dim).numpy(), np.cumsum(x, dim), rtol=1e-5, atol=1e-5)
    xt = np.ascontiguousarray(np.swapaxes(x, 0, -1))
    view = tlgpu.tensor(xt).transpose(0, -1) if len(shape) > 1 else t[::-1]
    want = np.cumsum(np.swapaxes(xt, 0, -1), dim) if len(shape) > 1 else np.cumsum(x[::-1], dim)
    np.testing.assert_allclose(view.cumsum(dim).numpy(), want, rtol=1e-5, atol=1e-5)
    i = rng.integers(-2 ** 30, 2 ** 30, shape).astype(np.int32)
    got = tlgpu.tensor(i).cumsum(dim)
    assert got.dtype == np.int32
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got.numpy(), np.cumsum(i, dim, dtype=np.int32))


def test_cumsum_gradient_and_edges(rng):
    check(lambda a: a.cumsum(1), lambda a: np.cumsum(a, 1), [rng.standard_normal((3, 7))])
    check(lambda a: a.cumsum(0) * a, lambda a: np.cumsum(a, 0) * a, [rng.standard_normal((6, 2))])
    assert tlgpu.zeros(0, 3).cumsum(0).shape == (0, 3)
    assert tlgpu.tensor(np.float32(2.5)).cumsum(0).item() == 2.5
    with pytest.raises(IndexError, match=r"cumsum: dim 2 is out of range for a tensor of shape \(2, 3\)"):
        tlgpu.zeros(2, 3).cumsum(2)
    with pytest.raises(TypeError, match="cumsum"):
        tlgpu.zeros(2, 3).cumsum()


@pytest.mark.parametrize("shape,sizes", [((3,), (2,)), ((2, 3), (2, 2)), ((2, 3), (3, 1, 2)), ((4, 1), (1, 5))])
def test_repeat_matches_tile(rng, shape, sizes):
    x = rng.standard_normal(shape)
    out = check(lambda a: a.repeat(*sizes), lambda a: np.tile(a, sizes), [x])
    assert out.shape == np.tile(x, sizes).shape
    np.testing.assert_array_equal(tlgpu.tensor(x.astype(np.float32)).repeat(list(sizes)).numpy(),
                                  np.tile(x.astype(np.float32), sizes))
    with pytest.raises(ValueError, match="repeat"):
        tlgpu.zeros(2, 3).repeat(2)


def test_masked_fill(rng):
    x = rng.standard_normal((5, 4))
    m = rng.random((5, 4)) < 0.4
    mrow = rng.random((4,)) < 0.5
    t = tlgpu.tensor(x.astype(np.float32))
    xf = x.astype(np.float32)
    for mask, want_m in ((tlgpu.tensor(m.astype(np.float32)), m), (m, m), (t > 0.3, xf > 0.3),
                         (tlgpu.tensor(m.astype(np.int32)), m)):
        np.testing.assert_array_equal(t.masked_fill(mask, -7.5).numpy(), np.where(want_m, -7.5, xf))
    check(lambda a: a.masked_fill(tlgpu.tensor(mrow.astype(np.float32)), 0.25), lambda a: np.where(mrow, 0.25, a), [x])
    i = rng.integers(-5, 5, (5, 4)).astype(np.int32)
    got = tlgpu.tensor(i).masked_fill(m, 99)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.numpy(), np.where(m, 99, i))
    y = tlgpu.tensor(x.astype(np.float32), requires_grad=True)
    z = y * 2.0
    z.masked_fill_(m, 0.0)                             # in place on a non-leaf: recorded
    z.sum().backward()
    np.testing.assert_array_equal(y.grad.numpy(), np.where(m, 0.0, 2.0))
    with pytest.raises(ValueError, match=r"masked_fill: mask of shape \(3,\) does not broadcast to \(5, 4\)"):
        t.masked_fill(np.ones(3, bool), 1.0)


@pytest.mark.parametrize("name", ["max", "min"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, False), (-1, True), (2, False)])
def test_max_min_with_dim_return_values_and_indices(rng, name, dim, keepdim):
    x = rng.standard_normal((4, 6, 5))
    t = tlgpu.tensor(x.astype(np.float32))
    r = getattr(t, name)(dim=dim, keepdim=keepdim)
    values, indices = r                                # a named tuple unpacks
    want = getattr(x.astype(np.float32), name)(axis=dim, keepdims=keepdim)
    want_i = getattr(x.astype(np.float32), "arg" + name)(axis=dim)
    if keepdim:
        want_i = np.expand_dims(want_i, dim)
    assert type(r).__name__ == name and r.values is values and r.indices is indices
    np.testing.assert_array_equal(values.numpy(), want)
    assert indices.dtype == np.int32
    np.testing.assert_array_equal(indices.numpy(), want_i)
    fn = getattr(tlgpu, name)
    np.testing.assert_array_equal(fn(t, dim=dim).indices.numpy(), getattr(x, "arg" + name)(axis=dim))
    np.testing.assert_array_equal(getattr(t, name)(axis=dim).numpy(), getattr(x.astype(np.float32), name)(axis=dim))
    np.testing.assert_array_equal(getattr(t, name)(dim).numpy(), getattr(x.astype(np.float32), name)(dim))
    check(lambda a: getattr(a, name)(dim=dim, keepdim=keepdim).values,
          lambda a: getattr(a, name)(axis=dim, keepdims=keepdim), [x])


def test_max_min_of_two_tensors_are_elementwise(rng):
    a, b = rng.standard_normal(9).astype(np.float32), rng.standard_normal(9).astype(np.float32)
    np.testing.assert_array_equal(tlgpu.tensor(a).max(tlgpu.tensor(b)).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(tlgpu.tensor(a).min(b).numpy(), np.minimum(a, b))


def test_format_and_repr(rng):
    v = float(rng.standard_normal())
    t0 = tlgpu.tensor(np.float32(v))
    assert f"{t0:.3f}" == f"{np.float32(v):.3f}" and f"{tlgpu.tensor([np.float32(v)]):+.2e}" == f"{np.float32(v):+.2e}"
    assert f"{tlgpu.tensor([3, -4])[1]:d}" == "-4"
    with pytest.raises(TypeError, match=r"shape \(2,\)"):
        f"{tlgpu.zeros(2):.3f}"
    x = tlgpu.tensor(rng.standard_normal(3).astype(np.float32), requires_grad=True)
    y = x * 2.0
    assert f"{y}" == repr(y)
    assert repr(y).endswith("grad_fn=<MulBackward>)") and repr(y).startswith("tensor([")
    assert repr(x).endswith("requires_grad=True)") and "grad_fn" not in repr(x)
    assert "grad_fn" not in repr(y.detach()) and "requires_grad" not in repr(y.detach())
    assert repr(y.sum()).endswith("grad_fn=<ReduceBackward>)")
