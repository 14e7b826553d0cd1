"""The `infill` command line. Click only: each command lives in infill/commands/<name>.py and is imported on use,
so `infill --help` and shell completion never import torch or transformers."""

from __future__ import annotations

import importlib.util
import os
import sys
from typing import Any

import click
from click.shell_completion import CompletionItem

from infill import __version__, environment
from infill.clitypes import THREADS
from infill.commands.interrupts import release, sigterm_raises
from infill.commands.shell import (
    error_line,
    error_report,
    exit_on_click_error,
    load_command,
    quiet_broken_pipe,
)
from infill.errors import Terminated, signal_report

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
# each command's help, first paragraph: `infill --help` and the completion of command names show these without
# importing the nine command modules (more than half of `infill --help`'s time); a test holds them to the commands'
SUMMARIES: dict[str, str] = {
    "fill": "Fill spans of FILE (or - for stdin) with the model, and write the file in place.",
    "docstrings": "Fill missing docstrings in PATHS (files or folders) with the model.",
    "models": "List the packaged model(s), the models in the local Hugging Face cache and Ollama's models.",
    "train": "Train the models infill ships: corpus, tokenizer, AS-ARM (and block diffusion).",
    "eval": "Measure a model: HumanEval single-line infilling pass@1, held-out exact match.",
    "serve": "Keep models in memory and answer requests, one JSON object per line.",
    "lsp": "Serve editors over the Language Server Protocol (stdio, or --tcp on 127.0.0.1).",
    "daemon": "Inspect, start or stop this user's background model server.",
    "completion": "Print the shell completion script for SHELL.",
}


# `infill` or `infill daemon` alone print their help; that is not an error to shorten (click >= 8.2)
_HELP_NOT_ERROR: tuple[type[BaseException], ...] = tuple(
    cls for cls in (getattr(click.exceptions, "NoArgsIsHelpError", None),) if cls is not None
)


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
            quiet_broken_pipe()

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
            quiet_broken_pipe()
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

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """The subcommand; a signal held since the program started (infill.commands.interrupts) is raised now,
        inside invoke(), unless the command answers it itself (`holds_signals`: the editor filter reads its input
        first)."""
        found = super().resolve_command(ctx, args)
        if not getattr(found[1], "holds_signals", False):
            release()
        return found

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(name for name in COMMANDS if _installed(COMMANDS[name]))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `infill --help`, from SUMMARIES: no command module is imported."""
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names), default=0)
        rows = [(name, _summary(name, limit)) for name in names]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def shell_complete(self, ctx: click.Context, incomplete: str) -> list[CompletionItem]:
        """Command names (with their summaries) and the group's options, without importing a command."""
        items = [
            CompletionItem(name, help=_summary(name, 45))
            for name in self.list_commands(ctx)
            if name.startswith(incomplete)
        ]
        return items + click.Command.shell_complete(self, ctx, incomplete)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._load(cmd_name)

    @staticmethod
    def _load(name: str) -> click.Command | None:
        target = COMMANDS.get(name)
        return None if target is None else load_command(target)


def _summary(name: str, limit: int) -> str:
    """The command's summary, cut to `limit` characters as Click cuts a command's help."""
    return click.Command(name, help=SUMMARIES[name]).get_short_help_str(limit)


def _installed(target: str) -> bool:
    """Whether the module of a "module:attribute" target is in this installation (found, not imported)."""
    return importlib.util.find_spec(target.split(":")[0]) is not None


# every option of every command shows its default in --help (Click's show_default, inherited by subcommands)
@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
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
