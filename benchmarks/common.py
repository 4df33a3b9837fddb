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


def apply_threads(args) -> None:
    if args.threads > 0:
        torch.set_num_threads(args.threads)
