"""tlgpu.decode_layer_ (kernels/decode.cl): a decoder layer of a decode step in one launch, for every weight format,
against the numpy float64 decoder (examples/tiny_decoder.reference_logits, on the weights the format really
holds) and against the six-launch step; the cache it writes; positions on the device and tlgpu.jit replays;
the launch count; the grid barrier's words (several work-groups on GPUs, where every count of them must give
the same bits); the errors. CPU devices run it as one work-item (no grid barrier)."""
import os
import sys

import numpy as np
import pytest

import tlgpu
from tlgpu import quant

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import tiny_decoder as td  # noqa: E402

GPU = tlgpu.device().type == "gpu"
CFG = td.Config(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=8)
FORMATS = {"float32": {}, "float16": {"dtype": "float16"}, "bfloat16": {"dtype": "bfloat16"},
           "q4_0": {"kind": "q4_0"}, "q8_0": {"kind": "q8_0"}}
# the head's quantized product rounds x to int8 blocks on GPUs and in the CPU native product (test_llm.QTOL);
# half formats keep a half KV cache the reference does not round
TOL = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 3e-2, "q4_0": 2e-2, "q8_0": 2e-2}


def held(w, fmt):
    """The float32 numpy weights a decoder of format fmt computes with (the matrices as stored, widened)."""
    if fmt == "float32":
        return w
    if fmt in ("float16", "bfloat16"):
        return td.rounded(w, fmt)
    q = {"q4_0": quant.quantize_q4_0, "q8_0": quant.quantize_q8_0}[fmt]

    def r(a):
        return quant.dequantize(q(a)).numpy()
    out = dict(w, embed=r(w["embed"]), out=r(w["out"]))
    out["layers"] = [{k: (r(v) if k in td.LINEARS else v) for k, v in lw.items()} for lw in w["layers"]]
    return out


def logits(model, tokens):
    model.reset()
    return np.stack([model.step(t, p).numpy()[0] for p, t in enumerate(tokens)])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_layer_matches_reference_and_six_launches(fmt):
    w = td.make_weights(CFG, seed=11)
    tokens = [int(t) for t in np.random.default_rng(5).integers(0, CFG.vocab, 6)]
    layer = td.Decoder(CFG, w, fuse="layer", **FORMATS[fmt])
    got = logits(layer, tokens)
    ref = td.reference_logits(CFG, held(w, fmt), tokens)
    tol = TOL[fmt]
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())
    six = td.Decoder(CFG, w, fuse=True, **FORMATS[fmt])
    other = logits(six, tokens)
    # q4_0 / q8_0: both round x to int8 blocks the same way, so only the sums' order differs
    tol = 1e-5 if fmt in ("float32", "bfloat16") else 2e-3 if fmt == "float16" else 1e-3
    np.testing.assert_allclose(got, other, rtol=tol, atol=tol * np.abs(other).max())
    tol = max(tol, 1e-2) if fmt != "float32" else tol   # a half cache: one ulp apart at a rounding tie
    for a, b in zip(layer.kv, six.kv):                   # the cache it wrote: every position fed
        a, b = a.float().numpy()[:, :len(tokens)], b.float().numpy()[:, :len(tokens)]
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())
    bar = tlgpu._C._decode_barrier()
    assert bar["count"] & 0x7fffffff == 0 and bar["gave_up"] == 0   # the top bit flips a barrier


@pytest.mark.parametrize("fmt", ["float32", "q4_0"])
def test_layer_device_loop_and_jit(fmt):
    """generate() on the device and through tlgpu.jit gives the host loop's tokens; one launch a token (the
    embedding, the layers, the head, the argmax and the position's increment: Decoder.one_launch());
    layers_per_launch=1: one a layer, the head apart."""
    w = td.make_weights(CFG, seed=2)
    model = td.Decoder(CFG, w, fuse="layer", **FORMATS[fmt])
    prompt = [3, 1, 4]
    sync = model.generate(prompt, 4)
    assert model.generate(prompt, 4, device=True) == sync
    assert model.generate(prompt, 4, jit=True) == sync
    assert model.generate(prompt, 4, jit=True) == sync              # a replay
    decode = {"float32": "tl_decode_layer_f32"}.get(fmt, f"tl_decode_layer_{fmt}")
    assert model.one_launch() and model._jstep.commands() == [decode]
    td.launches_per_token(model)                     # (CPU native products learn new buffers' pointers)
    assert td.launches_per_token(model) == 1
    cfg0 = td.Config(**{**CFG.__dict__, "n_layers": 0})                # the embedding, head, argmax, position
    m0 = td.Decoder(cfg0, td.make_weights(cfg0, seed=2), fuse="layer", **FORMATS[fmt])
    td.launches_per_token(m0)
    head = td.launches_per_token(m0)
    model.layers_per_launch = 1                       # a launch a layer, the head apart: a new trace
    assert model.generate(prompt, 4, jit=True) == sync
    assert model._jstep.commands().count(decode) == CFG.n_layers
    td.launches_per_token(model)
    assert td.launches_per_token(model) == CFG.n_layers + head
    with pytest.raises(ValueError, match="layers_per_launch"):
        model.layers_per_launch = 2


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_layers_in_one_launch_equal_a_launch_each(fmt):
    """decode_layer_(..., layers=3) on the stacked weights computes each layer as its own launch does: the same
    bits in every layer's cache (a view of one (3, 2 * Hkv, max_len, D) tensor); its head (in the launch) gives
    the separate head's logits."""
    cfg = td.Config(**{**CFG.__dict__, "n_layers": 3})
    w = td.make_weights(cfg, seed=21)
    tokens = [int(t) for t in np.random.default_rng(8).integers(0, cfg.vocab, 5)]
    one = td.Decoder(cfg, w, fuse="layer", **FORMATS[fmt])
    each = td.Decoder(cfg, w, fuse="layer", **FORMATS[fmt])
    each.layers_per_launch = 1
    a, b = logits(one, tokens), logits(each, tokens)
    assert np.array_equal(one.kv_all.float().numpy(), each.kv_all.float().numpy())
    tol = 1e-5 if fmt in ("float32", "bfloat16") else 2e-3 if fmt == "float16" else 1e-3   # the head's sums: as
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * np.abs(b).max())                # the six-launch test
    assert np.abs(one.kv_all.float().numpy()[:, :, len(tokens) - 1]).max() > 0   # every layer's last position
    s = one.stacked()
    rows = 3 * (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim          # (3, N, K) Tensors, (3 N, K) quantized
    assert s["attn_norm"].shape == (3, cfg.dim) and int(np.prod(s["wqkv"].shape[:-1])) == rows


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_layer_long_context(kv):
    """Positions past the first round of the attention's score teams (64 positions a work-group of 512 on
    NVIDIA) and past its preloaded values: teacher-forced logits of one layer equal the six-launch step's."""
    cfg = td.Config(dim=64, n_layers=1, n_heads=4, n_kv_heads=2, vocab=50, hidden=96, max_len=80)
    w = td.make_weights(cfg, seed=9)
    tokens = [int(t) for t in np.random.default_rng(3).integers(0, cfg.vocab, 72)]
    kw = {} if kv == "float32" else {"dtype": "float16"}
    got = logits(td.Decoder(cfg, w, fuse="layer", **kw), tokens)
    ref = logits(td.Decoder(cfg, w, fuse=True, **kw), tokens)
    tol = 1e-5 if kv == "float32" else 2e-3
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * np.abs(ref).max())


@pytest.mark.skipif(not GPU, reason="several work-groups meet at grid barriers on GPUs only")
def test_layer_groups_same_bits():
    """Every count of work-groups computes each row in the same order: the same bits; the barrier generation
    moves by 5 a layer (four grid barriers in it, one after it: before the next layer or the head)."""
    w = td.make_weights(CFG, seed=4)
    tokens = [7, 3, 9]
    runs = []
    for g in (1, 3, 0):
        model = td.Decoder(CFG, w, fuse="layer")
        model.groups = g
        before = tlgpu._C._decode_barrier()
        runs.append(logits(model, tokens))
        after = tlgpu._C._decode_barrier()
        assert after["count"] & 0x7fffffff == 0 and after["gave_up"] == 0
        if g != 1:                                       # 4 a layer, 1 after each (before the next or the head)
            assert (after["generation"] - before["generation"]) % 2 ** 32 == 5 * CFG.n_layers * len(tokens)
    assert np.array_equal(runs[0], runs[1]) and np.array_equal(runs[0], runs[2])


def test_layer_errors():
    w = td.make_weights(CFG, seed=1)
    m = td.Decoder(CFG, w, fuse="layer")
    q = td.Decoder(CFG, w, kind="q4_0")
    lw, ql = m.layers[0], q.layers[0]
    x = m.embedding(1)
    before = x.numpy().copy()

    def call(**kw):
        a = dict(x=x, pos=0, kv=m.kv[0], attn_norm=lw["attn_norm"], wqkv=lw["wqkv"], wo=lw["wo"],
                 mlp_norm=lw["mlp_norm"], w13=lw["w13"], w2=lw["w2"], n_heads=CFG.n_heads)
        a.update(kw)
        return tlgpu.decode_layer_(**a)
    with pytest.raises(TypeError, match="one format"):
        call(wo=ql["wo"])
    with pytest.raises(TypeError, match="weights must be"):
        call(w2=np.zeros((64, 96), np.float32))
    with pytest.raises(ValueError, match="wo must be a contiguous float32 matrix"):
        call(wo=lw["wo"].T)
    with pytest.raises(ValueError, match="kv"):
        call(kv=m.kv[0][:, :, :8])
    with pytest.raises(ValueError, match="n_heads"):
        call(n_heads=3)
    with pytest.raises(IndexError, match="max_len"):
        call(pos=CFG.max_len)
    with pytest.raises(ValueError, match="x"):
        call(x=tlgpu.zeros((1, 32)))
    with pytest.raises(TypeError, match="pos"):
        call(pos=tlgpu.tensor([0.0]))
    xr = tlgpu.tensor(x.numpy(), requires_grad=True)
    with pytest.raises(NotImplementedError, match="no backward"):
        call(x=xr)
    with pytest.raises(TypeError, match="go together"):
        call(head=m.out)
    with pytest.raises(TypeError, match="one format"):
        call(head=q.out, head_norm=m.norm)
    with pytest.raises(ValueError, match="head must be"):
        call(head=m.out[:, :32], head_norm=m.norm)
    with pytest.raises(ValueError, match="head_norm"):
        call(head=m.out, head_norm=m.layers[0]["wo"])
    st = m.stacked()                                      # layers=2: every argument two of them
    with pytest.raises(ValueError, match="layers=0"):
        call(layers=0)
    with pytest.raises(ValueError, match="layers=2"):     # one layer's cache
        call(layers=2, attn_norm=st["attn_norm"], mlp_norm=st["mlp_norm"], wqkv=st["wqkv"], wo=st["wo"],
             w13=st["w13"], w2=st["w2"])
    with pytest.raises(ValueError, match="attn_norm"):    # one layer's norm
        call(layers=2, kv=m.kv_all, mlp_norm=st["mlp_norm"], wqkv=st["wqkv"], wo=st["wo"], w13=st["w13"],
             w2=st["w2"])
    with pytest.raises(ValueError, match=r"wo must be .* \(2 \* 64, 64\)"):   # one layer's matrix
        call(layers=2, kv=m.kv_all, attn_norm=st["attn_norm"], mlp_norm=st["mlp_norm"], wqkv=st["wqkv"],
             w13=st["w13"], w2=st["w2"])
    assert np.array_equal(before, x.numpy())             # none of the refusals wrote x
    call(x=x)
    assert not np.array_equal(before, x.numpy())


def one_launch_step(model, token, pos, **kw):
    """decode_layer_ as Decoder.device_step calls it (kw overrides): (logits, next token)."""
    c, s = model.cfg, model.stacked()
    a = dict(head_norm=model.norm, head=model.out, embed=model.embed, token=token, argmax=True, advance=True)
    a.update(kw)
    return tlgpu.decode_layer_(model.x, pos, model.kv_all, s["attn_norm"], s["wqkv"], s["wo"], s["mlp_norm"],
                               s["w13"], s["w2"], c.n_heads, eps=c.eps, theta=c.theta, layers=len(model.layers), **a)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_token_in_one_launch(fmt):
    """The whole greedy step in one launch (embed=, token=, argmax=, advance=) computes what the layer launch does
    after a separate embedding: the same logits bits, the same cache, numpy's argmax of those logits, and the
    position one further."""
    w = td.make_weights(CFG, seed=31)
    tokens = [int(t) for t in np.random.default_rng(13).integers(0, CFG.vocab, 5)]
    one = td.Decoder(CFG, w, fuse="layer", **FORMATS[fmt])
    ref = td.Decoder(CFG, w, fuse="layer", **FORMATS[fmt])
    assert one.one_launch()
    pos = tlgpu.tensor([0], dtype=tlgpu.int32)
    for p, t in enumerate(tokens):
        got, nxt = one.device_step(tlgpu.tensor([t], dtype=tlgpu.int32), pos)
        want = ref.step(t, p).numpy()
        assert got.shape == (1, CFG.vocab) and nxt.shape == (1,) and nxt.dtype == tlgpu.int32
        assert np.array_equal(got.numpy(), want), fmt
        assert int(nxt.item()) == int(np.argmax(want)) and int(pos.item()) == p + 1
    assert np.array_equal(one.kv_all.float().numpy(), ref.kv_all.float().numpy())
    bar = tlgpu._C._decode_barrier()
    assert bar["count"] & 0x7fffffff == 0 and bar["gave_up"] == 0


def test_token_argmax_ties_nan_and_bad_token():
    """The launch's argmax is numpy's: a tie goes to the lower index, the first NaN wins; a token outside the
    embedding's rows gives NaN logits (never another row); advance=False leaves the position."""
    w = td.make_weights(CFG, seed=7)
    r = np.random.default_rng(2).standard_normal(CFG.dim).astype(np.float32)
    out = np.zeros_like(w["out"])
    out[[5, 9]], out[[12, 30]] = r, -r                    # a tie above 0 either way (rows 5 and 9, or 12 and 30)
    m = td.Decoder(CFG, dict(w, out=out), fuse="layer")
    pos, tok = tlgpu.tensor([0], dtype=tlgpu.int32), tlgpu.tensor([4], dtype=tlgpu.int32)
    lg, nxt = one_launch_step(m, tok, pos, advance=False)
    lg = lg.numpy()[0]
    assert int(pos.item()) == 0 and lg[5] == lg[9] and lg[12] == lg[30] and lg[5] != 0
    assert int(nxt.item()) == int(np.argmax(lg)) in (5, 12)
    out[17], out[40] = np.nan, np.nan                     # NaN logits at 17 and 40: the first NaN
    m = td.Decoder(CFG, dict(w, out=out), fuse="layer")
    lg, nxt = one_launch_step(m, tok, pos)
    assert np.isnan(lg.numpy()[0, [17, 40]]).all() and int(nxt.item()) == 17 and int(pos.item()) == 1
    for bad in (-1, CFG.vocab):
        lg, nxt = one_launch_step(m, tlgpu.tensor([bad], dtype=tlgpu.int32), pos)
        assert np.isnan(lg.numpy()).all() and int(nxt.item()) == 0
    assert int(pos.item()) == 3


def test_token_parts_apart():
    """advance without argmax returns the logits alone; argmax without embed starts from x as given; both give
    what the whole step gives."""
    w = td.make_weights(CFG, seed=17)
    a, b = td.Decoder(CFG, w, fuse="layer"), td.Decoder(CFG, w, fuse="layer")
    pa, pb = tlgpu.tensor([0], dtype=tlgpu.int32), tlgpu.tensor([0], dtype=tlgpu.int32)
    tok = tlgpu.tensor([6], dtype=tlgpu.int32)
    want, nxt = one_launch_step(a, tok, pa)
    lg = one_launch_step(b, tok, pb, argmax=False)
    assert isinstance(lg, tlgpu.Tensor) and np.array_equal(lg.numpy(), want.numpy()) and int(pb.item()) == 1
    b.reset()
    b.x.copy_(b.embedding(6))
    c, st = CFG, b.stacked()
    lg2, nxt2 = tlgpu.decode_layer_(b.x, 0, b.kv_all, st["attn_norm"], st["wqkv"], st["wo"], st["mlp_norm"],
                                    st["w13"], st["w2"], c.n_heads, eps=c.eps, theta=c.theta, layers=c.n_layers,
                                    head_norm=b.norm, head=b.out, argmax=True)
    assert np.array_equal(lg2.numpy(), want.numpy()) and int(nxt2.item()) == int(nxt.item())


def test_token_errors():
    w = td.make_weights(CFG, seed=1)
    m, q = td.Decoder(CFG, w, fuse="layer"), td.Decoder(CFG, w, kind="q4_0")
    pos, tok = tlgpu.tensor([0], dtype=tlgpu.int32), tlgpu.tensor([1], dtype=tlgpu.int32)
    with pytest.raises(TypeError, match="embed and token go together"):
        one_launch_step(m, tok, pos, embed=None)
    with pytest.raises(TypeError, match="token must be an int32 tensor"):
        one_launch_step(m, 1, pos)
    with pytest.raises(TypeError, match="token"):
        one_launch_step(m, tlgpu.tensor([1.0]), pos)
    with pytest.raises(TypeError, match="one format"):
        one_launch_step(m, tok, pos, embed=q.embed)
    with pytest.raises(ValueError, match="embed must be"):
        one_launch_step(m, tok, pos, embed=m.embed[:, :32])
    with pytest.raises(ValueError, match="argmax=True needs the head"):
        one_launch_step(m, tok, pos, head=None, head_norm=None)
    with pytest.raises(TypeError, match="advance=True needs pos"):
        one_launch_step(m, tok, 0)
    assert int(pos.item()) == 0                           # none of the refusals moved the position
    lg, nxt = one_launch_step(m, tok, 0, advance=False)   # an int position without advance: fine
    assert lg.shape == (1, CFG.vocab) and nxt.shape == (1,)
