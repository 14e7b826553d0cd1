"""The documents an editor has open, as the language server knows them: their text, kept in step by didOpen and
didChange (incremental ranges or the full text), and LSP positions converted to and from offsets of that text.

A position is (line, character): lines are 0-based and end at "\\n", "\\r\\n" or a lone "\\r" (so a text that
ends with a line break has an empty last line); `character` counts code units of the negotiated encoding: UTF-16
(the LSP default; a character outside the Basic Multilingual Plane takes two), UTF-8 (bytes) or UTF-32 (code
points). Offsets here index the Python string (code points). As the specification says, a character past the end
of a line means the end of that line; the start of the line after the last one, (line count, 0), means the end of
the text, as some clients send it for an edit at the very end. Any other line past the end, and a position that
falls inside a character (between the two halves of a surrogate pair, or inside a UTF-8 sequence), is a
PositionError. Pure Python: no pygls, no torch.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field
from typing import Literal

Encoding = Literal["utf-8", "utf-16", "utf-32"]
ENCODINGS: tuple[Encoding, ...] = ("utf-16", "utf-8", "utf-32")
LINE_BREAK = re.compile(r"\r\n|\r|\n")


class PositionError(ValueError):
    """A position or range that is not in the document."""


def units(text: str, encoding: Encoding) -> int:
    """Code units of `text` in `encoding` (a lone surrogate counts as the one UTF-16 unit it was sent as)."""
    if encoding == "utf-32":
        return len(text)
    if encoding == "utf-16":
        return len(text.encode("utf-16-le", "surrogatepass")) // 2
    return len(text.encode("utf-8", "surrogatepass"))


def lone_surrogate(text: str) -> int | None:
    """Offset of the first lone surrogate in `text` (JSON can carry "\\ud800"; no file can), or None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc.start
    return None


@dataclass
class Lines:
    """Where each line of a text starts (string offsets)."""

    text: str
    starts: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.starts:
            self.starts = [0] + [m.end() for m in LINE_BREAK.finditer(self.text)]

    def edited(self, a: int, b: int, inserted: str, text: str) -> Lines:
        """The lines of `text`, this text with [a, b) replaced by `inserted`: only the lines the edit touches are
        scanned again (a keystroke in a 10,000-line file does not scan the whole file), the starts after them
        are moved. The scan begins a line before the edit (an inserted "\n" after a "\r" joins a CRLF) and ends
        at a line start past it, whose line break lies wholly in the unchanged text."""
        delta = len(inserted) - (b - a)
        first = bisect.bisect_right(self.starts, max(a - 1, 0)) - 1
        after = bisect.bisect_right(self.starts, b + 1)  # the first start whose line break is after b
        stop = self.starts[after] + delta if after < len(self.starts) else len(text)
        scanned = [m.end() for m in LINE_BREAK.finditer(text, self.starts[first], stop)]  # `stop` included
        return Lines(text, self.starts[: first + 1] + scanned + [s + delta for s in self.starts[after + 1 :]])

    @property
    def count(self) -> int:
        return len(self.starts)

    def end_of(self, line: int) -> int:
        """Offset of the end of `line`'s text, before its line break."""
        if line + 1 < len(self.starts):
            end = self.starts[line + 1]
            return end - 2 if self.text[end - 2 : end] == "\r\n" else end - 1
        return len(self.text)

    def offset(self, line: int, character: int, encoding: Encoding) -> int:
        """The string offset of an LSP position (see the module docstring for what is clamped and what is not)."""
        if line < 0 or character < 0:
            raise PositionError(f"position {line}:{character} is negative")
        if line >= self.count:
            if line == self.count and character == 0:
                return len(self.text)
            raise PositionError(f"line {line} is past the end of the document ({self.count} lines)")
        start, end = self.starts[line], self.end_of(line)
        if encoding == "utf-32":
            return min(start + character, end)
        # the line's first `character` code units, decoded back: one encode of the line, not a step per
        # character (a keystroke at the end of a 100,000-character line took 0.4 s that way)
        text = self.text[start:end]
        codec = "utf-16-le" if encoding == "utf-16" else encoding
        width = 2 if encoding == "utf-16" else 1
        try:
            found = text.encode(codec, "surrogatepass")[: character * width].decode(codec, "surrogatepass")
        except UnicodeDecodeError:  # the cut falls inside a UTF-8 sequence
            found = None
        if found is not None and text.startswith(found):
            return start + len(found)
        # a cut inside a character (half of a surrogate pair decodes to a lone one), or lone surrogates that
        # decode as a pair: counted one character at a time
        at, counted = start, 0
        while at < end and counted < character:
            counted += units(self.text[at], encoding)
            at += 1
        if counted > character:
            raise PositionError(f"position {line}:{character} falls inside a character ({encoding} code units)")
        return at

    def position(self, offset: int, encoding: Encoding) -> tuple[int, int]:
        """The LSP position (line, character) of a string offset."""
        line = bisect.bisect_right(self.starts, offset) - 1
        return line, units(self.text[self.starts[line] : offset], encoding)


@dataclass
class Document:
    """One open document. `broken` says why its text can no longer be trusted (a change the server could not
    apply); requests on it are refused until the client sends its whole text again or reopens it."""

    uri: str
    language_id: str
    version: int
    text: str
    broken: str | None = None
    _lines: Lines | None = field(default=None, repr=False)

    @property
    def lines(self) -> Lines:
        if self._lines is None or self._lines.text is not self.text:
            self._lines = Lines(self.text)
        return self._lines

    def offset(self, line: int, character: int, encoding: Encoding) -> int:
        return self.lines.offset(line, character, encoding)

    def position(self, offset: int, encoding: Encoding) -> tuple[int, int]:
        return self.lines.position(offset, encoding)

    def change(
        self, version: int, text: str, start: tuple[int, int] | None, end: tuple[int, int] | None, encoding: Encoding
    ) -> None:
        """Apply one content change: the full text (no range), or `text` in place of the range start..end. A
        range that is not in the document marks it broken (PositionError is raised after that)."""
        if start is None or end is None:
            self.text, self.broken, self.version = text, None, version
            return
        if self.broken is not None:  # later ranges refer to a text this server does not have
            self.version = version
            return
        try:
            a, b = self.offset(*start, encoding), self.offset(*end, encoding)
            if b < a:
                raise PositionError(f"range {start[0]}:{start[1]}-{end[0]}:{end[1]} ends before it starts")
        except PositionError as exc:
            self.broken = f"a change could not be applied ({exc})"
            raise
        lines = self.lines
        self.text, self.version = self.text[:a] + text + self.text[b:], version
        self._lines = lines.edited(a, b, text, self.text)

    def byte_offset(self, offset: int) -> int:
        """The UTF-8 byte offset of a string offset (what infill's spans and edits use)."""
        return len(self.text[:offset].encode("utf-8", "surrogatepass"))
