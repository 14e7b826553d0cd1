"""Model folders and files by name, for the kinds' loaders (infill.core.kinds.load): the packaged models,
local folders and HF-cache repo ids (`resolve_folder`), GGUF files and Ollama's models (`resolve_gguf`), and the
AS-ARM (XLNet) folder's loader (`load_xlnet_folder`).

Never downloads: HF repo ids resolve only from the local cache (local_files_only / offline).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from infill.config import ModelSpec
from infill.errors import ModelError
from infill.models.hf_folder import read_json
from infill.models.registry import LoadedModel

WEIGHTS_DIR = Path(__file__).resolve().parent.parent / "weights"
# published XLNet checkpoints: relative positions, no hard limit; the ASSD paper used 1024
DEFAULT_MAX_LENGTH = 1024


def default_folder() -> Path:
    return WEIGHTS_DIR / "default"


def packaged_folder(name: str) -> Path | None:
    """The folder of the model packaged under infill/weights/NAME, or None."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    folder = WEIGHTS_DIR / name
    return folder if (folder / "config.json").is_file() else None


def resolve_folder(spec: ModelSpec) -> tuple[Path, str]:
    """(folder, provenance) for `spec.name`: "default", an existing path, or an HF repo id in the local
    cache."""
    name = spec.name
    if name == "default":
        folder = default_folder()
        if not (folder / "config.json").is_file():
            raise ModelError(f"the packaged default model is missing ({folder}); reinstall infill or pass --model PATH")
        return folder, "packaged default"
    if packaged_folder(name) is not None:  # a packaged model's name wins over a same-named folder (use ./NAME)
        return WEIGHTS_DIR / name, f"packaged {name}"
    path = Path(name).expanduser()
    if path.exists():
        _check_folder(path)
        return path, f"local folder {path}"
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelError(f"model folder {name} does not exist")
    folder = Path(_from_hf_cache(name, spec.revision))
    _check_folder(folder)
    return folder, f"HF cache {name}" + (f"@{spec.revision}" if spec.revision else "")


def _check_folder(path: Path) -> None:
    """ModelError unless `path` is a folder with config.json; one that holds GGUF files instead (what
    `hf download` leaves of a -GGUF repo) names them, since one of them is what --model takes."""
    if path.is_dir() and (path / "config.json").is_file():
        return
    ggufs = sorted(p.name for p in path.glob("*.gguf")) if path.is_dir() else []
    if not ggufs:
        raise ModelError(f"{path} is not a model folder (no config.json)")
    shown = ", ".join(ggufs[:3]) + (f" and {len(ggufs) - 3} more" if len(ggufs) > 3 else "")
    raise ModelError(
        f"{path} is not a model folder (no config.json) but holds GGUF files ({shown}): "
        f"pass one of them, --model {shlex.quote(str(path / ggufs[0]))}"
    )


def _from_hf_cache(repo_id: str, revision: str | None) -> str:
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - transformers depends on huggingface_hub
        raise ModelError("huggingface_hub is not installed; cannot look up cached models") from exc
    try:
        return str(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError, RevisionNotFoundError, HFValidationError ...
        rev = f" (revision {revision})" if revision else ""
        raise ModelError(
            f"model {repo_id!r}{rev} is not a local folder, an Ollama model or in the HF cache; infill never "
            f"downloads (fetch it once with `hf download {repo_id}` or `ollama pull`, or pass a folder or a .gguf file)"
        ) from exc


def read_config(folder: Path) -> dict[str, Any]:
    return read_json(folder / "config.json")


def resolve_gguf(spec: ModelSpec) -> tuple[Path, str, str | None] | None:
    """(file, provenance, Ollama name or None) when `spec.name` is a GGUF file or a model in Ollama's store
    (infill.models.ollama), else None (a folder or an HF repo id: resolve_folder). A name with a tag
    (`qwen2.5-coder:0.5b`) that Ollama's store lacks, or a missing .gguf path, is a ModelError."""
    from infill.models import ollama
    from infill.models.gguf import is_gguf

    name = spec.name
    if name == "default" or packaged_folder(name) is not None:
        return None
    path = Path(name).expanduser()
    if path.is_file():
        if path.suffix.lower() == ".gguf" or is_gguf(path):
            return path, f"GGUF file {path}", None
        return None  # resolve_folder says it is not a model folder
    if path.exists():
        return None
    if path.suffix.lower() == ".gguf":
        raise ModelError(f"GGUF file {name} does not exist")
    found = ollama.find(name)
    if found is not None:
        return found.blob, f"Ollama {found.name}", found.name
    if ":" in name and ollama.parts(name) is not None:  # a tag: a name as Ollama shows it
        raise ollama.not_found(name)
    return None


def load_xlnet_folder(folder: Path, spec: ModelSpec, cfg: dict[str, Any], provenance: str) -> LoadedModel:
    """An XLNet folder (config.json `cfg`) as an XLNetAnySubset, kind "asarm" (infill.core.kinds.asarm)."""
    from infill.models.tokenizer import load_tokenizer
    from infill.models.twostream import TwoStreamXLNet, XLNetShape
    from infill.models.weight_files import read_weights
    from infill.models.xlnet import XLNetAnySubset

    tokenizer = load_tokenizer(folder)
    meta: dict[str, Any] = cfg.get("infill") or {}
    mask_id = meta.get("mask_id", tokenizer.mask_id)
    if mask_id is None:
        raise ModelError(f"{folder}: no <mask> token (config.json infill.mask_id or the tokenizer)")
    try:
        net = TwoStreamXLNet(XLNetShape.from_config(cfg))
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{folder}: unsupported XLNet config: {exc}") from exc
    try:
        net.load_file_state(read_weights(folder))
    except Exception as exc:  # safetensors / OSError / ValueError on a missing, corrupt or mismatched file
        raise ModelError(f"cannot load XLNet weights from {folder}: {exc}".splitlines()[0]) from exc
    model = XLNetAnySubset(
        net,
        mask_id=int(mask_id),
        pad_id=meta.get("pad_id", tokenizer.pad_id),
        bos_id=meta.get("bos_id", tokenizer.bos_id),
        max_length=int(meta.get("max_length", DEFAULT_MAX_LENGTH)),
        device=spec.device,
        bf16=spec.bf16,
        engine=spec.engine,
        folder=str(folder),
    )
    params = model.parameter_count()
    info = {
        "path": str(folder),
        "provenance": meta.get("provenance", provenance),
        "source": provenance,
        "parameters": params,
        "device": str(model.device),
        "bf16": model.bf16,
        "engine": model.engine,
        "tokenizer": type(tokenizer).__name__,
        "max_length": model.max_length,
    }
    return LoadedModel(name=spec.name, kind="asarm", model=model, tokenizer=tokenizer, info=info)
