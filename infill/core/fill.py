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
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.errors import InfillError, InputError, NoValidFillError, one_line
from infill.spans import BOM, Selection

if TYPE_CHECKING:
    from infill.api import FillResult

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


def result_json(result: FillResult, file: str | None) -> dict[str, Any]:
    """The `--format json` document: the file, its edits (Edit.to_json) and the decoding stats."""
    return {
        "file": file,
        "edits": [e.to_json() for e in result.edits],
        "stats": {k: result.stats.get(k) for k in ("decoder", "model", "nfe", "tokens", "seconds")},
        "confidence": result.confidence,
    }


def no_valid_fill_json(exc: NoValidFillError, file: str | None) -> dict[str, Any]:
    """The `--format json` document when nothing is written (no candidate was valid, or the best one's confidence
    is below --min-confidence): no edits, the refused ones under "failed"."""
    return {
        "file": file,
        "edits": [],
        "stats": {k: exc.stats.get(k) for k in ("decoder", "model", "nfe", "tokens", "seconds")},
        "confidence": exc.stats.get("confidence"),
        "failed": exc.failed,
        "error": {"code": exc.code, "message": str(exc), "exit_code": exc.exit_code},
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
            out["stderr"].append(f"error: internal error: {type(exc).__name__}: {one_line(str(exc))}")
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


def _fill(req: FillRequest, on_progress: Callable[[dict[str, Any]], None] | None) -> tuple[_Input, FillResult]:
    """Read and check the input, then fill it -> (the input, infill.api.FillResult). Writes nothing."""
    from infill import api

    given = _prepare(req)
    result = api.fill_text(
        given.text,
        given.selected,
        language=given.language,
        model=req.model,
        decode=req.decode,
        options=req.options,
        on_progress=on_progress,
    )
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
