"""The server's work methods: thin adapters onto the very functions the CLI commands run in-process.

Public methods (editors, scripts):
  fill        flat params named after `infill fill`'s flags -> what `infill fill --format json` prints
  docstrings  {"path"|"text", flags...} -> what `infill docstrings --format json` prints (+ "text")
  models      the models this server holds

Internal methods (the `--daemon` path of the commands; their results are printed by the client verbatim):
  fill_command  a FillRequest dict -> run_fill()'s {"exit_code", "stdout", "stderr", "result"}
  command       {"name", "argv", "cwd"} -> {"exit_code", "stdout", "stderr"} of `infill NAME ARGV...`

Heavy modules are imported inside the handlers, on the first request that needs them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from infill import options
from infill.errors import InputError
from infill.models import registry
from infill.server import protocol
from infill.server.dispatch import ServerContext
from infill.server.protocol import ProtocolError

# the CLI's pure request -> output function ("module:attribute"); tests point these at fakes
FILL_FUNCTION = "infill.commands.fill:run_fill"
COMMANDS = {"fill": "infill.commands.fill:fill", "docstrings": "infill.commands.docstrings:docstrings"}


def _resolve(target: str, method: str) -> Any:
    module_name, _, attr = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError):
        raise ProtocolError(protocol.UNKNOWN_METHOD, f"method {method!r} is not available in this build") from None


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
_typed = options.typed


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
        **options.from_params(params),
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


class RequestCancelled(Exception):
    """The client went away; raised from the progress callback so the command stops before writing."""


def _watch(context: ServerContext) -> Callable[[dict[str, Any]], None]:
    def on_progress(info: dict[str, Any]) -> None:
        if context.cancelled():
            raise RequestCancelled("the client went away")

    return on_progress


def fill(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    request = fill_request(params)
    run_fill = _resolve(FILL_FUNCTION, "fill")
    _preload(context, request["model"])
    out = run_fill(request, _watch(context))
    if out.get("exit_code") == 0 and isinstance(out.get("result"), dict):
        result: dict[str, Any] = out["result"]
        return result
    raise _error(out)


def fill_command(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    run_fill = _resolve(FILL_FUNCTION, "fill_command")
    model = params.get("model")
    with working_directory(params.get("cwd")):
        if isinstance(model, dict):
            _preload(context, model)
        out: dict[str, Any] = run_fill(params, _watch(context))
    return out


def _error(out: dict[str, Any]) -> Exception:
    """A failed command's output -> the error it reported (its last "error: ..." line)."""
    lines = [line for line in out.get("stderr", []) if isinstance(line, str)]
    messages = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    message = messages[-1] if messages else (lines[-1] if lines else "the command failed")
    code = out.get("exit_code")
    if code == 2:
        return InputError(message)
    if code == 3:
        from infill.errors import NoValidFillError

        result = out.get("result")
        failed = result.get("failed") if isinstance(result, dict) else None
        return NoValidFillError(message, failed=failed if isinstance(failed, list) else [])
    from infill.errors import ModelError

    if code == 123 and not message.startswith("internal error"):
        return ModelError(message)
    return ProtocolError(protocol.INTERNAL_ERROR, message)


# ------------------------------------------------------------------------------------------------------------
# whole commands (docstrings, and any command the client forwards)


def run_command(name: str, argv: list[str], cwd: str | None) -> dict[str, Any]:
    """Run `infill NAME ARGV...` in this process with captured output -> {"exit_code", "stdout", "stderr"}.

    stdout/stderr are the exact bytes, as str with surrogateescape (JSON carries the escapes)."""
    from click.testing import CliRunner

    target = COMMANDS.get(name)
    if target is None:
        raise ProtocolError(protocol.UNKNOWN_METHOD, f"command {name!r} cannot run in the server")
    if not (isinstance(argv, list) and all(isinstance(a, str) for a in argv)):
        raise InputError('"argv" must be a list of strings')
    command = _resolve(target, name)
    with working_directory(cwd):
        result = CliRunner().invoke(command, argv, catch_exceptions=True, env={"INFILL_NO_DAEMON": "1"})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise ProtocolError(protocol.INTERNAL_ERROR, f"{type(result.exception).__name__}: {result.exception}")
    return {
        "exit_code": result.exit_code,
        "stdout": result.stdout_bytes.decode("utf-8", "surrogateescape"),
        "stderr": (result.stderr_bytes or b"").decode("utf-8", "surrogateescape"),
    }


def command(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    name = params.get("name")
    if not isinstance(name, str):
        raise InputError('"name" must be a string')
    cwd = params.get("cwd")
    return run_command(name, params.get("argv", []), cwd if isinstance(cwd, str) else None)


_DOC_FLAGS: dict[str, tuple[str, type]] = {
    "style": ("--style", str),
    "model": ("--model", str),
    "min_confidence": ("--min-confidence", float),
    "seed": ("--seed", int),
    "line_length": ("--line-length", int),
    "config": ("--config", str),
}
_DOC_SWITCHES = {"check": "--check", "update": "--update", "diff": "--diff"}


def docstrings(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    """{"path": file, "cwd"?} or {"text": source, "filename"?} plus flags -> the `--format json` report; with
    "text", the report also holds the new "text" (the source is filled in a private temporary copy)."""
    import json

    known = {"path", "text", "filename", "cwd", "ignore_regex", *_DOC_FLAGS, *_DOC_SWITCHES}
    unknown = sorted(set(params) - known)
    if unknown:
        raise InputError(f"unknown docstrings parameter(s): {', '.join(unknown)}")
    text, path = params.get("text"), params.get("path")
    if (text is None) == (path is None):
        raise InputError('give exactly one of "text" or "path"')
    argv = ["--format", "json"]
    for key, (flag, kind) in _DOC_FLAGS.items():
        if key in params:
            argv += [flag, str(_typed(key, params[key], kind))]
    for key, flag in _DOC_SWITCHES.items():
        if _typed(key, params.get(key, False), bool):
            argv.append(flag)
    for pattern in params.get("ignore_regex", []):
        argv += ["--ignore-regex", _typed("ignore_regex", pattern, str)]
    cwd = _typed("cwd", params["cwd"], str) if "cwd" in params else None
    with tempfile.TemporaryDirectory(prefix="infill-doc-") as scratch:
        if text is not None:
            filename = Path(_typed("filename", params.get("filename", "buffer.py"), str))
            target = Path(scratch) / filename.name
            target.write_text(_typed("text", text, str), encoding="utf-8", newline="")
            if "config" not in params:
                found = _pyproject_above(filename if filename.is_absolute() else Path(cwd or ".") / filename)
                if found is not None:
                    argv += ["--config", str(found)]
            argv.append(str(target))
        else:
            argv.append(_typed("path", path, str))
        out = run_command("docstrings", argv, cwd)
        if out["exit_code"] not in (0, 1) or not out["stdout"].strip():
            stderr = out["stderr"].splitlines()
            raise _error({"exit_code": out["exit_code"], "stderr": stderr})
        report: dict[str, Any] = json.loads(out["stdout"])
        if text is not None:
            report["text"] = target.read_bytes().decode("utf-8")
            for entry in report.get("files", []):
                entry["path"] = str(params.get("filename", entry.get("path")))
    return report


def _pyproject_above(file: Path) -> Path | None:
    for folder in file.resolve().parents:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


METHODS: dict[str, Callable[[dict[str, Any], ServerContext], dict[str, Any]]] = {
    "models": models,
    "fill": fill,
    "fill_command": fill_command,
    "docstrings": docstrings,
    "command": command,
}
