"""The package ``transformer_lib.training``: it re-exports its modules' public names.

Generated from book/10_training.ipynb.
Generated from book/appendix_training_run.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: e751e9713cd514c2
# fmt: off

from transformer_lib.training.batching import (
    shift_right,
    PairDataset,
    Batch,
    PadCollate,
    TokenBucketSampler,
    padding_fraction,
    toy_task,
    copy_task,
    reverse_task,
)
from transformer_lib.training.loss import (
    LabelSmoothingLoss,
)
from transformer_lib.training.evaluation import (
    exact_match,
    amp_dtype,
    evaluate,
)
from transformer_lib.training.checkpoint import (
    unwrap_model,
    capture_rng_state,
    restore_rng_state,
    RunPosition,
    epoch_batches,
    NonFiniteError,
    CheckpointError,
    remove_stale_temporaries,
    save_checkpoint,
    CHECKPOINT_FORMAT,
    load_checkpoint,
)
from transformer_lib.training.schedule import (
    noam_lambda,
    noam_optimizer,
)
from transformer_lib.training.distributed import (
    is_distributed,
    rank,
    world_size,
    setup_distributed,
    cleanup_distributed,
    gather_objects,
)
from transformer_lib.training.config import (
    TrainHistory,
    TrainConfig,
)
from transformer_lib.training.averaging import (
    average_state_dicts,
    average_checkpoints,
)
from transformer_lib.training.loop import (
    train,
    accumulate_gradients,
)
from transformer_lib.training.interrupts import (
    Interrupts,
)

__all__ = [
    'shift_right',
    'PairDataset',
    'Batch',
    'PadCollate',
    'TokenBucketSampler',
    'padding_fraction',
    'toy_task',
    'copy_task',
    'reverse_task',
    'LabelSmoothingLoss',
    'exact_match',
    'amp_dtype',
    'evaluate',
    'unwrap_model',
    'capture_rng_state',
    'restore_rng_state',
    'RunPosition',
    'epoch_batches',
    'NonFiniteError',
    'CheckpointError',
    'remove_stale_temporaries',
    'save_checkpoint',
    'CHECKPOINT_FORMAT',
    'load_checkpoint',
    'noam_lambda',
    'noam_optimizer',
    'is_distributed',
    'rank',
    'world_size',
    'setup_distributed',
    'cleanup_distributed',
    'gather_objects',
    'TrainHistory',
    'TrainConfig',
    'average_state_dicts',
    'average_checkpoints',
    'train',
    'accumulate_gradients',
    'Interrupts',
]
