"""Tests of transformer_lib.model_size (chapter 9): the parameter count from a configuration alone, equal to the
built model's, and the check that refuses, before anything is allocated, a model that cannot fit in this
machine's memory; with chapter 12's model directories, whose config.json is untrusted input (report rows
G18-G21: a few-KB directory that describes a model of terabytes)."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import transformer_lib.model_size as model_size
import transformer_lib.translation.model_dir as model_dir_module
from transformer_lib.cli.record import load_resume_setup
from transformer_lib.feed_forward import ACTIVATIONS
from transformer_lib.model import Transformer, TransformerConfig
from transformer_lib.model_size import ModelTooLargeError, check_model_fits, count_parameters
from transformer_lib.translation.corpus import generate_pairs
from transformer_lib.translation.model_dir import (
    CHECKPOINT_FILE,
    CONFIG_FILE,
    WEIGHTS_FILE,
    ModelDirError,
    load_config_and_tokenizer,
    load_model_dir,
    save_model_dir,
)
from transformer_lib.translation.tokenizer import BPETokenizer

ROOT = Path(__file__).resolve().parent.parent


def _built(config) -> int:
    return sum(p.numel() for p in Transformer(config).parameters())


# ---------------------------------------------------------------- the count
@st.composite
def _configs(draw):
    n_heads = draw(st.integers(1, 4))
    share = draw(st.booleans())
    src = draw(st.integers(3, 40))
    return TransformerConfig(
        src_vocab_size=src, tgt_vocab_size=src if share else draw(st.integers(3, 40)),
        d_model=n_heads * draw(st.integers(1, 4)), n_heads=n_heads,
        n_encoder_layers=draw(st.integers(1, 3)), n_decoder_layers=draw(st.integers(1, 3)),
        d_ff=draw(st.integers(1, 24)), dropout=0.0, norm_first=draw(st.booleans()),
        activation=draw(st.sampled_from(sorted(ACTIVATIONS))), norm=draw(st.sampled_from(["layer", "rms"])),
        max_len=draw(st.integers(1, 20)), tie_output=draw(st.booleans()), share_embeddings=share,
        final_norm=draw(st.sampled_from([None, True, False])), output_bias=draw(st.booleans()),
        positional_layout=draw(st.sampled_from(["interleaved", "half"])))


@settings(max_examples=examples(60), deadline=None)
@given(_configs())
def test_the_count_equals_the_built_models(config):
    assert count_parameters(config) == _built(config)
    parts = model_size.parameter_counts(config)
    assert sum(parts.values()) == count_parameters(config)
    assert all(n >= 0 for n in parts.values())


def test_the_paper_base_model():
    base = TransformerConfig(37000, 37000, share_embeddings=True)
    assert count_parameters(base) == 63_082_496          # chapter 9: the paper's "65M", rounded
    with torch.device("meta"):
        assert _built(base) == 63_082_496
    untied = TransformerConfig(37000, 37000, tie_output=False)
    assert count_parameters(untied) == 63_082_496 + 2 * 37000 * 512


def test_a_config_with_the_fields_is_counted_and_a_bad_one_is_named():
    cfg = TransformerConfig(50, 60, d_model=16, n_heads=4, n_encoder_layers=2, n_decoder_layers=1, d_ff=32)
    plain = dataclasses.asdict(cfg)
    del plain["output_bias"], plain["positional_layout"]   # a config of chapter 9, without the appendix's fields
    assert count_parameters(types.SimpleNamespace(**plain)) == count_parameters(cfg)
    with pytest.raises(TypeError, match="config.*n_encoder_layers"):
        count_parameters(types.SimpleNamespace(**{k: v for k, v in plain.items() if k != "n_encoder_layers"}))
    with pytest.raises(ValueError, match="d_ff must be an int"):
        count_parameters(types.SimpleNamespace(**{**plain, "d_ff": "many"}))


# ---------------------------------------------------------------- the check against the machine's memory
SMALL = TransformerConfig(50, 60, d_model=16, n_heads=4, n_encoder_layers=2, n_decoder_layers=2, d_ff=32,
                          max_len=32)


def test_the_machines_memory_is_known_here():
    memory = model_size.machine_memory_bytes()
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        assert 0 < memory <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")   # (a limit may lower it)
    else:
        assert memory is None


def test_a_model_larger_than_the_memory_is_refused_in_one_line(monkeypatch):
    n = count_parameters(SMALL)
    layers = SMALL.n_encoder_layers + SMALL.n_decoder_layers
    need = 4 * n + 4 * SMALL.max_len * SMALL.d_model + model_size.LAYER_OBJECT_BYTES * layers
    monkeypatch.setattr(model_size, "machine_memory_bytes", lambda: need - 1)
    with pytest.raises(ModelTooLargeError) as info:
        check_model_fits(SMALL, "my.json")
    message = str(info.value)
    assert isinstance(info.value, ValueError) and "\n" not in message
    assert message.startswith("my.json: a model of ")
    assert f"{n:,} parameters" in message and "of memory this process may use" in message
    monkeypatch.setattr(model_size, "machine_memory_bytes", lambda: need)       # exactly enough
    check_model_fits(SMALL, "my.json")
    monkeypatch.setattr(model_size, "machine_memory_bytes", lambda: None)       # unknown: no check
    check_model_fits(dataclasses.replace(SMALL, n_encoder_layers=10**12))


@pytest.mark.parametrize("field, value, named", [
    ("d_model", 2**24, "d_model=16777216"),
    ("max_len", 10**13, "max_len=10000000000000"),
    ("n_encoder_layers", 10**9, "n_encoder_layers=1000000000"),
    ("n_decoder_layers", 10**9, "n_decoder_layers=1000000000"),
    ("d_ff", 10**13, "d_ff=10000000000000"),
    ("src_vocab_size", 10**12, "src_vocab_size=1000000000000"),
])
def test_the_message_names_the_sizes_that_dominate(field, value, named):
    config = dataclasses.replace(SMALL, **{field: value})
    with pytest.raises(ModelTooLargeError, match=f"^config: a model of .*{named}") as info:
        check_model_fits(config)
    assert "\n" not in str(info.value)


def test_the_model_refuses_before_it_allocates(monkeypatch):
    """Transformer(config) checks first: no layer is built (an embedding would be the first allocation)."""
    monkeypatch.setattr(model_size, "machine_memory_bytes", lambda: 1000)
    monkeypatch.setattr(torch.nn.Embedding, "__init__", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(ModelTooLargeError,
                       match="^config: a model of .* does not fit in the 1.0 kB of memory this process may use"):
        Transformer(SMALL)


def test_a_huge_model_is_refused_and_a_meta_model_is_not(monkeypatch):
    monkeypatch.setattr(torch.nn.Embedding, "__init__", lambda *a, **k: pytest.fail("allocated"))
    with pytest.raises(ModelTooLargeError, match="n_encoder_layers=1000000000"):
        Transformer(dataclasses.replace(SMALL, n_encoder_layers=10**9))
    monkeypatch.undo()
    with torch.device("meta"):                      # shapes only: nothing is allocated, so nothing to refuse
        check_model_fits(dataclasses.replace(SMALL, d_model=2**24))


# ---------------------------------------------------------------- untrusted model directories (G18-G21)
@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    pairs = generate_pairs(60, seed=1)
    tokenizer = BPETokenizer.train([p.src for p in pairs] + [p.tgt for p in pairs], vocab_size=300)
    v = tokenizer.vocab_size
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(v, v, d_model=8, n_heads=2, n_encoder_layers=1, n_decoder_layers=1,
                                          d_ff=8, max_len=16, share_embeddings=True))
    return save_model_dir(tmp_path_factory.mktemp("sizes") / "tiny", model, tokenizer)


HUGE = [("d_model", 2**24, "d_model=16777216"),            # G18 (2^20 in the report: more than it ran with)
        ("max_len", 10**13, "max_len=10000000000000"),      # G19
        ("n_encoder_layers", 10**9, "n_encoder_layers=1000000000"),   # G20
        ("d_ff", 10**13, "d_ff=10000000000000")]           # G21


def _huge_dir(tiny_dir, tmp_path, field, value):
    """A copy of ``tiny_dir`` whose config.json and the config recorded in model.safetensors agree on a huge
    ``field``: a directory of a few KB."""
    d = tmp_path / f"huge-{field}"
    d.mkdir()
    for f in tiny_dir.iterdir():
        (d / f.name).write_bytes(f.read_bytes())
    config = json.loads((d / CONFIG_FILE).read_text())
    config[field] = value
    text = json.dumps(config, indent=2) + "\n"
    (d / CONFIG_FILE).write_text(text)
    with safe_open(str(d / WEIGHTS_FILE), framework="pt") as f:
        meta = dict(f.metadata())
    save_file(load_file(d / WEIGHTS_FILE), d / WEIGHTS_FILE, {**meta, "config": text})
    assert sum(f.stat().st_size for f in d.iterdir()) < 100_000
    return d


@pytest.mark.parametrize("field, value, named", HUGE)
def test_a_model_directory_that_cannot_fit_is_refused_before_anything_is_read_or_built(
        tiny_dir, tmp_path, monkeypatch, field, value, named):
    d = _huge_dir(tiny_dir, tmp_path, field, value)
    monkeypatch.setattr(model_dir_module, "load_tokenizer", lambda path: pytest.fail("tokenizer read"))
    monkeypatch.setattr(model_dir_module, "Transformer", lambda config: pytest.fail("model built"))
    (d / CHECKPOINT_FILE).write_bytes(b"not read")
    for load in (load_config_and_tokenizer, load_model_dir, load_resume_setup):
        with pytest.raises(ModelDirError) as info:
            load(d)
        message = str(info.value)
        assert "\n" not in message and message.startswith(f"{d / CONFIG_FILE}: a model of "), message
        assert named in message and "of memory this process may use" in message


def test_a_model_directory_that_fits_still_loads(tiny_dir):
    model, _ = load_model_dir(tiny_dir, "cpu")
    assert sum(p.numel() for p in model.parameters()) == count_parameters(model.config)


@pytest.mark.slow
@pytest.mark.parametrize("field, value, named", HUGE[::2])
def test_the_command_line_says_it_in_one_line(tiny_dir, tmp_path, field, value, named):
    d = _huge_dir(tiny_dir, tmp_path, field, value)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-m", "transformer_lib", "translate", "--model", str(d),
                          "--device", "cpu"], input="1\n", capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 1 and run.stdout == ""
    lines = run.stderr.splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith(f"python -m transformer_lib translate: error: {d / CONFIG_FILE}: a model of ")
    assert named in lines[0]


# ---------------------------------------------------------------- the memory a process may use (G20 under ulimit -v)
def test_the_memory_figure_is_lowered_by_an_address_space_limit_and_a_containers_limit(monkeypatch, tmp_path):
    import resource

    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    monkeypatch.setattr(model_size, "CGROUP_LIMIT_FILES", (str(tmp_path / "none"),))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert model_size.machine_memory_bytes() == physical
    monkeypatch.setattr(resource, "getrlimit", lambda which: (2**30, resource.RLIM_INFINITY))
    assert model_size.machine_memory_bytes() == min(physical, 2**30)
    cgroup = tmp_path / "memory.max"
    cgroup.write_text("12345678\n")
    monkeypatch.setattr(model_size, "CGROUP_LIMIT_FILES", (str(cgroup),))
    assert model_size.machine_memory_bytes() == min(physical, 12345678)
    cgroup.write_text("max\n")                                                   # a container without a limit
    assert model_size.machine_memory_bytes() == min(physical, 2**30)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS as a memory limit")
@pytest.mark.skipif(torch.version.cuda is not None,
                    reason="a CUDA build of torch maps more than the 4 GiB limit on import "
                           "(make test-torch-min installs one: PyPI has no CPU build)")
def test_a_million_thin_layers_are_refused_at_once_under_an_address_space_limit(tiny_dir, tmp_path):
    """G20: n_encoder_layers 10^6 of width 8 is ~5 GB, less than many machines hold: under ulimit -v 4 GiB it
    must be refused before a layer is built, naming config.json."""
    d = _huge_dir(tiny_dir, tmp_path, "n_encoder_layers", 10**6)
    script = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2**32, 2**32)); "
              "from transformer_lib.cli.main import main; sys.exit(main(sys.argv[1:]))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", script, "translate", "--model", str(d), "--device", "cpu"],
                         input="1\n", capture_output=True, text=True, env=env, timeout=120)
    lines = run.stderr.splitlines()
    assert run.returncode == 1 and len(lines) == 1, run.stderr
    assert f"{d / CONFIG_FILE}: a model of " in lines[0] and "n_encoder_layers=1000000" in lines[0]
