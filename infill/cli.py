"""The `infill` command line. Click only: each command lives in infill/commands/<name>.py and is imported on use,
so `infill --help` and shell completion never import torch or transformers."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from infill import __version__

# command name -> "module:attribute"; modules are imported only when the command is used or listed in detail
COMMANDS: dict[str, str] = {
    "fill": "infill.commands.fill:fill",
    "docstrings": "infill.commands.docstrings:docstrings",
    "models": "infill.commands.models:models",
    "train": "infill.commands.train:train",
    "eval": "infill.commands.evaluate:evaluate",
    "serve": "infill.commands.serve:serve",
    "daemon": "infill.commands.daemon:daemon",
    "completion": "infill.commands.completion:completion",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an error no command handled itself becomes one line on stderr and the documented
        exit code (2 for bad input, 123 for anything else), never a traceback (INFILL_DEBUG=1 shows it)."""
        from infill.errors import InfillError

        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except InfillError as exc:
            if os.environ.get("INFILL_DEBUG"):
                raise
            click.echo(f"infill: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:
            if os.environ.get("INFILL_DEBUG"):
                raise
            click.echo(f"infill: error: {exc}", err=True)
            sys.exit(2)
        except Exception as exc:  # noqa: BLE001 - our bug: one line and exit 123, as documented
            if os.environ.get("INFILL_DEBUG"):
                raise
            click.echo(f"infill: internal error: {type(exc).__name__}: {exc} (INFILL_DEBUG=1 shows where)", err=True)
            sys.exit(123)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._load(name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # command not written yet
                return None
            raise
        command = getattr(module, attr)
        if not isinstance(command, click.Command):
            raise TypeError(f"{target} is not a click command")
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="infill")
@click.option(
    "--threads",
    type=click.IntRange(1),
    default=None,
    envvar="INFILL_THREADS",
    show_envvar=True,
    help="CPU threads for decoding [default: 1, fastest for models this size and never slowed by a busy core]. "
    "Training commands have their own --threads.",
)
def main(threads: int | None) -> None:
    """Fill code and text spans with lossless parallel decoding (any-subset speculative decoding)."""
    if threads is not None:
        os.environ["INFILL_THREADS"] = str(threads)  # read where models load (infill.hardware), daemons inherit it
