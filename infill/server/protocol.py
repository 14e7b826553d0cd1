"""The wire protocol of `infill serve`: one JSON object per line, each way.

Request:  {"id": 7, "method": "fill", "params": {...}}    (id: string, integer or null; params: object)
Response: {"id": 7, ...the result object...}    (for fill: what `infill fill --format json` prints)
      or: {"id": 7, "error": {"code": "input_error", "message": "...", "exit_code": 2}}

Responses are ASCII-only JSON (non-ASCII characters are escaped), so any reader splitting on b"\\n" is safe.
This module is pure Python: no torch, no I/O.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from infill import errors
from infill.progress import Cancelled

PROTOCOL_VERSION = 2  # 2: the daemon runs docstrings from a request (docstrings_command), not from argv
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
# The per-user daemon serves one request at a time, so it refuses (too_large) work on inputs above this size (a
# fill's text or file, the files of a docstrings run); `infill fill` / `infill docstrings` then do that work in
# their own process and no other client waits for it. `infill serve --max-input-bytes` changes it.
DEFAULT_MAX_INPUT_BYTES = 1024 * 1024

# error codes (strings, stable; clients branch on them)
PARSE_ERROR = "parse_error"  # not UTF-8 or not JSON
INVALID_REQUEST = "invalid_request"  # JSON, but not a request object
UNKNOWN_METHOD = "unknown_method"
TOO_LARGE = "too_large"  # longer than --max-request-bytes, or input over --max-input-bytes
CANCELLED = "cancelled"  # stopped before its end: the socket server is shutting down (SIGTERM, SIGINT)
# infill's own errors carry their codes (infill.errors): the first of these classes an exception is names it
_ERROR_CLASSES: tuple[type[errors.InfillError], ...] = (
    errors.InputError,  # bad span, marker not found, ...
    errors.DecodeError,
    errors.ModelError,
    errors.FileChangedError,
    errors.LowConfidenceError,  # below "min_confidence" (exit 4)
    errors.NoValidFillError,  # every candidate breaks the syntax (exit 3)
    errors.InfillError,  # any other
)
INPUT_ERROR = errors.InputError.code
DECODE_ERROR = errors.DecodeError.code
MODEL_ERROR = errors.ModelError.code
FILE_CHANGED = errors.FileChangedError.code
NO_VALID_FILL = errors.NoValidFillError.code
LOW_CONFIDENCE = errors.LowConfidenceError.code
INFILL_ERROR = errors.InfillError.code
INTERNAL_ERROR = errors.INTERNAL_ERROR  # a bug: an unexpected exception in a handler
_CODE_CLASSES: dict[str, type[errors.InfillError]] = {cls.code: cls for cls in _ERROR_CLASSES}


class ProtocolError(Exception):
    """A request that cannot be served; becomes an error response (the server keeps running)."""

    def __init__(self, code: str, message: str, request_id: RequestId = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


RequestId = str | int | None


@dataclass(frozen=True)
class Request:
    id: RequestId
    method: str
    params: dict[str, Any]


def parse_request(line: bytes) -> Request:
    """One line (without or with its trailing newline) -> Request, or raise ProtocolError."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(PARSE_ERROR, f"request is not UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise ProtocolError(INVALID_REQUEST, "empty request line")
    try:
        obj = json.loads(text, parse_constant=_no_constant, parse_int=_bounded_int)
    except ProtocolError as exc:  # a number refused inside an otherwise usable request: answer it by its id
        exc.request_id = _id_of(text)
        raise
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise ProtocolError(PARSE_ERROR, f"request is not JSON: {detail}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(INVALID_REQUEST, "request must be a JSON object")
    request_id = obj.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int | type(None)):
        raise ProtocolError(INVALID_REQUEST, '"id" must be a string, an integer or null')
    if isinstance(request_id, str) and not _is_clean(request_id):
        raise ProtocolError(INVALID_REQUEST, '"id" must be valid Unicode')
    method = obj.get("method")
    if not isinstance(method, str) or not method:
        raise ProtocolError(INVALID_REQUEST, 'request needs a "method" string', request_id)
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ProtocolError(INVALID_REQUEST, '"params" must be an object', request_id)
    problem = _unusable(obj)
    if problem is not None:
        raise ProtocolError(INVALID_REQUEST, problem, request_id)
    return Request(request_id, method, params)


def _id_of(text: str) -> RequestId:
    """The id of a request whose numbers were refused, read again with those numbers left out (None where the id
    itself is one of them, or is not a valid id)."""

    def small(digits: str) -> int | None:
        return int(digits) if len(digits.lstrip("-")) <= 20 and abs(int(digits)) <= MAX_INTEGER else None

    try:
        obj = json.loads(text, parse_constant=lambda name: None, parse_int=small)
    except (ValueError, RecursionError):
        return None
    request_id = obj.get("id") if isinstance(obj, dict) else None
    if isinstance(request_id, bool) or not isinstance(request_id, str | int) or not _is_clean(str(request_id)):
        return None
    return request_id


def _no_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity are not JSON numbers (Python's json accepts them by default)."""
    raise ProtocolError(INVALID_REQUEST, f"{name} is not a valid JSON number")


MAX_INTEGER = 2**64  # no parameter needs more (a seed is at most 2**64 - 1); far larger ones cost seconds to parse
_UNUSABLE_CHARACTER = re.compile("[\x00\ud800-\udfff]")


def _bounded_int(digits: str) -> int:
    """An integer of the request, refused (invalid_request) beyond MAX_INTEGER before it is even converted."""
    if len(digits.lstrip("-")) > 20 or abs(int(digits)) > MAX_INTEGER:
        raise ProtocolError(INVALID_REQUEST, f"integers must be at most {MAX_INTEGER} in size")
    return int(digits)


def _unusable(obj: Any) -> str | None:
    """What JSON allows but the server cannot use, anywhere in a request (keys too): a NUL character (no text or
    path holds one) or a lone surrogate ("\\ud800", which UTF-8 cannot carry). None when there is none."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            found = _UNUSABLE_CHARACTER.search(item)
            if found is not None:
                return "NUL characters are not allowed" if found.group() == "\x00" else "strings must be valid Unicode"
    return None


def _is_clean(text: str) -> bool:
    """False for strings holding lone surrogates (JSON allows "\\ud800"; UTF-8 does not) or NUL characters."""
    return _UNUSABLE_CHARACTER.search(text) is None


def error_object(code: str, message: str, exit_code: int = errors.ExitCode.USAGE) -> dict[str, Any]:
    return {"code": code, "message": message, "exit_code": exit_code}


def error_code(exc: BaseException) -> str:
    """The error code of an exception: a ProtocolError's own, else infill.errors.error_code (an InfillError's
    class's code, or internal_error). `infill fill --format json` names its errors with the same codes."""
    if isinstance(exc, ProtocolError):
        return exc.code
    return errors.error_code(exc)


def error_from_exception(exc: BaseException) -> dict[str, Any]:
    """The "error" object for an exception raised by a handler."""
    if isinstance(exc, ProtocolError):
        return error_object(exc.code, exc.message, errors.ExitCode.USAGE)
    if isinstance(exc, errors.InfillError):
        obj = error_object(error_code(exc), exc.message, exc.exit_code)
        for key in ("path", "line", "column"):
            value = getattr(exc, key)
            if value is not None:
                obj[key] = value
        if isinstance(exc, errors.NoValidFillError):
            obj["failed"] = exc.failed  # the rejected edits, so an editor can show them or apply them anyway
        return obj
    if isinstance(exc, Cancelled):
        return error_object(CANCELLED, str(exc), errors.ExitCode.INTERNAL)
    return error_object(INTERNAL_ERROR, f"{type(exc).__name__}: {exc}".splitlines()[0][:500], errors.ExitCode.INTERNAL)


def exception_from_error(error: dict[str, Any]) -> errors.InfillError | None:
    """Rebuild the InfillError a handler raised, so a client behaves exactly as in-process; None for other
    codes (protocol and internal errors, which the client answers by falling back to in-process work)."""
    cls = _CODE_CLASSES.get(str(error.get("code")))
    message = error.get("message")
    if cls is None or not isinstance(message, str):
        return None
    path, line, column = error.get("path"), error.get("line"), error.get("column")
    if issubclass(cls, errors.NoValidFillError):
        failed = error.get("failed")
        return cls(
            message,
            path=path if isinstance(path, str) else None,
            failed=[f for f in failed if isinstance(f, dict)] if isinstance(failed, list) else [],
        )
    return cls(
        message,
        path=path if isinstance(path, str) else None,
        line=line if isinstance(line, int) else None,
        column=column if isinstance(column, int) else None,
    )


def encode(obj: dict[str, Any]) -> bytes:
    """One response line. TypeError/ValueError for objects JSON cannot hold (the caller reports them)."""
    return json.dumps(obj, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii") + b"\n"


def response(request_id: RequestId, result: dict[str, Any]) -> dict[str, Any]:
    """{"id": ..., **result}: the result's own keys stay at the top level, as `--format json` prints them."""
    if "id" in result or "error" in result:
        raise ValueError('a result object may not use the keys "id" or "error"')
    return {"id": request_id, **result}


def error_response(request_id: RequestId, error: dict[str, Any]) -> dict[str, Any]:
    return {"id": request_id, "error": error}
