"""Context from the other documents the editor has open or recently changed: a bounded ring of text chunks that
join retrieval's candidate lines (infill.retrieval), as `infill fill --context FILE` does. Pure Python.

A chunk is CHUNK_LINES lines of one document: the start of a document when it is opened, and the lines around
each change. A chunk that overlaps one already kept for the same document replaces it (and becomes the newest);
past CHUNKS chunks the oldest goes. A completion in a document gets the chunks of every other document, so a
5 MB file or a burst of changes costs at most CHUNKS chunks of CHUNK_LINES lines (each cut at CHUNK_CHARS).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

CHUNKS = 16
CHUNK_LINES = 64
CHUNK_CHARS = 8192


@dataclass(frozen=True)
class Chunk:
    uri: str
    first: int  # its first line in the document when it was taken
    text: str

    def overlaps(self, uri: str, first: int) -> bool:
        return uri == self.uri and abs(first - self.first) < CHUNK_LINES


class ContextRing:
    """The ring of chunks (module docstring)."""

    def __init__(self, size: int = CHUNKS) -> None:
        self.chunks: deque[Chunk] = deque(maxlen=size)

    def take(self, uri: str, text: str, starts: Sequence[int], line: int) -> None:
        """Keep the chunk of `text` (a document's whole text, whose lines start at the offsets `starts`) around
        `line` (0-based)."""
        first = min(max(0, line - CHUNK_LINES // 2), len(starts) - 1)
        start = starts[first]
        end = starts[first + CHUNK_LINES] if first + CHUNK_LINES < len(starts) else len(text)
        body = text[start : min(end, start + CHUNK_CHARS)]
        if not body.strip():
            return
        for old in [c for c in self.chunks if c.overlaps(uri, first)]:
            self.chunks.remove(old)
        self.chunks.append(Chunk(uri, first, body))

    def texts(self, exclude: str) -> tuple[str, ...]:
        """The chunks of every document but `exclude`, newest first."""
        return tuple(c.text for c in reversed(self.chunks) if c.uri != exclude)
