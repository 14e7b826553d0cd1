"""What a fill returns (FillResult, one Edit per span) and how one candidate's fills become edits of the original
text (token healing cut off, one-line and block cuts, the fill shaped to its surroundings, the file's newlines)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from infill.core.backends import Fill
from infill.core.plan import Region
from infill.spans import LineIndex


@dataclass(frozen=True)
class Edit:
    """One span's fill: the byte range [start_byte, end_byte) and lines of the ORIGINAL text it replaces, the
    replacement, and how likely the model found it."""

    start_byte: int
    end_byte: int
    start_line: int  # 1-based, inclusive
    end_line: int  # 1-based, inclusive
    text: str  # the replacement text
    score: float  # log-likelihood of the fill's tokens under the model (natural log, summed)
    tokens: int  # number of tokens in the fill (score / tokens = mean token log-probability)
    worst: float = 0.0  # the lowest log-probability of one of its tokens (0 when not scored)
    scored: bool = True  # False: the model gave no log-probabilities for its text (infill.core.backends.Fill)

    def to_json(self) -> dict[str, Any]:
        """The edit as `infill fill --format json` and the server print it (score null when unscored)."""
        keys = ("start_line", "end_line", "start_byte", "end_byte", "text", "score")
        return {key: getattr(self, key) if key != "score" or self.scored else None for key in keys}

    def lines(self) -> str:
        """The edit's lines as a person reads them: "7" or "7-9"."""
        return str(self.start_line) if self.start_line == self.end_line else f"{self.start_line}-{self.end_line}"


@dataclass
class FillResult:
    """What fill_text returns: the patched text, one Edit per span (in text order), and how it was found."""

    text: str  # the whole patched text
    edits: list[Edit]
    stats: dict[str, Any] = field(default_factory=dict)  # decoder, model, nfe, tokens, seconds, ...
    warnings: list[str] = field(default_factory=list)  # e.g. "no valid candidate found ..."
    notes: list[str] = field(default_factory=list)  # details for -v, e.g. which lines the model saw
    # calibrated probability that the fill is right (the lowest over its spans); None when the model ships no
    # calibration for this kind of fill
    confidence: float | None = None


def writes(edits: list[Edit]) -> bool:
    """Whether a candidate writes some text into every span."""
    return all(e.text.strip() for e in edits)


def candidate_edits(
    data: bytes, regions: list[Region], fills: list[Fill], newline: str, index: LineIndex
) -> list[Edit]:
    """One Edit per span of `regions` (in order) from its fill in `fills`."""
    from infill.textops import block_cut, one_line_cut, restore_newlines, shape_fill

    edits = []
    plans = [p for r in regions for p in r.spans]
    for plan, fill in zip(plans, fills, strict=True):
        raw = fill.raw
        if plan.heal:  # token healing: the fill begins with the text before the span, which stays the file's
            raw = raw[len(plan.heal) :] if raw.startswith(plan.heal) else ""
        if plan.span.one_line:
            raw = one_line_cut(raw, plan.at_line_start)
        elif plan.span.block:
            raw = block_cut(raw, plan.prefix, plan.span.block_lines, plan.span.body_indent)
        # a marker is not content: a line holding only a marker is shaped as the emptied line it stands for
        # (`--span N` on a blank line), wherever the marker sits on it, so the model's indentation is kept
        replaced = "" if plan.span.placeholder else plan.replaced
        text = restore_newlines(shape_fill(raw, plan.prefix, replaced, plan.suffix), newline)
        span = plan.span
        start_line = index.line_of(span.start_byte) if data else 1
        end_line = index.line_of(max(span.start_byte, span.end_byte - 1)) if data else 1
        edit = Edit(
            span.start_byte, span.end_byte, start_line, end_line, text, fill.score, fill.tokens, fill.worst, fill.scored
        )
        edits.append(edit)
    return edits
