"""Generated from book/01_embedding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 15edbcdb24fa4a6b
# fmt: off

from __future__ import annotations

import math

import torch
from torch import nn


def default_device() -> torch.device:
    """The device a new model should live on: the first CUDA GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def check_token_ids(ids: torch.Tensor, vocab_size: int, name: str = "ids") -> None:
    """Raise a ValueError naming ``name`` unless ``ids`` is an integer tensor with values in [0, vocab_size)."""
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids (torch.long), got dtype {ids.dtype}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab_size):
        raise ValueError(
            f"{name} holds token ids outside the vocabulary [0, {vocab_size}): "
            f"min {int(ids.min())}, max {int(ids.max())}"
        )


class TokenEmbedding(nn.Module):
    """Token ids (B, L) -> vectors (B, L, d_model), multiplied by sqrt(d_model) as in the paper.

    ``padding_idx`` names the id whose row stays zero and receives no gradient.
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None):
        super().__init__()
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
        if d_model < 1:
            raise ValueError(f"d_model must be >= 1, got {d_model}")
        self.vocab_size, self.d_model = vocab_size, d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.scale = math.sqrt(d_model)

    @property
    def weight(self) -> nn.Parameter:
        return self.embedding.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_token_ids(ids, self.vocab_size)
        return self.embedding(ids) * self.scale  # (B, L, d_model)


__all__ = ['default_device', 'check_token_ids', 'TokenEmbedding']
