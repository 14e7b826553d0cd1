"""The left-to-right kind ("ar"): a causal code model with fill-in-the-middle tokens, from a transformers folder
(infill.models.autoregressive), a GGUF file or an Ollama model on llama.cpp (infill.models.llamacpp), or a
block-diffusion model at block size 1 (infill.models.block_one). It fills one span per sequence, in order, through
the any-subset decoders that ask for positions in order (infill.core.kinds.asarm's backend).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from infill.config import ModelSpec
from infill.core.backends import Fill, Kind, Run
from infill.core.kinds.asarm import AnySubset
from infill.core.plan import Region, Window, left_to_right
from infill.errors import InputError
from infill.models.autoregressive import AR_ARCHITECTURES
from infill.models.registry import LoadedModel


class Autoregressive(AnySubset):
    """The left-to-right kind: a causal code model with FIM tokens (infill.models.autoregressive.CausalFim) is an
    any-subset model that fills one span per sequence in order. It runs the any-subset decoders that ask for
    positions in order; its fills and retrieved lines are scored by the same one-pass log-likelihood."""

    groups_spans = False  # one FIM prompt has one hole

    def window(self, loaded: LoadedModel) -> Window:
        return left_to_right(super().window(loaded))

    def sample(self, region: Region, run: Run, attempt: int) -> list[Fill]:
        from infill.models.autoregressive import CausalFim

        model, tok = run.loaded.model, run.loaded.tokenizer
        if isinstance(model, CausalFim) and model.fim is None and tok.decode(region.suffix_ids).strip():
            raise InputError(
                f"{run.loaded.name!r} has no fill-in-the-middle tokens, so it can only write at the end of the "
                "text: select a span with nothing but blank lines after it, or use a model with FIM tokens"
            )
        if not isinstance(model, CausalFim):
            return super().sample(region, run, attempt)
        with model.remembering():  # the fill's score reads the rows its decoding computed: no pass of its own
            return super().sample(region, run, attempt)


def is_left_to_right(cfg: dict[str, Any], folder: Path | None) -> bool:
    """A stock left-to-right architecture (asked after the block-diffusion kind, which claims the same
    architectures when their config names a mask token or a block size)."""
    return str(cfg.get("model_type", "")).lower() in AR_ARCHITECTURES


def load_folder(folder: Path, spec: ModelSpec, cfg: dict[str, Any], provenance: str) -> LoadedModel:
    """A transformers folder; with --mask-token the user says it is block diffusion (infill.models.blockdiff)."""
    if spec.mask_token is not None:
        from infill.models import blockdiff

        return blockdiff.load_folder(folder, spec, mask_token=spec.mask_token)
    from infill.models import autoregressive

    return autoregressive.load_folder(folder, spec)


def load_gguf(spec: ModelSpec) -> LoadedModel | None:
    """A GGUF file or a model in Ollama's store (infill.models.loading.resolve_gguf) on llama.cpp, else None."""
    from infill.models.loading import resolve_gguf

    gguf = resolve_gguf(spec)
    if gguf is None:
        return None
    from infill.models import llamacpp

    if spec.revision is not None or spec.mask_token is not None:
        flag = "--revision" if spec.revision is not None else "--mask-token"
        raise InputError(f"{flag} applies to model folders; {spec.name} is a GGUF model")
    return llamacpp.load_gguf(*gguf, spec)


KIND = Kind(
    name="ar",
    label="a left-to-right (autoregressive)",
    decoders=("assd", "sequential", "beam"),
    backend=Autoregressive(),
    drafts=("lookup",),
    detect=is_left_to_right,
    load=load_folder,
    load_name=load_gguf,
    model_types=tuple(AR_ARCHITECTURES),
)
