"""Generated from book/07_encoder.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: f2455fa0ff296df5
# fmt: off

# [book/07_encoder.ipynb, cell e85fcdef]
from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from transformer_lib.attention import MultiHeadAttention
from transformer_lib.feed_forward import PositionwiseFeedForward
from transformer_lib.norm import SublayerConnection

_T = TypeVar("_T")
_S = TypeVar("_S", bound=nn.Module)
_TorchLayer = nn.TransformerEncoderLayer | nn.TransformerDecoderLayer
_TorchStack = nn.TransformerEncoder | nn.TransformerDecoder


class EncoderLayerParts(Protocol):
    """What the loaders read from one of our encoder layers (by name, not by class)."""

    self_attn: MultiHeadAttention
    feed_forward: PositionwiseFeedForward
    sublayer1: SublayerConnection
    sublayer2: SublayerConnection
    norm_first: bool


class DecoderLayerParts(EncoderLayerParts, Protocol):
    """A decoder layer has one more attention block, and its sublayer (chapter 8)."""

    cross_attn: MultiHeadAttention
    sublayer3: SublayerConnection


class LayerStack(Protocol):
    """A stack of layers and its final norm (``nn.Identity`` when there is none)."""

    layers: nn.ModuleList
    norm: nn.Module


def expect_parts(module: object, parts: type, name: str = "layer") -> Any:
    """``module`` itself if it has every attribute of the protocol ``parts``, else a
    TypeError naming the missing ones. Annotate the result: ``x: Parts = ...``."""
    # hasattr sees a module's submodules; isinstance() with a runtime-checkable
    # protocol does not (from Python 3.12 it looks at the instance's __dict__ only)
    wanted = [n for c in parts.__mro__ for n in inspect.get_annotations(c)]
    missing = [n for n in dict.fromkeys(wanted) if not hasattr(module, n)]
    if missing:
        raise TypeError(f"{name} ({type(module).__name__}) has no "
                        f"{', '.join(missing)}: expected the parts of {parts.__name__}")
    return module


def expect_torch(reference: object, cls: type[_T]) -> _T:
    """``reference`` itself if it is a PyTorch ``cls`` module, else a TypeError."""
    if not isinstance(reference, cls):
        raise TypeError(f"reference must be a torch.nn.{cls.__name__}, "
                        f"got {type(reference).__name__}")
    return reference


# [book/07_encoder.ipynb, cell bcf544ef]
def check_same(what: str, reference: object, ours: object) -> None:
    """A ValueError naming ``what`` unless PyTorch's setting equals ours."""
    if reference != ours:
        raise ValueError(f"{what} differs: reference {reference!r}, ours {ours!r}")


def torch_activation(activation: object) -> object:
    """Our name for the activation of a PyTorch layer ("relu", "gelu", "silu"), or the
    activation itself when it is none of these."""
    for name, fn, module in (("relu", F.relu, nn.ReLU), ("gelu", F.gelu, nn.GELU),
                             ("silu", F.silu, nn.SiLU)):
        exact = getattr(activation, "approximate", "none") == "none"
        if activation is fn or (type(activation) is module and exact):
            return name
    return activation


def check_norm(ours: nn.Module, reference: nn.Module) -> None:
    """PyTorch's modules normalise with LayerNorm: ours must too, with the same eps."""
    if not isinstance(reference, nn.LayerNorm) or getattr(ours, "bias", None) is None:
        raise ValueError("PyTorch's modules use LayerNorm: "
                         "build ours with norm='layer'")
    check_same("eps", reference.eps, getattr(ours, "eps", None))
    check_same("LayerNorm bias", reference.bias is not None, True)


def check_torch_layer(layer: EncoderLayerParts, reference: _TorchLayer,
                      norms: Sequence[tuple[nn.Module, nn.Module]]) -> None:
    """Refuse a PyTorch encoder or decoder layer that would not compute what ``layer``
    computes once its weights are copied; ``norms`` pairs our norms with PyTorch's."""
    attn, ref_attn, ffn = layer.self_attn, reference.self_attn, layer.feed_forward
    if not ref_attn.batch_first:
        raise ValueError("reference must be built with batch_first=True, as ours is")
    check_same("norm_first", reference.norm_first, layer.norm_first)
    check_same("d_model", ref_attn.embed_dim, attn.d_model)
    check_same("n_heads", ref_attn.num_heads, attn.n_heads)
    check_same("d_ff", reference.linear1.out_features, ffn.linear1.out_features)
    activation = torch_activation(reference.activation)
    check_same("activation", activation, ffn.activation_name)
    has_bias = reference.linear1.bias is not None
    check_same("bias", has_bias, ffn.linear1.bias is not None)
    for ours, theirs in norms:
        check_norm(ours, theirs)


def check_torch_stack(stack: LayerStack, reference: _TorchStack) -> None:
    """Refuse a PyTorch stack with another number of layers, or another final norm."""
    check_same("layer counts", len(reference.layers), len(stack.layers))
    has_norm = not isinstance(stack.norm, nn.Identity)
    if (reference.norm is not None) != has_norm:
        raise ValueError(f"final norms differ: reference "
                         f"{'has one' if reference.norm is not None else 'has none'}, "
                         f"ours {'has one' if has_norm else 'has none'}: build ours "
                         f"with final_norm={reference.norm is not None}")
    if reference.norm is not None:
        check_norm(stack.norm, reference.norm)


# [book/07_encoder.ipynb, cell 810657d0]
@torch.no_grad()
def copy_attention(ours: MultiHeadAttention, reference: nn.MultiheadAttention) -> None:
    """Copy the projections of ``nn.MultiheadAttention`` (``in_proj``, ``out_proj``)."""
    if reference.in_proj_weight is None:
        raise ValueError("reference attention must have kdim = vdim = d_model "
                         "(one in_proj_weight)")
    has_bias = reference.in_proj_bias is not None
    check_same("bias", has_bias, ours.in_proj.bias is not None)
    ours.in_proj.weight.copy_(reference.in_proj_weight)
    if ours.in_proj.bias is not None and reference.in_proj_bias is not None:
        ours.in_proj.bias.copy_(reference.in_proj_bias)
    ours.out_proj.load_state_dict(reference.out_proj.state_dict())


@torch.no_grad()
def copy_feed_forward(ours: PositionwiseFeedForward, reference: _TorchLayer) -> None:
    """Copy a PyTorch layer's ``linear1`` and ``linear2`` into our feed-forward."""
    ours.linear1.load_state_dict(reference.linear1.state_dict())
    ours.linear2.load_state_dict(reference.linear2.state_dict())


@torch.no_grad()
def copy_norms(pairs: Sequence[tuple[nn.Module, nn.Module]]) -> None:
    """Copy each PyTorch LayerNorm into the norm of ours paired with it."""
    for ours, reference in pairs:
        ours.load_state_dict(reference.state_dict())


@torch.no_grad()
def copy_layer(ours: EncoderLayerParts, reference: _TorchLayer,
               norms: Sequence[tuple[nn.Module, nn.Module]],
               attentions: Sequence[tuple[MultiHeadAttention, nn.MultiheadAttention]]
               ) -> None:
    """Check a PyTorch layer against ours, then copy its attentions (pairs of ours and
    theirs), its feed-forward and its norms."""
    check_torch_layer(ours, reference, norms)
    for mine, theirs in attentions:
        copy_attention(mine, theirs)
    copy_feed_forward(ours.feed_forward, reference)
    copy_norms(norms)


@torch.no_grad()
def load_torch_stack(stack: _S, reference: nn.Module, torch_class: type[_TorchStack],
                     load_layer: Callable[[Any, Any], object], name: str) -> _S:
    """Copy a PyTorch stack of ``torch_class`` into ``stack``: every layer with
    ``load_layer``, then the optional final norm. All checks run first."""
    ours: LayerStack = expect_parts(stack, LayerStack, name)
    ref = expect_torch(reference, torch_class)
    check_torch_stack(ours, ref)
    for layer, ref_layer in zip(ours.layers, ref.layers):
        load_layer(layer, ref_layer)
    if ref.norm is not None:
        copy_norms([(ours.norm, ref.norm)])
    return stack


__all__ = []
