"""An XLNet model folder on disk, in Hugging Face's layout: config.json and the weights (model.safetensors, its
shards with model.safetensors.index.json, or a published pytorch_model.bin), read into and written from
infill.models.twostream.TwoStreamXLNet."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from infill.models.hf_folder import read_json
from infill.models.twostream import TwoStreamXLNet, XLNetShape
from infill.models.weight_files import read_weights, write_weights


def load_folder(folder: Path) -> tuple[TwoStreamXLNet, dict[str, Any]]:
    """(model in eval mode, config dict) from an HF XLNet folder (config.json + weights)."""
    config = read_json(folder / "config.json")
    model = TwoStreamXLNet(XLNetShape.from_config(config))
    model.load_file_state(read_weights(folder))
    return model.eval(), config


def save_folder(
    model: TwoStreamXLNet,
    folder: Path,
    config: dict[str, Any],
    dtype: torch.dtype | None = None,
    shard_mb: float | None = None,
) -> None:
    """Write config.json and the weights in HF's layout: model.safetensors (fp32 unless `dtype`), or shards
    model-0000i-of-0000n.safetensors of at most `shard_mb` MB with model.safetensors.index.json."""
    write_weights(model.state_for_file(), folder, dtype, shard_mb)
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
