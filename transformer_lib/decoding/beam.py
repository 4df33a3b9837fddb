"""Generated from book/11_decoding.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 9ca684e753c301bf
# fmt: off

# [book/11_decoding.ipynb, cell 93fe1f50]
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from transformer_lib.checks import check_int
from transformer_lib.decoding.config import LENGTH_NORMS, GenerationConfig
from transformer_lib.decoding.greedy import DecodableModelConfig, Seq2SeqModel
from transformer_lib.decoding.greedy import make_stepper
from transformer_lib.decoding.greedy import check_decoding, decoding_mode


def length_penalty_factor(length: int | torch.Tensor, alpha: float, norm: str = "gnmt"):
    """The divisor of a hypothesis's log-probability in :func:`beam_search`.

    ``length`` is the number of generated tokens, eos included and bos not
    (beam_search's ``count_bos=True`` adds one). ``norm="gnmt"``: ((5 + length) / 6) **
    alpha, Wu et al. (2016), the penalty the Transformer paper used with alpha = 0.6.
    ``norm="power"``: length ** alpha, the plain power form. alpha = 0 gives 1 for
    both: raw log-probabilities, which favour short outputs; so does ``norm="none"``.
    """
    if norm == "gnmt":
        return ((5.0 + length) / 6.0) ** alpha
    if norm == "power":
        return length ** alpha
    if norm == "none":
        return 1.0
    raise ValueError(f"length_norm must be one of {', '.join(LENGTH_NORMS)}; got "
                     f"{norm!r}")


# [book/11_decoding.ipynb, cell 6c7932a2]
class _Beams:
    """A beam search's state: ys (B·n, t) live prefixes (n = 1 at first, then k),
    live_logp (B, n) their log-probabilities; fin_ids (B, k, T), fin_scores (B, k) each
    sentence's k best finished hypotheses, best first (-inf: an empty place, all pad);
    done (B,). ``score(logp, t)`` applies the length penalty of t generated tokens."""

    def __init__(self, config: DecodableModelConfig, B: int, k: int, max_len: int,
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

    # [book/11_decoding.ipynb, cell f60ce3ad]
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

    # [book/11_decoding.ipynb, cell fbc21268]
    def stop(self, t: int, first_k: bool,
             out_of_room: torch.Tensor | None = None) -> bool:
        """Mark the sentences that are done after t generated tokens; True when all are.
        ``out_of_room`` (B,): the sentences whose limit is t, closed after the rule. The
        one value a step reads back from the device."""
        worst = self.fin_scores[:, -1]                                     # (B,)
        if first_k:                                # k finished (fairseq's rule)
            self.done |= torch.isfinite(worst)
        else:                                      # and no live beam scores better
            self.done |= worst >= self.score(self.live_logp[:, 0], t)
        if out_of_room is not None:
            self.close(t, out_of_room)
        return bool(self.done.all())

    def close(self, t: int, rows: torch.Tensor) -> None:
        """Out of room after t tokens: the live beams of the sentences ``rows`` (B,) not
        done join the finished hypotheses, and those sentences are done."""
        closing = rows & ~self.done                                        # (B,)
        scores = self.score(self.live_logp, t)                             # (B, k)
        scores = scores.masked_fill(~closing[:, None], float("-inf"))
        self.finish(self.ys.view(self.B, self.k, t + 1), scores)
        self.done |= closing

    def best(self, n_best: int | None) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids (B, T), scores (B,)) of the best hypotheses, or with ``n_best=n``
        (ids (B, n, T), scores (B, n))."""
        keep = n_best or 1
        ids, scores = self.fin_ids[:, :keep], self.fin_scores[:, :keep]     # best first
        # the first column is bos, which may be the pad id too (Marian): not counted
        length = 1 + int((ids[..., 1:] != self.pad_id).sum(dim=-1).max())
        ids = ids[..., :length]                            # drop the common padding
        if n_best is None:
            return ids[:, 0], scores[:, 0]                           # (B, T), (B,)
        return ids, scores


# [book/11_decoding.ipynb, cell ef8fe888]
def check_beam_size(config: Any, beam_size: Any, name: str = "beam_size") -> int:
    """``beam_size`` as an int in [1, the tokens a beam can take]: the target
    vocabulary of ``config`` less pad, bos and eos, which are never generated."""
    k = check_int(beam_size, name)
    V = config.tgt_vocab_size
    if k > V - len({config.pad_id, config.bos_id, config.eos_id}):
        raise ValueError(f"{name}={k} is larger than the number of tokens a beam "
                         f"can take (tgt_vocab_size={V} less pad, bos and eos)")
    return k


# [book/11_decoding.ipynb, cell 598b5449]
def beam_search(model: Seq2SeqModel, src: torch.Tensor, beam_size: int | None = None,
                max_len: int | None = None, *, config: GenerationConfig | None = None,
                use_cache: bool = True, count_bos: bool = False,
                n_best: int | None = None,
                **settings: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Beam search over a batch: B sentences × beam_size beams run as one batch.

    src (B, S) -> ``(ids, scores)``: ids (B, T), the best hypothesis of each sentence,
    laid out as :func:`greedy_decode`'s output, and scores (B,), its score; with
    ``n_best=n`` (1 <= n <= beam_size), ids (B, n, T) and scores (B, n), the n best of
    each sentence, best first. Always the pair, whatever ``n_best``.

    The settings come from ``config`` (a :class:`GenerationConfig`; None: the
    defaults, beam_size 4, GNMT with alpha 0.6, the book's stopping rule); keywords
    given (``beam_size``, ``max_len`` or ``max_len_a``/``max_len_b``, ``length_norm``,
    ``alpha``, ``stop``; the older ``length_penalty`` is ``alpha``, and
    ``early_stopping=True`` is ``stop="first_k"``) replace its fields.

    * Score of a finished hypothesis: its log-probability divided by
      :func:`length_penalty_factor` (``alpha``, ``length_norm``; the length counts
      eos, and bos only with ``count_bos=True``).
    * The first step expands one beam per sentence, not beam_size copies of it. Each
      step ranks the 2·beam_size best continuations; one that ends in eos and ranks
      among the first beam_size is finished (never extended); the beam_size best that
      do not end in eos are the new beams.
    * ``stop="book"``: a sentence is done when it has beam_size finished hypotheses and
      its best live beam, scored at its current length, does not beat the worst of
      them (exact for alpha = 0, a heuristic for alpha > 0); ``stop="first_k"``: as
      soon as it has beam_size finished (fairseq's rule). After its limit (``max_len``,
      or ``config.limits``, 2·S + 10 by default, S its own length, pad not counted)
      the live beams join the finished ones. beam_size = 1 is greedy decoding.

    A sentence's output does not depend on the batch it is in (one read-back before
    the loop). pad and bos are never generated; eval mode and no gradients while
    decoding, as in :func:`greedy_decode`. ``model``: anything with the members of
    :class:`Seq2SeqModel`.
    """
    src, config = check_decoding(model, src, "beam", config,
                                 {**settings, "beam_size": beam_size,
                                  "max_len": max_len})
    k = check_beam_size(model.config, config.beam_size)
    if n_best is not None and check_int(n_best, "n_best") > k:
        raise ValueError(f"n_best must be None or an int in [1, beam_size={k}], "
                         f"got {n_best!r}")
    return beam_search_unchecked(model, src, config, bool(use_cache),
                                 count_bos=bool(count_bos), n_best=n_best)


# [book/11_decoding.ipynb, cell e869728c]
def beam_search_unchecked(model: Seq2SeqModel, src: torch.Tensor,
                          config: GenerationConfig, use_cache: bool = True, *,
                          count_bos: bool = False, n_best: int | None = None
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`beam_search` without the checks (made once by the caller): src checked
    and on the model's device, ``config`` a GenerationConfig whose beam_size fits the
    model."""
    c, k, alpha, norm = model.config, config.beam_size, config.alpha, config.length_norm
    limit = config.limits((src != c.pad_id).sum(dim=1), c.max_len)       # (B,)
    ends = set(limit.tolist())                # the steps where some run out of room
    max_len, first_k = max(ends), config.stop == "first_k"

    def score(logp: torch.Tensor, t: int) -> torch.Tensor:        # t generated tokens
        return logp / length_penalty_factor(t + int(count_bos), alpha, norm)

    with decoding_mode(model):
        stepper = make_stepper(model, src, use_cache, max_len)
        beams = _Beams(c, src.size(0), k, max_len, score, src.device)
        # after the first step each sentence's rows stay its own: the source's need
        # not move (Stepper.reorder_beams)
        within = getattr(stepper, "reorder_beams", stepper.reorder)
        for t in range(1, max_len + 1):                  # t tokens after this step
            index = beams.advance(stepper.step(beams.ys), t)
            (stepper.reorder if t == 1 else within)(index)    # B rows -> B·k at t = 1
            # out of room: the sentences whose limit is t (known on the host)
            out_of_room = limit == t if t in ends else None
            if beams.stop(t, first_k, out_of_room):            # the step's one sync
                break
    return beams.best(n_best)


__all__ = ['length_penalty_factor', 'beam_search']
