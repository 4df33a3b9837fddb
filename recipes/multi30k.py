#!/usr/bin/env python
"""Multi30k German -> English with the book's command-line tool: train, translate, score, record.

Given a folder holding the Multi30k task 1 raw files (train, val and test_2016_flickr, each ``.de`` and
``.en``, plain or gzipped; published at https://github.com/multi30k/dataset in data/task1/raw; this script
never downloads anything), it

1. writes the training and validation pairs in the tool's corpus format (TSV) into ``--work``;
2. trains with ``python -m transformer_lib train`` (the issue's model: d_model 256, 4 heads, 3 + 3 layers,
   d_ff 1024, byte-level BPE 8000, ``--batch-tokens 5000`` (about 4,600 target tokens a batch on this data;
   the result records the measured mean), warm-up 400, 1500 updates), keeping the last checkpoints;
   on a GPU with ``--device cuda --precision bf16``;
3. translates test2016 greedy and with beam 4 (``translate``), averages the last checkpoints (``average``)
   and translates greedy with the average too;
4. scores with sacreBLEU (corpus BLEU with its signature, and a bootstrap interval), the same BLEU on
   lowercased text (``lowercase=True``, 13a tokens: how published Multi30k figures are often computed),
   a torchtext-style BLEU on lowercased spaCy tokens when spaCy is installed, and chrF, with a paired
   bootstrap interval of averaged - last BLEU; with ``--against FILE`` (an earlier result file), the
   paired bootstrap of each decoding against that run's, on the same test sentences;
5. writes the result JSON (default ``benchmarks/results/multi30k.json``) atomically: date, commit,
   machine, options, run times (wall and CPU seconds of each training segment), the training and
   validation loss curves (read from the ``metrics.jsonl`` that ``train`` writes in the run directory),
   the scores, 20 sample translations, and every hypothesis with its reference (``outputs``), so that
   the file can be scored again without the data or the model.

``python recipes/multi30k.py rescore FILE [--against BASE]`` scores a result file again from the
hypotheses it stores (no data, no model; the file is rewritten atomically), e.g. to add a metric, or the
paired test of a variant against the run in BASE. A file written before the recipe stored its hypotheses
cannot be rescored: it holds 20 sample translations, not the test set's.

Running it again with the same ``--work`` continues: training resumes from the run's checkpoint (the
tool's ``--resume``), or is skipped when it has made its ``--steps``; translations are reused while the
model's files, the test set and the decoding options are the same (their SHA-256). ``--smoke`` runs the
same steps on 1000 pairs with a tiny model for 30 updates (the tests). An ``--out`` that would replace a
file the recipe reads (a data file, anything in ``--data`` outside ``--work``, a file of the run in
``--work``, the ``--against`` file) is refused before anything runs.

Usage: ``python recipes/multi30k.py --data DIR [--work DIR] [--out FILE] [--steps N] [--smoke]
[--against FILE]``, or ``python recipes/multi30k.py rescore FILE [--against FILE]`` (``--help`` for every
option). Exit status: 0; 1 on an error (one line on stderr, naming the file: a damaged gzip, a damaged
``recipe.json``, ...); 2 for a bad option; 130 after Ctrl-C (SIGINT), 143 after SIGTERM, 129 after SIGHUP,
each sent to the recipe alone or to its process group: the tool runs in a process group of its own, the
recipe hands it the signal once and waits while it saves the run, then says in one line how to go on (the
same command continues).
"""
from __future__ import annotations

import argparse
import datetime
import gzip
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import cast

import numpy as np
import torch

from transformer_lib.checks import check_float, check_int, check_probability
from transformer_lib.cli.common import OneLineParser, bucket_loader, number_option
from transformer_lib.files import atomic_write
from transformer_lib.model import Transformer
from transformer_lib.training.checkpoint import CheckpointError, checkpoint_step
from transformer_lib.training.metrics_log import METRICS_FILE, read_metrics
from transformer_lib.translation.corpus import read_aligned, write_tsv
from transformer_lib.translation.metrics import bleu_ci, corpus_bleu, paired_bleu_ci
from transformer_lib.translation.model_dir import (
    CONFIG_FILE,
    GENERATION_FILE,
    TOKENIZER_FILE,
    TOKENIZER_KIND_FILE,
    WEIGHTS_FILE,
    load_config_and_tokenizer,
)
from transformer_lib.translation.tokenizer import BPETokenizer, encode_pairs

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "multi30k.json"
PUBLISHED = "https://github.com/multi30k/dataset, in data/task1/raw"
SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}
#: the issue's run, and the tiny run of --smoke (its corpus: the first pairs of each split)
DEFAULTS = {"d_model": 256, "n_heads": 4, "layers": 3, "d_ff": 1024, "dropout": 0.1, "vocab_size": 8000,
            "batch_tokens": 5000, "warmup": 400, "steps": 1500, "checkpoint_every": 100, "val_every": 100,
            "keep": 5}
SMOKE = {"d_model": 32, "n_heads": 2, "layers": 1, "d_ff": 64, "dropout": 0.1, "vocab_size": 400,
         "batch_tokens": 800, "warmup": 10, "steps": 30, "checkpoint_every": 5, "val_every": 10, "keep": 5}
SMOKE_PAIRS = {"train": 1000, "valid": 200, "test": 100}
#: options a run keeps (the tool refuses another value on --resume, or they change what is trained)
FIXED = ("smoke", "d_model", "n_heads", "layers", "d_ff", "dropout", "vocab_size", "batch_tokens", "warmup",
         "seed", "lr_factor", "label_smoothing")
N_SAMPLES, BEAM, N_RESAMPLES, LEVEL = 20, 4, 1000, 0.95
#: the tool's stderr lines, read only for a run begun before train wrote metrics.jsonl
VAL_LINE = re.compile(r"^step (\d+)/\d+: validation loss (\S+)$")
LOSS_LINE = re.compile(r"^step (\d+)/\d+: loss (\S+), lr (\S+), ")


class RecipeError(Exception):
    """An error the recipe reports as one line (exit status 1)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, raised like Ctrl-C (so that a training segment is still recorded);
    ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


#: the signals the recipe stops on: their names in its last line, and its exit status
SIGNALS = {signal.SIGINT: ("Ctrl-C", 130), signal.SIGTERM: ("SIGTERM", 143)}
if hasattr(signal, "SIGHUP"):
    SIGNALS[signal.SIGHUP] = ("SIGHUP", 129)


def on_signals(handler, signals=None) -> dict:
    """Install ``handler`` for ``signals`` (default: every one of ``SIGNALS``) in the main thread, leaving
    an ignored one ignored (``nohup``, a background job); -> the previous handlers, for ``restore``."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for sig in SIGNALS if signals is None else signals:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, handler)
    return previous


def restore(previous: dict) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, signal.SIG_DFL if handler is None else handler)


class ShapeError(ValueError):
    """A JSON file holds a value of another type than the recipe reads there (the message says where)."""


def _kind(value) -> str:
    """The JSON type of ``value``, in words."""
    for types, name in ((dict, "an object"), (list, "a list"), (str, "a string"), (bool, "a boolean"),
                        ((int, float), "a number")):
        if isinstance(value, types):
            return name
    return "null"


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_strings(value) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


#: the checks of a JSON value: (test, what is expected, in words)
OBJECT, LIST = (lambda v: isinstance(v, dict), "an object"), (lambda v: isinstance(v, list), "a list")
NUMBER, STRING = (_is_number, "a number"), (lambda v: isinstance(v, str), "a string")
STRINGS, INT = (_is_strings, "a list of strings"), (lambda v: isinstance(v, int) and not isinstance(v, bool),
                                                    "an integer")


def check(value, where: str, expected: tuple):
    """``value`` (at ``where``, e.g. ``"segments"[0]``), checked to be ``expected``; -> it."""
    test, words = expected
    if not test(value):
        raise ShapeError(f"{where} is {_kind(value)}, expected {words}")
    return value


def field(obj: dict, key: str, where: str, expected: tuple, required: bool = True):
    """``obj[key]`` checked to be ``expected`` (``where``: the path of ``obj``, "" at the top); a missing
    one is an error if ``required``, else None."""
    path = f"{where}: {json.dumps(key)}" if where else json.dumps(key)
    if key not in obj:
        if required:
            raise ShapeError(f"{path} is missing")
        return None
    return check(obj[key], path, expected)


_count = number_option(int, check_int)                                  # an int >= 1
_rate = number_option(float, check_probability, one=False)              # a float in [0, 1)
_positive = number_option(float, check_float, low=0.0, low_open=True)   # a float > 0


def parse_args(argv=None) -> argparse.Namespace:
    """The options, the defaults (the issue's run, or --smoke's) filled in; a bad one is one line."""
    p = OneLineParser(prog="multi30k.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, type=Path, help="folder of the Multi30k task 1 raw files")
    p.add_argument("--work", type=Path, help="folder of the run's files (default: DATA/recipe-work, "
                   "DATA/recipe-work-smoke with --smoke); the same --work continues a run")
    p.add_argument("--out", type=Path, help=f"result JSON (default: {RESULT.relative_to(ROOT)}; with --smoke: "
                   "WORK/multi30k-smoke.json)")
    p.add_argument("--smoke", action="store_true", help="a tiny model on the first pairs, for tests")
    for name, value in DEFAULTS.items():
        p.add_argument("--" + name.replace("_", "-"), type=_rate if name == "dropout" else _count,
                       help=f"(default: {value}; --smoke: {SMOKE[name]})")
    p.add_argument("--lr-factor", type=_positive, default=1.0, help="scale of the Noam rate (default: 1.0)")
    p.add_argument("--label-smoothing", type=_rate, default=0.1, help="(default: 0.1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and batches (default: 0)")
    p.add_argument("--device", default="auto", help="auto (cuda when present), cpu, cuda, ... (default: auto)")
    p.add_argument("--precision", choices=["auto", "fp32", "bf16", "fp16"], default="auto",
                   help="training precision; auto: bf16 on a GPU that has it, else fp32 (translation: fp32)")
    p.add_argument("--threads", type=_count, help="CPU threads of the tool (default: PyTorch's choice)")
    p.add_argument("--note", default="", help="a sentence kept in the result file (options.note), e.g. that the "
                   "run shared its machine with other work")
    p.add_argument("--against", type=Path, help="an earlier result file (with its hypotheses): compare each "
                   "decoding with that run's on the same sentences (paired bootstrap), e.g. a variant against "
                   f"{RESULT.relative_to(ROOT)}")
    args = p.parse_args(argv)
    for name, value in (SMOKE if args.smoke else DEFAULTS).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.data = args.data.resolve()
    args.work = (args.work or args.data / ("recipe-work-smoke" if args.smoke else "recipe-work")).resolve()
    args.out = (args.out or (args.work / "multi30k-smoke.json" if args.smoke else RESULT)).resolve()
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if args.precision == "auto":
        gpu = args.device.startswith("cuda") and torch.cuda.is_available()
        args.precision = "bf16" if gpu and torch.cuda.is_bf16_supported() else "fp32"
    return args


def check_out(args) -> None:
    """Refuse an ``--out`` that would replace a file the recipe reads or writes, before anything runs: a
    raw data file (or anything in ``--data`` outside ``--work``), a file of the run in ``--work`` (its
    model, averaged model, corpus, record, log and translations), or the ``--against`` file; the same file
    under another name (a hard link; a symbolic link is resolved already) too."""
    out, work = args.out, args.work
    raw = [args.data / f"{stem}.{lang}{gz}" for stem in SPLITS.values() for lang in ("de", "en")
           for gz in ("", ".gz")]
    run_files = [work / "recipe.json", work / "train.log", *work.glob("hyp.*.en")]
    run_folders = [work / "model", work / "averaged", work / "corpus"]
    against = [args.against.resolve()] if args.against else []
    why = None
    if out in raw:
        why = "a data file the recipe reads"
    elif _inside(out, args.data) and not _inside(out, work):
        why = f"inside --data {args.data}, which holds the data (the recipe writes into --work)"
    elif (out in run_files or (out.parent == work and re.fullmatch(r"hyp\..+\.en", out.name))
          or any(_inside(out, folder) for folder in run_folders)):
        why = f"a file of the run in --work {work}"
    elif out in against:
        why = "the --against file, which the recipe reads"
    elif out.is_file():
        inode = (out.stat().st_dev, out.stat().st_ino)
        others = [*raw, *run_files, *against, *(p for folder in run_folders if folder.is_dir()
                                                for p in folder.rglob("*"))]
        same = next((p for p in others if p.is_file() and (p.stat().st_dev, p.stat().st_ino) == inode), None)
        if same is not None:
            why = f"the same file as {same} (a hard link), which the recipe reads"
    if why:
        raise RecipeError(f"--out {out}: {why}; the result would replace it: give another --out")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def raw_file(data: Path, stem: str, lang: str) -> Path:
    """DATA/stem.lang (or stem.lang.gz); a missing file is one line saying where they are published."""
    for name in (f"{stem}.{lang}", f"{stem}.{lang}.gz"):
        if (data / name).is_file():
            return data / name
    raise RecipeError(f"--data {data}: no {stem}.{lang} there (nor {stem}.{lang}.gz); the Multi30k task 1 "
                      f"raw files are published at {PUBLISHED}")


def prepare_corpus(args) -> dict:
    """Check --data, write WORK/corpus/{train,valid}.tsv and test.de / test.en; -> the pairs by split."""
    if not args.data.is_dir():
        raise RecipeError(f"--data {args.data}: not a folder; it must hold the Multi30k task 1 raw files, "
                          f"published at {PUBLISHED}")
    files = {split: [raw_file(args.data, stem, lang) for lang in ("de", "en")] for split, stem in SPLITS.items()}
    corpus = args.work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    pairs = {}
    for split, paths in files.items():
        plain, copies = [], {}
        for path in paths:
            if path.suffix == ".gz":           # decompressed beside the corpus, as read_aligned reads text
                target = corpus / path.name.removesuffix(".gz")
                atomic_write(target, gunzip(path))
                copies[str(target)], path = str(path), target
            plain.append(path)
        try:
            aligned = read_aligned(*plain)
        except ValueError as exc:          # it names the file it read: the .gz file, not its copy
            message = str(exc)
            for copy, origin in copies.items():
                message = message.replace(copy, origin)
            raise RecipeError(message) from None
        # a few sentences hold a tab (train.de line 7367): one space between words, as sacreBLEU reads them
        got = [(" ".join(src.split()), " ".join(tgt.split())) for src, tgt in aligned]
        pairs[split] = got[:SMOKE_PAIRS[split]] if args.smoke else got
    write_tsv(pairs["train"], corpus / "train.tsv")
    write_tsv(pairs["valid"], corpus / "valid.tsv")
    for i, lang in enumerate(("de", "en")):
        atomic_write(corpus / f"test.{lang}", "".join(p[i] + "\n" for p in pairs["test"]))
    return pairs


def gunzip(path: Path) -> bytes:
    """The content of the gzipped file ``path``; a damaged one is one line naming it."""
    data = path.read_bytes()
    try:
        return gzip.decompress(data)
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise RecipeError(f"{path}: damaged gzip ({' '.join(str(exc).split()) or type(exc).__name__}); the "
                          f"Multi30k task 1 raw files are published at {PUBLISHED}") from None


def run_tool(arguments: list, what: str, log: Path | None = None) -> float:
    """Run ``python -m transformer_lib ARGUMENTS``, its stderr shown (and appended to ``log``); -> seconds.

    The tool runs in a process group of its own, and a SIGINT (Ctrl-C at a terminal), SIGTERM or SIGHUP
    that reaches the recipe is handed to it once from here (SIGHUP as SIGTERM: the tool saves the run on
    both): it saves what it can and ends, and the recipe raises :class:`Interrupted` after it has ended,
    never leaving it running. A second signal is handed on too (the tool then stops at once)."""
    cmd = [sys.executable, "-m", "transformer_lib", *map(str, arguments)]
    start, last, received, sent = time.perf_counter(), "", [], []
    proc: subprocess.Popen | None = None
    hangup = getattr(signal, "SIGHUP", None)

    def forward(signum: int, frame) -> None:
        received.append(signum)
        if proc is not None:
            sent.append(signum)
            proc.send_signal(signal.SIGTERM if signum == hangup else signum)

    previous = on_signals(forward)
    try:
        if received:
            raise Interrupted(received[0])
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                encoding="utf-8", errors="replace", start_new_session=True)
        if received and not sent:          # it came while the tool was being started
            sent.append(received[0])
            proc.send_signal(signal.SIGTERM if received[0] == hangup else received[0])
        with proc, open(log, "a", encoding="utf-8") if log else open(os.devnull, "w") as copy:
            assert proc.stderr is not None
            for line in proc.stderr:
                sys.stderr.write(line)
                copy.write(line)
                copy.flush()                   # the curve survives a killed recipe
                last = line.strip() or last
    finally:
        restore(previous)
    if received:
        raise Interrupted(received[0])
    if proc.returncode:
        raise RecipeError(f"{what} failed (exit {proc.returncode}): {last}")
    return time.perf_counter() - start


def children_cpu() -> float:
    """CPU seconds (user + system) used so far by this process's finished children: with a segment's wall time,
    how many cores the training had, on average (less than --threads when other work shared the machine)."""
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def tool_has(words: list[str], option: str) -> bool:
    """Whether ``python -m transformer_lib WORDS --help`` mentions ``option``."""
    run = subprocess.run([sys.executable, "-m", "transformer_lib", *words, "--help"], capture_output=True,
                         text=True)
    return run.returncode == 0 and option in run.stdout


def read_json(file: Path) -> object:
    """The JSON value in ``file``; a file that cannot be read, or is not UTF-8 JSON, raises ShapeError
    saying why (the caller names the file)."""
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise ShapeError(f"could not read it: {exc.strerror or exc}") from None
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ShapeError(f"not UTF-8: {exc}") from None
    except json.JSONDecodeError as exc:
        raise ShapeError(f"not JSON: {exc}") from None


def check_state(state) -> None:
    """The shape of a recipe.json (the values the recipe reads from it), or ShapeError saying where."""
    check(state, "the file", OBJECT)
    field(state, "fixed", "", OBJECT, required=False)
    for i, segment in enumerate(field(state, "segments", "", LIST, required=False) or []):
        where = f'"segments"[{i}]'
        check(segment, where, OBJECT)
        field(segment, "seconds", where, NUMBER)
        field(segment, "cpu_seconds", where, NUMBER, required=False)
    for name, known in (field(state, "translations", "", OBJECT, required=False) or {}).items():
        where = f'"translations"[{json.dumps(name)}]'
        check(known, where, OBJECT)
        field(known, "seconds", where, NUMBER)
    if (average := field(state, "average", "", OBJECT, required=False)) is not None:
        field(average, "seconds", '"average"', NUMBER)
        field(average, "checkpoints", '"average"', STRINGS)
        field(average, "from", '"average"', STRING)
    field(state, "train_command", "", STRINGS, required=False)


def load_state(args) -> dict:
    """WORK/recipe.json: the run's fixed options, its training segments, its translations. Another value
    of a fixed option than the run's is an error naming it; a damaged file is one line naming it."""
    file, fixed = args.work / "recipe.json", {name: getattr(args, name) for name in FIXED}
    try:
        state = read_json(file) if file.is_file() else {}
        check_state(state)
    except ShapeError as exc:
        raise RecipeError(f"{file}: damaged ({exc}); remove it to begin the record again (the run in "
                          f"{args.work / 'model'} is kept, the times recorded so far are lost), or give "
                          "another --work") from None
    assert isinstance(state, dict)
    for name, value in state.get("fixed", {}).items():
        if fixed.get(name) != value:
            option = "--" + name.replace("_", "-")
            raise RecipeError(f"--work {args.work} holds a run with {option} {json.dumps(value)}, this "
                              f"command gives {json.dumps(fixed.get(name))}: give the same value, or another "
                              "--work")
    state.update(fixed=fixed)
    state.setdefault("segments", [])
    state.setdefault("translations", {})
    return state


def save_state(args, state: dict) -> None:
    args.work.mkdir(parents=True, exist_ok=True)
    atomic_write(args.work / "recipe.json", json.dumps(state, indent=2) + "\n")


def steps_done(run: Path) -> int:
    """The updates the run in ``run`` has made, from its checkpoint (0 if it has none)."""
    try:
        return checkpoint_step(run / "checkpoint.pt")
    except (FileNotFoundError, CheckpointError):   # none yet (a damaged one: the tool says so on --resume)
        return 0


def train(args, state: dict, keep: bool) -> list[str]:
    """Train (or continue, or skip a finished run); -> the tool's arguments of this or the last segment."""
    run, corpus = args.work / "model", args.work / "corpus"
    done = steps_done(run)
    if done > args.steps:
        raise RecipeError(f"--steps {args.steps}: the run in {run} has already made {done} updates; give "
                          f"--steps {done} or more, or another --work")
    if done == args.steps and (run / "model.safetensors").is_file():
        print(f"training: done ({done} updates in {run}); not run again", file=sys.stderr)
        return state.get("train_command", [])
    resume = (run / "checkpoint.pt").is_file()
    command = ["train", "--train", corpus / "train.tsv", "--valid", corpus / "valid.tsv", "--out", run,
               "--steps", args.steps, "--batch-tokens", args.batch_tokens, "--seed", args.seed,
               "--lr-factor", args.lr_factor, "--label-smoothing", args.label_smoothing,
               "--val-every", args.val_every, "--checkpoint-every", args.checkpoint_every,
               "--device", args.device, "--precision", args.precision, "--no-progress"]
    if resume:
        command.append("--resume")        # the run keeps its config.json, tokenizer and warm-up
    else:
        command += ["--vocab-size", args.vocab_size, "--d-model", args.d_model, "--n-heads", args.n_heads,
                    "--layers", args.layers, "--d-ff", args.d_ff, "--dropout", args.dropout,
                    "--warmup", args.warmup]
    if keep and not resume:               # (a resumed run keeps its run's)
        command += ["--keep-checkpoints", args.keep]
    if args.threads:
        command += ["--threads", args.threads]
    start, cpu, completed = time.perf_counter(), children_cpu(), False
    try:
        run_tool(command, "train", args.work / "train.log")
        completed = True
    finally:                               # an interrupted segment's time counts too
        state["segments"].append({"from_step": done, "to_step": steps_done(run), "completed": completed,
                                  "seconds": time.perf_counter() - start, "cpu_seconds": children_cpu() - cpu,
                                  "resumed": resume,
                                  "device": args.device, "precision": args.precision})
        state["train_command"] = [str(a) for a in command]
        save_state(args, state)
    return state["train_command"]


def stamp(path: Path) -> str:
    """Which version of a file: its size and modification time."""
    info = path.stat()
    return f"{info.st_size}-{info.st_mtime_ns}"


def sha256(path: Path) -> str:
    """The SHA-256 of the file's content, in hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


#: the files of a model directory that translate reads
MODEL_FILES = (WEIGHTS_FILE, CONFIG_FILE, TOKENIZER_FILE, TOKENIZER_KIND_FILE, GENERATION_FILE)


def translate(args, state: dict, name: str, model: Path, beam: int) -> list[str]:
    """test.de translated by the model in ``model``; the hypotheses are reused while the model's files,
    test.de and the decoding options are what they were (their SHA-256, not their size and time), and the
    hypothesis file is the one written then."""
    out, known = args.work / f"hyp.{name}.en", state["translations"].get(name, {})
    source = args.work / "corpus" / "test.de"
    key = {"model": {file: sha256(model / file) for file in MODEL_FILES if (model / file).is_file()},
           "input": sha256(source), "options": {"beam": beam, "device": args.device}}
    if known.get("key") != key or not out.is_file() or known.get("output") != sha256(out):
        command = ["translate", "--model", model, "--output", out, "--beam", beam, "--device", args.device,
                   source]
        if args.threads:
            command += ["--threads", args.threads]
        seconds = run_tool(command, f"translate ({name})")
        state["translations"][name] = {"key": key, "output": sha256(out), "seconds": seconds,
                                       "command": [str(a) for a in command]}
        save_state(args, state)
    text = out.read_text(encoding="utf-8")
    return text.removesuffix("\n").split("\n") if text else []


def average(args, state: dict, missing: str | None) -> tuple[Path | None, str | None]:
    """(the averaged model directory, None), or (None, why averaging was skipped: ``missing``, what the
    tool lacks, or too few snapshots)."""
    if missing:
        return None, missing
    run = args.work / "model"
    kept = sorted((run / "checkpoints").glob("step-*.pt"))
    if len(kept) < 2:
        return None, f"{len(kept)} checkpoint(s) kept in {run / 'checkpoints'}: nothing to average"
    last, out = kept[-args.keep:], args.work / "averaged"
    key = "+".join(f"{p.name}:{stamp(p)}" for p in last)
    if state.get("average", {}).get("from") != key or not (out / "model.safetensors").is_file():
        if out.exists():
            shutil.rmtree(out)                 # this recipe's own folder, written again from the snapshots
        seconds = run_tool(["average", run, "--last", len(last), "--out", out], "average")
        state["average"] = {"from": key, "seconds": seconds, "checkpoints": [p.name for p in last]}
        save_state(args, state)
    return out, None


def spacy_bleu(hypotheses: list[str], references: list[str]) -> float | None:
    """BLEU as torchtext's ``bleu_score`` computes it on lowercased spaCy tokens (Ben Trevett's tutorial:
    spaCy's English tokenizer, lowercased tokens, 4-grams, no smoothing), or None without spaCy. The
    tokenizer is spaCy's rule-based English one (``spacy.blank("en")``, the tokenizer its English models
    share); the hypotheses are detokenized text, tokenized here like the references."""
    try:
        import spacy
    except ImportError:
        return None
    from sacrebleu.metrics import BLEU
    tokenizer = spacy.blank("en").tokenizer

    def tokens(lines: list[str]) -> list[str]:
        return [" ".join(t.text.lower() for t in tokenizer(line)) for line in lines]

    bleu = BLEU(tokenize="none", smooth_method="none", force=True)
    return float(bleu.corpus_score(tokens(hypotheses), [tokens(references)]).score)


SPACY_SIGNATURE = "spaCy English tokenizer, lowercased tokens, 4-grams, no smoothing (torchtext's bleu_score)"


def scores(hypotheses: dict[str, list[str]], references: list[str], seed: int,
           baseline: dict | None = None) -> dict:
    """BLEU (with its 95% bootstrap interval), lowercased BLEU (and lowercased spaCy-token BLEU when spaCy is
    installed) and chrF of each system; averaged - last BLEU, paired; with ``baseline`` (an earlier result
    file holding its hypotheses), each system minus the baseline's same system, paired."""
    from sacrebleu.metrics import BLEU, CHRF
    result: dict = {"systems": {}, "averaged_minus_last": None, "against": None, "level": LEVEL,
                    "resamples": N_RESAMPLES}
    lowercased = BLEU(lowercase=True)
    for name, hyps in hypotheses.items():
        bleu, signature = corpus_bleu(hyps, references)
        _, low, high = bleu_ci(hyps, references, n_resamples=N_RESAMPLES, level=LEVEL, seed=seed)
        chrf = CHRF()
        result["systems"][name] = {"bleu": bleu, "bleu_low": low, "bleu_high": high,
                                   "bleu_lc": float(lowercased.corpus_score(hyps, [references]).score),
                                   "chrf": float(chrf.corpus_score(hyps, [references]).score)}
        spacy = spacy_bleu(hyps, references)
        if spacy is not None:
            result["systems"][name]["bleu_spacy_lc"] = spacy
            result["bleu_spacy_lc_signature"] = SPACY_SIGNATURE
        result["bleu_signature"], result["chrf_signature"] = signature, str(chrf.get_signature())
        result["bleu_lc_signature"] = str(lowercased.get_signature())
    if "averaged_greedy" in hypotheses:
        diff = paired_bleu_ci(hypotheses["greedy"], hypotheses["averaged_greedy"], references,
                              n_resamples=N_RESAMPLES, level=LEVEL, seed=seed)
        result["averaged_minus_last"] = {"bleu": diff[0], "low": diff[1], "high": diff[2], "level": LEVEL,
                                         "resamples": N_RESAMPLES, "decoding": "greedy"}
    if baseline is not None:
        result["against"] = against(hypotheses, references, baseline, seed)
    return result


def load_baseline(path: Path | None) -> dict | None:
    """The result file ``--against`` names, checked to hold its hypotheses (None without ``--against``)."""
    if path is None:
        return None
    try:
        base = read_json(path)
    except ShapeError as exc:
        raise RecipeError(f"--against {path}: cannot read it as a result file ({exc})") from None
    if not isinstance(base, dict) or not isinstance(base.get("outputs"), dict) or \
            "hypotheses" not in base["outputs"]:
        raise RecipeError(f"--against {path}: it holds no hypotheses (a file recorded before the recipe "
                          "stored them), so no paired test can be made against it")
    try:
        check_outputs(base["outputs"])
    except ShapeError as exc:
        raise RecipeError(f"--against {path}: damaged ({exc})") from None
    base["file"] = path.name
    return base


def check_outputs(outputs: dict) -> None:
    """The shape of a result file's ``outputs`` (every hypothesis of each system, one a reference), or
    ShapeError saying where."""
    references = field(outputs, "references", '"outputs"', STRINGS)
    for name, hyps in field(outputs, "hypotheses", '"outputs"', OBJECT).items():
        where = f'"outputs": "hypotheses"[{json.dumps(name)}]'
        check(hyps, where, STRINGS)
        if len(hyps) != len(references):
            raise ShapeError(f"{where}: {len(hyps)} hypotheses for {len(references)} references")


def against(hypotheses: dict[str, list[str]], references: list[str], base: dict, seed: int) -> dict:
    """Each system's BLEU minus the same system's in ``base`` (a result file with its hypotheses), with
    the paired bootstrap interval (translation.metrics.paired_bleu_ci) on the same test sentences."""
    if base["outputs"]["references"] != references:
        raise RecipeError(f"--against {base['file']}: its references are not this run's (another test set, "
                          "or another order): a paired test needs the same sentences")
    systems = {}
    for name, hyps in hypotheses.items():
        if name in base["outputs"]["hypotheses"]:
            diff = paired_bleu_ci(base["outputs"]["hypotheses"][name], hyps, references,
                                  n_resamples=N_RESAMPLES, level=LEVEL, seed=seed)
            systems[name] = {"bleu": diff[0], "low": diff[1], "high": diff[2]}
    return {"file": base["file"], "commit": base.get("commit"), "level": LEVEL, "resamples": N_RESAMPLES,
            "difference": "this run's BLEU minus the file's, paired on the same sentences", "systems": systems}


def loss_curve(run: Path, log: Path) -> dict:
    """The run's losses from the metrics.jsonl that ``train`` writes in the run directory (one line per logged
    step and per validation, kept across --resume). A run begun by a tool that did not write it yet falls back
    to the tool's stderr lines in ``log`` (a step logged twice, made again after a resume, keeps the last)."""
    metrics = run / METRICS_FILE
    if metrics.is_file():
        records = read_metrics(metrics)
        return {"source": f"{METRICS_FILE}, written by train in the run directory",
                "valid": [(r["step"], r["val_loss"]) for r in records if r["kind"] == "valid" and "val_loss" in r],
                "train": [(r["step"], r["loss"]) for r in records if r["kind"] == "train"]}
    valid, train_loss = {}, {}
    text = log.read_text(encoding="utf-8") if log.is_file() else ""
    for line in text.splitlines():
        if m := VAL_LINE.match(line.strip()):
            valid[int(m[1])] = float(m[2])
        elif m := LOSS_LINE.match(line.strip()):
            train_loss[int(m[1])] = float(m[2])
    return {"source": "the lines 'step N/M: validation loss X' and 'step N/M: loss X, ...' that train "
            "writes on stderr with --no-progress (a run begun before train wrote metrics.jsonl)",
            "valid": sorted(valid.items()), "train": sorted(train_loss.items())}


def batch_stats(args, pairs: list) -> dict:
    """The trained run's model size, and its batches as the tool makes them (one epoch, measured)."""
    config, tokenizer = load_config_and_tokenizer(args.work / "model")
    encoded, skipped = encode_pairs(pairs, cast(BPETokenizer, tokenizer), config.max_len)   # as train does
    batches = list(bucket_loader(encoded, args.batch_tokens, args.seed).batch_sampler)
    target = [sum(len(encoded[i][1]) + 1 for i in batch) for batch in batches]    # with eos: what is scored
    return {"parameters": sum(p.numel() for p in Transformer(config).parameters()),
            "vocabulary": tokenizer.vocab_size, "skipped_pairs": skipped, "batches_per_epoch": len(batches),
            "target_tokens_per_batch": float(np.mean(target)), "epochs": args.steps / len(batches)}


def machine(args) -> dict:
    cpu = None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu": cpu or platform.processor() or platform.machine(), "cores": usable,
            "cpu_count": os.cpu_count(), "torch_threads": args.threads or torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "platform": platform.platform(), "python": platform.python_version(), "torch": torch.__version__}


def commit() -> tuple[str | None, bool | None]:
    """(the repository's commit, whether tracked files differ from it), or (None, None) outside git."""
    try:
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True)
        status = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                                text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None, None
    return head.stdout.strip(), bool(status.stdout.strip())


def run(args) -> dict:
    check_out(args)
    baseline = load_baseline(args.against)       # checked before anything is trained
    pairs = prepare_corpus(args)
    state = load_state(args)
    save_state(args, state)
    keep = tool_has(["train"], "--keep-checkpoints")
    missing = (None if keep and tool_has([], "average") else
               "this version of the tool has no " + ("'average' command" if keep else "train --keep-checkpoints"))
    if missing:
        print(f"averaging: skipped ({missing})", file=sys.stderr)
    train_command = train(args, state, keep)
    run_dir = args.work / "model"
    hyps = {"greedy": translate(args, state, "greedy", run_dir, 1),
            f"beam{BEAM}": translate(args, state, f"beam{BEAM}", run_dir, BEAM)}
    averaged, skipped = average(args, state, missing)
    if averaged is not None:
        hyps["averaged_greedy"] = translate(args, state, "averaged_greedy", averaged, 1)
    kept = state["average"]["checkpoints"] if averaged else []
    sources, references = [p[0] for p in pairs["test"]], [p[1] for p in pairs["test"]]
    n = len(references)
    picked = sorted({round(i * (n - 1) / (N_SAMPLES - 1)) for i in range(N_SAMPLES)})
    head, dirty = commit()
    options = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    result = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": head, "commit_dirty": dirty, "machine": machine(args),
        "options": {**options, "beam": BEAM, "translate_precision": "fp32", "train_command": train_command},
        "data": {"source": PUBLISHED, "pairs": {k: len(v) for k, v in pairs.items()},
                 "language_pair": "de-en", "test_set": "test_2016_flickr", **batch_stats(args, pairs["train"])},
        "time": {"train_seconds": sum(s["seconds"] for s in state["segments"]), "train_segments": state["segments"],
                 "train_cpu_seconds": train_cpu_seconds(state["segments"]),
                 "translate_seconds": {k: state["translations"][k]["seconds"] for k in hyps},
                 "average_seconds": state["average"]["seconds"] if averaged else None},
        "curve": loss_curve(run_dir, args.work / "train.log"),
        "averaging": {"skipped": skipped, "last": args.keep, "checkpoints": kept,
                      "steps": [int(re.sub(r"\D", "", name)) for name in kept]},
        "scores": scores(hyps, references, args.seed, baseline),
        "samples": [{"index": i, "source": sources[i], "reference": references[i],
                     **{k: v[i] for k, v in hyps.items()}} for i in picked],
        "outputs": {"references": references, "hypotheses": hyps},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(args.out, json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result


def train_cpu_seconds(segments: list[dict]) -> float | None:
    """The training's CPU seconds over its segments; None when a segment did not record them."""
    if any("cpu_seconds" not in segment for segment in segments):
        return None
    return float(sum(segment["cpu_seconds"] for segment in segments))


def parse_rescore_args(argv: list[str]) -> argparse.Namespace:
    p = OneLineParser(prog="multi30k.py rescore", description="Score a result file again from the hypotheses "
                      "it stores (no data, no model); the file is rewritten atomically.")
    p.add_argument("file", type=Path, help="a result file written by this recipe")
    p.add_argument("--against", type=Path, help="an earlier result file (with its hypotheses): the paired "
                   "test of each decoding against that run's")
    return p.parse_args(argv)


def rescore(path: Path, baseline_path: Path | None = None) -> dict:
    """Score the result file ``path`` again from its stored hypotheses (every metric of ``scores``), and
    rewrite it atomically; everything else in it is kept. A file without hypotheses is an error saying so."""
    try:
        result = read_json(path)
    except ShapeError as exc:
        raise RecipeError(f"{path}: cannot read it as a result file ({exc})") from None
    outputs = result.get("outputs") if isinstance(result, dict) else None
    if not isinstance(outputs, dict) or "hypotheses" not in outputs:
        samples = result.get("samples") if isinstance(result, dict) else None
        raise RecipeError(f"{path}: it holds no hypotheses, only "
                          f"{len(samples) if isinstance(samples, list) else 0} sample translations (it was "
                          "recorded before the recipe stored them), so it cannot be scored again")
    assert isinstance(result, dict)
    try:
        check_outputs(outputs)
        field(field(result, "options", "", OBJECT), "seed", '"options"', INT)
    except ShapeError as exc:
        raise RecipeError(f"{path}: damaged ({exc}); it cannot be scored again") from None
    baseline = load_baseline(baseline_path)
    result["scores"] = scores(outputs["hypotheses"], outputs["references"], result["options"]["seed"],
                              baseline)
    result["rescored"] = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                          "commit": commit()[0]}
    atomic_write(path, json.dumps(result, indent=2, ensure_ascii=False) + "\n")
    return result


def report(result: dict, out: Path) -> None:
    """The scores, printed."""
    s = result["scores"]
    for name, score in s["systems"].items():
        print(f"{name:16} BLEU {score['bleu']:5.2f} [{score['bleu_low']:.2f}, {score['bleu_high']:.2f}]"
              f"  lowercased {score['bleu_lc']:5.2f}  chrF {score['chrf']:5.2f}")
    if s["averaged_minus_last"]:
        d = s["averaged_minus_last"]
        print(f"averaged - last  BLEU {d['bleu']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]")
    for name, d in (s.get("against") or {}).get("systems", {}).items():
        print(f"{name} - {s['against']['file']}  BLEU {d['bleu']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]")
    print(f"{s['bleu_signature']}\nwritten: {out}", flush=True)


def where_to_go_on(args: argparse.Namespace | None, rescored: Path | None) -> str:
    """What the last line after an interruption says: how to go on, as the files say."""
    if rescored is not None:
        return f"{rescored} was left as it was; the same command scores it again"
    if args is None:
        return "nothing was done: the same command starts the run"
    run_dir = args.work / "model"
    try:
        step = steps_done(run_dir)
    except Exception:                      # an unreadable file: the tool says so on --resume
        step = 0
    if step == 0:
        return "nothing trained yet: the same command starts the run"
    return f"the same command continues from the run's last checkpoint (step {step} in {run_dir})"


def _raise_interrupted(signum: int, frame) -> None:
    raise Interrupted(signum)


def main(argv=None) -> int:
    """Exit status: 0; 1 after an error (one line); 2 for a bad option; 130 after Ctrl-C (SIGINT), 143
    after SIGTERM, 129 after SIGHUP, the run saved (a training under way is stopped by the tool, which
    saves its checkpoint), with one line saying how to go on."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, rescored = None, None
    previous = on_signals(_raise_interrupted, [sig for sig in SIGNALS if sig != signal.SIGINT])
    try:
        if argv[:1] == ["rescore"]:
            rescore_args = parse_rescore_args(argv[1:])
            rescored = rescore_args.file
            report(rescore(rescore_args.file, rescore_args.against), rescore_args.file)
            return 0
        args = parse_args(argv)
        report(run(args), args.out)
        return 0
    except KeyboardInterrupt as exc:
        name, status = SIGNALS.get(getattr(exc, "signum", signal.SIGINT), SIGNALS[signal.SIGINT])
        exec("pass")         # a KeyboardInterrupt met in code run by exec would make CPython's exit a SIGINT
        print(f"multi30k.py: interrupted by {name}; {where_to_go_on(args, rescored)}", file=sys.stderr)
        return status
    except (RecipeError, ValueError, OSError) as exc:
        print(f"multi30k.py: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 1
    finally:
        restore(previous)


if __name__ == "__main__":
    sys.exit(main())
