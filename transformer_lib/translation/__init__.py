"""The package ``transformer_lib.translation``: it re-exports its modules' public names.

Generated from book/12_translation.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: ab41c24d0e94bb23
# fmt: off

from transformer_lib.translation import corpus as _corpus
from transformer_lib.translation import tokenizer as _tokenizer
from transformer_lib.translation import translate as _translate
from transformer_lib.translation import metrics as _metrics
from transformer_lib.translation import model_dir as _model_dir
from transformer_lib.translation.corpus import *  # noqa: F403
from transformer_lib.translation.tokenizer import *  # noqa: F403
from transformer_lib.translation.translate import *  # noqa: F403
from transformer_lib.translation.metrics import *  # noqa: F403
from transformer_lib.translation.model_dir import *  # noqa: F403

__all__ = [
    *_corpus.__all__,
    *_tokenizer.__all__,
    *_translate.__all__,
    *_metrics.__all__,
    *_model_dir.__all__,
]
