"""Issue 12, "Never make a file worse": one regression test per reported case (items 1-11).

Each test failed on the code before its fix. The systematic checks are in test_reliability_properties.py,
test_reliability_bad_inputs.py and test_reliability_server_fuzz.py.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from fixtures_doc import FakeFiller

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
