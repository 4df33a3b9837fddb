"""Generated from book/11_decoding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: cbb8d6611ec723be
# fmt: off

# [book/11_decoding.ipynb, cell 11]
from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from transformer_lib.checks import check_float, check_int, check_probability
from transformer_lib.checks import check_token_ids
from transformer_lib.masks import padding_mask


class DecodingConfig(Protocol):
    """What the decoders read from ``model.config``."""

    src_vocab_size: int
    tgt_vocab_size: int
    max_len: int              # the positional table: the longest source and output
    pad_id: int
    bos_id: int
    eos_id: int


class Seq2SeqModel(Protocol):
    """What the decoders need from a model: a ``config``, ``encode``, ``decode`` with an
    optional cache, and ``new_cache``. A :class:`~transformer_lib.model.Transformer` has
    them; so may a class of your own, which need not derive from it (duck typing)."""

    @property
    def config(self) -> DecodingConfig: ...

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor) -> torch.Tensor: ...

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor,
               src_mask: torch.Tensor | None = None,
               cache: Any = None) -> torch.Tensor: ...

    # a cache has ``length`` (positions cached) and ``reorder(index)`` (keep batch rows)
    def new_cache(self) -> Any: ...


# [book/11_decoding.ipynb, cell 13]
_CONFIG_FIELDS = ("src_vocab_size", "tgt_vocab_size", "max_len", "pad_id", "bos_id",
                  "eos_id")


def _check_model(model: Any) -> None:
    """Duck typing: anything with the members of :class:`Seq2SeqModel` is a model."""
    missing = [name for name in ("encode", "decode", "new_cache")
               if not callable(getattr(model, name, None))]
    config = getattr(model, "config", None)
    missing += [f"config.{name}" for name in _CONFIG_FIELDS
                if not isinstance(getattr(config, name, None), int)]
    if missing:
        raise TypeError(f"model must have encode, decode, new_cache and a config with "
                        f"integer {', '.join(_CONFIG_FIELDS)} (see Seq2SeqModel); "
                        f"{type(model).__name__} lacks {', '.join(missing)}")


def _check_src(model: Seq2SeqModel, src: Any) -> torch.Tensor:
    """Validate src (B, S) and move it to the model's device."""
    c = model.config
    check_token_ids(src, c.src_vocab_size, "src", dims=2)
    if src.size(0) == 0 or src.size(1) == 0:
        raise ValueError(f"src must be a non-empty (B, S) tensor of token ids, "
                         f"got shape {tuple(src.shape)}")
    if src.size(1) > c.max_len:
        raise ValueError(f"src has length {src.size(1)}, longer than the model's "
                         f"max_len={c.max_len}")
    parameters = getattr(model, "parameters", None)        # an nn.Module: its device
    first = next(iter(parameters()), None) if callable(parameters) else None
    return src if first is None else src.to(first.device)


def _check_max_len(model: Seq2SeqModel, max_len: Any) -> int:
    """max_len: the most tokens to generate after bos, within the positional table."""
    max_len = check_int(max_len, "max_len")
    if max_len > model.config.max_len:
        raise ValueError(f"max_len={max_len} is larger than the model's positional "
                         f"table (config.max_len={model.config.max_len})")
    return max_len


# [book/11_decoding.ipynb, cell 15]
@contextlib.contextmanager
def _inference(model: Seq2SeqModel):
    """Eval mode (no dropout) and no autograd while decoding; the model's mode is
    restored after. A model that is not an ``nn.Module`` has no mode: autograd only."""
    module = model if isinstance(model, torch.nn.Module) else None
    was_training = module is not None and module.training
    if module is not None:
        module.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        if module is not None:
            module.train(was_training)


class _Stepper:
    """The logits of the next token for a batch of prefixes, with or without a KV cache.

    ``step(ys)`` takes whole prefixes ys (N, t) that start with bos. Without a cache it
    runs the decoder over all t positions and keeps the last; with one it feeds only
    ys[:, -1:], at position t - 1.
    """

    def __init__(self, model: Seq2SeqModel, memory: torch.Tensor,
                 src_mask: torch.Tensor, use_cache: bool):
        self.model, self.memory, self.src_mask = model, memory, src_mask
        self.cache = model.new_cache() if use_cache else None
        c = model.config
        forbidden = sorted({c.pad_id, c.bos_id})
        self.forbidden = torch.tensor(forbidden, device=memory.device)

    def step(self, ys: torch.Tensor) -> torch.Tensor:
        if self.cache is None:
            logits = self.model.decode(ys, self.memory, self.src_mask)[:, -1]   # (N, V)
        else:
            if self.cache.length != ys.size(1) - 1:
                raise RuntimeError("KV cache out of step with the prefix")
            new = ys[:, -1:]                                                   # (N, 1)
            logits = self.model.decode(new, self.memory, self.src_mask, self.cache)
            logits = logits[:, -1]                                             # (N, V)
        return logits.float().index_fill(-1, self.forbidden, float("-inf"))   # (N, V)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (in that order): the beams that survive a step."""
        self.memory = self.memory.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


def _start(model: Seq2SeqModel, src: torch.Tensor, use_cache: bool) -> _Stepper:
    src_mask = padding_mask(src, model.config.pad_id)                  # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                               # (B, S, d_model)
    return _Stepper(model, memory, src_mask, bool(use_cache))


# [book/11_decoding.ipynb, cell 17]
def greedy_decode(model: Seq2SeqModel, src: torch.Tensor, max_len: int,
                  use_cache: bool = True) -> torch.Tensor:
    """Greedy decoding of a batch: each sentence takes its most probable next token.

    src (B, S) -> ids (B, T), T <= max_len + 1: bos, then at most ``max_len`` tokens; a
    sentence is padded (pad_id) after its eos, and the loop stops when all have one.
    pad and bos are never generated. The model runs in eval mode without gradients (its
    mode is restored after); ``src`` is moved to the model's device. ``use_cache=False``
    recomputes the whole prefix at every step: the same tokens, more slowly. ``model``:
    anything with the members of :class:`Seq2SeqModel`.
    """
    _check_model(model)
    src = _check_src(model, src)
    max_len = _check_max_len(model, max_len)
    return _generate(model, src, max_len, use_cache,
                     choose=lambda logits: logits.argmax(dim=-1))


def _generate(model: Seq2SeqModel, src: torch.Tensor, max_len: int, use_cache: bool,
              choose: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """The loop every one-hypothesis decoder shares (greedy here, sampling below):
    ``choose`` turns the next-token logits (B, V) into the next tokens (B,). The
    arguments were checked by the caller. One value per step is read back from the
    device: whether every sentence has finished."""
    c = model.config
    with _inference(model):
        stepper = _start(model, src, use_cache)
        B = src.size(0)
        dev = src.device
        ys = torch.full((B, 1), c.bos_id, dtype=torch.long, device=dev)   # (B, 1)
        finished = torch.zeros(B, dtype=torch.bool, device=dev)           # (B,)
        for _ in range(max_len):
            next_token = choose(stepper.step(ys))                         # (B,)
            next_token = next_token.masked_fill(finished, c.pad_id)
            ys = torch.cat([ys, next_token[:, None]], dim=1)              # (B, t + 1)
            finished |= next_token == c.eos_id
            # the step's one host-device synchronisation: has every sentence finished?
            if bool(finished.all()):
                break
    return ys


# [book/11_decoding.ipynb, cell 23]
_LENGTH_NORMS = ("gnmt", "power")


def length_penalty_factor(length: int | torch.Tensor, alpha: float, norm: str = "gnmt"):
    """The divisor of a hypothesis's log-probability in :func:`beam_search`.

    ``length`` is the number of generated tokens, eos included and bos not
    (beam_search's ``count_bos=True`` adds one). ``norm="gnmt"``: ((5 + length) / 6) **
    alpha, Wu et al. (2016), the penalty the Transformer paper used with alpha = 0.6.
    ``norm="power"``: length ** alpha, the study notes' form. alpha = 0 gives 1 for
    both: raw log-probabilities, which favour short outputs.
    """
    if norm == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if norm == "power":
        return length ** alpha
    raise ValueError(f"length_norm must be one of {_LENGTH_NORMS}, got {norm!r}")


# [book/11_decoding.ipynb, cell 25]
class _Beams:
    """A beam search's state: ys (B·n, t) live prefixes (n = 1 at first, then k),
    live_logp (B, n) their log-probabilities; fin_ids (B, k, T), fin_scores (B, k) each
    sentence's k best finished hypotheses, best first (-inf: an empty place, all pad);
    done (B,). ``score(logp, t)`` applies the length penalty of t generated tokens."""

    def __init__(self, config: DecodingConfig, B: int, k: int, max_len: int,
                 score: Callable[[torch.Tensor, int], torch.Tensor],
                 device: torch.device):
        self.B, self.k, self.n, self.score = B, k, 1, score
        self.pad_id, self.eos_id = config.pad_id, config.eos_id
        self.fin_ids = torch.full((B, k, max_len + 1), config.pad_id,
                                  dtype=torch.long, device=device)         # (B, k, T)
        self.ys = self.fin_ids.new_full((B, 1), config.bos_id)             # (B·n, t)
        self.live_logp = torch.zeros(B, 1, device=device)                  # (B, n)
        self.fin_scores = torch.full((B, k), float("-inf"), device=device)  # (B, k)
        self.done = torch.zeros(B, dtype=torch.bool, device=device)         # (B,)
        self.rank = torch.arange(2 * k, device=device)                      # (2k,)

    def finish(self, ids: torch.Tensor, scores: torch.Tensor) -> None:
        """Keep, per sentence, the k best of the finished hypotheses so far and of new
        ones: ids (B, m, t <= T), scores (B, m), -inf for "not new"."""
        T = self.fin_ids.size(-1)
        ids = F.pad(ids, (0, T - ids.size(-1)), value=self.pad_id)         # (B, m, T)
        # rows not new are all pad, as empty places are: ties at -inf cannot matter
        ids = ids.masked_fill(torch.isneginf(scores)[..., None], self.pad_id)
        scores = torch.cat([self.fin_scores, scores], dim=1)               # (B, k + m)
        self.fin_scores, index = scores.topk(self.k, dim=1)                # best first
        index = index[..., None].expand(-1, -1, T)                         # (B, k, T)
        self.fin_ids = torch.cat([self.fin_ids, ids], dim=1).gather(1, index)

    # [book/11_decoding.ipynb, cell 27]
    def advance(self, logits: torch.Tensor, t: int) -> torch.Tensor:
        """One step: logits (B·n, V) of the live beams' next tokens -> the parent row
        of each new beam (B·k,); the prefixes grow to t + 1 tokens (t generated)."""
        B, k, n = self.B, self.k, self.n
        V = logits.size(-1)
        logp = torch.log_softmax(logits, dim=-1).view(B, n, V)             # (B, n, V)
        cand = (self.live_logp[:, :, None] + logp).view(B, n * V)          # (B, n·V)
        cand_logp, cand_index = cand.topk(min(2 * k, n * V), dim=-1)       # (B, 2k)
        beam, token = cand_index // V, cand_index % V           # parent beam, new token
        is_eos = token == self.eos_id
        # an eos among the k best joins the finished hypotheses (if not done yet)
        new_fin = is_eos & (self.rank[: token.size(1)] < k) & ~self.done[:, None]
        parent = beam[..., None].expand(-1, -1, t)                         # (B, 2k, t)
        prefix = self.ys.view(B, n, t).gather(1, parent)                   # (B, 2k, t)
        seq = torch.cat([prefix, token[..., None]], dim=2)             # (B, 2k, t + 1)
        self.finish(seq, self.score(cand_logp, t).masked_fill(~new_fin, float("-inf")))
        # the new beams: the k best continuations that do not end in eos
        live = cand_logp.masked_fill(is_eos, float("-inf"))
        self.live_logp, pick = live.topk(k, dim=-1)                        # (B, k)
        beam, token = beam.gather(1, pick), token.gather(1, pick)          # (B, k)
        rows = torch.arange(B, device=beam.device)[:, None] * n
        index = (rows + beam).view(-1)                                     # (B·k,)
        self.ys = torch.cat([self.ys.index_select(0, index), token.view(-1, 1)], dim=1)
        self.n = k
        return index

    # [book/11_decoding.ipynb, cell 29]
    def stop(self, t: int, early_stopping: bool) -> bool:
        """Mark the sentences that are done after t generated tokens; True when all are.
        The one value a step reads back from the device."""
        worst = self.fin_scores[:, -1]                                     # (B,)
        if early_stopping:                         # the notes' rule: k finished
            self.done |= torch.isfinite(worst)
        else:                                      # and no live beam scores better
            self.done |= worst >= self.score(self.live_logp[:, 0], t)
        return bool(self.done.all())

    def close(self, t: int) -> None:
        """Out of room after t tokens: the live beams of the sentences not done join the
        finished hypotheses."""
        scores = self.score(self.live_logp, t)                             # (B, k)
        scores = scores.masked_fill(self.done[:, None], float("-inf"))
        self.finish(self.ys.view(self.B, self.k, t + 1), scores)

    def best(self, n_best: int | None):
        """(B, T) ids of the best hypotheses, or (ids (B, n, T), scores (B, n))."""
        keep = n_best or 1
        ids, scores = self.fin_ids[:, :keep], self.fin_scores[:, :keep]     # best first
        length = int((ids != self.pad_id).sum(dim=-1).max())
        ids = ids[..., :length]                            # drop the common padding
        if n_best is None:
            return ids[:, 0]                                               # (B, T)
        return ids, scores


# [book/11_decoding.ipynb, cell 31]
def beam_search(model: Seq2SeqModel, src: torch.Tensor, beam_size: int = 4,
                max_len: int | None = None, length_penalty: float = 0.6,
                use_cache: bool = True, *, length_norm: str = "gnmt",
                count_bos: bool = False, early_stopping: bool = False,
                n_best: int | None = None):
    """Beam search over a batch: B sentences × beam_size beams run as one batch.

    src (B, S) -> ids (B, T), the best hypothesis of each sentence, laid out as
    :func:`greedy_decode`'s output; with ``n_best=n`` (1 <= n <= beam_size),
    ``(ids (B, n, T), scores (B, n))``, the n best of each sentence, best first.

    * Score of a finished hypothesis: its log-probability divided by
      :func:`length_penalty_factor` (alpha = ``length_penalty``, ``length_norm`` "gnmt"
      or "power"; the length counts eos, and bos only with ``count_bos=True``).
    * The first step expands one beam per sentence, not beam_size copies of it. Each
      step ranks the 2·beam_size best continuations; one that ends in eos and ranks
      among the first beam_size is finished (never extended); the beam_size best that
      do not end in eos are the new beams.
    * A sentence is done when it has beam_size finished hypotheses and its best live
      beam, scored at its current length, does not beat the worst of them (exact for
      alpha = 0, a heuristic for alpha > 0); with ``early_stopping=True``, as soon as
      it has beam_size finished (the study notes' rule, also fairseq's). After
      ``max_len`` new tokens the live beams join the finished ones. beam_size = 1 is
      greedy decoding.

    ``max_len`` defaults to min(config.max_len, 2·S + 10) for sources of length S. pad
    and bos are never generated; eval mode and no gradients while decoding, as in
    :func:`greedy_decode`. ``model``: anything with the members of
    :class:`Seq2SeqModel`.
    """
    _check_model(model)
    k = check_int(beam_size, "beam_size")
    src = _check_src(model, src)
    c = model.config
    if max_len is None:
        max_len = min(c.max_len, 2 * src.size(1) + 10)
    max_len = _check_max_len(model, max_len)
    V = c.tgt_vocab_size
    if k > V - len({c.pad_id, c.bos_id, c.eos_id}):
        raise ValueError(f"beam_size={k} is larger than the number of tokens a beam "
                         f"can take (tgt_vocab_size={V} less pad, bos and eos)")
    alpha = check_float(length_penalty, "length_penalty")
    length_penalty_factor(1, 0.0, length_norm)                     # checks the name
    if n_best is not None and check_int(n_best, "n_best") > k:
        raise ValueError(f"n_best must be None or an int in [1, beam_size={k}], "
                         f"got {n_best!r}")

    def score(logp: torch.Tensor, t: int) -> torch.Tensor:        # t generated tokens
        return logp / length_penalty_factor(t + int(count_bos), alpha, length_norm)

    with _inference(model):
        stepper = _start(model, src, use_cache)
        beams = _Beams(c, src.size(0), k, max_len, score, src.device)
        for t in range(1, max_len + 1):                  # t tokens after this step
            index = beams.advance(stepper.step(beams.ys), t)
            stepper.reorder(index)                       # cache, memory, mask follow
            if beams.stop(t, early_stopping):            # the step's one sync
                break
            if t == max_len:                             # out of room
                beams.close(t)
    return beams.best(n_best)


# [book/11_decoding.ipynb, cell 39]
def _sampling_args(temperature: Any, top_k: Any,
                   top_p: Any) -> tuple[float, int, float]:
    """The three knobs, checked: temperature > 0, top_k >= 0 (0: no top-k filter), top_p
    in (0, 1] (1: no nucleus filter)."""
    try:
        temperature = check_float(temperature, "temperature", 0.0, low_open=True)
    except ValueError as error:
        hint = "the limit temperature -> 0 is greedy_decode"
        raise ValueError(f"{error} ({hint})") from None
    return (temperature, check_int(top_k, "top_k", minimum=0),
            check_probability(top_p, "top_p", zero=False))


def sampling_distribution(logits: torch.Tensor, temperature: float = 1.0,
                          top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """The distribution :func:`sample` draws from: logits (…, V) -> probabilities
    (…, V), float32.

    In this order: divide the logits by ``temperature``; keep the ``top_k`` largest
    (exactly k: ties at the boundary are broken by ``torch.topk``; 0 keeps all);
    softmax; keep the nucleus, the smallest set of most probable tokens whose
    probabilities add up to at least ``top_p`` (1 keeps all); renormalise.
    """
    return _filtered(logits, *_sampling_args(temperature, top_k, top_p))


def _filtered(logits: torch.Tensor, temperature: float, top_k: int,
              top_p: float) -> torch.Tensor:
    """:func:`sampling_distribution` without the checks (made once by the caller)."""
    logits = logits.float()
    V = logits.size(-1)
    # subtract the max before dividing: a tiny temperature cannot overflow to +inf
    scaled = (logits - logits.amax(dim=-1, keepdim=True)) / temperature   # (…, V) <= 0
    if 0 < top_k < V:
        keep = torch.zeros_like(scaled, dtype=torch.bool)
        keep.scatter_(-1, scaled.topk(top_k, dim=-1).indices, True)        # exactly k
        scaled = scaled.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)                                  # (…, V)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)              # (…, V)
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p    # exclusive running sum
        drop_sorted = mass_before >= top_p                  # the set is big enough
        drop_sorted[..., 0] = False                         # the top token stays
        # back to vocabulary order
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


# [book/11_decoding.ipynb, cell 41]
def sample(model: Seq2SeqModel, src: torch.Tensor, max_len: int,
           temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
           generator: torch.Generator | None = None,
           use_cache: bool = True) -> torch.Tensor:
    """Sampling of a batch: at every step each sentence draws its next token from
    :func:`sampling_distribution` (temperature, then top-k, then top-p) of the model's
    logits.

    src (B, S) -> ids (B, T), laid out as :func:`greedy_decode`'s output. Pass a
    ``torch.Generator`` on the model's device for reproducible draws: the same generator
    state gives the same output, with or without the cache. pad and bos are never
    generated. ``model`` is any object with the members of :class:`Seq2SeqModel`.
    """
    _check_model(model)
    knobs = _sampling_args(temperature, top_k, top_p)
    src = _check_src(model, src)
    max_len = _check_max_len(model, max_len)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, "
                        f"got {type(generator).__name__}")

    def draw(logits: torch.Tensor) -> torch.Tensor:                    # (B, V) -> (B,)
        probs = _filtered(logits, *knobs)
        # every row draws, finished or not: the random stream does not depend on which
        # rows have finished
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    return _generate(model, src, max_len, use_cache, choose=draw)


__all__ = [
    'DecodingConfig',
    'Seq2SeqModel',
    'greedy_decode',
    'length_penalty_factor',
    'beam_search',
    'sampling_distribution',
    'sample',
]
