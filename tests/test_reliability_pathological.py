"""Pathological inputs to `infill fill` and `infill docstrings`: one test per defect this sweep found (a statement
megabytes long, encodings, odd files); each failed before its fix (docs/reliability.md)."""

from __future__ import annotations

from typing import Any

import pytest


def _edit(start: int, end: int, text: str) -> Any:
    return type("E", (), {"start_byte": start, "end_byte": end, "text": text})()


def test_a_clean_fill_in_a_large_input_compiles_its_chunk_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fill inside a statement megabytes long compiled and parsed that statement twice: once as it stood (the
    bar a candidate is held to) and once with the candidate. A candidate that compiles with no tree-sitter error
    passes whatever the bar, so the bar is worked out only for a candidate that is not clean."""
    from infill.core import checks
    from infill.spans import Span

    monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)
    compiled: list[bytes] = []
    real = checks.python_error_line

    def counting(source: bytes) -> int | None:
        compiled.append(source)
        return real(source)

    monkeypatch.setattr(checks, "python_error_line", counting)
    data = b"TABLE = {\n    'a': 1,\n    'b': 2,\n}\n\n\ndef g():\n    return TABLE\n"
    at = data.index(b"    'b': 2,")
    end = at + len(b"    'b': 2,")
    check = checks.SyntaxCheck("python", data, [Span(at, end)])
    good = _edit(at, end, "    'c': 3,")
    assert check.rejection(data[:at] + b"    'c': 3," + data[end:], [good]) is None
    assert len(compiled) == 1  # the candidate's chunk only
    bad = _edit(at, end, "    'c' 3,")
    compiled.clear()
    assert check.rejection(data[:at] + b"    'c' 3," + data[end:], [bad]) == "does not compile"
    assert len(compiled) == 2  # the candidate's chunk, then the chunk as it stood (which compiles)
