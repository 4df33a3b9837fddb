"""Generated from book/08_decoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 7d3885d4f202cf32
# fmt: off

from __future__ import annotations

import torch
from torch import nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.norm import SublayerConnection, make_norm


class KVCache:
    """The keys and values every decoder layer has computed so far, kept between decoding steps.

    ``layers[i]["self"]`` holds layer i's self-attention keys/values (B, h, t, d_k), growing by one
    position a step; ``layers[i]["cross"]`` holds its cross-attention keys/values of the encoder output,
    computed once. Chapter 11 builds decoding on it.
    """

    def __init__(self, n_layers: int):
        self.layers = [{"self": {}, "cross": {}} for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """How many target positions are cached."""
        k = self.layers[0]["self"].get("k") if self.layers else None
        return 0 if k is None else k.size(2)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (in that order) of every cached tensor: beams that survive a step."""
        for layer in self.layers:
            for part in layer.values():
                for key, t in part.items():
                    part[key] = t.index_select(0, index)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output, feed-forward; each in a sublayer."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
                 activation: str = "relu", norm: str = "layer", eps: float = 1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.sublayer1 = SublayerConnection(d_model, dropout, norm_first, norm, eps)
        self.sublayer2 = SublayerConnection(d_model, dropout, norm_first, norm, eps)
        self.sublayer3 = SublayerConnection(d_model, dropout, norm_first, norm, eps)

    def forward(self, x: torch.Tensor, memory: torch.Tensor, tgt_mask: torch.Tensor | None = None,
                memory_mask: torch.Tensor | None = None, cache: dict | None = None) -> torch.Tensor:
        """x (B, T, d), memory (B, S, d); tgt_mask (B, 1, T, T) padding+causal; memory_mask (B, 1, 1, S)."""
        sc = None if cache is None else cache["self"]
        cc = None if cache is None else cache["cross"]
        x = self.sublayer1(x, lambda y: self.self_attn(y, y, y, tgt_mask, cache=sc))
        x = self.sublayer2(x, lambda y: self.cross_attn(y, memory, memory, memory_mask, cache=cc))
        return self.sublayer3(x, self.feed_forward)


class Decoder(nn.Module):
    """A stack of ``n_layers`` decoder layers, then a final norm when ``final_norm`` (default: Pre-Norm only)."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", norm: str = "layer", eps: float = 1e-5,
                 final_norm: bool | None = None):
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        self.layers = nn.ModuleList(
            DecoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, norm, eps) for _ in range(n_layers)
        )
        use_final = norm_first if final_norm is None else final_norm
        self.norm = make_norm(norm, d_model, eps) if use_final else nn.Identity()

    def forward(self, x, memory, tgt_mask=None, memory_mask=None, cache: KVCache | None = None):
        for i, layer in enumerate(self.layers):
            x = layer(x, memory, tgt_mask, memory_mask, None if cache is None else cache.layers[i])
        return self.norm(x)


__all__ = ['KVCache', 'DecoderLayer', 'Decoder']
