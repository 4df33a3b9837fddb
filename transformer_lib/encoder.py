"""Generated from book/07_encoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 7c036dd17ca42dc0
# fmt: off

# [book/07_encoder.ipynb, cell 5]
from __future__ import annotations

import torch
from torch import nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.norm import LayerNorm, SublayerConnection, make_norm


class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each inside a residual + norm sublayer: (B, L, d) -> (B, L, d).

    ``mask`` is boolean, True = may attend, and broadcasts to (B, n_heads, L, L): usually the padding
    mask ``padding_mask(src, pad_id)`` of shape (B, 1, 1, L). ``norm_first=False`` is the paper's
    Post-Norm; ``norm_first=True`` is Pre-Norm.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1, norm_first: bool = False,
                 activation: str = "relu", norm: str = "layer", eps: float = 1e-5):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout=dropout)
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.sublayer1 = SublayerConnection(d_model, dropout, norm_first, norm, eps)   # around self-attention
        self.sublayer2 = SublayerConnection(d_model, dropout, norm_first, norm, eps)   # around the FFN
        self.d_model, self.norm_first = d_model, norm_first

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        x = self.sublayer1(x, lambda y: self.self_attn(y, y, y, mask))   # (B, L, d_model): the meeting
        return self.sublayer2(x, self.feed_forward)                      # (B, L, d_model): the desk work


class Encoder(nn.Module):
    """A stack of ``n_layers`` encoder layers, then a final norm when ``final_norm``.

    ``final_norm=None`` (default) adds the final norm for Pre-Norm only, where the residual stream is
    otherwise never normalised. forward(x (B, L, d_model), mask=None) -> (B, L, d_model).
    """

    def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int, dropout: float = 0.1,
                 norm_first: bool = False, activation: str = "relu", norm: str = "layer", eps: float = 1e-5,
                 final_norm: bool | None = None):
        super().__init__()
        if not isinstance(n_layers, int) or isinstance(n_layers, bool) or n_layers < 1:
            raise ValueError(f"n_layers must be a positive int, got {n_layers!r}")
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, n_heads, d_ff, dropout, norm_first, activation, norm, eps) for _ in range(n_layers)
        )
        use_final = norm_first if final_norm is None else final_norm
        self.norm = make_norm(norm, d_model, eps) if use_final else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x, mask)                                           # (B, L, d_model)
        return self.norm(x)


@torch.no_grad()
def load_torch_encoder_layer(layer: EncoderLayer, reference: nn.TransformerEncoderLayer) -> EncoderLayer:
    """Copy the weights of a ``nn.TransformerEncoderLayer`` into ``layer`` (same sizes) and return it."""
    if not isinstance(reference, nn.TransformerEncoderLayer):
        raise TypeError(f"reference must be an nn.TransformerEncoderLayer, got {type(reference).__name__}")
    if reference.norm_first != layer.norm_first:
        raise ValueError(f"norm_first differs: reference {reference.norm_first}, layer {layer.norm_first}")
    if not isinstance(layer.sublayer1.norm, LayerNorm):
        raise ValueError("nn.TransformerEncoderLayer uses LayerNorm: build the layer with norm='layer'")
    # settings that the weights' shapes do not reveal, and that would otherwise give silently wrong results
    if reference.self_attn.num_heads != layer.self_attn.n_heads:
        raise ValueError(f"n_heads differs: reference {reference.self_attn.num_heads}, layer {layer.self_attn.n_heads}")
    if reference.activation is not layer.feed_forward.activation:
        raise ValueError(f"activation differs: reference {reference.activation}, layer {layer.feed_forward.activation_name!r}")
    if reference.norm1.eps != layer.sublayer1.norm.eps:
        raise ValueError(f"eps differs: reference {reference.norm1.eps}, layer {layer.sublayer1.norm.eps}")
    attn, ref_attn = layer.self_attn, reference.self_attn
    attn.in_proj.weight.copy_(ref_attn.in_proj_weight)
    attn.in_proj.bias.copy_(ref_attn.in_proj_bias)
    attn.out_proj.load_state_dict(ref_attn.out_proj.state_dict())
    layer.feed_forward.linear1.load_state_dict(reference.linear1.state_dict())
    layer.feed_forward.linear2.load_state_dict(reference.linear2.state_dict())
    layer.sublayer1.norm.load_state_dict(reference.norm1.state_dict())
    layer.sublayer2.norm.load_state_dict(reference.norm2.state_dict())
    return layer


@torch.no_grad()
def load_torch_encoder(encoder: Encoder, reference: nn.TransformerEncoder) -> Encoder:
    """Copy the weights of a ``nn.TransformerEncoder`` (its layers and its optional final norm) into ``encoder``."""
    if not isinstance(reference, nn.TransformerEncoder):
        raise TypeError(f"reference must be an nn.TransformerEncoder, got {type(reference).__name__}")
    if len(reference.layers) != len(encoder.layers):
        raise ValueError(f"layer counts differ: reference {len(reference.layers)}, encoder {len(encoder.layers)}")
    if (reference.norm is None) != isinstance(encoder.norm, nn.Identity):
        raise ValueError("final norms differ: build the encoder with final_norm=(reference.norm is not None)")
    for layer, ref_layer in zip(encoder.layers, reference.layers):
        load_torch_encoder_layer(layer, ref_layer)
    if reference.norm is not None:
        encoder.norm.load_state_dict(reference.norm.state_dict())
    return encoder


__all__ = ['EncoderLayer', 'Encoder', 'load_torch_encoder_layer', 'load_torch_encoder']
