"""transformer_lib.serving: the export to CTranslate2 (book/appendix_serving.ipynb)."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch

import transformer_lib as tl
from transformer_lib.translation.corpus import generate_pairs
from transformer_lib.translation.tokenizer import BPETokenizer

pytest.importorskip("ctranslate2")
from transformer_lib.serving import (
    CTRANSLATE2_BEAM,
    CTranslate2Model,
    compare_outputs,
    export_ctranslate2,
    quantize_int8,
    token_strings,
)

SHAPES = {
    "post-norm": dict(),
    "pre-norm": dict(norm_first=True),
    "shared-untied": dict(share_embeddings=True, tie_output=False),
    "rms-gelu": dict(norm="rms", activation="gelu", norm_first=True),
    "silu-final-norm": dict(activation="silu", norm_first=True, final_norm=True),
    "marian": dict(positional_layout="half", output_bias=True, pad_id=0, bos_id=0, eos_id=1, final_norm=False),
}


def _model(seed: int, **options) -> tl.Transformer:
    torch.manual_seed(seed)
    src_vocab = 40 if options.get("share_embeddings") else 37
    config = tl.TransformerConfig(src_vocab, 40, d_model=32, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
                                  d_ff=64, dropout=0.0, max_len=64, **options)
    model = tl.Transformer(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("name", SHAPES)
def test_greedy_equals_the_books_and_beam_mostly(name, tmp_path):
    model = _model(1, **SHAPES[name])
    engine = CTranslate2Model(export_ctranslate2(model, None, tmp_path / "m"), model.config)
    src = torch.randint(3, 37, (12, 9))
    src[2, 5:] = model.config.pad_id
    greedy = compare_outputs(model, src, tl.greedy_decode(model, src), engine.decode(src))
    assert greedy["different"] == 0, greedy
    beam = tl.beam_search(model, src, config=CTRANSLATE2_BEAM)[0]
    counts = compare_outputs(model, src, beam, engine.decode(src, CTRANSLATE2_BEAM), 1.0)
    assert sum(counts.values()) == 12
    assert counts["different"] == 0, counts


def test_trained_model_with_its_tokenizer(tmp_path):
    pairs = generate_pairs(100, seed=3)
    tokenizer = BPETokenizer.train([p.src for p in pairs] + [p.tgt for p in pairs], vocab_size=300)
    v = tokenizer.vocab_size
    torch.manual_seed(0)
    model = tl.Transformer(tl.TransformerConfig(v, v, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                                                d_ff=32, dropout=0.0, max_len=48, share_embeddings=True)).eval()
    out = export_ctranslate2(model, tokenizer, tmp_path / "m")
    assert (out / "model.bin").is_file() and (out / "book" / "tokenizer.json").is_file()
    engine = CTranslate2Model.load(out)
    assert engine.src_tokens == token_strings(tokenizer, v)
    src = torch.nn.utils.rnn.pad_sequence([torch.tensor(tokenizer.encode(p.src)) for p in pairs[:8]], True, 0)
    assert compare_outputs(model, src, tl.greedy_decode(model, src), engine.decode(src))["different"] == 0
    again = export_ctranslate2(model, tokenizer, out, quantization="int8")   # replaces the old export
    assert again == out and CTranslate2Model.load(out).decode(src).shape[0] == 8
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]       # no temporaries left


def test_bad_input_is_one_line(tmp_path):
    model = _model(0)
    with pytest.raises(ValueError, match="quantization must be one of"):
        export_ctranslate2(model, None, tmp_path / "m", quantization="int4")
    with pytest.raises(TypeError, match="model must be a Transformer"):
        export_ctranslate2(torch.nn.Linear(2, 2), None, tmp_path / "m")
    with pytest.raises(ValueError, match="final norm after a Post-Norm"):
        export_ctranslate2(_model(0, final_norm=True), None, tmp_path / "m")
    with pytest.raises(ValueError, match="no model.bin"):
        CTranslate2Model(tmp_path, model.config)
    engine = CTranslate2Model(export_ctranslate2(model, None, tmp_path / "m"), model.config)
    with pytest.raises(ValueError, match="max_len"):
        engine.decode(torch.randint(3, 37, (2, 5)), max_len=1000)


def test_quantize_int8_keeps_the_model_and_decodes():
    model = _model(2)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        small = quantize_int8(model)
        out = tl.greedy_decode(small, torch.randint(3, 37, (4, 7)))
    assert out.shape[0] == 4 and out[:, 0].eq(model.config.bos_id).all()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(TypeError, match="model must be a Transformer"):
        quantize_int8(torch.nn.Linear(2, 2))


def test_quantize_int8_passes_pytorchs_warnings_on():
    """quantize_int8 silences nothing: it warns what torch.ao.quantization.quantize_dynamic warns on a copy of the
    same model (PyTorch 2.13: that torch.ao.quantization is deprecated in favour of torchao, and that quantized
    tensors are; PyTorch 2.5: nothing)."""
    model = _model(3)

    def warned(quantize) -> set[tuple[str, str]]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            quantize()
        return {(w.category.__name__, str(w.message)) for w in caught}

    theirs = warned(lambda: torch.ao.quantization.quantize_dynamic(copy.deepcopy(model), {torch.nn.Linear},
                                                                   dtype=torch.qint8))
    assert warned(lambda: quantize_int8(model)) == theirs
