"""Library entry points used by the CLI, the server, the docstring filler and tests.

Contract (owned by the fill/CLI work, issue 3; other modules code against these signatures):

    fill_text(text, spans, *, language=None, model=ModelSpec(), decode=DecodeConfig(), options=FillOptions(),
              on_progress=None) -> FillResult
    fill_file(path, spans, ...) -> FillResult   (reads, fills, does not write; writing is infill.patch's job)

`model` may be a ModelSpec (loaded through infill.models.registry, cached per process) or an already
LoadedModel. Edits index the ORIGINAL text: bytes of its UTF-8 encoding, lines 1-based.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.spans import Span


@dataclass(frozen=True)
class Edit:
    start_byte: int
    end_byte: int
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str  # the replacement text
    score: float  # log-likelihood of the fill's tokens under the model (natural log, summed)
    tokens: int  # number of tokens in the fill (score / tokens = mean token log-probability)


@dataclass
class FillResult:
    text: str  # the whole patched text
    edits: list[Edit]
    stats: dict[str, Any] = field(default_factory=dict)  # decoder, model, nfe, tokens, seconds, ...
    warnings: list[str] = field(default_factory=list)  # e.g. "no syntactically valid candidate found"


ProgressCallback = Callable[[dict[str, Any]], None]


def fill_text(
    text: str,
    spans: Sequence[Span],
    *,
    language: str | None = None,
    model: Any = None,
    decode: DecodeConfig = DecodeConfig(),
    options: FillOptions = FillOptions(),
    on_progress: ProgressCallback | None = None,
) -> FillResult:
    """Fill every span of `text`; see the module docstring."""
    raise NotImplementedError("implemented by issue 3")


_ = ModelSpec  # re-exported for callers
