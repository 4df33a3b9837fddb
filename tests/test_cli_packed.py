"""``translate --engine packed`` (transformer_lib.cli.serve, the serving appendix's PackedDecoder): the
book's decoders on packed weights give the same lines as ``--engine torch`` on a trained model (greedy, beam,
sampling with a seed), and the options it cannot take are one-line usage errors."""
import pytest
import test_cli

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


def test_packed_engine_refuses_int8(trained, inputs, capsys):
    capsys.readouterr()
    assert main(["translate", str(inputs), "--model", str(trained), "--engine", "packed",
                 "--precision", "int8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--precision int8" in err and "--engine packed" in err, err
