"""The one seam between the docstring filler and a model.

A SlotFiller takes a text (the definition's code with the docstring skeleton inserted), the spans of its
empty slots and the monitor of their text (infill.docstrings.monitor.SlotMonitor: a candidate it refuses is
ranked last and, when sampling, resampled; see infill.api's "Monitors"), and returns an infill.api.FillResult
whose edits fill those spans. The real one calls infill.api.fill_text once per definition; tests pass a
deterministic fake instead (no model, no torch), either as the `filler` argument of
infill.docstrings.engine.process_source, or to the CLI command through Click's context object:
`docstrings.main(args, obj={"slot_filler": fake})`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.spans import Span

if TYPE_CHECKING:
    from infill.api import FillResult
    from infill.core.checks import Monitor


def slot_span(start: int, end: int, label: str, budget: int) -> Span:
    """The Span of an empty slot, with its own token budget."""
    return Span(start, end, label, default_tokens=budget)


def options_for(temperature: float = 0.0) -> FillOptions:
    """Fill options for slots (each slot has its own budget, see `slot_span`)."""
    # the engine cleans every slot's text and the command checks that the file still parses before writing it,
    # so a rejected (broken UTF-8) candidate is better cleaned than refused. Greedy decoding (temperature 0)
    # would draw the same text again: a candidate the monitor refuses is then not resampled but falls back
    resample = FillOptions.max_resample if temperature > 0 else 0
    return FillOptions(syntax_check=False, allow_syntax_errors=True, max_resample=resample)


class SlotFiller(Protocol):
    def __call__(
        self, text: str, spans: Sequence[Span], *, language: str, monitor: Monitor | None = None
    ) -> FillResult: ...


def model_filler(
    model: ModelSpec,
    decode: DecodeConfig,
    options: FillOptions,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
) -> SlotFiller:
    """A SlotFiller backed by infill.api.fill_text (the model is loaded on the first call, then cached);
    `on_progress` gets every fill's progress events (a server's cancel check raises from it)."""

    def fill(text: str, spans: Sequence[Span], *, language: str, monitor: Monitor | None = None) -> FillResult:
        from infill.api import fill_text

        return fill_text(
            text,
            spans,
            language=language,
            model=model,
            decode=decode,
            options=options,
            on_progress=on_progress,
            monitor=monitor,
        )

    return fill
