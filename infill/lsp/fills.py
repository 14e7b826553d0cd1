"""What the language server fills, and how: its settings, the span a completion fills at the cursor, and the
calls into the one fill core (infill.api.fill_text) and the docstring filler (infill.docstrings). No pygls here:
the server (infill.lsp.server) turns these results into LSP messages.

Completion at the cursor (inline completion and textDocument/completion alike):
- on a blank line (only whitespace) after a block opener (a line ending in ":" or "{") whose body is empty (the
  next line with text is not deeper than the opener), a block: up to `lines` lines (a setting), ending where the
  model dedents to the opener's level; the whole block passes the syntax check as one fill;
- on another blank line, the whole line: the model writes the line, indentation included;
- after some text on the line, the rest of the line: a fill inserted at the cursor, up to the end of that line
  (the text after the cursor stays where it is and is part of the context the model sees); a cursor inside a
  word or after a partial token is token-healed (infill.core.plan.heal_text);
- in the indentation of a line that has text after the cursor: nothing (there is no line to complete).
A fill whose calibrated confidence is below the threshold is not shown. A model without a calibration gives no
confidence (None), and then every fill is shown; so does a model server that returns no log-probabilities (the
server says so once: UNSCORED).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from infill import languages
from infill.config import TOOL_DECODE, DecodeConfig, FillOptions, ModelSpec
from infill.errors import InputError, NoValidFillError
from infill.lsp.documents import Document
from infill.spans import DEFAULT_TOKENS, Span, whole_lines
from infill.textops import indent_of

if TYPE_CHECKING:
    from infill.docstrings.outcome import FileResult

Progress = Callable[[dict[str, Any]], None]
DEFAULT_THRESHOLD = 0.35  # chosen by benchmarks/typing.py (docs/editors.md, "Typing benchmark")
DEFAULT_LINES = 6  # lines of a multi-line suggestion at most
# int8 weights where the model has them (the AS-ARM on the CPU): the same suggestions on the typing benchmark,
# 15-20% sooner (docs/editors.md); `"fill": {"engine": "auto"}` runs the exact fp32 graph
EDITOR_MODEL = ModelSpec(engine="auto-int8")
MAX_LINES = 50
MAX_TOKENS = 4096  # tokens per suggestion at most (a setting above it is refused when it arrives)
TOKENS_PER_LINE = 16  # a block's token budget per line
KEYS = ("model", "threshold", "tokens", "decoder", "fill", "lines", "context", "prefetch")
# LSP language identifiers that are not infill's language names
_LANGUAGE_IDS = {"typescriptreact": "tsx", "javascriptreact": "javascript", "python3": "python"}


# What a completion gives up against `infill fill`: when every fill beam search found breaks the syntax, no
# second search 4 times wider (seconds, for a line the user is typing); the completion is then simply not shown.
# And the text after the cursor a left-to-right model reads: at most SUFFIX_TOKENS tokens, to the end of a line
# (infill.core.plan.cap_suffix). Its prompt puts that text after the prefix, so it reads it again at every change
# before the cursor: about 1,000 tokens in an ordinary file, seconds per word boundary with a 0.5B model on a CPU
# (docs/editors.md, "While you type"). llama.vim sends 64 lines after the cursor, and the llama.cpp server it
# talks to keeps at most a quarter of its batch of them (256 tokens with the batch of 1,024 that llama.vim's
# setup recommends), the bound that holds for any line length; `"fill": {"max_suffix": 0}` reads all that fits
# the window, as `infill fill` does.
SUFFIX_TOKENS = 256
LSP_OPTIONS = FillOptions(rescue_width=1, max_suffix=SUFFIX_TOKENS)


@dataclass(frozen=True)
class Settings:
    """The server's settings (initializationOptions, workspace/didChangeConfiguration): the fill's model,
    decoding and options, and the confidence threshold below which a completion is not shown."""

    model: ModelSpec = EDITOR_MODEL
    decode: DecodeConfig = TOOL_DECODE
    options: FillOptions = LSP_OPTIONS
    threshold: float = DEFAULT_THRESHOLD
    lines: int = DEFAULT_LINES  # a multi-line suggestion's lines at most (1: one line everywhere)
    context: bool = True  # lines of the other open and recently changed documents join retrieval's candidates
    prefetch: bool = True  # a change typed starts the completion at the cursor it leaves, before it is asked for

    @classmethod
    def parse(cls, given: object) -> Settings:
        """Settings from a client's JSON: {"model", "threshold", "tokens", "decoder", "lines", "context",
        "prefetch", "fill": {any parameter of the server's fill method}}, flat or under an "infill" key, all of
        them (`merge` takes some keys at a time). InputError names what is wrong."""
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
        unknown = sorted(set(given) - set(KEYS))
        if unknown:
            raise InputError(f"unknown setting(s): {', '.join(map(str, unknown))}")
        extra = given.get("fill", {})
        if not isinstance(extra, Mapping):
            raise InputError('"fill" must be an object of fill parameters (see docs/server.md)')
        params = {**extra, **{k: given[k] for k in ("model", "tokens", "decoder") if k in given}}
        threshold = given.get("threshold", DEFAULT_THRESHOLD)
        if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
            raise InputError('"threshold" must be a number from 0 to 1')
        lines = given.get("lines", DEFAULT_LINES)
        if isinstance(lines, bool) or not isinstance(lines, int) or not 1 <= lines <= MAX_LINES:
            raise InputError(f'"lines" must be a whole number from 1 to {MAX_LINES}')
        context, prefetch = given.get("context", True), given.get("prefetch", True)
        for name, flag in (("context", context), ("prefetch", prefetch)):
            if not isinstance(flag, bool):
                raise InputError(f'"{name}" must be true or false')
        unknown = sorted(set(params) - set(BY_NAME))
        if unknown:
            raise InputError(f"unknown fill parameter(s): {', '.join(map(str, unknown))}")
        try:
            parts = from_params(params)
        except ProtocolError as exc:  # a value the server's fill method refuses (too many samples, inf)
            raise InputError(exc.message) from None
        decode = DecodeConfig(**parts["decode"])
        check_decode(decode)
        if "tokens" in parts["options"] and not 1 <= parts["options"]["tokens"] <= MAX_TOKENS:
            # refused here, once, rather than failing every completion after it (no model's window is larger)
            raise InputError(f'"tokens" must be a whole number from 1 to {MAX_TOKENS}')
        options = replace(LSP_OPTIONS, **parts["options"])
        model = replace(EDITOR_MODEL, **parts["model"])
        return cls(model, decode, options, float(threshold), lines, context, prefetch)


def merge(current: Mapping[str, Any], given: object) -> tuple[dict[str, Any], list[str]]:
    """The settings in force (`current`, as a client sends them) with the keys `given` sends, flat or under an
    "infill" key: a key sent replaces that key only (null sets it back to its default; keys of "fill" merge the
    same way), and a key or value that Settings.parse refuses is left as it was and named in the list of
    problems returned (the caller logs them and shows them once)."""
    if given is None:
        return dict(current), []
    if not isinstance(given, Mapping):
        return dict(current), ["settings must be an object; nothing changed"]
    sent: Mapping[str, Any] = given["infill"] if isinstance(given.get("infill"), Mapping) else given
    merged, problems = dict(current), []
    for key, value in sent.items():
        if key not in KEYS:
            problems.append(f"unknown setting {key!r} (ignored)")
            continue
        changes: list[tuple[str | tuple[str, str], object]] = [(key, value)]
        if key == "fill" and isinstance(value, Mapping):
            changes = [(("fill", k), v) for k, v in value.items()]
        for name, new in changes:
            trial = _with(merged, name, new)
            try:
                Settings.parse(trial)
            except InputError as exc:
                label = ".".join(map(str, name)) if isinstance(name, tuple) else str(name)
                problems.append(f"{label}: {exc} (ignored)")
                continue
            merged = trial
    return merged, problems


def _with(settings: Mapping[str, Any], name: str | tuple[str, str], value: object) -> dict[str, Any]:
    """`settings` with one key (or, for ("fill", key), one key of "fill") set to `value`; None removes it."""
    out = dict(settings)
    target = out
    if isinstance(name, tuple):
        target = out["fill"] = dict(out["fill"]) if isinstance(out.get("fill"), Mapping) else {}
    key = name[1] if isinstance(name, tuple) else name
    if value is None:
        target.pop(key, None)
    else:
        target[key] = value
    return out


def language_of(document: Document) -> str | None:
    """infill's language for a document: from its file name, else from its LSP language identifier; None for
    text infill does not parse (filled as plain text, without a syntax check). A `.h` file the editor calls C++
    is C++."""
    found = languages.detect(document.uri.rsplit("/", 1)[-1])
    if found == "c" and document.language_id == "cpp":
        return "cpp"
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


def cursor_target(document: Document, offset: int, lines: int = 1) -> Target | None:
    """The span a completion at string offset `offset` fills (see the module docstring), or None; `lines` is the
    most lines a block may have."""
    text, index = document.text, document.lines
    line, _ = index.position(offset, "utf-32")
    start, end = index.starts[line], index.end_of(line)
    before, after = text[start:offset], text[offset:end]
    if not text.strip():
        return None  # nothing to fill around
    block = 0
    if not (before + after).strip():
        a, b = start, end
        if lines > 1 and empty_body(text, start, end):
            block = lines
    elif not before.strip():
        return None
    else:
        a = b = offset
    budget = TOKENS_PER_LINE * block if block else DEFAULT_TOKENS["span"]
    span = Span(document.byte_offset(a), document.byte_offset(b), "cursor", budget, one_line=not block)
    return Target(a, b, replace(span, block_lines=block))


_OPENERS = (":", "{")


def empty_body(text: str, start: int, end: int) -> bool:
    """Whether the blank line text[start:end] follows a block opener (a line ending in ":" or "{", a comment
    after it aside) whose body has no line yet: the next line with text is not deeper than the opener."""
    above = _line_with_text(text, start, -1)
    if above is None:
        return False
    code = above.split("#", 1)[0] if "#" in above else above
    if not code.rstrip().endswith(_OPENERS):
        return False
    below = _line_with_text(text, end, 1)
    return below is None or len(indent_of(below)) <= len(indent_of(above))


def _line_with_text(text: str, at: int, step: int) -> str | None:
    """The nearest line with text before the line starting at `at` (step -1) or after the line ending at `at`
    (step 1), found without splitting the whole text."""
    while True:
        if step < 0:
            if at <= 0:
                return None
            begin = text.rfind("\n", 0, at - 1) + 1
            line, at = text[begin : at - 1], begin
        else:
            if at >= len(text):
                return None
            stop = text.find("\n", at + 1)
            stop = len(text) if stop < 0 else stop
            line, at = text[at + 1 : stop], stop
        if line.strip():
            return line


def selection_target(document: Document, start: int, end: int) -> Target:
    """The span of a selection (string offsets): filled whole, like `infill fill --span`; a selection of whole
    lines (to the start of the next) keeps its last line break, as there (infill.spans.whole_lines)."""
    a, b = document.byte_offset(start), document.byte_offset(end)
    lines = whole_lines(document.text.encode("utf-8"), a, b, "selection")
    if lines is not None:  # the line break left out is one character per byte
        return Target(start, end - (b - lines.end_byte), lines)
    return Target(start, end, Span(a, b, "selection", DEFAULT_TOKENS["span"]))


def prompt_key(document: Document, target: Target, settings: Settings) -> tuple[Any, ...] | None:
    """What a completion's model prompt is made of: the text before the cursor less what token healing moves
    into the fill (infill.core.plan.heal_text), the room the healed text takes, the text after the span, and
    the settings. Two completions with the same key give the model the same prompt, so the second reuses the
    prompt pass of the first (infill.models.xlnet_cache): typing on inside a word keeps it. None when the model
    is not loaded yet (its tokenizer says where healing cuts)."""
    from infill.core import cache
    from infill.core.kinds import kind_of
    from infill.core.plan import heal_room, heal_text

    loaded = cache.SHARED.held(settings.model)
    if loaded is None:
        return None
    text = document.text
    # nothing after the cursor: the planner may keep the word before it in the prompt (heal_text's `alone`, for a
    # model without <bos>), so the key keeps it too; a model that is not healed (a server that refused to be told
    # what a fill begins with) keeps the whole word too: two different prompts never share a key
    alone = not text[target.end :]
    heals = target.start == target.end and kind_of(loaded).backend.window(loaded).heals
    heal = heal_text(text[: target.start], loaded.tokenizer, alone=alone) if heals else ""
    start = target.start - len(heal)
    return (text[:start], heal_room(heal), text[target.end :], target.span.block_lines, settings)


@dataclass
class Filled:
    """A fill of one target: the new text of [start, end), and what the fill core said about it."""

    start: int
    end: int
    text: str
    confidence: float | None
    stats: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def fill(
    document: Document,
    target: Target,
    settings: Settings,
    on_progress: Progress | None = None,
    context: tuple[str, ...] = (),
) -> Filled | None:
    """Fill `target` with infill.api.fill_text, with `context` (texts of other documents) beside the user's
    --context; None when no fill passes the checks (NoValidFillError)."""
    from infill.api import fill_text

    options = settings.options
    if context:
        options = replace(options, context=options.context + context)
    try:
        result = fill_text(
            document.text,
            [target.span],
            language=language_of(document),
            model=settings.model,
            decode=settings.decode,
            options=options,
            on_progress=on_progress,
        )
    except NoValidFillError:
        return None
    (edit,) = result.edits
    confidence = editor_confidence(settings, result.stats, request_features(document, target))
    if confidence is None:
        confidence = result.confidence
    return Filled(target.start, target.end, edit.text, confidence, result.stats, result.warnings)


EDITOR_CALIBRATION = "editor_calibration.json"  # beside a model's weights: the confidence of editor requests
# what an editor request adds to a fill's features (infill.api.fill_features): where the cursor is
REQUEST_FEATURES = ("in_line", "typed", "rest", "healed")


def request_features(document: Document, target: Target) -> dict[str, float]:
    """Where a completion was asked for: after text on its line (`in_line`), how many characters of the line
    were typed before the cursor and stand after it (`typed`, `rest`, without the indentation)."""
    start = document.text.rfind("\n", 0, target.start) + 1
    stop = document.text.find("\n", target.end)
    before = document.text[start : target.start].strip()
    after = document.text[target.end : len(document.text) if stop < 0 else stop].strip()
    return {"in_line": float(bool(before)), "typed": float(len(before)), "rest": float(len(after))}


def editor_confidence(settings: Settings, stats: Mapping[str, Any], request: Mapping[str, float]) -> float | None:
    """The calibrated probability that a completion is right, from the model's editor calibration
    (EDITOR_CALIBRATION, fitted on editor-like requests of held-out files: benchmarks/editor_calibration.py) for
    the decoder in use, or None (the fill's own confidence is then the answer)."""
    from infill.api import load_model
    from infill.config import decode_label
    from infill.core.calibration import calibration_of

    features = stats.get("features")
    if not isinstance(features, Mapping) or stats.get("scored") is False:  # no log-probabilities: no confidence
        return None
    loaded = load_model(settings.model)  # cached: the model that just filled
    calibrator = calibration_of(loaded.info.get("path"), EDITOR_CALIBRATION)
    if calibrator is None or calibrator.meta.get("decoder") != decode_label(settings.decode):
        return None
    values = {**features, **request, "healed": float(stats.get("healed", 0))}
    return round(calibrator.predict(values), 4)


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
