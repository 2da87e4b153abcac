"""In-place ops under autograd, PyTorch's rules: allowed on non-leaf tensors (the op becomes the grad_fn),
refused on a leaf that requires grad outside no_grad, and a backward that needs a tensor modified since it
was saved raises RuntimeError naming both ops. Gradients against analytic float64 references."""
import numpy as np
import pytest

import tlgpu


def leaf(rng, shape, lo=-2.0, hi=2.0):
    a = rng.uniform(lo, hi, shape).astype(np.float32)
    return a.astype(np.float64), tlgpu.tensor(a, requires_grad=True)


def test_inplace_chain_on_a_non_leaf(rng):
    x, tx = leaf(rng, (3, 5))
    w, tw = leaf(rng, (5,))
    up = rng.standard_normal((3, 5))
    y = tx * 2.0
    y.add_(3.0)
    y.mul_(tw)                                         # saves the old y (a copy) and w
    y -= tx
    y /= 4.0
    assert y.grad_fn == "DivBackward" and not y.is_leaf
    want = ((x * 2 + 3) * w - x) / 4
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-6)
    y.backward(tlgpu.tensor(up.astype(np.float32)))
    np.testing.assert_allclose(tx.grad.numpy(), up * (2 * w - 1) / 4, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tw.grad.numpy(), (up * (2 * x + 3) / 4).sum(0), rtol=1e-5, atol=1e-5)


def test_inplace_with_itself_and_into_a_tensor_without_grad(rng):
    x, tx = leaf(rng, (6,))
    y = tx * 1.5
    y.mul_(y)                                          # y**2: both saved operands are the overwritten tensor
    acc = tlgpu.zeros(6)
    acc += y                                           # acc joins the graph, like torch
    acc.add_(tx)
    assert acc.requires_grad and acc.grad_fn == "AddBackward"
    up = rng.standard_normal(6)
    acc.backward(tlgpu.tensor(up.astype(np.float32)))
    np.testing.assert_allclose(tx.grad.numpy(), up * (2 * 1.5 * 1.5 * x + 1), rtol=1e-5, atol=1e-5)


def test_fill_zero_and_copy_on_non_leaf(rng):
    x, tx = leaf(rng, (4, 3))
    s, ts = leaf(rng, (3,))
    y = tx * 3.0
    y.zero_()                                          # y no longer depends on x
    z = tx * 2.0
    z.fill_(1.25)
    buf = tlgpu.zeros(4, 3)
    buf.copy_(ts)                                      # broadcast copy: the gradient sums back to (3,)
    out = ((y + tx) * z + buf * tx).sum()
    assert y.requires_grad and z.requires_grad and buf.grad_fn is not None
    out.backward()
    np.testing.assert_allclose(tx.grad.numpy(), 1.25 + np.broadcast_to(s, (4, 3)), rtol=1e-6)
    np.testing.assert_allclose(ts.grad.numpy(), x.sum(0), rtol=1e-5, atol=1e-6)
    with pytest.raises(RuntimeError, match="zero_: a leaf tensor that requires grad"):
        tx.zero_()
    with pytest.raises(RuntimeError, match="copy_: a leaf tensor that requires grad"):
        tx.copy_(tlgpu.zeros(4, 3))


def test_modified_saved_tensor_raises_naming_the_ops(rng):
    x, tx = leaf(rng, (5,))
    y = tx.exp()
    z = y.exp()                                        # saves its output only
    y.add_(1.0)                                        # allowed: y is not a leaf
    w = y * tx                                         # saves the new y: fine
    with pytest.raises(RuntimeError, match=r"backward of ExpBackward: a tensor it saved was modified in place by "
                                           r"add_"):
        (z.sum() + w.sum()).backward()
    a = tx * 2.0
    b = a.sin()                                        # saves a
    a.mul_(3.0)
    with pytest.raises(RuntimeError, match="SinBackward.*modified in place by mul_"):
        b.sum().backward()
    c = tx.sigmoid()
    c.sub_(0.5)                                        # sigmoid saved its output, now modified
    with pytest.raises(RuntimeError, match="SigmoidBackward.*modified in place by sub_"):
        c.sum().backward()


def test_leaf_rules_and_views(rng):
    x, tx = leaf(rng, (4, 4))
    with pytest.raises(RuntimeError, match="add_: a leaf tensor that requires grad cannot be modified in place"):
        tx.add_(1.0)
    with pytest.raises(RuntimeError, match="in place"):
        tx *= 2.0
    with tlgpu.no_grad():
        tx.mul_(2.0)                                   # an optimizer step
    np.testing.assert_allclose(tx.numpy(), 2 * x, rtol=1e-6)
    with pytest.raises(RuntimeError, match=r"view of shape \(4,\).*clone\(\) the view first"):
        tx[0].add_(1.0)                                # a view of a leaf that requires grad
    y = tx * 1.0
    with pytest.raises(RuntimeError, match="view"):
        y[1].mul_(2.0)                                 # y still sees its storage: its graph would miss it
    r = y[1].clone()
    r.mul_(2.0)
    (r.sum() + y.sum()).backward()
    want = np.ones((4, 4))
    want[1] += 2.0
    np.testing.assert_allclose(tx.grad.numpy(), want)


def test_piecewise_constant_in_place_op_passes_a_zero_gradient(rng):
    x, tx = leaf(rng, (8,), 1.0, 9.0)
    y = tx * 3.0
    y //= 2.0                                          # floor: zero derivative almost everywhere
    assert y.requires_grad and y.grad_fn is not None
    (y + tx).sum().backward()
    np.testing.assert_array_equal(y.numpy(), np.floor(x.astype(np.float32) * 3 / 2))
    np.testing.assert_array_equal(tx.grad.numpy(), np.ones(8))


def test_clamp_in_place(rng):
    x, tx = leaf(rng, (20,))
    y = tx * 2.0
    y.clamp_(-1.0, 1.5)
    assert y.grad_fn == "ClampBackward"
    y.backward(tlgpu.ones(20))
    inside = (2 * x >= -1) & (2 * x <= 1.5)
    np.testing.assert_allclose(y.numpy(), np.clip(2 * x, -1, 1.5), rtol=1e-6)
    np.testing.assert_array_equal(tx.grad.numpy(), 2.0 * inside)
    with pytest.raises(RuntimeError, match="clamp_: a leaf tensor that requires grad"):
        tx.clamp_(max=0.0)
    i = tlgpu.tensor(np.array([-5, 0, 9], np.int32))
    i.clamp_(min=-2)
    assert i.dtype == np.int32 and i.tolist() == [-2, 0, 9]


def test_setitem_on_a_non_leaf_is_recorded(rng):
    """y[key] = value under autograd (torch's CopySlices): the old y gets the gradient outside the written
    region, a tensor value gets the region's gradient summed to its shape (broadcast), a scalar nothing."""
    x, tx = leaf(rng, (4, 5))
    v, tv = leaf(rng, (5,))
    c, tc = leaf(rng, (2, 1))
    up = rng.standard_normal((4, 5))
    y = tx * 2.0
    y[1] = tv                                          # a row from a tensor that requires grad
    y[2:, 1:4:2] = tc                                  # a strided block, broadcast from (2, 1)
    y[0, 0] = 7.5                                      # a scalar: no gradient to anything there
    assert y.grad_fn == "CopySlices" and not y.is_leaf
    want = x * 2
    want[1] = v
    want[2:, 1:4:2] = c
    want[0, 0] = 7.5
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    y.backward(tlgpu.tensor(up.astype(np.float32)))
    gx = 2 * up
    gx[1] = 0
    gx[2:, 1:4:2] = 0
    gx[0, 0] = 0
    np.testing.assert_allclose(tx.grad.numpy(), gx, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tv.grad.numpy(), up[1], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(tc.grad.numpy(), up[2:, 1:4:2].sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_setitem_into_a_buffer_joins_the_graph_and_guards_saved_tensors(rng):
    v, tv = leaf(rng, (3,))
    buf = tlgpu.zeros(2, 3)                            # no grad: the write makes it part of the graph, as torch
    buf[1] = tv
    assert buf.requires_grad and buf.grad_fn == "CopySlices"
    (buf * buf).sum().backward()
    np.testing.assert_allclose(tv.grad.numpy(), 2 * v, rtol=1e-6)
    x, tx = leaf(rng, (3,))
    y = tx * 1.0
    z = y * y                                          # saves y
    y[0] = 1.0
    with pytest.raises(RuntimeError, match="modified"):
        z.sum().backward()
    with pytest.raises(RuntimeError, match="__setitem__: a leaf tensor that requires grad"):
        tx[0] = 1.0
    with tlgpu.no_grad():
        tx[0] = 1.0                                    # allowed outside grad mode, as torch
    assert float(tx[0]) == 1.0


UNARY_INPLACE = {
    "relu_": (lambda v: np.maximum(v, 0), lambda v: (v > 0).astype(np.float64)),
    "sigmoid_": (lambda v: 1 / (1 + np.exp(-v)), lambda v: np.exp(-v) / (1 + np.exp(-v)) ** 2),
    "tanh_": (np.tanh, lambda v: 1 - np.tanh(v) ** 2),
    "exp_": (np.exp, np.exp),
    "neg_": (np.negative, lambda v: -np.ones_like(v)),
    "abs_": (np.abs, np.sign),
    "sqrt_": (np.sqrt, lambda v: 0.5 / np.sqrt(v)),
}


@pytest.mark.parametrize("name", sorted(UNARY_INPLACE))
def test_unary_inplace_methods(rng, name):
    """x.relu_() and friends (torch's names): self returned, values as numpy, the gradient through the op on a
    non-leaf, refused on a leaf that requires grad."""
    f, df = UNARY_INPLACE[name]
    lo = 0.1 if name == "sqrt_" else -2.0
    x, tx = leaf(rng, (4, 7), lo=lo)
    plain = tlgpu.tensor(x.astype(np.float32))
    assert getattr(plain, name)() is plain
    np.testing.assert_allclose(plain.numpy(), f(x), rtol=1e-5, atol=1e-6)
    y = tx * 1.0
    getattr(y, name)()
    up = rng.standard_normal((4, 7))
    y.backward(tlgpu.tensor(up.astype(np.float32)))
    np.testing.assert_allclose(tx.grad.numpy(), up * df(x), rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="leaf"):
        getattr(tx, name)()


def test_clamp_min_max_inplace(rng):
    x = rng.standard_normal(9).astype(np.float32)
    t = tlgpu.tensor(x)
    assert t.clamp_min_(0.25) is t
    np.testing.assert_array_equal(t.numpy(), np.maximum(x, np.float32(0.25)))
    t.clamp_max_(0.5)
    np.testing.assert_array_equal(t.numpy(), np.minimum(np.maximum(x, np.float32(0.25)), np.float32(0.5)))
