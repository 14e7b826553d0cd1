"""The `infill` command line. Click only: each command lives in infill/commands/<name>.py and is imported on use,
so `infill --help` and shell completion never import torch or transformers."""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import threading
from collections.abc import Iterator
from typing import Any, NoReturn

import click

from infill import __version__, environment
from infill.clitypes import THREADS
from infill.errors import EXIT_BROKEN_PIPE, EXIT_INTERRUPTED, EXIT_TERMINATED, Terminated

# command name -> "module:attribute"; modules are imported only when the command is used or listed in detail
COMMANDS: dict[str, str] = {
    "fill": "infill.commands.fill:fill",
    "docstrings": "infill.commands.docstrings:docstrings",
    "models": "infill.commands.models:models",
    "train": "infill.commands.train:train",
    "eval": "infill.commands.evaluate:evaluate",
    "serve": "infill.commands.serve:serve",
    "lsp": "infill.commands.lsp:lsp",
    "daemon": "infill.commands.daemon:daemon",
    "completion": "infill.commands.completion:completion",
}


# `infill` or `infill daemon` alone print their help; that is not an error to shorten (click >= 8.2)
_HELP_NOT_ERROR: tuple[type[BaseException], ...] = tuple(
    cls for cls in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if cls is not None
)


def error_line(exc: click.ClickException) -> str:
    """A Click error as the one stderr line every `infill` error is: `error: MESSAGE`, with a pointer to the
    command's --help for usage errors (Click's own format is four lines: usage, hint, blank, error)."""
    message = " ".join(exc.format_message().split())
    if isinstance(exc, click.UsageError) and exc.ctx is not None:
        message += f" (see '{exc.ctx.command_path} --help')"
    return f"error: {message}"


def exit_on_click_error(exc: click.ClickException) -> NoReturn:
    """Print `exc` as one line and exit with its code (2 for usage errors, as documented)."""
    click.echo(error_line(exc), err=True)
    raise click.exceptions.Exit(exc.exit_code)


def error_report(exc: Exception) -> tuple[str, int]:
    """The one stderr line and the exit code of an error no command handled itself: an InfillError's own code
    (2 input, 3 no valid fill, 4 low confidence, 123 model), 2 for an OSError (a file that cannot be read or
    written), and 123 for anything else, which is our bug."""
    from infill.errors import EXIT_INTERNAL, EXIT_USAGE, InfillError, one_line

    if isinstance(exc, InfillError):
        return f"infill: error: {one_line(str(exc))}", exc.exit_code
    if isinstance(exc, OSError):
        return f"infill: error: {one_line(str(exc))}", EXIT_USAGE
    line = f"infill: internal error: {type(exc).__name__}: {one_line(str(exc))} (INFILL_DEBUG=1 shows where)"
    return line, EXIT_INTERNAL


def _quiet_broken_pipe() -> NoReturn:
    """Stop quietly when stdout's reader went away. Pointing stdout at /dev/null keeps the interpreter's final
    flush from printing "Exception ignored ... BrokenPipeError" (the recipe of Python's signal docs)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass
    sys.exit(EXIT_BROKEN_PIPE)


def signal_report(exc: BaseException) -> tuple[str, int]:
    """The one quiet stderr line and the exit code of a command stopped by Ctrl-C (KeyboardInterrupt) or SIGTERM
    (Terminated): 130 and 143, what a shell reports for a tool those signals stop (not Click's "Aborted!", 1)."""
    if isinstance(exc, Terminated):
        return "infill: terminated", EXIT_TERMINATED
    return "infill: interrupted", EXIT_INTERRUPTED


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated()


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises Terminated while a command runs, as SIGINT raises KeyboardInterrupt, so cleanup runs on both:
    the writer removes its temporary file, the editor filter echoes its input. Only where nobody else handles
    SIGTERM (a server or a trainer installs its own handler inside the command, and puts this one back)."""
    import signal

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGTERM) if main_thread else None
    if previous != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _check_environment(ctx: click.Context) -> None:
    """Every command starts by checking infill's environment variables (infill.environment): a junk value is a
    usage error naming the variable, as a bad flag is."""
    from infill.errors import InputError

    try:
        environment.check()
    except InputError as exc:
        raise click.UsageError(exc.message, ctx) from None


def subcommand(group: click.Command, args: list[str]) -> tuple[str, list[str]] | None:
    """(name, its arguments) of the subcommand in `group`'s raw arguments, skipping the group's options before it
    (and the value of those that take one); None when there is none. For arguments Click could not parse."""
    takes_value = {
        opt for p in group.params if isinstance(p, click.Option) and not p.is_flag and not p.count for opt in p.opts
    }
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return (args[i + 1], args[i + 2 :]) if i + 1 < len(args) else None
        if arg.startswith("-") and arg != "-":
            i += 2 if arg in takes_value else 1  # `--threads=0` is one argument
            continue
        return arg, args[i + 1 :]
    return None


class LazyGroup(click.Group):
    """A group whose subcommands are imported on first use."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # Click's parser consumes the list it is given
        try:
            rest = super().parse_args(ctx, args)
            _check_environment(ctx)
            return rest
        except _HELP_NOT_ERROR:
            raise
        except click.exceptions.ClickException as exc:  # `infill --bogus`, `infill --threads 0`, INFILL_THREADS=0
            command = subcommand(self, given)
            # the editor filter echoes its input even then, and --format json prints its error document
            if command is not None and command[0] == "fill":
                from infill.commands.fill import answer_usage_error

                answer_usage_error(command[1], error_line(exc), exc.exit_code)
            exit_on_click_error(exc)
        except BrokenPipeError:  # `infill --help | head -1`
            _quiet_broken_pipe()

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an error no command handled itself becomes one line on stderr and the documented
        exit code (2 for bad input, 123 for anything else), never a traceback (INFILL_DEBUG=1 shows it)."""
        try:
            with sigterm_raises():
                return super().invoke(ctx)
        except _HELP_NOT_ERROR:
            raise
        except click.exceptions.ClickException as exc:  # a bad flag or value of a subcommand: one line, exit 2
            exit_on_click_error(exc)
        except (click.exceptions.Exit, click.exceptions.Abort):
            raise
        except BrokenPipeError:  # `infill ... | head -1`: the reader has all it wants
            _quiet_broken_pipe()
        except (KeyboardInterrupt, Terminated) as exc:  # Ctrl-C, SIGTERM: one quiet line, 130 / 143
            line, code = signal_report(exc)
            click.echo(line, err=True)
            sys.exit(code)
        except Exception as exc:  # noqa: BLE001 - input, model, OS error or our bug: one line, documented code
            if environment.enabled("INFILL_DEBUG"):
                raise
            line, code = error_report(exc)
            click.echo(line, err=True)
            sys.exit(code)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if self._load(name) is not None)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        return None if target is None else load_command(target)


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


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="infill")
@click.option(
    "--threads",
    type=THREADS,
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
