"""The library as its users import it: the package root holds the book's concepts (a curated list, pinned
here), every other public name lives in its module, and each subpackage re-exports its modules."""
from __future__ import annotations

import importlib
import pkgutil
import sys
import types

import transformer_lib as tl

# The curated root, pinned: adding or removing a name at the root is a decision, made here and in
# transformer_lib/__init__.py together.
PINNED = set("""
attention AttentionCache average_checkpoints average_state_dicts Batch beam_search bleu_ci BPETokenizer causal_mask
CheckpointError cleanup_distributed convert_marian copy_task corpus_bleu CorpusError Decoder
DecodableModelConfig DecoderLayer DecoderOnlyConfig DecoderOnlyLM default_device encode_pairs Encoder
EncoderLayer evaluate exact_match from_marian generate_pairs GenerationConfig greedy_decode KVCache
LabelSmoothingLoss LayerConfig LayerNorm LearnedPositionalEncoding load_checkpoint load_llama_state_dict
load_marian_dir load_model_dir load_torch_transformer ModelDirError MultiHeadAttention noam_lambda
noam_optimizer NonFiniteError number_pair PadCollate padding_mask PairDataset PositionalEncoding
PositionwiseFeedForward read_tsv reverse_task RMSNorm RotaryEmbedding sample save_checkpoint
save_model_dir seed_everything setup_distributed sinusoidal_table split_pairs SublayerConnection
target_mask token_scores TokenBucketSampler TokenEmbedding train TrainConfig TrainHistory
Transformer TransformerConfig translate_lines write_tsv
""".split())


def _modules() -> list[types.ModuleType]:
    """Every module of the package (the command-line tool included), imported."""
    names = [m.name for m in pkgutil.walk_packages(tl.__path__, prefix="transformer_lib.")
             if not m.name.endswith("__main__")]
    return [importlib.import_module(name) for name in names]


def test_the_root_holds_exactly_the_curated_names():
    public = {n for n in dir(tl) if not n.startswith("_") and not isinstance(getattr(tl, n), types.ModuleType)}
    assert public == set(tl.__all__) == PINNED
    assert len(tl.__all__) == len(PINNED)               # listed once each


def test_each_root_name_is_a_public_name_of_the_module_that_defines_it():
    for name in tl.__all__:
        obj = getattr(tl, name)
        module = importlib.import_module(obj.__module__)
        assert module.__name__.startswith("transformer_lib."), name
        assert name in module.__all__, f"{name} is at the root but not public in {module.__name__}"


def test_every_module_lists_only_names_it_has_and_no_private_one():
    for module in _modules():
        for name in getattr(module, "__all__", []):
            assert not name.startswith("_"), f"{module.__name__} lists a private name: {name}"
            assert hasattr(module, name), f"{module.__name__}.__all__ names {name}, which it lacks"


def test_a_subpackage_re_exports_the_public_names_of_its_modules():
    packages = [m for m in _modules() if hasattr(m, "__path__")]
    assert {p.__name__.split(".")[1] for p in packages} >= {"training", "decoding", "translation", "modern", "cli"}
    for package in packages:
        inner = [importlib.import_module(f"{package.__name__}.{m.name}")
                 for m in pkgutil.iter_modules(package.__path__)]
        expected = [name for module in inner for name in module.__all__]
        assert sorted(package.__all__) == sorted(expected), package.__name__
        for module in inner:
            for name in module.__all__:
                assert getattr(package, name) is getattr(module, name)


def test_importing_a_submodule_does_not_hide_the_root_name_it_shares():
    """The package is lazy: ``import transformer_lib.attention`` (which every layer
    does) must not replace the root's function ``attention`` with the module."""
    import transformer_lib.attention
    import transformer_lib.model  # noqa: F401
    assert callable(tl.attention) and not isinstance(tl.attention, types.ModuleType)
    assert tl.attention is sys.modules["transformer_lib.attention"].attention
