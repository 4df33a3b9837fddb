"""Generated from book/04_masks.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 80853f77d3380f34
# fmt: off

# [book/04_masks.ipynb, cell 5]
from __future__ import annotations

import operator

import torch


def _check_ids(ids: torch.Tensor, name: str = "ids") -> None:
    if not isinstance(ids, torch.Tensor) or ids.dim() != 2:
        shape = tuple(ids.shape) if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise ValueError(f"{name} must be a (B, L) tensor of token ids, got {shape}")
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, L) token ids -> (B, 1, 1, L) boolean mask, True where the key is a real token (may attend).

    It hides pad keys from every head and every query; query rows are not masked (see chapter 4).
    """
    _check_ids(ids)
    return (ids != pad_id)[:, None, None, :]                             # (B, 1, 1, L)


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(1, 1, size, size) boolean mask, True on and below the diagonal: position i may attend to j <= i."""
    if isinstance(size, bool):
        raise ValueError(f"size must be a positive int, got {size!r}")
    try:
        size = operator.index(size)
    except TypeError:
        raise ValueError(f"size must be a positive int, got {size!r}") from None
    if size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]   # (1, 1, L, L)


def target_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, L) target ids -> (B, 1, L, L): the padding mask AND the causal mask (decoder self-attention)."""
    _check_ids(ids)
    return padding_mask(ids, pad_id) & causal_mask(ids.size(1), device=ids.device)   # (B, 1, L, L)


__all__ = ['padding_mask', 'causal_mask', 'target_mask']
