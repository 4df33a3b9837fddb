"""Generated from book/08_decoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 4b224022ca61fc7b
# fmt: off

# [book/08_decoder.ipynb, cell b698ca2c]
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar

import torch
from torch import nn

from transformer_lib.attention import AttentionCache, MultiHeadAttention
from transformer_lib.checks import check_int
from transformer_lib.encoder import LayerConfig
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.torch_weights import (DecoderLayerParts, copy_layer, expect_parts,
                                           expect_torch, load_torch_stack)

_M = TypeVar("_M", bound=nn.Module)


@dataclass
class LayerCache:
    """One decoder layer's cached keys and values: its self-attention's (one position
    more at every step) and its cross-attention's (the encoder output's, computed at
    the first step); ``cross_attn`` is None in a model without cross-attention."""

    self_attn: AttentionCache = field(default_factory=AttentionCache)
    cross_attn: AttentionCache | None = field(default_factory=AttentionCache)


class KVCache:
    """The keys and values every decoder layer has computed so far, kept between steps:
    ``layers[i]`` is layer i's :class:`LayerCache`, (B, h, t, d_k) tensors.
    ``cross=False`` keeps self-attention caches only (a decoder-only model, chapter
    13). ``reserve(n)`` makes the self-attention caches static, with room for n
    positions (chapter 3). Chapter 11 builds decoding on it.
    """

    def __init__(self, n_layers: int, cross: bool = True):
        n_layers = check_int(n_layers, "n_layers")
        self.layers = [LayerCache(AttentionCache(), AttentionCache() if cross else None)
                       for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """How many target positions are cached."""
        return self.layers[0].self_attn.length

    def reserve(self, max_len: int) -> None:
        """Preallocate every self-attention cache for ``max_len`` target positions, to
        be written in place (call it before the first step)."""
        for layer in self.layers:
            layer.self_attn.reserve(max_len)

    def reorder(self, index: torch.Tensor, cross: bool = True) -> None:
        """Keep batch rows ``index`` (in that order) of every cached tensor: the beams
        that survive a step. ``cross=False`` leaves the cross-attention caches as they
        are, which is right when each new row comes from a row of the same source
        sentence (beam search after its first step): those rows hold the same keys."""
        if (not isinstance(index, torch.Tensor) or index.dim() != 1
                or index.dtype.is_floating_point):
            raise ValueError("index must be a 1-D integer tensor of batch rows")
        for layer in self.layers:
            layer.self_attn.reorder(index)
            if cross and layer.cross_attn is not None:
                layer.cross_attn.reorder(index)


# [book/08_decoder.ipynb, cell 285b0e66]
class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, feed-forward;
    each in a sublayer.

    Built from chapter 7's ``LayerConfig``.
    forward(x (B, T, d_model), memory (B, S, d_model), tgt_mask, memory_mask, cache)
    -> (B, T, d_model). ``tgt_mask`` (B or 1, 1, T, T) is the target's padding AND
    causal mask, for self-attention; ``memory_mask`` (B, 1, 1, S) is the source padding
    mask, for cross-attention. Both are boolean, True = may attend. ``cache`` is one
    entry of ``KVCache.layers``, a :class:`LayerCache`.
    """

    def __init__(self, config: LayerConfig):
        super().__init__()
        c = LayerConfig.expect(config)
        self.norm_first = c.norm_first
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.dropout)
        self.cross_attn = MultiHeadAttention(c.d_model, c.n_heads, c.dropout)
        self.feed_forward = PositionwiseFeedForward(c.d_model, c.d_ff, c.dropout,
                                                    c.activation)
        # around self_attn, cross_attn and feed_forward
        self.sublayer1, self.sublayer2 = c.sublayer(), c.sublayer()
        self.sublayer3 = c.sublayer()

    def forward(self, x: torch.Tensor, memory: torch.Tensor,
                tgt_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None,
                cache: LayerCache | None = None) -> torch.Tensor:
        sc = None if cache is None else cache.self_attn
        cc = None if cache is None else cache.cross_attn
        # 1. masked self-attention: queries, keys and values from the target  (B, T, d)
        x = self.sublayer1(x, lambda y: self.self_attn(y, mask=tgt_mask, cache=sc))
        # 2. cross-attention: queries from the target, keys/values from memory (B, T, d)
        x = self.sublayer2(
            x, lambda y: self.cross_attn(y, memory, mask=memory_mask, cache=cc))
        # 3. position-wise feed-forward                                        (B, T, d)
        return self.sublayer3(x, self.feed_forward)


# [book/08_decoder.ipynb, cell ae1b19c0]
class Decoder(nn.Module):
    """A stack of ``n_layers`` decoder layers with the options of ``config``, then
    the norm of :meth:`~transformer_lib.encoder.LayerConfig.stack` (default: a final
    norm for Pre-Norm only).
    Every layer attends to the same ``memory``, the encoder's final output.
    """

    def __init__(self, config: LayerConfig, n_layers: int):
        super().__init__()
        config = LayerConfig.expect(config)
        self.layers, self.norm = config.stack(DecoderLayer, n_layers)
        self.d_model = config.d_model

    def forward(self, x: torch.Tensor, memory: torch.Tensor,
                tgt_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None,
                cache: KVCache | None = None) -> torch.Tensor:
        """x (B, T, d_model), memory (B, S, d_model) -> (B, T, d_model)."""
        if (not isinstance(memory, torch.Tensor) or memory.dim() != 3
                or memory.size(0) != x.size(0) or memory.size(2) != self.d_model):
            got = (tuple(memory.shape) if isinstance(memory, torch.Tensor)
                   else type(memory).__name__)
            raise ValueError(f"memory must have shape ({x.size(0)}, S, {self.d_model}) "
                             f"(the batch size of x), got {got}")
        if cache is not None and len(cache.layers) != len(self.layers):
            raise ValueError(f"cache has {len(cache.layers)} layers, "
                             f"the decoder has {len(self.layers)}")
        for i, layer in enumerate(self.layers):
            layer_cache = None if cache is None else cache.layers[i]
            x = layer(x, memory, tgt_mask, memory_mask, layer_cache)
        return self.norm(x)


# [book/08_decoder.ipynb, cell cddc6cbd]
@torch.no_grad()
def load_torch_decoder_layer(layer: _M, reference: nn.Module) -> _M:
    """Copy the weights of a ``torch.nn.TransformerDecoderLayer`` into ``layer`` (a
    :class:`DecoderLayer`, or any module with its parts) and return it.

    The two must agree on d_model, n_heads, d_ff, activation, eps and ``norm_first``;
    ``reference`` must be batch_first. Afterwards both compute the same function (up to
    rounding).
    """
    ours: DecoderLayerParts = expect_parts(layer, DecoderLayerParts)
    ref = expect_torch(reference, nn.TransformerDecoderLayer)
    norms = [(ours.sublayer1.norm, ref.norm1), (ours.sublayer2.norm, ref.norm2),
             (ours.sublayer3.norm, ref.norm3)]
    copy_layer(ours, ref, norms, attentions=[(ours.self_attn, ref.self_attn),
                                             (ours.cross_attn, ref.multihead_attn)])
    return layer


def load_torch_decoder(decoder: _M, reference: nn.Module) -> _M:
    """Copy the weights of a ``torch.nn.TransformerDecoder`` (its layers and its
    optional final norm) into ``decoder`` and return it."""
    return load_torch_stack(decoder, reference, nn.TransformerDecoder,
                            load_torch_decoder_layer, "decoder")


__all__ = [
    'LayerCache', 'KVCache', 'DecoderLayer', 'Decoder', 'load_torch_decoder_layer',
    'load_torch_decoder',
]
