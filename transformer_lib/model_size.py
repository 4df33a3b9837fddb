"""Generated from book/09_model.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: 56d9fdb96101a7bb
# fmt: off

# [book/09_model.ipynb, cell 8399ce11]
from __future__ import annotations

import dataclasses
import os
from typing import Any

import torch

from transformer_lib.checks import check_int
from transformer_lib.encoder import LayerConfig

#: what a count reads besides the layer options (LayerConfig's fields)
_SIZE_FIELDS = ("src_vocab_size", "tgt_vocab_size", "n_encoder_layers",
                "n_decoder_layers", "max_len", "tie_output", "share_embeddings")


def parameter_counts(config: Any) -> dict[str, int]:
    """The parameters of the :class:`~transformer_lib.model.Transformer` that
    ``config`` describes, part by part ("embeddings", "encoder", "decoder",
    "output"), from the sizes alone: nothing is built, a tied matrix counts once.
    ``config`` is a ``TransformerConfig`` or any object with its fields."""
    layer_fields = [field.name for field in dataclasses.fields(LayerConfig)]
    missing = [name for name in [*_SIZE_FIELDS, *layer_fields]
               if not hasattr(config, name)]
    if missing:
        raise TypeError("config must be a TransformerConfig (or have its fields), "
                        f"got a {type(config).__name__} without {', '.join(missing)}")
    layer = LayerConfig.of(config)                 # checks d_model, d_ff, norm, ...
    v_src, v_tgt, n_enc, n_dec = (check_int(getattr(config, name), name)
                                  for name in _SIZE_FIELDS[:4])
    d, f = layer.d_model, layer.d_ff
    attention = 4 * d * d + 4 * d                  # W_Q, W_K, W_V, W_O, their biases
    ffn = d * f + f + f * d + d                    # W_1, b_1, W_2, b_2
    norm = 2 * d if layer.norm == "layer" else d   # gamma (and beta)
    has_final = layer.norm_first if layer.final_norm is None else layer.final_norm
    final = norm if has_final else 0
    head = 0 if config.tie_output else d * v_tgt
    if getattr(config, "output_bias", False):      # the Marian appendix's option
        head += v_tgt
    return {"embeddings": v_src * d + (0 if config.share_embeddings else v_tgt * d),
            "encoder": n_enc * (attention + ffn + 2 * norm) + final,
            "decoder": n_dec * (2 * attention + ffn + 3 * norm) + final,
            "output": head}


def count_parameters(config: Any) -> int:
    """The number of parameters of ``Transformer(config)``, computed without building
    it: ``sum(p.numel() for p in Transformer(config).parameters())``."""
    return sum(parameter_counts(config).values())


# [book/09_model.ipynb, cell 9ccfd212]
class ModelTooLargeError(ValueError):
    """A configuration that describes a model larger than this machine's memory."""


# [book/09_model.ipynb, cell 8a8596bc]
#: where a container's memory limit is (cgroup v2, then v1)
CGROUP_LIMIT_FILES = ("/sys/fs/cgroup/memory.max",
                      "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def machine_memory_bytes() -> int | None:
    """The memory this process may use, in bytes: the machine's physical memory,
    lowered by an address-space limit (``ulimit -v``) or a container's (cgroup)
    limit; None where the system does not say (``os.sysconf`` is POSIX)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None
    limits = [memory]
    try:
        import resource                          # POSIX only
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        if soft != resource.RLIM_INFINITY:
            limits.append(soft)
    except (ImportError, AttributeError, ValueError, OSError):
        pass
    for file in CGROUP_LIMIT_FILES:
        try:
            with open(file, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit():                       # "max": no limit
            limits.append(int(text))
        break
    memory = min(limits)
    return memory if memory > 0 else None


def _bytes(n: int) -> str:
    for unit, name in ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"),
                       (1e3, "kB")):
        if n >= unit:
            return f"{n / unit:.1f} {name}"
    return f"{n} bytes"


#: a lower bound on the Python objects of one layer's modules (about 38 kB measured
#: for a thin encoder layer): a million thin layers need gigabytes beyond their weights
LAYER_OBJECT_BYTES = 30_000
#: the fields that set each part's size, named when that part is the largest
_PART_FIELDS = {"embeddings": ("src_vocab_size", "tgt_vocab_size", "d_model"),
                "encoder": ("n_encoder_layers", "d_model", "d_ff"),
                "decoder": ("n_decoder_layers", "d_model", "d_ff"),
                "output": ("tgt_vocab_size", "d_model"),
                "positional table": ("max_len", "d_model")}


def check_model_fits(config: Any, source: str = "config") -> None:
    """A :class:`ModelTooLargeError`, naming ``source`` and the sizes that dominate,
    when the float32 model that ``config`` describes (its parameters and its
    positional table, 4 bytes each, and its layers' module objects) needs more than
    the memory this process may use (:func:`machine_memory_bytes`). Nothing is
    checked where that memory is unknown, or while the default device is not the CPU
    (the meta device allocates nothing)."""
    parts = parameter_counts(config)               # checks the sizes
    n_parameters = sum(parts.values())
    memory = machine_memory_bytes()
    if memory is None or torch.get_default_device().type != "cpu":
        return
    parts["positional table"] = check_int(config.max_len, "max_len") * config.d_model
    parts = {part: 4 * n for part, n in parts.items()}             # bytes, float32
    parts["encoder"] += LAYER_OBJECT_BYTES * config.n_encoder_layers
    parts["decoder"] += LAYER_OBJECT_BYTES * config.n_decoder_layers
    need = sum(parts.values())
    if need > memory:
        largest = max(parts, key=parts.__getitem__)
        sizes = ", ".join(f"{name}={getattr(config, name)}"
                          for name in _PART_FIELDS[largest])
        raise ModelTooLargeError(
            f"{source}: a model of {_bytes(need)} ({n_parameters:,} parameters; most "
            f"of it in the {largest}: {sizes}) does not fit in the {_bytes(memory)} "
            "of memory this process may use")


__all__ = ['parameter_counts', 'count_parameters', 'ModelTooLargeError']
