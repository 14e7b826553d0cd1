"""Issue 12, "Never make a file worse": one regression test per reported case (items 1-11).

Each test failed on the code before its fix. The systematic checks are in test_reliability_properties.py,
test_reliability_bad_inputs.py and test_reliability_server_fuzz.py.
"""

from __future__ import annotations

import json
import os
import stat
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
    import infill.commands.docstrings as command
    from infill.docstrings.engine import FileResult

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


# --- item 5: read-only files and folders are refused even for root (mode bits, not only os.access) ------------


def test_item05_read_only_file_is_refused_by_mode_bits(tmp_path: Path) -> None:
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


def test_item05_read_only_folder_is_refused(tmp_path: Path) -> None:
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


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="only root can chown to another user")
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
    monkeypatch.setattr(patch, "_take_metadata", lambda tmp, st: False)  # as for a user who cannot chown
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
