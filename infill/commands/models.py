"""`infill models`: list the models usable offline (packaged, HF cache). Never imports torch."""

from __future__ import annotations

import json
from pathlib import Path

import click

from infill.clitypes import NonEmptyPath


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
@click.option(
    "--cache-dir",
    type=NonEmptyPath(file_okay=False, path_type=Path),
    default=None,
    help="HF hub cache to scan (default: $HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub).",
)
def models(as_json: bool, cache_dir: Path | None) -> None:
    """List the packaged model(s), the models in the local Hugging Face cache and Ollama's models.

    NAME is what `--model` accepts; cached models with a revision other than main take `--revision REV`.
    KIND is asarm (XLNet any-subset model: assd, sequential, parallel decoders), blockdiff
    (Qwen3/Llama/SDAR block diffusion, told by a mask token or block size in its config: confidence, s2d2,
    ptp, ssmd; with FIM tokens also beam search and sequential at block size 1) or ar (a left-to-right code
    model such as Qwen2.5-Coder, StarCoder2, Code Llama or DeepSeek-Coder, filling through its FIM tokens:
    beam search, sequential, assd with lookup drafts; Ollama's models are GGUF files that run on llama.cpp,
    the `llamacpp` extra; one whose GGUF file is missing is listed as unsupported, with the `ollama pull` that
    fetches it). Ollama's store is $OLLAMA_MODELS, else ~/.ollama/models. The GGUF files of llama.cpp's `-hf` cache
    ($LLAMA_CACHE, else ~/.cache/llama.cpp; ~/Library/Caches/llama.cpp on macOS, %LOCALAPPDATA%\\llama.cpp on
    Windows) and of LM Studio (~/.lmstudio/models) are listed as ORG/REPO[:QUANT], the name llama.cpp's -hf takes.
    Nothing is downloaded; any local model folder or .gguf file also works as --model PATH.
    """
    from infill.core.catalog import (
        cached_models,
        human_size,
        ollama_models,
        packaged_models,
        stored_gguf_models,
    )
    from infill.models.hf_folder import hf_cache_dir

    entries = packaged_models() + cached_models(cache_dir) + ollama_models() + stored_gguf_models()
    if as_json:
        click.echo(json.dumps([e.as_dict() for e in entries], indent=2))
        return
    if not entries:
        click.echo(f"no models found (packaged weights missing; HF cache {cache_dir or hf_cache_dir()} empty)")
        return
    rows = [("NAME", "REVISION", "KIND", "SIZE", "PARAMS", "PROVENANCE")]
    for e in entries:
        params = f"{e.parameters / 1e6:.1f}M" if e.parameters is not None else "?"
        rows.append((e.name, e.revision or "-", e.kind, human_size(e.size_bytes), params, e.provenance))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) + "  " + r[-1])
