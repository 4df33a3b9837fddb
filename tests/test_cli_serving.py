"""Tests of the command line's serving commands (transformer_lib.cli.serve): export-ctranslate2, translate
--engine ctranslate2 (equal to the book's decoders, greedy and beam), translate --precision int8, and their
one-line errors."""
import pytest
import test_cli
import torch

from transformer_lib.cli.main import main
from transformer_lib.decoding.beam import beam_search
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.translation.model_dir import load_generation_config, load_model_dir

corpus, trained, inputs = test_cli.corpus, test_cli.trained, test_cli.inputs
_translate = test_cli.translate_out
ct2 = pytest.importorskip("ctranslate2")


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("ct2") / "export"
    assert main(["export-ctranslate2", str(trained), "--out", str(out)]) == 0
    return out


def test_export_writes_a_ctranslate2_model(exported, trained, capsys):
    assert (exported / "model.bin").is_file() and (exported / "book").is_dir()
    # the model's decoding defaults travel with it: translate --engine ctranslate2 reads them
    assert load_generation_config(exported) == load_generation_config(trained)


def test_ctranslate2_greedy_equals_torch(exported, trained, inputs, capsys):
    ours = _translate(capsys, inputs, "--model", trained, "--device", "cpu")
    theirs = _translate(capsys, inputs, "--model", exported, "--engine", "ctranslate2")
    assert len(theirs) == len(inputs.read_text().splitlines()) and theirs == ours


def test_ctranslate2_beam_equals_the_books_beam(exported, trained, inputs, capsys):
    """CTranslate2's beam search is the book's with length_norm="power" and early stopping."""
    theirs = _translate(capsys, inputs, "--model", exported, "--engine", "ctranslate2", "--beam-size", 4,
                        "--length-norm", "power", "--alpha", 1.0, "--stop", "first_k")
    model, tokenizer = load_model_dir(trained, "cpu")
    ours = []
    for line in inputs.read_text().splitlines():
        if not line.strip():
            ours.append("")
            continue
        src = torch.tensor([tokenizer.encode(line.strip())])
        ids, _ = beam_search(model, src, config=GenerationConfig(strategy="beam", beam_size=4, alpha=1.0,
                                                                 length_norm="power", stop="first_k"))
        ours.append(tokenizer.decode(ids[0].tolist()))
    assert theirs == ours


@pytest.mark.parametrize("flags", [
    (), ("--beam-size", 4, "--length-norm", "power", "--alpha", 1.0, "--stop", "first_k"),
    ("--beam-size", 3, "--length-norm", "none", "--stop", "first_k", "--max-len", 6),
    ("--beam-size", 2, "--length-norm", "power", "--stop", "first_k", "--max-len-a", 1, "--max-len-b", 3)])
def test_the_same_flags_give_the_same_lines_on_every_engine(exported, trained, inputs, capsys, flags):
    """translate --engine torch, packed and ctranslate2 with the same decoding flags: the same lines (this tiny
    model has no near tie among these inputs)."""
    torch_lines = _translate(capsys, inputs, "--model", trained, "--device", "cpu", *flags)
    packed = _translate(capsys, inputs, "--model", trained, "--device", "cpu", "--engine", "packed", *flags)
    ct2_lines = _translate(capsys, inputs, "--model", exported, "--engine", "ctranslate2", *flags)
    assert torch_lines == packed == ct2_lines and len(torch_lines) == len(inputs.read_text().splitlines())


def test_precision_int8_gives_one_line_per_input(trained, inputs, capsys):
    out = _translate(capsys, inputs, "--model", trained, "--precision", "int8", "--beam", 2)
    assert len(out) == len(inputs.read_text().splitlines())


def _error(capsys, argv, status, *needles):
    capsys.readouterr()
    assert main(argv) == status
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


def test_errors_are_one_line(exported, trained, inputs, tmp_path, capsys):
    _error(capsys, ["export-ctranslate2", str(trained), "--out", str(exported)], 1, "--out", "not empty")
    _error(capsys, ["export-ctranslate2", str(tmp_path / "nothing"), "--out", str(tmp_path / "x")], 1,
           "nothing")
    _error(capsys, ["translate", str(inputs), "--model", str(exported), "--engine", "ctranslate2",
                    "--sample"], 2, "--sample")
    # a rule CTranslate2 does not have is refused, never replaced by its own
    ct2_beam = ["translate", str(inputs), "--model", str(exported), "--engine", "ctranslate2", "--beam-size", "4"]
    _error(capsys, ct2_beam, 2, "--length-norm gnmt", "--engine ctranslate2", "n ** alpha")
    _error(capsys, [*ct2_beam, "--length-norm", "power"], 2, "--stop book", "--stop first_k")
    _error(capsys, ["translate", str(inputs), "--model", str(trained), "--engine", "ctranslate2"], 1,
           "--model", "export-ctranslate2")
    _error(capsys, ["translate", str(inputs), "--model", str(trained), "--precision", "int8",
                    "--device", "cuda"], 2, "--precision int8")
    with pytest.raises(SystemExit) as exit_:                 # argparse's own usage error
        main(["export-ctranslate2", str(trained), "--out", str(tmp_path / "q"), "--quantization", "int4"])
    assert exit_.value.code == 2 and "--quantization" in capsys.readouterr().err


def test_missing_ctranslate2_says_how_to_install(trained, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "ctranslate2", None)
    _error(capsys, ["export-ctranslate2", str(trained), "--out", str(tmp_path / "e")], 1,
           "pip install 'transformer_lib[serve]'")
