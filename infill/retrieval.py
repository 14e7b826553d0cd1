"""Candidate lines from the user's own code, for a one-line fill (the model ranks them; see infill.api).

Real code repeats itself: a line that follows a line like the one above the gap, or precedes a line like the
one below it, somewhere else in the file (or in files the user names with --context), is often exactly the
missing line. `line_candidates` finds such lines by the similarity of their neighbours to the gap's
neighbours and returns them with a few plausible indentations; the model then scores every candidate by its
exact likelihood in the span, next to its own samples, and the most likely valid one wins. Standard library
only: no torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]*|\d+|[^\sA-Za-z_0-9]")


def _tokens(line: str) -> set[str]:
    return set(_WORD.findall(line))


def similarity(a: str, b: str) -> float:
    """Jaccard similarity of the word/punctuation sets of two lines (1.0 for equal stripped lines)."""
    a, b = a.strip(), b.strip()
    if not a or not b:
        return 0.0
    if a == b:
        return 1.0
    ta, tb = _tokens(a), _tokens(b)
    return len(ta & tb) / len(ta | tb) if ta | tb else 0.0


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _neighbour(lines: list[str], i: int, step: int) -> str:
    """The nearest non-blank line from i in direction step, or ''."""
    i += step
    while 0 <= i < len(lines):
        if lines[i].strip():
            return lines[i]
        i += step
    return ""


def line_candidates(
    before: str, after: str, others: Sequence[str] = (), limit: int = 6, min_score: float = 0.5
) -> list[str]:
    """Lines (with indentation, no line break) for a gap of one line between `before` (ends where the line
    starts) and `after` (starts with the line's break), best first.

    A line of the surrounding text or of `others` scores similarity(its previous non-blank line, the gap's) +
    similarity(its next non-blank line, the gap's); lines scoring below `min_score`, blank lines and lines
    equal to a neighbour of the gap are skipped. Each kept line is offered with its own indentation and with
    the indentations the gap's neighbours suggest.
    """
    prev_lines = before.split("\n")[:-1] if before else []
    next_lines = after.split("\n")[1:] if after.startswith("\n") else after.split("\n")
    above = _neighbour(prev_lines, len(prev_lines), -1)
    below = _neighbour(next_lines, -1, 1)
    if not above.strip() and not below.strip():
        return []
    sources = [prev_lines + [""] + next_lines, *(text.split("\n") for text in others)]
    scored: dict[str, tuple[float, str]] = {}  # body -> (score, its own indentation)
    for lines in sources:
        for i, line in enumerate(lines):
            body = line.strip()
            if not body or body in (above.strip(), below.strip()):
                continue
            s = similarity(_neighbour(lines, i, -1), above) + similarity(_neighbour(lines, i, 1), below)
            if s >= min_score and s > scored.get(body, (0.0, ""))[0]:
                scored[body] = (s, _indent(line))
    ranked = sorted(scored, key=lambda body: -scored[body][0])[:limit]
    suggested = [_indent(above) + ("    " if above.rstrip().endswith(":") else ""), _indent(below)]
    out: list[str] = []
    for body in ranked:
        for indent in dict.fromkeys([scored[body][1], *suggested]):
            text = indent + body
            if text not in out:
                out.append(text)
    return out
