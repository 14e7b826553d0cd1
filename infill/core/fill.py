"""One `infill fill` request, start to finish: FillRequest -> run_fill(request) -> {"exit_code", "stdout",
"stderr", "result"}, and fill_json(request) -> the `--format json` document (raising InfillError).

The CLI (infill.commands.fill) builds a FillRequest from its flags and prints what run_fill returns; a daemon
runs run_fill on a request the CLI shipped to it (`--daemon`); the server's `fill` method calls fill_json, so
its errors stay exceptions with their exit codes (infill.errors) and become structured error responses.
Everything here is plain data: a request is JSON round-trippable (to_dict / from_dict).

This module imports neither torch nor Click.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.errors import ExitCode, InfillError, InputError, NoValidFillError, error_code, one_line, printable
from infill.progress import Cancelled
from infill.spans import BOM, Selection

if TYPE_CHECKING:
    from infill.core.pipeline import FillResult


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


# "substituted": null, or {"asked": ..., "ran": ...} when the model's kind ran another decoder than the one asked
# for (infill.core.kinds.select): a decoder the user named is never swapped silently
_STATS = ("decoder", "model", "nfe", "tokens", "seconds", "substituted")


def result_json(result: FillResult, file: str | None) -> dict[str, Any]:
    """The `--format json` document: the file, its edits (Edit.to_json), the decoding stats, the calibrated
    confidence and the fill's warnings (each also a `warning:` line on stderr; the JSON server has no stderr)."""
    return {
        "file": file,
        "edits": [e.to_json() for e in result.edits],
        "stats": {k: result.stats.get(k) for k in _STATS},
        "confidence": result.confidence,
        "warnings": list(result.warnings),
    }


def error_json(file: str | None, code: str, message: str, exit_code: int) -> dict[str, Any]:
    """The `--format json` document of a fill that failed, whatever failed (a plugin reads one shape for every
    outcome): no edits, and "error" with the code the server would answer (infill.errors.error_code: input_error,
    model_error, no_valid_fill, internal_error...), the one-line message and the exit code."""
    return {
        "file": file,
        "edits": [],
        "stats": dict.fromkeys(_STATS),
        "confidence": None,
        "warnings": [],
        "error": {"code": code, "message": message, "exit_code": exit_code},
    }


def exception_json(exc: Exception, file: str | None) -> dict[str, Any]:
    """error_json of an exception (an InfillError's own code, else an internal error)."""
    if isinstance(exc, NoValidFillError):
        return no_valid_fill_json(exc, file)
    if isinstance(exc, InfillError):
        return error_json(file, error_code(exc), one_line(str(exc)), exc.exit_code)
    return error_json(
        file, error_code(exc), f"internal error: {type(exc).__name__}: {one_line(str(exc))}", ExitCode.INTERNAL
    )


def no_valid_fill_json(exc: NoValidFillError, file: str | None) -> dict[str, Any]:
    """The `--format json` document when nothing is written (no candidate was valid, or the best one's confidence
    is below --min-confidence): no edits, the refused ones under "failed"."""
    doc = error_json(file, exc.code, str(exc), exc.exit_code)
    stats = {k: exc.stats.get(k) for k in _STATS}
    return {
        **doc,
        "stats": stats,
        "confidence": exc.stats.get("confidence"),
        "failed": exc.failed,
        "error": doc["error"],
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
        f"score={stats.get('score', 0.0):.3f}" if stats.get("score", 0.0) is not None else "score=-",
        f"confidence={stats['confidence']:.2f}" if stats.get("confidence") is not None else "confidence=-",
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
    Cancelled (the work was stopped before its write: a daemon shutting down, its client gone) is raised, not
    reported: it is no answer to the request, and a daemon's client then does the work in-process.
    """
    out: dict[str, Any] = {"exit_code": ExitCode.OK, "stdout": "", "stderr": [], "result": None}
    try:
        req = request if isinstance(request, FillRequest) else FillRequest.from_dict(request)
    except (InfillError, TypeError, KeyError, ValueError) as exc:
        out["exit_code"] = ExitCode.USAGE
        out["stderr"].append(f"error: bad request: {exc}")
        return out
    quiet_stderr = req.verbosity < 0 or (req.filter_mode and req.verbosity < 1)

    def say(line: str) -> None:  # one line each, whatever the names in it hold
        if not quiet_stderr:
            out["stderr"].append(printable(line))

    try:
        _run(req, out, say, on_progress)
    except Cancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - input, model or internal error (a bug, a backend): an exit code
        _failed(req, out, exc)
    return out


def _failed(req: FillRequest, out: dict[str, Any], exc: Exception) -> None:
    """run_fill's answer to a failure: its exit code (123 for anything but an InfillError); one stderr line naming
    the input (none from the editor filter without -v; a bug's traceback too with -v); on stdout the unchanged
    input in filter mode, else with --format json the error document (exception_json: one shape for every
    outcome), else nothing. A no-valid-fill's document, with the rejected edits, is also the result."""
    if isinstance(exc, InfillError):
        line, out["exit_code"] = f"error: {exc}", exc.exit_code
    else:
        line, out["exit_code"] = f"error: internal error: {type(exc).__name__}: {one_line(str(exc))}", ExitCode.INTERNAL
    if req.filter_mode and req.verbosity < 1:
        out["stderr"] = []
    else:
        out["stderr"].append(line)
        if req.verbosity >= 1 and not isinstance(exc, InfillError):
            out["stderr"].append(traceback.format_exc().rstrip())
    document = exception_json(exc, None if req.file == "-" else req.file)
    if isinstance(exc, NoValidFillError):
        out["result"] = document
    if req.filter_mode and req.stdin is not None:
        out["stdout"] = req.stdin
    elif req.format == "json":
        out["stdout"] = json.dumps(document, ensure_ascii=False) + "\n"
    else:
        out["stdout"] = ""


_STDOUT_NAMES = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")
_DESCRIPTOR_PATHS = ("/dev/fd/", "/dev/stdin", "/dev/stderr", "/proc/self/", "/proc/thread-self/")


def output_target(output: str | None, cwd: str = ".") -> str | None:
    """`-o PATH` as the process that parsed the flags means it, before the request may go to a daemon (which has
    other descriptors, a log file for a stdout, and resolves paths in its own process): "-" (print the result) for
    -, /dev/stdout and the file this process's stdout is; a path into this process's own descriptors (/dev/fd/N,
    /dev/stderr, /proc/self/...) that names a regular file becomes that file's path; anything else stays as
    given (what is not a regular file is then refused: infill.patch.check_writable)."""
    if output is None or output in _STDOUT_NAMES:
        return None if output is None else "-"
    path = os.path.join(cwd, output)
    try:
        st = os.stat(path)
    except OSError:
        return output
    try:
        if os.path.samestat(st, os.fstat(sys.stdout.fileno())):
            return "-"
    except (OSError, ValueError, AttributeError):  # no stdout, or one without a descriptor (a test's)
        pass
    if path.startswith(_DESCRIPTOR_PATHS + (f"/proc/{os.getpid()}/",)) and stat.S_ISREG(st.st_mode):
        return os.path.realpath(path)
    return output


def _resolve(req: FillRequest, path: str) -> str:
    """`path` for this process: relative paths are relative to the request's cwd (a daemon runs elsewhere)."""
    if os.path.isabs(path) or os.path.realpath(req.cwd) == os.path.realpath(os.getcwd()):
        return path
    return os.path.join(req.cwd, path)


IN_PLACE_HINT = "use --diff or -o PATH"  # what `infill fill` offers when the file cannot be written in place


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
        patch.check_writable(_resolve(req, req.file), IN_PLACE_HINT)
    elif req.output and req.output != "-":
        patch.check_writable(_resolve(req, req.output))
    language = languages.detect(name, data)
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


def _fill(req: FillRequest, on_progress: Callable[[dict[str, Any]], None] | None) -> tuple[_Input, FillResult]:
    """Read and check the input, then fill it -> (the input, a FillResult). Writes nothing. The pipeline is
    imported here, not at the top: `preflight`, which a daemon's client runs, needs none of it."""
    from infill.core import pipeline

    given = _prepare(req)
    try:
        result = pipeline.fill_text(
            given.text,
            given.selected,
            language=given.language,
            model=req.model,
            decode=req.decode,
            options=req.options,
            on_progress=on_progress,
        )
    except NoValidFillError as exc:  # name the input, as every error about it does
        exc.path = exc.path or given.display
        raise
    return given, result


def fill_json(
    request: FillRequest | dict[str, Any], on_progress: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """The `--format json` document of one request (nothing is written); InfillError for what run_fill would
    report with an exit code (a bad request is an InputError)."""
    req = _request(request)
    _, result = _fill(req, on_progress)
    return result_json(result, None if req.file == "-" else req.file)


def _request(request: FillRequest | dict[str, Any]) -> FillRequest:
    if isinstance(request, FillRequest):
        return request
    try:
        return FillRequest.from_dict(request)
    except InfillError:
        raise
    except (TypeError, KeyError, ValueError) as exc:
        raise InputError(f"bad request: {exc}") from None


def _before_write(on_progress: Callable[[dict[str, Any]], None] | None, path: str) -> None:
    """The "write" progress event: where a server's cancel check stops a request whose client went away after the
    model's work but before the write."""
    if on_progress is not None:
        on_progress({"event": "write", "path": path})


def _run(
    req: FillRequest,
    out: dict[str, Any],
    say: Callable[[str], None],
    on_progress: Callable[[dict[str, Any]], None] | None,
) -> None:
    from infill import patch

    given, result = _fill(req, on_progress)
    text, snapshot, display = given.text, given.snapshot, given.display
    out["result"] = result_json(result, None if req.file == "-" else req.file)
    for warning in result.warnings:
        say(f"warning: {display}: {warning}")
    if req.verbosity >= 1:
        for note in result.notes:
            say(f"note: {display}: {note}")
        for e in result.edits:
            how = f"log-likelihood {e.score:.2f}" if e.scored else "unscored: no log-probabilities"
            say(f"{display}:{e.start_line}-{e.end_line}: filled {e.tokens} tokens ({how})")
    if req.stats:
        say(_stats_line(result.stats))
    changed = result.text != text
    if req.format == "json":
        out["stdout"] = json.dumps(out["result"], ensure_ascii=False) + "\n"
    if req.diff:
        diff = patch.unified_diff(text, result.text, display)
        if req.format != "json":
            out["stdout"] = diff
        out["exit_code"] = ExitCode.CHANGES if changed else ExitCode.OK
    if req.check:
        if changed:
            say(f"would fill {display} ({len(result.edits)} span(s))")
        out["exit_code"] = ExitCode.CHANGES if changed else ExitCode.OK
    if req.diff or req.check:
        return
    if req.output:
        if req.output == "-":
            if req.format != "json":
                out["stdout"] = result.text
        else:
            target = _resolve(req, req.output)
            same = req.file != "-" and os.path.realpath(target) == os.path.realpath(_resolve(req, req.file))
            _before_write(on_progress, target)
            patch.atomic_write(target, result.text.encode("utf-8"), snapshot if same else None)
            say(f"wrote {req.output}")
        return
    if req.format == "json":
        return
    if req.file == "-":
        out["stdout"] = result.text
        return
    if changed:
        _before_write(on_progress, _resolve(req, req.file))
        patch.atomic_write(_resolve(req, req.file), result.text.encode("utf-8"), snapshot, IN_PLACE_HINT)
        say(f"filled {display} ({len(result.edits)} span(s))")
    else:
        say(f"unchanged {display}")
