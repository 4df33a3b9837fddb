"""Tests of benchmarks/gpu_check.py (``make gpu-check``) on the CPU: its pieces (the FLOP formula against
PyTorch's FLOP counter, the largest-batch search, the read-back counter, the table of peak FLOP/s), and the
whole script's ``--dry-run``, which must pass and record its output with the date and the device."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_check  # noqa: E402
from common import PEAK_TFLOPS, largest_batch, peak_tflops  # noqa: E402

import transformer_lib as tl  # noqa: E402
from transformer_lib.checks import check_token_ids  # noqa: E402


@settings(max_examples=examples(8), deadline=None)
@given(d_heads=st.sampled_from([(8, 1), (8, 2), (12, 3)]), d_ff=st.integers(1, 24), enc=st.integers(1, 2),
       dec=st.integers(1, 2), B=st.integers(1, 3), S=st.integers(1, 6), T=st.integers(1, 6), V=st.integers(4, 30))
def test_formula_equals_flop_counter(d_heads, d_ff, enc, dec, B, S, T, V):
    """The FLOPs of a training step that the MFU divides by: the formula equals what torch.utils.flop_counter
    counts, for source and target lengths that differ."""
    d, h = d_heads
    cfg = tl.TransformerConfig(V, V, d_model=d, n_heads=h, n_encoder_layers=enc, n_decoder_layers=dec, d_ff=d_ff,
                               dropout=0.0)
    model = tl.Transformer(cfg)
    src = torch.randint(3, V, (B, S))
    tgt = torch.randint(3, V, (B, T))
    batch = (src, tgt, tgt)
    counted = gpu_check.counted_flops(gpu_check.train_step(model, batch, torch.device("cpu"), None))
    assert counted == gpu_check.formula_flops(cfg, B, S, T)


@settings(max_examples=examples(50), deadline=None)
@given(capacity=st.integers(0, 300), start=st.integers(1, 64), limit=st.integers(1, 256))
def test_largest_batch_finds_the_capacity(capacity, start, limit):
    tried: list[int] = []

    def fits(n: int) -> bool:
        tried.append(n)
        return n <= capacity

    best, reported = largest_batch(fits, start=start, limit=limit)
    assert best == min(capacity, limit)
    assert reported == tried and all(1 <= n <= limit for n in tried)
    assert len(tried) <= 2 * math.ceil(math.log2(limit + 1)) + 2        # doubling, then bisection


def test_peak_table_order():
    """No entry of the table is shadowed by an earlier one ("A10" must not catch "A100"), and real device
    names find their GPU."""
    for key, tflops in PEAK_TFLOPS:
        assert peak_tflops(f"NVIDIA {key}") == tflops, key
    names = {"NVIDIA H100 80GB HBM3": "H100", "NVIDIA A100-SXM4-80GB": "A100", "NVIDIA A10": "A10",
             "NVIDIA L4": "L4", "Tesla V100-SXM2-16GB": "V100", "NVIDIA GeForce RTX 4090": "RTX 4090"}
    for name, key in names.items():
        assert peak_tflops(name) == dict(PEAK_TFLOPS)[key], name
    assert peak_tflops("Some Future GPU") is None


def test_read_backs_are_counted_where_they_happen():
    t = torch.arange(5)

    def reads() -> None:
        bool(t.any())
        t.sum().item()
        t.nonzero()
        check_token_ids(t[None], 10)             # on the CPU: min and max read back, in the library

    counts = gpu_check.count_reads(reads)
    assert sum(counts.values()) == 5
    library = {k: v for k, v in counts.items() if "check_token_ids" in k}
    assert list(library.values()) == [2] and next(iter(library)).startswith("checks.py:")


def test_no_gpu_without_dry_run_is_a_clear_error(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the full check would run")
    assert gpu_check.main([]) == 2
    assert "--dry-run" in capsys.readouterr().err


@pytest.mark.slow
def test_dry_run_passes_and_records(tmp_path):
    """The script end to end on the CPU at tiny sizes, as `make test` runs it (torch.compile with dynamo's
    eager backend: the inductor compiler is tested in test_compile.py)."""
    record = tmp_path / "gpu_check.txt"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--record",
                           str(record)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = record.read_text(encoding="utf-8")
    assert text.splitlines()[0].startswith("# gpu_check --dry-run") and "UTC" in text.splitlines()[0]
    assert "# device CPU" in text
    for section in range(1, 7):
        assert f"## {section}. " in text
    assert "skipped (needs CUDA)" in text and "# all checks passed except" in text


@pytest.mark.parametrize("option, value, expected", [
    ("--steps", "0", "an int >= 2"), ("--steps", "-5", "an int >= 2"), ("--steps", "1", "an int >= 2"),
    ("--steps", "abc", "expected int, got 'abc'"), ("--threads", "-1", "an int >= 0"),
    ("--peak-tflops", "0", "a finite number > 0"), ("--peak-tflops", "nan", "a finite number > 0"),
    ("--peak-tflops", "-3", "a finite number > 0")])
def test_bad_numbers_are_one_line_usage_errors(capsys, option, value, expected):
    """N88, N89: `--dry-run --steps 0` ended in an IndexError traceback and `--steps -5` in a ValueError one
    (after the tokenizer was trained); every numeric option is now checked by argparse: rc 2, one line."""
    with pytest.raises(SystemExit) as done:
        gpu_check.main(["--dry-run", option, value])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpu_check.py: error: argument " + option), err
    assert expected in err, err
