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


LARGE = (
    b"import os\n\nTABLE = {\n    'a': 1,\n    'b': [2,\n          3],\n    'c': 4,\n}\n\n\n"
    b"def g():\n    return TABLE\n"
)
CANDIDATES = [
    "    'x': 9,",
    "    'x': 'é',\n    'y': 8,",
    "    'x' 9,",
    "    'x': '''",
    "    'x': 1}\nfoo(",
    "",
    "    # note",
    "    'x': [1,\n          2],",
]


def test_a_clean_fill_in_a_large_input_is_not_parsed_from_scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each candidate's chunk was parsed from scratch (over a second per candidate for a statement megabytes
    long); it is parsed from the original's parse, which the chunks already need, with the edits applied."""
    from infill import languages
    from infill.core import checks
    from infill.spans import Span

    monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)
    parsed: list[int] = []
    real = languages.parse

    def counting(name: str, source: bytes) -> Any:
        parsed.append(len(source))
        return real(name, source)

    monkeypatch.setattr(languages, "parse", counting)
    at = LARGE.index(b"    'c': 4,")
    end = at + len(b"    'c': 4,")
    check = checks.SyntaxCheck("python", LARGE, [Span(at, end)])
    parsed.clear()
    assert check.rejection(LARGE[:at] + b"    'x': 9," + LARGE[end:], [_edit(at, end, "    'x': 9,")]) is None
    assert parsed == [len(LARGE)]  # the original, once, for its statements


@pytest.mark.parametrize("text", CANDIDATES)
def test_a_chunk_parsed_from_the_original_is_judged_as_a_fresh_parse(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """The incremental parse of a candidate's chunk gives the verdict, and the tree, of a parse from scratch."""
    from infill import languages
    from infill.core import checks
    from infill.spans import Span

    monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)
    at = LARGE.index(b"    'b': [2,")
    end = LARGE.index(b"    'c': 4,")
    patched = LARGE[:at] + text.encode() + LARGE[end:]
    edits = [_edit(at, end, text)]
    check = checks.SyntaxCheck("python", LARGE, [Span(at, end)])
    verdict = check.rejection(patched, edits)
    fresh = checks.SyntaxCheck("python", LARGE, [Span(at, end)])
    monkeypatch.setattr(fresh, "_reparse", lambda *args: None)
    assert verdict == fresh.rejection(patched, edits)
    assert check._parsed is not None
    kept, tree = check._parsed
    assert str(tree.root_node) == str(languages.parse("python", kept).root_node)
