"""Tests of transformer_lib.model (chapter 9): equality with torch.nn.Transformer, the config, weight tying,
the parameter count, padding/causality properties of the whole model, the cache, autocast, bad input."""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import types

import pytest
import torch
import torch.nn.functional as F
from conftest import examples
from conftest import padded_ids as _ids  # one builder of padded id batches for the layer tests
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import transformer_lib as tl
from transformer_lib.checks import check_token_ids
from transformer_lib.positional import half_layout

SETTINGS = settings(max_examples=examples(15), deadline=None)
SMALL = dict(src_vocab_size=50, tgt_vocab_size=60, d_model=16, n_heads=4, n_encoder_layers=2, n_decoder_layers=2,
             d_ff=32, dropout=0.0, max_len=32)

pytestmark = pytest.mark.filterwarnings("ignore:.*nested.tensor")   # nn.Transformer's fast-path notices


@functools.cache
def _model(norm_first: bool = False) -> tl.Transformer:
    torch.manual_seed(99)
    return tl.Transformer(tl.TransformerConfig(**SMALL, norm_first=norm_first)).eval()


def _torch_logits(model, reference, src, tgt_in, tgt_padding=False):
    """nn.Transformer's logits; the target mask is causal only, as the model's (chapter 9: no padding part),
    unless ``tgt_padding`` adds the target's key padding mask (the older padding-AND-causal mask)."""
    pad = model.config.pad_id
    out = reference(model.positional(model.src_embed(src)), model.positional(model.tgt_embed(tgt_in)),
                    tgt_mask=~tl.causal_mask(tgt_in.size(1))[0, 0], src_key_padding_mask=src == pad,
                    tgt_key_padding_mask=(tgt_in == pad) if tgt_padding else None,
                    memory_key_padding_mask=src == pad)
    return model.output(out)


def _pair(norm_first, activation="relu", seed=0):
    torch.manual_seed(seed)
    cfg = tl.TransformerConfig(**{**SMALL, "n_encoder_layers": 2, "n_decoder_layers": 3}, norm_first=norm_first,
                               final_norm=True, activation=activation)
    reference = nn.Transformer(16, 4, 2, 3, 32, dropout=0.0, batch_first=True, norm_first=norm_first,
                               activation=activation)
    return tl.load_torch_transformer(tl.Transformer(cfg), reference), reference


# ---- equality with nn.Transformer ----------------------------------------------------------------------

@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_equals_nn_transformer(norm_first, dtype, tol):
    model, reference = _pair(norm_first)
    model, reference = model.to(dtype).eval(), reference.to(dtype).eval()
    src = _ids([7, 3, 5], 7, 50)                      # padding in the source...
    tgt = _ids([6, 2, 4], 6, 60, bos=True)            # ...and in the target
    with torch.no_grad():
        ours = model(src, tgt)
        theirs = _torch_logits(model, reference, src, tgt)
    assert ours.dtype == dtype
    torch.testing.assert_close(ours, theirs, atol=tol, rtol=0)


@SETTINGS
@given(src_len=st.lists(st.integers(1, 8), min_size=1, max_size=3), tgt_len=st.integers(1, 7),
       norm_first=st.booleans(), seed=st.integers(0, 1000))
def test_equals_nn_transformer_any_padding_float64(src_len, tgt_len, norm_first, seed):
    model, reference = _pair(norm_first, seed=seed % 3)
    model, reference = model.double().eval(), reference.double().eval()
    torch.manual_seed(seed)
    src = _ids(src_len, max(src_len), 50)
    tgt = _ids([max(1, tgt_len - b) for b in range(len(src_len))], tgt_len, 60, bos=True)
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt), _torch_logits(model, reference, src, tgt), atol=1e-10, rtol=0)


@SETTINGS
@given(src_len=st.lists(st.integers(1, 8), min_size=1, max_size=3), tgt_len=st.lists(st.integers(1, 7), min_size=1,
       max_size=3), norm_first=st.booleans(), seed=st.integers(0, 1000))
def test_causal_only_target_mask_equals_padding_and_causal_on_real_positions(src_len, tgt_len, norm_first, seed):
    """The model's target mask has no padding part: on right-padded targets (the only layout the batching of
    chapter 10 makes) every real position's logits equal those under the padding-AND-causal mask."""
    n = min(len(src_len), len(tgt_len))
    src_len, tgt_len = src_len[:n], tgt_len[:n]
    model, reference = _pair(norm_first, seed=seed % 3)
    model, reference = model.double().eval(), reference.double().eval()
    torch.manual_seed(seed)
    src = _ids(src_len, max(src_len), 50)
    tgt = _ids(tgt_len, max(tgt_len), 60, bos=True)
    real = torch.arange(tgt.size(1))[None] < torch.tensor(tgt_len)[:, None]          # (B, T)
    with torch.no_grad():
        ours = model(src, tgt)
        padded = _torch_logits(model, reference, src, tgt, tgt_padding=True)
    torch.testing.assert_close(ours[real], padded[real], atol=1e-10, rtol=0)


def test_start_token_equal_to_pad_is_not_masked():
    """Marian starts the decoder from pad (pad_id == bos_id): the start token is a real key, so each sentence
    gives the same logits alone as in a padded batch, and the first position is finite."""
    torch.manual_seed(0)
    cfg = tl.TransformerConfig(**{**SMALL, "tgt_vocab_size": 50}, pad_id=49, bos_id=49, eos_id=0,
                               share_embeddings=True)
    model = tl.Transformer(cfg).eval()
    src = torch.tensor([[5, 6, 7, 0, 49], [8, 9, 10, 11, 0]])
    tgt = torch.tensor([[49, 12, 13, 49], [49, 14, 15, 16]])
    with torch.no_grad():
        batch = model(src, tgt)
        alone = model(src[:1, :4], tgt[:1, :3])
    assert torch.isfinite(batch).all()
    torch.testing.assert_close(batch[0, :3], alone[0], atol=1e-5, rtol=0)
    # the older mask hid the start token from every query: the first query saw no key at all
    assert not tl.target_mask(tgt, cfg.pad_id)[:, 0, 0].any()


def test_old_config_dicts_load_with_the_papers_defaults():
    """A dict saved before the Marian fields existed loads with their defaults, and today's to_dict of such a
    config is that same dict (chapter 12 compares saved dicts field by field); set, the fields round-trip."""
    old = {k: v for k, v in dataclasses.asdict(tl.TransformerConfig(**SMALL)).items()
           if k not in ("positional_layout", "output_bias")}
    cfg = tl.TransformerConfig.from_dict(old)
    assert cfg.positional_layout == "interleaved" and cfg.output_bias is False
    assert tl.Transformer(cfg).output.bias is None
    assert cfg.to_dict() == old
    marian = tl.TransformerConfig(**SMALL, positional_layout="half", output_bias=True)
    d = json.loads(json.dumps(marian.to_dict()))
    assert d["positional_layout"] == "half" and d["output_bias"] is True
    assert tl.TransformerConfig.from_dict(d) == marian


def test_marian_options_build_the_right_modules():
    cfg = tl.TransformerConfig(**SMALL, positional_layout="half", output_bias=True, activation="silu")
    model = tl.Transformer(cfg)
    torch.testing.assert_close(model.positional.pe, half_layout(tl.sinusoidal_table(32, 16)))
    assert model.output.bias.shape == (60,) and torch.equal(model.output.bias, torch.zeros(60))
    with pytest.raises(ValueError, match="positional_layout"):
        tl.TransformerConfig(**SMALL, positional_layout="split")
    with pytest.raises(ValueError, match="output_bias"):
        tl.TransformerConfig(**SMALL, output_bias=1)


def test_equals_nn_transformer_gelu_and_gradients():
    model, reference = _pair(False, activation="gelu")
    model, reference = model.double().train(), reference.double().train()   # dropout is 0: deterministic
    src, tgt = _ids([5, 3], 5, 50), _ids([4, 2], 4, 60, bos=True)
    (model(src, tgt) ** 2).sum().backward()
    model_grad = model.encoder.layers[0].feed_forward.linear1.weight.grad.clone()
    model.zero_grad()
    (_torch_logits(model, reference, src, tgt) ** 2).sum().backward()
    torch.testing.assert_close(model_grad, reference.encoder.layers[0].linear1.weight.grad)


def test_load_refuses_mismatches():
    ref = nn.Transformer(16, 4, 2, 2, 32, batch_first=True)
    with pytest.raises(ValueError, match="final_norm"):
        tl.load_torch_transformer(tl.Transformer(tl.TransformerConfig(**SMALL)), ref)
    with pytest.raises(ValueError, match="norm_first"):
        tl.load_torch_transformer(tl.Transformer(tl.TransformerConfig(**SMALL, norm_first=True)), ref)
    with pytest.raises(ValueError, match="LayerNorm"):
        tl.load_torch_transformer(tl.Transformer(tl.TransformerConfig(**SMALL, norm="rms", final_norm=True)), ref)
    three = tl.Transformer(tl.TransformerConfig(**{**SMALL, "n_decoder_layers": 3}, final_norm=True))
    before = {k: v.clone() for k, v in three.state_dict().items()}
    with pytest.raises(ValueError, match="layer counts"):
        tl.load_torch_transformer(three, ref)
    # both stacks are checked before either is copied: the encoder, which would fit, is untouched
    assert all(torch.equal(v, before[k]) for k, v in three.state_dict().items())
    with pytest.raises(ValueError, match="d_ff"):
        tl.load_torch_transformer(tl.Transformer(tl.TransformerConfig(**{**SMALL, "d_ff": 64}, final_norm=True)), ref)
    with pytest.raises(ValueError, match="batch_first"):
        tl.load_torch_transformer(tl.Transformer(tl.TransformerConfig(**SMALL, final_norm=True)),
                                  nn.Transformer(16, 4, 2, 2, 32))
    with pytest.raises(TypeError, match="reference"):
        tl.load_torch_transformer(tl.Transformer(tl.TransformerConfig(**SMALL, final_norm=True)), ref.encoder)


# ---- the config ----------------------------------------------------------------------------------------

def test_config_json_round_trip():
    cfg = tl.TransformerConfig(**SMALL, norm_first=True, share_embeddings=False, final_norm=None)
    assert tl.TransformerConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    with pytest.raises(ValueError, match="unknown"):
        tl.TransformerConfig.from_dict({**cfg.to_dict(), "n_layers": 6})


def test_config_defaults_are_the_base_model():
    c = tl.TransformerConfig(100, 100)
    assert (c.d_model, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.d_ff, c.dropout, c.norm_first) == \
        (512, 8, 6, 6, 2048, 0.1, False)


@pytest.mark.parametrize("field,value", [
    ("d_model", 30), ("n_heads", 0), ("src_vocab_size", 0), ("tgt_vocab_size", -1), ("n_encoder_layers", 0),
    ("d_ff", 1.5), ("max_len", 0), ("dropout", 1.0), ("dropout", -0.1), ("activation", "tanh"), ("norm", "batch"),
    ("eps", 0.0), ("pad_id", 50), ("bos_id", -1), ("eos_id", 0), ("norm_first", "yes"), ("final_norm", 1.0),
    ("n_decoder_layers", True), ("n_heads", 2.0), ("pad_id", True), ("dropout", True), ("eps", float("nan")),
])
def test_config_rejects(field, value):
    name = "n_heads" if field == "d_model" else field
    with pytest.raises(ValueError, match=name if field != "eos_id" else "pad_id"):
        tl.TransformerConfig(**{**SMALL, field: value})


def test_share_embeddings_needs_one_vocabulary():
    with pytest.raises(ValueError, match="share_embeddings"):
        tl.TransformerConfig(**SMALL, share_embeddings=True)


# ---- weight tying and the parameter count -----------------------------------------------------------------

def test_weight_tying_counts_and_identity():
    base = {**SMALL, "tgt_vocab_size": 50}
    n = {k: sum(p.numel() for p in tl.Transformer(tl.TransformerConfig(**base, **kw)).parameters())
         for k, kw in {"none": dict(tie_output=False), "out": dict(tie_output=True),
                       "all": dict(tie_output=True, share_embeddings=True)}.items()}
    assert n["none"] - n["out"] == 50 * 16 and n["out"] - n["all"] == 50 * 16
    m = tl.Transformer(tl.TransformerConfig(**base, share_embeddings=True))
    assert m.output.weight is m.tgt_embed.weight is m.src_embed.weight
    m.reset_parameters()
    assert m.output.weight is m.src_embed.weight
    untied = tl.Transformer(tl.TransformerConfig(**base, tie_output=False))
    assert untied.output.weight is not untied.tgt_embed.weight


def test_base_model_parameter_count_and_nn_transformer_stacks():
    cfg = tl.TransformerConfig(37000, 37000, share_embeddings=True, final_norm=True)
    with torch.device("meta"):
        model = tl.Transformer(cfg)
        reference = nn.Transformer(512, 8, 6, 6, 2048, batch_first=True)
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(model.encoder) + count(model.decoder) == count(reference)
    # the paper's Post-Norm model has no final norms: 2 x 1024 parameters fewer
    assert count(model) - 2 * 1024 == 63_082_496
    with torch.device("meta"):
        plain = tl.Transformer(tl.TransformerConfig(37000, 37000, share_embeddings=True))
    assert count(plain) == 63_082_496


def test_initialisation():
    torch.manual_seed(0)
    cfg = tl.TransformerConfig(**{**SMALL, "d_model": 64, "d_ff": 128, "src_vocab_size": 2000}, tie_output=False)
    m = tl.Transformer(cfg)
    emb = m.src_embed.weight
    assert emb[cfg.pad_id].abs().max() == 0
    assert abs(emb[1:].std().item() - 64 ** -0.5) < 0.01
    for name, w in [("in_proj", m.encoder.layers[0].self_attn.in_proj.weight),
                    ("linear1", m.decoder.layers[1].feed_forward.linear1.weight), ("output", m.output.weight)]:
        fan_out, fan_in = w.shape
        bound = math.sqrt(6 / (fan_in + fan_out))                     # Xavier-uniform
        assert w.abs().max() <= bound, name
        assert abs(w.std().item() - bound / math.sqrt(3)) < 0.1 * bound, name


# ---- properties of the whole model -----------------------------------------------------------------------

@SETTINGS
@given(S=st.integers(1, 6), extra=st.integers(1, 4), T=st.integers(1, 6), norm_first=st.booleans(),
       seed=st.integers(0, 2**16))
def test_source_padding_never_changes_logits(S, extra, T, norm_first, seed):
    model = _model(norm_first)
    torch.manual_seed(seed)
    src = torch.randint(3, 50, (1, S))
    tgt = _ids([T], T, 60, bos=True)
    padded = torch.cat([src, torch.zeros(1, extra, dtype=torch.long)], dim=1)
    with torch.no_grad():
        torch.testing.assert_close(model(padded, tgt), model(src, tgt), atol=1e-5, rtol=0)


@SETTINGS
@given(T=st.integers(2, 8), cut=st.integers(1, 7), seed=st.integers(0, 2**16))
def test_future_target_never_changes_past_logits(T, cut, seed):
    cut = min(cut, T - 1)
    model = _model()
    torch.manual_seed(seed)
    src = torch.randint(3, 50, (2, 5))
    tgt = _ids([T, T], T, 60, bos=True)
    tgt2 = tgt.clone()
    tgt2[:, cut:] = torch.randint(3, 60, (2, T - cut))
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt)[:, :cut], model(src, tgt2)[:, :cut], atol=1e-5, rtol=0)


@SETTINGS
@given(lengths=st.lists(st.integers(1, 6), min_size=2, max_size=3), seed=st.integers(0, 2**16))
def test_batch_equals_one_sentence_at_a_time(lengths, seed):
    """Rows padded to the batch's length give, at their real positions, their logits alone; rows are independent."""
    model = _model(True)
    torch.manual_seed(seed)
    src = _ids(lengths[::-1], max(lengths), 50)
    tgt = _ids(lengths, max(lengths), 60, bos=True)
    with torch.no_grad():
        batched = model(src, tgt)
        for b, (ns, nt) in enumerate(zip(lengths[::-1], lengths)):
            alone = model(src[b:b + 1, :ns], tgt[b:b + 1, :nt])
            torch.testing.assert_close(batched[b:b + 1, :nt], alone, atol=1e-5, rtol=0)


@SETTINGS
@given(T=st.integers(1, 8), first=st.integers(1, 3), norm_first=st.booleans(), seed=st.integers(0, 2**16))
def test_cached_decode_equals_full_decode(T, first, norm_first, seed):
    model = _model(norm_first)
    first = min(first, T)
    torch.manual_seed(seed)
    src = _ids([5, 2], 5, 50)
    tgt = torch.randint(3, 60, (2, T))
    tgt[:, 0] = 1
    src_mask = tl.padding_mask(src, 0)
    with torch.no_grad():
        memory = model.encode(src, src_mask)
        full = model.decode(tgt, memory, src_mask)
        cache = model.new_cache()
        parts = [model.decode(tgt[:, :first], memory, src_mask, cache)]
        parts += [model.decode(tgt[:, t:t + 1], memory, src_mask, cache) for t in range(first, T)]
    assert cache.length == T
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-5, rtol=0)


def test_forward_is_encode_then_decode():
    model = _model()
    src, tgt = _ids([4, 2], 4, 50), _ids([3, 3], 3, 60, bos=True)
    with torch.no_grad():
        assert torch.equal(model(src, tgt), model.decode(tgt, model.encode(src), tl.padding_mask(src, 0)))


def test_dropout_only_in_training():
    torch.manual_seed(0)
    m = tl.Transformer(tl.TransformerConfig(**{**SMALL, "dropout": 0.3}))
    src, tgt = _ids([4], 4, 50), _ids([4], 4, 60, bos=True)
    with torch.no_grad():
        assert not torch.equal(m.train()(src, tgt), m(src, tgt))
        assert torch.equal(m.eval()(src, tgt), m(src, tgt))


def test_attention_weights_maps():
    model = _model()
    src, tgt = _ids([5, 3], 5, 50), _ids([4, 2], 4, 60, bos=True)
    maps = model.attention_weights(src, tgt)
    assert [w.shape for w in maps["encoder"]] == [(2, 4, 5, 5)] * 2
    assert [w.shape for w in maps["decoder"]] == [(2, 4, 4, 4)] * 2
    assert [w.shape for w in maps["cross"]] == [(2, 4, 4, 5)] * 2
    assert maps["cross"][0][1, :, :, 3:].abs().max() == 0            # source pads get no weight
    assert torch.triu(maps["decoder"][1][0, 0], 1).abs().max() == 0   # no weight on the future
    assert not any(layer.self_attn.record_weights for layer in model.encoder.layers)


@pytest.mark.parametrize("norm_first", [False, True])
def test_autocast_bfloat16_forward_backward(norm_first):
    torch.manual_seed(0)
    m = tl.Transformer(tl.TransformerConfig(**{**SMALL, "dropout": 0.1}, norm_first=norm_first)).train()
    src, tgt = _ids([5, 3], 5, 50), _ids([4, 2], 4, 60, bos=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = m(src, tgt)
        loss = F.cross_entropy(logits.float().flatten(0, 1), torch.randint(3, 60, (8,)))
    loss.backward()
    assert logits.dtype == torch.bfloat16 and torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in m.parameters() if p.grad is not None)


def test_float64_and_to_follow_the_module():
    m = tl.Transformer(tl.TransformerConfig(**SMALL)).double()
    out = m(_ids([3], 3, 50), _ids([2], 2, 60, bos=True))
    assert out.dtype == torch.float64 and m.positional.pe.dtype == torch.float64


# ---- bad input ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("src,tgt,name", [
    (torch.tensor([[5, 50]]), torch.tensor([[1, 5]]), "src"),           # id past the source vocabulary
    (torch.tensor([[5, -1]]), torch.tensor([[1, 5]]), "src"),           # negative id
    (torch.tensor([[5, 6]]), torch.tensor([[1, 60]]), "tgt_in"),        # id past the target vocabulary
    (torch.tensor([[5.0, 6.0]]), torch.tensor([[1, 5]]), "src"),        # not integer ids
    (torch.full((1, 33), 5), torch.tensor([[1, 5]]), "src"),            # longer than max_len = 32
    (torch.tensor([[5, 6]]), torch.full((1, 33), 5), "tgt_in"),
    (torch.zeros(0, 4, dtype=torch.long), torch.zeros(0, 3, dtype=torch.long), "src"),   # empty batch
    (torch.tensor([[5, 6]]), torch.zeros(1, 0, dtype=torch.long), "tgt_in"),            # empty target
    (torch.tensor([5, 6]), torch.tensor([[1, 5]]), "src"),              # not (B, L)
])
def test_bad_ids(src, tgt, name):
    with pytest.raises(ValueError, match=name):
        _model()(src, tgt)


def test_bad_memory_and_cache_overflow():
    model = _model()
    src = _ids([3, 3], 3, 50)
    memory = model.encode(src)
    with pytest.raises(ValueError, match="memory"):
        model.decode(_ids([2], 2, 60, bos=True), memory)                 # batch 1 against memory batch 2
    with pytest.raises(ValueError, match="memory"):
        model.decode(_ids([2, 2], 2, 60, bos=True), memory[..., :8])
    cache = model.new_cache()
    with torch.no_grad():
        model.decode(torch.full((2, 30), 5), memory, None, cache)
        with pytest.raises(ValueError, match="tgt_in.*max_len"):
            model.decode(torch.full((2, 3), 5), memory, None, cache)


def test_bad_config_type():
    with pytest.raises(TypeError, match="config.*src_vocab_size"):
        tl.Transformer({"src_vocab_size": 10})


def test_any_config_with_the_fields_builds_the_model():
    """Duck typing: the model reads the fields, so a chapter's own config class (or any object with the
    fields) builds the same model as a TransformerConfig."""
    cfg = tl.TransformerConfig(**SMALL)
    own = types.SimpleNamespace(**cfg.to_dict())
    torch.manual_seed(5)
    a = tl.Transformer(cfg).eval()
    torch.manual_seed(5)
    b = tl.Transformer(own).eval()
    src, tgt = _ids([4, 2], 4, 50), _ids([3, 3], 3, 60, bos=True)
    with torch.no_grad():
        assert torch.equal(a(src, tgt), b(src, tgt))
    del own.max_len
    with pytest.raises(TypeError, match="max_len"):
        tl.Transformer(own)


def test_forward_checks_the_ids_once(monkeypatch):
    """forward checks src and tgt_in once each, decode its tgt_in once (no repeated, syncing checks): not again
    in the embedding or in the masks."""
    import transformer_lib.embedding as embedding_module
    import transformer_lib.masks as masks_module
    import transformer_lib.model as model_module
    calls = []

    def counting(ids, vocab_size, name="ids", dims=None):
        calls.append(name)
        return check_token_ids(ids, vocab_size, name, dims)

    for module in (model_module, embedding_module, masks_module):
        monkeypatch.setattr(module, "check_token_ids", counting)
    model = _model()
    src, tgt = _ids([4, 2], 4, 50), _ids([3, 3], 3, 60, bos=True)
    with torch.no_grad():
        model(src, tgt)
        assert sorted(calls) == ["src", "tgt_in"]
        src_mask = tl.padding_mask(src, 0)
        calls.clear()
        memory = model.encode(src)
        model.decode(tgt, memory, src_mask)
        assert calls == ["src", "tgt_in"]


def test_forward_refuses_batches_of_two_sizes():
    with pytest.raises(ValueError, match="batch size"):
        _model()(_ids([4, 2], 4, 50), _ids([3], 3, 60, bos=True))


def test_the_config_declares_the_layer_options_as_chapter_7_does():
    """TransformerConfig repeats LayerConfig's fields (a flat config whose first two fields are the vocabulary
    sizes, given by position): the copy must keep the same names and defaults."""
    layer = {f.name: f.default for f in dataclasses.fields(tl.LayerConfig)}
    model = {f.name: f.default for f in dataclasses.fields(tl.TransformerConfig)}
    assert {name: model.get(name, "missing") for name in layer} == layer
