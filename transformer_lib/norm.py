"""Generated from book/06_residual_and_norm.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: bc3ece5d40bea440
# fmt: off

# [book/06_residual_and_norm.ipynb, cell 997f4cad]
from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.checks import check_float, check_int, check_probability

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm from scratch over the last dimension, with the population variance
    (divide by d).

    float16/bfloat16 inputs are normalised in float32 and the result cast back, as
    PyTorch's kernels do.
    """
    xf = x.float() if x.dtype in _LOW_PRECISION else x
    mean = xf.mean(dim=-1, keepdim=True)                    # (…, 1)
    var = ((xf - mean) ** 2).mean(dim=-1, keepdim=True)     # (…, 1): divide by d
    y = ((xf - mean) * torch.rsqrt(var + eps)).to(x.dtype)  # (…, d): mean 0, variance 1
    if weight is not None:
        y = y * weight                                      # γ
    if bias is not None:
        y = y + bias                                        # β
    return y


def rms_norm(x: torch.Tensor, weight: torch.Tensor | None = None,
             eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm from scratch: x / sqrt(mean(x²) + eps) · weight, over the last
    dimension."""
    xf = x.float() if x.dtype in _LOW_PRECISION else x
    ms = xf.pow(2).mean(dim=-1, keepdim=True)               # (…, 1): mean of squares
    y = (xf * torch.rsqrt(ms + eps)).to(x.dtype)            # (…, d)
    return y if weight is None else y * weight


# [book/06_residual_and_norm.ipynb, cell e3015308]
def _check_width(x: torch.Tensor, d_model: int) -> None:
    if x.size(-1) != d_model:
        raise ValueError(f"x must have last dimension d_model={d_model}, "
                         f"got shape {tuple(x.shape)}")


class LayerNorm(nn.Module):
    """LayerNorm(d_model, eps=1e-5): same results as ``nn.LayerNorm(d_model, eps)``.

    ``fused=True`` (default) calls ``F.layer_norm`` (one kernel, the speed of PyTorch's
    module); ``fused=False`` runs the from-scratch :func:`layer_norm`. Both compute the
    same formula.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, fused: bool = True):
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.eps = check_float(eps, "eps", 0.0)
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(d_model))     # γ
        self.bias = nn.Parameter(torch.zeros(d_model))      # β

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_width(x, self.d_model)
        if self.fused:
            return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}, fused={self.fused}"


class RMSNorm(nn.Module):
    """RMSNorm(d_model, eps=1e-6): x / sqrt(mean(x²) + eps) · weight, same results as
    ``nn.RMSNorm``.

    ``fused=True`` (default) calls ``F.rms_norm`` (what ``nn.RMSNorm`` calls);
    ``fused=False`` runs the from-scratch :func:`rms_norm`.
    """

    def __init__(self, d_model: int, eps: float = 1e-6, fused: bool = True):
        super().__init__()
        self.d_model = check_int(d_model, "d_model")
        self.eps = check_float(eps, "eps", 0.0)
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(d_model))     # γ; there is no β

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _check_width(x, self.d_model)
        if self.fused:
            return F.rms_norm(x, (self.d_model,), self.weight, self.eps)
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}, fused={self.fused}"


# [book/06_residual_and_norm.ipynb, cell bcbe94e7]
def make_norm(kind: str, d_model: int, eps: float = 1e-5) -> nn.Module:
    """A normalisation layer by name: ``"layer"`` (:class:`LayerNorm`) or ``"rms"``
    (:class:`RMSNorm`)."""
    if kind == "layer":
        return LayerNorm(d_model, eps)
    if kind == "rms":
        return RMSNorm(d_model, eps)
    raise ValueError(f"norm must be 'layer' or 'rms', got {kind!r}")


class SublayerConnection(nn.Module):
    """A residual connection around a sublayer, with its normalisation ("Add & Norm").

    Post-Norm (the paper, default): ``norm(x + dropout(sublayer(x)))``.
    Pre-Norm (``norm_first=True``): ``x + dropout(sublayer(norm(x)))``.

    ``forward(x, sublayer)`` takes the sublayer as a callable, so one wrapper serves
    self-attention, cross-attention and the feed-forward network; the callable must
    return a tensor of x's shape.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, norm_first: bool = False,
                 norm: str = "layer", eps: float = 1e-5):
        super().__init__()
        self.norm = make_norm(norm, d_model, eps)
        self.dropout = nn.Dropout(check_probability(dropout, "dropout"))
        self.norm_first = norm_first

    def forward(self, x: torch.Tensor,
                sublayer: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
        out = sublayer(self.norm(x) if self.norm_first else x)  # (B, L, d_model)
        if out.shape != x.shape:
            raise ValueError("sublayer must return a tensor of the input's shape "
                             f"{tuple(x.shape)}, got {tuple(out.shape)}")
        if self.norm_first:
            return x + self.dropout(out)                        # Pre-Norm
        return self.norm(x + self.dropout(out))                 # Post-Norm


__all__ = [
    'layer_norm', 'rms_norm', 'LayerNorm', 'RMSNorm', 'make_norm', 'SublayerConnection',
]
