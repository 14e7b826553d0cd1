"""Block-diffusion models for `infill`: tokenizer, Qwen3-architecture model, the block-diffusion training
objective with fill-in-the-middle formatting, and the SDAR folder layout they are saved in.

Folder layout (what `infill.models.blockdiff.load_folder` reads; the same as a released SDAR checkpoint):
  config.json            Qwen3 config keys with `model_type: "sdar"`, `architectures`, `auto_map` (ignored:
                         remote code never runs) and an "infill" section {"mask_token", "block_size", ...}
  model.safetensors      Qwen3 tensor names, fp32
  tokenizer.json         HF tokenizers byte-level BPE, exact round trip; specials in SPECIALS
  tokenizer_config.json  tokenizer class, eos / mask tokens, chat template
  generation_config.json eos_token_id

Training objective (BD3-LM / SDAR): the sequence is cut into blocks of B tokens. Each block gets its own mask
rate t ~ U(eps, 1]; its masked positions are predicted from the CLEAN previous blocks and the NOISY current
block. One forward handles all blocks with the 2N layout [x_t ; x_0]: noisy block b sees noisy block b
(bidirectional) and clean blocks < b; clean block b sees clean blocks <= b. Loss: cross-entropy on the
masked positions, weighted by 1/t.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass

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
    """Train a byte-level BPE (HF tokenizers) with SPECIALS; "\\n" is its own pre-token, so line boundaries
    are token boundaries, and decode(encode(s)) == s for every string."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


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
) -> Path:
    """Write `model` (a Qwen3ForCausalLM) and `tokenizer` (tokenizers.Tokenizer) in the SDAR layout above."""
    from safetensors.torch import save_file

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
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    tokenizer.save(str(out / "tokenizer.json"))
    tcfg: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": END,
        "pad_token": END,
        "mask_token": MASK,
        "model_max_length": int(model.config.max_position_embeddings),
        "clean_up_tokenization_spaces": False,
    }
    if chat_template is not None:
        tcfg["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(tcfg, indent=2) + "\n", encoding="utf-8")
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": end_id}) + "\n", encoding="utf-8")
    return out


def tiny_checkpoint(
    folder: str | Path,
    *,
    seed: int = 0,
    block_size: int = 4,
    fim: bool = True,
    shape: ModelShape | None = None,
    texts: Sequence[str] = (),
) -> Path:
    """A tiny RANDOM SDAR-layout checkpoint for tests and benchmarks (untrained: its fills are noise).

    fim=False leaves the FIM tokens out of the vocabulary, so fills go through the chat template."""
    shape = shape or ModelShape(
        hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_length=256
    )
    corpus = list(texts) or [
        "def add(a, b):\n    return a + b\n",
        "for i in range(10):\n    print(i)\n",
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n",
    ]
    tok = build_tokenizer(corpus, vocab_size=300)
    if not fim:
        tok = _without_tokens(tok, (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
    model = build_model(tok.get_vocab_size(), shape, seed=seed)
    return save_folder(folder, model, tok, block_size=block_size, provenance={"random": True, "seed": seed})


def _without_tokens(tok: Any, drop: Sequence[str]) -> Any:
    """A copy of `tok` whose added-token list lacks `drop` (their ids stay unused)."""
    from tokenizers import Tokenizer

    data = json.loads(tok.to_str())
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] not in drop]
    vocab = data["model"]["vocab"]
    for t in drop:
        vocab.pop(t, None)
    return Tokenizer.from_str(json.dumps(data))
