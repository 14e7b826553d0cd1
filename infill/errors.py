"""Small exceptions that carry a location. The CLI converts them to exit codes; nothing else does.

Exit codes (documented in `infill fill --help` and the README):
  0 ok, 1 changes needed (--check, or --diff with a change), 2 usage / input error, 3 no valid fill (every
  candidate would break the file's syntax; nothing was written), 4 low confidence (the best fill's calibrated
  confidence is below --min-confidence; nothing was written), 123 internal or model error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def one_line(text: str) -> str:
    """The first non-blank line of `text`: an exception's message may span lines (a torch or JSON error quotes
    its input), and every `infill` error is one stderr line."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


@dataclass
class InfillError(Exception):
    """Base class. `message` is one line meant for a human; location fields are optional."""

    message: str
    path: str | None = None
    line: int | None = None  # 1-based
    column: int | None = None  # 1-based, in characters

    exit_code = 123

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
        return f"{where}{self.message}"


class InputError(InfillError):
    """The user's input is unusable: bad file, bad span, marker not found, bad flag combination."""

    exit_code = 2


class ModelError(InfillError):
    """A model folder is missing or corrupt, or a backend failed."""

    exit_code = 123


class DecodeError(InfillError):
    """A decoding problem is malformed (k < 2, no visible token, too long for the model)."""

    exit_code = 2


class FileChangedError(InfillError):
    """The file changed on disk between reading it and writing the result; nothing was written."""

    exit_code = 123


@dataclass
class NoValidFillError(InfillError):
    """Every candidate fill was rejected (it adds syntax errors or splits a UTF-8 character), so nothing is
    written. `failed` describes the rejected edits of the most likely candidate (label, lines, bytes, text,
    score, reason); `stats` are the decoding statistics of the attempt."""

    failed: list[dict[str, Any]] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    exit_code = 3
    code = "no_valid_fill"  # how --format json and the server name it


class LowConfidenceError(NoValidFillError):
    """The best fill passed every check, but its calibrated confidence is below what the caller asked for
    (--min-confidence), so nothing is written. `failed` holds that fill, with its confidence as the reason."""

    exit_code = 4
    code = "low_confidence"
