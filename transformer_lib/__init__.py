"""transformer_lib: the encoder-decoder Transformer, exported from the book's chapters.

The modules are generated from ``book/*.ipynb`` by ``tools/export.py``. This file is
written by hand: it re-exports each module's public names (its ``__all__``), in chapter
order.
The command-line tool (``transformer_lib.cli.main``) is not imported here.
"""
from transformer_lib.seeding import *  # noqa: F403  chapter 0
from transformer_lib.checks import *  # noqa: F403  chapter 1
from transformer_lib.embedding import *  # noqa: F403  chapter 1
from transformer_lib.positional import *  # noqa: F403  chapter 2
from transformer_lib.attention import *  # noqa: F403  chapter 3
from transformer_lib.masks import *  # noqa: F403  chapter 4
from transformer_lib.feed_forward import *  # noqa: F403  chapter 5
from transformer_lib.norm import *  # noqa: F403  chapter 6
from transformer_lib.encoder import *  # noqa: F403  chapter 7
from transformer_lib.torch_weights import *  # noqa: F403  chapter 7
from transformer_lib.decoder import *  # noqa: F403  chapter 8
from transformer_lib.model import *  # noqa: F403  chapter 9
from transformer_lib.training.batching import *  # noqa: F403  chapter 10
from transformer_lib.training.loss import *  # noqa: F403  chapter 10
from transformer_lib.training.evaluation import *  # noqa: F403  chapter 10
from transformer_lib.training.checkpoint import *  # noqa: F403  chapter 10
from transformer_lib.training.averaging import *  # noqa: F403  chapter 10
from transformer_lib.training.schedule import *  # noqa: F403  chapter 10
from transformer_lib.training.distributed import *  # noqa: F403  chapter 10
from transformer_lib.training.interrupts import *  # noqa: F403  chapter 10
from transformer_lib.training.config import *  # noqa: F403  chapter 10
from transformer_lib.training.loop import *  # noqa: F403  chapter 10
from transformer_lib.decoding.greedy import *  # noqa: F403  chapter 11
from transformer_lib.decoding.beam import *  # noqa: F403  chapter 11
from transformer_lib.decoding.sampling import *  # noqa: F403  chapter 11
from transformer_lib.translation.corpus import *  # noqa: F403  chapter 12
from transformer_lib.translation.tokenizer import *  # noqa: F403  chapter 12
from transformer_lib.translation.translate import *  # noqa: F403  chapter 12
from transformer_lib.modern.rope import *  # noqa: F403  chapter 13
from transformer_lib.modern.decoder_only import *  # noqa: F403  chapter 13
from transformer_lib.modern.llama import *  # noqa: F403  chapter 13
from transformer_lib.marian import *  # noqa: F403  appendix: pretrained models

__version__ = "0.1.0"
