"""Tests of chapter 11's ``transformer_lib.decoding.greedy.token_scores``: the per-token log-probabilities of an output
in one teacher-forced pass. References computed another way: the incremental (cached) decoder stepping over the same
output, and beam search's own scores (their sums at alpha = 0, the length-normalised sums at alpha = 0.6). Also the
layout (0 after eos), duck typing (a wrapper that is not a module; the decoder-only model of chapter 13 through its
own forward), dropout off and the mode restored, and bad input. Models are tiny and in float64; the scores are
float32, as the decoders' are."""
from __future__ import annotations

import pytest
import torch
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_decoding import BOS, EOS, PAD, OwnModel, make_model, make_src

import transformer_lib as tl
from transformer_lib.decoding.beam import beam_search, length_penalty_factor
from transformer_lib.decoding.greedy import decoding_mode, greedy_decode, start_decoding, token_scores
from transformer_lib.decoding.sampling import sample
from transformer_lib.modern.decoder_only import DecoderOnlyConfig, DecoderOnlyLM


def stepwise_scores(model, src: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The reference: the cached stepper fed ids one token at a time, the log-probability of each next token
    read off its step's logits; 0 once a row has written eos."""
    out = []
    with decoding_mode(model):
        stepper = start_decoding(model, src)
        done = torch.zeros(ids.size(0), dtype=torch.bool)
        for t in range(1, ids.size(1)):
            logp = torch.log_softmax(stepper.step(ids[:, :t]), dim=-1)                   # (B, V)
            out.append(logp.gather(-1, ids[:, t:t + 1])[:, 0].masked_fill(done, 0.0))
            done |= ids[:, t] == model.config.eos_id
    return torch.stack(out, dim=1)                                                       # (B, T-1)


@pytest.fixture(scope="module")
def model():
    return make_model(4)


@pytest.fixture(scope="module")
def src():
    return make_src(0, 12, 6)


@settings(max_examples=examples(12), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), B=st.integers(1, 4), decoder=st.sampled_from(["greedy", "sample", "beam"]),
       max_len=st.integers(1, 8))
def test_teacher_forced_scores_equal_the_step_by_step_scores(seed, B, decoder, max_len):
    """Whatever wrote the output, one teacher-forced pass gives the scores the incremental decoder gives."""
    model = make_model(seed % 5, eos_boost=1.0 + (seed % 3) * 0.5)
    x = make_src(seed, B, 5)
    if decoder == "greedy":
        ids = greedy_decode(model, x, max_len)
    elif decoder == "sample":
        ids = sample(model, x, max_len, temperature=1.5, generator=torch.Generator().manual_seed(seed))
    else:
        ids, _ = beam_search(model, x, 2, max_len)
    scores = token_scores(model, x, ids)
    assert scores.shape == (B, ids.size(1) - 1) and scores.dtype == torch.float32
    torch.testing.assert_close(scores, stepwise_scores(model, x, ids), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_summed_scores_are_beam_searchs_own_scores(model, src, alpha):
    """alpha = 0: a beam's score is its summed log-probability; alpha = 0.6: that sum over GNMT's penalty."""
    k = 3
    ids, scores = beam_search(model, src, k, 12, length_penalty=alpha, n_best=k)       # (B, k, T), (B, k)
    assert torch.isfinite(scores).all()
    flat = ids.flatten(0, 1)                                                            # (B·k, T)
    per_token = token_scores(model, src.repeat_interleave(k, dim=0), flat)             # (B·k, T-1)
    length = (flat[:, 1:] != PAD).sum(-1)                                               # generated tokens
    expected = per_token.sum(-1) / length_penalty_factor(length.float(), alpha, "gnmt")
    torch.testing.assert_close(expected, scores.flatten(), rtol=1e-5, atol=1e-5)


def test_layout_zero_after_eos_and_greedy_takes_the_best_token(model, src):
    ids = greedy_decode(model, src, 10)
    scores = token_scores(model, src, ids)
    assert scores.shape == (src.size(0), ids.size(1) - 1)
    gen = ids[:, 1:]
    after_eos = torch.cumsum((gen == EOS).long(), dim=1) - (gen == EOS).long() > 0
    assert after_eos.any() and (~after_eos).any()                    # the fixture has padding and tokens
    assert scores[after_eos].eq(0).all() and (scores[~after_eos] < 0).all()
    # a row cut at max_len (no eos) counts every position
    no_eos = ~(gen == EOS).any(dim=1)
    assert (scores[no_eos] < 0).all()
    # greedy's token is the argmax: nothing the model offered at that step scores higher
    with torch.no_grad():
        model.eval()
        logits = model(src, ids[:, :-1]).float()
    logits[..., [PAD, BOS]] = float("-inf")
    best = torch.log_softmax(logits, dim=-1).amax(dim=-1)                              # (B, T-1)
    torch.testing.assert_close(scores[~after_eos], best[~after_eos], rtol=1e-5, atol=1e-5)


def test_a_reference_output_is_scored_too_and_pad_or_bos_in_it_score_minus_inf(model, src):
    ids = torch.tensor([[BOS, 5, 6, EOS, PAD], [BOS, 7, PAD, 3, EOS]])
    scores = token_scores(model, src[:2], ids)
    assert torch.isfinite(scores[0]).all() and scores[0, -1] == 0                       # pad after eos: 0
    assert scores[1, 1] == float("-inf")                           # a pad before eos: never generated


def test_dropout_off_mode_restored_no_grad(src):
    model = make_model(3, dropout=0.5).train()
    ids = greedy_decode(model, src, 8)
    a, b = token_scores(model, src, ids), token_scores(model, src, ids)
    assert torch.equal(a, b) and model.training and not a.requires_grad


class Wrapped:
    """Not a module: only the members of Seq2SeqModel, the same delegating ones as test_decoding's OwnModel."""

    def __init__(self, inner):
        self.inner, self.config = inner, inner.config

    encode, decode, new_cache = OwnModel.encode, OwnModel.decode, OwnModel.new_cache


def test_duck_typed_models(model, src):
    ids = greedy_decode(model, src, 8)
    assert torch.equal(token_scores(Wrapped(model.eval()), src, ids), token_scores(model, src, ids))
    # chapter 13's decoder-only model: its own stepper for decoding, its forward for the teacher-forced pass
    torch.manual_seed(0)
    lm = DecoderOnlyLM(DecoderOnlyConfig(10, d_model=16, n_heads=2, n_layers=2, max_len=40)).double().eval()
    prompt = make_src(1, 3, 5)
    out = sample(lm, prompt, 6, temperature=2.0, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(token_scores(lm, prompt, out), stepwise_scores(lm, prompt, out),
                               rtol=1e-5, atol=1e-5)


def test_the_package_root_exports_it():
    assert tl.token_scores is token_scores


@pytest.mark.parametrize("make_ids, match", [
    (lambda ids: ids.float(), "ids"),
    (lambda ids: ids[0], "ids"),                                    # one dimension
    (lambda ids: ids[:, :1], "ids"),                                # bos only: nothing generated
    (lambda ids: ids[:-1], "ids"),                                  # fewer rows than src
    (lambda ids: ids + 100, "ids"),                                 # outside the vocabulary
    (lambda ids: ids[:, 1:], "ids must start with bos"),
    (lambda ids: torch.cat([ids, torch.full((ids.size(0), 41), 3)], dim=1), "ids has .* max_len"),
])
def test_bad_ids_raise_value_error_naming_the_argument(model, src, make_ids, match):
    ids = greedy_decode(model, src, 6)
    with pytest.raises(ValueError, match=match):
        token_scores(model, src, make_ids(ids))


def test_bad_src_and_model(model, src):
    ids = greedy_decode(model, src, 6)
    with pytest.raises(ValueError, match="src"):
        token_scores(model, src.float(), ids)
    with pytest.raises(TypeError, match="ids"):
        token_scores(model, src, ids.tolist())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="model"):
        token_scores(object(), src, ids)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_the_scores_are_the_cpus(model, src):
    ids = greedy_decode(model, src, 8)
    gpu = token_scores(make_model(4).cuda(), src.cuda(), ids.cuda())
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), token_scores(model, src, ids), rtol=1e-5, atol=1e-5)
