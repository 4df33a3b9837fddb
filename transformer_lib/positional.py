"""Generated from book/02_positional_encoding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 38a8e6c95315e96f
# fmt: off

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (max_len, d_model) table PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(pos / base^(2i/d)).

    Computed in float64 and returned as float32. An odd ``d_model`` is served: the last column is a sine
    whose cosine partner is dropped.
    """
    if not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be a positive int, got {max_len!r}")
    if not isinstance(d_model, int) or d_model < 1:
        raise ValueError(f"d_model must be a positive int, got {d_model!r}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]                      # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                       # (ceil(d/2),)
    angle = pos / base ** (two_i / d_model)                                        # (max_len, ceil(d/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


class PositionalEncoding(nn.Module):
    """x (B, L, d_model) -> x + PE[start_pos : start_pos + L], then dropout."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        if x.dim() != 3 or x.size(-1) != self.d_model:
            raise ValueError(f"x must have shape (B, L, {self.d_model}), got {tuple(x.shape)}")
        end = start_pos + x.size(1)
        if end > self.max_len:
            raise ValueError(
                f"sequence of length {x.size(1)} starting at position {start_pos} is longer than the "
                f"positional table (max_len={self.max_len})"
            )
        return self.dropout(x + self.pe[start_pos:end].to(x.dtype))


__all__ = ['sinusoidal_table', 'PositionalEncoding']
