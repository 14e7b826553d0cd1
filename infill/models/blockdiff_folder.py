"""A block-diffusion model folder in the SDAR layout, written: a fresh Qwen3-architecture model of a small shape,
its byte-level BPE with the block-diffusion specials, and the folder the trainer (infill.training.blockdiff) and
the tiny test models (infill.models.tiny) save.

Folder layout (what `infill.models.blockdiff.load_folder` reads; the same as a released SDAR checkpoint):
  config.json            Qwen3 config keys with `model_type: "sdar"`, `architectures`, `auto_map` (ignored:
                         remote code never runs) and an "infill" section {"mask_token", "block_size", ...}
  model.safetensors      Qwen3 tensor names, fp32 (or bf16; or HF-style shards model-0000i-of-0000n.safetensors
                         with model.safetensors.index.json)
  tokenizer.json         HF tokenizers byte-level BPE, exact round trip; specials in SPECIALS
  tokenizer_config.json  tokenizer class, eos / mask tokens, chat template
  generation_config.json eos_token_id
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

END = "<|endoftext|>"
MASK = "<|MASK|>"
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
SPECIALS = (END, MASK, FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class ModelShape:
    """A small Qwen3 shape. Defaults give about 5M parameters at an 8k vocabulary."""

    hidden: int = 256  # model width
    layers: int = 4
    heads: int = 4
    kv_heads: int = 2  # grouped-query attention
    head_dim: int = 64
    intermediate: int = 768  # SwiGLU width
    max_length: int = 512


def build_tokenizer(texts: Iterable[str], vocab_size: int = 8192) -> Any:
    """Train a byte-level BPE (HF tokenizers) with SPECIALS; every line break is its own pre-token, so line
    boundaries are token boundaries, and decode(encode(s)) == s for every string (the project's one BPE recipe:
    infill.models.tokenizer.train_byte_bpe)."""
    from infill.models.tokenizer import train_byte_bpe

    return train_byte_bpe(texts, vocab_size, SPECIALS)


def build_model(vocab_size: int, shape: ModelShape, seed: int = 0, attn_implementation: str = "sdpa") -> Any:
    """A randomly initialised stock Qwen3ForCausalLM of the given shape (fp32)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        vocab_size=vocab_size,
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim,
        intermediate_size=shape.intermediate,
        max_position_embeddings=shape.max_length,
        tie_word_embeddings=True,
    )
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    return Qwen3ForCausalLM(config).float()


def save_folder(
    folder: str | Path,
    model: Any,
    tokenizer: Any,
    *,
    block_size: int,
    provenance: dict[str, Any] | None = None,
    chat_template: str | None = CHAT_TEMPLATE,
    dtype: torch.dtype | None = None,
    shard_mb: float | None = None,
) -> Path:
    """Write `model` (a Qwen3ForCausalLM) and `tokenizer` (tokenizers.Tokenizer) in the SDAR layout above; the
    weights in `dtype` (fp32 unless given) and, with `shard_mb`, as HF-style shards of at most that many MB."""
    from infill.models.weight_files import write_weights

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    end_id = tokenizer.token_to_id(END)
    cfg = model.config.to_dict()
    for key in (
        "architectures",
        "model_type",
        "auto_map",
        "transformers_version",
        "_attn_implementation_autoset",
    ):
        cfg.pop(key, None)
    cfg.update(
        {
            "architectures": ["SDARForCausalLM"],
            "model_type": "sdar",
            "auto_map": {
                "AutoConfig": "configuration_sdar.SDARConfig",
                "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM",
            },
            "eos_token_id": end_id,
            "pad_token_id": end_id,
            "bos_token_id": None,
            "infill": {
                "kind": "blockdiff",
                "mask_token": MASK,
                "block_size": block_size,
                "provenance": provenance,
            },
        }
    )
    (out / "config.json").write_text(json.dumps(cfg, indent=2, default=str) + "\n", encoding="utf-8")
    state = dict(model.state_dict())
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    write_weights(state, out, dtype, shard_mb)
    tokenizer.save(str(out / "tokenizer.json"))
    tcfg: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": END,
        "pad_token": END,
        "mask_token": MASK,
        "clean_up_tokenization_spaces": False,
    }
    if chat_template is not None:
        tcfg["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n", encoding="utf-8")
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": end_id}) + "\n", encoding="utf-8")
    return out
