"""Generated from book/appendix_serving.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: d2a3e6d26b2e69c3
# fmt: off

# [book/appendix_serving.ipynb, cell f137de59]
from __future__ import annotations

import copy
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from transformer_lib.checks import check_int
from transformer_lib.decoding.beam import check_beam_size
from transformer_lib.decoding.config import GenerationConfig
from transformer_lib.decoding.greedy import check_settings, check_src, token_scores
from transformer_lib.export_manifest import BOOK_FOLDER, check_export, write_manifest
from transformer_lib.files import no_room
from transformer_lib.model import Transformer
from transformer_lib.translation.model_dir import (CONFIG_FILE, TOKENIZER_FILE,
                                                   TOKENIZER_KIND_FILE,
                                                   load_config_and_tokenizer)


# [book/appendix_serving.ipynb, cell 7d5e9b69]
def _ctranslate2() -> Any:
    """The ``ctranslate2`` package, or one line saying how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise ImportError("ctranslate2 is not installed: pip install "
                          "'transformer_lib[serve]' (make setup installs it)") from None
    return ctranslate2


# [book/appendix_serving.ipynb, cell 7c5ff827]
def token_strings(tokenizer: Any, size: int, target: bool = False) -> list[str]:
    """The ``size`` token strings CTranslate2 will know, in id order: the tokenizer's
    own (a BPETokenizer's, or the Marian adapter's source or ``target`` vocabulary),
    or ``<id:N>`` for every id without one (no tokenizer, or a larger model). The
    strings must be distinct: CTranslate2 finds an id by its string."""
    size = check_int(size, "size")
    known: list[str] = []
    if tokenizer is not None:
        hf = getattr(tokenizer, "hf", None)                  # the Marian adapter
        inner = getattr(tokenizer, "tokenizer", None)        # a BPETokenizer
        if hf is not None and target and getattr(hf, "separate_vocabs", False):
            known = list(hf.target_encoder)                  # insertion = id order
        elif hf is not None:
            known = hf.convert_ids_to_tokens(list(range(hf.vocab_size)))
        elif inner is not None and hasattr(inner, "id_to_token"):
            known = [inner.id_to_token(i) for i in range(inner.get_vocab_size())]
        else:
            raise TypeError("tokenizer must be a BPETokenizer, the Marian adapter or "
                            f"None, got {type(tokenizer).__name__}")
    names = [known[i] if i < len(known) and known[i] is not None else f"<id:{i}>"
             for i in range(size)]
    if len(set(names)) != size:
        raise ValueError("tokenizer: two ids share a token string, which CTranslate2 "
                         "cannot tell apart")
    return names


# [book/appendix_serving.ipynb, cell 2202c189]
def _array(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(device="cpu", dtype=torch.float32).numpy().copy()


def _set_linear(spec: Any, linear: Any, rows: slice = slice(None)) -> None:
    """A LinearSpec from rows ``rows`` of an nn.Linear (weight (out, in), bias)."""
    spec.weight = _array(linear.weight[rows])
    if linear.bias is not None:
        spec.bias = _array(linear.bias[rows])


def _set_norm(spec: Any, norm: Any) -> None:
    spec.gamma = _array(norm.weight)                      # RMSNorm has no beta
    if hasattr(spec, "beta"):
        spec.beta = _array(norm.bias)


def _set_attention(spec: Any, attn: Any, norm: Any, cross: bool) -> None:
    """Self-attention: one fused q-k-v matrix, as ours; cross-attention: q, then k-v
    fused (the keys and values come from the encoder's output)."""
    _set_norm(spec.layer_norm, norm)
    if cross:
        _set_linear(spec.linear[0], attn.in_proj, slice(0, attn.d_model))
        _set_linear(spec.linear[1], attn.in_proj, slice(attn.d_model, None))
    else:
        _set_linear(spec.linear[0], attn.in_proj)
    _set_linear(spec.linear[-1], attn.out_proj)


def _set_ffn(spec: Any, ffn: Any, norm: Any) -> None:
    _set_norm(spec.layer_norm, norm)
    _set_linear(spec.linear_0, ffn.linear1)
    _set_linear(spec.linear_1, ffn.linear2)


# [book/appendix_serving.ipynb, cell 2ad97961]
#: our activations -> CTranslate2's names (exact GELU, SiLU is "swish")
CT2_ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "silu": "SWISH"}


def model_spec(model: Any) -> Any:
    """A ``ctranslate2.specs.TransformerSpec`` holding ``model``'s weights (float32),
    or a one-line ValueError for a model CTranslate2 cannot hold."""
    _ctranslate2()                                # one line if missing
    from ctranslate2.specs import common_spec, transformer_spec as ts
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    c = model.config
    if c.activation not in CT2_ACTIVATIONS:
        raise ValueError(f"model: activation {c.activation!r} has no CTranslate2 "
                         f"equivalent (supported: {sorted(CT2_ACTIVATIONS)})")
    final = c.norm_first if c.final_norm is None else c.final_norm
    if final and not c.norm_first:
        raise ValueError("model: CTranslate2 has no final norm after a Post-Norm "
                         "stack (final_norm=True with norm_first=False)")
    options = dict(pre_norm=c.norm_first, no_final_norm=not final,
                   rms_norm=c.norm == "rms",
                   activation=getattr(common_spec.Activation,
                                      CT2_ACTIVATIONS[c.activation]))
    spec = ts.TransformerSpec(
        ts.TransformerEncoderSpec(c.n_encoder_layers, c.n_heads, **options),
        ts.TransformerDecoderSpec(c.n_decoder_layers, c.n_heads, **options))
    table = _array(model.positional.pe)           # either layout: the table itself
    sides: list[tuple[Any, Any, Any, Any]] = [
             (spec.encoder, spec.encoder.embeddings[0], model.src_embed, model.encoder),
             (spec.decoder, spec.decoder.embeddings, model.tgt_embed, model.decoder)]
    for side, embeddings, embed, stack in sides:
        embeddings.weight = _array(embed.weight)
        side.scale_embeddings = True                 # times sqrt(d_model), as ours
        side.position_encodings.encodings = table
        if final:
            _set_norm(side.layer_norm, stack.norm)
        for layer_spec, layer in zip(side.layer, stack.layers):
            _set_attention(layer_spec.self_attention, layer.self_attn,
                           layer.sublayer1.norm, cross=False)
            if side is spec.encoder:
                _set_ffn(layer_spec.ffn, layer.feed_forward, layer.sublayer2.norm)
            else:
                _set_attention(layer_spec.attention, layer.cross_attn,
                               layer.sublayer2.norm, cross=True)
                _set_ffn(layer_spec.ffn, layer.feed_forward, layer.sublayer3.norm)
    _set_linear(spec.decoder.projection, model.output)   # tied: the same numbers
    spec.config.layer_norm_epsilon = c.eps
    return spec


# [book/appendix_serving.ipynb, cell bd8047ae]
#: weight types CTranslate2 can store: None keeps float32
QUANTIZATIONS = (None, "int8", "int8_float32", "int16", "float16", "bfloat16")


def _save_book_files(folder: Path, model: Transformer, tokenizer: Any) -> None:
    """The book's config and tokenizer, so that the export translates text alone
    (plain writes: the folder is private until the export is renamed into place)."""
    folder.mkdir()
    text = json.dumps(model.config.to_dict(), indent=2) + "\n"
    (folder / CONFIG_FILE).write_text(text, encoding="utf-8")
    if hasattr(tokenizer, "to_json"):                       # a BPETokenizer
        (folder / TOKENIZER_FILE).write_text(tokenizer.to_json(), encoding="utf-8")
        return
    tokenizer.save(folder / "tokenizer")                    # the Marian adapter
    (folder / TOKENIZER_KIND_FILE).write_text(
        json.dumps({"kind": "marian", "path": "tokenizer"}), encoding="utf-8")


def _export_failed(out: Path, exc: OSError, existed: bool, tmp: Any) -> OSError:
    """One line naming ``out`` (never the temporary), in the words of
    ``files.write_failed``: why, and what to do about a full disk."""
    reason = exc.strerror or " ".join(str(exc).replace(str(tmp), str(out)).split())
    full = no_room(exc)
    hint = ("is the disk full, or a file-size limit reached? Free some space and try "
            "again; " if full else "")
    kept = f"{out} was left as it was" if existed else "nothing was left behind"
    return OSError(f"{out}: could not write the export ({reason[:160]}); {hint}{kept}")


def _move_into_place(tmp: Path, out: Path) -> None:
    """Rename ``tmp`` to ``out``; an old export there is replaced whole (put back if
    the rename fails)."""
    if not out.exists():
        os.replace(tmp, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old.", dir=out.parent))
    try:
        os.replace(out, old / "x")
        try:
            os.replace(tmp, out)
        except OSError:
            os.replace(old / "x", out)
            raise
    finally:
        shutil.rmtree(old, ignore_errors=True)


# [book/appendix_serving.ipynb, cell 7a8e1d3b]
def export_ctranslate2(model: Transformer, tokenizer: Any, out_dir: Any,
                       quantization: str | None = None) -> Path:
    """Write ``model`` as a CTranslate2 model directory ``out_dir`` (new, or replaced
    whole) through CTranslate2's specification API, and return its path.

    The vocabularies are ``tokenizer``'s token strings in id order
    (:func:`token_strings`; ``tokenizer=None``: ``<id:N>`` names, ids only); bos is
    the decoder's start token and eos its end token. ``quantization`` (one of
    :data:`QUANTIZATIONS`) stores the weights so; "int8" is the usual choice on a CPU.
    With a tokenizer, ``out_dir/book`` holds the book's config and tokenizer and, last,
    ``manifest.json`` (:func:`~transformer_lib.export_manifest.check_export`). The
    directory is written beside ``out_dir`` first, then renamed into place. An
    ``out_dir`` that is a link is refused; a failed write is one OSError naming
    ``out_dir`` and leaves nothing behind."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, "
                         f"got {quantization!r}")
    out = Path(out_dir)
    if out.is_symlink():                          # dangling or not: one rule
        raise ValueError(f"out_dir: {out} is a symbolic link: give the path of the "
                         "export's own directory")
    if out.exists() and not out.is_dir():
        raise ValueError(f"out_dir: {out} exists and is not a directory")
    spec, c = model_spec(model), model.config
    src = token_strings(tokenizer, c.src_vocab_size)
    tgt = token_strings(tokenizer, c.tgt_vocab_size, target=True)
    spec.register_source_vocabulary(src)
    spec.register_target_vocabulary(tgt)
    spec.config.bos_token = spec.config.decoder_start_token = tgt[c.bos_id]
    spec.config.eos_token, spec.config.unk_token = tgt[c.eos_id], tgt[c.pad_id]
    spec.validate()
    spec.optimize(quantization=quantization)
    made = [p for p in out.parents if not p.exists()]      # folders made here
    existed, tmp = out.exists(), None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
        spec.save(str(tmp))
        if tokenizer is not None:
            _save_book_files(tmp / BOOK_FOLDER, model, tokenizer)
            write_manifest(tmp)                  # last: it records the others
        _move_into_place(tmp, out)
    except OSError as exc:
        raise _export_failed(out, exc, existed, tmp) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        for folder in [] if out.exists() else made:     # nearest first
            try:
                folder.rmdir()
            except OSError:
                break
    return out


# [book/appendix_serving.ipynb, cell a7f36481]
def ctranslate2_refusal(config: GenerationConfig) -> tuple[str, str] | None:
    """The field of ``config`` that CTranslate2 has no rule for, and why, or None: it
    has no sampler of the book's, divides a beam's score by length ** alpha only (the
    power form; "none" is alpha 0), and ends a sentence at beam_size finished
    hypotheses (stop "first_k")."""
    if config.strategy == "sample":
        return "strategy", "CTranslate2Model decodes greedily or by beam search"
    if config.strategy == "beam" and config.beam_size > 1:
        if config.length_norm == "gnmt":
            return "length_norm", "its beam search divides by n ** alpha only"
        if config.stop != "first_k":
            return "stop", "it ends a sentence at K finished hypotheses"
    return None


def ctranslate2_rules(config: GenerationConfig) -> tuple[int, float]:
    """(beam_size, length_penalty) of ``translate_batch`` that apply ``config``, or a
    ValueError naming the setting CTranslate2 cannot honour
    (:func:`ctranslate2_refusal`)."""
    refused = ctranslate2_refusal(config)
    if refused is not None:
        field, why = refused
        raise ValueError(f"{field}={getattr(config, field)!r}: not with CTranslate2 "
                         f"({why})")
    beam = config.beam_size if config.strategy == "beam" else 1
    return beam, 0.0 if config.length_norm == "none" else config.alpha


#: CTranslate2's beam search as a GenerationConfig: four beams, the power form with
#: alpha 1, first-k stopping
CTRANSLATE2_BEAM = GenerationConfig(strategy="beam", beam_size=4, length_norm="power",
                                    alpha=1.0, stop="first_k")


# [book/appendix_serving.ipynb, cell add0cd38]
class CTranslate2Model:
    """A model exported by :func:`export_ctranslate2`, run by a
    ``ctranslate2.Translator`` on the CPU.

    ``CTranslate2Model(path, config, threads=1)``: ``config`` gives the special ids
    (the exported model's ``TransformerConfig``); :meth:`load` reads it from the
    export's ``book`` folder, with the tokenizer. :meth:`decode` takes and returns ids
    laid out as the book's decoders' (bos first, pad after eos)."""

    def __init__(self, path: Any, config: Any, threads: int = 1,
                 tokenizer: Any = None):
        ct2, path = _ctranslate2(), Path(path)
        if not (path / "model.bin").is_file():
            raise ValueError(f"path: {path} is not a CTranslate2 model directory "
                             "(no model.bin): run export_ctranslate2 first")
        self.config, self.tokenizer, self.path = config, tokenizer, path
        self.translator = ct2.Translator(str(path), device="cpu", inter_threads=1,
                                         intra_threads=check_int(threads, "threads"))
        self.src_tokens = token_strings(tokenizer, config.src_vocab_size)
        tgt = token_strings(tokenizer, config.tgt_vocab_size, target=True)
        self.tgt_ids = {token: i for i, token in enumerate(tgt)}

    @classmethod
    def load(cls, path: Any, threads: int = 1) -> CTranslate2Model:
        """The export at ``path``, with the config and tokenizer of its ``book``
        folder (written when a tokenizer was exported), once
        :func:`~transformer_lib.export_manifest.check_export` has found the export
        as written: a ``book`` that is not the one written with its ``model.bin`` is
        refused, naming the file."""
        if not (Path(path) / "model.bin").is_file():
            return cls(path, None, threads)              # its one-line error
        check_export(path)
        config, tokenizer = load_config_and_tokenizer(Path(path) / BOOK_FOLDER)
        return cls(path, config, threads, tokenizer)

    def decode(self, src: torch.Tensor, config: GenerationConfig | None = None,
               **settings: Any) -> torch.Tensor:
        """src (B, S) ids -> ids (B, T), laid out as the book's decoders' output,
        with the settings of ``config`` (a GenerationConfig; None: the defaults) and
        the keywords given (the names of ``beam_search``'s). CTranslate2 applies greedy
        decoding, or
        beam search with ``length_norm`` "power" (or "none") and ``stop`` "first_k"
        (:func:`ctranslate2_rules`); any other rule, or sampling, raises a ValueError
        naming the setting: it never decodes with another rule than the one asked for.
        A beam larger than the tokens a beam can take is refused as ``beam_search``
        refuses it (``check_beam_size``). Each sentence's limit: ``config.limits``
        (a·S + b, at most the model's max_len)."""
        c = self.config
        src = check_src(cast(Any, self), src).cpu()
        config = check_settings(cast(Any, self), None, config, settings)
        beam_size, length_penalty = ctranslate2_rules(config)
        if beam_size > 1:                              # the torch engine's rule
            check_beam_size(c, beam_size)
        limits = config.limits((src != c.pad_id).sum(dim=1), c.max_len)        # (B,)
        rows: list[list[int]] = [[] for _ in range(src.size(0))]
        for limit in limits.unique().tolist():           # one call per limit
            index = (limits == limit).nonzero()[:, 0].tolist()
            tokens = [[self.src_tokens[t] for t in src[i].tolist() if t != c.pad_id]
                      for i in index]
            results = self.translator.translate_batch(
                tokens, beam_size=beam_size, max_decoding_length=limit,
                length_penalty=length_penalty, return_end_token=True,
                max_input_length=0, min_decoding_length=0, suppress_sequences=[
                    [self._tgt_token(c.pad_id)], [self._tgt_token(c.bos_id)]])
            for i, result in zip(index, results):
                rows[i] = [c.bos_id] + [self.tgt_ids[t] for t in result.hypotheses[0]]
        out = torch.full((len(rows), max(map(len, rows))), c.pad_id, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, :len(row)] = torch.tensor(row)
        return out

    def _tgt_token(self, i: int) -> str:
        return next(t for t, j in self.tgt_ids.items() if j == i)


# [book/appendix_serving.ipynb, cell ceefeff4]
def compare_outputs(model: Any, src: torch.Tensor, ours: torch.Tensor,
                    theirs: torch.Tensor, length_penalty: float = 0.0,
                    tol: float = 1e-4) -> dict[str, int]:
    """Compare two decoders' outputs (B, T) for src (B, S), row by row: ``equal``,
    ``near_tie`` or ``different``. A differing row is a near tie when, under ``model``,
    the two tokens where the outputs first part score within ``tol`` of each other
    (log-probabilities after the same prefix), or the two whole outputs do (the
    log-probability over length ** ``length_penalty``, the score beam search ranks
    by)."""
    width = max(ours.size(1), theirs.size(1))
    pad = model.config.pad_id
    a, b = (torch.nn.functional.pad(x, (0, width - x.size(1)), value=pad)
            for x in (ours.cpu(), theirs.cpu()))
    same = (a == b).all(dim=1)
    counts = {"equal": int(same.sum()), "near_tie": 0, "different": 0}
    rows = (~same).nonzero()[:, 0]
    if len(rows):
        src, a, b = src.cpu()[rows], a[rows], b[rows]
        first = (a != b).long().argmax(dim=1, keepdim=True) - 1       # (n, 1)
        steps, totals = [], []
        for x in (a, b):
            s = token_scores(model, src, x)                           # (n, T - 1)
            length = (x[:, 1:] != pad).sum(dim=1).clamp(min=1)
            steps.append(s.gather(1, first)[:, 0])
            totals.append(s.sum(dim=1) / length.double() ** length_penalty)
        near = (((steps[0] - steps[1]).abs() < tol)
                | ((totals[0] - totals[1]).abs() < tol))
        counts["near_tie"], counts["different"] = int(near.sum()), int((~near).sum())
    return counts


# [book/appendix_serving.ipynb, cell 360bc257]
def quantize_int8(model: Transformer) -> Transformer:
    """A copy of ``model`` whose linear layers compute in int8 (PyTorch's dynamic
    quantization: int8 weights, each activation scaled on the fly), for the CPU. The
    cross-attention's fused projection stays float32: its rows are used in two
    parts (queries; keys and values), which a quantized layer cannot slice.
    PyTorch 2.13 marks ``torch.ao.quantization`` deprecated in favour of the separate
    torchao package, with no replacement inside PyTorch: its warnings pass through."""
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a Transformer, got {type(model).__name__}")
    names = {name for name, module in model.named_modules()
             if isinstance(module, nn.Linear)
             and not name.endswith("cross_attn.in_proj")}
    quantized = copy.deepcopy(model).cpu().eval()
    return torch.ao.quantization.quantize_dynamic(quantized, names, dtype=torch.qint8)


__all__ = [
    'token_strings', 'CT2_ACTIVATIONS', 'model_spec', 'QUANTIZATIONS',
    'export_ctranslate2', 'ctranslate2_refusal', 'ctranslate2_rules',
    'CTRANSLATE2_BEAM', 'CTranslate2Model', 'compare_outputs', 'quantize_int8',
]
