"""What the language server fills, and how: its settings, the span a completion fills at the cursor, and the
calls into the one fill core (infill.api.fill_text) and the docstring filler (infill.docstrings). No pygls here:
the server (infill.lsp.server) turns these results into LSP messages.

Completion at the cursor (inline completion and textDocument/completion alike):
- on a blank line (only whitespace), the whole line: the model writes the line, indentation included;
- after some text on the line, the rest of the line: a fill inserted at the cursor, up to the end of that line
  (the text after the cursor stays where it is and is part of the context the model sees);
- in the indentation of a line that has text after the cursor: nothing (there is no line to complete).
A fill whose calibrated confidence is below the threshold is not shown. A model without a calibration gives no
confidence (None), and then every fill is shown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from infill import languages
from infill.config import TOOL_DECODE, DecodeConfig, FillOptions, ModelSpec
from infill.errors import InputError, NoValidFillError
from infill.lsp.documents import Document
from infill.spans import DEFAULT_TOKENS, Span

if TYPE_CHECKING:
    from infill.docstrings.outcome import FileResult

Progress = Callable[[dict[str, Any]], None]
DEFAULT_THRESHOLD = 0.5
# LSP language identifiers that are not infill's language names
_LANGUAGE_IDS = {"typescriptreact": "tsx", "javascriptreact": "javascript", "python3": "python"}


# What a completion gives up against `infill fill`: when every fill beam search found breaks the syntax, no
# second search 4 times wider (seconds, for a line the user is typing); the completion is then simply not shown.
LSP_OPTIONS = FillOptions(rescue_width=1)


@dataclass(frozen=True)
class Settings:
    """The server's settings (initializationOptions, workspace/didChangeConfiguration): the fill's model,
    decoding and options, and the confidence threshold below which a completion is not shown."""

    model: ModelSpec = ModelSpec()
    decode: DecodeConfig = TOOL_DECODE
    options: FillOptions = LSP_OPTIONS
    threshold: float = DEFAULT_THRESHOLD

    @classmethod
    def parse(cls, given: object) -> Settings:
        """Settings from a client's JSON: {"model", "threshold", "tokens", "decoder", "fill": {any parameter of
        the server's fill method}}, flat or under an "infill" key. InputError names what is wrong."""
        from infill.config import check_decode
        from infill.options import BY_NAME
        from infill.server.params import from_params
        from infill.server.protocol import ProtocolError

        if given is None:
            return cls()
        if not isinstance(given, Mapping):
            raise InputError("settings must be an object")
        if isinstance(given.get("infill"), Mapping):
            given = given["infill"]
        assert isinstance(given, Mapping)
        unknown = sorted(set(given) - {"model", "threshold", "tokens", "decoder", "fill"})
        if unknown:
            raise InputError(f"unknown setting(s): {', '.join(map(str, unknown))}")
        extra = given.get("fill", {})
        if not isinstance(extra, Mapping):
            raise InputError('"fill" must be an object of fill parameters (see docs/server.md)')
        params = {**extra, **{k: given[k] for k in ("model", "tokens", "decoder") if k in given}}
        threshold = given.get("threshold", DEFAULT_THRESHOLD)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise InputError('"threshold" must be a number from 0 to 1')
        unknown = sorted(set(params) - set(BY_NAME))
        if unknown:
            raise InputError(f"unknown fill parameter(s): {', '.join(map(str, unknown))}")
        try:
            parts = from_params(params)
        except ProtocolError as exc:  # a value the server's fill method refuses (too many samples, inf)
            raise InputError(exc.message) from None
        decode = DecodeConfig(**parts["decode"])
        check_decode(decode)
        if "tokens" in parts["options"] and parts["options"]["tokens"] < 1:
            raise InputError('"tokens" must be at least 1')
        options = replace(LSP_OPTIONS, **parts["options"])
        return cls(ModelSpec(**parts["model"]), decode, options, float(threshold))


def language_of(document: Document) -> str | None:
    """infill's language for a document: from its file name, else from its LSP language identifier; None for
    text infill does not parse (filled as plain text, without a syntax check)."""
    found = languages.detect(document.uri.rsplit("/", 1)[-1])
    if found is not None:
        return found
    name = _LANGUAGE_IDS.get(document.language_id, document.language_id)
    return name if name in languages.LANGUAGES else None


@dataclass(frozen=True)
class Target:
    """What one completion fills: string offsets [start, end) of the text, and the byte span fill_text gets."""

    start: int
    end: int
    span: Span


def cursor_target(document: Document, offset: int) -> Target | None:
    """The span a completion at string offset `offset` fills (see the module docstring), or None."""
    text, lines = document.text, document.lines
    line, _ = lines.position(offset, "utf-32")
    start, end = lines.starts[line], lines.end_of(line)
    before, after = text[start:offset], text[offset:end]
    if not text.strip():
        return None  # nothing to fill around
    if not (before + after).strip():
        a, b = start, end
    elif not before.strip():
        return None
    else:
        a = b = offset
    span = Span(document.byte_offset(a), document.byte_offset(b), "cursor", DEFAULT_TOKENS["span"], one_line=True)
    return Target(a, b, span)


def selection_target(document: Document, start: int, end: int) -> Target:
    """The span of a selection (string offsets): filled whole, like `infill fill --span`."""
    span = Span(document.byte_offset(start), document.byte_offset(end), "selection", DEFAULT_TOKENS["span"])
    return Target(start, end, span)


@dataclass
class Filled:
    """A fill of one target: the new text of [start, end), and what the fill core said about it."""

    start: int
    end: int
    text: str
    confidence: float | None
    stats: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def fill(document: Document, target: Target, settings: Settings, on_progress: Progress | None = None) -> Filled | None:
    """Fill `target` with infill.api.fill_text; None when no fill passes the checks (NoValidFillError)."""
    from infill.api import fill_text

    try:
        result = fill_text(
            document.text,
            [target.span],
            language=language_of(document),
            model=settings.model,
            decode=settings.decode,
            options=settings.options,
            on_progress=on_progress,
        )
    except NoValidFillError:
        return None
    (edit,) = result.edits
    return Filled(target.start, target.end, edit.text, result.confidence, result.stats, result.warnings)


def shown(filled: Filled | None, document: Document, settings: Settings) -> Filled | None:
    """The fill as a completion: None when it writes nothing new or its confidence is below the threshold."""
    if filled is None or not filled.text.strip():
        return None
    if filled.text == document.text[filled.start : filled.end]:
        return None
    if filled.confidence is not None and filled.confidence < settings.threshold:
        return None
    return filled


def docstrings(
    document: Document,
    at: int | None,
    on_progress: Progress | None = None,
    check_only: bool = False,
    model: str | None = None,
) -> FileResult:
    """The missing docstrings of a document (with `at`, a byte offset: only of the function or class around it),
    with the settings of the pyproject.toml above its file (`model`, when given, instead of its model);
    `check_only` finds them without a model. InputError for a language the docstring filler does not handle or
    a file that does not parse."""
    from pathlib import Path

    from infill.core.checks import breaks_syntax
    from infill.docstrings.config import build_config, find_pyproject
    from infill.docstrings.engine import process_source
    from infill.docstrings.run import SUFFIXES, model_filler_for

    path = document_path(document)
    if not path.endswith(SUFFIXES):
        raise InputError(f"docstrings are written for {', '.join(SUFFIXES)} files only")
    overrides = {} if model is None else {"model": model}
    cfg = build_config(find_pyproject(Path(path)) if Path(path).is_absolute() else None, overrides)
    filler = None if check_only else model_filler_for(cfg, on_progress)
    result = process_source(document.text, path, cfg, filler, at=at)
    if result.changed and breaks_syntax(language_of(document), document.text.encode(), result.text.encode()):
        raise NoValidFillError("the new docstrings would break the file's syntax; nothing was changed")
    return result


def document_path(document: Document) -> str:
    """The file path of a file:// document; for other schemes, a name with the extension of its language."""
    from urllib.parse import unquote, urlparse

    parsed = urlparse(document.uri)
    if parsed.scheme == "file":
        return unquote(parsed.path)
    language = language_of(document)
    info = languages.LANGUAGES.get(language) if language else None
    return "buffer" + (info.extensions[0] if info is not None else "")
