"""Tests of transformer_lib.translation.tokenizer: the byte-level BPE tokenizer with fixed special ids, and the
encoding of a corpus into token-id pairs."""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_lib.translation.corpus import generate_pairs
from transformer_lib.translation.tokenizer import (
    BOS_ID,
    BYTE_OF_CHAR,
    EOS_ID,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    BPETokenizer,
    encode_pairs,
)


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
    rows = [[BOS_ID] + a + [EOS_ID, PAD_ID], [BOS_ID] + b + [PAD_ID, PAD_ID]]
    assert tokenizer.decode_batch(rows) == ["zwei", "three"]
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


def test_encode_pairs_drops_what_does_not_fit(tokenizer):
    pairs = [("zwei", "two"), ("dreitausendsiebenhundertvierundzwanzig", "three thousand"), ("", "x"),
             ("vier", "four", "de", "number")]
    encoded, skipped = encode_pairs(pairs, tokenizer)
    assert skipped == 1                                               # only the empty source
    assert encoded[0] == (tokenizer.encode("zwei"), tokenizer.encode("two"))
    assert encoded[-1] == (tokenizer.encode("vier"), tokenizer.encode("four"))
    long_src = len(tokenizer.encode(pairs[1][0]))
    encoded, skipped = encode_pairs(pairs, tokenizer, max_len=long_src - 1)
    assert skipped == 2 and len(encoded) == 2
    # the target must fit with its eos: a target of exactly max_len tokens is dropped
    n = len(tokenizer.encode("three thousand"))
    assert encode_pairs([("a", "three thousand")], tokenizer, max_len=n)[1] == 1
    assert encode_pairs([("a", "three thousand")], tokenizer, max_len=n + 1)[1] == 0


# ---------------------------------------------------------------- broken byte sequences (issue 14)
def test_decode_drops_incomplete_utf8_pieces(tokenizer):
    # a sampled sequence can hold the first byte of a character without the rest
    text = "三千七百"
    ids = tokenizer.encode(text)
    char_of = {b: c for c, b in BYTE_OF_CHAR.items()}
    assert char_of[0xE4] == "ä" and char_of[0x20] == "Ġ"       # GPT-2's byte table
    # "三" is E4 B8 89 in UTF-8: its bytes as single byte-level tokens
    byte_ids = [tokenizer.tokenizer.token_to_id(char_of[b]) for b in (0xE4, 0xB8, 0x89)]
    assert None not in byte_ids
    assert tokenizer.decode(byte_ids) == "三"
    for cut in ([byte_ids[0]], byte_ids[:2], [byte_ids[1]], byte_ids[1:]):
        out = tokenizer.decode(ids + cut + ids)
        assert "\ufffd" not in out and out == text + text
    assert tokenizer.decode(tokenizer.encode("a\ufffdb")) == "a\ufffdb"  # the real character


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(4, 399), max_size=30))
def test_decode_of_any_ids_is_valid_text(tokenizer, ids):
    out = tokenizer.decode(ids)
    assert "\ufffd" not in out
    out.encode("utf-8")                             # no lone surrogates either


def test_save_is_atomic(tokenizer, tmp_path):
    path = tokenizer.save(tmp_path / "tok.json")
    assert BPETokenizer.load(path).encode("dreitausend") == tokenizer.encode("dreitausend")
    assert path.read_text(encoding="utf-8") == tokenizer.to_json()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tok.json"]
