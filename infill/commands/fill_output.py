"""The output streams of `infill fill` and its editor filter (`:%!infill fill - ...`): what raw arguments ask for
when Click could not parse them, whether parsed flags run the filter, and the echo of stdin that keeps an editor's
buffer whatever fails. infill.commands.fill's FillCommand calls these."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, BinaryIO, NamedTuple, NoReturn, cast

import click

from infill.commands.interrupts import held
from infill.core.fill import output_target


def binary(name: str) -> BinaryIO:
    """The byte stream under sys.stdout or sys.stdin; a usage error when the process was started with it closed
    (`<&-`, `>&-`: Python then has None there)."""
    stream = sys.stdout if name == "stdout" else sys.stdin
    if stream is None:
        raise click.UsageError(f"{name} is closed")
    return cast(BinaryIO, stream.buffer)


def write(text: str, err: bool) -> None:
    if err:
        click.echo(text, err=True, nl=False)
        return
    stream = binary("stdout")
    stream.write(text.encode("utf-8"))  # bytes: CRLF and UTF-8 pass through untouched
    stream.flush()


def write_out(stdout: str, stderr: list[str], write: Callable[[str, bool], None] = write) -> None:
    if stdout:
        write(stdout, False)
    for line in stderr:
        write(line + "\n", True)


class Mode(NamedTuple):
    filter: bool  # the editor filter: FILE is "-" and the output is stdout text
    verbose: bool
    json: bool  # --format json
    file: str | None  # FILE as given (None for "-" or none)


def mode_of_args(command: click.Command, args: list[str]) -> Mode:
    """What raw arguments that Click could not parse ask for: the editor filter (FILE is "-" and the output is
    stdout text: no --diff, --check, --format json, or -o PATH), -v, --format json, and FILE. Options that take
    a value skip it."""
    takes_value: dict[str, bool] = {}
    for param in command.params:
        if isinstance(param, click.Option):
            for opt in (*param.opts, *param.secondary_opts):
                takes_value[opt] = not param.is_flag and not param.count
    positional: list[str] = []
    diff = check = json_format = verbose = False
    output: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            positional += args[i + 1 :]
            break
        name, eq, inline = arg.partition("=")
        if arg.startswith("--") and takes_value.get(name):
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if eq else 2
            json_format = json_format or (name == "--format" and value == "json")
            output = value if name == "--output" else output
            continue
        if arg.startswith("-") and arg != "-" and not arg.startswith("--"):
            short = arg[:2]
            if takes_value.get(short):  # -o PATH, -oPATH, -k 5
                value = arg[2:] or (args[i + 1] if i + 1 < len(args) else "")
                i += 1 if arg[2:] else 2
                output = value if short == "-o" else output
                continue
            verbose = verbose or "v" in arg[1:]
            i += 1
            continue
        diff, check = diff or arg == "--diff", check or arg == "--check"
        verbose = verbose or arg == "--verbose"
        if not arg.startswith("--"):
            positional.append(arg)
        i += 1
    filter_mode = (
        positional[:1] == ["-"] and not (diff or check or json_format) and output_target(output) in (None, "-")
    )
    file = positional[0] if positional and positional[0] != "-" else None
    return Mode(filter_mode, verbose, json_format, file)


FILTER_INPUT = "infill.fill.filter_input"  # ctx.meta key: (stdin bytes, verbose) while the filter may fail


def runs_filter(params: dict[str, Any]) -> bool:
    """Whether the parsed flags run the editor filter: FILE is "-" and the output is stdout text (no --diff,
    --check, --format json or -o PATH)."""
    other_output = params.get("diff") or params.get("check") or params.get("fmt") == "json"
    return params.get("file") == "-" and not other_output and output_target(params.get("output")) in (None, "-")


def echo_input(raw: bytes, verbose: bool, line: str, code: int) -> NoReturn:
    """The editor filter failed: stdout gets the input back unchanged, so the buffer survives; the one error
    line goes to stderr only with -v (some editors read both streams); the exit code says what went wrong. A
    signal during the echo waits until it is complete, and is then dropped: the exit code already says why."""
    with held(deliver=False):
        if raw:
            binary("stdout").write(raw)
            binary("stdout").flush()
        if verbose:
            click.echo(line, err=True)
    raise click.exceptions.Exit(code)


def print_json(document: dict[str, Any]) -> None:
    write_out(json.dumps(document, ensure_ascii=False) + "\n", [])
