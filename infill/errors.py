"""Small exceptions that carry a location, the exit codes, and the error codes that name the exceptions on the
wire (`--format json`, the server). The CLI converts them to exit codes; nothing else does.

Exit codes (documented in `infill fill --help`, the README and docs/reliability.md), defined here once (ExitCode):
  0 ok, 1 changes needed (--check, or --diff with a change), 2 usage / input error, 3 no valid fill (every
  candidate would break the file's syntax; nothing was written), 4 low confidence (the best fill's calibrated
  confidence is below --min-confidence; nothing was written), 123 internal or model error (a model server that
  is down, too slow or answers malformed JSON included: RemoteError), and what a shell
  reports for a tool stopped by a signal (128 + the signal): 130 Ctrl-C (SIGINT), 141 stdout closed early
  (SIGPIPE), 143 SIGTERM.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any


class ExitCode(IntEnum):
    """Every exit code the tool documents, once."""

    OK = 0
    CHANGES = 1  # --check would change the file, --diff printed a diff
    USAGE = 2  # usage or input error
    NO_VALID_FILL = 3  # every candidate breaks the syntax; nothing was written
    LOW_CONFIDENCE = 4  # the best fill's calibrated confidence is below --min-confidence; nothing was written
    INTERNAL = 123  # model or internal error (a model server down or answering garbage), or the file changed on disk
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
    BROKEN_PIPE = 141  # stdout's reader went away (128 + SIGPIPE), e.g. `infill ... | head -1`
    TERMINATED = 143  # SIGTERM (128 + 15)


# every line boundary str.splitlines knows, written as its escape: a name, marker or path a user gave (which may
# hold a line break) never splits the one line an error is
_LINE_BREAKS = str.maketrans({c: repr(c)[1:-1] for c in "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"})


def printable(text: str) -> str:
    """`text` on one line: its line breaks written as escapes (a newline as the two characters \\n)."""
    return text.translate(_LINE_BREAKS)


def one_line(text: str) -> str:
    """The first non-blank line of `text`: an exception's message may span lines (a torch or JSON error quotes
    its input), and every `infill` error is one stderr line."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


@dataclass
class InfillError(Exception):
    """Base class. `message` is one line meant for a human (str() escapes any line break a user's value brought
    into it or into the path: printable); location fields are optional."""

    message: str
    path: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based, in characters

    exit_code = ExitCode.INTERNAL
    code = "infill_error"  # how --format json and the server name it

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path
            if self.line is not None:
                where += f":{self.line}"
                if self.column is not None:
                    where += f":{self.column}"
            where += ": "
        return printable(f"{where}{self.message}")


class InputError(InfillError):
    """The user's input is unusable: bad file, bad span, marker not found, bad flag combination; or a file
    cannot be written (read-only, not a regular file, a full disk), which leaves it untouched."""

    exit_code = ExitCode.USAGE
    code = "input_error"


class ModelError(InfillError):
    """A model folder is missing or corrupt, or a backend failed."""

    exit_code = ExitCode.INTERNAL
    code = "model_error"


class RemoteError(ModelError):
    """A model server (--model URL) is down, too slow, refuses the request or answers malformed JSON; nothing is
    written. Its message never holds the API key."""

    code = "remote_error"


@dataclass
class ContextExceeded(RemoteError):
    """A model server refused a prompt longer than its model's context. `context`: the tokens the server said that
    context holds (None where it did not say); `adopted`: the model now plans for that context (it had assumed a
    longer one), so the fill may be planned again (infill.core.pipeline.fill_text does, once)."""

    context: int | None = None
    adopted: bool = False


class DecodeError(InfillError):
    """A decoding problem is malformed (k < 2, no visible token, too long for the model)."""

    exit_code = ExitCode.USAGE
    code = "decode_error"


class FileChangedError(InfillError):
    """The file changed on disk between reading it and writing the result; nothing was written."""

    exit_code = ExitCode.INTERNAL
    code = "file_changed"


@dataclass
class NoValidFillError(InfillError):
    """Every candidate fill was rejected (it adds syntax errors or splits a UTF-8 character), so nothing is
    written. `failed` describes the rejected edits of the most likely candidate (label, lines, bytes, text,
    score, reason); `stats` are the decoding statistics of the attempt."""

    failed: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    exit_code = ExitCode.NO_VALID_FILL
    code = "no_valid_fill"


class LowConfidenceError(NoValidFillError):
    """The best fill passed every check, but its calibrated confidence is below what the caller asked for
    (--min-confidence), so nothing is written. `failed` holds that fill, with its confidence as the reason."""

    exit_code = ExitCode.LOW_CONFIDENCE
    code = "low_confidence"


class Terminated(BaseException):
    """SIGTERM arrived (the CLI's handler raises it, as Python raises KeyboardInterrupt for SIGINT), so that
    cleanup runs: a temporary file is removed, the editor filter echoes its input. Not an Exception: no
    `except Exception` may swallow it."""


def signal_report(exc: BaseException) -> tuple[str, int]:
    """The one quiet stderr line and the exit code of a command stopped by Ctrl-C (KeyboardInterrupt) or SIGTERM
    (Terminated): 130 and 143, what a shell reports for a tool those signals stop (not Click's "Aborted!", 1)."""
    if isinstance(exc, Terminated):
        return "infill: terminated", ExitCode.TERMINATED
    return "infill: interrupted", ExitCode.INTERRUPTED


INTERNAL_ERROR = "internal_error"  # the code of an exception that is no InfillError: a bug


def error_code(exc: BaseException) -> str:
    """How `--format json` and the server name an exception: an InfillError's own code (its class's `code`),
    else INTERNAL_ERROR."""
    return exc.code if isinstance(exc, InfillError) else INTERNAL_ERROR


def a_kind(kind: type) -> str:
    """How a message names what a request's value must be: "an integer", "true or false", "a string"..."""
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string", list: "a list"}
    return names.get(kind, f"a {kind.__name__}")
