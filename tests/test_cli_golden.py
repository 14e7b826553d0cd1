"""Golden edit cases: tests/golden/*.txt, run through the real CLI (stdin filter mode) with a scripted model.

Case file format (black-style, split at a line "# output"):

    # file: NAME            the --stdin-filename (selects the language)
    # flags: ...            flags for `infill fill`, shell-split
    # fill: JSON            one line per span (in file order): a string, or [[text, weight], ...] alternatives
    <input text>
    # output
    <expected text>

The scripted model (tests/fixtures_cli.py) fills span j with the j-th `# fill:` line, so every case shows the
post-processing (indentation, repeated suffix, line breaks, syntax resampling) on a known raw fill.
"""

from __future__ import annotations

import difflib
import json
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_cli import fake_model

from infill.cli import main

GOLDEN = Path(__file__).parent / "golden"
CASES = sorted(GOLDEN.glob("*.txt"))


def parse_case(path: Path) -> tuple[dict[str, list[str]], str, str]:
    text = path.read_text(encoding="utf-8")
    head: dict[str, list[str]] = {"file": [], "flags": [], "fill": []}
    lines = text.split("\n")
    i = 0
    while i < len(lines) and lines[i].startswith("# ") and ":" in lines[i]:
        key, _, value = lines[i][2:].partition(":")
        if key not in head:
            break
        head[key].append(value.strip())
        i += 1
    body = "\n".join(lines[i:])
    source, sep, expected = body.partition("# output\n")
    if not sep:
        raise ValueError(f"{path.name}: no '# output' line")
    return head, source, expected


def _fills(raw: list[str]) -> list[list[tuple[str, float]]]:
    out = []
    for line in raw:
        value = json.loads(line)
        out.append([(value, 1.0)] if isinstance(value, str) else [(t, float(w)) for t, w in value])
    return out


@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_golden(case: Path) -> None:
    head, source, expected = parse_case(case)
    with fake_model(_fills(head["fill"]), name="fake-golden"):
        args = ["fill", "-", "--stdin-filename", head["file"][0], "--model", "fake-golden"]
        args += shlex.split(" ".join(head["flags"]))
        result = CliRunner().invoke(main, args, input=source)
    got = result.stdout
    if got != expected or result.exit_code != 0:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), got.splitlines(True), "expected", "got"))
        pytest.fail(f"{case.name}: exit {result.exit_code}\n{result.stderr}\n{diff}")


def test_golden_folder_is_not_empty() -> None:
    assert len(CASES) >= 10
