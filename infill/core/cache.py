"""The one per-process model cache: `infill fill`, the docstring filler, the evaluations and the server all load
models through SHARED (infill.api.load_model; the server's ServerContext.models), so a daemon holds one copy.

An entry is keyed by the whole ModelSpec (name, device, bf16, revision, mask token) and stays valid while
- its folder's files are unchanged on disk (a daemon never serves stale weights after `infill train` writes a
  new checkpoint to the same place, nor a GGUF file replaced under the same name, nor `./ckpt` of another working
  directory: every entry is dropped then), and
- for a registered name, the same factory is still registered under it (tests and plugins re-register names),
- for a model on a server, the server still serves the same model under its name (a server restarted with other
  weights: infill.models.remote.RemoteFim.replaced, asked at most every few seconds).

Importing this module does not import torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from infill.config import ModelSpec
from infill.errors import InfillError, ModelError, one_line
from infill.models import registry
from infill.models.registry import LoadedModel

Fingerprint = tuple[tuple[str, int, int, int], ...]


def load_spec(spec: ModelSpec) -> LoadedModel:
    """Load `spec` (infill.core.kinds.load: a registered name, else a URL, a GGUF file or a folder), with a
    corrupt folder (bad JSON, bad safetensors...) as a ModelError."""
    from infill.core.kinds import load
    from infill.progress import quiet_libraries

    quiet_libraries()
    try:
        return load(spec)
    except InfillError:
        raise
    except (OSError, ValueError, RuntimeError, KeyError) as exc:  # corrupt folder, bad safetensors, bad json
        raise ModelError(f"cannot load model {spec.name!r}: {type(exc).__name__}: {one_line(str(exc))}") from exc


@dataclass
class _Entry:
    model: LoadedModel
    fingerprint: Fingerprint
    factory: Any  # the registered factory it came from; None for folder models


@dataclass
class ModelCache:
    """Loaded models kept in memory (see the module docstring for when an entry is reloaded)."""

    loader: Callable[[ModelSpec], LoadedModel] = load_spec
    _entries: dict[ModelSpec, _Entry] = field(default_factory=dict)

    def get(self, spec: ModelSpec) -> LoadedModel:
        entry = self._entries.get(spec)
        factory = registry.factory_of(spec.name)
        if entry is not None:
            if entry.factory is not factory or _replaced(entry.model):  # this entry only is stale
                del self._entries[spec]
            elif fingerprint(entry.model) == entry.fingerprint:
                return entry.model
            else:
                self._entries.clear()  # new weights on disk: drop every copy
        loaded = self.loader(spec)
        self._entries[spec] = _Entry(loaded, fingerprint(loaded), factory)
        return loaded

    def held(self, spec: ModelSpec) -> LoadedModel | None:
        """The model loaded for `spec`, without loading it or checking its files (None when none is held)."""
        entry = self._entries.get(spec)
        return entry.model if entry is not None else None

    def loaded(self) -> list[dict[str, Any]]:
        """The models held, for the server's `models` and `ping` methods."""
        out = []
        for spec, entry in list(self._entries.items()):  # a snapshot: ping reads it from another thread
            info = {k: v for k, v in entry.model.info.items() if isinstance(v, str | int | float | bool) or v is None}
            out.append(
                {
                    "name": spec.name,
                    "device": spec.device,
                    "bf16": spec.bf16,
                    "revision": spec.revision,
                    "kind": entry.model.kind,
                    "info": info,
                }
            )
        return out

    def clear(self) -> None:
        self._entries.clear()


def _replaced(model: LoadedModel) -> bool:
    """Whether a model on a server was replaced there under the same name (infill.models.remote.RemoteFim)."""
    if model.kind != "remote":
        return False
    from infill.models.remote import RemoteFim

    return isinstance(model.model, RemoteFim) and model.model.replaced()


def fingerprint(model: LoadedModel) -> Fingerprint:
    """(absolute file path, size, mtime, inode) of a folder model's files (or of its one file, a GGUF); () for
    models that do not come from a folder. The absolute path: a relative folder (`--model ./ckpt`) from another
    working directory (the daemon serves them all) is another model; the inode: a file replaced by one of the same
    name, size and time (`mv`, `cp -p`) is another file."""
    path = model.info.get("path")
    if not isinstance(path, str | os.PathLike):
        return ()
    folder = Path(os.path.abspath(path))
    files = sorted(folder.iterdir()) if folder.is_dir() else [folder]
    out = []
    for file in files:
        try:
            st = file.stat()
        except OSError:
            continue
        out.append((str(file), st.st_size, st.st_mtime_ns, st.st_ino))
    return tuple(out)


SHARED = ModelCache()  # read at call time (infill.core.cache.SHARED), so a test may swap in a fresh one
