"""Tests of transformer_lib.checkpoint: a resumed run equals an uninterrupted one (mid-epoch, at an epoch's
end, with a shuffling DataLoader or the bucketing sampler), the round trip of every state, safe loading,
atomic writes, the random states, and a checkpoint that holds no position."""
from __future__ import annotations

import pickle
import random

import numpy as np
import pytest
import torch

from transformer_lib.batching import PadCollate, PairDataset, TokenBucketSampler, copy_task
from transformer_lib.checkpoint import (
    RunPosition,
    capture_rng_state,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
    unwrap_model,
)
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.training import noam_lambda, train


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
    with pytest.raises(pickle.UnpicklingError):
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
