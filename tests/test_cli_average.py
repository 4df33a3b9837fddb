"""Checkpoint averaging in the command-line tool (issue 28, item 4): ``train --keep-checkpoints N`` keeps the
last N copies of checkpoint.pt (atomic copies, pruned only after the new one is written, kept and pruned
across --resume, written by rank 0 alone under torchrun), and ``average`` writes the mean of the weights of
several checkpoints of one model (chapter 10's average_state_dicts) as a model directory that translate and
export-ctranslate2 read; each of its refusals is one line with its exit status. Also chapter 10's
``on_checkpoint`` hook, which the tool builds on."""
import json
import os
import shutil
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest
import test_cli
import torch
from test_checkpoint import _setup
from test_cli import _help, _help_entries, _status, _train

import transformer_lib.training.snapshots as snapshots
from transformer_lib.cli.average import AVERAGED_FILE, keep_checkpoints_option
from transformer_lib.cli.main import main
from transformer_lib.training.averaging import average_state_dicts
from transformer_lib.training.config import TrainConfig
from transformer_lib.training.loop import train
from transformer_lib.training.snapshots import KeepLast
from transformer_lib.translation.model_dir import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    GENERATION_FILE,
    TOKENIZER_FILE,
    TRAINING_FILE,
    WEIGHTS_FILE,
    load_model_dir,
)
from transformer_lib.translation.translate import translate_lines

corpus, trained = test_cli.corpus, test_cli.trained          # the fixtures of test_cli


def _kept(run: Path) -> list[str]:
    folder = run / "checkpoints"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def _names(*steps: int) -> list[str]:
    return [f"step-{s:06d}.pt" for s in steps]


def _leftovers(root: Path) -> list[str]:
    """Temporaries of atomic writes (``<name>.tmp<pid>.<random>``) anywhere under ``root``."""
    return sorted(str(p) for p in root.rglob("*") if ".tmp" in p.name)


def _copy_run(run: Path, to: Path) -> Path:
    """A copy of a run directory, its kept checkpoints included."""
    return Path(shutil.copytree(run, to))


def _record(run: Path) -> dict:
    return json.loads((run / TRAINING_FILE).read_text())


@pytest.fixture(scope="module")
def kept_run(corpus, tmp_path_factory):
    """8 steps, a checkpoint every 2, the last 3 kept: copies of steps 4, 6 and 8."""
    out = tmp_path_factory.mktemp("kept") / "run"
    assert _train(corpus, out, 8, "--checkpoint-every", "2", "--keep-checkpoints", "3") == 0
    return out


# ---------------------------------------------------------------- chapter 10's hook
def test_on_checkpoint_is_called_after_each_checkpoint_with_its_step_and_path(tmp_path):
    calls = []

    def seen(step, path):
        calls.append((step, path, torch.load(path, weights_only=True)["step"]))

    path = tmp_path / "run.pt"
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, steps=5, checkpoint_path=path, checkpoint_every=2, progress=False,
          on_checkpoint=seen)
    # the start, every 2 steps, the end; the file at the path holds the step it is called with
    assert calls == [(s, str(path), s) for s in (0, 2, 4, 5)]
    calls.clear()
    model, loader, opt, sched = _setup()
    train(model, loader, opt, sched, config=TrainConfig(steps=6, resume_from=path, checkpoint_path=path,
                                                        checkpoint_every=2, progress=False, on_checkpoint=seen))
    assert [c[0] for c in calls] == [6]                      # resumed at 5: no step-0 checkpoint again
    with pytest.raises(TypeError, match="on_checkpoint"):
        TrainConfig(3, on_checkpoint="keep")


# ---------------------------------------------------------------- train --keep-checkpoints
def test_keep_checkpoints_keeps_the_weights_of_the_last_checkpoints(kept_run):
    assert _kept(kept_run) == _names(4, 6, 8)
    for name, step in zip(_kept(kept_run), (4, 6, 8)):
        assert torch.load(kept_run / "checkpoints" / name, weights_only=True)["step"] == step
    # the last copy holds the run's last weights, tensor for tensor, and no optimizer state
    kept = torch.load(kept_run / "checkpoints" / _names(8)[0], weights_only=True)
    full = torch.load(kept_run / CHECKPOINT_FILE, weights_only=True)
    assert kept["model"].keys() == full["model"].keys()
    assert all(torch.equal(kept["model"][k], full["model"][k]) for k in full["model"])
    assert kept["optimizer"] is None and full["optimizer"] is not None
    assert (kept_run / "checkpoints" / _names(8)[0]).stat().st_size < (kept_run / CHECKPOINT_FILE).stat().st_size
    assert _leftovers(kept_run) == []
    assert _record(kept_run)["args"]["keep_checkpoints"] == 3


def test_without_the_option_no_copies_are_kept(trained):
    assert not (trained / "checkpoints").exists()
    assert _record(trained)["args"]["keep_checkpoints"] == 0


def test_a_kept_copy_is_not_a_checkpoint_to_resume_from(corpus, kept_run, tmp_path, capsys):
    """A copy holds weights only: put back as checkpoint.pt, --resume refuses it in one line."""
    out = tmp_path / "again"
    out.mkdir()
    for name in (CONFIG_FILE, TOKENIZER_FILE, TRAINING_FILE):
        shutil.copy(kept_run / name, out / name)
    shutil.copy(kept_run / "checkpoints" / _names(6)[0], out / CHECKPOINT_FILE)
    capsys.readouterr()
    assert _train(corpus, out, 8, "--checkpoint-every", "2", "--resume") != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "checkpoint.pt" in err, err


def test_resume_keeps_the_runs_n_and_goes_on_pruning(corpus, tmp_path):
    out = tmp_path / "run"
    assert _train(corpus, out, 4, "--checkpoint-every", "1", "--keep-checkpoints", "2") == 0
    assert _kept(out) == _names(3, 4)
    assert _train(corpus, out, 7, "--checkpoint-every", "1", "--resume") == 0     # the option left out: N stays
    assert _kept(out) == _names(6, 7)
    assert _record(out)["args"]["keep_checkpoints"] == 2
    assert _train(corpus, out, 9, "--checkpoint-every", "1", "--resume", "--keep-checkpoints", "3") == 0
    assert _kept(out) == _names(7, 8, 9)
    assert _record(out)["args"]["keep_checkpoints"] == 3
    assert _leftovers(out) == []


def test_a_resume_with_another_n_records_it_before_training(kept_run, tmp_path):
    """A resumed run given another N writes it into training.json at once: a later resume without the
    option (after this one is interrupted, say) keeps the new N, and does not prune to the old one."""
    out = _copy_run(kept_run, tmp_path / "run")
    args = Namespace(resume=True, keep_checkpoints=5, checkpoint_every=2)
    copies = keep_checkpoints_option(args, out, 12, rank=0)
    assert isinstance(copies, KeepLast) and copies.n == 5
    assert _record(out)["args"]["keep_checkpoints"] == 5
    args = Namespace(resume=True, keep_checkpoints=None, checkpoint_every=2)
    assert keep_checkpoints_option(args, out, 12, rank=0).n == 5 and args.keep_checkpoints == 5
    # other ranks write nothing and keep nothing
    assert keep_checkpoints_option(Namespace(resume=True, keep_checkpoints=5, checkpoint_every=2), out, 12,
                                   rank=1) is None


def test_a_copy_owed_by_a_killed_run_is_made_when_it_resumes(corpus, kept_run, tmp_path):
    """Killed between writing checkpoint.pt and copying it: --resume makes the copy first."""
    out = _copy_run(kept_run, tmp_path / "run")
    (out / "checkpoints" / _names(8)[0]).unlink()
    assert _train(corpus, out, 10, "--checkpoint-every", "2", "--resume") == 0
    assert _kept(out) == _names(6, 8, 10)
    assert torch.load(out / "checkpoints" / _names(8)[0], weights_only=True)["step"] == 8


def test_train_force_removes_the_copies_of_the_old_run(corpus, kept_run, tmp_path):
    out = _copy_run(kept_run, tmp_path / "run")
    assert _train(corpus, out, 2, "--force") == 0
    assert not (out / "checkpoints").exists()


def test_a_failed_copy_leaves_the_kept_copies_whole_and_prunes_nothing(kept_run, tmp_path, monkeypatch):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    for step in (1, 2, 3):
        (run / "checkpoints" / _names(step)[0]).write_bytes(b"kept %d" % step)
    source = shutil.copy(kept_run / CHECKPOINT_FILE, run / CHECKPOINT_FILE)       # step 8

    def half_then_fail(obj, dst):
        Path(dst).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshots.torch, "save", half_then_fail)
    with pytest.raises(OSError, match="step-000008.pt"):
        KeepLast(3, every=1, last=10)(8, str(source))
    assert _kept(run) == _names(1, 2, 3)                     # the older copies are still there, whole
    assert [(run / "checkpoints" / n).read_bytes() for n in _names(1, 2, 3)] == [b"kept 1", b"kept 2", b"kept 3"]
    assert _leftovers(run) == []


def test_the_temporaries_of_a_killed_copy_are_removed_by_the_next_one(kept_run, tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    left = run / "checkpoints" / f"step-000001.pt.tmp{int(dead.stdout)}.abc123"
    left.mkdir()
    (left / "step-000001.pt").write_bytes(b"half")
    source = shutil.copy(kept_run / CHECKPOINT_FILE, run / CHECKPOINT_FILE)       # step 8
    KeepLast(2, every=2, last=8)(8, str(source))
    assert _kept(run) == _names(8) and _leftovers(run) == []


# ---------------------------------------------------------------- average
def _average(*argv):
    return main(["average", *map(str, argv)])


def test_average_last_n_is_the_mean_of_the_kept_copies(kept_run, tmp_path, capsys):
    out = tmp_path / "avg"
    assert _average(kept_run, "--last", 2, "--out", out) == 0
    assert "averaged 2 checkpoints (steps 6, 8)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == sorted([CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE,
                                                            GENERATION_FILE, AVERAGED_FILE])
    for name in (CONFIG_FILE, TOKENIZER_FILE, GENERATION_FILE):        # the run's
        assert (out / name).read_bytes() == (kept_run / name).read_bytes(), name
    files = [kept_run / "checkpoints" / n for n in _names(6, 8)]
    expected = average_state_dicts([torch.load(f, weights_only=True)["model"] for f in files])
    model, _ = load_model_dir(out, "cpu")
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    record = json.loads((out / AVERAGED_FILE).read_text())
    # each input relative to the averaged directory (no machine's absolute path travels with the model)
    assert record == {"averaged": [{"path": os.path.relpath(f, out), "step": s} for f, s in zip(files, (6, 8))]}
    assert all((out / i["path"]).resolve() == f.resolve() for i, f in zip(record["averaged"], files))
    assert _leftovers(out) == []


def test_average_of_named_directories_and_checkpoint_files(kept_run, tmp_path):
    """Inputs by name: kept copies and a model directory (its model.safetensors); or the run's checkpoint.pt."""
    copies = [kept_run / "checkpoints" / name for name in _names(4, 6)]
    for last in (kept_run, kept_run / CHECKPOINT_FILE):       # step 8 either way
        out = tmp_path / f"avg-{last.name}"
        assert _average(*copies, last, "--out", out) == 0
        final, _ = load_model_dir(kept_run, "cpu")
        states = [torch.load(f, weights_only=True)["model"] for f in copies]
        expected = average_state_dicts([*states, final.state_dict()])
        model, _ = load_model_dir(out, "cpu")
        for name, tensor in model.state_dict().items():
            assert torch.equal(tensor, expected[name]), name
        steps = [i["step"] for i in json.loads((out / AVERAGED_FILE).read_text())["averaged"]]
        assert steps == [4, 6, 8]


def test_translate_reads_the_averaged_directory(kept_run, corpus, tmp_path, capsys):
    out = tmp_path / "avg"
    assert _average(kept_run, "--last", 3, "--out", out) == 0
    sources = [p.src for p in corpus["test"][:5]]
    (tmp_path / "in.txt").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    capsys.readouterr()
    assert main(["translate", str(tmp_path / "in.txt"), "--model", str(out), "--device", "cpu",
                 "--beam", "2"]) == 0
    model, tokenizer = load_model_dir(out, "cpu")
    assert capsys.readouterr().out.splitlines() == translate_lines(model, tokenizer, sources, strategy="beam",
                                                                                 beam_size=2)


def test_export_ctranslate2_reads_the_averaged_directory(kept_run, tmp_path):
    pytest.importorskip("ctranslate2")
    out = tmp_path / "avg"
    assert _average(kept_run, "--last", 2, "--out", out) == 0
    assert main(["export-ctranslate2", str(out), "--out", str(tmp_path / "ct2")]) == 0
    assert (tmp_path / "ct2" / "model.bin").is_file()


def test_average_force_replaces_a_model_directory(kept_run, trained, tmp_path):
    """--force into a run's directory: its checkpoint, record, metrics and kept copies go, the average comes
    with the decoding defaults (generation.json) of its input."""
    out = _copy_run(kept_run, tmp_path / "old")
    assert _average(trained, "--out", out, "--force") == 0
    assert sorted(p.name for p in out.iterdir()) == sorted([CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE,
                                                            AVERAGED_FILE, GENERATION_FILE])
    a, _ = load_model_dir(out, "cpu")
    b, _ = load_model_dir(trained, "cpu")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


# ---------------------------------------------------------------- the refusals: one line each
def _other_model(c):
    """A run of another size, and the kept run: their configs differ."""
    other = c["tmp"] / "other"
    assert _train(c["corpus"], other, 2, "--d-model", "16") == 0
    return ["average", c["kept"] / CHECKPOINT_FILE, other / CHECKPOINT_FILE, "--out", c["tmp"] / "avg"]


def _other_tokenizer(c):
    """A copy of the run whose tokenizer.json numbers two tokens the other way round (same size)."""
    other = _copy_run(c["kept"], c["tmp"] / "other")
    data = json.loads((other / TOKENIZER_FILE).read_text(encoding="utf-8"))
    vocab = data["model"]["vocab"]
    a, b = [t for t in vocab if vocab[t] >= 4][:2]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    (other / TOKENIZER_FILE).write_text(json.dumps(data), encoding="utf-8")
    return ["average", c["kept"] / CHECKPOINT_FILE, other / CHECKPOINT_FILE, "--out", c["tmp"] / "avg"]


def _no_weights(c):
    d = _copy_run(c["kept"], c["tmp"] / "stopped")
    (d / WEIGHTS_FILE).unlink()
    return ["average", d, "--out", c["tmp"] / "avg"]


def _lonely_checkpoint(c):
    (c["tmp"] / "lonely").mkdir()
    shutil.copy(c["kept"] / CHECKPOINT_FILE, c["tmp"] / "lonely" / "x.pt")
    return ["average", c["tmp"] / "lonely" / "x.pt", "--out", c["tmp"] / "avg"]


def _damaged_checkpoint(c):
    d = _copy_run(c["kept"], c["tmp"] / "damaged")
    (d / CHECKPOINT_FILE).write_bytes((d / CHECKPOINT_FILE).read_bytes()[:1000])
    return ["average", d / CHECKPOINT_FILE, "--out", c["tmp"] / "avg"]


def _out_not_empty(c):
    (c["tmp"] / "avg").mkdir()
    (c["tmp"] / "avg" / "notes.txt").write_text("mine\n")
    return ["average", c["kept"], "--last", "2", "--out", c["tmp"] / "avg"]


def _out_a_file(c):
    (c["tmp"] / "avg").write_text("a file\n")
    return ["average", c["kept"], "--last", "2", "--out", c["tmp"] / "avg"]


def _out_under_a_file(c):
    (c["tmp"] / "file").write_text("a file\n")
    return ["average", c["kept"], "--last", "2", "--out", c["tmp"] / "file" / "avg"]


def _given(*argv):
    return lambda c: [a if not isinstance(a, str) or "{" not in a else a.format(**c) for a in argv]


@pytest.mark.parametrize("make, status, needles", [
    (_other_model, 1, ["other/config.json: another model than", "d_model=16", "averaged"]),
    (_other_tokenizer, 1, ["other/tokenizer.json: another tokenizer than", "averaged"]),
    (_given("average", "{kept}", "--last", "5", "--out", "{tmp}/avg"), 1,
     ["--last 5:", "holds 3 checkpoints (steps: 4, 6, 8)", "--keep-checkpoints 5"]),
    (_given("average", "{trained}", "--last", "1", "--out", "{tmp}/avg"), 1, ["--last 1:", "holds 0"]),
    (_given("average", "{tmp}/nothing", "--out", "{tmp}/avg"), 1, ["nothing: no such model directory"]),
    (_given("average", "{tmp}/nothing", "--last", "2", "--out", "{tmp}/avg"), 1,
     ["--last 2:", "nothing: no such run directory"]),
    (_given("average", "{kept}/checkpoint.pt", "--last", "2", "--out", "{tmp}/avg"), 1,
     ["--last 2:", "checkpoint.pt: not a directory"]),
    (_no_weights, 1, ["stopped: incomplete model directory (no model.safetensors)"]),
    (_lonely_checkpoint, 1, ["x.pt: no config.json beside it"]),
    (_damaged_checkpoint, 1, ["damaged/checkpoint.pt: not a complete checkpoint"]),
    (_out_not_empty, 1, ["--out", "is not empty", "--force"]),
    (_out_a_file, 1, ["--out", "a file, not a directory"]),
    (_out_under_a_file, 1, ["--out", "cannot write there"]),
    (_given("average", "{kept}", "--last", "2", "--out", "{kept}"), 2, ["--out", "inside", "which this command reads"]),
    (_given("average", "{kept}/checkpoint.pt", "--out", "{kept}", "--force"), 2,
     ["--out", "inside", "which this command reads"]),
    (_given("average", "{kept}", "{trained}", "--last", "2", "--out", "{tmp}/avg"), 2,
     ["--last 2: takes one run directory, got 2 inputs"]),
    (_given("average", "{kept}/checkpoint.pt", "{kept}/checkpoint.pt", "--out", "{tmp}/avg"), 2,
     ["checkpoint.pt: given twice"]),
    (_given("average", "{kept}", "--last", "0", "--out", "{tmp}/avg"), 2, ["--last"]),
    (_given("average", "{kept}"), 2, ["--out"]),
    (_given("average", "--out", "{tmp}/avg"), 2, ["INPUT"]),
    (_given("train", "--train", "{corpus[train]}", "--out", "{tmp}/r", "--keep-checkpoints", "-1"), 2,
     ["--keep-checkpoints", ">= 0"]),
    (_given("train", "--train", "{corpus[train]}", "--out", "{tmp}/r", "--keep-checkpoints", "two"), 2,
     ["--keep-checkpoints", "expected int"]),
])
def test_every_refusal_is_one_line(make, status, needles, corpus, kept_run, trained, tmp_path, capsys):
    c = {"corpus": corpus, "kept": kept_run, "trained": trained, "tmp": tmp_path}
    argv = [str(a) for a in make(c)]
    before = sorted(str(p) for p in kept_run.rglob("*"))
    capsys.readouterr()
    assert _status(argv) == status
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"transformer-lib {argv[0]}: error: "), err
    for needle in needles:
        assert needle in err, err
    assert not (tmp_path / "avg" / WEIGHTS_FILE).exists()
    assert sorted(str(p) for p in kept_run.rglob("*")) == before          # the inputs are left alone


# ---------------------------------------------------------------- help
def test_help_lists_average_and_explains_its_options(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    top = capsys.readouterr().out
    assert "average" in top.split("\n\n")[0] and "average checkpoints into a model directory" in top
    text = _help("average", capsys)
    entries = _help_entries(text.split("\n\n", 1)[1])
    for name in ("INPUT", "--last", "--out", "--force"):
        assert entries.get(name), (name, text)
    assert "average --last N" in _help_entries(_help("train", capsys))["--keep-checkpoints"]


# ---------------------------------------------------------------- torchrun: rank 0 alone writes
@pytest.mark.slow
def test_under_torchrun_rank_0_keeps_the_copies(corpus, tmp_path):
    out = tmp_path / "ddp"
    run = test_cli._torchrun(corpus, out, "--steps", "8", "--keep-checkpoints", "2", "--dropout", "0")
    assert "Traceback" not in run.stderr
    assert _kept(out) == _names(4, 8) and _leftovers(out) == []
    kept = torch.load(out / "checkpoints" / _names(8)[0], weights_only=True)["model"]
    full = torch.load(out / CHECKPOINT_FILE, weights_only=True)["model"]
    assert kept.keys() == full.keys() and all(torch.equal(kept[k], full[k]) for k in full)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(test_cli.ROOT)}
    averaged = subprocess.run([sys.executable, "-m", "transformer_lib", "average", str(out), "--last", "2",
                               "--out", str(tmp_path / "avg")], env=env, capture_output=True, text=True,
                              timeout=120)
    assert averaged.returncode == 0, averaged.stderr
    assert load_model_dir(tmp_path / "avg", "cpu")[0] is not None
