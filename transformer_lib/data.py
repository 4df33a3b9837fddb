"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 0767dcf1d06ecaaa
# fmt: off

# [book/12_translation.ipynb, cell 6]
from __future__ import annotations

import datetime
import random
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

from babel.dates import format_date
from num2words import num2words


# [book/12_translation.ipynb, cell 7]
class Pair(NamedTuple):
    """One sentence pair of the generated corpus: source, English target, source language, kind."""

    src: str
    tgt: str
    lang: str = ""
    kind: str = ""


NUMBER_LANGUAGES = ("de", "fr", "es", "ja")
DATE_LANGUAGES = ("de", "fr", "es", "zh")


def number_pair(value: int, lang: str) -> Pair:
    """The number ``value`` written out in language ``lang`` (num2words), and in English words."""
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"value must be a non-negative int, got {value!r}")
    if lang == "en":
        raise ValueError("lang must be a source language other than 'en' (English is the target)")
    try:
        src = num2words(value, lang=lang)
    except NotImplementedError:
        raise ValueError(f"lang {lang!r} is not a num2words language") from None
    return Pair(src, num2words(value, lang="en"), lang, "number")


def date_pair(date: datetime.date, lang: str) -> Pair:
    """``date`` in the long format of locale ``lang`` (babel), and as English "November 30, 2026"."""
    if not isinstance(date, datetime.date):
        raise TypeError(f"date must be a datetime.date, got {type(date).__name__}")
    try:
        src = format_date(date, format="long", locale=lang)
    except Exception as exc:  # babel raises UnknownLocaleError or ValueError for a bad locale
        raise ValueError(f"lang {lang!r} is not a babel locale: {exc}") from None
    return Pair(src, format_date(date, format="long", locale="en_US"), lang, "date")


def generate_pairs(n: int, seed: int = 0, number_languages: Sequence[str] = NUMBER_LANGUAGES,
                   date_languages: Sequence[str] = DATE_LANGUAGES, max_number: int = 9999,
                   years: tuple[int, int] = (1900, 2099), date_fraction: float = 0.3) -> list[Pair]:
    """``n`` sentence pairs with distinct sources, the same for the same arguments.

    A pair is a date with probability ``date_fraction`` (a day of the years ``years[0]..years[1]`` in
    one of ``date_languages``), otherwise a number in 0..``max_number`` in one of ``number_languages``.
    Sources are distinct, so a split of the list into train/valid/test shares no source sentence.
    """
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not 0.0 <= date_fraction <= 1.0:
        raise ValueError(f"date_fraction must be in [0, 1], got {date_fraction}")
    if date_fraction < 1 and not number_languages:
        raise ValueError("number_languages is empty but date_fraction < 1")
    if date_fraction > 0 and not date_languages:
        raise ValueError("date_languages is empty but date_fraction > 0")
    first = datetime.date(years[0], 1, 1)
    n_days = (datetime.date(years[1], 12, 31) - first).days + 1
    capacity = (len(number_languages) * (max_number + 1) if date_fraction < 1 else 0) + \
               (len(date_languages) * n_days if date_fraction > 0 else 0)
    if n > capacity // 2:
        raise ValueError(f"n={n} is too many distinct pairs for these settings (at most {capacity // 2}); "
                         "raise max_number or widen years")
    rng = random.Random(seed)
    pairs: list[Pair] = []
    seen: set[str] = set()
    while len(pairs) < n:
        if rng.random() < date_fraction:
            lang = rng.choice(list(date_languages))
            pair = date_pair(first + datetime.timedelta(days=rng.randrange(n_days)), lang)
        else:
            lang = rng.choice(list(number_languages))
            pair = number_pair(rng.randint(0, max_number), lang)
        if pair.src not in seen:
            seen.add(pair.src)
            pairs.append(pair)
    return pairs


# [book/12_translation.ipynb, cell 11]
def split_pairs(pairs: Sequence, valid: float | int = 0.1, test: float | int = 0.1,
                seed: int = 0) -> tuple[list, list, list]:
    """Shuffle ``pairs`` (by ``seed``) into (train, valid, test) that share no source sentence.

    ``valid`` and ``test`` are fractions (floats in [0, 1)) or counts (ints) of the distinct sources. Pairs
    with the same source always land in the same split.
    """
    groups: dict[str, list] = {}
    for p in pairs:
        groups.setdefault(p[0], []).append(p)
    sources = list(groups)
    random.Random(seed).shuffle(sources)

    def count(x, name):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x < 0:
            raise ValueError(f"{name} must be a fraction in [0, 1) or a non-negative count, got {x!r}")
        if isinstance(x, float):
            if x >= 1:
                raise ValueError(f"{name} as a fraction must be < 1, got {x}")
            return round(x * len(sources))
        return x

    n_valid, n_test = count(valid, "valid"), count(test, "test")
    if n_valid + n_test > len(sources):
        raise ValueError(f"valid ({n_valid}) + test ({n_test}) exceed the {len(sources)} distinct sources")
    parts = (sources[n_valid + n_test:], sources[:n_valid], sources[n_valid:n_valid + n_test])
    return tuple([p for s in part for p in groups[s]] for part in parts)


# [book/12_translation.ipynb, cell 14]
class CorpusError(ValueError):
    """A malformed parallel corpus; the message starts with ``file:line:``."""


def _read_lines(path) -> list[str]:
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CorpusError(f"{path}: is a directory, expected a text file") from None
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()                                  # the newline that ends the last line
    out = []
    for i, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusError(f"{path}:{i}: not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
        out.append(line[:-1] if line.endswith("\r") else line)
    if out and out[0].startswith("\ufeff"):
        out[0] = out[0][1:]                          # a byte-order mark
    return out


def read_tsv(path) -> list[tuple[str, str]]:
    """Read ``source<TAB>target`` lines; a line without exactly one tab, or with an empty side, raises
    :class:`CorpusError` naming the file and line."""
    pairs = []
    for i, line in enumerate(_read_lines(path), 1):
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}:{i}: expected 'source<TAB>target', found {len(fields) - 1} tabs")
        src, tgt = fields[0].strip(), fields[1].strip()
        if not src or not tgt:
            raise CorpusError(f"{path}:{i}: empty {'source' if not src else 'target'}")
        pairs.append((src, tgt))
    if not pairs:
        raise CorpusError(f"{path}: no sentence pairs")
    return pairs


def read_aligned(src_path, tgt_path) -> list[tuple[str, str]]:
    """Read two line-aligned files (line i of one translates line i of the other); a count mismatch
    or an empty line raises :class:`CorpusError` naming the file and line."""
    src_lines, tgt_lines = _read_lines(src_path), _read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        short, long_, n = ((tgt_path, src_path, len(tgt_lines)) if len(tgt_lines) < len(src_lines)
                           else (src_path, tgt_path, len(src_lines)))
        raise CorpusError(f"{short}:{n + 1}: missing line; {short} has {n} lines but {long_} has "
                          f"{max(len(src_lines), len(tgt_lines))}")
    pairs = []
    for i, (s, t) in enumerate(zip(src_lines, tgt_lines), 1):
        for path, text in ((src_path, s), (tgt_path, t)):
            if not text.strip():
                raise CorpusError(f"{path}:{i}: empty line")
        pairs.append((s.strip(), t.strip()))
    if not pairs:
        raise CorpusError(f"{src_path}: no sentence pairs")
    return pairs


def read_parallel(*paths) -> list[tuple[str, str]]:
    """One path: a TSV file; two paths: line-aligned source and target files."""
    if len(paths) == 1:
        return read_tsv(paths[0])
    if len(paths) == 2:
        return read_aligned(*paths)
    raise ValueError(f"paths must be one TSV file or two aligned files, got {len(paths)} paths")


def write_tsv(pairs: Iterable, path) -> Path:
    """Write ``(source, target, ...)`` pairs as ``source<TAB>target`` lines; tabs/newlines inside raise."""
    path = Path(path)
    lines = []
    for i, p in enumerate(pairs, 1):
        src, tgt = p[0], p[1]
        for name, text in (("source", src), ("target", tgt)):
            if any(c in text for c in "\t\n\r"):
                raise ValueError(f"pair {i}: the {name} contains a tab or newline: {text!r}")
        lines.append(f"{src}\t{tgt}\n")
    path.write_text("".join(lines), encoding="utf-8")
    return path


# [book/12_translation.ipynb, cell 17]
import json

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

PAD_ID = 0   #: id of ``<pad>``, the padding token
BOS_ID = 1   #: id of ``<s>``, the token that starts every decoder input
EOS_ID = 2   #: id of ``</s>``, the token that ends every target
UNK_ID = 3   #: id of ``<unk>`` (reserved: byte-level BPE never needs it)
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")   #: the special tokens, in the order of their ids


class BPETokenizer:
    """Byte-level BPE (Hugging Face ``tokenizers``) with fixed ids pad=0, bos=1, eos=2, unk=3.

    Text is read as UTF-8 bytes, so every string encodes and decodes back to itself (no ``<unk>``);
    digits are split one by one, so numbers are copied digit for digit between languages.
    """

    def __init__(self, tokenizer: Tokenizer):
        for i, tok in enumerate(SPECIAL_TOKENS):
            if tokenizer.token_to_id(tok) != i:
                raise ValueError(f"tokenizer must have {tok!r} at id {i}, found id {tokenizer.token_to_id(tok)}")
        tokenizer.encode_special_tokens = True     # the text "<pad>" is text, not the pad token
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
    def train(cls, texts: Iterable[str], vocab_size: int = 1000, min_frequency: int = 2) -> "BPETokenizer":
        """Learn merges from ``texts`` until the vocabulary has ``vocab_size`` tokens (or no pair is
        seen ``min_frequency`` times)."""
        n_base = len(SPECIAL_TOKENS) + 256
        if not isinstance(vocab_size, int) or vocab_size < n_base:
            raise ValueError(f"vocab_size must be an int >= {n_base} (4 special tokens + 256 bytes), "
                             f"got {vocab_size!r}")
        tok = cls._empty()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency,
                                      special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator((t for t in texts), trainer)
        return cls(tok)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size()

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        """``text`` -> token ids, optionally framed by bos and eos."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        ids = self.tokenizer.encode(text, add_special_tokens=False).ids
        return [BOS_ID] * add_bos + ids + [EOS_ID] * add_eos

    def encode_batch(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("texts must be a list of str, got one str (use encode)")
        return [self.encode(t, add_bos, add_eos) for t in texts]

    def decode(self, ids) -> str:
        """Token ids -> text. A leading bos is dropped, the text ends at the first eos, pads are skipped."""
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
        return self.tokenizer.decode([i for i in ids if i != PAD_ID], skip_special_tokens=False)

    def decode_batch(self, rows) -> list[str]:
        """A (B, T) tensor or a list of id lists -> B strings."""
        if hasattr(rows, "tolist"):
            rows = rows.tolist()
        return [self.decode(r) for r in rows]

    def tokens(self, text: str) -> list[str]:
        """The pieces of ``text``, each decoded to readable text (for plots and tables)."""
        return [self.tokenizer.decode([i]) for i in self.encode(text)]

    def save(self, path) -> Path:
        path = Path(path)
        self.tokenizer.save(str(path))
        return path

    @classmethod
    def load(cls, path) -> "BPETokenizer":
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no tokenizer file")
        try:
            tok = Tokenizer.from_file(str(path))
        except Exception as exc:   # tokenizers raises its own Exception for damaged JSON
            raise ValueError(f"{path}: not a tokenizer file ({str(exc).splitlines()[0]})") from None
        return cls(tok)


__all__ = ['Pair', 'NUMBER_LANGUAGES', 'DATE_LANGUAGES', 'number_pair', 'date_pair', 'generate_pairs', 'split_pairs', 'CorpusError', 'read_tsv', 'read_aligned', 'read_parallel', 'write_tsv', 'PAD_ID', 'BOS_ID', 'EOS_ID', 'UNK_ID', 'SPECIAL_TOKENS', 'BPETokenizer']
