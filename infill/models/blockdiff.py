"""Block-diffusion checkpoints from a local folder: a STOCK transformers decoder (Qwen3, Qwen2, Llama) loaded
without remote code, wrapped as infill.models.blockdiff_model.BlockDiffModel (the block-causal KV-cache model
the decoders drive; its conventions are in that module's docstring and docs/blockdiff.md).

BlockDiffModel, KVState and ForwardKind are importable from here too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infill.config import ModelSpec
from infill.errors import InputError, ModelError
from infill.hardware import fast_bf16, resolve_device
from infill.models.blockdiff_model import BlockDiffModel, ForwardKind, KVState
from infill.models.loading import read_json
from infill.models.registry import LoadedModel

__all__ = [
    "ARCHITECTURES",
    "END_TOKEN_CANDIDATES",
    "FIM_TOKENS",
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
END_TOKEN_CANDIDATES = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>")
FIM_TOKENS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>")
_CONFIG_DROP = ("auto_map", "architectures", "model_type", "infill", "transformers_version")


# ---- loading from a local folder ------------------------------------------------------------------------


class HFTokenizer:
    """The Tokenizer protocol over a transformers tokenizer. User text never turns into special tokens."""

    def __init__(self, tok: Any) -> None:
        self.hf = tok

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False, split_special_tokens=True, verbose=False))

    def decode(self, ids: list[int]) -> str:
        return str(self.hf.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False))

    def token_id(self, token: str) -> int | None:
        """The id of a single (special) token, or None when the vocabulary lacks it."""
        vocab = self.hf.get_vocab()
        return int(vocab[token]) if token in vocab else None

    @property
    def chat_template(self) -> str | None:
        return getattr(self.hf, "chat_template", None)

    def chat_prompt(self, user: str) -> list[int]:
        text = self.hf.apply_chat_template(
            [{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True
        )
        return list(self.hf.encode(text, add_special_tokens=False))


def _load_tokenizer(folder: Path) -> HFTokenizer:
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if not (folder / "tokenizer.json").exists() and not (folder / "tokenizer_config.json").exists():
        raise ModelError(f"{folder} has no tokenizer.json")
    try:
        tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True, trust_remote_code=False)
    except (ValueError, OSError, KeyError, TypeError):
        # e.g. tokenizer_config names a remote-code class: the fast tokenizer file alone is enough
        tok_file = folder / "tokenizer.json"
        if not tok_file.exists():
            raise ModelError(f"{folder}: cannot load its tokenizer without remote code") from None
        tok = PreTrainedTokenizerFast(tokenizer_file=str(tok_file))
        tcfg = folder / "tokenizer_config.json"
        if tcfg.exists():
            template = read_json(tcfg).get("chat_template")
            if isinstance(template, str):
                tok.chat_template = template
    return HFTokenizer(tok)


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
    import torch
    import transformers
    from safetensors import SafetensorError

    folder = Path(path)
    if not folder.is_dir():
        raise ModelError(f"model folder not found: {folder}")
    raw = read_json(folder / "config.json")
    section: dict[str, Any] = raw["infill"] if isinstance(raw.get("infill"), dict) else {}
    model_type = str(raw.get("model_type", "")).lower()
    if model_type not in ARCHITECTURES:
        raise ModelError(f"{folder}: unsupported model_type {model_type!r} (known: {', '.join(sorted(ARCHITECTURES))})")
    class_name, default_shift = ARCHITECTURES[model_type]
    is_shifted = shifted if shifted is not None else bool(section.get("shifted", default_shift))

    cls = getattr(transformers, class_name)
    config_cls = cls.config_class
    config = config_cls(**{k: v for k, v in raw.items() if k not in _CONFIG_DROP})
    gen_path = folder / "generation_config.json"
    gen = read_json(gen_path) if gen_path.exists() else {}

    with _quiet_transformers():
        tokenizer = _load_tokenizer(folder)
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

    end_ids: set[int] = set()
    for src in (raw.get("eos_token_id"), gen.get("eos_token_id")):
        if isinstance(src, int):
            end_ids.add(src)
        elif isinstance(src, list):
            end_ids.update(int(x) for x in src)
    if getattr(tokenizer.hf, "eos_token_id", None) is not None:
        end_ids.add(int(tokenizer.hf.eos_token_id))
    for tok in END_TOKEN_CANDIDATES:
        tid = tokenizer.token_id(tok)
        if tid is not None:
            end_ids.add(tid)
    end_ids.discard(mask_id)

    device = resolve_device(spec.device).type  # ModelError for cuda without a GPU
    try:
        with _quiet_transformers():  # "a model of type sdar ..." is expected here: that is the point
            model = cls.from_pretrained(
                str(folder),
                config=config,
                dtype=torch.float32,
                local_files_only=True,
                trust_remote_code=False,
                attn_implementation=attn_implementation,
            )
    except (OSError, ValueError, RuntimeError, SafetensorError) as exc:
        raise ModelError(f"{folder}: cannot load weights into {class_name}: {exc}") from exc
    model.to(device).eval()
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


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' notices and progress bars for one call, restoring its settings afterwards."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
