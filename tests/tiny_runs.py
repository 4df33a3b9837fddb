"""The one tiny model of the training tests (chapter 10 and its appendix: tests/test_checkpoint.py,
test_training.py, test_averaging.py, test_accumulation.py and the torchrun worker tests/ddp_worker.py), so that
its sizes are written once: one encoder and one decoder layer, d_model 16, 2 heads, d_ff 32."""
from __future__ import annotations

from typing import Any

import torch

from transformer_lib.model import Transformer, TransformerConfig

VOCAB = 11                 # pad, bos, eos and 8 symbols: the copy tasks' default vocabulary here
TINY: dict[str, Any] = dict(d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                            dropout=0.1, max_len=16)


def tiny_config(vocab: int = VOCAB, **changes: Any) -> TransformerConfig:
    """The tiny model's config, with ``changes`` to its sizes (``n_heads=4``, ``dropout=0.0``...)."""
    return TransformerConfig(vocab, vocab, **{**TINY, **changes})


def tiny_model(seed: int | None = None, vocab: int = VOCAB, **changes: Any) -> Transformer:
    """A tiny Transformer, its weights drawn after ``torch.manual_seed(seed)`` (from the current random state
    when ``seed`` is None)."""
    if seed is not None:
        torch.manual_seed(seed)
    return Transformer(tiny_config(vocab, **changes))
