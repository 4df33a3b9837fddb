"""Tests of transformer_lib.training.checkpoint: a resumed run equals an uninterrupted one (mid-epoch, at an epoch's
end, with a shuffling DataLoader or the bucketing sampler), the round trip of every state, safe loading,
atomic writes, the random states, and a checkpoint that holds no position."""
from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_runs import tiny_model

from transformer_lib.training.batching import PadCollate, PairDataset, TokenBucketSampler, copy_task
from transformer_lib.training.checkpoint import (
    CheckpointError,
    NonFiniteError,
    capture_rng_state,
    check_same_run,
    checkpoint_step,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
)
from transformer_lib.training.distributed import unwrap_model
from transformer_lib.training.loop import train
from transformer_lib.training.position import RunPosition, epoch_batches
from transformer_lib.training.schedule import noam_optimizer

ROOT = Path(__file__).resolve().parent.parent


def _setup(seed=0, dropout=0.1, shuffle_loader=False):
    torch.manual_seed(seed)
    V = 11
    data = PairDataset(copy_task(40, vocab_size=V, min_len=2, max_len=5, seed=1))
    if shuffle_loader:   # a plain shuffling DataLoader draws its order from the global RNG
        loader = torch.utils.data.DataLoader(data, batch_size=10, shuffle=True, collate_fn=PadCollate())
    else:
        loader = torch.utils.data.DataLoader(data, batch_sampler=TokenBucketSampler(data.lengths, 60, seed=2),
                                             collate_fn=PadCollate())
    model = tiny_model(vocab=V, dropout=dropout)
    opt, sched = noam_optimizer(model, 16, 5)
    return model, loader, opt, sched


@pytest.mark.parametrize("shuffle_loader", [False, True])
@pytest.mark.parametrize("where", ["mid-epoch", "end of an epoch"])
def test_resumed_run_equals_uninterrupted_run(tmp_path, shuffle_loader, where):
    model, loader, opt, sched = _setup(shuffle_loader=shuffle_loader)
    n_batches = len(loader)
    total = 2 * n_batches + 3
    cut = n_batches + 2 if where == "mid-epoch" else n_batches     # an epoch's last batch: nothing left of it
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


def test_a_checkpoint_holds_the_random_states_of_its_one_process_and_refuses_another_number(tmp_path):
    model, loader, opt, sched = _setup()
    ckpt = tmp_path / "run.pt"
    train(model, loader, opt, sched, steps=3, progress=False, checkpoint_path=str(ckpt))
    state = load_checkpoint(ckpt)
    ranks = state["extra"]["ranks"]
    assert len(ranks) == 1                                      # one entry per process
    assert torch.equal(ranks[0]["rng"]["torch"], state["rng"]["torch"])
    position = RunPosition.from_checkpoint(state)
    assert position.step == 3 and torch.equal(position.resume_rng["torch"], state["rng"]["torch"])
    with pytest.raises(CheckpointError, match=r"random states of 1 process\(es\), this run has 2"):
        RunPosition.from_checkpoint(state, rank=1, world_size=2)


def test_a_checkpoint_without_per_process_states_still_resumes_exactly(tmp_path):
    """A checkpoint of an earlier version (no ``extra["ranks"]``) resumes from its one random state."""
    model, loader, opt, sched = _setup()
    n_batches = len(loader)
    total, cut = n_batches + 3, n_batches + 1
    train(model, loader, opt, sched, steps=total, progress=False)
    expected = [p.detach().clone() for p in model.parameters()]
    ckpt = tmp_path / "run.pt"
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=cut, progress=False, checkpoint_path=str(ckpt))
    state = torch.load(ckpt, weights_only=True)
    del state["extra"]["ranks"]
    torch.save(state, ckpt)
    model, loader, opt, sched = _setup(seed=5)
    train(model, loader, opt, sched, steps=total, progress=False, resume_from=str(ckpt))
    for p, q in zip(model.parameters(), expected):
        assert torch.equal(p, q)


def test_resume_from_a_missing_file_starts_afresh(tmp_path):
    model, loader, opt, sched = _setup()
    hist = train(model, loader, opt, sched, steps=3, progress=False, log_every=1,
                 resume_from=tmp_path / "absent.pt")
    assert hist.step == [1, 2, 3]


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
    with pytest.raises(CheckpointError, match="evil.pt: refused"):
        load_checkpoint(evil, model)


class _Payload:
    pass


def test_a_model_without_config_is_saved_with_config_none(tmp_path):
    model = torch.nn.Linear(3, 2)
    save_checkpoint(tmp_path / "lin.pt", model)
    state = load_checkpoint(tmp_path / "lin.pt", torch.nn.Linear(3, 2))
    assert state["config"] is None and state["optimizer"] is None and state["step"] == 0


def test_save_is_atomic(tmp_path, monkeypatch):
    model, _, opt, sched = _setup()
    path = tmp_path / "c.pt"
    save_checkpoint(path, model, opt, sched, step=1)
    before = path.read_bytes()

    def broken_save(obj, f, *args, **kwargs):                # the process dies half-way through writing
        with open(f, "wb") as out:
            out.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, opt, sched, step=2)
    assert path.read_bytes() == before                        # the old checkpoint is whole
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]   # and no temporary file is left
    monkeypatch.undo()
    assert load_checkpoint(path)["step"] == 1


def test_rng_states_round_trip():
    state = capture_rng_state()
    drawn = (torch.rand(3), random.random(), np.random.rand(2))
    torch.manual_seed(123)
    random.seed(4)
    np.random.seed(5)
    restore_rng_state(state)
    again = (torch.rand(3), random.random(), np.random.rand(2))
    assert torch.equal(drawn[0], again[0]) and drawn[1] == again[1] and np.array_equal(drawn[2], again[2])


def test_rng_states_survive_a_safe_load(tmp_path):
    model = torch.nn.Linear(2, 2)
    save_checkpoint(tmp_path / "r.pt", model)
    drawn = (torch.rand(2), random.random(), np.random.rand(2))
    load_checkpoint(tmp_path / "r.pt", restore_rng=True)
    again = (torch.rand(2), random.random(), np.random.rand(2))
    assert torch.equal(drawn[0], again[0]) and drawn[1] == again[1] and np.array_equal(drawn[2], again[2])


def test_a_checkpoint_without_a_position_cannot_be_resumed(tmp_path):
    model, loader, opt, sched = _setup()
    path = tmp_path / "plain.pt"
    save_checkpoint(path, model, opt, sched, step=2)
    with pytest.raises(ValueError, match="position"):
        RunPosition.from_checkpoint(load_checkpoint(path))
    with pytest.raises(ValueError, match="position"):
        train(model, loader, opt, sched, steps=4, progress=False, resume_from=path)


def test_unwrap_model_only_unwraps_wrappers():
    class HasModule(torch.nn.Module):        # a user's model with a submodule named "module" is not a wrapper
        def __init__(self):
            super().__init__()
            self.module = torch.nn.Linear(2, 2)

    m = HasModule()
    assert unwrap_model(m) is m
    inner = torch.nn.Linear(2, 2)
    assert unwrap_model(torch.nn.DataParallel(inner)) is inner


# ---------------------------------------------------------------- files users really have (issue 14)

def _small(n_heads=2, d_model=16):
    return tiny_model(0, n_heads=n_heads, d_model=d_model, dropout=0.0)


class _RunsCode:
    """Unpickling this would create the file ``marker``: a stand-in for a malicious payload."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _write_case(tmp_path, case):
    path = tmp_path / f"{case}.pt"
    model = _small()
    if case == "empty":
        path.write_bytes(b"")
    elif case == "truncated":
        save_checkpoint(path, model)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    elif case == "text":
        path.write_text("this is not a checkpoint\n")
    elif case == "foreign dict":
        torch.save({"weights": torch.ones(3), "epoch": 4}, path)
    elif case == "bare state_dict":
        torch.save(model.state_dict(), path)
    elif case == "step not a number":
        torch.save({"model": model.state_dict(), "step": "3", "rng": {}, "extra": {}}, path)
    elif case == "a list":
        torch.save([torch.ones(2)], path)
    elif case == "directory":
        path.mkdir()
    elif case == "malicious":
        torch.save({"model": model.state_dict(), "step": 0, "rng": {}, "extra": {},
                    "payload": _RunsCode(tmp_path / "pwned")}, path)
    elif case == "non-finite weights":
        save_checkpoint(path, model)
        state = torch.load(path, weights_only=True)
        next(t for t in state["model"].values() if t.is_floating_point()).view(-1)[0] = float("nan")
        torch.save(state, path)
    return path


CASES = {"empty": "empty", "truncated": "truncated", "text": "truncated or not a torch.save",
         "foreign dict": "not a checkpoint written by save_checkpoint",
         "bare state_dict": "not a checkpoint written by save_checkpoint",
         "a list": "not a checkpoint written by save_checkpoint", "directory": "directory",
         "step not a number": "not a checkpoint written by save_checkpoint",
         "malicious": "refused", "non-finite weights": "NaN or inf"}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_file_gets_one_clear_error_naming_it(tmp_path, case):
    path = _write_case(tmp_path, case)
    model = _small()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, model)
    message = str(info.value)
    assert str(path) in message and CASES[case] in message
    assert "\n" not in message and "Errno" not in message
    assert isinstance(info.value, ValueError)                      # what the CLI reports in one line
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))   # nothing loaded
    assert not (tmp_path / "pwned").exists()                       # the payload never ran


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.pt: no such checkpoint file"):
        load_checkpoint(tmp_path / "absent.pt")


def test_a_checkpoint_of_another_n_heads_is_refused_although_the_shapes_fit(tmp_path):
    path = tmp_path / "heads.pt"
    save_checkpoint(path, _small(n_heads=2))
    other = _small(n_heads=4)                                     # every tensor has the same shape
    assert {k: v.shape for k, v in other.state_dict().items()} == {
        k: v.shape for k, v in _small(n_heads=2).state_dict().items()}
    before = [p.detach().clone() for p in other.parameters()]
    with pytest.raises(CheckpointError, match=r"heads.pt: a checkpoint of another model: n_heads=2 in the file, "
                                              r"4 in the model"):
        load_checkpoint(path, other)
    assert all(torch.equal(p, q) for p, q in zip(other.parameters(), before))


def test_an_edited_config_in_the_file_is_refused(tmp_path):
    path = tmp_path / "edited.pt"
    save_checkpoint(path, _small(n_heads=2))
    state = torch.load(path, weights_only=True)
    state["config"]["n_heads"] = 4                              # someone edited it
    torch.save(state, path)
    with pytest.raises(CheckpointError, match="edited.pt.*n_heads=4 in the file, 2 in the model"):
        load_checkpoint(path, _small(n_heads=2))


def test_dropout_alone_does_not_make_another_model(tmp_path):
    path = tmp_path / "d.pt"
    save_checkpoint(path, _small())
    torch.manual_seed(1)
    other = tiny_model(dropout=0.3)
    load_checkpoint(path, other)
    assert all(torch.equal(p, q) for p, q in zip(other.parameters(), _small().parameters()))


def test_a_checkpoint_of_save_checkpoint_for_another_model_is_refused(tmp_path):
    path = tmp_path / "wide.pt"
    save_checkpoint(path, _small(d_model=32))
    with pytest.raises(CheckpointError, match="wide.pt: a checkpoint of another model: d_model=32"):
        load_checkpoint(path, _small(d_model=16))
    save_checkpoint(tmp_path / "lin.pt", torch.nn.Linear(3, 2))     # no config: tensors decide
    with pytest.raises(CheckpointError, match=r"lin.pt: .*weight has shape \(2, 3\) in the file, \(2, 4\)"):
        load_checkpoint(tmp_path / "lin.pt", torch.nn.Linear(4, 2))
    with pytest.raises(CheckpointError, match="lin.pt: .*missing"):
        load_checkpoint(tmp_path / "lin.pt", torch.nn.Sequential(torch.nn.Linear(3, 2)))


def test_an_optimizer_state_that_does_not_fit_is_refused(tmp_path):
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=2, progress=False)
    path = tmp_path / "o.pt"
    save_checkpoint(path, model, opt, sched, step=2)
    other, _, _, _ = _setup()
    opt_one_group = torch.optim.Adam([next(other.parameters())], lr=1.0)
    with pytest.raises(CheckpointError, match="o.pt: its optimizer state does not fit"):
        load_checkpoint(path, other, opt_one_group)


@pytest.mark.parametrize("where", ["model", "optimizer"])
def test_non_finite_weights_never_replace_a_good_checkpoint(tmp_path, where):
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=2, progress=False)
    path = tmp_path / "good.pt"
    save_checkpoint(path, model, opt, sched, step=2)
    before = path.read_bytes()
    with torch.no_grad():
        if where == "model":
            next(model.parameters())[0] = float("inf")
        else:
            next(iter(opt.state.values()))["exp_avg"].fill_(float("nan"))
    with pytest.raises(NonFiniteError, match=f"not writing the checkpoint {path}: {where}") as info:
        save_checkpoint(path, model, opt, sched, step=3)
    assert isinstance(info.value, FloatingPointError) and isinstance(info.value, ValueError)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["good.pt"]


def test_stale_temporary_files_of_killed_writes_are_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()                                             # a process that no longer runs
    stale = tmp_path / f"c.pt.tmp{dead.pid}"
    stale.write_bytes(b"half a checkpoint")
    alive = tmp_path / f"c.pt.tmp{os.getppid()}"            # a write still in progress elsewhere
    alive.write_bytes(b"being written")
    other = tmp_path / "notes.tmp1"
    other.write_text("not ours")
    save_checkpoint(tmp_path / "c.pt", torch.nn.Linear(2, 2), step=1)
    assert not stale.exists() and alive.exists() and other.exists()
    assert load_checkpoint(tmp_path / "c.pt")["step"] == 1


def test_resume_with_a_loader_of_another_length_is_refused(tmp_path):
    model, loader, opt, sched = _setup()
    path = tmp_path / "run.pt"
    train(model, loader, opt, sched, steps=3, progress=False, checkpoint_path=path)
    data = PairDataset(copy_task(80, vocab_size=11, min_len=2, max_len=5, seed=1))   # another corpus
    longer = torch.utils.data.DataLoader(data, batch_sampler=TokenBucketSampler(data.lengths, 60, seed=2),
                                         collate_fn=PadCollate())
    model, _, opt, sched = _setup()
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(CheckpointError, match=rf"{path}: the run was saved with {len(loader)} batches per epoch, "
                                              rf"this train_loader gives {len(longer)}"):
        train(model, longer, opt, sched, steps=6, progress=False, resume_from=path)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))    # nothing was loaded


def test_resuming_past_the_end_of_an_epoch_is_a_clear_error():
    _, loader, _, _ = _setup()
    position = RunPosition(step=5, epoch=0, in_epoch=len(loader) + 3, epoch_rng=capture_rng_state())
    with pytest.raises(ValueError, match=rf"cannot resume at batch {len(loader) + 3} of epoch 0: the loader "
                                         rf"gives only {len(loader)} batches"):
        epoch_batches(loader, position)


# ---------------------------------------------------------------- interrupted and failed runs (issue 14)

def _params(model):
    return [p.detach().clone() for p in model.parameters()]


def _uninterrupted(total):
    model, loader, opt, sched = _setup(shuffle_loader=True)
    train(model, loader, opt, sched, steps=total, progress=False, val_every=3, val_fn=lambda m: {})
    return _params(model)


@pytest.mark.parametrize("how", ["SIGINT", "KeyboardInterrupt raised between updates"])
def test_ctrl_c_saves_a_checkpoint_that_resumes_exactly(tmp_path, how):
    total, stop_at = 10, 6
    expected = _uninterrupted(total)
    path = tmp_path / "run.pt"

    def val_fn(model):                                       # Ctrl-C arrives during step 6's validation
        if hist_step[0] == stop_at:
            if how == "SIGINT":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise KeyboardInterrupt
        return {}

    hist_step = [0]
    model, loader, opt, sched = _setup(shuffle_loader=True)
    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        train(model, loader, opt, sched, steps=total, progress=False, val_every=3, checkpoint_path=path,
              val_fn=lambda m: (hist_step.__setitem__(0, hist_step[0] + 3), val_fn(m))[1])
    assert signal.getsignal(signal.SIGINT) is previous          # the handler is put back
    assert load_checkpoint(path)["step"] == stop_at              # no periodic checkpoint was asked for
    model, loader, opt, sched = _setup(seed=4, shuffle_loader=True)
    hist = train(model, loader, opt, sched, steps=total, progress=False, val_every=3, val_fn=lambda m: {},
                 resume_from=path)
    assert hist.last_step == total
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), expected))


_SIGTERM_SCRIPT = """
import os, signal, sys, torch
sys.path.insert(0, {root!r})
from transformer_lib.training.batching import PadCollate, PairDataset, copy_task
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.training.loop import train
torch.manual_seed(0)
data = PairDataset(copy_task(40, vocab_size=11, min_len=2, max_len=5, seed=1))
loader = torch.utils.data.DataLoader(data, batch_size=10, shuffle=True, collate_fn=PadCollate())
model = Transformer(TransformerConfig(11, 11, d_model=16, n_heads=2, n_encoder_layers=1,
                                      n_decoder_layers=1, d_ff=32, dropout=0.1, max_len=16))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
def val_fn(model, seen=[0]):
    seen[0] += 1
    if seen[0] == 2:                                   # at step 4: like `kill PID`
        os.kill(os.getpid(), signal.SIGTERM)
    return {{}}
train(model, loader, opt, steps=50, val_every=2, val_fn=val_fn, progress=False,
      checkpoint_path={path!r}, checkpoint_every=100)
print("not reached")
"""


@pytest.mark.slow
def test_sigterm_saves_a_checkpoint_then_ends_the_process(tmp_path):
    path = tmp_path / "run.pt"
    script = _SIGTERM_SCRIPT.format(root=str(ROOT), path=str(path))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                            timeout=120)
    assert result.returncode == -signal.SIGTERM, result.stderr[-2000:]   # SIGTERM's own ending
    assert "not reached" not in result.stdout
    state = load_checkpoint(path)
    assert state["step"] == 4 and state["extra"]["in_epoch"] == 4
    assert [p.name for p in tmp_path.iterdir()] == ["run.pt"]


def _nan_after(step):
    """A loss function that turns NaN from update ``step`` on."""
    calls = [0]
    base = torch.nn.functional.cross_entropy

    def loss_fn(logits, target):
        calls[0] += 1
        loss = base(logits.reshape(-1, logits.size(-1)), target.reshape(-1), ignore_index=0)
        return loss * float("nan") if calls[0] >= step else loss

    return loss_fn


@pytest.mark.parametrize("checkpoint_every, kept", [(2, 4), (0, 0)])
def test_a_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, checkpoint_every, kept):
    path = tmp_path / "run.pt"
    model, loader, opt, sched = _setup()
    with pytest.raises(NonFiniteError, match=rf"turned non-finite in the steps .*; {path} holds step {kept}, "
                                             "the last checkpoint written with finite weights"):
        train(model, loader, opt, sched, _nan_after(5), steps=20, log_every=10, progress=False,
              checkpoint_path=path, checkpoint_every=checkpoint_every)
    state = load_checkpoint(path)                            # finite, and resumable
    assert state["step"] == kept
    model, loader, opt, sched = _setup(seed=3)
    hist = train(model, loader, opt, sched, steps=kept + 2, progress=False, resume_from=path, log_every=1)
    assert hist.last_step == kept + 2 and all(math.isfinite(x) for x in hist.loss)


# ---------------------------------------------------------------- what a resume keeps and changes (issue 26)

def _resumed_lr(tmp_path, factor_before, factor_after, steps_before=6, warmup=3):
    model, loader, _, _ = _setup()
    opt, sched = noam_optimizer(model, 16, warmup, factor_before)
    path = tmp_path / "run.pt"
    train(model, loader, opt, sched, steps=steps_before, progress=False, checkpoint_path=path)
    model, loader, _, _ = _setup()
    opt, sched = noam_optimizer(model, 16, warmup, factor_after)
    seen = []
    train(model, loader, opt, sched, steps=steps_before + 2, progress=False, resume_from=path, log_every=1,
          on_step=lambda step, record: seen.append(record["lr"]))
    return seen


def test_a_resumed_run_uses_its_new_learning_rate_from_its_first_update(tmp_path):
    rate = noam_optimizer(torch.nn.Linear(1, 1), 16, 3, 0.05)[1].lr_lambdas[0]
    seen = _resumed_lr(tmp_path, 5.0, 0.05)
    assert seen == pytest.approx([rate(6), rate(7)], rel=1e-12)     # not factor 5's rate for update 7


def test_an_unchanged_schedule_resumes_with_the_very_rate_the_checkpoint_held(tmp_path):
    rate = noam_optimizer(torch.nn.Linear(1, 1), 16, 3, 2.0)[1].lr_lambdas[0]
    assert _resumed_lr(tmp_path, 2.0, 2.0) == [rate(6), rate(7)]     # exactly: the resume stays bit-exact


def test_fewer_steps_than_a_checkpoint_has_made_are_refused_before_anything_is_loaded(tmp_path):
    model, loader, opt, sched = _setup()
    path = tmp_path / "run.pt"
    train(model, loader, opt, sched, steps=6, progress=False, checkpoint_path=path)
    model, loader, opt, sched = _setup(seed=3)
    before = _params(model)
    with pytest.raises(CheckpointError, match=rf"{path}: the run has already made 6 updates, more than steps=4"):
        train(model, loader, opt, sched, steps=4, progress=False, resume_from=path)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    hist = train(model, loader, opt, sched, steps=6, progress=False, resume_from=path)     # as many: nothing to do
    assert hist.last_step == 6 and hist.loss == []


@pytest.mark.parametrize("change", ["accum_steps", "resume_keys"])
def test_the_checkpoint_itself_refuses_a_resume_that_changes_what_it_must_keep(tmp_path, change):
    model, loader, opt, sched = _setup()
    path = tmp_path / "run.pt"
    train(model, loader, opt, sched, steps=4, progress=False, checkpoint_path=path,
          resume_keys={"corpus": "3f2a", "batch_tokens": 60})
    model, loader, opt, sched = _setup()
    before = _params(model)
    settings = {"accum_steps": 2, "resume_keys": {"corpus": "3f2a", "batch_tokens": 60}} if change == "accum_steps" \
        else {"resume_keys": {"corpus": "77aa", "batch_tokens": 60}}
    expected = "accum_steps 1, this one has 2" if change == "accum_steps" \
        else "corpus 3f2a, this one has 77aa"
    with pytest.raises(CheckpointError, match=rf"{path}: the run was saved with {expected}: resume it with the same"):
        train(model, loader, opt, sched, steps=8, progress=False, resume_from=path, **settings)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), before))
    train(model, loader, opt, sched, steps=8, progress=False, resume_from=path,
          resume_keys={"corpus": "3f2a", "batch_tokens": 60})                       # the same: it resumes


def test_ctrl_c_during_the_first_checkpoint_waits_for_it_and_leaves_a_resumable_run(tmp_path, monkeypatch):
    import transformer_lib.training.keeper as keeper_module

    real = keeper_module.save_checkpoint
    calls = []

    def save_with_a_ctrl_c(*args, **kwargs):               # Ctrl-C arrives while step 0 is being written
        calls.append(kwargs.get("step", args[5] if len(args) > 5 else None))
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return real(*args, **kwargs)

    monkeypatch.setattr(keeper_module, "save_checkpoint", save_with_a_ctrl_c)
    model, loader, opt, sched = _setup(shuffle_loader=True)
    path = tmp_path / "run.pt"
    with pytest.raises(KeyboardInterrupt):
        train(model, loader, opt, sched, steps=5, progress=False, checkpoint_path=path)
    assert load_checkpoint(path)["step"] == 0                # written whole, then the run stopped
    monkeypatch.undo()
    expected = _uninterrupted_plain(5)
    model, loader, opt, sched = _setup(seed=4, shuffle_loader=True)
    train(model, loader, opt, sched, steps=5, progress=False, resume_from=path)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), expected))


def _uninterrupted_plain(total):
    model, loader, opt, sched = _setup(shuffle_loader=True)
    train(model, loader, opt, sched, steps=total, progress=False)
    return _params(model)


def test_checkpoint_step_reads_the_step_without_reading_the_weights(tmp_path, monkeypatch):
    model, loader, opt, sched = _setup()
    path = tmp_path / "run.pt"
    train(model, loader, opt, sched, steps=5, progress=False, checkpoint_path=path)
    seen = []
    real_load = torch.load

    def spy(*args, **kwargs):                 # the file is mapped by the safe loader, not read
        seen.append(kwargs)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    assert checkpoint_step(path) == 5
    assert seen[0]["mmap"] is True and seen[0]["weights_only"] is True
    assert load_checkpoint(path)["step"] == 5


@pytest.mark.parametrize("case", ["empty", "truncated", "foreign dict", "malicious", "directory"])
def test_checkpoint_step_of_a_damaged_file_is_one_line_naming_it(tmp_path, case):
    path = _write_case(tmp_path, case)
    with pytest.raises(CheckpointError) as info:
        checkpoint_step(path)
    assert str(path) in str(info.value) and CASES[case] in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(FileNotFoundError, match="absent.pt"):
        checkpoint_step(tmp_path / "absent.pt")


def test_check_same_run_is_the_rule_train_applies_on_resume(tmp_path):
    model, loader, opt, sched = _setup()
    path = tmp_path / "run.pt"
    keys = {"corpus": "3f2a", "batch_tokens": 60, "seed": 1}
    train(model, loader, opt, sched, steps=4, progress=False, checkpoint_path=path, resume_keys=keys)
    check_same_run(path, 1, keys)                                  # the same run
    check_same_run(path, 1, {**keys, "new": 3})                    # a key the file does not hold passes
    labels = {"batch_tokens": "--batch-tokens", "seed": "--seed"}
    for name, label, value in [("batch_tokens", "--batch-tokens", 80), ("seed", "--seed", 2),
                               ("corpus", "corpus", "77aa")]:
        with pytest.raises(CheckpointError, match=rf"{path}: the run was saved with {label} "
                                                  rf"{keys[name]}, this one has {value}:"):
            check_same_run(path, 1, {**keys, name: value}, labels=labels)
    with pytest.raises(CheckpointError, match="accum_steps 1, this one has 2"):
        check_same_run(path, 2, keys)
    old = tmp_path / "old.pt"                                      # a checkpoint from before the keys
    save_checkpoint(old, model, step=3)
    check_same_run(old, 4, keys)
