"""Gradient checking: analytic gradients from tlgpu's backward against central differences of a float64
numpy version of the same function, with a random upstream gradient (so every output element counts)."""
import numpy as np

import tlgpu


def numeric_grads(fn_np, arrays, upstream, eps=1e-6):
    grads = []
    for k, a in enumerate(arrays):
        g = np.zeros_like(a, dtype=np.float64)
        flat = a.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            hi = np.sum(fn_np(*arrays) * upstream)
            flat[i] = old - eps
            lo = np.sum(fn_np(*arrays) * upstream)
            flat[i] = old
            g.reshape(-1)[i] = (hi - lo) / (2 * eps)
        grads.append(g)
    return grads


def check(fn_t, fn_np, arrays, rtol=2e-3, atol=2e-4, seed=0, views=None):
    """fn_t on tlgpu tensors vs fn_np on float64 copies; views optionally maps each input tensor to a
    (non-contiguous) view of itself before fn_t sees it. Returns the tlgpu output."""
    arrays = [np.asarray(a, dtype=np.float64) for a in arrays]
    leaves = [tlgpu.tensor(a.astype(np.float32), requires_grad=True) for a in arrays]
    ins = [v(t) if v else t for t, v in zip(leaves, views or [None] * len(leaves))]
    out = fn_t(*ins)
    want = fn_np(*[a.copy() for a in arrays])
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-5)
    upstream = np.random.default_rng(seed).standard_normal(np.shape(want))
    out.backward(tlgpu.tensor(upstream.astype(np.float32).reshape(np.shape(want))))
    num = numeric_grads(fn_np, [a.copy() for a in arrays], upstream)
    for k, (leaf, g) in enumerate(zip(leaves, num)):
        assert leaf.grad is not None, f"input {k} got no gradient"
        assert leaf.grad.shape == leaf.shape
        np.testing.assert_allclose(leaf.grad.numpy(), g, rtol=rtol, atol=atol, err_msg=f"input {k}")
    return out
