"""Generated from book/07_encoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 42f70160ba1a9516
# fmt: off

# [book/07_encoder.ipynb, cell 358f147a]
from __future__ import annotations

from typing import TypeVar

import torch
from torch import nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.checks import check_int
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.norm import SublayerConnection, make_norm
from transformer_lib.torch_weights import EncoderLayerParts, check_torch_layer
from transformer_lib.torch_weights import load_torch_stack
from transformer_lib.torch_weights import copy_attention, copy_feed_forward
from transformer_lib.torch_weights import copy_norms, expect_parts, expect_torch

_M = TypeVar("_M", bound=nn.Module)


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each inside a residual + norm sublayer:
    (B, L, d) -> (B, L, d).

    ``mask`` is boolean, True = may attend, and broadcasts to (B, n_heads, L, L):
    usually the padding mask ``padding_mask(src, pad_id)`` of shape (B, 1, 1, L).
    ``norm_first=False`` is the paper's Post-Norm; ``norm_first=True`` is Pre-Norm.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu",
                 norm: str = "layer", eps: float = 1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=dropout,
                                                    activation=activation)
        # around self-attention, and around the FFN
        self.sublayer1 = SublayerConnection(d_model, dropout, norm_first, norm, eps)
        self.sublayer2 = SublayerConnection(d_model, dropout, norm_first, norm, eps)
        self.d_model, self.norm_first = d_model, norm_first

    def forward(self, x: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        # the meeting, then the desk work                        (B, L, d_model) each
        x = self.sublayer1(x, lambda y: self.self_attn(y, y, y, mask))
        return self.sublayer2(x, self.feed_forward)


class Encoder(nn.Module):
    """A stack of ``n_layers`` encoder layers, then a final norm when ``final_norm``.

    ``final_norm=None`` (default) adds the final norm for Pre-Norm only, where the
    residual stream is otherwise never normalised.
    forward(x (B, L, d_model), mask=None) -> (B, L, d_model).
    """

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int,
                 dropout: float = 0.1, norm_first: bool = False,
                 activation: str = "relu", norm: str = "layer", eps: float = 1e-5,
                 final_norm: bool | None = None):
        super().__init__()
        n_layers = check_int(n_layers, "n_layers")
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, norm,
                         eps)
            for _ in range(n_layers))
        use_final = norm_first if final_norm is None else final_norm
        self.norm = make_norm(norm, d_model, eps) if use_final else nn.Identity()
        self.d_model = d_model

    def forward(self, x: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)                                   # (B, L, d_model)
        return self.norm(x)


# [book/07_encoder.ipynb, cell 50d876cc]
@torch.no_grad()
def load_torch_encoder_layer(layer: _M, reference: nn.Module) -> _M:
    """Copy the weights of a ``nn.TransformerEncoderLayer`` into ``layer`` (an
    :class:`EncoderLayer` of the same sizes, or any module with its parts)."""
    ours: EncoderLayerParts = expect_parts(layer, EncoderLayerParts)
    ref = expect_torch(reference, nn.TransformerEncoderLayer)
    norms = [(ours.sublayer1.norm, ref.norm1), (ours.sublayer2.norm, ref.norm2)]
    check_torch_layer(ours, ref, norms)
    copy_attention(ours.self_attn, ref.self_attn)
    copy_feed_forward(ours.feed_forward, ref)
    copy_norms(norms)
    return layer


@torch.no_grad()
def load_torch_encoder(encoder: _M, reference: nn.Module) -> _M:
    """Copy the weights of a ``nn.TransformerEncoder`` (its layers and its optional
    final norm) into ``encoder``."""
    return load_torch_stack(encoder, reference, nn.TransformerEncoder,
                            load_torch_encoder_layer, "encoder")


__all__ = ['EncoderLayer', 'Encoder', 'load_torch_encoder_layer', 'load_torch_encoder']
