"""Generated from book/appendix_cli.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: d151be0b10fa14e0
# fmt: off

# [book/appendix_cli.ipynb, cell 6]
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer
from tqdm import tqdm

from transformer_lib import (LabelSmoothingLoss, PadCollate, PairDataset,
                             TokenBucketSampler, cleanup_distributed, evaluate,
                             noam_lambda, setup_distributed, train)
from transformer_lib.checks import (check_float, check_int, check_probability,
                                    resolve_device)
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.corpus import read_parallel
from transformer_lib.tokenizer import BPETokenizer, encode_pairs
from transformer_lib.translate import (CHECKPOINT_FILE, CONFIG_FILE, PRECISIONS,
                                       TOKENIZER_FILE, TRAINING_FILE, WEIGHTS_FILE,
                                       ModelDirError, load_config_and_tokenizer,
                                       load_model_dir, save_config_and_tokenizer,
                                       save_model_dir, translate_lines)

#: the defaults of the model options of ``train``; they are None when not given, so
#: that ``--resume`` can tell an option given (and refused if it differs from the run's
#: config.json) from one left out
MODEL_DEFAULTS = {"vocab_size": 8000, "d_model": 512, "n_heads": 8, "layers": 6,
                  "d_ff": 2048, "dropout": 0.1, "max_len": 256}
#: the smallest vocabulary: 256 byte tokens and 4 special tokens
MIN_VOCAB = 260


class UsageError(ValueError):
    """Options that do not fit together: exit status 2, like a bad option."""


class Interrupted(Exception):
    """Ctrl-C or SIGTERM; ``status`` is the exit status (128 + the signal)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


# [book/appendix_cli.ipynb, cell 8]
class _HelpFormatter(argparse.HelpFormatter):
    """Adds "(default: ...)" to an option's help, unless the default is None/False
    or the help gives it; a model option's default comes from MODEL_DEFAULTS."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if default is None:
            default = MODEL_DEFAULTS.get(action.dest)
        if action.option_strings and default is not None and default is not False \
                and default != argparse.SUPPRESS and "default" not in text:
            text += f" (default: {default})"
        return text


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad option gives one line on stderr, not the whole usage."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _number(kind, check, **limits):
    """An argparse type: text -> ``kind``, checked by one of the shared checks."""
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            message = f"expected {kind.__name__}, got {text!r}"
            raise argparse.ArgumentTypeError(message) from None
        try:
            return kind(check(value, "the value", **limits))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = kind.__name__
    return parse


_count = _number(int, check_int)                                   # an int >= 1
_count0 = _number(int, check_int, minimum=0)                       # an int >= 0
_vocab = _number(int, check_int, minimum=MIN_VOCAB)                # an int >= 260
_positive = _number(float, check_float, low=0.0, low_open=True)    # a float > 0
_real = _number(float, check_float)                                # a finite float
_rate = _number(float, check_probability, one=False)               # a float in [0, 1)
_mass = _number(float, check_probability, zero=False)              # a float in (0, 1]


# [book/appendix_cli.ipynb, cell 10]
def _add_train_parser(sub) -> None:
    t = sub.add_parser(
        "train", formatter_class=_HelpFormatter, help="train a model on a corpus",
        description="Train a model on a parallel corpus (a TSV file 'source<TAB>"
        "target', or two line-aligned files) and write a model directory: config.json, "
        "tokenizer.json, model.safetensors, and checkpoint.pt to resume from (written "
        "at the start, every --checkpoint-every steps, at the end, and on Ctrl-C or "
        "SIGTERM). Under torchrun every process trains on its share of the batches.")
    add = t.add_argument_group("data").add_argument
    add("--train", nargs="+", required=True, metavar="FILE",
        help="training corpus: one TSV file, or a source file and a target file")
    add("--valid", nargs="+", metavar="FILE", help="validation corpus, like --train")
    add("--out", required=True, metavar="DIR", help="the model directory to write")
    add("--vocab-size", type=_vocab, help=f"shared BPE vocabulary, >= {MIN_VOCAB}")
    add("--resume", action="store_true",
        help="continue the run saved in --out (its config and tokenizer are kept)")
    add("--force", action="store_true", help="start a new run in an --out that holds "
        "files (a model's files there are replaced)")
    add = t.add_argument_group("model size (fixed by the run: not with --resume)"
                               ).add_argument
    add("--d-model", type=_count, help="model width d_model")
    add("--n-heads", type=_count, help="heads (divide d_model)")
    add("--layers", type=_count, help="encoder layers and decoder layers")
    add("--d-ff", type=_count, help="feed-forward inner width")
    add("--dropout", type=_rate, help="dropout rate")
    add("--norm-first", action="store_true", help="Pre-Norm, not the paper's Post-Norm")
    add("--max-len", type=_count, help="longest sentence in tokens: longer training "
        "pairs are skipped and counted")
    opt = t.add_argument_group("optimisation")
    length = opt.add_mutually_exclusive_group()
    length.add_argument("--steps", type=_count, default=None,
                        help="optimizer updates in all, a resumed run's included "
                        "(default 10000)")
    length.add_argument("--epochs", type=_positive, help="passes over the data instead")
    add = opt.add_argument
    add("--batch-tokens", type=_count, default=4096,
        help="padded tokens per batch (a resumed run must keep it)")
    add("--warmup", type=_count, help="warm-up steps of the Noam rate (default: "
        "min(4000, steps // 4); a resumed run keeps its run's)")
    add("--lr-factor", type=_positive, default=1.0, help="scale of the Noam rate")
    add("--label-smoothing", type=_rate, default=0.1, help="label smoothing epsilon")
    add("--clip-norm", type=_positive, default=1.0, help="gradient-norm clipping")
    add = t.add_argument_group("running").add_argument
    add("--device", default="auto", help="'auto' (cuda when present), 'cpu', 'cuda', "
        "'cuda:1', ...; under torchrun: auto, cuda (the GPU of LOCAL_RANK) or cpu")
    add("--precision", choices=sorted(PRECISIONS), default="fp32",
        help="fp32, or autocast to bf16 or fp16 (fp16 with a gradient scaler)")
    add("--seed", type=int, default=0,
        help="seed of the weights and batches (a resumed run must keep it)")
    add("--val-every", type=_count0, default=1000, help="validation interval (0: end)")
    add("--checkpoint-every", type=_count0, default=1000,
        help="write checkpoint.pt every N steps (0: only at the start and the end)")
    add("--threads", type=_count, help="CPU threads (default: PyTorch's choice)")
    add("--no-progress", action="store_true",
        help="a log line every tenth of the run instead of a progress bar")
    t.set_defaults(func=run_train)


# [book/appendix_cli.ipynb, cell 12]
def _add_translate_parser(sub) -> None:
    r = sub.add_parser(
        "translate", formatter_class=_HelpFormatter, help="translate with a model",
        description="Translate sentences, one per line, from files or standard input; "
        "write one translation per line to standard output (or --output).")
    add = r.add_argument
    add("inputs", nargs="*", metavar="FILE", help="input files ('-' or none: stdin)")
    add("--model", required=True, metavar="DIR", help="a model directory from 'train'")
    add("--output", metavar="FILE", help="write here instead of standard output")
    add("--truncate", action="store_true", help="translate the first max_len tokens "
        "of a longer line (default: such a line is an error)")
    how = r.add_mutually_exclusive_group()
    how.add_argument("--beam", type=_count, default=1, help="beam size (1: greedy)")
    how.add_argument("--sample", action="store_true", help="sample, do not search")
    add("--length-penalty", type=_real,
        help="length penalty of beam search, only with --beam > 1 (default 0.6)")
    add("--temperature", type=_positive,
        help="sampling temperature, only with --sample (default 1.0)")
    add("--top-k", type=_count0,
        help="sample from the k likeliest, only with --sample (default 0: all)")
    add("--top-p", type=_mass,
        help="nucleus sampling, in (0, 1], only with --sample (default 1.0)")
    add("--seed", type=int, help="seed of the sampling, only with --sample (default 0)")
    add("--batch-size", type=_count, default=64, help="sentences decoded together")
    add("--max-len", type=_count, help="longest translation, at most the model's "
        "max_len (default: 2 x source + 10)")
    add("--device", default="auto", help="'auto' (cuda if present), 'cpu', 'cuda', ...")
    add("--precision", choices=sorted(PRECISIONS), default="fp32",
        help="fp32, or autocast to bf16/fp16")
    add("--threads", type=_count, help="CPU threads (default: PyTorch's choice)")
    r.set_defaults(func=run_translate)


def build_parser(prog: str = "transformer-lib") -> argparse.ArgumentParser:
    """The parser of both subcommands (``train`` and ``translate``)."""
    parser = _Parser(prog=prog, formatter_class=_HelpFormatter, description="Train an "
                     "encoder-decoder Transformer on a parallel corpus, and translate.")
    sub = parser.add_subparsers(dest="command", required=True,
                                metavar="{train,translate}", parser_class=_Parser)
    _add_train_parser(sub)
    _add_translate_parser(sub)
    return parser


# [book/appendix_cli.ipynb, cell 14]
def _device(name: str) -> torch.device:
    try:
        return resolve_device(name)
    except ValueError as exc:
        raise ValueError(f"--device: {exc}") from None


def _start(name: str, threads: int | None) -> tuple[int, int, torch.device]:
    """(rank, world size, device). Under torchrun, join the process group (chapter 10's
    ``setup_distributed``): each process takes the GPU of its LOCAL_RANK, or the CPU
    (gloo) with ``--device cpu``. Otherwise one process on ``--device``."""
    if threads:
        torch.set_num_threads(threads)
    rank, world, device = setup_distributed("gloo" if name == "cpu" else None)
    if not torch.distributed.is_initialized():           # not started by torchrun
        return 0, 1, _device(name)
    if name not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device: under torchrun each process takes the GPU of its "
                         f"LOCAL_RANK; pass auto, cuda or cpu, got {name!r}")
    if name == "cuda" and device.type != "cuda":
        raise ValueError("--device cuda: CUDA is not available on this machine")
    return rank, world, torch.device("cpu") if name == "cpu" else device


def _log(message: str) -> None:
    """Every message of the tool goes to stderr (stdout is for translations)."""
    tqdm.write(message, file=sys.stderr)


def _loader(encoded, batch_tokens: int, seed: int, shuffle: bool = True):
    """Token buckets (chapter 10); under torchrun each rank gets its share."""
    dataset = PairDataset(encoded)
    sampler = TokenBucketSampler(dataset.lengths, batch_tokens, shuffle=shuffle,
                                 seed=seed)
    return torch.utils.data.DataLoader(dataset, batch_sampler=sampler,
                                       collate_fn=PadCollate())


# [book/appendix_cli.ipynb, cell 16]
MODEL_FILES = (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, CHECKPOINT_FILE,
               TRAINING_FILE)


def _check_out(out: Path, resume: bool, force: bool, rank: int) -> None:
    """Check ``--out`` before anything is trained. ``--resume``: a directory holding
    checkpoint.pt. Otherwise a new or empty directory, or one left by a run stopped
    before its first checkpoint (``--force``: any directory, a model's files there
    removed), that rank 0 can create and write to."""
    if out.exists() and not out.is_dir():
        raise ModelDirError(f"--out {out}: a file, not a directory")
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    started = set(held) <= {CONFIG_FILE, TOKENIZER_FILE}   # stopped before step 0
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
    if rank != 0:
        return
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
        if force and not resume:
            for name in MODEL_FILES:
                (out / name).unlink(missing_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ModelDirError(f"--out {out}: cannot write there ({reason})") from None


def _fingerprint(pairs) -> str:
    """A short digest of a corpus: a resumed run must read the same pairs."""
    digest = hashlib.sha256()
    for pair in pairs:
        digest.update(f"{pair[0]}\t{pair[1]}\n".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]


def _write_record(out: Path, record: dict) -> None:
    """training.json, written atomically (a temporary file, then a rename)."""
    file = out / TRAINING_FILE
    temporary = file.with_name(f".{file.name}.tmp")
    temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, file)


def _check_record(out: Path, args, corpus: str) -> None:
    """On ``--resume``: what training.json says about the run must match this command
    (the batches depend on the corpus, --batch-tokens and --seed); a run without the
    record is left to chapter 10's check of the batches per epoch."""
    file = out / TRAINING_FILE
    if not file.is_file():
        return
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        saved, saved_corpus = record["args"], record.get("corpus")
    except (ValueError, KeyError, TypeError) as exc:
        raise ModelDirError(f"{file}: damaged ({exc})") from None
    if saved_corpus is not None and saved_corpus != corpus:
        raise ModelDirError(f"{file}: the run was trained on another corpus than "
                            f"--train {' '.join(args.train)}: resume with its own")
    for name in ("batch_tokens", "seed"):
        if name in saved and saved[name] != getattr(args, name):
            option = "--" + name.replace("_", "-")
            raise ModelDirError(
                f"{file}: the run was started with {option} {saved[name]}, this "
                f"command gives {getattr(args, name)}: resume with the same value")
    if args.warmup is None:
        args.warmup = saved.get("warmup")


# [book/appendix_cli.ipynb, cell 18]
def _model_config(args, vocab: int) -> TransformerConfig:
    return TransformerConfig(
        vocab, vocab, d_model=args.d_model, n_heads=args.n_heads, d_ff=args.d_ff,
        n_encoder_layers=args.layers, n_decoder_layers=args.layers,
        dropout=args.dropout, norm_first=args.norm_first, max_len=args.max_len,
        share_embeddings=True)


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
            config, tokenizer = load_config_and_tokenizer(args.out)
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
        _keep_run_config(args, config)
    elif rank == 0:
        save_config_and_tokenizer(args.out, config, tokenizer)
    return config, tokenizer


# [book/appendix_cli.ipynb, cell 20]
class _Progress:
    """The loss function, wrapped to report the run on stderr: the first update prints
    ``header``; then the mean loss is read back at that first update and every
    ``every`` steps, shown on a tqdm bar (``bar``) or written as a line. The step is
    the scheduler's count, so a resumed run counts on from its checkpoint."""

    def __init__(self, loss_fn, optimizer, scheduler, steps: int, every: int,
                 bar: bool, header: str, say):
        self.loss_fn, self.optimizer, self.scheduler = loss_fn, optimizer, scheduler
        self.steps, self.every, self.header, self.say = steps, every, header, say
        self.use_bar, self.bar = bar, None
        self.total: torch.Tensor | float = 0.0
        self.count, self.t0 = 0, time.perf_counter()

    @property
    def step(self) -> int:
        """The updates finished so far."""
        return self.scheduler.last_epoch

    def __call__(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        loss = self.loss_fn(logits, target)
        if not torch.is_grad_enabled():            # not a training update
            return loss
        step = self.step + 1                       # the update this loss is for
        first = bool(self.header)
        if first:                                  # the first update of this run
            resumed = f" (resumed at step {step - 1})" if step > 1 else ""
            self.say(self.header + resumed)
            self.header = ""
            if self.use_bar:
                self.bar = tqdm(total=self.steps, initial=step - 1, ncols=100,
                                mininterval=1.0, file=sys.stderr)
        self.total, self.count = self.total + loss.detach(), self.count + 1
        if first or step % self.every == 0 or step == self.steps:
            mean = float(self.total) / self.count   # one read-back per interval
            self.total, self.count = 0.0, 0
            lr = self.optimizer.param_groups[0]["lr"]
            if self.bar is not None:
                self.bar.set_postfix(loss=f"{mean:.3f}", lr=f"{lr:.3g}", refresh=False)
            else:
                seconds = time.perf_counter() - self.t0
                self.say(f"step {step}/{self.steps}: loss {mean:.3f}, lr {lr:.3g}, "
                         f"{seconds:.0f} s")
        if self.bar is not None:
            self.bar.update(1)
        return loss

    def validate(self, net, loader, amp) -> dict:
        """chapter 10's ``val_fn``: the validation loss, also written on stderr."""
        value = evaluate(net, loader, self.loss_fn, amp)
        self.say(f"step {self.step}/{self.steps}: validation loss {value:.3f}")
        return {"val_loss": value}

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


# [book/appendix_cli.ipynb, cell 22]
class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that chapter 10's ``train`` saves the run."""


def _on_sigterm(signum, frame) -> None:
    raise _Terminated()


def run_train(args) -> int:
    """``train``: read the corpus, train (or load) the tokenizer, train the model, write
    the directory. Under torchrun every process runs it; rank 0 alone writes files.
    Ctrl-C and SIGTERM end it with :class:`Interrupted`."""
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    started: list[_Progress] = []                 # the run, once training starts
    try:
        rank, world, device = _start(args.device, args.threads)
        return _train(args, rank, world, device, started)
    except KeyboardInterrupt as exc:
        name, status = ("SIGTERM", 143) if isinstance(exc, _Terminated) else \
            ("Ctrl-C", 130)
        checkpoint = Path(args.out) / CHECKPOINT_FILE
        if started:
            raise Interrupted(
                f"interrupted by {name} after step {started[0].step}; {checkpoint} "
                "holds the run's last checkpoint: continue it with the same command "
                "and --resume", status) from None
        raise Interrupted(f"interrupted by {name} before training began; nothing to "
                          "resume: run the command again", status) from None
    finally:
        cleanup_distributed()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


# [book/appendix_cli.ipynb, cell 24]
def _encode(train_pairs, valid_pairs, tokenizer, max_len: int, say):
    """The encoded training and validation pairs; too long pairs are skipped with a
    warning, and a corpus with none left is an error."""
    encoded, skipped = encode_pairs(train_pairs, tokenizer, max_len)
    if not encoded:
        raise ValueError(f"--train: none of the {len(train_pairs)} pairs fits "
                         f"--max-len {max_len}")
    if skipped:
        say(f"warning: skipped {skipped} of {len(train_pairs)} training pairs longer "
            f"than --max-len {max_len} tokens")
    if not valid_pairs:
        return encoded, None
    val_encoded, skipped = encode_pairs(valid_pairs, tokenizer, max_len)
    if not val_encoded:
        raise ValueError(f"--valid: none of the {len(valid_pairs)} pairs fits "
                         f"--max-len {max_len}")
    if skipped:
        say(f"warning: skipped {skipped} of {len(valid_pairs)} validation pairs longer "
            f"than --max-len {max_len} tokens")
    return encoded, val_encoded


def _fit(*args, **kwargs):
    """chapter 10's ``train`` without its own progress bar; a loss that turns
    non-finite also says how to continue with the tool."""
    try:
        return train(*args, progress=False, **kwargs)
    except FloatingPointError as exc:          # chapter 10's NonFiniteError
        raise ValueError(f"{exc}; with this tool: --resume, with a smaller "
                         "--lr-factor or a longer --warmup") from None


# [book/appendix_cli.ipynb, cell 26]
def _train(args, rank: int, world: int, device: torch.device,
           started: list) -> int:
    out, say = Path(args.out), _log if rank == 0 else (lambda message: None)
    checkpoint = out / CHECKPOINT_FILE
    if len(args.train) > 2 or (args.valid and len(args.valid) > 2):
        raise ValueError("--train and --valid take one TSV file or two aligned files")
    for name, value in MODEL_DEFAULTS.items():
        if getattr(args, name) is None and not args.resume:
            setattr(args, name, value)
    _check_out(out, args.resume, args.force, rank)
    train_pairs = read_parallel(*args.train)
    valid_pairs = read_parallel(*args.valid) if args.valid else None
    corpus = _fingerprint(train_pairs)
    if args.resume:
        _check_record(out, args, corpus)
    config, tokenizer = _model_setup(args, train_pairs, rank, world)
    encoded, val_encoded = _encode(train_pairs, valid_pairs, tokenizer, config.max_len,
                                   say)
    torch.manual_seed(args.seed)             # the same initial model in every process
    model = Transformer(config).to(device)
    if world > 1:
        torch.manual_seed(args.seed + rank)       # ... and its own dropout in each
    loader = _loader(encoded, args.batch_tokens, args.seed)
    steps = args.steps or (math.ceil(args.epochs * len(loader)) if args.epochs
                           else 10000)
    args.warmup = args.warmup or min(4000, max(1, steps // 4))
    record = {k: v for k, v in vars(args).items() if k != "func"}
    if rank == 0 and not args.resume:
        _write_record(out, {"args": record, "corpus": corpus, "steps": 0})
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98),
                                 eps=1e-9)
    schedule = noam_lambda(config.d_model, args.warmup, args.lr_factor)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    n_params = sum(p.numel() for p in model.parameters())
    where = f"{world} processes on {device.type}" if world > 1 else str(device)
    header = (f"{len(encoded)} training pairs, vocabulary {tokenizer.vocab_size}, "
              f"{n_params:,} parameters, {steps} steps (warm-up {args.warmup}) "
              f"on {where}")
    amp = None if args.precision == "fp32" else args.precision
    every = max(1, min(100 if args.no_progress else 10, steps // 10))
    progress = _Progress(LabelSmoothingLoss(args.label_smoothing, config.pad_id),
                         optimizer, scheduler, steps, every,
                         bar=not args.no_progress and rank == 0, header=header, say=say)
    started.append(progress)
    val_loader = None
    if val_encoded:
        val_loader = _loader(val_encoded, args.batch_tokens, args.seed, shuffle=False)
    try:
        history = _fit(model, loader, optimizer, scheduler, progress, steps=steps,
                       val_every=args.val_every, clip_norm=args.clip_norm, amp=amp,
                       val_fn=(lambda net: progress.validate(net, val_loader, amp))
                       if val_loader is not None else None,
                       log_every=every, checkpoint_path=str(checkpoint),
                       checkpoint_every=args.checkpoint_every,
                       resume_from=str(checkpoint) if args.resume else None)
    finally:
        progress.close()
    loss = history.loss[-1] if history.loss else None
    val_loss = history.val[-1].get("val_loss") if history.val else None
    if rank == 0:
        save_model_dir(out, model.cpu(), tokenizer, args=record, corpus=corpus,
                       steps=history.last_step, loss=loss, val_loss=val_loss,
                       world_size=world)
    shown = (("train", loss), ("valid", val_loss))
    losses = "".join(f", {k} loss {v:.3f}" for k, v in shown if v is not None)
    say(f"step {history.last_step}/{steps}{losses}; {history.seconds:.1f} s; "
        f"model written to {out}")
    return 0


# [book/appendix_cli.ipynb, cell 28]
def _read_inputs(inputs) -> list[tuple[str, int, str]]:
    """(where, line number, text) of every input line; a file that is not UTF-8,
    standard input included, is an error naming it and the line."""
    lines: list[tuple[str, int, str]] = []
    for name in inputs or ["-"]:
        if name == "-":
            where, stream = "<stdin>", sys.stdin
            buffer = getattr(stream, "buffer", None)
            data = buffer.read() if buffer is not None else stream.read()
        else:
            path, where = Path(name), name
            if not path.is_file():
                raise FileNotFoundError(f"{path}: no such input file")
            data = path.read_bytes()
        if isinstance(data, bytes):
            raw = data
            try:
                data = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                line = raw[:exc.start].count(b"\n") + 1
                raise ValueError(f"{where}:{line}: not valid UTF-8 ({exc.reason}, byte "
                                 f"{raw[exc.start]:#04x})") from None
        texts = data.split("\n")                   # numbered as editors number lines
        if texts[-1] == "":
            texts.pop()
        lines += [(where, i, text.removesuffix("\r"))
                  for i, text in enumerate(texts, 1)]
    return lines


def _sampling_options(args) -> dict:
    """The decoder's options; one given for another decoder is a usage error."""
    unused = [f"--{name.replace('_', '-')}"
              for name in ("temperature", "top_k", "top_p", "seed")
              if getattr(args, name) is not None]
    if unused and not args.sample:
        raise UsageError(f"{', '.join(unused)}: only with --sample (without it, "
                         "ignored)")
    if args.length_penalty is not None and args.beam == 1:
        raise UsageError("--length-penalty: only with --beam K > 1 (without it, "
                         "ignored)")

    def given(name, default):
        value = getattr(args, name)
        return default if value is None else value

    return {"length_penalty": given("length_penalty", 0.6),
            "temperature": given("temperature", 1.0), "top_k": given("top_k", 0),
            "top_p": given("top_p", 1.0), "seed": given("seed", 0)}


# [book/appendix_cli.ipynb, cell 30]
def _too_long(lines, tokenizer, max_len: int, truncate: bool, say) -> None:
    """A line of more than the model's ``max_len`` tokens is an error naming it, or
    with ``--truncate`` a warning (``translate_lines`` keeps its first tokens)."""
    long = [(where, i, n) for where, i, text in lines
            if (n := len(tokenizer.encode(text.strip()))) > max_len]
    if not long:
        return
    where, i, n = long[0]
    more = f" (and {len(long) - 1} more lines)" if len(long) > 1 else ""
    if not truncate:
        raise ValueError(f"{where}:{i}: {n} tokens, more than the model's max_len "
                         f"{max_len}{more}; split it, or pass --truncate")
    say(f"warning: {where}:{i}: {n} tokens, only the first {max_len} translated{more}")


def run_translate(args) -> int:
    """``translate``: load the model directory, translate every input line, write one
    line each."""
    options = _sampling_options(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model_dir(args.model, _device(args.device))
    limit = model.config.max_len
    if args.max_len is not None and args.max_len > limit:
        raise UsageError(f"--max-len {args.max_len}: the model in {args.model} "
                         f"handles at most {limit} tokens")
    lines = _read_inputs(args.inputs)
    _too_long(lines, tokenizer, limit, args.truncate, _log)
    translations = translate_lines(
        model, tokenizer, [text for _, _, text in lines], beam=args.beam,
        sampling=args.sample, batch_size=args.batch_size, max_len=args.max_len,
        precision=args.precision, on_too_long="truncate" if args.truncate else "error",
        **options)
    text = "".join(t + "\n" for t in translations)
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            raise OSError(f"--output {args.output}: cannot write ({reason})") from None
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """The entry point of ``python -m transformer_lib`` and of the ``transformer-lib``
    console script. Returns the exit status: 0; 2 for a bad option or options that do
    not fit together; 1 for another error; 130 after Ctrl-C, 143 after SIGTERM. An
    error is one line on stderr, never a traceback."""
    parser = build_parser(prog or "transformer-lib")
    args = parser.parse_args(argv)
    where = f"{parser.prog} {args.command}"
    try:
        return args.func(args)
    except Interrupted as exc:
        _log(f"{where}: {exc}")
        return exc.status
    except KeyboardInterrupt:
        _log(f"{where}: interrupted")
        return 130
    except UsageError as exc:
        _log(f"{where}: error: {exc} (see --help)")
        return 2
    except (ValueError, TypeError, OSError, RuntimeError, MemoryError) as exc:
        message = " ".join(str(exc).split()) or type(exc).__name__
        _log(f"{where}: error: {message}")
        return 1
    except Exception as exc:                 # a bug: still one line, with its type
        message = " ".join(str(exc).split())
        _log(f"{where}: error: {type(exc).__name__} {message}".rstrip())
        return 1


__all__ = [
    'MODEL_DEFAULTS',
    'MIN_VOCAB',
    'UsageError',
    'Interrupted',
    'build_parser',
    'MODEL_FILES',
    'run_train',
    'run_translate',
    'main',
]
