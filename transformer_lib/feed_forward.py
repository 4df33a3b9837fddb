"""Generated from book/05_feed_forward.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: cf3fe545becf01c3
# fmt: off

# [book/05_feed_forward.ipynb, cell 6]
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.checks import check_int, check_probability

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


def get_activation(name: str):
    """The activation function called ``name``: ``"relu"``, ``"gelu"`` or ``"silu"``."""
    if not isinstance(name, str) or name not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, "
                         f"got {name!r}")
    return ACTIVATIONS[name]


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = W2 · dropout(act(W1 x + b1)) + b2, applied to every position alone:
    (B, L, d) -> (B, L, d).

    ``linear1`` (d_model -> d_ff) holds the keys, one row of its weight per hidden
    unit; ``linear2`` (d_ff -> d_model) holds the values, one column of its weight per
    hidden unit. Any leading shape works: the last dimension must be ``d_model``.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu"):
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.d_ff = check_int(d_ff, "d_ff")
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.linear1 = nn.Linear(d_model, d_ff)  # keys: one row of W1ᵀ per cell
        self.linear2 = nn.Linear(d_ff, d_model)  # values: one column of W2ᵀ per cell
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(-1) != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, "
                             f"got shape {tuple(x.shape)}")
        # (B, L, d_ff): which memory cells fire, and how much
        h = self.dropout(self.activation(self.linear1(x)))
        return self.linear2(h)                   # (B, L, d_model)


__all__ = ['ACTIVATIONS', 'get_activation', 'PositionwiseFeedForward']
