"""Tests of the book's statistical tools (transformer_lib.stats, and paired_bleu_ci in translation.metrics):
the exact sign test against binomial tails worked out by hand and against a simulation, the paired bootstrap
against the unpaired one, the seeds x items bootstrap against what it must contain, and bad input refused."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from transformer_lib.stats import (
    PairedExact,
    bootstrap_ci,
    describe_interval,
    format_p,
    paired_bootstrap,
    paired_exact,
    seeds_above,
    seeds_items_bootstrap,
    sign_test,
)
from transformer_lib.translation.metrics import bleu_ci, corpus_bleu, paired_bleu_ci


@pytest.mark.parametrize("b, c, p", [
    (0, 0, 1.0),
    (0, 4, 0.125),                 # 2 * 0.5**4
    (4, 0, 0.125),
    (0, 6, 0.03125),               # 2 * 0.5**6
    (2, 8, 0.109375),              # 2 * (1 + 10 + 45) / 1024
    (5, 15, 0.041389465332031),    # 2 * sum(C(20, i), i <= 5) / 2**20
    (3, 3, 1.0),
    (1, 2, 1.0),
    (10, 40, 2.3863e-05),          # from a table of the binomial distribution
])
def test_sign_test_matches_binomial_tails(b, c, p):
    assert sign_test(b, c) == pytest.approx(p, rel=1e-4)


@given(st.integers(0, 60), st.integers(0, 60))
def test_sign_test_is_symmetric_a_probability_and_grows_toward_balance(b, c):
    p = sign_test(b, c)
    assert 0 < p <= 1 and p == sign_test(c, b)
    if b < c:                      # one more toward the even split: never less likely
        assert sign_test(b + 1, c) >= p


def test_sign_test_has_its_level_under_the_null():
    """Under a fair coin the test rejects at most 5 % of the time (exact tests are conservative)."""
    rng = np.random.default_rng(0)
    n = 25
    made_right = rng.binomial(n, 0.5, size=20000)
    rejected = np.mean([sign_test(int(k), n - int(k)) < 0.05 for k in made_right])
    exact_size = sum(math.comb(n, k) for k in range(n + 1) if sign_test(k, n - k) < 0.05) / 2**n
    assert rejected <= 0.05 + 0.005
    assert rejected == pytest.approx(exact_size, abs=0.005)


def test_paired_exact_counts_the_discordant_items():
    before = [1, 1, 0, 0, 1, 0, 1]
    after = [1, 0, 1, 1, 1, 0, 0]
    r = paired_exact(before, after)
    assert r == PairedExact(made_right=2, made_wrong=2, n=7, p=1.0)
    assert r.change == 0 and r.direction() == 0
    # torch bools and numpy arrays are accepted as they are
    assert paired_exact(torch.tensor(before).bool(), np.array(after)) == r


def test_paired_exact_gives_a_direction_only_when_the_test_does():
    before = np.zeros(100, dtype=bool)
    four = paired_exact(before, np.r_[np.ones(4), np.zeros(96)].astype(bool))
    six = paired_exact(before, np.r_[np.ones(6), np.zeros(94)].astype(bool))
    assert four.direction() == 0 and "no different beyond the noise" in four.describe()
    assert "of 100 outputs, 4 made right and 0 made wrong, exact test p = 0.12" in four.describe()
    assert six.direction() == 1 and six.describe().startswith("higher by 6.0 points")
    assert paired_exact(np.ones(6, bool), np.zeros(6, bool)).direction() == -1
    assert "the same, item for item" in paired_exact(before, before).describe()


@pytest.mark.parametrize("before, after, match", [
    ([1, 0], [1, 0, 1], "same items"),
    ([], [], "one outcome per item"),
    ([[1, 0]], [[1, 0]], "one outcome per item"),
    ([1, 2], [1, 0], "right/wrong outcomes"),
    ([0.5, 1], [1, 0], "right/wrong outcomes"),
])
def test_paired_exact_refuses_bad_input(before, after, match):
    with pytest.raises(ValueError, match=match):
        paired_exact(before, after)


def test_sign_test_refuses_negative_counts():
    with pytest.raises(ValueError, match="made_wrong"):
        sign_test(1, -1)


def test_format_p():
    assert format_p(0.125) == "exact test p = 0.12"
    assert format_p(0.03125) == "exact test p = 0.031"
    assert format_p(1e-5) == "exact test p < 0.001"


def test_paired_bootstrap_is_narrower_than_unpaired_when_items_share_difficulty():
    rng = np.random.default_rng(1)
    difficulty = rng.normal(size=500)
    a = difficulty + rng.normal(scale=0.1, size=500)
    b = difficulty + 0.05 + rng.normal(scale=0.1, size=500)
    est, lo, hi = paired_bootstrap(a, b, n_resamples=2000, seed=0)
    assert est == pytest.approx(b.mean() - a.mean())
    _, alo, ahi = bootstrap_ci(a, n_resamples=2000, seed=0)
    _, blo, bhi = bootstrap_ci(b, n_resamples=2000, seed=1)
    assert lo > 0                           # the paired interval finds the shift ...
    assert alo < bhi and blo < ahi          # ... that the two marginal intervals, overlapping, hide
    assert hi - lo < 0.5 * (ahi - alo)


def test_paired_bootstrap_takes_rows_and_a_statistic():
    a = np.array([[1.0, 2.0], [2.0, 2.0], [3.0, 4.0]])
    b = a * [2.0, 1.0]
    est, lo, hi = paired_bootstrap(a, b, lambda r: float(r[:, 0].sum() / r[:, 1].sum()), seed=0)
    assert est == pytest.approx(6 / 8 * 2 - 6 / 8)
    assert lo <= est <= hi
    with pytest.raises(ValueError, match="same items"):
        paired_bootstrap(a, b[:2])


def test_paired_bleu_ci_is_the_difference_of_corpus_bleu():
    refs = ["the cat sat on the mat", "a dog ran in the park", "it is raining today",
            "she reads a good book", "we eat rice at noon", "the sun is very hot"] * 3
    worse = [r.replace("the", "a") for r in refs]
    est, lo, hi = paired_bleu_ci(worse, refs, refs, n_resamples=300, seed=0)
    assert est == pytest.approx(corpus_bleu(refs, refs)[0] - corpus_bleu(worse, refs)[0])
    assert 0 < lo <= est <= hi
    assert paired_bleu_ci(refs, refs, refs, n_resamples=50) == pytest.approx((0.0, 0.0, 0.0))
    # the paired interval's sentences are those of bleu_ci: its estimate is bleu_ci's
    assert bleu_ci(worse, refs, n_resamples=50)[0] == pytest.approx(100 - est)


def test_seeds_items_bootstrap_holds_the_seeds_luck():
    rng = np.random.default_rng(2)
    items = 200

    def family(rate_by_seed):
        return np.array([rng.random(items) < r for r in rate_by_seed], dtype=float)

    steady = family([0.80] * 8)
    spread = family([0.60, 0.95, 0.70, 0.99, 0.65, 0.90, 0.75, 0.97])   # same mean, wild seeds
    est, lo, hi = seeds_items_bootstrap(steady, spread, seed=0)
    assert est == pytest.approx(spread.mean() - steady.mean())
    assert lo < 0 < hi                      # seeds this far apart cannot give a direction
    better = family([0.95] * 8)
    est2, lo2, hi2 = seeds_items_bootstrap(steady, better, seed=0)
    assert lo2 > 0 and hi2 - lo2 < hi - lo
    # the interval of the reverse comparison is the mirror image, and stays within [-1, 1]
    _, rlo, rhi = seeds_items_bootstrap(better, steady, seed=0)
    assert -1 <= rlo <= rhi < 0


def test_seeds_items_bootstrap_clips_to_the_possible_and_refuses_bad_tables():
    zeros, ones = np.zeros((3, 5)), np.ones((3, 5))
    assert seeds_items_bootstrap(zeros, ones, n_resamples=50) == (1.0, 1.0, 1.0)
    _, lo, hi = seeds_items_bootstrap(zeros, ones, n_resamples=50, bounds=(-0.5, 0.5))
    assert (lo, hi) == (0.5, 0.5)
    with pytest.raises(ValueError, match="at least 2 seeds"):
        seeds_items_bootstrap(np.zeros((1, 5)), ones)
    with pytest.raises(ValueError, match="second must be"):
        seeds_items_bootstrap(zeros, np.ones(5))
    with pytest.raises(ValueError, match="finite"):
        seeds_items_bootstrap(zeros, np.full((3, 5), np.nan))


def test_seeds_above_and_describe_interval():
    assert seeds_above([0.07, 0.61, 0.37, 0.9], 0.5) == (2, 4)
    with pytest.raises(ValueError, match="one score per seed"):
        seeds_above([], 0.5)
    assert describe_interval(0.09, 0.04, 0.14) == "higher by 9.0 points (95 % CI +4.0 to +14.0)"
    assert describe_interval(-0.09, -0.14, -0.04, down="under-confident") == (
        "under-confident by 9.0 points (95 % CI -14.0 to -4.0)")
    assert describe_interval(0.01, -0.02, 0.04).startswith("within noise (+1.0 points")


def test_describe_interval_never_prints_a_nonzero_bound_as_zero():
    text = describe_interval(-0.1, -0.27, -0.0004)
    assert text == "lower by 10.0 points (95 % CI -27.0 to -0.04)"
    assert describe_interval(0.1, 0.0, 0.3).endswith("+0.0 to +30.0)")   # a bound of 0 is 0
