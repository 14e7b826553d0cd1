"""The reliability promises in README.md and docs/reliability.md say what the code does: the same exit codes, the
writes that are not atomic, the limits the server and the daemon enforce, and what a missing grammar extra means.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_cli import fake_model

from infill.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
RELIABILITY = (ROOT / "docs" / "reliability.md").read_text(encoding="utf-8")


def flat(text: str) -> str:
    """Markdown's view of the text: line breaks inside a paragraph are spaces."""
    return " ".join(text.split())


def section(text: str, heading: str) -> str:
    """The text under `heading` (a line starting with #), up to the next heading of any level."""
    start = text.index(heading)
    following = re.search(r"^#", text[start + len(heading) :], re.M)
    return text[start : start + len(heading) + following.start()] if following else text[start:]


def exit_codes(table: str) -> set[int]:
    return {int(m.group(1)) for m in re.finditer(r"^\| (\d+) \|", table, re.M)}


def test_the_readme_lists_every_documented_exit_code() -> None:
    readme = exit_codes(section(README, "### Exit codes"))
    documented = exit_codes(section(RELIABILITY, "## 3. Errors"))
    from infill import errors

    def subclasses(cls: type) -> list[type]:
        return [cls, *(c for sub in cls.__subclasses__() for c in subclasses(sub))]

    raised = {cls.exit_code for cls in subclasses(errors.InfillError)}  # every error class's own code
    defined = {int(code) for code in errors.ExitCode}  # and every code of the one enum
    assert readme == documented == defined == {0, 1, 141, 130, 143} | raised
    row = next(line for line in section(README, "### Exit codes").splitlines() if line.startswith("| 2 |"))
    assert "read-only file" in row and "read-only folder" in row


def test_the_readme_says_which_writes_are_not_atomic() -> None:
    """docs/reliability.md 5: a file with hard links (or an owner this process cannot reproduce) is rewritten in
    place, which is not atomic. A README sentence that promises atomic writes must say so."""
    sentences = re.split(r"(?<=\.)\s", flat(README))
    atomic = [s for s in sentences if "atomic" in s.lower()]
    assert atomic
    for sentence in atomic:
        assert "hard link" in sentence and "in place" in sentence, sentence
    assert "several hard links is rewritten in place" in flat(RELIABILITY)


def test_the_readme_stays_short() -> None:
    assert len(README.splitlines()) < 250


def test_the_server_limits_are_the_documented_ones() -> None:
    from infill.options import MAX_SAMPLES
    from infill.server import protocol
    from infill.server.client import DEFAULT_REQUEST_TIMEOUT

    assert protocol.DEFAULT_MAX_INPUT_BYTES == 1 << 20
    daemon = flat(section(RELIABILITY, "## 7. The server"))
    assert "`--max-input-bytes` (default 1 MiB" in daemon and "`too_large`" in daemon
    assert f"at most {MAX_SAMPLES} `candidates` and {MAX_SAMPLES} `max_resample`" in daemon
    assert f"`INFILL_DAEMON_TIMEOUT` seconds (default {DEFAULT_REQUEST_TIMEOUT:g})" in daemon
    assert "serves one request at a time" in daemon and "There is no time limit" in daemon
    assert "no client waits long" not in daemon  # a slow request does hold the daemon
    bullets = flat(section(README, "## Reliability"))
    assert "1 MiB (`too_large`" in bullets and "each installation has its own daemon" in bullets


def test_the_bad_input_count_is_the_tables() -> None:
    from test_reliability_bad_inputs import CASES

    assert f"| {len(CASES)} bad inputs:" in RELIABILITY


def test_a_missing_grammar_extra_writes_the_fill_unchecked_as_documented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, venv_on_path: Path
) -> None:
    """The one exception to "a file that parsed is never written unparseable" (docs/reliability.md 2): without
    the language's grammar nothing can be checked, so the fill is written with a warning that says so."""
    from infill import languages

    monkeypatch.setitem(sys.modules, "tree_sitter_rust", None)  # `import tree_sitter_rust` now fails
    languages.grammar.cache_clear()
    p = tmp_path / "lib.rs"
    p.write_text("fn one() -> i32 {\n    0\n}\n")
    try:
        with fake_model(["    (((1"], name="fake-no-grammar"):  # breaks the syntax; nothing can tell
            r = CliRunner().invoke(main, ["fill", str(p), "--span", "2", "--model", "fake-no-grammar"])
    finally:
        languages.grammar.cache_clear()
    assert r.exit_code == 0, r.output
    assert p.read_text() == "fn one() -> i32 {\n    (((1\n}\n"
    (warning,) = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert (
        warning.startswith(f"warning: {p}: syntax check skipped:") and "pip install '.[rust]'" in warning
    )  # from the clone, in an activated virtualenv (infill.extras)
    assert warning.replace(str(p), "lib.rs") in flat(RELIABILITY)  # the doc quotes the warning word for word
    assert "written unchecked" in flat(section(README, "## Reliability"))


def test_every_test_this_page_names_exists() -> None:
    """docs/reliability.md points each promise at its test (`tests/FILE.py::NAME`): each one is there."""
    named = set(re.findall(r"`(tests/[\w/]+\.py)::(\w+)`", RELIABILITY))
    assert len(named) >= 15
    for path, name in named:
        source = (ROOT / path).read_text(encoding="utf-8")
        assert re.search(rf"^def {name}\(", source, re.M), f"{path}::{name}"
    for path in set(re.findall(r"`(tests/[\w/]+\.py)`", RELIABILITY)):
        assert (ROOT / path).exists(), path


def test_the_readme_gives_the_order_in_which_several_files_exit_codes_win() -> None:
    from infill.commands.fill import _SEVERITY

    order = re.search(r"With several files the most severe code wins \(([\d, ]+)\)", flat(README))
    assert order is not None
    assert [int(code) for code in order.group(1).split(", ")] == [int(code) for code in reversed(_SEVERITY)]
