"""Autograd: gradients of every op against float64 finite differences (random inputs, several shapes,
broadcasting, non-contiguous views), and the engine's rules: accumulation, retain_graph, version checks,
no_grad, detach, long chains, and memory returning to baseline."""
import math

import numpy as np
import pytest

import tlgpu
from gradcheck import check

R = np.random.default_rng(7)


def rand(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, shape)


UNARY = [
    ("neg", lambda x: -x, None), ("exp", np.exp, None), ("tanh", np.tanh, None), ("sin", np.sin, None),
    ("cos", np.cos, None), ("square", np.square, None), ("abs", np.abs, None),
    ("sigmoid", lambda x: 1 / (1 + np.exp(-x)), None), ("relu", lambda x: np.maximum(x, 0), None),
    ("silu", lambda x: x / (1 + np.exp(-x)), None),
    ("gelu", lambda x: 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2))), None),
    ("log", np.log, (0.5, 3.0)), ("sqrt", np.sqrt, (0.5, 3.0)), ("rsqrt", lambda x: 1 / np.sqrt(x), (0.5, 3.0)),
    ("reciprocal", lambda x: 1 / x, (0.5, 3.0)), ("log1p", np.log1p, (-0.5, 3.0)), ("expm1", np.expm1, None),
    ("erf", np.vectorize(math.erf), None),
]


@pytest.mark.parametrize("name,fn,dom", UNARY, ids=[u[0] for u in UNARY])
def test_unary_grads(name, fn, dom):
    x = rand(3, 5, lo=dom[0], hi=dom[1]) if dom else rand(3, 5)
    if name in ("abs", "relu"):
        x[np.abs(x) < 0.05] = 0.3                      # keep away from the kink
    check(lambda t: getattr(t, name)(), fn, [x])


BINARY = [
    ("add", lambda a, b: a + b, np.add), ("sub", lambda a, b: a - b, np.subtract),
    ("mul", lambda a, b: a * b, np.multiply), ("div", lambda a, b: a / b, np.divide),
    ("maximum", tlgpu.maximum, np.maximum), ("minimum", tlgpu.minimum, np.minimum),
]


@pytest.mark.parametrize("name,ft,fn", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("sa,sb", [((4, 3), (4, 3)), ((4, 3), (3,)), ((2, 1, 3), (4, 1)), ((), (3, 2))])
def test_binary_grads_with_broadcasting(name, ft, fn, sa, sb):
    a, b = rand(*sa), rand(*sb, lo=0.5, hi=2.0)
    check(ft, fn, [a, b])


def test_pow_and_scalars():
    a, b = rand(3, 4, lo=0.5, hi=2.0), rand(3, 4)
    check(lambda x, y: x ** y, lambda x, y: x ** y, [a, b])
    check(lambda x: 2.0 ** x - x ** 3 + 1.5 / x + (3 - x) * 2, lambda x: 2.0 ** x - x ** 3 + 1.5 / x + (3 - x) * 2, [a])


def test_where_clamp():
    c = (rand(4, 5) > 0).astype(np.float64)
    x, y = rand(4, 5), rand(5)
    ct = tlgpu.tensor(c.astype(np.float32))
    check(lambda a, b: tlgpu.where(ct, a, b), lambda a, b: np.where(c != 0, a, b), [x, y])
    x = rand(4, 5)
    x[np.abs(np.abs(x) - 0.5) < 0.05] = 0.0
    check(lambda a: a.clamp(-0.5, 0.5), lambda a: np.clip(a, -0.5, 0.5), [x])


VIEWS = [
    ("reshape", lambda t: t.reshape(6, 4), lambda a: a.reshape(6, 4)),
    ("view-flatten", lambda t: t.flatten(), lambda a: a.reshape(-1)),
    ("transpose", lambda t: t.transpose(0, 2), lambda a: a.transpose(2, 1, 0)),
    ("permute", lambda t: t.permute(1, 2, 0), lambda a: a.transpose(1, 2, 0)),
    ("T", lambda t: t.T, lambda a: a.T),
    ("unsqueeze-squeeze", lambda t: t.unsqueeze(1).squeeze(1), lambda a: a),
    ("slice", lambda t: t[1:, ::2, None, -1], lambda a: a[1:, ::2, None, -1]),
    ("neg-step", lambda t: t[:, ::-1], lambda a: a[:, ::-1]),
    ("expand", lambda t: t[:, :1].expand(2, 5, 4), lambda a: np.broadcast_to(a[:, :1], (2, 5, 4))),
    ("split", lambda t: t.split(1, 1)[1] * 2, lambda a: a[:, 1:2] * 2),
    ("index_select", lambda t: t.index_select(1, tlgpu.tensor([2, 0, 2, 1], dtype=np.int32)),
     lambda a: a[:, [2, 0, 2, 1]]),
    ("int-index", lambda t: t[[1, 1, 0]], lambda a: a[[1, 1, 0]]),
]


@pytest.mark.parametrize("name,ft,fn", VIEWS, ids=[v[0] for v in VIEWS])
def test_view_and_index_grads(name, ft, fn):
    x = rand(2, 3, 4)
    check(lambda t: ft(t) * 1.0, fn, [x])


def test_views_of_non_contiguous_inputs():
    x = rand(4, 3)
    check(lambda t: (t * t).reshape(12), lambda a: (a * a).reshape(12), [x.T.copy()])
    # the op's input is a transposed (non-contiguous) view of the leaf
    check(lambda t: (t.exp() * t).reshape(12), lambda a: (np.exp(a.T) * a.T).reshape(12), [x],
          views=[lambda t: t.T])


def test_cat_stack():
    a, b, c = rand(2, 3), rand(4, 3), rand(2, 3)
    check(lambda x, y: tlgpu.cat([x, y, x], axis=0), lambda x, y: np.concatenate([x, y, x], 0), [a, b])
    check(lambda x, y: tlgpu.stack([x, y], axis=1), lambda x, y: np.stack([x, y], 1), [a, c])


@pytest.mark.parametrize("sa,sb", [((3, 4), (4, 5)), ((2, 3, 4), (2, 4, 5)), ((2, 3, 4), (4, 5)), ((4,), (4, 5)),
                                   ((3, 4), (4,)), ((4,), (4,)), ((1, 3, 4), (2, 4, 2))])
def test_matmul_grads(sa, sb):
    check(lambda x, y: x @ y, lambda x, y: np.matmul(x, y), [rand(*sa), rand(*sb)])


def test_matmul_transposed_operand_and_outer():
    check(lambda x, w: x @ w.T, lambda x, w: x @ w.T, [rand(3, 4), rand(5, 4)])
    check(lambda x, y: x.outer(y), np.outer, [rand(3), rand(4)])


def test_shared_subexpressions_accumulate():
    x = rand(3, 3)
    check(lambda t: (t * t + t) * t.exp() - t, lambda a: (a * a + a) * np.exp(a) - a, [x])


def test_leaf_grad_accumulates_across_backward_calls():
    x = tlgpu.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x * 2).backward(tlgpu.ones(3))
    (x * x).backward(tlgpu.ones(3))
    np.testing.assert_allclose(x.grad.numpy(), [2 + 2, 2 + 4, 2 + 6])


def test_second_backward_raises_unless_retained():
    x = tlgpu.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp() * x
    y.backward(tlgpu.ones(2), retain_graph=True)
    y.backward(tlgpu.ones(2))
    want = 2 * (np.exp([1.0, 2.0]) * np.array([2.0, 3.0]))
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-5)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward(tlgpu.ones(2))


def test_implicit_gradient_needs_one_element():
    x = tlgpu.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="one-element"):
        (x * 2).backward()
    (x[0:1] * 3).backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 0.0])
    with pytest.raises(RuntimeError, match="does not require grad"):
        tlgpu.ones(1).backward()


def test_inplace_edit_of_saved_tensor_is_caught():
    x = tlgpu.tensor([1.0, 2.0], requires_grad=True)
    w = tlgpu.tensor([3.0, 4.0])
    y = x * w
    w.add_(1.0)
    with pytest.raises(RuntimeError, match=r"MulBackward.*modified in place by add_"):
        y.backward(tlgpu.ones(2))
    z = x * 1.0
    e = z.detach().exp()                                 # out of the graph: fine
    with pytest.raises(RuntimeError, match="in place"):
        x.add_(1.0)                                       # a leaf that requires grad
    with tlgpu.no_grad():
        x.add_(1.0)                                       # allowed under no_grad (optimizer steps)
    y2 = x.sin()                                          # saves x itself
    with tlgpu.no_grad():
        x.mul_(2.0)
    with pytest.raises(RuntimeError, match="SinBackward.*modified in place by mul_"):
        y2.backward(tlgpu.ones(2))
    assert e.shape == (2,)


def test_no_grad_and_detach():
    x = tlgpu.tensor([1.0, 2.0], requires_grad=True)
    with tlgpu.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None and y.is_leaf
    d = x.detach()
    assert not d.requires_grad and d._version == x._version
    z = x * 2
    assert z.requires_grad and not z.is_leaf and z.grad_fn == "MulBackward"

    @tlgpu.no_grad()
    def f(t):
        return t + 1
    assert not f(x).requires_grad
    with tlgpu.no_grad():
        with tlgpu.enable_grad():
            assert (x * 1).requires_grad
    assert x.requires_grad_(False) is x and not x.requires_grad


def test_10000_op_chain_no_recursion_limit():
    x = tlgpu.tensor([0.5], requires_grad=True)
    y = x
    for _ in range(10000):
        y = y * 1.0001
    y.backward(tlgpu.ones(1))
    np.testing.assert_allclose(x.grad.numpy(), [1.0001 ** 10000], rtol=1e-3)
    del y                                                # the chain frees iteratively


def test_graph_memory_returns_to_baseline():
    w = tlgpu.tensor(rand(64, 64).astype(np.float32), requires_grad=True)
    x = tlgpu.tensor(rand(8, 64).astype(np.float32))
    (x @ w).tanh().backward(tlgpu.ones(8, 64))
    tlgpu.synchronize()
    base = tlgpu.memory_stats()["live"]
    for _ in range(50):
        w.grad = None
        y = ((x @ w).tanh() * 2.0).relu()
        y.backward(tlgpu.ones(8, 64))
        del y
        assert tlgpu.memory_stats()["live"] == base


def _random_graph(xs, seed):
    """The same random expression DAG over xs (each (4, 4), tlgpu or torch tensors), chosen by seed."""
    rng = np.random.default_rng(seed)
    pool = list(xs)
    unary = [lambda a: a.tanh(), lambda a: a.exp() * 0.1, lambda a: a.sigmoid(), lambda a: a.relu() + a * 0.5,
             lambda a: a.T, lambda a: (a * a + 1).sqrt(), lambda a: a.softmax(-1),
             lambda a: a.reshape(2, 8).reshape(4, 4)]
    binary = [lambda a, b: a + b, lambda a, b: a * b, lambda a, b: a - b * 0.5, lambda a, b: a @ b,
              lambda a, b: a / (b * b + 1)]
    for _ in range(12):
        if rng.random() < 0.5:
            pool.append(unary[rng.integers(len(unary))](pool[rng.integers(len(pool))]))
        else:
            a, b = rng.integers(len(pool), size=2)
            pool.append(binary[rng.integers(len(binary))](pool[a], pool[b]))
    out = pool[-1]
    for t in pool[len(xs):-1:3]:                     # several outputs feed the loss: shared subgraphs
        out = out + t
    return out.sum()


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs_match_torch(seed):
    torch = pytest.importorskip("torch")
    data = [rand(4, 4) for _ in range(3)]
    ts = [tlgpu.tensor(d.astype(np.float32), requires_grad=True) for d in data]
    ps = [torch.tensor(d, requires_grad=True) for d in data]
    lt, lp = _random_graph(ts, seed), _random_graph(ps, seed)
    np.testing.assert_allclose(float(lt), lp.item(), rtol=1e-4)
    lt.backward()
    lp.backward()
    for t, p in zip(ts, ps):
        if p.grad is None:
            assert t.grad is None
        else:
            np.testing.assert_allclose(t.grad.numpy(), p.grad.numpy(), rtol=2e-4, atol=2e-5)


def _lse(a, axis=None, keepdims=False):
    m = np.max(a, axis=axis, keepdims=True)
    r = np.log(np.sum(np.exp(a - m), axis=axis, keepdims=True)) + m
    return r if keepdims else np.squeeze(r, axis=axis) if axis is not None else r.reshape(())


REDUCTIONS = [
    ("sum", dict(), lambda a: a.sum()), ("sum", dict(axis=1), lambda a: a.sum(1)),
    ("sum", dict(axis=(0, 2), keepdims=True), lambda a: a.sum((0, 2), keepdims=True)),
    ("mean", dict(axis=-1), lambda a: a.mean(-1)), ("mean", dict(), lambda a: a.mean()),
    ("max", dict(axis=1), lambda a: a.max(1)), ("min", dict(axis=(0, 1)), lambda a: a.min((0, 1))),
    ("max", dict(), lambda a: a.max()),
    ("logsumexp", dict(axis=2), lambda a: _lse(a, 2)), ("logsumexp", dict(), lambda a: _lse(a)),
]


@pytest.mark.parametrize("name,kw,fn", REDUCTIONS, ids=[f"{r[0]}-{r[1]}" for r in REDUCTIONS])
def test_reduction_grads(name, kw, fn):
    check(lambda t: getattr(t, name)(**kw), fn, [rand(2, 3, 4)])


def _softmax(a, axis):
    e = np.exp(a - a.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax_grads(axis):
    check(lambda t: t.softmax(axis), lambda a: _softmax(a, axis), [rand(3, 4, 5)])
    check(lambda t: t.log_softmax(axis=axis), lambda a: np.log(_softmax(a, axis)), [rand(3, 4, 5)])


def test_reduction_grad_of_non_contiguous_input():
    check(lambda t: t.sum(0) * 2, lambda a: a.T.sum(0) * 2, [rand(3, 4)], views=[lambda t: t.T])


def test_scalar_loss_backward_implicit():
    x = tlgpu.tensor(rand(4, 3).astype(np.float32), requires_grad=True)
    loss = (x * x).mean()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.numpy() / 12, rtol=1e-5)
