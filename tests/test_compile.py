"""torch.compile on the model: a compiled training step (loss and every gradient) and a compiled cached decoding
step (logits and the keys/values the step adds to the cache) equal eager execution within float32 rounding, on
the CPU with TorchInductor, which generates C++ and needs a C++ compiler: without one the tests are skipped and
say so. Dynamo must not split the model's graph anywhere: the one host read-back of the CPU path
(``check_token_ids``) becomes a queued device assertion while compiling. The speed ratio compiled / eager is
printed by ``benchmarks/gpu_check.py``.
Models are tiny and ``dynamic=False``: compiling takes most of the time."""
from __future__ import annotations

import copy
import shutil

import pytest
import torch

import transformer_lib as tl

pytestmark = pytest.mark.slow               # compiling takes seconds a test


def _compiler_missing() -> str | None:
    """Why TorchInductor cannot build its CPU kernels here, or None if it can."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
        get_cpp_compiler()
    except Exception as exc:                                    # its own error type differs between versions
        if not any(shutil.which(c) for c in ("g++", "c++", "clang++")):
            return f"no C++ compiler for TorchInductor's CPU kernels ({exc})"
    return None


_MISSING = _compiler_missing()
needs_compiler = pytest.mark.skipif(_MISSING is not None, reason=str(_MISSING))


def make_model(dropout: float = 0.0) -> tl.Transformer:
    torch.manual_seed(0)
    cfg = tl.TransformerConfig(20, 20, d_model=16, n_heads=2, n_encoder_layers=1, n_decoder_layers=1, d_ff=32,
                               dropout=dropout, max_len=16)
    return tl.Transformer(cfg)


def padded_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    src = torch.randint(3, 20, (3, 7), generator=g)
    src[0, 4:] = 0                                              # padding, so that the masks matter
    tgt = torch.randint(3, 20, (3, 7), generator=g)
    tgt[:, 0] = 1
    tgt[1, 5:] = 0
    return src, tgt[:, :-1], tgt[:, 1:]


def graph_breaks(fn, *args) -> list[str]:
    """Where dynamo splits ``fn(*args)``: the innermost library frame of each break."""
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*args)
    where = []
    for b in explained.break_reasons:
        frames = [f for f in b.user_stack if "transformer_lib" in f.filename]
        # a break inside a function resumes in "torch_dynamo_resume_in_<function>_at_<line>"
        name = frames[-1].name if frames else str(b.reason).splitlines()[0]
        where.append("check_token_ids" if "check_token_ids" in name else name)
    return where


def test_no_graph_breaks():
    """A forward pass and a cached decoding step compile to one graph each: check_token_ids, which on the CPU
    reads min and max of the ids back to raise its error at once, queues a device assertion instead while
    compiling."""
    model = make_model()
    src, tgt_in, _ = padded_batch()
    assert graph_breaks(model, src, tgt_in) == []
    model.eval()
    with torch.no_grad():
        mask = tl.padding_mask(src, 0)
        memory = model.encode(src, mask)
        cache = model.new_cache()
        model.decode(tgt_in[:, :3], memory, mask, cache)
        assert graph_breaks(model.decode, tgt_in[:, 3:4], memory, mask, cache) == []
    torch._dynamo.reset()


@needs_compiler
def test_compiled_training_step_equals_eager():
    eager = make_model()
    compiled_model = copy.deepcopy(eager)
    compiled = torch.compile(compiled_model, dynamic=False)
    src, tgt_in, tgt_out = padded_batch()
    loss_fn = tl.LabelSmoothingLoss(0.1, pad_id=0)
    losses = []
    for model in (eager, compiled):
        loss = loss_fn(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    names = [n for n, _ in eager.named_parameters()]
    for name, a, b in zip(names, eager.parameters(), compiled_model.parameters()):
        assert a.grad is not None and b.grad is not None, name
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-6, msg=lambda m, n=name: f"{n}: {m}")
    torch._dynamo.reset()


@needs_compiler
def test_compiled_cached_decoding_step_equals_eager():
    model = make_model().eval()
    src, tgt_in, _ = padded_batch()
    with torch.no_grad():
        mask = tl.padding_mask(src, 0)
        memory = model.encode(src, mask)
        cache = model.new_cache()
        model.decode(tgt_in[:, :3], memory, mask, cache)              # three cached positions
        other = copy.deepcopy(cache)
        new = tgt_in[:, 3:4]
        expected = model.decode(new, memory, mask, cache)             # (B, 1, V)
        got = torch.compile(model.decode, dynamic=False)(new, memory, mask, other)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    assert other.length == cache.length == 4
    for mine, theirs in zip(other.layers, cache.layers):
        for part in ("self_attn", "cross_attn"):
            for key in ("k", "v"):
                torch.testing.assert_close(getattr(getattr(mine, part), key), getattr(getattr(theirs, part), key),
                                           rtol=1e-5, atol=1e-6)
    torch._dynamo.reset()
