"""Generated from book/10_training.ipynb: edit the notebook, not this file.
Extended by book/10c_training_plumbing.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: 4bcf44170902ff48
# fmt: off

# [book/10_training.ipynb, cell 11bd0057]
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.masks import padding_mask
from transformer_lib.training.batching import Batch
from transformer_lib.training.distributed import unwrap_model
from transformer_lib.training.precision import amp_dtype


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


# [book/10_training.ipynb, cell d66d87d4]
@torch.no_grad()
def _greedy_no_cache(model: Any, src: torch.Tensor, steps: int) -> torch.Tensor:
    """Greedy decoding with :func:`decode_loop`, the decoder re-reading the whole prefix
    at every step (no cache; chapter 11 adds one). -> (B, <= steps) ids after bos."""
    c = model.config
    src_mask = padding_mask(src, c.pad_id)                          # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                            # (B, S, d_model)

    def step(ys: torch.Tensor) -> torch.Tensor:                     # (B, t) -> (B, V)
        return forbid_specials(model.decode(ys, memory, src_mask)[:, -1], c)

    ys = torch.full((src.size(0), 1), c.bos_id, dtype=torch.long, device=src.device)
    return decode_loop(step, ys, c.pad_id, c.eos_id, steps)[:, 1:]


# [book/10_training.ipynb, cell ba93dd88]
@torch.no_grad()
def exact_match(model: nn.Module, loader: Iterable[Batch],
                method: str = "greedy") -> float:
    """The fraction of target sequences the model gets entirely right, eos included.

    ``method="greedy"``: the model writes each target itself, one token at a time from
    bos, choosing the most probable token (what it will do at inference).
    ``method="teacher"``: one teacher-forced pass, every position predicted from the
    true prefix. Either way pad and bos are never chosen. The two give the same number
    (up to ties between logits): until its first mistake greedy decoding reads the true
    prefix, so it makes a mistake exactly where the teacher-forced pass makes its first
    one. ``"teacher"`` is the fast way to compute it. The model is put in eval mode and
    restored afterwards.
    """
    if method not in ("greedy", "teacher"):
        raise ValueError(f"method must be 'greedy' or 'teacher', got {method!r}")
    net = unwrap_model(model)
    greedy = method == "greedy"
    check_seq2seq(net, ("encode", "decode") if greedy else (),
                  ("pad_id", "bos_id", "eos_id") if greedy else ("pad_id", "bos_id"))
    config: Any = net.config                        # checked: it has the ids
    pad = config.pad_id
    device = next(net.parameters()).device
    was_training = net.training
    net.eval()
    right = torch.zeros((), dtype=torch.long, device=device)
    total = 0
    try:
        for batch in loader:
            src, tgt_in, tgt_out = Batch(*batch).to(device)
            T = tgt_out.size(1)
            if method == "teacher":
                logits = forbid_specials(net(src, tgt_in), config)      # (B, T, V)
                pred = logits.argmax(-1)                            # (B, T)
            else:
                pred = _greedy_no_cache(net, src, T)                # (B, <=T)
                pred = F.pad(pred, (0, T - pred.size(1)), value=pad)
            real = tgt_out != pad
            right += ((pred == tgt_out) | ~real).all(dim=1).sum()
            total += tgt_out.size(0)
    finally:
        net.train(was_training)
    return int(right) / max(total, 1)


# [book/10c_training_plumbing.ipynb, cell 432ace5d]
@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable[Batch], loss_fn: Callable,
             amp: str | None = None) -> float:
    """The loss over all the real target tokens of ``loader``: ``loss_fn(logits,
    tgt_out)`` (a mean over a batch's real target tokens) weighted by each batch's count
    of them, summed over every process under DDP."""
    dtype = amp_dtype(amp)
    net = unwrap_model(model)
    device = next(net.parameters()).device
    pad = getattr(getattr(net, "config", None), "pad_id", 0)
    was_training = net.training
    net.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)  # loss * tokens, tokens
    try:
        for batch in loader:
            src, tgt_in, tgt_out = Batch(*batch).to(device)
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                logits = net(src, tgt_in)
            n = (tgt_out != pad).sum()
            loss = loss_fn(logits.float(), tgt_out).double()
            total += torch.stack([loss * n, n.double()])
    finally:
        net.train(was_training)
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.all_reduce(total)
    return float(total[0] / total[1].clamp(min=1))


__all__ = ['exact_match', 'evaluate']
