"""Tests of the API of a program that translates: the model directory (transformer_lib.translation.model_dir:
save_model_dir, load_model_dir and their errors), batched translation (translation.translate: translate_lines),
BLEU and the bootstrap confidence intervals of a score (translation.metrics)."""
import json
import math
import random
import sys
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_model

from transformer_lib.cli.record import load_resume_setup
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.training.checkpoint import CheckpointError, save_checkpoint
from transformer_lib.translation.corpus import generate_pairs
from transformer_lib.translation.metrics import bleu_ci, bootstrap_ci, corpus_bleu
from transformer_lib.translation.model_dir import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    GENERATION_FILE,
    TOKENIZER_FILE,
    TOKENIZER_KIND_FILE,
    TRAINING_FILE,
    WEIGHTS_FILE,
    ModelDirError,
    load_config_and_tokenizer,
    load_generation_config,
    load_model_dir,
    save_config_and_tokenizer,
    save_generation_config,
    save_model_dir,
)
from transformer_lib.translation.tokenizer import BPETokenizer
from transformer_lib.translation.translate import LineTooLongWarning, translate_lines

PAIRS = generate_pairs(200, seed=3)


@pytest.fixture(scope="module")
def tokenizer():
    return BPETokenizer.train([p.src for p in PAIRS] + [p.tgt for p in PAIRS], vocab_size=300)


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    v = tokenizer.vocab_size
    config = TransformerConfig(v, v, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                               dropout=0.1, max_len=48, share_embeddings=True)
    return Transformer(config).eval()


@pytest.fixture(scope="module")
def model_dir(model, tokenizer, tmp_path_factory):
    return save_model_dir(tmp_path_factory.mktemp("dirs") / "m", model, tokenizer, steps=7, note="test")


# ---------------------------------------------------------------- the model directory
def test_save_then_load_gives_the_same_model(model, tokenizer, model_dir):
    assert sorted(f.name for f in model_dir.iterdir()) == sorted([CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE,
                                                                  TRAINING_FILE])
    assert json.loads((model_dir / TRAINING_FILE).read_text()) == {"steps": 7, "note": "test"}
    loaded, tok = load_model_dir(model_dir, "cpu")
    assert not loaded.training and loaded.config == model.config
    for (name, a), b in zip(loaded.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name
    assert loaded.output.weight.data_ptr() == loaded.tgt_embed.weight.data_ptr()     # still tied
    assert tok.encode("2026年11月30日") == tokenizer.encode("2026年11月30日")


def test_generation_defaults_round_trip(model_dir, tmp_path):
    """A model directory keeps its decoding defaults in generation.json; without it, the library's."""
    d = _copy(model_dir, tmp_path / "m")
    assert load_generation_config(d) == GenerationConfig()                   # no file: the defaults
    stored = GenerationConfig(strategy="beam", beam_size=3, length_norm="power", alpha=1.0, stop="first_k",
                              max_len_a=1.5, max_len_b=4)
    file = save_generation_config(d, stored)
    assert file == d / GENERATION_FILE and load_generation_config(d) == stored
    assert json.loads(file.read_text())["length_norm"] == "power"
    mtime = file.stat().st_mtime_ns
    save_generation_config(d, stored)                                         # the same text: not rewritten
    assert file.stat().st_mtime_ns == mtime
    with pytest.raises(TypeError, match="config must be a GenerationConfig"):
        save_generation_config(d, stored.to_dict())


@pytest.mark.parametrize("text, needle", [
    ("{", r"generation.json: damaged \("),
    ("[1, 2]", "generation.json: not a valid generation config .*JSON object"),
    ('{"beam_size": 0}', "generation.json: not a valid generation config .*beam_size must be an int >= 1"),
    ('{"length_norm": "linear"}', "generation.json: not a valid generation config .*length_norm must be one of"),
    ('{"beam": 4}', "generation.json: not a valid generation config .*beam: not a GenerationConfig field"),
    ('{"alpha": "0.6"}', "generation.json: not a valid generation config .*alpha must be a finite number"),
])
def test_a_damaged_generation_file_is_one_line_naming_it(model_dir, tmp_path, text, needle):
    d = _copy(model_dir, tmp_path / "m")
    (d / GENERATION_FILE).write_text(text, encoding="utf-8")
    with pytest.raises(ModelDirError, match=needle) as info:
        load_generation_config(d)
    assert "\n" not in str(info.value)


def test_no_training_record_without_keywords(model, tokenizer, tmp_path):
    d = save_model_dir(tmp_path / "plain", model, tokenizer)
    assert not (d / TRAINING_FILE).exists()


def test_config_and_tokenizer_alone(model, tokenizer, tmp_path):
    d = save_config_and_tokenizer(tmp_path / "half", model.config, tokenizer)
    config, tok = load_config_and_tokenizer(d)
    assert config == model.config and tok.vocab_size == tokenizer.vocab_size
    with pytest.raises(ModelDirError, match="no model.safetensors"):
        load_model_dir(d, "cpu")
    other = BPETokenizer.train([p.src for p in PAIRS], vocab_size=280)
    other.save(d / TOKENIZER_FILE)
    mismatch = r"has 280 tokens \(source\) and 280 \(target\), but config.json says 300 and 300"
    with pytest.raises(ModelDirError, match=mismatch):
        load_config_and_tokenizer(d)


def _copy(model_dir, dst):
    dst.mkdir()
    for name in (CONFIG_FILE, TOKENIZER_FILE, WEIGHTS_FILE):
        (dst / name).write_bytes((model_dir / name).read_bytes())
    return dst


@pytest.mark.parametrize("damage, needle", [
    (lambda d: (d / CONFIG_FILE).unlink(), "not a model directory"),
    (lambda d: (d / CONFIG_FILE).write_text("{oops"), "config.json: damaged"),
    (lambda d: (d / CONFIG_FILE).write_text('{"src_vocab_size": 10}'), "not a valid model configuration"),
    (lambda d: (d / TOKENIZER_FILE).unlink(), "no tokenizer.json"),
    (lambda d: (d / TOKENIZER_FILE).write_text("[]"), "not a tokenizer file"),
    (lambda d: (d / WEIGHTS_FILE).unlink(), "no model.safetensors"),
    (lambda d: (d / WEIGHTS_FILE).write_bytes((d / WEIGHTS_FILE).read_bytes()[:500]), "model.safetensors: damaged"),
    # issue 26: deeply nested JSON is one line naming the file, not a RecursionError
    (lambda d: (d / CONFIG_FILE).write_text("[" * 100_000 + "]" * 100_000), "config.json: damaged"),
    (lambda d: (d / TOKENIZER_KIND_FILE).write_text("[" * 100_000 + "]" * 100_000), "tokenizer_kind.json: damaged"),
    # issue 26: a model directory reads only its own files
    (lambda d: (d / TOKENIZER_KIND_FILE).write_text('{"kind": "bpe", "path": "../../../etc/passwd"}'),
     "tokenizer_kind.json: the tokenizer's path must lie inside the model directory"),
    (lambda d: (d / TOKENIZER_KIND_FILE).write_text('{"kind": "bpe", "path": "/etc/passwd"}'),
     "must lie inside the model directory, got '/etc/passwd'"),
])
def test_a_damaged_model_directory_names_the_file(model_dir, tmp_path, damage, needle):
    d = _copy(model_dir, tmp_path / "m")
    damage(d)
    with pytest.raises(ModelDirError, match=needle):
        load_model_dir(d, "cpu")


def test_missing_directory_and_bad_device(model_dir, tmp_path):
    with pytest.raises(ModelDirError, match="no such model directory"):
        load_model_dir(tmp_path / "none")
    with pytest.raises(ValueError, match="device"):
        load_model_dir(model_dir, "tpu")


def test_weights_of_another_config_are_refused(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path / "m")
    config = json.loads((d / CONFIG_FILE).read_text())
    config["d_ff"] = 64
    (d / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(ModelDirError, match=r"config\.json: d_ff=64, but the model\.safetensors has 32"):
        load_model_dir(d, "cpu")
    # weights without the record of save_model_dir (written by safetensors alone): shapes still checked
    save_model(Transformer(TransformerConfig.from_dict(json.loads((model_dir / CONFIG_FILE).read_text()))),
               str(d / WEIGHTS_FILE))
    with pytest.raises(ModelDirError, match="not made for config.json"):
        load_model_dir(d, "cpu")


@pytest.mark.parametrize("field, value", [("n_heads", 1), ("norm_first", True), ("pad_id", 3)])
def test_an_edited_config_that_keeps_the_shapes_is_refused(model_dir, tmp_path, field, value):
    # issue 14: n_heads changes no tensor shape, only how the weights are cut into heads
    d = _copy(model_dir, tmp_path / "m")
    config = json.loads((d / CONFIG_FILE).read_text())
    old = config[field]
    config[field] = value
    (d / CONFIG_FILE).write_text(json.dumps(config))
    with pytest.raises(ModelDirError, match=rf"config\.json: {field}={value!r}, but the model\.safetensors "
                                            rf"has {old!r}"):
        load_model_dir(d, "cpu")
    config["dropout"] = 0.3                                # dropout is not part of the weights' meaning
    config[field] = old
    (d / CONFIG_FILE).write_text(json.dumps(config))
    assert load_model_dir(d, "cpu")[0].config.dropout == 0.3


def test_a_swapped_tokenizer_is_refused(model_dir, tokenizer, tmp_path):
    d = _copy(model_dir, tmp_path / "m")
    other = BPETokenizer.train([p.src + p.tgt for p in generate_pairs(200, seed=4)], vocab_size=300)
    assert other.vocab_size == tokenizer.vocab_size and other.to_json() != tokenizer.to_json()
    other.save(d / TOKENIZER_FILE)
    with pytest.raises(ModelDirError, match=r"tokenizer\.json: not the tokenizer the weights"):
        load_model_dir(d, "cpu")


# ---------------------------------------------------------------- atomic writes and resuming (issue 14)
def test_a_failed_write_leaves_the_directory_whole(model, tokenizer, model_dir, tmp_path, monkeypatch):
    d = _copy(model_dir, tmp_path / "m")
    (d / TRAINING_FILE).write_bytes((model_dir / TRAINING_FILE).read_bytes())
    before = {f.name: f.read_bytes() for f in d.iterdir()}

    def full_disk(model, tmp, *args, **kwargs):
        with open(tmp, "wb") as f:
            f.write(b"{")                                   # a truncated write ...
        raise OSError(28, "No space left on device")        # ... then the disk is full

    monkeypatch.setattr("transformer_lib.translation.model_dir.save_model", full_disk)
    with pytest.raises(OSError, match="No space left"):
        save_model_dir(d, model, tokenizer, steps=8)
    monkeypatch.setattr(BPETokenizer, "to_json", lambda self: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        save_model_dir(d, model, tokenizer, steps=8)
    after = {f.name: f.read_bytes() for f in d.iterdir()}
    assert after == before                                  # every file whole, no temporary left
    loaded, _ = load_model_dir(d, "cpu")
    assert loaded.config == model.config


def test_unchanged_files_are_not_rewritten(model, tokenizer, model_dir, tmp_path):
    d = _copy(model_dir, tmp_path / "m")
    stamps = {name: (d / name).stat().st_mtime_ns for name in (CONFIG_FILE, TOKENIZER_FILE)}
    inode = (d / TOKENIZER_FILE).stat().st_ino
    save_config_and_tokenizer(d, model.config, tokenizer)
    assert {name: (d / name).stat().st_mtime_ns for name in stamps} == stamps
    assert (d / TOKENIZER_FILE).stat().st_ino == inode


def test_stale_temporaries_are_removed(model, tokenizer, model_dir, tmp_path):
    d = _copy(model_dir, tmp_path / "m")
    stale = d / f"{WEIGHTS_FILE}.tmp{2 ** 22 + 12345}"        # above any pid Linux hands out by default
    stale.write_bytes(b"half")
    save_model_dir(d, model, tokenizer)
    assert not stale.exists()


def _run_dir(model, tokenizer, path):
    save_config_and_tokenizer(path, model.config, tokenizer)
    save_checkpoint(path / CHECKPOINT_FILE, model, step=3)
    return path


def test_load_resume_setup(model, tokenizer, tmp_path):
    d = _run_dir(model, tokenizer, tmp_path / "run")
    config, tok = load_resume_setup(d)
    assert config == model.config and tok.to_json() == tokenizer.to_json()
    with pytest.raises(ModelDirError, match="nothing to resume"):
        load_resume_setup(tmp_path / "none")
    edited = json.loads((d / CONFIG_FILE).read_text())
    edited["n_heads"] = 1
    (d / CONFIG_FILE).write_text(json.dumps(edited))
    with pytest.raises(ModelDirError, match=r"config\.json: n_heads=1, but the checkpoint\.pt has 2"):
        load_resume_setup(d)
    d = _run_dir(model, tokenizer, tmp_path / "run2")
    (d / CHECKPOINT_FILE).write_bytes(b"")
    with pytest.raises(CheckpointError, match=r"checkpoint\.pt: the file is empty"):
        load_resume_setup(d)
    d = _run_dir(model, tokenizer, tmp_path / "run3")
    save_model_dir(d, model, tokenizer)
    other = BPETokenizer.train([p.src + p.tgt for p in generate_pairs(200, seed=4)], vocab_size=300)
    other.save(d / TOKENIZER_FILE)
    with pytest.raises(ModelDirError, match=r"tokenizer\.json: not the tokenizer"):
        load_resume_setup(d)


# ---------------------------------------------------------------- translate_lines
def test_one_output_per_input_in_order(model, tokenizer):
    lines = [p.src for p in PAIRS[:9]]
    lines.insert(4, "")
    lines.insert(7, "   ")
    out = translate_lines(model, tokenizer, lines, batch_size=64)
    assert len(out) == len(lines) and out[4] == "" and out[7] == ""
    assert translate_lines(model, tokenizer, iter(lines), batch_size=2) == out     # batching changes nothing
    one_by_one = [translate_lines(model, tokenizer, [line])[0] for line in lines]
    assert one_by_one == out
    beam = translate_lines(model, tokenizer, lines, strategy="beam", beam_size=3, batch_size=3)
    assert len(beam) == len(lines) and beam[4] == ""


def test_max_len_bounds_the_output(model, tokenizer):
    out = translate_lines(model, tokenizer, [p.src for p in PAIRS[:5]], max_len=3)
    for text in out:
        assert len(tokenizer.encode(text)) <= 3


def test_sampling_is_seeded(model, tokenizer):
    lines = [p.src for p in PAIRS[:6]]
    a = translate_lines(model, tokenizer, lines, strategy="sample", seed=3, temperature=2.0)
    assert a == translate_lines(model, tokenizer, lines, strategy="sample", seed=3, temperature=2.0)
    assert any(translate_lines(model, tokenizer, lines, strategy="sample", seed=s, temperature=2.0) != a
               for s in range(4, 8))


@pytest.mark.parametrize("kwargs, error, needle", [
    ({"strategy": "beam", "beam_size": 0}, ValueError, "beam_size must be an int >= 1"),
    ({"strategy": "beam", "beam_size": True}, ValueError, "beam_size must be"),
    ({"strategy": "beams"}, ValueError, "strategy must be one of greedy, beam, sample"),
    ({"beam_size": 2}, ValueError, "beam_size: a setting of another strategy than 'greedy'"),
    ({"temperature": 2.0}, ValueError, "temperature: a setting of another strategy than 'greedy'"),
    ({"beam": 2}, TypeError, "beam: not a GenerationConfig field"),
    ({"config": {"beam_size": 2}}, TypeError, "config must be a GenerationConfig or None, got dict"),
    ({"max_len": 5, "max_len_a": 1}, ValueError, "max_len: give a fixed max_len or max_len_a"),
    ({"batch_size": 0}, ValueError, "batch_size must be"),
    ({"max_len": 0}, ValueError, "max_len must be"),
    ({"strategy": "sample", "beam_size": 2}, ValueError, "beam_size: a setting of another strategy than 'sample'"),
    ({"precision": "fp8"}, ValueError, "precision must be one of"),
    ({"max_len": 49}, ValueError, "max_len=49 is larger than the model's"),
    ({"strategy": "beam", "alpha": float("nan")}, ValueError, "alpha must be a finite number"),
    ({"strategy": "beam", "length_penalty": float("nan")}, ValueError, "length_penalty: alpha must be"),
    ({"strategy": "beam", "beam_size": 10_000}, ValueError,
     "beam_size=10000 is larger than the number of tokens a beam can take"),
    ({"strategy": "sample", "temperature": 0.0}, ValueError, "temperature"),
    ({"strategy": "sample", "top_k": -1}, ValueError, "top_k"),
    ({"strategy": "sample", "top_p": 1.5}, ValueError, "top_p"),
])
def test_bad_arguments(model, tokenizer, kwargs, error, needle):
    with pytest.raises(error, match=needle):
        translate_lines(model, tokenizer, ["drei"], **kwargs)


def test_the_models_mode_is_restored(model, tokenizer):
    """translate_lines decodes in eval mode and leaves a model in training mode as it found it."""
    model.train()
    try:
        for kwargs in ({}, {"strategy": "beam", "beam_size": 2}, {"strategy": "sample"}):
            translate_lines(model, tokenizer, ["drei", "vier"], **kwargs)
            assert model.training, kwargs
    finally:
        model.eval()


def test_a_tokenizer_that_does_not_fit_the_model_is_refused(tokenizer):
    config = TransformerConfig(100, 100, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=16,
                               max_len=48)
    small = Transformer(config).eval()
    with pytest.raises(ValueError, match="line 1: the tokenizer gives id .*src_vocab_size 100"):
        translate_lines(small, tokenizer, ["dreitausendvierhundert"])


def test_one_string_is_refused(model, tokenizer):
    # issue 14: one str used to be translated character by character
    with pytest.raises(TypeError, match="lines must be a list of str, got one str"):
        translate_lines(model, tokenizer, "drei")


def test_a_line_longer_than_max_len_is_never_cut_silently(model, tokenizer):
    long_line = " ".join(p.src for p in PAIRS[:20])
    n = len(tokenizer.encode(long_line))
    assert n > model.config.max_len
    lines = ["drei", long_line, "vier"]
    with pytest.raises(ValueError, match=rf"line 2: {n} tokens, longer than the model's max_len 48"):
        translate_lines(model, tokenizer, lines)
    with pytest.warns(LineTooLongWarning, match=rf"line 2: {n} tokens.*cut to its first 48 tokens"):
        warned = translate_lines(model, tokenizer, lines, on_too_long="warn")
    seen = []
    called = translate_lines(model, tokenizer, lines, on_too_long=lambda i, k: seen.append((i, k)))
    assert seen == [(2, n)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cut = translate_lines(model, tokenizer, lines, on_too_long="truncate")
    assert warned == called == cut and len(cut) == 3
    with pytest.raises(ValueError, match="on_too_long must be"):
        translate_lines(model, tokenizer, lines, on_too_long="skip")


@pytest.mark.parametrize("beam", [1, 4])
def test_a_line_translates_the_same_alone_and_in_any_batch(model, tokenizer, beam):
    # issue 14: beam output changed when hypotheses reached the batch's length limit
    lines = sorted({p.src for p in PAIRS[:200]}, key=len)
    lines = lines[:6] + lines[-6:]                  # short and long sentences in one batch
    config = GenerationConfig(strategy="beam", beam_size=beam)
    together = translate_lines(model, tokenizer, lines, config, batch_size=len(lines))
    alone = [translate_lines(model, tokenizer, [line], config)[0] for line in lines]
    assert together == alone


def test_sampled_translations_are_valid_text(model, tokenizer):
    # issue 14: sampling with the default settings gave U+FFFD in 24 of 200 lines
    out = translate_lines(model, tokenizer, [p.src for p in PAIRS[:60]], strategy="sample", seed=1)
    assert not any("\ufffd" in line for line in out)


# ---------------------------------------------------------------- BLEU
def test_corpus_bleu():
    refs = ["three thousand, seven hundred and twenty-four", "November 30, 2026"]
    score, signature = corpus_bleu(refs, refs)
    assert score == pytest.approx(100.0)
    assert "tok:13a" in signature and "nrefs:1" in signature
    worse, _ = corpus_bleu(["three thousand, seven hundred and twenty-five", "November 3, 2026"], refs)
    assert 0 < worse < 100
    with pytest.raises(ValueError, match="as many"):
        corpus_bleu(refs, refs[:1])


def test_corpus_bleu_without_sacrebleu_names_the_extra(monkeypatch):
    for name in list(sys.modules):
        if name == "sacrebleu" or name.startswith("sacrebleu."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "sacrebleu", None)
    with pytest.raises(ImportError, match=r"pip install 'transformer_lib\[bleu\]'"):
        corpus_bleu(["a"], ["a"])


# ---------------------------------------------------------------- bootstrap confidence intervals
def test_bootstrap_ci_of_a_proportion_agrees_with_the_normal_approximation():
    values = np.random.default_rng(1).random(400) < 0.8           # exact match of 400 sentences
    p = values.mean()
    est, low, high = bootstrap_ci(values, n_resamples=4000, seed=0)
    half = 1.96 * math.sqrt(p * (1 - p) / len(values))             # the textbook interval
    assert est == pytest.approx(p)
    assert low == pytest.approx(p - half, abs=0.01) and high == pytest.approx(p + half, abs=0.01)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=30), st.integers(0, 2**32 - 1))
def test_bootstrap_ci_of_the_mean_lies_within_the_data_and_nests_by_level(values, seed):
    est, low, high = bootstrap_ci(values, n_resamples=200, seed=seed)
    assert est == pytest.approx(float(np.mean(values)), abs=1e-9)
    lo, hi = min(values), max(values)
    slack = 1e-9 * (1 + abs(lo) + abs(hi))               # the mean of equal values, rounded
    assert lo - slack <= low <= high <= hi + slack             # a resample's mean: within the data
    _, low90, high90 = bootstrap_ci(values, n_resamples=200, level=0.9, seed=seed)
    assert low <= low90 <= high90 <= high                      # same draws: 90% inside 95%
    assert bootstrap_ci(values, n_resamples=200, seed=seed) == (est, low, high)   # by seed


def test_bootstrap_ci_takes_a_statistic_of_rows():
    rows = np.array([[1, 2], [3, 4], [5, 6]])
    est, low, high = bootstrap_ci(rows, lambda r: float(r[:, 0].sum() / r[:, 1].sum()), seed=0)
    assert est == pytest.approx(9 / 12)
    assert 1 / 2 <= low <= est <= high <= 5 / 6       # a ratio of sums of resampled rows


@pytest.mark.parametrize("kwargs, match", [
    (dict(values=[]), "values"),
    (dict(values=[1.0], n_resamples=1), "n_resamples"),
    (dict(values=[1.0], level=1.0), "level"),
    (dict(values=[1.0], level=0.0), "level"),
])
def test_bootstrap_ci_refuses_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_ci(**kwargs)


def _noisy_corpus(n=200, seed=0):
    """References and hypotheses of which about half have one word changed."""
    rng = random.Random(seed)
    refs = [p.tgt for p in generate_pairs(n, seed=seed)]
    hyps = []
    for ref in refs:
        words = ref.split()
        if rng.random() < 0.5:
            words[rng.randrange(len(words))] = "xyzzy"
        hyps.append(" ".join(words))
    return hyps, refs


def test_bleu_ci_is_corpus_bleu_with_the_interval_of_sacrebleus_bootstrap():
    sacrebleu = pytest.importorskip("sacrebleu")
    hyps, refs = _noisy_corpus()
    est, low, high = bleu_ci(hyps, refs, n_resamples=2000, seed=0)
    assert est == pytest.approx(corpus_bleu(hyps, refs)[0])
    assert 0 <= low < est < high <= 100
    # sacrebleu's own bootstrap (another random stream): the same half-width, up to sampling noise
    theirs = sacrebleu.metrics.BLEU().corpus_score(hyps, [refs], n_bootstrap=2000)
    assert (high - low) / 2 == pytest.approx(theirs._ci, rel=0.2)


def test_bleu_ci_of_perfect_translations_is_100_and_bad_input_is_refused():
    # each at least four tokens long, so every resample has 4-grams (a resample of one-word
    # sentences alone would have none, and a BLEU of 0)
    refs = ["three thousand, seven hundred and twenty-four", "November 30, 2026", "one hundred and five"]
    assert bleu_ci(refs, refs, n_resamples=50) == pytest.approx((100.0, 100.0, 100.0))
    with pytest.raises(ValueError, match="as many"):
        bleu_ci(refs, refs[:2])
    with pytest.raises(ValueError, match="hypotheses"):
        bleu_ci([], [])


def test_a_tokenizer_path_that_links_out_of_the_model_directory_is_refused(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path / "m")
    outside = tmp_path / "outside.json"
    outside.write_bytes((d / TOKENIZER_FILE).read_bytes())
    (d / "tok.json").symlink_to(outside)
    (d / TOKENIZER_KIND_FILE).write_text('{"kind": "bpe", "path": "tok.json"}')
    with pytest.raises(ModelDirError, match="must lie inside the model directory"):
        load_model_dir(d, "cpu")


def test_a_damaged_tokenizer_named_by_its_record_is_named_once(model_dir, tmp_path):
    d = _copy(model_dir, tmp_path / "m")
    (d / TOKENIZER_KIND_FILE).write_text('{"kind": "bpe", "path": "tokenizer.json"}')
    (d / TOKENIZER_FILE).write_text("[]")
    with pytest.raises(ModelDirError) as info:
        load_model_dir(d, "cpu")
    assert str(info.value).count(str(d / TOKENIZER_FILE)) == 1, str(info.value)
