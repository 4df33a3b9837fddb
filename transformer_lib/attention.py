"""Generated from book/03_attention.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: bdb51321c827be30
# fmt: off

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def check_mask(mask: torch.Tensor | None, scores_shape: tuple[int, ...], name: str = "mask") -> None:
    """Raise a ValueError unless ``mask`` is boolean and broadcasts to ``scores_shape`` (…, Lq, Lk)."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"{name} must be a boolean tensor (True = may attend), got {got}")
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != torch.Size(scores_shape):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention scores' shape "
            f"{tuple(scores_shape)} (…, Lq, Lk)"
        )


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
              dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, written out: softmax(q kᵀ / √d_k) v.

    q (…, Lq, d_k), k (…, Lk, d_k), v (…, Lk, d_v); ``mask`` is boolean, True = may attend, and broadcasts
    to (…, Lq, Lk). Returns (output (…, Lq, d_v), weights (…, Lq, Lk)). A query row whose keys are all
    masked gets zero weights and a zero output (as PyTorch's scaled_dot_product_attention), never NaN.
    """
    if q.size(-1) != k.size(-1):
        raise ValueError(f"q and k must have the same width d_k, got {q.size(-1)} and {k.size(-1)}")
    if k.size(-2) != v.size(-2):
        raise ValueError(f"k and v must have the same length Lk, got {k.size(-2)} and {v.size(-2)}")
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))          # (…, Lq, Lk)
    if mask is not None:
        check_mask(mask, tuple(scores.shape))
        any_key = mask.any(dim=-1, keepdim=True)                        # (…, Lq, 1)
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~any_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(~any_key, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights                                          # (…, Lq, d_v), (…, Lq, Lk)


class MultiHeadAttention(nn.Module):
    """Multi-head attention with the weight layout of ``torch.nn.MultiheadAttention``.

    ``in_proj`` stacks W_q, W_k, W_v as rows (3·d_model, d_model), like ``in_proj_weight``: one fused
    matmul for self-attention, row slices of the same matrix for cross-attention.

    forward(query (B, Lq, d), key (B, Lk, d), value (B, Lk, d), mask=None) -> (B, Lq, d). With
    ``need_weights=True`` it returns (output, weights (B, h, Lq, Lk)); with ``record_weights = True`` set
    on the module it keeps the last per-head weights in ``last_weights`` (for plots of a whole model).
    Both use the explicit path; otherwise it calls ``F.scaled_dot_product_attention`` (fused kernels).

    ``cache`` (a dict, used by incremental decoding, chapter 11): for self-attention (``key is query``)
    the new keys/values are appended to ``cache["k"], cache["v"]``; for cross-attention they are
    computed once and reused.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if n_heads < 1 or d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.record_weights = False
        self.last_weights: torch.Tensor | None = None

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.n_heads, self.d_k).transpose(1, 2)      # (B, h, L, d_k)

    def _linear(self, x: torch.Tensor, part: slice) -> torch.Tensor:
        b = None if self.in_proj.bias is None else self.in_proj.bias[part]
        return F.linear(x, self.in_proj.weight[part], b)

    def forward(self, query, key, value, mask=None, need_weights: bool = False, cache: dict | None = None):
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t.dim() != 3 or t.size(-1) != self.d_model:
                raise ValueError(f"{name} must have shape (B, L, {self.d_model}), got {tuple(t.shape)}")
        d = self.d_model
        self_attn = query is key and key is value
        if self_attn:
            q, k, v = self.in_proj(query).chunk(3, dim=-1)               # one fused matmul: (B, L, d) ×3
            k, v = self._split(k), self._split(v)
            if cache is not None:
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        else:
            q = self._linear(query, slice(0, d))
            if cache is not None and "k" in cache:
                k, v = cache["k"], cache["v"]
            else:
                if key is value:
                    k, v = self._linear(key, slice(d, 3 * d)).chunk(2, dim=-1)
                else:
                    k, v = self._linear(key, slice(d, 2 * d)), self._linear(value, slice(2 * d, 3 * d))
                k, v = self._split(k), self._split(v)
                if cache is not None:
                    cache["k"], cache["v"] = k, v
        q = self._split(q)                                                 # (B, h, Lq, d_k)
        p = self.dropout if self.training else 0.0
        if need_weights or self.record_weights:
            out, weights = attention(q, k, v, mask, dropout_p=p)           # (B, h, Lq, d_k), (B, h, Lq, Lk)
            if self.record_weights:
                self.last_weights = weights.detach()
        else:
            check_mask(mask, (q.size(0), self.n_heads, q.size(2), k.size(2)))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p)
            weights = None
        B, _, Lq, _ = out.shape
        out = self.out_proj(out.transpose(1, 2).reshape(B, Lq, d))         # (B, Lq, d_model)
        return (out, weights) if need_weights else out


__all__ = ['check_mask', 'attention', 'MultiHeadAttention']
