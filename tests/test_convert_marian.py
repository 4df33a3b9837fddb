"""convert-marian on damaged, incomplete, foreign and malicious inputs (appendix: pretrained models): every case is
refused before anything is written, in one line that names the file or argument and what was expected, with nothing
of transformers' load report on stderr. Tiny random models and a SentencePiece tokenizer trained here: nothing is
downloaded."""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from tiny_marian import save_tiny_marian, tiny_marian_tokenizer

from transformer_lib.cli.main import main

spm = pytest.importorskip("sentencepiece")
transformers = pytest.importorskip("transformers")

import transformer_lib as tl  # noqa: E402
from transformer_lib.marian import convert_marian, load_marian_dir  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROG = "python -m transformer_lib convert-marian"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """Complete tiny Marian directories (decoders of 2, 1 and 3 layers), a tiny Llama directory and the tokenizer's
    files: the tests copy them before they damage them."""
    base = tmp_path_factory.mktemp("marian")
    n = tiny_marian_tokenizer(base / "tok")
    llama = base / "llama"
    transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=32)).save_pretrained(llama)
    return {"ok": save_tiny_marian(base / "ok", base / "tok", n),
            "one_layer": save_tiny_marian(base / "one", base / "tok", n, decoder_layers=1),
            "three_layers": save_tiny_marian(base / "three", base / "tok", n, decoder_layers=3),
            "llama": llama, "tok": base / "tok"}


def _copy(made, name, tmp_path) -> Path:
    return Path(shutil.copytree(made[name], tmp_path / "src"))


def _edit_config(src: Path, **changes) -> None:
    config = json.loads((src / "config.json").read_text())
    config.update(changes)
    (src / "config.json").write_text(json.dumps(config))


def _refused(src: Path, tmp_path: Path, capfd, *needles: str) -> str:
    """Run the command on ``src``: exit status 1, exactly one stderr line holding ``needles``, nothing written."""
    out = tmp_path / "out"
    capfd.readouterr()
    assert main(["convert-marian", str(src), "--out", str(out)], prog="python -m transformer_lib") == 1
    captured = capfd.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{PROG}: error: "), captured.err
    assert captured.out == "", captured.out
    for needle in needles:
        assert needle in lines[0], lines[0]
    for never in ("LOAD REPORT", "weights_only", "ignore_mismatched_sizes", "Traceback", "NoneType"):
        assert never not in captured.err, captured.err
    assert not out.exists()
    return lines[0]


def test_a_complete_directory_converts_silently(made, tmp_path, capfd):
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = convert_marian(made["ok"], tmp_path / "out")
    assert capfd.readouterr().err == "" and not caught, [str(w.message) for w in caught]
    model, _ = load_marian_dir(out, device="cpu")
    assert model.config.n_decoder_layers == 2


def test_a_pytorch_model_bin_of_tensors_converts(made, tmp_path):
    """A checkpoint saved as pytorch_model.bin (tensors only) is read, as before."""
    from safetensors.torch import load_file
    src = _copy(made, "ok", tmp_path)
    torch.save(load_file(src / "model.safetensors"), src / "pytorch_model.bin")
    (src / "model.safetensors").unlink()
    model, _ = load_marian_dir(convert_marian(src, tmp_path / "out"), device="cpu")
    reference, _ = load_marian_dir(convert_marian(made["ok"], tmp_path / "ref"), device="cpu")
    for (name, a), b in zip(model.state_dict().items(), reference.state_dict().values()):
        assert torch.equal(a, b), name


def test_k02_a_llama_directory_is_not_marian(made, tmp_path, capfd):
    src = _copy(made, "llama", tmp_path)
    _refused(src, tmp_path, capfd, f"{src}: not a Marian model directory (config.json says model_type 'llama')")


def test_k02b_a_llama_next_to_marian_tokenizer_files(made, tmp_path, capfd):
    src = _copy(made, "llama", tmp_path)
    for name in ("source.spm", "target.spm", "vocab.json"):
        shutil.copy(made["tok"] / name, src / name)
    _refused(src, tmp_path, capfd, "model_type 'llama'")


@pytest.mark.parametrize("text", ["{not json", "[" * 100_000 + "]" * 100_000, "[1, 2]"])
def test_k03_a_damaged_config_is_named(made, tmp_path, capfd, text):
    src = _copy(made, "ok", tmp_path)
    (src / "config.json").write_text(text)
    _refused(src, tmp_path, capfd, f"{src / 'config.json'}: damaged")


def test_no_config_json(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    (src / "config.json").unlink()
    _refused(src, tmp_path, capfd, f"{src}: not a Marian model directory (no config.json)")


def test_k04_truncated_weights_name_the_file(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    weights = src / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    _refused(src, tmp_path, capfd, f"{weights}: damaged")


def test_a_truncated_pytorch_model_bin_names_the_file(made, tmp_path, capfd):
    from safetensors.torch import load_file
    src = _copy(made, "ok", tmp_path)
    weights = src / "pytorch_model.bin"
    torch.save(load_file(src / "model.safetensors"), weights)
    (src / "model.safetensors").unlink()
    weights.write_bytes(weights.read_bytes()[:weights.stat().st_size // 2])
    _refused(src, tmp_path, capfd, f"{weights}: damaged")


def test_no_weights_file(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    (src / "model.safetensors").unlink()
    _refused(src, tmp_path, capfd, f"{src}: no weights file", "model.safetensors", "pytorch_model.bin")


def test_k08_missing_weights_are_refused(made, tmp_path, capfd):
    """A 1-layer decoder's weights under a config.json that says 2: transformers would fill layer 1 at random."""
    src = _copy(made, "ok", tmp_path)
    shutil.copy(made["one_layer"] / "model.safetensors", src / "model.safetensors")
    line = _refused(src, tmp_path, capfd, f"{src / 'model.safetensors'}: missing weights model.decoder.layers.1.",
                    "(26 in all)", "config.json")
    assert line.count("model.decoder.layers.1.") <= 5


def test_unexpected_weights_are_refused(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    shutil.copy(made["three_layers"] / "model.safetensors", src / "model.safetensors")
    _refused(src, tmp_path, capfd, f"{src / 'model.safetensors'}: unexpected weights model.decoder.layers.2.",
             "(26 in all)")


def test_k09_missing_tokenizer_files_are_named(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    (src / "vocab.json").unlink()
    line = _refused(src, tmp_path, capfd, f"{src}: ", "no vocab.json")
    assert "source.spm" not in line
    (src / "source.spm").unlink()
    (src / "target.spm").unlink()
    _refused(src, tmp_path, capfd, "no source.spm, target.spm, vocab.json")


def test_a_damaged_vocab_json_is_named(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    (src / "vocab.json").write_text("{not json")
    _refused(src, tmp_path, capfd, f"{src / 'vocab.json'}: damaged")


def test_a_damaged_sentencepiece_model_is_named(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    (src / "source.spm").write_text("not a model")
    _refused(src, tmp_path, capfd, "source.spm")


class _Evil:
    """Unpickling this would create the file ``marker``: a stand-in for a malicious payload."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", [2, 4])
def test_k10_a_malicious_pytorch_model_bin_is_refused_without_unsafe_advice(made, tmp_path, capfd, protocol):
    src = _copy(made, "ok", tmp_path)
    (src / "model.safetensors").unlink()
    marker = tmp_path / "pwned"
    (src / "pytorch_model.bin").write_bytes(pickle.dumps(_Evil(marker), protocol=protocol))
    with warnings.catch_warnings(record=True) as caught:     # a warning would be a second stderr line
        warnings.simplefilter("always")
        line = _refused(src, tmp_path, capfd, f"{src / 'pytorch_model.bin'}: refused as unsafe")
    assert not caught, [str(w.message) for w in caught]
    assert "weights_only" not in line and "False" not in line
    assert "system" in line or protocol > 2        # the name it would call, where torch saw it
    assert not marker.exists()


@pytest.mark.parametrize("content", [b"not a pickle, not a zip file", b"\x80\x02}q\x00"])
def test_a_pytorch_model_bin_that_is_no_checkpoint_is_named(made, tmp_path, capfd, content):
    """Damaged or foreign bytes: refused by the same safe loader, with the file named."""
    src = _copy(made, "ok", tmp_path)
    (src / "model.safetensors").unlink()
    (src / "pytorch_model.bin").write_bytes(content)
    _refused(src, tmp_path, capfd, f"{src / 'pytorch_model.bin'}: ", "damaged")


def test_k14_weights_of_another_size_are_named(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    _edit_config(src, d_model=32)
    _refused(src, tmp_path, capfd, f"{src / 'model.safetensors'}: weights of other sizes",
             "(16 in the checkpoint, 32 in config.json)", "16x16 in the checkpoint, 32x32", "(66 in all)")


def test_k16_a_config_the_book_cannot_build_names_config_json(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    _edit_config(src, encoder_attention_heads=3, decoder_attention_heads=3)
    _refused(src, tmp_path, capfd, "config.json", "heads")


def test_from_marian_says_what_it_got():
    """Not "must be a MarianMTModel, got MarianMTModel": the class's module and the config's model_type."""
    cfg = transformers.MarianConfig(vocab_size=20, d_model=8, encoder_layers=1, decoder_layers=1,
                                    encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=16,
                                    decoder_ffn_dim=16, max_position_embeddings=16, pad_token_id=19)
    hf = transformers.MarianMTModel(cfg)
    hf.config = transformers.LlamaConfig()
    with pytest.raises(TypeError) as err:
        tl.from_marian(hf)
    message = str(err.value)
    assert "model_type 'llama'" in message and "MarianMTModel, got MarianMTModel" not in message, message
    with pytest.raises(TypeError, match="torch.nn.modules.linear.Linear"):
        tl.from_marian(torch.nn.Linear(2, 2))


@pytest.mark.slow
def test_python_dash_m_refuses_missing_weights_in_one_line(made, tmp_path):
    src = _copy(made, "ok", tmp_path)
    shutil.copy(made["one_layer"] / "model.safetensors", src / "model.safetensors")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, "-m", "transformer_lib", "convert-marian", str(src), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    assert run.returncode == 1
    assert len(run.stderr.splitlines()) == 1, run.stderr
    assert "missing weights" in run.stderr and run.stdout == ""
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------- sizes that cannot fit (issue 26, G18-G24)
HUGE = dict(src_vocab_size=10**9, tgt_vocab_size=10**9, d_model=1024, n_heads=8, d_ff=4096)


def test_the_marian_transformer_refuses_a_model_that_cannot_fit_before_allocating():
    """The appendix's constructor replaces chapter 9's: it too checks the size first (a 4 TB embedding)."""
    config = tl.TransformerConfig(**HUGE, positional_layout="half", output_bias=True)
    with pytest.raises(ValueError, match="of memory this process may use"):
        tl.Transformer(config)


def test_load_marian_dir_refuses_a_config_that_cannot_fit_naming_it(made, tmp_path):
    out = convert_marian(made["ok"], tmp_path / "out")
    config = json.loads((out / "config.json").read_text())
    config.update(HUGE)
    (out / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"^{out / 'config.json'}: a model of .* does not fit"):
        load_marian_dir(out, device="cpu")
    (out / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=f"^{out / 'config.json'}: damaged"):
        load_marian_dir(out, device="cpu")


def test_convert_refuses_a_marian_config_that_cannot_fit(made, tmp_path, capfd):
    src = _copy(made, "ok", tmp_path)
    _edit_config(src, vocab_size=10**9, decoder_vocab_size=10**9, d_model=1024)
    _refused(src, tmp_path, capfd, f"{src / 'config.json'}: a model of", "does not fit")


@pytest.mark.parametrize("settings, needle", [({"num_beams": 0}, "beam_size must be an int >= 1"),
                                              ({"length_penalty": "long"}, "alpha must be a finite number"),
                                              ({"max_length": "512"}, "decoding settings the book cannot hold")])
def test_decoding_settings_the_book_cannot_hold_are_refused(made, tmp_path, capfd, settings, needle):
    src = _copy(made, "ok", tmp_path)
    file = src / "generation_config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), **settings}))
    _refused(src, tmp_path, capfd, "generation_config.json", needle)


def test_the_converted_directory_keeps_generates_settings(made, tmp_path):
    src = _copy(made, "ok", tmp_path)
    file = src / "generation_config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), "num_beams": 6, "length_penalty": 0.8,
                                "max_length": 40}))
    out = convert_marian(src, tmp_path / "out")
    stored = json.loads((out / "generation.json").read_text())
    assert {k: stored[k] for k in ("strategy", "beam_size", "length_norm", "alpha", "stop", "max_len_a",
                                   "max_len_b")} == {"strategy": "beam", "beam_size": 6, "length_norm": "power",
                                                     "alpha": 0.8, "stop": "book", "max_len_a": 0.0, "max_len_b": 39}
