"""Tests of recipes/multi30k.py, the recorded Multi30k run (book/appendix_real_corpus.ipynb reads its result). Fast:
the one-line error for a missing data file, gzipped raw files, the loss curve read from the run's metrics.jsonl
(from the tool's stderr for a run begun before train wrote it), the step of a run's checkpoint, the CPU seconds of
every training segment (an interrupted one too), the scores (lowercased BLEU, the spaCy-token BLEU when spaCy is
there) and the paired intervals of averaged - last BLEU and of a run against another, rescoring a file from its
stored hypotheses (and refusing one without them), the reuse of an averaged model, and the options a run keeps. Slow
(it starts the command-line tool): the whole recipe in ``--smoke`` mode on a fake Multi30k folder of generated
sentence pairs in the same file layout: the result JSON has every field (every hypothesis among them), its scores
lie in range, running it again continues the run (``--resume``) and reuses the translations, and the file can be
rescored from itself."""
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

from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.training.checkpoint import save_checkpoint
from transformer_lib.training.metrics_log import append_metrics
from transformer_lib.translation.corpus import generate_pairs
from transformer_lib.translation.metrics import corpus_bleu, paired_bleu_ci

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "recipes"))
import multi30k  # noqa: E402
from child_signals import default_signals  # noqa: E402

SIZES = {"train": 300, "val": 40, "test_2016_flickr": 30}


def _tiny() -> Transformer:
    """A tiny model, for a real checkpoint file."""
    return Transformer(TransformerConfig(11, 11, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                                         d_ff=16, max_len=16))


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


def test_the_loss_curve_is_read_from_the_runs_metrics_file(tmp_path):
    run, log = tmp_path / "model", tmp_path / "train.log"
    run.mkdir()
    log.write_text("step 10/30: validation loss 9.900\n", encoding="utf-8")     # not read: the file is there
    for record in ({"kind": "train", "step": 2, "loss": 6.5, "lr": 0.001}, {"kind": "valid", "step": 10,
                   "val_loss": 4.8}, {"kind": "train", "step": 12, "loss": 5.0, "lr": 0.05},
                   {"kind": "valid", "step": 20, "val_loss": 4.7}):
        append_metrics(run / "metrics.jsonl", {**record, "tokens": 10, "seconds": 1.0, "cpu_seconds": 1.5})
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as f:
        f.write('{"kind": "valid", "step": 30, "val_')                    # torn by a crash: dropped
    curve = multi30k.loss_curve(run, log)
    assert curve["valid"] == [(10, 4.8), (20, 4.7)]
    assert curve["train"] == [(2, 6.5), (12, 5.0)]
    assert curve["source"].startswith("metrics.jsonl")


def test_a_run_without_a_metrics_file_falls_back_to_the_tools_stderr(tmp_path):
    log = tmp_path / "train.log"
    log.write_text("1000 training pairs, vocabulary 400, ...\n"
                   "step 1/30: loss 6.500, lr 0.001, 0 s\n"
                   "step 10/30: validation loss 4.900\n"
                   "step 12/30: loss 5.000, lr 0.05, 1 s\n"
                   "interrupted by Ctrl-C after step 12; ...\n"
                   "step 10/30: validation loss 4.800\n"            # resumed at step 10: made again
                   "step 20/30: validation loss 4.700\n", encoding="utf-8")
    curve = multi30k.loss_curve(tmp_path / "model", log)
    assert curve["valid"] == [(10, 4.8), (20, 4.7)]
    assert curve["train"] == [(1, 6.5), (12, 5.0)]
    assert multi30k.loss_curve(tmp_path / "model", tmp_path / "none.log")["valid"] == []


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


def test_the_paired_interval_is_the_librarys_paired_bleu_ci():
    pairs = generate_pairs(40, seed=2)
    refs = [p.tgt for p in pairs]
    last = [" ".join(r.split(" ")[:-1]) or r for r in refs]
    s = multi30k.scores({"greedy": last, "averaged_greedy": refs}, refs, seed=3)
    d = s["averaged_minus_last"]
    assert (d["bleu"], d["low"], d["high"]) == paired_bleu_ci(last, refs, refs, seed=3)


def test_lowercased_bleu_forgives_case_and_never_falls_below_cased_bleu():
    from sacrebleu.metrics import BLEU
    pairs = generate_pairs(50, seed=4)
    refs = [p.tgt for p in pairs]
    shouted = [r.upper() if i % 2 else r for i, r in enumerate(refs)]       # right words, wrong case
    cut = [" ".join(r.split(" ")[:-1]) or r for r in shouted]
    s = multi30k.scores({"greedy": shouted, "beam4": cut}, refs, seed=0)
    assert s["systems"]["greedy"]["bleu_lc"] == pytest.approx(100)
    for name, hyps in (("greedy", shouted), ("beam4", cut)):
        got = s["systems"][name]
        assert got["bleu_lc"] == pytest.approx(BLEU(lowercase=True).corpus_score(hyps, [refs]).score)
        assert got["bleu_lc"] >= got["bleu"]
    assert s["bleu_lc_signature"].startswith("nrefs:1|case:lc|") and "tok:13a" in s["bleu_lc_signature"]


def test_the_spacy_bleu_lowercases_spacy_tokens_or_is_absent(monkeypatch):
    """Without spaCy the score is None and not in the file; with it (a stand-in module here, splitting
    words and a final full stop as spaCy does) it is BLEU on lowercased tokens without smoothing."""
    refs, hyps = ["A dog runs.", "Two men sit on a bench."], ["a DOG runs .", "Two men sit."]
    monkeypatch.setitem(sys.modules, "spacy", None)                   # import spacy raises ImportError
    assert multi30k.spacy_bleu(hyps, refs) is None
    assert "bleu_spacy_lc" not in multi30k.scores({"greedy": hyps}, refs, seed=0)["systems"]["greedy"]

    class Token:
        def __init__(self, text):
            self.text = text

    class Blank:
        @staticmethod
        def tokenizer(line):
            return [Token(w) for w in line.replace(".", " .").split()]

    monkeypatch.setitem(sys.modules, "spacy", type(sys)("spacy"))
    sys.modules["spacy"].blank = lambda lang: Blank()
    from sacrebleu.metrics import BLEU
    want = BLEU(tokenize="none", smooth_method="none").corpus_score(
        ["a dog runs .", "two men sit ."], [["a dog runs .", "two men sit on a bench ."]]).score
    assert multi30k.spacy_bleu(hyps, refs) == pytest.approx(want)
    s = multi30k.scores({"greedy": hyps}, refs, seed=0)
    assert s["systems"]["greedy"]["bleu_spacy_lc"] == pytest.approx(want)
    assert "spaCy" in s["bleu_spacy_lc_signature"]


def result_file(path: Path, hyps: dict, refs: list, outputs: bool = True) -> Path:
    """A result file as the recipe writes it (the fields rescoring reads), with or without its hypotheses."""
    result = {"date": "2026-01-01T00:00:00+00:00", "note": "kept", "options": {"seed": 0},
              "scores": multi30k.scores(hyps, refs, seed=0),
              "samples": [{"index": i, "reference": refs[i], **{k: v[i] for k, v in hyps.items()}}
                          for i in range(3)]}
    if outputs:
        result["outputs"] = {"references": refs, "hypotheses": hyps}
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return path


def test_rescoring_a_file_from_its_stored_hypotheses(tmp_path):
    refs = [p.tgt for p in generate_pairs(40, seed=5)]
    base_hyps = {"greedy": [" ".join(r.split(" ")[:-1]) or r for r in refs], "beam4": refs}
    variant_hyps = {"greedy": refs, "beam4": [r.lower() for r in refs]}
    base = result_file(tmp_path / "multi30k.json", base_hyps, refs)
    variant = result_file(tmp_path / "multi30k-x.json", variant_hyps, refs)
    old = json.loads(variant.read_text(encoding="utf-8"))
    del old["scores"]["systems"]["greedy"]["bleu_lc"]                     # as a file of an older recipe
    variant.write_text(json.dumps(old), encoding="utf-8")
    status, err = run_main(["rescore", str(variant), "--against", str(base)])
    assert status == 0, err
    new = json.loads(variant.read_text(encoding="utf-8"))
    assert new["note"] == "kept" and new["outputs"] == old["outputs"] and new["samples"] == old["samples"]
    assert new["scores"]["systems"]["greedy"]["bleu_lc"] == pytest.approx(100)
    assert new["rescored"]["date"] and new["scores"]["systems"]["greedy"]["bleu"] == pytest.approx(100)
    vs = new["scores"]["against"]
    assert vs["file"] == "multi30k.json" and set(vs["systems"]) == {"greedy", "beam4"}
    for name in ("greedy", "beam4"):
        got = vs["systems"][name]
        want = paired_bleu_ci(base_hyps[name], variant_hyps[name], refs, seed=0)
        assert (got["bleu"], got["low"], got["high"]) == want
    assert vs["systems"]["greedy"]["low"] > 0 and vs["systems"]["beam4"]["high"] < 0


def test_a_file_without_hypotheses_cannot_be_rescored_nor_compared_with(tmp_path):
    refs = [p.tgt for p in generate_pairs(20, seed=6)]
    old = result_file(tmp_path / "old.json", {"greedy": refs}, refs, outputs=False)
    before = old.read_bytes()
    status, err = run_main(["rescore", str(old)])
    assert status == 1 and err.count("\n") == 1
    assert "holds no hypotheses, only 3 sample translations" in err and "cannot be scored again" in err
    assert old.read_bytes() == before                                    # left as it was
    good = result_file(tmp_path / "good.json", {"greedy": refs}, refs)
    status, err = run_main(["rescore", str(good), "--against", str(old)])
    assert status == 1 and "no paired test can be made against it" in err
    other = result_file(tmp_path / "other.json", {"greedy": refs[::-1]}, refs[::-1])
    status, err = run_main(["rescore", str(good), "--against", str(other)])
    assert status == 1 and "a paired test needs the same sentences" in err
    status, err = run_main(["rescore", str(tmp_path / "none.json")])
    assert status == 1 and "cannot read it as a result file" in err


def test_a_run_against_a_file_without_hypotheses_stops_before_training(tmp_path):
    data = fake_multi30k(tmp_path / "data")
    refs = [p.tgt for p in generate_pairs(20, seed=6)]
    old = result_file(tmp_path / "old.json", {"greedy": refs}, refs, outputs=False)
    status, err = run_main(["--data", str(data), "--smoke", "--against", str(old)])
    assert status == 1 and "no paired test can be made against it" in err
    assert not (data / "recipe-work-smoke").exists()


def test_every_training_segment_records_its_cpu_seconds(tmp_path, monkeypatch):
    """The training's CPU seconds (with its wall seconds: how many cores it really had) are recorded for
    every segment, also one that was interrupted."""
    args = multi30k.parse_args(["--data", str(tmp_path), "--work", str(tmp_path / "w"), "--smoke"])
    run = tmp_path / "w" / "model"

    def busy_tool(arguments, what, log=None, stop=False):
        subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
        run.mkdir(parents=True, exist_ok=True)
        save_checkpoint(run / "checkpoint.pt", _tiny(), step=10 if stop else 30)
        if stop:
            raise KeyboardInterrupt
        return 1.0

    monkeypatch.setattr(multi30k, "run_tool", lambda *a, **k: busy_tool(*a, **k, stop=True))
    state = {"segments": []}
    with pytest.raises(KeyboardInterrupt):
        multi30k.train(args, state, keep=False)
    monkeypatch.setattr(multi30k, "run_tool", busy_tool)
    multi30k.train(args, state, keep=False)
    segments = state["segments"]
    assert [(s["from_step"], s["to_step"], s["completed"]) for s in segments] == [(0, 10, False), (10, 30, True)]
    assert all(s["cpu_seconds"] > 0 and s["seconds"] > 0 for s in segments)
    saved = json.loads((tmp_path / "w" / "recipe.json").read_text(encoding="utf-8"))
    assert [s["cpu_seconds"] for s in saved["segments"]] == [s["cpu_seconds"] for s in segments]
    assert multi30k.train_cpu_seconds(segments) == pytest.approx(sum(s["cpu_seconds"] for s in segments))


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
    save_checkpoint(run / "checkpoint.pt", _tiny(), step=40)
    (run / "model.safetensors").write_bytes(b"w")
    assert multi30k.steps_done(run) == 40
    assert multi30k.steps_done(tmp_path) == 0                                  # no checkpoint there
    (tmp_path / "checkpoint.pt").write_bytes(b"")                              # damaged: the tool says so
    assert multi30k.steps_done(tmp_path) == 0
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
    assert result["scores"]["bleu_lc_signature"].startswith("nrefs:1|case:lc|")
    assert all(score["bleu_lc"] >= score["bleu"] - 1e-9 for score in systems.values())
    outputs = result["outputs"]                                 # every hypothesis, for rescoring
    assert outputs["references"] == (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    assert set(outputs["hypotheses"]) == set(systems)
    assert all(len(h) == len(outputs["references"]) for h in outputs["hypotheses"].values())
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
    status, err = run_main(["rescore", str(out), "--against", str(out)])    # from the file alone
    assert status == 0, err
    rescored = json.loads(out.read_text(encoding="utf-8"))
    assert rescored["scores"]["systems"] == result["scores"]["systems"]
    assert all(d["bleu"] == d["low"] == d["high"] == 0 for d in rescored["scores"]["against"]["systems"].values())


@pytest.mark.slow
def test_ctrl_c_then_the_same_command_continues(tmp_path):
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) stops the recipe and the tool with exit
    status 130, the run saved; the same command then resumes it instead of starting over."""
    data, work = fake_multi30k(tmp_path / "data"), tmp_path / "work"
    cmd = [sys.executable, str(ROOT / "recipes" / "multi30k.py"), "--data", str(data), "--work", str(work),
           "--smoke", "--threads", "1", "--steps", "400", "--checkpoint-every", "20"]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            start_new_session=True, preexec_fn=default_signals)
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
