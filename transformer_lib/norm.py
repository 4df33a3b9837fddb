"""Generated from book/06_residual_and_norm.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: ba024490bbd79b27
# fmt: off

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm from scratch over the last dimension, with the population (biased) variance."""
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)
    y = (x - mean) / torch.sqrt(var + eps)
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    return y


class LayerNorm(nn.Module):
    """LayerNorm(d_model, eps=1e-5): same results as ``nn.LayerNorm``.

    ``fused=True`` (default) calls ``F.layer_norm`` (one kernel, the speed of PyTorch's module);
    ``fused=False`` runs the from-scratch :func:`layer_norm`. Both give the same numbers.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, fused: bool = True):
        super().__init__()
        self.d_model, self.eps, self.fused = d_model, eps, fused
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
        return layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """RMSNorm(d_model, eps=1e-6): x / sqrt(mean(x²) + eps) · weight, same results as ``nn.RMSNorm``."""

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight


def make_norm(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """A normalisation layer by name: "layer" or "rms"."""
    if kind == "layer":
        return LayerNorm(d_model, eps)
    if kind == "rms":
        return RMSNorm(d_model, eps)
    raise ValueError(f"norm must be 'layer' or 'rms', got {kind!r}")


class SublayerConnection(nn.Module):
    """Residual connection around a sublayer, with its normalisation.

    Post-Norm (the paper, default): norm(x + dropout(sublayer(x))).
    Pre-Norm (``norm_first=True``): x + dropout(sublayer(norm(x))).
    """

    def __init__(self, d_model: int, dropout: float = 0.1, norm_first: bool = False, norm: str = "layer",
                 eps: float = 1e-5):
        super().__init__()
        self.norm = make_norm(norm, d_model, eps)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


__all__ = ['layer_norm', 'LayerNorm', 'RMSNorm', 'make_norm', 'SublayerConnection']
