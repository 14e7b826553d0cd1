"""GGUF files other tools keep, named as those tools name them (`--model ORG/REPO[:QUANT]`): a -GGUF repo in the
Hugging Face cache (what `hf download` leaves: a snapshot without config.json), llama.cpp's `-hf` cache and LM
Studio's models folder. Read only; nothing is downloaded.

- llama.cpp's cache: $LLAMA_CACHE, else the system's cache folder, as llama.cpp's fs_get_cache_directory picks it:
  ~/Library/Caches/llama.cpp on macOS, %LOCALAPPDATA%\\llama.cpp on Windows, else $XDG_CACHE_HOME/llama.cpp, else
  ~/.cache/llama.cpp. `-hf ORG/REPO[:QUANT]` leaves the file as `ORG_REPO_FILE.gguf` (every "/" of `ORG/REPO/FILE`
  as "_") and `manifest=ORG=REPO=TAG.json`, whose `ggufFile.rfilename` is the file it picked for that tag (`latest`
  when none was named).
- LM Studio: ~/.lmstudio/models/PUBLISHER/REPO/FILE.gguf, older ~/.cache/lm-studio/models, under the home folder on
  every system (%USERPROFILE% on Windows).

Which file a name picks (`pick`): with a quant, the file whose name holds it (`:Q8_0` picks `x-Q8_0.gguf`, case
ignored); without, Q4_K_M's, else the first by name, as llama.cpp's `-hf` does. A vision projector (`mmproj-*`) and
the later parts of a split model are never picked. Where llama.cpp's manifest names the file of a tag, that file.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

DEFAULT_QUANT = "Q4_K_M"  # what llama.cpp's -hf picks when no quant is named
# the second and later files of a split GGUF (`name-00002-of-00003.gguf`): llama.cpp loads them from the first
LATER_SPLIT = re.compile(r"-(?!0*1-)\d{5}-of-\d{5}\.gguf$", re.IGNORECASE)
_REPO = re.compile(r"^([\w.-]+)/([\w.-]+)(?::([\w.-]+))?$")
_QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Za-z0-9]+)*|BF16|F16|F32)(?![A-Za-z0-9])", re.IGNORECASE)


@dataclass(frozen=True)
class StoredGguf:
    name: str  # what --model takes: ORG/REPO, with :QUANT where the repo holds more than one file
    file: Path
    store: str  # "llama.cpp cache", "LM Studio", "HF cache"


def llama_cache() -> Path:
    """llama.cpp's download cache: $LLAMA_CACHE, else ~/Library/Caches/llama.cpp on macOS, %LOCALAPPDATA%\\llama.cpp
    on Windows (XDG_CACHE_HOME is not read there), else $XDG_CACHE_HOME/llama.cpp, else ~/.cache/llama.cpp."""
    own = os.environ.get("LLAMA_CACHE")
    if own:
        return Path(own).expanduser()
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "llama.cpp"
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA")
        return (Path(local) if local else Path.home() / "AppData" / "Local") / "llama.cpp"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "llama.cpp"


def lmstudio_roots() -> list[Path]:
    """LM Studio's models folders: ~/.lmstudio/models, and the older ~/.cache/lm-studio/models."""
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def repo_name(name: str) -> tuple[str, str, str | None] | None:
    """(org, repo, quant or None) of `ORG/REPO[:QUANT]`, or None for a name of another form."""
    found = _REPO.match(name)
    if found is None or found.group(1) in (".", "..") or found.group(2) in (".", ".."):
        return None
    return found.group(1), found.group(2), found.group(3)


def candidates(files: list[Path]) -> list[Path]:
    """The files a name can pick, by name: no vision projector, no later part of a split model."""
    keep = [f for f in files if not LATER_SPLIT.search(f.name) and not f.name.lower().startswith("mmproj")]
    return sorted(keep, key=lambda f: (f.name.lower(), str(f)))


def quant_of(file: Path) -> str | None:
    """The quantization a file's name gives (`Q8_0`, `IQ4_XS`, `F16`), or None."""
    found = _QUANT.findall(file.name.removesuffix(".gguf"))
    return found[-1].upper() if found else None


def pick(files: list[Path], quant: str | None) -> Path | None:
    """The file `quant` names among `files` (see the module docstring), or None."""
    able = candidates(files)
    wanted = quant or DEFAULT_QUANT
    named = [f for f in able if (quant_of(f) or "").lower() == wanted.lower()]
    if named:
        return named[0]
    return None if quant else (able[0] if able else None)


def gguf_files(snapshot: Path) -> list[Path]:
    """The GGUF files of an HF cache snapshot, in subfolders too (a repo may keep each quantization in its own),
    without the later files of a split model."""
    try:
        found = sorted(snapshot.rglob("*.gguf")) if snapshot.is_dir() else []
    except OSError:
        return []
    return [f for f in found if not LATER_SPLIT.search(f.name) and f.is_file()]


def _llama_files(root: Path, org: str, repo: str) -> list[Path]:
    prefix = f"{org}_{repo}_".lower()
    try:
        return [f for f in root.glob("*.gguf") if f.name.lower().startswith(prefix) and f.is_file()]
    except OSError:
        return []


def _manifest_file(root: Path, org: str, repo: str, tag: str) -> Path | None:
    """The file llama.cpp's manifest for ORG/REPO:TAG names, when it is there."""
    manifest = root / f"manifest={org}={repo}={tag}.json"
    try:
        data = json.loads(manifest.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    rfilename = (data.get("ggufFile") or {}).get("rfilename") if isinstance(data, dict) else None
    if not isinstance(rfilename, str):
        return None
    file = root / f"{org}/{repo}/{rfilename}".replace("/", "_")
    return file if file.is_file() else None


def _lmstudio_files(org: str, repo: str) -> list[Path]:
    out: list[Path] = []
    for root in lmstudio_roots():
        folder = root / org / repo
        try:
            out += [f for f in folder.rglob("*.gguf") if f.is_file()] if folder.is_dir() else []
        except OSError:
            continue
    return out


def _hf_snapshot(hub: Path, repo_id: str) -> Path | None:
    """The snapshot of `repo_id` that refs/main names in the HF cache `hub`, else its only one; None when absent."""
    repo = hub / ("models--" + repo_id.replace("/", "--"))
    try:
        main = (repo / "refs" / "main").read_text().strip() if (repo / "refs" / "main").is_file() else ""
        snaps = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir()) if (repo / "snapshots").is_dir() else []
    except OSError:
        return None
    chosen = [s for s in snaps if s.name == main] or (snaps if len(snaps) == 1 else [])
    return chosen[0] if chosen else None


def find(name: str, hub: Path, *, hf_only: bool = False) -> StoredGguf | None:
    """The GGUF file `ORG/REPO[:QUANT]` names: in the HF cache `hub` (a snapshot without config.json; None for one with
    it, a folder that resolve_folder loads, whatever the other stores hold), then llama.cpp's cache, then LM
    Studio's (only the HF cache with `hf_only`)."""
    parsed = repo_name(name)
    if parsed is None:
        return None
    org, repo, quant = parsed
    snapshot = _hf_snapshot(hub, f"{org}/{repo}")
    if snapshot is not None and (snapshot / "config.json").is_file():
        return None  # a model folder in the HF cache: it wins, as before these stores were read
    if snapshot is not None:
        file = pick(gguf_files(snapshot), quant)
        if file is not None:
            return StoredGguf(name, file, "HF cache")
    if hf_only:
        return None
    root = llama_cache()
    file = _manifest_file(root, org, repo, quant or "latest") or pick(_llama_files(root, org, repo), quant)
    if file is not None:
        return StoredGguf(name, file, "llama.cpp cache")
    file = pick(_lmstudio_files(org, repo), quant)
    return StoredGguf(name, file, "LM Studio") if file is not None else None


def installed() -> list[StoredGguf]:
    """Every model in llama.cpp's cache (by its manifests: `ORG/REPO` for the tag `latest`, `ORG/REPO:TAG`
    otherwise) and in LM Studio's folders (each file as `PUBLISHER/REPO:QUANT`, or `PUBLISHER/REPO` when that
    picks it), sorted by name."""
    out: dict[str, StoredGguf] = {}
    root = llama_cache()
    try:
        manifests = sorted(root.glob("manifest=*=*=*.json")) if root.is_dir() else []
    except OSError:
        manifests = []
    for manifest in manifests:
        org, repo, tag = manifest.name.removeprefix("manifest=").removesuffix(".json").split("=", 2)
        file = _manifest_file(root, org, repo, tag)
        if file is not None:
            name = f"{org}/{repo}" + ("" if tag == "latest" else f":{tag}")
            out[name] = StoredGguf(name, file, "llama.cpp cache")
    for lm in lmstudio_roots():
        try:
            folders = sorted(p for p in lm.glob("*/*") if p.is_dir()) if lm.is_dir() else []
        except OSError:
            continue
        for folder in folders:
            org, repo = folder.parent.name, folder.name
            if repo_name(f"{org}/{repo}") is None:
                continue
            files = _lmstudio_files(org, repo)
            for file in candidates(files):
                quant = quant_of(file)
                by_repo = f"{org}/{repo}"
                name = by_repo if pick(files, None) == file else f"{by_repo}:{quant}" if quant else str(file)
                if name != str(file) and pick(files, name.partition(":")[2] or None) != file:
                    name = str(file)  # two files of one quant: only its path names it
                out.setdefault(name, StoredGguf(name, file, "LM Studio"))
    return sorted(out.values(), key=lambda s: s.name)
