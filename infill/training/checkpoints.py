"""Checkpoints of training runs (one safe reader and one atomic writer for every trainer), the AS-ARM run's
checkpoint (run-dir/last.pt: model, optimizer, state and random generators) and the export of its weights as a
model folder `infill` and transformers both load."""

from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infill.errors import InputError
from infill.training.tokenizer import BOS_ID, MASK_ID, PAD_ID

if TYPE_CHECKING:
    import torch

    from infill.models.twostream import TwoStreamXLNet
    from infill.training.layouts import Batches
    from infill.training.objective import TrainConfig


def write_checkpoint(path: Path, payload: dict[str, Any]) -> None:
    """Write a checkpoint atomically: a temporary file beside `path`, flushed to disk, then renamed over it, so
    an interrupted save leaves the previous checkpoint intact. `payload` holds tensors, numbers, strings and
    containers of them only, so that `read_checkpoint` can load it without unpickling code."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with tmp.open("wb") as handle:
            torch.save(payload, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint written by `write_checkpoint`, loaded with torch's restricted unpickler (weights_only): a
    crafted file cannot run code. A truncated, foreign or malicious file is one InputError naming it."""
    import pickle
    import zipfile

    from infill.models.weight_files import torch_load

    try:
        loaded = torch_load(path)
    except (pickle.UnpicklingError, zipfile.BadZipFile, RuntimeError, EOFError, ValueError, TypeError) as exc:
        from infill.errors import one_line

        raise InputError(f"{path}: not a training checkpoint this version can read ({one_line(str(exc))})") from exc
    except OSError as exc:
        raise InputError(f"{path}: cannot read the checkpoint ({exc.strerror or exc})") from exc
    if not isinstance(loaded, dict):
        raise InputError(f"{path}: not a training checkpoint (a {type(loaded).__name__}, not a mapping)")
    return loaded


def config_to_json(cfg: TrainConfig) -> dict[str, Any]:
    return asdict(cfg)


def config_from_json(d: dict[str, Any]) -> TrainConfig:
    from infill.training.objective import ModelShape, TrainConfig

    d = dict(d)
    d["shape"] = ModelShape(**d["shape"])
    return TrainConfig(**d)


@dataclass
class TrainState:
    step: int = 0
    tokens_seen: int = 0  # sequence positions processed (batch * seq_len per step)
    targets_seen: int = 0  # loss-carrying masked positions
    elapsed: float = 0.0  # training seconds across resumes
    last_eval: float | None = None
    history: list[dict[str, float]] = field(default_factory=list)


def save_checkpoint(
    path: Path,
    model: TwoStreamXLNet,
    opt: torch.optim.Optimizer,
    state: TrainState,
    cfg: TrainConfig,
    batches: Batches,
) -> None:
    """Atomically write model + optimizer + state + rng (numpy generator state and golden counter)."""
    import torch

    write_checkpoint(
        path,
        {
            "model": model.state_dict(),
            "optimizer": opt.state_dict(),
            "state": asdict(state),
            "config": config_to_json(cfg),
            "rng": batches.sampler.rng.bit_generator.state,
            "counter": batches.sampler.counter,
            "python_rng": random.getstate(),
            "torch_rng": torch.get_rng_state(),
        },
    )


def export_model(
    model: TwoStreamXLNet,
    tokenizer_json: Path,
    folder: Path,
    seq_len: int,
    provenance: dict[str, Any],
    dtype: torch.dtype | None = None,
    shard_mb: float | None = None,
) -> None:
    """Write a model folder: config.json (HF XLNet + "infill" section), model.safetensors (fp32 unless
    `dtype`; HF-style shards with an index when `shard_mb`), tokenizer.json. The folder also loads with
    transformers' `XLNetLMHeadModel.from_pretrained`."""
    import shutil

    from infill.models.xlnet_folder import save_folder

    config = model.shape.hf_config(PAD_ID, BOS_ID)
    config["infill"] = {
        "mask_id": MASK_ID,
        "pad_id": PAD_ID,
        "bos_id": BOS_ID,
        "max_length": seq_len,
        "tokenizer": "byte-bpe",
        "provenance": provenance,
    }
    save_folder(model.float(), folder, config, dtype=dtype, shard_mb=shard_mb)
    if tokenizer_json.resolve() != (folder / "tokenizer.json").resolve():
        shutil.copyfile(tokenizer_json, folder / "tokenizer.json")


def provenance(cfg: TrainConfig, state: TrainState, corpus: Path) -> dict[str, Any]:
    """What produced these weights: corpus summary, steps, tokens, held-out NLL."""
    summary: dict[str, Any] = {}
    manifest = corpus / "manifest.json"
    if corpus.is_file():
        import numpy as np

        summary = {"pack": corpus.name, **json.loads(str(np.load(corpus)["meta"]))}
    elif manifest.exists():
        m = json.loads(manifest.read_text(encoding="utf-8"))
        summary = {
            "files": m["totals"]["files"],
            "bytes": m["totals"]["bytes"],
            "heldout_files": m["totals"]["heldout_files"],
            "packages": len(m["packages"]),
            "python": m.get("python"),
        }
    return {
        "trainer": "infill train asarm",
        "corpus": summary,
        "steps": state.step,
        "tokens_seen": state.tokens_seen,
        "targets_seen": state.targets_seen,
        "train_seconds": round(state.elapsed),
        "seq_len": cfg.seq_len,
        "batch_size": cfg.batch_size,
        "lr": cfg.lr,
        "seed": cfg.seed,
        "max_package_bytes": cfg.max_package_bytes,
        "heldout_nll_per_token": state.last_eval,
    }


def load_checkpoint_model(run_dir: Path) -> tuple[TwoStreamXLNet, TrainConfig, TrainState]:
    """The model, config and state of `run_dir/last.pt` (for export and measurement)."""
    from infill.training.objective import build_model

    ckpt = read_checkpoint(run_dir / "last.pt")
    cfg = config_from_json(ckpt["config"])
    model = build_model(cfg.shape, cfg.seq_len)
    model.load_state_dict(ckpt["model"])
    return model, cfg, TrainState(**ckpt["state"])
