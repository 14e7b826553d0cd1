"""The model kinds, one registry: each kind is one module of this package (asarm, blockdiff, ar, remote) holding
one infill.core.backends.Kind object (its backend, the decoders and drafts it runs, how its folders are recognised
and loaded), and KINDS lists those objects. Everything else asks this module: which kind a folder is
(`folder_kind`), loading a model by name (`load`), and which decoder a kind runs and how (`select`, where the
decoder a user named is checked against the model, once).

A kind from outside the package (an extension, or the test-only kind of tests/kind_example.py) registers its Kind
with `register`, or names its module in INFILL_KINDS (comma-separated modules, each with a module-level `KIND`)
or in the `infill.kinds` entry-point group (each entry point a Kind); those are read once, when a kind is first
asked for. docs/contributing.md ("A model kind") walks through adding one.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from infill.config import DecodeConfig, DecoderName, ModelSpec
from infill.core.backends import Backend, Kind
from infill.core.kinds import ar, asarm, blockdiff, remote
from infill.errors import InputError, ModelError
from infill.models import registry
from infill.models.loading import read_config, resolve_folder
from infill.models.registry import LoadedModel

__all__ = ["KINDS", "Kind", "folder_kind", "kind_of", "kinds", "load", "register", "select", "substitution"]

# in the order folders are recognised (the first kind whose `detect` accepts a folder) and messages list them
KINDS: dict[str, Kind] = {kind.name: kind for kind in (asarm.KIND, blockdiff.KIND, ar.KIND, remote.KIND)}
PLUGINS_ENV = "INFILL_KINDS"
ENTRY_POINTS = "infill.kinds"
_plugins_read = False


def register(kind: Kind) -> None:
    """Make `kind` known (recognised after the kinds registered before it). Re-registering a name replaces it."""
    KINDS[kind.name] = kind


def unregister(name: str) -> None:
    KINDS.pop(name, None)


def kinds() -> list[Kind]:
    """Every registered kind, the plugins' (INFILL_KINDS, entry points) read on the first call."""
    global _plugins_read
    if not _plugins_read:
        _plugins_read = True
        _read_plugins()
    return list(KINDS.values())


def _read_plugins() -> None:
    import importlib
    from importlib.metadata import entry_points

    from infill import environment

    for name in filter(None, (part.strip() for part in (environment.read(PLUGINS_ENV) or "").split(","))):
        try:
            kind = importlib.import_module(name).KIND
        except (ImportError, AttributeError) as exc:
            raise InputError(f"{PLUGINS_ENV}: {name} is not a module with a KIND ({exc})") from exc
        register(kind)
    for point in entry_points(group=ENTRY_POINTS):
        register(point.load())


def kind_of(loaded: LoadedModel) -> Kind:
    """The kind of a loaded model."""
    for kind in kinds():
        if kind.name == loaded.kind:
            return kind
    raise ModelError(f"model {loaded.name!r} is of an unknown kind {loaded.kind!r}")


def folder_kind(cfg: dict[str, Any], folder: Path | None = None) -> str | None:
    """The name of the kind a folder with config.json `cfg` holds (the first registered kind that recognises it),
    or None for an unsupported model_type. Reads no weights and imports no torch."""
    found = _detect(cfg, folder)
    return found.name if found is not None else None


def _detect(cfg: dict[str, Any], folder: Path | None) -> Kind | None:
    return next((kind for kind in kinds() if kind.detect is not None and kind.detect(cfg, folder)), None)


def known_model_types() -> list[str]:
    return sorted({model_type for kind in kinds() for model_type in kind.model_types})


def load(spec: ModelSpec) -> LoadedModel:
    """Load the model named by `spec.name`: a registered name (infill.models.registry) first, then what a kind
    loads by name (a URL, a GGUF file, an Ollama model), then a folder (the default, a path, an HF-cache repo
    id: infill.models.loading.resolve_folder) by the kind that recognises its config.json."""
    from infill.hardware import configure_decode_threads, decode_threads

    # every model that decodes loads here (fill, docstrings, server, eval): a junk INFILL_THREADS is refused before
    # any loads, and torch runs the decoding threads before a model of a kind that runs torch loads (llama.cpp
    # takes them itself, a model server's kind runs no torch: its fills import none)
    threads = decode_threads()
    factory = registry.factory_of(spec.name)
    if factory is not None:
        configure_decode_threads(threads)
        return factory(spec)
    for kind in kinds():
        loaded = kind.load_name(_as_run_by(kind, spec)) if kind.load_name is not None else None
        if loaded is not None:
            if kind.runs_torch:
                configure_decode_threads(threads)
            return loaded
    folder, provenance = resolve_folder(spec)
    cfg = read_config(folder)
    model_type = cfg.get("model_type")
    if model_type is None:
        raise ModelError(f"{folder / 'config.json'} has no model_type")
    found = _detect(cfg, folder)
    if found is None or found.load is None:
        raise ModelError(f"{folder}: unsupported model_type {model_type!r} (known: {', '.join(known_model_types())})")
    spec = _as_run_by(found, spec)
    if found.runs_torch:
        configure_decode_threads(threads)
    if spec.engine not in found.engines:
        runs = " or ".join(kind.label for kind in kinds() if spec.engine in kind.engines)
        raise ModelError(f"--engine {spec.engine} runs only {runs} model; {spec.name} is a {model_type} model")
    return found.load(folder, spec, cfg, provenance)


def _as_run_by(kind: Kind, spec: ModelSpec) -> ModelSpec:
    """`spec` for a model of `kind`: `--engine auto-int8` (a preference for int8 weights where a kind has them,
    the language server's default) is `auto` for a kind without it."""
    if spec.engine == "auto-int8" and spec.engine not in kind.engines:
        return replace(spec, engine="auto")
    return spec


def select(loaded: LoadedModel, cfg: DecodeConfig) -> tuple[LoadedModel, Backend, DecodeConfig]:
    """The model as `cfg`'s decoder runs it, its kind's backend, and `cfg` as that kind runs it: the kind's
    `Backend.prepare` (a decoder it runs under another name, a view of another kind), then the one check that
    the model runs the decoder (InputError, exit 2)."""
    runs, cfg = kind_of(loaded).backend.prepare(cfg, loaded)
    kind = kind_of(runs)
    _check_decoder(cfg, runs, kind)
    return runs, kind.backend, cfg


def _check_decoder(cfg: DecodeConfig, loaded: LoadedModel, kind: Kind) -> None:
    if cfg.decoder not in kind.decoders:
        needs = " or ".join(other.label for other in kinds() if cfg.decoder in other.decoders)
        raise InputError(
            f"--decoder {cfg.decoder} needs {needs} model, but {loaded.name!r} is {kind.label} model; "
            f"use one of: {', '.join(kind.decoders)}"
        )
    if cfg.decoder == "assd" and cfg.draft not in kind.drafts:
        raise InputError(
            f"--draft {cfg.draft} drafts several positions at once, which {kind.label} model {loaded.name!r} "
            f"cannot: use --draft {' or '.join(kind.drafts)}"
        )


def substitution(asked: DecoderName, loaded: LoadedModel, ran: DecoderName) -> str:
    """Why `loaded` runs --decoder `ran` where `asked` was asked for (`select`): the note -v shows."""
    kind = kind_of(loaded)
    return (
        f"--decoder {asked} ran as --decoder {ran}: {loaded.name!r} is {kind.label} model, which runs "
        f"{asked} as {ran} (--decoder {' '.join(kind.decoders)} run as named)"
    )
