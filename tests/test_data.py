"""Tests of transformer_lib.data: the generated corpus, its splits, the corpus readers and the BPE tokenizer."""
import datetime
import json
from collections import Counter

import pytest
from hypothesis import given, settings, strategies as st
from num2words import num2words

from transformer_lib.data import (BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS, UNK_ID, BPETokenizer, CorpusError,
                                  Pair, date_pair, generate_pairs, number_pair, read_aligned, read_parallel,
                                  read_tsv, split_pairs, write_tsv)


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
    ("a\tb\n\n", r"c\.tsv:2: expected"),
    ("a\tb\nx\t \n", r"c\.tsv:2: empty target"),
    ("a\tb\nc\td\n\tz\n", r"c\.tsv:3: empty source"),
    ("", r"c\.tsv: no sentence pairs"),
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
    with pytest.raises(CorpusError, match=r"train\.en:2: missing line; .*train\.en has 1 lines but .*train\.de has 2"):
        read_aligned(src, tgt)
    with pytest.raises(CorpusError, match=r"train\.en:2: missing line"):
        read_aligned(tgt, src)
    tgt.write_text("two\n  \n", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"train\.en:2: empty line"):
        read_aligned(src, tgt)
    with pytest.raises(ValueError, match="paths must be"):
        read_parallel(src, tgt, src)


_line = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029\ufeff"),
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


# ---------------------------------------------------------------- tokenizer
@pytest.fixture(scope="module")
def tokenizer():
    pairs = generate_pairs(600, seed=0)
    return BPETokenizer.train([p.src for p in pairs] + [p.tgt for p in pairs], vocab_size=400)


def test_special_ids_are_fixed(tokenizer):
    assert (PAD_ID, BOS_ID, EOS_ID, UNK_ID) == (0, 1, 2, 3)
    for i, tok in enumerate(SPECIAL_TOKENS):
        assert tokenizer.tokenizer.token_to_id(tok) == i
    assert tokenizer.vocab_size == 400


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_round_trip_any_text(tokenizer, text):
    ids = tokenizer.encode(text)
    assert UNK_ID not in ids and all(4 <= i < tokenizer.vocab_size for i in ids)
    assert tokenizer.decode(ids) == text


def test_round_trip_corpus_and_framing(tokenizer):
    for p in generate_pairs(100, seed=11):
        for text in (p.src, p.tgt):
            ids = tokenizer.encode(text, add_bos=True, add_eos=True)
            assert ids[0] == BOS_ID and ids[-1] == EOS_ID
            assert tokenizer.decode(ids) == text
    assert tokenizer.encode("<pad></s>") != [PAD_ID, EOS_ID]          # the text is text, not special tokens
    assert tokenizer.decode(tokenizer.encode("<pad></s>")) == "<pad></s>"


def test_decode_stops_at_eos_and_skips_pad(tokenizer):
    a, b = tokenizer.encode("zwei"), tokenizer.encode("three")
    assert tokenizer.decode([BOS_ID] + a + [EOS_ID] + b) == "zwei"
    assert tokenizer.decode_batch([[BOS_ID] + a + [EOS_ID, PAD_ID], [BOS_ID] + b + [PAD_ID, PAD_ID]]) == ["zwei", "three"]
    torch = pytest.importorskip("torch")
    assert tokenizer.decode_batch(torch.tensor([[BOS_ID] + a + [EOS_ID]])) == ["zwei"]
    with pytest.raises(ValueError, match="ids must be token ids"):
        tokenizer.decode([5, 10 ** 6])


def test_digits_are_split_one_by_one(tokenizer):
    assert tokenizer.tokens("2026") == ["2", "0", "2", "6"]


def test_save_load(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path / "tokenizer.json")
    loaded = BPETokenizer.load(path)
    assert loaded.vocab_size == tokenizer.vocab_size
    for text in ("dreitausendsiebenhundertvierundzwanzig", "2026年11月30日", "November 30, 2026", "<s> x"):
        assert loaded.encode(text) == tokenizer.encode(text)
        assert loaded.decode(loaded.encode(text)) == text


def test_load_errors(tokenizer, tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer file"):
        BPETokenizer.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(ValueError, match="not a tokenizer file"):
        BPETokenizer.load(bad)
    # a tokenizer whose special tokens sit at other ids is refused
    data = json.loads(tokenizer.tokenizer.to_str())
    for entry in data["added_tokens"]:
        entry["id"] = {0: 1, 1: 0}.get(entry["id"], entry["id"])
    vocab = data["model"]["vocab"]
    vocab["<pad>"], vocab["<s>"] = vocab["<s>"], vocab["<pad>"]
    swapped = tmp_path / "swapped.json"
    swapped.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match="'<pad>' at id 0"):
        BPETokenizer.load(swapped)


def test_train_bad_input():
    with pytest.raises(ValueError, match="vocab_size must be"):
        BPETokenizer.train(["a b c"], vocab_size=100)
    with pytest.raises(TypeError, match="text must be a str"):
        BPETokenizer.train(["a b c"], vocab_size=300).encode(3)
