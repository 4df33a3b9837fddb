"""Generated from book/10_training.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: a4ff43d5358cff80
# fmt: off

# [book/10_training.ipynb, cell 26558dae]
from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import torch

from transformer_lib.checks import check_int


# [book/10_training.ipynb, cell ef9fbb0b]
def shift_right(tgt: torch.Tensor, bos_id: int) -> torch.Tensor:
    """The decoder's input under teacher forcing: ``bos_id`` in front, the last column
    dropped.

    ``tgt`` (B, T) is the target the decoder must produce, ``[y1 .. yn eos pad ..]``;
    the result (B, T) is ``[bos y1 .. yn ..]``: at position t the decoder reads the true
    tokens before t and predicts ``tgt[:, t]``.
    """
    if not isinstance(tgt, torch.Tensor) or tgt.dim() != 2:
        got = tuple(tgt.shape) if isinstance(tgt, torch.Tensor) else type(tgt).__name__
        raise ValueError(f"tgt must be a (B, T) tensor of token ids, got {got}")
    if tgt.dtype.is_floating_point or tgt.dtype == torch.bool:
        raise ValueError(f"tgt must hold integer token ids, got dtype {tgt.dtype}")
    bos = torch.full_like(tgt[:, :1], bos_id)
    return torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, T)


# [book/10_training.ipynb, cell e819eb65]
def _as_ids(seq: Sequence[int] | torch.Tensor, name: str) -> torch.Tensor:
    t = torch.as_tensor(seq)
    if t.dim() != 1 or t.numel() == 0:
        raise ValueError(f"{name} must be a non-empty 1-D sequence of token ids, "
                         f"got shape {tuple(t.shape)}")
    if t.dtype.is_floating_point or t.dtype == torch.bool:
        raise ValueError(f"{name} must hold integer token ids, got dtype {t.dtype}")
    return t.long()


class PairDataset(torch.utils.data.Dataset):
    """A list of (source ids, target ids) pairs, each a non-empty 1-D sequence of ints,
    without bos/eos (the collate function adds them). ``dataset[i]`` -> (src (S,), tgt
    (T,)) LongTensors.

    ``lengths`` gives each example's cost in padded positions, ``max(S, T + 1)`` (the
    decoder reads and writes T + 1 tokens: bos or eos added), for
    :class:`TokenBucketSampler`.
    """

    def __init__(self, pairs: Iterable[tuple[Sequence[int], Sequence[int]]]):
        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        for i, pair in enumerate(pairs):
            if len(pair) != 2:
                raise ValueError(f"pairs[{i}] must be a (source ids, target ids) pair")
            src = _as_ids(pair[0], f"pairs[{i}][0]")
            self.pairs.append((src, _as_ids(pair[1], f"pairs[{i}][1]")))
        self.lengths = [max(len(s), len(t) + 1) for s, t in self.pairs]

    def __len__(self) -> int:
        return len(self.pairs)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.pairs[i]


# [book/10_training.ipynb, cell 8e3288f3]
class Batch(NamedTuple):
    """A padded batch: ``src`` (B, S); ``tgt_in`` (B, T) = [bos y1 .. yn];
    ``tgt_out`` (B, T) = [y1 .. yn eos]."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return Batch(*(t.to(device, non_blocking=non_blocking) for t in self))

    def n_tokens(self, pad_id: int = 0) -> int:
        """Real (non-pad) target tokens: what the loss averages over (read back to the
        host)."""
        return int((self.tgt_out != pad_id).sum())


class PadCollate:
    """``collate_fn`` for a DataLoader over :class:`PairDataset`: pads a list of (src,
    tgt) pairs into a :class:`Batch`. ``tgt_out`` is tgt + [eos], ``tgt_in`` is
    ``shift_right(tgt_out, bos_id)``; the source is left as given (add ``src_eos=True``
    to end every source with eos). Pads with ``pad_id``; the three ids must differ.
    Token ids must be integers: floats are refused, not truncated."""

    def __init__(self, pad_id: int = 0, bos_id: int = 1, eos_id: int = 2,
                 src_eos: bool = False):
        self.pad_id = check_int(pad_id, "pad_id", minimum=0)
        self.bos_id = check_int(bos_id, "bos_id", minimum=0)
        self.eos_id = check_int(eos_id, "eos_id", minimum=0)
        if len({self.pad_id, self.bos_id, self.eos_id}) < 3:
            raise ValueError(f"pad_id, bos_id and eos_id must differ, got pad_id="
                             f"{pad_id}, bos_id={bos_id}, eos_id={eos_id}")
        self.src_eos = bool(src_eos)

    def __call__(self, examples: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> Batch:
        if len(examples) == 0:
            raise ValueError("examples must hold at least one (src, tgt) pair")
        pad = torch.nn.utils.rnn.pad_sequence
        srcs = [_as_ids(s, f"examples[{i}][0]") for i, (s, _) in enumerate(examples)]
        if self.src_eos:
            srcs = [torch.cat([s, s.new_tensor([self.eos_id])]) for s in srcs]
        eos = torch.tensor([self.eos_id])
        outs = [torch.cat([_as_ids(t, f"examples[{i}][1]"), eos])
                for i, (_, t) in enumerate(examples)]
        src = pad(srcs, batch_first=True, padding_value=self.pad_id)          # (B, S)
        tgt_out = pad(outs, batch_first=True, padding_value=self.pad_id)      # (B, T)
        tgt_in = shift_right(tgt_out, self.bos_id)                            # (B, T)
        return Batch(src, tgt_in, tgt_out)


# [book/10_training.ipynb, cell 5344fb7c]
class TokenBucketSampler(torch.utils.data.Sampler):
    """A batch sampler (``DataLoader(dataset, batch_sampler=...)``) that groups examples
    of similar length so that each batch holds at most ``max_tokens`` padded positions:
    ``len(batch) * max(lengths in batch) <= max_tokens``. An example longer than
    ``max_tokens`` makes a batch of its own.

    Each epoch: shuffle the indices (seeded by ``seed + epoch``; call :meth:`set_epoch`
    like with ``DistributedSampler``), cut them into pools of ``pool_size`` examples,
    sort each pool by length, fill batches greedily, shuffle the batches. With
    ``shuffle=False`` the whole dataset is one sorted pool.

    Across processes (``num_replicas`` > 1, taken from ``torch.distributed`` when it is
    initialised), rank r takes batches r, r + num_replicas, ...; every rank gets the
    same number of batches (DDP needs that): with ``drop_last=False`` the first batches
    are repeated to fill up, with ``drop_last=True`` the extra ones are dropped. With
    one replica every example appears exactly once per epoch.
    """

    def __init__(self, lengths: Sequence[int], max_tokens: int, shuffle: bool = True,
                 seed: int = 0, pool_size: int | None = None,
                 num_replicas: int | None = None, rank: int | None = None,
                 drop_last: bool = False):
        self.max_tokens = check_int(max_tokens, "max_tokens")
        self.lengths = [int(n) for n in lengths]
        if not self.lengths:
            raise ValueError("lengths must not be empty")
        if min(self.lengths) < 1:
            raise ValueError("lengths must all be >= 1")
        dist = torch.distributed
        group = dist.is_available() and dist.is_initialized()
        if num_replicas is None:
            num_replicas = dist.get_world_size() if group else 1
        if rank is None:
            rank = dist.get_rank() if group else 0
        self.num_replicas = check_int(num_replicas, "num_replicas")
        self.rank = check_int(rank, "rank", minimum=0)
        if self.rank >= self.num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas), got rank={rank}, "
                             f"num_replicas={num_replicas}")
        mean_length = max(1, round(sum(self.lengths) / len(self.lengths)))
        if pool_size is None:
            pool_size = max(1, 50 * self.max_tokens // mean_length)
        self.pool_size = check_int(pool_size, "pool_size")
        self.shuffle, self.seed = bool(shuffle), seed
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = check_int(epoch, "epoch", minimum=0)

    # [book/10_training.ipynb, cell 3f2b0754]
    def _all_batches(self) -> list[list[int]]:
        """The batches of every rank for this epoch, in order."""
        if self._cache is not None and self._cache[0] == self.epoch:
            return self._cache[1]
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        n = len(self.lengths)
        if self.shuffle:
            order, pool = torch.randperm(n, generator=g).tolist(), self.pool_size
        else:
            order, pool = list(range(n)), n
        batches: list[list[int]] = []
        for start in range(0, n, pool):
            by_length = sorted(order[start:start + pool], key=self.lengths.__getitem__)
            batches += self._fill(by_length)
        if self.shuffle:
            order = torch.randperm(len(batches), generator=g).tolist()
            batches = [batches[i] for i in order]
        self._cache = (self.epoch, batches)
        return batches

    def _fill(self, by_length: list[int]) -> list[list[int]]:
        """Cut indices sorted by length into batches, greedily, within the token
        budget."""
        batches: list[list[int]] = []
        batch: list[int] = []
        longest = 0
        for i in by_length:
            new_longest = max(longest, self.lengths[i])
            if batch and new_longest * (len(batch) + 1) > self.max_tokens:
                batches.append(batch)
                batch, new_longest = [], self.lengths[i]
            batch.append(i)
            longest = new_longest
        if batch:
            batches.append(batch)
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


# [book/10_training.ipynb, cell 8df6f1ef]
def padding_fraction(loader: Iterable[Batch], pad_id: int = 0) -> float:
    """The share of pad positions in the source and target tensors of all the batches of
    ``loader``."""
    pads = total = 0
    for batch in loader:
        for t in (batch.src, batch.tgt_out):
            pads += int((t == pad_id).sum())
            total += t.numel()
    return pads / max(total, 1)


# [book/10_training.ipynb, cell e0ba92cb]
def toy_task(kind: str, n: int, vocab_size: int = 13, min_len: int = 3,
             max_len: int = 8, seed: int = 0,
             first_id: int = 3) -> list[tuple[list[int], list[int]]]:
    """``n`` (source, target) pairs of random token ids in ``[first_id, vocab_size)``
    (ids below ``first_id`` are kept for pad, bos and eos), of lengths ``min_len`` to
    ``max_len``. ``kind``: ``"copy"`` (target = source), ``"reverse"`` (target =
    reversed source) or ``"sort"`` (target = sorted source). Deterministic for a given
    ``seed``."""
    tasks: dict[str, Callable[[list[int]], list[int]]] = {
        "copy": list, "reverse": lambda s: s[::-1], "sort": sorted}
    if kind not in tasks:
        raise ValueError(f"kind must be one of {sorted(tasks)}, got {kind!r}")
    n = check_int(n, "n", minimum=0)
    min_len, max_len = check_int(min_len, "min_len"), check_int(max_len, "max_len")
    if min_len > max_len:
        raise ValueError(f"need min_len <= max_len, got min_len={min_len}, "
                         f"max_len={max_len}")
    first_id = check_int(first_id, "first_id", minimum=0)
    vocab_size = check_int(vocab_size, "vocab_size", minimum=first_id + 1)
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        length = rng.randint(min_len, max_len)
        src = [rng.randrange(first_id, vocab_size) for _ in range(length)]
        pairs.append((src, tasks[kind](src)))
    return pairs


def copy_task(n: int, **kwargs: Any) -> list[tuple[list[int], list[int]]]:
    """``toy_task("copy", n, **kwargs)``: the target is the source."""
    return toy_task("copy", n, **kwargs)


def reverse_task(n: int, **kwargs: Any) -> list[tuple[list[int], list[int]]]:
    """``toy_task("reverse", n, **kwargs)``: the target is the source reversed."""
    return toy_task("reverse", n, **kwargs)


__all__ = [
    'shift_right', 'PairDataset', 'Batch', 'PadCollate', 'TokenBucketSampler',
    'padding_fraction', 'toy_task', 'copy_task', 'reverse_task',
]
