"""A tiny random XLNet checkpoint in the project's folder format, for tests and benchmarks (no download).

Folder format (README "Model folder format"): HF XLNet `config.json` with an "infill" section,
`model.safetensors` (fp32), `tokenizer.json` (byte-level BPE, specials "<pad>", "<mask>", "<bos>").
"""

from __future__ import annotations

import json
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


def xlnet_config(vocab_size: int, n_layer: int, d_model: int, n_head: int, d_inner: int | None = None) -> Any:
    """A small `XLNetConfig` (bidirectional attention, no mems, no dropout)."""
    from transformers import XLNetConfig

    return XLNetConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layer=n_layer,
        n_head=n_head,
        d_inner=d_inner or 4 * d_model,
        attn_type="bi",
        mem_len=None,
        dropout=0.0,
        use_mems_eval=False,
        use_mems_train=False,
    )


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
    import torch
    from transformers import XLNetLMHeadModel

    from infill.models.tokenizer import SPECIALS, ByteBPETokenizer, train_byte_bpe

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = train_byte_bpe(texts or [_TEXT], vocab_size)
    tok.save(str(folder / "tokenizer.json"))
    wrapped = ByteBPETokenizer.from_file(folder / "tokenizer.json")
    real_vocab = wrapped.vocab_size  # BPE may stop below vocab_size on little text

    config = xlnet_config(real_vocab, n_layer, d_model, n_head)
    config.initializer_range = init_scale
    config.pad_token_id = wrapped.pad_id
    config.bos_token_id = wrapped.bos_id
    config.eos_token_id = None
    gen = torch.Generator().manual_seed(seed)
    model = XLNetLMHeadModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            elif "layer_norm" in name or name.endswith(".bias"):
                p.zero_()
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * init_scale)
    _quiet_save(model, folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["infill"] = {
        "mask_id": wrapped.mask_id,
        "pad_id": wrapped.pad_id,
        "bos_id": wrapped.bos_id,
        "max_length": max_length,
        "tokenizer": "byte-bpe",
        "specials": list(SPECIALS),
        "provenance": f"random tiny XLNet from infill.models.tiny (seed {seed}); untrained",
    }
    (folder / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    gen_cfg = folder / "generation_config.json"
    if gen_cfg.exists():
        gen_cfg.unlink()
    return folder


def _quiet_save(model: Any, folder: Path) -> None:
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        model.save_pretrained(str(folder), safe_serialization=True)
    finally:
        if was:
            hf_logging.enable_progress_bar()
