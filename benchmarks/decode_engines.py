"""Decoding speed and memory of the book's decoders against CTranslate2 (float32 and int8) and transformers' generate.

One run, one process, one machine: a random-weight MarianMTModel with opus-mt's choices (as in ``marian_decode.py``:
the eos and pad logits get a bias of -1e4, so no sentence stops early) is converted with ``tl.from_marian`` and
exported with ``tl.serving.export_ctranslate2`` twice, float32 and int8. Six engines decode the same sources:

* ``book``: chapter 11's decoders on the model itself (``translate_lines(..., engine="torch")``);
* ``packed``: the same decoders on ``tl.packed.PackedDecoder`` (the serving appendix; the default engine of
  ``translate_lines`` and of ``translate`` on the CPU);
* ``packed int8``: ``PackedDecoder(model, "int8")``, the decoder's linear layers in int8;
* ``ct2 fp32``, ``ct2 int8``: CTranslate2 on the two exports;
* ``generate``: transformers' ``generate`` on the MarianMTModel.

For greedy decoding and beam search (4 beams, ``length_norm="power"``, length penalty 1.0, first-k stopping:
CTranslate2's and generate's rules), at batch 1, 8 and 64 and with 1 and 2 threads, each round times every engine
once, in an order rotated from round to round (so that a drift of the machine's load falls on all of them alike),
and an engine's time is its median over the rounds. Memory is measured apart, in a fresh process per engine and
row (``--peak-of``), since a process that has decoded keeps the memory it freed: ``loaded MB`` is that process's
resident set just before one decode (the interpreter, PyTorch, the libraries and this engine's weights) and
``peak MB`` its peak resident set (VmHWM) at the end of it. Each row carries its conditions: the threads and the
load average when it started; the header carries the CPU and the library versions (oneDNN and MKL as PyTorch
reports them).

``--record`` writes ``benchmarks/results/decode_engines.txt`` (atomically), which the serving appendix reads; the
goals of issue 38: packed / ct2 fp32 at most 1.0 at batch 8 and 64, at most 1.5 at batch 1; packed int8 / ct2 int8
at most 1.5 at batch 8; packed / generate at most 0.5 at batch 8. Needs ``ctranslate2`` and ``transformers``.
Run: ``python benchmarks/decode_engines.py`` (``--quick``: one round, 32 new tokens).
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import add_decode_args, add_model_args
from marian_decode import tiny_marian

import transformer_lib as tl
from transformer_lib.files import atomic_write
from transformer_lib.packed import PackedDecoder
from transformer_lib.serving import CTranslate2Model, export_ctranslate2

RESULTS = Path(__file__).resolve().parent / "results" / "decode_engines.txt"
ENGINES = ("book", "packed", "packed int8", "ct2 fp32", "ct2 int8", "generate")
#: the column each ratio divides by: the book's engines against CTranslate2 of the same precision
ANCHOR = {"book": "ct2 fp32", "packed": "ct2 fp32", "packed int8": "ct2 int8"}


def _status(field: str) -> int:
    """A field of /proc/self/status in kB (VmRSS, VmHWM); 0 where there is no /proc."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    m = re.search(rf"^{field}:\s+(\d+) kB", text, re.M)
    return int(m.group(1)) if m else 0


def memory_of(engine: str, batch: int, beams: int, threads: int, argv: list[str]) -> tuple[float, float]:
    """(resident MB before one decode, peak resident MB after it) of ``engine`` in a fresh process."""
    run = subprocess.run([sys.executable, __file__, *argv, "--peak-of", engine, "--batches", str(batch),
                          "--beam", str(beams), "--thread-counts", str(threads)], capture_output=True, text=True,
                         check=True, env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    loaded, peak = run.stdout.split()[-2:]
    return float(loaded), float(peak)


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def conditions() -> list[str]:
    """The machine and the libraries, one line each."""
    cpu = platform.processor() or platform.machine()
    try:
        names = re.findall(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = names[0] if names else cpu
    except OSError:
        pass
    config = torch.__config__.show()
    onednn = re.search(r"MKL-DNN (v[\d.]+)", config)
    mkl = re.search(r"Math Kernel Library Version ([\w.\-]+)", config)
    import ctranslate2
    import transformers
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, check=False).stdout.strip() or "unknown"
    except OSError:
        commit = "unknown"
    return [f"CPU: {cpu}, {os.cpu_count()} logical cores; load average at the start {load_average():.2f}",
            f"torch {torch.__version__} (oneDNN {onednn.group(1) if onednn else 'absent'}, MKL "
            f"{mkl.group(1) if mkl else 'absent'}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
            f"quantized engine {torch.backends.quantized.engine}), CTranslate2 {ctranslate2.__version__}, "
            f"transformers {transformers.__version__}, Python {platform.python_version()}, commit {commit}"]


def time_engines(fns: dict[str, Callable[[], object]], rounds: int, warmup: int) -> dict[str, float]:
    """Each engine's median time over ``rounds``, every round timing each engine once in a rotated order."""
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    names, times = list(fns), {name: [] for name in fns}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in times.items()}


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--thread-counts", type=int, nargs="+", default=[1, 2])
    p.add_argument("--record", action="store_true", help=f"write {RESULTS.relative_to(RESULTS.parents[2])}")
    p.add_argument("--no-memory", action="store_true", help="time only (no process per engine for its memory)")
    p.add_argument("--peak-of", choices=ENGINES, help=argparse.SUPPRESS)      # a child process of memory_of
    add_decode_args(p)
    add_model_args(p, vocab=8000)
    args = p.parse_args(argv)
    if args.quick:
        args.new_tokens, args.rounds = min(args.new_tokens, 32), 1
    return args


def engines(args: argparse.Namespace, threads: int, only: str | None = None) -> dict[str, Callable]:
    """{engine: decode(src, beams)} on the benchmark's model (made afresh, from seed 0: the same in every
    process); ``only``: that engine alone."""
    torch.manual_seed(0)
    hf = tiny_marian(args.d_model, args.heads, args.layers, args.d_ff, args.vocab, max_len=512)
    model = tl.from_marian(hf).eval()
    n, out = args.new_tokens, {}

    def ours(m):
        def decode(src, beams):
            if beams == 1:
                return tl.greedy_decode(m, src, max_len=n)
            return tl.beam_search(m, src, beam_size=beams, max_len=n, length_norm="power", alpha=1.0,
                                  stop="first_k")[0]
        return decode

    def ct2(quantization):
        engine = CTranslate2Model(export_ctranslate2(model, None, tempfile.mkdtemp(prefix="decode_engines."),
                                                     quantization), model.config, threads=threads)

        def decode(src, beams):
            return engine.decode(src, **(dict(max_len=n) if beams == 1 else dict(
                strategy="beam", beam_size=beams, max_len=n, length_norm="power", alpha=1.0, stop="first_k")))
        return decode

    def generate(src, beams):
        with torch.no_grad():
            stopping = dict(early_stopping=True, length_penalty=1.0) if beams > 1 else {}     # first_k, power
            return hf.generate(input_ids=src, attention_mask=torch.ones_like(src), num_beams=beams,
                               do_sample=False, max_new_tokens=n, forced_eos_token_id=None, **stopping)

    makers = {"book": lambda: ours(model), "packed": lambda: ours(PackedDecoder(model)),
              "packed int8": lambda: ours(PackedDecoder(model, "int8")), "ct2 fp32": lambda: ct2(None),
              "ct2 int8": lambda: ct2("int8"), "generate": lambda: generate}
    for name, make in makers.items():
        if only in (None, name):
            out[name] = make()
    return out


def sources(args: argparse.Namespace, batch: int) -> torch.Tensor:
    src = torch.randint(1, args.vocab - 1, (batch, args.src_len), generator=torch.Generator().manual_seed(batch))
    src[:, -1] = 0                                                      # each source ends with eos
    return src


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    warnings.filterwarnings("ignore", category=UserWarning)
    if args.peak_of:                                  # a child of memory_of: one decode, then its memory
        torch.set_num_threads(args.thread_counts[0])
        decode = engines(args, args.thread_counts[0], args.peak_of)[args.peak_of]
        src = sources(args, args.batches[0])
        loaded = _status("VmRSS") / 1024
        decode(src, args.beam)
        print(f"{loaded:.1f} {_status('VmHWM') / 1024:.1f}")
        return
    passed = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--record"]
    lines = [f"benchmarks/decode_engines.py, {datetime.date.today()}: {' '.join(passed) or 'defaults'}",
             *conditions(),
             f"model: source length {args.src_len}, {args.new_tokens} new tokens, d_model {args.d_model}, "
             f"{args.heads} heads, {args.layers} + {args.layers} layers, d_ff {args.d_ff}, vocabulary "
             f"{args.vocab}; each time the median of {args.rounds} rounds"]
    out = [f"# {line}" for line in lines]
    head = (f"{'search':8}{'batch':>6}{'threads':>8}{'load':>6}  {'engine':12}{'seconds':>9}{'ratio':>7}"
            f"  {'anchor':9}{'loaded MB':>10}{'peak MB':>9}")
    out.append(head)
    print("\n".join(out), flush=True)
    model_args = [f"--{k.replace('_', '-')}={getattr(args, k)}" for k in
                  ("new_tokens", "src_len", "d_model", "heads", "layers", "d_ff", "vocab")]
    for threads in args.thread_counts:
        torch.set_num_threads(threads)
        decoders = engines(args, threads)
        for batch in args.batches:
            src = sources(args, batch)
            for beams in (1, args.beam):
                load = load_average()
                seconds = time_engines({name: (lambda d=d, src=src, beams=beams: d(src, beams))
                                        for name, d in decoders.items()},
                                       args.rounds, warmup=1)
                search = "greedy" if beams == 1 else f"beam {beams}"
                for name in ENGINES:
                    anchor = ANCHOR.get(name)
                    ratio = f"{seconds[name] / seconds[anchor]:>7.2f}  {anchor:9}" if anchor else f"{'':>7}  {'-':9}"
                    loaded, peak = ((float("nan"), float("nan")) if args.no_memory else
                                    memory_of(name, batch, beams, threads, model_args))
                    row = (f"{search:8}{batch:>6}{threads:>8}{load:>6.2f}  {name:12}{seconds[name]:>9.4f}{ratio}"
                           f"{loaded:>10.1f}{peak:>9.1f}")
                    out.append(row)
                    print(row, flush=True)
    if args.record:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(RESULTS, "\n".join(out) + "\n")
        print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
