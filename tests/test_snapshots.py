"""Tests of transformer_lib.training.snapshots: keep_last(n) as train's on_checkpoint keeps the weights (no optimizer
state) of the last n checkpoints, readable by load_checkpoint and average_checkpoints; it removes only its own
regular files inside the run folder (never through a link), checks n, every and last, and makes a copy that a
killed run still owed."""
from __future__ import annotations

import os

import pytest
import torch
from tiny_runs import tiny_model

from transformer_lib.training.averaging import average_checkpoints
from transformer_lib.training.batching import PadCollate, PairDataset, copy_task
from transformer_lib.training.checkpoint import CheckpointError, checkpoint_step, load_checkpoint, save_checkpoint
from transformer_lib.training.loop import train
from transformer_lib.training.schedule import noam_optimizer
from transformer_lib.training.snapshots import KEPT_DIR, keep_last, kept_checkpoints, remove_kept


def _setup(seed=0):
    torch.manual_seed(seed)
    data = PairDataset(copy_task(40, vocab_size=11, min_len=2, max_len=5, seed=1))
    loader = torch.utils.data.DataLoader(data, batch_size=10, shuffle=True, collate_fn=PadCollate())
    model = tiny_model()
    opt, sched = noam_optimizer(model, 16, 5)
    return model, loader, opt, sched


def test_the_last_n_checkpoints_are_kept_as_weights_only(tmp_path):
    ckpt = tmp_path / "checkpoint.pt"
    seen = {}

    def weights_at(step, path):                  # what checkpoint.pt held when each copy was made
        seen[step] = {k: v.clone() for k, v in load_checkpoint(path)["model"].items()}
        keep(step, path)

    keep = keep_last(3, every=4, last=14)
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=14, progress=False, checkpoint_path=ckpt, checkpoint_every=2,
          on_checkpoint=weights_at)
    kept = kept_checkpoints(tmp_path)
    assert [step for step, _ in kept] == [8, 12, 14]          # every 4th step and the last; 4 was removed
    assert [f.name for _, f in kept] == ["step-000008.pt", "step-000012.pt", "step-000014.pt"]
    for step, file in kept:
        state = load_checkpoint(file, tiny_model())            # a checkpoint load_checkpoint reads
        assert checkpoint_step(file) == step and state["optimizer"] is None and state["rng"] == {}
        assert all(torch.equal(state["model"][k], seen[step][k]) for k in seen[step])
        with pytest.raises(CheckpointError, match="holds no optimizer state"):
            load_checkpoint(file, tiny_model(), opt)
    assert os.path.getsize(kept[-1][1]) < 0.5 * os.path.getsize(ckpt)    # Adam's state is 2x the weights
    average_checkpoints([f for _, f in kept], tiny_model())
    assert sorted(os.listdir(tmp_path / KEPT_DIR)) == [f.name for _, f in kept]     # no temporary left


def test_every_zero_keeps_each_checkpoint_after_step_zero(tmp_path):
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=6, progress=False, checkpoint_path=tmp_path / "c.pt",
          checkpoint_every=2, on_checkpoint=keep_last(2))
    assert [step for step, _ in kept_checkpoints(tmp_path)] == [4, 6]


def test_only_its_own_regular_files_are_removed_and_no_link_is_followed(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.mkdir()
    precious = outside / "step-000001.pt"
    precious.write_bytes(b"precious")
    folder = run / KEPT_DIR
    folder.mkdir()
    (folder / "step-000002.pt").symlink_to(precious)          # a link named like a kept file
    (folder / "notes.txt").write_text("mine")
    model = tiny_model(0)
    for step in (4, 6, 8):
        save_checkpoint(run / "checkpoint.pt", model, step=step)
        keep_last(1)(step, str(run / "checkpoint.pt"))
    assert sorted(os.listdir(folder)) == ["notes.txt", "step-000002.pt", "step-000008.pt"]
    assert precious.read_bytes() == b"precious" and (folder / "step-000002.pt").is_symlink()
    remove_kept(run)
    assert sorted(os.listdir(folder)) == ["notes.txt", "step-000002.pt"] and precious.exists()


def test_a_checkpoints_folder_that_is_a_link_is_refused(tmp_path):
    run, outside = tmp_path / "run", tmp_path / "outside"
    run.mkdir()
    outside.mkdir()
    (outside / "step-000001.pt").write_bytes(b"precious")
    (run / KEPT_DIR).symlink_to(outside, target_is_directory=True)
    save_checkpoint(run / "checkpoint.pt", tiny_model(0), step=4)
    with pytest.raises(CheckpointError, match=rf"{run / KEPT_DIR}: is a symbolic link"):
        keep_last(1)(4, str(run / "checkpoint.pt"))
    assert os.listdir(outside) == ["step-000001.pt"] and kept_checkpoints(run) == []
    remove_kept(run)
    assert os.listdir(outside) == ["step-000001.pt"]


def test_a_copy_a_killed_run_owed_is_made_on_resume(tmp_path):
    keep = keep_last(2, every=5, last=12)
    model = tiny_model(0)
    save_checkpoint(tmp_path / "checkpoint.pt", model, step=10)        # written; the copy never made
    assert keep.owed(tmp_path / "checkpoint.pt") == tmp_path / KEPT_DIR / "step-000010.pt"
    assert keep.owed(tmp_path / "checkpoint.pt") is None                # already kept
    save_checkpoint(tmp_path / "checkpoint.pt", model, step=7)          # a Ctrl-C checkpoint: not one to keep
    assert keep.owed(tmp_path / "checkpoint.pt") is None
    assert [step for step, _ in kept_checkpoints(tmp_path)] == [10]


@pytest.mark.parametrize("args, match", [
    ((0,), "n must be an int >= 1, got 0"), ((True,), "n must be an int >= 1, got True"),
    ((2.0,), "n must be an int >= 1, got 2.0"), ((2, -1), "every must be an int >= 0, got -1"),
    ((2, 5, 0), "last must be an int >= 1, got 0"), (("3",), "n must be an int >= 1"),
])
def test_bad_settings_get_one_line_naming_them(args, match):
    with pytest.raises(ValueError, match=match):
        keep_last(*args)
