"""Tests of the command-line tool (transformer_lib.cli, python -m transformer_lib): an end-to-end run of
train and translate on a tiny generated corpus, resuming from a checkpoint, the one-line errors, and the
same command under torchrun with two gloo processes on the CPU (DDP)."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from transformer_lib.cli import build_parser, main
from transformer_lib.corpus import generate_pairs, split_pairs, write_tsv
from transformer_lib.translate import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    TOKENIZER_FILE,
    TRAINING_FILE,
    WEIGHTS_FILE,
    load_model_dir,
    translate_lines,
)

ROOT = Path(__file__).resolve().parent.parent
TINY = ["--vocab-size", "300", "--d-model", "32", "--n-heads", "2", "--layers", "1", "--d-ff", "64",
        "--batch-tokens", "300", "--warmup", "4", "--device", "cpu", "--no-progress", "--max-len", "64",
        "--threads", "1"]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models run fastest on one thread (and --threads 1 in TINY sets it): restore it afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


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


def _one_line_error(capsys, *needles):
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


# ---------------------------------------------------------------- train
def test_train_writes_a_model_directory(trained):
    for name in (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE, CHECKPOINT_FILE, TRAINING_FILE):
        assert (trained / name).is_file(), name
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


def test_train_with_aligned_files_and_epochs(corpus, tmp_path):
    pairs = [line.split("\t") for line in corpus["train"].read_text(encoding="utf-8").splitlines()]
    src, tgt = tmp_path / "train.src", tmp_path / "train.tgt"
    src.write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    out = tmp_path / "aligned"
    assert main(["train", "--train", str(src), str(tgt), "--out", str(out), "--epochs", "0.5", *TINY]) == 0
    info = json.loads((out / TRAINING_FILE).read_text())
    assert 1 <= info["steps"] and info["val_loss"] is None


def test_train_errors_are_one_line(corpus, trained, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("eins\tone\nzwei two\n", encoding="utf-8")
    assert main(["train", "--train", str(bad), "--out", str(tmp_path / "m"), *TINY]) == 1
    _one_line_error(capsys, "bad.tsv:2:", "source<TAB>target")
    assert _train(corpus, trained, 6) == 1                         # the directory already holds a model
    _one_line_error(capsys, "already holds a model", "--resume")
    assert _train(corpus, tmp_path / "empty", 6, "--resume") == 1
    _one_line_error(capsys, "nothing to resume")
    assert main(["train", "--train", str(corpus["train"]), "--out", str(tmp_path / "m2"), *TINY,
                 "--n-heads", "5"]) == 1
    _one_line_error(capsys, "divisible")
    assert main(["train", "--train", str(tmp_path / "nope.tsv"), "--out", str(tmp_path / "m3"), *TINY]) == 1
    _one_line_error(capsys, "nope.tsv: no such file")


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
    ([], "{train,translate}"),
])
def test_bad_options_give_one_line(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    _one_line_error(capsys, needle, "(see --help)")


def test_help_explains_every_option(capsys):
    parser = build_parser()
    for command in ("train", "translate"):
        with pytest.raises(SystemExit) as exc:
            main([command, "--help"])
        assert exc.value.code == 0
        text = capsys.readouterr().out
        sub = parser._subparsers._group_actions[0].choices[command]
        for action in sub._actions:
            assert action.help, f"{command} {action.option_strings or action.dest} has no help"
            for opt in action.option_strings:
                assert opt in text


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


@pytest.mark.parametrize("damage, needle", [
    (lambda d: (d / CONFIG_FILE).write_text("{oops"), "config.json: damaged"),
    (lambda d: (d / WEIGHTS_FILE).unlink(), "no model.safetensors"),
])
def test_damaged_model_directory_gives_one_line(trained, tmp_path, damage, needle, capsys, monkeypatch):
    d = tmp_path / "m"
    d.mkdir()
    for name in (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE):
        (d / name).write_bytes((trained / name).read_bytes())
    damage(d)
    monkeypatch.setattr(sys, "stdin", io.StringIO("drei\n"))
    assert main(["translate", "--model", str(d), "--device", "cpu"]) == 1
    _one_line_error(capsys, needle)


def test_missing_model_input_and_device(trained, tmp_path, capsys):
    assert main(["translate", "--model", str(tmp_path / "none"), "--device", "cpu"]) == 1
    _one_line_error(capsys, "no such model directory")
    assert main(["translate", str(tmp_path / "in.txt"), "--model", str(trained), "--device", "cpu"]) == 1
    _one_line_error(capsys, "in.txt: no such input file")
    assert main(["translate", "--model", str(trained), "--device", "tpu"]) == 1
    _one_line_error(capsys, "--device")


# ---------------------------------------------------------------- the real entry point
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


def test_torchrun_writes_one_model_directory_that_translate_loads(corpus, ddp_run, monkeypatch, capsys):
    out, run = ddp_run
    assert sorted(f.name for f in out.iterdir()) == sorted([CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE,
                                                            CHECKPOINT_FILE, TRAINING_FILE])
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
    assert capsys.readouterr().out.splitlines() == translate_lines(model, tokenizer, sources, beam=2)


def test_torchrun_ranks_read_their_share_of_the_batches(corpus, ddp_run):
    from transformer_lib.batching import PairDataset, TokenBucketSampler
    from transformer_lib.corpus import read_tsv
    from transformer_lib.tokenizer import encode_pairs
    from transformer_lib.translate import load_config_and_tokenizer

    out, _ = ddp_run
    config, tokenizer = load_config_and_tokenizer(out)
    encoded, _ = encode_pairs(read_tsv(corpus["train"]), tokenizer, config.max_len)
    lengths = PairDataset(encoded).lengths
    alone = len(TokenBucketSampler(lengths, 300, seed=3, num_replicas=1, rank=0))
    each = [len(TokenBucketSampler(lengths, 300, seed=3, num_replicas=2, rank=r)) for r in (0, 1)]
    assert each[0] == each[1] == -(-alone // 2)                     # half the batches each, rounded up
    # --epochs 2 counts the batches of one process: two passes over its share
    assert json.loads((out / TRAINING_FILE).read_text())["steps"] == 2 * each[0]


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
