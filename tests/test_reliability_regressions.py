"""Never make a file worse: one regression test per defect a sweep of about 60 bad or edge inputs found (numbered
01-11 as that sweep reported them: a BOM, unparseable fills, the editor filter, permissions, large inputs, the
daemon, bad numbers, broken pipes...).

Each test failed on the code before its fix. The systematic checks are in test_reliability_properties.py,
test_reliability_bad_inputs.py and test_reliability_server_fuzz.py.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_cli import fake_model
from fixtures_doc import FakeFiller

from infill.cli import main
from infill.commands.docstrings import docstrings

BOM = b"\xef\xbb\xbf"
SIMPLE = "x = 1\ny = 2\n"


# --- item 1: `infill docstrings` on a file that starts with a UTF-8 BOM ---------------------------------------


def test_item01_docstrings_keep_the_bom_first(tmp_path: Path) -> None:
    p = tmp_path / "b.py"
    source = BOM + b"import math\n\n\ndef f(x):\n    return math.sqrt(x)\n"
    p.write_bytes(source)
    result = CliRunner().invoke(docstrings, [str(p)], obj={"slot_filler": FakeFiller()})
    assert result.exit_code == 0, result.output
    out = p.read_bytes()
    assert out != source  # docstrings were written ...
    assert out.startswith(BOM + b'"""') and out.count(BOM) == 1  # ... after the BOM, which stays first
    compile(out, str(p), "exec")  # and the file still compiles (U+FEFF on line 3 did not)


# --- item 4: filling line 1 of a file with a BOM kept the fill but dropped the BOM ----------------------------


def test_item04_fill_line_1_keeps_the_bom(tmp_path: Path) -> None:
    p = tmp_path / "bom.py"
    p.write_bytes(BOM + b"x = 1\ny = 2\n")
    with fake_model(["x = 42"], name="fake-bom"):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", "1", "--model", "fake-bom"])
    assert r.exit_code == 0, r.output
    assert p.read_bytes() == BOM + b"x = 42\ny = 2\n"


# --- item 11b: a file with lone-CR line endings counted as one line --------------------------------------------


def test_item11b_lone_cr_line_endings_are_lines(tmp_path: Path) -> None:
    p = tmp_path / "mac.txt"
    p.write_bytes(b"a = 1\rb = 2\rc = 3\r")
    with fake_model(["b = 20"], name="fake-cr"):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", "2", "--model", "fake-cr"])
    assert r.exit_code == 0, r.output
    assert p.read_bytes() == b"a = 1\rb = 20\rc = 3\r"


# --- item 2: no candidate parses -> nothing is written, exit 3, the failing edits are named ----------------------

STACK = "class Stack:\n    pass\n\n\ndef top(s):\n    return s[-1]\n"
UNTERMINATED = '"""oops'  # an unterminated string, short enough for the token budget


def test_item02_unparseable_fill_is_not_written(tmp_path: Path) -> None:
    p = tmp_path / "stack.py"
    p.write_text(STACK)
    with fake_model([UNTERMINATED], name="fake-bad"):
        r = CliRunner().invoke(main, ["fill", str(p), "--class", "Stack", "--model", "fake-bad"])
    assert r.exit_code == 3, r.output
    assert p.read_text() == STACK
    (line,) = r.stderr.splitlines()
    assert line.startswith("error: ") and "--class Stack (line 2)" in line and "nothing was written" in line


def test_item02_allow_syntax_errors_writes_the_most_likely(tmp_path: Path) -> None:
    p = tmp_path / "stack.py"
    p.write_text(STACK)
    with fake_model([UNTERMINATED], name="fake-bad"):
        args = ["fill", str(p), "--class", "Stack", "--model", "fake-bad", "--allow-syntax-errors"]
        r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert UNTERMINATED in p.read_text()
    assert "warning:" in r.stderr and "--allow-syntax-errors" in r.stderr


def test_item02_json_and_diff_name_the_failed_edit(tmp_path: Path) -> None:
    p = tmp_path / "stack.py"
    p.write_text(STACK)
    # two spans: the class body gets a valid fill, the function body an unterminated string
    with fake_model(["x = 1", UNTERMINATED], name="fake-half"):
        base = ["fill", str(p), "--class", "Stack", "--function", "top", "--model", "fake-half"]
        rj = CliRunner().invoke(main, [*base, "--format", "json"])
        rd = CliRunner().invoke(main, [*base, "--diff"])
    assert rj.exit_code == 3 and rd.exit_code == 3, (rj.output, rd.output)
    doc = json.loads(rj.stdout)
    assert doc["edits"] == [] and doc["error"]["code"] == "no_valid_fill" and doc["error"]["exit_code"] == 3
    (failed,) = doc["failed"]  # only the function body's edit breaks the file
    assert failed["label"] == "--function top" and (failed["start_line"], failed["end_line"]) == (6, 6)
    assert failed["text"].strip() == UNTERMINATED and failed["reason"]
    assert rd.stdout == "" and "--function top (line 6)" in rd.stderr and "--class" not in rd.stderr
    assert p.read_text() == STACK


def test_item02_filter_mode_echoes_the_input(tmp_path: Path) -> None:
    with fake_model([UNTERMINATED], name="fake-bad"):
        r = CliRunner().invoke(
            main, ["fill", "-", "--stdin-filename", "s.py", "--class", "Stack", "--model", "fake-bad"], STACK
        )
    assert (r.exit_code, r.stdout, r.stderr) == (3, STACK, "")


def test_item02_server_answers_no_valid_fill() -> None:
    from infill.server.dispatch import Dispatcher

    request = {"id": 1, "method": "fill", "params": {"text": STACK, "filename": "s.py", "class": "Stack"}}
    with fake_model([UNTERMINATED], name="fake-bad"):
        request["params"]["model"] = "fake-bad"
        reply = json.loads(Dispatcher().handle_line(json.dumps(request).encode()))
    error = reply["error"]
    assert (error["code"], error["exit_code"]) == ("no_valid_fill", 3)
    assert [f["label"] for f in error["failed"]] == ["--class Stack"]


def test_item02_docstrings_never_write_an_unparseable_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import infill.docstrings.run as command
    from infill.docstrings.outcome import FileResult

    p = tmp_path / "m.py"
    p.write_text("def f():\n    pass\n")

    def broken(source: str, path: str, *args: object, **kwargs: object) -> FileResult:
        return FileResult(path, source, source.replace("pass", '"""unterminated\n    pass'), [], "google")

    monkeypatch.setattr(command, "process_source", broken)
    result = CliRunner().invoke(docstrings, [str(p)], obj={"slot_filler": FakeFiller()})
    assert result.exit_code == 3, result.output
    assert p.read_text() == "def f():\n    pass\n"
    assert "would break the file's syntax" in result.stderr


# --- item 3: the editor filter echoes its input on usage errors too ---------------------------------------------

FILTER_SOURCE = "def f(x):\r\n    return x\r\n"  # CRLF: echoed byte for byte


@pytest.mark.parametrize(
    "flags",
    [
        ["--span", "3", "--tokens", "0"],  # a value out of range
        ["--span", "1", "--bogus"],  # an unknown option
        ["--span", "1", "--decoder", "nope"],  # a bad choice
        ["--span", "1", "--temperature"],  # a missing value
    ],
)
def test_item03_filter_mode_echoes_input_on_usage_errors(flags: list[str]) -> None:
    r = CliRunner().invoke(main, ["fill", "-", "--stdin-filename", "f.py", *flags], FILTER_SOURCE.encode())
    assert r.exit_code == 2
    assert r.stdout_bytes == FILTER_SOURCE.encode()
    assert r.stderr == ""  # filter mode is silent on stderr unless -v
    rv = CliRunner().invoke(main, ["fill", "-", "-v", "--stdin-filename", "f.py", *flags], FILTER_SOURCE.encode())
    assert rv.exit_code == 2 and rv.stdout_bytes == FILTER_SOURCE.encode()
    assert len(rv.stderr.splitlines()) == 1 and rv.stderr.startswith("error: ")


def test_item03_not_filter_mode_prints_nothing_on_stdout() -> None:
    args = ["fill", "-", "--stdin-filename", "f.py", "--span", "3", "--tokens", "0", "--diff"]
    r = CliRunner().invoke(main, args, FILTER_SOURCE.encode())
    assert r.exit_code == 2 and r.stdout == ""  # --diff is not the filter: no echo


@pytest.mark.parametrize(
    ("group", "env"),
    [
        (["--threads", "0"], {}),  # the `infill` group's own option, parsed before `fill` sees anything
        (["--threads=many"], {}),
        ([], {"INFILL_THREADS": "0"}),  # the same option from the environment
    ],
)
def test_item03_filter_mode_echoes_input_on_group_usage_errors(group: list[str], env: dict[str, str]) -> None:
    args = [*group, "fill", "-", "--stdin-filename", "f.py", "--span", "1"]
    r = CliRunner().invoke(main, args, FILTER_SOURCE.encode(), env=env)
    assert (r.exit_code, r.stdout_bytes, r.stderr) == (2, FILTER_SOURCE.encode(), "")
    rv = CliRunner().invoke(main, [*args, "-v"], FILTER_SOURCE.encode(), env=env)
    assert rv.exit_code == 2 and rv.stdout_bytes == FILTER_SOURCE.encode()
    (line,) = rv.stderr.splitlines()
    assert line.startswith("error: ") and "--threads" in line
    rd = CliRunner().invoke(main, [*args, "--diff"], FILTER_SOURCE.encode(), env=env)
    assert rd.exit_code == 2 and rd.stdout == "" and len(rd.stderr.splitlines()) == 1  # not the filter: no echo


def unreadable_context(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A --context file that exists but cannot be read (for root too, who reads any file)."""
    import builtins

    from infill import options

    context = tmp_path / "ctx.py"
    context.write_text("x = 3\n")
    context.chmod(0)
    real_open = builtins.open

    def refuse(path: object, *args: object, **kwargs: object) -> object:
        if Path(str(path)) == context:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[call-overload]

    monkeypatch.setattr(options, "open", refuse, raising=False)  # read_context's `open`
    return context


def test_item03_filter_mode_echoes_input_when_a_context_file_cannot_be_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    context = unreadable_context(tmp_path, monkeypatch)
    args = ["fill", "-", "--stdin-filename", "f.py", "--span", "1", "--context", str(context), "--daemon", "off"]
    try:
        with fake_model(["x = 2"], name="fake-ctx"):
            r = CliRunner().invoke(main, [*args, "--model", "fake-ctx"], FILTER_SOURCE.encode())
            rv = CliRunner().invoke(main, [*args, "--model", "fake-ctx", "-v"], FILTER_SOURCE.encode())
    finally:
        context.chmod(0o644)
    assert (r.exit_code, r.stdout_bytes, r.stderr) == (2, FILTER_SOURCE.encode(), "")
    assert rv.exit_code == 2 and rv.stdout_bytes == FILTER_SOURCE.encode()
    (line,) = rv.stderr.splitlines()
    assert "cannot read --context file: Permission denied" in line and "ctx.py" in line


def test_item03_an_unreadable_context_file_is_an_input_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    context = unreadable_context(tmp_path, monkeypatch)
    p = tmp_path / "a.py"
    p.write_text(SIMPLE)
    try:
        with fake_model(["x = 2"], name="fake-ctx"):
            r = CliRunner().invoke(
                main, ["fill", str(p), "--span", "1", "--context", str(context), "--model", "fake-ctx"]
            )
    finally:
        context.chmod(0o644)
    assert r.exit_code == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    assert line.startswith("error: ") and "cannot read --context file" in line
    assert p.read_text() == SIMPLE


def test_item03_filter_mode_echoes_input_on_an_unexpected_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever fails after stdin was read and outside run_fill (here a bug in the preflight), the buffer
    comes back: exit 123 as for any internal error, the one line only with -v."""
    from infill.commands import fill as command

    def bug(request: object) -> bool:
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(command, "preflight", bug)
    monkeypatch.delenv("INFILL_DEBUG", raising=False)
    args = ["fill", "-", "--stdin-filename", "f.py", "--span", "1"]
    r = CliRunner().invoke(main, args, FILTER_SOURCE.encode())
    assert (r.exit_code, r.stdout_bytes, r.stderr) == (123, FILTER_SOURCE.encode(), "")
    rv = CliRunner().invoke(main, [*args, "-v"], FILTER_SOURCE.encode())
    assert rv.exit_code == 123 and rv.stdout_bytes == FILTER_SOURCE.encode()
    assert rv.stderr.splitlines() == ["error: internal error: RuntimeError: a bug (INFILL_DEBUG=1 shows where)"]
    rd = CliRunner().invoke(main, [*args, "--diff"], FILTER_SOURCE.encode())
    assert rd.exit_code == 123 and rd.stdout == ""  # not the filter: no echo, the group's one line


# --- item 11e: every error is one line, Click usage errors included --------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["fill", "a.py", "--bogus"], "No such option '--bogus'"),
        (["fill", "a.py", "--tokens", "0"], "Invalid value for '--tokens'"),
        (["--bogus"], "No such option '--bogus'"),
        (["nosuchcommand"], "No such command 'nosuchcommand'"),
        (["daemon", "bogus"], "No such command 'bogus'"),
        (["serve"], "give exactly one of --stdio or --socket PATH"),
    ],
)
def test_item11e_usage_errors_are_one_line(args: list[str], needle: str) -> None:
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2
    (line,) = r.stderr.splitlines()
    assert line.startswith("error: ") and needle in line and "--help" in line


@pytest.mark.parametrize("command", ["fill", "docstrings"])
def test_an_option_named_after_a_choice_points_at_the_option_that_takes_it(command: str) -> None:
    """`infill fill --json`, as other tools spell it, guessed `--epsilon`, `--jobs` or `--span` (options spelled
    alike): the error names `--format json`, what was meant. No hidden `--json` flag: it is still refused."""
    r = CliRunner().invoke(main, [command, "a.py", "--json"], prog_name="infill")
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        f"error: No such option '--json'. Did you mean '--format json'? (see 'infill {command} --help')"
    ]
    r = CliRunner().invoke(main, [command, "a.py", "--jso"])  # no choice of any option: Click's own guess
    assert r.exit_code == 2 and "Did you mean '--jobs'?" in r.stderr


# --- item 5: read-only files and folders are refused even for root (mode bits, not only os.access) ------------


def access_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """os.access answers as it does for root (who may write anything) under tmp_path, whoever runs the tests:
    only the mode-bit check can then refuse the write, so these tests catch its loss under any user."""
    real_access = os.access

    def access(path: object, mode: int, *args: object, **kwargs: object) -> bool:
        if Path(str(path)).resolve().is_relative_to(tmp_path.resolve()):
            return True
        return real_access(path, mode, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "access", access)


def test_item05_read_only_file_is_refused_by_mode_bits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    access_as_root(tmp_path, monkeypatch)
    p = tmp_path / "ro.py"
    p.write_text(SIMPLE)
    p.chmod(0o444)
    try:
        with fake_model(["x = 2"], name="fake-ro"):
            r = CliRunner().invoke(main, ["fill", str(p), "--span", "1", "--model", "fake-ro"])
    finally:
        p.chmod(0o644)
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.splitlines()
    assert "read-only" in line and "nothing was written" in line
    assert p.read_text() == SIMPLE


def test_item05_read_only_folder_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    access_as_root(tmp_path, monkeypatch)
    folder = tmp_path / "ro"
    folder.mkdir()
    p = folder / "a.py"
    p.write_text(SIMPLE)
    folder.chmod(0o555)
    try:
        with fake_model(["x = 2"], name="fake-ro"):
            r = CliRunner().invoke(main, ["fill", str(p), "--span", "1", "--model", "fake-ro"])
            listing = sorted(os.listdir(folder))
    finally:
        folder.chmod(0o755)
    assert r.exit_code == 2, r.output
    assert "folder is read-only" in r.stderr and len(r.stderr.splitlines()) == 1
    assert p.read_text() == SIMPLE and listing == ["a.py"]


# --- item 6: writing keeps owner, group, mode and hard links --------------------------------------------------


def fill_line_1(p: Path) -> None:
    with fake_model(["x = 2"], name="fake-meta"):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", "1", "--model", "fake-meta"])
    assert r.exit_code == 0, r.output


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() != 0,
    reason="needs root: only root can give a file to another user (nobody:nogroup) to check it keeps them",
)
def test_item06_owner_and_group_are_kept(tmp_path: Path) -> None:
    p = tmp_path / "theirs.py"
    p.write_text(SIMPLE)
    os.chown(p, 65534, 65534)  # nobody:nogroup
    p.chmod(0o640)
    fill_line_1(p)
    st = p.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (65534, 65534, 0o640)
    assert p.read_text() == SIMPLE.replace("x = 1", "x = 2")


def test_item06_without_chown_rights_the_file_is_rewritten_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infill import patch

    p = tmp_path / "a.py"
    p.write_text(SIMPLE)
    before = p.stat()
    monkeypatch.setattr(patch, "_take_metadata", lambda tmp, path, st: False)  # as for a user who cannot chown
    fill_line_1(p)
    assert p.stat().st_ino == before.st_ino  # same file: owner and group untouched
    assert p.read_text() == SIMPLE.replace("x = 1", "x = 2")


def test_item06_hard_links_see_the_new_content(tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    p.write_text(SIMPLE)
    other = tmp_path / "link.py"
    os.link(p, other)
    fill_line_1(p)
    assert other.read_text() == p.read_text() == SIMPLE.replace("x = 1", "x = 2")
    assert os.path.samefile(p, other)
    assert not [x for x in os.listdir(tmp_path) if x.endswith(".infill-tmp")]


def test_item06_symlink_stays_a_link_to_the_updated_target(tmp_path: Path) -> None:
    target = tmp_path / "real.py"
    target.write_text(SIMPLE)
    link = tmp_path / "link.py"
    link.symlink_to(target)
    fill_line_1(link)
    assert link.is_symlink() and target.read_text() == SIMPLE.replace("x = 1", "x = 2")


# --- item 7: large inputs: only the model's window around the spans is tokenized and checked ------------------


def big_python(functions: int) -> str:
    return "".join(
        f"def function_{i}(values):\n    total = {i}\n    for v in values:\n        total += v\n    return total\n\n\n"
        for i in range(functions)
    )


def test_item07_only_the_window_is_tokenized(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from fixtures_cli import ByteTokenizer

    from infill import api
    from infill.core import checks

    source = big_python(40_000)  # 2.9 MB
    p = tmp_path / "big.py"
    p.write_text(source)
    encoded: list[int] = []
    real_encode = ByteTokenizer.encode
    monkeypatch.setattr(ByteTokenizer, "encode", lambda tok, text: encoded.append(len(text)) or real_encode(tok, text))
    parsed: list[int] = []
    real_compile = checks.python_error_line  # what every compile of the checks goes through
    monkeypatch.setattr(checks, "python_error_line", lambda src: parsed.append(len(src)) or real_compile(src))
    line = source[: source.index("total = 20000")].count("\n") + 1
    with fake_model(["total = 1"], name="fake-big", max_length=256):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", str(line), "--model", "fake-big"])
    assert r.exit_code == 0, r.output
    assert p.read_text() == source.replace("total = 20000\n", "total = 1\n")
    window = 256 * api.WINDOW_BYTES_PER_TOKEN
    assert encoded and sum(encoded) <= 3 * window  # the old code tokenized the whole 2.9 MB
    assert parsed and max(parsed) < 10_000  # CPython parsed the blocks around the span, not the file


def test_item07_large_inputs_still_reject_unparseable_fills(tmp_path: Path) -> None:
    from infill.core import checks

    source = big_python(12_000)  # over LOCAL_CHECK_BYTES: checked around the edit only
    assert len(source) > checks.LOCAL_CHECK_BYTES
    p = tmp_path / "big.py"
    p.write_text(source)
    line = source[: source.index("total = 6000")].count("\n") + 1
    with fake_model([UNTERMINATED], name="fake-big-bad", max_length=256):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", str(line), "--model", "fake-big-bad", "--no-retrieve"])
    assert r.exit_code == 3, r.output
    assert p.read_text() == source


def test_item07_local_check_chunks_are_top_level_blocks() -> None:
    from infill.core import checks

    data = b"import os\n\n\ndef f():\n    x = 1\n\n    return x\n\n\nclass A:\n    y = 2\n"
    check = checks.SyntaxCheck("python", data)
    at = data.index(b"x = 1")
    edit = type("E", (), {"start_byte": at, "end_byte": at + 5, "text": "x = 2"})()
    assert check.chunks([edit]) == [(data.index(b"def f"), data.index(b"class A"))]
    first = type("E", (), {"start_byte": 0, "end_byte": 9, "text": "import re"})()
    assert check.chunks([first]) == [(0, data.index(b"def f"))]


@pytest.mark.parametrize("text", ['""" + (1 + """', '"""(("""'])
def test_item07_a_local_check_never_takes_a_line_inside_a_string_for_a_statement(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """Large inputs are checked around the edits. A line in column 1 after a blank line inside a multi-line string
    was taken for a statement's start: a fill balancing its quotes compiled in that chunk, and the file it was
    written into did not. The chunks are now the top-level statements of the original's parse."""
    from infill.core import checks
    from infill.spans import Span

    monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)
    data = b'import os\n\nDOC = """\nintro\n\nexample:\n    x = 1\n\nend\n"""\n\n\ndef g():\n    return 2\n'
    assert checks.python_compiles(data)
    at = data.index(b"    x = 1")
    edit = type("E", (), {"start_byte": at, "end_byte": at + 9, "text": text})()
    patched = data[:at] + text.encode() + data[at + 9 :]
    assert not checks.python_compiles(patched)
    check = checks.SyntaxCheck("python", data, [Span(at, at + 9)])
    assert check.rejection(patched, [edit]) == "does not compile"
    fine = type("E", (), {"start_byte": at, "end_byte": at + 9, "text": "    y = 2"})()
    assert check.rejection(data[:at] + b"    y = 2" + data[at + 9 :], [fine]) is None


GAP_FILLS = ["x = 1", "@staticmethod", "    y = 2", "else:\n    b = 2", "def h(:", "    return 3", "# note\n@wraps"]


@pytest.mark.parametrize("text", GAP_FILLS)
def test_item07_a_fill_between_statements_of_a_large_input_is_judged_as_the_whole_file_is(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """A fill on a blank line after a top-level statement is checked without that statement when it starts its
    own (a blank line after a generated literal megabytes long cost a compile of the literal per candidate), with
    it when it continues it (an indented line, `else:`), and with the statement after it when it holds a
    decorator: the verdict is the whole file's."""
    from infill.core import checks
    from infill.spans import Span

    monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)
    data = b"import os\n\nif os:\n    a = 1\n\n\n\ndef g():\n    return 2\n"
    at = data.index(b"\n\n\ndef") + 2
    edit = type("E", (), {"start_byte": at, "end_byte": at, "text": text + "\n"})()
    patched = data[:at] + edit.text.encode() + data[at:]
    check = checks.SyntaxCheck("python", data, [Span(at, at)])
    whole = "does not compile" if not checks.python_compiles(patched) else None
    assert check.rejection(patched, [edit]) == whole
    ((start, end),) = check.chunks([edit])
    assert start == (at if text in ("x = 1", "@staticmethod", "def h(:", "# note\n@wraps") else data.index(b"if os"))
    assert end == (len(data) if "@" in text else data.index(b"def g"))


@pytest.mark.parametrize("text", ["from __future__ import annotations", "global g"])
def test_item07_a_future_import_in_a_large_input_is_judged_on_the_whole_file(
    monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    """`from __future__` compiles in a chunk of its own and only at the start of a file; a module-level `global`
    compiles alone and not after a statement that binds its name."""
    from infill.core import checks
    from infill.spans import Span

    monkeypatch.setattr(checks, "LOCAL_CHECK_BYTES", 16)
    data = b"import os\n\n\ndef g():\n    return 2\n\n\nx = 1\n"
    at = data.index(b"x = 1")
    edit = type("E", (), {"start_byte": at, "end_byte": at + 5, "text": text})()
    patched = data[:at] + text.encode() + data[at + 5 :]
    assert not checks.python_compiles(patched)
    assert checks.SyntaxCheck("python", data, [Span(at, at + 5)]).rejection(patched, [edit]) == "does not compile"


# --- item 11d: "context truncated" says what was cut, and warns only when the block's start is cut -------------


def test_item11d_truncation_warning_only_when_the_block_start_is_cut(tmp_path: Path) -> None:
    short = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(10))  # 40 lines
    p = tmp_path / "short.py"
    p.write_text(short)
    long_body = "def g(x):\n" + "".join(f"    x = x + {i}\n" for i in range(60)) + "    return x\n"
    q = tmp_path / "long.py"
    q.write_text(long_body)
    with fake_model(["return x"], name="fake-window", max_length=256):
        quiet = CliRunner().invoke(main, ["fill", str(p), "--span", "22", "--model", "fake-window", "--diff"])
        verbose = CliRunner().invoke(main, ["fill", str(p), "--span", "22", "--model", "fake-window", "--diff", "-v"])
        cut = CliRunner().invoke(main, ["fill", str(q), "--span", "55", "--model", "fake-window", "--diff"])
    assert quiet.exit_code == 1 and "truncated" not in quiet.stderr  # the function around line 22 was in sight
    assert "note:" in verbose.stderr and "it saw lines" in verbose.stderr and "of 40" in verbose.stderr
    (warning,) = [line for line in cut.stderr.splitlines() if "truncated" in line]
    assert "it saw lines" in warning and "of 62" in warning and "not the start of the block" in warning


# --- item 8: one large request cannot hold the daemon: inputs over --max-input-bytes are refused ----------------


def test_item08_socket_server_refuses_large_inputs_before_any_work(tmp_path: Path) -> None:
    from infill.commands.fill import FillRequest
    from infill.server import protocol
    from infill.server.dispatch import Dispatcher
    from infill.spans import Selection

    big = "x = 1\n" * (protocol.DEFAULT_MAX_INPUT_BYTES // 6 + 1)
    (tmp_path / "big.py").write_text(big)
    dispatcher = Dispatcher(max_input_bytes=protocol.DEFAULT_MAX_INPUT_BYTES)  # `infill serve --socket`'s default
    with fake_model(["x = 2"], name="fake-daemon") as model:
        spec = {"name": "fake-daemon"}
        stdin = FillRequest("-", (Selection("span", "1"),), stdin=big).to_dict() | {"model": spec}
        by_path = {"text": None, "path": str(tmp_path / "big.py"), "span": "1", "model": "fake-daemon"}
        docs = {"paths": [str(tmp_path)], "cwd": str(tmp_path)}
        replies = [
            json.loads(dispatcher.handle_line(json.dumps({"id": i, "method": m, "params": p}).encode()))
            for i, (m, p) in enumerate(
                [
                    ("fill_command", stdin),
                    ("fill", {k: v for k, v in by_path.items() if v}),
                    ("docstrings_command", docs),
                ]
            )
        ]
        assert model.forwards == 0  # refused before any model ran
        small = {"text": "x = 1\n", "filename": "a.py", "span": "1", "model": "fake-daemon"}
        ok = json.loads(dispatcher.handle_line(json.dumps({"id": 9, "method": "fill", "params": small}).encode()))
    for reply in replies:
        assert reply["error"]["code"] == "too_large" and reply["error"]["exit_code"] == 2, reply
        assert "--max-input-bytes" in reply["error"]["message"]
    assert ok["edits"][0]["text"] == "x = 2"


def test_item08_the_client_fills_large_inputs_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infill.server import client, protocol

    asked: list[str] = []
    monkeypatch.setattr(client, "request", lambda method, *a, **k: asked.append(method))  # a daemon, if asked
    p = tmp_path / "big.py"
    p.write_text("x = 1\n" * (protocol.DEFAULT_MAX_INPUT_BYTES // 6 + 1))
    with fake_model(["x = 2"], name="fake-daemon"):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", "1", "--model", "fake-daemon", "--daemon", "on"])
    assert r.exit_code == 0, r.output
    assert asked == [] and p.read_text().startswith("x = 2\n")


# --- item 9: two installations keep separate daemons instead of restarting each other's -----------------------


def test_item09_each_installation_has_its_own_daemon_folder(
    runtime_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infill.server import lifecycle

    # a short folder: a socket's path has at most 107 bytes, and pytest's temporary folders grow with its run count
    env = {"INFILL_RUNTIME_DIR": str(runtime_dir / "rt")}
    mine = lifecycle.runtime_paths(env).socket
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "hook-env"))  # a pre-commit hook's virtualenv
    monkeypatch.setattr(sys, "executable", str(tmp_path / "hook-env" / "bin" / "python"))
    theirs = lifecycle.runtime_paths(env).socket
    assert mine != theirs and mine.parent.parent == theirs.parent.parent == runtime_dir / "rt"
    assert stat.S_IMODE(theirs.parent.stat().st_mode) == 0o700


def test_item09_another_installation_does_not_restart_our_daemon(runtime_dir: Path, tmp_path: Path) -> None:
    import shutil
    import subprocess

    from fixtures_serve import REPO_ROOT, TESTS_DIR, pid_alive, plugin_env

    from infill.server import client

    env = plugin_env(runtime_dir)
    params = {"text": "ab", "spans": [[0, 1]], "want_pid": True}
    ours = client.request("fill", params, "on", env=env)
    assert ours is not None
    our_pid = ours["stats"]["pid"]
    other = tmp_path / "other-install"  # the same code installed elsewhere (a hook's temporary environment)
    shutil.copytree(REPO_ROOT / "infill", other / "infill", ignore=shutil.ignore_patterns("weights", "__pycache__"))
    shutil.copytree(REPO_ROOT / "grammars", other / "grammars")
    code = (
        "import json, sys; from infill.server import client; "
        "r = client.request('fill', json.loads(sys.argv[1]), 'on'); print(r['stats']['pid']); client.stop()"
    )
    other_env = {**env, "PYTHONPATH": os.pathsep.join([str(other), str(TESTS_DIR)])}
    done = subprocess.run(
        [sys.executable, "-c", code, json.dumps(params)], env=other_env, cwd=tmp_path, capture_output=True, timeout=180
    )
    assert done.returncode == 0, done.stderr.decode()
    assert int(done.stdout.split()[-1]) != our_pid  # it started its own daemon ...
    assert pid_alive(our_pid)  # ... and left ours alone (before: it stopped ours as "incompatible")
    again = client.request("fill", params, "on", env=env)
    assert again is not None and again["stats"]["pid"] == our_pid


# --- item 10: nan / inf are usage errors (exit 2, invalid_request), and an empty line gets a reply --------------


@pytest.mark.parametrize("value", ["nan", "inf", "NaN", "1e999"])
def test_item10_cli_refuses_non_finite_numbers(tmp_path: Path, value: str) -> None:
    p = tmp_path / "a.py"
    p.write_text(SIMPLE)
    with fake_model(["x = 2"], name="fake-nan"):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", "1", "--model", "fake-nan", "--temperature", value])
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.splitlines()
    assert "--temperature" in line and "finite" in line
    assert p.read_text() == SIMPLE


@pytest.mark.parametrize(
    ("flag", "value"), [("--top-p", "nan"), ("--epsilon", "inf"), ("--gamma", "nan"), ("--threshold", "nan")]
)
def test_item10_every_float_flag_is_finite(flag: str, value: str) -> None:
    r = CliRunner().invoke(main, ["fill", "a.py", "--span", "1", flag, value])
    assert r.exit_code == 2 and "finite" in r.stderr and len(r.stderr.splitlines()) == 1


def test_item10_api_refuses_non_finite_settings() -> None:
    from infill import api
    from infill.config import DecodeConfig, ModelSpec
    from infill.errors import InputError
    from infill.spans import Span

    with fake_model(["x"], name="fake-nan"):
        for bad in (DecodeConfig(temperature=float("nan")), DecodeConfig(top_p=float("inf")), DecodeConfig(seed=2**70)):
            with pytest.raises(InputError):
                api.fill_text("a = 1\n", [Span(4, 5)], model=ModelSpec("fake-nan"), decode=bad)


@pytest.mark.parametrize(
    "line",
    [
        b'{"id": 1, "method": "fill", "params": {"text": "a = 1\\n", "span": "1", "temperature": NaN}}',
        b'{"id": 1, "method": "fill", "params": {"text": "a = 1\\n", "span": "1", "temperature": Infinity}}',
        b'{"id": 1, "method": "fill", "params": {"text": "a = 1\\n", "span": "1", "top_p": -Infinity}}',
        b'{"id": 1, "method": "fill", "params": {"text": "a = 1\\n", "span": "1", "temperature": 1e999}}',
        b'{"id": 1, "method": "fill", "params": {"text": "a = 1\\n", "span": "1", "candidates": 100000}}',
        b'{"id": 1, "method": "fill", "params": {"text": "a = 1\\n", "span": "1", "seed": 100000000000000000000000}}',
    ],
)
def test_item10_server_answers_invalid_request(line: bytes) -> None:
    """Refused, and answered by the request's id (a refused number once made the answer's id null, so a client
    waiting for its id never got one)."""
    from infill.server.dispatch import Dispatcher

    with fake_model(["x"], name="fake-nan") as model:
        reply = json.loads(Dispatcher().handle_line(line.replace(b'"span"', b'"model": "fake-nan", "span"')))
    assert reply["error"]["code"] == "invalid_request" and reply["error"]["exit_code"] == 2, reply
    assert reply["id"] == 1
    assert model.forwards == 0


def test_item10_a_refused_number_as_the_id_is_answered_with_a_null_id() -> None:
    from infill.server.dispatch import Dispatcher

    reply = json.loads(Dispatcher().handle_line(b'{"id": 100000000000000000000000, "method": "ping", "x": NaN}'))
    assert reply["id"] is None and reply["error"]["code"] == "invalid_request"


def test_item10_an_empty_request_line_gets_a_reply() -> None:
    from infill.server.dispatch import Dispatcher

    reply = json.loads(Dispatcher().handle_line(b"\n"))
    assert reply == {"id": None, "error": {"code": "invalid_request", "message": "empty request line", "exit_code": 2}}


# --- item 11a: a closed stdout pipe (`| head -1`) ends a command quietly ------------------------------------------


@pytest.mark.parametrize("args", [["daemon", "status"], ["fill", "--help"], ["--help"]])
def test_item11a_broken_pipe_is_quiet(args: list[str], runtime_dir: Path) -> None:
    import subprocess

    from fixtures_serve import REPO_ROOT

    env = {**os.environ, "INFILL_RUNTIME_DIR": str(runtime_dir), "PYTHONPATH": str(REPO_ROOT)}
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes (closed after the start, a loaded machine
    # could let the command write its few lines into the pipe first, and exit 0)
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "infill", *args], stdout=write_end, stderr=subprocess.PIPE, env=env
        )
    finally:
        os.close(write_end)
    assert process.stderr is not None
    assert process.wait(timeout=120) == 141  # as a shell reports a tool killed by SIGPIPE
    assert process.stderr.read() == b""  # no "Broken pipe" message, no traceback


# --- item 11c: a request that fails without a model never starts (or waits for) a daemon -----------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["missing.py", "--span", "1"], "no such file"),
        (["a.py", "--span", "9"], "out of range"),
        (["a.py", "--marker", "<NOPE>"], "marker not found"),
        (["empty.py", "--span", "1"], "empty"),
    ],
)
def test_item11c_input_errors_never_ask_a_daemon(
    args: list[str], needle: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infill.server import client

    asked: list[str] = []
    monkeypatch.setattr(client, "request", lambda method, *a, **k: asked.append(method))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.py").write_text(SIMPLE)
    (tmp_path / "empty.py").write_text("")
    r = CliRunner().invoke(main, ["fill", *args, "--daemon", "on", "--model", "not-registered-here"])
    assert r.exit_code == 2 and needle in r.stderr and len(r.stderr.splitlines()) == 1, r.output
    assert asked == []  # before: a daemon was started (seconds) just to report this
