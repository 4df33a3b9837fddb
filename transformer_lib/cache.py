"""Generated from book/08_decoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: c38e07459f8c01d5
# fmt: off

# [book/08_decoder.ipynb, cell 1692eaa0]
from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch

from transformer_lib.checks import check_int


# [book/08_decoder.ipynb, cell 09deaa4b]
@dataclass
class AttentionCache:
    """One attention block's keys and values, kept between the steps of incremental
    decoding: k and v (B, heads, t, d_k), None before the first call. :meth:`append`
    concatenates (``torch.cat``), unless ``reserve(n)`` made the cache static:
    (B, heads, n, d_k) buffers written in place, k and v views of the first t."""

    k: torch.Tensor | None = None
    v: torch.Tensor | None = None
    capacity: int | None = None            # static: room for this many positions
    _room: tuple[torch.Tensor, torch.Tensor] | None = field(default=None, init=False)

    @property
    def length(self) -> int:                   # how many key positions are cached
        return 0 if self.k is None else self.k.size(2)

    def reserve(self, capacity: int) -> None:
        """Make the (empty) cache static, with room for ``capacity`` positions."""
        if self.k is not None:
            raise RuntimeError("reserve an AttentionCache before its first call")
        self.capacity = check_int(capacity, "capacity")

    def append(self, k: torch.Tensor,
               v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Add the keys and values (B, heads, L, d_k) of L new positions; -> those of
        every cached position (B, heads, t + L, d_k)."""
        if self.capacity is None:                  # grow: copy the old positions too
            if self.k is not None and self.v is not None:
                k, v = torch.cat([self.k, k], dim=2), torch.cat([self.v, v], dim=2)
        else:
            k, v = self._write(k, v, self.length)
        self.k, self.v = k, v
        return k, v

    def _write(self, k: torch.Tensor, v: torch.Tensor,
               start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Static: write k, v into the buffers at ``start``; -> the filled views."""
        end, room = start + k.size(2), cast(int, self.capacity)
        if end > room:
            raise ValueError(f"the cache has room for {room} positions, got {end}")
        if self._room is None or self._room[0].size(0) != k.size(0):
            shape = (*k.shape[:2], room, k.size(3))
            self._room = k.new_empty(shape), v.new_empty(shape)
        room_k, room_v = self._room
        room_k[:, :, start:end], room_v[:, :, start:end] = k, v      # in place
        return room_k[:, :, :end], room_v[:, :, :end]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows ``index`` (in that order): the beams that survive a step."""
        if self.k is not None and self.v is not None:
            index = index.to(self.k.device)
            k, v = self.k.index_select(0, index), self.v.index_select(0, index)
            self.k, self.v = (k, v) if self.capacity is None else self._write(k, v, 0)


# [book/08_decoder.ipynb, cell 8b04d43c]
@dataclass
class LayerCache:
    """One decoder layer's cached keys and values: its self-attention's (one position
    more at every step) and its cross-attention's (the encoder output's, computed at
    the first step); ``cross_attn`` is None in a model without cross-attention."""

    self_attn: AttentionCache = field(default_factory=AttentionCache)
    cross_attn: AttentionCache | None = field(default_factory=AttentionCache)


class KVCache:
    """The keys and values every decoder layer has computed so far, kept between steps:
    ``layers[i]`` is layer i's :class:`LayerCache`, (B, h, t, d_k) tensors.
    ``cross=False`` keeps self-attention caches only (a decoder-only model, chapter
    13). ``reserve(n)`` makes the self-attention caches static, with room for n
    positions (:meth:`AttentionCache.reserve`). Chapter 11 builds decoding on it.
    """

    def __init__(self, n_layers: int, cross: bool = True):
        n_layers = check_int(n_layers, "n_layers")
        self.layers = [LayerCache(AttentionCache(), AttentionCache() if cross else None)
                       for _ in range(n_layers)]

    @property
    def length(self) -> int:
        """How many target positions are cached."""
        return self.layers[0].self_attn.length

    def reserve(self, max_len: int) -> None:
        """Preallocate every self-attention cache for ``max_len`` target positions, to
        be written in place (call it before the first step)."""
        for layer in self.layers:
            layer.self_attn.reserve(max_len)

    def reorder(self, index: torch.Tensor, cross: bool = True) -> None:
        """Keep batch rows ``index`` (in that order) of every cached tensor: the beams
        that survive a step. ``cross=False`` leaves the cross-attention caches as they
        are, which is right when each new row comes from a row of the same source
        sentence (beam search after its first step): those rows hold the same keys."""
        if (not isinstance(index, torch.Tensor) or index.dim() != 1
                or index.dtype.is_floating_point):
            raise ValueError("index must be a 1-D integer tensor of batch rows")
        for layer in self.layers:
            layer.self_attn.reorder(index)
            if cross and layer.cross_attn is not None:
                layer.cross_attn.reorder(index)


__all__ = ['AttentionCache', 'LayerCache', 'KVCache']
