"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 58f5deafb8bad3c9
# fmt: off

# [book/appendix_cli.ipynb, cell cli-train-imports]
from __future__ import annotations

import contextlib
import math
import re
import secrets
import tempfile
from pathlib import Path

import torch
from tokenizers import Tokenizer

from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.model_size import ModelTooLargeError, check_model_fits
from transformer_lib.training.distributed import cleanup_distributed
from transformer_lib.training.config import TrainConfig
from transformer_lib.training.interrupts import Interrupts
from transformer_lib.training.loop import train
from transformer_lib.training.metrics_log import METRICS_FILE
from transformer_lib.training.loss import LabelSmoothingLoss
from transformer_lib.training.schedule import noam_optimizer
from transformer_lib.translation.corpus import read_parallel
from transformer_lib.translation.model_dir import (
    CHECKPOINT_FILE, CONFIG_FILE, GENERATION_FILE, TOKENIZER_FILE, TRAINING_FILE,
    WEIGHTS_FILE, ModelDirError, load_config_and_tokenizer,
    own_file, save_config_and_tokenizer, save_generation_config, save_model_dir)
from transformer_lib.translation.tokenizer import BPETokenizer, encode_pairs
from transformer_lib.cli.common import LOCK_FILE, MODEL_DEFAULTS, UsageError
from transformer_lib.cli.common import hold_lock, interrupted, refuse_link
from transformer_lib.cli.common import bucket_loader, log_line, start_processes
from transformer_lib.cli.common import Progress, finished
from transformer_lib.cli.record import check_run_record, check_steps, fingerprint
from transformer_lib.cli.record import checkpoint_run_id
from transformer_lib.cli.record import load_resume_setup, resume_keys
from transformer_lib.cli.record import write_run_record
from transformer_lib.cli.average import keep_checkpoints_option, remove_kept


# [book/appendix_cli.ipynb, cell f2e925ab]
MODEL_FILES = (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, CHECKPOINT_FILE,
               TRAINING_FILE, GENERATION_FILE, METRICS_FILE)


def _check_out(out: Path, resume: bool, force: bool, rank: int,
               held: contextlib.ExitStack, say) -> None:
    """Check ``--out`` before anything is trained. ``--resume``: a directory holding
    checkpoint.pt. Otherwise a new or empty directory, or one left by a run stopped
    before its first checkpoint (config.json, tokenizer.json and training.json at most;
    ``--force``: any directory, a model's files there removed), that rank 0 can create
    and write to. Not a link; rank 0 then holds its lock (in ``held``) for the whole
    run, and checks again under it: no other run can have begun there meanwhile."""
    refuse_link("--out", out)
    if out.exists() and not out.is_dir():
        raise ModelDirError(f"--out {out}: a file, not a directory")
    _check_held(out, resume, force)
    if rank != 0:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ModelDirError(f"--out {out}: cannot write there ({reason})") from None
    held.enter_context(hold_lock(out, "--out", say))
    _check_held(out, resume, force)
    if force and not resume:
        for name in MODEL_FILES:
            (out / name).unlink(missing_ok=True)
        remove_kept(out)


def _check_held(out: Path, resume: bool, force: bool) -> None:
    # a run's own files being written (atomic_write's <name>.tmp<pid>.<random>) count
    # as those files: a run started a moment ago is then seen as one, not as a stranger
    # (and, with its lock, refused as in use)
    held = sorted({re.sub(r"\.tmp\d+(\.\w+)?$", "", p.name) for p in out.iterdir()
                   if p.name != LOCK_FILE}) if out.is_dir() else []
    # a run stopped before its first checkpoint: the same command starts it again
    started = set(held) <= {CONFIG_FILE, TOKENIZER_FILE, TRAINING_FILE}
    if resume:
        if CHECKPOINT_FILE not in held:
            raise ModelDirError(f"--out {out}: nothing to resume (no {CHECKPOINT_FILE})"
                                + ("; run without --resume" if started else ""))
    elif not started and not force:
        if CONFIG_FILE in held or CHECKPOINT_FILE in held:
            what = "already holds a model: pass --resume to continue it"
        else:
            what = (f"is not empty ({held[0]}{', ...' if len(held) > 1 else ''}) and "
                    "not a model directory: pass --force to write there")
        raise ModelDirError(f"--out {out} {what}, or choose another --out")


# [book/appendix_cli.ipynb, cell 1e47d886]
def _model_config(args, vocab: int) -> TransformerConfig:
    return TransformerConfig(
        vocab, vocab, d_model=args.d_model, n_heads=args.n_heads, d_ff=args.d_ff,
        n_encoder_layers=args.layers, n_decoder_layers=args.layers,
        dropout=args.dropout, norm_first=args.norm_first, max_len=args.max_len,
        share_embeddings=True)


def _check_size(args) -> None:
    """A new run's model options, checked before the corpus is read: a model that
    cannot fit in this machine's memory is a usage error naming the options."""
    names = ("d_model", "layers", "d_ff", "max_len", "vocab_size")
    options = " ".join(f"--{name.replace('_', '-')} {getattr(args, name)}"
                       for name in names)
    try:
        check_model_fits(_model_config(args, args.vocab_size), options)
    except ModelTooLargeError as exc:
        raise UsageError(str(exc)) from None


def _keep_run_config(args, config: TransformerConfig) -> None:
    """``--resume`` keeps config.json: a model option given with another value is a
    usage error (it would be ignored); the others take the run's values."""
    run = {"d_model": config.d_model, "n_heads": config.n_heads,
           "layers": config.n_encoder_layers, "d_ff": config.d_ff,
           "dropout": config.dropout, "max_len": config.max_len}
    for name, value in run.items():
        given = getattr(args, name)
        if given is not None and given != value:
            option = "--" + name.replace("_", "-")
            raise UsageError(f"{option} {given}: the run in {args.out} has {value} "
                             f"(--resume keeps its {CONFIG_FILE}): drop the option")
        setattr(args, name, value)
    if args.norm_first and not config.norm_first:
        raise UsageError(f"--norm-first: the run in {args.out} is Post-Norm "
                         f"(--resume keeps its {CONFIG_FILE}): drop the option")
    args.norm_first = config.norm_first


def _model_setup(args, pairs, rank: int, world: int
                 ) -> tuple[TransformerConfig, BPETokenizer]:
    """Rank 0 decides the configuration and the tokenizer (read from ``--out`` on
    ``--resume``, else trained) and writes them; under torchrun it sends them to the
    other processes, so that only rank 0 needs ``--out``'s files and all agree."""
    if rank == 0:
        if args.resume:
            # an option that contradicts config.json: a usage error, found first
            _keep_run_config(args, load_config_and_tokenizer(args.out)[0])
            config, tokenizer = load_resume_setup(args.out)    # checked against the run
        else:
            texts = [s for s, _ in pairs] + [t for _, t in pairs]
            tokenizer = BPETokenizer.train(texts, vocab_size=args.vocab_size)
            config = _model_config(args, tokenizer.vocab_size)
    if world > 1:
        # every process has checked --out before rank 0 writes to it
        torch.distributed.barrier()
        box: list = [None]
        if rank == 0:
            box = [(config.to_dict(), tokenizer.tokenizer.to_str())]
        torch.distributed.broadcast_object_list(box, src=0)
        if rank != 0:
            config_dict, tokenizer_json = box[0]
            config = TransformerConfig.from_dict(config_dict)
            tokenizer = BPETokenizer(Tokenizer.from_str(tokenizer_json))
    if args.resume:
        _keep_run_config(args, config)         # every process takes the run's values
    elif rank == 0:
        save_config_and_tokenizer(args.out, config, tokenizer)
    return config, tokenizer


# [book/appendix_cli.ipynb, cell 7b6c9607]
def run_train(args) -> int:
    """``train``: read the corpus, train (or load) the tokenizer, train the model, write
    the directory. Under torchrun every process runs it; rank 0 alone writes files.
    Ctrl-C and SIGTERM (which :func:`main` raises like Ctrl-C) end it with
    :class:`Interrupted` (once training has begun, ``_train`` says where the run is
    saved). Rank 0 holds ``--out``'s lock until it returns."""
    try:
        with contextlib.ExitStack() as held:
            rank, world, device = start_processes(args.device, args.threads)
            return _train(args, rank, world, device, held)
    except KeyboardInterrupt as exc:
        raise interrupted(exc, "before training began; nothing to resume: run the "
                          "command again") from None
    finally:
        cleanup_distributed()


def _where_saved(checkpoint: Path, step: int, resumed: bool) -> str:
    """Where an interrupted run stands, as its files say (the message must be true)."""
    if not checkpoint.is_file():
        return ("before its first checkpoint; nothing to resume: run the same command "
                "again")
    when = f"after step {step}; " if step or not resumed else ""
    return (f"{when}{checkpoint} holds the run's last checkpoint: continue it with "
            "the same command and --resume")


# [book/appendix_cli.ipynb, cell f60c6734]
def _encode(train_pairs, valid_pairs, tokenizer, max_len: int, say):
    """The encoded training and validation pairs; too long pairs are skipped with a
    warning, and a corpus with none left is an error."""
    def fitting(pairs, option: str, kind: str):
        kept, skipped = encode_pairs(pairs, tokenizer, max_len)
        if not kept:
            raise ValueError(f"{option}: none of the {len(pairs)} pairs fits "
                             f"--max-len {max_len}")
        if skipped:
            say(f"warning: skipped {skipped} of {len(pairs)} {kind} pairs longer "
                f"than --max-len {max_len} tokens")
        return kept

    encoded = fitting(train_pairs, "--train", "training")
    valid = fitting(valid_pairs, "--valid", "validation") if valid_pairs else None
    return encoded, valid


def _fit(*args, **kwargs):
    """chapter 10's ``train`` without its own progress bar; a loss that turns
    non-finite also says how to continue with the tool."""
    try:
        model, loader, optimizer, scheduler, loss_fn = args
        config = TrainConfig(progress=False, **kwargs)
        return train(model, loader, optimizer, scheduler, loss_fn, config=config)
    except FloatingPointError as exc:          # chapter 10's NonFiniteError
        raise ValueError(f"{exc}; with this tool: --resume, with a smaller "
                         "--lr-factor or a longer --warmup") from None


# [book/appendix_cli.ipynb, cell 6ee171a4]
def _train(args, rank: int, world: int, device: torch.device,
           held: contextlib.ExitStack) -> int:
    out, say = Path(args.out), log_line if rank == 0 else (lambda message: None)
    checkpoint = own_file(out, CHECKPOINT_FILE)   # links out of the run: refused
    if len(args.train) > 2 or (args.valid and len(args.valid) > 2):
        raise ValueError("--train and --valid take one TSV file or two aligned files")
    if not args.resume:
        vars(args).update({name: value for name, value in MODEL_DEFAULTS.items()
                           if getattr(args, name) is None})
        _check_size(args)
    _check_out(out, args.resume, args.force, rank, held, say)
    train_pairs = read_parallel(*args.train)
    valid_pairs = read_parallel(*args.valid) if args.valid else None
    corpus = fingerprint(train_pairs)
    if args.resume:
        check_run_record(out, args, corpus)
    # the run's identity, kept across --resume: average refuses to mix runs
    run_id = (checkpoint_run_id(checkpoint) if args.resume else None) \
        or secrets.token_hex(8)
    config, tokenizer = _model_setup(args, train_pairs, rank, world)
    encoded, val_encoded = _encode(train_pairs, valid_pairs, tokenizer, config.max_len,
                                   say)
    torch.manual_seed(args.seed)             # the same initial model in every process
    model = Transformer(config).to(device)
    if world > 1:
        torch.manual_seed(args.seed + rank)       # ... and its own dropout in each
    loader = bucket_loader(encoded, args.batch_tokens, args.seed)
    updates_per_epoch = len(loader) / args.accum_steps
    steps = args.steps or (math.ceil(args.epochs * updates_per_epoch) if args.epochs
                           else 10000)
    args.warmup = args.warmup or min(4000, max(1, steps // 4))
    if args.resume:
        check_steps(args, steps, checkpoint)
    keep = keep_checkpoints_option(args, out, steps, rank)      # --keep-checkpoints
    record = {k: v for k, v in vars(args).items() if k != "func"}
    if rank == 0 and not args.resume:
        write_run_record(out, {"args": record, "corpus": corpus, "run_id": run_id,
                               "steps": 0})
    optimizer, scheduler = noam_optimizer(model, config.d_model, args.warmup,
                                          args.lr_factor)
    where = f"{world} processes on {device.type}" if world > 1 else str(device)
    header = (f"{len(encoded)} training pairs, vocabulary {tokenizer.vocab_size}, "
              f"{sum(p.numel() for p in model.parameters()):,} parameters, "
              f"{steps} steps (warm-up {args.warmup}) "
              f"on {where}")
    loss_fn = LabelSmoothingLoss(args.label_smoothing, config.pad_id)
    every = max(1, min(100 if args.no_progress else 10, steps // 10))
    progress = Progress(steps, bar=not args.no_progress and rank == 0, header=header,
                        say=say)
    val_loader = (bucket_loader(val_encoded, args.batch_tokens, args.seed,
                                shuffle=False) if val_encoded else None)
    try:
        history = _fit(model, loader, optimizer, scheduler, loss_fn, steps=steps,
                       val_every=args.val_every, clip_norm=args.clip_norm,
                       amp=args.precision, accum_steps=args.accum_steps,
                       val_fn=(lambda net: progress.validate(net, val_loader, loss_fn,
                                                             args.precision))
                       if val_loader is not None else None,
                       log_every=every, on_step=progress.on_step,
                       checkpoint_path=str(checkpoint),
                       checkpoint_every=args.checkpoint_every, on_checkpoint=keep,
                       resume_from=str(checkpoint) if args.resume else None,
                       resume_keys={**resume_keys(args, corpus), "run_id": run_id},
                       metrics_path=str(own_file(out, METRICS_FILE)))
        loss = history.loss[-1] if history.loss else None
        val_loss = history.val[-1].get("val_loss") if history.val else None
        if rank == 0:                # the model written; then the tool holds signals
            _write_model(out, model.cpu(), tokenizer, history.last_step, corpus=corpus,
                         record=record, run_id=run_id, loss=loss, val_loss=val_loss,
                         world_size=world)
    except KeyboardInterrupt as exc:
        raise interrupted(exc, _where_saved(checkpoint, scheduler.last_epoch,
                                            args.resume)) from None
    finally:
        progress.close()
    losses = "".join(f", {k} loss {v:.3f}" for k, v in
                     (("train", loss), ("valid", val_loss)) if v is not None)
    say(f"step {history.last_step}/{steps}{losses}; {history.seconds:.1f} s; "
        f"model written to {out}")
    return 0


# [book/appendix_cli.ipynb, cell 4357749f]
def _write_model(out: Path, model: Transformer, tokenizer: BPETokenizer, step: int,
                 **record) -> None:
    """The run's model directory, once training ends; a first Ctrl-C or SIGTERM
    waits for the write to finish, so that the message it leaves is true."""
    checkpoint, written = out / CHECKPOINT_FILE, False
    try:
        with Interrupts(True) as pending:
            save_model_dir(out, model, tokenizer, args=record.pop("record"),
                           steps=step, **record)
            save_generation_config(out, GenerationConfig())  # the paper's: GNMT, 0.6
            written = True
        pending.deliver()
        finished()                     # the run is complete: nothing left to stop
    except KeyboardInterrupt as exc:
        raise interrupted(exc, f"after step {step}, " + (
            f"once the model was written to {out}: the run is complete" if written
            else f"while writing the model: {checkpoint} holds step {step}: the same "
            "command with --resume writes it")) from None


__all__ = ['MODEL_FILES', 'run_train']
