"""Tests of transformer_lib.norm (chapter 6): LayerNorm and RMSNorm against PyTorch, the sublayer wrapper,
properties, bad input."""
import pytest
import torch
import torch.nn.functional as F
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.norm import LayerNorm, RMSNorm, SublayerConnection, layer_norm, make_norm, rms_norm


def _random_affine(module: nn.Module, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("eps", [1e-5, 1e-6, 0.1])
def test_layer_norm_matches_torch(fused, eps):
    torch.manual_seed(0)
    ref = nn.LayerNorm(24, eps=eps)
    _random_affine(ref)
    ours = LayerNorm(24, eps=eps, fused=fused)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 7, 24) * 4 + 2
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    x.requires_grad_(True)
    (gx_ours,) = torch.autograd.grad(ours(x).square().sum(), x)
    (gx_ref,) = torch.autograd.grad(ref(x).square().sum(), x)
    torch.testing.assert_close(gx_ours, gx_ref, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("fused", [True, False])
def test_rms_norm_matches_torch(fused):
    torch.manual_seed(0)
    ref = nn.RMSNorm(24, eps=1e-6)
    _random_affine(ref)
    ours = RMSNorm(24, fused=fused)
    ours.load_state_dict(ref.state_dict())
    x = torch.randn(3, 7, 24) * 4 + 2
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


def test_rms_norm_formula():
    x = torch.randn(5, 9)
    expected = x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(rms_norm(x), expected)


def test_layer_norm_uses_population_variance():
    """Against the formula with variance divided by d, and NOT the unbiased (d - 1) version."""
    x = torch.randn(50, 8)
    mu = x.mean(-1, keepdim=True)
    pop = (x - mu) / torch.sqrt(((x - mu) ** 2).sum(-1, keepdim=True) / 8 + 1e-5)
    unbiased = (x - mu) / torch.sqrt(((x - mu) ** 2).sum(-1, keepdim=True) / 7 + 1e-5)
    torch.testing.assert_close(layer_norm(x), pop)
    assert not torch.allclose(layer_norm(x), unbiased, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_from_scratch_low_precision(dtype):
    """Statistics in float32: large half-precision inputs (x² overflows float16) stay finite and correct."""
    x = torch.randn(4, 64) * 300
    for ours, ref in ((layer_norm(x.to(dtype)), F.layer_norm(x, (64,))),
                      (rms_norm(x.to(dtype)), F.rms_norm(x, (64,), eps=1e-6))):
        assert ours.dtype == dtype and torch.isfinite(ours).all()
        torch.testing.assert_close(ours.float(), ref, atol=2e-2, rtol=2e-2)


@settings(max_examples=examples(25), deadline=None)
@given(B=st.integers(1, 4), L=st.integers(1, 6), seed=st.integers(0, 2**16),
       scale=st.floats(1e-3, 1e3), shift=st.floats(-50.0, 50.0),
       eps=st.sampled_from([1e-5, 1e-3, 0.1]))
def test_layer_norm_of_scaled_and_shifted_rows_equals_layer_norm_with_eps_over_scale_squared(
        B, L, seed, scale, shift, eps):
    """LayerNorm is invariant to scaling and shifting each position only up to eps: the mean removes
    the shift, the variance grows by scale², and eps does not, so LN_eps(scale·x + shift) is exactly
    LN_{eps/scale²}(x). In float64, so that the identity is tested and not float32 rounding."""
    torch.manual_seed(seed)
    x = torch.randn(B, L, 16, dtype=torch.float64)
    ln = LayerNorm(16, eps=eps).double()
    _random_affine(ln, seed)
    ln_scaled_eps = LayerNorm(16, eps=eps / scale ** 2).double()
    ln_scaled_eps.load_state_dict(ln.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(ln(x * scale + shift), ln_scaled_eps(x), atol=1e-9, rtol=1e-9)


@settings(max_examples=examples(25), deadline=None)
@given(B=st.integers(1, 4), L=st.integers(1, 6), seed=st.integers(0, 2**16),
       scale=st.floats(0.1, 100.0), shift=st.floats(-50.0, 50.0))
def test_layer_norm_without_eps_is_invariant_to_scale_and_shift_of_each_position(B, L, seed, scale,
                                                                                    shift):
    """With eps = 0 the invariance is exact, up to float32 rounding: rounding scale·x + shift and its
    mean costs a few float32 epsilons of |shift| + scale·max|x| per entry, which the normalisation
    divides by scale·σ (σ: the row's standard deviation); the same error in σ scales the output y, hence
    the factor 1 + |y|. Bound: 8 such units (a 20,000-case sweep over the drawn ranges reached 1.8)."""
    torch.manual_seed(seed)
    x = torch.randn(B, L, 16)
    ln = LayerNorm(16, eps=0.0)
    with torch.no_grad():
        y = ln(x)
        error = (ln(x * scale + shift) - y).abs()
    sigma = x.std(-1, unbiased=False, keepdim=True)
    unit = torch.finfo(torch.float32).eps * (abs(shift) / scale + x.abs().amax(-1, keepdim=True)) / sigma
    bound = 8 * unit * (1 + y.abs())
    assert (error <= bound).all(), (error / bound).max()


def test_eps_breaks_scale_invariance_of_a_row_with_small_variance():
    """Why the property above needs eps = 0: with PyTorch's eps = 1e-5, a row of variance 1 scaled by
    0.1 (variance 0.01) is divided by sqrt(0.01 + eps) instead of 0.1, a visible change."""
    torch.manual_seed(0)
    x = torch.randn(1, 16)
    x = (x - x.mean()) / x.std(unbiased=False)               # variance exactly 1
    ln = LayerNorm(16)                                       # eps = 1e-5
    with torch.no_grad():
        change = (ln(0.1 * x) - ln(x)).abs().max().item()
    # LN(0.1·x) = x / sqrt(1 + 1e-3), LN(x) = x / sqrt(1 + 1e-5): apart by about 5e-4 · |x|
    expected = (x.abs().max() * ((1 + 1e-5) ** -0.5 - (1 + 1e-3) ** -0.5)).item()
    assert change > 1e-4
    assert abs(change - expected) < 1e-6, (change, expected)


@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 2**16), other_len=st.integers(1, 10))
def test_layer_norm_row_independent_of_batch_and_padding(seed, other_len):
    torch.manual_seed(seed)
    a = torch.randn(1, 4, 16)
    other = torch.randn(1, other_len, 16)
    L = max(4, other_len)
    batch = torch.zeros(2, L, 16)
    batch[0, :4], batch[1, :other_len] = a[0], other[0]
    ln = LayerNorm(16)
    torch.testing.assert_close(ln(batch)[0, :4], ln(a)[0], atol=0, rtol=0)


def test_batch_norm_depends_on_batch():
    """The chapter's contrast: BatchNorm's output for the same row changes with its batch-mates."""
    torch.manual_seed(0)
    a, b, c = torch.randn(5, 8), torch.randn(5, 8) + 3, torch.randn(5, 8) * 4
    bn = nn.BatchNorm1d(8).train()
    assert not torch.allclose(bn(torch.cat([a, b]))[:5], bn(torch.cat([a, c]))[:5], atol=0.1)


@pytest.mark.parametrize("norm, cls", [("layer", LayerNorm), ("rms", RMSNorm)])
def test_make_norm(norm, cls):
    m = make_norm(norm, 12, eps=1e-3)
    assert isinstance(m, cls) and m.eps == 1e-3 and m.d_model == 12


@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_sublayer_post_and_pre_norm_formulas(norm):
    torch.manual_seed(0)
    f = nn.Linear(10, 10)
    x = torch.randn(2, 3, 10)
    post = SublayerConnection(10, dropout=0.0, norm=norm)
    pre = SublayerConnection(10, dropout=0.0, norm_first=True, norm=norm)
    _random_affine(post.norm, 1)
    _random_affine(pre.norm, 2)
    torch.testing.assert_close(post(x, f), post.norm(x + f(x)))
    torch.testing.assert_close(pre(x, f), x + f(pre.norm(x)))


def test_sublayer_dropout_on_branch_only():
    """Pre-Norm with dropout 1.0 drops the whole branch: the output is x itself (the residual path is untouched)."""
    pre = SublayerConnection(6, dropout=1.0, norm_first=True).train()
    x = torch.randn(2, 3, 6)
    torch.testing.assert_close(pre(x, lambda y: y * 5), x)
    pre.eval()
    torch.testing.assert_close(pre(x, lambda y: y * 5), x + 5 * pre.norm(x))


def test_sublayer_matches_torch_encoder_layer_blocks():
    """SublayerConnection reproduces nn.TransformerEncoderLayer's ff half in both norm modes."""
    torch.manual_seed(0)
    for norm_first in (False, True):
        ref = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=norm_first).eval()
        sub = SublayerConnection(16, 0.0, norm_first)
        sub.norm.load_state_dict(ref.norm2.state_dict())
        x = torch.randn(2, 5, 16)
        expected = x + ref._ff_block(ref.norm2(x)) if norm_first else ref.norm2(x + ref._ff_block(x))
        torch.testing.assert_close(sub(x, ref._ff_block), expected)


@pytest.mark.parametrize("build, word", [
    (lambda: LayerNorm(0), "d_model"),
    (lambda: LayerNorm(8.5), "d_model"),
    (lambda: RMSNorm(8, eps=-1e-6), "eps"),
    (lambda: make_norm("batch", 8), "norm"),
    (lambda: LayerNorm(8)(torch.randn(2, 7)), "d_model=8"),
    (lambda: RMSNorm(8)(torch.randn(2, 7)), "d_model=8"),
    (lambda: SublayerConnection(8, dropout=0.0)(torch.randn(2, 3, 8), lambda y: y[:, :1]), "sublayer"),
])
def test_bad_input(build, word):
    with pytest.raises(ValueError, match=word):
        build()


@pytest.mark.parametrize("build", [lambda: LayerNorm(8), lambda: LayerNorm(8, fused=False), lambda: RMSNorm(8),
                                   lambda: RMSNorm(8, fused=False)])
def test_forward_reads_no_value_back_from_the_device(build):
    norm = build().to("meta")
    assert norm(torch.zeros(2, 3, 8, device="meta")).shape == (2, 3, 8)


@pytest.mark.parametrize("build, word", [
    (lambda: LayerNorm(True), "d_model"),
    (lambda: RMSNorm(8, eps=float("nan")), "eps"),
    (lambda: LayerNorm(8, eps=float("inf")), "eps"),
    (lambda: SublayerConnection(8, dropout=1.5), "dropout"),
    (lambda: SublayerConnection(8, norm="rms", eps=-1.0), "eps"),
])
def test_constructors_check_their_arguments(build, word):
    with pytest.raises(ValueError, match=word):
        build()
