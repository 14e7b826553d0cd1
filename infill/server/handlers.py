"""The server's work methods: thin adapters onto infill.core, the functions the CLI commands run in-process.

Public methods (editors, scripts):
  fill        flat params named after the fill options (infill.options) -> what `infill fill --format json`
              prints
  docstrings  {"path"|"text", flags...} -> what `infill docstrings --format json` prints (+ "text")
  models      the models this server holds

Internal methods (the `--daemon` path of the commands; their results are printed by the client verbatim):
  fill_command        a FillRequest dict -> run_fill()'s {"exit_code", "stdout", "stderr", "result"}
  docstrings_command  a DocstringsRequest dict -> {"exit_code", "stdout", "stderr"} of that run

Failures are raised as the InfillError the core raised (with its exit code), which the dispatcher turns into
a structured error response. Heavy modules are imported on the first request that needs them.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from infill import options, patch
from infill.core import fill as core_fill
from infill.docstrings import run as docstrings_run
from infill.docstrings.config import find_pyproject
from infill.errors import InfillError, InputError, NoValidFillError
from infill.models import registry
from infill.progress import Cancelled as RequestCancelled  # noqa: F401 - the name infill.lsp catches
from infill.progress import cancel_check
from infill.server import params as server_params
from infill.server import protocol
from infill.server.context import ServerContext
from infill.server.protocol import ProtocolError


@contextlib.contextmanager
def working_directory(path: object) -> Iterator[None]:
    """Run a request in the client's directory (relative paths, --model ./folder, pyproject lookup), then go
    back. Requests run one at a time, so changing the process's directory is safe here."""
    if path is None:
        yield
        return
    if not isinstance(path, str):
        raise InputError('"cwd" must be a string')
    previous = os.getcwd()
    try:
        os.chdir(path)
    except OSError as exc:  # the client can do it in-process; this server cannot
        raise ProtocolError(protocol.INTERNAL_ERROR, f"cannot enter {path}: {exc.strerror}") from None
    try:
        yield
    finally:
        os.chdir(previous)


def models(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    """The models this server holds in memory, and the names registered in its process."""
    return {"loaded": context.models.loaded(), "registered": registry.registered()}


# ------------------------------------------------------------------------------------------------------------
# fill

_SELECTORS = {
    "span": "span",
    "spans": "span",
    "marker": "marker",
    "markers": "marker",
    "function": "function",
    "functions": "function",
    "class": "class",
    "classes": "class",
    "node": "node",
    "nodes": "node",
}
_OTHER = {"text", "path", "filename", "cwd"}
_typed = server_params.typed


def fill_request(params: dict[str, Any]) -> dict[str, Any]:
    """Flat `fill` params -> a FillRequest dict with --format json (so nothing is written anywhere).

    {"text": "...", "filename": "x.py", "span": ["3:4"], "marker": "<FILL>", "decoder": "assd", "k": 10,
     "temperature": 1.0, "top_k": 0, "top_p": 1.0, "seed": 0, "tokens": 16, "candidates": 1,
     "model": "default", "device": "auto", "precision": "bf16", ...every option of infill.options, named after
     its config field}; or "path" (with "cwd") instead of "text" to fill a file on disk, which is not written."""
    unknown = sorted(set(params) - set(_SELECTORS) - set(options.BY_NAME) - _OTHER)
    if unknown:
        raise InputError(f"unknown fill parameter(s): {', '.join(unknown)}")
    text, path = params.get("text"), params.get("path")
    if (text is None) == (path is None):
        raise InputError('give exactly one of "text" or "path"')
    selections = []
    for key, kind in _SELECTORS.items():
        values = params.get(key, [])
        for value in [values] if isinstance(values, str) else values if isinstance(values, list) else [None]:
            if not isinstance(value, str):
                raise InputError(f'"{key}" must be a string or a list of strings')
            selections.append({"kind": kind, "value": value})
    request: dict[str, Any] = {
        "file": "-" if text is not None else _typed("path", path, str),
        "selections": selections,
        "format": "json",
        **server_params.from_params(params),
    }
    if text is not None:
        request["stdin"] = _typed("text", text, str)
        if "filename" in params:
            request["stdin_filename"] = _typed("filename", params["filename"], str)
    if "cwd" in params:
        request["cwd"] = _typed("cwd", params["cwd"], str)
    return request


def _preload(context: ServerContext, model: dict[str, Any]) -> None:
    """Load the request's model through the server's cache (which notices changed weights on disk).
    Errors are left for the command itself to report, exactly as it would in-process."""
    from infill.config import ModelSpec

    try:
        context.models.get(ModelSpec(**model))
    except Exception:  # noqa: BLE001 - reported by run_fill with its own wording
        pass


def _watch(context: ServerContext) -> Callable[[dict[str, Any]], None]:
    return cancel_check(context.cancelled)


def fill(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    request = fill_request(params)
    _preload(context, request["model"])
    with _reported():
        return core_fill.fill_json(request, _watch(context))


def fill_command(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    model = params.get("model")
    with working_directory(params.get("cwd")):
        if isinstance(model, dict):
            _preload(context, model)
        out: dict[str, Any] = core_fill.run_fill(params, _watch(context))
    return out


@contextlib.contextmanager
def _reported() -> Iterator[None]:
    """An InfillError as the command reports it: its location is part of the message ("a.py: no such file"),
    as on the command's stderr line; the exit code, and a no-valid-fill's rejected edits, stay fields."""
    try:
        yield
    except NoValidFillError as exc:
        raise type(exc)(str(exc), failed=exc.failed, stats=exc.stats) from None
    except InfillError as exc:
        if exc.path is None and exc.line is None:
            raise
        raise type(exc)(str(exc)) from None


# ------------------------------------------------------------------------------------------------------------
# docstrings


_DOC_SETTINGS: dict[str, type] = {  # DocstringConfig fields a request may set (None = from pyproject.toml)
    "style": str,
    "model": str,
    "min_confidence": float,
    "min_probability": float,
    "seed": int,
    "line_length": int,
}
_DOC_SWITCHES = ("check", "update", "diff")


def docstrings(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    """{"path": file, "cwd"?} or {"text": source, "filename"?} plus flags -> the `--format json` report; with
    "text", the report also holds the new "text" (the source is filled in a private temporary copy)."""
    known = {"path", "text", "filename", "cwd", "ignore_regex", "config", *_DOC_SETTINGS, *_DOC_SWITCHES}
    unknown = sorted(set(params) - known)
    if unknown:
        raise InputError(f"unknown docstrings parameter(s): {', '.join(unknown)}")
    text, path = params.get("text"), params.get("path")
    if (text is None) == (path is None):
        raise InputError('give exactly one of "text" or "path"')
    overrides: dict[str, Any] = {k: _typed(k, params[k], kind) for k, kind in _DOC_SETTINGS.items() if k in params}
    patterns = params.get("ignore_regex", [])
    overrides["ignore_regex"] = tuple(_typed("ignore_regex", p, str) for p in _typed("ignore_regex", patterns, list))
    switches = {k: _typed(k, params.get(k, False), bool) for k in _DOC_SWITCHES}
    config = _typed("config", params["config"], str) if "config" in params else None
    cwd = _typed("cwd", params["cwd"], str) if "cwd" in params else None
    with tempfile.TemporaryDirectory(prefix="infill-doc-") as scratch, working_directory(cwd):
        if text is not None:
            filename = Path(_typed("filename", params.get("filename", "buffer.py"), str))
            if filename.name in ("", ".", ".."):
                raise InputError('"filename" must name a file')
            target = Path(scratch) / filename.name
            patch.atomic_write(str(target), _typed("text", text, str).encode("utf-8"))  # the one writer
            if config is None:  # the buffer's project settings, as if it were filled where it lives
                found = find_pyproject(filename if filename.is_absolute() else Path.cwd() / filename)
                config = None if found is None else str(found)
            paths = (str(target),)
        else:
            paths = (_typed("path", path, str),)
        request = docstrings_run.DocstringsRequest(
            paths, **switches, config_path=config, format="json", overrides=overrides
        )
        with _reported():
            outcome = docstrings_run.run_docstrings(request, docstrings_run.Output(), cancelled=context.cancelled)
            if outcome.exit_code not in (0, 1) or outcome.report is None:
                raise outcome.errors[-1] if outcome.errors else InputError("the docstrings run failed")
        report = outcome.report
        if text is not None:
            report["text"] = target.read_bytes().decode("utf-8")
            for entry in report.get("files", []):
                entry["path"] = str(params.get("filename", entry.get("path")))
    return report


def docstrings_command(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    """A DocstringsRequest dict (`infill docstrings --daemon`) -> {"exit_code", "stdout", "stderr"}: exactly
    what the command prints and exits with, run in the client's directory."""
    request = docstrings_run.DocstringsRequest.from_dict(params)
    output = docstrings_run.Output()
    with working_directory(request.cwd):
        try:
            code = docstrings_run.run_docstrings(request, output, cancelled=context.cancelled).exit_code
        except InfillError as exc:
            output(f"error: {exc}\n", True)
            code = exc.exit_code
    stdout, stderr = output.texts()
    return {"exit_code": code, "stdout": stdout, "stderr": stderr}


METHODS: dict[str, Callable[[dict[str, Any], ServerContext], dict[str, Any]]] = {
    "models": models,
    "fill": fill,
    "fill_command": fill_command,
    "docstrings": docstrings,
    "docstrings_command": docstrings_command,
}
