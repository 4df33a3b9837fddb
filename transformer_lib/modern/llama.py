"""Generated from book/13_modern.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: ffc51352e9fbbedf
# fmt: off

# [book/13_modern.ipynb, cell 04068865]
from __future__ import annotations

from typing import cast

import torch
from torch import nn

from transformer_lib.checks import check_int
from transformer_lib.modern.decoder_only import DecoderOnlyBlock, DecoderOnlyLM


def half_to_interleaved(head_dim: int) -> torch.Tensor:
    """The permutation of a head's coordinates that turns Llama's pairs (j, j + d/2)
    into adjacent pairs (2j, 2j+1): new coordinate 2j is old j, 2j+1 is old j + d/2."""
    half = check_int(head_dim, "head_dim") // 2
    return torch.stack([torch.arange(half), torch.arange(half) + half], 1).flatten()


@torch.no_grad()
def load_llama_state_dict(model: DecoderOnlyLM, state: dict) -> DecoderOnlyLM:
    """Copy the weights of a ``transformers`` Llama state dict (``model.state_dict()``
    of a ``LlamaForCausalLM``) into ``model`` and return it. ``model.config`` must
    match (no biases, RMSNorm, SwiGLU, RoPE, same sizes). With
    ``rope_layout="interleaved"`` the rows of W_q and W_k of every head are permuted
    by :func:`half_to_interleaved`: q·k is unchanged, and the rotation of adjacent pairs
    then equals Llama's rotate_half; ``"half"`` copies them as they are."""
    c = model.config
    if c.positions != "rope" or c.activation != "swiglu" or c.bias or c.norm != "rms":
        raise ValueError("a Llama state dict needs positions='rope', "
                         "activation='swiglu', norm='rms' and bias=False")
    d_k = c.d_model // c.n_heads
    perm = (half_to_interleaved(d_k) if c.rope_layout == "interleaved"
            else torch.arange(d_k))

    def heads(w: torch.Tensor) -> torch.Tensor:                   # rows of each head
        return w.view(-1, d_k, w.size(-1))[:, perm].reshape(w.shape)

    def get(name: str) -> torch.Tensor:
        if name not in state:
            raise KeyError(f"the Llama state dict has no {name!r}")
        return state[name]

    def weight(module: nn.Module | None) -> torch.Tensor:       # a norm's, the gate's
        if module is None:
            raise ValueError("the model has no gate: activation must be 'swiglu'")
        return cast(torch.Tensor, module.weight)

    model.embed.weight.copy_(get("model.embed_tokens.weight"))
    for i, block in enumerate(cast(list[DecoderOnlyBlock], model.blocks)):
        p = f"model.layers.{i}."
        qkv = [heads(get(p + "self_attn.q_proj.weight")),
               heads(get(p + "self_attn.k_proj.weight")),
               get(p + "self_attn.v_proj.weight")]
        block.self_attn.in_proj.weight.copy_(torch.cat(qkv, dim=0))
        block.self_attn.out_proj.weight.copy_(get(p + "self_attn.o_proj.weight"))
        ffn = block.feed_forward
        weight(ffn.gate).copy_(get(p + "mlp.gate_proj.weight"))
        ffn.linear1.weight.copy_(get(p + "mlp.up_proj.weight"))
        ffn.linear2.weight.copy_(get(p + "mlp.down_proj.weight"))
        weight(block.sublayer1.norm).copy_(get(p + "input_layernorm.weight"))
        weight(block.sublayer2.norm).copy_(get(p + "post_attention_layernorm.weight"))
    weight(model.norm).copy_(get("model.norm.weight"))
    if model.lm_head is not None:
        model.lm_head.weight.copy_(get("lm_head.weight"))
    return model


__all__ = ['half_to_interleaved', 'load_llama_state_dict']
