"""Generated from book/appendix_marian.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: a6cae4b8b3affe5e
# fmt: off

# [book/appendix_marian.ipynb, cell 355b3753]
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_model, save_model

from transformer_lib.checks import resolve_device
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.marian_files import WEIGHTS_FILES, check_tokenizer_files
from transformer_lib.marian_files import first_line, load_marian_checked
from transformer_lib.marian_files import read_json_object
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.model_size import check_model_fits
from transformer_lib.files import atomic_write
from transformer_lib.translation.model_dir import (CONFIG_FILE, TOKENIZER_KIND_FILE,
                                                   WEIGHTS_FILE, ModelDirError,
                                                   save_generation_config)

#: Marian's activation names -> the feed-forward activations of chapter 5
MARIAN_ACTIVATIONS = {"swish": "silu", "silu": "silu", "relu": "relu", "gelu": "gelu"}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """One tensor, or two tensors with the same values (a tie lost on saving)."""
    return a is b or (a.shape == b.shape and bool(torch.equal(a, b)))


def _marian_fields(c: Any, src_vocab: int, tgt_vocab: int, tie: bool,
                   share: bool) -> TransformerConfig:
    """The TransformerConfig of the MarianConfig ``c``, given the vocabularies' sizes
    and ties (a model has them in its weights, a config.json in its fields)."""
    if c.encoder_attention_heads != c.decoder_attention_heads:
        raise ValueError(f"encoder_attention_heads ({c.encoder_attention_heads}) != "
                         f"decoder_attention_heads ({c.decoder_attention_heads})")
    if c.encoder_ffn_dim != c.decoder_ffn_dim:
        raise ValueError(f"encoder_ffn_dim ({c.encoder_ffn_dim}) != decoder_ffn_dim "
                         f"({c.decoder_ffn_dim})")
    if not c.scale_embedding:
        raise ValueError("scale_embedding=False: the book's embeddings are always "
                         "multiplied by sqrt(d_model)")
    if c.activation_function not in MARIAN_ACTIVATIONS:
        raise ValueError(f"activation_function {c.activation_function!r} is not one of "
                         f"{sorted(MARIAN_ACTIVATIONS)}")
    return TransformerConfig(
        src_vocab_size=src_vocab, tgt_vocab_size=tgt_vocab, d_model=c.d_model,
        n_heads=c.encoder_attention_heads, n_encoder_layers=c.encoder_layers,
        n_decoder_layers=c.decoder_layers, d_ff=c.encoder_ffn_dim, dropout=c.dropout,
        activation=MARIAN_ACTIVATIONS[c.activation_function], eps=1e-5,
        max_len=c.max_position_embeddings, pad_id=c.pad_token_id,
        bos_id=c.decoder_start_token_id, eos_id=c.eos_token_id, tie_output=tie,
        share_embeddings=share, final_norm=False, positional_layout="half",
        output_bias=True)


def marian_config(hf_model: Any) -> TransformerConfig:
    """The :class:`~transformer_lib.model.TransformerConfig` of a ``transformers``
    ``MarianMTModel``: sizes, ids, ``positional_layout="half"``, ``output_bias=True``,
    ``final_norm=False``; shared and tied embeddings as the model has them. A choice the
    book's model cannot reproduce raises a ValueError that names it."""
    c: Any = getattr(hf_model, "config", None)
    if getattr(c, "model_type", None) != "marian" or not hasattr(hf_model, "lm_head"):
        kind = type(hf_model)
        got = f"{kind.__module__}.{kind.__qualname__} " + (
            "without a config" if c is None else
            f"with config.model_type {getattr(c, 'model_type', None)!r}")
        raise TypeError("hf_model must be a transformers MarianMTModel (config."
                        f"model_type 'marian', a prediction head), got {got}")
    enc = hf_model.model.encoder.embed_tokens.weight
    dec = hf_model.model.decoder.embed_tokens.weight
    return _marian_fields(c, enc.size(0), dec.size(0), share=_same(enc, dec),
                          tie=_same(hf_model.lm_head.weight, dec))


# [book/appendix_marian.ipynb, cell 4b2c440c]
def _attention(out: dict, ours: str, sd: dict, theirs: str) -> None:
    """q_proj, k_proj, v_proj -> one in_proj (queries first); out_proj as it is."""
    for kind in ("weight", "bias"):
        out[f"{ours}.in_proj.{kind}"] = torch.cat(
            [sd[f"{theirs}.{p}_proj.{kind}"] for p in "qkv"])
        out[f"{ours}.out_proj.{kind}"] = sd[f"{theirs}.out_proj.{kind}"]


def _sublayers(out: dict, ours: str, sd: dict, theirs: str, norms: list[str]) -> None:
    """The feed-forward layer and the norms of one layer, in sublayer order."""
    for kind in ("weight", "bias"):
        out[f"{ours}.feed_forward.linear1.{kind}"] = sd[f"{theirs}.fc1.{kind}"]
        out[f"{ours}.feed_forward.linear2.{kind}"] = sd[f"{theirs}.fc2.{kind}"]
        for i, norm in enumerate(norms, 1):
            out[f"{ours}.sublayer{i}.norm.{kind}"] = sd[f"{theirs}.{norm}.{kind}"]


def marian_state_dict(hf_model: Any, config: TransformerConfig) -> dict:
    """The weights of a ``MarianMTModel`` under the names of a
    :class:`~transformer_lib.model.Transformer` built from ``config``."""
    sd = hf_model.state_dict()
    out = {"src_embed.embedding.weight": sd["model.encoder.embed_tokens.weight"],
           "tgt_embed.embedding.weight": sd["model.decoder.embed_tokens.weight"],
           "output.weight": sd["lm_head.weight"],
           "output.bias": sd["final_logits_bias"][0]}
    for i in range(config.n_encoder_layers):
        ours, theirs = f"encoder.layers.{i}", f"model.encoder.layers.{i}"
        _attention(out, f"{ours}.self_attn", sd, f"{theirs}.self_attn")
        _sublayers(out, ours, sd, theirs, ["self_attn_layer_norm", "final_layer_norm"])
    for i in range(config.n_decoder_layers):
        ours, theirs = f"decoder.layers.{i}", f"model.decoder.layers.{i}"
        _attention(out, f"{ours}.self_attn", sd, f"{theirs}.self_attn")
        _attention(out, f"{ours}.cross_attn", sd, f"{theirs}.encoder_attn")
        norms = ["self_attn_layer_norm", "encoder_attn_layer_norm", "final_layer_norm"]
        _sublayers(out, ours, sd, theirs, norms)
    return out


@torch.no_grad()
def from_marian(hf_model: Any) -> Transformer:
    """A ``transformers`` ``MarianMTModel`` -> a
    :class:`~transformer_lib.model.Transformer` with the same outputs (float32, eval
    mode, on the CPU; ``.to(device)`` after)."""
    config = marian_config(hf_model)
    model = Transformer(config)
    state = {k: v.detach().float().cpu() for k, v in
             marian_state_dict(hf_model, config).items()}
    model.load_state_dict(state, strict=True)
    return model.eval()


# [book/appendix_marian.ipynb, cell 7d3f4fd9]
class MarianTokenizerAdapter:
    """A ``transformers`` ``MarianTokenizer`` (SentencePiece) with the interface of
    :class:`~transformer_lib.translation.tokenizer.BPETokenizer`: ``vocab_size``,
    ``encode``, ``encode_batch``, ``decode``, ``decode_batch``, ``tokens``, ``save``,
    ``load``.

    ``encode`` ends the ids with ``</s>`` by default (``add_eos=True``), as Marian's
    sources do; ``add_bos`` puts the decoder's start token (the pad id) in front."""

    kind = "marian"

    def __init__(self, hf_tokenizer: Any):
        for name in ("encode", "decode", "save_pretrained", "pad_token_id"):
            if not hasattr(hf_tokenizer, name):
                raise TypeError(f"hf_tokenizer must be a transformers MarianTokenizer, "
                                f"got {type(hf_tokenizer).__name__} without {name}")
        self.hf = hf_tokenizer
        self.pad_id, self.eos_id = hf_tokenizer.pad_token_id, hf_tokenizer.eos_token_id

    @property
    def vocab_size(self) -> int:
        """The source vocabulary's size (the only one, unless ``separate_vocabs``)."""
        return int(self.hf.vocab_size)

    @property
    def tgt_vocab_size(self) -> int:
        """The target vocabulary's size."""
        if getattr(self.hf, "separate_vocabs", False):
            return len(self.hf.target_encoder)
        return self.vocab_size

    def encode(self, text: str, add_bos: bool = False,
               add_eos: bool = True) -> list[int]:
        """``text`` -> ids, ending with ``</s>`` unless ``add_eos=False``."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = list(self.hf.encode(text, add_special_tokens=False))
        return [self.pad_id] * add_bos + ids + [self.eos_id] * add_eos

    def encode_batch(self, texts, add_bos: bool = False,
                     add_eos: bool = True) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of str, got one str (use encode)")
        return [self.encode(t, add_bos, add_eos) for t in texts]

    def decode(self, ids) -> str:
        """Ids -> text: start token and padding dropped, cut at the first ``</s>``."""
        ids = list(ids.tolist() if hasattr(ids, "tolist") else ids)
        if self.eos_id in ids:
            ids = ids[:ids.index(self.eos_id)]
        return self.hf.decode([i for i in ids if i != self.pad_id],
                              skip_special_tokens=True)

    def decode_batch(self, rows) -> list[str]:
        return [self.decode(r) for r in (rows.tolist() if hasattr(rows, "tolist")
                                         else rows)]

    def tokens(self, text: str) -> list[str]:
        """The SentencePiece pieces of ``text``."""
        return list(self.hf.tokenize(text))

    def save(self, path) -> Path:
        """Write the tokenizer's files (``save_pretrained``) into directory ``path``."""
        self.hf.save_pretrained(str(path))
        return Path(path)

    # [book/appendix_marian.ipynb, cell ff9cbcfd]
    @classmethod
    def load(cls, path) -> MarianTokenizerAdapter:
        """Read a directory written by :meth:`save` (or by ``save_pretrained``). A
        missing or damaged file raises an OSError or a ValueError that names it."""
        from transformers import MarianTokenizer
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: no Marian tokenizer directory")
        check_tokenizer_files(path, "tokenizer")
        try:
            with warnings.catch_warnings():      # sacremoses: for other languages
                warnings.filterwarnings("ignore", message="Recommended: pip install")
                hf = MarianTokenizer.from_pretrained(str(path), local_files_only=True)
        except (OSError, RuntimeError, ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"{path}: damaged Marian tokenizer files "
                             f"({first_line(exc)})") from None
        return cls(hf)


# [book/appendix_marian.ipynb, cell 2cdf4c50]
#: where a model directory keeps Marian's tokenizer files (chapter 12's
#: TOKENIZER_KIND_FILE records that they are there)
MARIAN_TOKENIZER_DIR = "marian_tokenizer"


def save_marian_dir(path, model: Transformer, tokenizer: MarianTokenizerAdapter,
                    generation: GenerationConfig | None = None) -> Path:
    """Write a converted model to the directory ``path``: ``model.safetensors``,
    ``marian_tokenizer/``, ``tokenizer_kind.json``, ``generation.json`` (the decoding
    defaults, when ``generation`` is given), then ``config.json``."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    if generation is not None:
        save_generation_config(path, generation)
    text = json.dumps(model.config.to_dict(), indent=2) + "\n"
    tokenizer.save(path / MARIAN_TOKENIZER_DIR)
    kind = {"kind": tokenizer.kind, "path": MARIAN_TOKENIZER_DIR}
    atomic_write(path / TOKENIZER_KIND_FILE, json.dumps(kind, indent=2) + "\n")
    atomic_write(path / WEIGHTS_FILE,
                 lambda tmp: save_model(model, tmp, {"config": text}))
    atomic_write(path / CONFIG_FILE, text)
    return path


def load_marian_dir(path, device=None) -> tuple[Transformer, MarianTokenizerAdapter]:
    """Read a directory written by :func:`save_marian_dir` -> (model in eval mode on
    ``device``, default: a GPU when there is one; tokenizer). A damaged config.json, or
    one that describes a model larger than this machine's memory, raises a ValueError
    that names it."""
    path = Path(path)
    if not (path / CONFIG_FILE).is_file():
        raise ModelDirError(f"{path}: not a model directory (no {CONFIG_FILE})")
    file = path / CONFIG_FILE
    data = read_json_object(file)
    try:
        config = TransformerConfig.from_dict(data)
    except (TypeError, ValueError) as exc:
        raise ModelDirError(f"{file}: not a valid model configuration "
                            f"({first_line(exc)})") from None
    check_model_fits(config, str(file))          # before anything is allocated
    tokenizer = MarianTokenizerAdapter.load(path / MARIAN_TOKENIZER_DIR)
    model = Transformer(config)
    load_model(model, str(path / WEIGHTS_FILE), strict=True)
    return model.to(resolve_device(device)).eval(), tokenizer


# [book/appendix_marian.ipynb, cell 607fce2f]
def _check_marian_source(src: Path) -> Path:
    """Check the Marian directory ``src`` before anything is loaded: its config.json
    (a Marian model that the book's Transformer can hold and this machine's memory
    too), its tokenizer's files, a weights file. Returns the weights file."""
    from transformers import MarianConfig
    file = src / CONFIG_FILE
    if not file.is_file():
        raise FileNotFoundError(f"{src}: not a Marian model directory (no "
                                f"{CONFIG_FILE})")
    data = read_json_object(file)
    if data.get("model_type") != "marian":
        raise ValueError(f"{src}: not a Marian model directory ({CONFIG_FILE} says "
                         f"model_type {data.get('model_type')!r})")
    try:
        c = MarianConfig.from_dict(data)
        config = _marian_fields(c, c.vocab_size, c.decoder_vocab_size or c.vocab_size,
                                tie=bool(c.tie_word_embeddings),
                                share=bool(c.share_encoder_decoder_embeddings))
    except (TypeError, ValueError, AttributeError, KeyError) as exc:
        raise ValueError(f"{file}: not a model the book's Transformer can hold "
                         f"({first_line(exc)})") from None
    check_model_fits(config, str(file))
    check_tokenizer_files(src, "model")
    for name in WEIGHTS_FILES:
        if (src / name).is_file():
            return src / name
    raise FileNotFoundError(f"{src}: no weights file ({WEIGHTS_FILES[0]} or "
                            f"{WEIGHTS_FILES[2]})")


# [book/appendix_marian.ipynb, cell 6e0afbdf]
#: the file in which save_pretrained keeps a model's decoding settings
HF_GENERATION_FILE = "generation_config.json"


def marian_generation_config(src) -> GenerationConfig:
    """The decoding defaults of the Marian directory ``src``, as ``transformers``'
    ``generate`` applies them, read from its ``generation_config.json`` (else its
    ``config.json``): ``num_beams`` > 1 is beam search of that size; ``length_penalty``
    (default 1.0) is alpha of the power form, log p / n ** alpha (eos counted, the
    start token not); ``early_stopping`` True stops a sentence at beam_size finished
    hypotheses ("first_k"), False, generate's default, is the book's rule; a
    ``max_new_tokens`` or ``max_length`` (less the start token) is one fixed limit
    (a = 0); without them, the book's 2·S + 10. A value the config cannot hold raises
    a ValueError naming the file."""
    src = Path(src)
    file = src / HF_GENERATION_FILE
    if not file.is_file():
        file = src / CONFIG_FILE
    data = read_json_object(file)
    settings: dict[str, Any] = {"length_norm": "power"}
    try:
        beams = 1 if data.get("num_beams") is None else data["num_beams"]
        if beams != 1:
            settings.update(strategy="beam", beam_size=beams)
        settings["alpha"] = data.get("length_penalty", 1.0)
        settings["stop"] = "first_k" if data.get("early_stopping") is True else "book"
        if data.get("max_new_tokens") is not None:
            settings.update(max_len_a=0.0, max_len_b=data["max_new_tokens"])
        elif data.get("max_length") is not None:
            settings.update(max_len_a=0.0, max_len_b=data["max_length"] - 1)
        return GenerationConfig(**settings)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{file}: decoding settings the book cannot hold "
                         f"({first_line(exc)})") from None


def convert_marian(src, out) -> Path:
    """The ``convert-marian`` command: the Marian directory ``src`` (as
    ``save_pretrained`` writes it) -> the model directory ``out`` (new or empty), read
    by :func:`load_marian_dir`. Reads local files only, and checks them all before it
    writes anything: what is missing, damaged, unsafe or not what ``config.json``
    describes raises an OSError or a ValueError whose one line names the file."""
    try:
        import sentencepiece  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise RuntimeError("convert-marian needs transformers and sentencepiece "
                           "(pip install transformers sentencepiece)") from None
    src, out = Path(src), Path(out)
    if not src.is_dir():
        raise FileNotFoundError(f"{src}: no such Marian model directory")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"--out {out}: exists and is not an empty directory")
    weights = _check_marian_source(src)
    generation = marian_generation_config(src)
    tokenizer = MarianTokenizerAdapter.load(src)
    model = from_marian(load_marian_checked(src, weights))
    c = model.config
    if tokenizer.vocab_size not in (c.src_vocab_size, c.tgt_vocab_size):
        raise ValueError(f"{src}: the tokenizer has {tokenizer.vocab_size} tokens, the "
                         f"model {c.src_vocab_size} (source), {c.tgt_vocab_size} "
                         "(target)")
    return save_marian_dir(out, model, tokenizer, generation)


__all__ = [
    'MARIAN_ACTIVATIONS', 'marian_config', 'marian_state_dict', 'from_marian',
    'MarianTokenizerAdapter', 'MARIAN_TOKENIZER_DIR', 'save_marian_dir',
    'load_marian_dir', 'HF_GENERATION_FILE', 'marian_generation_config',
    'convert_marian',
]
