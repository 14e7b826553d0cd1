"""`infill fill`: flags -> one FillRequest -> run_fill(request) -> rendered output and an exit code.

All work after flag parsing happens in infill.core.fill.run_fill, a function of a plain JSON-serialisable
request (a dict, or a FillRequest). It returns a plain dict {"exit_code", "stdout", "stderr", "result"}; the
command only prints it. A daemon (`--daemon`) can therefore ship `FillRequest.to_dict()` to a warm server,
call `run_fill` there in-process, and print the same dict on the client. The command reads stdin; the
request carries its text. The decoding flags are generated from infill.options.

This module imports neither torch nor rich.progress at import time: `infill fill --help` stays fast.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import click

from infill import environment
from infill.clitypes import JOBS, PATH, TEXT
from infill.commands.fill_output import (
    FILTER_INPUT,
    binary,
    echo_input,
    mode_of_args,
    print_json,
    runs_filter,
    write,
    write_out,
)
from infill.commands.interrupts import held, release
from infill.commands.shell import error_line, error_report
from infill.core.fill import (
    FillRequest,
    error_json,
    exception_json,
    no_valid_fill_json,
    output_target,
    preflight,
    result_json,
    run_fill,
)
from infill.errors import ExitCode, InfillError, InputError, LowConfidenceError, Terminated, signal_report
from infill.options import click_options, from_flags
from infill.server.options import daemon_options, fill_command
from infill.spans import DEFAULT_TOKENS, Selection

__all__ = ["FillRequest", "fill", "no_valid_fill_json", "preflight", "result_json", "run_fill"]

# ------------------------------------------------------------------------------------------------------------
# the Click command: flags -> FillRequest -> run_fill -> print

_HELP = f"""Fill spans of FILE (or - for stdin) with the model, and write the file in place.
Several FILEs get the same selections, one after the other, or in N worker
processes with --jobs N (same output and exit code; the most severe wins).

\b
Select what to fill (any combination; each match is one span):
  --span 12:18          lines 12 to 18 (1-based, inclusive), replaced whole
  --span 3:5-3:9        line:column to line:column (columns in characters, end exclusive)
  --marker '<FILL>'     every occurrence of a marker
  --function NAME       a function's body (tree-sitter; Class.method works)
  --class NAME          a class body;  --node KIND: any capture in grammars/<lang>/*.scm

\b
Length policy (tokens per span): --tokens N if given; else the replaced text's
token length plus 25% slack (at least 8; the model ends a fill early with <pad>);
for insertions, blank lines and markers: span {DEFAULT_TOKENS["span"]}, marker {DEFAULT_TOKENS["marker"]},
function {DEFAULT_TOKENS["function"]}, class {DEFAULT_TOKENS["class"]}, node {DEFAULT_TOKENS["node"]}.
A single selected line (--span 12) gets one line back; select more lines for more.
Context beyond the model's length is truncated around the spans (3/4 prefix,
1/4 suffix), never the spans.

\b
Output: in place (refused if the file changed meanwhile), --diff,
--check, -o PATH, stdout for stdin, or --format json (edits only, the file is
not written). Editor filter: `infill fill - --stdin-filename x.py --span 3:4`
prints only the text, and echoes the input unchanged on any failure.

\b
Exit codes: 0 ok, 1 changes needed (--check, or --diff with a change),
2 usage or input error, 3 no valid fill (every candidate breaks the
syntax; nothing written), 4 low confidence (below --min-confidence;
nothing written), 123 internal or model error (a model server down
or answering garbage), 130 / 143 interrupted (Ctrl-C / SIGTERM).
"""


def _selections(
    spans: tuple[str, ...],
    markers: tuple[str, ...],
    functions: tuple[str, ...],
    classes: tuple[str, ...],
    nodes: tuple[str, ...],
) -> tuple[Selection, ...]:
    sels: list[Selection] = [Selection("span", s) for s in spans]
    sels += [Selection("marker", m) for m in markers]
    sels += [Selection("function", f) for f in functions]
    sels += [Selection("class", c) for c in classes]
    sels += [Selection("node", n) for n in nodes]
    return tuple(sels)


def answer_usage_error(args: list[str], line: str, code: int) -> None:
    """Before stdin is read, for a usage error of `infill fill` or of the `infill` group around it (--threads):
    if `args` (the raw arguments of `infill fill`) run the editor filter, echo stdin unchanged and exit with
    `code` (`line` on stderr with -v); with --format json, print the error document on stdout. Otherwise (and
    then) return, and the caller reports the error as usual."""
    mode = mode_of_args(fill, args)
    if mode.json:
        print_json(error_json(mode.file, InputError.code, line.removeprefix("error: "), code))
    if not mode.filter or sys.stdin is None or sys.stdin.isatty():
        return
    echo_input(binary("stdin").read(), mode.verbose, line, code)


class FillCommand(click.Command):
    """`infill fill`, whose editor filter mode survives every failure: a bad flag or value with FILE "-" echoes
    stdin unchanged to stdout (and exits 2), so `:%!infill fill - ...` can never wipe the buffer; so does an
    error after stdin was read that run_fill did not report itself (an unreadable --context file, a bug), and
    Ctrl-C or SIGTERM (exit 130 or 143) whenever it comes: the filter reads its input before it lets a signal
    through (`holds_signals`: infill.commands.interrupts), and a signal that came earlier is raised only then."""

    holds_signals = True

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # Click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.ClickException as exc:
            answer_usage_error(given, error_line(exc), exc.exit_code)
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            if runs_filter(ctx.params):  # from here on, any failure echoes the input
                ctx.meta[FILTER_INPUT] = (binary("stdin").read(), bool(ctx.params.get("verbose")))
            release()
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.exceptions.Abort, BrokenPipeError):
            raise
        except (Exception, KeyboardInterrupt, Terminated) as exc:  # signals too: Ctrl-C, SIGTERM (infill.cli)
            if isinstance(exc, click.exceptions.ClickException):
                line, code = error_line(exc), exc.exit_code
            elif isinstance(exc, Exception):
                line, code = error_report(exc)
            else:
                line, code = signal_report(exc)
            pending = ctx.meta.pop(FILTER_INPUT, None)
            if pending is None:
                if ctx.params.get("fmt") == "json":  # one document for every outcome
                    print_json(_failure_json(ctx, exc, line, code))
                raise  # the `infill` group reports it (one line, documented exit code)
            if environment.enabled("INFILL_DEBUG"):  # the buffer comes back, and the traceback too
                binary("stdout").write(pending[0])
                binary("stdout").flush()
                raise
            echo_input(pending[0], pending[1], line, code)


def _failure_json(ctx: click.Context, exc: BaseException, line: str, code: int) -> dict[str, Any]:
    """The --format json document of a failure run_fill did not report itself: a usage error found in the
    command (input_error), an error before the fill, or a signal (interrupted)."""
    file = ctx.params.get("file")
    name = file if isinstance(file, str) and file != "-" else None
    if isinstance(exc, Exception) and not isinstance(exc, click.exceptions.ClickException):
        return exception_json(exc, name)
    kind = InputError.code if isinstance(exc, click.exceptions.ClickException) else "interrupted"
    return error_json(name, kind, line.removeprefix("infill: ").removeprefix("error: "), code)


@click.command("fill", cls=FillCommand, help=_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("file", metavar="FILE|-", type=PATH)
@click.argument("more", nargs=-1, metavar="[FILE]...", type=PATH)
@click.option(
    "--span", "spans", multiple=True, type=TEXT, metavar="A:B|A:C-B:D", help="Lines A..B, or line:col to line:col."
)
@click.option("--marker", "markers", multiple=True, type=TEXT, metavar="TEXT", help="Fill every occurrence of TEXT.")
@click.option("--function", "functions", multiple=True, type=TEXT, metavar="NAME", help="Fill this function's body.")
@click.option("--class", "classes", multiple=True, type=TEXT, metavar="NAME", help="Fill this class's body.")
@click.option("--node", "nodes", multiple=True, type=TEXT, metavar="KIND", help="Fill every query capture KIND.")
@click_options()
@click.option("--diff", is_flag=True, help="Print a unified diff; do not write. Exit 1 if it is not empty.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the file would change.")
@click.option(
    "-o",
    "--output",
    default=None,
    type=PATH,
    metavar="PATH",
    help="Write the result to PATH (- or /dev/stdout: print it).",
)
@click.option(
    "--stdin-filename", default=None, type=TEXT, metavar="NAME", help="File name for stdin (selects the language)."
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    help="json: print the edits and stats; the file is not written.",
)
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
@click.option("-v", "--verbose", count=True, show_default=False, help="More detail on stderr (tracebacks with -v).")
@click.option("--stats", is_flag=True, help="Print decoding stats (NFE, tokens, tokens/NFE, time) on stderr.")
@click.option(
    "-j",
    "--jobs",
    type=JOBS,
    default=1,
    help="Worker processes for several FILEs, one thread and one model each (no daemon); the output and exit "
    "code are those of one.",
)
@daemon_options
def fill(
    file: str,
    more: tuple[str, ...],
    spans: tuple[str, ...],
    markers: tuple[str, ...],
    functions: tuple[str, ...],
    classes: tuple[str, ...],
    nodes: tuple[str, ...],
    diff: bool,
    check: bool,
    output: str | None,
    stdin_filename: str | None,
    fmt: str,
    quiet: bool,
    verbose: int,
    stats: bool,
    jobs: int,
    daemon: str,
    idle_timeout: float | None,
    **decoding: Any,
) -> None:
    """See _HELP. `decoding` holds the options of infill.options (flags named after their config fields)."""
    if more and "-" in (file, *more):
        raise click.UsageError("- (stdin) cannot be given with other files")
    if more and output is not None:
        raise click.UsageError("-o/--output takes a single FILE")
    output = output_target(output)  # what -o means here, not in a daemon's process
    if fmt == "json" and output not in (None, "-"):
        raise click.UsageError("--format json prints the edits and writes nothing; it cannot be combined with -o PATH")
    ctx = click.get_current_context()
    filter_mode = runs_filter(ctx.params)
    if sys.stdout is None and (filter_mode or diff or fmt == "json" or output == "-"):
        raise click.UsageError("stdout is closed: there is nowhere to print the result")
    stdin_text: str | None = None
    if file == "-":
        pending = ctx.meta.get(FILTER_INPUT)  # the filter's input, read by FillCommand.invoke
        raw = pending[0] if pending is not None else binary("stdin").read()
        from infill.patch import decode_utf8

        try:  # the checks a file's bytes get: binary (a NUL byte), not UTF-8
            stdin_text = decode_utf8(raw, stdin_filename or "<stdin>")
        except InputError as exc:
            message = str(exc)
            if filter_mode:
                ctx.meta.pop(FILTER_INPUT, None)
                echo_input(raw, bool(verbose), f"error: {message}", ExitCode.USAGE)
            if fmt == "json":
                print_json(error_json(None, InputError.code, message, ExitCode.USAGE))
            click.echo(f"error: {message}", err=True)
            sys.exit(ExitCode.USAGE)
    decode, options, model = from_flags(decoding)
    request = FillRequest(
        file=file,
        selections=_selections(spans, markers, functions, classes, nodes),
        stdin=stdin_text,
        stdin_filename=stdin_filename,
        cwd=os.getcwd(),
        decode=decode,
        model=model,
        options=options,
        diff=diff,
        check=check,
        output=output,
        format=fmt,
        verbosity=-1 if quiet else verbose,
        stats=stats,
        filter_mode=filter_mode,
    )
    show = not quiet and not filter_mode and fmt == "text"
    if more:
        files = _unique((file, *more))
        if markers and not (spans or functions or classes or nodes):
            files = _marked(files, markers, verbose > 0 and not quiet)
        sys.exit(_fill_files([replace(request, file=f) for f in files], jobs, daemon, idle_timeout, show))
    result = _fill_one(request, daemon, idle_timeout, show)
    with held(deliver=False):  # the whole result or (a signal before this line) the echo, never a piece of one
        ctx.meta.pop(FILTER_INPUT, None)  # run_fill's result holds the echo if it failed
        write_out(result["stdout"], result["stderr"])
    sys.exit(result["exit_code"])


def _fill_one(request: FillRequest, daemon: str, idle_timeout: float | None, show: bool) -> dict[str, Any]:
    """run_fill's result for one file: from this user's daemon when it answers, else worked here (`show`: the
    token progress bar)."""
    from infill.progress import progress

    if preflight(request):  # a missing file or a bad span fails here, without starting a daemon for it
        try:
            result = fill_command(request.to_dict(), daemon, idle_timeout)
        except InfillError:  # the daemon reported an error: redo it here, so filter mode can echo the input
            result = None
        if result is not None:
            return result
    with progress(show) as on_progress:
        return run_fill(request, on_progress)


# least to most severe: a low-confidence refusal (4) is milder than no valid fill (3)
_SEVERITY = (
    ExitCode.OK,
    ExitCode.CHANGES,
    LowConfidenceError.exit_code,
    ExitCode.NO_VALID_FILL,
    ExitCode.USAGE,
    ExitCode.INTERNAL,
)


def _fill_files(requests: list[FillRequest], jobs: int, daemon: str, idle_timeout: float | None, show: bool) -> int:
    """Fill several files, one after the other or in `jobs` worker processes, printing each file's output in
    the order given; the exit code is the most severe of the files' (123, 2, 3, 4, 1, 0)."""
    from infill.progress import files_progress

    codes = []
    with files_progress(show, len(requests), write) as bar:
        results: Iterable[dict[str, Any]]
        if jobs > 1:
            from infill.jobs import in_order

            results = in_order(run_fill, [r.to_dict() for r in requests], jobs, done=bar.advance)
        else:
            results = _advancing((_fill_one(r, daemon, idle_timeout, False) for r in requests), bar.advance)
        for result in results:
            write_out(result["stdout"], result["stderr"], bar.write)
            codes.append(result["exit_code"])
    return max(codes, key=lambda c: _SEVERITY.index(c) if c in _SEVERITY else len(_SEVERITY))


def _advancing(results: Iterable[dict[str, Any]], advance: Callable[[], None]) -> Iterable[dict[str, Any]]:
    for result in results:
        advance()
        yield result


def _marked(files: list[str], markers: tuple[str, ...], say: bool) -> list[str]:
    """Of several files (`infill fill src/*.py --marker '<FILL>'`), those where a marker occurs: a file without
    any is skipped, as `sed -i` or `ruff --fix` leave a file with nothing to do (`say`: a line for each, -v).
    A file that cannot be read, or a marker that is no text, stays in: its own error is reported. UsageError (2)
    when no file has a marker."""
    needles = []
    for marker in markers:
        try:
            needles.append(marker.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate: the fill reports it
            return files
    kept = []
    for name in files:
        try:
            with open(name, "rb") as handle:
                data = handle.read()
        except OSError:
            kept.append(name)
            continue
        if any(needle in data for needle in needles):
            kept.append(name)
        elif say:
            click.echo(f"skipped {name}: no {' or '.join(markers)} marker", err=True)
    if not kept:
        raise click.UsageError(f"--marker {' / '.join(markers)}: marker not found in any of the {len(files)} files")
    return kept


def _unique(files: Iterable[str]) -> list[str]:
    """Each file once (the first time it is named), so no two workers write the same file."""
    seen: set[str] = set()
    out = []
    for name in files:
        key = os.path.realpath(name)
        if key not in seen:
            seen.add(key)
            out.append(name)
    return out
