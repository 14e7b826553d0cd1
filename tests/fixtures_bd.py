"""Tiny in-memory block-diffusion backends for the blockdiff / s2d2 tests (helper "bd")."""

from __future__ import annotations

from typing import Any

import torch

from infill.models.blockdiff import BlockDiffModel

V = 40  # vocabulary size; MASK = V - 1, END = V - 2
MASK = V - 1
END = V - 2


def tiny_causal_lm(arch: str = "qwen3", attn: str = "sdpa", seed: int = 0, vocab: int = V) -> Any:
    """A random 2-layer stock causal LM (fp32, eval mode) with untied embeddings, so its predictions vary."""
    import transformers

    cfg_cls, model_cls = {
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "starcoder2": (transformers.Starcoder2Config, transformers.Starcoder2ForCausalLM),
    }[arch]
    kwargs: dict[str, Any] = dict(
        vocab_size=vocab,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        tie_word_embeddings=False,
    )
    if arch == "qwen3":
        kwargs["head_dim"] = 8
    config = cfg_cls(**kwargs)
    config._attn_implementation = attn
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    with torch.no_grad():  # larger weights than the default init, so distributions are far from uniform
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(4.0)
    return model


def tiny_backend(
    arch: str = "qwen3", attn: str = "sdpa", shifted: bool = False, seed: int = 0, end: bool = True
) -> BlockDiffModel:
    return BlockDiffModel(
        tiny_causal_lm(arch, attn, seed), mask_id=MASK, shifted=shifted, end_ids=(END,) if end else ()
    )
