"""Generated from book/11_decoding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 9b0eb13c29f55f47
# fmt: off

# [book/11_decoding.ipynb, cell 11]
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

from transformer_lib.checks import check_token_ids
from transformer_lib.masks import padding_mask
from transformer_lib.model import Transformer


def _check_model(model) -> None:
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a transformer_lib.Transformer, got {type(model).__name__}")


def _check_src(model: Transformer, src) -> torch.Tensor:
    """Validate src (B, S) and move it to the model's device."""
    check_token_ids(src, model.config.src_vocab_size, "src")
    if src.dim() != 2 or src.size(0) == 0 or src.size(1) == 0:
        raise ValueError(f"src must be a non-empty (B, S) tensor of token ids, got shape {tuple(src.shape)}")
    if src.size(1) > model.config.max_len:
        raise ValueError(f"src has length {src.size(1)}, longer than the model's max_len={model.config.max_len}")
    return src.to(model.output.weight.device)


def _check_max_len(model: Transformer, max_len) -> None:
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"max_len must be an int >= 1 (the most tokens to generate after bos), got {max_len!r}")
    if max_len > model.config.max_len:
        raise ValueError(f"max_len={max_len} is larger than the model's positional table "
                         f"(config.max_len={model.config.max_len})")


@contextlib.contextmanager
def _inference(model: Transformer):
    """Eval mode (no dropout) and no autograd while decoding; the model's mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


class _Stepper:
    """The logits of the next token for a batch of prefixes, with or without a KV cache.

    ``step(ys)`` takes whole prefixes ys (N, t) that start with bos. Without a cache it runs the decoder
    over all t positions and keeps the last; with one it feeds only ys[:, -1:], at position t - 1.
    """

    def __init__(self, model: Transformer, memory: torch.Tensor, src_mask: torch.Tensor, use_cache: bool):
        self.model, self.memory, self.src_mask = model, memory, src_mask
        self.cache = model.new_cache() if use_cache else None
        c = model.config
        self.forbidden = torch.tensor(sorted({c.pad_id, c.bos_id}), device=memory.device)

    def step(self, ys: torch.Tensor) -> torch.Tensor:
        if self.cache is None:
            logits = self.model.decode(ys, self.memory, self.src_mask)[:, -1]                # (N, V)
        else:
            if self.cache.length != ys.size(1) - 1:
                raise RuntimeError("KV cache out of step with the prefix")
            logits = self.model.decode(ys[:, -1:], self.memory, self.src_mask, self.cache)[:, -1]
        return logits.float().index_fill(-1, self.forbidden, float("-inf"))                  # (N, V)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (in that order): the beams that survive a step, or copies of a sentence."""
        self.memory = self.memory.index_select(0, index)
        self.src_mask = self.src_mask.index_select(0, index)
        if self.cache is not None:
            self.cache.reorder(index)


def _start(model: Transformer, src: torch.Tensor, use_cache: bool) -> _Stepper:
    src_mask = padding_mask(src, model.config.pad_id)                                       # (B, 1, 1, S)
    memory = model.encode(src, src_mask)                                                    # (B, S, d_model)
    return _Stepper(model, memory, src_mask, bool(use_cache))


# [book/11_decoding.ipynb, cell 13]
def greedy_decode(model: Transformer, src: torch.Tensor, max_len: int, use_cache: bool = True) -> torch.Tensor:
    """Greedy decoding of a batch: at every step each sentence takes its most probable next token.

    src (B, S) -> ids (B, T), T <= max_len + 1: bos, then at most ``max_len`` generated tokens. A sentence
    that has produced eos is padded (pad_id) from then on; the loop stops when every sentence has
    produced eos, or after ``max_len`` tokens. pad and bos are never generated. The model runs in eval
    mode without gradients (its mode is restored after); ``src`` is moved to the model's device.
    ``use_cache=False`` recomputes the whole prefix at every step: the same tokens, more slowly.
    """
    _check_model(model)
    src = _check_src(model, src)
    _check_max_len(model, max_len)
    return _generate(model, src, max_len, use_cache, choose=lambda logits: logits.argmax(dim=-1))


def _generate(model: Transformer, src: torch.Tensor, max_len: int, use_cache: bool, choose) -> torch.Tensor:
    """The loop every one-hypothesis decoder shares (greedy here, sampling below): ``choose`` turns the
    next-token logits (B, V) into the next tokens (B,)."""
    c = model.config
    with _inference(model):
        stepper = _start(model, src, use_cache)
        B = src.size(0)
        ys = torch.full((B, 1), c.bos_id, dtype=torch.long, device=src.device)             # (B, 1)
        finished = torch.zeros(B, dtype=torch.bool, device=src.device)                     # (B,)
        for _ in range(max_len):
            next_token = choose(stepper.step(ys))                                           # (B,)
            next_token = next_token.masked_fill(finished, c.pad_id)
            ys = torch.cat([ys, next_token[:, None]], dim=1)                                # (B, t + 1)
            finished |= next_token == c.eos_id
            if bool(finished.all()):
                break
    return ys


# [book/11_decoding.ipynb, cell 17]
_LENGTH_NORMS = ("gnmt", "power")


def length_penalty_factor(length: int | torch.Tensor, alpha: float, norm: str = "gnmt"):
    """The divisor of a hypothesis's log-probability in :func:`beam_search`.

    ``length`` is the number of generated tokens, eos included and bos not (beam_search's
    ``count_bos=True`` adds one). ``norm="gnmt"``: ((5 + length) / 6) ** alpha, Wu et al. (2016), the
    penalty the Transformer paper used with alpha = 0.6. ``norm="power"``: length ** alpha, the study
    notes' form. alpha = 0 gives 1 for both: raw log-probabilities, which favour short outputs.
    """
    if norm == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if norm == "power":
        return length ** alpha
    raise ValueError(f"length_norm must be one of {_LENGTH_NORMS}, got {norm!r}")


def _merge_finished(fin_ids, fin_scores, new_ids, new_scores, pad_id):
    """Keep, per sentence, the k best of the finished hypotheses so far and of the new ones.

    fin_ids (B, k, T), fin_scores (B, k); new_ids (B, m, t <= T), new_scores (B, m), -inf for "not new".
    """
    B, k, T = fin_ids.shape
    new_ids = F.pad(new_ids, (0, T - new_ids.size(-1)), value=pad_id)                       # (B, m, T)
    scores = torch.cat([fin_scores, new_scores], dim=1)                                     # (B, k + m)
    best, index = scores.topk(k, dim=1)                                                     # (B, k), best first
    ids = torch.cat([fin_ids, new_ids], dim=1).gather(1, index[..., None].expand(-1, -1, T))
    return ids, best


def beam_search(model: Transformer, src: torch.Tensor, beam_size: int = 4, max_len: int | None = None,
                length_penalty: float = 0.6, use_cache: bool = True, *, length_norm: str = "gnmt",
                count_bos: bool = False, early_stopping: bool = False, n_best: int | None = None):
    """Beam search over a batch: the B sentences × beam_size beams run as one (B·beam_size, …) batch.

    src (B, S) -> ids (B, T), the best hypothesis of each sentence, laid out as :func:`greedy_decode`'s
    output (bos first, padded after eos). With ``n_best=n`` (1 <= n <= beam_size) it returns
    ``(ids (B, n, T), scores (B, n))``: the n best hypotheses of each sentence, best first, and their
    scores.

    * Score of a finished hypothesis: its summed log-probability divided by
      :func:`length_penalty_factor` (alpha = ``length_penalty``; ``length_norm`` "gnmt" or "power"; the
      length counts eos, and bos only with ``count_bos=True``, as the study notes' code does).
    * The first step expands one beam per sentence, not beam_size copies of it.
    * Each step ranks the 2·beam_size best continuations by log-probability. One that ends in eos and
      ranks among the first beam_size joins the sentence's finished hypotheses (kept apart, never
      extended); the beam_size best that do not end in eos are the new beams.
    * Stopping rule: a sentence is done when it has beam_size finished hypotheses and its best live
      beam, scored at its current length, does not beat the worst of them (exact for alpha = 0, since
      log-probabilities only fall as a beam grows; a heuristic for alpha > 0); with
      ``early_stopping=True``, as soon as it has beam_size finished hypotheses (the study notes' rule,
      also fairseq's). The search stops when
      every sentence is done, or after ``max_len`` new tokens, when the live beams join the finished
      ones. With beam_size = 1 the result is greedy decoding's.

    ``max_len`` defaults to min(config.max_len, 2·S + 10) for sources of length S. pad and bos are
    never generated; the model runs in eval mode without gradients (its mode is restored after).
    """
    _check_model(model)
    if isinstance(beam_size, bool) or not isinstance(beam_size, int) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    src = _check_src(model, src)
    c = model.config
    if max_len is None:
        max_len = min(c.max_len, 2 * src.size(1) + 10)
    _check_max_len(model, max_len)
    V = c.tgt_vocab_size
    if beam_size > V - len({c.pad_id, c.bos_id, c.eos_id}):
        raise ValueError(f"beam_size={beam_size} is larger than the number of tokens a beam can take "
                         f"(tgt_vocab_size={V} less pad, bos and eos)")
    if isinstance(length_penalty, bool) or not isinstance(length_penalty, (int, float)) \
            or not math.isfinite(length_penalty):
        raise ValueError(f"length_penalty must be a finite number (alpha), got {length_penalty!r}")
    length_penalty_factor(1, 0.0, length_norm)                                              # checks the name
    if n_best is not None and (isinstance(n_best, bool) or not isinstance(n_best, int)
                               or not 1 <= n_best <= beam_size):
        raise ValueError(f"n_best must be None or an int in [1, beam_size={beam_size}], got {n_best!r}")
    k, B, T = beam_size, src.size(0), max_len + 1
    dev = src.device

    def normalised(logp, t):                                                               # t generated tokens
        return logp / length_penalty_factor(t + int(count_bos), float(length_penalty), length_norm)

    with _inference(model):
        stepper = _start(model, src, use_cache)
        ys = torch.full((B, 1), c.bos_id, dtype=torch.long, device=dev)                   # (B·n, t); n = 1 at first
        live_logp = torch.zeros(B, 1, device=dev)                                           # (B, n)
        fin_ids = torch.full((B, k, T), c.pad_id, dtype=torch.long, device=dev)            # (B, k, T)
        fin_scores = torch.full((B, k), float("-inf"), device=dev)                          # (B, k)
        done = torch.zeros(B, dtype=torch.bool, device=dev)                                 # (B,)
        rank = torch.arange(2 * k, device=dev)
        n = 1
        for t in range(1, max_len + 1):                                                     # t tokens after this step
            logp = torch.log_softmax(stepper.step(ys), dim=-1).view(B, n, V)               # (B, n, V)
            cand = (live_logp[:, :, None] + logp).view(B, n * V)                            # (B, n·V)
            cand_logp, cand_index = cand.topk(min(2 * k, n * V), dim=-1)                    # (B, 2k), best first
            beam, token = cand_index // V, cand_index % V                                   # parent beam, new token
            prefix = ys.view(B, n, t)                                                       # (B, n, t)
            is_eos = token == c.eos_id
            new_fin = is_eos & (rank[: token.size(1)] < k) & ~done[:, None]                 # (B, 2k)
            if bool(new_fin.any()):
                seq = torch.cat([prefix.gather(1, beam[..., None].expand(-1, -1, t)), token[..., None]], dim=2)
                scores = normalised(cand_logp, t).masked_fill(~new_fin, float("-inf"))
                fin_ids, fin_scores = _merge_finished(fin_ids, fin_scores, seq, scores, c.pad_id)
            # the new beams: the k best continuations that do not end in eos
            live_logp, pick = cand_logp.masked_fill(is_eos, float("-inf")).topk(k, dim=-1)  # (B, k)
            beam, token = beam.gather(1, pick), token.gather(1, pick)                       # (B, k)
            index = (torch.arange(B, device=dev)[:, None] * n + beam).view(-1)              # (B·k,) parent rows
            ys = torch.cat([ys.index_select(0, index), token.view(-1, 1)], dim=1)           # (B·k, t + 1)
            stepper.reorder(index)                                                          # cache, memory, mask follow
            n = k
            if early_stopping:                                                              # the notes' rule: k finished
                done |= torch.isfinite(fin_scores[:, -1])
            else:                                                                           # and no live beam scores better
                done |= fin_scores[:, -1] >= normalised(live_logp[:, 0], t)
            if bool(done.all()):
                break
            if t == max_len:                                                                # out of room: live beams finish
                scores = normalised(live_logp, t).masked_fill(done[:, None], float("-inf"))
                fin_ids, fin_scores = _merge_finished(fin_ids, fin_scores, ys.view(B, k, t + 1), scores, c.pad_id)
    keep = n_best or 1
    ids, scores = fin_ids[:, :keep], fin_scores[:, :keep]                                   # (B, keep, T), best first
    ids = ids[..., : int((ids != c.pad_id).sum(dim=-1).max())]                              # drop the common padding
    if n_best is None:
        return ids[:, 0]                                                                    # (B, T)
    return ids, scores


# [book/11_decoding.ipynb, cell 25]
def _check_sampling(temperature, top_k, top_p) -> None:
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) \
            or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r} "
                         "(the limit temperature -> 0 is greedy_decode)")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 0:
        raise ValueError(f"top_k must be an int >= 0 (0 = no top-k filter), got {top_k!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be a number in (0, 1] (1 = no nucleus filter), got {top_p!r}")


def sampling_distribution(logits: torch.Tensor, temperature: float = 1.0, top_k: int = 0,
                          top_p: float = 1.0) -> torch.Tensor:
    """The distribution :func:`sample` draws from: logits (…, V) -> probabilities (…, V), float32.

    In this order: divide the logits by ``temperature``; keep the ``top_k`` largest (exactly k: ties at
    the boundary are broken by ``torch.topk``; 0 keeps all); softmax; keep the nucleus, the smallest set of most probable
    tokens whose probabilities add up to at least ``top_p`` (1 keeps all); renormalise.
    """
    _check_sampling(temperature, top_k, top_p)
    logits = logits.float()
    V = logits.size(-1)
    # subtract the max before dividing, so that a tiny temperature cannot overflow to +inf
    scaled = (logits - logits.amax(dim=-1, keepdim=True)) / temperature                     # (…, V), max 0
    if 0 < top_k < V:
        keep = torch.zeros_like(scaled, dtype=torch.bool)
        keep.scatter_(-1, scaled.topk(top_k, dim=-1).indices, True)                         # exactly k
        scaled = scaled.masked_fill(~keep, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)                                                   # (…, V)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)                               # (…, V)
        mass_before = sorted_p.cumsum(dim=-1) - sorted_p                                    # exclusive running sum
        drop_sorted = mass_before >= top_p                                                  # the set is big enough already
        drop_sorted[..., 0] = False                                                         # the top token always stays
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)                # back to vocabulary order
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def sample(model: Transformer, src: torch.Tensor, max_len: int, temperature: float = 1.0, top_k: int = 0,
           top_p: float = 1.0, generator: torch.Generator | None = None, use_cache: bool = True) -> torch.Tensor:
    """Sampling of a batch: at every step each sentence draws its next token from
    :func:`sampling_distribution` (temperature, then top-k, then top-p) of the model's logits.

    src (B, S) -> ids (B, T), laid out as :func:`greedy_decode`'s output. Pass a ``torch.Generator`` on
    the model's device for reproducible draws: the same generator state gives the same output, with or
    without the cache. pad and bos are never generated.
    """
    _check_model(model)
    _check_sampling(temperature, top_k, top_p)
    src = _check_src(model, src)
    _check_max_len(model, max_len)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator or None, got {type(generator).__name__}")

    def draw(logits: torch.Tensor) -> torch.Tensor:                                        # (B, V) -> (B,)
        probs = sampling_distribution(logits, temperature, top_k, top_p)
        # every row draws, finished or not: the random stream does not depend on which have finished
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    return _generate(model, src, max_len, use_cache, choose=draw)


__all__ = ['greedy_decode', 'length_penalty_factor', 'beam_search', 'sampling_distribution', 'sample']
