"""Tests of the command-line tool (transformer_lib.cli.main, python -m transformer_lib): an end-to-end run of
train and translate on a tiny generated corpus, resuming from a checkpoint, Ctrl-C and SIGTERM, the
one-line promise over every error path (one line on stderr, exit status 2 for usage errors and 1 for the
others, never a traceback), the run's report on stderr, and the same command under torchrun with two gloo
processes on the CPU (DDP)."""
import io
import json
import os
import pickle
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from child_signals import default_signals
from tiny_marian import save_tiny_marian, tiny_marian_tokenizer

from transformer_lib.cli.main import build_parser, main
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.training.metrics_log import METRICS_FILE
from transformer_lib.translation.corpus import generate_pairs, split_pairs, write_tsv
from transformer_lib.translation.model_dir import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    GENERATION_FILE,
    TOKENIZER_FILE,
    TRAINING_FILE,
    WEIGHTS_FILE,
    load_generation_config,
    load_model_dir,
    save_generation_config,
)
from transformer_lib.translation.translate import translate_lines

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--vocab-size", "300", "--d-model", "32", "--n-heads", "2", "--layers", "1", "--d-ff", "64",
        "--batch-tokens", "300", "--warmup", "4", "--device", "cpu", "--no-progress", "--max-len", "64",
        "--threads", "1"]

# the model options in TINY (--resume takes them from config.json)
MODEL_OPTIONS = {"--vocab-size", "--d-model", "--n-heads", "--layers", "--d-ff", "--max-len"}

@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    train, valid, test = split_pairs(generate_pairs(240, seed=5), 20, 20)
    return {"train": write_tsv(train, d / "train.tsv"), "valid": write_tsv(valid, d / "valid.tsv"),
            "test": test, "dir": d}


def _train(corpus, out, steps, *extra):
    return main(["train", "--train", str(corpus["train"]), "--valid", str(corpus["valid"]), "--out", str(out),
                 "--steps", str(steps), "--checkpoint-every", "3", "--val-every", "3", *TINY, *extra])


@pytest.fixture(scope="module")
def trained(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "model"
    assert _train(corpus, out, 6) == 0
    return out


@pytest.fixture(scope="module")
def inputs(corpus):
    """A file of eight test sources and an empty line, for translate."""
    path = corpus["dir"] / "translate_input.txt"
    path.write_text("".join(p.src + "\n" for p in corpus["test"][:8]) + "\n", encoding="utf-8")
    return path


def translate_out(capsys, *argv):
    """The lines ``translate ARGV --threads 1`` writes (it must succeed)."""
    capsys.readouterr()
    assert main(["translate", *map(str, argv), "--threads", "1"]) == 0
    return capsys.readouterr().out.split("\n")[:-1]


def _one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ---------------------------------------------------------------- train
def test_train_writes_a_model_directory(trained):
    for name in (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, CHECKPOINT_FILE, TRAINING_FILE, GENERATION_FILE):
        assert (trained / name).is_file(), name
    # the decoding defaults of a trained model: the paper's GNMT normalisation, alpha 0.6
    stored = load_generation_config(trained)
    assert (stored.length_norm, stored.alpha, stored.stop) == ("gnmt", 0.6, "book") and stored == GenerationConfig()
    config = json.loads((trained / CONFIG_FILE).read_text())
    assert (config["d_model"], config["n_heads"], config["n_encoder_layers"], config["d_ff"]) == (32, 2, 1, 64)
    model, tokenizer = load_model_dir(trained, "cpu")
    assert not model.training and tokenizer.vocab_size == config["src_vocab_size"]
    # the saved weights are the checkpoint's final weights (tied embeddings stored once, restored tied)
    state = torch.load(trained / CHECKPOINT_FILE, weights_only=True)
    assert state["step"] == 6
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state["model"][name]), name
    assert model.output.weight.data_ptr() == model.tgt_embed.weight.data_ptr()


def test_resume_reaches_the_same_weights_as_one_run(corpus, trained, tmp_path, capsys):
    out = tmp_path / "resumed"
    assert _train(corpus, out, 3) == 0
    assert torch.load(out / CHECKPOINT_FILE, weights_only=True)["step"] == 3
    assert _train(corpus, out, 6, "--resume") == 0
    assert "step 6/6" in capsys.readouterr().err
    a, _ = load_model_dir(out, "cpu")
    b, _ = load_model_dir(trained, "cpu")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_accum_steps_trains_and_resumes_exactly(corpus, tmp_path, capsys):
    """--accum-steps 2: an update sums the gradients of two batches (chapter 10's train(accum_steps=2)); its
    resumed run reaches the same weights as one run, and the option is recorded."""
    one, two = tmp_path / "one", tmp_path / "two"
    assert _train(corpus, one, 4, "--accum-steps", "2") == 0
    assert json.loads((one / TRAINING_FILE).read_text())["args"]["accum_steps"] == 2
    assert _train(corpus, two, 2, "--accum-steps", "2") == 0
    assert _train(corpus, two, 4, "--accum-steps", "2", "--resume") == 0
    assert "step 4/4" in capsys.readouterr().err
    a, _ = load_model_dir(one, "cpu")
    b, _ = load_model_dir(two, "cpu")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_train_with_aligned_files_and_epochs(corpus, tmp_path):
    pairs = [line.split("\t") for line in corpus["train"].read_text(encoding="utf-8").splitlines()]
    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    out = tmp_path / "aligned"
    assert main(["train", "--train", str(src), str(tgt), "--out", str(out), "--epochs", "0.5", *TINY]) == 0
    info = json.loads((out / TRAINING_FILE).read_text())
    assert 1 <= info["steps"] and info["val_loss"] is None


@pytest.mark.parametrize("argv, needle", [
    (["train", "--out", "x"], "--train"),
    (["train", "--train", "a.tsv", "--out", "x", "--steps", "ten"], "--steps"),
    (["train", "--train", "a.tsv", "--out", "x", "--steps", "5", "--epochs", "1"], "not allowed with"),
    (["train", "--train", "a.tsv", "--out", "x", "--dropout", "1.5"], "--dropout"),
    (["train", "--train", "a.tsv", "--out", "x", "--precision", "fp8"], "--precision"),
    (["translate"], "--model"),
    (["translate", "--model", "m", "--beam", "0"], "--beam"),
    (["translate", "--model", "m", "--beam", "4", "--sample"], "not allowed with"),
    (["fly"], "invalid choice"),
    ([], "{train,translate,average,convert-marian,export-ctranslate2}"),
])
def test_bad_options_give_one_line(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    _one_line_error(capsys, needle, "(see --help)")


def _help(command, capsys):
    """The --help text of a command, as a user sees it (exit status 0)."""
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def _help_entries(text):
    """option or argument -> its help, read from argparse's --help text: an entry starts two spaces in,
    its help follows on the same line (after two or more spaces) or on the more indented lines below."""
    entries, current = {}, None
    for line in text.splitlines():
        match = re.match(r"  (\S.*?)(?:\s{2,}(\S.*))?$", line)
        if match:
            invocation, first = match.groups()
            current = [first or ""]
            for name in re.findall(r"--?[\w-]+", invocation) or [invocation]:
                entries[name] = current
        elif current is not None and line.startswith("   ") and line.strip():
            current.append(line.strip())
        else:
            current = None
    return {name: " ".join(parts).strip() for name, parts in entries.items()}


def test_help_explains_every_option(capsys):
    for command in ("train", "translate", "convert-marian"):
        text = _help(command, capsys)
        usage = text.split("\n\n")[0]
        entries = _help_entries(text.split("\n\n", 1)[1])
        assert set(re.findall(r"--[\w-]+", usage)) <= entries.keys(), (command, usage)
        for name, explained in entries.items():
            assert explained, f"{command} {name} has no help"


def test_help_shows_the_decoders_defaults_of_generation_config(capsys):
    """translate's decoding options have no argparse default (so that an unused one can be refused); --help
    shows GenerationConfig's defaults, which apply when a model directory has no generation.json."""
    entries = _help_entries(_help("translate", capsys))
    defaults = GenerationConfig()
    for name in ("temperature", "top_k", "top_p", "seed"):
        option = "--" + name.replace("_", "-")
        assert f"(default: {getattr(defaults, name)})" in entries[option], entries[option]
    for name in ("length_norm", "alpha", "stop", "max_len_a", "max_len_b"):
        option = "--" + name.replace("_", "-")
        assert f"generation.json, else {getattr(defaults, name)}" in entries[option], entries[option]
    assert "--length-norm power" in entries["--engine"] and "--stop first_k" in entries["--engine"]
    args = build_parser().parse_args(["translate", "--model", "m"])
    names = ("beam_size", "length_norm", "alpha", "stop", "max_len_a", "max_len_b", "temperature", "top_k",
             "top_p", "seed")
    assert [getattr(args, name) for name in names] == [None] * len(names)
    # the older names of two options still parse, into the new ones
    old = build_parser().parse_args(["translate", "--model", "m", "--beam", "3", "--length-penalty", "1.5"])
    assert (old.beam_size, old.alpha) == (3, 1.5)


# ---------------------------------------------------------------- translate
def test_translate_stdin_keeps_one_line_per_input(trained, corpus, monkeypatch, capsys):
    sources = [p.src for p in corpus["test"][:7]]
    lines = sources[:3] + [""] + sources[3:]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines) + "\n"))
    assert main(["translate", "--model", str(trained), "--device", "cpu", "--batch-size", "3"]) == 0
    out = capsys.readouterr().out.split("\n")
    assert out[-1] == "" and len(out) - 1 == len(lines)
    assert out[3] == ""
    model, tokenizer = load_model_dir(trained, "cpu")
    assert out[:-1] == translate_lines(model, tokenizer, lines, batch_size=64)    # batching changes nothing


@pytest.mark.parametrize("how", [["--beam", "3"], ["--sample", "--top-k", "5", "--seed", "1"], []])
def test_translate_files_to_output(trained, corpus, tmp_path, how):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("".join(p.src + "\n" for p in corpus["test"][:4]), encoding="utf-8")
    b.write_text(corpus["test"][4].src + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert main(["translate", str(a), str(b), "--model", str(trained), "--output", str(out),
                 "--device", "cpu", *how]) == 0
    assert len(out.read_text(encoding="utf-8").splitlines()) == 5


def test_translate_uses_the_model_directorys_defaults_unless_told_otherwise(trained, corpus, tmp_path, capsys):
    """generation.json sets translate's decoding; an option given replaces its field; the output equals
    translate_lines with the same GenerationConfig."""
    d = _copy_model(trained, tmp_path / "m")
    stored = GenerationConfig(strategy="beam", beam_size=3, length_norm="power", alpha=1.0, stop="first_k",
                              max_len_a=1.0, max_len_b=5)
    save_generation_config(d, stored)
    sources = [p.src for p in corpus["test"][:6]]
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    model, tokenizer = load_model_dir(d, "cpu")
    cases = {(): stored, ("--alpha", "0.2", "--stop", "book"): stored.replace(alpha=0.2, stop="book"),
             ("--beam-size", "1"): stored.replace(strategy="greedy"),
             ("--max-len", "4"): stored.replace(max_len_a=0.0, max_len_b=4),
             ("--length-norm", "none", "--max-len-a", "2", "--max-len-b", "10"):
                 stored.replace(length_norm="none", max_len_a=2.0, max_len_b=10),
             ("--sample", "--seed", "3"): stored.replace(strategy="sample", seed=3)}
    for options, config in cases.items():
        capsys.readouterr()
        assert main(["translate", str(tmp_path / "in.txt"), "--model", str(d), "--device", "cpu", *options]) == 0
        assert capsys.readouterr().out.splitlines() == translate_lines(model, tokenizer, sources, config), options
    # an option the stored strategy ignores is refused, naming how to use it
    _status(["translate", str(tmp_path / "in.txt"), "--model", str(d), "--beam-size", "1", "--alpha", "1"])
    assert "--alpha/--length-penalty: only with beam search" in capsys.readouterr().err


@pytest.mark.parametrize("text, needle", [("{oops", "damaged"), ('{"stop": "never"}', "stop must be one of"),
                                          ('{"beam": 4}', "beam: not a GenerationConfig field")])
def test_a_damaged_generation_file_is_one_line(trained, tmp_path, capsys, text, needle):
    d = _copy_model(trained, tmp_path / "m")
    (d / GENERATION_FILE).write_text(text, encoding="utf-8")
    (tmp_path / "in.txt").write_text("drei\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "in.txt"), "--model", str(d), "--device", "cpu"]) == 1
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and GENERATION_FILE in err and needle in err, err


# ---------------------------------------------------------------- the one-line promise, over every error path
def _status(argv):
    """main's exit status; argparse's errors leave by SystemExit."""
    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def _copy_model(trained, d):
    d.mkdir()
    for f in trained.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    return d


class _Evil:
    """A pickle that would run a command when loaded: a malicious checkpoint."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _damaged_checkpoint(how):
    def make(c):
        d = _copy_model(c["trained"], c["tmp"] / "run")
        file = d / CHECKPOINT_FILE
        if how == "empty":
            file.write_bytes(b"")
        elif how == "truncated":
            file.write_bytes(file.read_bytes()[:1000])
        elif how == "foreign":
            torch.save({"weights": torch.zeros(3)}, file)
        elif how == "text":
            file.write_text("not a checkpoint\n")
        elif how == "malicious":
            file.write_bytes(pickle.dumps(_Evil(c["tmp"] / "pwned"), protocol=2))
        elif how == "directory":
            file.unlink()
            file.mkdir()
        return _resume_argv(c, d)
    return make


def _resume_argv(c, d, *extra, train=None, model_options=True):
    tiny = list(TINY)
    for option in MODEL_OPTIONS if not model_options else ():
        i = tiny.index(option)
        del tiny[i:i + 2]
    return ["train", "--train", str(train or c["corpus"]["train"]), "--valid", str(c["corpus"]["valid"]),
            "--out", str(d), "--steps", "8", "--resume", "--checkpoint-every", "3", "--val-every", "3",
            *tiny, *extra]


def _new_argv(c, out, *extra, train=None, valid=None):
    argv = ["train", "--train", str(train or c["corpus"]["train"]), "--out", str(out), "--steps", "4", *TINY]
    if valid:
        argv[3:3] = ["--valid", str(valid)]
    return [*argv, *extra]


def _edited_config(model_options):
    def make(c):
        d = _copy_model(c["trained"], c["tmp"] / "run")
        config = json.loads((d / CONFIG_FILE).read_text())
        config["n_heads"] = 4                               # same shapes, another model
        (d / CONFIG_FILE).write_text(json.dumps(config))
        return _resume_argv(c, d, model_options=model_options)
    return make


def _other_corpus(c):
    d = _copy_model(c["trained"], c["tmp"] / "run")
    pairs = [line.split("\t") for line in c["corpus"]["train"].read_text(encoding="utf-8").splitlines()]
    pairs[0][1] = pairs[0][1] + " again"                     # one target changed
    other = c["tmp"] / "other.tsv"
    other.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    return _resume_argv(c, d, train=other)


def _no_record_other_batches(c):
    d = _copy_model(c["trained"], c["tmp"] / "run")
    (d / TRAINING_FILE).unlink()                            # chapter 10's own check remains
    return _resume_argv(c, d, "--batch-tokens", "900")


def _file(c, name, data):
    path = c["tmp"] / name
    path.write_bytes(data)
    return path


def _long_valid(c):
    valid = _file(c, "long.tsv", ("eins zwei drei " * 30 + "\tone two three\n").encode())
    return _new_argv(c, c["tmp"] / "m", valid=valid)


def _not_empty(c):
    (c["tmp"] / "notes").mkdir()
    (c["tmp"] / "notes" / "todo.txt").write_text("x")
    return _new_argv(c, c["tmp"] / "notes")


def _damaged_dir(c, what):
    d = _copy_model(c["trained"], c["tmp"] / "damaged")
    if what == "config":
        (d / CONFIG_FILE).write_text("{oops")
    else:
        (d / WEIGHTS_FILE).unlink()
    return d


def _damaged_record(c):
    d = _copy_model(c["trained"], c["tmp"] / "run")
    (d / TRAINING_FILE).write_text("{oops")
    return _resume_argv(c, d)


def _translate(c, *extra, model=None):
    return ["translate", "--model", str(model or c["trained"]), "--device", "cpu", *extra]


ERRORS = [  # (id, argv maker, exit status, needles on the one line)
    ("bad-tsv", lambda c: _new_argv(c, c["tmp"] / "m", train=_file(c, "bad.tsv", b"eins\tone\nzwei two\n")),
     1, ["bad.tsv:2:", "source<TAB>target"]),
    ("missing-corpus", lambda c: _new_argv(c, c["tmp"] / "m", train=c["tmp"] / "nope.tsv"), 1,
     ["nope.tsv: no such file"]),
    ("three-corpus-files", lambda c: ["train", "--train", "a", "b", "c", "--out", str(c["tmp"] / "m")], 1,
     ["--train and --valid take one TSV file or two"]),
    ("heads-do-not-divide", lambda c: _new_argv(c, c["tmp"] / "m", "--n-heads", "5"), 1, ["divisible"]),
    ("vocab-below-minimum", lambda c: _new_argv(c, c["tmp"] / "m", "--vocab-size", "100"), 2,
     ["--vocab-size", "260"]),
    ("no-pair-fits-max-len", lambda c: _new_argv(c, c["tmp"] / "m", "--max-len", "2"), 1,
     ["--train: none of the", "--max-len 2"]),
    ("valid-all-too-long", _long_valid, 1, ["--valid: none of the 1 pairs", "--max-len 64"]),
    ("out-is-a-file", lambda c: _new_argv(c, _file(c, "f", b"x")), 1, ["--out", "a file, not a directory"]),
    ("out-under-a-file", lambda c: _new_argv(c, _file(c, "f", b"x") / "m"), 1, ["--out", "f/m",
                                                                               "cannot write there"]),
    ("out-not-empty", _not_empty, 1, ["--out", "notes", "not empty", "--force"]),
    ("out-holds-a-model", lambda c: _new_argv(c, c["trained"]), 1, ["already holds a model", "--resume"]),
    ("nothing-to-resume", lambda c: _resume_argv(c, c["tmp"] / "empty"), 1, ["nothing to resume"]),
    ("checkpoint-empty", _damaged_checkpoint("empty"), 1, [CHECKPOINT_FILE, "empty"]),
    ("checkpoint-truncated", _damaged_checkpoint("truncated"), 1, [CHECKPOINT_FILE, "not a complete"]),
    ("checkpoint-foreign", _damaged_checkpoint("foreign"), 1, [CHECKPOINT_FILE, "not a checkpoint"]),
    ("checkpoint-text", _damaged_checkpoint("text"), 1, [CHECKPOINT_FILE]),
    ("checkpoint-malicious", _damaged_checkpoint("malicious"), 1, [CHECKPOINT_FILE]),
    ("checkpoint-directory", _damaged_checkpoint("directory"), 1, [CHECKPOINT_FILE, "directory"]),
    ("config-edited", _edited_config(False), 1, [CHECKPOINT_FILE, "n_heads"]),
    ("config-edited-options-given", _edited_config(True), 2, ["--n-heads 2", "has 4", CONFIG_FILE]),
    ("resume-other-batch-tokens",
     lambda c: _resume_argv(c, _copy_model(c["trained"], c["tmp"] / "run"), "--batch-tokens", "400"), 1,
     [CHECKPOINT_FILE, "--batch-tokens 300", "400"]),
    ("resume-other-accum-steps",
     lambda c: _resume_argv(c, _copy_model(c["trained"], c["tmp"] / "run"), "--accum-steps", "2"), 1,
     [CHECKPOINT_FILE, "--accum-steps 1", "2"]),
    ("resume-other-seed", lambda c: _resume_argv(c, _copy_model(c["trained"], c["tmp"] / "run"), "--seed", "9"),
     1, [CHECKPOINT_FILE, "--seed 0"]),
    ("resume-other-corpus", _other_corpus, 1, [CHECKPOINT_FILE, "--train of digest"]),
    ("resume-other-batches-no-record", _no_record_other_batches, 1, [CHECKPOINT_FILE, "--batch-tokens"]),
    ("resume-other-max-len",
     lambda c: _resume_argv(c, _copy_model(c["trained"], c["tmp"] / "run"), "--max-len", "32"), 2,
     ["--max-len 32", "64", "drop the option"]),
    ("resume-damaged-record", _damaged_record, 1, [TRAINING_FILE, "damaged"]),
    ("translate-no-model", lambda c: _translate(c, model=c["tmp"] / "none"), 1, ["no such model directory"]),
    ("translate-damaged-config", lambda c: _translate(c, model=_damaged_dir(c, "config")), 1,
     ["config.json: damaged"]),
    ("translate-no-weights", lambda c: _translate(c, model=_damaged_dir(c, "weights")), 1,
     ["no model.safetensors"]),
    ("translate-no-input", lambda c: _translate(c, str(c["tmp"] / "in.txt")), 1, ["in.txt: no such input file"]),
    ("translate-bad-device", lambda c: ["translate", "--model", str(c["trained"]), "--device", "tpu"], 1,
     ["--device"]),
    ("top-p-without-sample", lambda c: _translate(c, "--top-p", "0.9"), 2, ["--top-p", "--sample"]),
    ("top-k-without-sample", lambda c: _translate(c, "--top-k", "5"), 2, ["--top-k", "--sample"]),
    ("temperature-without-sample", lambda c: _translate(c, "--beam", "2", "--temperature", "0.5"), 2,
     ["--temperature", "--sample"]),
    ("seed-without-sample", lambda c: _translate(c, "--seed", "3"), 2, ["--seed", "--sample"]),
    ("length-penalty-greedy", lambda c: _translate(c, "--length-penalty", "1.0"), 2,
     ["--length-penalty", "--beam"]),
    ("top-p-above-one", lambda c: _translate(c, "--sample", "--top-p", "1.5"), 2, ["--top-p"]),
    ("negative-top-k", lambda c: _translate(c, "--sample", "--top-k", "-1"), 2, ["--top-k"]),
    ("max-len-beyond-model", lambda c: _translate(c, "--max-len", "500"), 2, ["--max-len 500", "64"]),
    ("line-too-long", lambda c: _translate(c, str(_file(c, "in.txt", ("drei\n" + "sieben " * 80 + "\n").encode()))),
     1, ["in.txt:2:", "max_len 64", "--truncate"]),
    ("input-not-utf8", lambda c: _translate(c, str(_file(c, "in.txt", "drei\nGrüße\n".encode("latin-1")))), 1,
     ["in.txt:2: not valid UTF-8", "0xfc"]),
    ("stdin-not-utf8", lambda c: _translate(c, "-"), 1, ["<stdin>:2: not valid UTF-8", "0xfc"]),
    ("output-is-a-directory", lambda c: _translate(c, str(_file(c, "in.txt", b"drei\n")), "--output",
                                                   str(c["tmp"])), 1, ["--output", "cannot write"]),
]


@pytest.mark.parametrize("make, status, needles", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_every_error_is_one_line(make, status, needles, corpus, trained, tmp_path, capsys, monkeypatch):
    """Every error path: the exit status (2: usage, 1: other), exactly one line on stderr naming what is
    wrong, no traceback, nothing on stdout."""
    argv = make({"corpus": corpus, "trained": trained, "tmp": tmp_path})
    stdin = io.TextIOWrapper(io.BytesIO("drei\nGrüße\n".encode("latin-1")), encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", stdin)
    assert _status(argv) == status
    captured = capsys.readouterr()
    err = captured.err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert "Traceback" not in err and ": error: " in err, err
    for needle in needles:
        assert needle in err, err
    assert captured.out == ""
    assert not (tmp_path / "pwned").exists()                # the malicious pickle did not run


def test_resume_checks_happen_before_training(corpus, trained, tmp_path):
    """A refused --resume leaves the run as it was: the checkpoint is not touched."""
    d = _copy_model(trained, tmp_path / "run")
    before = (d / CHECKPOINT_FILE).read_bytes()
    c = {"corpus": corpus, "trained": trained, "tmp": tmp_path}
    assert _status(_resume_argv(c, d, "--batch-tokens", "400")) == 1
    assert (d / CHECKPOINT_FILE).read_bytes() == before


# ---------------------------------------------------------------- interrupted and failed runs
def _start_process(corpus, out, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "transformer_lib", "train", "--train", str(corpus["train"]), "--valid",
           str(corpus["valid"]), "--out", str(out), "--checkpoint-every", "3", "--val-every", "3", *TINY, *extra]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            preexec_fn=default_signals)


@pytest.mark.slow
@pytest.mark.parametrize("sig, status, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
def test_interrupt_saves_and_resume_continues_exactly(sig, status, name, corpus, trained, tmp_path, capsys):
    """Ctrl-C or SIGTERM after the first update: one line saying where the run is and how to continue, the
    signal's exit status, no traceback; --resume then reaches the weights of an uninterrupted run."""
    out = tmp_path / "run"
    proc = _start_process(corpus, out, "--steps", "100000")
    first = []
    for line in proc.stderr:
        first.append(line)
        if line.startswith("step 1/"):
            break
    proc.send_signal(sig)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == status, "".join(first) + rest
    assert "Traceback" not in rest
    lines = rest.strip().splitlines()
    assert len(lines) >= 1 and all(line.startswith("step ") for line in lines[:-1]), rest
    assert f"interrupted by {name}" in lines[-1] and str(out / CHECKPOINT_FILE) in lines[-1]
    assert "--resume" in lines[-1]
    saved = torch.load(out / CHECKPOINT_FILE, weights_only=True)["step"]
    assert f"after step {saved};" in lines[-1]
    assert 1 <= saved
    total = max(6, saved + 2)
    assert _train(corpus, out, total, "--resume") == 0
    assert f"step {total}/{total}" in capsys.readouterr().err
    reference = tmp_path / "reference"
    if total == 6:
        reference = trained
    else:
        assert _train(corpus, reference, total) == 0
    a, _ = load_model_dir(out, "cpu")
    b, _ = load_model_dir(reference, "cpu")
    for (key, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), key


def test_non_finite_loss_leaves_a_resumable_run(corpus, tmp_path, capsys):
    """A loss that blows up: one error line naming the checkpoint that still holds finite weights, and a
    --resume with a smaller rate continues from it."""
    out = tmp_path / "run"
    assert _train(corpus, out, 30, "--lr-factor", "1e6") == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if ": error: " in line]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err
    assert "non-finite" in errors[0] and str(out / CHECKPOINT_FILE) in errors[0] and "--resume" in errors[0]
    state = torch.load(out / CHECKPOINT_FILE, weights_only=True)
    assert all(torch.isfinite(t).all() for t in state["model"].values())
    total = state["step"] + 3                                # (steps no more than it made would train nothing)
    assert _train(corpus, out, total, "--resume", "--lr-factor", "1") == 0
    assert f"step {total}/{total}" in capsys.readouterr().err


def test_out_left_by_a_start_before_the_first_checkpoint_can_start_again(corpus, trained, tmp_path):
    """A run stopped while training its tokenizer leaves config.json and tokenizer.json only: running the
    command again starts over, no --resume or --force needed."""
    out = tmp_path / "run"
    out.mkdir()
    for name in (CONFIG_FILE, TOKENIZER_FILE):
        (out / name).write_bytes((trained / name).read_bytes())
    assert _train(corpus, out, 2) == 0


def test_force_starts_over(corpus, trained, tmp_path):
    out = _copy_model(trained, tmp_path / "run")
    assert _train(corpus, out, 2, "--force") == 0
    assert torch.load(out / CHECKPOINT_FILE, weights_only=True)["step"] == 2


# ---------------------------------------------------------------- what a newcomer sees: the run's report
def test_no_progress_logs_periodic_lines_on_stderr(corpus, tmp_path, capsys):
    """--no-progress: the header, the loss from the first update and every tenth of the run, the validation
    losses and the last line, all on stderr; stdout stays empty."""
    assert _train(corpus, tmp_path / "run", 20, "--val-every", "10") == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert "training pairs" in lines[0] and "20 steps (warm-up 4)" in lines[0]
    steps = [int(line.split("/")[0].split()[1]) for line in lines if " loss " in line and "lr" in line]
    assert steps == [1, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20]
    assert sum("validation loss" in line for line in lines) == 2
    assert lines[-1].startswith("step 20/20, train loss")


def test_progress_bar_shows_the_loss_from_the_first_step(corpus, tmp_path, capsys):
    argv = [a for a in TINY if a != "--no-progress"]
    assert main(["train", "--train", str(corpus["train"]), "--out", str(tmp_path / "run"), "--steps", "5",
                 *argv]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "loss=" in captured.err


def test_default_warmup_follows_the_steps_and_resume_keeps_it(corpus, tmp_path, capsys):
    argv = [a for a in TINY]
    i = argv.index("--warmup")
    del argv[i:i + 2]
    out = tmp_path / "run"
    base = ["train", "--train", str(corpus["train"]), "--out", str(out), *argv]
    assert main([*base, "--steps", "8"]) == 0
    assert "(warm-up 2)" in capsys.readouterr().err                      # min(4000, 8 // 4)
    assert json.loads((out / TRAINING_FILE).read_text())["args"]["warmup"] == 2
    assert main([*base, "--steps", "40", "--resume"]) == 0                # 40 // 4 would be 10
    assert "(warm-up 2)" in capsys.readouterr().err
    assert "min(4000, steps // 4)" in " ".join(_help("train", capsys).split())


def test_translate_truncate_warns_and_translates(trained, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("drei\n" + "sieben " * 80 + "\n", encoding="utf-8")
    assert main(["translate", str(src), "--model", str(trained), "--device", "cpu", "--truncate"]) == 0, \
        capsys.readouterr().err
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    assert captured.err.count("\n") == 1 and f"{src}:2:" in captured.err and "warning" in captured.err


def test_translate_tokenises_each_line_once(trained, corpus, tmp_path, monkeypatch, capsys):
    """The too-long check rides on translate_lines' on_too_long hook: one encode per input line."""
    from transformer_lib.translation.tokenizer import BPETokenizer
    calls = []
    encode = BPETokenizer.encode

    def counted(self, text, *args, **kwargs):
        calls.append(text)
        return encode(self, text, *args, **kwargs)

    monkeypatch.setattr(BPETokenizer, "encode", counted)
    src = tmp_path / "in.txt"
    src.write_text("".join(p.src + "\n" for p in corpus["test"][:5]), encoding="utf-8")
    assert main(["translate", str(src), "--model", str(trained), "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5 and len(calls) == 5


def test_translate_stdin_bytes_and_crlf(trained, corpus, monkeypatch, capsys):
    """Standard input is read as bytes and decoded as UTF-8, whatever the locale; CRLF lines are lines."""
    sources = [p.src for p in corpus["test"][:3]]
    data = "".join(s + "\r\n" for s in sources).encode("utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="ascii"))
    assert main(["translate", "--model", str(trained), "--device", "cpu"]) == 0
    model, tokenizer = load_model_dir(trained, "cpu")
    assert capsys.readouterr().out.splitlines() == translate_lines(model, tokenizer, sources)


# ---------------------------------------------------------------- the real entry point
@pytest.mark.slow
def test_python_dash_m(trained, corpus):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "transformer_lib", "translate", "--model", str(trained),
                          "--device", "cpu", "--beam", "2"], input=corpus["test"][0].src + "\n",
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert len(run.stdout.splitlines()) == 1
    bad = subprocess.run([sys.executable, "-m", "transformer_lib", "translate", "--model", "/nonexistent"],
                         capture_output=True, text=True, env=env, timeout=120)
    assert bad.returncode == 1
    assert bad.stderr.strip() == "python -m transformer_lib translate: error: /nonexistent: no such model directory"


# ---------------------------------------------------------------- several processes: torchrun, gloo on the CPU
def _torchrun(corpus, out, *args):
    """``torchrun --standalone --nproc_per_node 2 -m transformer_lib train ...`` with two CPU processes."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           "-m", "transformer_lib", "train", "--train", str(corpus["train"]), "--valid", str(corpus["valid"]),
           "--out", str(out), "--checkpoint-every", "4", "--val-every", "4", "--seed", "3", *TINY, *args]
    run = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


@pytest.fixture(scope="module")
def ddp_run(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp") / "model"
    # no dropout: chapter 10's checkpoint holds rank 0's random state only, so with dropout the other
    # ranks' masks after a resume differ from an uninterrupted run's (see test_torchrun_resume_is_exact)
    return out, _torchrun(corpus, out, "--epochs", "2", "--dropout", "0")


@pytest.mark.slow
def test_torchrun_writes_one_model_directory_that_translate_loads(corpus, ddp_run, monkeypatch, capsys):
    out, run = ddp_run
    assert sorted(f.name for f in out.iterdir()) == sorted([CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE,
                                                            CHECKPOINT_FILE, TRAINING_FILE, GENERATION_FILE,
                                                            METRICS_FILE])
    assert run.stderr.count("training pairs") == 1                  # only rank 0 speaks ...
    assert "2 processes on cpu" in run.stderr
    info = json.loads((out / TRAINING_FILE).read_text())
    assert info["world_size"] == 2
    state = torch.load(out / CHECKPOINT_FILE, weights_only=True)
    assert state["step"] == info["steps"]
    model, tokenizer = load_model_dir(out, "cpu")                   # ... and writes the final weights
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state["model"][name]), name
    sources = [p.src for p in corpus["test"][:5]]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(s + "\n" for s in sources)))
    assert main(["translate", "--model", str(out), "--device", "cpu", "--beam", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == translate_lines(model, tokenizer, sources, strategy="beam",
                                                                                 beam_size=2)


@pytest.mark.slow
def test_torchrun_ranks_read_their_share_of_the_batches(corpus, ddp_run):
    from transformer_lib.training.batching import PairDataset, TokenBucketSampler
    from transformer_lib.translation.corpus import read_tsv
    from transformer_lib.translation.model_dir import load_config_and_tokenizer
    from transformer_lib.translation.tokenizer import encode_pairs

    out, _ = ddp_run
    config, tokenizer = load_config_and_tokenizer(out)
    encoded, _ = encode_pairs(read_tsv(corpus["train"]), tokenizer, config.max_len)
    lengths = PairDataset(encoded).lengths
    alone = len(TokenBucketSampler(lengths, 300, seed=3, num_replicas=1, rank=0))
    each = [len(TokenBucketSampler(lengths, 300, seed=3, num_replicas=2, rank=r)) for r in (0, 1)]
    assert each[0] == each[1] == -(-alone // 2)                     # half the batches each, rounded up
    # --epochs 2 counts the batches of one process: two passes over its share
    assert json.loads((out / TRAINING_FILE).read_text())["steps"] == 2 * each[0]


@pytest.mark.slow
def test_torchrun_resume_is_exact(corpus, ddp_run, tmp_path):
    """Two processes stopped inside the first epoch and resumed reach the weights of the uninterrupted
    two-process run, bit for bit (the batches each rank reads, the optimizer, the schedule)."""
    out, _ = ddp_run
    steps = json.loads((out / TRAINING_FILE).read_text())["steps"]
    resumed = tmp_path / "resumed"
    _torchrun(corpus, resumed, "--steps", str(steps // 2 - 1), "--dropout", "0")
    assert torch.load(resumed / CHECKPOINT_FILE, weights_only=True)["step"] == steps // 2 - 1
    _torchrun(corpus, resumed, "--epochs", "2", "--resume")       # --resume keeps config.json's dropout
    a, _ = load_model_dir(resumed, "cpu")
    b, _ = load_model_dir(out, "cpu")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


# ---------------------------------------------------------------- convert-marian

def _marian_dir(path: Path) -> Path:
    """A tiny random Marian model and its tokenizer, as save_pretrained saves a downloaded opus-mt model."""
    pytest.importorskip("sentencepiece")
    pytest.importorskip("transformers")
    path.mkdir()
    n = tiny_marian_tokenizer(path / "tok")
    return save_tiny_marian(path / "opus-mt-tiny", path / "tok", n, logits_bias=True)


def test_convert_marian_writes_a_complete_model_directory(tmp_path, capsys):
    from transformers import MarianMTModel, MarianTokenizer

    import transformer_lib as tl
    src = _marian_dir(tmp_path / "hf")
    out = tmp_path / "converted"
    capsys.readouterr()                                   # save_pretrained's progress bars
    assert main(["convert-marian", str(src), "--out", str(out)]) == 0
    assert capsys.readouterr().err.strip() == f"wrote {out}"      # one line, no progress bars
    assert {p.name for p in out.iterdir()} == {CONFIG_FILE, WEIGHTS_FILE, "marian_tokenizer", "tokenizer_kind.json",
                                               GENERATION_FILE}
    # generate's defaults for this model (save_pretrained wrote none but its ids): greedy, the power form with
    # transformers' length_penalty 1.0, its early_stopping=False rule; no max_length: the book's 2·S + 10
    assert load_generation_config(out) == GenerationConfig(length_norm="power", alpha=1.0, stop="book")
    assert json.loads((out / "tokenizer_kind.json").read_text()) == {"kind": "marian", "path": "marian_tokenizer"}
    model, tok = tl.load_marian_dir(out, device="cpu")
    hf, hf_tok = MarianMTModel.from_pretrained(src).eval(), MarianTokenizer.from_pretrained(src)
    lines = ["der Hund beisst den Mann", "the man"]
    assert [tok.encode(t) for t in lines] == hf_tok(lines)["input_ids"]
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(tok.encode(t)) for t in lines], batch_first=True,
                                          padding_value=tok.pad_id)
    with torch.no_grad():
        theirs = hf.generate(input_ids=ids, attention_mask=(ids != tok.pad_id).long(), num_beams=1, do_sample=False,
                             max_new_tokens=12, forced_eos_token_id=None, suppress_tokens=[tok.pad_id])
    mine = tl.greedy_decode(model, ids, max_len=12)
    width = max(mine.size(1), theirs.size(1))
    pad = torch.nn.functional.pad
    assert torch.equal(pad(mine, (0, width - mine.size(1)), value=tok.pad_id),
                       pad(theirs, (0, width - theirs.size(1)), value=tok.pad_id))
    assert tok.decode_batch(mine) == hf_tok.batch_decode(theirs, skip_special_tokens=True)
    # chapter 12's translate_lines takes the adapter as it takes a BPETokenizer
    assert translate_lines(model, tok, ["the man"], max_len=12) == [tok.decode(mine[1])]
    # ... and the translate command reads the converted directory through load_model_dir
    loaded, loaded_tok = load_model_dir(out, "cpu")
    assert type(loaded_tok) is type(tok)
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "in.txt"), "--model", str(out), "--device", "cpu"]) == 0
    assert capsys.readouterr().out.splitlines() == translate_lines(model, tok, lines, load_generation_config(out))
    # a converted model is not a training run: nothing to resume, in one line
    assert main(["train", "--train", str(tmp_path / "in.txt"), "--out", str(out), "--resume", *TINY]) == 1
    _one_line_error(capsys, str(out))


@pytest.mark.parametrize("record, needle", [
    ("{not json", "damaged"),
    ('{"kind": "wordpiece", "path": "x"}', "not one of the kinds"),
    ('{"kind": "marian", "path": "missing"}', "missing"),
])
def test_a_bad_tokenizer_record_is_one_line(trained, tmp_path, record, needle, capsys):
    d = _copy_model(trained, tmp_path / "run")
    (d / "tokenizer_kind.json").write_text(record, encoding="utf-8")
    assert main(["translate", "--model", str(d), "--device", "cpu"]) == 1
    _one_line_error(capsys, needle)


def test_convert_marian_errors_are_one_line(tmp_path, capsys):
    src = _marian_dir(tmp_path / "hf")
    capsys.readouterr()                                   # save_pretrained's progress bars
    for argv, needle in (([str(tmp_path / "missing"), "--out", str(tmp_path / "a")], "no such Marian model"),
                         ([str(src), "--out", str(src)], "not an empty directory")):
        assert main(["convert-marian", *argv]) == 1
        _one_line_error(capsys, needle)
    with pytest.raises(SystemExit) as exc:
        main(["convert-marian", str(src)])
    assert exc.value.code == 2
    _one_line_error(capsys, "--out")
