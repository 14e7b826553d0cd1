"""The library's public entry points, used by the CLI, the server, the docstring filler, the evaluations and
tests. A facade: the fill pipeline itself is infill.core.pipeline (how a fill is built is described there).

    fill_text(text, spans, *, language=None, model=ModelSpec(), decode=DecodeConfig(), options=FillOptions(),
              on_progress=None) -> FillResult

`model` may be a ModelSpec (loaded through infill.models.registry, cached per process) or an already
LoadedModel. Edits index the ORIGINAL text: bytes of its UTF-8 encoding, lines 1-based.
"""

from __future__ import annotations

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.core.edits import Edit, FillResult
from infill.core.pipeline import clear_model_cache, fill_text, load_model
from infill.core.plan import WINDOW_BYTES_PER_TOKEN, token_budget
from infill.core.ranking import confidence_of, fill_features
from infill.models.fim import split_context

__all__ = [
    "WINDOW_BYTES_PER_TOKEN",
    "DecodeConfig",
    "Edit",
    "FillOptions",
    "FillResult",
    "ModelSpec",
    "clear_model_cache",
    "confidence_of",
    "fill_features",
    "fill_text",
    "load_model",
    "split_context",
    "token_budget",
]
