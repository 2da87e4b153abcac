"""A tiny llama-style decoder on tlgpu's inference ops: greedy generation with a KV cache.

    python3 examples/tiny_decoder.py [--q4 | --q8 | --f16 | --bf16] [--kv float16] [--tokens 32] [--runs 5]
                                     [--mode sync|device|jit] [--unfused] [--dim 256 ...]

Random weights from a fixed numpy seed; float32, q4_0 (--q4), q8_0 (--q8), float16 (--f16) or bfloat16 (--bf16)
weights; save_gguf / Decoder.from_gguf write and read them as a llama-architecture GGUF file. Half weights
decode with float32 activations: the projections read the 2-byte weights directly (kernels/mv_half.cl), the
KV cache is float16 (--kv picks its dtype; by default the weights' half dtype, float32 for the others). Each step: get_rows (embedding)
-> per layer [rms_norm -> one fused q|k|v projection (x @ w.T: the mul_mv path) -> one rope over the q and k
heads (NeoX pairing) -> kv_write of k and v -> attention over the cache (grouped-query heads) -> output projection ->
residual -> rms_norm -> one fused w1|w3 projection -> silu_mul of its halves -> w2 -> residual] -> rms_norm ->
logits -> argmax. Decoding is launch-bound, so launches are saved where the ops allow: fused projections
(four per layer), residual adds done by the projection kernel (addmm: two per layer), each rms_norm and the
silu_mul computed by the projection after it as it reads its input (tlgpu.rms_norm_linear, silu_mul_linear),
the rope of q and k and the cache write of k and v in one launch (rope_kv_write, the position an int or a
device tensor), keys and values in one cache tensor: 6 launches per layer, 2 more per step (the embedding's
id is a kernel argument too); Decoder(fuse=False) is the 9 + 3 of separate norms and silu_mul (q4_0 / q8_0
weights: 9 + 3 either way for now, their products take no norm yet). --mode device keeps the
token and the position on the device as int32 tensors the kernels read (no host read per token); --mode jit
also replays that step through tlgpu.jit (docs/jit.md). --layer runs every layer and the head as one launch
(with --mode device or jit the whole step, embedding to argmax; tlgpu.decode_layer_, Decoder(fuse="layer"):
docs/inference.md). The runs must produce identical tokens
(asserted); tokens/s is printed. `reference_logits` is a numpy float64 implementation of the same
model that tests/test_llm.py checks the first steps against.
"""
import argparse
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))    # the tree, after PYTHONPATH
import tlgpu  # noqa: E402
from tlgpu import quant  # noqa: E402


@dataclass
class Config:
    dim: int = 256
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 2
    vocab: int = 1000
    hidden: int = 768               # a multiple of 32, so every weight can be q4_0
    max_len: int = 128
    eps: float = 1e-5
    theta: float = 10000.0

    @property
    def head_dim(self):
        return self.dim // self.n_heads


LINEARS = ("wq", "wk", "wv", "wo", "w1", "w2", "w3")


def make_weights(cfg, seed=0):
    """float32 numpy weights, linear layers stored [out, in] (x @ w.T)."""
    rng = np.random.default_rng(seed)
    kv = cfg.n_kv_heads * cfg.head_dim

    def lin(o, i):
        return (rng.standard_normal((o, i)) / np.sqrt(i)).astype(np.float32)
    layers = []
    for _ in range(cfg.n_layers):
        layers.append({"attn_norm": (1 + 0.1 * rng.standard_normal(cfg.dim)).astype(np.float32),
                       "wq": lin(cfg.dim, cfg.dim), "wk": lin(kv, cfg.dim), "wv": lin(kv, cfg.dim),
                       "wo": lin(cfg.dim, cfg.dim),
                       "mlp_norm": (1 + 0.1 * rng.standard_normal(cfg.dim)).astype(np.float32),
                       "w1": lin(cfg.hidden, cfg.dim), "w3": lin(cfg.hidden, cfg.dim), "w2": lin(cfg.dim, cfg.hidden)})
    return {"embed": rng.standard_normal((cfg.vocab, cfg.dim)).astype(np.float32), "layers": layers,
            "norm": (1 + 0.1 * rng.standard_normal(cfg.dim)).astype(np.float32),
            "out": lin(cfg.vocab, cfg.dim)}


QUANTIZE = {None: tlgpu.tensor, "q4_0": quant.quantize_q4_0, "q8_0": quant.quantize_q8_0}
HALF = {"float16": np.dtype(tlgpu.float16), "bfloat16": np.dtype(tlgpu.bfloat16)}     # dtype= of the weights


def _dtype_name(dtype):
    """None / "float32" / "float16" / "bfloat16" or the numpy/tlgpu dtype -> None (float32) or a HALF key."""
    name = None if dtype is None else np.dtype(dtype).name
    if name not in (None, "float32", *HALF):
        raise ValueError(f"dtype must be float32, float16 or bfloat16, got {dtype!r}")
    return None if name == "float32" else name


def rounded(weights, dtype):
    """The float32 weights a decoder with `dtype` weights (float16 / bfloat16) computes with: the matrices and
    the embedding rounded to that dtype and widened back (the norms stay float32); a half-weight decode's
    reference."""
    dt = HALF[_dtype_name(dtype)]

    def r(a):
        return a.astype(dt).astype(np.float32)
    out = dict(weights, embed=r(weights["embed"]), out=r(weights["out"]))
    out["layers"] = [{k: (r(v) if k in LINEARS else v) for k, v in lw.items()} for lw in weights["layers"]]
    return out
# llama.cpp's tensor names (blk.N.<name>.weight) for this decoder's weights
GGUF_NAMES = {"attn_norm": "attn_norm", "wq": "attn_q", "wk": "attn_k", "wv": "attn_v", "wo": "attn_output",
              "mlp_norm": "ffn_norm", "w1": "ffn_gate", "w3": "ffn_up", "w2": "ffn_down"}


def _format(w):
    """A matrix's weight format: a quantized kind or a dtype's name."""
    return w.KIND if quant.is_quantized(w) else w.dtype.name


class Decoder:
    groups = 0                                # decode_layer_'s work-groups (0: the device's choice)
    _layers_per_launch = 0

    def __init__(self, cfg, weights, q4=False, kind=None, dtype=None, kv_dtype=None, fuse=True):
        """numpy weights (make_weights); kind None (float32), "q4_0" or "q8_0" for the linear layers and the
        embedding/head (q4=True: "q4_0"); or dtype float16 / bfloat16 (kind None) for them. The norms' weights
        stay float32 (as in llama.cpp's F16 files). kv_dtype: the KV cache's dtype (default: the half dtype of
        the weights, else float32). fuse: the decode step folds each rms_norm and the silu_mul into the
        projection after it (tlgpu.rms_norm_linear / silu_mul_linear: 6 launches a layer, not 9)."""
        self._fuse = fuse
        kind = "q4_0" if q4 else kind
        half = _dtype_name(dtype)
        if half is not None and kind is not None:
            raise ValueError(f"Decoder: dtype={half} is for unquantized weights, not kind={kind}")
        up = QUANTIZE[kind] if half is None else (lambda a: tlgpu.tensor(a.astype(HALF[half])))
        self._build(cfg, up(weights["embed"]), up(weights["out"]), tlgpu.tensor(weights["norm"]),
                    [{"attn_norm": tlgpu.tensor(lw["attn_norm"]), "mlp_norm": tlgpu.tensor(lw["mlp_norm"]),
                      "wqkv": up(np.concatenate([lw["wq"], lw["wk"], lw["wv"]])), "wo": up(lw["wo"]),
                      "w13": up(np.concatenate([lw["w1"], lw["w3"]])), "w2": up(lw["w2"])}
                     for lw in weights["layers"]], kv_dtype)   # fused rows: [wq; wk; wv] and [w1; w3] (same math)

    def _build(self, cfg, embed, out, norm, layers, kv_dtype=None):
        self.cfg, self.embed, self.out, self.norm, self.layers = cfg, embed, out, norm, layers
        self.q4 = quant.is_quantized(out)                    # quantized weights: tlgpu.quant's products
        self.dtype = out.KIND if self.q4 else out.dtype.name  # "float32", "float16", "bfloat16", "q4_0", "q8_0"
        kv = _dtype_name(kv_dtype) if kv_dtype is not None else self.dtype if self.dtype in HALF else None
        self.kv_dtype = np.dtype(HALF[kv] if kv is not None else np.float32)
        self.weight_bytes = sum(self._bytes(w) for w in [self.embed, self.out] +
                                [lw[k] for lw in self.layers for k in ("wqkv", "wo", "w13", "w2")])
        self.reset()

    @classmethod
    def from_gguf(cls, path):
        """A decoder from a llama-architecture GGUF file (save_gguf's, or any with the same tensor names and
        keys; F32/F16/BF16 norms, F32/Q4_0/Q8_0 matrices): the projections' rows are joined on the device
        (quantized ones as their blocks), as __init__ joins them."""
        t, meta = quant.load_gguf(path)
        cfg = Config(dim=int(meta["llama.embedding_length"]), n_layers=int(meta["llama.block_count"]),
                     n_heads=int(meta["llama.attention.head_count"]),
                     n_kv_heads=int(meta["llama.attention.head_count_kv"]), vocab=t["output.weight"].shape[0],
                     hidden=int(meta["llama.feed_forward_length"]), max_len=int(meta["llama.context_length"]),
                     eps=float(meta["llama.attention.layer_norm_rms_epsilon"]),
                     theta=float(meta["llama.rope.freq_base"]))

        def w(i, k):
            return t[f"blk.{i}.{GGUF_NAMES[k]}.weight"]

        def rows(*ws):                                       # [w1; w2; ...] along rows
            if not quant.is_quantized(ws[0]):                # F16 / BF16 matrices stay half (one dtype: kept)
                return tlgpu.cat(list(ws) if len({x.dtype for x in ws}) == 1 else [x.float() for x in ws], 0)
            return type(ws[0]).cat_rows(ws)
        layers = [{"attn_norm": w(i, "attn_norm").float(), "mlp_norm": w(i, "mlp_norm").float(),
                   "wqkv": rows(w(i, "wq"), w(i, "wk"), w(i, "wv")), "wo": rows(w(i, "wo")),
                   "w13": rows(w(i, "w1"), w(i, "w3")), "w2": rows(w(i, "w2"))} for i in range(cfg.n_layers)]
        self = cls.__new__(cls)
        self._fuse = True
        self._build(cfg, rows(t["token_embd.weight"]), rows(t["output.weight"]), t["output_norm.weight"].float(),
                    layers)
        return self

    @staticmethod
    def _bytes(w):
        return w.nbytes if quant.is_quantized(w) else w.dtype.itemsize * w.numel()

    def bytes_per_token(self):
        """Weight bytes one decode step reads: every linear layer and the head, one embedding row."""
        emb = self._bytes(self.embed) // self.cfg.vocab
        return self.weight_bytes - self._bytes(self.embed) + emb

    def reset(self):
        """One (2 * Hkv, max_len, D) cache per layer, keys then values, so a single kv_write stores both;
        kc / vc are its halves (contiguous views). The layers' caches are views of one (n_layers, 2 * Hkv,
        max_len, D) tensor, kv_all, which decode_layer_ takes whole. Made once and zeroed in place after: a
        traced decode step (generate(jit=True)) keeps writing the caches it was traced with."""
        c = self.cfg
        if not hasattr(self, "kv"):
            self.kv_all = tlgpu.zeros((len(self.layers), 2 * c.n_kv_heads, c.max_len, c.head_dim),
                                      dtype=self.kv_dtype)
            self.kv = [self.kv_all[i] for i in range(len(self.layers))]
            self.kc = [kv[:c.n_kv_heads] for kv in self.kv]
            self.vc = [kv[c.n_kv_heads:] for kv in self.kv]
            self.x = tlgpu.zeros((1, c.dim))             # one_launch()'s residual stream
            self._jstep = tlgpu.jit(self.device_step)
        else:
            self.kv_all.zero_()

    def stacked(self):
        """The layers' weights stacked for decode_layer_(..., layers=n): the norms (n, dim), each matrix n of
        them along rows (a copy, made at the first use: the layer mode holds the layers' matrices twice)."""
        if getattr(self, "_stack", None) is None:
            def cat(ws):
                return type(ws[0]).cat_rows(ws) if quant.is_quantized(ws[0]) else tlgpu.stack(ws)
            self._stack = {k: cat([lw[k] for lw in self.layers])
                           for k in ("attn_norm", "mlp_norm", "wqkv", "wo", "w13", "w2")}
        return self._stack

    def embedding(self, ids):
        """float32 rows of the embedding (a half table's rows widened as they are read)."""
        if self.q4 or self.dtype == "float32":
            return quant.embedding(self.embed, ids)
        return tlgpu.get_rows(self.embed, ids, dtype=tlgpu.float32)

    def linear(self, x, w):
        """x @ w.T: float32 x; half weights are read as stored for up to 8 rows (kernels/mv_half.cl)."""
        return quant.matmul(x, w) if self.q4 else x @ w.T

    def residual(self, r, x, w):
        """r + x @ w.T in one launch: the mul_mv kernel adds r as it stores."""
        return quant.addmm(r, x, w) if self.q4 else tlgpu.addmm(r, x, w.T)

    @property
    def layers_per_launch(self):
        """fuse="layer": 0 runs every layer and the head in one launch, 1 a launch a layer with the head apart
        (settable: a new jitted step)."""
        return self._layers_per_launch

    @layers_per_launch.setter
    def layers_per_launch(self, n):
        if n not in (0, 1):
            raise ValueError(f"Decoder.layers_per_launch: 0 (all) or 1, got {n!r}")
        self._layers_per_launch = n
        self._jstep = tlgpu.jit(self.device_step)

    @property
    def fuse(self):
        """Whether step() folds the norms and silu_mul into the projections (settable: a new jitted step)."""
        return self._fuse

    @fuse.setter
    def fuse(self, on):
        self._fuse = on if on == "layer" else bool(on)
        self._jstep = tlgpu.jit(self.device_step)          # a trace holds the launches it recorded

    def norm_linear(self, x, g, w, residual=None):
        """rms_norm(x, g) @ w.T (+ residual): one launch fused, two (rms_norm, then the product) otherwise
        (quantized weights: two either way, tlgpu.rms_norm_linear runs quant's product after the norm)."""
        if self._fuse:
            return tlgpu.rms_norm_linear(x, g, w, eps=self.cfg.eps, residual=residual)
        h = tlgpu.rms_norm(x, g, eps=self.cfg.eps)
        return self.linear(h, w) if residual is None else self.residual(residual, h, w)

    def glu_residual(self, r, g, w):
        """r + silu(g[:, :hidden]) * g[:, hidden:] @ w.T: one launch fused, two (silu_mul, addmm) otherwise."""
        if self._fuse:
            return tlgpu.silu_mul_linear(g, w, residual=r)
        hid = self.cfg.hidden
        return self.residual(r, tlgpu.silu_mul(g[:, :hid], g[:, hid:]), w)

    def step(self, token, pos):
        """Logits (1, vocab) after feeding `token` at position `pos`: ints, or int32 tensors of one element that
        the kernels read on the device (embedding, rope, kv_write and attention all take either)."""
        c = self.cfg
        hd = c.head_dim
        x = self.embedding(token)                                        # (1, dim); the id a kernel argument
        nq, nkv = c.n_heads, c.n_kv_heads
        if self._fuse == "layer" and self.layers_per_launch == 1:       # a launch a layer, the head apart
            for i, lw in enumerate(self.layers):
                tlgpu.decode_layer_(x, pos, self.kv[i], lw["attn_norm"], lw["wqkv"], lw["wo"], lw["mlp_norm"],
                                    lw["w13"], lw["w2"], nq, eps=c.eps, theta=c.theta, groups=self.groups)
            return self.norm_linear(x, self.norm, self.out)
        if self._fuse == "layer" and self.layers:                       # every layer and the head in one launch
            s = self.stacked()
            head = {"head_norm": self.norm, "head": self.out} if _format(self.out) == _format(s["wqkv"]) else {}
            y = tlgpu.decode_layer_(x, pos, self.kv_all, s["attn_norm"], s["wqkv"], s["wo"], s["mlp_norm"], s["w13"],
                                    s["w2"], nq, eps=c.eps, theta=c.theta, groups=self.groups, layers=len(self.layers),
                                    **head)
            return y if head else self.norm_linear(x, self.norm, self.out)
        for i, lw in enumerate(self.layers):
            qkv = self.norm_linear(x, lw["attn_norm"], lw["wqkv"]).reshape(nq + 2 * nkv, hd)   # q, k, v heads
            tlgpu.rope_kv_write(qkv, self.kv[i], pos, nq, theta=c.theta)       # q, k rotated; k, v cached
            a = tlgpu.attention(qkv[:nq], self.kc[i], self.vc[i], pos, offset=1)   # the first pos + 1
            x = self.residual(x, a.reshape(1, c.dim), lw["wo"])
            g = self.norm_linear(x, lw["mlp_norm"], lw["w13"])                  # (1, 2 * hidden): w1 | w3
            x = self.glu_residual(x, g, lw["w2"])
        return self.norm_linear(x, self.norm, self.out)

    def one_launch(self):
        """Whether device_step is one launch: fuse="layer", every layer in the launch, and the embedding and the
        head in the layers' format (decode_layer_ then also looks the token up, takes the argmax and advances the
        position)."""
        fmt = _format(self.out)
        return (self._fuse == "layer" and self.layers_per_launch == 0 and bool(self.layers) and
                _format(self.embed) == fmt == _format(self.layers[0]["wqkv"]))

    def device_step(self, token, pos):
        """(logits, next token) for int32 tensors token (1,) and pos (1,), advancing pos in place: no host read,
        so tlgpu.jit can replay it (the greedy choice stays on the device). one_launch(): the whole step is one
        decode_layer_ launch."""
        if self.one_launch():
            c, s = self.cfg, self.stacked()
            return tlgpu.decode_layer_(self.x, pos, self.kv_all, s["attn_norm"], s["wqkv"], s["wo"], s["mlp_norm"],
                                       s["w13"], s["w2"], c.n_heads, eps=c.eps, theta=c.theta, groups=self.groups,
                                       layers=len(self.layers), head_norm=self.norm, head=self.out, embed=self.embed,
                                       token=token, argmax=True, advance=True)
        logits = self.step(token, pos)
        pos.add_(1)
        return logits, logits.argmax(-1)

    def prefill(self, tokens, pos=0):
        """Logits (1, vocab) after feeding `tokens` at positions pos, pos + 1, ... in one pass: GEMMs over all
        T rows (mul_mv up to 8), rope with a positions array, causal attention of the T queries."""
        c = self.cfg
        hd, nq, nkv, hid, T = c.head_dim, c.n_heads, c.n_kv_heads, c.hidden, len(tokens)
        x = self.embedding(list(tokens))                                       # (T, dim)
        positions = list(range(pos, pos + T))
        for i, lw in enumerate(self.layers):
            h = tlgpu.rms_norm(x, lw["attn_norm"], eps=c.eps)
            qkv = self.linear(h, lw["wqkv"]).reshape(T, nq + 2 * nkv, hd)
            qk = tlgpu.rope(qkv[:, :nq + nkv], positions, theta=c.theta)           # (T, nq + nkv, hd)
            tlgpu.kv_write(self.kc[i], qk[:, nq:].transpose(0, 1), pos)           # (nkv, T, hd)
            tlgpu.kv_write(self.vc[i], qkv[:, nq + nkv:].transpose(0, 1), pos)
            a = tlgpu.attention(qk[:, :nq], self.kc[i], self.vc[i], pos + T)      # (T, nq, hd), causal
            x = self.residual(x, a.reshape(T, c.dim), lw["wo"])
            h = tlgpu.rms_norm(x, lw["mlp_norm"], eps=c.eps)
            g = self.linear(h, lw["w13"])
            x = self.residual(x, tlgpu.silu_mul(g[:, :hid], g[:, hid:]), lw["w2"])
        return self.linear(tlgpu.rms_norm(x[T - 1:], self.norm, eps=c.eps), self.out)

    def generate(self, prompt, n_tokens, device=False, jit=False):
        """Greedy tokens after the prompt. device=True keeps the token and position on the device (one read at
        the end instead of one per token); jit=True also replays the step through tlgpu.jit."""
        self.reset()
        tokens, pos = list(prompt), len(prompt)
        logits = self.prefill(prompt)
        if device or jit:
            step = self._jstep if jit else self.device_step
            tok, pos_t, out = logits.argmax(-1), tlgpu.tensor([pos], dtype=tlgpu.int32), []
            for i in range(n_tokens):
                out.append(tok)
                if i + 1 < n_tokens:
                    logits, tok = step(tok, pos_t)
            return [int(t) for t in tlgpu.cat(out).tolist()]
        for i in range(n_tokens):
            tokens.append(int(logits.argmax().item()))                # the one sync point per token
            if i + 1 < n_tokens:
                logits = self.step(tokens[-1], pos)
                pos += 1
        return tokens[len(prompt):]

    def generate_stepwise(self, prompt, n_tokens):
        """generate() feeding the prompt one token at a time (the decode path only)."""
        self.reset()
        tokens, pos = list(prompt), 0
        for t in prompt[:-1]:
            self.step(t, pos)
            pos += 1
        for _ in range(n_tokens):
            logits = self.step(tokens[-1], pos)
            pos += 1
            tokens.append(int(logits.argmax().item()))                # the one sync point per token
        return tokens[len(prompt):]


def reference_logits(cfg, weights, tokens):
    """numpy float64 logits (len(tokens), vocab) of feeding `tokens` from position 0."""
    hd, g = cfg.head_dim, cfg.n_heads // cfg.n_kv_heads
    W = {k: v.astype(np.float64) for k, v in weights.items() if k != "layers"}
    layers = [{k: v.astype(np.float64) for k, v in lw.items()} for lw in weights["layers"]]
    kc = [np.zeros((cfg.n_kv_heads, len(tokens), hd)) for _ in layers]
    vc = [np.zeros_like(k) for k in kc]

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.eps) * w

    def rope(x, pos):
        inv = cfg.theta ** (-np.arange(0, hd, 2) / hd)
        c, s = np.cos(pos * inv), np.sin(pos * inv)
        a, b = x[..., : hd // 2], x[..., hd // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], -1)
    out = []
    for pos, t in enumerate(tokens):
        x = W["embed"][t]
        for i, lw in enumerate(layers):
            h = rms(x, lw["attn_norm"])
            q = rope((lw["wq"] @ h).reshape(cfg.n_heads, hd), pos)
            kc[i][:, pos] = rope((lw["wk"] @ h).reshape(cfg.n_kv_heads, hd), pos)
            vc[i][:, pos] = (lw["wv"] @ h).reshape(cfg.n_kv_heads, hd)
            a = np.empty((cfg.n_heads, hd))
            for hh in range(cfg.n_heads):
                s = kc[i][hh // g, : pos + 1] @ q[hh] / np.sqrt(hd)
                p = np.exp(s - s.max())
                a[hh] = p / p.sum() @ vc[i][hh // g, : pos + 1]
            x = x + lw["wo"] @ a.reshape(-1)
            h = rms(x, lw["mlp_norm"])
            u = lw["w1"] @ h
            x = x + lw["w2"] @ (u / (1 + np.exp(-u)) * (lw["w3"] @ h))
        out.append(W["out"] @ rms(x, W["norm"]))
    return np.array(out)


def save_gguf(path, cfg, weights, kind=None):
    """Writes numpy weights (make_weights) as a llama-architecture GGUF through the gguf package: llama.cpp's
    tensor names and llama.* keys; kind None (F32), "q4_0", "q8_0", "float16" (F16) or "bfloat16" (BF16) for
    the matrices (from_gguf keeps F16/BF16 matrices half). This decoder's rope
    pairs dim i with i + D/2 (NeoX); llama.cpp reads a "llama" file's rope as adjacent pairs, so the file is
    for this decoder (Decoder.from_gguf), not for llama.cpp's own runtime."""
    up = {None: lambda a: a, "q4_0": quant.quantize_q4_0, "q8_0": quant.quantize_q8_0,
          **{k: (lambda a, dt=dt: a.astype(dt)) for k, dt in HALF.items()}}[kind]
    tensors = {"token_embd.weight": up(weights["embed"]), "output_norm.weight": weights["norm"],
               "output.weight": up(weights["out"])}
    for i, lw in enumerate(weights["layers"]):
        for k, v in lw.items():
            tensors[f"blk.{i}.{GGUF_NAMES[k]}.weight"] = up(v) if k in LINEARS else v
    quant.save_gguf(path, tensors, {
        "general.architecture": "llama", "llama.embedding_length": cfg.dim, "llama.block_count": cfg.n_layers,
        "llama.attention.head_count": cfg.n_heads, "llama.attention.head_count_kv": cfg.n_kv_heads,
        "llama.feed_forward_length": cfg.hidden, "llama.context_length": cfg.max_len,
        "llama.attention.layer_norm_rms_epsilon": float(cfg.eps), "llama.rope.freq_base": float(cfg.theta)})


def dequantized(weights):
    """The weights a q4_0 model really computes with (for its reference)."""
    def dq(w):
        qs, d = quant.quantize_q4_0_numpy(w)
        q = np.concatenate([qs & 0xF, qs >> 4], -1).astype(np.float32) - 8
        return (q * d.astype(np.float32)[..., None]).reshape(w.shape)
    out = dict(weights, embed=dq(weights["embed"]), out=dq(weights["out"]))
    out["layers"] = [{k: (dq(v) if k in LINEARS else v) for k, v in lw.items()} for lw in weights["layers"]]
    return out


def run(cfg, q4, n_tokens, runs, seed=0, mode="sync", kind=None, dtype=None, kv_dtype=None, fuse=True, model=None,
        layers_per_launch=0):
    """mode: "sync" (a host read per token), "device" (token and position stay on the device) or "jit" (the
    device loop replayed through tlgpu.jit); kind: the weights' format (q4=True: "q4_0"), or dtype float16 /
    bfloat16 (kv_dtype: the cache's, Decoder's default when None); fuse, layers_per_launch: Decoder's. model: a
    Decoder to reuse (its weights; fuse and layers_per_launch are set on it, the others ignored)."""
    if model is None:
        model = Decoder(cfg, make_weights(cfg, seed), q4=q4, kind=kind, dtype=dtype, kv_dtype=kv_dtype, fuse=fuse)
    elif model.fuse != fuse:
        model.fuse = fuse
    if model.layers_per_launch != layers_per_launch:
        model.layers_per_launch = layers_per_launch
    prompt = [1, 2, 3]
    kw = {"device": mode == "device", "jit": mode == "jit"}
    model.generate(prompt, 4, **kw)                                  # warm-up: kernel builds (and the trace)
    results, times = [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        results.append(model.generate(prompt, n_tokens, **kw))
        times.append(time.perf_counter() - t0)
    assert all(r == results[0] for r in results), "greedy generation is not repeatable"
    steps = len(prompt) - 1 + n_tokens
    return results[0], steps / min(times), model


def step_seconds(model, n_tokens, runs, mode="jit"):
    """Seconds of one decode step alone: (generate(2 n) - generate(n)) / n, each the best of `runs` (the prompt's
    pass, the reset and the final read cancel). mode as run()'s; the model as run() left it."""
    kw = {"device": mode == "device", "jit": mode == "jit"}

    def best(n):
        out = []
        for _ in range(runs):
            t0 = time.perf_counter()
            model.generate([1, 2, 3], n, **kw)
            out.append(time.perf_counter() - t0)
        return min(out)
    return (best(2 * n_tokens) - best(n_tokens)) / n_tokens


def launches_per_token(model):
    """Commands one decode step (device_step: the step, the position's increment, the argmax) enqueues,
    counted by tlgpu.stream_stats() over one eager step (it writes the caches' position 0; generate() resets
    them)."""
    tok, pos = tlgpu.tensor([1], dtype=tlgpu.int32), tlgpu.tensor([0], dtype=tlgpu.int32)
    tlgpu.synchronize()
    before = tlgpu.stream_stats()["enqueued"]
    model.device_step(tok, pos)
    n = tlgpu.stream_stats()["enqueued"] - before
    tlgpu.synchronize()
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--q4", action="store_true", help="q4_0 weights")
    ap.add_argument("--q8", action="store_true", help="q8_0 weights")
    ap.add_argument("--f16", action="store_true", help="float16 weights (float16 KV cache)")
    ap.add_argument("--bf16", action="store_true", help="bfloat16 weights (bfloat16 KV cache)")
    ap.add_argument("--kv", choices=("float32", "float16", "bfloat16"), help="the KV cache's dtype")
    ap.add_argument("--unfused", action="store_true", help="separate rms_norm / silu_mul launches (9 a layer)")
    ap.add_argument("--layer", action="store_true",
                    help="the layers and the head in one launch; with --mode device or jit the whole step")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--mode", choices=("sync", "device", "jit"), default="sync",
                    help="a host read per token, the device loop, or the device loop through tlgpu.jit")
    for f in ("dim", "layers", "heads", "kv_heads", "vocab", "hidden"):
        ap.add_argument("--" + f, type=int)
    a = ap.parse_args()
    cfg = Config()
    for f, attr in (("dim", "dim"), ("layers", "n_layers"), ("heads", "n_heads"), ("kv_heads", "n_kv_heads"),
                    ("vocab", "vocab"), ("hidden", "hidden")):
        if getattr(a, f) is not None:
            setattr(cfg, attr, getattr(a, f))
    cfg.max_len = max(cfg.max_len, a.tokens + 8)
    if a.q4 + a.q8 + a.f16 + a.bf16 > 1:
        ap.error("one of --q4, --q8, --f16, --bf16")
    tokens, tps, model = run(cfg, a.q4, a.tokens, a.runs, mode=a.mode, kind="q8_0" if a.q8 else None,
                             dtype="float16" if a.f16 else "bfloat16" if a.bf16 else None, kv_dtype=a.kv,
                             fuse="layer" if a.layer else not a.unfused)
    print(f"device: {tlgpu.device().name}")
    print(f"weights: {model.dtype}, {model.weight_bytes / 1e6:.2f} MB, KV cache {model.kv_dtype.name}; "
          f"{a.runs} runs identical; "
          f"mode {a.mode}; {launches_per_token(model)} launches a token "
          f"({'one launch' if a.layer else 'unfused' if a.unfused else 'fused'})")
    print(f"tokens: {tokens}")
    print(f"{tps:.1f} tokens/s (best run)")


if __name__ == "__main__":
    main()
