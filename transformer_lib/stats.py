"""Generated from book/10b_training_measured.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 7fe2929bbee5d7c2
# fmt: off

# [book/10b_training_measured.ipynb, cell 6f228188]
from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from transformer_lib.checks import check_int, check_probability


# [book/10b_training_measured.ipynb, cell 57314f83]
def sign_test(made_right: int, made_wrong: int) -> float:
    """The exact two-sided sign test: the chance, if a change were as likely to go one
    way as the other, of a split of ``made_right + made_wrong`` discordant items at
    least as uneven as this one. It is McNemar's test computed exactly (no normal
    approximation), so it is right for a handful of items too. 1.0 when there are
    none."""
    b = check_int(made_right, "made_right", minimum=0)
    c = check_int(made_wrong, "made_wrong", minimum=0)
    n = b + c
    tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))   # P(X <= min) * 2^n
    return min(1.0, 2 * tail / 2**n)


class PairedExact(NamedTuple):
    """Two systems' right/wrong outcomes on the same items, compared: how many items
    the second got right that the first got wrong (``made_right``), the reverse
    (``made_wrong``), how many items there were, and the exact sign test's ``p``."""
    made_right: int
    made_wrong: int
    n: int
    p: float

    @property
    def change(self) -> float:
        """The change in the rate of right outcomes, second minus first."""
        return (self.made_right - self.made_wrong) / self.n

    def direction(self, alpha: float = 0.05) -> int:
        """+1 (the second is more often right), -1 (less often) or 0 (the test cannot
        tell), at two-sided level ``alpha``."""
        if self.p >= alpha:
            return 0
        return 1 if self.made_right > self.made_wrong else -1

    def describe(self, noun: str = "outputs", alpha: float = 0.05) -> str:
        """The comparison in words: the counts always, a direction only when the exact
        test gives one (``p < alpha``). ``noun`` names the items, in the plural."""
        if self.made_right == self.made_wrong == 0:
            return f"the same, item for item (0 of {self.n} {noun} changed)"
        counts = (f"of {self.n} {noun}, {self.made_right} made right and "
                  f"{self.made_wrong} made wrong, {format_p(self.p)}")
        way = self.direction(alpha)
        if way == 0:
            return (f"no different beyond the noise ({100 * self.change:+.1f} points; "
                    f"{counts})")
        word = "higher" if way > 0 else "lower"
        return f"{word} by {100 * abs(self.change):.1f} points ({counts})"


def paired_exact(before, after) -> PairedExact:
    """Compare two systems on the same items from their right/wrong outcomes
    (``before`` and ``after``: one bool or 0/1 per item, in the same order) with the
    exact sign test on the discordant items. Use it for exact match, or any yes/no
    score, of two decoders or two models on one test set; the items where both agree
    carry no information about which is better, and the test ignores them."""
    a, b = _outcomes(before, "before"), _outcomes(after, "after")
    if a.shape != b.shape:
        raise ValueError(f"before and after must score the same items, got {a.size} "
                         f"and {b.size} outcomes")
    made_right, made_wrong = int((~a & b).sum()), int((a & ~b).sum())
    return PairedExact(made_right, made_wrong, int(a.size),
                       sign_test(made_right, made_wrong))


def _outcomes(values, name: str) -> np.ndarray:
    """(n,) bools from one right/wrong outcome per item; anything else is refused."""
    x = np.asarray(values.cpu() if hasattr(values, "cpu") else values)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{name} must hold one outcome per item (a 1-d sequence), "
                         f"got shape {x.shape}")
    if not np.isin(x, (0, 1)).all():
        raise ValueError(f"{name} must hold right/wrong outcomes (bools or 0/1)")
    return x.astype(bool)


def format_p(p: float) -> str:
    """A p-value as the book prints it: ``p = 0.13``, ``p = 0.031``, ``p < 0.001``."""
    if p < 0.001:
        return "exact test p < 0.001"
    return f"exact test p = {p:.2g}" if p < 0.1 else f"exact test p = {p:.2f}"


# [book/10b_training_measured.ipynb, cell 92ca46e1]
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


def paired_bootstrap(before, after,
                     statistic: Callable[[np.ndarray], float] | None = None, *,
                     n_resamples: int = 1000, level: float = 0.95,
                     seed: int = 0) -> tuple[float, float, float]:
    """(estimate, low, high) of ``statistic(after) - statistic(before)``, two systems
    scored on the same items (one entry or row per item each, in the same order), with
    the paired bootstrap interval: each resample draws items, and both systems are
    scored on the same draw (Koehn 2004). Use it for a corpus statistic such as BLEU
    (pass rows of sentence counts and a statistic of their sums), or a mean over
    hundreds of items; for yes/no outcomes with few discordant items use
    :func:`paired_exact`."""
    a, b = np.asarray(before, dtype=float), np.asarray(after, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"before and after must score the same items, got shapes "
                         f"{a.shape} and {b.shape}")
    if a.ndim == 0 or len(a) == 0:
        raise ValueError("before and after must hold one entry per item, got none")
    width = 1 if a.ndim == 1 else a.shape[1]
    rows = np.hstack([a.reshape(len(a), width), b.reshape(len(b), width)])
    stat = statistic if statistic is not None else (lambda r: float(r.mean()))

    def diff(r: np.ndarray) -> float:
        left, right = r[:, :width], r[:, width:]
        if a.ndim == 1:
            left, right = left[:, 0], right[:, 0]
        return stat(right) - stat(left)

    return bootstrap_ci(rows, diff, n_resamples=n_resamples, level=level, seed=seed)


# [book/10b_training_measured.ipynb, cell b68d3557]
def seeds_items_bootstrap(first, second, *, n_resamples: int = 2000,
                          level: float = 0.95, seed: int = 0,
                          bounds: tuple[float, float] = (-1.0, 1.0)
                          ) -> tuple[float, float, float]:
    """(estimate, low, high) of mean(second) - mean(first) for two families of models,
    each trained on several seeds and scored on test items: ``first`` and ``second``
    are arrays (seeds, items) of per-item scores (0/1 for exact match). The estimate is
    the difference of the families' means over seeds of each seed's mean over items.
    Each resample draws seeds with replacement within each family, then items with
    replacement within each drawn seed, so that the interval holds both the luck of
    the training seeds and that of the test items. The seeds of the two families are
    not paired (the same seed gives two architectures unrelated weights). The interval
    is clipped to ``bounds``, the differences that are possible."""
    a, b = _seed_table(first, "first"), _seed_table(second, "second")
    n_resamples = check_int(n_resamples, "n_resamples", minimum=2)
    level = check_probability(level, "level", zero=False, one=False)
    rng = np.random.default_rng(seed)

    def resampled_means(table: np.ndarray) -> np.ndarray:
        seeds, items = table.shape
        s = rng.integers(seeds, size=(n_resamples, seeds, 1))
        i = rng.integers(items, size=(n_resamples, seeds, items))
        return table[s, i].mean(axis=(1, 2))                     # (n_resamples,)

    diffs = resampled_means(b) - resampled_means(a)
    low, high = np.quantile(diffs, [(1 - level) / 2, (1 + level) / 2])
    lo_bound, hi_bound = bounds
    estimate = float(b.mean(axis=1).mean() - a.mean(axis=1).mean())
    return (estimate, float(np.clip(low, lo_bound, hi_bound)),
            float(np.clip(high, lo_bound, hi_bound)))


def _seed_table(values, name: str) -> np.ndarray:
    """(seeds, items) floats from one row of per-item scores per seed."""
    table = np.asarray(values, dtype=float)
    if table.ndim != 2 or table.shape[0] < 2 or table.shape[1] < 1:
        raise ValueError(f"{name} must be (seeds, items) with at least 2 seeds, got "
                         f"shape {table.shape}")
    if not np.isfinite(table).all():
        raise ValueError(f"{name} must hold finite scores")
    return table


def seeds_above(values, threshold: float) -> tuple[int, int]:
    """(k, n): how many of ``n`` runs (one value per seed) scored above ``threshold``.
    Where some runs collapse and others learn, a mean and its interval describe no run;
    "k of n seeds above x" does."""
    v = np.asarray(values, dtype=float).ravel()
    if v.size == 0:
        raise ValueError("values must hold one score per seed, got none")
    return int((v > threshold).sum()), int(v.size)


def describe_interval(estimate: float, low: float, high: float, *,
                      up: str = "higher", down: str = "lower",
                      same: str = "within noise", scale: float = 100.0,
                      unit: str = " points", digits: int = 1,
                      level: float = 0.95) -> str:
    """A difference and its ``level`` interval in words: a direction only when the
    interval excludes 0. ``up`` and ``down`` are the words for the two directions (the
    number follows them after "by"), ``scale`` and ``unit`` how numbers are printed."""
    ci = f"{100 * level:g} % CI {_bound(low, scale, digits)} to " + _bound(
        high, scale, digits)
    if low > 0:
        return f"{up} by {scale * estimate:.{digits}f}{unit} ({ci})"
    if high < 0:
        return f"{down} by {-scale * estimate:.{digits}f}{unit} ({ci})"
    return f"{same} ({scale * estimate:+.{digits}f}{unit}, {ci})"


def _bound(value: float, scale: float, digits: int) -> str:
    """A bound of an interval, signed, with more digits (up to 3 more) where
    ``digits`` would round a non-zero bound to 0: "-0.0" would hide which side of 0
    the bound lies on."""
    while value != 0 and round(scale * value, digits) == 0 and digits < 6:
        digits += 1
    return f"{scale * value:+.{digits}f}"


__all__ = [
    'sign_test', 'PairedExact', 'paired_exact', 'format_p', 'bootstrap_ci',
    'paired_bootstrap', 'seeds_items_bootstrap', 'seeds_above', 'describe_interval',
]
