"""Generated from book/10_training.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 5cf1b36148ef9c94
# fmt: off

# [book/10_training.ipynb, cell 7]
from __future__ import annotations

import math
import os
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from transformer_lib.masks import padding_mask


# [book/10_training.ipynb, cell 9]
def shift_right(tgt: torch.Tensor, bos_id: int) -> torch.Tensor:
    """The decoder's input under teacher forcing: ``bos_id`` in front, the last column dropped.

    ``tgt`` (B, T) is the target the decoder must produce, ``[y1 .. yn eos pad ..]``; the result (B, T) is
    ``[bos y1 .. yn ..]``: at position t the decoder reads the true tokens before t and predicts ``tgt[:, t]``.
    """
    if not isinstance(tgt, torch.Tensor) or tgt.dim() != 2:
        raise ValueError(f"tgt must be a (B, T) tensor of token ids, got "
                         f"{tuple(tgt.shape) if isinstance(tgt, torch.Tensor) else type(tgt).__name__}")
    if tgt.dtype.is_floating_point or tgt.dtype == torch.bool:
        raise ValueError(f"tgt must hold integer token ids, got dtype {tgt.dtype}")
    bos = torch.full_like(tgt[:, :1], bos_id)
    return torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, T)


# [book/10_training.ipynb, cell 14]
class LabelSmoothingLoss(nn.Module):
    """Cross-entropy against a smoothed target: the true token gets ``1 - smoothing``, every other token
    except ``pad_id`` gets ``smoothing / (V - 2)``, the pad token gets 0 (the sources' and the Annotated
    Transformer's definition). Positions whose target is ``pad_id`` are skipped. With ``pad_id=None``
    there is no pad token: every position counts and the V - 1 other tokens share ``smoothing``.

    forward(logits (N, V) or (B, T, V), target (N,) or (B, T)) -> the mean loss over the non-pad targets
    (``reduction="mean"``), or their sum (``reduction="sum"``). A batch with no real target gives 0, not NaN.
    The loss never goes below :meth:`floor`, the entropy of the smoothed target.

    PyTorch's ``F.cross_entropy(logits, target, label_smoothing=s, ignore_index=pad_id)`` spreads ``s`` over
    all V tokens instead (the true one and the pad one included): a slightly different target.
    """

    def __init__(self, smoothing: float = 0.1, pad_id: int | None = 0, reduction: str = "mean"):
        super().__init__()
        if not isinstance(smoothing, (int, float)) or not 0.0 <= smoothing < 1.0:
            raise ValueError(f"smoothing must be a float in [0, 1), got {smoothing!r}")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
        self.smoothing, self.pad_id, self.reduction = float(smoothing), pad_id, reduction

    def _others(self, vocab_size: int) -> int:
        """How many tokens share the smoothing mass: all but the true one and the pad one."""
        return vocab_size - 1 - (self.pad_id is not None)

    def floor(self, vocab_size: int) -> float:
        """The smallest value the loss can take: the entropy of the smoothed target distribution (nats)."""
        s, k = self.smoothing, self._others(vocab_size)
        return -(1 - s) * math.log(1 - s) - (s * math.log(s / k) if s > 0 else 0.0)

    def forward(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if not isinstance(logits, torch.Tensor) or not logits.dtype.is_floating_point or logits.dim() < 2:
            raise ValueError("logits must be a floating-point tensor (N, V) or (B, T, V)")
        if not isinstance(target, torch.Tensor) or target.dtype.is_floating_point or target.dtype == torch.bool:
            raise ValueError("target must be an integer tensor of token ids")
        if target.shape != logits.shape[:-1]:
            raise ValueError(f"target shape {tuple(target.shape)} must equal logits shape without the last "
                             f"dimension, {tuple(logits.shape[:-1])}")
        V = logits.size(-1)
        if self.pad_id is not None and not 0 <= self.pad_id < V:
            raise ValueError(f"pad_id={self.pad_id} is not a token of a vocabulary of {V}")
        if self.smoothing > 0 and self._others(V) < 1:
            raise ValueError(f"label smoothing needs at least one token besides the target and pad, got V={V}")
        logits, target = logits.reshape(-1, V), target.reshape(-1)        # (N, V), (N,)
        if target.numel() and (target.min() < 0 or target.max() >= V):
            raise ValueError(f"target holds ids outside [0, {V})")
        logp = F.log_softmax(logits.float(), dim=-1)                      # (N, V), finite: no log(0)
        true = logp.gather(1, target[:, None]).squeeze(1)                 # (N,) log p(target)
        loss = -(1.0 - self.smoothing) * true
        if self.smoothing > 0:
            rest = logp.sum(-1) - true                                    # (N,) sum over the other tokens
            if self.pad_id is not None:
                rest = rest - logp[:, self.pad_id]
            loss = loss - self.smoothing / self._others(V) * rest
        keep = torch.ones_like(target, dtype=torch.bool) if self.pad_id is None else target != self.pad_id
        total = (loss * keep).sum()                                       # masked, never NaN
        if self.reduction == "sum":
            return total
        return total / keep.sum().clamp(min=1)


# [book/10_training.ipynb, cell 23]
def noam_lambda(d_model: int, warmup_steps: int, factor: float = 1.0) -> Callable[[int], float]:
    """The paper's learning rate as a function of LambdaLR's step counter, for
    ``torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(d_model, warmup))`` with the optimizer's
    ``lr=1.0`` (LambdaLR multiplies the optimizer's lr by this value).

    LambdaLR's counter ``step`` is the number of updates already made, so the update it sets the rate for is
    the paper's ``n = step + 1`` (the paper counts from 1)::

        rate(step) = factor * d_model**-0.5 * min(n**-0.5, n * warmup_steps**-1.5),   n = step + 1

    It is defined at step 0 (LambdaLR evaluates it there when it is built), rises linearly to its peak
    ``factor * (d_model * warmup_steps)**-0.5`` at ``step = warmup_steps - 1`` and then decays as n**-0.5.
    Call ``optimizer.step()`` before ``scheduler.step()``.
    """
    for name, value in (("d_model", d_model), ("warmup_steps", warmup_steps)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not isinstance(factor, (int, float)) or factor <= 0:
        raise ValueError(f"factor must be a positive number, got {factor!r}")

    def rate(step: int) -> float:
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        n = step + 1
        return factor * d_model ** -0.5 * min(n ** -0.5, n * warmup_steps ** -1.5)

    return rate


# [book/10_training.ipynb, cell 31]
def _as_ids(seq, name: str) -> torch.Tensor:
    t = torch.as_tensor(seq)
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of token ids, got shape {tuple(t.shape)}")
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {t.dtype}")
    return t.long()


class PairDataset(torch.utils.data.Dataset):
    """A list of (source ids, target ids) pairs, each a non-empty 1-D sequence of ints, without bos/eos
    (the collate function adds them). ``dataset[i]`` -> (src (S,), tgt (T,)) LongTensors.

    ``lengths`` gives each example's cost in padded positions, ``max(S, T + 1)`` (the decoder reads and
    writes T + 1 tokens: bos or eos added), for :class:`TokenBucketSampler`.
    """

    def __init__(self, pairs: Iterable[tuple[Sequence[int], Sequence[int]]]):
        self.pairs = []
        for i, pair in enumerate(pairs):
            if len(pair) != 2:
                raise ValueError(f"pairs[{i}] must be a (source ids, target ids) pair")
            self.pairs.append((_as_ids(pair[0], f"pairs[{i}][0]"), _as_ids(pair[1], f"pairs[{i}][1]")))
        self.lengths = [max(len(s), len(t) + 1) for s, t in self.pairs]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pairs[i]


class Batch(NamedTuple):
    """A padded batch: ``src`` (B, S); ``tgt_in`` (B, T) = [bos y1 .. yn]; ``tgt_out`` (B, T) = [y1 .. yn eos]."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def to(self, device, non_blocking: bool = False) -> "Batch":
        return Batch(*(t.to(device, non_blocking=non_blocking) for t in self))

    def n_tokens(self, pad_id: int = 0) -> int:
        """Real (non-pad) target tokens: what the loss averages over."""
        return int((self.tgt_out != pad_id).sum())


class PadCollate:
    """``collate_fn`` for a DataLoader over :class:`PairDataset`: pads a list of (src, tgt) pairs into a
    :class:`Batch`. ``tgt_out`` is tgt + [eos], ``tgt_in`` is ``shift_right(tgt_out, bos_id)``; the source is
    left as given (add ``src_eos=True`` to end every source with eos). Pads with ``pad_id``."""

    def __init__(self, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2, src_eos: bool = False):
        self.pad_id, self.bos_id, self.eos_id, self.src_eos = pad_id, bos_id, eos_id, src_eos

    def __call__(self, examples: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Batch:
        if len(examples) == 0:
            raise ValueError("examples must hold at least one (src, tgt) pair")
        pad = torch.nn.utils.rnn.pad_sequence
        srcs = [torch.as_tensor(s).long() for s, _ in examples]
        if self.src_eos:
            srcs = [torch.cat([s, s.new_tensor([self.eos_id])]) for s in srcs]
        eos = torch.tensor([self.eos_id])
        outs = [torch.cat([torch.as_tensor(t).long(), eos]) for _, t in examples]
        src = pad(srcs, batch_first=True, padding_value=self.pad_id)          # (B, S)
        tgt_out = pad(outs, batch_first=True, padding_value=self.pad_id)      # (B, T)
        tgt_in = shift_right(tgt_out, self.bos_id)                            # (B, T)
        return Batch(src, tgt_in, tgt_out)


# [book/10_training.ipynb, cell 33]
class TokenBucketSampler(torch.utils.data.Sampler):
    """A batch sampler (``DataLoader(dataset, batch_sampler=...)``) that groups examples of similar length
    so that each batch holds at most ``max_tokens`` padded positions: ``len(batch) * max(lengths in batch)
    <= max_tokens``. An example longer than ``max_tokens`` makes a batch of its own.

    Each epoch: shuffle the indices (seeded by ``seed + epoch``; call :meth:`set_epoch` like with
    ``DistributedSampler``), cut them into pools of ``pool_size`` examples, sort each pool by length, fill
    batches greedily, shuffle the batches. With ``shuffle=False`` the whole dataset is one sorted pool.

    Across processes (``num_replicas`` > 1, taken from ``torch.distributed`` when it is initialised), rank r
    takes batches r, r + num_replicas, ...; every rank gets the same number of batches (DDP needs that):
    with ``drop_last=False`` the first batches are repeated to fill up, with ``drop_last=True`` the extra
    ones are dropped. With one replica every example appears exactly once per epoch.
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, shuffle: bool = True, seed: int = 0,
                 pool_size: int | None = None, num_replicas: int | None = None, rank: int | None = None,
                 drop_last: bool = False):
        if not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive int, got {max_tokens!r}")
        self.lengths = [int(n) for n in lengths]
        if not self.lengths:
            raise ValueError("lengths must not be empty")
        if min(self.lengths) < 1:
            raise ValueError("lengths must all be >= 1")
        if num_replicas is None:
            dist = torch.distributed
            num_replicas = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if rank is None:
            dist = torch.distributed
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas), got rank={rank}, num_replicas={num_replicas}")
        self.max_tokens, self.shuffle, self.seed = max_tokens, shuffle, seed
        self.pool_size = pool_size or max(1, 50 * max_tokens // max(1, round(np.mean(self.lengths))))
        self.num_replicas, self.rank, self.drop_last = num_replicas, rank, drop_last
        self.epoch = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def _all_batches(self) -> list[list[int]]:
        if self._cache is not None and self._cache[0] == self.epoch:
            return self._cache[1]
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        n = len(self.lengths)
        order = torch.randperm(n, generator=g).tolist() if self.shuffle else list(range(n))
        pool = self.pool_size if self.shuffle else n
        batches: list[list[int]] = []
        for start in range(0, n, pool):
            chunk = sorted(order[start:start + pool], key=lambda i: self.lengths[i])
            batch, longest = [], 0
            for i in chunk:
                new_longest = max(longest, self.lengths[i])
                if batch and new_longest * (len(batch) + 1) > self.max_tokens:
                    batches.append(batch)
                    batch, new_longest = [], self.lengths[i]
                batch.append(i)
                longest = new_longest
            if batch:
                batches.append(batch)
        if self.shuffle:
            batches = [batches[i] for i in torch.randperm(len(batches), generator=g).tolist()]
        self._cache = (self.epoch, batches)
        return batches

    def _my_batches(self) -> list[list[int]]:
        batches = self._all_batches()
        R = self.num_replicas
        if R > 1:
            if self.drop_last:
                batches = batches[: len(batches) - len(batches) % R]
            elif len(batches) % R:
                need = R - len(batches) % R
                batches = batches + (batches * (need // len(batches) + 1))[:need]
        return batches[self.rank::R]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self._my_batches())

    def __len__(self) -> int:
        return len(self._my_batches())


# [book/10_training.ipynb, cell 34]
def padding_fraction(loader: Iterable[Batch], pad_id: int = 0) -> float:
    """The share of pad positions in the source and target tensors of all the batches of ``loader``."""
    pads = total = 0
    for batch in loader:
        for t in (batch.src, batch.tgt_out):
            pads += int((t == pad_id).sum())
            total += t.numel()
    return pads / max(total, 1)


# [book/10_training.ipynb, cell 38]
def toy_task(kind: str, n: int, vocab_size: int = 13, min_len: int = 3, max_len: int = 8, seed: int = 0,
             first_id: int = 3) -> list[tuple[list[int], list[int]]]:
    """``n`` (source, target) pairs of random token ids in ``[first_id, vocab_size)`` (ids below ``first_id``
    are kept for pad, bos and eos), of lengths ``min_len`` to ``max_len``. ``kind``: ``"copy"`` (target =
    source), ``"reverse"`` (target = reversed source) or ``"sort"`` (target = sorted source). Deterministic
    for a given ``seed``."""
    tasks = {"copy": lambda s: list(s), "reverse": lambda s: s[::-1], "sort": sorted}
    if kind not in tasks:
        raise ValueError(f"kind must be one of {sorted(tasks)}, got {kind!r}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not 1 <= min_len <= max_len:
        raise ValueError(f"need 1 <= min_len <= max_len, got min_len={min_len}, max_len={max_len}")
    if vocab_size <= first_id:
        raise ValueError(f"vocab_size must exceed first_id={first_id}, got {vocab_size}")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        src = [rng.randrange(first_id, vocab_size) for _ in range(rng.randint(min_len, max_len))]
        pairs.append((src, tasks[kind](src)))
    return pairs


def copy_task(n: int, **kwargs) -> list[tuple[list[int], list[int]]]:
    """``toy_task("copy", n, **kwargs)``: the target is the source."""
    return toy_task("copy", n, **kwargs)


def reverse_task(n: int, **kwargs) -> list[tuple[list[int], list[int]]]:
    """``toy_task("reverse", n, **kwargs)``: the target is the source reversed."""
    return toy_task("reverse", n, **kwargs)


# [book/10_training.ipynb, cell 40]
def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if hasattr(model, "module") and isinstance(model.module, nn.Module) else model


@torch.no_grad()
def _greedy_no_cache(model: nn.Module, src: torch.Tensor, steps: int) -> torch.Tensor:
    """A minimal batched greedy loop (no cache: each step re-reads the whole prefix). -> (B, steps) ids
    after bos; rows that have produced eos are padded. Chapter 11 builds the real one."""
    c = model.config
    src_mask = padding_mask(src, c.pad_id)                               # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                                 # (B, S, d_model)
    ys = torch.full((src.size(0), 1), c.bos_id, dtype=torch.long, device=src.device)
    done = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(steps):
        nxt = model.decode(ys, memory, src_mask)[:, -1].argmax(-1)       # (B,)
        nxt = nxt.masked_fill(done, c.pad_id)
        ys = torch.cat([ys, nxt[:, None]], dim=1)
        done |= nxt == c.eos_id
        if bool(done.all()):
            break
    return ys[:, 1:]


@torch.no_grad()
def exact_match(model: nn.Module, loader: Iterable[Batch], method: str = "greedy") -> float:
    """The fraction of target sequences the model gets entirely right, eos included.

    ``method="greedy"``: the model writes each target itself, one token at a time from bos, choosing the
    most probable token (what it will do at inference). ``method="teacher"``: one teacher-forced pass,
    every position predicted from the true prefix. The two give the same number (up to ties between
    logits): until its first mistake greedy decoding reads the true prefix, so it makes a mistake exactly
    where the teacher-forced pass makes its first one. ``"teacher"`` is the fast way to compute it.
    The model is put in eval mode and restored afterwards.
    """
    if method not in ("greedy", "teacher"):
        raise ValueError(f"method must be 'greedy' or 'teacher', got {method!r}")
    net = _unwrap(model)
    pad = net.config.pad_id
    device = next(net.parameters()).device
    was_training = net.training
    net.eval()
    right = total = 0
    try:
        for batch in loader:
            src, tgt_in, tgt_out = Batch(*batch).to(device)
            if method == "teacher":
                pred = net(src, tgt_in).argmax(-1)                          # (B, T)
            else:
                pred = _greedy_no_cache(net, src, tgt_out.size(1))          # (B, <=T)
                if pred.size(1) < tgt_out.size(1):
                    pred = F.pad(pred, (0, tgt_out.size(1) - pred.size(1)), value=pad)
            real = tgt_out != pad
            right += int(((pred == tgt_out) | ~real).all(dim=1).sum())
            total += tgt_out.size(0)
    finally:
        net.train(was_training)
    return right / max(total, 1)


# [book/10_training.ipynb, cell 42]
def _rng_state() -> dict:
    np_state = np.random.get_state()
    state = {
        "torch": torch.get_rng_state(),
        "python": random.getstate(),
        "numpy": (np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), int(np_state[2]),
                  int(np_state[3]), float(np_state[4])),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"].cpu())
    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
    if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def save_checkpoint(path: str | os.PathLike, model: nn.Module, optimizer=None, scheduler=None, scaler=None,
                    step: int = 0, **extra) -> None:
    """Write model, optimizer, scheduler and GradScaler states, the step, the RNG states (torch, CUDA,
    Python, NumPy), the model's config (when it has a ``config`` with ``to_dict``) and any ``extra`` plain
    values (numbers, strings, lists, dicts, tensors) to ``path`` with ``torch.save``, atomically (a
    temporary file, then a rename). Under DDP call it on one rank (``train`` uses rank 0)."""
    net = _unwrap(model)
    state = {
        "model": net.state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "scaler": scaler.state_dict() if scaler is not None else None,
        "step": int(step),
        "rng": _rng_state(),
        "config": net.config.to_dict() if hasattr(getattr(net, "config", None), "to_dict") else None,
        "extra": extra,
    }
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path: str | os.PathLike, model: nn.Module | None = None, optimizer=None, scheduler=None,
                    scaler=None, map_location="cpu", restore_rng: bool = False) -> dict:
    """Read a checkpoint written by :func:`save_checkpoint` with ``torch.load(weights_only=True)`` (plain
    tensors and containers only: no arbitrary object is unpickled), load the states into whichever of
    ``model``, ``optimizer``, ``scheduler``, ``scaler`` are given, restore the RNG states when
    ``restore_rng``, and return the whole checkpoint dict (``step``, ``config``, ``extra``, ...)."""
    state = torch.load(os.fspath(path), map_location=map_location, weights_only=True)
    if model is not None:
        _unwrap(model).load_state_dict(state["model"])
    for obj, key in ((optimizer, "optimizer"), (scheduler, "scheduler"), (scaler, "scaler")):
        if obj is not None:
            if state.get(key) is None:
                raise ValueError(f"the checkpoint {path} holds no {key} state")
            obj.load_state_dict(state[key])
    if restore_rng:
        _set_rng_state(state["rng"])
    return state


# [book/10_training.ipynb, cell 44]
def setup_distributed(backend: str | None = None) -> tuple[int, int, torch.device]:
    """Join the process group that ``torchrun`` describes in the environment (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT) and return (rank, world_size, device). The backend is nccl
    when CUDA is present (each process takes GPU LOCAL_RANK), gloo on the CPU. Without torchrun's
    variables it returns (0, 1, default device) and starts nothing."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return 0, 1, torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dist = torch.distributed
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if torch.cuda.is_available():
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend or ("nccl" if device.type == "cuda" else "gloo"))
    return dist.get_rank(), dist.get_world_size(), device


def cleanup_distributed() -> None:
    """Leave the process group, if one was started."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _dist_on() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _rank() -> int:
    return torch.distributed.get_rank() if _dist_on() else 0


# [book/10_training.ipynb, cell 46]
@dataclass
class TrainHistory:
    """What :func:`train` measured. ``loss`` and ``lr`` are logged every ``log_every`` steps at ``step``
    (the training loss averaged over those steps, the learning rate of the last one); ``val`` holds one dict
    per validation (``step``, ``val_loss`` and whatever ``val_fn`` returned)."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    val: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    last_step: int = 0


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable[Batch], loss_fn: Callable, amp: str | None = None) -> float:
    """The loss over all the real target tokens of ``loader``: ``loss_fn(logits, tgt_out)`` (a mean over
    a batch's real target tokens) weighted by each batch's count of them, summed over every process
    under DDP."""
    net = _unwrap(model)
    device = next(net.parameters()).device
    pad = getattr(getattr(net, "config", None), "pad_id", 0)
    was_training = net.training
    net.eval()
    total = torch.zeros(2, dtype=torch.float64, device=device)
    try:
        for batch in loader:
            src, tgt_in, tgt_out = Batch(*batch).to(device)
            with _autocast(device, amp):
                logits = net(src, tgt_in)
            n = (tgt_out != pad).sum()
            total += torch.stack([loss_fn(logits.float(), tgt_out).double() * n, n.double()])
    finally:
        net.train(was_training)
    if _dist_on():
        torch.distributed.all_reduce(total)
    return float(total[0] / total[1].clamp(min=1))


_AMP = {None: None, "none": None, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
        "fp16": torch.float16, "float16": torch.float16}


def _autocast(device: torch.device, amp: str | None):
    if amp not in _AMP:
        raise ValueError(f"amp must be one of None, 'bf16', 'fp16', got {amp!r}")
    dtype = _AMP[amp]
    return torch.autocast(device.type, dtype=dtype, enabled=dtype is not None)


def _set_epoch(loader, epoch: int) -> None:
    for obj in (getattr(loader, "batch_sampler", None), getattr(loader, "sampler", None)):
        if hasattr(obj, "set_epoch"):
            obj.set_epoch(epoch)


def train(model: nn.Module, train_loader, optimizer: torch.optim.Optimizer, scheduler=None,
          loss_fn: Callable | None = None, *, steps: int, val_loader=None, val_every: int = 0,
          val_fn: Callable[[nn.Module], dict] | None = None, stop_fn: Callable[[dict], bool] | None = None,
          clip_norm: float | None = 1.0, amp: str | None = None, log_every: int = 10,
          checkpoint_path: str | None = None, checkpoint_every: int = 0, resume_from: str | None = None,
          progress: bool = True) -> TrainHistory:
    """Train ``model`` for ``steps`` optimizer updates (in total, counting those of a resumed run).

    Each update: a batch (``src, tgt_in, tgt_out``, see :class:`PadCollate`) from ``train_loader`` moved to
    the model's device; logits = model(src, tgt_in) under ``torch.autocast`` when ``amp`` is ``"bf16"``
    or ``"fp16"`` (fp16 uses a ``GradScaler``); ``loss_fn(logits, tgt_out)`` (default
    ``LabelSmoothingLoss(0.1, pad_id)``); backward; ``clip_grad_norm_(clip_norm)``; ``optimizer.step()``;
    then ``scheduler.step()``. The loader is iterated epoch after epoch (its sampler's ``set_epoch`` is
    called).

    Every ``val_every`` steps (and at the end) with a ``val_loader``: the validation loss, plus the dict
    that ``val_fn(model)`` returns; if ``stop_fn(that dict)`` is true, training stops there.
    Every ``checkpoint_every`` steps (and at the end) the state goes to ``checkpoint_path``
    (:func:`save_checkpoint`, on rank 0), with the epoch and the position in it; ``resume_from`` (a
    checkpoint path, ignored if the file does not exist) restores everything and continues exactly where
    the run stopped: on the CPU a resumed run reaches the same parameters as an uninterrupted one.

    Under ``torchrun`` (after :func:`setup_distributed`) the model is wrapped in
    ``DistributedDataParallel``; give the loader a sampler that splits the data by rank
    (:class:`TokenBucketSampler` does by itself). ``progress`` shows a tqdm bar with loss and lr on rank 0.
    Returns a :class:`TrainHistory`.
    """
    if not isinstance(steps, int) or steps < 0:
        raise ValueError(f"steps must be a non-negative int, got {steps!r}")
    if log_every < 1:
        raise ValueError(f"log_every must be >= 1, got {log_every}")
    if amp not in _AMP:
        raise ValueError(f"amp must be one of None, 'bf16', 'fp16', got {amp!r}")
    net = _unwrap(model)
    device = next(net.parameters()).device
    pad = getattr(getattr(net, "config", None), "pad_id", 0)
    loss_fn = loss_fn or LabelSmoothingLoss(0.1, pad_id=pad)
    scaler = torch.amp.GradScaler(device.type) if _AMP[amp] is torch.float16 else None
    if _dist_on() and not isinstance(model, nn.parallel.DistributedDataParallel):
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)
    rank0 = _rank() == 0
    hist = TrainHistory()

    step, epoch, in_epoch, epoch_rng, rng_after = 0, 0, 0, None, None
    if resume_from is not None and os.path.exists(resume_from):
        state = load_checkpoint(resume_from, net, optimizer, scheduler, scaler, map_location=device)
        step = state["step"]
        epoch, in_epoch = state["extra"]["epoch"], state["extra"]["in_epoch"]
        epoch_rng, rng_after = state["extra"]["epoch_rng"], state["rng"]

    def checkpoint():
        if checkpoint_path and rank0:
            save_checkpoint(checkpoint_path, net, optimizer, scheduler, scaler, step,
                            epoch=epoch, in_epoch=in_epoch, epoch_rng=epoch_rng)
        if checkpoint_path and _dist_on():
            torch.distributed.barrier()

    def validate() -> bool:
        if val_loader is None and val_fn is None:
            return False
        saved = _rng_state()                   # validation must not change the training's randomness
        record = {"step": step}
        if val_loader is not None:
            record["val_loss"] = evaluate(net, val_loader, loss_fn, amp)
        if val_fn is not None:
            record.update(val_fn(net))
        hist.val.append(record)
        _set_rng_state(saved)
        if bar is not None:
            bar.write(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in record.items()))
        return bool(stop_fn and stop_fn(record))

    bar = tqdm(total=steps, initial=step, disable=not (progress and rank0), dynamic_ncols=False, ncols=100,
               mininterval=1.0, file=sys.stderr) if progress and rank0 else None
    model.train()
    t0 = time.perf_counter()
    run_loss = torch.zeros((), device=device)
    run_n = 0
    stopped = False
    while step < steps and not stopped:
        if epoch_rng is None:
            epoch_rng = _rng_state()          # the state the epoch's shuffling starts from
        else:
            _set_rng_state(epoch_rng)          # resuming: replay the epoch's shuffle
        _set_epoch(train_loader, epoch)
        it = iter(train_loader)
        for _ in range(in_epoch):              # resuming mid-epoch: skip the batches already used
            next(it)
        if rng_after is not None:
            _set_rng_state(rng_after)
            rng_after = None
        got_batch = False
        for batch in it:
            got_batch = True
            src, tgt_in, tgt_out = Batch(*batch).to(device, non_blocking=True)
            with _autocast(device, amp):
                logits = model(src, tgt_in)                                   # (B, T, V)
            loss = loss_fn(logits.float(), tgt_out)
            optimizer.zero_grad(set_to_none=True)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.unscale_(optimizer)
            else:
                loss.backward()
            if clip_norm is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            lr = optimizer.param_groups[0]["lr"]          # the rate this update used
            if scheduler is not None:
                scheduler.step()
            step += 1
            in_epoch += 1
            run_loss += loss.detach()
            run_n += 1
            if step % log_every == 0 or step == steps:
                mean = float(run_loss) / run_n
                if not math.isfinite(mean):
                    raise FloatingPointError(f"the training loss is {mean} at step {step}")
                hist.step.append(step)
                hist.loss.append(mean)
                hist.lr.append(lr)
                run_loss.zero_()
                run_n = 0
                if bar is not None:
                    bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr:.3g}", refresh=False)
            if bar is not None:
                bar.update(1)
            if val_every and step % val_every == 0 and step < steps:
                stopped = validate()
            if checkpoint_every and step % checkpoint_every == 0 and step < steps:
                checkpoint()
            if step >= steps or stopped:
                break
        else:
            epoch, in_epoch, epoch_rng = epoch + 1, 0, None
            if not got_batch:
                raise ValueError("train_loader yielded no batch")
    if not stopped:
        validate()
    if checkpoint_path:
        checkpoint()
    if bar is not None:
        bar.close()
    hist.seconds = time.perf_counter() - t0
    hist.last_step = step
    return hist


__all__ = ['shift_right', 'LabelSmoothingLoss', 'noam_lambda', 'PairDataset', 'Batch', 'PadCollate', 'TokenBucketSampler', 'padding_fraction', 'toy_task', 'copy_task', 'reverse_task', 'exact_match', 'save_checkpoint', 'load_checkpoint', 'setup_distributed', 'cleanup_distributed', 'TrainHistory', 'evaluate', 'train']
