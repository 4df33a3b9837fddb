"""Tests of transformer_lib.training.loss, .evaluation and .training: label smoothing against formulas computed another
way (the sources' definition and PyTorch's), the Noam rate at its landmarks, the greedy exact-match helper
against an oracle, the loop (history, validation, early stop, mixed precision, settings as keywords or as a
TrainConfig, one read-back per logging interval), bad input, and a 2-process torchrun (gloo) run."""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.overrides import TorchFunctionMode

from transformer_lib.model import TransformerConfig
from transformer_lib.precision import PRECISIONS, amp_dtype
from transformer_lib.training.batching import PadCollate, PairDataset
from transformer_lib.training.config import TrainConfig
from transformer_lib.training.distributed import gather_objects, is_distributed, rank, world_size
from transformer_lib.training.evaluation import evaluate, exact_match
from transformer_lib.training.interrupts import Interrupts
from transformer_lib.training.loop import train
from transformer_lib.training.loss import LabelSmoothingLoss
from transformer_lib.training.schedule import noam_lambda, noam_optimizer

SETTINGS = settings(max_examples=examples(40), deadline=None)
ROOT = Path(__file__).resolve().parent.parent


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


def _dense_loss(logits, target, eps, no_mass, pad):
    """The smoothed cross-entropy written out densely, in float64: the true token gets 1 - eps, the tokens in
    ``no_mass`` (unless true) get 0, the others share eps equally; rows whose target is ``pad`` are skipped."""
    logp = F.log_softmax(logits.double(), -1)
    n, V = logits.shape
    q = torch.zeros_like(logp)
    for i in range(n):
        others = [k for k in range(V) if k != int(target[i]) and k not in no_mass]
        q[i, others] = eps / len(others)
        q[i, target[i]] = 1 - eps
    keep = target != pad
    return (-(q * logp).sum(-1))[keep].sum() / keep.sum()


@SETTINGS
@given(st.integers(1, 30), st.integers(4, 20), st.floats(0.0, 0.5), st.integers(0, 10 ** 6),
       st.booleans())
def test_label_smoothing_with_bos_gives_bos_no_mass(n, V, eps, seed, bos_targets):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(n, V, generator=g) * 3
    target = torch.randint(0 if bos_targets else 2, V, (n,), generator=g)   # pad 0, bos 1
    target[0] = 2                                  # at least one real target
    got = LabelSmoothingLoss(eps, pad_id=0, bos_id=1)(logits, target)
    torch.testing.assert_close(got.double(), _dense_loss(logits, target, eps, {0, 1}, pad=0), rtol=1e-5,
                               atol=1e-5)
    if not bos_targets:                            # a distribution that differs from the default one
        assert LabelSmoothingLoss(eps, bos_id=1).floor(V) == pytest.approx(
            -(1 - eps) * math.log(1 - eps) - (eps * (math.log(eps) - math.log(V - 3)) if eps > 0 else 0.0))
    with pytest.raises(ValueError, match="bos_id and pad_id must differ"):
        LabelSmoothingLoss(eps, pad_id=1, bos_id=1)
    with pytest.raises(ValueError, match="bos_id=40"):
        LabelSmoothingLoss(eps, bos_id=40)(logits, target)


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
    ({"smoothing": True}, None, "smoothing"),
    ({"pad_id": -1}, None, "pad_id"),
    ({"reduction": "none"}, None, "reduction"),
    ({}, (torch.randn(4, 5), torch.tensor([1, 2, 3])), "target shape"),
    ({}, (torch.randn(4, 5), torch.tensor([1, 2, 3, 5])), "outside"),
    ({}, (torch.randn(4, 5), torch.tensor([1, 2, -1, 3])), "outside"),
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

    def paper(n):                                                                 # n counts from 1
        return factor * d_model ** -0.5 * min(n ** -0.5, n * warmup ** -1.5)

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
    opt, sched = noam_optimizer([p], 64, 10)
    used = []
    for _ in range(25):
        used.append(opt.param_groups[0]["lr"])
        p.grad = torch.ones(1)
        opt.step()
        sched.step()
    paper = [64 ** -0.5 * min(n ** -0.5, n * 10 ** -1.5) for n in range(1, 26)]
    assert used == pytest.approx(paper)


@pytest.mark.parametrize("args, match", [((0, 10), "d_model"), ((64, 0), "warmup_steps"), ((64, 10.5), "warmup"),
                                         ((True, 10), "d_model"), ((64, 10, 0.0), "factor"),
                                         ((64, 10, float("inf")), "factor"), ((64, 10, float("nan")), "factor"),
                                         ((64, 10, -float("inf")), "factor"), ((64, 10, -1.0), "factor")])
def test_noam_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        noam_lambda(*args)
    with pytest.raises(ValueError, match="step"):
        noam_lambda(8, 2)(-1)


# ---------------------------------------------------------------- exact match, with an oracle model

class _CopyOracle(nn.Module):
    """Predicts the copy task perfectly (one-hot logits), except for source rows in ``wrong``. Not a
    Transformer: exact_match takes any model with a config and encode/decode."""

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


def _oracle_loader():
    pairs = [([5, 6, 7], [5, 6, 7]), ([4, 9], [4, 9]), ([8, 8, 8, 8], [8, 8, 8, 8])]
    return torch.utils.data.DataLoader(PairDataset(pairs), batch_size=3, collate_fn=PadCollate())


def test_exact_match_with_an_oracle():
    loader = _oracle_loader()
    assert exact_match(_CopyOracle(), loader) == 1.0
    assert exact_match(_CopyOracle(), loader, method="teacher") == 1.0
    # an error in one sentence costs exactly one of the three, and greedy = teacher-forced exact match
    assert exact_match(_CopyOracle(wrong={4}), loader, method="teacher") == pytest.approx(2 / 3)
    assert exact_match(_CopyOracle(wrong={4}), loader, method="greedy") == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="method"):
        exact_match(_CopyOracle(), loader, method="beam")


def test_exact_match_never_chooses_pad_or_bos():
    """The one rule of the library's decoding loop (chapter 10's decode_loop, chapter 11's decoders): pad and bos
    are never written, greedy or teacher-forced, even where the model ranks them first."""
    class PrefersPadAndBos(_CopyOracle):
        def decode(self, tgt_in, memory, src_mask=None, cache=None):
            logits = super().decode(tgt_in, memory, src_mask)
            logits[..., 0] += 20.0                               # pad and bos above the right token
            logits[..., 1] += 30.0
            return logits

    loader = _oracle_loader()
    assert exact_match(PrefersPadAndBos(), loader, method="greedy") == 1.0
    assert exact_match(PrefersPadAndBos(), loader, method="teacher") == 1.0


def test_exact_match_names_what_a_model_lacks():
    loader = _oracle_loader()
    with pytest.raises(TypeError, match="config.pad_id"):
        exact_match(nn.Linear(2, 2), loader)

    class TeacherOnly(nn.Module):         # no encode/decode: enough for the teacher-forced score only
        def __init__(self):
            super().__init__()
            self.oracle = _CopyOracle()
            self.config = self.oracle.config

        def forward(self, src, tgt_in):
            return self.oracle(src, tgt_in)

    assert exact_match(TeacherOnly(), loader, method="teacher") == 1.0
    with pytest.raises(TypeError, match="encode, decode"):
        exact_match(TeacherOnly(), loader, method="greedy")


def test_amp_names():
    assert amp_dtype(None) is None and amp_dtype("none") is None and amp_dtype("fp32") is None
    assert amp_dtype("bf16") is torch.bfloat16 and amp_dtype("fp16") is torch.float16
    assert amp_dtype("bfloat16") is torch.bfloat16 and amp_dtype("float16") is torch.float16
    assert all(amp_dtype(name) is dtype for name, dtype in PRECISIONS.items())
    with pytest.raises(ValueError, match="precision must be one of"):
        amp_dtype("fp8")
    with pytest.raises(ValueError, match="amp must be one of"):
        amp_dtype(["bf16"], "amp")
    with pytest.raises(ValueError, match="amp must be one of"):
        TrainConfig(1, amp="fp8")


# ---------------------------------------------------------------- the loop

from test_checkpoint import _setup  # noqa: E402  one builder of the tiny run for both files


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


def test_on_step_sees_every_update_and_the_logged_records(tmp_path):
    calls = []
    model, loader, opt, sched = _setup()
    hist = train(model, loader, opt, sched, steps=7, log_every=3, progress=False,
                 on_step=lambda step, record: calls.append((step, record)))
    assert [step for step, _ in calls] == list(range(1, 8))
    logged = {step: record for step, record in calls if record is not None}
    assert sorted(logged) == [1, 3, 6, 7]                         # the first update, every 3rd, the last
    assert all(set(r) == {"step", "loss", "lr"} and r["step"] == s for s, r in logged.items())
    assert hist.step == [3, 6, 7] and [logged[s]["loss"] for s in hist.step] == hist.loss
    assert [logged[s]["lr"] for s in hist.step] == hist.lr and math.isfinite(logged[1]["loss"])
    # a resumed run counts the earlier steps, and its first update is logged too
    path = str(tmp_path / "run.pt")
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=4, log_every=3, progress=False, checkpoint_path=path)
    calls.clear()
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=7, log_every=3, progress=False, resume_from=path,
          on_step=lambda step, record: calls.append((step, record)))
    assert [step for step, _ in calls] == [5, 6, 7]
    assert [step for step, record in calls if record is not None] == [5, 6, 7]
    with pytest.raises(TypeError, match="on_step"):
        TrainConfig(3, on_step="print")


def test_train_takes_its_settings_as_keywords_or_as_a_config():
    runs = []
    for use_config in (False, True):
        model, loader, opt, sched = _setup()
        kwargs = dict(steps=9, val_loader=loader, val_every=4, log_every=2, progress=False)
        if use_config:
            hist = train(model, loader, opt, sched, config=TrainConfig(**kwargs))
        else:
            hist = train(model, loader, opt, sched, **kwargs)
        runs.append((hist, [p.detach().clone() for p in model.parameters()]))
    (h1, p1), (h2, p2) = runs
    assert h1.step == h2.step == [2, 4, 6, 8, 9] and h1.loss == h2.loss and h1.val == h2.val
    assert all(torch.equal(a, b) for a, b in zip(p1, p2))
    model, loader, opt, sched = _setup()
    with pytest.raises(TypeError, match="not both"):
        train(model, loader, opt, sched, steps=3, config=TrainConfig(steps=3))
    with pytest.raises(TypeError, match="not both"):
        train(model, loader, opt, sched, log_every=1, config=TrainConfig(steps=3))
    with pytest.raises(TypeError, match="steps"):
        train(model, loader, opt, sched)
    with pytest.raises(TypeError, match="TrainConfig"):
        train(model, loader, opt, sched, config={"steps": 3})


@pytest.mark.parametrize("kwargs, match", [({"steps": -1}, "steps"), ({"steps": 2.5}, "steps"),
                                           ({"steps": 3, "log_every": 0}, "log_every"),
                                           ({"steps": 3, "val_every": -1}, "val_every"),
                                           ({"steps": 3, "checkpoint_every": True}, "checkpoint_every"),
                                           ({"steps": 3, "clip_norm": 0.0}, "clip_norm"),
                                           ({"steps": 3, "amp": "fp8"}, "amp")])
def test_train_config_rejects_bad_settings(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig(**kwargs)
    model, loader, opt, sched = _setup()
    with pytest.raises(ValueError, match=match):
        train(model, loader, opt, sched, progress=False, **kwargs)


def test_train_stops_when_asked_and_rejects_an_empty_loader():
    model, loader, opt, sched = _setup()
    hist = train(model, loader, opt, sched, steps=50, val_loader=loader, val_every=2, progress=False,
                 stop_fn=lambda r: r["step"] >= 4)
    assert hist.last_step == 4
    empty = torch.utils.data.DataLoader([], batch_size=2)
    with pytest.raises(ValueError, match="no batch"):
        train(model, empty, opt, sched, steps=1, progress=False)


def test_train_raises_on_a_non_finite_loss():
    model, loader, opt, sched = _setup()

    def bad(logits, target):
        return logits.sum() * float("nan")

    with pytest.raises(FloatingPointError, match="step 1"):
        train(model, loader, opt, None, bad, steps=3, log_every=1, progress=False)
    model, loader, opt, sched = _setup()
    with pytest.raises(FloatingPointError, match="step 2"):   # seen at the first log line after it
        train(model, loader, opt, None, bad, steps=3, log_every=2, progress=False)


class _CountReadBacks(TorchFunctionMode):
    """Counts the calls that read a tensor's value back to Python: on a GPU each one waits for the device."""

    READS = {torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__float__, torch.Tensor.__int__,
             torch.Tensor.__bool__, torch.Tensor.__index__}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.count += func in self.READS
        return func(*args, **(kwargs or {}))


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.out = nn.Embedding(10, 8), nn.Linear(8, 10)

    def forward(self, src, tgt_in):
        return self.out(self.embed(tgt_in) + self.embed(src).mean(1, keepdim=True))   # (B, T, V)


def test_a_training_step_reads_nothing_back_but_the_loss_once_per_logging_interval():
    torch.manual_seed(0)
    batches = [tuple(torch.randint(3, 10, (4, n)) for n in (5, 6, 6)) for _ in range(3)]
    model = _Tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)          # (Adam reads its step counter on the CPU)

    def loss_fn(logits, target):
        return F.cross_entropy(logits.flatten(0, 1), target.flatten())

    reads = _CountReadBacks()
    with reads:                                                # clipping on, 12 steps, a log line every 4
        hist = train(model, batches, opt, None, loss_fn, steps=12, log_every=4, progress=False)
    assert hist.step == [4, 8, 12]
    assert reads.count == 3


def _autocast_seen(model: nn.Module) -> list[tuple[bool, torch.dtype, torch.dtype]]:
    """Record, at each forward of ``model``, whether CPU autocast is on, its dtype and the logits' dtype."""
    seen: list[tuple[bool, torch.dtype, torch.dtype]] = []
    model.register_forward_hook(lambda m, args, out: seen.append(
        (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu"), out.dtype)))
    return seen


@pytest.mark.parametrize("amp, dtype", [("bf16", torch.bfloat16), (None, torch.float32)])
def test_train_runs_the_forward_under_the_autocast_that_amp_names(amp, dtype):
    model, loader, opt, sched = _setup(dropout=0.0)
    seen = _autocast_seen(model)
    before = [p.detach().clone() for p in model.parameters()]
    hist = train(model, loader, opt, sched, steps=4, amp=amp, log_every=1, progress=False)
    assert len(seen) == 4 and len(hist.loss) == 4                     # one forward per update
    assert all(on == (amp is not None) for on, _, _ in seen)
    assert all(logits == dtype for _, _, logits in seen)              # the projection ran in that dtype
    if amp is not None:
        assert all(cast == dtype for _, cast, _ in seen)
    assert all(not torch.equal(p, q) for p, q in zip(model.parameters(), before) if p.grad is not None)


def test_train_with_float16_and_grad_scaler_checkpoints_the_scaler(tmp_path, capsys):
    model, loader, opt, sched = _setup(dropout=0.0)
    seen = _autocast_seen(model)
    path = tmp_path / "fp16.pt"
    train(model, loader, opt, sched, steps=4, amp="fp16", log_every=1, checkpoint_path=str(path),
          progress=True)
    assert seen and all(on and cast == torch.float16 for on, cast, _ in seen)
    state = torch.load(path, weights_only=True)
    assert state["scaler"]["scale"] > 1 and state["step"] == 4
    assert "loss=" in capsys.readouterr().err                      # the tqdm bar shows loss and lr


# ---------------------------------------------------------------- many processes

@pytest.mark.slow
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


@pytest.mark.slow
def test_torchrun_resume_with_dropout_is_exact(tmp_path):
    """Two gloo processes, dropout 0.1: stopped at step 7 (mid-epoch), resumed by fresh objects with other
    seeds, the run reaches the uninterrupted run's weights bit for bit on both ranks, because the checkpoint
    holds each rank's random states. The control (every rank given rank 0's states, as a checkpoint of rank
    0's states alone would) does not: the comparison can fail."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(ROOT / "tests" / "ddp_worker.py"), str(tmp_path), "resume"]
    run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((tmp_path / "resume.json").read_text())
    assert result["world_size"] == 2 and result["rank_states_stored"] == 2
    assert result["stop"] % result["batches_per_epoch"] != 0                    # stopped mid-epoch
    assert result["rank_states_differ"]                       # the ranks' generators really differ
    assert result["resumed_equal"] == [True, True]
    assert result["rank0_states_equal"] == [False, False]
    # the 2-process checkpoint is refused by one process, with a clear error
    assert re.search(r"stop\.pt: .*random states of 2 process\(es\), this run has 1", result["one_process"])


# ---------------------------------------------------------------- the small modules of the loop

def test_without_a_process_group_a_process_is_rank_0_of_1():
    assert not is_distributed()
    assert rank() == 0 and world_size() == 1
    obj = {"a": [1, 2]}
    assert gather_objects(obj) == [obj] and gather_objects(obj)[0] is obj


def test_interrupts_note_a_signal_and_deliver_it_after_the_block():
    before = signal.getsignal(signal.SIGINT)
    with Interrupts(True) as interrupts:
        assert interrupts.signum is None
        os.kill(os.getpid(), signal.SIGINT)                 # noted, not raised
        assert interrupts.signum == signal.SIGINT
    assert signal.getsignal(signal.SIGINT) is before        # the previous handler is back
    with pytest.raises(KeyboardInterrupt):
        interrupts.deliver()                                # ... and receives the signal
    with Interrupts(False) as off:                          # disabled: nothing is installed
        assert signal.getsignal(signal.SIGINT) is before
    off.deliver()                                           # nothing noted, nothing delivered
