"""Tests of transformer_lib.training: label smoothing against formulas computed another way (the sources'
definition and PyTorch's), the Noam rate at its landmarks, the bucketing sampler's coverage and budget,
teacher-forcing batches, the greedy exact-match helper against an oracle, checkpoint resume = an
uninterrupted run, safe loading, bad input, and a 2-process torchrun (gloo) run."""
from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.training import (Batch, LabelSmoothingLoss, PadCollate, PairDataset, TokenBucketSampler,
                                      copy_task, evaluate, exact_match, load_checkpoint, noam_lambda,
                                      padding_fraction, reverse_task, save_checkpoint, shift_right, toy_task,
                                      train)

SETTINGS = settings(max_examples=40, deadline=None)
ROOT = Path(__file__).resolve().parent.parent


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


@pytest.mark.parametrize("pairs, match", [([([], [1])], r"pairs\[0\]\[0\]"), ([([1], [[1, 2]])], r"pairs\[0\]\[1\]"),
                                          ([([1.5], [1])], "integer"), ([([1],)], "pair")])
def test_pair_dataset_rejects_bad_pairs(pairs, match):
    with pytest.raises(ValueError, match=match):
        PairDataset(pairs)


def test_toy_tasks():
    for src, tgt in copy_task(50, vocab_size=9, min_len=2, max_len=5, seed=3):
        assert src == tgt and 2 <= len(src) <= 5 and all(3 <= t < 9 for t in src)
    for src, tgt in reverse_task(50, seed=3):
        assert tgt == src[::-1]
    assert toy_task("sort", 5, seed=1) == [(s, sorted(s)) for s, _ in toy_task("sort", 5, seed=1)]
    assert copy_task(20, seed=4) == copy_task(20, seed=4) != copy_task(20, seed=5)
    with pytest.raises(ValueError, match="kind"):
        toy_task("shuffle", 3)
    with pytest.raises(ValueError, match="min_len"):
        toy_task("copy", 3, min_len=5, max_len=4)


# ---------------------------------------------------------------- label smoothing

def _sources_loss(logits, target, eps, pad):
    """The sources' definition written out densely: build the (N, V) target distribution and average
    -sum(q log p) over the non-pad rows, in float64."""
    logp = F.log_softmax(logits.double(), -1)
    V = logits.size(-1)
    q = torch.full_like(logp, eps / (V - 2))
    q[torch.arange(len(target)), target] = 1 - eps
    q[:, pad] = 0.0
    rows = -(q * logp).sum(-1)
    keep = target != pad
    return rows[keep].sum() / keep.sum()


def _pytorch_formula(logits, target, eps, pad):
    """PyTorch's label smoothing written out: (1 - eps) one-hot + eps / V everywhere, pad rows skipped."""
    logp = F.log_softmax(logits.double(), -1)
    V = logits.size(-1)
    q = torch.full_like(logp, eps / V)
    q[torch.arange(len(target)), target] += 1 - eps
    rows = -(q * logp).sum(-1)
    keep = target != pad
    return rows[keep].sum() / keep.sum()


@SETTINGS
@given(st.integers(1, 40), st.integers(3, 30), st.floats(0.0, 0.5), st.integers(0, 2), st.integers(0, 10 ** 6))
def test_label_smoothing_matches_the_sources_definition(n, V, eps, pad, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, V, generator=g) * 3
    target = torch.randint(0, V, (n,), generator=g)
    target[0] = (pad + 1) % V                      # at least one real target
    got = LabelSmoothingLoss(eps, pad_id=pad)(logits, target)
    torch.testing.assert_close(got.double(), _sources_loss(logits, target, eps, pad), rtol=1e-5, atol=1e-5)


@SETTINGS
@given(st.integers(1, 40), st.integers(2, 30), st.floats(0.0, 0.5), st.integers(0, 10 ** 6))
def test_pytorch_label_smoothing_matches_its_formula(n, V, eps, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, V, generator=g) * 3
    target = torch.randint(0, V, (n,), generator=g)
    target[0] = 1
    got = F.cross_entropy(logits, target, label_smoothing=eps, ignore_index=0)
    torch.testing.assert_close(got.double(), _pytorch_formula(logits, target, eps, 0), rtol=1e-5, atol=1e-5)


def test_the_two_definitions_differ_and_agree_without_smoothing():
    g = torch.Generator().manual_seed(0)
    logits, target = torch.randn(64, 11, generator=g), torch.randint(1, 11, (64,), generator=g)
    logits[:, 0] = -20.0     # a trained model gives pad almost no probability: PyTorch's target still wants eps/V
    ours = LabelSmoothingLoss(0.1, pad_id=0)(logits, target)
    theirs = F.cross_entropy(logits, target, label_smoothing=0.1, ignore_index=0)
    assert float(theirs - ours) > 0.1
    torch.testing.assert_close(LabelSmoothingLoss(0.0, pad_id=0)(logits, target),
                               F.cross_entropy(logits, target, ignore_index=0))
    # pad_id=None: no pad class, smoothing over the V - 1 other tokens
    q = torch.full((64, 11), 0.1 / 10).scatter(1, target[:, None], 0.9)
    expect = -(q * F.log_softmax(logits, -1)).sum(-1).mean()
    torch.testing.assert_close(LabelSmoothingLoss(0.1, pad_id=None)(logits, target), expect)


@pytest.mark.parametrize("V, eps", [(4, 0.1), (13, 0.1), (1000, 0.1), (13, 0.3)])
def test_label_smoothing_floor_is_the_entropy_and_is_reached(V, eps):
    loss = LabelSmoothingLoss(eps, pad_id=0)
    q = torch.full((V,), eps / (V - 2), dtype=torch.float64)
    q[3 % V] = 1 - eps
    q[0] = 0.0
    entropy = float(-(q[q > 0] * q[q > 0].log()).sum())
    assert loss.floor(V) == pytest.approx(entropy, rel=1e-9)
    assert loss.floor(V) > 0
    # logits = log q (pad: very negative) reach the floor; any other logits stay above it
    best = torch.where(q > 0, q.clamp_min(1e-30).log(), torch.tensor(-60.0, dtype=torch.float64))[None]
    target = torch.tensor([3 % V])
    assert float(loss(best, target)) == pytest.approx(entropy, abs=1e-5)
    g = torch.Generator().manual_seed(V)
    for _ in range(20):
        assert float(loss(best + torch.randn(1, V, generator=g), target)) >= entropy - 1e-6


def test_label_smoothing_without_padding_and_all_padding_and_extreme_logits():
    loss = LabelSmoothingLoss(0.1, pad_id=0)
    logits = torch.randn(6, 9, requires_grad=True)
    target = torch.tensor([1, 2, 3, 4, 5, 6])                  # no pad at all: every row counts
    torch.testing.assert_close(loss(logits, target).double(), _sources_loss(logits.detach(), target, 0.1, 0))
    allpad = loss(logits, torch.zeros(6, dtype=torch.long))    # nothing to learn: 0, not NaN
    allpad.backward()
    assert allpad.item() == 0.0 and torch.isfinite(logits.grad).all()
    huge = torch.tensor([[0.0, 0.0, 1e4, -1e4, 0.0]], requires_grad=True)
    value = loss(huge, torch.tensor([2]))                      # p(token 3) underflows to 0: no log(0)
    value.backward()
    assert torch.isfinite(value) and torch.isfinite(huge.grad).all()
    # (B, T, V) and (B, T) are flattened; "sum" returns the sum over real targets
    lg, tg = torch.randn(2, 3, 7), torch.tensor([[1, 2, 0], [3, 0, 0]])
    torch.testing.assert_close(loss(lg, tg), loss(lg.reshape(6, 7), tg.reshape(6)))
    summed = LabelSmoothingLoss(0.1, pad_id=0, reduction="sum")(lg, tg)
    torch.testing.assert_close(summed, loss(lg, tg) * 3)


@pytest.mark.parametrize("kwargs, args, match", [
    ({"smoothing": 1.0}, None, "smoothing"),
    ({"smoothing": -0.1}, None, "smoothing"),
    ({"reduction": "none"}, None, "reduction"),
    ({}, (torch.randn(4, 5), torch.tensor([1, 2, 3])), "target shape"),
    ({}, (torch.randn(4, 5), torch.tensor([1, 2, 3, 5])), "outside"),
    ({}, (torch.randn(4, 5), torch.ones(4)), "integer"),
    ({}, (torch.randint(0, 5, (4, 5)), torch.tensor([1, 2, 3, 4])), "floating"),
    ({}, (torch.randn(4, 2), torch.tensor([1, 1, 1, 1])), "at least one token"),
    ({"pad_id": 7}, (torch.randn(4, 5), torch.tensor([1, 1, 1, 1])), "pad_id"),
])
def test_label_smoothing_rejects_bad_input(kwargs, args, match):
    with pytest.raises(ValueError, match=match):
        loss = LabelSmoothingLoss(**kwargs)
        loss(*args)


# ---------------------------------------------------------------- the Noam schedule

@pytest.mark.parametrize("d_model, warmup, factor", [(512, 4000, 1.0), (64, 100, 2.0), (16, 1, 1.0)])
def test_noam_values(d_model, warmup, factor):
    rate = noam_lambda(d_model, warmup, factor)
    paper = lambda n: factor * d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)   # n counts from 1
    assert rate(0) == pytest.approx(factor * d_model ** -0.5 * warmup ** -1.5)     # step 0 is defined, > 0
    assert rate(1) == pytest.approx(paper(2))
    peak = factor / math.sqrt(d_model * warmup)
    assert rate(warmup - 1) == pytest.approx(peak)                                # the top
    assert rate(warmup) == pytest.approx(factor * d_model ** -0.5 * (warmup + 1) ** -0.5)
    assert rate(100 * warmup) == pytest.approx(factor * d_model ** -0.5 * (100 * warmup + 1) ** -0.5)
    values = [rate(s) for s in range(3 * warmup)]
    assert max(values) == pytest.approx(peak)
    assert all(a < b for a, b in zip(values[:warmup - 1], values[1:warmup]))       # rises ...
    assert all(a > b for a, b in zip(values[warmup - 1:], values[warmup:]))        # ... then falls


def test_noam_with_lambda_lr_gives_the_paper_rate_to_each_update():
    p = nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, noam_lambda(64, 10))
    used = []
    for _ in range(25):
        used.append(opt.param_groups[0]["lr"])
        p.grad = torch.ones(1)
        opt.step()
        sched.step()
    paper = [64 ** -0.5 * min(n ** -0.5, n * 10 ** -1.5) for n in range(1, 26)]
    assert used == pytest.approx(paper)


@pytest.mark.parametrize("args, match", [((0, 10), "d_model"), ((64, 0), "warmup_steps"), ((64, 10.5), "warmup"),
                                         ((64, 10, 0.0), "factor")])
def test_noam_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        noam_lambda(*args)
    with pytest.raises(ValueError, match="step"):
        noam_lambda(8, 2)(-1)


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


@pytest.mark.parametrize("kwargs, match", [({"max_tokens": 0}, "max_tokens"), ({"lengths": []}, "lengths"),
                                           ({"lengths": [3, 0]}, "lengths"), ({"rank": 2, "num_replicas": 2}, "rank")])
def test_bucket_sampler_rejects_bad_input(kwargs, match):
    args = {"lengths": [3, 4, 5], "max_tokens": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        TokenBucketSampler(**args)


def test_padding_fraction_counts_pad_positions():
    batch = Batch(torch.tensor([[3, 4], [5, 0]]), torch.tensor([[1, 3, 4]]), torch.tensor([[3, 4, 0]]))
    assert padding_fraction([batch]) == pytest.approx(2 / 7)


# ---------------------------------------------------------------- exact match, with an oracle model

class _CopyOracle(nn.Module):
    """Predicts the copy task perfectly (one-hot logits), except for source rows in ``wrong``."""

    def __init__(self, V=12, wrong=()):
        super().__init__()
        self.config = TransformerConfig(V, V, d_model=4, n_heads=1, n_encoder_layers=1, n_decoder_layers=1,
                                        d_ff=4)
        self.dummy = nn.Parameter(torch.zeros(1))
        self.wrong = set(wrong)

    def encode(self, src, src_mask=None):
        return src

    def decode(self, tgt_in, memory, src_mask=None):
        B, T = tgt_in.shape
        V = self.config.tgt_vocab_size
        lengths = (memory != 0).sum(1)
        src = F.pad(memory, (0, T + 1))
        nxt = torch.stack([torch.where(t < lengths, src[:, t], 2) for t in range(T)], 1)   # (B, T)
        for b in range(B):
            if int(memory[b, 0]) in self.wrong:
                nxt[b, 0] = 3
        return F.one_hot(nxt, V).float() * 10

    def forward(self, src, tgt_in):
        return self.decode(tgt_in, self.encode(src))


def test_exact_match_with_an_oracle():
    pairs = [([5, 6, 7], [5, 6, 7]), ([4, 9], [4, 9]), ([8, 8, 8, 8], [8, 8, 8, 8])]
    data = PairDataset(pairs)
    loader = torch.utils.data.DataLoader(data, batch_size=3, collate_fn=PadCollate())
    assert exact_match(_CopyOracle(), loader) == 1.0
    assert exact_match(_CopyOracle(), loader, method="teacher") == 1.0
    # an error in one sentence costs exactly one of the three, and greedy = teacher-forced exact match
    assert exact_match(_CopyOracle(wrong={4}), loader, method="teacher") == pytest.approx(2 / 3)
    assert exact_match(_CopyOracle(wrong={4}), loader, method="greedy") == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="method"):
        exact_match(_CopyOracle(), loader, method="beam")


# ---------------------------------------------------------------- the loop and checkpoints

def _setup(seed=0, dropout=0.1, shuffle_loader=False):
    torch.manual_seed(seed)
    V = 11
    data = PairDataset(copy_task(40, vocab_size=V, min_len=2, max_len=5, seed=1))
    if shuffle_loader:   # a plain shuffling DataLoader draws its order from the global RNG
        loader = torch.utils.data.DataLoader(data, batch_size=10, shuffle=True, collate_fn=PadCollate())
    else:
        loader = torch.utils.data.DataLoader(data, batch_sampler=TokenBucketSampler(data.lengths, 60, seed=2),
                                             collate_fn=PadCollate())
    cfg = TransformerConfig(V, V, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                            dropout=dropout, max_len=16)
    model = Transformer(cfg)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, noam_lambda(16, 5))
    return model, loader, opt, sched


@pytest.mark.parametrize("shuffle_loader", [False, True])
def test_resumed_run_equals_uninterrupted_run(tmp_path, shuffle_loader):
    model, loader, opt, sched = _setup(shuffle_loader=shuffle_loader)
    n_batches = len(loader)
    total, cut = 2 * n_batches + 3, n_batches + 2           # stop in the middle of the second epoch
    hist_a = train(model, loader, opt, sched, steps=total, progress=False, log_every=1, val_loader=loader,
                   val_every=4)
    expected = [p.detach().clone() for p in model.parameters()]

    ckpt = tmp_path / "run.pt"
    model, loader, opt, sched = _setup(shuffle_loader=shuffle_loader)
    train(model, loader, opt, sched, steps=cut, progress=False, log_every=1, checkpoint_path=str(ckpt),
          val_loader=loader, val_every=4)
    torch.manual_seed(999)                                   # a fresh process would start elsewhere
    model, loader, opt, sched = _setup(seed=5, shuffle_loader=shuffle_loader)
    hist_b = train(model, loader, opt, sched, steps=total, progress=False, log_every=1, resume_from=str(ckpt),
                   val_loader=loader, val_every=4)
    for p, q in zip(model.parameters(), expected):
        assert torch.equal(p, q)
    assert hist_b.step[0] == cut + 1 and hist_b.last_step == total
    assert hist_b.loss == hist_a.loss[cut:]
    assert sched.last_epoch == total


def test_checkpoint_round_trip_and_safe_loading(tmp_path):
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=3, progress=False)
    path = tmp_path / "c.pt"
    save_checkpoint(path, model, opt, sched, step=3, note="hello")
    other, _, opt2, sched2 = _setup(seed=9)
    state = load_checkpoint(path, other, opt2, sched2)
    assert state["step"] == 3 and state["extra"]["note"] == "hello" and state["config"]["d_model"] == 16
    for p, q in zip(model.parameters(), other.parameters()):
        assert torch.equal(p, q)
    assert other.output.weight is other.tgt_embed.weight     # tying survives loading
    assert sched2.last_epoch == 3 and opt2.state_dict()["state"].keys() == opt.state_dict()["state"].keys()
    with pytest.raises(ValueError, match="scaler"):
        load_checkpoint(path, scaler=torch.amp.GradScaler("cpu"))
    # a file that would unpickle an arbitrary object is refused (weights_only=True)
    evil = tmp_path / "evil.pt"
    torch.save({"model": model.state_dict(), "payload": _Payload()}, evil)
    with pytest.raises(pickle.UnpicklingError):
        load_checkpoint(evil, model)


class _Payload:
    pass


def test_train_lowers_the_loss_and_records_history():
    model, loader, opt, sched = _setup(dropout=0.0)
    loss_fn = LabelSmoothingLoss(0.1, 0)
    before = evaluate(model, loader, loss_fn)
    hist = train(model, loader, opt, sched, loss_fn, steps=30, val_loader=loader, val_every=10, log_every=5,
                 progress=False, val_fn=lambda m: {"acc": exact_match(m, loader, "teacher")})
    assert hist.step == [5, 10, 15, 20, 25, 30] and len(hist.lr) == 6
    assert [r["step"] for r in hist.val] == [10, 20, 30] and all("acc" in r for r in hist.val)
    assert hist.val[-1]["val_loss"] < before - 0.3
    assert hist.lr[0] == pytest.approx(noam_lambda(16, 5)(4))   # the rate of the 5th update
    assert model.training


def test_train_stops_when_asked_and_rejects_bad_arguments():
    model, loader, opt, sched = _setup()
    hist = train(model, loader, opt, sched, steps=50, val_loader=loader, val_every=2, progress=False,
                 stop_fn=lambda r: r["step"] >= 4)
    assert hist.last_step == 4
    with pytest.raises(ValueError, match="amp"):
        train(model, loader, opt, sched, steps=1, amp="fp8", progress=False)
    with pytest.raises(ValueError, match="steps"):
        train(model, loader, opt, sched, steps=-1, progress=False)
    empty = torch.utils.data.DataLoader([], batch_size=2)
    with pytest.raises(ValueError, match="no batch"):
        train(model, empty, opt, sched, steps=1, progress=False)


def test_train_raises_on_a_non_finite_loss():
    model, loader, opt, sched = _setup()
    bad = lambda logits, target: logits.sum() * float("nan")
    with pytest.raises(FloatingPointError, match="step 1"):
        train(model, loader, opt, None, bad, steps=3, log_every=1, progress=False)


def test_train_with_bfloat16_autocast_on_cpu():
    model, loader, opt, sched = _setup(dropout=0.0)
    hist = train(model, loader, opt, sched, steps=4, amp="bf16", log_every=1, progress=False)
    assert all(math.isfinite(x) for x in hist.loss)


def test_train_with_float16_and_grad_scaler_checkpoints_the_scaler(tmp_path, capsys):
    model, loader, opt, sched = _setup(dropout=0.0)
    path = tmp_path / "fp16.pt"
    hist = train(model, loader, opt, sched, steps=4, amp="fp16", log_every=1, checkpoint_path=str(path),
                 progress=True)
    assert all(math.isfinite(x) for x in hist.loss)
    state = torch.load(path, weights_only=True)
    assert state["scaler"]["scale"] > 1 and state["step"] == 4
    assert "loss=" in capsys.readouterr().err                      # the tqdm bar shows loss and lr


# ---------------------------------------------------------------- many processes

def test_torchrun_two_processes(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "tests" / "ddp_worker.py"), str(tmp_path)]
    run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["world_size"] == 2
    assert result["last_step"] == 12
    assert result["max_param_diff"] == 0.0                     # the replicas are identical ...
    assert result["param_change"] > 0                          # ... and they did move
    assert result["loss_after"] < result["loss_before"]
    assert len(set(result["batches_per_rank"])) == 1
    assert (tmp_path / "ckpt.pt").exists()
