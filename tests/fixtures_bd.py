"""Tiny in-memory block-diffusion backends for the blockdiff / s2d2 tests (helper "bd")."""

from __future__ import annotations

from typing import Any

import torch

from infill.models.blockdiff import BlockDiffModel

V = 40  # vocabulary size; MASK = V - 1, END = V - 2
MASK = V - 1
END = V - 2


def tiny_causal_lm(
    arch: str = "qwen3",
    attn: str = "sdpa",
    seed: int = 0,
    vocab: int = V,
    *,
    width: tuple[int, int, int, int] = (32, 4, 2, 64),
    positions: int = 128,
    scale: float = 4.0,
) -> Any:
    """A random 2-layer stock causal LM (fp32, eval mode) with untied embeddings, so its predictions vary:
    `width` is (hidden size, attention heads, key-value heads, feed-forward size), a Qwen3's heads 8 wide; its
    matrices are multiplied by `scale` after the default init, so that distributions are far from uniform."""
    import transformers

    cfg_cls, model_cls = {
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "starcoder2": (transformers.Starcoder2Config, transformers.Starcoder2ForCausalLM),
    }[arch]
    hidden, heads, kv_heads, intermediate = width
    kwargs: dict[str, Any] = dict(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        intermediate_size=intermediate,
        max_position_embeddings=positions,
        tie_word_embeddings=False,
    )
    if arch == "qwen3":
        kwargs["head_dim"] = 8
    config = cfg_cls(**kwargs)
    config._attn_implementation = attn
    torch.manual_seed(seed)
    model = model_cls(config).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.mul_(scale)
    return model


def tiny_backend(
    arch: str = "qwen3", attn: str = "sdpa", shifted: bool = False, seed: int = 0, end: bool = True
) -> BlockDiffModel:
    return BlockDiffModel(
        tiny_causal_lm(arch, attn, seed), mask_id=MASK, shifted=shifted, end_ids=(END,) if end else ()
    )


def memoize_forwards(bk: BlockDiffModel) -> BlockDiffModel:
    """`bk` with its one forward pass memoized, for tests that decode thousands of times (the network is a
    deterministic function of its inputs and of the cache, so a replay is what a fresh pass returns); the
    decoders and the cache operations (commit, draft, verify, rollback) still run for real on every call.

    A pass's result depends on its inputs and on the cache's entries, and each entry on the pass that wrote it:
    the key names every entry the cache holds by (the pass that wrote it, its row). A replay gives back the
    logits, the hidden states and the cache as the pass left them (a copy), and counts the pass."""
    import copy

    real = bk.forward
    passes: dict[tuple[Any, ...], int] = {}  # a pass's key -> its number
    stored: dict[int, tuple[torch.Tensor, Any, Any]] = {}  # number -> logits, cache, hidden
    written: dict[int, list[tuple[int, int]]] = {}  # id(state) -> what wrote each entry of its cache

    def forward(
        state: Any, ids: torch.Tensor, positions: torch.Tensor, allowed: torch.Tensor, kind: Any, keep: int = 0
    ) -> torch.Tensor:
        entries = written.setdefault(id(state), [])
        del entries[state.length :]  # rolled back since (the cache holds exactly [0, length) before a pass)
        key = (tuple(entries), tuple(ids.tolist()), tuple(positions.tolist()), tuple(allowed.flatten().tolist()))
        key += (tuple(allowed.shape), kind, keep, state.want_hidden)
        number = passes.setdefault(key, len(passes))
        if number in stored:
            logits, cache, hidden = stored[number]
            state.cache = copy.deepcopy(cache)
            if state.want_hidden:
                state.hidden = hidden.clone()
            state.nfe += 1
            state.counts[kind] += 1
            out = logits.clone()
        else:
            out = real(state, ids, positions, allowed, kind, keep)
            hidden = state.hidden.clone() if state.want_hidden else None
            stored[number] = (out.clone(), copy.deepcopy(state.cache), hidden)
        entries.extend((number, row) for row in range(int(ids.numel())))
        return out

    bk.forward = forward  # type: ignore[method-assign]
    return bk
