"""Tests of transformer_lib.marian (appendix: pretrained models): a transformers MarianMTModel converted with
from_marian gives the same logits, the same greedy output and the same beam search output. Tiny random models,
built here: nothing is downloaded."""
from __future__ import annotations

import pytest
import torch

import transformer_lib as tl

transformers = pytest.importorskip("transformers")
from transformers import MarianConfig, MarianMTModel  # noqa: E402

V = 60


def _marian(seed=0, vocab=V, heads=4, d_model=32, layers=2, share=True, tie=True, eos_bias=0.0, bias_std=0.1,
            init_std=0.2, **changes):
    torch.manual_seed(seed)
    sizes = dict(vocab_size=vocab, decoder_vocab_size=vocab if share else vocab + 7, d_model=d_model,
                 encoder_layers=layers, decoder_layers=layers + 1, encoder_attention_heads=heads,
                 decoder_attention_heads=heads, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=2 * d_model,
                 max_position_embeddings=128, pad_token_id=vocab - 1, decoder_start_token_id=vocab - 1,
                 eos_token_id=0, forced_eos_token_id=None, activation_function="swish", scale_embedding=True,
                 dropout=0.0, attention_dropout=0.0, share_encoder_decoder_embeddings=share,
                 tie_word_embeddings=tie, init_std=init_std)
    cfg = MarianConfig(**{**sizes, **changes})
    hf = MarianMTModel(cfg).eval()
    with torch.no_grad():
        hf.final_logits_bias.normal_(0, bias_std)
        # the decoders never generate pad (= the start token); push it out of generate's reach as well
        hf.final_logits_bias[0, vocab - 1] = -1e4
        hf.final_logits_bias[0, 0] += eos_bias
        if not tie:
            hf.lm_head.weight.normal_(0, d_model ** -0.5)
    return hf


CONFIGS = {"shared, tied, 4 heads": {}, "shared, untied, 2 heads": dict(tie=False, heads=2, seed=1),
           "separate vocabularies, 8 heads": dict(share=False, heads=8, seed=2),
           "separate, untied, 1 head, gelu": dict(share=False, tie=False, heads=1, seed=3,
                                                  activation_function="gelu")}


def _batch(seed, n=6, width=9):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(1, V - 1, (n, width), generator=g)
    lengths = torch.randint(2, width + 1, (n,), generator=g)
    lengths[0] = width
    for b, length in enumerate(lengths.tolist()):
        src[b, length - 1] = 0                         # eos
        src[b, length:] = V - 1                        # pad
    return src


@pytest.mark.parametrize("name", CONFIGS)
def test_logits_equal_on_padded_batches(name):
    hf = _marian(**CONFIGS[name])
    ours = tl.from_marian(hf)
    c = ours.config
    enc, dec = hf.model.encoder.embed_tokens.weight, hf.model.decoder.embed_tokens.weight
    # shared and tied as the checkpoint has them (transformers ties nothing when tie_word_embeddings is False)
    assert c.share_embeddings == (enc is dec) and c.tie_output == (hf.lm_head.weight is dec)
    assert c.tie_output == CONFIGS[name].get("tie", True)
    src = _batch(0)
    g = torch.Generator().manual_seed(1)
    tgt = torch.randint(1, c.tgt_vocab_size - 1, (src.size(0), 7), generator=g)
    tgt[:, 0] = c.bos_id
    t_len = torch.randint(1, 8, (src.size(0),), generator=g)
    real = torch.arange(7)[None] < t_len[:, None]
    tgt[~real] = c.pad_id                               # right-padded targets
    with torch.no_grad():
        theirs = hf(input_ids=src, attention_mask=(src != c.pad_id).long(), decoder_input_ids=tgt).logits
        mine = ours(src, tgt)
    diff = (mine - theirs)[real].abs().max().item()
    print(f"{name}: max |logit difference| = {diff:.1e}")
    assert diff < 1e-5


def test_the_comparison_can_fail():
    """A one-weight change in the converted model is seen by the logit check."""
    hf = _marian()
    ours = tl.from_marian(hf)
    with torch.no_grad():
        ours.decoder.layers[0].feed_forward.linear2.bias[0] += 1e-3
    src = _batch(0)
    tgt = torch.full((src.size(0), 1), ours.config.bos_id)
    with torch.no_grad():
        diff = (ours(src, tgt) - hf(input_ids=src, attention_mask=(src != V - 1).long(),
                                    decoder_input_ids=tgt).logits).abs().max()
    assert diff > 1e-5


def _same(a, b, pad):
    width = max(a.size(1), b.size(1))
    a = torch.nn.functional.pad(a, (0, width - a.size(1)), value=pad)
    b = torch.nn.functional.pad(b, (0, width - b.size(1)), value=pad)
    return torch.equal(a, b)


def _generate(hf, src, **kw):
    c = hf.config
    with torch.no_grad():
        return hf.generate(input_ids=src, attention_mask=(src != c.pad_token_id).long(), do_sample=False,
                           decoder_start_token_id=c.pad_token_id, pad_token_id=c.pad_token_id,
                           eos_token_id=c.eos_token_id, forced_eos_token_id=None, **kw)


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("eos_bias", [0.0, 2.0])
def test_greedy_equals_generate(name, eos_bias):
    hf = _marian(eos_bias=eos_bias, **CONFIGS[name])
    ours = tl.from_marian(hf)
    src = _batch(3)
    theirs = _generate(hf, src, num_beams=1, max_new_tokens=30)
    mine = tl.greedy_decode(ours, src, max_len=30)
    assert _same(mine, theirs, ours.config.pad_id), (mine.tolist(), theirs.tolist())


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("eos_bias", [0.0, 2.0])
def test_beam_equals_generate_under_the_same_length_normalisation(name, eos_bias):
    """transformers scores a finished hypothesis as logp / generated_len ** length_penalty (eos counted, the start
    token not): the book's length_norm="power" with count_bos=False; both stop a sentence when its best live beam,
    scored at the current length, does not beat the worst of beam_size finished ones."""
    hf = _marian(eos_bias=eos_bias, **CONFIGS[name])
    ours = tl.from_marian(hf)
    src = _batch(4)
    theirs = _generate(hf, src, num_beams=4, max_new_tokens=30, length_penalty=1.0, early_stopping=False)
    mine, _ = tl.beam_search(ours, src, beam_size=4, max_len=30, length_penalty=1.0, length_norm="power")
    assert _same(mine, theirs, ours.config.pad_id), (mine.tolist(), theirs.tolist())


def test_beam_equality_covers_outputs_of_different_lengths():
    """The stopping rule matters only when hypotheses finish at different steps: a model (found by trying seeds)
    whose beam outputs end at several different lengths, some at the limit."""
    hf = _marian(seed=1, vocab=64, eos_bias=2.0)
    ours = tl.from_marian(hf)
    src = _batch(4)
    theirs = _generate(hf, src, num_beams=4, max_new_tokens=40, length_penalty=1.0, early_stopping=False)
    mine, _ = tl.beam_search(ours, src, beam_size=4, max_len=40, length_penalty=1.0, length_norm="power")
    ends = {row.index(0) if 0 in row else None for row in mine.tolist()}
    assert len(ends) >= 4, ends
    assert _same(mine, theirs, ours.config.pad_id)
    # the paper's GNMT penalty is another rule: it need not choose the same hypotheses, and its scores differ
    _, power = tl.beam_search(ours, src, beam_size=4, max_len=40, length_penalty=1.0, length_norm="power",
                              n_best=1)
    _, gnmt = tl.beam_search(ours, src, beam_size=4, max_len=40, length_penalty=1.0, n_best=1)
    assert not torch.allclose(power, gnmt)


def test_refuses_what_it_cannot_reproduce():
    with pytest.raises(ValueError, match="scale_embedding"):
        tl.from_marian(_marian(scale_embedding=False))
    with pytest.raises(ValueError, match="activation_function"):
        tl.from_marian(_marian(activation_function="tanh"))
    hf = _marian()
    hf.config.decoder_attention_heads = 2
    with pytest.raises(ValueError, match="attention_heads"):
        tl.from_marian(hf)
    with pytest.raises(TypeError, match="MarianMTModel"):
        tl.from_marian(torch.nn.Linear(2, 2))


# ---------------------------------------------------------------- the generation contract against generate
def _equal_rows_up_to_near_ties(ours, src, mine, theirs, alpha, gap=1e-4):
    """How many rows of two decodes are equal; a row that differs must be a near tie: its two outputs' power-form
    scores under our model within ``gap``."""
    pad = ours.config.pad_id
    width = max(mine.size(1), theirs.size(1))
    mine = torch.nn.functional.pad(mine, (0, width - mine.size(1)), value=pad)
    theirs = torch.nn.functional.pad(theirs, (0, width - theirs.size(1)), value=pad)

    def score(ids):
        return tl.token_scores(ours, src, ids).sum(-1) / (ids[:, 1:] != pad).sum(-1).double() ** alpha

    equal = (mine == theirs).all(dim=1)
    gaps = (score(mine) - score(theirs)).abs()[~equal]
    assert (gaps < gap).all(), gaps.tolist()
    return int(equal.sum())


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("eos_bias", [0.0, 2.0])
def test_first_k_stopping_equals_generate_with_early_stopping(name, eos_bias):
    """stop="first_k" is transformers' early_stopping=True: a sentence ends at beam_size finished hypotheses."""
    hf = _marian(eos_bias=eos_bias, **CONFIGS[name])
    ours = tl.from_marian(hf)
    src = _batch(5)
    theirs = _generate(hf, src, num_beams=4, max_new_tokens=30, length_penalty=1.3, early_stopping=True)
    config = tl.GenerationConfig(strategy="beam", beam_size=4, max_len_a=0, max_len_b=30, length_norm="power",
                                 alpha=1.3, stop="first_k")
    mine, _ = tl.beam_search(ours, src, config=config)
    assert _equal_rows_up_to_near_ties(ours, src, mine, theirs, 1.3) >= src.size(0) - 1


def test_the_two_stopping_rules_differ_somewhere():
    """The first_k and book rules are not the same search: on these models some output differs."""
    differ = 0
    for seed in range(4):
        hf = _marian(seed=seed, eos_bias=1.0)
        ours = tl.from_marian(hf)
        src = _batch(seed + 10, n=12)
        base = tl.GenerationConfig(strategy="beam", beam_size=4, max_len_a=0, max_len_b=30, length_norm="power",
                                   alpha=1.0)
        book, _ = tl.beam_search(ours, src, config=base)
        first, _ = tl.beam_search(ours, src, config=base.replace(stop="first_k"))
        differ += not _same(book, first, ours.config.pad_id)
    assert differ > 0


@pytest.mark.parametrize("settings", [
    {"num_beams": 4, "length_penalty": 1.2, "max_length": 21},
    {"num_beams": 3, "length_penalty": 0.6, "early_stopping": True, "max_length": 25},
    {"num_beams": 1, "max_length": 16},
    {"num_beams": 5},                                    # no max_length: the book's 2·S + 10
])
def test_a_converted_model_decodes_with_marians_rule_by_default(settings, tmp_path):
    """marian_generation_config reads what the Marian directory holds; decoding with it alone gives generate's
    output with the model's own generation config (no argument but the input)."""
    from transformer_lib.marian import marian_generation_config
    hf = _marian(eos_bias=1.0)
    hf.generation_config.update(**settings)
    hf.save_pretrained(tmp_path / "m")
    config = marian_generation_config(tmp_path / "m")
    beams = settings["num_beams"]
    assert config.strategy == ("beam" if beams > 1 else "greedy") and config.length_norm == "power"
    assert config.alpha == settings.get("length_penalty", 1.0)
    assert config.stop == ("first_k" if settings.get("early_stopping") else "book")
    assert (config.max_len_a, config.max_len_b) == ((0.0, settings["max_length"] - 1) if "max_length" in settings
                                                    else (2.0, 10))
    ours = tl.from_marian(hf)
    src = _batch(6)
    limit = {}
    if "max_length" not in settings:         # generate's own default limit differs across versions: given here
        config = config.replace(max_len_a=0, max_len_b=20)
        limit = {"max_new_tokens": 20}
    with torch.no_grad():
        theirs = hf.generate(input_ids=src, attention_mask=(src != hf.config.pad_token_id).long(), **limit)
    mine = (tl.beam_search(ours, src, config=config)[0] if beams > 1
            else tl.greedy_decode(ours, src, config=config))
    assert _equal_rows_up_to_near_ties(ours, src, mine, theirs, config.alpha) >= src.size(0) - 1
