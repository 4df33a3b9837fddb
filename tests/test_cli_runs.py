"""Nothing lost on the tool's newer surfaces (issue 39; the red-team report's cases named in each test): averaging
only along one run, outputs that never overwrite an input, the final model write under Ctrl-C, one writer per run
folder, kept checkpoints that trust neither a link nor a hand-edited record, and the interrupt rules of every
command (one line, 130 on Ctrl-C and 143 on SIGTERM, whatever it is doing; a finished command keeps its status)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import test_cli
import torch
from child_signals import default_signals
from safetensors import SafetensorError
from test_cli import _status, _train

import transformer_lib.cli.train as cli_train
from transformer_lib.cli.common import LOCK_FILE
from transformer_lib.training.checkpoint import load_checkpoint
from transformer_lib.training.metrics_log import METRICS_FILE
from transformer_lib.translation.model_dir import (
    CHECKPOINT_FILE,
    GENERATION_FILE,
    TOKENIZER_FILE,
    TRAINING_FILE,
    WEIGHTS_FILE,
    ModelDirError,
    load_model_dir,
)

corpus, trained = test_cli.corpus, test_cli.trained          # the fixtures of test_cli
ROOT = str(Path(__file__).resolve().parents[1])


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def two_runs(corpus, tmp_path_factory):
    """Two runs of one configuration and corpus, seeds 0 and 1, each keeping its last 2 checkpoints."""
    runs = []
    for seed in (0, 1):
        out = tmp_path_factory.mktemp("runs") / f"seed{seed}"
        assert _train(corpus, out, 6, "--seed", str(seed), "--keep-checkpoints", "2") == 0
        runs.append(out)
    return runs


# ---------------------------------------------------------------- average: one run (V28, V07, V08b, V25)
def test_the_run_id_is_in_every_checkpoint_copy_and_record_and_kept_across_resume(corpus, tmp_path):
    out = tmp_path / "run"
    assert _train(corpus, out, 3, "--keep-checkpoints", "3") == 0
    run_id = json.loads((out / TRAINING_FILE).read_text())["run_id"]
    assert len(run_id) == 16
    assert _train(corpus, out, 6, "--resume") == 0
    assert json.loads((out / TRAINING_FILE).read_text())["run_id"] == run_id
    for file in [out / CHECKPOINT_FILE, *sorted((out / "checkpoints").iterdir())]:
        assert load_checkpoint(file)["extra"]["resume_keys"]["run_id"] == run_id, file


def test_average_refuses_checkpoints_of_two_runs_unless_allowed(two_runs, tmp_path, capsys):
    a, b = two_runs
    assert _status(["average", str(a), str(b), "--out", str(tmp_path / "avg")]) == 2
    err = _one_error_line(capsys)
    assert f"{b}: another run than {a}" in err and "--allow-mixed" in err, err
    assert not (tmp_path / "avg").exists()
    kept = sorted((b / "checkpoints").iterdir())
    assert _status(["average", str(a / CHECKPOINT_FILE), str(kept[-1]), "--out", str(tmp_path / "avg")]) == 2
    assert "another run" in _one_error_line(capsys)
    assert _status(["average", str(a), str(b), "--out", str(tmp_path / "mixed"), "--allow-mixed"]) == 0
    assert (tmp_path / "mixed" / WEIGHTS_FILE).is_file()


def test_average_refuses_one_step_given_under_two_names(two_runs, tmp_path, capsys):
    run = two_runs[0]
    assert _status(["average", str(run / CHECKPOINT_FILE), str(run), "--out", str(tmp_path / "avg")]) == 2
    err = _one_error_line(capsys)
    assert f"{run}: the same weights as {run / CHECKPOINT_FILE} (step 6 of one run)" in err, err
    other = tmp_path / "other"                                  # the same file under another name
    other.mkdir()
    copy = other / "copy.pt"
    copy.write_bytes((run / CHECKPOINT_FILE).read_bytes())
    (other / "config.json").write_bytes((run / "config.json").read_bytes())
    (other / TOKENIZER_FILE).write_bytes((run / TOKENIZER_FILE).read_bytes())
    assert _status(["average", str(run / CHECKPOINT_FILE), str(copy), "--out", str(tmp_path / "avg2")]) == 2
    assert "the same weights" in _one_error_line(capsys)


def test_average_refuses_a_kept_copy_whose_name_is_not_its_step(two_runs, tmp_path, capsys):
    run = Path(shutil.copytree(two_runs[0], tmp_path / "run"))
    kept = sorted((run / "checkpoints").iterdir())
    planted = run / "checkpoints" / "step-000099.pt"
    planted.write_bytes(kept[0].read_bytes())
    assert _status(["average", str(run), "--last", "2", "--out", str(tmp_path / "avg")]) == 1
    err = _one_error_line(capsys)
    assert f"{planted}: named step 99 but holds step" in err, err


def test_a_planted_copy_keeps_no_slot_of_the_last_n_and_is_not_removed(corpus, tmp_path):
    """P3: pruning counts and removes only copies of the run (the step inside is the one in the name)."""
    out = tmp_path / "run"
    assert _train(corpus, out, 3, "--keep-checkpoints", "2") == 0
    planted = out / "checkpoints" / "step-000099.pt"
    planted.write_bytes((out / "checkpoints" / "step-000003.pt").read_bytes())
    assert _train(corpus, out, 9, "--resume") == 0
    names = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert names == ["step-000006.pt", "step-000009.pt", "step-000099.pt"], names


@pytest.mark.parametrize("error", [OSError(28, "No space left on device"),
                                   SafetensorError("Error while serializing: I/O error: No space left on device "
                                                   "(os error 28)")])
def test_average_of_a_full_disk_names_out_and_leaves_nothing(error, two_runs, tmp_path, capsys, monkeypatch):
    """V23b: the model is written into a private folder and moved into place whole; safetensors' own error for a
    full disk (neither an OSError nor a RuntimeError) says so too."""
    import transformer_lib.cli.average as average

    def full(path, *args, **kwargs):
        raise error

    monkeypatch.setattr(average, "save_model_dir", full)
    out = tmp_path / "avg"
    assert _status(["average", str(two_runs[0]), "--last", "2", "--out", str(out)]) == 1
    err = _one_error_line(capsys)
    assert err.endswith(f"--out {out}: could not write the averaged model (is the disk full, or a file-size limit "
                        "reached? Free some space and try again); nothing was written there"), err
    assert not out.exists() and list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- outputs over inputs (S10, S11, S12)
def test_translate_output_over_the_model_or_the_input_is_refused(trained, tmp_path, capsys):
    weights = (trained / WEIGHTS_FILE).read_bytes()
    source = tmp_path / "in.txt"
    source.write_text("one two\n", encoding="utf-8")
    link = tmp_path / "link.txt"
    link.symlink_to(source)
    for output, what in ((trained / WEIGHTS_FILE, f"inside {trained}"), (source, f"is the input {source}"),
                         (link, f"is the input {source}")):
        assert _status(["translate", str(source), "--model", str(trained), "--output", str(output)]) == 2
        assert what in _one_error_line(capsys)
    assert (trained / WEIGHTS_FILE).read_bytes() == weights
    assert source.read_text(encoding="utf-8") == "one two\n"


def test_translate_output_is_written_atomically_through_a_link(trained, tmp_path, capsys):
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("one two\nthree\n", encoding="utf-8")
    target.write_text("old\n", encoding="utf-8")
    link = tmp_path / "out-link.txt"
    link.symlink_to(target)
    assert _status(["translate", str(source), "--model", str(trained), "--output", str(link)]) == 0
    assert link.is_symlink() and len(target.read_text(encoding="utf-8").splitlines()) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "out-link.txt", "out.txt"]


# ---------------------------------------------------------------- --out: one rule for a link, in every command
@pytest.mark.parametrize("command", ["train", "average"])
def test_an_out_that_is_a_link_is_refused(command, corpus, trained, tmp_path, capsys):
    target = tmp_path / "target"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    argv = (["train", "--train", str(corpus["train"]), "--out", str(link), *test_cli.TINY, "--steps", "2"]
            if command == "train" else ["average", str(trained), "--out", str(link)])
    assert _status(argv) == 2
    assert f"--out {link}: a symbolic link" in _one_error_line(capsys)
    assert list(target.iterdir()) == []


# ---------------------------------------------------------------- the final write under Ctrl-C (I23)
def test_a_ctrl_c_during_the_final_write_says_so_and_resume_writes_the_model(corpus, tmp_path, capsys,
                                                                              monkeypatch):
    out = tmp_path / "run"
    real = cli_train.save_model_dir

    def second_ctrl_c(path, *args, **kwargs):             # handed over at once: the write stops
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_train, "save_model_dir", second_ctrl_c)
    assert _train(corpus, out, 4) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"interrupted by Ctrl-C after step 4, while writing the model: {out / CHECKPOINT_FILE} "
                        "holds step 4: the same command with --resume writes it"), err
    assert not (out / WEIGHTS_FILE).exists()
    monkeypatch.setattr(cli_train, "save_model_dir", real)
    assert _train(corpus, out, 4, "--resume") == 0                  # no update, the model written
    assert "step 4/4" in capsys.readouterr().err
    model, _ = load_model_dir(out, "cpu")
    saved = load_checkpoint(out / CHECKPOINT_FILE)["model"]
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())
    assert _train(corpus, out, 4, "--resume") == 2                  # now: nothing to do, as before


def test_a_first_ctrl_c_during_the_final_write_waits_for_it(corpus, tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    real = cli_train.save_model_dir

    def first_ctrl_c(path, *args, **kwargs):
        signal.raise_signal(signal.SIGINT)                    # noted; the write goes on
        return real(path, *args, **kwargs)

    monkeypatch.setattr(cli_train, "save_model_dir", first_ctrl_c)
    assert _train(corpus, out, 4) == 130
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"after step 4, once the model was written to {out}: the run is complete"), err
    load_model_dir(out, "cpu")


# ---------------------------------------------------------------- one writer per run folder (I29c, I30, I31)
_HOLDER = """
import sys, time
from pathlib import Path
from transformer_lib.cli.common import hold_lock
with hold_lock(Path(sys.argv[1]), "--out", print):
    print("held", flush=True)
    time.sleep(120)
"""


def _hold(folder: Path) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(folder)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": ROOT})
    assert holder.stdout.readline().strip() == "held"
    return holder


def _refused_while_held(out: Path, command, capsys) -> None:
    """While another process holds ``out``'s lock, ``command()`` fails with one line naming that process, and the
    folder is left as it was (but for the holder's lock file)."""
    before = sorted(p.name for p in out.iterdir())
    holder = _hold(out)
    try:
        assert command() == 1
        err = _one_error_line(capsys)
        assert f"--out {out}: in use by another run (process {holder.pid}" in err, err
        assert sorted(p.name for p in out.iterdir()) == sorted([*before, LOCK_FILE])
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("extra", [[], ["--force"], ["--resume"]])
def test_a_second_writer_of_a_run_folder_is_refused_naming_the_first(extra, corpus, trained, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    if extra == ["--resume"]:
        for f in trained.iterdir():
            if f.is_file():
                (out / f.name).write_bytes(f.read_bytes())
    _refused_while_held(out, lambda: _train(corpus, out, 8, *extra), capsys)


def test_a_run_caught_writing_its_config_is_refused_as_in_use(corpus, tmp_path, capsys):
    """A second training started while the first writes config.json (its atomic write's temporary folder,
    config.json.tmp<pid>.<random>, is all the folder holds) is told the folder is in use, not that it is a
    stranger's folder: the race test_two_trainings_started_together_one_is_refused met in CI."""
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json.tmp4242.k3y5").mkdir()
    _refused_while_held(out, lambda: _train(corpus, out, 8), capsys)


def test_average_into_a_run_folder_that_a_training_writes_is_refused(two_runs, tmp_path, capsys):
    """I30+: average --force replaced the model of a running training, which then replaced the average."""
    out = tmp_path / "running"
    out.mkdir()
    (out / "config.json").write_text("{}")
    _refused_while_held(out, lambda: _status(["average", str(two_runs[0]), "--last", "2", "--out", str(out),
                                              "--force"]), capsys)


def test_a_lock_left_by_a_killed_run_is_taken_over_with_a_notice(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    holder = _hold(out)
    holder.kill()                                     # SIGKILL: the kernel frees the lock, the file stays
    holder.wait()
    assert (out / LOCK_FILE).read_text().strip() == str(holder.pid)
    assert _train(corpus, out, 2) == 0
    err = capsys.readouterr().err
    assert f"note: {out / LOCK_FILE}: taking over the lock of process {holder.pid}" in err, err
    assert not (out / LOCK_FILE).exists()


def test_two_trainings_started_together_one_is_refused(corpus, tmp_path):
    out = tmp_path / "run"
    argv = [sys.executable, "-m", "transformer_lib", "train", "--train", str(corpus["train"]), "--out", str(out),
            *test_cli.TINY, "--steps", "30"]
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    runs = [subprocess.Popen([*argv, "--seed", str(seed)], env=env, stderr=subprocess.PIPE, text=True)
            for seed in (5, 7)]
    results = [(run.wait(timeout=600), run.stderr.read()) for run in runs]
    assert sorted(status for status, _ in results) == [0, 1], results
    refused = next(err for status, err in results if status == 1)
    assert "in use by another run" in refused or "already holds a model" in refused, refused


# ---------------------------------------------------------------- kept checkpoints (KC11, KC12, KC15)
def test_a_checkpoints_link_or_file_is_refused_before_training(corpus, tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.mkdir()
    for name in ("step-000001.pt", "step-000002.pt", "notes.txt"):
        (victim / name).write_text("mine")
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoints").symlink_to(victim)
    assert _train(corpus, out, 6, "--keep-checkpoints", "2", "--force") == 1
    assert "checkpoints: a symbolic link" in _one_error_line(capsys)
    assert sorted(p.name for p in victim.iterdir()) == ["notes.txt", "step-000001.pt", "step-000002.pt"]
    assert not (out / CHECKPOINT_FILE).exists()                     # refused before training
    other = tmp_path / "run2"
    other.mkdir()
    (other / "checkpoints").write_text("a file")
    assert _train(corpus, other, 6, "--keep-checkpoints", "2", "--force") == 1
    assert "checkpoints: not a folder" in _one_error_line(capsys)
    assert not (other / CHECKPOINT_FILE).exists()


@pytest.mark.parametrize("value", [True, -2, "3", 0.5, None])
def test_a_hand_edited_keep_checkpoints_is_refused_on_resume(value, corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(corpus, out, 6, "--keep-checkpoints", "3") == 0
    capsys.readouterr()
    kept = sorted(p.name for p in (out / "checkpoints").iterdir())
    record = json.loads((out / TRAINING_FILE).read_text())
    record["args"]["keep_checkpoints"] = value
    (out / TRAINING_FILE).write_text(json.dumps(record))
    status = _train(corpus, out, 9, "--resume")
    if value is None:                                   # absent: the option's default (keep none)
        assert status == 0
        return
    assert status == 1
    err = _one_error_line(capsys)
    assert f"{out / TRAINING_FILE}: keep_checkpoints must be an int >= 0, got {value!r}" in err, err
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == kept


# ---------------------------------------------------------------- model directories read only their own files
def test_a_tokenizer_json_that_links_outside_is_refused(trained, tmp_path):
    """S06."""
    model = tmp_path / "model"
    model.mkdir()
    for f in trained.iterdir():
        if f.is_file() and f.name != TOKENIZER_FILE:
            (model / f.name).write_bytes(f.read_bytes())
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes((trained / TOKENIZER_FILE).read_bytes())
    (model / TOKENIZER_FILE).symlink_to(outside)
    with pytest.raises(ModelDirError, match="outside the model directory: a model directory reads only its own"):
        load_model_dir(model, "cpu")


@pytest.mark.parametrize("name", [GENERATION_FILE, CHECKPOINT_FILE, METRICS_FILE, TRAINING_FILE])
def test_no_file_of_a_run_is_read_or_written_through_a_link_outside(name, corpus, trained, tmp_path, capsys):
    """S06+: generation.json (read by translate), checkpoint.pt and training.json (read by --resume) and
    metrics.jsonl (appended to by --resume) as links to files outside the run folder are refused, and the outside
    file is left as it was."""
    run = tmp_path / "run"
    shutil.copytree(trained, run, ignore=shutil.ignore_patterns("checkpoints", name))
    outside = tmp_path / f"outside-{name}"
    outside.write_bytes((trained / name).read_bytes())
    (run / name).symlink_to(outside)
    if name == GENERATION_FILE:
        source = tmp_path / "in.txt"
        source.write_text("one two three\n")
        assert _status(["translate", str(source), "--model", str(run)]) == 1
    else:
        assert _train(corpus, run, 12, "--resume") == 1
    err = _one_error_line(capsys)
    assert f"{run / name}: a link to {outside}, outside the model directory" in err, err
    assert outside.read_bytes() == (trained / name).read_bytes()


def test_a_ctranslate2_export_given_to_the_torch_engine_says_which_engine(trained, tmp_path, capsys):
    """X21, V21."""
    pytest.importorskip("ctranslate2")
    export = tmp_path / "ct"
    assert _status(["export-ctranslate2", str(trained), "--out", str(export)]) == 0
    capsys.readouterr()
    assert _status(["translate", "--model", str(export)]) == 1
    assert "a CTranslate2 export (model.bin)" in _one_error_line(capsys)
    assert _status(["average", str(export), "--out", str(tmp_path / "avg")]) == 1
    assert "translate --engine ctranslate2" in _one_error_line(capsys)


def test_an_export_inside_the_model_it_reads_is_refused(trained, capsys):
    assert _status(["export-ctranslate2", str(trained), "--out", str(trained / "ct")]) == 2
    assert f"inside {trained}" in _one_error_line(capsys)
    assert not (trained / "ct").exists()


# ---------------------------------------------------------------- interrupts outside train's loop (I26, I27)
def _tool(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "transformer_lib", *argv], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)


def _torch_loading(pid: int) -> bool:
    """Whether the process has begun to import torch (its library is mapped): only the tool's own code,
    after ``python -m transformer_lib`` has started, imports it."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps (Linux)")
@pytest.mark.parametrize("signum, status, name", [(signal.SIGINT, 130, "Ctrl-C"), (signal.SIGTERM, 143, "SIGTERM")])
@pytest.mark.parametrize("later", [0.0, 0.1, 0.25, 0.5, 4.0])
def test_a_signal_at_any_moment_is_one_line_and_the_shells_status(trained, later, signum, status, name):
    """translate waits on its standard input, which stays open. The signal is sent once torch begins to load (the
    first moment that is the tool's, not Python's own start-up), or later: while torch and the chapters are
    imported, while the model loads or while the tool reads, it ends with one line and 128 + the signal."""
    tool = _tool("translate", "--model", str(trained))
    deadline = time.monotonic() + 60
    while not _torch_loading(tool.pid) and tool.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(later)
    tool.send_signal(signum)
    out, err = tool.communicate(timeout=120)
    assert tool.returncode == status, (tool.returncode, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"translate: interrupted by {name}" in lines[0] and "Traceback" not in err, err


def test_a_ctrl_c_once_the_model_is_written_leaves_the_run_complete_and_status_0(corpus, tmp_path):
    """I23+: a Ctrl-C the moment train says the model is written was reported as "interrupted before training
    began", and the same command was then refused. The run is complete: the tool ends with its status."""
    out = tmp_path / "run"
    tool = _tool("train", "--train", str(corpus["train"]), "--out", str(out), "--steps", "6", *test_cli.TINY)
    for line in tool.stderr:
        if "model written to" in line:
            tool.send_signal(signal.SIGINT)
            break
    rest = tool.communicate(timeout=120)[1]
    assert tool.returncode == 0, (line, rest)
    assert rest.strip() == "" and load_model_dir(out, "cpu")


_LATE = """
import os, signal, sys
from transformer_lib.__main__ import run
status = run(["translate", "--model", sys.argv[1]])
os.kill(os.getpid(), signal.SIGINT)          # Ctrl-C and SIGTERM once the tool has said how it ended
os.kill(os.getpid(), signal.SIGTERM)
sys.exit(status)
"""


def test_a_signal_after_the_tool_ended_leaves_its_status(tmp_path):
    env = {**os.environ, "PYTHONPATH": ROOT}
    run = subprocess.run([sys.executable, "-c", _LATE, str(tmp_path / "missing")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert run.stderr.strip().splitlines() == [f"transformer-lib translate: error: {tmp_path / 'missing'}: no such "
                                               "model directory"], run.stderr
