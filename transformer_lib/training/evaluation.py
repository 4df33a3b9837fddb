"""Generated from book/10_training.ipynb: edit the notebook, not this file.
Extended by book/10c_training_plumbing.ipynb.

Regenerate with ``python tools/export.py``."""
# digest: 181c6756d1755252
# fmt: off

# [book/10_training.ipynb, cell 11bd0057]
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.masks import padding_mask
from transformer_lib.decoding.loop import check_seq2seq, decode_loop, forbid_specials
from transformer_lib.training.batching import Batch
from transformer_lib.training.distributed import unwrap_model
from transformer_lib.precision import amp_dtype


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
