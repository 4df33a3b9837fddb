"""Tests of gradient accumulation in transformer_lib.training.loop: k micro-batches of different lengths give the
gradient of the one big batch they make up (the loss normalised by the total count of target tokens), and
the mean of per-micro-batch means does not; train(accum_steps=k) makes the big batch's update, groups an
epoch's batches without spanning two epochs, and resumes exactly."""
from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from tiny_runs import tiny_model

from transformer_lib.training.batching import PadCollate
from transformer_lib.training.config import TrainConfig
from transformer_lib.training.loop import accumulate_gradients, train
from transformer_lib.training.loss import LabelSmoothingLoss

V = 11


def _model(seed=0, dtype=torch.float64):
    return tiny_model(seed, vocab=V, dropout=0.0, max_len=32).to(dtype)


def _pairs(lengths, seed):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        src = torch.randint(3, V, (n,), generator=g).tolist()
        out.append((src, src[::-1]))
    return out


def _grads(model):
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _rel(a, b):
    """The relative distance of two gradients (the losses are computed in float32, so float32 rounding)."""
    return float((a - b).norm() / b.norm())


def _big_and_micro(groups, seed):
    """The micro-batches (one per group of lengths) and the one big batch of all their pairs."""
    collate = PadCollate()
    pairs = [_pairs(group, seed + i) for i, group in enumerate(groups)]
    return collate([p for ps in pairs for p in ps]), [collate(ps) for ps in pairs]


@settings(max_examples=examples(10), deadline=None)
@given(groups=st.lists(st.lists(st.integers(1, 12), min_size=1, max_size=4), min_size=1, max_size=4),
       eps=st.sampled_from([0.0, 0.1]), seed=st.integers(0, 10 ** 6))
def test_accumulated_gradient_equals_the_big_batch_gradient(groups, eps, seed):
    loss_fn = LabelSmoothingLoss(eps, pad_id=0)
    big, micro = _big_and_micro(groups, seed)
    model = _model()
    loss_fn(model(big.src, big.tgt_in), big.tgt_out).backward()
    reference = _grads(model)
    model.zero_grad()
    loss = accumulate_gradients(model, micro, loss_fn, pad_id=0)
    assert _rel(_grads(model), reference) < 1e-5
    torch.testing.assert_close(loss, loss_fn(model(big.src, big.tgt_in), big.tgt_out).detach())


def test_the_mean_of_per_micro_batch_means_is_another_gradient():
    """The control: when the micro-batches hold different numbers of tokens, averaging their mean losses
    weights a short one's tokens more; the comparison above can fail."""
    loss_fn = LabelSmoothingLoss(0.1, pad_id=0)
    big, micro = _big_and_micro([[2], [12, 11, 10]], seed=3)
    model = _model()
    loss_fn(model(big.src, big.tgt_in), big.tgt_out).backward()
    reference = _grads(model)
    model.zero_grad()
    for batch in micro:
        (loss_fn(model(batch.src, batch.tgt_in), batch.tgt_out) / len(micro)).backward()
    naive = _grads(model)
    assert _rel(naive, reference) > 0.05
    model.zero_grad()
    accumulate_gradients(model, micro, loss_fn, pad_id=0)
    assert _rel(_grads(model), reference) < 1e-5


def test_pad_id_none_counts_every_position():
    def loss_fn(logits, target):                       # a mean over every position
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())

    big, micro = _big_and_micro([[3, 3], [5]], seed=0)   # equal lengths in each micro-batch: no pad
    model = _model()
    accumulate_gradients(model, micro, loss_fn, pad_id=None)
    got = _grads(model)
    model.zero_grad()
    sums = [loss_fn(model(b.src, b.tgt_in), b.tgt_out) * b.tgt_out.numel() for b in micro]
    (sum(sums) / sum(b.tgt_out.numel() for b in micro)).backward()
    assert _rel(got, _grads(model)) < 1e-5
    with pytest.raises(ValueError, match="at least one batch"):
        accumulate_gradients(model, [], loss_fn)


def test_train_with_accum_steps_makes_the_big_batch_update():
    loss_fn = LabelSmoothingLoss(0.1, pad_id=0)
    big, micro = _big_and_micro([[2, 3], [9, 10, 12], [5]], seed=7)
    params = []
    for loader, k in (([big], 1), (micro, 3)):
        model = _model(dtype=torch.float32)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        hist = train(model, loader, opt, None, loss_fn, steps=1, clip_norm=None, accum_steps=k,
                     log_every=1, progress=False)
        assert hist.last_step == 1
        params.append(torch.cat([p.detach().reshape(-1) for p in model.parameters()]))
        losses = hist.loss
    torch.testing.assert_close(params[1], params[0], rtol=1e-5, atol=1e-6)
    moved = float((params[0] - torch.cat([p.detach().reshape(-1) for p in _model(dtype=torch.float32).parameters()]))
                  .abs().max())
    assert moved > 1e-3                                # the update did something
    assert losses[0] == pytest.approx(float(loss_fn(*_logits_and_target(big))), rel=1e-5)


def _logits_and_target(batch):
    model = _model(dtype=torch.float32)
    with torch.no_grad():
        return model(batch.src, batch.tgt_in), batch.tgt_out


def test_an_update_never_spans_two_epochs_and_resumes_exactly(tmp_path):
    _, micro = _big_and_micro([[2], [3, 4], [5], [6, 2], [7]], seed=1)      # 5 batches per epoch
    loss_fn = LabelSmoothingLoss(0.1, pad_id=0)

    def run(steps, **kw):
        model = _model(dtype=torch.float32)
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        hist = train(model, micro, opt, None, loss_fn, steps=steps, accum_steps=2, log_every=1,
                     progress=False, **kw)
        return model, hist

    model, hist = run(6)                  # per epoch: batches (1, 2), (3, 4), (5): 3 updates
    assert hist.last_step == 6
    path = tmp_path / "acc.pt"
    run(4, checkpoint_path=path)          # stops after the first update of epoch 2
    state = torch.load(path, weights_only=True)
    assert state["extra"]["epoch"] == 1 and state["extra"]["in_epoch"] == 2
    resumed, _ = run(6, resume_from=path)
    assert all(torch.equal(p, q) for p, q in zip(resumed.parameters(), model.parameters()))


def test_accum_steps_is_checked():
    with pytest.raises(ValueError, match="accum_steps"):
        TrainConfig(steps=1, accum_steps=0)
    with pytest.raises(ValueError, match="accum_steps"):
        TrainConfig(steps=1, accum_steps=1.5)


@pytest.mark.slow
def test_torchrun_ranks_are_weighted_by_tokens(tmp_path):
    """Two gloo processes with very different token counts, each accumulating two micro-batches: the update
    is the one of the big batch of all their pairs, not the mean of the per-rank means (the control, which
    the same comparison tells apart)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(root / "tests" / "ddp_worker.py"), str(tmp_path), "tokens"]
    for _ in range(2):                  # --standalone can lose a race for its port to another job
        run = subprocess.run(cmd, env=env, cwd=root, capture_output=True, text=True, timeout=240)
        if run.returncode == 0:
            break
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result = json.loads((tmp_path / "tokens.json").read_text())
    assert result["world_size"] == 2
    assert result["big_vs_per_rank"] > 0.05               # the two normalisations really differ here
    assert result["to_big_batch"] < 1e-4                   # token-weighted: the big batch's update
    assert result["to_per_rank_means"] > 0.05
