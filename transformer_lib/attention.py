"""Generated from book/03_attention.ipynb: edit the notebook, not this file.
Extended by book/08_decoder.ipynb.
Extended by book/13_modern.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: 15e3807b83451c1d
# fmt: off

# [book/03_attention.ipynb, cell 543feaed]
from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, cast

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.checks import check_int, check_probability

if TYPE_CHECKING:  # for annotations: chapter 3's module imports no later module
    from transformer_lib.cache import AttentionCache


# [book/03_attention.ipynb, cell 7d2b8459]
def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               mask: torch.Tensor | None = None,
               dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The computation of :func:`attention`, without its checks (for callers that have
    checked their arguments once already, such as :class:`MultiHeadAttention`)."""
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.size(-1)))  # (…, Lq, Lk)
    if mask is not None:
        any_key = mask.any(dim=-1, keepdim=True)        # (…, Lq, 1): row has a key
        # -inf where masked; a row with no key at all gets 0s so that softmax stays
        # finite (its weights are zeroed below)
        scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~any_key, 0.0)
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32)
    weights = weights.to(scores.dtype)                  # (…, Lq, Lk)
    if mask is not None:
        weights = weights.masked_fill(~any_key, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights.to(v.dtype) @ v, weights             # (…, Lq, d_v), (…, Lq, Lk)


# [book/03_attention.ipynb, cell 99a51cf6]
def check_mask(mask: torch.Tensor | None, scores_shape: tuple[int, ...],
               name: str = "mask") -> None:
    """Raise a ValueError unless ``mask`` is None or a boolean tensor (True = this query
    may attend to this key, as in PyTorch's ``scaled_dot_product_attention``) that
    broadcasts to ``scores_shape``, the scores' (…, Lq, Lk). Only dtype and shape are
    checked: no value is read, so there is no host-device synchronisation."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = (f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor)
               else type(mask).__name__)
        raise ValueError(f"{name} must be a boolean tensor (True = may attend), "
                         f"got {got}")
    try:
        shape = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        shape = None
    if shape != torch.Size(scores_shape):
        raise ValueError(
            f"{name} of shape {tuple(mask.shape)} does not broadcast to the attention "
            f"scores' shape {tuple(scores_shape)} (…, Lq, Lk)")


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              mask: torch.Tensor | None = None,
              dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, written out: softmax(q kᵀ / √d_k) v.

    q (…, Lq, d_k), k (…, Lk, d_k), v (…, Lk, d_v); ``mask`` is boolean, True = may
    attend, and broadcasts to (…, Lq, Lk). Returns (output (…, Lq, d_v),
    weights (…, Lq, Lk)).

    A query row whose keys are all masked gets zero weights and a zero output, never
    NaN (older versions of PyTorch's math path returned NaN). ``dropout_p`` drops
    weights (training only). Half-precision inputs get their softmax in float32.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() < 2:
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a tensor of shape (…, L, d), got {got}")
    if q.size(-1) != k.size(-1):
        raise ValueError("q and k must have the same width d_k, "
                         f"got {q.size(-1)} and {k.size(-1)}")
    if k.size(-2) != v.size(-2):
        raise ValueError("k and v must have the same length Lk, "
                         f"got {k.size(-2)} and {v.size(-2)}")
    dropout_p = check_probability(dropout_p, "dropout_p", one=False)
    try:
        batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2])
    except RuntimeError:
        raise ValueError(f"the leading dimensions of q {tuple(q.shape)} and "
                         f"k {tuple(k.shape)} do not broadcast") from None
    check_mask(mask, (*batch, q.size(-2), k.size(-2)))
    return _attention(q, k, v, mask, dropout_p)


# [book/03_attention.ipynb, cell da3d2a3e]
def check_heads(d_model: object, n_heads: object) -> tuple[int, int]:
    """(d_model, n_heads), checked: whole numbers of at least 1, and d_model divisible
    by n_heads (every head gets d_model / n_heads coordinates)."""
    d, h = check_int(d_model, "d_model"), check_int(n_heads, "n_heads")
    if d % h != 0:
        raise ValueError(f"d_model ({d}) must be divisible by n_heads ({h})")
    return d, h


# [book/03_attention.ipynb, cell ecf34695]
class MultiHeadAttention(nn.Module):
    """Multi-head attention with the weight layout of ``torch.nn.MultiheadAttention``:
    ``in_proj`` (``nn.Linear(d_model, 3·d_model)``) stacks W_q, W_k, W_v as rows (one
    fused matmul for self-attention, row slices for cross-attention); ``out_proj``: W_o.

    ``forward(query (B, Lq, d), key=None, value=None, mask=None, cache=None)`` -> (B,
    Lq, d): self-attention without ``key``, cross-attention with ``key`` (B, Lk, d) and
    ``value`` (default: ``key``). ``mask`` is boolean, True = may attend, broadcasting
    to (B, n_heads, Lq, Lk) (see ``transformer_lib.masks``).

    Per-head weights (B, n_heads, Lq, Lk), for plots: ``mha.forward_with_weights(...)``
    returns them, and with ``mha.record_weights = True`` every forward stores them in
    ``mha.last_weights``; both use the explicit ``attention`` path, otherwise
    ``F.scaled_dot_product_attention`` runs. ``cache`` (chapter 8's
    :class:`~transformer_lib.cache.AttentionCache`): self-attention appends the new
    keys/values; cross-attention computes them on the first call and reuses them.
    Chapter 13 adds GQA and rotary.
    """

    # [book/13_modern.ipynb, cell 5d61bd9f]
    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0,
                 bias: bool = True, n_kv_heads: int | None = None):
        super().__init__()
        d_model, n_heads = check_heads(d_model, n_heads)
        n_kv = n_heads if n_kv_heads is None else check_int(n_kv_heads, "n_kv_heads")
        if n_heads % n_kv != 0:
            raise ValueError(f"n_heads ({n_heads}) must be divisible by "
                             f"n_kv_heads ({n_kv})")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.n_kv_heads, self.d_kv = n_kv, n_kv * self.d_k         # K and V: g heads
        self.dropout = check_probability(dropout, "dropout", one=False)
        # rows: W_q (d_model), W_k, W_v (d_kv each; d_kv = d_model without GQA)
        self.in_proj = nn.Linear(d_model, d_model + 2 * self.d_kv, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)     # W_o
        self.record_weights = False
        self.last_weights: torch.Tensor | None = None
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.in_proj.weight)  # as nn.MultiheadAttention
        if self.in_proj.bias is not None:
            nn.init.zeros_(self.in_proj.bias)
            nn.init.zeros_(self.out_proj.bias)

    # [book/03_attention.ipynb, cell ffa0d713]
    def _split(self, x: torch.Tensor) -> torch.Tensor:
        B, L, width = x.shape                                          # (B, L, h·d_k)
        h = width // self.d_k                 # not -1: L may be 0 (an empty prompt)
        return x.view(B, L, h, self.d_k).transpose(1, 2)              # (B, h, L, d_k)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        B, _, L, _ = x.shape                                           # (B, h, L, d_k)
        return x.transpose(1, 2).reshape(B, L, self.d_model)          # (B, L, d_model)

    def _project(self, x: torch.Tensor, part: slice) -> torch.Tensor:
        b = None if self.in_proj.bias is None else self.in_proj.bias[part]
        return F.linear(x, self.in_proj.weight[part], b)              # rows `part`

    # [book/13_modern.ipynb, cell 0b605ca3]
    def _self_qkv(self, x: torch.Tensor, cache: AttentionCache | None,
                  rotary: Callable[[torch.Tensor], torch.Tensor] | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Self-attention: q (B, h, L, d_k), k and v (B, n_kv_heads, L, d_k) of x, q and
        the new k rotated by ``rotary``; the new k and v are appended to ``cache``."""
        d, dkv = self.d_model, self.d_kv
        q, k, v = self.in_proj(x).split([d, dkv, dkv], dim=-1)   # one fused matmul
        q, k, v = self._split(q), self._split(k), self._split(v)
        if rotary is not None:                                 # at their own positions
            q, k = rotary(q), rotary(k)
        if cache is not None:                    # with the earlier positions' k and v
            k, v = cache.append(k, v)                          # (B, h_kv, t + L, d_k)
        return q, k, v

    # [book/08_decoder.ipynb, cell b26f8da7]
    def _cross_qkv(self, query: torch.Tensor, key: torch.Tensor,
                   value: torch.Tensor | None, cache: AttentionCache | None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Cross-attention: q of query, k and v of key/value; ``cache`` keeps k, v."""
        d, dkv = self.d_model, self.d_kv
        q = self._split(self._project(query, slice(0, d)))         # (B, h, Lq, d_k)
        if cache is not None and cache.k is not None and cache.v is not None:
            return q, cache.k, cache.v                             # from the first call
        if value is None:                                          # one matmul for both
            kv = self._project(key, slice(d, d + 2 * dkv))         # (B, Lk, 2 d_kv)
            k, v = kv.chunk(2, dim=-1)                             # (B, Lk, d_kv) x2
        else:
            k = self._project(key, slice(d, d + dkv))
            v = self._project(value, slice(d + dkv, d + 2 * dkv))
        k, v = self._split(k), self._split(v)                      # (B, h, Lk, d_k)
        if cache is not None:
            cache.k, cache.v = k, v
        return q, k, v

    # [book/13_modern.ipynb, cell 5d61bd9f]
    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None,
                need_weights: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(out (B, h, Lq, d_k), weights (B, h, Lq, Lk) or None) on one of the paths;
        k and v (B, n_kv_heads, Lk, d_k), each head shared by a group of query heads."""
        p = self.dropout if self.training else 0.0
        group = self.n_heads // self.n_kv_heads                # query heads per kv head
        if need_weights or self.record_weights:                # the explicit path
            if group > 1:                                      # (B, h, Lk, d_k)
                k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
            out, weights = _attention(q, k, v, mask, dropout_p=p)
            if self.record_weights:
                self.last_weights = weights.detach()
            return out, weights
        any_key = None
        if mask is not None:                     # rows with no key: 0, as in chapter 3
            any_key = mask.any(dim=-1, keepdim=True)           # (B|1, 1|h, Lq|1, 1)
            mask = mask | ~any_key
        gqa = {"enable_gqa": True} if group > 1 else {}    # kv heads shared in-kernel
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                             **gqa)
        if any_key is not None:
            out = out.masked_fill(~any_key, 0.0)
        return out, None                                       # (B, h, Lq, d_k)

    # [book/13_modern.ipynb, cell 0b605ca3]
    def forward(self, query: torch.Tensor, key: torch.Tensor | None = None,
                value: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                cache: AttentionCache | None = None,
                rotary: Callable[[torch.Tensor], torch.Tensor] | None = None
                ) -> torch.Tensor:
        return self._forward(query, key, value, mask, cache, False, rotary)[0]

    # [book/08_decoder.ipynb, cell 0ad20d4f]
    def forward_with_weights(
            self, query: torch.Tensor, key: torch.Tensor | None = None,
            value: torch.Tensor | None = None, mask: torch.Tensor | None = None,
            cache: AttentionCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(forward's output, the weights (B, n_heads, Lq, Lk)): the explicit path."""
        out, weights = self._forward(query, key, value, mask, cache, True)
        return out, cast(torch.Tensor, weights)

    # [book/13_modern.ipynb, cell 0b605ca3]
    def _forward(self, query: torch.Tensor, key: torch.Tensor | None,
                 value: torch.Tensor | None, mask: torch.Tensor | None,
                 cache: AttentionCache | None, need_weights: bool,
                 rotary: Callable[[torch.Tensor], torch.Tensor] | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor | None]:
        if rotary is not None and key is not None:
            raise ValueError("rotary is for self-attention (no key)")
        self._check(query, key, value, mask, cache)  # before the cache changes
        q, k, v = (self._self_qkv(query, cache, rotary) if key is None
                   else self._cross_qkv(query, key, value, cache))
        out, weights = self._attend(q, k, v, mask, need_weights)
        return self.out_proj(self._merge(out)), weights        # (B, Lq, d_model)

    # [book/08_decoder.ipynb, cell 0ad20d4f]
    def _check(self, query: torch.Tensor, key: torch.Tensor | None,
               value: torch.Tensor | None, mask: torch.Tensor | None,
               cache: AttentionCache | None) -> None:
        """A ValueError unless the shapes and the mask fit, cached keys included."""
        if key is None and value is not None:
            raise ValueError("value needs a key (cross-attention); give neither for "
                             "self-attention")
        for name, t in (("query", query), ("key", key), ("value", value)):
            if t is not None and (not isinstance(t, torch.Tensor) or t.dim() != 3
                                  or t.size(-1) != self.d_model):
                got = tuple(getattr(t, "shape", ()))
                raise ValueError(f"{name} must have shape (B, L, {self.d_model}), "
                                 f"got {got}")
        kv = query if key is None else key
        if kv.size(0) != query.size(0) or (
                value is not None and value.shape[:2] != kv.shape[:2]):
            raise ValueError(
                f"query {tuple(query.shape)}, key {tuple(kv.shape)} and value "
                f"{tuple((kv if value is None else value).shape)} must share the "
                "batch size, and key and value the length")
        Lk = kv.size(1)                                        # keys to attend to
        if cache is not None and cache.k is not None:
            Lk = cache.length + (Lk if key is None else 0)
        check_mask(mask, (query.size(0), self.n_heads, query.size(1), Lk))


__all__ = ['check_mask', 'attention', 'MultiHeadAttention']
