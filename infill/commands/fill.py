"""`infill fill`: flags -> one FillRequest -> run_fill(request) -> rendered output and an exit code.

All work after flag parsing happens in `run_fill`, a function of a plain JSON-serialisable request (a
dict, or a FillRequest). It returns a plain dict {"exit_code", "stdout", "stderr", "result"}; the command
only prints it. A daemon (`--daemon`) can therefore ship `FillRequest.to_dict()` to a warm server,
call `run_fill` there in-process, and print the same dict on the client. The command reads stdin; the
request carries its text.

This module imports neither torch nor rich.progress at import time: `infill fill --help` stays fast.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, BinaryIO, cast

import click

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.errors import InfillError, InputError, NoValidFillError
from infill.options import click_options, from_flags
from infill.server.options import daemon_options, fill_command
from infill.spans import BOM, DEFAULT_TOKENS, Selection

EXIT_OK, EXIT_CHANGES, EXIT_USAGE, EXIT_NO_VALID_FILL, EXIT_INTERNAL = 0, 1, 2, 3, 123


@dataclass(frozen=True)
class FillRequest:
    """Everything `infill fill` was asked to do; plain data, JSON round-trippable via to_dict / from_dict."""

    file: str  # a path as the user typed it, or "-" for stdin
    selections: tuple[Selection, ...]
    stdin: str | None = None  # the input text when file == "-"
    stdin_filename: str | None = None  # names the language (and the diff label) for stdin
    cwd: str = "."  # relative paths are resolved against this (the daemon runs elsewhere)
    decode: DecodeConfig = DecodeConfig()
    model: ModelSpec = ModelSpec()
    options: FillOptions = FillOptions()
    diff: bool = False
    check: bool = False
    output: str | None = None  # -o PATH ("-" = stdout)
    format: str = "text"  # "text" | "json"
    verbosity: int = 0  # -1 quiet, 0 normal, 1+ verbose
    stats: bool = False
    filter_mode: bool = False  # editor filter: stdin -> stdout; stdout only text; echo the input on failure
    extra: dict[str, Any] = field(default_factory=dict)  # room for later flags (e.g. the daemon's)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["selections"] = [asdict(s) for s in self.selections]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FillRequest:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise InputError(f"unknown request field(s): {', '.join(sorted(unknown))}")
        kw = dict(d)
        kw["selections"] = tuple(Selection(s["kind"], s["value"]) for s in d.get("selections", ()))
        kw["decode"] = DecodeConfig(**d.get("decode", {}))
        kw["model"] = ModelSpec(**d.get("model", {}))
        opts = dict(d.get("options", {}))
        opts["context"] = tuple(opts.get("context", ()))  # JSON turns the tuple into a list
        kw["options"] = FillOptions(**opts)
        return cls(**kw)


def result_json(result: Any, file: str | None) -> dict[str, Any]:
    """The `--format json` document (exactly the keys the issue specifies)."""
    return {
        "file": file,
        "edits": [
            {
                "start_line": e.start_line,
                "end_line": e.end_line,
                "start_byte": e.start_byte,
                "end_byte": e.end_byte,
                "text": e.text,
                "score": e.score,
            }
            for e in result.edits
        ],
        "stats": {k: result.stats.get(k) for k in ("decoder", "model", "nfe", "tokens", "seconds")},
    }


def no_valid_fill_json(exc: NoValidFillError, file: str | None) -> dict[str, Any]:
    """The `--format json` document when no candidate was valid: no edits, the rejected ones under "failed"."""
    return {
        "file": file,
        "edits": [],
        "stats": {k: exc.stats.get(k) for k in ("decoder", "model", "nfe", "tokens", "seconds")},
        "failed": exc.failed,
        "error": {"code": "no_valid_fill", "message": str(exc), "exit_code": exc.exit_code},
    }


def _stats_line(stats: dict[str, Any]) -> str:
    nfe, tokens = stats.get("nfe", 0) or 0, stats.get("tokens", 0) or 0
    secs = stats.get("seconds", 0.0) or 0.0
    parts = [
        f"decoder={stats.get('decoder')}",
        f"model={stats.get('model')}",
        f"nfe={nfe}",
        f"tokens={tokens}",
        f"tokens/nfe={tokens / nfe:.2f}" if nfe else "tokens/nfe=-",
        f"seconds={secs:.3f}",
        f"tokens/s={tokens / secs:.1f}" if secs else "tokens/s=-",
        f"samples={stats.get('samples', 1)}",
        f"score={stats.get('score', 0.0):.3f}",
    ]
    if stats.get("accepted_histogram"):
        parts.append("accepted=" + ",".join(f"{k}:{v}" for k, v in stats["accepted_histogram"].items()))
    return "stats: " + " ".join(parts)


def run_fill(
    request: FillRequest | dict[str, Any], on_progress: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Do one `infill fill` request -> {"exit_code", "stdout": str, "stderr": [str], "result": dict | None}.

    Never raises for input, model or internal errors: they become an exit code and one stderr line. In filter
    mode stdout is the patched text, or the unchanged input on failure; stderr stays empty unless verbose.
    """
    out: dict[str, Any] = {"exit_code": EXIT_OK, "stdout": "", "stderr": [], "result": None}
    try:
        req = request if isinstance(request, FillRequest) else FillRequest.from_dict(request)
    except (InfillError, TypeError, KeyError, ValueError) as exc:
        out["exit_code"] = EXIT_USAGE
        out["stderr"].append(f"error: bad request: {exc}")
        return out
    quiet_stderr = req.verbosity < 0 or (req.filter_mode and req.verbosity < 1)

    def say(line: str) -> None:
        if not quiet_stderr:
            out["stderr"].append(line)

    original: str | None = req.stdin if req.file == "-" else None
    try:
        _run(req, out, say, on_progress)
    except NoValidFillError as exc:  # exit 3: nothing written; --format json also lists the failed edits
        out["exit_code"] = exc.exit_code
        out["result"] = no_valid_fill_json(exc, None if req.file == "-" else req.file)
        if req.filter_mode and req.verbosity < 1:
            out["stderr"] = []
        else:
            out["stderr"].append(f"error: {exc}")
        if req.filter_mode and original is not None:
            out["stdout"] = original
        else:
            out["stdout"] = json.dumps(out["result"], ensure_ascii=False) + "\n" if req.format == "json" else ""
    except InfillError as exc:
        out["exit_code"] = exc.exit_code
        if req.filter_mode and req.verbosity < 1:
            out["stderr"] = []
        else:
            out["stderr"].append(f"error: {exc}")
        out["stdout"] = original if req.filter_mode and original is not None else ""
    except Exception as exc:  # a bug or a backend failure: exit 123 with one line (traceback with -v)
        out["exit_code"] = EXIT_INTERNAL
        out["stderr"] = [] if req.filter_mode and req.verbosity < 1 else out["stderr"]
        if not (req.filter_mode and req.verbosity < 1):
            out["stderr"].append(f"error: internal error: {type(exc).__name__}: {exc}".splitlines()[0])
            if req.verbosity >= 1:
                out["stderr"].append(traceback.format_exc().rstrip())
        out["stdout"] = original if req.filter_mode and original is not None else ""
    return out


def _resolve(req: FillRequest, path: str) -> str:
    """`path` for this process: relative paths are relative to the request's cwd (a daemon runs elsewhere)."""
    if os.path.isabs(path) or os.path.realpath(req.cwd) == os.path.realpath(os.getcwd()):
        return path
    return os.path.join(req.cwd, path)


@dataclass
class _Input:
    text: str
    data: bytes
    snapshot: Any  # infill.patch.Snapshot of the file, None for stdin
    name: str | None  # names the language
    display: str  # names the input in messages
    language: str | None
    selected: list[Any]  # infill.spans.Span


def _prepare(req: FillRequest, tree_sitter: bool = True) -> _Input:
    """Read and check the input and resolve the selections; InputError for anything unusable. Needs no model,
    so a client runs it before asking a daemon (`tree_sitter=False` skips selectors that parse the file)."""
    from infill import languages, patch, spans

    name = req.stdin_filename if req.file == "-" else req.file
    display = req.file if req.file != "-" else (req.stdin_filename or "<stdin>")
    snapshot = None
    if req.file == "-":
        if req.stdin is None:
            raise InputError("no stdin text in the request")
        text = req.stdin
        data = text.encode("utf-8")
    else:
        try:
            data, snapshot = patch.read_source(_resolve(req, req.file))
        except InputError as exc:
            exc.path = req.file  # as the user typed it, not resolved against cwd
            raise
        text = patch.decode_utf8(data, req.file)
    if not data.removeprefix(BOM).strip():
        raise InputError("the input is empty; there is no context to fill around", path=display)
    writes_in_place = req.file != "-" and not (req.diff or req.check or req.format == "json" or req.output)
    if writes_in_place:
        patch.check_writable(_resolve(req, req.file))
    elif req.output and req.output != "-":
        patch.check_writable(_resolve(req, req.output))
    language = languages.detect(name)
    selected: list[Any] = []
    if tree_sitter or all(s.kind in ("span", "marker") for s in req.selections):
        try:
            selected = spans.resolve(data, req.selections, language, name)
        except InputError as exc:
            if exc.path is None:
                exc.path = display
            raise
    return _Input(text, data, snapshot, name, display, language, selected)


def preflight(req: FillRequest) -> bool:
    """Whether the request gets past the checks that need no model (a missing file, a bad span...). A client
    asks a daemon only then: a request that fails them fails in-process in milliseconds, as it would there."""
    try:
        _prepare(req, tree_sitter=False)
    except InfillError:
        return False
    return True


def _run(
    req: FillRequest,
    out: dict[str, Any],
    say: Callable[[str], None],
    on_progress: Callable[[dict[str, Any]], None] | None,
) -> None:
    from infill import api, patch

    given = _prepare(req)
    text, snapshot, display = given.text, given.snapshot, given.display
    language, selected = given.language, given.selected
    result = api.fill_text(
        text,
        selected,
        language=language,
        model=req.model,
        decode=req.decode,
        options=req.options,
        on_progress=on_progress,
    )
    out["result"] = result_json(result, None if req.file == "-" else req.file)
    for warning in result.warnings:
        say(f"warning: {display}: {warning}")
    if req.verbosity >= 1:
        for note in getattr(result, "notes", []):
            say(f"note: {display}: {note}")
        for e in result.edits:
            say(f"{display}:{e.start_line}-{e.end_line}: filled {e.tokens} tokens (log-likelihood {e.score:.2f})")
    if req.stats:
        say(_stats_line(result.stats))
    changed = result.text != text
    if req.format == "json":
        out["stdout"] = json.dumps(out["result"], ensure_ascii=False) + "\n"
    if req.diff:
        diff = patch.unified_diff(text, result.text, display)
        if req.format != "json":
            out["stdout"] = diff
        out["exit_code"] = EXIT_CHANGES if changed else EXIT_OK
    if req.check:
        if changed:
            say(f"would fill {display} ({len(result.edits)} span(s))")
        out["exit_code"] = EXIT_CHANGES if changed else EXIT_OK
    if req.diff or req.check:
        return
    if req.output:
        if req.output == "-":
            if req.format != "json":
                out["stdout"] = result.text
        else:
            target = _resolve(req, req.output)
            same = req.file != "-" and os.path.realpath(target) == os.path.realpath(_resolve(req, req.file))
            patch.atomic_write(target, result.text.encode("utf-8"), snapshot if same else None)
            say(f"wrote {req.output}")
        return
    if req.format == "json":
        return
    if req.file == "-":
        out["stdout"] = result.text
        return
    if changed:
        patch.atomic_write(_resolve(req, req.file), result.text.encode("utf-8"), snapshot)
        say(f"filled {display} ({len(result.edits)} span(s))")
    else:
        say(f"unchanged {display}")


# ------------------------------------------------------------------------------------------------------------
# the Click command: flags -> FillRequest -> run_fill -> print

_HELP = f"""Fill spans of FILE (or - for stdin) with the model, and write the file in place.

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
Output: in place (atomic; refused if the file changed meanwhile), --diff,
--check, -o PATH, stdout for stdin, or --format json (edits only, the file is
not written). Editor filter: `infill fill - --stdin-filename x.py --span 3:4`
prints only the text, and echoes the input unchanged on any failure.

\b
Exit codes: 0 ok, 1 changes needed (--check, or --diff with a change),
2 usage or input error, 3 no valid fill (every candidate breaks the
syntax; nothing written), 123 internal or model error.
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


def _binary(name: str) -> BinaryIO:
    stream = sys.stdout if name == "stdout" else sys.stdin
    return cast(BinaryIO, stream.buffer)


def _write_out(stdout: str, stderr: list[str]) -> None:
    if stdout:
        stream = _binary("stdout")
        stream.write(stdout.encode("utf-8"))  # bytes: CRLF and UTF-8 pass through untouched
        stream.flush()
    for line in stderr:
        click.echo(line, err=True)


def _filter_mode_args(command: click.Command, args: list[str]) -> tuple[bool, bool]:
    """(filter mode, verbose) read from raw arguments that Click could not parse: FILE is "-" and the output
    is stdout text (no --diff, --check, --format json, or -o PATH). Options that take a value skip it."""
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
    filter_mode = positional[:1] == ["-"] and not (diff or check or json_format) and output in (None, "-")
    return filter_mode, verbose


class FillCommand(click.Command):
    """`infill fill`, whose editor filter mode survives usage errors: a bad flag or value with FILE "-" echoes
    stdin unchanged to stdout (and exits 2), so `:%!infill fill - ...` can never wipe the buffer."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # Click's parser consumes the list it is given
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.ClickException as exc:
            filter_mode, verbose = _filter_mode_args(self, given)
            if not filter_mode or sys.stdin is None or sys.stdin.isatty():
                raise
            from infill.cli import error_line

            raw = _binary("stdin").read()
            if raw:
                _binary("stdout").write(raw)
                _binary("stdout").flush()
            if verbose:
                click.echo(error_line(exc), err=True)
            raise click.exceptions.Exit(EXIT_USAGE) from None


@click.command("fill", cls=FillCommand, help=_HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("file", metavar="FILE|-")
@click.option("--span", "spans", multiple=True, metavar="A:B|A:C-B:D", help="Lines A..B, or line:col to line:col.")
@click.option("--marker", "markers", multiple=True, metavar="TEXT", help="Fill every occurrence of TEXT.")
@click.option("--function", "functions", multiple=True, metavar="NAME", help="Fill this function's body.")
@click.option("--class", "classes", multiple=True, metavar="NAME", help="Fill this class's body.")
@click.option("--node", "nodes", multiple=True, metavar="KIND", help="Fill every query capture KIND.")
@click_options()
@click.option("--diff", is_flag=True, help="Print a unified diff; do not write. Exit 1 if it is not empty.")
@click.option("--check", is_flag=True, help="Write nothing; exit 1 if the file would change.")
@click.option("-o", "--output", default=None, metavar="PATH", help="Write the result to PATH (- = stdout).")
@click.option("--stdin-filename", default=None, metavar="NAME", help="File name for stdin (selects the language).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: print the edits and stats; the file is not written.",
)
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
@click.option("-v", "--verbose", count=True, help="More detail on stderr (tracebacks with -v).")
@click.option("--stats", is_flag=True, help="Print decoding stats (NFE, tokens, tokens/NFE, time) on stderr.")
@daemon_options
def fill(
    file: str,
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
    daemon: str,
    idle_timeout: float | None,
    **decoding: Any,
) -> None:
    """See _HELP. `decoding` holds the options of infill.options (flags named after their config fields)."""
    filter_mode = file == "-" and not (diff or check or fmt == "json") and output in (None, "-")
    stdin_text: str | None = None
    if file == "-":
        raw = _binary("stdin").read()
        try:
            stdin_text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if filter_mode:
                _binary("stdout").write(raw)
            if verbose or not filter_mode:
                click.echo(
                    f"error: {stdin_filename or '<stdin>'}: not UTF-8 (invalid byte at offset {exc.start})",
                    err=True,
                )
            sys.exit(EXIT_USAGE)
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
    from infill.progress import progress

    show = not quiet and not filter_mode and fmt == "text"
    result = None  # None: no daemon, work in-process
    if preflight(request):  # a missing file or a bad span fails here, without starting a daemon for it
        try:
            result = fill_command(request.to_dict(), daemon, idle_timeout)
        except InfillError:  # the daemon reported an error: redo it here, so filter mode can echo the input
            result = None
    if result is None:
        with progress(show) as on_progress:
            result = run_fill(request, on_progress)
    _write_out(result["stdout"], result["stderr"])
    sys.exit(result["exit_code"])
