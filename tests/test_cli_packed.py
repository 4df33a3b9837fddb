"""``translate --engine packed`` (transformer_lib.cli.serve, the serving appendix's PackedDecoder): the
book's decoders on packed weights give the same lines as ``--engine torch`` on a trained model (greedy, beam,
sampling with a seed), also where PyTorch's private oneDNN operators are missing, raise or answer wrongly (it
says so once on stderr and uses F.linear), and the options it cannot take are one-line usage errors."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import test_cli
from onednn_patched import MODES

from transformer_lib.cli.main import main

corpus, trained, inputs = test_cli.corpus, test_cli.trained, test_cli.inputs
_translate = test_cli.translate_out


@pytest.mark.parametrize("options", [[], ["--beam", 4], ["--sample", "--seed", 3]],
                         ids=["greedy", "beam", "sample"])
def test_packed_engine_translates_as_the_torch_engine(trained, inputs, capsys, options):
    """Equal lines on a trained model (a near tie, which could part them, is not expected on 8 lines)."""
    ours = _translate(capsys, inputs, "--model", trained, *options)
    packed = _translate(capsys, inputs, "--model", trained, "--engine", "packed", *options)
    assert len(packed) == len(inputs.read_text().splitlines()) and packed == ours


def test_the_default_engine_on_the_cpu_is_packed(trained, inputs, capsys, monkeypatch):
    """No --engine on the CPU: the lines come from a PackedDecoder (counted), the same as --engine torch's;
    --engine torch makes none."""
    import transformer_lib.cli.serve as serve
    made = []

    class Counted(serve.PackedDecoder):
        def __init__(self, *args, **kwargs):
            made.append(args[1:] or kwargs)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(serve, "PackedDecoder", Counted)
    default = _translate(capsys, inputs, "--model", trained, "--device", "cpu")
    assert len(made) == 1
    torch_lines = _translate(capsys, inputs, "--model", trained, "--engine", "torch")
    assert len(made) == 1 and default == torch_lines


def test_int8_on_the_packed_engine_translates(trained, inputs, capsys):
    """--precision int8 on the default (packed) engine and on --engine packed: one line per input, from int8
    weights (the serving appendix measures how often they differ from float32's)."""
    n = len(inputs.read_text().splitlines())
    for engine in ([], ["--engine", "packed"]):
        lines = _translate(capsys, inputs, "--model", trained, *engine, "--precision", "int8")
        assert len(lines) == n and all(isinstance(line, str) for line in lines)


def test_int8_off_the_cpu_is_a_usage_error(trained, inputs, capsys):
    capsys.readouterr()
    assert main(["translate", str(inputs), "--model", str(trained), "--engine", "packed",
                 "--precision", "int8", "--device", "cuda"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--precision int8" in err and "--device cuda" in err, err


def test_the_default_engine_without_onednn_translates_and_says_so_once(trained, inputs, capsys):
    """The default engine in a PyTorch without the private oneDNN operators (tests/onednn_patched.py "missing"):
    the lines of --engine torch, and one line on stderr that says why the products are F.linear's."""
    ours = _translate(capsys, inputs, "--model", trained, "--engine", "torch")
    run = subprocess.run([sys.executable, str(Path(__file__).with_name("onednn_patched.py")), "missing",
                          "translate", str(inputs), "--model", str(trained), "--threads", "1"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert run.stdout.split("\n")[:-1] == ours
    said = [line for line in run.stderr.splitlines() if "PackedLinear uses F.linear" in line]
    assert len(said) == 1 and MODES["missing"][1] in said[0], run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_packed_engine_without_sound_onednn_operators_translates_and_says_so_once(trained, inputs, capsys, mode):
    """``python -m transformer_lib translate --engine packed`` in a PyTorch whose private oneDNN operators are
    missing, raise on the call packing makes, or drop the bias (tests/onednn_patched.py, which also sets
    PACKED_MIN_WORK to 0 so that every product would otherwise be oneDNN's): the lines of ``--engine torch``,
    and the warning once, with its reason, however many layers are packed. With the real operators ("real"):
    the same lines, and no warning."""
    ours = _translate(capsys, inputs, "--model", trained)
    run = subprocess.run([sys.executable, str(Path(__file__).with_name("onednn_patched.py")), mode, "translate",
                          str(inputs), "--model", str(trained), "--engine", "packed", "--threads", "1"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert run.stdout.split("\n")[:-1] == ours
    said = [line for line in run.stderr.splitlines() if "PackedLinear uses F.linear" in line]
    reason = MODES[mode][1]
    assert len(said) == (0 if reason is None else 1), run.stderr
    assert reason is None or reason in said[0], said
