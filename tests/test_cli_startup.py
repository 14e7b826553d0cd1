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


def test_command_summaries_match_the_commands() -> None:
    """`infill --help` lists the commands from SUMMARIES without importing them: each summary is its command's
    help, cut where Click cuts it, and the listing is what Click would print from the commands themselves."""
    import click

    from infill.cli import COMMANDS, SUMMARIES
    from infill.commands.shell import load_command

    assert set(SUMMARIES) == set(COMMANDS)
    for name, target in COMMANDS.items():
        command = load_command(target)
        assert command is not None and not command.hidden, name
        for limit in (45, 60, 200):
            assert click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit) == command.get_short_help_str(
                limit
            ), (name, limit)
    listed = CliRunner().invoke(main, ["--help"]).output
    eager = click.Group("infill", commands={n: load_command(t) for n, t in COMMANDS.items()})  # type: ignore[misc]
    with click.Context(eager, terminal_width=80) as ctx:
        formatter = ctx.make_formatter()
        eager.format_commands(ctx, formatter)
    assert formatter.getvalue() in listed


HELP_PROBE = """
import sys
from click.testing import CliRunner
from infill.cli import main
r = CliRunner().invoke(main, {args})
assert r.exit_code in (0, 2) and "Commands:" in r.output, r.output
print(",".join(sorted(m for m in sys.modules if m.startswith("infill.commands.")
                      and m not in ("infill.commands.shell", "infill.commands.interrupts"))))
"""


@pytest.mark.parametrize("args", [["--help"], []])
def test_group_help_imports_no_command(args: list[str]) -> None:
    """The group's help (and `infill` alone) imports no command module: listing them cost more than half of it."""
    code = HELP_PROBE.format(args=repr(args))
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_command_name_completion_imports_no_command() -> None:
    """Completing a command name offers the names and summaries Click would, without importing a command."""
    from infill.cli import COMMANDS
    from infill.commands.shell import load_command

    code = (
        "import sys\nfrom infill.cli import main\nfrom click.shell_completion import ShellComplete\n"
        "items = ShellComplete(main, {}, 'infill', '_INFILL_COMPLETE').get_completions([], 'd')\n"
        "print(repr([(i.value, i.help) for i in items]))\n"
        "print(sorted(m for m in sys.modules if m in ('infill.commands.daemon', 'infill.commands.docstrings')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    shown, imported = out.stdout.strip().splitlines()
    expected = []
    for name in ("daemon", "docstrings"):
        command = load_command(COMMANDS[name])
        assert command is not None
        expected.append((name, command.get_short_help_str()))
    assert shown == repr(expected)
    assert imported == "[]"
