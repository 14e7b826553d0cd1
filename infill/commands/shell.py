"""What the `infill` group (infill.cli) and its commands share: an error as one stderr line with its documented
exit code (infill.errors.ExitCode; what a shell reports for a command stopped by a signal is
infill.errors.signal_report), and commands imported on first use. Click only: no torch.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import NoReturn

import click

from infill.errors import ExitCode


def error_line(exc: click.ClickException) -> str:
    """A Click error as the one stderr line every `infill` error is: `error: MESSAGE`, with a pointer to the
    command's --help for usage errors (Click's own format is four lines: usage, hint, blank, error)."""
    meant = choice_meant(exc) if isinstance(exc, click.NoSuchOption) else None
    message = " ".join((f"{exc.message} Did you mean '{meant}'?" if meant else exc.format_message()).split())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        message += f" (see '{exc.ctx.command_path} --help')"
    return f"error: {message}"


def choice_meant(exc: click.NoSuchOption) -> str | None:
    """`--json` given to a command that takes `--format json`: the option and value meant (`--format json`), where
    Click would guess options spelled alike (`--jobs`); None when the name is no choice of the command's options."""
    value = exc.option_name.lstrip("-")
    if exc.ctx is None or not value:
        return None
    for param in exc.ctx.command.params:
        if isinstance(param, click.Option) and isinstance(param.type, click.Choice):
            if value in param.type.choices:
                return f"{max(param.opts, key=len)} {value}"
    return None


def exit_on_click_error(exc: click.ClickException) -> NoReturn:
    """Print `exc` as one line and exit with its code (2 for usage errors, as documented)."""
    click.echo(error_line(exc), err=True)
    raise click.exceptions.Exit(exc.exit_code)


def error_report(exc: Exception) -> tuple[str, int]:
    """The one stderr line and the exit code of an error no command handled itself: an InfillError's own code
    (2 input, 3 no valid fill, 4 low confidence, 123 model), 2 for an OSError (a file that cannot be read or
    written), and 123 for anything else, which is our bug."""
    from infill.errors import ExitCode, InfillError, one_line

    if isinstance(exc, InfillError):
        return f"error: {one_line(str(exc))}", exc.exit_code
    if isinstance(exc, OSError):
        return f"error: {one_line(str(exc))}", ExitCode.USAGE
    line = f"error: internal error: {type(exc).__name__}: {one_line(str(exc))} (INFILL_DEBUG=1 shows where)"
    return line, ExitCode.INTERNAL


def quiet_broken_pipe() -> NoReturn:
    """Stop quietly when stdout's reader went away. Pointing stdout at /dev/null keeps the interpreter's final
    flush from printing "Exception ignored ... BrokenPipeError" (the recipe of Python's signal docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(ExitCode.BROKEN_PIPE)


def load_command(target: str) -> click.Command | None:
    """The Click command at "module:attribute", imported when a group first needs it; None when that module is
    absent from this installation. The `infill` group and `infill train` load their commands this way."""
    module_name, attr = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            return None
        raise
    command = getattr(module, attr)
    if not isinstance(command, click.Command):
        raise TypeError(f"{target} is not a click command")
    return command
