"""torch.nn's TransformerDecoderLayer and TransformerDecoder, built on nn.MultiheadAttention (nn/_layers_more.py):
self-attention over tgt (tgt_mask, tgt_key_padding_mask), cross-attention from tgt to memory (memory_mask,
memory_key_padding_mask) and the feed-forward block, post-norm or norm_first. Names, defaults, submodule order (so
state_dict keys: self_attn.*, multihead_attn.*, linear1, linear2, norm1..3), reprs and forward signatures are
torch's, so a torch state_dict loads. Imported at the end of nn/__init__.py; nn re-exports __all__.

Masks as MultiheadAttention's: True / nonzero = masked out (numpy bool arrays, int32 tensors), numpy float arrays
added to the scores, and a float32 tensor mask needs the keyword mask_kind='bool' / 'additive' (tlgpu has no bool
dtype). tgt_is_causal / memory_is_causal are torch's hints: the mask must be given and is what is used."""
from .. import _C
from ..autograd import _is_int
from . import Dropout, LayerNorm, Linear, Module, ModuleList
from ._layers_more import MultiheadAttention, _activation, _SelfAttnBlock, _additive_mask, _clone, _MasksAsGiven

__all__ = ["TransformerDecoderLayer", "TransformerDecoder"]

_MASKS = ("tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask")


def _check_inputs(tgt, memory, op):
    for name, t in (("tgt", tgt), ("memory", memory)):
        if not isinstance(t, _C.Tensor):
            raise TypeError(f"{op}: {name} must be a tlgpu Tensor, not {type(t).__name__}")
    if tgt.ndim not in (2, 3) or memory.ndim != tgt.ndim:
        raise ValueError(f"{op}: tgt and memory must both be 3-D (batched) or 2-D (unbatched), got shapes "
                         f"{tuple(tgt.shape)} and {tuple(memory.shape)}")


class TransformerDecoderLayer(_SelfAttnBlock):
    """self_attn and multihead_attn (MultiheadAttention), linear1 / linear2 (the feed-forward), norm1..norm3
    (LayerNorm, eps=layer_norm_eps), dropout / dropout1..dropout3. Post-norm: x = norm1(x + sa(x));
    x = norm2(x + mha(x, memory)); x = norm3(x + ff(x)). norm_first: x = x + sa(norm1(x));
    x = x + mha(norm2(x), memory); x = x + ff(norm3(x)). activation 'relu', 'gelu' or a callable.
    forward(tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    tgt_is_causal=False, memory_is_causal=False, *, mask_kind=None)."""
    _n_inputs = 2
    _later = _MASKS + ("tgt_is_causal", "memory_is_causal")

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 batch_first=False, norm_first=False, bias=True):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias,
                                                 batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1, self.dropout2, self.dropout3 = Dropout(dropout), Dropout(dropout), Dropout(dropout)
        self.activation = _activation(activation, "TransformerDecoderLayer")
        self.batch_first = batch_first

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal, mask_kind):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=is_causal, mask_kind=mask_kind)[0]
        return self.dropout2(x)

    def _ff_block(self, x):
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False, *, mask_kind=None):
        op = "TransformerDecoderLayer"
        _check_inputs(tgt, memory, op)
        tm, mm, tkpm, mkpm = (_additive_mask(m, mask_kind, k, op) for k, m in zip(_MASKS, (
            tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask)))
        x, tc, mc, kind = tgt, bool(tgt_is_causal), bool(memory_is_causal), "additive"
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tm, tkpm, tc, kind)
            x = x + self._mha_block(self.norm2(x), memory, mm, mkpm, mc, kind)
            return x + self._ff_block(self.norm3(x))
        x = self.norm1(x + self._sa_block(x, tm, tkpm, tc, kind))
        x = self.norm2(x + self._mha_block(x, memory, mm, mkpm, mc, kind))
        return self.norm3(x + self._ff_block(x))


class TransformerDecoder(_MasksAsGiven):
    """torch's nn.TransformerDecoder(decoder_layer, num_layers, norm=None): layers.0 .. layers.{num_layers - 1},
    copies of decoder_layer (the same initial values, as torch's deepcopy), then norm. forward(tgt, memory,
    tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None, tgt_is_causal=None,
    memory_is_causal=False, *, mask_kind=None); the masks are converted once for all layers."""
    _n_inputs = 2
    _later = _MASKS + ("tgt_is_causal", "memory_is_causal")

    def __init__(self, decoder_layer, num_layers, norm=None):
        super().__init__()
        if not isinstance(decoder_layer, Module):
            raise TypeError(f"TransformerDecoder: decoder_layer must be a Module, not {type(decoder_layer).__name__}")
        if not _is_int(num_layers) or isinstance(num_layers, bool) or num_layers < 1:
            raise ValueError(f"TransformerDecoder: num_layers must be a positive int, got {num_layers!r}")
        self.layers = ModuleList([_clone(decoder_layer) for _ in range(num_layers)])
        self.num_layers, self.norm = int(num_layers), norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None, memory_is_causal=False, *, mask_kind=None):
        _check_inputs(tgt, memory, "TransformerDecoder")
        given = (tgt_mask, memory_mask, tgt_key_padding_mask, memory_key_padding_mask)
        masks = {k: _additive_mask(m, mask_kind, k, "TransformerDecoder") for k, m in zip(_MASKS, given)}
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, **masks, tgt_is_causal=bool(tgt_is_causal), memory_is_causal=bool(memory_is_causal),
                      mask_kind="additive")
        return x if self.norm is None else self.norm(x)
