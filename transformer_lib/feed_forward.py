"""Generated from book/05_feed_forward.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 8cedae37a53d005f
# fmt: off

# [book/05_feed_forward.ipynb, cell fc405d40]
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.checks import check_int, check_probability

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}
#: gated activations: act(x W_gate) ⊙ (x W_1), a third matrix (section "SwiGLU")
GATED_ACTIVATIONS = {"swiglu": F.silu}


def get_activation(name: str):
    """The activation function called ``name``: ``"relu"``, ``"gelu"``, ``"silu"``, or
    ``"swiglu"`` (whose function is SiLU, applied to the gate)."""
    known = {**ACTIVATIONS, **GATED_ACTIVATIONS}
    if not isinstance(name, str) or name not in known:
        raise ValueError(f"activation must be one of {sorted(known)}, got {name!r}")
    return known[name]


def swiglu_width(d_ff: int, multiple_of: int = 1) -> int:
    """The hidden width of a SwiGLU FFN with the parameters of a plain FFN of width
    ``d_ff``: 2/3 · d_ff (three matrices instead of two), rounded up to a multiple of
    ``multiple_of`` (Llama uses 256)."""
    d_ff = check_int(d_ff, "d_ff")
    multiple_of = check_int(multiple_of, "multiple_of")
    return multiple_of * math.ceil(2 * d_ff / 3 / multiple_of)


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = W2 · dropout(act(W1 x + b1)) + b2, applied to every position alone:
    (B, L, d) -> (B, L, d).

    ``linear1`` (d_model -> d_ff) holds the keys, one row of its weight per hidden
    unit; ``linear2`` (d_ff -> d_model) holds the values, one column of its weight per
    hidden unit. Any leading shape works: the last dimension must be ``d_model``.

    ``activation="swiglu"`` adds ``gate`` (d_model -> d_ff): the hidden layer is
    SiLU(gate(x)) ⊙ linear1(x) (Llama's gate_proj, up_proj, down_proj = gate, linear1,
    linear2). ``bias=False`` drops every bias (as Llama).
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0,
                 activation: str = "relu", bias: bool = True):
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.d_ff = check_int(d_ff, "d_ff")
        self.activation_name = activation
        self.activation = get_activation(activation)
        self.linear1 = nn.Linear(d_model, d_ff, bias)  # keys: a row of W1ᵀ per unit
        self.linear2 = nn.Linear(d_ff, d_model, bias)  # values: a column of W2ᵀ each
        self.gate = (nn.Linear(d_model, d_ff, bias)    # SwiGLU's third matrix
                     if activation in GATED_ACTIVATIONS else None)
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.size(-1) != self.d_model:
            raise ValueError(f"x must have last dimension d_model={self.d_model}, "
                             f"got shape {tuple(x.shape)}")
        # (B, L, d_ff): the activations of the hidden units
        if self.gate is None:
            h = self.activation(self.linear1(x))
        else:                                          # gated: act(x W_g) ⊙ (x W_1)
            h = self.activation(self.gate(x)) * self.linear1(x)
        return self.linear2(self.dropout(h))           # (B, L, d_model)


__all__ = [
    'ACTIVATIONS', 'GATED_ACTIVATIONS', 'get_activation', 'swiglu_width',
    'PositionwiseFeedForward',
]
