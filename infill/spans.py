"""Selections -> byte spans of the original UTF-8 input. Never imports torch."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Span:
    """A half-open byte range [start_byte, end_byte) of the original input to be replaced by a fill."""

    start_byte: int
    end_byte: int
    label: str = ""  # where it came from, e.g. "--span 12:18" or "function foo"
