"""Test helpers for `infill docstrings`: a deterministic fake SlotFiller (no model, no torch).

The fake is passed through the documented seam (the `filler` argument of process_source, or Click's context
object `obj={"slot_filler": ...}`). Run as a script, this module is `infill docstrings` with the fake filler,
which is what the pre-commit test's `language: system` hook calls.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

if __name__ == "__main__":  # run as a hook entry: make the worktree's `infill` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infill.api import Edit, FillResult  # noqa: E402
from infill.core.monitor import Monitor  # noqa: E402
from infill.spans import Span  # noqa: E402


def default_text(key: str, qualname: str) -> str:
    """Plausible, deliberately unpolished model output: lower case, no final period."""
    kind, _, subject = key.partition(":")
    name = qualname.rsplit(".", 1)[-1].strip("_").replace("_", " ")
    if kind == "summary":
        return f"returns the {name} of the input\nand more lines"
    if kind == "param":
        return f"the {subject.lstrip('*').replace('_', ' ')} to use"
    if kind == "returns":
        return "the computed value"
    if kind == "yields":
        return "each item in turn"
    return f"if the {name} is invalid"


@dataclass
class FakeFiller:
    """Records every call; answers each span with `text_for(key, qualname)`, `logprob` per token.

    `text_for` may also give a list: the candidates of that span, most likely first. Like infill.api.fill_text,
    the fake then returns the first candidate (the i-th text of every span) that the monitor does not refuse,
    or the first candidate when it refuses them all."""

    text_for: Callable[[str, str], str | list[str]] = default_text
    logprob: float = -1.0
    warnings: list[str] = field(default_factory=list)  # returned with every call
    calls: list[tuple[str, list[Span]]] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)  # every reason the monitor gave

    def __call__(
        self, text: str, spans: Sequence[Span], *, language: str, monitor: Monitor | None = None
    ) -> FillResult:
        self.calls.append((text, list(spans)))
        data = text.encode("utf-8")
        options = []
        for span in spans:
            key, _, qualname = (span.label or "").partition("|")
            given = self.text_for(key, qualname)
            options.append(given if isinstance(given, list) else [given])
        candidates = []
        for i in range(max(len(o) for o in options) if options else 1):
            edits = []
            for span, texts in zip(spans, options, strict=True):
                fill = texts[min(i, len(texts) - 1)]
                tokens = max(len(fill.split()), 1)
                line = data[: span.start_byte].count(b"\n") + 1
                edits.append(Edit(span.start_byte, span.end_byte, line, line, fill, self.logprob * tokens, tokens))
            candidates.append(edits)
        chosen = candidates[0]
        for edits in candidates:
            reason = monitor.rejection(data, edits) if monitor is not None else None
            if reason is None:
                chosen = edits
                break
            self.refusals.append(reason)
        return FillResult(text=text, edits=chosen, warnings=list(self.warnings))


def messy_text(key: str, qualname: str) -> str:
    """Output that would break a docstring if pasted as is: quotes, backslashes, markup, several lines."""
    kind = key.partition(":")[0]
    if kind == "summary":
        return '  """This function returns a \\n "quoted" value"""\n\nArgs:\n    x: y'
    if kind == "param":
        return "- `x`: the thing\\"
    return "'''"


if __name__ == "__main__":
    from infill.commands.docstrings import docstrings

    docstrings.main(sys.argv[1:], prog_name="infill docstrings", obj={"slot_filler": FakeFiller()})
