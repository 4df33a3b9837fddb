"""Tests of recipes/multi30k.py, the recorded Multi30k run (book/appendix_real_corpus.ipynb reads its result).

Fast: the one-line error for a missing data file, gzipped raw files, the loss curve read from the tool's
stderr, the scores and the paired interval of averaged - last BLEU, the reuse of an averaged model, and the
options a run keeps. Slow (it starts the command-line tool): the whole recipe in ``--smoke`` mode on a fake
Multi30k folder of generated sentence pairs in the same file layout: the result JSON has every field, its
scores lie in range, and running it again continues the run (``--resume``) and reuses the translations."""
from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer_lib.translation.corpus import generate_pairs
from transformer_lib.translation.metrics import corpus_bleu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))
import multi30k  # noqa: E402

SIZES = {"train": 300, "val": 40, "test_2016_flickr": 30}


def fake_multi30k(folder: Path, gz: bool = False) -> Path:
    """A folder like Multi30k's task 1 raw files: STEM.de and STEM.en, one sentence a line (generated
    pairs: their sources play the German side)."""
    folder.mkdir(parents=True, exist_ok=True)
    pairs = generate_pairs(sum(SIZES.values()), seed=0)
    start = 0
    for stem, n in SIZES.items():
        for lang, side in (("de", 0), ("en", 1)):
            text = "".join(p[side] + "\n" for p in pairs[start:start + n]).encode("utf-8")
            path = folder / f"{stem}.{lang}"
            if gz:
                path.with_name(path.name + ".gz").write_bytes(gzip.compress(text))
            else:
                path.write_bytes(text)
        start += n
    return folder


def run_main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        status = multi30k.main(argv)
    return status, err.getvalue()


@pytest.mark.parametrize("missing", ["train.de", "val.en", "test_2016_flickr.de"])
def test_a_missing_file_is_one_line_naming_it_and_where_to_get_it(tmp_path, missing):
    data = fake_multi30k(tmp_path / "data")
    (data / missing).unlink()
    status, err = run_main(["--data", str(data), "--smoke"])
    assert status == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"no {missing} there" in err and "https://github.com/multi30k/dataset" in err
    assert "data/task1/raw" in err
    assert not (data / "recipe-work-smoke").exists()         # nothing written before the data is checked


@pytest.mark.parametrize("argv, status, words", [
    (["--data", "{tmp}/none", "--smoke"], 1, "--data {tmp}/none: not a folder"),
    (["--data", "{tmp}", "--steps", "0"], 2, "--steps: the value must be an int >= 1, got 0"),
    (["--data", "{tmp}", "--dropout", "1"], 2, "--dropout: the value must be a finite number in [0.0, 1.0)"),
])
def test_bad_options_are_one_line(tmp_path, argv, status, words):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            got = multi30k.main([a.format(tmp=tmp_path) for a in argv])
        except SystemExit as exc:                 # argparse's exit for a bad option
            got = exc.code
    assert got == status
    text = err.getvalue()
    assert text.count("\n") == 1 and words.format(tmp=tmp_path) in text


def test_gzipped_raw_files_are_read(tmp_path):
    plain = fake_multi30k(tmp_path / "plain")
    zipped = fake_multi30k(tmp_path / "zipped", gz=True)
    got = [multi30k.prepare_corpus(multi30k.parse_args(["--data", str(d), "--work", str(tmp_path / d.name / "w")]))
           for d in (plain, zipped)]
    assert got[0] == got[1]
    assert [len(got[0][k]) for k in ("train", "valid", "test")] == list(SIZES.values())
    lines = (tmp_path / "zipped" / "w" / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()
    assert lines == [p[1] for p in got[1]["test"]]


def test_a_tab_inside_a_sentence_becomes_a_space(tmp_path):
    """Multi30k's train.de holds a tab inside a sentence (line 7367); the corpus file cannot: one space."""
    data = fake_multi30k(tmp_path / "data")
    lines = (data / "train.de").read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3].replace(" ", " \t", 1)
    (data / "train.de").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    pairs = multi30k.prepare_corpus(multi30k.parse_args(["--data", str(data), "--work", str(tmp_path / "w")]))
    assert pairs["train"][3][0] == " ".join(lines[3].split()) and "\t" not in pairs["train"][3][0]


def test_the_training_cpu_time_is_summed_only_when_every_segment_has_it():
    assert multi30k.train_cpu_seconds([{"cpu_seconds": 2.5}, {"cpu_seconds": 1.0}]) == 3.5
    assert multi30k.train_cpu_seconds([{"cpu_seconds": 2.5}, {"seconds": 4.0}]) is None     # an older segment
    before = multi30k.children_cpu()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(2_000_000))"], check=True)
    assert multi30k.children_cpu() > before


def test_the_loss_curve_is_read_from_the_tools_stderr(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("1000 training pairs, vocabulary 400, ...\n"
                   "step 1/30: loss 6.500, lr 0.001, 0 s\n"
                   "step 10/30: validation loss 4.900\n"
                   "step 12/30: loss 5.000, lr 0.05, 1 s\n"
                   "interrupted by Ctrl-C after step 12; ...\n"
                   "step 10/30: validation loss 4.800\n"            # resumed at step 10: made again
                   "step 20/30: validation loss 4.700\n", encoding="utf-8")
    curve = multi30k.loss_curve(log)
    assert curve["valid"] == [(10, 4.8), (20, 4.7)]
    assert curve["train"] == [(1, 6.5), (12, 5.0)]
    assert multi30k.loss_curve(tmp_path / "none.log")["valid"] == []


def test_scores_and_the_paired_interval():
    pairs = generate_pairs(60, seed=1)
    refs = [p.tgt for p in pairs]
    last = refs[:3] + [refs[3].split(" ")[0]] + refs[4:]                          # one cut short
    averaged = [r if i % 2 else r.split(" ")[0] for i, r in enumerate(refs)]     # half cut short
    s = multi30k.scores({"greedy": last, "averaged_greedy": averaged}, refs, seed=0)
    for name, hyps in (("greedy", last), ("averaged_greedy", averaged)):
        got = s["systems"][name]
        assert got["bleu"] == pytest.approx(corpus_bleu(hyps, refs)[0])
        assert 0 <= got["bleu_low"] <= got["bleu"] <= got["bleu_high"] <= 100 + 1e-9
        assert 0 <= got["chrf"] <= 100
    d = s["averaged_minus_last"]
    assert d["bleu"] == pytest.approx(s["systems"]["averaged_greedy"]["bleu"] - s["systems"]["greedy"]["bleu"])
    assert d["low"] <= d["bleu"] <= d["high"] < 0                  # worse on every resample
    assert s["bleu_signature"].startswith("nrefs:1|") and s["chrf_signature"].startswith("nrefs:1|")
    assert multi30k.scores({"greedy": last}, refs, seed=0)["averaged_minus_last"] is None


def test_the_counts_give_sacrebleus_corpus_bleu():
    pairs = generate_pairs(40, seed=2)
    refs = [p.tgt for p in pairs]
    hyps = [" ".join(r.split(" ")[:-1]) or r for r in refs]
    counts = multi30k.sentence_counts(hyps, refs)
    assert multi30k.bleu_of_counts(counts) == pytest.approx(corpus_bleu(hyps, refs)[0])
    assert multi30k.bleu_of_counts(np.concatenate([counts, counts])) == pytest.approx(corpus_bleu(hyps, refs)[0])


def test_averaging_is_skipped_with_a_reason_or_reuses_its_model(tmp_path, monkeypatch):
    args = multi30k.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "w"), "--smoke"])
    state = {"translations": {}}
    assert multi30k.average(args, state, "no average command") == (None, "no average command")
    kept = tmp_path / "w" / "model" / "checkpoints"
    kept.mkdir(parents=True)
    (kept / "step-000005.pt").write_bytes(b"x")
    out, why = multi30k.average(args, state, None)
    assert out is None and "1 checkpoint(s)" in why
    calls = []

    def fake_tool(arguments, what, log=None):
        calls.append([str(a) for a in arguments])
        Path(arguments[-1]).mkdir()
        (Path(arguments[-1]) / "model.safetensors").write_bytes(b"w")
        return 1.0

    monkeypatch.setattr(multi30k, "run_tool", fake_tool)
    for step in range(10, 35, 5):
        (kept / f"step-{step:06d}.pt").write_bytes(b"x")
    out, why = multi30k.average(args, state, None)
    assert why is None and out == tmp_path / "w" / "averaged"
    assert calls[-1][:4] == ["average", str(tmp_path / "w" / "model"), "--last", "5"]
    assert state["average"]["checkpoints"] == [f"step-{s:06d}.pt" for s in range(10, 35, 5)]
    multi30k.average(args, state, None)
    assert len(calls) == 1                                    # unchanged snapshots: the average is reused
    (kept / "step-000035.pt").write_bytes(b"x")
    multi30k.average(args, state, None)
    assert len(calls) == 2 and state["average"]["checkpoints"][-1] == "step-000035.pt"


def test_a_work_folder_keeps_its_runs_options(tmp_path):
    work = tmp_path / "w"
    args = multi30k.parse_args(["--data", str(tmp_path), "--work", str(work), "--smoke"])
    multi30k.save_state(args, multi30k.load_state(args))
    more = multi30k.parse_args(["--data", str(tmp_path), "--work", str(work), "--smoke", "--steps", "60"])
    assert multi30k.load_state(more)["fixed"]["d_model"] == 32          # more steps: the same run, continued
    other = multi30k.parse_args(["--data", str(tmp_path), "--work", str(work), "--smoke", "--d-model", "16"])
    with pytest.raises(multi30k.RecipeError, match="--d-model 32, this command gives 16"):
        multi30k.load_state(other)


def test_fewer_steps_than_the_run_has_made_is_an_error(tmp_path):
    args = multi30k.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "w"), "--smoke"])
    run = tmp_path / "w" / "model"
    run.mkdir(parents=True)
    torch.save({"step": 40}, run / "checkpoint.pt")
    (run / "model.safetensors").write_bytes(b"w")
    assert multi30k.steps_done(run) == 40
    with pytest.raises(multi30k.RecipeError, match="--steps 30: the run in .* has already made 40 updates"):
        multi30k.train(args, {"segments": []}, keep=False)


def _recipe(data: Path, work: Path, *more: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(ROOT / "recipes" / "multi30k.py"), "--data", str(data), "--work", str(work),
           "--smoke", "--threads", "1", *more]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600)


def check_result(result: dict, data: Path, steps: int) -> None:
    """Every field of the result file, and its scores in range."""
    assert set(result) >= {"date", "commit", "commit_dirty", "machine", "options", "data", "time", "curve",
                           "averaging", "scores", "samples"}
    assert set(result["machine"]) >= {"cpu", "cores", "torch_threads", "gpu"}
    assert result["options"]["steps"] == steps and result["options"]["d_model"] == multi30k.SMOKE["d_model"]
    assert result["options"]["train_command"][0] == "train"
    assert result["data"]["pairs"] == {"train": 300, "valid": 40, "test": 30}
    assert result["data"]["target_tokens_per_batch"] > 0 and result["data"]["parameters"] > 0
    assert result["time"]["train_seconds"] > 0
    assert 0 < result["time"]["train_cpu_seconds"] and all("cpu_seconds" in s for s in result["time"]["train_segments"])
    assert result["curve"]["valid"] and result["curve"]["valid"][-1][0] == steps
    assert all(np.isfinite(loss) for _, loss in result["curve"]["valid"] + result["curve"]["train"])
    systems = result["scores"]["systems"]
    assert set(result["time"]["translate_seconds"]) == set(systems)
    for score in systems.values():
        assert 0 <= score["bleu_low"] <= score["bleu"] <= score["bleu_high"] <= 100 + 1e-9
        assert 0 <= score["chrf"] <= 100
    assert result["scores"]["bleu_signature"].startswith("nrefs:1|case:mixed|")
    if result["averaging"]["skipped"] is None:                # the tool has --keep-checkpoints and average
        assert "averaged_greedy" in systems and len(result["averaging"]["checkpoints"]) == 5
        assert result["averaging"]["steps"] == list(range(steps - 20, steps + 1, 5))   # every 5, the last 5
        d = result["scores"]["averaged_minus_last"]
        assert d["low"] <= d["bleu"] <= d["high"]
    else:
        assert set(systems) == {"greedy", "beam4"} and result["scores"]["averaged_minus_last"] is None
    refs = (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    srcs = (data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    assert len(result["samples"]) == 20
    for sample in result["samples"]:
        assert sample["reference"] == refs[sample["index"]] and sample["source"] == srcs[sample["index"]]
        assert set(sample) >= {"greedy", "beam4"} | set(systems)


@pytest.mark.slow
def test_the_smoke_run_writes_every_field_and_continues(tmp_path):
    data, work = fake_multi30k(tmp_path / "data"), tmp_path / "work"
    run = _recipe(data, work)
    assert run.returncode == 0, run.stderr[-2000:]
    out = work / "multi30k-smoke.json"
    check_result(json.loads(out.read_text(encoding="utf-8")), data, multi30k.SMOKE["steps"])
    more = multi30k.SMOKE["steps"] + 10
    run = _recipe(data, work, "--steps", str(more))                # the same work: the run continues
    assert run.returncode == 0, run.stderr[-2000:]
    assert "(resumed at step 30)" in run.stderr
    result = json.loads(out.read_text(encoding="utf-8"))
    check_result(result, data, more)
    segments = result["time"]["train_segments"]
    assert [(s["from_step"], s["to_step"], s["resumed"], s["completed"]) for s in segments] == [
        (0, 30, False, True), (30, 40, True, True)]
    before = out.stat().st_mtime_ns
    run = _recipe(data, work, "--steps", str(more))                # done: nothing trained or translated again
    assert run.returncode == 0, run.stderr[-2000:]
    assert "training: done (40 updates" in run.stderr
    again = json.loads(out.read_text(encoding="utf-8"))
    assert out.stat().st_mtime_ns != before and again["scores"] == result["scores"]
    assert again["time"] == result["time"]                 # the same segments, the translations' own times


@pytest.mark.slow
def test_ctrl_c_then_the_same_command_continues(tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) stops the recipe and the tool with exit
    status 130, the run saved; the same command then resumes it instead of starting over."""
    data, work = fake_multi30k(tmp_path / "data"), tmp_path / "work"
    cmd = [sys.executable, str(ROOT / "recipes" / "multi30k.py"), "--data", str(data), "--work", str(work),
           "--smoke", "--threads", "1", "--steps", "400", "--checkpoint-every", "20"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line)
            if re.match(r"step [1-9]\d*/400: loss", line):      # training has begun
                os.killpg(proc.pid, signal.SIGINT)
                break
        lines += proc.stderr.readlines()
        status = proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert status == 130, "".join(lines)[-2000:]
    assert "interrupted" in lines[-1] and "the same command continues" in lines[-1]
    assert (work / "model" / "checkpoint.pt").is_file()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert re.search(r"\(resumed at step \d+\)", run.stderr)
    result = json.loads((work / "multi30k-smoke.json").read_text(encoding="utf-8"))
    segments = result["time"]["train_segments"]
    assert [(s["completed"], s["resumed"]) for s in segments] == [(False, False), (True, True)]
    assert segments[0]["to_step"] == segments[1]["from_step"] > 0 and segments[1]["to_step"] == 400
    assert result["time"]["train_seconds"] == pytest.approx(sum(s["seconds"] for s in segments))
    assert result["curve"]["valid"][-1][0] == 400
