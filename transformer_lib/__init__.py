"""transformer_lib: the encoder-decoder Transformer, exported from the book's chapters.

The modules are generated from ``book/*.ipynb`` by ``tools/export.py``; chapters 1
to 9 (the model's layers) are modules at the top, and a chapter that builds several
modules is a package: ``training`` (chapter 10), ``decoding`` (11), ``translation``
(12), ``modern`` (13), ``cli`` (the command-line tool).

This file is written by hand. ``import transformer_lib as tl`` gives the book's
concepts, listed in ``__all__`` in the order of the chapters: the layers, the model
and its config, training, decoding, translation and the loaders. Everything else
(checks, file formats, helpers the modules share) is imported from its module, e.g.
``from transformer_lib.training.checkpoint import CHECKPOINT_FORMAT``. The
command-line tool (``transformer_lib.cli``) is not imported here.
"""
import importlib
import sys
import types
import typing

# every name is imported from its module when first used (PEP 562): ``import
# transformer_lib`` itself imports neither torch nor a chapter, so that the command-line
# tool can handle Ctrl-C from its first instant, and a program that only translates
# never imports the training package
_LAZY = {
    "transformer_lib.seeding": ("seed_everything",),
    "transformer_lib.checks": ("default_device",),
    "transformer_lib.embedding": ("TokenEmbedding",),
    "transformer_lib.positional": ("LearnedPositionalEncoding", "PositionalEncoding",
                                   "sinusoidal_table"),
    "transformer_lib.attention": ("MultiHeadAttention", "attention"),
    "transformer_lib.masks": ("causal_mask", "padding_mask", "target_mask"),
    "transformer_lib.feed_forward": ("PositionwiseFeedForward",),
    "transformer_lib.norm": ("LayerNorm", "RMSNorm", "SublayerConnection"),
    "transformer_lib.encoder": ("Encoder", "EncoderLayer", "LayerConfig"),
    "transformer_lib.cache": ("AttentionCache", "KVCache"),
    "transformer_lib.decoder": ("Decoder", "DecoderLayer"),
    "transformer_lib.model": ("Transformer", "TransformerConfig",
                              "load_torch_transformer"),
    "transformer_lib.decoding.config": ("GenerationConfig",),
    "transformer_lib.decoding.greedy": ("DecodableModelConfig", "greedy_decode",
                                        "token_scores"),
    "transformer_lib.decoding.beam": ("beam_search",),
    "transformer_lib.decoding.sampling": ("sample",),
    "transformer_lib.translation.corpus": ("CorpusError", "generate_pairs",
                                           "number_pair", "read_tsv", "split_pairs",
                                           "write_tsv"),
    "transformer_lib.translation.tokenizer": ("BPETokenizer", "encode_pairs"),
    "transformer_lib.translation.translate": ("translate_lines",),
    "transformer_lib.translation.metrics": ("bleu_ci", "corpus_bleu"),
    "transformer_lib.translation.model_dir": ("ModelDirError", "load_model_dir",
                                              "save_model_dir"),
    "transformer_lib.modern.rope": ("RotaryEmbedding",),
    "transformer_lib.modern.decoder_only": ("DecoderOnlyConfig", "DecoderOnlyLM"),
    "transformer_lib.modern.llama": ("load_llama_state_dict",),
    "transformer_lib.marian": ("convert_marian", "from_marian", "load_marian_dir"),
    "transformer_lib.training.batching": ("Batch", "PadCollate", "PairDataset",
                                          "TokenBucketSampler", "copy_task",
                                          "reverse_task"),
    "transformer_lib.training.loss": ("LabelSmoothingLoss",),
    "transformer_lib.training.schedule": ("noam_lambda", "noam_optimizer"),
    "transformer_lib.training.config": ("TrainConfig", "TrainHistory"),
    "transformer_lib.training.loop": ("train",),
    "transformer_lib.training.evaluation": ("evaluate", "exact_match"),
    "transformer_lib.training.checkpoint": ("CheckpointError", "NonFiniteError",
                                            "load_checkpoint", "save_checkpoint"),
    "transformer_lib.training.averaging": ("average_checkpoints",
                                           "average_state_dicts"),
    "transformer_lib.training.distributed": ("cleanup_distributed",
                                             "setup_distributed"),
}
_LAZY_NAMES = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    # chapter 0: seeding
    "seed_everything",
    # chapters 1 to 9: the model
    "default_device", "TokenEmbedding", "PositionalEncoding",
    "LearnedPositionalEncoding", "sinusoidal_table", "attention",
    "MultiHeadAttention", "AttentionCache", "padding_mask", "causal_mask",
    "target_mask", "PositionwiseFeedForward", "LayerNorm", "RMSNorm",
    "SublayerConnection", "LayerConfig", "EncoderLayer", "Encoder", "DecoderLayer",
    "Decoder", "KVCache", "TransformerConfig", "Transformer", "load_torch_transformer",
    # chapter 10: training
    "PairDataset", "Batch", "PadCollate", "TokenBucketSampler", "copy_task",
    "reverse_task", "LabelSmoothingLoss", "noam_lambda", "noam_optimizer",
    "TrainConfig", "TrainHistory", "train", "evaluate", "exact_match",
    "save_checkpoint", "load_checkpoint", "average_checkpoints",
    "average_state_dicts", "setup_distributed", "cleanup_distributed",
    "NonFiniteError", "CheckpointError",
    # chapter 11: decoding
    "GenerationConfig", "DecodableModelConfig", "greedy_decode", "beam_search",
    "sample", "token_scores",
    # chapter 12: translation
    "BPETokenizer", "generate_pairs", "number_pair", "split_pairs", "read_tsv",
    "write_tsv", "encode_pairs", "translate_lines", "corpus_bleu", "bleu_ci",
    "save_model_dir", "load_model_dir", "ModelDirError", "CorpusError",
    # chapter 13: beyond the paper
    "RotaryEmbedding", "DecoderOnlyConfig", "DecoderOnlyLM",
    "load_llama_state_dict",
    # appendix: pretrained Marian models
    "from_marian", "convert_marian", "load_marian_dir",
]

__version__ = "0.1.0"


def __getattr__(name: str) -> typing.Any:
    """A name of ``__all__``, imported from its module on first use; or a submodule
    (``tl.serving``), imported as ``import transformer_lib.serving`` would."""
    module = _LAZY_NAMES.get(name)
    if module is None:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
        raise AttributeError(f"module 'transformer_lib' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value                      # the next look-up is a plain one
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_NAMES))


class _Root(types.ModuleType):
    """The package itself. Importing a submodule binds its name on the package:
    ``import transformer_lib.attention`` would hide the function ``attention`` (a name
    of ``__all__``) behind the module of the same name. That one binding is skipped;
    the module stays reachable as ``sys.modules['transformer_lib.attention']`` and by
    ``from transformer_lib.attention import ...``."""

    def __setattr__(self, name: str, value: typing.Any) -> None:
        if name in _LAZY_NAMES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Root


if typing.TYPE_CHECKING:                         # what type checkers and IDEs see
    from transformer_lib.seeding import seed_everything
    from transformer_lib.checks import default_device
    from transformer_lib.embedding import TokenEmbedding
    from transformer_lib.positional import (LearnedPositionalEncoding,
                                            PositionalEncoding, sinusoidal_table)
    from transformer_lib.attention import (MultiHeadAttention, attention)
    from transformer_lib.masks import (causal_mask, padding_mask, target_mask)
    from transformer_lib.feed_forward import PositionwiseFeedForward
    from transformer_lib.norm import (LayerNorm, RMSNorm, SublayerConnection)
    from transformer_lib.encoder import (Encoder, EncoderLayer, LayerConfig)
    from transformer_lib.cache import (AttentionCache, KVCache)
    from transformer_lib.decoder import (Decoder, DecoderLayer)
    from transformer_lib.model import (Transformer, TransformerConfig,
                                       load_torch_transformer)
    from transformer_lib.decoding.config import GenerationConfig
    from transformer_lib.decoding.greedy import (DecodableModelConfig, greedy_decode,
                                                 token_scores)
    from transformer_lib.decoding.beam import beam_search
    from transformer_lib.decoding.sampling import sample
    from transformer_lib.translation.corpus import (CorpusError, generate_pairs,
                                                    number_pair, read_tsv, split_pairs,
                                                    write_tsv)
    from transformer_lib.translation.tokenizer import (BPETokenizer, encode_pairs)
    from transformer_lib.translation.translate import translate_lines
    from transformer_lib.translation.metrics import (bleu_ci, corpus_bleu)
    from transformer_lib.translation.model_dir import (ModelDirError, load_model_dir,
                                                       save_model_dir)
    from transformer_lib.modern.rope import RotaryEmbedding
    from transformer_lib.modern.decoder_only import (DecoderOnlyConfig, DecoderOnlyLM)
    from transformer_lib.modern.llama import load_llama_state_dict
    from transformer_lib.marian import (convert_marian, from_marian, load_marian_dir)
    from transformer_lib.training.averaging import (average_checkpoints,
                                                    average_state_dicts)
    from transformer_lib.training.batching import (Batch, PadCollate, PairDataset,
                                                   TokenBucketSampler, copy_task,
                                                   reverse_task)
    from transformer_lib.training.checkpoint import (CheckpointError, NonFiniteError,
                                                     load_checkpoint, save_checkpoint)
    from transformer_lib.training.config import TrainConfig, TrainHistory
    from transformer_lib.training.distributed import (cleanup_distributed,
                                                      setup_distributed)
    from transformer_lib.training.evaluation import evaluate, exact_match
    from transformer_lib.training.loop import train
    from transformer_lib.training.loss import LabelSmoothingLoss
    from transformer_lib.training.schedule import noam_lambda, noam_optimizer
