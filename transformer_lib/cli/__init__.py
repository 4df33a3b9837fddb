"""The package ``transformer_lib.cli``: it re-exports its modules' public names.

Generated from book/appendix_cli.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: 4e1fef74a37bc14b
# fmt: off

from transformer_lib.cli.common import (
    MODEL_DEFAULTS,
    MIN_VOCAB,
    UsageError,
    Interrupted,
    device_option,
    start_processes,
    log_line,
    bucket_loader,
    Progress,
)
from transformer_lib.cli.main import (
    run_convert_marian,
    build_parser,
    main,
)
from transformer_lib.cli.train import (
    MODEL_FILES,
    run_train,
)
from transformer_lib.cli.translate import (
    run_translate,
)

__all__ = [
    'MODEL_DEFAULTS',
    'MIN_VOCAB',
    'UsageError',
    'Interrupted',
    'device_option',
    'start_processes',
    'log_line',
    'bucket_loader',
    'Progress',
    'run_convert_marian',
    'build_parser',
    'main',
    'MODEL_FILES',
    'run_train',
    'run_translate',
]
