"""Model weights on disk in Hugging Face's layout, for every folder kind this project writes: model.safetensors,
or shards model-0000i-of-0000n.safetensors with model.safetensors.index.json (or, read only, a published
pytorch_model.bin)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"  # HF's sharded layout: {"metadata": ..., "weight_map": {tensor: file}}


def torch_load(path: Path) -> Any:
    """torch.load with torch's restricted unpickler (weights_only: a crafted file cannot run code), quietly: torch
    warns on stderr about a file it is about to refuse (a plain pickle: "Detected pickle protocol 4 ..."), and a
    refusal is one line of the caller's. Raises what torch.load raises."""
    import warnings

    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.load(path, map_location="cpu", weights_only=True)


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """A folder's tensors as fp32: model.safetensors, its HF-style shards, or a published pytorch_model.bin."""
    from safetensors.torch import load_file

    if (folder / WEIGHTS).is_file():
        tensors = load_file(str(folder / WEIGHTS))
    elif (folder / INDEX).is_file():
        index = json.loads((folder / INDEX).read_text(encoding="utf-8"))
        tensors = {}
        for name in sorted(set(index["weight_map"].values())):
            tensors.update(load_file(str(folder / name)))
    elif (folder / "pytorch_model.bin").is_file():
        tensors = torch_load(folder / "pytorch_model.bin")
    else:
        raise OSError(f"{folder}: no {WEIGHTS}, {INDEX} or pytorch_model.bin")
    return {k: v.float() for k, v in tensors.items()}


def write_weights(
    tensors: dict[str, torch.Tensor], folder: Path, dtype: torch.dtype | None = None, shard_mb: float | None = None
) -> None:
    """Write `tensors` as model.safetensors (in `dtype` when given), or as shards of at most `shard_mb` MB with
    model.safetensors.index.json; weight files of an earlier layout in `folder` are removed first."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in tensors.items()}
    if dtype is not None:
        tensors = {k: v.to(dtype) for k, v in tensors.items()}
    for old in [folder / WEIGHTS, folder / INDEX, *folder.glob("model-*-of-*.safetensors")]:
        old.unlink(missing_ok=True)
    if shard_mb is None:
        save_file(tensors, str(folder / WEIGHTS), metadata={"format": "pt"})
        return
    limit = int(shard_mb * 1e6) - 64_000  # room for each file's header
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if shards[-1] and size + nbytes > limit:
            shards.append({})
            size = 0
        shards[-1][name] = tensors[name]
        size += nbytes
    weight_map = {}
    for i, shard in enumerate(shards, 1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, str(folder / name), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(shard, name))
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / INDEX).write_text(json.dumps(index, indent=1) + "\n", encoding="utf-8")
