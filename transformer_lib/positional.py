"""Generated from book/02_positional_encoding.ipynb: edit the notebook, not this file.
Extended by book/appendix_marian.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: 72bcd9b1c00f1c93
# fmt: off

# [book/02_positional_encoding.ipynb, cell eea870aa]
from __future__ import annotations

import torch
from torch import nn

from transformer_lib.checks import check_float, check_int, check_probability


def sinusoidal_table(max_len: int, d_model: int,
                     base: float = 10000.0) -> torch.Tensor:
    """The (max_len, d_model) table PE[pos, 2i] = sin(pos / base^(2i/d)),
    PE[pos, 2i+1] = cos(pos / base^(2i/d)).

    Computed in float64 and returned as float32. An odd ``d_model`` is served: one sine
    has no cosine.
    """
    max_len = check_int(max_len, "max_len")
    d_model = check_int(d_model, "d_model")
    base = check_float(base, "base", 1.0, low_open=True)
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)   # (ceil(d/2),)
    angle = pos / base ** (two_i / d_model)                    # (max_len, ceil(d/2))
    table = torch.zeros(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)                          # even columns
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])       # odd columns
    return table.float()                                       # (max_len, d_model)


# [book/02_positional_encoding.ipynb, cell 498714c1]
def _positions(x: torch.Tensor, start_pos: int, d_model: int,
               max_len: int) -> tuple[int, int]:
    """Check x (B, L, d_model) and start_pos; return the slice [start, end) to add.

    ``start_pos`` may be an int, a NumPy integer or a 0-d integer tensor."""
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.size(-1) != d_model:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"x must have shape (B, L, {d_model}), got {shape}")
    start = check_int(start_pos, "start_pos", minimum=0)
    end = start + x.size(1)
    if end > max_len:
        raise ValueError(
            f"sequence of length {x.size(1)} starting at position {start} is longer "
            f"than the positional table (max_len={max_len}); build the module with a "
            "larger max_len")
    return start, end


class PositionalEncoding(nn.Module):
    """x (B, L, d_model) -> x + PE[start_pos : start_pos + L], then dropout (the
    paper's sinusoidal table, :func:`sinusoidal_table`)."""

    pe: torch.Tensor

    def __init__(self, d_model: int, max_len: int = 5000, dropout: float = 0.0):
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.max_len = check_int(max_len, "max_len")
        table = sinusoidal_table(max_len, d_model)             # (max_len, d_model)
        self.register_buffer("pe", table, persistent=False)
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        start, end = _positions(x, start_pos, self.d_model, self.max_len)
        return self.dropout(x + self.pe[start:end].to(x.dtype))  # (B, L, d_model)


class LearnedPositionalEncoding(nn.Module):
    """The learned alternative: x (B, L, d_model) -> x + P[start_pos : start_pos + L],
    P a trained table.

    Same interface as :class:`transformer_lib.positional.PositionalEncoding`; it has
    ``max_len * d_model`` parameters and no encoding at all for positions
    ``>= max_len``.
    """

    def __init__(self, d_model: int, max_len: int = 512, dropout: float = 0.0):
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.max_len = check_int(max_len, "max_len")
        self.table = nn.Embedding(max_len, d_model)            # (max_len, d_model)
        nn.init.normal_(self.table.weight, std=0.02)
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))

    def forward(self, x: torch.Tensor, start_pos: int = 0) -> torch.Tensor:
        start, end = _positions(x, start_pos, self.d_model, self.max_len)
        position = self.table.weight[start:end].to(x.dtype)    # (L, d_model)
        return self.dropout(x + position)                      # (B, L, d_model)


# [book/appendix_marian.ipynb, cell 007b5092]
#: the column orders of the sinusoidal table: the paper's pairs, or all sines first
POSITIONAL_LAYOUTS = ("interleaved", "half")


def half_layout(table: torch.Tensor) -> torch.Tensor:
    """A sinusoidal table (..., d_model) in the paper's column order -> Marian's: the
    sines (the even columns) first, then the cosines (the odd ones). Column i is
    sin(pos / base^(2i/d)) and column ceil(d/2) + i its cosine."""
    return torch.cat([table[..., 0::2], table[..., 1::2]], dim=-1)


__all__ = [
    'sinusoidal_table', 'PositionalEncoding', 'LearnedPositionalEncoding',
    'POSITIONAL_LAYOUTS', 'half_layout',
]
