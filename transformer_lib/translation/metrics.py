"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: e1c9dfb9f725d080
# fmt: off

# [book/12_translation.ipynb, cell b8dce5d6]
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from transformer_lib.checks import check_int, check_probability


def corpus_bleu(hypotheses: Sequence[str],
                references: Sequence[str]) -> tuple[float, str]:
    """BLEU of ``hypotheses`` against one reference each, computed by sacrebleu with its
    standard tokenisation -> (score in [0, 100], sacrebleu's signature, which says how
    the score was computed). Needs the ``bleu`` extra."""
    bleu, hypotheses, references = _bleu_metric(hypotheses, references)
    score = bleu.corpus_score(hypotheses, [references])
    return score.score, str(bleu.get_signature())


def _bleu_metric(hypotheses: Sequence[str], references: Sequence[str]
                 ) -> tuple[Any, list[str], list[str]]:
    """sacrebleu's BLEU metric and the two lists, checked to be as many."""
    try:
        import sacrebleu
    except ImportError:
        raise ImportError("sacrebleu is not installed; it comes with the 'bleu' extra: "
                          "pip install 'transformer_lib[bleu]'") from None
    hypotheses, references = list(hypotheses), list(references)
    if len(hypotheses) != len(references):
        raise ValueError(f"hypotheses and references must be as many, got "
                         f"{len(hypotheses)} and {len(references)}")
    return sacrebleu.metrics.BLEU(), hypotheses, references


# [book/12_translation.ipynb, cell ef18c50f]
def bootstrap_ci(values, statistic: Callable[[np.ndarray], float] | None = None, *,
                 n_resamples: int = 1000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high): ``statistic`` of ``values`` and its percentile bootstrap
    interval at confidence ``level``.

    ``values`` holds one entry (or one row of numbers) per test sentence;
    ``statistic`` maps an array of such rows to a number (default: their mean, the
    exact match of 0/1 entries). The sentences are drawn with replacement
    ``n_resamples`` times (by ``seed``); the interval holds the middle ``level`` of
    the resamples' statistics. The estimate is the statistic of ``values`` itself."""
    rows = np.asarray(values, dtype=float)
    if rows.ndim == 0 or len(rows) == 0:
        raise ValueError("values must hold one entry per sentence, got none")
    n_resamples = check_int(n_resamples, "n_resamples", minimum=2)
    level = check_probability(level, "level", zero=False, one=False)
    stat = statistic if statistic is not None else (lambda r: float(r.mean()))
    rng = np.random.default_rng(seed)
    draws = rng.integers(len(rows), size=(n_resamples, len(rows)))   # (n_resamples, n)
    stats = np.array([stat(rows[i]) for i in draws])
    low, high = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(stat(rows)), float(low), float(high)


def bleu_ci(hypotheses: Sequence[str], references: Sequence[str], *,
            n_resamples: int = 1000, level: float = 0.95,
            seed: int = 0) -> tuple[float, float, float]:
    """(BLEU, low, high): the score of :func:`corpus_bleu` and its bootstrap interval
    over sentences (:func:`bootstrap_ci`). A resample's BLEU is computed from the sums
    of its sentences' n-gram counts, as sacrebleu's own bootstrap does; a sentence's
    counts come from sacrebleu's score of that sentence alone. Needs the ``bleu``
    extra."""
    bleu, hypotheses, references = _bleu_metric(hypotheses, references)
    if not hypotheses:
        raise ValueError("hypotheses must hold at least one sentence, got none")
    n = bleu.max_ngram_order
    # a row per sentence: its length, its reference's, then n-gram matches and totals
    alone = (bleu.corpus_score([h], [[r]]) for h, r in zip(hypotheses, references))
    counts = np.array([[s.sys_len, s.ref_len, *s.counts, *s.totals] for s in alone])

    def score(rows: np.ndarray) -> float:
        sys_len, ref_len, *sums = rows.sum(axis=0).round().astype(int).tolist()
        return float(bleu.compute_bleu(
            sums[:n], sums[n:], sys_len, ref_len, smooth_method=bleu.smooth_method,
            smooth_value=bleu.smooth_value, effective_order=bleu.effective_order,
            max_ngram_order=n).score)

    return bootstrap_ci(counts, score, n_resamples=n_resamples, level=level, seed=seed)


__all__ = ['corpus_bleu', 'bootstrap_ci', 'bleu_ci']
