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
HF_PREFIX = "hf:"  # --model hf:Org/Name: a repo in the HF cache, never an Ollama name


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
    repo_id = name.removeprefix(HF_PREFIX)  # hf:Org/Name: the HF cache only (not Ollama's store)
    if repo_id.startswith((".", "/", "~")) or repo_id.count("/") > 1 or not repo_id:
        raise ModelError(f"model folder {name} does not exist")
    folder = Path(_from_hf_cache(repo_id, spec.revision, ollama_too=not name.startswith(HF_PREFIX)))
    _check_folder(folder)
    return folder, f"HF cache {repo_id}" + (f"@{spec.revision}" if spec.revision else "")


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


def _from_hf_cache(repo_id: str, revision: str | None, *, ollama_too: bool = True) -> str:
    """The snapshot folder of `repo_id` in the HF cache; ModelError saying where the name was looked for
    (Ollama's store too unless `ollama_too` is False: an hf: name) and what is there under similar names."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - transformers depends on huggingface_hub
        raise ModelError("huggingface_hub is not installed; cannot look up cached models") from exc
    try:
        return str(snapshot_download(repo_id, revision=revision, local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError, RevisionNotFoundError, HFValidationError ...
        from infill.models import ollama

        rev = f" (revision {revision})" if revision else ""
        if not ollama_too:
            where, fetch = f"is not in the HF cache ({hf_cache()})", f"`hf download {repo_id}`"
        else:
            where = f"is not a local folder, in Ollama's store ({ollama.store()}), {stores_read()}"
            fetch = (
                f"`hf download {repo_id}`" if "/" in repo_id else f"`ollama pull {repo_id}` or `hf download ORG/NAME`"
            )
        raise ModelError(
            f"model {repo_id!r}{rev} {where}{near_names(repo_id, ollama_too=ollama_too)}; infill never downloads: "
            f"fetch it once with {fetch}, or pass a folder or a .gguf file"
        ) from exc


def hf_cache() -> Path:
    """The HF hub cache huggingface_hub reads (its own setting where it is installed, else as
    infill.models.hf_folder.hf_cache_dir resolves it)."""
    try:
        from huggingface_hub import constants
    except ImportError:  # pragma: no cover - transformers depends on huggingface_hub
        from infill.models.hf_folder import hf_cache_dir

        return hf_cache_dir()
    return Path(constants.HF_HUB_CACHE)


def near_names(name: str, *, ollama_too: bool = True) -> str:
    """For a name that is nowhere: "; near: ..." naming the models Ollama's store (unless `ollama_too` is False)
    and the HF cache hold under similar names (the other tags of the same Ollama model first), or "" when none."""
    from difflib import get_close_matches

    from infill.models import gguf_stores, ollama

    pulled = [*(m.name for m in ollama.installed()), *(m.name for m in gguf_stores.installed())] if ollama_too else []
    cache = hf_cache()
    cached = (
        sorted(p.name[len("models--") :].replace("--", "/") for p in cache.glob("models--*")) if cache.is_dir() else []
    )
    asked = ollama.parts(name.lower())
    tags = [n for n in pulled if asked is not None and (ollama.parts(n.lower()) or ())[:3] == asked[:3]]
    by_lower = {n.lower(): n for n in [*pulled, *cached]}
    close = [by_lower[n] for n in get_close_matches(name.lower(), list(by_lower), n=5, cutoff=0.6)]
    near = list(dict.fromkeys([*tags, *close]))[:5]
    return f"; near: {', '.join(near)}" if near else ""


def read_config(folder: Path) -> dict[str, Any]:
    return read_json(folder / "config.json")


def resolve_gguf(spec: ModelSpec) -> tuple[Path, str, str | None] | None:
    """(file, provenance, Ollama name or None) when `spec.name` is a GGUF file or a model in Ollama's store
    (infill.models.ollama), else None (a folder or an HF repo id: resolve_folder). A name with a tag
    (`qwen2.5-coder:0.5b`) that Ollama's store lacks, or a missing .gguf path, is a ModelError."""
    from infill.models import gguf_stores, ollama
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
    if spec.revision is not None:  # a folder's revision in the HF cache: resolve_folder
        return None
    if name.startswith(HF_PREFIX):
        in_hf = gguf_stores.find(name.removeprefix(HF_PREFIX), hf_cache(), hf_only=True)
        return (in_hf.file, f"HF cache {name.removeprefix(HF_PREFIX)}", None) if in_hf is not None else None
    found = ollama.find(name)
    if found is not None:
        return found.blob, f"Ollama {found.name}", found.name
    stored = gguf_stores.find(name, hf_cache())  # a -GGUF repo: the HF cache, llama.cpp's cache, LM Studio's
    if stored is not None:
        return stored.file, f"{stored.store} {name}", None
    if ":" in name and ollama.parts(name) is not None:  # a tag: a name as Ollama or llama.cpp's -hf shows it
        if "/" in name.partition(":")[0]:
            raise ModelError(
                f"model {name!r} is not in Ollama's store ({ollama.store()}), {stores_read()}{near_names(name)}; "
                f"infill never downloads: fetch it once with `llama-cli -hf {name}` or `ollama pull hf.co/{name}`, "
                "or pass a .gguf file or a model folder"
            )
        raise ollama.not_found(name, near_names(name))
    return None


def stores_read() -> str:
    """Where a -GGUF repo's name is looked for besides Ollama's store, for the not-found line."""
    from infill.models import gguf_stores

    lm = " or ".join(str(p) for p in gguf_stores.lmstudio_roots())
    return (
        f"in llama.cpp's cache ({gguf_stores.llama_cache()}), in LM Studio's ({lm}) or in the HF cache ({hf_cache()})"
    )


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
