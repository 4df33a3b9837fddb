"""Tests of transformer_lib.training.batching: teacher-forcing inputs, the dataset and collation of (source, target)
pairs, the token-bucket sampler's coverage, budget and split across replicas, the padding measure, the toy
tasks, and bad input."""
from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.training.batching import (
    Batch,
    PadCollate,
    PairDataset,
    TokenBucketSampler,
    copy_task,
    padding_fraction,
    reverse_task,
    shift_right,
    toy_task,
)

SETTINGS = settings(max_examples=examples(40), deadline=None)


# ---------------------------------------------------------------- teacher forcing

def test_shift_right_puts_bos_first_and_drops_the_last_column():
    tgt = torch.tensor([[5, 6, 7, 2], [8, 2, 0, 0]])
    assert shift_right(tgt, bos_id=1).tolist() == [[1, 5, 6, 7], [1, 8, 2, 0]]


@pytest.mark.parametrize("bad", [torch.tensor([1, 2, 3]), torch.zeros(2, 3), [[1, 2]]])
def test_shift_right_rejects_bad_input(bad):
    with pytest.raises(ValueError, match="tgt"):
        shift_right(bad, 1)


def test_collate_builds_teacher_forcing_pairs():
    data = PairDataset([([5, 6, 7], [7, 6, 5]), ([8], [9, 10])])
    batch = PadCollate(pad_id=0, bos_id=1, eos_id=2)([data[0], data[1]])
    assert batch.src.tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch.tgt_out.tolist() == [[7, 6, 5, 2], [9, 10, 2, 0]]
    assert batch.tgt_in.tolist() == [[1, 7, 6, 5], [1, 9, 10, 2]]
    assert batch.n_tokens(pad_id=0) == 7
    with_eos = PadCollate(src_eos=True)([data[1]])
    assert with_eos.src.tolist() == [[8, 2]]


@pytest.mark.parametrize("kwargs, match", [({"pad_id": -1}, "pad_id"), ({"bos_id": 1.5}, "bos_id"),
                                           ({"eos_id": True}, "eos_id")])
def test_collate_rejects_bad_special_ids(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PadCollate(**kwargs)
    with pytest.raises(ValueError, match="examples"):
        PadCollate()([])


@pytest.mark.parametrize("pairs, match", [([([], [1])], r"pairs\[0\]\[0\]"), ([([1], [[1, 2]])], r"pairs\[0\]\[1\]"),
                                          ([([1.5], [1])], "integer"), ([([1],)], "pair")])
def test_pair_dataset_rejects_bad_pairs(pairs, match):
    with pytest.raises(ValueError, match=match):
        PairDataset(pairs)


def test_pair_dataset_lengths_count_the_added_bos_or_eos():
    data = PairDataset([([5, 6, 7], [7]), ([8], [9, 10, 11, 12])])
    assert data.lengths == [3, 5] and len(data) == 2
    src, tgt = data[1]
    assert src.dtype == tgt.dtype == torch.long and tgt.tolist() == [9, 10, 11, 12]


# ---------------------------------------------------------------- toy tasks

def test_toy_tasks():
    for src, tgt in copy_task(50, vocab_size=9, min_len=2, max_len=5, seed=3):
        assert src == tgt and 2 <= len(src) <= 5 and all(3 <= t < 9 for t in src)
    for src, tgt in reverse_task(50, seed=3):
        assert tgt == src[::-1]
    assert toy_task("sort", 5, seed=1) == [(s, sorted(s)) for s, _ in toy_task("sort", 5, seed=1)]
    assert copy_task(20, seed=4) == copy_task(20, seed=4) != copy_task(20, seed=5)
    assert copy_task(0) == []


@pytest.mark.parametrize("args, kwargs, match", [
    (("shuffle", 3), {}, "kind"),
    (("copy", 3), {"min_len": 5, "max_len": 4}, "min_len"),
    (("copy", -1), {}, "n"),
    (("copy", True), {}, "n"),
    (("copy", 3), {"vocab_size": 3}, "vocab_size"),
    (("copy", 3), {"min_len": 0}, "min_len"),
])
def test_toy_task_rejects_bad_input(args, kwargs, match):
    with pytest.raises(ValueError, match=match):
        toy_task(*args, **kwargs)


# ---------------------------------------------------------------- bucketing

@SETTINGS
@given(st.lists(st.integers(1, 40), min_size=1, max_size=300), st.integers(1, 200), st.booleans(),
       st.integers(0, 5), st.integers(0, 1000))
def test_bucket_sampler_covers_every_example_once_within_the_budget(lengths, max_tokens, shuffle, epoch, seed):
    sampler = TokenBucketSampler(lengths, max_tokens, shuffle=shuffle, seed=seed, pool_size=7)
    sampler.set_epoch(epoch)
    batches = list(sampler)
    assert len(batches) == len(sampler)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(lengths)))                        # exactly once each
    for b in batches:
        longest = max(lengths[i] for i in b)
        assert len(b) * longest <= max_tokens or len(b) == 1                # budget, or one too-long example
        if len(b) == 1 and longest > max_tokens:
            assert lengths[b[0]] > max_tokens
    assert [list(b) for b in sampler] == batches                             # same epoch, same batches


def test_bucket_sampler_shuffles_per_epoch_and_groups_lengths():
    lengths = [(i * 7919) % 30 + 1 for i in range(2000)]
    s = TokenBucketSampler(lengths, 300, seed=1)
    s.set_epoch(0)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    assert e0 != e1
    # sorting within pools cuts padding: measured against random batches of the same sizes
    pad_bucket = sum(len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b) for b in e0)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(lengths), generator=g).tolist()
    sizes, k, pad_random = [len(b) for b in e0], 0, 0
    for n in sizes:
        b = perm[k:k + n]
        k += n
        pad_random += len(b) * max(lengths[i] for i in b) - sum(lengths[i] for i in b)
    assert pad_bucket < 0.25 * pad_random


def test_bucket_sampler_without_shuffle_is_sorted_and_stable():
    lengths = [5, 1, 4, 2, 3, 1]
    s = TokenBucketSampler(lengths, 6, shuffle=False)
    batches = list(s)
    flat = [i for b in batches for i in b]
    assert [lengths[i] for i in flat] == sorted(lengths)
    s.set_epoch(3)
    assert list(s) == batches


@pytest.mark.parametrize("n, drop_last", [(97, False), (97, True), (10, False)])
def test_bucket_sampler_splits_across_replicas(n, drop_last):
    lengths = [(i % 9) + 1 for i in range(n)]
    ranks = [TokenBucketSampler(lengths, 20, seed=3, num_replicas=3, rank=r, drop_last=drop_last) for r in range(3)]
    per_rank = [list(s) for s in ranks]
    assert len({len(b) for b in per_rank}) == 1                               # same number of steps
    seen = [i for batches in per_rank for b in batches for i in b]
    if drop_last:
        assert len(seen) == len(set(seen))                                    # nothing twice
    else:
        assert set(seen) == set(range(n))                                     # nothing left out
    single = [i for b in TokenBucketSampler(lengths, 20, seed=3, num_replicas=1, rank=0) for i in b]
    assert sorted(single) == list(range(n))


@pytest.mark.parametrize("kwargs, match", [({"max_tokens": 0}, "max_tokens"), ({"max_tokens": True}, "max_tokens"),
                                           ({"lengths": []}, "lengths"), ({"lengths": [3, 0]}, "lengths"),
                                           ({"rank": 2, "num_replicas": 2}, "rank"), ({"rank": -1}, "rank"),
                                           ({"num_replicas": 0}, "num_replicas"), ({"pool_size": 0}, "pool_size")])
def test_bucket_sampler_rejects_bad_input(kwargs, match):
    args = {"lengths": [3, 4, 5], "max_tokens": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        TokenBucketSampler(**args)


def test_padding_fraction_counts_pad_positions():
    batch = Batch(torch.tensor([[3, 4], [5, 0]]), torch.tensor([[1, 3, 4]]), torch.tensor([[3, 4, 0]]))
    assert padding_fraction([batch]) == pytest.approx(2 / 7)


# ---------------------------------------------------------------- inputs that were accepted and wrong (issue 14)

@pytest.mark.parametrize("pair, where", [(([3.7, 4.2], [5, 6]), r"examples\[0\]\[0\]"),
                                         (([3, 4], torch.tensor([5.9, 6.0])), r"examples\[0\]\[1\]"),
                                         ((torch.tensor([True, False]), [5]), r"examples\[0\]\[0\]")])
def test_collate_refuses_non_integer_ids_instead_of_truncating_them(pair, where):
    with pytest.raises(ValueError, match=where + ".*integer token ids"):
        PadCollate()([pair])
    assert PadCollate()([(torch.tensor([3, 4]), torch.tensor([5], dtype=torch.int32))]).src.dtype == torch.long


@pytest.mark.parametrize("kwargs", [{"bos_id": 2, "eos_id": 2}, {"pad_id": 2}, {"pad_id": 1}])
def test_collate_refuses_special_ids_that_coincide(kwargs):
    with pytest.raises(ValueError, match="pad_id, bos_id and eos_id must differ"):
        PadCollate(**kwargs)
