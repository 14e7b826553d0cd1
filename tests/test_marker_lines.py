"""A `<FILL>` alone on its line is `--span N` on that line, wherever the marker sits: at column 0, at the
line's indentation, at a wrong one, in a file indented with tabs. The model writes the indentation, so the fill
is the one `--span N:N` gives on the emptied line, and the written file compiles. Run through the CLI with the
shipped default model, as a user calls it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_cli import compiles

from infill import api
from infill.cli import main


def fill_json(path: Path, *where: str) -> tuple[dict, str]:
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", str(path), *where, "--format", "json"])
    assert r.exit_code == 0, r.output
    (edit,) = json.loads(r.stdout)["edits"]
    return edit, r.stdout


@pytest.mark.parametrize(
    ("indent", "marker_at"),
    [("    ", ""), ("    ", "        "), ("    ", "  "), ("    ", "            "), ("\t", ""), ("\t", "\t\t")],
    ids=["column-0", "right-indent", "shallow", "too-deep", "tabs-column-0", "tabs-right"],
)
def test_a_marker_line_is_the_emptied_line(tmp_path: Path, indent: str, marker_at: str) -> None:
    # the line to fill is the body of the `if` (between it and `return True`)
    source = "def is_even(n):\n{i}if n % 2 == 0:\n{i}{i}even = True\n{line}\n{i}return False\n"
    marked = tmp_path / "marked.py"
    marked.write_text(source.format(i=indent, line=marker_at + "<FILL>"))
    emptied = tmp_path / "emptied.py"
    emptied.write_text(source.format(i=indent, line=""))
    by_marker, _ = fill_json(marked, "--marker", "<FILL>")
    by_span, _ = fill_json(emptied, "--span", "4:4")
    assert by_marker["text"] == by_span["text"] and by_marker["score"] == by_span["score"]
    assert by_marker["text"].startswith(indent)  # the model's indentation, not the marker's column
    r = CliRunner().invoke(main, ["fill", str(marked), "--marker", "<FILL>"])
    assert r.exit_code == 0, r.output
    assert compiles(marked.read_text()) and marked.read_text() == source.format(i=indent, line=by_span["text"])


def test_the_readme_example_at_column_0(tmp_path: Path) -> None:
    """The reported case: the marker at column 0 in the body of an `if`; the fill is indented as the block."""
    p = tmp_path / "a.py"
    p.write_text("def is_even(n):\n    if n % 2 == 0:\n<FILL>\n    return False\n")
    edit, _ = fill_json(p, "--marker", "<FILL>")
    assert edit["text"].startswith("        ")
    assert compiles(p.read_text().replace("<FILL>", edit["text"]))


def test_an_in_line_marker_is_still_replaced_in_place(tmp_path: Path) -> None:
    p = tmp_path / "b.py"
    p.write_text("def is_even(n):\n    return n % 2 == <FILL>\n")
    edit, _ = fill_json(p, "--marker", "<FILL>")
    at = p.read_text().index("<FILL>")
    assert (edit["start_byte"], edit["end_byte"]) == (at, at + len("<FILL>"))  # only the marker is replaced
