"""Generated from book/appendix_serving.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: e4d279a76cfa99e6
# fmt: off

# [book/appendix_serving.ipynb, cell 6a70c904]
from __future__ import annotations

import functools
import warnings
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.decoding.greedy import DecodingStepper, Stepper
from transformer_lib.masks import padding_mask
from transformer_lib.model import Transformer

#: the batch size oneDNN lays the packed weights out for; any batch works with them
#: (measured: a layout for 8 rows or for 64 decodes 1 to 128 rows alike)
PACK_ROWS = 64
#: the multiply-adds of one product below which F.linear is used all the same: a
#: oneDNN call costs more to start (measured on one thread: about 15 µs against 3 µs
#: a call; for 8 rows of a 256 x 768 weight, 1.6 M multiply-adds, 41 µs against 33 µs;
#: for 32 rows of it, 6.3 M, 95 µs against 101 µs)
PACKED_MIN_WORK = 1 << 22
#: the rows below which F.linear is used all the same: for 1 or 2 rows its
#: matrix-vector product reads the weight faster than oneDNN's (measured on the
#: 8000 x 256 output layer: 330 µs against 370 µs for 2 rows, 610 against 350 for 4)
PACKED_MIN_ROWS = 4
#: PackedDecoder's precisions: float32 weights (packed), or int8 ones (Int8Linear)
PACKED_PRECISIONS = ("fp32", "int8")
#: how far the probe lets oneDNN's products stray from F.linear's, as a fraction of
#: the sum of the terms' magnitudes: float32 rounding moves a sum of K products by at
#: most about K·2⁻²⁴ of it (K = 64 in the probe: 4e-6); a wrong layout, a lost bias
#: or a misread argument moves it by about the whole sum
PROBE_TOL = 1e-5


class _OneDNN:
    """The two private operators, called the one way the probe and PackedLinear
    both call them."""

    def __init__(self, reorder: Any, product: Any):
        self.reorder, self.product = reorder, product

    def pack(self, weight: torch.Tensor) -> torch.Tensor:
        return self.reorder(weight.contiguous(), PACK_ROWS)

    def linear(self, x: torch.Tensor, packed: torch.Tensor,
               bias: torch.Tensor | None) -> torch.Tensor:
        return self.product(x, packed, bias, "none", [], "")


def _said(error: Exception) -> str:
    return f"{type(error).__name__}: {next(iter(str(error).splitlines()), '')}"


# [book/appendix_serving.ipynb, cell fad56b57]
def _probe() -> tuple[_OneDNN | None, str]:
    """(the operators, "") if they pack and multiply as F.linear does, else (None,
    why not)."""
    version = f"PyTorch {torch.__version__}"
    if not torch.backends.mkldnn.is_available():
        return None, f"{version} is built without oneDNN"
    try:
        ops = _OneDNN(torch.ops.mkldnn._reorder_linear_weight,
                      torch.ops.mkldnn._linear_pointwise)
    except (AttributeError, RuntimeError) as error:
        return None, f"{version} lacks one ({_said(error)})"
    g = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(512, 64, generator=g), torch.randn(512, generator=g)
    cases = ((torch.randn(2, 3, 64, generator=g), bias),      # (B, S, d), a bias
             (torch.randn(5, 64, generator=g), None))         # (N, d), none
    try:
        with torch.no_grad(), torch.autocast("cpu", enabled=False):
            packed = ops.pack(weight)
            for x, b in cases:
                out, ref = ops.linear(x, packed, b), F.linear(x, weight, b)
                if out.shape != ref.shape or out.dtype != ref.dtype:
                    return None, (f"in {version} they give {tuple(out.shape)} "
                                  f"{out.dtype} for {tuple(ref.shape)} {ref.dtype}")
                size = x.abs() @ weight.abs().T + (0 if b is None else b.abs())
                off = ((out - ref).abs() / size).max().item()
                if not off <= PROBE_TOL:                          # NaN fails too
                    return None, (f"in {version} they disagree with F.linear (off by "
                                  f"{off:.1e} of the terms' sum; rounding allows "
                                  f"{PROBE_TOL:.0e})")
    except Exception as error:                # a changed signature, say
        return None, f"in {version} they raise {_said(error)}"
    return ops, ""


@functools.cache
def onednn_linear() -> _OneDNN | None:
    """The oneDNN operators :class:`PackedLinear` multiplies with, probed once a
    process: called as PackedLinear calls them, on a 512 x 64 weight with a bias and
    without, for 3-D and 2-D inputs, they must give F.linear's products within
    :data:`PROBE_TOL`. None, with one ``RuntimeWarning`` that says why, where they are
    missing, raise or disagree (``onednn_linear.cache_clear()`` probes again)."""
    ops, why = _probe()
    if ops is None:
        warnings.warn("PackedLinear uses F.linear instead of PyTorch's private oneDNN "
                      f"operators (the same products, slower): {why}", RuntimeWarning,
                      stacklevel=2)
    return ops


# [book/appendix_serving.ipynb, cell 5c5dfa92]
class PackedLinear:
    """``y = x Wᵀ + b`` of an ``nn.Linear``'s weight and bias, for inference.

    On the CPU in float32, where :func:`onednn_linear` finds PyTorch's oneDNN
    operators sound, W is laid out once in oneDNN's blocked format (as PyTorch's
    compiler does for frozen models: a copy, or the weight itself where that format
    is its own) and each call with enough work (:data:`PACKED_MIN_WORK`) and rows
    (:data:`PACKED_MIN_ROWS`) is one oneDNN matrix product. For smaller products,
    anywhere else (a GPU, another dtype, a PyTorch whose operators are missing or
    fail the probe), or under autocast, it is ``F.linear`` on the weight itself. No
    gradients: call it under ``torch.no_grad()``. A snapshot: a copy does not follow
    later changes of the weight (pack again: :meth:`PackedDecoder.repack`)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        self.weight = weight.detach()
        self.bias = None if bias is None else bias.detach()
        self.ops: _OneDNN | None = None
        self.packed: torch.Tensor | None = None
        if self.weight.device.type == "cpu" and self.weight.dtype == torch.float32:
            self.ops = onednn_linear()
            if self.ops is not None:
                self.packed = self.ops.pack(self.weight)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if (self.ops is None or self.packed is None or torch.is_autocast_enabled("cpu")
                or x.numel() < PACKED_MIN_ROWS * x.size(-1)
                or x.numel() * self.weight.size(0) < PACKED_MIN_WORK):
            return F.linear(x, self.weight, self.bias)
        return self.ops.linear(x, self.packed, self.bias)

    @classmethod
    def of(cls, linear: nn.Linear, rows: slice = slice(None)) -> PackedLinear:
        """The rows ``rows`` of ``linear`` (a fused projection's part)."""
        bias = None if linear.bias is None else linear.bias[rows]
        return cls(linear.weight[rows], bias)


class Int8Linear(PackedLinear):
    """``y ≈ x Wᵀ + b`` with W in int8, one scale per output row, and x quantized
    at each call from its own range: PyTorch's dynamic quantization, made
    through its public ``torch.ao.nn.quantized.dynamic.Linear`` (FBGEMM or oneDNN
    kernels, as ``torch.backends.quantized.engine`` says), for float32 on the CPU.
    PyTorch 2.13 marks ``torch.ao.quantization`` deprecated in favour of the
    separate torchao package: its warnings pass through, as
    :func:`~transformer_lib.serving.quantize_int8`'s do."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        if weight.device.type != "cpu" or weight.dtype != torch.float32:
            raise ValueError("int8 weights are made from float32 ones on the CPU, got "
                             f"{weight.dtype} on {weight.device}")
        self.weight = weight.detach()
        self.bias = None if bias is None else bias.detach()
        self.ops, self.packed = None, None
        linear = nn.Linear(weight.size(1), weight.size(0), bias=bias is not None)
        with torch.no_grad():
            linear.weight.copy_(weight)
            if bias is not None:
                linear.bias.copy_(bias)
        # from_float reads the recipe from the layer (nn.Module does not declare it)
        linear.qconfig = torch.ao.quantization.per_channel_dynamic_qconfig  # type: ignore[assignment]
        self.module = torch.ao.nn.quantized.dynamic.Linear.from_float(linear)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


# [book/appendix_serving.ipynb, cell ff6ada31]
def _residual(sub: Any, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """Chapter 6's residual connection in eval mode (no dropout) after the sublayer's
    output ``out``: Pre-Norm adds it (the sublayer normalised its input), Post-Norm
    normalises the sum."""
    return x + out if sub.norm_first else sub.norm(x + out)


def _input(sub: Any, x: torch.Tensor) -> torch.Tensor:
    """What the sublayer reads: x normalised (Pre-Norm) or x itself (Post-Norm)."""
    return sub.norm(x) if sub.norm_first else x


class _PackedLayer:
    """One decoder layer's packed weights, and its step for one new position."""

    def __init__(self, layer: Any, make: Any = PackedLinear.of):
        a, c, f = layer.self_attn, layer.cross_attn, layer.feed_forward
        d, dkv = a.d_model, a.d_kv
        self.shape = (a.n_heads, a.n_kv_heads, a.d_k)
        self.gqa = a.n_kv_heads < a.n_heads        # shared key-value heads (13)
        self.qkv, self.o = make(a.in_proj), make(a.out_proj)
        self.q = make(c.in_proj, slice(0, d))
        self.kv = make(c.in_proj, slice(d, d + 2 * dkv))
        self.co = make(c.out_proj)
        self.f1, self.f2 = make(f.linear1), make(f.linear2)
        self.gate = None if f.gate is None else make(f.gate)
        self.act = f.activation
        self.subs = (layer.sublayer1, layer.sublayer2, layer.sublayer3)

    def memory_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cross-attention keys and values of memory (B, S, d): two (B, h_kv, S,
        d_k) tensors."""
        B, S, _ = memory.shape
        _, g, dk = self.shape
        kv = self.kv(memory).view(B, S, 2, g, dk).permute(2, 0, 3, 1, 4)
        return kv[0].contiguous(), kv[1].contiguous()

    def step(self, x: torch.Tensor, t: int, cache: torch.Tensor,
             cross: tuple[torch.Tensor, torch.Tensor], mask: torch.Tensor,
             empty: torch.Tensor | None) -> torch.Tensor:
        """x (N, d) at position t -> (N, d); its k and v go to cache[:, :, :, t].
        Written out flat, without a function per sublayer: at batch 1 a step is
        mostly the interpreter's and the dispatcher's time, paid per call."""
        N, d = x.shape
        h, g, dk = self.shape
        s1, s2, s3 = self.subs
        q, kv = self.qkv(_input(s1, x)).split([d, 2 * g * dk], dim=-1)
        cache[:, :, :, t] = kv.view(N, 2, g, dk)
        out = F.scaled_dot_product_attention(
            q.view(N, h, 1, dk), cache[:, 0, :, :t + 1], cache[:, 1, :, :t + 1],
            enable_gqa=self.gqa)                                       # (N, h, 1, dk)
        x = _residual(s1, x, self.o(out.reshape(N, d)))
        q = self.q(_input(s2, x)).view(N, h, 1, dk)
        out = F.scaled_dot_product_attention(q, *cross, attn_mask=mask,
                                             enable_gqa=self.gqa)
        if empty is not None:                 # a source of pads only: 0, as chapter 3
            out = out.masked_fill(empty, 0.0)
        x = _residual(s2, x, self.co(out.reshape(N, d)))
        y = _input(s3, x)
        hidden = (self.act(self.f1(y)) if self.gate is None
                  else self.act(self.gate(y)) * self.f1(y))
        return _residual(s3, x, self.f2(hidden))


# [book/appendix_serving.ipynb, cell aee9e158]
class PackedStepper:
    """Chapter 11's :class:`~transformer_lib.decoding.greedy.DecodingStepper` over
    packed weights: ``step(ys)`` feeds ys[:, -1] at position t - 1 through lean
    per-layer steps and returns the next token's logits (N, V), float32, pad and bos at
    -inf; ``reorder(index)`` and ``reorder_beams(index)`` as :class:`Stepper`'s. The
    self-attention keys and values sit in one buffer per layer, (N, 2, h_kv, room,
    d_k), whose room doubles when full; the cross-attention's are computed once, at
    the start. Made by :meth:`PackedDecoder.stepper`, for a model in eval mode."""

    def __init__(self, model: Transformer, layers: list[_PackedLayer],
                 output: Any, src: torch.Tensor):
        c = self.config = model.config
        self.model, self.layers, self.output = model, layers, output
        src_mask = padding_mask(src, c.pad_id)                       # (B, 1, 1, S)
        memory = model.encode(src, src_mask)                         # (B, S, d)
        any_key = src_mask.any(dim=-1, keepdim=True)                 # (B, 1, 1, 1)
        self.mask = src_mask | ~any_key
        self.empty = None if bool(any_key.all()) else ~any_key
        self.cross = [layer.memory_kv(memory) for layer in layers]
        _, g, dk = layers[0].shape if layers else (0, 1, 1)
        room = min(64, c.max_len)
        self.caches = [memory.new_empty(src.size(0), 2, g, room, dk) for _ in layers]
        self.spares: list[torch.Tensor | None] = [None for _ in layers]
        # chapter 2's table in the embeddings' dtype (eval mode: no dropout to add),
        # and the two tokens forbid_specials (chapter 11) sets to -inf
        self.pe = model.positional.pe.to(model.tgt_embed.embedding.weight.dtype)
        self.specials = torch.tensor([c.pad_id, c.bos_id], device=src.device)
        self.length = 0

    def step(self, ys: torch.Tensor) -> torch.Tensor:
        """Prefixes ys (N, t), bos first -> the next token's logits (N, V)."""
        t = ys.size(1) - 1
        if t != self.length:                  # one comparison of two ints, no tensor
            raise RuntimeError("KV cache out of step with the prefix")
        if self.caches and t == self.caches[0].size(3):                # full: double
            self.caches = [torch.cat([c, torch.empty_like(c)], dim=3)
                           for c in self.caches]
        m = self.model
        x = m.tgt_embed.lookup(ys[:, -1]) + self.pe[t]                  # (N, d)
        for layer, cache, cross in zip(self.layers, self.caches, self.cross):
            x = layer.step(x, t, cache, cross, self.mask, self.empty)
        self.length = t + 1
        logits = self.output(m.decoder.norm(x)).float()      # (N, V), a new tensor
        return logits.index_fill_(-1, self.specials, float("-inf"))

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows ``index`` (in that order): the beams that survive a step."""
        self.mask = self.mask.index_select(0, index)
        if self.empty is not None:
            self.empty = self.empty.index_select(0, index)
        self.cross = [(k.index_select(0, index), v.index_select(0, index))
                      for k, v in self.cross]
        self.reorder_beams(index)

    def reorder_beams(self, index: torch.Tensor) -> None:
        """:meth:`reorder` for rows that stay within their source sentence (beam
        search after its first step): only the self-attention caches move, only their
        first ``length`` positions, into a spare buffer kept for the next time."""
        t, moved = self.length, []
        for i, cache in enumerate(self.caches):
            spare = self.spares[i]
            shape = (index.numel(), *cache.shape[1:])
            if spare is None or spare.shape != shape:
                spare = cache.new_empty(shape)
            torch.index_select(cache[:, :, :, :t], 0, index, out=spare[:, :, :, :t])
            moved.append(spare)
            self.spares[i] = cache if cache.shape == shape else None
        self.caches = moved


# [book/appendix_serving.ipynb, cell 48e0b8dd]
class PackedDecoder(nn.Module):
    """A :class:`~transformer_lib.model.Transformer` prepared for decoding: chapter 11's
    decoders (``greedy_decode``, ``beam_search``, ``sample``, ``translate_lines``,
    ``token_scores``) take it in place of the model, and run the packed step.
    Experimental: it rests on two private PyTorch operators, probed before use
    (:func:`onednn_linear`), with ``F.linear`` in their place where they fail.

    ``PackedDecoder(model)`` shares the model (no copy of it) and packs the decoder's
    linear layers and the output layer at once (:class:`PackedLinear`, about as much
    memory again as those weights): a frozen snapshot, as ``torch.jit.freeze`` makes.
    After writing to the model's weights (an optimizer step, ``load_state_dict``,
    ``to()``, a write through ``p.data``) call :meth:`repack`; until then a decode
    mixes packed copies of the old weights with the new ones, or fails where their
    dtype or device changed. The wrapper takes the model's mode when made and at
    :meth:`repack`; its ``train()`` and ``eval()`` set the model's as ``nn.Module``'s
    do, and a decode leaves the model in the wrapper's mode. The outputs are the
    model's up to the rounding of other kernels: equal tokens but for near ties.
    ``use_cache=False`` runs the model's own uncached :class:`Stepper`.
    ``forward(src, tgt_in)`` is the model's (teacher forcing).

    ``precision="int8"`` makes the decoder's linear layers and the output layer
    :class:`Int8Linear` (int8 weights, one scale per row; the encoder, run once per
    sentence, stays float32) for a float32 model on the CPU: the outputs are then
    close to the model's, not equal (the serving appendix measures how close)."""

    def __init__(self, model: Transformer, precision: str = "fp32"):
        super().__init__()
        if not isinstance(model, Transformer):
            raise TypeError(f"model must be a Transformer (chapter 9), got "
                            f"{type(model).__name__}")
        if precision not in PACKED_PRECISIONS:
            raise ValueError(f"precision must be one of {PACKED_PRECISIONS}, got "
                             f"{precision!r}")
        weight = model.output.weight if isinstance(model.output, nn.Linear) else None
        if precision == "int8" and weight is not None and (
                weight.device.type != "cpu" or weight.dtype != torch.float32):
            raise ValueError("precision 'int8' needs a float32 model on the CPU, got "
                             f"{weight.dtype} on {weight.device}")
        self.model, self.precision = model, precision
        self.repack()

    @property
    def config(self) -> Any:
        return self.model.config

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.model(src, tgt_in)

    def repack(self) -> None:
        """Pack the model's weights again (after they changed), and take its mode."""
        with torch.no_grad():
            make = Int8Linear.of if self.precision == "int8" else PackedLinear.of
            layers = [_PackedLayer(layer, make) for layer in self.model.decoder.layers]
            out = self.model.output
            output = make(out) if isinstance(out, nn.Linear) else out
        self._packed: tuple[list[_PackedLayer], Any] = (layers, output)
        self.train(self.model.training)

    def packed(self) -> tuple[list[_PackedLayer], Any]:
        """(the packed layers, the packed output layer), as :meth:`repack` left them."""
        return self._packed

    def stepper(self, src: torch.Tensor, use_cache: bool = True) -> DecodingStepper:
        """The stepper of chapter 11's decoders for a checked ``src`` (B, S)."""
        if not use_cache:
            return Stepper(self.model, src, use_cache=False)
        return PackedStepper(self.model, *self.packed(), src)


__all__ = [
    'PACK_ROWS', 'PACKED_MIN_WORK', 'PACKED_MIN_ROWS', 'PACKED_PRECISIONS', 'PROBE_TOL',
    'onednn_linear', 'PackedLinear', 'Int8Linear', 'PackedStepper', 'PackedDecoder',
]
