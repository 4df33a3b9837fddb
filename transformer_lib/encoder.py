"""Generated from book/07_encoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 54e5068f88aa07e7
# fmt: off

from __future__ import annotations

import torch
from torch import nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.norm import SublayerConnection, make_norm


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each inside a residual + norm sublayer: (B, L, d) -> (B, L, d)."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
                 activation: str = "relu", norm: str = "layer", eps: float = 1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.sublayer1 = SublayerConnection(d_model, dropout, norm_first, norm, eps)
        self.sublayer2 = SublayerConnection(d_model, dropout, norm_first, norm, eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.sublayer1(x, lambda y: self.self_attn(y, y, y, mask))   # mask: (B, 1, 1, L) padding
        return self.sublayer2(x, self.feed_forward)


class Encoder(nn.Module):
    """A stack of ``n_layers`` encoder layers, then a final norm when ``final_norm`` (default: Pre-Norm only)."""

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", norm: str = "layer", eps: float = 1e-5,
                 final_norm: bool | None = None):
        super().__init__()
        if n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {n_layers}")
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, norm, eps) for _ in range(n_layers)
        )
        use_final = norm_first if final_norm is None else final_norm
        self.norm = make_norm(norm, d_model, eps) if use_final else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


__all__ = ['EncoderLayer', 'Encoder']
