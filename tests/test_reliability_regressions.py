"""Issue 12, "Never make a file worse": one regression test per reported case (items 1-11).

Each test failed on the code before its fix. The systematic checks are in test_reliability_properties.py,
test_reliability_bad_inputs.py and test_reliability_server_fuzz.py.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from fixtures_cli import fake_model
from fixtures_doc import FakeFiller

from infill.cli import main
from infill.commands.docstrings import docstrings

BOM = b"\xef\xbb\xbf"


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
