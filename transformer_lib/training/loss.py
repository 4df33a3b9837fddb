"""Generated from book/10_training.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: d4b71108f508912a
# fmt: off

# [book/10_training.ipynb, cell 6b854d9b]
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.checks import check_float, check_int, check_token_ids


# [book/10_training.ipynb, cell 01768ec2]
class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against a smoothed target: the true token gets ``1 - smoothing``,
    every other token except ``pad_id`` (and ``bos_id``, if given) gets an equal share
    of ``smoothing``, the pad (and bos) token gets 0. Positions whose target is
    ``pad_id`` are skipped. By default (``bos_id=None``) the share is
    ``smoothing / (V - 2)``: the Annotated Transformer's definition. ``bos_id=1`` also
    gives the begin-of-sentence token no mass (it is never a target: the decoders
    start from it and never emit it), ``smoothing / (V - 3)`` each. With
    ``pad_id=None`` there is no pad token: every position counts.

    forward(logits (N, V) or (B, T, V), target (N,) or (B, T)) -> the mean loss over the
    non-pad targets (``reduction="mean"``), or their sum (``reduction="sum"``). A batch
    with no real target gives 0, not NaN. The loss never goes below :meth:`floor`, the
    entropy of the smoothed target.

    PyTorch's ``F.cross_entropy(logits, target, label_smoothing=s,
    ignore_index=pad_id)`` spreads ``s`` over all V tokens instead (the true one and the
    pad one included), tensor2tensor and fairseq over the V - 1 others (pad included).
    """

    def __init__(self, smoothing: float = 0.1, pad_id: int | None = 0,
                 reduction: str = "mean", bos_id: int | None = None):
        super().__init__()
        self.smoothing = check_float(smoothing, "smoothing", 0.0, 1.0, high_open=True)
        self.pad_id = None if pad_id is None else check_int(pad_id, "pad_id", minimum=0)
        self.bos_id = None if bos_id is None else check_int(bos_id, "bos_id", minimum=0)
        if self.bos_id is not None and self.bos_id == self.pad_id:
            raise ValueError(f"bos_id and pad_id must differ, got {bos_id} for both")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        self.reduction = reduction

    def _others(self, vocab_size: int) -> int:
        """How many tokens share the smoothing mass: all but the true one, the pad one
        and (if given) the bos one."""
        return (vocab_size - 1 - (self.pad_id is not None)
                - (self.bos_id is not None))

    def floor(self, vocab_size: int) -> float:
        """The smallest value the loss can take: the entropy of the smoothed target
        (nats)."""
        s, k = self.smoothing, self._others(vocab_size)
        # log(s) - log(k), not log(s / k): a tiny s / k would underflow to 0
        return -(1 - s) * math.log(1 - s) - (
            s * (math.log(s) - math.log(k)) if s > 0 else 0.0)

    # [book/10_training.ipynb, cell 195829bb]
    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if (not isinstance(logits, torch.Tensor) or not logits.dtype.is_floating_point
                or logits.dim() < 2):
            raise ValueError("logits must be a floating-point tensor (N, V) or "
                             "(B, T, V)")
        V = logits.size(-1)
        check_token_ids(target, V, "target")
        if target.shape != logits.shape[:-1]:
            raise ValueError(f"target shape {tuple(target.shape)} must equal logits "
                             f"shape without its last dimension, "
                             f"{tuple(logits.shape[:-1])}")
        for name, tok in (("pad_id", self.pad_id), ("bos_id", self.bos_id)):
            if tok is not None and tok >= V:
                raise ValueError(f"{name}={tok} is not a token of a vocabulary of {V}")
        if self.smoothing > 0 and self._others(V) < 1:
            raise ValueError("label smoothing needs at least one token besides the "
                             f"target and pad, got V={V}")
        logits, target = logits.reshape(-1, V), target.reshape(-1)   # (N, V), (N,)
        logp = F.log_softmax(logits.float(), dim=-1)                 # (N, V), no log(0)
        true = logp.gather(1, target[:, None]).squeeze(1)            # (N,) log p(y)
        loss = -(1.0 - self.smoothing) * true
        if self.smoothing > 0:
            rest = logp.sum(-1) - true                               # (N,) other tokens
            if self.pad_id is not None:
                rest = rest - logp[:, self.pad_id]
            share: float | torch.Tensor = self.smoothing / self._others(V)
            if self.bos_id is not None:        # a bos target (a data error) keeps its
                is_bos = target == self.bos_id     # own mass: V - 2 others then
                rest = rest - logp[:, self.bos_id] * ~is_bos
                share = torch.where(is_bos, self.smoothing / (self._others(V) + 1),
                                    share)
            loss = loss - share * rest
        if self.pad_id is None:
            keep = torch.ones_like(target, dtype=torch.bool)
        else:
            keep = target != self.pad_id
        total = (loss * keep).sum()                                  # masked, never NaN
        if self.reduction == "sum":
            return total
        return total / keep.sum().clamp(min=1)


__all__ = ['LabelSmoothingLoss']
