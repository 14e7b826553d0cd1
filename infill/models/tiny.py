"""A tiny random XLNet checkpoint in the project's folder format, for tests and benchmarks (no download).

Folder format (README "Model folder format"): HF XLNet `config.json` with an "infill" section,
`model.safetensors` (fp32), `tokenizer.json` (byte-level BPE, specials "<pad>", "<mask>", "<bos>").
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

# Built-in training text for the tiny tokenizer: a little code and prose, so merges exist for common pieces.
_TEXT = '''\
def mean(values):
    """Return the arithmetic mean of a non-empty list."""
    total = 0
    for value in values:
        total += value
    return total / len(values)


class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()


for i in range(10):
\tprint(i, i * i)
The quick brown fox jumps over the lazy dog. Any-subset models fill the masked positions of a text.
'''


def xlnet_shape(vocab_size: int, n_layer: int, d_model: int, n_head: int, d_inner: int | None = None) -> Any:
    """A small XLNetShape (bidirectional attention, no memory, no dropout)."""
    from infill.models.twostream import XLNetShape

    d_inner = d_inner or 4 * d_model
    return XLNetShape(vocab_size=vocab_size, d_model=d_model, n_layer=n_layer, n_head=n_head, d_inner=d_inner)


def random_xlnet(shape: Any, *, seed: int = 0, init_scale: float = 0.02) -> Any:
    """A TwoStreamXLNet with weights drawn from N(0, init_scale) by a generator seeded with `seed`; layer norms
    are the identity. A large `init_scale` makes the conditionals peaky and context-dependent."""
    import torch

    from infill.models.twostream import TwoStreamXLNet

    model = TwoStreamXLNet(shape)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            elif "layer_norm" in name:
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * init_scale)
    return model.eval()


def build_tiny_checkpoint(
    folder: str | Path,
    *,
    vocab_size: int = 320,
    n_layer: int = 2,
    d_model: int = 32,
    n_head: int = 2,
    max_length: int = 256,
    seed: int = 0,
    init_scale: float = 0.02,
    texts: list[str] | None = None,
) -> Path:
    """Write a random tiny XLNet + byte-level BPE tokenizer to `folder` (created) and return its path.

    `vocab_size` >= 259 (256 bytes + 3 specials). `init_scale` is the weight init std; larger values give
    peakier, less uniform distributions. Deterministic for a given seed.
    """
    from infill.models.tokenizer import SPECIALS, ByteBPETokenizer, train_byte_bpe
    from infill.models.xlnet_folder import save_folder

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_byte_bpe(texts or [_TEXT], vocab_size, SPECIALS)
    tok.save(str(folder / "tokenizer.json"))
    wrapped = ByteBPETokenizer.from_file(folder / "tokenizer.json")
    real_vocab = wrapped.vocab_size  # BPE may stop below vocab_size on little text
    shape = xlnet_shape(real_vocab, n_layer, d_model, n_head)
    model = random_xlnet(shape, seed=seed, init_scale=init_scale)
    cfg = shape.hf_config(pad_id=wrapped.pad_id, bos_id=wrapped.bos_id)
    cfg["initializer_range"] = init_scale
    cfg["infill"] = {
        "mask_id": wrapped.mask_id,
        "pad_id": wrapped.pad_id,
        "bos_id": wrapped.bos_id,
        "max_length": max_length,
        "tokenizer": "byte-bpe",
        "specials": list(SPECIALS),
        "provenance": f"random tiny XLNet from infill.models.tiny (seed {seed}); untrained",
    }
    save_folder(model, folder, cfg)
    return folder


def tiny_blockdiff_checkpoint(
    folder: str | Path,
    *,
    seed: int = 0,
    block_size: int = 4,
    fim: bool = True,
    shape: Any = None,
    texts: Sequence[str] = (),
    vocab_size: int = 300,
) -> Path:
    """A tiny RANDOM SDAR-layout block-diffusion checkpoint for tests and benchmarks (untrained: its fills are
    noise); `shape` is an infill.models.blockdiff_folder.ModelShape.

    fim=False leaves the FIM tokens out of the vocabulary, so fills go through the chat template."""
    from infill.models.blockdiff_folder import (
        FIM_MIDDLE,
        FIM_PREFIX,
        FIM_SUFFIX,
        ModelShape,
        build_model,
        build_tokenizer,
        save_folder,
    )

    shape = shape or ModelShape(hidden=32, layers=2, heads=2, kv_heads=1, head_dim=16, intermediate=64, max_length=256)
    corpus = list(texts) or [
        "def add(a, b):\n    return a + b\n",
        "for i in range(10):\n    print(i)\n",
        "class Point:\n    def __init__(self, x, y):\n        self.x = x\n",
    ]
    tok = build_tokenizer(corpus, vocab_size=vocab_size)
    if not fim:
        tok = _without_tokens(tok, (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
    model = build_model(max(tok.get_vocab().values()) + 1, shape, seed=seed)  # ids dropped above stay unused
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


# family -> (model_type, special tokens in id order, tokenizer_config tokens, whether the tokenizer adds the BOS)
AR_FAMILIES: dict[str, tuple[str, tuple[str, ...], dict[str, str], bool]] = {
    "qwen": (
        "qwen2",
        (
            "<|endoftext|>",
            "<|im_start|>",
            "<|im_end|>",
            "<|fim_prefix|>",
            "<|fim_middle|>",
            "<|fim_suffix|>",
            "<|fim_pad|>",
            "<|file_sep|>",
        ),
        {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        False,
    ),
    "starcoder": (
        "starcoder2",
        ("<|endoftext|>", "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>", "<file_sep>"),
        {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"},
        False,
    ),
    "codellama": (
        "llama",
        ("<unk>", "<s>", "</s>", "▁<PRE>", "▁<MID>", "▁<SUF>", "▁<EOT>"),
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
        True,
    ),
    "deepseek": (
        "llama",
        (
            "<｜begin▁of▁sentence｜>",
            "<｜end▁of▁sentence｜>",
            "<｜fim▁hole｜>",
            "<｜fim▁begin｜>",
            "<｜fim▁end｜>",
            "<|EOT|>",
        ),
        {"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>"},
        True,
    ),
    "plain": ("qwen2", ("<|endoftext|>",), {"eos_token": "<|endoftext|>"}, False),  # no FIM tokens
}


# Qwen2.5-Coder-0.5B's shape (494,032,768 parameters), for `shape=`: a random model that costs what the real one does
QWEN_CODER_05B_SHAPE: dict[str, Any] = {
    "hidden_size": 896,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "vocab_size": 151936,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": True,
}
# Qwen2.5-Coder-1.5B's shape (1,543,714,304 parameters)
QWEN_CODER_15B_SHAPE: dict[str, Any] = {
    **QWEN_CODER_05B_SHAPE,
    "hidden_size": 1536,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "intermediate_size": 8960,
}


def tiny_ar_checkpoint(
    folder: str | Path,
    family: str = "qwen",
    *,
    seed: int = 0,
    texts: Sequence[str] = (),
    vocab_size: int = 300,
    shape: dict[str, Any] | None = None,
    scale: float = 4.0,
) -> Path:
    """A RANDOM left-to-right code model in a family's folder layout (AR_FAMILIES: its model_type, its FIM and
    end tokens, a BOS where the family's tokenizer adds one), for tests and benchmarks; nothing is downloaded.

    `shape` overrides the transformers config (e.g. a real model's sizes; `vocab_size` there pads the network's
    vocabulary past the tokenizer's). 2-D weights are multiplied by `scale` so that the conditionals are peaky."""
    import torch
    import transformers
    from tokenizers import processors

    from infill.models.tokenizer import train_byte_bpe

    model_type, specials, tokens, adds_bos = AR_FAMILIES[family]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_byte_bpe(list(texts) or [_TEXT], vocab_size, specials)
    if adds_bos:
        bos = tokens["bos_token"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    tok.save(str(folder / "tokenizer.json"))
    tcfg = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False, **tokens}
    (folder / "tokenizer_config.json").write_text(
        json.dumps(tcfg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    kwargs: dict[str, Any] = dict(
        vocab_size=tok.get_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=64,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        eos_token_id=tok.token_to_id(tokens["eos_token"]),
        bos_token_id=tok.token_to_id(tokens["bos_token"]) if "bos_token" in tokens else None,
    )
    kwargs.update(shape or {})
    config_class, model_class = {
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "starcoder2": (transformers.Starcoder2Config, transformers.Starcoder2ForCausalLM),
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
    }[model_type]
    torch.manual_seed(seed)
    model = model_class(config_class(**kwargs)).float().eval()
    if scale != 1.0:
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() == 2:
                    p.mul_(scale)
    from infill.models.hf_folder import quiet_transformers

    with quiet_transformers():
        model.save_pretrained(str(folder))
    return folder
