"""Generated from book/04_masks.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 483467f0403d0988
# fmt: off

# [book/04_masks.ipynb, cell 8d9dac0d]
from __future__ import annotations

import torch

from transformer_lib.checks import check_int, check_token_ids


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, L) token ids -> (B, 1, 1, L) boolean mask, True where the key is a real token
    (may attend).

    It hides pad keys from every head and every query; query rows are not masked (see
    chapter 4).
    """
    check_token_ids(ids, None, "ids", dims=2)                # (B, L), integer dtype
    return padding_mask_unchecked(ids, pad_id)               # (B, 1, 1, L)


def _causal(size: int, device: torch.device | str | None) -> torch.Tensor:
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()  # (L, L)


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(1, 1, size, size) boolean mask, True on and below the diagonal: position i may
    attend to j <= i."""
    return _causal(check_int(size, "size"), device)[None, None]  # (1, 1, L, L)


def target_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, L) target ids -> (B, 1, L, L): the padding mask AND the causal mask (decoder
    self-attention)."""
    check_token_ids(ids, None, "ids", dims=2)                # (B, L), integer dtype
    keys = padding_mask_unchecked(ids, pad_id)               # (B, 1, 1, L)
    return keys & _causal(ids.size(1), ids.device)           # (B, 1, L, L)


# [book/04_masks.ipynb, cell 88f9caa3]
def padding_mask_unchecked(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """:func:`padding_mask` without its check of ``ids``, for a caller that checked
    them already (chapter 9's model): (B, L) -> (B, 1, 1, L)."""
    return (ids != pad_id)[:, None, None, :]


__all__ = ['padding_mask', 'causal_mask', 'target_mask']
