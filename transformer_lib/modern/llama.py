"""Generated from book/13_modern.ipynb: edit the notebook, not this file.

Regenerate with ``python tools/export.py``."""
# digest: c6cfb62380c41484
# fmt: off

# [book/13_modern.ipynb, cell 04068865]
from __future__ import annotations

from collections.abc import Mapping

import torch

from transformer_lib.checks import check_int
from transformer_lib.modern.decoder_only import DecoderOnlyBlock, DecoderOnlyLM


def half_to_interleaved(head_dim: int) -> torch.Tensor:
    """The permutation of a head's coordinates that turns Llama's pairs (j, j + d/2)
    into adjacent pairs (2j, 2j+1): new coordinate 2j is old j, 2j+1 is old j + d/2."""
    head_dim = check_int(head_dim, "head_dim")
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (RoPE rotates pairs), got {head_dim}")
    half = head_dim // 2
    return torch.stack([torch.arange(half), torch.arange(half) + half], 1).flatten()


def _llama_plan(model: DecoderOnlyLM) -> list[tuple[torch.Tensor, str, bool]]:
    """Where each weight of a Llama state dict goes: (our tensor or a view of it, the
    state dict's name, whether its rows are permuted per head like W_q and W_k)."""
    plan: list[tuple[torch.Tensor, str, bool]] = [
        (model.embed.weight, "model.embed_tokens.weight", False)]
    for i, block in enumerate(model.blocks):
        assert isinstance(block, DecoderOnlyBlock)
        p, attn, ffn = f"model.layers.{i}.", block.self_attn, block.feed_forward
        q, k, v = attn.in_proj.weight.split([attn.d_model, attn.d_kv, attn.d_kv])
        plan += [(q, p + "self_attn.q_proj.weight", True),
                 (k, p + "self_attn.k_proj.weight", True),
                 (v, p + "self_attn.v_proj.weight", False),
                 (attn.out_proj.weight, p + "self_attn.o_proj.weight", False),
                 (ffn.linear1.weight, p + "mlp.up_proj.weight", False),
                 (ffn.linear2.weight, p + "mlp.down_proj.weight", False)]
        for module, name in ((ffn.gate, "mlp.gate_proj"),
                             (block.sublayer1.norm, "input_layernorm"),
                             (block.sublayer2.norm, "post_attention_layernorm")):
            assert module is not None and isinstance(module.weight, torch.Tensor)
            plan.append((module.weight, p + name + ".weight", False))
    assert isinstance(model.norm.weight, torch.Tensor)
    plan.append((model.norm.weight, "model.norm.weight", False))
    if model.lm_head is not None:
        plan.append((model.lm_head.weight, "lm_head.weight", False))
    return plan


# [book/13_modern.ipynb, cell dc4bf55f]
@torch.no_grad()
def load_llama_state_dict(model: DecoderOnlyLM, state: Mapping) -> DecoderOnlyLM:
    """Copy the weights of a ``transformers`` Llama state dict (``model.state_dict()``
    of a ``LlamaForCausalLM``) into ``model`` and return it. ``model.config`` must
    match (no biases, RMSNorm, SwiGLU, RoPE, same sizes). With
    ``rope_layout="interleaved"`` the rows of W_q and W_k of every head are permuted
    by :func:`half_to_interleaved`: q·k is unchanged, and the rotation of adjacent pairs
    then equals Llama's rotate_half; ``"half"`` copies them as they are.

    Everything is checked before anything is copied: every weight the model needs is
    there with its shape, and the state dict holds no weight the model would leave
    unused (more layers, or an untied ``lm_head`` for a model with tied embeddings)."""
    if not isinstance(model, DecoderOnlyLM):
        raise TypeError(f"model must be a DecoderOnlyLM, got {type(model).__name__}")
    if not isinstance(state, Mapping):
        raise TypeError("state must be a state dict (llama.state_dict()), got "
                        f"{type(state).__name__}")
    c = model.config
    if c.positions != "rope" or c.activation != "swiglu" or c.bias or c.norm != "rms":
        raise ValueError("a Llama state dict needs positions='rope', "
                         "activation='swiglu', norm='rms' and bias=False")
    plan = _llama_plan(model)
    missing = [name for _, name, _ in plan if name not in state]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise KeyError(f"the Llama state dict has no {missing[0]!r}{more}")
    used = {name for _, name, _ in plan} | {      # inv_freq: a buffer, not a weight
        k for k in state if k.endswith("rotary_emb.inv_freq")}
    if model.lm_head is None and "lm_head.weight" in state:   # tied: must be the same
        used.add("lm_head.weight")
        embed = state["model.embed_tokens.weight"]
        if not torch.equal(state["lm_head.weight"], embed):
            raise ValueError("the Llama's lm_head.weight differs from its embeddings, "
                             "but the model ties them: use tie_embeddings=False")
    unused = sorted(set(state) - used)
    if unused:
        raise ValueError(f"the Llama state dict holds {len(unused)} weights the model "
                         f"would not use, such as {unused[0]!r}: check n_layers")
    for ours, name, _ in plan:
        if tuple(state[name].shape) != tuple(ours.shape):
            raise ValueError(f"{name} has shape {tuple(state[name].shape)}; the model "
                             f"needs {tuple(ours.shape)} there: check the config")
    d_k = c.d_model // c.n_heads
    perm = (half_to_interleaved(d_k) if c.rope_layout == "interleaved"
            else torch.arange(d_k))
    for ours, name, per_head in plan:
        w = state[name]
        ours.copy_(w.view(-1, d_k, w.size(-1))[:, perm].reshape(w.shape) if per_head
                   else w)
    return model


__all__ = ['half_to_interleaved', 'load_llama_state_dict']
