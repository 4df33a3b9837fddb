"""Tests of transformer_lib.packed (book/appendix_serving.ipynb, section "Packing the weights"): PackedLinear
equals F.linear and falls back to it off its fast path; the probe of PyTorch's private oneDNN operators runs once
a process and falls back to F.linear, with one warning, where they are missing, raise or answer wrongly;
chapter 11's decoders give the same outputs with a PackedDecoder as with the plain model (greedy, beam search,
sampling, translate_lines, token_scores) on several shapes, past the 64 positions of the first cache buffer,
and after the weights change and repack(); the PackedStepper's logits, reordering and errors against chapter
11's Stepper.

Equality "up to near ties" is judged as in the appendix, by ``serving.compare_outputs``: in float32 the packed
products round differently from the plain model's, so two decoders may part where two tokens score within
rounding of each other. In float64 PackedLinear runs F.linear, so the packed step itself (its cache, its
reordering, its attention) is checked token for token."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onednn_patched import MODES, PRODUCT, REORDER, PatchedOneDNN
from torch import nn

import transformer_lib as tl
from transformer_lib import packed as packed_module
from transformer_lib.attention import MultiHeadAttention
from transformer_lib.decoding.beam import beam_search
from transformer_lib.decoding.greedy import Stepper, decoding_mode, greedy_decode, token_scores
from transformer_lib.decoding.sampling import sample
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.packed import PROBE_TOL, Int8Linear, PackedDecoder, PackedLinear, PackedStepper, onednn_linear
from transformer_lib.serving import compare_outputs
from transformer_lib.translation.corpus import generate_pairs
from transformer_lib.translation.tokenizer import BPETokenizer
from transformer_lib.translation.translate import translate_lines

#: the appendix's five shapes, and three the decoder layers can take: SiLU, SwiGLU's gated feed-forward and
#: grouped-query attention (chapter 13), the last two put into a chapter-9 Transformer by hand
SHAPES = {
    "post-norm": dict(),
    "pre-norm": dict(norm_first=True),
    "shared, untied": dict(share_embeddings=True, tie_output=False),
    "rms + gelu": dict(norm="rms", activation="gelu", norm_first=True),
    "silu": dict(activation="silu"),
    "swiglu": dict(norm_first=True, swiglu=True),
    "gqa": dict(n_kv_heads=2),
    "marian-shaped": dict(positional_layout="half", output_bias=True, pad_id=0, bos_id=0, eos_id=1,
                          final_norm=False),
}
V = 40
#: the thresholds as the library sets them, before the fixture below lowers them
THRESHOLDS = {"PACKED_MIN_WORK": packed_module.PACKED_MIN_WORK, "PACKED_MIN_ROWS": packed_module.PACKED_MIN_ROWS}


@pytest.fixture(autouse=True, scope="module")
def _every_product_on_onednn():
    """The thresholds at 0 for this file's tests: the products of their small models would all go to F.linear
    (below PACKED_MIN_WORK), and the point is to decode on oneDNN's products as a large model does.
    test_the_thresholds_send_small_products_to_f_linear puts them back."""
    for name in THRESHOLDS:
        setattr(packed_module, name, 0)
    yield
    for name, value in THRESHOLDS.items():
        setattr(packed_module, name, value)


def random_model(seed: int, d_model: int = 32, max_len: int = 64, dtype: torch.dtype = torch.float32,
                 swiglu: bool = False, n_kv_heads: int | None = None, dropout: float = 0.0,
                 **options) -> tl.Transformer:
    """The appendix's random model (weights moved by 0.3 · noise, so that it does not stop at once), 2 + 2
    layers, 4 heads, in eval mode. ``swiglu``: the decoder's feed-forward layers are SwiGLU's;
    ``n_kv_heads``: the decoder's attentions share key-value heads (chapter 13)."""
    torch.manual_seed(seed)
    src_vocab = V if options.get("share_embeddings") else V - 3
    config = tl.TransformerConfig(src_vocab, V, d_model=d_model, n_heads=4, n_encoder_layers=2,
                                  n_decoder_layers=2, d_ff=2 * d_model, dropout=dropout, max_len=max_len, **options)
    model = tl.Transformer(config)
    for layer in model.decoder.layers:
        if swiglu:
            layer.feed_forward = PositionwiseFeedForward(d_model, 2 * d_model, dropout, "swiglu")
        if n_kv_heads is not None:
            layer.self_attn = MultiHeadAttention(d_model, 4, dropout, n_kv_heads=n_kv_heads)
            layer.cross_attn = MultiHeadAttention(d_model, 4, dropout, n_kv_heads=n_kv_heads)
    model = model.to(dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def sources(seed: int, model: tl.Transformer, B: int = 8, S: int = 9) -> torch.Tensor:
    """(B, S) random sources; row B // 2 padded after half its tokens and, from B = 3 on, the last row all pads
    (the decoders accept it)."""
    src = torch.randint(3, model.config.src_vocab_size, (B, S), generator=torch.Generator().manual_seed(seed))
    src[B // 2, S // 2 + 1:] = model.config.pad_id
    if B >= 3:
        src[-1] = model.config.pad_id
    return src


def beam(model, src: torch.Tensor, **kwargs) -> torch.Tensor:
    return beam_search(model, src, beam_size=4, length_penalty=1.0, length_norm="power", **kwargs)[0]


def assert_logits_close(packed: torch.Tensor, plain: torch.Tensor) -> None:
    """float32 logits of two kernels: equal within rounding (pad and bos are -inf in both)."""
    assert torch.equal(torch.isneginf(packed), torch.isneginf(plain))
    finite = torch.isfinite(plain)
    torch.testing.assert_close(packed[finite], plain[finite], rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- PackedLinear

@settings(max_examples=examples(25), deadline=None)
@given(n_in=st.integers(1, 40), n_out=st.integers(1, 40), lead=st.lists(st.integers(1, 5), max_size=2),
       bias=st.booleans(), rows=st.tuples(st.integers(0, 39), st.integers(1, 40)), seed=st.integers(0, 10_000))
def test_packed_linear_equals_f_linear(n_in, n_out, lead, bias, rows, seed):
    """1-, 2- and 3-D inputs, with and without bias, of the whole layer and of a slice of its rows: F.linear's
    result within float32 rounding, relative to the size of the products' terms."""
    torch.manual_seed(seed)
    linear = nn.Linear(n_in, n_out, bias=bias)
    start, stop = sorted(rows)
    part = slice(min(start, n_out - 1), max(min(stop, n_out), min(start, n_out - 1) + 1))
    x = torch.randn(*lead, n_in)
    for packed, weight, b in ((PackedLinear.of(linear), linear.weight, linear.bias),
                              (PackedLinear.of(linear, part), linear.weight[part],
                               None if linear.bias is None else linear.bias[part])):
        with torch.no_grad():
            out, ref = packed(x), F.linear(x, weight, b)
            size = x.abs() @ weight.abs().T + (0 if b is None else b.abs())       # the terms' magnitude
        assert out.shape == ref.shape and out.dtype == torch.float32 and not out.requires_grad
        assert ((out - ref).abs() <= 1e-5 * size + 1e-30).all(), (out - ref).abs().max()


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")
def test_a_float32_weight_on_the_cpu_is_packed():
    """The fast path the other tests exercise is taken: a float32 CPU weight gets a oneDNN tensor (for small
    weights oneDNN may wrap the weight's memory rather than copy it); a slice keeps its rows."""
    linear = nn.Linear(16, 24)
    packed = PackedLinear.of(linear, slice(8, 24))
    assert packed.packed is not None and packed.weight.shape == (16, 16) and packed.bias.shape == (16,)
    assert not packed.weight.requires_grad


def test_autocast_and_float64_fall_back_to_f_linear_exactly():
    torch.manual_seed(0)
    linear = nn.Linear(16, 12)
    x = torch.randn(3, 5, 16)
    packed = PackedLinear.of(linear)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out, ref = packed(x), F.linear(x, linear.weight, linear.bias)
    assert out.dtype == torch.bfloat16 and torch.equal(out, ref)
    double = nn.Linear(16, 12).double()
    packed = PackedLinear.of(double, slice(2, 9))
    assert packed.packed is None
    with torch.no_grad():
        assert torch.equal(packed(x.double()), F.linear(x.double(), double.weight[2:9], double.bias[2:9]))


# ---------------------------------------------------------------- the probe of the private operators

FALLBACK = "PackedLinear uses F.linear instead of PyTorch's private oneDNN operators"


@pytest.fixture
def onednn(monkeypatch):
    """Patch ``torch.ops.mkldnn`` (tests/onednn_patched.py) for one test: ``onednn(**patches)``. The probe's
    answer is forgotten before the test and after it, so that it probes the patched operators and the next test
    the real ones."""
    torch.ops.mkldnn                                       # noqa: B018  (resolve the namespace once)
    real = torch.ops.mkldnn
    onednn_linear.cache_clear()
    yield lambda **patches: monkeypatch.setattr(torch.ops, "mkldnn", PatchedOneDNN(real, **patches))
    onednn_linear.cache_clear()


def fallback_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if FALLBACK in str(w.message)]


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")
def test_sound_operators_are_probed_once_a_process_and_nothing_is_said(onednn):
    """Two decoders of 2 + 2 layers pack 18 weights, but the product runs only for the probe's two cases (the
    products of this small model stay below PACKED_MIN_WORK, and nothing is decoded), and no warning comes."""
    calls = []
    onednn(wrapped={PRODUCT: lambda op: lambda *args: calls.append(len(args)) or op(*args)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        PackedDecoder(random_model(0))
        PackedDecoder(random_model(1))
    assert calls == [6, 6] and onednn_linear() is not None
    assert fallback_warnings(caught) == []


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")
@pytest.mark.parametrize("error, accepted", [(2.0 ** -23, True), (1e-3, False)])
def test_the_probe_allows_float32_rounding_and_not_more(onednn, error, accepted):
    """A product off by one float32 rounding step (2⁻²³ of itself, under PROBE_TOL of its terms' sum) passes the
    probe; one off by 1e-3 of itself, as from a lower precision, does not."""
    assert 2.0 ** -23 < PROBE_TOL < 1e-3
    onednn(wrapped={PRODUCT: lambda op: lambda *args: op(*args) * (1 + error)})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert (onednn_linear() is not None) is accepted
    assert len(fallback_warnings(caught)) == (0 if accepted else 1)


@pytest.mark.parametrize("patches, reason", [
    (dict(missing={REORDER}), "lacks one"), (dict(missing={PRODUCT}), "lacks one"), MODES["missing"],
    MODES["raising"], MODES["wrong"], (dict(raising={REORDER}), "they raise RuntimeError"),
    (dict(wrong={REORDER}), "they disagree with F.linear")],
    ids=["no reorder", "no product", "neither", "product raises", "product drops the bias", "reorder raises",
         "reorder reverses rows"])
def test_without_sound_onednn_operators_the_decoders_fall_back_to_f_linear(onednn, monkeypatch, patches, reason):
    """A PyTorch whose oneDNN lacks either private operator PackedLinear calls, whose operators changed their
    arguments (a call raises, as after a change of schema), or whose operators answer wrongly: one warning says
    why, every layer keeps its weight and runs F.linear, even for products above PACKED_MIN_WORK (set to 0 here,
    so that every product would otherwise be oneDNN's), and greedy decoding, beam search and sampling give the
    plain model's outputs, as ``translate --engine packed`` needs after a torch upgrade."""
    import transformer_lib.packed as packed_module
    onednn(**patches)
    monkeypatch.setattr(packed_module, "PACKED_MIN_WORK", 0)
    monkeypatch.setattr(packed_module, "PACKED_MIN_ROWS", 0)
    model = random_model(3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fast, src = PackedDecoder(model), sources(3, model)
        layers, output = fast.packed()
        greedy = compare_outputs(model, src, greedy_decode(model, src), greedy_decode(fast, src))
        beams = compare_outputs(model, src, beam(model, src), beam(fast, src), length_penalty=1.0)
        draws = [sample(m, src, temperature=1.5, generator=torch.Generator().manual_seed(0)) for m in (model, fast)]
        PackedDecoder(model)                                  # a second decoder: no second warning
    said = fallback_warnings(caught)
    assert len(said) == 1 and reason in said[0], said
    assert output.packed is None and all(lin.packed is None for layer in layers for lin in vars(layer).values()
                                         if isinstance(lin, PackedLinear))
    assert greedy["different"] == 0 and beams["different"] == 0, (greedy, beams)
    assert torch.equal(*draws)


# ---------------------------------------------------------------- the decoders, float32: up to near ties

@pytest.mark.parametrize("shape", SHAPES)
def test_greedy_and_beam_search_equal_the_plain_models_up_to_near_ties(shape):
    """Greedy: any difference must be a near tie (up to the first differing token both fed the same
    prefix). Beam search has no such guarantee (a near tie at the beam's edge may drop a hypothesis whose
    descendants would have won), but on these fixed draws it has none either: 2560 rows of 40 seeds x 8 shapes
    were all equal when this test was written."""
    model = random_model(0, **SHAPES[shape])
    fast, src = PackedDecoder(model), sources(0, model)
    greedy = compare_outputs(model, src, greedy_decode(model, src), greedy_decode(fast, src))
    beams = compare_outputs(model, src, beam(model, src), beam(fast, src), length_penalty=1.0)
    assert greedy["different"] == 0 and beams["different"] == 0, (greedy, beams)


@pytest.mark.parametrize("shape", ["post-norm", "marian-shaped"])
def test_a_batch_of_pads_only_decodes_as_the_plain_model(shape):
    """Every source all pads: cross-attention has no key anywhere and gives 0, as chapter 3's."""
    model = random_model(0, **SHAPES[shape])
    fast, src = PackedDecoder(model), torch.full((3, 5), model.config.pad_id)
    assert compare_outputs(model, src, greedy_decode(model, src), greedy_decode(fast, src))["different"] == 0
    beams = compare_outputs(model, src, beam(model, src), beam(fast, src), length_penalty=1.0)
    assert beams["different"] == 0, beams


@settings(max_examples=examples(10), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), shape=st.sampled_from(sorted(SHAPES)))
def test_greedy_differs_only_at_near_ties(seed, shape):
    model = random_model(seed % 97, **SHAPES[shape])
    src = sources(seed, model, B=6)
    counts = compare_outputs(model, src, greedy_decode(model, src), greedy_decode(PackedDecoder(model), src))
    assert counts["different"] == 0, counts


@pytest.mark.parametrize("shape", ["post-norm", "marian-shaped", "gqa"])
def test_sampling_draws_the_plain_models_tokens(shape):
    """The same generator state gives the same tokens. Exact equality is honest here, not merely lucky on one
    draw: a draw changes only when its uniform number falls within rounding (~1e-7) of a boundary of the
    cumulative probabilities; 240 cases (30 seeds x 8 shapes, 8 rows of ~28 draws) were all equal."""
    model = random_model(1, **SHAPES[shape])
    fast, src = PackedDecoder(model), sources(1, model)
    for seed in range(3):
        kwargs = dict(temperature=1.5, top_k=10, top_p=0.95)
        a = sample(model, src, generator=torch.Generator().manual_seed(seed), **kwargs)
        b = sample(fast, src, generator=torch.Generator().manual_seed(seed), **kwargs)
        assert torch.equal(a, b), seed


def test_use_cache_false_runs_the_models_own_stepper():
    model = random_model(2)
    fast, src = PackedDecoder(model), sources(2, model)
    with decoding_mode(fast):
        assert isinstance(fast.stepper(src), PackedStepper)
        assert type(fast.stepper(src, use_cache=False)) is Stepper
    assert torch.equal(greedy_decode(fast, src, use_cache=False), greedy_decode(model, src, use_cache=False))
    assert torch.equal(beam(fast, src, use_cache=False), beam(model, src, use_cache=False))


# ---------------------------------------------------------------- float64: the packed step, token for token

@settings(max_examples=examples(6), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), shape=st.sampled_from(sorted(SHAPES)), k=st.integers(1, 4))
def test_in_float64_the_packed_step_decodes_the_same_tokens(seed, shape, k):
    """In float64 PackedLinear is F.linear, so only the packed step's own work differs from the model's
    (static cache, reordering, scaled_dot_product_attention), by rounding of order 1e-16: every decoder gives
    the same tokens, and beam search the same scores within that rounding."""
    model = random_model(seed % 97, d_model=16, dtype=torch.float64, **SHAPES[shape])
    fast, src = PackedDecoder(model), sources(seed, model, B=5, S=6)
    assert torch.equal(greedy_decode(fast, src), greedy_decode(model, src))
    (ids, scores), (ref_ids, ref_scores) = (beam_search(m, src, k, n_best=k) for m in (fast, model))
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(scores, ref_scores, rtol=1e-9, atol=1e-9)
    draws = [sample(m, src, temperature=1.3, generator=torch.Generator().manual_seed(seed)) for m in (fast, model)]
    assert torch.equal(*draws)


# ---------------------------------------------------------------- past the first 64 positions

def never_ending(seed: int, max_len: int, dtype: torch.dtype = torch.float32, **options) -> tl.Transformer:
    """A random model that never ends a sentence (eos's output bias is -1e4): it decodes max_len tokens."""
    model = random_model(seed, max_len=max_len, dtype=dtype, output_bias=True, **options)
    with torch.no_grad():
        model.output.bias[model.config.eos_id] = -1e4
    return model


def test_the_cache_doubles_and_the_logits_stay_the_models():
    """Fed the same prefixes, the packed stepper's logits are the plain Stepper's at every one of 150 steps,
    across two doublings of its buffer (64 -> 128 -> 256 positions)."""
    model = never_ending(3, max_len=160, norm_first=True)
    fast, src = PackedDecoder(model), sources(3, model, B=3, S=7)
    ys = torch.full((3, 1), model.config.bos_id)
    with decoding_mode(fast):
        packed, plain = fast.stepper(src), Stepper(model, src, max_len=150)
        assert packed.caches[0].size(3) == 64
        for t in range(150):
            a, b = packed.step(ys), plain.step(ys)
            assert_logits_close(a, b)
            ys = torch.cat([ys, b.argmax(-1, keepdim=True)], dim=1)
            assert packed.length == t + 1 and packed.caches[0].size(3) == 64 * 2 ** (t // 64)
    assert packed.caches[0].size(3) == 256


def test_a_model_with_a_short_table_starts_with_room_for_it():
    model = random_model(4, max_len=20)
    fast, src = PackedDecoder(model), sources(4, model, B=2, S=4)
    with decoding_mode(fast):
        assert fast.stepper(src).caches[0].size(3) == 20
    ends = never_ending(4, max_len=20)
    assert greedy_decode(PackedDecoder(ends), src, max_len=20).size(1) == 21


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_more_than_64_tokens_decode_as_the_plain_model(dtype):
    """Greedy (130 tokens) and beam search (100 tokens; its spare buffers change shape at the doubling)."""
    model = never_ending(5, max_len=140, dtype=dtype, n_kv_heads=2)
    fast, src = PackedDecoder(model), sources(5, model, B=4, S=6)
    ours, theirs = greedy_decode(fast, src, max_len=130), greedy_decode(model, src, max_len=130)
    assert ours.shape == (4, 131)
    ours_beam, theirs_beam = beam(fast, src, max_len=100), beam(model, src, max_len=100)
    assert ours_beam.shape == (4, 101)
    if dtype == torch.float64:
        assert torch.equal(ours, theirs) and torch.equal(ours_beam, theirs_beam)
    else:
        assert compare_outputs(model, src, theirs, ours)["different"] == 0
        assert compare_outputs(model, src, theirs_beam, ours_beam, length_penalty=1.0)["different"] == 0


# ---------------------------------------------------------------- a frozen snapshot, and repack()

def test_unchanged_weights_are_packed_once():
    model = random_model(6)
    fast, src = PackedDecoder(model), sources(6, model)
    packed = fast.packed()
    greedy_decode(fast, src)
    beam(fast, src)
    assert fast.packed() is packed and fast.packed() is fast.packed()


def _perturb(model):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))


def _sgd_step(model):
    model.train()
    src = torch.randint(3, model.config.src_vocab_size, (4, 6))
    loss = model(src, torch.randint(3, V, (4, 5))).logsumexp(-1).mean()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    model.eval()


def _load_other(model):
    model.load_state_dict(random_model(99).state_dict())


def _to_double(model):
    model.double()


@pytest.mark.parametrize("change", [_perturb, _sgd_step, _load_other, _to_double])
def test_repack_follows_a_change_of_the_weights(change):
    """The packing is a snapshot: an in-place update (no_grad add_, an optimizer step, load_state_dict) or to()
    leaves it as it was (nothing watches the weights); after repack() the decoder gives the changed model's
    tokens, not the old ones."""
    model = random_model(7)
    fast, src = PackedDecoder(model), sources(7, model)
    before, packed = greedy_decode(fast, src), fast.packed()
    change(model)
    after = greedy_decode(model, src)
    assert fast.packed() is packed
    fast.repack()
    assert fast.packed() is not packed
    if change is _to_double:                                 # the same numbers, in another dtype
        assert fast.packed()[0][0].qkv.weight.dtype == torch.float64
    else:
        assert not torch.equal(after, before)                # the change matters
    assert compare_outputs(model, src, after, greedy_decode(fast, src))["different"] == 0
    assert fast.packed() is fast.packed()


def test_weights_made_in_inference_mode_are_packed_once_and_decode_as_the_model():
    with torch.inference_mode():
        model = random_model(20)
    fast, src = PackedDecoder(model), sources(20, model)
    assert fast.packed() is fast.packed()
    assert compare_outputs(model, src, greedy_decode(model, src), greedy_decode(fast, src))["different"] == 0


def test_a_write_through_data_is_followed_after_repack():
    """A write through ``p.data`` (which PyTorch's count of in-place writes does not see) is followed too once
    ``repack()`` is called. Weights large enough that oneDNN copies them (768 x 256) show that the copy, not the
    weight, is what repack replaces."""
    torch.manual_seed(8)
    config = tl.TransformerConfig(40, 40, d_model=256, n_heads=4, n_encoder_layers=1, n_decoder_layers=1,
                                  d_ff=256, dropout=0.0, max_len=24)
    model = tl.Transformer(config).eval()
    fast, src = PackedDecoder(model), torch.randint(3, 40, (3, 6))
    packed = fast.packed()
    assert packed[0][0].qkv.packed is not None or not torch.backends.mkldnn.is_available()
    with torch.no_grad():
        for p in model.parameters():
            p.data.add_(torch.randn_like(p))
    fast.repack()
    assert fast.packed() is not packed
    after = greedy_decode(model, src, max_len=20)
    assert compare_outputs(model, src, after, greedy_decode(fast, src, max_len=20))["different"] == 0


# ---------------------------------------------------------------- the stepper

@pytest.mark.parametrize("shape", ["post-norm", "gqa", "marian-shaped"])
def test_reorder_then_step_equals_a_fresh_decode_of_the_reordered_sources(shape):
    """After reorder(index) the packed stepper continues rows ``index``: its logits are chapter 11's cached
    Stepper's after the same reorder, and a fresh uncached Stepper's on those rows' sources and prefixes."""
    model = random_model(9, **SHAPES[shape])
    fast, src = PackedDecoder(model), sources(9, model)
    index = torch.tensor([2, 0, 0, 5, 3, 7])
    first = torch.full((src.size(0), 1), model.config.bos_id)
    with decoding_mode(fast):
        packed, cached = fast.stepper(src), Stepper(model, src)
        assert_logits_close(packed.step(first), cached.step(first))
        tokens = torch.arange(3, 3 + src.size(0))                               # any tokens, not pad or bos
        ys = torch.cat([first, tokens[:, None]], 1)[index]                       # (6, 2)
        packed.reorder(index)
        cached.reorder(index)
        fresh = Stepper(model, src[index], use_cache=False)
        after = packed.step(ys)
        assert_logits_close(after, cached.step(ys))
        assert_logits_close(after, fresh.step(ys))
        ys = torch.cat([ys, torch.full((len(index), 1), 4)], 1)                   # and one step further
        assert_logits_close(packed.step(ys), fresh.step(ys))


def test_reorder_beams_within_each_sentence_equals_reorder():
    """reorder_beams moves only the self-attention caches (into a spare buffer reused at the next call): over
    several steps of within-sentence reorders its logits are bit for bit those of a full reorder."""
    k = 3
    model = random_model(10, n_kv_heads=1)
    fast, src = PackedDecoder(model), sources(10, model, B=4)
    B = src.size(0)
    g = torch.Generator().manual_seed(0)
    expand = torch.arange(B).repeat_interleave(k)                             # B rows -> B·k
    first = torch.full((B, 1), model.config.bos_id)
    with decoding_mode(fast):
        a, b = fast.stepper(src), fast.stepper(src)
        tokens = a.step(first).argmax(-1)
        b.step(first)
        a.reorder(expand)
        b.reorder(expand)
        ys = torch.cat([first, tokens[:, None]], 1)[expand]                    # (B·k, 2)
        for _ in range(6):
            logits = a.step(ys)
            assert torch.equal(logits, b.step(ys))
            within = (torch.arange(B)[:, None] * k + torch.randint(0, k, (B, k), generator=g)).view(-1)
            a.reorder(within)
            b.reorder_beams(within)
            ys = torch.cat([ys[within], logits[within].argmax(-1, keepdim=True)], 1)
        assert torch.equal(a.step(ys), b.step(ys))


def test_a_prefix_out_of_step_is_refused():
    model = random_model(11)
    fast, src = PackedDecoder(model), sources(11, model, B=3)
    first = torch.full((3, 1), model.config.bos_id)
    with decoding_mode(fast):
        stepper = fast.stepper(src)
        with pytest.raises(RuntimeError, match="out of step"):
            stepper.step(torch.cat([first, first], 1))                       # 2 tokens before any step
        logits = stepper.step(first)
        assert logits.dtype == torch.float32 and torch.isneginf(logits[:, [model.config.pad_id,
                                                                           model.config.bos_id]]).all()
        with pytest.raises(RuntimeError, match="out of step"):
            stepper.step(first)                                              # the same prefix again


# ---------------------------------------------------------------- the wrapper

@pytest.mark.parametrize("bad", [nn.Linear(2, 2), "model", None])
def test_a_model_that_is_not_a_transformer_is_refused_naming_model(bad):
    with pytest.raises(TypeError, match="model must be a Transformer"):
        PackedDecoder(bad)


def test_the_wrapper_shares_the_model():
    model = random_model(12)
    fast = PackedDecoder(model)
    assert fast.model is model and fast.config is model.config
    assert {id(p) for p in fast.parameters()} == {id(p) for p in model.parameters()}
    src, tgt = sources(12, model), torch.randint(3, V, (8, 5))
    with torch.no_grad():
        assert torch.equal(fast(src, tgt), model(src, tgt))                  # teacher forcing: the model's


def test_a_training_models_mode_is_restored():
    """The wrapper of a model in training mode is in training mode: a decode leaves both so."""
    model = random_model(13, dropout=0.1).train()
    fast, src = PackedDecoder(model), sources(13, model)
    for decode in (greedy_decode, beam, sample):
        decode(fast, src)
        assert model.training
    model.eval()


def test_the_wrapper_takes_the_models_mode_when_made_and_at_repack():
    """No override of nn.Module's mode: the wrapper takes the model's mode when made and at repack(); its
    train() and eval() set the model's; a decode leaves the model in the wrapper's mode."""
    assert "training" not in vars(PackedDecoder) and PackedDecoder.train is nn.Module.train
    model = random_model(14, dropout=0.1)
    fast, src = PackedDecoder(model), sources(14, model)
    greedy_decode(fast, src)
    assert not model.training and not fast.training
    fast.train()
    assert model.training
    greedy_decode(fast, src)
    assert model.training and fast.training
    fast.eval()
    assert not model.training
    model.train()                                          # the model alone: repack() takes its mode
    fast.repack()
    assert fast.training
    greedy_decode(fast, src)
    assert model.training


def test_dropout_is_off_while_decoding():
    model = random_model(15, dropout=0.3)
    fast, src = PackedDecoder(model), sources(15, model)
    reference = greedy_decode(model, src)
    fast.train()                                          # model and wrapper in training mode
    assert torch.equal(greedy_decode(fast, src), greedy_decode(fast, src))
    assert compare_outputs(model, src, reference, greedy_decode(fast, src))["different"] == 0
    model.eval()


def test_token_scores_are_the_models():
    model = random_model(16, **SHAPES["marian-shaped"])
    fast, src = PackedDecoder(model), sources(16, model)
    ids = greedy_decode(fast, src)
    torch.testing.assert_close(token_scores(fast, src, ids), token_scores(model, src, ids), rtol=1e-6, atol=1e-6)


@pytest.fixture(scope="module")
def tokenizer():
    pairs = generate_pairs(60, seed=3)
    return BPETokenizer.train([p.src for p in pairs] + [p.tgt for p in pairs], vocab_size=300)


def test_translate_lines_takes_a_packed_decoder(tokenizer):
    torch.manual_seed(17)
    v = tokenizer.vocab_size
    config = tl.TransformerConfig(v, v, d_model=16, n_heads=2, n_encoder_layers=2, n_decoder_layers=2, d_ff=32,
                                  dropout=0.0, max_len=48, share_embeddings=True)
    model = tl.Transformer(config).eval()
    _perturb(model)
    fast = PackedDecoder(model)
    lines = [p.src for p in generate_pairs(6, seed=5)] + [""]
    for kwargs in ({}, {"strategy": "beam", "beam_size": 3}, {"strategy": "sample", "seed": 2}):
        ours = translate_lines(fast, tokenizer, lines, batch_size=4, **kwargs)
        assert ours == translate_lines(model, tokenizer, lines, batch_size=4, engine="torch", **kwargs), kwargs
        assert ours == translate_lines(model, tokenizer, lines, batch_size=4, **kwargs), kwargs    # auto: packed
        assert len(ours) == len(lines) and ours[-1] == ""
    bf16 = translate_lines(fast, tokenizer, lines, precision="bf16")       # autocast: F.linear in bfloat16
    assert len(bf16) == len(lines) and all(isinstance(line, str) for line in bf16)


# ---------------------------------------------------------------- the thresholds, int8, translate_lines' engines

@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="PyTorch built without oneDNN")
def test_the_thresholds_send_small_products_to_f_linear(monkeypatch):
    """At the library's thresholds a product of fewer than PACKED_MIN_ROWS rows, or of fewer multiply-adds than
    PACKED_MIN_WORK, is F.linear's exactly and never reaches oneDNN; a product above both is oneDNN's."""
    for name, value in THRESHOLDS.items():
        monkeypatch.setattr(packed_module, name, value)
    torch.manual_seed(0)
    wide = nn.Linear(256, 8000)                                   # opus-mt's output layer, smaller vocabulary
    layer = PackedLinear.of(wide)
    calls = []
    real = layer.ops
    spy = type("Spy", (), {"linear": lambda self, *a: calls.append(1) or real.linear(*a)})
    monkeypatch.setattr(layer, "ops", spy())
    rows = THRESHOLDS["PACKED_MIN_ROWS"]
    with torch.no_grad():
        for x in (torch.randn(rows - 1, 256), torch.randn(1, rows - 1, 256)):          # too few rows
            assert torch.equal(layer(x), F.linear(x, wide.weight, wide.bias))
        assert calls == []
        small = PackedLinear.of(nn.Linear(16, 16))
        x = torch.randn(rows, 16)                                                        # too little work
        assert torch.equal(small(x), F.linear(x, small.weight, small.bias))
        x = torch.randn(2, rows, 256)                                                    # 2·rows rows, enough work
        assert x.numel() * 8000 >= THRESHOLDS["PACKED_MIN_WORK"]
        out = layer(x)
        assert calls == [1]
        torch.testing.assert_close(out, F.linear(x, wide.weight, wide.bias), rtol=1e-4, atol=1e-4)


def int8_bound(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """How far dynamic int8 may move x Wᵀ (..., n_out): each weight rounded by at most half its row's step
    (max |w_row| / 127), each input by at most half of x's step, the range of x and 0 over 127 (7 bits: FBGEMM's
    reduced range) but at least 6.1e-5 (PyTorch's choose_qparams raises a smaller step to that, its
    SMALL_SCALE_THRESHOLD), and their product's cross term."""
    s_w = weight.abs().amax(dim=1) / 127                                      # (n_out,)
    s_x = ((x.max().clamp_min(0) - x.min().clamp_max(0)) / 127).clamp_min(6.1e-5)
    return (x.abs().sum(-1, keepdim=True) * s_w / 2 + weight.abs().sum(1) * s_x / 2
            + weight.size(1) * s_w * s_x / 4)


@settings(max_examples=examples(25), deadline=None)
@given(n_in=st.integers(1, 48), n_out=st.integers(1, 48), rows=st.integers(1, 6), bias=st.booleans(),
       scale=st.sampled_from([1e-3, 1.0, 30.0]), seed=st.integers(0, 10_000))
def test_int8_linear_is_within_the_rounding_of_its_int8_steps(n_in, n_out, rows, bias, scale, seed):
    torch.manual_seed(seed)
    linear = nn.Linear(n_in, n_out, bias=bias)
    x = scale * torch.randn(rows, n_in)
    with torch.no_grad():
        out, ref = Int8Linear.of(linear)(x), F.linear(x, linear.weight, linear.bias)
        bound = int8_bound(x, linear.weight)
    assert out.shape == ref.shape and out.dtype == torch.float32
    assert ((out - ref).abs() <= 1.01 * bound + 1e-6 * ref.abs() + 1e-30).all(), ((out - ref).abs() / bound).max()


@pytest.mark.parametrize("shape", SHAPES)
def test_an_int8_decoder_scores_within_its_rounding_and_decodes(shape):
    """PackedDecoder(model, "int8"): the first step's logits within 5 % of their spread of float32's (int8 rounds
    each weight by at most 0.4 % of its row's largest), and greedy decoding and beam search run to the end."""
    model = random_model(40, **SHAPES[shape])
    src = sources(40, model)
    fast, int8 = PackedDecoder(model), PackedDecoder(model, "int8")
    ys = torch.full((src.size(0), 1), model.config.bos_id)
    with torch.no_grad():
        a, b = fast.stepper(src).step(ys), int8.stepper(src).step(ys)
    finite = torch.isfinite(a)
    assert torch.equal(finite, torch.isfinite(b))
    spread = a[finite].max() - a[finite].min()
    assert ((a - b)[finite].abs() <= 0.05 * spread).all(), ((a - b)[finite].abs().max() / spread).item()
    assert greedy_decode(int8, src).size(0) == src.size(0) and beam(int8, src).size(0) == src.size(0)


def test_int8_is_refused_where_it_cannot_run_naming_precision():
    model = random_model(41)
    with pytest.raises(ValueError, match="precision must be one of"):
        PackedDecoder(model, "fp16")
    with pytest.raises(ValueError, match="precision 'int8' needs a float32 model on the CPU"):
        PackedDecoder(random_model(41, dtype=torch.float64), "int8")


def test_translate_lines_engines(tokenizer):
    """auto packs a float32 model on the CPU and leaves a packed or quantized one as it is; packed always packs;
    torch never does; anything else is refused, naming engine."""
    from transformer_lib.serving import quantize_int8
    from transformer_lib.translation.translate import decoding_model
    model = random_model(42)
    auto = decoding_model(model)
    assert isinstance(auto, PackedDecoder) and auto.model is model
    assert decoding_model(auto) is auto and decoding_model(auto, "packed") is auto
    assert decoding_model(model, "torch") is model
    assert isinstance(decoding_model(model, "packed"), PackedDecoder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                       # torch.ao's deprecation
        quantized = quantize_int8(model)
    assert decoding_model(quantized) is quantized
    with pytest.raises(ValueError, match="engine must be one of"):
        translate_lines(model, tokenizer, ["a"], engine="onnx")
