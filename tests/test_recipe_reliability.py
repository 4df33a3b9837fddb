"""The Multi30k recipe's failure paths (issue 39; the red-team cases RC06, RC07, RC12, RC12b, RC15, RC18,
RC19 and S13): translations are reused only while the model's files, the test set and the decoding options
are the same bytes (SHA-256); a damaged gzip, a damaged or misshapen ``recipe.json`` and a damaged result
file are one line naming the file; an ``--out`` over a file the recipe reads is refused before anything
runs; SIGINT or SIGTERM sent to the recipe alone reaches its training child, which saves the run, and the
recipe says how to go on (exit 130 or 143). Slow (they start the recipe): the signals."""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))
import multi30k  # noqa: E402
from child_signals import default_signals  # noqa: E402

# the fake data set and the in-process runner of the recipe's main tests
from test_recipe_multi30k import fake_multi30k, run_main  # noqa: E402


def one_line(err: str) -> str:
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.fixture
def no_tool(monkeypatch):
    """The command-line tool must not be started (the error comes before any training)."""
    def refuse(*args, **kwargs):
        raise AssertionError(f"the tool was started: {args}")
    monkeypatch.setattr(multi30k, "run_tool", refuse)
    monkeypatch.setattr(multi30k, "tool_has", refuse)


# RC19: hypotheses keyed on the content of the model, of the input and on the decoding options

def _model_dir(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name, text in (("model.safetensors", "weights-1"), ("config.json", "{}"), ("tokenizer.json", "{}")):
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def _same_stamp(path: Path, text: str) -> None:
    """Replace the file's content by ``text`` of the same size, keeping its modification time."""
    info = path.stat()
    assert len(text.encode()) == info.st_size
    path.write_text(text, encoding="utf-8")
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def test_translations_are_made_again_when_the_test_set_or_the_model_changes(tmp_path, monkeypatch):
    """RC19: a test set changed under the same --work (or weights replaced by others of the same size and
    time) is translated again; an unchanged one is reused. The key holds the files' SHA-256."""
    args = multi30k.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "w"), "--smoke"])
    model = _model_dir(tmp_path / "w" / "model")
    test = tmp_path / "w" / "corpus" / "test.de"
    test.parent.mkdir(parents=True)
    test.write_text("eins\nzwei\n", encoding="utf-8")
    calls = []

    def fake_tool(arguments, what, log=None):           # "translates" by copying the input, tagged
        arguments = [str(a) for a in arguments]
        calls.append(arguments)
        weights = (Path(arguments[arguments.index("--model") + 1]) / "model.safetensors").read_text()
        lines = Path(arguments[-1]).read_text(encoding="utf-8").splitlines()
        Path(arguments[arguments.index("--output") + 1]).write_text(
            "".join(f"{weights}:{line}\n" for line in lines), encoding="utf-8")
        return 1.0

    monkeypatch.setattr(multi30k, "run_tool", fake_tool)
    state = {"translations": {}}
    assert multi30k.translate(args, state, "greedy", model, 1) == ["weights-1:eins", "weights-1:zwei"]
    assert multi30k.translate(args, state, "greedy", model, 1) == ["weights-1:eins", "weights-1:zwei"]
    assert len(calls) == 1                                                   # unchanged: reused
    key = json.dumps(state["translations"]["greedy"])
    for file in (model / "model.safetensors", test):
        assert hashlib.sha256(file.read_bytes()).hexdigest() in key
    _same_stamp(test, "zwei\neins\n")                                        # the test set reversed
    assert multi30k.translate(args, state, "greedy", model, 1) == ["weights-1:zwei", "weights-1:eins"]
    assert len(calls) == 2
    _same_stamp(model / "model.safetensors", "weights-2")                    # other weights, same stamp
    assert multi30k.translate(args, state, "greedy", model, 1) == ["weights-2:zwei", "weights-2:eins"]
    assert len(calls) == 3
    _same_stamp(model / "tokenizer.json", "[]")                              # another tokenizer
    multi30k.translate(args, state, "greedy", model, 1)
    assert len(calls) == 4
    (model / "generation.json").write_text("{}", encoding="utf-8")           # decoding defaults added
    multi30k.translate(args, state, "greedy", model, 1)
    assert len(calls) == 5
    args.device = "meta"                                                     # another decoding option
    multi30k.translate(args, state, "greedy", model, 1)
    assert len(calls) == 6
    multi30k.translate(args, state, "greedy", model, 1)
    assert len(calls) == 6
    out = tmp_path / "w" / "hyp.greedy.en"
    _same_stamp(out, out.read_text(encoding="utf-8")[::-1])                  # the stored file altered
    assert multi30k.translate(args, state, "greedy", model, 1) == ["weights-2:zwei", "weights-2:eins"]
    assert len(calls) == 7


# RC06, RC07: damaged gzipped inputs

@pytest.mark.parametrize("damage, words", [
    (lambda text: gzip.compress(text)[: len(gzip.compress(text)) // 2], "damaged gzip (compressed file ended"),
    (lambda text: text, "damaged gzip (not a gzipped file"),
    (lambda text: gzip.compress(text)[:-8] + b"\0" * 8, "damaged gzip (crc check failed"),
    (lambda text: gzip.compress(text)[:10] + b"\x07" + gzip.compress(text)[11:],
     "damaged gzip (error -3 while decompressing data: invalid block type)"),
])
def test_a_damaged_gzip_is_one_line_naming_it(tmp_path, no_tool, damage, words):
    """RC06 (cut short), RC07 (not gzip at all), a wrong checksum, damaged deflate data."""
    data = fake_multi30k(tmp_path / "data")
    text = (data / "train.de").read_bytes()
    (data / "train.de").unlink()
    (data / "train.de.gz").write_bytes(damage(text))
    status, err = run_main(["--data", str(data), "--work", str(tmp_path / "w"), "--smoke"])
    assert status == 1
    one_line(err)
    assert f"multi30k.py: error: {data / 'train.de.gz'}: {words}".lower() in err.lower()


def test_an_error_inside_a_gzipped_file_names_it_not_its_copy(tmp_path, no_tool):
    data = fake_multi30k(tmp_path / "data")
    lines = (data / "val.en").read_text(encoding="utf-8").splitlines()
    lines[4] = ""
    (data / "val.en.gz").write_bytes(gzip.compress("".join(line + "\n" for line in lines).encode()))
    (data / "val.en").unlink()
    status, err = run_main(["--data", str(data), "--work", str(tmp_path / "w"), "--smoke"])
    assert status == 1
    assert f"{data / 'val.en.gz'}:5: empty line" in one_line(err) and "corpus" not in err


# RC12, RC12b: a damaged recipe.json

@pytest.mark.parametrize("content, words", [
    (b'{\n  "fixed": {\n', "not JSON"),                                        # RC12: cut short
    (b'{"fixed": [1, 2]}', '"fixed" is a list, expected an object'),           # RC12b
    (b"[]", "the file is a list, expected an object"),
    (b'{"fixed": {"d_model": 32}, "segments": {}}', '"segments" is an object, expected a list'),
    (b'{"segments": [{"seconds": "1"}]}', '"segments"[0]: "seconds" is a string, expected a number'),
    (b'{"segments": [3]}', '"segments"[0] is a number, expected an object'),
    (b'{"translations": {"greedy": []}}', '"translations"["greedy"] is a list, expected an object'),
    (b'{"average": {"seconds": 1, "checkpoints": "step-5.pt", "from": ""}}',
     '"average": "checkpoints" is a string, expected a list of strings'),
    (b'{"train_command": "train"}', '"train_command" is a string, expected a list of strings'),
    (b'\xff\xfe{}', "not UTF-8"),
])
def test_a_damaged_recipe_record_is_one_line_naming_it(tmp_path, no_tool, content, words):
    data, work = fake_multi30k(tmp_path / "data"), tmp_path / "w"
    work.mkdir()
    (work / "recipe.json").write_bytes(content)
    status, err = run_main(["--data", str(data), "--work", str(work), "--smoke"])
    assert status == 1
    assert f"multi30k.py: error: {work / 'recipe.json'}: damaged (" in one_line(err)
    assert words in err and "another --work" in err
    assert (work / "recipe.json").read_bytes() == content                     # left as it was


def test_a_record_of_a_well_formed_run_is_read(tmp_path):
    args = multi30k.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "w"), "--smoke"])
    state = multi30k.load_state(args)
    state["segments"].append({"from_step": 0, "to_step": 30, "completed": True, "seconds": 2.5,
                              "cpu_seconds": 2.0, "resumed": False, "device": "cpu", "precision": "fp32"})
    state["translations"]["greedy"] = {"model": "x", "seconds": 1.0, "command": ["translate"]}
    state["average"] = {"from": "x", "seconds": 1, "checkpoints": ["step-000030.pt"]}
    state["train_command"] = ["train"]
    multi30k.save_state(args, state)
    assert multi30k.load_state(args) == state


# the result files that --against and rescore read

@pytest.mark.parametrize("outputs, words", [
    ({"hypotheses": {"greedy": ["a"]}}, '"outputs": "references" is missing'),
    ({"references": ["a"], "hypotheses": {"greedy": "a"}}, '"hypotheses"["greedy"] is a string'),
    ({"references": ["a", "b"], "hypotheses": {"greedy": ["a"]}}, '1 hypotheses for 2 references'),
])
def test_a_misshapen_result_file_is_one_line_naming_it(tmp_path, outputs, words):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"options": {"seed": 0}, "outputs": {"references": ["a b c d"],
                                "hypotheses": {"greedy": ["a b c d"]}}}), encoding="utf-8")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"options": {"seed": 0}, "outputs": outputs}), encoding="utf-8")
    for argv in (["rescore", str(bad)], ["rescore", str(good), "--against", str(bad)]):
        status, err = run_main(argv)
        assert status == 1 and str(bad) in one_line(err) and words in err
    bad.write_text(json.dumps({"options": {}, "outputs": {"references": ["a"], "hypotheses": {"greedy": ["a"]}}}),
                   encoding="utf-8")
    status, err = run_main(["rescore", str(bad)])
    assert status == 1 and f"{bad}:" in one_line(err) and '"options": "seed" is missing' in err


# S13: --out over a file the recipe reads

@pytest.mark.parametrize("where", ["train.de", "val.en", "test_2016_flickr.de.gz", "hard link", "symbolic link",
                                   "data/r.json", "w/model/model.safetensors", "w/recipe.json",
                                   "w/corpus/test.de", "w/hyp.greedy.en", "w/train.log", "w/averaged/x.json",
                                   "against"])
def test_an_out_over_a_file_the_recipe_reads_is_refused(tmp_path, no_tool, where):
    data, work = fake_multi30k(tmp_path / "data"), tmp_path / "w"
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"outputs": {"references": ["a"], "hypotheses": {"greedy": ["a"]}}}),
                    encoding="utf-8")
    if where == "hard link":
        out = tmp_path / "linked.json"
        os.link(data / "val.de", out)
    elif where == "symbolic link":
        out = tmp_path / "linked.json"
        out.symlink_to(data / "train.en")
    elif where == "against":
        out = base
    elif where.startswith(("w/", "data/")):
        out = tmp_path / where
    else:
        out = data / where
    status, err = run_main(["--data", str(data), "--work", str(work), "--smoke", "--out", str(out),
                            "--against", str(base)])
    assert status == 1
    assert f"multi30k.py: error: --out {out.resolve()}: " in one_line(err) and "give another --out" in err
    assert {p.name: p.read_bytes() for p in data.iterdir()} == before          # nothing written there
    assert not work.exists()                                                  # nor anything run


def test_the_default_outs_and_a_file_beside_the_runs_are_allowed(tmp_path):
    data = fake_multi30k(tmp_path / "data")
    for argv in (["--smoke"], ["--smoke", "--out", str(data / "recipe-work-smoke" / "mine.json")],
                 ["--work", str(tmp_path / "w"), "--out", str(tmp_path / "w" / "r.json")],
                 ["--work", str(tmp_path / "w"), "--out", str(tmp_path / "r.json")]):
        args = multi30k.parse_args(["--data", str(data), *argv])
        multi30k.check_out(args)                                               # no error


# RC15, RC18: SIGINT or SIGTERM to the recipe's own pid while the tool trains

def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
        return [int(p) for p in f.read().split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads the child's pid from /proc")
@pytest.mark.parametrize("signum, status, name, tool", [(signal.SIGINT, 130, "Ctrl-C", "Ctrl-C"),
                                                        (signal.SIGTERM, 143, "SIGTERM", "SIGTERM"),
                                                        (signal.SIGHUP, 129, "SIGHUP", "SIGTERM")])
def test_a_signal_to_the_recipe_alone_stops_its_training(tmp_path, signum, status, name, tool):
    """RC15, RC18: the signal, sent to the recipe's pid only (not to its group, as `kill PID` does),
    is handed to the training child (SIGHUP as SIGTERM: the tool runs in its own process group, so the
    recipe hands on a terminal's hang-up too), which saves the run; the recipe waits for it and says how
    to go on."""
    data, work = fake_multi30k(tmp_path / "data"), tmp_path / "work"
    cmd = [sys.executable, str(ROOT / "recipes" / "multi30k.py"), "--data", str(data), "--work", str(work),
           "--smoke", "--threads", "1", "--steps", "100000", "--checkpoint-every", "5"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            start_new_session=True, preexec_fn=default_signals)
    lines, children = [], []
    # a deadline for the reads below: a recipe that never stops is killed, and the test fails
    watchdog = threading.Timer(600, os.killpg, (proc.pid, signal.SIGKILL))
    watchdog.start()
    try:
        for line in proc.stderr:
            lines.append(line)
            if re.match(r"step [1-9]\d*/100000: loss", line):      # training has begun
                children = _children(proc.pid)
                os.kill(proc.pid, signum)
                break
        assert children, "".join(lines)[-2000:]
        lines += proc.stderr.readlines()
        got = proc.wait(timeout=120)
    finally:
        watchdog.cancel()
        for pid in [proc.pid, *children]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    text = "".join(lines)
    assert got == status, text[-2000:]
    assert f"interrupted by {tool} after step" in text                       # the tool's own line
    assert not any(_alive(pid) for pid in children)
    step = multi30k.steps_done(work / "model")
    assert 0 < step < 100000
    assert lines[-1] == (f"multi30k.py: interrupted by {name}; the same command continues from the run's "
                         f"last checkpoint (step {step} in {work / 'model'})\n")
    record = json.loads((work / "recipe.json").read_text(encoding="utf-8"))
    assert record["segments"][-1]["to_step"] == step and not record["segments"][-1]["completed"]


@pytest.mark.slow
def test_sigterm_outside_the_tool_is_one_line_and_status_143(tmp_path):
    """SIGTERM while the recipe itself works (here: while it reads the data) ends it like Ctrl-C."""
    data = fake_multi30k(tmp_path / "data")
    code = ("import os, signal, sys; sys.path.insert(0, sys.argv[1]); import multi30k\n"
            "multi30k.prepare_corpus = lambda args: os.kill(os.getpid(), signal.SIGTERM)\n"
            "sys.exit(multi30k.main(sys.argv[2:]))")
    run = subprocess.run([sys.executable, "-c", code, str(ROOT / "recipes"), "--data", str(data), "--work",
                          str(tmp_path / "w"), "--smoke"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 143, run.stderr[-2000:]
    assert run.stderr == ("multi30k.py: interrupted by SIGTERM; nothing trained yet: the same command "
                          "starts the run\n")
