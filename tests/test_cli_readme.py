"""The README's `infill fill` examples use flags that exist (parsed by the real command, not run)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from infill.commands.fill import fill
from infill.languages import detect

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
        named = ctx.params["stdin_filename"] if ctx.params["file"] == "-" else ctx.params["file"]
        assert detect(named) is not None, f"{example}: no language known for {named!r} (stdin needs --stdin-filename)"
        assert any(ctx.params[k] for k in ("spans", "markers", "functions", "classes", "nodes"))  # selects something


def runnable() -> list[str]:
    """The README's `infill fill` examples that work on this repository's files (examples/...)."""
    return [e for e in examples() if e.startswith("examples/")]


def test_readme_examples_run_against_the_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each `infill fill examples/...` line of the README runs with the embedded model on a copy of examples/
    and ends with a documented outcome: 0 (written), 1 (a diff / a change found) or 3 (no candidate parsed: the
    small model's fill is refused, nothing written); never a usage, input or internal error."""
    import shutil

    from click.testing import CliRunner

    from infill.cli import main

    found = runnable()
    assert len(found) >= 5
    runner = CliRunner()
    for i, example in enumerate(found):
        shutil.copytree(README.parent / "examples", tmp_path / str(i) / "examples")
        monkeypatch.chdir(tmp_path / str(i))
        result = runner.invoke(main, ["fill", *shlex.split(example), "--daemon", "off"])
        assert result.exit_code in (0, 1, 3), (example, result.output)
        if result.exit_code != 3:
            assert not re.search(r"^(infill: )?(internal )?error", result.output, re.M), (example, result.output)


def test_the_editor_examples_select_lines_the_example_file_has() -> None:
    """A filter whose span is past the end echoes its input: an example that does so shows nothing at all."""
    lines = len((README.parent / "examples" / "stats.py").read_text(encoding="utf-8").splitlines())
    filters = [e for e in examples() if e.startswith("- ")]
    assert filters
    for example in filters:
        for span in re.findall(r"--span (\d+)(?::(\d+))?", example):
            assert all(int(n) <= lines for n in span if n), f"{example}: examples/stats.py has {lines} lines"


def test_the_samples_are_what_the_commands_print() -> None:
    """The README's `infill models` table and the daemon's idle time are the code's."""
    from click.testing import CliRunner

    from infill.cli import main
    from infill.server.lifecycle import DEFAULT_IDLE_TIMEOUT

    text = README.read_text(encoding="utf-8")
    sample = text[text.index("$ infill models\n") :].split("```")[0].splitlines()[1:]
    printed = CliRunner().invoke(main, ["models"]).stdout.splitlines()
    assert sample == printed
    assert f"exits after {DEFAULT_IDLE_TIMEOUT / 60:g} idle minutes" in text
