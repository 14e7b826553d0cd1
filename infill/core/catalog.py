"""What models are available offline, without importing torch: the packaged ones, the HF cache and Ollama's
store.

Sizes come from the files on disk; parameter counts from the safetensors headers (JSON, read without torch).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from infill.core.kinds import folder_kind  # imports no torch
from infill.models.hf_folder import hf_cache_dir, read_json, safetensors_parameters


@dataclass(frozen=True)
class ModelEntry:
    name: str  # what to pass to --model
    kind: str  # "asarm" | "blockdiff" | "ar" (left to right) | "unsupported (<model_type>)"
    size_bytes: int
    parameters: int | None  # from safetensors headers; None when unknown (e.g. only a .bin file)
    provenance: str
    path: str
    revision: str | None = None  # a cached model's ref (main too) or snapshot; None for packaged and local ones

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def folder_size(folder: Path) -> int:
    total = 0
    for f in folder.rglob("*"):
        try:
            if f.is_file():
                total += f.stat().st_size  # follows the HF cache's symlinks to blobs
        except OSError:
            continue
    return total


def _lineage_total(record: dict[str, Any], key: str) -> int | None:
    """`key` (steps, tokens_seen) summed over the runs behind a model: a continued run records the runs it started
    from as `prior_<key>` (block diffusion) or as a nested `init` record (AS-ARM). None when the record lacks it."""
    if not isinstance(record.get(key), int):
        return None
    total = 0
    node: object = record
    while isinstance(node, dict) and isinstance(node.get(key), int):  # a loop: no depth limit to run into
        prior = node.get(f"prior_{key}")
        total += node[key] + (prior if isinstance(prior, int) else 0)
        node = node.get("init")
    return total


def provenance_line(value: object) -> str:
    """One short line for `infill models` from a config's provenance record (a string, or the dict that
    `infill train` writes: trainer, steps, tokens seen, held-out NLL)."""
    if not isinstance(value, dict):
        return str(value)
    if value.get("random"):
        return "random weights (untrained)"
    parts = [str(value.get("trainer") or value.get("objective") or "trained").split(",")[0]]
    steps, tokens = _lineage_total(value, "steps"), _lineage_total(value, "tokens_seen")
    if steps is not None:
        parts.append(f"{steps:,} steps")
    if tokens is not None:
        parts.append(f"{tokens / 1e6:.1f}M tokens")
    heldout = value.get("heldout")
    if isinstance(heldout, dict) and isinstance(heldout.get("nll_per_token"), (int, float)):
        parts.append(f"held-out NLL {heldout['nll_per_token']:.2f}")
    if isinstance(value.get("date"), str):
        parts.append(value["date"])
    return ", ".join(parts)


def describe(folder: Path, name: str, default_provenance: str, revision: str | None = None) -> ModelEntry | None:
    """The listing's entry for a model folder; None when its config.json is missing or unreadable (a broken
    entry in someone's cache is left out, it never breaks the listing)."""
    from infill.errors import ModelError

    try:
        cfg = read_json(folder / "config.json")
    except ModelError:
        return None
    meta = cfg.get("infill")
    meta = meta if isinstance(meta, dict) else {}
    return ModelEntry(
        name=name,
        kind=folder_kind(cfg, folder) or f"unsupported ({cfg.get('model_type')})",
        size_bytes=folder_size(folder),
        parameters=safetensors_parameters(folder),
        provenance=provenance_line(meta.get("provenance", default_provenance)),
        path=str(folder),
        revision=revision,
    )


def packaged_models(weights_dir: Path | None = None) -> list[ModelEntry]:
    if weights_dir is None:
        weights_dir = Path(__file__).resolve().parent.parent / "weights"
    out = []
    if weights_dir.is_dir():
        for folder in sorted(p for p in weights_dir.iterdir() if p.is_dir()):
            entry = describe(folder, folder.name, "packaged with infill")
            if entry is not None:
                out.append(entry)
    return out


def cached_models(cache: Path | None = None) -> list[ModelEntry]:
    """Every snapshot in the HF hub cache with a config.json, one entry per revision name (refs/*), and every GGUF
    file in a snapshot (a -GGUF repo has no config.json), named by its path, which is what --model takes."""
    from infill.models import gguf_stores

    cache = cache or hf_cache_dir()
    out: list[ModelEntry] = []
    if not cache.is_dir():
        return out
    for repo in sorted(cache.glob("models--*")):
        repo_id = repo.name[len("models--") :].replace("--", "/")
        refs = {}
        for ref in sorted((repo / "refs").glob("*")) if (repo / "refs").is_dir() else []:
            if not ref.is_file():  # a named pipe would block the read
                continue
            try:
                refs[ref.read_text().strip()] = ref.name
            except OSError:
                continue
        for snap in sorted((repo / "snapshots").glob("*")) if (repo / "snapshots").is_dir() else []:
            rev = refs.get(snap.name, snap.name[:12])
            entry = describe(snap, repo_id, f"HF cache {repo_id}@{rev}", revision=rev)  # "main" too, not "-"
            if entry is not None:
                out.append(entry)
            for file in gguf_stores.gguf_files(snap):
                out.append(gguf_entry(str(file), file, f"HF cache {repo_id}@{rev}"))
    return out


def gguf_entry(name: str, file: Path, provenance: str) -> ModelEntry:
    """The listing's entry for the GGUF file `file`: kind "ar" (it runs on llama.cpp as a left-to-right model), or
    why it is not one; parameters from its header, read without its vocabulary."""
    from infill.errors import ModelError
    from infill.models import gguf

    kind, params, what = "ar", None, "GGUF"
    try:
        header = gguf.read_header(file, vocabulary=False)
    except ModelError:
        kind = "unsupported (not a readable GGUF file)"
    else:
        params, what = header.parameters, f"{header.architecture} GGUF"
        try:
            params = gguf.check_split(header, None).parameters  # a split model's: all its parts'
        except ModelError:  # an interrupted download (a part cut short or missing): a fill would refuse it
            kind = "unsupported (truncated GGUF file)"
        if header.metadata.get("general.type") == "mmproj" or header.architecture == "clip":
            kind = "unsupported (a vision projector, not a language model)"  # the mmproj-*.gguf of a -GGUF repo
    try:
        size = file.stat().st_size
    except OSError:
        size = 0
    return ModelEntry(name, kind, size, params, f"{provenance}, {what}", str(file))


def ollama_models(root: Path | None = None) -> list[ModelEntry]:
    """Every model in Ollama's store (infill.models.ollama), as `gguf_entry` describes its blob; one whose blob is
    missing is listed as unsupported, with the command that fetches it."""
    from infill.models import ollama

    return [
        gguf_entry(m.name, m.blob, "Ollama")
        if m.missing is None
        else ModelEntry(
            m.name, f"unsupported (GGUF file missing: ollama pull {m.name})", 0, None, "Ollama", str(m.blob)
        )
        for m in ollama.installed(root)
    ]


def stored_gguf_models() -> list[ModelEntry]:
    """Every model in llama.cpp's `-hf` cache and LM Studio's folders (infill.models.gguf_stores), by the name
    --model takes."""
    from infill.models import gguf_stores

    return [gguf_entry(m.name, m.file, m.store) for m in gguf_stores.installed()]


def human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GB"
