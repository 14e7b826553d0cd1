"""The one seam between the docstring filler and a model: `call_filler` makes every model call of a run.

A SlotFiller takes a text (the definition's code with the docstring skeleton inserted), the spans of its
empty slots and the monitor of their text (infill.docstrings.monitor.SlotMonitor: a candidate it refuses is
ranked last and, when sampling, resampled; see infill.core.pipeline's "Monitors"), and returns an infill.api.FillResult
whose edits fill those spans. The real one calls infill.api.fill_text once per definition; tests pass a
deterministic fake instead (no model, no torch), either as the `filler` argument of
infill.docstrings.engine.process_source, or to the CLI command through Click's context object:
`docstrings.main(args, obj={"slot_filler": fake})`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.docstrings.confidence import ModelText
from infill.docstrings.config import DocstringConfig
from infill.docstrings.monitor import SlotMonitor
from infill.docstrings.skeleton import Slot
from infill.docstrings.styles import Rendered
from infill.spans import Span

if TYPE_CHECKING:
    from infill.api import FillResult
    from infill.core.monitor import Monitor


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

    from functools import partial

    from infill.api import fill_text

    return partial(fill_text, model=model, decode=decode, options=options, on_progress=on_progress)


MonitorFor = Callable[[Mapping[int, Slot]], SlotMonitor]


def call_filler(
    filler: SlotFiller,
    prefix: bytes,
    template: Rendered,
    suffix: bytes,
    qualname: str,
    language: str,
    cfg: DocstringConfig,
    monitor_for: MonitorFor | None = None,
) -> ModelText:
    """One model call: `prefix + template + suffix` with the template's slots as spans, and the monitor that
    `monitor_for` builds for them (it gets each slot by its span's start byte). Returns the raw text and the
    score of each slot by key, and the call's warnings."""
    context = prefix + template.text.encode("utf-8") + suffix
    spans = []
    for key, (start, end) in template.slots.items():
        byte_start = len(prefix) + len(template.text[:start].encode("utf-8"))
        byte_end = len(prefix) + len(template.text[:end].encode("utf-8"))
        budget = cfg.summary_tokens if key == "summary" else cfg.description_tokens
        spans.append(slot_span(byte_start, byte_end, f"{key}|{qualname}", budget))
    spans.sort()
    watch = None
    if monitor_for is not None:
        watch = monitor_for({span.start_byte: Slot.from_key(span.label.split("|", 1)[0]) for span in spans})
    result = filler(context.decode("utf-8"), spans, language=language, monitor=watch)
    out = ModelText(warnings=list(result.warnings))
    by_range = {(e.start_byte, e.end_byte): e for e in result.edits}
    for span in spans:
        edit = by_range.get((span.start_byte, span.end_byte))
        if edit is None:
            continue
        key = span.label.split("|", 1)[0]
        out.raw[key] = edit.text
        out.scores[key] = (edit.score, edit.tokens)
    return out
