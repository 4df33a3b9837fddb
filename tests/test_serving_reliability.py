"""Issue 39, the library side of the CTranslate2 export (the red-team report's cases named in each test):
an export's ``book/`` folder is tied to its ``model.bin`` by ``book/manifest.json`` (X23, X23b, X40, S07b);
the export's writer refuses an ``out_dir`` that is a link and reports a failed write in one line naming
``out_dir``, leaving nothing behind (E12, E14, E19, E20b); ``CTranslate2Model.decode`` refuses a beam larger
than the vocabulary as the book's beam search does (X49)."""
from __future__ import annotations

import errno
import json
import os
import resource
import shutil
from pathlib import Path

import pytest
import torch

import transformer_lib as tl
from transformer_lib.translation.corpus import generate_pairs
from transformer_lib.translation.model_dir import ModelDirError
from transformer_lib.translation.tokenizer import BPETokenizer

pytest.importorskip("ctranslate2")
from transformer_lib.export_manifest import MANIFEST_FILE, check_export
from transformer_lib.serving import CTranslate2Model, export_ctranslate2


def _tokenizer(seed: int) -> BPETokenizer:
    pairs = generate_pairs(100, seed=seed)
    return BPETokenizer.train([p.src for p in pairs] + [p.tgt for p in pairs], vocab_size=300)


def _model(vocab: int, seed: int, d_model: int = 16) -> tl.Transformer:
    torch.manual_seed(seed)
    config = tl.TransformerConfig(vocab, vocab, d_model=d_model, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                                  d_ff=32, dropout=0.0, max_len=48, share_embeddings=True)
    return tl.Transformer(config).eval()


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """Two exports of two models with two tokenizers of the same size ("A" and "B": X23's K1 and K4), and a
    third of A's model with another d_model ("C": X23b's K3)."""
    root = tmp_path_factory.mktemp("exports")
    tokenizers = {"A": _tokenizer(3), "B": _tokenizer(4)}
    assert tokenizers["A"].vocab_size == tokenizers["B"].vocab_size           # only the book tells them apart
    assert tokenizers["A"].to_json() != tokenizers["B"].to_json()
    v = tokenizers["A"].vocab_size
    export_ctranslate2(_model(v, 0), tokenizers["A"], root / "A")
    export_ctranslate2(_model(v, 1), tokenizers["B"], root / "B")
    export_ctranslate2(_model(v, 0, d_model=32), tokenizers["A"], root / "C")
    return root


def _copy(exports: Path, name: str, to: Path) -> Path:
    return Path(shutil.copytree(exports / name, to, symlinks=True))


def _refused(path: Path, *needles: str) -> str:
    with pytest.raises(ModelDirError) as caught:
        CTranslate2Model.load(path)
    text = str(caught.value)
    assert "\n" not in text
    for needle in needles:
        assert needle in text, text
    return text


def test_an_export_as_written_loads_and_its_manifest_records_every_file(exports, tmp_path):
    record = json.loads((exports / "A" / "book" / MANIFEST_FILE).read_text())["sha256"]
    written = {p.relative_to(exports / "A").as_posix() for p in (exports / "A").rglob("*") if p.is_file()}
    assert set(record) == written - {f"book/{MANIFEST_FILE}"}
    assert {"model.bin", "config.json", "book/config.json", "book/tokenizer.json"} <= set(record)
    a = _copy(exports, "A", tmp_path / "a")
    (a / "generation.json").write_text("{}")       # the CLI writes the decoding defaults beside the export
    engine = CTranslate2Model.load(a)
    assert engine.config.d_model == 16 and engine.tokenizer is not None


def test_another_models_book_is_refused(exports, tmp_path):
    """X23: A's weights with B's config and tokenizer (the same vocabulary size, another BPE) translated other
    sentences without a word."""
    mixed = _copy(exports, "A", tmp_path / "mixed")
    shutil.rmtree(mixed / "book")
    (mixed / "book").mkdir()
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(exports / "B" / "book" / name, mixed / "book" / name)
    _refused(mixed, f"{mixed / 'book' / MANIFEST_FILE}: missing", "export the model again")
    # B's whole book, manifest included: its files agree with its manifest, A's CTranslate2 files do not
    # (B's vocabulary differs, and its weights)
    shutil.rmtree(mixed / "book")
    shutil.copytree(exports / "B" / "book", mixed / "book")
    text = _refused(mixed, "does not match", "SHA-256", "export the model again")
    assert text.split(":")[0] in {str(mixed / name) for name in ("config.json", "shared_vocabulary.json",
                                                                  "model.bin")}, text
    # C's whole book: C has A's tokenizer, so only the weights tell them apart
    shutil.rmtree(mixed / "book")
    shutil.copytree(exports / "C" / "book", mixed / "book")
    _refused(mixed, f"{mixed / 'model.bin'}: does not match", "mixed from two exports")


def test_a_book_that_is_a_link_is_refused(exports, tmp_path):
    """S07b: the export's book/ a link to another export's book (or its own, copied elsewhere)."""
    linked = _copy(exports, "A", tmp_path / "linked")
    shutil.rmtree(linked / "book")
    os.symlink(exports / "B" / "book", linked / "book")
    _refused(linked, f"{linked / 'book'}: a symbolic link")
    os.remove(linked / "book")
    os.symlink(exports / "A" / "book", linked / "book")              # the right files, through a link
    _refused(linked, f"{linked / 'book'}: a symbolic link")


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", MANIFEST_FILE])
@pytest.mark.parametrize("where", ["inside book", "outside the export"])
def test_a_file_in_the_book_that_is_a_link_is_refused(exports, tmp_path, name, where):
    """A link to the same bytes: the content would pass, the link does not (one that stays inside book/ as
    well as one that leads out)."""
    export = _copy(exports, "A", tmp_path / "e")
    book = export / "book"
    real = book / "real" / name if where == "inside book" else tmp_path / name
    real.parent.mkdir(exist_ok=True)
    os.replace(book / name, real)
    os.symlink(os.path.relpath(real, book), book / name)
    assert (book / name).read_bytes() == (exports / "A" / "book" / name).read_bytes()
    _refused(export, f"{book / name}: a link")


def test_an_edited_book_config_is_refused(exports, tmp_path):
    """X40, X23b: book/config.json edited (d_model 16 -> 32), or replaced by C's (the same tokenizer)."""
    edited = _copy(exports, "A", tmp_path / "edited")
    config = json.loads((edited / "book" / "config.json").read_text())
    config["d_model"] = 32
    (edited / "book" / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    _refused(edited, f"{edited / 'book' / 'config.json'}: does not match")
    shutil.copy(exports / "C" / "book" / "config.json", edited / "book" / "config.json")
    _refused(edited, f"{edited / 'book' / 'config.json'}: does not match")


@pytest.mark.parametrize("name", ["model.bin", "config.json", "shared_vocabulary.json", "book/tokenizer.json"])
def test_any_changed_file_of_the_export_is_named(exports, tmp_path, name):
    export = _copy(exports, "A", tmp_path / "e")
    data = bytearray((export / name).read_bytes())
    data[len(data) // 2] ^= 1                                       # one bit
    (export / name).write_bytes(bytes(data))
    _refused(export, f"{export / name}: does not match")


def test_weights_of_another_export_are_refused(exports, tmp_path):
    export = _copy(exports, "A", tmp_path / "e")
    shutil.copy(exports / "B" / "model.bin", export / "model.bin")
    _refused(export, f"{export / 'model.bin'}: does not match")


def test_a_file_the_export_did_not_write_is_refused(exports, tmp_path):
    export = _copy(exports, "A", tmp_path / "e")
    (export / "book" / "tokenizer_kind.json").write_text(json.dumps({"kind": "bpe", "path": "tokenizer.json"}))
    _refused(export, f"{export / 'book' / 'tokenizer_kind.json'}: not a file of the export")


@pytest.mark.parametrize("text", ["", "{", "[]", '{"sha256": {"book/config.json": "00"}}',
                                  '{"sha256": {"model.bin": "00", "../x": "00"}}'])
def test_a_damaged_manifest_is_refused(exports, tmp_path, text):
    export = _copy(exports, "A", tmp_path / "e")
    (export / "book" / MANIFEST_FILE).write_text(text)
    _refused(export, f"{export / 'book' / MANIFEST_FILE}: damaged", "export the model again")


def test_missing_pieces_are_one_line(exports, tmp_path):
    """X48 and X20's library side: no book folder (an export written without a tokenizer), no model.bin."""
    export = _copy(exports, "A", tmp_path / "e")
    shutil.rmtree(export / "book")
    _refused(export, f"{export}: no book folder")
    os.remove(export / "model.bin")
    with pytest.raises(ValueError, match="no model.bin"):
        CTranslate2Model.load(export)
    fifo = _copy(exports, "A", tmp_path / "f")
    os.mkfifo(fifo / "book" / "pipe")                          # never opened: it would block
    with pytest.raises(ModelDirError, match="a link or a special file"):
        check_export(fifo)


# --- the writer's errors (E12, E14, E19, E20b) -------------------------------------------------------------


@pytest.fixture(scope="module")
def small():
    tokenizer = _tokenizer(3)
    return _model(tokenizer.vocab_size, 0), tokenizer


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("target", ["empty folder", "dangling"])
def test_an_out_dir_that_is_a_link_is_refused(small, tmp_path, target):
    """E12: a link to an empty folder was replaced by a new folder (the target stayed empty); E14: a dangling
    link gave a raw errno naming a temporary. One rule: a link is refused, named, and left as it was."""
    aim = tmp_path / "elsewhere"
    if target == "empty folder":
        aim.mkdir()
    link = tmp_path / "ct"
    os.symlink(aim, link)
    before = _entries(tmp_path)
    with pytest.raises(ValueError) as caught:
        export_ctranslate2(*small, link)
    assert str(caught.value) == (f"out_dir: {link} is a symbolic link: give the path of the export's own "
                                 "directory")
    assert link.is_symlink() and os.readlink(link) == str(aim) and _entries(tmp_path) == before
    assert not aim.exists() or not any(aim.iterdir())


def _clean_message(text: str, out: Path) -> None:
    """One line that names ``out`` first, with neither a raw errno nor a temporary's name."""
    assert "\n" not in text and text.startswith(f"{out}: could not write the export ("), text
    assert "Errno" not in text and f".{out.name}." not in text, text


def test_a_read_only_parent_is_one_line_naming_out(small, tmp_path, monkeypatch):
    """E19: '[Errno 13] Permission denied: 'ro/.m.5rjthxhp'' named the hidden temporary. As root, where a
    folder's mode does not stop a write, the kernel's refusal is played by os.mkdir for the same folder."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.geteuid() == 0:
        mkdir = os.mkdir

        def refuse(path, *args, **kwargs):
            if Path(path).parent == ro:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
            return mkdir(path, *args, **kwargs)
        monkeypatch.setattr(os, "mkdir", refuse)
    try:
        with pytest.raises(OSError) as caught:
            export_ctranslate2(*small, ro / "m")
        assert _entries(ro) == []
    finally:
        ro.chmod(0o755)
    _clean_message(str(caught.value), ro / "m")
    assert "(Permission denied); nothing was left behind" in str(caught.value)


def _file_size_limit(limit: int):
    """A file-size limit (RLIMIT_FSIZE) on this process: the kernel's EFBIG, a full disk's twin (turn 3's
    F01 drill; Python ignores SIGXFSZ, so a write past it fails instead of killing the process)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)

    class Limit:
        def __enter__(self):
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))

        def __exit__(self, *exc):
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    return Limit()


def test_a_full_disk_is_one_line_naming_out_and_leaves_nothing(small, tmp_path):
    """E20b: '[Errno 28] No space left on device' named no file. The write stops inside model.bin; the
    folders the export made for --out's parents go too."""
    out = tmp_path / "new" / "deeper" / "m"
    with _file_size_limit(4096), pytest.raises(OSError) as caught:
        export_ctranslate2(*small, out)
    _clean_message(str(caught.value), out)
    assert "disk full" in str(caught.value) and str(caught.value).endswith("nothing was left behind")
    assert _entries(tmp_path) == []


def test_a_failed_export_keeps_the_export_it_would_replace(small, tmp_path):
    out = export_ctranslate2(*small, tmp_path / "m")
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    with _file_size_limit(4096), pytest.raises(OSError) as caught:
        export_ctranslate2(*small, out, quantization="int8")
    _clean_message(str(caught.value), out)
    assert str(caught.value).endswith(f"{out} was left as it was")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert _entries(tmp_path) == ["m"]
    CTranslate2Model.load(out)


# --- X49 ---------------------------------------------------------------------------------------------------


def test_a_beam_larger_than_the_vocabulary_is_refused_as_the_torch_engine_does(small, tmp_path):
    """X49: --beam 400 on a 300-token vocabulary: the torch engine refused it, CTranslate2 decoded."""
    model, tokenizer = small
    engine = CTranslate2Model.load(export_ctranslate2(model, tokenizer, tmp_path / "m"))
    src = torch.tensor([tokenizer.encode("one two three")])
    too_many = model.config.tgt_vocab_size - 2                      # pad, bos and eos are never generated
    with pytest.raises(ValueError) as torch_engine:
        tl.beam_search(model, src, beam_size=too_many)
    with pytest.raises(ValueError) as ct2_engine:
        engine.decode(src, strategy="beam", beam_size=too_many, length_norm="power", stop="first_k")
    assert str(ct2_engine.value) == str(torch_engine.value)
    assert f"beam_size={too_many} is larger than the number of tokens a beam can take" in str(ct2_engine.value)
    largest = too_many - 1                                          # the largest beam both take
    assert engine.decode(src, strategy="beam", beam_size=largest, length_norm="power", stop="first_k").size(0) == 1


def test_a_marian_export_records_the_files_of_its_tokenizer_folder(tmp_path):
    """The Marian adapter's tokenizer is a folder (book/tokenizer/): each of its files is recorded and checked."""
    pytest.importorskip("sentencepiece")
    pytest.importorskip("transformers")
    from tiny_marian import save_tiny_marian, tiny_marian_tokenizer

    from transformer_lib.marian import convert_marian, load_marian_dir

    n = tiny_marian_tokenizer(tmp_path / "tok")
    converted = convert_marian(save_tiny_marian(tmp_path / "hf", tmp_path / "tok", n), tmp_path / "book")
    model, tokenizer = load_marian_dir(converted, "cpu")
    out = export_ctranslate2(model, tokenizer, tmp_path / "ct")
    record = json.loads((out / "book" / MANIFEST_FILE).read_text())["sha256"]
    inside = sorted(p.relative_to(out).as_posix() for p in (out / "book" / "tokenizer").rglob("*") if p.is_file())
    assert inside and set(inside) <= set(record) and "book/tokenizer_kind.json" in record
    CTranslate2Model.load(out)
    vocab = out / "book" / "tokenizer" / "vocab.json"
    vocab.write_text(vocab.read_text().replace('"<unk>": 1', '"<unk>": 2'))
    _refused(out, f"{vocab}: does not match")
