"""Tests of transformer_lib.encoder (chapter 7): equality with nn.TransformerEncoderLayer/nn.TransformerEncoder
(copied weights, padding mask, both norm modes), the padding property, bad input."""
import types
import warnings

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from transformer_lib.encoder import Encoder, EncoderLayer, LayerConfig, load_torch_encoder, load_torch_encoder_layer
from transformer_lib.masks import padding_mask

D, H, FF, PAD = 16, 4, 40, 0


def _assert_matches_torch(ours, ref):
    """Our layer equals PyTorch's on a padded batch (PyTorch's fast path off: it zeroes pads)."""
    ids, x = _batch()
    with torch.no_grad():
        torch.backends.mha.set_fastpath_enabled(False)
        try:
            expected = ref(x, src_key_padding_mask=(ids == PAD))
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
        torch.testing.assert_close(ours(x, padding_mask(ids, PAD)), expected, atol=1e-5, rtol=1e-5)


def _batch(seed: int = 0, lengths=(6, 3, 5)):
    g = torch.Generator().manual_seed(seed)
    L = max(lengths)
    ids = torch.randint(1, 50, (len(lengths), L), generator=g)
    for i, n in enumerate(lengths):
        ids[i, n:] = PAD
    x = torch.randn(len(lengths), L, D, generator=g)
    return ids, x


def _reference(n_layers, norm_first, activation="relu", seed=0):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first,
                                       activation=activation)
    return nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(D) if norm_first else None,
                                 enable_nested_tensor=not norm_first)


def _run_reference(ref, x, ids, fastpath: bool):
    torch.backends.mha.set_fastpath_enabled(fastpath)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The PyTorch API of nested tensors")
            return ref(x, src_key_padding_mask=(ids == PAD))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_layer_matches_torch(norm_first, activation):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True, norm_first=norm_first,
                                     activation=activation).eval()
    layer = EncoderLayer(LayerConfig(D, H, FF, 0.0, norm_first, activation=activation))
    ours = load_torch_encoder_layer(layer, ref).eval()
    _assert_matches_torch(ours, ref)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_matches_torch_fast_path_off_all_positions(norm_first):
    ref = _reference(3, norm_first).eval()
    ours = load_torch_encoder(Encoder(LayerConfig(D, H, FF, 0.0, norm_first), 3), ref).eval()
    ids, x = _batch(1)
    with torch.no_grad():
        expected = _run_reference(ref, x, ids, fastpath=False)
        torch.testing.assert_close(ours(x, padding_mask(ids, PAD)), expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_matches_torch_fast_path_on_real_positions(norm_first):
    """PyTorch's eval fast path (nested tensors for Post-Norm) zeroes pad positions: compare real ones."""
    ref = _reference(2, norm_first).eval()
    ours = load_torch_encoder(Encoder(LayerConfig(D, H, FF, 0.0, norm_first), 2), ref).eval()
    ids, x = _batch(2)
    real = ids != PAD
    with torch.no_grad():
        expected = _run_reference(ref, x, ids, fastpath=True)
        torch.testing.assert_close(ours(x, padding_mask(ids, PAD))[real], expected[real], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_matches_torch_in_training_mode_with_gradients(norm_first):
    """Training mode (dropout 0) never takes the fast path: outputs and weight gradients agree everywhere."""
    ref = _reference(2, norm_first).train()
    ours = load_torch_encoder(Encoder(LayerConfig(D, H, FF, 0.0, norm_first), 2), ref).train()
    ids, x = _batch(3)
    out_ref = ref(x, src_key_padding_mask=(ids == PAD))
    out_ours = ours(x, padding_mask(ids, PAD))
    torch.testing.assert_close(out_ours, out_ref, atol=1e-5, rtol=1e-5)
    target = torch.randn_like(out_ref)
    ((out_ref - target) ** 2).mean().backward()
    ((out_ours - target) ** 2).mean().backward()
    for i in range(2):
        pairs = [(ours.layers[i].self_attn.in_proj.weight, ref.layers[i].self_attn.in_proj_weight),
                 (ours.layers[i].feed_forward.linear1.weight, ref.layers[i].linear1.weight),
                 (ours.layers[i].sublayer2.norm.weight, ref.layers[i].norm2.weight)]
        for a, b in pairs:
            torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-4)


def test_final_norm_defaults():
    assert isinstance(Encoder(LayerConfig(D, H, FF, norm_first=False), 2).norm, nn.Identity)
    assert not isinstance(Encoder(LayerConfig(D, H, FF, norm_first=True), 2).norm, nn.Identity)
    assert not isinstance(Encoder(LayerConfig(D, H, FF, norm_first=False, final_norm=True), 2).norm, nn.Identity)
    assert isinstance(Encoder(LayerConfig(D, H, FF, norm_first=True, final_norm=False), 2).norm, nn.Identity)


def test_paper_size_parameter_count_matches_torch():
    ours = EncoderLayer(LayerConfig(512, 8, 2048))
    ref = nn.TransformerEncoderLayer(512, 8, 2048, batch_first=True)
    n = sum(p.numel() for p in ours.parameters())
    assert n == sum(p.numel() for p in ref.parameters()) == 3_152_384


@settings(max_examples=examples(20), deadline=None)
@given(lengths=st.lists(st.integers(1, 7), min_size=1, max_size=3), extra=st.integers(0, 4),
       seed=st.integers(0, 2**16), norm_first=st.booleans(), norm=st.sampled_from(["layer", "rms"]))
def test_pads_never_change_real_outputs(lengths, extra, seed, norm_first, norm):
    """Garbage at pad positions and extra pad positions leave every real position's output unchanged,
    and each sentence gives the same outputs as it does alone, unpadded."""
    torch.manual_seed(seed)
    enc = Encoder(LayerConfig(D, H, FF, dropout=0.0, norm_first=norm_first, norm=norm), 2).eval()
    ids, x = _batch(seed, tuple(lengths))
    with torch.no_grad():
        base = enc(x, padding_mask(ids, PAD))
        B, L = ids.shape
        ids2 = torch.cat([ids, torch.full((B, extra), PAD)], dim=1)
        x2 = torch.cat([x, torch.zeros(B, extra, D)], dim=1)
        x2[ids2 == PAD] = 50 * torch.randn(int((ids2 == PAD).sum()), D)
        padded = enc(x2, padding_mask(ids2, PAD))
        for i, n in enumerate(lengths):
            torch.testing.assert_close(padded[i, :n], base[i, :n], atol=1e-5, rtol=1e-5)
            alone = enc(x[i:i + 1, :n])[0]
            torch.testing.assert_close(alone, base[i, :n], atol=1e-5, rtol=1e-5)


def test_mask_matters():
    """Guard against a test that cannot fail: without the mask, pad garbage does change real outputs."""
    torch.manual_seed(0)
    enc = Encoder(LayerConfig(D, H, FF, dropout=0.0), 2).eval()
    ids, x = _batch(0)
    x2 = x.clone()
    x2[ids == PAD] = 50.0
    with torch.no_grad():
        assert not torch.allclose(enc(x)[1, :3], enc(x2)[1, :3], atol=1e-3)


def test_load_checks():
    ref = _reference(2, norm_first=False)
    with pytest.raises(ValueError, match="layer counts"):
        load_torch_encoder(Encoder(LayerConfig(D, H, FF), 3), ref)
    with pytest.raises(ValueError, match="final norm"):
        load_torch_encoder(Encoder(LayerConfig(D, H, FF, final_norm=True), 2), ref)
    with pytest.raises(ValueError, match="norm_first"):
        load_torch_encoder_layer(EncoderLayer(LayerConfig(D, H, FF, norm_first=True)), ref.layers[0])
    with pytest.raises(ValueError, match="LayerNorm"):
        load_torch_encoder_layer(EncoderLayer(LayerConfig(D, H, FF, norm="rms")), ref.layers[0])
    with pytest.raises(ValueError, match="n_heads"):
        load_torch_encoder_layer(EncoderLayer(LayerConfig(D, 2, FF)), ref.layers[0])
    with pytest.raises(ValueError, match="activation"):
        load_torch_encoder_layer(EncoderLayer(LayerConfig(D, H, FF, activation="gelu")), ref.layers[0])
    with pytest.raises(ValueError, match="eps"):
        load_torch_encoder_layer(EncoderLayer(LayerConfig(D, H, FF, eps=1e-6)), ref.layers[0])
    with pytest.raises(TypeError):
        load_torch_encoder(Encoder(LayerConfig(D, H, FF), 2), ref.layers[0])


@pytest.mark.parametrize("build, word", [
    (lambda: Encoder(LayerConfig(D, H, FF), 0), "n_layers"),
    (lambda: EncoderLayer(LayerConfig(15, 4, FF)), "divisible"),
    (lambda: EncoderLayer(LayerConfig(D, H, FF, activation="tanh")), "activation"),
    (lambda: EncoderLayer(LayerConfig(D, H, FF, norm="batch")), "norm"),
    (lambda: Encoder(LayerConfig(D, H, FF), 1)(torch.randn(2, 5, D + 1)), "shape"),
    (lambda: Encoder(LayerConfig(D, H, FF), 1)(torch.randn(2, 5, D), torch.ones(2, 1, 1, 4, dtype=torch.bool)), "mask"),
    (lambda: Encoder(LayerConfig(D, H, FF), 1)(torch.randn(2, 5, D), torch.ones(2, 1, 1, 5)), "boolean"),
])
def test_bad_input(build, word):
    with pytest.raises(ValueError, match=word):
        build()


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("norm", ["layer", "rms"])
def test_autocast_bfloat16(norm_first, norm):
    """Under CPU autocast with bfloat16 the encoder runs, stays finite, and stays close to float32."""
    torch.manual_seed(0)
    enc = Encoder(LayerConfig(D, H, FF, dropout=0.0, norm_first=norm_first, norm=norm), 2).eval()
    ids, x = _batch(4)
    mask = padding_mask(ids, PAD)
    with torch.no_grad():
        ref = enc(x, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = enc(x, mask)
    assert torch.isfinite(out).all()
    real = ids != PAD
    torch.testing.assert_close(out.float()[real], ref[real], atol=5e-2, rtol=5e-2)


# ---- the shared loading helpers (transformer_lib.torch_weights) and duck typing ----------------------------

class _OwnLayer(nn.Module):
    """A reader's own encoder layer: not an EncoderLayer, but built from the same parts."""

    def __init__(self):
        super().__init__()
        template = EncoderLayer(LayerConfig(D, H, FF, dropout=0.0))
        self.self_attn, self.feed_forward = template.self_attn, template.feed_forward
        self.sublayer1, self.sublayer2 = template.sublayer1, template.sublayer2
        self.norm_first = False

    def forward(self, x, mask=None):
        x = self.sublayer1(x, lambda y: self.self_attn(y, y, y, mask))
        return self.sublayer2(x, self.feed_forward)


def test_loader_takes_any_layer_with_the_parts():
    """The loaders check for the parts they read, not for the class: a reader's own layer loads."""
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, batch_first=True).eval()
    own = load_torch_encoder_layer(_OwnLayer(), ref).eval()
    assert isinstance(own, _OwnLayer) and not isinstance(own, EncoderLayer)
    _assert_matches_torch(own, ref)


def test_loader_names_the_missing_parts():
    ref = _reference(1, norm_first=False)
    with pytest.raises(TypeError, match="layer .*sublayer1, sublayer2"):
        load_torch_encoder_layer(nn.Module(), ref.layers[0])
    with pytest.raises(TypeError, match="encoder .*layers"):
        load_torch_encoder(EncoderLayer(LayerConfig(D, H, FF)), ref)


def test_failed_load_copies_nothing():
    """Every check runs before the first copy: a refused reference leaves the layer as it was."""
    ref = _reference(1, norm_first=False).layers[0]
    for layer in (EncoderLayer(LayerConfig(D, H, FF, eps=1e-6)), EncoderLayer(LayerConfig(D, H, FF, norm="rms"))):
        before = {k: v.clone() for k, v in layer.state_dict().items()}
        with pytest.raises(ValueError):
            load_torch_encoder_layer(layer, ref)
        for k, v in layer.state_dict().items():
            assert torch.equal(v, before[k]), k


def test_loader_refuses_sequence_first_and_biasless_references():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seq_first = nn.TransformerEncoderLayer(D, H, FF)
    with pytest.raises(ValueError, match="batch_first"):
        load_torch_encoder_layer(EncoderLayer(LayerConfig(D, H, FF)), seq_first)
    no_bias = nn.TransformerEncoderLayer(D, H, FF, batch_first=True, bias=False)
    with pytest.raises(ValueError, match="bias"):
        load_torch_encoder_layer(EncoderLayer(LayerConfig(D, H, FF)), no_bias)


def test_torch_activation_names():
    import torch.nn.functional as F

    from transformer_lib.torch_weights import torch_activation
    assert [torch_activation(a) for a in (F.relu, nn.ReLU(), F.gelu, nn.GELU(), F.silu, nn.SiLU())] == \
        ["relu", "relu", "gelu", "gelu", "silu", "silu"]
    tanh_gelu = nn.GELU(approximate="tanh")                         # not our "gelu": refused, not renamed
    assert torch_activation(tanh_gelu) is tanh_gelu and torch_activation(torch.tanh) is torch.tanh


def test_check_same_names_the_setting():
    from transformer_lib.torch_weights import check_same
    check_same("d_ff", 32, 32)
    with pytest.raises(ValueError, match=r"d_ff differs: reference 32, ours 64"):
        check_same("d_ff", 32, 64)


@pytest.mark.parametrize("bad", [0, -1, 2.0, True, "2"])
def test_layer_count_is_a_whole_number(bad):
    """One check for both stacks (chapter 1's check_int): True and 2.0 are not layer counts."""
    with pytest.raises(ValueError, match="n_layers"):
        Encoder(LayerConfig(D, H, FF), bad)


def test_the_stacks_take_one_checked_config():
    """The layers and stacks take chapter 7's LayerConfig; a config of another type, or loose sizes as before,
    are refused with an error that names the argument, and TransformerConfig's fields give one."""
    from transformer_lib.decoder import Decoder, DecoderLayer
    from transformer_lib.model import TransformerConfig
    for build in (lambda: Encoder(3, LayerConfig()), lambda: EncoderLayer(D), lambda: Decoder(2, LayerConfig()),
                  lambda: DecoderLayer(object())):
        with pytest.raises(TypeError, match="config must be a LayerConfig"):
            build()
    options = LayerConfig.of(TransformerConfig(10, 10, d_model=D, n_heads=H, d_ff=FF, norm_first=True))
    assert options == LayerConfig(D, H, FF, norm_first=True)
    with pytest.raises(ValueError, match="divisible"):
        LayerConfig.of(types.SimpleNamespace(**{**vars(options), "n_heads": 3}))
