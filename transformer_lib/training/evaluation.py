"""Generated from book/10_training.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 01fbf4f2563ac9e1
# fmt: off

# [book/10_training.ipynb, cell 11bd0057]
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.masks import padding_mask
from transformer_lib.training.batching import Batch
from transformer_lib.training.checkpoint import unwrap_model


# [book/10_training.ipynb, cell 2685f278]
def _seq2seq(model: nn.Module, greedy: bool) -> Any:
    """``model`` (or the model inside a DDP wrapper), checked for what exact_match uses:
    any class with these attributes works, not only chapter 9's ``Transformer``."""
    net = unwrap_model(model)
    config = getattr(net, "config", None)
    needs = ["config.pad_id"]
    if greedy:
        needs += ["config.bos_id", "config.eos_id", "encode", "decode"]
    missing = [name for name in needs if not hasattr(
        config if name.startswith("config.") else net, name.removeprefix("config."))]
    if missing:
        raise TypeError(f"model must have {', '.join(missing)} (like chapter 9's "
                        f"Transformer), got {type(net).__name__}")
    return net


@torch.no_grad()
def _greedy_no_cache(model: Any, src: torch.Tensor, steps: int) -> torch.Tensor:
    """A minimal batched greedy loop (no cache: each step re-reads the whole prefix). ->
    (B, steps) ids after bos; rows that have produced eos are padded. Chapter 11 builds
    the real one."""
    c = model.config
    src_mask = padding_mask(src, c.pad_id)                          # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                            # (B, S, d_model)
    ys = torch.full((src.size(0), 1), c.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(steps):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)  # (B,)
        nxt = nxt.masked_fill(done, c.pad_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == c.eos_id
        if bool(done.all()):                                        # one sync per token
            break
    return ys[:, 1:]


# [book/10_training.ipynb, cell ba93dd88]
@torch.no_grad()
def exact_match(model: nn.Module, loader: Iterable[Batch],
                method: str = "greedy") -> float:
    """The fraction of target sequences the model gets entirely right, eos included.

    ``method="greedy"``: the model writes each target itself, one token at a time from
    bos, choosing the most probable token (what it will do at inference).
    ``method="teacher"``: one teacher-forced pass, every position predicted from the
    true prefix. The two give the same number (up to ties between logits): until its
    first mistake greedy decoding reads the true prefix, so it makes a mistake exactly
    where the teacher-forced pass makes its first one. ``"teacher"`` is the fast way to
    compute it. The model is put in eval mode and restored afterwards.
    """
    if method not in ("greedy", "teacher"):
        raise ValueError(f"method must be 'greedy' or 'teacher', got {method!r}")
    net = _seq2seq(model, greedy=method == "greedy")
    pad = net.config.pad_id
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
                pred = net(src, tgt_in).argmax(-1)                  # (B, T)
            else:
                pred = _greedy_no_cache(net, src, T)                # (B, <=T)
                pred = F.pad(pred, (0, T - pred.size(1)), value=pad)
            real = tgt_out != pad
            right += ((pred == tgt_out) | ~real).all(dim=1).sum()
            total += tgt_out.size(0)
    finally:
        net.train(was_training)
    return int(right) / max(total, 1)


# [book/10_training.ipynb, cell ca107e8d]
_AMP = {None: None, "none": None, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
        "fp16": torch.float16, "float16": torch.float16}


def amp_dtype(amp: str | None) -> torch.dtype | None:
    """The 16-bit dtype that an ``amp`` argument names: ``None`` or ``"none"`` -> None
    (no autocast, float32), ``"bf16"`` -> torch.bfloat16, ``"fp16"`` ->
    torch.float16."""
    if amp not in _AMP:
        raise ValueError(f"amp must be one of None, 'bf16', 'fp16', got {amp!r}")
    return _AMP[amp]


# [book/10_training.ipynb, cell 432ace5d]
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


__all__ = ['exact_match', 'amp_dtype', 'evaluate']
