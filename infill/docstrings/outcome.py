"""What a docstrings run did: to each definition (Outcome) and to each file (FileResult)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from infill.patch import Replacement

Status = Literal["missing", "filled", "low-confidence", "left-missing", "updated"]


@dataclass
class Outcome:
    """What happened to one definition."""

    name: str  # qualified name, e.g. "Stack.push"
    kind: str
    line: int  # 1-based line of the definition in the ORIGINAL file
    status: Status
    confidence: float | None = None  # mean token log-probability of the model's text (None: no model text)
    fallbacks: list[str] = field(default_factory=list)  # slots that got names-only text instead of the model's
    docstring: str | None = None  # the docstring written (filled / updated)
    warnings: list[str] = field(default_factory=list)  # from the model call, e.g. a budget capped to the context
    probability: float | None = None  # calibrated probability that the model's summary is right (None: unknown)
    refused: dict[str, str] = field(default_factory=dict)  # slot -> why the monitor refused the model's text


@dataclass
class FileResult:
    path: str
    original: str
    text: str  # the new text (== original when nothing changed)
    outcomes: list[Outcome]
    style: str
    edits: list[Replacement] = field(default_factory=list)  # what turns original into text (byte offsets of it)

    @property
    def changed(self) -> bool:
        return self.text != self.original
