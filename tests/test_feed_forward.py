"""Tests of transformer_lib.feed_forward (chapter 5): reference formulas, properties, bad input."""
import pytest
import torch
import torch.nn.functional as F
from conftest import assert_dropout_only_in_training, examples
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.feed_forward import ACTIVATIONS, PositionwiseFeedForward, get_activation, swiglu_width


@pytest.mark.parametrize("activation", ["relu", "gelu", "silu"])
def test_matches_formula(activation):
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(12, 40, activation=activation).eval()
    x = torch.randn(3, 5, 12)
    W1, b1 = ffn.linear1.weight.T, ffn.linear1.bias           # (d_model, d_ff)
    W2, b2 = ffn.linear2.weight.T, ffn.linear2.bias           # (d_ff, d_model)
    act = {"relu": torch.relu, "gelu": lambda t: 0.5 * t * (1 + torch.erf(t / 2 ** 0.5)),
           "silu": lambda t: t * torch.sigmoid(t)}[activation]
    expected = act(x @ W1 + b1) @ W2 + b2
    torch.testing.assert_close(ffn(x), expected, atol=1e-5, rtol=1e-5)


def test_matches_torch_encoder_layer_ffn():
    """The same sublayer inside nn.TransformerEncoderLayer: linear2(dropout(act(linear1(x))))."""
    torch.manual_seed(0)
    ref = torch.nn.TransformerEncoderLayer(16, 2, 48, dropout=0.0, batch_first=True, activation="gelu").eval()
    ffn = PositionwiseFeedForward(16, 48, activation="gelu").eval()
    ffn.load_state_dict({"linear1.weight": ref.linear1.weight, "linear1.bias": ref.linear1.bias,
                         "linear2.weight": ref.linear2.weight, "linear2.bias": ref.linear2.bias})
    x = torch.randn(2, 7, 16)
    torch.testing.assert_close(ffn(x), ref._ff_block(x))


def test_paper_sizes():
    ffn = PositionwiseFeedForward(512, 2048)
    assert sum(p.numel() for p in ffn.parameters()) == 2_099_712
    assert ffn.linear1.weight.shape == (2048, 512) and ffn.linear2.weight.shape == (512, 2048)


def test_key_value_memory_sum():
    torch.manual_seed(1)
    ffn = PositionwiseFeedForward(6, 20).eval()
    x = torch.randn(4, 6)
    coeff = F.relu(x @ ffn.linear1.weight.T + ffn.linear1.bias)        # (4, d_ff)
    out = ffn.linear2.bias.expand(4, 6).clone()
    for i in range(20):
        out += coeff[:, i:i + 1] * ffn.linear2.weight[:, i]
    torch.testing.assert_close(out, ffn(x))


@settings(max_examples=examples(25), deadline=None)
@given(B=st.integers(1, 3), L=st.integers(1, 9), seed=st.integers(0, 2**16))
def test_position_wise_and_permutation_equivariant(B, L, seed):
    torch.manual_seed(seed)
    ffn = PositionwiseFeedForward(8, 24, activation="silu").eval()
    x = torch.randn(B, L, 8)
    whole = ffn(x)
    for i in range(L):
        torch.testing.assert_close(whole[:, i], ffn(x[:, i]), atol=1e-6, rtol=1e-6)
    perm = torch.randperm(L)
    torch.testing.assert_close(ffn(x[:, perm]), whole[:, perm], atol=1e-6, rtol=1e-6)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    assert_dropout_only_in_training(PositionwiseFeedForward(8, 32, dropout=0.5), torch.randn(2, 3, 8))


def test_activations_by_name():
    assert set(ACTIVATIONS) == {"relu", "gelu", "silu"}
    assert get_activation("gelu") is F.gelu


@pytest.mark.parametrize("kwargs, word", [
    (dict(d_model=8, d_ff=32, activation="tanh"), "activation"),
    (dict(d_model=0, d_ff=32), "d_model"),
    (dict(d_model=8, d_ff=-1), "d_ff"),
    (dict(d_model=8.0, d_ff=32), "d_model"),
])
def test_bad_construction(kwargs, word):
    with pytest.raises(ValueError, match=word):
        PositionwiseFeedForward(**kwargs)


def test_bad_dropout():
    with pytest.raises(ValueError):
        PositionwiseFeedForward(8, 32, dropout=1.5)


def test_wrong_width_input():
    with pytest.raises(ValueError, match="d_model=8"):
        PositionwiseFeedForward(8, 32)(torch.randn(2, 3, 7))


def test_attention_stack_without_ffn_is_affine_on_repeated_tokens():
    """Chapter 5's claim: with every token equal, attention-only layers (with residuals) are an affine map
    of the token; adding the FFN breaks additivity."""
    from transformer_lib.attention import MultiHeadAttention

    torch.manual_seed(0)
    attns = [MultiHeadAttention(16, 4).eval() for _ in range(4)]
    ffns = [PositionwiseFeedForward(16, 64).eval() for _ in range(4)]

    @torch.no_grad()
    def f(x, with_ffn):
        for a, m in zip(attns, ffns):
            x = x + a(x, x, x)
            if with_ffn:
                x = x + m(x)
        return x

    x = torch.randn(1, 1, 16).expand(2, 5, 16)
    y = torch.randn(1, 1, 16).expand(2, 5, 16)
    zero = torch.zeros(2, 5, 16)
    for with_ffn, affine in ((False, True), (True, False)):
        def g(t, with_ffn=with_ffn):
            return f(t, with_ffn) - f(zero, with_ffn)
        assert torch.allclose(g(x + y), g(x) + g(y), atol=1e-5) is affine


def test_forward_reads_no_value_back_from_the_device():
    ffn = PositionwiseFeedForward(8, 32).to("meta")
    assert ffn(torch.zeros(2, 3, 8, device="meta")).shape == (2, 3, 8)


@pytest.mark.parametrize("kwargs, word", [(dict(d_model=True, d_ff=4), "d_model"),
                                          (dict(d_model=8, d_ff=False), "d_ff"),
                                          (dict(d_model=8, d_ff=4, dropout=float("nan")), "dropout")])
def test_bool_sizes_and_nan_dropout_are_refused(kwargs, word):
    with pytest.raises(ValueError, match=word):
        PositionwiseFeedForward(**kwargs)


# --- SwiGLU (gated feed-forward) ------------------------------------------------------------------------

@pytest.mark.parametrize("d_ff", [96, 256, 2048, 3072])
def test_swiglu_at_two_thirds_width_has_the_parameters_of_the_plain_ffn(d_ff):
    d = 64
    plain = sum(p.numel() for p in PositionwiseFeedForward(d, d_ff, bias=False).parameters())
    width = swiglu_width(d_ff)
    gated = sum(p.numel() for p in PositionwiseFeedForward(d, width, activation="swiglu",
                                                            bias=False).parameters())
    assert plain == 2 * d * d_ff and gated == 3 * d * width
    assert 0 <= gated - plain < 3 * d                  # equal up to rounding 2/3·d_ff up to an integer


def test_swiglu_width_rounds_up_to_a_multiple():
    assert swiglu_width(4 * 4096, multiple_of=256) == 11008          # Llama-7B
    assert swiglu_width(4 * 5120, multiple_of=256) == 13824          # Llama-13B
    assert swiglu_width(3) == 2 and swiglu_width(6, multiple_of=4) == 4
    with pytest.raises(ValueError, match="multiple_of"):
        swiglu_width(12, multiple_of=0)


def test_swiglu_computes_the_gated_formula():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(16, 24, activation="swiglu").eval()
    x = torch.randn(3, 5, 16)
    with torch.no_grad():
        ref = F.linear(F.silu(F.linear(x, ffn.gate.weight, ffn.gate.bias))
                       * F.linear(x, ffn.linear1.weight, ffn.linear1.bias),
                       ffn.linear2.weight, ffn.linear2.bias)
    torch.testing.assert_close(ffn(x), ref, atol=1e-6, rtol=1e-5)
    assert PositionwiseFeedForward(16, 24).gate is None             # plain activations: no gate


def test_bias_false_drops_every_bias():
    for act in ("relu", "swiglu"):
        ffn = PositionwiseFeedForward(8, 16, activation=act, bias=False)
        assert all("bias" not in name for name, _ in ffn.named_parameters())


def test_unknown_activation_names_the_choices():
    with pytest.raises(ValueError, match="swiglu"):
        PositionwiseFeedForward(8, 16, activation="geglu")
