"""Generated from book/07_encoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: d5b66aef1725feca
# fmt: off

# [book/07_encoder.ipynb, cell 358f147a]
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch import nn

from transformer_lib.attention import MultiHeadAttention, check_heads
from transformer_lib.checks import check_float, check_int, check_probability
from transformer_lib.feed_forward import ACTIVATIONS, PositionwiseFeedForward
from transformer_lib.norm import SublayerConnection, make_norm
from transformer_lib.torch_weights import EncoderLayerParts, copy_layer
from transformer_lib.torch_weights import expect_parts, expect_torch
from transformer_lib.torch_weights import load_torch_stack

_M = TypeVar("_M", bound=nn.Module)


# [book/07_encoder.ipynb, cell a5cff9d8]
@dataclass
class LayerConfig:
    """The options of every layer of an encoder or decoder stack, checked on creation.

    ``norm_first=False`` is the paper's Post-Norm, True is Pre-Norm; ``norm`` is
    "layer" or "rms", ``activation`` one of ``ACTIVATIONS``. ``final_norm``: a norm
    after the last layer; None means "with Pre-Norm only". Chapter 9's
    ``TransformerConfig`` has these fields too: :meth:`of` takes them from it.
    """

    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    norm_first: bool = False
    activation: str = "relu"
    norm: str = "layer"
    eps: float = 1e-5
    final_norm: bool | None = None

    def __post_init__(self) -> None:
        self.d_model, self.n_heads = check_heads(self.d_model, self.n_heads)
        self.d_ff = check_int(self.d_ff, "d_ff")
        self.dropout = check_probability(self.dropout, "dropout", one=False)
        self.eps = check_float(self.eps, "eps", 0.0, low_open=True, high_open=True)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, "
                             f"got {self.activation!r}")
        if self.norm not in ("layer", "rms"):
            raise ValueError(f"norm must be 'layer' or 'rms', got {self.norm!r}")
        if not isinstance(self.norm_first, bool):
            raise ValueError(f"norm_first must be True or False, "
                             f"got {self.norm_first!r}")
        if not (self.final_norm is None or isinstance(self.final_norm, bool)):
            raise ValueError(f"final_norm must be None, True or False, "
                             f"got {self.final_norm!r}")

    @classmethod
    def expect(cls, config: object) -> LayerConfig:
        """``config`` itself if it is a LayerConfig, else a TypeError naming it."""
        if not isinstance(config, cls):
            raise TypeError(f"config must be a LayerConfig, got "
                            f"{type(config).__name__} (LayerConfig.of(c) builds one "
                            "from a config with its fields)")
        return config

    @classmethod
    def of(cls, config: Any) -> LayerConfig:
        """The layer options of any config that has these fields (checked here)."""
        return cls(**{f.name: getattr(config, f.name)
                      for f in dataclasses.fields(cls)})

    def sublayer(self) -> SublayerConnection:
        """A residual + norm wrapper with these options (chapter 6)."""
        return SublayerConnection(self.d_model, self.dropout, self.norm_first,
                                  self.norm, self.eps)

    def stack(self, layer: Callable[[LayerConfig], nn.Module],
              n_layers: int) -> tuple[nn.ModuleList, nn.Module]:
        """``n_layers`` layers ``layer(self)``, and the norm after them: ``final_norm``,
        or for None, Pre-Norm only."""
        n_layers = check_int(n_layers, "n_layers")
        layers = nn.ModuleList(layer(self) for _ in range(n_layers))
        use = self.norm_first if self.final_norm is None else self.final_norm
        norm = make_norm(self.norm, self.d_model, self.eps) if use else nn.Identity()
        return layers, norm


# [book/07_encoder.ipynb, cell 6c3f56ab]
class EncoderLayer(nn.Module):
    """Self-attention and feed-forward, each inside a residual + norm sublayer:
    (B, L, d) -> (B, L, d), with the options of ``config``.

    ``mask`` is boolean, True = may attend, and broadcasts to (B, n_heads, L, L):
    usually the padding mask ``padding_mask(src, pad_id)`` of shape (B, 1, 1, L).
    """

    def __init__(self, config: LayerConfig):
        super().__init__()
        c = LayerConfig.expect(config)
        self.self_attn = MultiHeadAttention(c.d_model, c.n_heads, c.dropout)
        self.feed_forward = PositionwiseFeedForward(c.d_model, c.d_ff, c.dropout,
                                                    c.activation)
        # around self-attention, and around the FFN
        self.sublayer1, self.sublayer2 = c.sublayer(), c.sublayer()
        self.d_model, self.norm_first = c.d_model, c.norm_first

    def forward(self, x: torch.Tensor,
                mask: torch.Tensor | None = None) -> torch.Tensor:
        # self-attention, then the position-wise FFN          (B, L, d_model) each
        x = self.sublayer1(x, lambda y: self.self_attn(y, mask=mask))
        return self.sublayer2(x, self.feed_forward)


class Encoder(nn.Module):
    """A stack of ``n_layers`` encoder layers with the options of ``config``, then a
    final norm for Pre-Norm (unless ``final_norm`` says otherwise: see
    :meth:`LayerConfig.stack`). forward(x (B, L, d_model), mask=None) -> (B, L,
    d_model).
    """

    def __init__(self, config: LayerConfig, n_layers: int):
        super().__init__()
        config = LayerConfig.expect(config)
        self.layers, self.norm = config.stack(EncoderLayer, n_layers)
        self.d_model = config.d_model

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
    copy_layer(ours, ref, norms=[(ours.sublayer1.norm, ref.norm1),
                                 (ours.sublayer2.norm, ref.norm2)],
               attentions=[(ours.self_attn, ref.self_attn)])
    return layer


def load_torch_encoder(encoder: _M, reference: nn.Module) -> _M:
    """Copy the weights of a ``nn.TransformerEncoder`` (its layers and its optional
    final norm) into ``encoder``."""
    return load_torch_stack(encoder, reference, nn.TransformerEncoder,
                            load_torch_encoder_layer, "encoder")


__all__ = [
    'LayerConfig', 'EncoderLayer', 'Encoder', 'load_torch_encoder_layer',
    'load_torch_encoder',
]
