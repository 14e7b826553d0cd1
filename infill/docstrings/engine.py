"""Fill the missing docstrings of one file: find, skeleton, one model call per definition, clean, insert.

`process_source` is pure (text in, FileResult out); writing files is the command's job. With `filler=None`
it only reports what is missing (the `--check` path), so it never needs a model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from infill.docstrings import styles, text
from infill.docstrings.config import DocstringConfig
from infill.docstrings.fill import SlotFiller, slot_span
from infill.docstrings.finder import Definition, colon_byte, find_definitions
from infill.docstrings.skeleton import Skeleton, build_skeleton, init_method
from infill.patch import Replacement, apply_edits

Status = Literal["missing", "filled", "low-confidence", "left-missing", "updated"]
CONTEXT_LINES = 60  # lines of a definition shown to the model after the docstring
BOM = "\ufeff"  # a UTF-8 byte order mark, as decoded text


@dataclass
class Outcome:
    """What happened to one definition."""

    name: str  # qualified name, e.g. "Stack.push"
    kind: str
    line: int  # 1-based line of the definition in the ORIGINAL file
    status: Status
    confidence: float | None = None  # mean token log-probability of the model's text (None: no model text)
    fallbacks: list[str] = field(default_factory=list)  # slots that got neutral text instead of the model's
    docstring: str | None = None  # the docstring written (filled / updated)
    warnings: list[str] = field(default_factory=list)  # from the model call, e.g. a budget capped to the context


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


def _newline(source: str) -> str:
    first = source.find("\n")
    return "\r\n" if first > 0 and source[first - 1] == "\r" else "\n"


def _indent_unit(source: str) -> str:
    """The file's indentation step: the leading whitespace of its first indented code line."""
    for line in source.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and line != stripped and not stripped.startswith("#"):
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else lead
    return "    "


@dataclass(frozen=True)
class Insertion:
    """Where a new docstring goes: replace bytes [start, end) with before + docstring + after."""

    start: int
    end: int
    before: str
    after: str
    indent: str  # indentation of the docstring's body lines


def insertion_for(d: Definition, source: bytes, newline: str, unit: str) -> Insertion:
    if d.kind == "module":
        root = d.node
        first = next(c for c in root.named_children if c.type != "comment")
        start = source.rfind(b"\n", 0, first.start_byte) + 1
        return Insertion(start, start, "", newline * 2, "")
    node = d.node
    body = node.child_by_field_name("body")
    colon = colon_byte(node)
    blank_after = newline if d.kind == "class" else ""  # black / ruff format want a blank line after a class docstring
    line_end = source.find(b"\n", colon)
    if line_end != -1 and line_end < body.start_byte:  # the body starts on a later line
        start = line_end + 1
        end = start  # blank lines right after the header go: none may follow a docstring (D202)
        while True:
            next_end = source.find(b"\n", end)
            if next_end == -1 or next_end >= body.start_byte or source[end:next_end].strip():
                break
            end = next_end + 1
        body_line = source.rfind(b"\n", 0, body.start_byte) + 1
        indent = source[body_line : body.start_byte].decode("utf-8")
        if indent.strip():
            indent = d.indent + unit
        return Insertion(start, end, indent, newline + blank_after, indent)
    indent = d.indent + unit  # a one-line definition: `def f(): return 1` becomes a block
    return Insertion(colon, body.start_byte, newline + indent, newline + blank_after + indent, indent)


def _context(source: bytes, d: Definition, ins: Insertion) -> tuple[bytes, bytes]:
    """Code shown to the model before and after the docstring: the definition (for a module: its top)."""
    if d.kind == "module":
        head = b""
        end = len(source)
    else:
        head_start = source.rfind(b"\n", 0, d.start_byte) + 1
        head = source[head_start : ins.start]
        end = d.node.end_byte
        owner = d.parent
        if d.kind == "method" and owner is not None and owner.node is not None:  # show whose method it is
            owner_start = source.rfind(b"\n", 0, owner.start_byte) + 1
            owner_head = source[owner_start : colon_byte(owner.node)] + b"\n"
            skipped = owner_start + len(owner_head) < head_start
            elided = d.indent.encode("utf-8") + b"...\n" if skipped else b""
            head = owner_head + elided + head
    tail = source[ins.end : end]
    lines = tail.split(b"\n")
    if len(lines) > CONTEXT_LINES:
        tail = b"\n".join(lines[:CONTEXT_LINES]) + b"\n"
    return head, tail


def _describes_init(d: Definition, cfg: DocstringConfig, by_node: dict[int, Definition]) -> bool:
    """Whether a class docstring should carry the __init__ arguments (when __init__ has none)."""
    if d.kind != "class" or not cfg.ignore_init_method:
        return False
    init = init_method(d.node)
    if init is None:
        return False
    init_def = by_node.get(init.id)
    return init_def is not None and init_def.docstring is None


def _summary_limit(cfg: DocstringConfig, indent: str, one_line: bool) -> int:
    return max(cfg.line_length - len(indent) - (6 if one_line else 3), 30)


def clean_texts(skeleton: Skeleton, raw: dict[str, str], limit: int) -> tuple[dict[str, str], list[str]]:
    """Cleaned text for every slot, and the keys that fell back to neutral text."""
    out: dict[str, str] = {}
    fallbacks: list[str] = []
    is_function = skeleton.kind in ("function", "method") and not skeleton.is_property
    for slot in skeleton.slots():
        given = raw.get(slot.key, "")
        cleaned: str | None
        if slot.kind == "summary":
            cleaned = text.clean_summary(given, name=skeleton.name, is_function=is_function, limit=limit)
            fallback = text.fallback_summary(skeleton.kind, skeleton.name, skeleton.returns is not None)
        else:
            cleaned = text.clean_description(given, subject=slot.subject)
            fallback = text.fallback_description(slot.kind, slot.subject)
        if cleaned is None:
            fallbacks.append(slot.key)
            cleaned = fallback
        out[slot.key] = cleaned
    return out, fallbacks


def call_filler(
    filler: SlotFiller,
    prefix: bytes,
    template: styles.Rendered,
    suffix: bytes,
    qualname: str,
    language: str,
    cfg: DocstringConfig,
) -> tuple[dict[str, str], float | None, list[str]]:
    """One model call: `prefix + template + suffix` with the template's slots as spans.

    Returns the raw text of each slot by key, the mean token log-probability over all slots (None when the
    filler reports no tokens), and the call's warnings.
    """
    context = prefix + template.text.encode("utf-8") + suffix
    spans = []
    for key, (start, end) in template.slots.items():
        byte_start = len(prefix) + len(template.text[:start].encode("utf-8"))
        byte_end = len(prefix) + len(template.text[:end].encode("utf-8"))
        budget = cfg.summary_tokens if key == "summary" else cfg.description_tokens
        spans.append(slot_span(byte_start, byte_end, f"{key}|{qualname}", budget))
    spans.sort()
    result = filler(context.decode("utf-8"), spans, language=language)
    raw: dict[str, str] = {}
    score, tokens = 0.0, 0
    by_range = {(e.start_byte, e.end_byte): e for e in result.edits}
    for span in spans:
        edit = by_range.get((span.start_byte, span.end_byte))
        if edit is None:
            continue
        raw[span.label.split("|", 1)[0]] = edit.text
        score += edit.score
        tokens += edit.tokens
    return raw, (score / tokens if tokens > 0 else None), list(result.warnings)


def fill_definition(
    source: bytes,
    d: Definition,
    skeleton: Skeleton,
    ins: Insertion,
    style: str,
    cfg: DocstringConfig,
    filler: SlotFiller,
    language: str = "python",
) -> tuple[str | None, Outcome]:
    """One model call for all slots of one definition; the docstring to write (None: leave it missing)."""
    template = styles.render(skeleton, style, ins.indent, None, cfg.line_length)
    head, tail = _context(source, d, ins)
    prefix = head + ins.before.encode("utf-8")
    suffix = ins.after.encode("utf-8") + tail
    raw, confidence, warnings = call_filler(filler, prefix, template, suffix, d.qualname, language, cfg)
    one_line = not (skeleton.slots()[1:])
    texts, fallbacks = clean_texts(skeleton, raw, _summary_limit(cfg, ins.indent, one_line))
    outcome = Outcome(d.qualname, d.kind, d.line, "filled", confidence, fallbacks, warnings=warnings)
    conf_value = confidence if confidence is not None else -math.inf
    if cfg.min_confidence is not None and (conf_value < cfg.min_confidence or "summary" in fallbacks):
        outcome.status = "left-missing"
        return None, outcome
    if fallbacks or conf_value < cfg.low_confidence:
        outcome.status = "low-confidence"
    docstring = styles.render(skeleton, style, ins.indent, texts, cfg.line_length).text
    outcome.docstring = docstring
    return docstring, outcome


def existing_docstrings(source: bytes, definitions: list[Definition]) -> list[str]:
    return [source[d.docstring[0] : d.docstring[1]].decode("utf-8", "replace") for d in definitions if d.docstring]


def innermost(ranges: list[tuple[int, int]], at: int) -> int | None:
    """Index of the innermost [start, end] range holding byte `at` (the one starting last), or None."""
    holding = [i for i, (start, end) in enumerate(ranges) if start <= at <= end]
    return max(holding, key=lambda i: ranges[i][0], default=None)


def process_source(
    source_text: str,
    path: str,
    cfg: DocstringConfig,
    filler: SlotFiller | None,
    update: bool = False,
    at: int | None = None,
) -> FileResult:
    """Report (filler None) or fill the missing docstrings of one Python file; with `update`, also fix the
    parameter entries of existing docstrings. With `at` (a byte offset of the text), only the innermost function
    or class around it is handled (an editor's "the function at the cursor")."""
    from infill import languages
    from infill.docstrings import comments
    from infill.docstrings import update as updating

    if source_text.startswith(BOM):
        # a UTF-8 byte order mark is not code: work on the text after it and put it back in front, so a module
        # docstring never lands before it (U+FEFF anywhere else does not compile)
        skip = len(BOM.encode("utf-8"))
        inner = process_source(source_text[len(BOM) :], path, cfg, filler, update, None if at is None else at - skip)
        edits = [Replacement(e.start_byte + skip, e.end_byte + skip, e.text) for e in inner.edits]
        return FileResult(path, source_text, BOM + inner.text, inner.outcomes, inner.style, edits)
    other_language = languages.detect(path)
    if other_language in comments.COMMENT_LANGUAGES:
        return comments.process_comments(source_text, path, other_language, cfg, filler, at)
    source = source_text.encode("utf-8")
    definitions = find_definitions(source, path, cfg)
    if at is not None:
        inner_defs = [d for d in definitions if d.kind != "module"]
        chosen = innermost([(d.start_byte, d.node.end_byte) for d in inner_defs], at)
        definitions = [] if chosen is None else [inner_defs[chosen]]
    style: str = cfg.style
    if style == "auto":
        style = styles.detect_style(existing_docstrings(source, definitions))
    newline = _newline(source_text)
    unit = _indent_unit(source_text)
    by_node = {d.node.id: d for d in definitions if d.kind != "module"}
    outcomes: list[Outcome] = []
    replacements: list[Replacement] = []
    for d in definitions:
        if d.skip is not None:
            continue
        if d.docstring is not None:
            if update and filler is not None and d.kind != "module":
                skeleton = build_skeleton(d, _describes_init(d, cfg, by_node))
                own_style = styles.detect_style(existing_docstrings(source, [d]), default=style)
                change = updating.update_docstring(source, d, skeleton, own_style, cfg, filler)
                if change is not None:
                    new_text = change.text.replace("\n", newline)
                    replacements.append(Replacement(d.docstring[0], d.docstring[1], new_text))
                    outcomes.append(Outcome(d.qualname, d.kind, d.line, "updated", change.confidence))
                    outcomes[-1].fallbacks, outcomes[-1].docstring = change.fallbacks, change.text
            continue
        if filler is None:
            outcomes.append(Outcome(d.qualname, d.kind, d.line, "missing"))
            continue
        skeleton = build_skeleton(d, _describes_init(d, cfg, by_node))
        ins = insertion_for(d, source, newline, unit)
        docstring, outcome = fill_definition(source, d, skeleton, ins, style, cfg, filler)
        outcomes.append(outcome)
        if docstring is not None:
            if newline != "\n":
                docstring = docstring.replace("\n", newline)
            replacements.append(Replacement(ins.start, ins.end, ins.before + docstring + ins.after))
    new_text = apply_edits(source, replacements).decode("utf-8")
    return FileResult(path, source_text, new_text, outcomes, style, sorted(replacements, key=_order))


def _order(edit: Replacement) -> tuple[int, int]:
    return edit.start_byte, edit.end_byte
