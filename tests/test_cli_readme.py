"""The README's `infill fill` examples use flags that exist (parsed by the real command, not run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from infill.commands.fill import fill

README = Path(__file__).resolve().parent.parent / "README.md"


def examples() -> list[str]:
    """`infill fill ...` command lines inside the README's fenced code blocks (prose mentions are skipped)."""
    found = []
    in_code = False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if not in_code:
            continue
        for m in re.finditer(r"infill fill (.*?)(?:\s+#.*)?$", line.strip().lstrip(":%!|.").strip()):
            found.append(m.group(1).replace("%s", "x.py").replace("%d", "1").replace("%", "x.py").strip('")'))
    return [e for e in found if not e.startswith("[OPTIONS]")]


def test_readme_has_fill_examples() -> None:
    assert len(examples()) >= 6


@pytest.mark.parametrize("example", examples())
def test_readme_example_parses(example: str) -> None:
    args = shlex.split(example)
    with fill.make_context("fill", args) as ctx:
        assert ctx.params["file"]
    assert isinstance(fill, click.Command)
