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


def _count_parses(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The length of every source infill.languages.parse parses from now on."""
    from infill import languages

    parsed: list[int] = []
    real = languages.parse

    def counting(name: str, source: bytes) -> Any:
        parsed.append(len(source))
        return real(name, source)

    monkeypatch.setattr(languages, "parse", counting)
    return parsed


def test_a_clean_fill_in_a_large_input_is_not_parsed_from_scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each candidate's chunk was parsed from scratch (over a second per candidate for a statement megabytes
    long); it is parsed from the original's parse, which the chunks already need, with the edits applied."""
    from infill.core import checks
    from infill.spans import Span

    monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)
    parsed = _count_parses(monkeypatch)
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


LATIN1 = "# -*- coding: latin-1 -*-\nNAME = 'café'\n\n\ndef f(x):\n    return 0\n".encode("latin-1")
DECLARED = b"# -*- coding: latin-1 -*-\n\n\ndef f(x):\n    return 0\n"  # the same cookie, ASCII text


def _fill(*args: str, fills: list[str], stdin: bytes | None = None) -> Any:
    from click.testing import CliRunner
    from fixtures_cli import fake_model

    from infill.cli import main

    with fake_model(fills, name="fake-pathological"):
        return CliRunner().invoke(main, ["fill", *args, "--model", "fake-pathological"], input=stdin)


def test_a_file_in_another_encoding_is_refused_naming_it(tmp_path: Any) -> None:
    """A latin-1 file with its coding cookie was refused as "not UTF-8 (invalid byte at offset 37)", which does
    not say the file is fine and declares its encoding; the line names the encoding and how to convert it."""
    p = tmp_path / "a.py"
    p.write_bytes(LATIN1)
    r = _fill(str(p), "--span", "6", fills=["    return x"])
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.splitlines()
    assert "line 1 declares latin-1" in line and "iconv -f latin-1 -t utf-8" in line, line
    assert p.read_bytes() == LATIN1


@pytest.mark.parametrize("extra", [(), ("--no-syntax-check",)])
def test_a_fill_is_never_written_as_utf8_into_a_file_declared_latin1(tmp_path: Any, extra: tuple[str, ...]) -> None:
    """An ASCII file with a latin-1 coding cookie reads as UTF-8, and a fill of `'é'` was written in UTF-8: the
    file still compiled, with `'Ã©'` in it. A fill that is not ASCII is refused there, as a fill that splits a
    UTF-8 character is (with --no-syntax-check too)."""
    p = tmp_path / "a.py"
    p.write_bytes(DECLARED)
    r = _fill(str(p), "--span", "5", *extra, fills=["    return 'é'"])
    assert r.exit_code == 3, r.output
    assert "declares latin-1" in r.stderr, r.stderr
    assert p.read_bytes() == DECLARED
    r = _fill(str(p), "--span", "5", *extra, fills=["    return 'e'"])
    assert r.exit_code == 0, r.output
    assert p.read_bytes() == DECLARED.replace(b"return 0", b"return 'e'")
    r = _fill("-", "--stdin-filename", "a.py", "--span", "5", fills=["    return 'é'"], stdin=DECLARED)
    assert r.exit_code == 3 and r.stdout_bytes == DECLARED


def test_docstrings_are_never_written_as_utf8_into_a_file_declared_latin1(tmp_path: Any) -> None:
    from click.testing import CliRunner
    from fixtures_doc import FakeFiller, default_text

    from infill.commands.docstrings import docstrings

    p = tmp_path / "a.py"
    p.write_bytes(DECLARED)
    filler = FakeFiller(text_for=lambda key, name: default_text(key, name).replace("input", "café"))
    r = CliRunner().invoke(docstrings, ["--min-probability", "0", str(p)], obj={"slot_filler": filler})
    assert r.exit_code == 3, r.output
    assert "declares latin-1" in r.stderr, r.stderr
    assert p.read_bytes() == DECLARED


def test_docstrings_for_a_file_nested_too_deep_for_cpythons_parser(tmp_path: Any) -> None:
    """`X = ` and 7,000 `-` signs: CPython's parser runs out of memory (MemoryError), which `infill docstrings`
    reported as an internal error (exit 123). The file is read as one CPython cannot parse: its docstrings come
    from tree-sitter's view, as for a file with a syntax error tree-sitter can read."""
    from click.testing import CliRunner
    from fixtures_doc import FakeFiller

    from infill.commands.docstrings import docstrings

    p = tmp_path / "a.py"
    source = "X = " + "-" * 7_000 + "1\n\n\ndef area(w, h):\n    return w * h\n"
    p.write_text(source)
    r = CliRunner().invoke(docstrings, ["--diff", str(p)], obj={"slot_filler": FakeFiller()})
    assert r.exit_code == 1, r.output  # --diff: changes needed
    assert '    """' in r.stdout and p.read_text() == source


def test_a_file_nested_too_deep_for_the_compiler_tries_no_fillers(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file CPython cannot compile for its depth (a chain of 200,000 `+`: RecursionError; 7,000 `-`:
    MemoryError) has an error with no line, which counted as near the span: each of about 50 fillers compiled
    the file again and failed the same way, a minute per fill of a line below a long expression."""
    from infill.core import checks
    from infill.spans import Span

    compiled: list[int] = []
    real = checks.python_error_line

    def counting(source: bytes) -> int | None:
        compiled.append(len(source))
        return real(source)

    monkeypatch.setattr(checks, "python_error_line", counting)
    data = ("X = " + "-" * 7_000 + "1\n\n\ndef area(w, h):\n    total = w * h\n    return total\n").encode()
    assert checks.python_error_line(data) == 0
    compiled.clear()
    at = data.index(b"    total")
    end = data.index(b"\n", at)
    check = checks.SyntaxCheck("python", data, [Span(at, end)])
    assert len(compiled) == 1 and not check.python
    patched = data[:at] + b"    total = w" + data[end:]
    assert check.rejection(patched, [_edit(at, end, "    total = w")]) is None


def test_a_selector_finds_a_function_after_a_lone_cr(tmp_path: Any) -> None:
    """Tree-sitter's grammars read a lone CR as a space, so everything after a classic Mac line ending was one
    line of errors: `--function name` was "not found (the file does not parse from line 3)" in a file CPython
    compiles. A lone CR is read as the line break it is; every byte offset is the same."""
    data = b"def area(w, h):\r\n    total = w * h\n    return total\r\rdef name(x):\r    return str(x)\r"
    p = tmp_path / "a.py"
    p.write_bytes(data)
    r = _fill(str(p), "--function", "name", fills=["    return repr(x)"])
    assert r.exit_code == 0, r.output
    new = p.read_bytes()
    head = data.index(b"def name(x):\r") + len(b"def name(x):\r")
    assert new[:head] == data[:head] and new.endswith(b"return repr(x)\r"), new
    compile(new, "a.py", "exec", dont_inherit=True)


def test_a_small_chunk_of_a_large_input_is_parsed_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Editing the whole input's tree costs about what parsing the input does (a second per edit for 20 MB): a
    fill in one function among thousands took seconds more when its chunk was parsed from that tree. Only a
    chunk that is most of the input is; a small one is parsed on its own."""
    from infill.core import checks
    from infill.spans import Span

    monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)
    parsed = _count_parses(monkeypatch)
    data = b"".join(b"def f%d(x):\n    return x + %d\n\n\n" % (i, i) for i in range(20))
    at = data.index(b"    return x + 7")
    end = data.index(b"\n", at)
    check = checks.SyntaxCheck("python", data, [Span(at, end)])
    parsed.clear()
    patched = data[:at] + b"    return x" + data[end:]
    assert check.rejection(patched, [_edit(at, end, "    return x")]) is None
    chunk = data.index(b"\n\n\ndef f8") + 3 - data.index(b"def f7")
    assert parsed == [len(data), chunk - (end - at) + len(b"    return x")]


def test_one_fill_indexes_the_lines_of_its_input_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """The spans and the plan of a fill each indexed the input's lines (a second each for 20 MB)."""
    from infill import spans

    built: list[int] = []
    real = spans.LineIndex.__init__

    def counting(self: Any, data: bytes) -> None:
        built.append(len(data))
        real(self, data)

    monkeypatch.setattr(spans.LineIndex, "__init__", counting)
    p = tmp_path / "a.py"
    source = b"def f(x):\n    return 0\n\n\ndef g(y):\n    return y\n"
    p.write_bytes(source)
    r = _fill(str(p), "--span", "2", fills=["    return x + 1"])
    assert r.exit_code == 0, r.output
    assert built.count(len(source)) == 1, built
