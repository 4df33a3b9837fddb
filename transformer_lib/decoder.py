"""Generated from book/08_decoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: edbbe30a60f0b5c5
# fmt: off

# [book/08_decoder.ipynb, cell b698ca2c]
from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.cache import KVCache, LayerCache
from transformer_lib.encoder import LayerConfig
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.torch_weights import (DecoderLayerParts, copy_layer, expect_parts,
                                           expect_torch, load_torch_stack)

_M = TypeVar("_M", bound=nn.Module)


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


__all__ = ['DecoderLayer', 'Decoder', 'load_torch_decoder_layer', 'load_torch_decoder']
