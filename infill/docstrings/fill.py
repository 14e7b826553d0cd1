"""The one seam between the docstring filler and a model.

A SlotFiller takes a text (the definition's code with the docstring skeleton inserted) and the spans of its
empty slots, and returns an infill.api.FillResult whose edits fill those spans. The real one calls
infill.api.fill_text once per definition; tests pass a deterministic fake instead (no model, no torch), either
as the `filler` argument of infill.docstrings.engine.process_source, or to the CLI command through
Click's context object: `docstrings.main(args, obj={"slot_filler": fake})`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.spans import Span

if TYPE_CHECKING:
    from infill.api import FillResult


# Per-span token budgets: Span.default_tokens is appended by issue 3 (the budget of a span that replaces no
# text). Until that lands, every slot gets FillOptions.tokens.
SPAN_BUDGETS = "default_tokens" in {f.name for f in dataclasses.fields(Span)}


def slot_span(start: int, end: int, label: str, budget: int) -> Span:
    """The Span of an empty slot, with its own token budget where Span supports one."""
    span = Span(start, end, label)
    budgets: dict[str, Any] = {"default_tokens": budget} if SPAN_BUDGETS else {}
    return dataclasses.replace(span, **budgets)


def options_for(summary_tokens: int, description_tokens: int) -> FillOptions:
    """Fill options for slots: per-span budgets when available, else the largest budget for every slot."""
    tokens = None if SPAN_BUDGETS else max(summary_tokens, description_tokens)
    # the engine cleans every slot's text and the command checks that the file still parses before writing it,
    # so a rejected (broken UTF-8) candidate is better cleaned than refused
    return FillOptions(tokens=tokens, syntax_check=False, allow_syntax_errors=True)


class SlotFiller(Protocol):
    def __call__(self, text: str, spans: Sequence[Span], *, language: str) -> FillResult: ...


def model_filler(model: ModelSpec, decode: DecodeConfig, options: FillOptions) -> SlotFiller:
    """A SlotFiller backed by infill.api.fill_text (the model is loaded on the first call, then cached)."""

    def fill(text: str, spans: Sequence[Span], *, language: str) -> FillResult:
        from infill.api import fill_text

        return fill_text(text, spans, language=language, model=model, decode=decode, options=options)

    return fill
