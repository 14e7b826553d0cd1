"""Block-diffusion checkpoints from a local folder: a STOCK transformers decoder (Qwen3, Qwen2, Llama) loaded
without remote code, wrapped as infill.models.blockdiff_model.BlockDiffModel (the block-causal KV-cache model
the decoders drive; its conventions are in that module's docstring and docs/blockdiff.md).

BlockDiffModel, KVState and ForwardKind are importable from here too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infill.config import ModelSpec
from infill.errors import InputError, ModelError
from infill.hardware import fast_bf16, resolve_device
from infill.models.blockdiff_model import BlockDiffModel, ForwardKind, KVState
from infill.models.hf_folder import (
    END_TOKEN_CANDIDATES,
    HFTokenizer,
    check_memory,
    check_vocabulary,
    end_token_ids,
    generation_config,
    load_network,
    load_tokenizer,
    model_folder,
    read_json,
)
from infill.models.registry import LoadedModel

__all__ = [
    "ARCHITECTURES",
    "END_TOKEN_CANDIDATES",
    "MASK_TOKEN_CANDIDATES",
    "BlockDiffModel",
    "ForwardKind",
    "HFTokenizer",
    "KVState",
    "load_folder",
]

# model_type in config.json -> (transformers class name, right-shifted?)
ARCHITECTURES: dict[str, tuple[str, bool]] = {
    "sdar": ("Qwen3ForCausalLM", False),
    "qwen3": ("Qwen3ForCausalLM", False),
    "qwen2": ("Qwen2ForCausalLM", True),
    "fast_dllm_v2": ("Qwen2ForCausalLM", True),
    "fast_dllm_qwen": ("Qwen2ForCausalLM", True),
    "llama": ("LlamaForCausalLM", False),
}
MASK_TOKEN_CANDIDATES = ("<|MASK|>", "<|mask|>", "<mask>", "[MASK]")


def _first_int(*values: Any) -> int | None:
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def load_folder(
    path: str | Path,
    spec: ModelSpec,
    *,
    mask_token: str | None = None,
    block_size: int | None = None,
    shifted: bool | None = None,
    attn_implementation: str = "sdpa",
) -> LoadedModel:
    """Load a block-diffusion checkpoint folder (config.json, *.safetensors, tokenizer files) into a STOCK
    transformers class.

    Never executes remote code: `auto_map` and the folder's own modeling files are ignored; `model_type`
    picks the class (ARCHITECTURES; SDAR folders are Qwen3 weights with `model_type: sdar`). Files are read
    locally only. The mask token, block size and shift convention come from the keyword arguments (flags),
    else config.json (its "infill" section, then `mask_token_id` / `block_size` / `bd_size` /
    `block_length`), else the tokenizer (`<|MASK|>`, ...).
    """
    folder = model_folder(path)
    raw = read_json(folder / "config.json")
    section: dict[str, Any] = raw["infill"] if isinstance(raw.get("infill"), dict) else {}
    model_type = str(raw.get("model_type", "")).lower()
    if model_type not in ARCHITECTURES:
        raise ModelError(f"{folder}: unsupported model_type {model_type!r} (known: {', '.join(sorted(ARCHITECTURES))})")
    class_name, default_shift = ARCHITECTURES[model_type]
    is_shifted = shifted if shifted is not None else bool(section.get("shifted", default_shift))
    device = resolve_device(spec.device).type  # ModelError for cuda without a GPU
    check_memory(folder, raw, device)
    gen = generation_config(folder)
    tokenizer = load_tokenizer(folder)
    check_vocabulary(folder, raw, tokenizer)
    mask_id = _mask_id(folder, raw, section, gen, tokenizer, mask_token)
    bsize = _block_size(raw, section, gen, block_size)
    end_ids = end_token_ids(raw, gen, tokenizer)
    end_ids.discard(mask_id)
    model = load_network(folder, raw, class_name, device, attn_implementation)
    backend = BlockDiffModel(
        model,
        mask_id=mask_id,
        shifted=is_shifted,
        end_ids=tuple(sorted(end_ids)),
        block_size=bsize,
        clean_attention=section.get("clean_attention"),
        bf16=bool(spec.bf16) and fast_bf16(device),
        folder=folder,
    )
    from infill.models.ssmd import attach_head

    head = attach_head(folder, backend)  # None without ssmd_head.safetensors
    info = {
        "path": str(folder),
        "architecture": class_name,
        "model_type": model_type,
        "shifted": is_shifted,
        "block_size": bsize,
        "mask_id": mask_id,
        "parameters": sum(p.numel() for p in model.parameters()),
        "device": device,
        "provenance": section.get("provenance"),
        "ssmd_head": None if head is None else head["parameters"],
    }
    return LoadedModel(name=spec.name, kind="blockdiff", model=backend, tokenizer=tokenizer, info=info)


def _mask_id(
    folder: Path,
    raw: dict[str, Any],
    section: dict[str, Any],
    gen: dict[str, Any],
    tokenizer: Any,
    mask_token: str | None,
) -> int:
    """The mask token's id: `mask_token` (the flag), else config.json's "infill" section, its own keys, the
    generation config, then the usual names (MASK_TOKEN_CANDIDATES) and the tokenizer's own mask token."""
    mask_id: int | None
    if mask_token is not None:
        mask_id = tokenizer.token_id(mask_token)
        if mask_id is None:
            raise InputError(f"mask token {mask_token!r} is not in the tokenizer of {folder}")
    else:
        mask_id = _first_int(section.get("mask_id"), raw.get("mask_token_id"), gen.get("mask_token_id"))
        for cand in (section.get("mask_token"), raw.get("mask_token"), *MASK_TOKEN_CANDIDATES):
            if mask_id is None and isinstance(cand, str):
                mask_id = tokenizer.token_id(cand)
        if mask_id is None and getattr(tokenizer.hf, "mask_token_id", None) is not None:
            mask_id = int(tokenizer.hf.mask_token_id)
    if mask_id is None:
        raise ModelError(f"{folder}: no mask token found (looked for {', '.join(MASK_TOKEN_CANDIDATES)}); pass one")
    return mask_id


def _block_size(raw: dict[str, Any], section: dict[str, Any], gen: dict[str, Any], block_size: int | None) -> int:
    """The block size: `block_size` (the flag), else config.json's keys or the generation config's, else 4."""
    bsize = (
        block_size
        or _first_int(
            section.get("block_size"),
            raw.get("block_size"),
            raw.get("bd_size"),
            raw.get("block_length"),
            gen.get("block_size"),
            gen.get("block_length"),
        )
        or 4
    )
    if bsize < 1:
        raise InputError(f"block size must be >= 1, got {bsize}")
    return bsize
