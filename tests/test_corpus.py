"""Tests of transformer_lib.translation.corpus: the generated corpus, its splits, the corpus readers and writers, and
the optional dependencies (num2words and babel are imported only when a pair is generated)."""
import datetime
import os
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from num2words import num2words

from transformer_lib.files import atomic_write
from transformer_lib.translation.corpus import (
    CorpusError,
    Pair,
    date_pair,
    generate_pairs,
    number_pair,
    read_aligned,
    read_parallel,
    read_tsv,
    split_pairs,
    write_tsv,
)


# ---------------------------------------------------------------- the generator
def test_generator_is_deterministic_by_seed():
    assert generate_pairs(300, seed=7) == generate_pairs(300, seed=7)
    assert generate_pairs(300, seed=7) != generate_pairs(300, seed=8)
    # a longer run starts with the shorter one: n does not change what is drawn
    assert generate_pairs(500, seed=7)[:300] == generate_pairs(300, seed=7)


def test_generator_sources_are_distinct_and_cover_languages_and_kinds():
    pairs = generate_pairs(1000, seed=0)
    assert len({p.src for p in pairs}) == 1000
    langs = Counter((p.lang, p.kind) for p in pairs)
    assert set(langs) == {("de", "number"), ("fr", "number"), ("es", "number"), ("ja", "number"),
                          ("de", "date"), ("fr", "date"), ("es", "date"), ("zh", "date")}
    assert 0.2 < sum(p.kind == "date" for p in pairs) / len(pairs) < 0.4


def test_date_targets_match_an_independent_english_formatting():
    for p in generate_pairs(400, seed=3):
        if p.kind == "date":
            # parse the English target back and write it with strftime: month name, day, year
            d = datetime.datetime.strptime(p.tgt, "%B %d, %Y").date()
            assert p.tgt == f"{d:%B} {d.day}, {d.year}"
            assert str(d.year) in p.src and str(d.day) in p.src


def test_known_examples():
    assert number_pair(3724, "de") == Pair("dreitausendsiebenhundertvierundzwanzig",
                                           "three thousand, seven hundred and twenty-four", "de", "number")
    assert number_pair(98, "fr").src == "quatre-vingt-dix-huit"
    assert number_pair(3724, "ja").src == "三千七百二十四"
    d = datetime.date(2026, 11, 30)
    assert date_pair(d, "de") == Pair("30. November 2026", "November 30, 2026", "de", "date")
    assert date_pair(d, "zh").src == "2026年11月30日"


def test_number_targets_are_english_num2words():
    pairs = generate_pairs(300, seed=1, date_fraction=0.0, max_number=500)
    # invert the source language's spelling over the whole range, then spell the value in English
    inverse = {lang: {num2words(v, lang=lang): v for v in range(501)} for lang in {p.lang for p in pairs}}
    for p in pairs:
        assert p.kind == "number"
        assert p.tgt == num2words(inverse[p.lang][p.src], lang="en")


def test_generator_bad_input():
    with pytest.raises(ValueError, match="n must be"):
        generate_pairs(-1)
    with pytest.raises(ValueError, match="too many distinct pairs"):
        generate_pairs(5000, max_number=99, date_fraction=0.0)
    with pytest.raises(ValueError, match="date_fraction"):
        generate_pairs(10, date_fraction=1.5)
    with pytest.raises(ValueError, match="lang 'xx'"):
        number_pair(3, "xx")
    with pytest.raises(ValueError, match="lang must be"):
        number_pair(3, "en")
    with pytest.raises(ValueError, match="value must be"):
        number_pair(-3, "de")
    with pytest.raises(ValueError, match="lang 'xx_YY'"):
        date_pair(datetime.date(2000, 1, 1), "xx_YY")
    with pytest.raises(TypeError, match="date must be"):
        date_pair("2000-01-01", "de")


# ---------------------------------------------------------------- splits
@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcdefghij"), st.text(max_size=3)), max_size=40),
       st.integers(0, 5), st.integers(0, 5), st.integers(0, 100))
def test_splits_share_no_source_and_keep_every_pair(pairs, n_valid, n_test, seed):
    n_sources = len({p[0] for p in pairs})
    if n_valid + n_test > n_sources:
        with pytest.raises(ValueError, match="exceed"):
            split_pairs(pairs, n_valid, n_test, seed)
        return
    train, valid, test = split_pairs(pairs, n_valid, n_test, seed)
    sources = [{p[0] for p in part} for part in (train, valid, test)]
    assert not (sources[0] & sources[1]) and not (sources[0] & sources[2]) and not (sources[1] & sources[2])
    assert len(sources[1]) == n_valid and len(sources[2]) == n_test
    assert Counter(train + valid + test) == Counter(pairs)
    assert split_pairs(pairs, n_valid, n_test, seed) == (train, valid, test)


def test_split_fractions_and_bad_input():
    pairs = generate_pairs(200, seed=0)
    train, valid, test = split_pairs(pairs, 0.1, 0.25)
    assert (len(train), len(valid), len(test)) == (130, 20, 50)
    with pytest.raises(ValueError, match="valid"):
        split_pairs(pairs, 1.0, 0.1)
    with pytest.raises(ValueError, match="test"):
        split_pairs(pairs, 0.1, -2)


# ---------------------------------------------------------------- readers
def test_read_tsv(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_bytes("\ufeffzwei\ttwo\r\ndrei \t three\nvier\tfour".encode("utf-8"))   # BOM, CRLF, no final newline
    assert read_tsv(f) == [("zwei", "two"), ("drei", "three"), ("vier", "four")]
    assert read_parallel(f) == read_tsv(f)


@pytest.mark.parametrize("content, message", [
    ("a\tb\nc d\ne\tf\n", r"c\.tsv:2: expected 'source<TAB>target', found 0 tabs"),
    ("a\tb\ne\tf\tg\n", r"c\.tsv:2: expected 'source<TAB>target', found 2 tabs"),
    ("a\tb\n\nc d\n", r"c\.tsv:3: expected"),
    ("a\tb\nx\t \n", r"c\.tsv:2: empty target"),
    ("a\tb\nc\td\n\tz\n", r"c\.tsv:3: empty source"),
    ("", r"c\.tsv: no sentence pairs"),
    ("\n \n\n", r"c\.tsv: no sentence pairs"),
])
def test_read_tsv_errors_name_file_and_line(tmp_path, content, message):
    f = tmp_path / "c.tsv"
    f.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=message):
        read_tsv(f)


def test_read_tsv_bad_utf8_and_missing_file(tmp_path):
    f = tmp_path / "c.tsv"
    f.write_bytes(b"a\tb\nc\td\xff\n")
    with pytest.raises(CorpusError, match=r"c\.tsv:2: not valid UTF-8"):
        read_tsv(f)
    with pytest.raises(CorpusError, match="no such file"):
        read_tsv(tmp_path / "missing.tsv")
    with pytest.raises(CorpusError, match="is a directory"):
        read_tsv(tmp_path)
    assert issubclass(CorpusError, ValueError)


def test_read_aligned(tmp_path):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_text("zwei\ndrei\n", encoding="utf-8")
    tgt.write_text("two\nthree\n", encoding="utf-8")
    assert read_aligned(src, tgt) == [("zwei", "two"), ("drei", "three")]
    assert read_parallel(src, tgt) == read_aligned(src, tgt)
    tgt.write_text("two\n", encoding="utf-8")
    with pytest.raises(CorpusError,
                       match=r"train\.en:2: missing line; .*train\.en has 1 lines but .*train\.de has 2"):
        read_aligned(src, tgt)
    with pytest.raises(CorpusError, match=r"train\.en:2: missing line"):
        read_aligned(tgt, src)
    tgt.write_text("two\n  \n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.en:2: empty line"):
        read_aligned(src, tgt)
    with pytest.raises(ValueError, match="paths must be"):
        read_parallel(src, tgt, src)


_SEPARATORS = "\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff"     # what splits or ends a line
_line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters=_SEPARATORS),
                min_size=1, max_size=20).map(str.strip).filter(bool)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(_line, _line), min_size=1, max_size=10))
def test_write_then_read_tsv_round_trip(tmp_path_factory, pairs):
    f = tmp_path_factory.mktemp("rt") / "c.tsv"
    write_tsv(pairs, f)
    assert read_tsv(f) == pairs


def test_write_tsv_refuses_tabs(tmp_path):
    with pytest.raises(ValueError, match="pair 2: the target contains a tab"):
        write_tsv([("a", "b"), ("c", "d\te")], tmp_path / "x.tsv")


# ---------------------------------------------------------------- optional dependencies
def test_import_does_not_load_the_optional_dependencies():
    code = ("import sys, transformer_lib; "
            "print(sorted(m for m in ('babel', 'num2words', 'sacrebleu') if m in sys.modules))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "[]"


@pytest.mark.parametrize("module, call", [
    ("num2words", lambda: number_pair(3, "de")),
    ("babel", lambda: date_pair(datetime.date(2000, 1, 2), "de")),
    ("babel", lambda: generate_pairs(5, date_fraction=1.0)),
])
def test_a_missing_optional_dependency_names_the_extra(monkeypatch, module, call):
    for name in list(sys.modules):
        if name == module or name.startswith(module + "."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, module, None)          # `import module` now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'transformer_lib\[corpus\]'"):
        call()


def test_read_tsv_skips_and_counts_blank_lines(tmp_path):
    # issue 14: a trailing blank line was reported as "found 0 tabs"
    f = tmp_path / "c.tsv"
    f.write_text("zwei\ttwo\n\ndrei\tthree\n  \n\n", encoding="utf-8")
    pairs = read_tsv(f)
    assert pairs == [("zwei", "two"), ("drei", "three")] and pairs.blank_lines == 3
    assert read_parallel(f).blank_lines == 3
    f.write_text("zwei\ttwo\n", encoding="utf-8")
    assert read_tsv(f).blank_lines == 0


# atomic_write (chapter 10's appendix) writes every file of chapter 12: the corpus, the tokenizer, the model
def test_atomic_write_keeps_the_old_file_when_a_write_fails(tmp_path):
    f = tmp_path / "x.txt"
    atomic_write(f, "good\n")

    def fail(tmp):
        with open(tmp, "w") as out:
            out.write("half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_write(f, fail)
    assert f.read_text() == "good\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.txt"]     # no temporary left
    atomic_write(f, b"bytes")
    assert f.read_bytes() == b"bytes"


def test_atomic_write_removes_temporaries_of_killed_writes(tmp_path):
    f = tmp_path / "x.txt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    stale = tmp_path / f"x.txt.tmp{dead}"
    stale.write_text("half")
    alive = tmp_path / f"x.txt.tmp{os.getpid() + 0}x"       # not a temporary's name
    alive.write_text("keep")
    atomic_write(f, "new")
    assert not stale.exists() and alive.exists() and f.read_text() == "new"


def test_write_tsv_is_atomic(tmp_path):
    f = write_tsv([("zwei", "two")], tmp_path / "c.tsv")
    with pytest.raises(ValueError, match="tab or newline"):
        write_tsv([("ok", "ok"), ("a\tb", "c")], f)
    assert read_tsv(f) == [("zwei", "two")]
