"""Shared timing helpers for the benchmarks: each benchmark times two peers in the same run and prints ratios."""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch


def time_call(fn: Callable[[], object], repeat: int = 10, warmup: int = 3) -> float:
    """Median wall time of ``fn()`` in seconds, after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_pair(a: Callable[[], object], b: Callable[[], object], repeat: int = 10, warmup: int = 3,
              rounds: int = 3) -> tuple[float, float]:
    """Median times of ``a`` and ``b``, interleaved over ``rounds`` so that drift in the machine's load
    affects both alike."""
    ta, tb = [], []
    for _ in range(rounds):
        ta.append(time_call(a, repeat, warmup))
        tb.append(time_call(b, repeat, warmup))
    return statistics.median(ta), statistics.median(tb)


def header(title: str) -> None:
    print(f"# {title}")
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"device {'cuda' if torch.cuda.is_available() else 'cpu'}")


def add_timing_args(parser, repeat: int = 5, rounds: int = 3) -> None:
    """The options every benchmark shares: --repeat, --rounds, --threads."""
    parser.add_argument("--repeat", type=int, default=repeat, help="timed calls per round (median taken)")
    parser.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds of the two peers")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: PyTorch's default)")


def add_model_args(parser, *, d_model: int = 256, heads: int = 4, layers: int = 3, d_ff: int = 1024,
                   vocab: int = 1000, layers_help: str | None = None) -> None:
    """The model-size options of the whole-model benchmarks: --d-model, --heads, --layers, --d-ff, --vocab."""
    parser.add_argument("--d-model", type=int, default=d_model)
    parser.add_argument("--heads", type=int, default=heads)
    parser.add_argument("--layers", type=int, default=layers, help=layers_help)
    parser.add_argument("--d-ff", type=int, default=d_ff)
    parser.add_argument("--vocab", type=int, default=vocab)


def add_decode_args(parser, *, beam: int = 4) -> None:
    """What the decoding benchmarks share: the batch (--batch, --src-len), --beam, --quick and the timing
    options (one timed call per round, two rounds, unless told otherwise)."""
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--src-len", type=int, default=32)
    parser.add_argument("--beam", type=int, default=beam)
    parser.add_argument("--quick", action="store_true", help="one timed call per round, one round")
    add_timing_args(parser, repeat=1, rounds=2)


def timing_plan(args) -> tuple[int, int, int]:
    """(repeat, rounds, warmup) of a decoding benchmark: --quick is one timed call in one round."""
    return (1, 1, 1) if args.quick else (args.repeat, args.rounds, 1)


def apply_threads(args) -> None:
    if args.threads > 0:
        torch.set_num_threads(args.threads)


# Peak dense (no sparsity) 16-bit tensor-core throughput, TFLOP/s, bf16 = fp16 with fp32 accumulation, from the
# vendor's data sheets; the first entry whose key is in torch.cuda.get_device_name() wins (so the order matters:
# "H100 PCIe" before "H100", "A100" before "A10", "L40S" before "L40" before "L4"). V100 and T4: fp16 only. None:
# no published figure (pass --peak-tflops).
PEAK_TFLOPS: list[tuple[str, float | None]] = [
    ("B200", 2250.0), ("H200 NVL", 835.0), ("H200", 989.4), ("H100 PCIe", 756.0), ("H100 NVL", 835.0),
    ("H100", 989.4), ("H800", 989.4), ("A100", 312.0), ("A800", 312.0), ("L40S", 362.05), ("L40", 181.05),
    ("L4", 121.0), ("A10G", None), ("A10", 125.0), ("RTX 6000 Ada", 364.25), ("RTX A6000", 154.8),
    ("RTX 4090", 165.2), ("RTX 3090", 71.0), ("V100-PCIE", 112.0), ("V100", 125.0), ("T4", 65.0),
]


def peak_tflops(device_name: str) -> float | None:
    """The 16-bit tensor-core peak of the GPU called ``device_name`` (TFLOP/s), None when the table has none."""
    for key, tflops in PEAK_TFLOPS:
        if key in device_name:
            return tflops
    return None


def largest_batch(fits: Callable[[int], bool], start: int = 1, limit: int = 1 << 16) -> tuple[int, list[int]]:
    """The largest n in [1, limit] with ``fits(n)`` true, for a ``fits`` that is true up to some n and false
    after (a batch that fits in memory): doubling from ``start`` until one does not fit, then bisection.
    Returns (n, the sizes tried, in order); n is 0 when even 1 does not fit, ``limit`` when it fits."""
    tried: list[int] = []

    def attempt(n: int) -> bool:
        tried.append(n)
        return fits(n)

    lo, hi, n = 0, None, max(1, min(start, limit))       # lo fits (0 trivially), hi does not
    while hi is None:
        if attempt(n):
            lo = n
            if n == limit:
                return limit, tried
            n = min(2 * n, limit)
        else:
            hi = n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if attempt(mid):
            lo = mid
        else:
            hi = mid
    return lo, tried
