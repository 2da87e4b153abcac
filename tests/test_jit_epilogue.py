"""tlgpu.jit's epilogue pass (docs/jit.md, "Epilogues"): a bias add and a ReLU/Tanh right after a matrix product
of matmul.cl's kernels move into the product's store. Replays equal eager calls (bit for bit on PoCL, a few ulps
on GPUs as in test_jit_fuse), the commands shrink, and what must not move (a kept intermediate, a bias that is
not one value per column, an output the product reads) stays apart. On CPU devices the products normally run on
the host BLAS (native commands, no store epilogue): these tests switch it off so matmul.cl's kernels run."""
import numpy as np
import pytest

import tlgpu
from tlgpu import _C
from test_jit_fuse import same


@pytest.fixture(autouse=True)
def kernels_not_blas(blas_off):
    """The OpenCL kernels on every device: the epilogues are theirs."""


@pytest.fixture
def A(rng):
    return lambda *s: rng.standard_normal(s).astype(np.float32)


def run(f, make, reps=6):
    """f eagerly and jitted on fresh inputs each call: outputs and (mutated) inputs equal. The jitted fn."""
    jf = tlgpu.jit(f)
    for _ in range(reps):
        arrays = make()
        got = []
        for fn in (f, jf):
            ts = [tlgpu.tensor(a) for a in arrays]
            out = fn(*ts)
            got.append([o.numpy() for o in (out if isinstance(out, tuple) else (out,))] + [t.numpy() for t in ts])
        for e, g in zip(*got):
            same(g, e)
    assert jf.memory_plan()["replays"] == reps - 2
    return jf


def gemm_cmds(jf):
    return [c for c in jf.commands() if c.startswith("tl_gemm") or c.startswith("tl_matmul")]


@pytest.mark.parametrize("shape", [(17, 33, 20), (1, 8, 5), (64, 48, 40)])
def test_bias_and_relu_move_into_the_product(A, shape):
    M, K, N = shape
    jf = run(lambda x, w, b: (x @ w + b).relu(), lambda: [A(M, K), A(K, N), A(N)])
    c = jf.commands()
    assert len(c) == 1 and c[0].endswith("+bias+relu"), c
    assert jf.memory_plan()["fused_away"] == 2


def test_transposed_weight_bias_then_ops_after(A):
    jf = run(lambda x, w, b: ((x @ w.T + b).relu() * 2 - 1).exp(), lambda: [A(9, 16), A(12, 16), A(12)])
    c = jf.commands()
    assert c[0].endswith("+bias+relu") and c[1:] == ["fused(mul,sub,exp)"], c


def test_bias_first_operand_and_in_place(A):
    def f(x, w, b):
        y = x @ w
        y += b                                         # in place on the product's result
        return y.relu()
    jf = run(f, lambda: [A(10, 7), A(7, 6), A(6)])
    assert len(jf.commands()) == 1 and jf.commands()[0].endswith("+bias+relu")
    jg = run(lambda x, w, b: (b + x @ w).relu(), lambda: [A(10, 7), A(7, 6), A(6)])
    assert len(jg.commands()) == 1


def test_relu_alone_and_batched_product(A):
    jf = run(lambda x, w: (x @ w).relu(), lambda: [A(3, 5, 7), A(7, 4)])
    assert len(jf.commands()) == 1 and jf.commands()[0].endswith("+relu")
    jb = run(lambda x, w, b: (x @ w + b).relu(), lambda: [A(3, 5, 7), A(3, 7, 4), A(4)])
    assert jb.commands()[0].endswith("+bias+relu")


def test_tanh_moves_where_it_gives_the_same_bits(A):
    jf = run(lambda x, w, b: (x @ w + b).tanh(), lambda: [A(6, 9), A(9, 11), A(11)])
    c = jf.commands()
    assert "+bias" in c[0]
    if tlgpu.device().type == "cpu":                   # PoCL's float4 tanh is not its scalar tanh: kept apart
        assert len(c) == 2
    else:
        assert c == [c[0]] and c[0].endswith("+bias+tanh")


@pytest.mark.parametrize("case", ["column_bias", "bias_view", "kept", "matrix_add", "output_read"])
def test_what_does_not_move(A, case):
    if case == "column_bias":                          # one value per row, not per column
        f, make = (lambda x, w, b: (x @ w + b).relu()), (lambda: [A(6, 5), A(5, 4), A(6, 1)])
    elif case == "bias_view":                          # the bias at an offset: mm_epi reads bias[n] from 0
        f, make = (lambda x, w, b: (x @ w + b[1:]).relu()), (lambda: [A(6, 5), A(5, 4), A(5)])
    elif case == "kept":                               # the product's value is returned: stored
        def f(x, w, b):
            y = x @ w
            return y, (y + b).relu()
        make = lambda: [A(6, 5), A(5, 4), A(4)]      # noqa: E731
    elif case == "matrix_add":                        # a full matrix added: not a bias
        f, make = (lambda x, w, b: (x @ w + b).relu()), (lambda: [A(6, 5), A(5, 4), A(6, 4)])
    else:                                              # the output may get the block of a freed operand
        def f(x, w, b):
            t = x * 1
            y = t @ w + b
            del t                                      # its block is free for relu's output
            return y.relu()
        make = lambda: [A(6, 6), A(6, 6), A(6)]      # noqa: E731
    jf = run(f, make)
    g = gemm_cmds(jf)
    assert len(g) == 1
    if case in ("column_bias", "bias_view", "matrix_add"):
        assert "+bias" not in g[0]
    if case == "kept":
        assert "+" not in g[0]


def test_fuse_false_keeps_them(A):
    jf = tlgpu.jit(lambda x, w, b: (x @ w + b).relu(), fuse=False)
    x, w, b = tlgpu.tensor(A(5, 4)), tlgpu.tensor(A(4, 3)), tlgpu.tensor(A(3))
    for _ in range(3):
        jf(x, w, b)
    assert len(jf.commands()) == 3


def test_training_step_matches_eager(rng):
    """A two-layer network written with @, + and relu (no nn.Linear), Adam: losses and parameters equal eager
    training step for step. The forward's products take their bias; ReLU stays apart, since its backward keeps
    its input (the value the product would no longer store)."""
    def make():
        tlgpu.manual_seed(5)
        p = [tlgpu.randn(8, 16) * 0.3, tlgpu.zeros(16), tlgpu.randn(16, 3) * 0.3, tlgpu.zeros(3)]
        for t in p:
            t.requires_grad_()
        return p, tlgpu.optim.Adam(p, lr=1e-2)

    def stepper(p, opt):
        def step(x, y):
            h = (x @ p[0] + p[1]).relu()
            loss = tlgpu.nn.functional.cross_entropy(h @ p[2] + p[3], y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss
        return step
    (p1, o1), (p2, o2) = make(), make()
    eager, jitted = stepper(p1, o1), tlgpu.jit(stepper(p2, o2))
    for _ in range(8):
        x = tlgpu.tensor(rng.standard_normal((12, 8)).astype(np.float32))
        y = tlgpu.tensor(rng.integers(0, 3, 12).astype(np.int32))
        same(jitted(x, y).numpy(), eager(x, y).numpy())
    for a, b in zip(p1, p2):
        same(b.numpy(), a.numpy())
    c = jitted.commands()
    assert sum(x.endswith("+bias") for x in c) == 2, c


def test_clamp_min_zero_is_relu(A):
    jf = run(lambda x, w, b: (x @ w + b).clamp(min=0.0), lambda: [A(7, 5), A(5, 9), A(9)])
    assert len(jf.commands()) == 1 and jf.commands()[0].endswith("+bias+relu")
    jg = run(lambda x, w: (x @ w).clamp(min=0.5), lambda: [A(7, 5), A(5, 9)])   # another bound: stays apart
    assert len(jg.commands()) == 2


@pytest.mark.parametrize("inplace", [True, False])
def test_convolution_takes_the_relu(A, inplace):
    """conv2d's output pass (y [O, N*L] to NCHW, + bias) applies the ReLU after it. Out of place, the ReLU's
    output may get the block of the product it reads (the arena reuses it): then it stays apart."""
    conv = tlgpu.nn.Conv2d(3, 6, 3, stride=2)

    def f(x):
        with tlgpu.no_grad():
            return tlgpu.nn.functional.relu(conv(x), inplace=inplace)
    jf = run(f, lambda: [A(2, 3, 9, 9)])
    c = [x for x in jf.commands() if x.startswith("tl_conv_layout")]
    assert len(c) == 1
    if inplace:
        assert c[0].endswith("+relu") and len(jf.commands()) == 3


def test_scale_moves_into_the_product(A):
    """Attention's scores: a scalar multiply right after the product (either operand order), then a bias or an
    activation."""
    jf = run(lambda x, w, b: (x @ w * 0.125 + b).relu(), lambda: [A(9, 16), A(16, 12), A(12)])
    assert jf.commands() == [gemm_cmds(jf)[0]] and jf.commands()[0].endswith("*scale+bias+relu")
    jq = run(lambda q, k: 0.3 * (q @ k.transpose(-1, -2)), lambda: [A(2, 3, 5, 8), A(2, 3, 6, 8)])
    assert len(jq.commands()) == 1 and jq.commands()[0].endswith("*scale")


@pytest.mark.parametrize("form", ["h_first", "h_last", "in_place", "offset", "bias_residual_relu"])
def test_residual_moves_into_the_product(A, form):
    M, K, N = 11, 13, 7
    if form == "h_first":
        f, tail = (lambda x, w, h: h + x @ w), "+residual"
    elif form == "h_last":
        f, tail = (lambda x, w, h: x @ w.T.T + h), "+residual"
    elif form == "in_place":                           # the residual is the output: h += x @ w
        def f(x, w, h):
            h += x @ w
            return h
        tail = "+residual"
    elif form == "offset":                             # a view at an offset, walked as the output
        f, tail = (lambda x, w, h: x @ w + h[1:]), "+residual"
    else:
        f, tail = (lambda x, w, h, b: (x @ w + b + h).relu()), "+bias+residual+relu"
    rows = M + 1 if form == "offset" else M
    make = (lambda: [A(M, K), A(K, N), A(rows, N), A(N)]) if form == "bias_residual_relu" else \
        (lambda: [A(M, K), A(K, N), A(rows, N)])
    jf = run(f, make)
    assert len(jf.commands()) == 1 and jf.commands()[0].endswith(tail), jf.commands()


@pytest.mark.parametrize("case", ["residual_then_bias", "divide", "scale_after_bias", "residual_kept",
                                  "residual_is_product"])
def test_what_stays_apart_around_scale_and_residual(A, case):
    """Only mm_epi's order moves (scale, bias, residual, activation), only a multiply scales, and a value still
    read later is stored."""
    if case == "residual_then_bias":                   # (p + h) + b would round as p + b + h: stays apart
        f, make = (lambda x, w, h, b: x @ w + h + b), (lambda: [A(6, 5), A(5, 4), A(6, 4), A(4)])
    elif case == "divide":
        f, make = (lambda x, w: (x @ w) / 3.0), (lambda: [A(6, 5), A(5, 4)])
    elif case == "scale_after_bias":
        f, make = (lambda x, w, b: (x @ w + b) * 0.5), (lambda: [A(6, 5), A(5, 4), A(4)])
    elif case == "residual_kept":                      # the sum before the ReLU is returned too
        def f(x, w, h):
            s = x @ w + h
            return s, s.relu()
        make = lambda: [A(6, 5), A(5, 4), A(6, 4)]   # noqa: E731
    else:                                              # p + p: the residual would be the unstored product
        def f(x, w):
            p = x @ w
            return p + p
        make = lambda: [A(6, 5), A(5, 4)]            # noqa: E731
    jf = run(f, make)
    g = gemm_cmds(jf)[0]
    if case == "residual_then_bias":
        assert g.endswith("+residual") and len(jf.commands()) == 2
    elif case in ("divide", "residual_is_product"):
        assert "+" not in g and "*" not in g and len(jf.commands()) == 2
    elif case == "scale_after_bias":
        assert "*scale" not in g
    else:
        assert g.endswith("+residual") and len(jf.commands()) == 2
