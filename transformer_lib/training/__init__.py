"""The package ``transformer_lib.training``: it re-exports its modules' public names.

Generated from book/10_training.ipynb.
Generated from book/appendix_training_run.ipynb.
Edit the notebooks, not this file; regenerate with ``python tools/export.py``."""
# digest: 0ec2ea2a3ac0646b
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
    evaluate,
)
from transformer_lib.training.checkpoint import (
    capture_rng_state,
    restore_rng_state,
    NonFiniteError,
    CheckpointError,
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
    unwrap_model,
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
from transformer_lib.training.precision import (
    PRECISIONS,
    amp_dtype,
)
from transformer_lib.training.position import (
    RunPosition,
    epoch_batches,
)
from transformer_lib.training.loop import (
    train,
    accumulate_gradients,
)
from transformer_lib.training.keeper import (
    FileKeeper,
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
    'evaluate',
    'capture_rng_state',
    'restore_rng_state',
    'NonFiniteError',
    'CheckpointError',
    'save_checkpoint',
    'CHECKPOINT_FORMAT',
    'load_checkpoint',
    'noam_lambda',
    'noam_optimizer',
    'is_distributed',
    'rank',
    'world_size',
    'unwrap_model',
    'setup_distributed',
    'cleanup_distributed',
    'gather_objects',
    'TrainHistory',
    'TrainConfig',
    'average_state_dicts',
    'average_checkpoints',
    'PRECISIONS',
    'amp_dtype',
    'RunPosition',
    'epoch_batches',
    'train',
    'accumulate_gradients',
    'FileKeeper',
    'Interrupts',
]
