"""Startup stays light (no torch for --help or completion); the committed completion scripts are current."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from infill.cli import main
from infill.commands.completion import SHELLS, completion_script

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import sys
from click.testing import CliRunner
from infill.cli import main
for args in ({args}):
    r = CliRunner().invoke(main, list(args))
    assert r.exit_code == 0, (args, r.output)
heavy = sorted(m for m in ("torch", "transformers", "rich.progress", "tree_sitter", "pygls", "lsprotocol")
               if m in sys.modules)
print(",".join(heavy))
"""


@pytest.mark.parametrize(
    "args",
    [
        (["--help"],),
        (["fill", "--help"],),
        (["lsp", "--help"],),
        (["completion", "bash"],),
        (["--help"], ["fill", "--help"]),
    ],
)
def test_help_and_completion_do_not_import_torch(args: tuple[list[str], ...]) -> None:
    code = PROBE.format(args=", ".join(repr(a) for a in args) + ",")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"imported at startup: {out.stdout.strip()}"


@pytest.mark.parametrize("shell", SHELLS)
def test_committed_completion_scripts_are_current(shell: str) -> None:
    committed = (ROOT / "completions" / f"infill.{shell}").read_text()
    assert committed == completion_script(shell, main), (
        f"completions/infill.{shell} is stale; regenerate it with: "
        f"python -m infill completion {shell} > completions/infill.{shell}"
    )


def test_completion_command_prints_script() -> None:
    r = CliRunner().invoke(main, ["completion", "zsh"])
    assert r.exit_code == 0
    assert "_INFILL_COMPLETE" in r.stdout


def test_fill_help_documents_length_policy_and_exit_codes() -> None:
    r = CliRunner().invoke(main, ["fill", "--help"])
    assert "Length policy" in r.stdout
    assert "Exit codes: 0 ok, 1 changes needed" in r.stdout
    assert "123 internal or model error" in r.stdout
