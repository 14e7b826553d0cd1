"""Typeahead: the rest of a suggestion shown before, without a model call, when what the user typed since is a
beginning of it (as Copilot and llama.vim keep theirs). Pure Python: no pygls, no torch.

Each open document keeps its last few shown suggestions, each with the text around it when it was shown: the
text before the suggestion's range and after it. A completion at the cursor is answered from one of them when
the text before its range and after the cursor are still those, and the text between the range's start and the
cursor (what was typed since, or the line's indentation and what followed it for a whole-line suggestion) is a
beginning of the suggestion: the answer is the rest of it, inserted at the cursor, with the confidence it was
shown with. A request at exactly the text and cursor of the last one that showed nothing is answered with
nothing again (editors ask again when the cursor rests). The answer is computed on the document as it is now,
so it never belongs to an older version.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from infill.lsp.fills import Filled

AROUND = 256  # characters of text before and after a suggestion that must be unchanged for it to stand
KEPT = 8  # suggestions kept per document


@dataclass(frozen=True)
class Shown:
    """A suggestion as it was shown: it replaced [start, end) with `text`; `before` and `after` are the text just
    before `start` and just after `end` then."""

    start: int
    end: int
    text: str
    before: str
    after: str
    confidence: float | None


class Typeahead:
    """One document's recent suggestions (module docstring)."""

    def __init__(self) -> None:
        self.shown: deque[Shown] = deque(maxlen=KEPT)
        self.nothing_at: tuple[int, int] | None = None  # (hash of the text, cursor) of the last empty answer

    def remember(self, text: str, filled: Filled) -> None:
        """A suggestion just shown for `text`."""
        before = text[max(0, filled.start - AROUND) : filled.start]
        after = text[filled.end : filled.end + AROUND]
        self.shown.append(Shown(filled.start, filled.end, filled.text, before, after, filled.confidence))
        self.nothing_at = None

    def nothing(self, text: str, cursor: int) -> None:
        """The model had nothing to show at `cursor` of `text`."""
        self.nothing_at = (hash(text), cursor)

    def answer(self, text: str, cursor: int) -> Filled | None | bool:
        """The rest of a suggestion shown before, inserted at `cursor`; False when the model had nothing to show
        for exactly this text and cursor; None when the model has to be asked."""
        if self.nothing_at == (hash(text), cursor):
            return False
        for shown in reversed(self.shown):
            if not shown.start <= cursor or text[max(0, shown.start - len(shown.before)) : shown.start] != shown.before:
                continue
            if text[cursor : cursor + len(shown.after)] != shown.after:
                continue
            typed = text[shown.start : cursor]
            if len(typed) < len(shown.text) and shown.text.startswith(typed):
                return Filled(cursor, cursor, shown.text[len(typed) :], shown.confidence, {"typeahead": True})
        return None
