"""Generated from book/12_translation.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: edbfb5ac5887639c
# fmt: off

# [book/12_translation.ipynb, cell 3190b244]
from __future__ import annotations

import datetime
import importlib
import random
from pathlib import Path
from types import ModuleType
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from transformer_lib.checks import check_int, check_probability
from transformer_lib.files import atomic_write


def _optional(module: str, extra: str) -> ModuleType:
    """Import ``module``, an optional dependency, when a function first needs it; when
    it is missing, say which extra of the package installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"{module} is not installed; it comes with the {extra!r} "
                          f"extra: pip install 'transformer_lib[{extra}]'") from None


# [book/12_translation.ipynb, cell 46d45de5]
class Pair(NamedTuple):
    """One sentence pair of the generated corpus: source, English target, source
    language, kind."""

    src: str
    tgt: str
    lang: str = ""
    kind: str = ""


NUMBER_LANGUAGES = ("de", "fr", "es", "ja")
DATE_LANGUAGES = ("de", "fr", "es", "zh")


def number_pair(value: int, lang: str) -> Pair:
    """The number ``value`` written out in language ``lang`` (num2words), and in English
    words."""
    value = check_int(value, "value", minimum=0)
    if lang == "en":
        raise ValueError("lang must be a source language other than 'en' (English is "
                         "the target)")
    num2words = _optional("num2words", "corpus").num2words
    try:
        src = num2words(value, lang=lang)
    except NotImplementedError:
        raise ValueError(f"lang {lang!r} is not a num2words language") from None
    return Pair(src, num2words(value, lang="en"), lang, "number")


def date_pair(date: datetime.date, lang: str) -> Pair:
    """``date`` in the long format of locale ``lang`` (babel), and as English "November
    30, 2026"."""
    if not isinstance(date, datetime.date):
        raise TypeError(f"date must be a datetime.date, got {type(date).__name__}")
    format_date = _optional("babel.dates", "corpus").format_date
    try:
        src = format_date(date, format="long", locale=lang)
    except Exception as exc:  # babel: UnknownLocaleError or ValueError for a bad locale
        raise ValueError(f"lang {lang!r} is not a babel locale: {exc}") from None
    return Pair(src, format_date(date, format="long", locale="en_US"), lang, "date")


# [book/12_translation.ipynb, cell 187893b3]
def generate_pairs(n: int, seed: int = 0,
                   number_languages: Sequence[str] = NUMBER_LANGUAGES,
                   date_languages: Sequence[str] = DATE_LANGUAGES,
                   max_number: int = 9999,
                   years: tuple[int, int] = (1900, 2099),
                   date_fraction: float = 0.3) -> list[Pair]:
    """``n`` sentence pairs with distinct sources, the same for the same arguments.

    A pair is a date with probability ``date_fraction`` (a day of the years
    ``years[0]..years[1]`` in one of ``date_languages``), otherwise a number in
    0..``max_number`` in one of ``number_languages``. Sources are distinct, so a split
    of the list into train/valid/test shares no source sentence."""
    n = check_int(n, "n", minimum=0)
    max_number = check_int(max_number, "max_number", minimum=0)
    date_fraction = check_probability(date_fraction, "date_fraction")
    if date_fraction < 1 and not number_languages:
        raise ValueError("number_languages is empty but date_fraction < 1")
    if date_fraction > 0 and not date_languages:
        raise ValueError("date_languages is empty but date_fraction > 0")
    first = datetime.date(years[0], 1, 1)
    n_days = (datetime.date(years[1], 12, 31) - first).days + 1
    numbers = len(number_languages) * (max_number + 1) if date_fraction < 1 else 0
    capacity = numbers + (len(date_languages) * n_days if date_fraction > 0 else 0)
    if n > capacity // 2:
        raise ValueError(f"n={n} is too many distinct pairs for these settings (at "
                         f"most {capacity // 2}); raise max_number or widen years")
    rng = random.Random(seed)
    pairs: list[Pair] = []
    seen: set[str] = set()
    while len(pairs) < n:
        if rng.random() < date_fraction:
            lang = rng.choice(list(date_languages))
            day = first + datetime.timedelta(days=rng.randrange(n_days))
            pair = date_pair(day, lang)
        else:
            lang = rng.choice(list(number_languages))
            pair = number_pair(rng.randint(0, max_number), lang)
        if pair.src not in seen:
            seen.add(pair.src)
            pairs.append(pair)
    return pairs


# [book/12_translation.ipynb, cell 4fce0ab9]
def split_pairs(pairs: Sequence, valid: float | int = 0.1, test: float | int = 0.1,
                seed: int = 0) -> tuple[list, list, list]:
    """Shuffle ``pairs`` (by ``seed``) into (train, valid, test) that share no source
    sentence.

    ``valid`` and ``test`` are fractions (floats in [0, 1)) or counts (ints) of the
    distinct sources. Pairs with the same source always land in the same split."""
    groups: dict[str, list] = {}
    for p in pairs:
        groups.setdefault(p[0], []).append(p)
    sources = list(groups)
    random.Random(seed).shuffle(sources)

    def count(x, name):
        if isinstance(x, float):
            x = check_probability(x, name, one=False)
            return round(x * len(sources))
        if isinstance(x, bool) or not isinstance(x, int) or x < 0:
            raise ValueError(f"{name} must be a fraction in [0, 1) or a non-negative "
                             f"count, got {x!r}")
        return x

    n_valid, n_test = count(valid, "valid"), count(test, "test")
    if n_valid + n_test > len(sources):
        raise ValueError(f"valid ({n_valid}) + test ({n_test}) exceed the "
                         f"{len(sources)} distinct sources")
    parts = (sources[n_valid + n_test:], sources[:n_valid],
             sources[n_valid:n_valid + n_test])
    split = [[p for s in part for p in groups[s]] for part in parts]
    return split[0], split[1], split[2]


# [book/12_translation.ipynb, cell b449e2d6]
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
        lines.pop()                            # the newline that ends the last line
    out = []
    for i, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorpusError(f"{path}:{i}: not valid UTF-8 ({exc.reason} at byte "
                              f"{exc.start})") from None
        out.append(line[:-1] if line.endswith("\r") else line)
    if out and out[0].startswith("\ufeff"):
        out[0] = out[0][1:]                          # a byte-order mark
    return out


class Pairs(list):
    """The list of ``(source, target)`` pairs a reader returns, with ``blank_lines``,
    the number of blank lines it skipped."""

    blank_lines: int = 0


def read_tsv(path) -> Pairs:
    """Read ``source<TAB>target`` lines; blank lines (a trailing one, say) are skipped
    and counted in the result's ``blank_lines``; a line without exactly one tab, or
    with an empty side, raises :class:`CorpusError` naming the file and line."""
    pairs = Pairs()
    for i, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            pairs.blank_lines += 1
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise CorpusError(f"{path}:{i}: expected 'source<TAB>target', found "
                              f"{len(fields) - 1} tabs")
        src, tgt = fields[0].strip(), fields[1].strip()
        if not src or not tgt:
            raise CorpusError(f"{path}:{i}: empty {'source' if not src else 'target'}")
        pairs.append((src, tgt))
    if not pairs:
        raise CorpusError(f"{path}: no sentence pairs")
    return pairs


# [book/12_translation.ipynb, cell e1a014d3]
def read_aligned(src_path, tgt_path) -> Pairs:
    """Read two line-aligned files (line i of one translates line i of the other); a
    count mismatch or an empty line raises :class:`CorpusError` naming the file and
    line."""
    src_lines, tgt_lines = _read_lines(src_path), _read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        short, long_, n = ((tgt_path, src_path, len(tgt_lines))
                           if len(tgt_lines) < len(src_lines)
                           else (src_path, tgt_path, len(src_lines)))
        raise CorpusError(f"{short}:{n + 1}: missing line; {short} has {n} lines but "
                          f"{long_} has {max(len(src_lines), len(tgt_lines))}")
    pairs = Pairs()
    for i, (s, t) in enumerate(zip(src_lines, tgt_lines), 1):
        for path, text in ((src_path, s), (tgt_path, t)):
            if not text.strip():
                raise CorpusError(f"{path}:{i}: empty line")
        pairs.append((s.strip(), t.strip()))
    if not pairs:
        raise CorpusError(f"{src_path}: no sentence pairs")
    return pairs


def read_parallel(*paths) -> Pairs:
    """One path: a TSV file; two paths: line-aligned source and target files. The
    result's ``blank_lines`` counts the blank lines skipped (TSV only)."""
    if len(paths) == 1:
        return read_tsv(paths[0])
    if len(paths) == 2:
        return read_aligned(*paths)
    raise ValueError("paths must be one TSV file or two aligned files, got "
                     f"{len(paths)} paths")


def write_tsv(pairs: Iterable, path) -> Path:
    """Write ``(source, target, ...)`` pairs as ``source<TAB>target`` lines; a tab or
    newline inside a sentence raises."""
    path = Path(path)
    lines = []
    for i, p in enumerate(pairs, 1):
        src, tgt = p[0], p[1]
        for name, text in (("source", src), ("target", tgt)):
            if any(c in text for c in "\t\n\r"):
                raise ValueError(f"pair {i}: the {name} contains a tab or newline: "
                                 f"{text!r}")
        lines.append(f"{src}\t{tgt}\n")
    return atomic_write(path, "".join(lines))


__all__ = [
    'Pair', 'NUMBER_LANGUAGES', 'DATE_LANGUAGES', 'number_pair', 'date_pair',
    'generate_pairs', 'split_pairs', 'CorpusError', 'Pairs', 'read_tsv', 'read_aligned',
    'read_parallel', 'write_tsv',
]
