"""Generated from book/01_embedding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: edb922bfcbcc6e4e
# fmt: off

# [book/01_embedding.ipynb, cell 53511cdc]
from __future__ import annotations

import math
from typing import cast

import torch
from torch import nn

from transformer_lib.checks import check_int, check_token_ids


class TokenEmbedding(nn.Module):
    """Token ids (B, L) -> vectors (B, L, d_model), times sqrt(d_model) as in the paper.

    The table starts from N(0, 1/d_model), so that the scaled output has unit variance
    and the same matrix can serve as a tied output projection. ``padding_idx`` names the
    id whose row starts at zero and receives no gradient through the lookup (a tied
    output projection, chapter 9, does send it gradient: the model can still learn to
    predict padding is unlikely).
    """

    def __init__(self, vocab_size: int, d_model: int, padding_idx: int | None = None):
        super().__init__()
        vocab_size = check_int(vocab_size, "vocab_size")
        d_model = check_int(d_model, "d_model")
        if padding_idx is not None and (
                isinstance(padding_idx, bool) or not isinstance(padding_idx, int)
                or not -vocab_size <= padding_idx < vocab_size):
            raise ValueError(f"padding_idx must be a token id in [0, {vocab_size}), "
                             f"got {padding_idx!r}")
        self.vocab_size, self.d_model = vocab_size, d_model
        self.embedding = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
        self.scale = math.sqrt(d_model)
        self.reset_parameters()

    @property
    def weight(self) -> nn.Parameter:
        """The (vocab_size, d_model) table; tie an output layer to it with
        ``out.weight = emb.weight``."""
        return cast(nn.Parameter, self.embedding.weight)

    @property
    def padding_idx(self) -> int | None:
        return self.embedding.padding_idx

    def reset_parameters(self) -> None:
        """Draw the table from N(0, 1/d_model) and zero the padding row."""
        nn.init.normal_(self.embedding.weight, mean=0.0, std=self.d_model ** -0.5)
        if self.embedding.padding_idx is not None:
            with torch.no_grad():
                self.embedding.weight[self.embedding.padding_idx].zero_()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_token_ids(ids, self.vocab_size)  # ids (B, L), integers in [0, vocab_size)
        return self.lookup(ids)

    def lookup(self, ids: torch.Tensor) -> torch.Tensor:
        """``forward`` without the check of ``ids``, for a caller that checked them
        already (chapter 9's model checks its inputs once, at its own entry)."""
        # uint8, int16: the lookup takes int32/int64
        if ids.dtype not in (torch.int32, torch.int64):
            ids = ids.long()
        return self.embedding(ids) * self.scale            # (B, L, d_model)


__all__ = ['TokenEmbedding']
