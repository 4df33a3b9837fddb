"""Generated from book/02_positional_encoding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: f0355c17428f85a2
# fmt: off

# [book/02_positional_encoding.ipynb, cell 7]
from __future__ import annotations

import operator

import torch
from torch import nn


def _check_positive_int(value, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def sinusoidal_table(max_len: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The (max_len, d_model) table PE[pos, 2i] = sin(pos / base^(2i/d)), PE[pos, 2i+1] = cos(pos / base^(2i/d)).

    Computed in float64 and returned as float32. An odd ``d_model`` is served: the last column is a sine
    whose cosine partner is dropped.
    """
    _check_positive_int(max_len, "max_len")
    _check_positive_int(d_model, "d_model")
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base!r}")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]                      # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)                       # (ceil(d/2),)
    angle = pos / base ** (two_i / d_model)                                        # (max_len, ceil(d/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)                                              # even columns
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])                           # odd columns
    return table.float()                                                           # (max_len, d_model)


def _positions(x: torch.Tensor, start_pos: int, d_model: int, max_len: int) -> tuple[int, int]:
    """Validate x (B, L, d_model) and start_pos; return the slice [start, end) of the table to add."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.size(-1) != d_model:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (B, L, {d_model}), got {shape}")
    try:
        start = operator.index(start_pos)            # an int, a NumPy integer or a 0-d integer tensor
    except TypeError:
        start = -1
    if isinstance(start_pos, bool) or start < 0:
        raise ValueError(f"start_pos must be a non-negative int, got {start_pos!r}")
    end = start + x.size(1)
    if end > max_len:
        raise ValueError(
            f"sequence of length {x.size(1)} starting at position {start} is longer than the "
            f"positional table (max_len={max_len}); build the module with a larger max_len"
        )
    return start, end


class PositionalEncoding(nn.Module):
    """x (B, L, d_model) -> x + PE[start_pos : start_pos + L], then dropout (the paper's sinusoidal table)."""

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.d_model, self.max_len = d_model, max_len
        self.register_buffer("pe", sinusoidal_table(max_len, d_model), persistent=False)  # (max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        start, end = _positions(x, start_pos, self.d_model, self.max_len)
        return self.dropout(x + self.pe[start:end].to(x.dtype))                   # (B, L, d_model)


class LearnedPositionalEncoding(nn.Module):
    """The learned alternative: x (B, L, d_model) -> x + P[start_pos : start_pos + L], P a trained table.

    Same interface as :class:`transformer_lib.positional.PositionalEncoding`; it has ``max_len * d_model`` parameters and no encoding
    at all for positions ``>= max_len``.
    """

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        _check_positive_int(d_model, "d_model")
        _check_positive_int(max_len, "max_len")
        self.d_model, self.max_len = d_model, max_len
        self.table = nn.Embedding(max_len, d_model)                                # (max_len, d_model)
        nn.init.normal_(self.table.weight, std=0.02)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        start, end = _positions(x, start_pos, self.d_model, self.max_len)
        return self.dropout(x + self.table.weight[start:end].to(x.dtype))         # (B, L, d_model)


__all__ = ['sinusoidal_table', 'PositionalEncoding', 'LearnedPositionalEncoding']
