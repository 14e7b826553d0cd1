"""Render a Skeleton as a google, numpy or sphinx docstring, with empty slots (for the model) or filled text.

Layout follows what ruff's pydocstyle rules want for each convention (summary on the first line, one blank
line after it and between sections, closing quotes on their own line) and what ruff format and black leave
alone. Sphinx has no ruff convention; its output is checked against the pep257 one.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass

from infill.docstrings.skeleton import Param, Skeleton, Slot

RUFF_CONVENTION = {"google": "google", "numpy": "numpy", "sphinx": "pep257"}
QUOTES = '"""'


@dataclass(frozen=True)
class Rendered:
    """A docstring literal (quotes included) and where each slot's text lies in it (character offsets)."""

    text: str
    slots: dict[str, tuple[int, int]]


class _Builder:
    """Lines of a docstring; a line is a list of pieces (str, or a slot with its text)."""

    def __init__(self, indent: str, texts: Mapping[str, str] | None, width: int) -> None:
        self.indent = indent
        self.texts = texts
        self.width = width
        self.lines: list[list[str | tuple[Slot, str]]] = []

    def line(self, *pieces: str | Slot) -> None:
        self.lines.append([p if isinstance(p, str) else (p, self._text(p)) for p in pieces])

    def entry(self, prefix: str, slot: Slot, continuation: str) -> None:
        """`prefix` + the slot's text, wrapped to the width with `continuation` before each further line."""
        text = self._text(slot)
        if self.texts is None or not text:
            self.line(prefix, slot)
            return
        first_width = max(self.width - len(self.indent) - len(prefix), 20)
        rest_width = max(self.width - len(self.indent) - len(continuation), 20)
        wrapped = textwrap.wrap(text, width=first_width, break_long_words=False, break_on_hyphens=False)
        head, tail = wrapped[0], " ".join(wrapped[1:])
        self.lines.append([prefix, (slot, head)])
        for more in textwrap.wrap(tail, width=rest_width, break_long_words=False, break_on_hyphens=False):
            self.lines.append([continuation, (slot, more)])

    def blank(self) -> None:
        self.lines.append([])

    def _text(self, slot: Slot) -> str:
        return "" if self.texts is None else self.texts.get(slot.key, "")

    def build(self) -> Rendered:
        out: list[str] = []
        slots: dict[str, tuple[int, int]] = {}
        pos = 0
        for i, pieces in enumerate(self.lines):
            if i > 0:
                out.append("\n")
                pos += 1
                if pieces:
                    out.append(self.indent)
                    pos += len(self.indent)
            for piece in pieces:
                if isinstance(piece, str):
                    out.append(piece)
                    pos += len(piece)
                    continue
                slot, text = piece
                if slot.key not in slots:  # a wrapped slot spans from its first to its last piece
                    slots[slot.key] = (pos, pos + len(text))
                else:
                    slots[slot.key] = (slots[slot.key][0], pos + len(text))
                out.append(text)
                pos += len(text)
        return Rendered("".join(out), slots)


def render(skeleton: Skeleton, style: str, indent: str, texts: Mapping[str, str] | None, width: int) -> Rendered:
    """The docstring literal for `skeleton`; `indent` is the indentation of the body it goes in."""
    b = _Builder(indent, texts, width)
    summary = Slot("summary")
    sections = bool(skeleton.params or skeleton.returns is not None or skeleton.yields is not None or skeleton.raises)
    if not sections:
        b.line(QUOTES, summary, QUOTES)
        return b.build()
    b.line(QUOTES, summary)
    if style == "numpy":
        _numpy(b, skeleton)
    elif style == "sphinx":
        _sphinx(b, skeleton)
    else:
        _google(b, skeleton)
    b.line(QUOTES)
    return b.build()


def _google(b: _Builder, s: Skeleton) -> None:
    if s.params:
        b.blank()
        b.line("Args:")
        for p in s.params:
            b.entry(f"    {p.name}: ", Slot("param", p.name), " " * 8)
    for title, kind, present in (("Returns", "returns", s.returns), ("Yields", "yields", s.yields)):
        if present is not None:
            b.blank()
            b.line(f"{title}:")
            b.entry("    ", Slot(kind), " " * 4)  # type: ignore[arg-type]
    if s.raises:
        b.blank()
        b.line("Raises:")
        for exc in s.raises:
            b.entry(f"    {exc}: ", Slot("raises", exc), " " * 8)


def _numpy(b: _Builder, s: Skeleton) -> None:
    def header(title: str) -> None:
        b.blank()
        b.line(title)
        b.line("-" * len(title))

    if s.params:
        header("Parameters")
        for p in s.params:
            b.line(numpy_parameter_line(p))
            b.entry("    ", Slot("param", p.name), " " * 4)
    for title, kind, type_text in (("Returns", "returns", s.returns), ("Yields", "yields", s.yields)):
        if type_text is not None:
            header(title)
            b.line(literal_text(type_text) or "object")
            b.entry("    ", Slot(kind), " " * 4)  # type: ignore[arg-type]
    if s.raises:
        header("Raises")
        for exc in s.raises:
            b.line(exc)
            b.entry("    ", Slot("raises", exc), " " * 4)


def literal_text(code: str) -> str:
    """`code` (an annotation) written so that the docstring's value reads as it: backslashes doubled, and a run
    of three or more double quotes escaped, which would otherwise end the literal."""
    return re.sub('"{3,}', lambda m: '\\"' * len(m.group()), code.replace("\\", "\\\\"))


def numpy_parameter_line(p: Param) -> str:
    """A numpy Parameters entry's first line: `name : type, optional`, or the bare name."""
    kind = literal_text(p.annotation or "")
    if p.default is not None:
        kind = f"{kind}, optional" if kind else "optional"
    return f"{p.name} : {kind}" if kind else p.name


def _sphinx(b: _Builder, s: Skeleton) -> None:
    b.blank()
    for p in s.params:
        b.entry(f":param {p.bare}: ", Slot("param", p.name), " " * 4)
    if s.returns is not None:
        b.entry(":returns: ", Slot("returns"), " " * 4)
    if s.yields is not None:
        b.entry(":yields: ", Slot("yields"), " " * 4)
    for exc in s.raises:
        b.entry(f":raises {exc}: ", Slot("raises", exc), " " * 4)


_GOOGLE = re.compile(r"^\s*(Args|Arguments|Returns|Yields|Raises|Attributes|Examples?|Note|Notes|Todo):\s*$", re.M)
_NUMPY = re.compile(r"^\s*(Parameters|Returns|Yields|Raises|Attributes|See Also|Notes|Examples)\s*\n\s*-{3,}\s*$", re.M)
_SPHINX = re.compile(r"^\s*:(param|parameter|arg|type|returns?|rtype|raises?|yields?)\b", re.M)


def detect_style(docstrings: list[str], default: str = "google") -> str:
    """The style most of `docstrings` use (`--style auto`); `default` when none shows a section."""
    votes = {
        "google": sum(bool(_GOOGLE.search(d)) for d in docstrings),
        "numpy": sum(bool(_NUMPY.search(d)) for d in docstrings),
        "sphinx": sum(bool(_SPHINX.search(d)) for d in docstrings),
    }
    best = max(votes, key=lambda k: votes[k])
    return best if votes[best] > 0 else default
