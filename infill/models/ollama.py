"""Ollama's model store, read-only: the names `ollama list` shows, and the GGUF file behind each.

The store is `$OLLAMA_MODELS`, else `~/.ollama/models` (on Linux, the system service's store when only it
holds models: `store`). A model is a manifest at
`manifests/<registry>/<namespace>/<model>/<tag>` (JSON, an OCI image manifest), whose layer of media type
`application/vnd.ollama.image.model` names the GGUF file by its digest: `blobs/sha256-<hex>`. A name as Ollama
shows it, `qwen2.5-coder:0.5b`, is `registry.ollama.ai/library/qwen2.5-coder/0.5b`; the tag defaults to
`latest`, the namespace to `library`, the registry to `registry.ollama.ai` (`user/model:tag` and
`hf.co/user/repo:tag` name the others).

Nothing is downloaded, written or locked here; importing this module imports neither torch nor llama.cpp.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from infill.errors import ModelError

REGISTRY = "registry.ollama.ai"
NAMESPACE = "library"
TAG = "latest"
MODEL_MEDIA = "application/vnd.ollama.image.model"
_DIGEST = re.compile(r"^sha256[:-]([0-9a-f]{64})$")


@dataclass(frozen=True)
class OllamaModel:
    name: str  # as `ollama list` shows it
    manifest: Path
    blob: Path  # the GGUF file
    size: int  # 0 while the blob is missing

    @property
    def missing(self) -> str | None:
        """Why the model cannot be loaded although its manifest is there (a pull that did not finish, a blob
        pruned), with what to run; None when its GGUF file is there."""
        if self.blob.is_file():
            return None
        return f"its GGUF file {self.blob} is missing (run `ollama pull {self.name}` again)"


SERVICE_STORE = Path("/usr/share/ollama/.ollama/models")  # the Linux installer's service runs as user `ollama`


def store() -> Path:
    """Ollama's model folder: $OLLAMA_MODELS, else ~/.ollama/models; on Linux, where that holds no model and the
    system service's store (its user's home, /usr/share/ollama) does and can be read, that one: models pulled
    through the service live there."""
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return Path(env).expanduser()
    home = Path.home() / ".ollama" / "models"
    if sys.platform.startswith("linux") and not _holds_models(home) and _holds_models(SERVICE_STORE):
        return SERVICE_STORE
    return home


def _holds_models(root: Path) -> bool:
    try:
        return (root / "manifests").is_dir() and any((root / "manifests").iterdir())
    except OSError:  # the service's home unreadable to this user
        return False


def parts(name: str) -> tuple[str, str, str, str] | None:
    """(registry, namespace, model, tag) of an Ollama name, or None for a string that cannot be one (a path, an
    empty part, a digest)."""
    if not name or name.startswith((".", "/", "~")) or "\\" in name or "@" in name or name.endswith(":"):
        return None
    path, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", TAG)
    pieces = path.split("/")
    if len(pieces) > 3 or any(not p or p in (".", "..") for p in [*pieces, tag]):
        return None
    registry, namespace = REGISTRY, NAMESPACE
    if len(pieces) == 3:
        registry, namespace, model = pieces
    elif len(pieces) == 2:
        namespace, model = pieces
    else:
        (model,) = pieces
    return registry, namespace, model, tag


def display_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """The name `ollama list` shows for a manifest path."""
    if registry == REGISTRY:
        base = model if namespace == NAMESPACE else f"{namespace}/{model}"
    else:
        base = f"{registry}/{namespace}/{model}"
    return f"{base}:{tag}"


def find(name: str, root: Path | None = None) -> OllamaModel | None:
    """The model Ollama knows as `name`, or None when the store has no such manifest. ModelError for a manifest
    that is not JSON or names no model layer, or whose GGUF blob is missing."""
    split = parts(name)
    if split is None:
        return None
    root = root or store()
    manifest = root / "manifests" / Path(*split)
    if not manifest.is_file():
        manifest = _case_insensitive(root / "manifests", split) or manifest
        if not manifest.is_file():
            return None
    model = _model(root, manifest, display_name(*split))
    if model.missing is not None:
        raise ModelError(f"Ollama model {model.name!r}: {model.missing}")
    return model


def _case_insensitive(base: Path, split: tuple[str, ...]) -> Path | None:
    """The manifest whose path matches `split` ignoring case (Ollama treats names so), or None."""
    here = base
    for piece in split:
        if not here.is_dir():
            return None
        match = next((p for p in sorted(here.iterdir()) if p.name.lower() == piece.lower()), None)
        if match is None:
            return None
        here = match
    return here if here.is_file() else None


def _model(root: Path, manifest: Path, name: str) -> OllamaModel:
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"Ollama model {name!r}: unreadable manifest {manifest} ({exc}); run `ollama pull {name}` again"
        ) from exc
    layers = data.get("layers") if isinstance(data, dict) else None
    layer = next(
        (
            x
            for x in (layers if isinstance(layers, list) else [])
            if isinstance(x, dict) and x.get("mediaType") == MODEL_MEDIA
        ),
        None,
    )
    if layer is None:
        raise ModelError(f"Ollama model {name!r}: its manifest {manifest} has no model layer")
    match = _DIGEST.match(str(layer.get("digest", "")))
    if match is None:
        raise ModelError(f"Ollama model {name!r}: its manifest names no sha256 digest for the model")
    blob = root / "blobs" / f"sha256-{match.group(1)}"
    try:
        size = blob.stat().st_size
    except OSError:
        size = 0
    return OllamaModel(name, manifest, blob, size)


def installed(root: Path | None = None) -> list[OllamaModel]:
    """Every model in the store, sorted by name: one whose GGUF file is missing too (`missing` says so), as
    `ollama list` shows it; a manifest that is not JSON or names no model layer is left out, as Ollama leaves it."""
    root = root or store()
    base = root / "manifests"
    out = []
    for manifest in sorted(base.glob("*/*/*/*")) if base.is_dir() else []:
        if not manifest.is_file():
            continue
        registry, namespace, model, tag = manifest.relative_to(base).parts
        try:
            out.append(_model(root, manifest, display_name(registry, namespace, model, tag)))
        except ModelError:
            continue
    return sorted(out, key=lambda m: m.name)


def not_found(name: str, near: str = "") -> ModelError:
    """The error for an Ollama name that the store does not hold (`near`: "; near: ..." naming what it holds)."""
    return ModelError(
        f"model {name!r} is not in Ollama's store ({store()}){near}; infill never downloads: fetch it once with "
        f"`ollama pull {name}`, or pass a .gguf file or a model folder"
    )
