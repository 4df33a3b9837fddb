"""A tiny random Marian model and a SentencePiece tokenizer trained on a few lines, saved as save_pretrained saves a
downloaded opus-mt model: what the Marian tests convert (nothing is downloaded)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch


def tiny_marian_tokenizer(path: Path) -> int:
    """Train a 30-piece SentencePiece model on two sentences and save a MarianTokenizer (source.spm, target.spm,
    vocab.json, tokenizer_config.json) into ``path``; return the vocabulary's size."""
    import sentencepiece as spm
    import transformers

    work = path.parent / f"{path.name}.work"
    work.mkdir(parents=True)
    (work / "text.txt").write_text("der Hund beisst den Mann\nthe dog bites the man\n" * 30, encoding="utf-8")
    spm.SentencePieceTrainer.train(input=str(work / "text.txt"), model_prefix=str(work / "sp"), vocab_size=30,
                                   model_type="unigram", bos_id=-1, eos_id=-1, unk_id=0, hard_vocab_limit=False,
                                   minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file=str(work / "sp.model"))
    vocab = {"</s>": 0, "<unk>": 1}
    for i in range(sp.get_piece_size()):
        vocab.setdefault(sp.id_to_piece(i), len(vocab))
    vocab["<pad>"] = len(vocab)
    (work / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    tok = transformers.MarianTokenizer(source_spm=str(work / "sp.model"), target_spm=str(work / "sp.model"),
                                       vocab=str(work / "vocab.json"))
    tok.save_pretrained(path)
    return len(vocab)


def save_tiny_marian(path: Path, tokenizer_dir: Path, n: int, decoder_layers: int = 2,
                     logits_bias: bool = False) -> Path:
    """A random MarianMTModel (d_model 16, 1 + ``decoder_layers`` layers, vocabulary ``n``) saved into ``path``
    beside a copy of the tokenizer's files; ``logits_bias`` draws a non-zero final_logits_bias."""
    import transformers

    torch.manual_seed(0)
    cfg = transformers.MarianConfig(vocab_size=n, d_model=16, encoder_layers=1, decoder_layers=decoder_layers,
                                    encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                                    decoder_ffn_dim=32, max_position_embeddings=64, pad_token_id=n - 1,
                                    decoder_start_token_id=n - 1, eos_token_id=0, activation_function="swish",
                                    scale_embedding=True, init_std=0.2)
    model = transformers.MarianMTModel(cfg).eval()
    if logits_bias:
        with torch.no_grad():
            model.final_logits_bias.normal_(0, 0.1)
    model.save_pretrained(path)
    for name in ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json"):
        shutil.copy(tokenizer_dir / name, path / name)
    return path
