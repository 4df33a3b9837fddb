"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: aba6531d2a3fdd04
# fmt: off

# [book/12_translation.ipynb, cell b8dce5d6]
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from transformer_lib.stats import bootstrap_ci, paired_bootstrap


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
def bleu_ci(hypotheses: Sequence[str], references: Sequence[str], *,
            n_resamples: int = 1000, level: float = 0.95,
            seed: int = 0) -> tuple[float, float, float]:
    """(BLEU, low, high): the score of :func:`corpus_bleu` and its bootstrap interval
    over sentences (:func:`transformer_lib.stats.bootstrap_ci`). A resample's BLEU is
    computed from the sums of its sentences' n-gram counts, as sacrebleu's own
    bootstrap does; a sentence's counts come from sacrebleu's score of that sentence
    alone. Needs the ``bleu`` extra."""
    counts, score = _sentence_counts(hypotheses, references)
    return bootstrap_ci(counts, score, n_resamples=n_resamples, level=level, seed=seed)


def paired_bleu_ci(before: Sequence[str], after: Sequence[str],
                   references: Sequence[str], *, n_resamples: int = 1000,
                   level: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """(difference, low, high): BLEU of ``after`` minus BLEU of ``before``, two systems'
    outputs for the same sentences, with Koehn's paired bootstrap interval
    (:func:`transformer_lib.stats.paired_bootstrap`): each resample draws sentences
    and scores both systems on the same draw. Needs the ``bleu`` extra."""
    first, score = _sentence_counts(before, references)
    second, _ = _sentence_counts(after, references)
    return paired_bootstrap(first, second, score, n_resamples=n_resamples,
                            level=level, seed=seed)


def _sentence_counts(hypotheses: Sequence[str], references: Sequence[str]
                     ) -> tuple[np.ndarray, Callable[[np.ndarray], float]]:
    """A row of sacrebleu's counts per sentence (its length, its reference's, then
    n-gram matches and totals, each from the sentence scored alone), and the function
    that computes corpus BLEU from the sums of such rows, as sacrebleu's bootstrap
    does."""
    bleu, hypotheses, references = _bleu_metric(hypotheses, references)
    if not hypotheses:
        raise ValueError("hypotheses must hold at least one sentence, got none")
    n = bleu.max_ngram_order
    alone = (bleu.corpus_score([h], [[r]]) for h, r in zip(hypotheses, references))
    counts = np.array([[s.sys_len, s.ref_len, *s.counts, *s.totals] for s in alone])

    def score(rows: np.ndarray) -> float:
        sys_len, ref_len, *sums = rows.sum(axis=0).round().astype(int).tolist()
        return float(bleu.compute_bleu(
            sums[:n], sums[n:], sys_len, ref_len, smooth_method=bleu.smooth_method,
            smooth_value=bleu.smooth_value, effective_order=bleu.effective_order,
            max_ngram_order=n).score)

    return counts, score


__all__ = ['corpus_bleu', 'bleu_ci', 'paired_bleu_ci']
