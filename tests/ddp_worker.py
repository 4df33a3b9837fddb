"""One process of the 2-process DDP tests (tests/test_training.py::test_torchrun_two_processes,
::test_torchrun_resume_with_dropout_is_exact, and
tests/test_accumulation.py::test_torchrun_ranks_are_weighted_by_tokens).

Run by ``torchrun --standalone --nproc_per_node=2 tests/ddp_worker.py OUT_DIR [resume|tokens]``: every process
joins the gloo group, trains the same tiny model (dropout 0.1) on its own share of a copy task for a few
steps with ``transformer_lib.train`` (which wraps the model in DistributedDataParallel), and rank 0 writes
``OUT_DIR/result.json``: the largest parameter difference between the replicas, the loss before and
after, and how many batches each rank saw.

With ``tokens``: one update of SGD, each rank accumulating 2 micro-batches of its own, the ranks holding
very different numbers of target tokens; rank 0 writes ``OUT_DIR/tokens.json``: the relative distance of
the replicas' weights to the update of the one big batch of all the ranks' pairs (computed in one process),
and to the update of the mean of the per-rank mean losses (the control).

With ``resume``: an uninterrupted run of 12 steps, against 7 steps, a checkpoint, fresh objects with
other seeds (as in new processes) and the rest from the checkpoint; then a control that resumes from a
copy of that checkpoint in which every rank gets rank 0's random states (what a checkpoint holding only
rank 0's states would give). Rank 0 writes ``OUT_DIR/resume.json``: whether each rank's resumed weights
equal the uninterrupted run's bit for bit, whether the control's do, and what one process (after leaving the
group) is told when it tries to resume the 2-process checkpoint.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tiny_runs import tiny_config, tiny_model

from transformer_lib.model import Transformer
from transformer_lib.training.batching import PadCollate, PairDataset, TokenBucketSampler, copy_task
from transformer_lib.training.checkpoint import CheckpointError, load_checkpoint
from transformer_lib.training.distributed import cleanup_distributed, setup_distributed
from transformer_lib.training.evaluation import evaluate
from transformer_lib.training.loop import train
from transformer_lib.training.loss import LabelSmoothingLoss
from transformer_lib.training.schedule import noam_optimizer

STEPS, STOP = 12, 7


def main(out_dir: str) -> None:
    rank, world, device = setup_distributed("gloo")
    torch.set_num_threads(1)
    torch.manual_seed(1234)                 # the same initial model in both processes
    V = 12
    data = PairDataset(copy_task(192, vocab_size=V, min_len=2, max_len=6, seed=0))
    collate = PadCollate()
    train_loader = torch.utils.data.DataLoader(
        data, batch_sampler=TokenBucketSampler(data.lengths, 160, seed=0), collate_fn=collate)
    val_loader = torch.utils.data.DataLoader(
        data, batch_sampler=TokenBucketSampler(data.lengths, 400, shuffle=False, drop_last=True),
        collate_fn=collate)
    config = tiny_config(V)
    model = Transformer(config).to(device)
    start = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()
    torch.manual_seed(1234 + rank)          # different dropout in each process, as in a real run
    loss_fn = LabelSmoothingLoss(0.1, config.pad_id)
    before = evaluate(model, val_loader, loss_fn)
    optimizer, scheduler = noam_optimizer(model, 16, 4, factor=0.5)
    hist = train(model, train_loader, optimizer, scheduler, loss_fn, steps=12, val_loader=val_loader,
                 val_every=6, checkpoint_path=str(Path(out_dir) / "ckpt.pt"), checkpoint_every=6,
                 progress=False, log_every=3)
    after = hist.val[-1]["val_loss"]
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    torch.distributed.all_gather(gathered, flat)
    n_batches = torch.tensor([len(train_loader)])
    counts = [torch.empty_like(n_batches) for _ in range(world)]
    torch.distributed.all_gather(counts, n_batches)
    if rank == 0:
        diff = max(float((g - gathered[0]).abs().max()) for g in gathered)
        result = {"world_size": world, "max_param_diff": diff, "loss_before": before, "loss_after": after,
                  "val_losses": [r["val_loss"] for r in hist.val], "batches_per_rank": [int(c) for c in counts],
                  "param_change": float((flat - start).abs().max()), "last_step": hist.last_step}
        (Path(out_dir) / "result.json").write_text(json.dumps(result))
    cleanup_distributed()


def _run_objects(device: torch.device, rank: int, seed: int):
    """A fresh model (the same initial weights on every rank), loader, optimizer and scheduler; the global
    random state then seeded with ``seed + rank`` (different dropout in each process)."""
    torch.manual_seed(1234)
    V = 12
    data = PairDataset(copy_task(192, vocab_size=V, min_len=2, max_len=6, seed=0))
    loader = torch.utils.data.DataLoader(
        data, batch_sampler=TokenBucketSampler(data.lengths, 160, seed=0), collate_fn=PadCollate())
    model = tiny_model(vocab=V).to(device)
    torch.manual_seed(seed + rank)
    optimizer, scheduler = noam_optimizer(model, 16, 4, factor=0.5)
    return model, loader, optimizer, scheduler


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


def resume(out_dir: str) -> None:
    rank, world, device = setup_distributed("gloo")
    torch.set_num_threads(1)
    out = Path(out_dir)
    model, loader, optimizer, scheduler = _run_objects(device, rank, 100)
    train(model, loader, optimizer, scheduler, steps=STEPS, progress=False)
    uninterrupted = _flat(model)

    ckpt = out / "stop.pt"
    model, loader, optimizer, scheduler = _run_objects(device, rank, 100)
    train(model, loader, optimizer, scheduler, steps=STOP, progress=False, checkpoint_path=str(ckpt))
    model, loader, optimizer, scheduler = _run_objects(device, rank, 555)   # new processes: other seeds
    train(model, loader, optimizer, scheduler, steps=STEPS, progress=False, resume_from=str(ckpt))
    resumed = _flat(model)

    control = out / "rank0_states_only.pt"
    if rank == 0:                   # every rank's entry replaced by rank 0's: the old checkpoint's content
        state = load_checkpoint(ckpt)
        state["extra"]["ranks"] = [state["extra"]["ranks"][0]] * world
        torch.save(state, control)
    torch.distributed.barrier()
    model, loader, optimizer, scheduler = _run_objects(device, rank, 555)
    train(model, loader, optimizer, scheduler, steps=STEPS, progress=False, resume_from=str(control))
    with_rank0_states = _flat(model)

    flags = torch.tensor([int(torch.equal(resumed, uninterrupted)),
                          int(torch.equal(with_rank0_states, uninterrupted))])
    gathered = [torch.empty_like(flags) for _ in range(world)]
    torch.distributed.all_gather(gathered, flags)
    if rank == 0:
        state = load_checkpoint(ckpt)
        ranks = state["extra"]["ranks"]
        result = {"world_size": world, "batches_per_epoch": len(loader), "stop": STOP, "steps": STEPS,
                  "resumed_equal": [bool(g[0]) for g in gathered],
                  "rank0_states_equal": [bool(g[1]) for g in gathered],
                  "rank_states_stored": len(ranks),
                  "rank_states_differ": not torch.equal(ranks[0]["rng"]["torch"], ranks[1]["rng"]["torch"])}
    cleanup_distributed()
    if rank == 0:                   # out of the group, one process: the 2-process checkpoint is refused
        model, loader, optimizer, scheduler = _run_objects(torch.device("cpu"), 0, 100)
        try:
            train(model, loader, optimizer, scheduler, steps=STEPS, progress=False, resume_from=str(ckpt))
            result["one_process"] = "resumed"
        except CheckpointError as exc:
            result["one_process"] = str(exc)
        (out / "resume.json").write_text(json.dumps(result))


def _token_pairs(lengths: list[int], seed: int) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for n in lengths:
        src = torch.randint(3, 12, (n,), generator=g).tolist()
        pairs.append((src, src[::-1]))
    return pairs


def tokens(out_dir: str) -> None:
    rank, world, device = setup_distributed("gloo")
    torch.set_num_threads(1)
    collate = PadCollate()
    groups = {0: [[2], [3, 2]], 1: [[12, 11], [10, 9, 12, 12]]}           # rank -> its micro-batches
    pairs = {r: [_token_pairs(g, 10 * r + i) for i, g in enumerate(gs)] for r, gs in groups.items()}
    config = tiny_config(12, dropout=0.0)
    loss_fn = LabelSmoothingLoss(0.1, config.pad_id)

    def fresh() -> tuple[Transformer, torch.optim.Optimizer]:
        torch.manual_seed(1234)
        model = Transformer(config).to(device)
        return model, torch.optim.SGD(model.parameters(), lr=0.5)

    model, optimizer = fresh()
    micro = [collate(p) for p in pairs[rank]]
    train(model, micro, optimizer, None, loss_fn, steps=1, clip_norm=None, accum_steps=2, log_every=1,
          progress=False)
    got = _flat(model)

    def one_process(per_rank_means: bool) -> torch.Tensor:
        model, optimizer = fresh()
        if per_rank_means:            # each rank's own token-weighted mean, then the mean of the ranks
            for r in groups:
                batch = collate([p for ps in pairs[r] for p in ps])
                (loss_fn(model(batch.src, batch.tgt_in), batch.tgt_out) / len(groups)).backward()
        else:                         # one batch of every rank's pairs
            batch = collate([p for r in groups for ps in pairs[r] for p in ps])
            loss_fn(model(batch.src, batch.tgt_in), batch.tgt_out).backward()
        optimizer.step()
        return _flat(model)

    start = _flat(fresh()[0])
    big, per_rank = one_process(False), one_process(True)
    if rank == 0:
        def rel(a: torch.Tensor, b: torch.Tensor) -> float:
            return float((a - b).norm() / (b - start).norm())

        result = {"world_size": world, "to_big_batch": rel(got, big), "to_per_rank_means": rel(got, per_rank),
                  "big_vs_per_rank": rel(per_rank, big)}
        (Path(out_dir) / "tokens.json").write_text(json.dumps(result))
    cleanup_distributed()


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[2] == "resume":
        resume(sys.argv[1])
    elif len(sys.argv) > 2 and sys.argv[2] == "tokens":
        tokens(sys.argv[1])
    else:
        main(sys.argv[1])
