"""Generated from book/03_attention.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: d4c37d8245cfec7c
# fmt: off

# [book/03_attention.ipynb, cell 543feaed]
from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.checks import check_int, check_probability


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
    """Raise a ValueError unless ``mask`` is None or a boolean tensor that broadcasts to
    ``scores_shape``.

    ``scores_shape`` is the shape of the attention scores, (…, Lq, Lk), e.g.
    (B, h, Lq, Lk). True in the mask means "this query may attend to this key" (the
    convention of PyTorch's ``scaled_dot_product_attention``). Only the dtype and the
    shape are checked: no value is read, so there is no host-device synchronisation.
    """
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
    NaN, whatever PyTorch's ``scaled_dot_product_attention`` does in the installed
    version (recent ones return zeros too; older ones' math path returned NaN).
    ``dropout_p`` drops weights (training only: pass 0.0 at evaluation).
    Half-precision inputs have their softmax computed in float32.
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


# [book/03_attention.ipynb, cell ecf34695]
class MultiHeadAttention(nn.Module):
    """Multi-head attention with the weight layout of ``torch.nn.MultiheadAttention``.

    ``in_proj`` (an ``nn.Linear(d_model, 3·d_model)``) stacks W_q, W_k, W_v as rows,
    like ``nn.MultiheadAttention.in_proj_weight``: one fused matmul for self-attention,
    row slices of the same matrix for cross-attention. ``out_proj`` is W_o.

    ``forward(query (B, Lq, d), key (B, Lk, d), value (B, Lk, d), mask=None)`` returns
    (B, Lq, d). ``mask`` is boolean, True = may attend, broadcasting to
    (B, n_heads, Lq, Lk) (see ``transformer_lib.masks``).

    Per-head attention weights (B, n_heads, Lq, Lk), for plots:

    * ``out, weights = mha(q, k, v, mask, need_weights=True)``, or
    * set ``mha.record_weights = True``; every forward then stores them, detached, in
      ``mha.last_weights`` (this reaches the layers inside a whole model).

    Both use the explicit ``attention`` path; otherwise
    ``F.scaled_dot_product_attention`` runs (fused kernels on a GPU).

    ``cache`` (a dict, for incremental decoding, chapter 11): in self-attention
    (``query is key is value``) the new keys/values (B, h, t, d_k) are appended to
    ``cache["k"]``, ``cache["v"]``; in cross-attention they are computed on the first
    call, stored, and reused on later calls.

    ``n_kv_heads`` (default ``n_heads``): grouped-query attention (chapter 13). Keys and
    values get only ``n_kv_heads`` heads, each shared by ``n_heads // n_kv_heads``
    query heads; ``in_proj`` then has d_model + 2·n_kv_heads·d_k rows, and the cache
    holds (B, n_kv_heads, t, d_k). ``n_kv_heads=1`` is multi-query attention.
    ``forward(..., rotary=f)`` (self-attention only) applies ``f`` to the queries and
    the new keys, (B, heads, L, d_k), before the keys are cached (RoPE, chapter 13).
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0,
                 bias: bool = True, n_kv_heads: int | None = None):
        super().__init__()
        d_model = check_int(d_model, "d_model")
        n_heads = check_int(n_heads, "n_heads")
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by "
                             f"n_heads ({n_heads})")
        n_kv = n_heads if n_kv_heads is None else check_int(n_kv_heads, "n_kv_heads")
        if n_heads % n_kv != 0:
            raise ValueError(f"n_heads ({n_heads}) must be divisible by "
                             f"n_kv_heads ({n_kv})")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.n_kv_heads, self.d_kv = n_kv, n_kv * self.d_k         # K and V: d_kv wide
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
    def _split(self, x: torch.Tensor, n_heads: int | None = None) -> torch.Tensor:
        B, L, _ = x.shape                                              # (B, L, h·d_k)
        h = self.n_heads if n_heads is None else n_heads
        return x.view(B, L, h, self.d_k).transpose(1, 2)              # (B, h, L, d_k)

    def _merge(self, x: torch.Tensor) -> torch.Tensor:
        B, _, L, _ = x.shape                                           # (B, h, L, d_k)
        return x.transpose(1, 2).reshape(B, L, self.d_model)          # (B, L, d_model)

    def _project(self, x: torch.Tensor, part: slice) -> torch.Tensor:
        b = None if self.in_proj.bias is None else self.in_proj.bias[part]
        return F.linear(x, self.in_proj.weight[part], b)              # rows `part`

    # [book/03_attention.ipynb, cell a879aff7]
    def _qkv(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
             cache: dict | None, rotary: Callable | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, h, Lq, d_k), k and v (B, h_kv, Lk, d_k); read from or added to
        ``cache``. ``rotary`` rotates q and the new k (self-attention)."""
        d, dkv, h_kv = self.d_model, self.d_kv, self.n_kv_heads
        if query is key and key is value:                      # self-attention
            # one fused matmul: (B, L, d), (B, L, d_kv) x2
            q, k, v = self.in_proj(query).split([d, dkv, dkv], dim=-1)
            q = self._split(q)                                 # (B, h, L, d_k)
            k, v = self._split(k, h_kv), self._split(v, h_kv)  # (B, h_kv, L, d_k)
            if rotary is not None:                             # at their own positions
                q, k = rotary(q), rotary(k)
            if cache is not None:
                if "k" in cache:                               # earlier positions
                    k = torch.cat([cache["k"], k], dim=2)      # (B, h_kv, t + L, d_k)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
        else:                                                  # cross-attention
            q = self._split(self._project(query, slice(0, d)))  # (B, h, Lq, d_k)
            if cache is not None and "k" in cache:
                k, v = cache["k"], cache["v"]                  # from the first call
            else:
                if key is value:
                    kv = self._project(key, slice(d, d + 2 * dkv))  # (B, Lk, 2 d_kv)
                    k, v = kv.chunk(2, dim=-1)                 # (B, Lk, d_kv) x2
                else:
                    k = self._project(key, slice(d, d + dkv))
                    v = self._project(value, slice(d + dkv, d + 2 * dkv))
                k, v = self._split(k, h_kv), self._split(v, h_kv)  # (B, h_kv, Lk, d_k)
                if cache is not None:
                    cache["k"], cache["v"] = k, v
        return q, k, v

    # [book/03_attention.ipynb, cell 14328a87]
    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                mask: torch.Tensor | None,
                need_weights: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(out (B, h, Lq, d_k), weights (B, h, Lq, Lk) or None) on one of the paths;
        k and v (B, h_kv, Lk, d_k)."""
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
        if mask is not None:
            # rows with no permitted key: give the kernel a harmless row and zero the
            # output after, so the result is 0 (not NaN) whatever the backend does
            any_key = mask.any(dim=-1, keepdim=True)           # (B|1, 1|h, Lq|1, 1)
            mask = mask | ~any_key
        gqa = {"enable_gqa": True} if group > 1 else {}    # kv heads shared in-kernel
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                             **gqa)
        if any_key is not None:
            out = out.masked_fill(~any_key, 0.0)
        return out, None                                       # (B, h, Lq, d_k)

    def forward(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                mask: torch.Tensor | None = None, need_weights: bool = False,
                cache: dict | None = None, rotary: Callable | None = None):
        for name, t in (("query", query), ("key", key), ("value", value)):
            if (not isinstance(t, torch.Tensor) or t.dim() != 3
                    or t.size(-1) != self.d_model):
                got = tuple(getattr(t, "shape", ()))
                raise ValueError(f"{name} must have shape (B, L, {self.d_model}), "
                                 f"got {got}")
        if key.shape[:2] != value.shape[:2] or key.size(0) != query.size(0):
            raise ValueError(
                f"query {tuple(query.shape)}, key {tuple(key.shape)} and value "
                f"{tuple(value.shape)} must share the batch size, and key and value "
                "the length")
        Lk = key.size(1)                                       # keys to attend to
        is_self = query is key and key is value
        if rotary is not None and not is_self:
            raise ValueError("rotary is for self-attention (query is key is value)")
        if cache is not None and "k" in cache:
            Lk = cache["k"].size(2) + (Lk if is_self else 0)
        # before the cache changes: a bad mask leaves it as it was
        check_mask(mask, (query.size(0), self.n_heads, query.size(1), Lk))
        q, k, v = self._qkv(query, key, value, cache, rotary)  # (B, h|h_kv, L, d_k)
        out, weights = self._attend(q, k, v, mask, need_weights)
        out = self.out_proj(self._merge(out))                  # (B, Lq, d_model)
        return (out, weights) if need_weights else out


__all__ = ['check_mask', 'attention', 'MultiHeadAttention']
