"""Tests of transformer_lib.translate, the API of a program that translates: the model directory
(save_model_dir, load_model_dir and their errors), batched translation (translate_lines) and BLEU."""
import json
import sys

import pytest
import torch

from transformer_lib.corpus import generate_pairs
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.tokenizer import BPETokenizer
from transformer_lib.translate import (
    CONFIG_FILE,
    TOKENIZER_FILE,
    TRAINING_FILE,
    WEIGHTS_FILE,
    ModelDirError,
    corpus_bleu,
    load_config_and_tokenizer,
    load_model_dir,
    save_config_and_tokenizer,
    save_model_dir,
    translate_lines,
)

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
    with pytest.raises(ModelDirError, match="280 tokens, but config.json says 300"):
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
    with pytest.raises(ModelDirError, match="not made for config.json"):
        load_model_dir(d, "cpu")


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
    beam = translate_lines(model, tokenizer, lines, beam=3, batch_size=3)
    assert len(beam) == len(lines) and beam[4] == ""


def test_max_len_bounds_the_output(model, tokenizer):
    out = translate_lines(model, tokenizer, [p.src for p in PAIRS[:5]], max_len=3)
    for text in out:
        assert len(tokenizer.encode(text)) <= 3


def test_sampling_is_seeded(model, tokenizer):
    lines = [p.src for p in PAIRS[:6]]
    a = translate_lines(model, tokenizer, lines, sampling=True, seed=3, temperature=2.0)
    assert a == translate_lines(model, tokenizer, lines, sampling=True, seed=3, temperature=2.0)
    assert any(translate_lines(model, tokenizer, lines, sampling=True, seed=s, temperature=2.0) != a
               for s in range(4, 8))


@pytest.mark.parametrize("kwargs, error, needle", [
    ({"beam": 0}, ValueError, "beam must be an int >= 1"),
    ({"beam": True}, ValueError, "beam must be"),
    ({"batch_size": 0}, ValueError, "batch_size must be"),
    ({"max_len": 0}, ValueError, "max_len must be"),
    ({"sampling": True, "beam": 2}, ValueError, "beam search .* or sampling"),
    ({"precision": "fp8"}, ValueError, "precision must be one of"),
])
def test_bad_arguments(model, tokenizer, kwargs, error, needle):
    with pytest.raises(error, match=needle):
        translate_lines(model, tokenizer, ["drei"], **kwargs)


def test_one_string_is_refused(model, tokenizer):
    with pytest.raises(TypeError, match="lines must be a list of str"):
        translate_lines(model, tokenizer, "drei")


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
