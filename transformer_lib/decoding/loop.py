"""Generated from book/10_training.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: cb35360cfff4c07c
# fmt: off

# [book/10_training.ipynb, cell 064351f4]
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch


# [book/10_training.ipynb, cell 2685f278]
def check_seq2seq(model: Any, members: Sequence[str], fields: Sequence[str]) -> None:
    """Raise TypeError, naming what is missing, unless ``model`` has the callable
    ``members`` and a ``config`` with the integer ``fields`` (duck typing: any class
    with them works, not only chapter 9's ``Transformer``)."""
    config = getattr(model, "config", None)
    missing = [name for name in members if not callable(getattr(model, name, None))]
    missing += [f"config.{name}" for name in fields
                if not isinstance(getattr(config, name, None), int)]
    if missing:
        wanted = [*members, *(f"config.{name}" for name in fields)]
        raise TypeError(f"model must have {', '.join(wanted)} (like chapter 9's "
                        f"Transformer); {type(model).__name__} lacks "
                        f"{', '.join(missing)}")


def forbid_specials(logits: torch.Tensor, config: Any) -> torch.Tensor:
    """Next-token logits (..., V) -> a float32 copy with pad and bos at -inf: the two
    tokens a decoder never writes (pad only fills, bos only starts)."""
    logits = logits.to(torch.float32, copy=True)
    logits[..., config.pad_id] = float("-inf")
    logits[..., config.bos_id] = float("-inf")
    return logits


def decode_loop(step: Callable[[torch.Tensor], torch.Tensor], ys: torch.Tensor,
                pad_id: int, eos_id: int, max_len: int,
                choose: Callable[[torch.Tensor], torch.Tensor] | None = None,
                limits: torch.Tensor | None = None) -> torch.Tensor:
    """The library's decoding loop, one output per sentence: prefixes ys (B, 1), bos,
    -> (B, T), T <= max_len + 1. At each step ``step(ys)`` gives the next token's
    logits (B, V) with pad and bos at -inf (:func:`forbid_specials`), and ``choose``
    turns them into tokens (B,) (default: the argmax, greedy decoding). A sentence is
    padded after its eos, or after ``limits[b]`` tokens when ``limits`` (B,) is given;
    the loop stops when every sentence has finished. One value per step is read back
    from the device: whether every sentence has finished."""
    finished = torch.zeros(ys.size(0), dtype=torch.bool, device=ys.device)   # (B,)
    for t in range(1, max_len + 1):                        # t tokens after this step
        logits = step(ys)                                                   # (B, V)
        nxt = logits.argmax(dim=-1) if choose is None else choose(logits)   # (B,)
        nxt = nxt.masked_fill(finished, pad_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)                       # (B, t + 1)
        finished |= nxt == eos_id
        if limits is not None:
            finished |= limits <= t                        # out of room
        if bool(finished.all()):                           # the step's one read-back
            break
    return ys


__all__ = []
