"""Tests of transformer_lib.training.metrics_log and of train's metrics_path: one JSON line per logged step and
per validation, each appended in one write, a torn last line dropped on read, and the record of a run interrupted
(by a crash, by Ctrl-C) and resumed equal to that of a run that never stopped, losses included."""
from __future__ import annotations

import json
import os
import signal

import pytest
import torch
from tiny_runs import tiny_model

from transformer_lib.training.batching import PadCollate, PairDataset, copy_task
from transformer_lib.training.config import TrainConfig
from transformer_lib.training.loop import train
from transformer_lib.training.metrics_log import append_metrics, keep_metrics_until, read_metrics
from transformer_lib.training.schedule import noam_optimizer

V = 11


def _setup(seed=0):
    torch.manual_seed(seed)
    data = PairDataset(copy_task(40, vocab_size=V, min_len=2, max_len=5, seed=1))
    loader = torch.utils.data.DataLoader(data, batch_size=10, shuffle=True, collate_fn=PadCollate())
    model = tiny_model(vocab=V)
    opt, sched = noam_optimizer(model, 16, 5)
    return model, loader, opt, sched


def _run(tmp_path, name, steps=12, stop=None, how="crash", resume=True):
    """``steps`` updates into tmp_path/name (checkpoints every 4, a log line every 2 steps, a validation every
    5); with ``stop``, the run stops after that update (``how``: an exception, no checkpoint written; or Ctrl-C,
    SIGINT, which lets the step finish and saves it) and a new process resumes it. -> the records."""
    folder = tmp_path / name
    ckpt, log = folder / "checkpoint.pt", folder / "metrics.jsonl"

    def on_step(step, record):
        if step == stop:
            if how == "crash":
                raise RuntimeError("down")
            os.kill(os.getpid(), signal.SIGINT)       # Ctrl-C: the step ends, is saved, then it is raised

    for seed in (0, 7) if stop and resume else (0,):
        model, loader, opt, sched = _setup(seed)
        config = TrainConfig(steps=steps, progress=False, log_every=2, val_loader=loader, val_every=5,
                             checkpoint_path=ckpt, checkpoint_every=4, resume_from=ckpt, metrics_path=log,
                             on_step=on_step)
        try:
            train(model, loader, opt, sched, config=config)
        except (RuntimeError, KeyboardInterrupt):
            assert stop is not None
        stop = None
    return read_metrics(log)


def _without_time(records):
    return [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds")} for r in records]


def test_a_record_per_logged_step_and_per_validation(tmp_path):
    records = _run(tmp_path, "a")
    kinds = [(r["kind"], r["step"]) for r in records]
    assert kinds == [("train", 2), ("train", 4), ("valid", 5), ("train", 6), ("train", 8), ("train", 10),
                     ("valid", 10), ("train", 12), ("valid", 12)]
    for r in records:
        assert set(r) == ({"kind", "step", "loss", "lr", "tokens", "seconds", "cpu_seconds"} if r["kind"] == "train"
                          else {"kind", "step", "val_loss", "tokens", "seconds", "cpu_seconds"})
    # against the history train returns: the same losses and rates
    model, loader, opt, sched = _setup(0)
    hist = train(model, loader, opt, sched, steps=12, progress=False, log_every=2, val_loader=loader, val_every=5)
    train_rows = [r for r in records if r["kind"] == "train"]
    assert [r["loss"] for r in train_rows] == hist.loss and [r["lr"] for r in train_rows] == hist.lr
    assert [r["val_loss"] for r in records if r["kind"] == "valid"] == [v["val_loss"] for v in hist.val]
    seconds = [r["seconds"] for r in records]
    assert seconds == sorted(seconds) and [r["cpu_seconds"] for r in records] == sorted(
        r["cpu_seconds"] for r in records)


def test_tokens_count_the_real_target_tokens_trained_on(tmp_path):
    model, loader, opt, sched = _setup(0)
    per_epoch = sum(int((b.tgt_out != 0).sum()) for b in loader)         # pad_id 0; order does not matter
    log = tmp_path / "m.jsonl"
    train(model, loader, opt, sched, config=TrainConfig(steps=2 * len(loader), progress=False, log_every=len(loader),
                                                        metrics_path=log))
    assert [r["tokens"] for r in read_metrics(log)] == [per_epoch, 2 * per_epoch]


@pytest.mark.parametrize("how", ["crash", "ctrl-c"])
@pytest.mark.parametrize("stop", [6, 7, 10])
def test_an_interrupted_and_resumed_run_leaves_the_same_record(tmp_path, how, stop):
    straight = _run(tmp_path, "straight")
    resumed = _run(tmp_path, "resumed", stop=stop, how=how)
    assert _without_time(resumed) == _without_time(straight)            # losses equal: the resume is exact
    seconds = [r["seconds"] for r in resumed]                           # the clock goes on across the resume
    assert seconds == sorted(seconds)


def test_a_torn_last_line_is_dropped_on_read_and_on_resume(tmp_path):
    straight = _run(tmp_path, "straight")
    folder = tmp_path / "torn"
    _run(tmp_path, "torn", stop=6, resume=False)         # a crash at step 6; the checkpoint holds step 4
    log = folder / "metrics.jsonl"
    before = read_metrics(log)
    assert [r["step"] for r in before][-1] == 6
    with open(log, "ab") as f:
        f.write(b'{"kind": "train", "step": 8, "lo')         # the write the crash cut
    assert read_metrics(log) == before
    model, loader, opt, sched = _setup(7)
    train(model, loader, opt, sched, config=TrainConfig(
        steps=12, progress=False, log_every=2, val_loader=loader, val_every=5, checkpoint_path=folder /
        "checkpoint.pt", checkpoint_every=4, resume_from=folder / "checkpoint.pt", metrics_path=log))
    assert log.read_bytes().endswith(b"\n")
    assert _without_time(read_metrics(log)) == _without_time(straight)


def test_a_damaged_line_before_the_last_is_an_error_naming_it(tmp_path):
    log = tmp_path / "m.jsonl"
    log.write_text('{"step": 1}\n[1, 2]\n{"step": 3}\n')
    with pytest.raises(ValueError, match=rf"{log}:2: not a JSON object"):
        read_metrics(log)
    log.write_text('{"step": 1}\nnot json\n')
    with pytest.raises(ValueError, match=rf"{log}:2: not a JSON object"):
        read_metrics(log)


def test_each_line_is_appended_by_one_write_of_a_whole_line(tmp_path, monkeypatch):
    log = tmp_path / "m.jsonl"
    opened, writes = [], []
    real_open, real_write = os.open, os.write
    monkeypatch.setattr(os, "open", lambda path, flags, *a: opened.append(flags) or real_open(path, flags, *a))
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(bytes(data)) or real_write(fd, data))
    append_metrics(log, {"step": 1, "loss": 2.5, "t": torch.tensor(3.0)})
    append_metrics(log, {"step": 2, "loss": float("nan")})
    assert all(flags & os.O_APPEND for flags in opened) and len(writes) == 2
    assert all(w.endswith(b"\n") and w.count(b"\n") == 1 for w in writes)
    assert log.read_bytes() == b"".join(writes)
    records = read_metrics(log)
    assert records[0] == {"step": 1, "loss": 2.5, "t": 3.0} and records[1]["loss"] != records[1]["loss"]


def test_keep_metrics_until_rewrites_atomically(tmp_path):
    log = tmp_path / "m.jsonl"
    keep_metrics_until(log, 3)
    assert not log.exists()                                 # a missing file stays missing
    log.write_text("".join(json.dumps({"kind": "train", "step": s}) + "\n" for s in (1, 2, 3, 4, 5)) + '{"st')
    inode = log.stat().st_ino
    keep_metrics_until(log, 3)
    assert [r["step"] for r in read_metrics(log)] == [1, 2, 3]
    assert log.read_text().endswith("}\n") and log.stat().st_ino != inode     # a new file, renamed over the old
    assert sorted(os.listdir(tmp_path)) == ["m.jsonl"]                          # no temporary left
    inode = log.stat().st_ino
    keep_metrics_until(log, 3)                                                 # nothing to drop: not rewritten
    assert log.stat().st_ino == inode


def test_a_fresh_run_starts_a_new_record(tmp_path):
    log = tmp_path / "m.jsonl"
    log.write_text('{"kind": "train", "step": 99, "loss": 1.0}\n')
    model, loader, opt, sched = _setup(0)
    train(model, loader, opt, sched, config=TrainConfig(steps=4, progress=False, log_every=2, metrics_path=log))
    assert [r["step"] for r in read_metrics(log)] == [2, 4]


def test_metrics_path_must_be_a_path():
    with pytest.raises(TypeError, match="metrics_path must be a path"):
        TrainConfig(steps=1, metrics_path=3)
