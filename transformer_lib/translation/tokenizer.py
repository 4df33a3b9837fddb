"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 857ca7af6aae00f2
# fmt: off

# [book/12_translation.ipynb, cell 4aa929ed]
from __future__ import annotations

from pathlib import Path
from collections.abc import Iterable, Sequence
from typing import Protocol

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from transformer_lib.checks import check_int
from transformer_lib.files import atomic_write

PAD_ID = 0   #: id of ``<pad>``, the padding token
BOS_ID = 1   #: id of ``<s>``, the token that starts every decoder input
EOS_ID = 2   #: id of ``</s>``, the token that ends every target
UNK_ID = 3   #: id of ``<unk>`` (reserved: byte-level BPE never needs it)
#: the special tokens, in the order of their ids
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")


class BPETokenizer:
    """Byte-level BPE (Hugging Face ``tokenizers``) with fixed ids pad=0, bos=1, eos=2,
    unk=3.

    Text is read as UTF-8 bytes, so every string encodes and decodes back to itself (no
    ``<unk>``); digits are split one by one, so numbers are copied digit for digit
    between languages."""

    def __init__(self, tokenizer: Tokenizer):
        for i, tok in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(tok) != i:
                raise ValueError(f"tokenizer must have {tok!r} at id {i}, found id "
                                 f"{tokenizer.token_to_id(tok)}")
        # the text "<pad>" is text, not the pad token
        tokenizer.encode_special_tokens = True
        self.tokenizer = tokenizer

    @staticmethod
    def _empty() -> Tokenizer:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ])
        tok.decoder = decoders.ByteLevel()
        return tok

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 1000,
              min_frequency: int = 2) -> "BPETokenizer":
        """Learn merges from ``texts`` until the vocabulary has ``vocab_size`` tokens
        (or no pair is seen ``min_frequency`` times). ``vocab_size`` counts the 4
        special tokens and the 256 bytes, so it is at least 260."""
        vocab_size = check_int(vocab_size, "vocab_size",
                               minimum=len(SPECIAL_TOKENS) + 256)
        tok = cls._empty()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency,
            special_tokens=list(SPECIAL_TOKENS), show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator((t for t in texts), trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    # [book/12_translation.ipynb, cell d7dd7a59]
    def encode(self, text: str, add_bos: bool = False,
               add_eos: bool = False) -> list[int]:
        """``text`` -> token ids, optionally framed by bos and eos."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [BOS_ID] * add_bos + ids + [EOS_ID] * add_eos

    def encode_batch(self, texts: Sequence[str], add_bos: bool = False,
                     add_eos: bool = False) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of str, got one str (use encode)")
        return [self.encode(t, add_bos, add_eos) for t in texts]

    def decode(self, ids) -> str:
        """Token ids -> text. A leading bos is dropped, the text ends at the first eos,
        pads are skipped. Bytes that do not form complete UTF-8 characters (a sampled
        piece cut inside a character) are dropped, so the text never holds U+FFFD
        unless the ids encode that character itself."""
        if hasattr(ids, "tolist"):
            ids = ids.tolist()
        ids = list(ids)
        if ids and ids[0] == BOS_ID:
            ids = ids[1:]
        if EOS_ID in ids:
            ids = ids[:ids.index(EOS_ID)]
        n = self.vocab_size
        bad = [i for i in ids if not isinstance(i, int) or not 0 <= i < n]
        if bad:
            raise ValueError(f"ids must be token ids in [0, {n}), got {bad[:5]}")
        data = bytearray()
        for i in ids:
            if i == PAD_ID:
                continue
            piece = self.tokenizer.id_to_token(i) or ""
            if i < len(SPECIAL_TOKENS) or any(c not in BYTE_OF_CHAR for c in piece):
                data += piece.encode("utf-8")                   # a special token
            else:
                data += bytes(BYTE_OF_CHAR[c] for c in piece)
        return data.decode("utf-8", errors="ignore")

    def decode_batch(self, rows) -> list[str]:
        """A (B, T) tensor or a list of id lists -> B strings."""
        if hasattr(rows, "tolist"):
            rows = rows.tolist()
        return [self.decode(r) for r in rows]

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text``, each decoded to readable text (for plots and tables).
        """
        return [self.tokenizer.decode([i]) for i in self.encode(text)]

    # [book/12_translation.ipynb, cell 7bb60065]
    def save(self, path) -> Path:
        """Write the tokenizer to ``path``, one JSON file of ``tokenizers``, atomically
        (``atomic_write``)."""
        return atomic_write(path, self.to_json())

    def to_json(self) -> str:
        """The tokenizer as the JSON text that :meth:`save` writes."""
        return self.tokenizer.to_str(pretty=True)

    @classmethod
    def load(cls, path) -> "BPETokenizer":
        """Read a file written by :meth:`save`; a missing file raises FileNotFoundError,
        a damaged one or one with other special ids a ValueError naming it."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no tokenizer file")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:   # tokenizers' own Exception for damaged JSON
            raise ValueError(f"{path}: not a tokenizer file "
                             f"({str(exc).splitlines()[0]})") from None
        return cls(tok)


def _byte_of_char() -> dict[str, int]:
    """The byte-level alphabet: the printable character that stands for each byte
    (GPT-2's table, the one of ``tokenizers``' ``ByteLevel``)."""
    bs = [*range(33, 127), *range(161, 173), *range(174, 256)]
    cs = list(bs)
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + len(cs) - 188)
    return {chr(c): b for b, c in zip(bs, cs)}


BYTE_OF_CHAR = _byte_of_char()


# [book/12_translation.ipynb, cell be2f55a4]
class TextTokenizer(Protocol):
    """What translation needs of a tokenizer: a :class:`BPETokenizer` has it, and so
    does :class:`~transformer_lib.marian.MarianTokenizerAdapter` (duck typing).
    ``encode`` gives a source's ids as the model reads them; ``decode`` takes an output
    row (start token first, padding after eos)."""

    @property
    def vocab_size(self) -> int: ...

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids) -> str: ...


# [book/12_translation.ipynb, cell d7855214]
def encode_pairs(pairs: Iterable, tokenizer: BPETokenizer, max_len: int | None = None
                 ) -> tuple[list[tuple[list[int], list[int]]], int]:
    """``(source, target, ...)`` pairs -> (token-id pairs without bos/eos, the number of
    pairs dropped). A pair is dropped when a side is empty or, with ``max_len``, when
    the source or the target with its eos would be longer than ``max_len`` tokens."""
    limit = max_len if max_len is not None else float("inf")
    out, skipped = [], 0
    for p in pairs:
        s, t = tokenizer.encode(p[0]), tokenizer.encode(p[1])
        if 0 < len(s) <= limit and 0 < len(t) + 1 <= limit:
            out.append((s, t))
        else:
            skipped += 1
    return out, skipped


__all__ = [
    'PAD_ID', 'BOS_ID', 'EOS_ID', 'UNK_ID', 'SPECIAL_TOKENS', 'BPETokenizer',
    'BYTE_OF_CHAR', 'TextTokenizer', 'encode_pairs',
]
