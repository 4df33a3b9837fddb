"""Generated from book/05_feed_forward.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: a77cea70a689dba0
# fmt: off

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def get_activation(name: str):
    """The activation function called ``name`` (one of ACTIVATIONS)."""
    if name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {name!r}")
    return ACTIVATIONS[name]


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = W2 · dropout(act(W1 x + b1)) + b2, applied to every position alone: (B, L, d) -> (B, L, d)."""

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.linear1 = nn.Linear(d_model, d_ff)     # the "keys": one row of W1 per memory cell
        self.linear2 = nn.Linear(d_ff, d_model)     # the "values": one column of W2 per memory cell
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))   # (B, L, d_ff) inside


__all__ = ['ACTIVATIONS', 'get_activation', 'PositionwiseFeedForward']
