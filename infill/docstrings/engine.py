"""Fill the missing docstrings of one file: find, skeleton, one model call per definition, judge, choose, insert.

Each slot's text is judged by the monitor (infill.docstrings.monitor: cleaned, and refused when it contradicts
what the code says), inside decoding and again on the text decoding returns; the docstring then gets the model's
sentences only when their calibrated probability reaches the threshold, and the sentences built from the names
and the code otherwise (infill.docstrings.confidence, infill.docstrings.names).

`process_source` is pure (text in, FileResult out); writing files is the command's job. With `filler=None`
it only reports what is missing (the `--check` path), so it never needs a model.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from infill.docstrings import confidence, facts, monitor, names, styles
from infill.docstrings.config import DocstringConfig
from infill.docstrings.fill import SlotFiller, call_filler
from infill.docstrings.finder import Definition, colon_byte, find_definitions, innermost
from infill.docstrings.outcome import FileResult, Outcome
from infill.docstrings.skeleton import Skeleton, Slot, build_skeleton, init_method
from infill.patch import Replacement, apply_edits
from infill.textops import newline_of

CONTEXT_LINES = 60  # lines of a definition shown to the model after the docstring
BOM = "\ufeff"  # a UTF-8 byte order mark, as decoded text


# a lone CR ends a line for Python (and in `infill fill`), but tree-sitter's grammar reads it as an error: the
# definitions are found in a view with LF there, which keeps every byte offset, and edits go into the real text
_LONE_CR = re.compile(rb"\r(?!\n)")


def _indent_unit(source: str) -> str:
    """The file's indentation step: the leading whitespace of its first indented code line."""
    for line in source.splitlines():
        stripped = line.lstrip(" \t")
        if stripped and line != stripped and not stripped.startswith("#"):
            lead = line[: len(line) - len(stripped)]
            return "\t" if lead.startswith("\t") else lead
    return "    "


DEFINITIONS = frozenset({"function_definition", "class_definition", "decorated_definition"})


@dataclass(frozen=True)
class Insertion:
    """Where a new docstring goes: replace bytes [start, end) with before + docstring + after."""

    start: int
    end: int
    before: str
    after: str
    indent: str  # indentation of the docstring's body lines


def insertion_for(d: Definition, source: bytes, newline: str, unit: str, stub: bool = False) -> Insertion:
    if d.kind == "module":
        root = d.node
        first = next(c for c in root.named_children if c.type != "comment")
        start = source.rfind(b"\n", 0, first.start_byte) + 1
        # black and ruff format put two blank lines between the docstring and a top-level def or class (PEP 8),
        # one before anything else and in a stub (.pyi)
        blank_lines = 2 if first.type in DEFINITIONS and not stub else 1
        return Insertion(start, start, "", newline * (1 + blank_lines), "")
    node = d.node
    body = node.child_by_field_name("body")
    colon = colon_byte(node)
    first = next((c for c in body.named_children if c.type != "comment"), None)
    # black / ruff format want a blank line after a class docstring, and after a function's before a nested
    # def or class (or the comment above one)
    opens_definition = first is not None and first.type in DEFINITIONS
    blank_after = newline if d.kind == "class" or opens_definition else ""
    line_end = source.find(b"\n", colon)
    rest = source[colon + 1 : line_end].strip() if line_end != -1 else b""
    continued = rest.endswith(b"\\") and not rest.startswith(b"#")  # `def f(x): \` + the body on the next line
    if line_end != -1 and line_end < body.start_byte and not continued:  # the body starts on a later line
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
    indent = d.indent + unit  # a one-line definition (`def f(): return 1`, or continued by a backslash): a block
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


def skeleton_and_facts(
    d: Definition, cfg: DocstringConfig, by_node: dict[int, Definition], tree: ast.Module | None
) -> tuple[Skeleton, facts.Facts]:
    """The structure of `d`'s docstring and what its code says (`tree`: the file's `ast`, None if CPython cannot
    parse it); `by_node` maps tree-sitter node ids to the file's definitions."""
    skeleton = build_skeleton(d, _describes_init(d, cfg, by_node))
    owner = d.parent.name if d.kind == "method" and d.parent is not None else None
    return skeleton, facts.python_facts(tree, skeleton, d.line, owner)


def _summary_limit(cfg: DocstringConfig, indent: str, one_line: bool) -> int:
    return max(cfg.line_length - len(indent) - (6 if one_line else 3), 30)


def fill_definition(
    source: bytes,
    d: Definition,
    skeleton: Skeleton,
    ins: Insertion,
    style: str,
    cfg: DocstringConfig,
    filler: SlotFiller,
    known: facts.Facts,
    language: str = "python",
) -> tuple[str | None, Outcome]:
    """One model call for all slots of one definition, judged by the monitor; the docstring to write (None:
    leave it missing)."""
    template = styles.render(skeleton, style, ins.indent, None, cfg.line_length)
    head, tail = _context(source, d, ins)
    prefix = head + ins.before.encode("utf-8")
    suffix = ins.after.encode("utf-8") + tail
    one_line = not (skeleton.slots()[1:])
    limit = _summary_limit(cfg, ins.indent, one_line)

    def monitor_for(slots: Mapping[int, Slot]) -> monitor.SlotMonitor:
        return monitor.SlotMonitor(slots, known, limit)

    model = call_filler(filler, prefix, template, suffix, d.qualname, language, cfg, monitor_for)
    verdicts = monitor.judge_all(skeleton, known, model.raw, limit)
    choice = confidence.choose(verdicts, names.texts(known, skeleton.slots()), model, cfg.model, cfg.min_probability)
    score = model.mean()
    outcome = Outcome(d.qualname, d.kind, d.line, "filled", score, choice.fallbacks, warnings=model.warnings)
    outcome.probability = choice.probability
    outcome.refused = {k: v.reason for k, v in verdicts.items() if v.reason is not None}
    conf_value = score if score is not None else -math.inf
    if cfg.min_confidence is not None and (conf_value < cfg.min_confidence or "summary" in choice.fallbacks):
        outcome.status = "left-missing"
        return None, outcome
    if "summary" in choice.fallbacks or conf_value < cfg.low_confidence:
        outcome.status = "low-confidence"
    docstring = styles.render(skeleton, style, ins.indent, choice.texts, cfg.line_length).text
    outcome.docstring = docstring
    return docstring, outcome


def existing_docstrings(source: bytes, definitions: list[Definition]) -> list[str]:
    return [source[d.docstring[0] : d.docstring[1]].decode("utf-8", "replace") for d in definitions if d.docstring]


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
    text_bytes = source_text.encode("utf-8")
    source = _LONE_CR.sub(b"\n", text_bytes)  # the parser's view (see _LONE_CR)
    definitions = find_definitions(source, path, cfg)
    if at is not None:
        inner_defs = [d for d in definitions if d.kind != "module"]
        chosen = innermost([(d.start_byte, d.node.end_byte) for d in inner_defs], at)
        definitions = [] if chosen is None else [inner_defs[chosen]]
    style: str = cfg.style
    if style == "auto":
        style = styles.detect_style(existing_docstrings(source, definitions))
    newline = newline_of(source_text)
    unit = _indent_unit(source_text)
    by_node = {d.node.id: d for d in definitions if d.kind != "module"}
    tree: ast.Module | None = None
    if filler is not None:
        tree = facts.parse_python(source_text)
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
        skeleton, known = skeleton_and_facts(d, cfg, by_node, tree)
        ins = insertion_for(d, source, newline, unit, stub=path.endswith(".pyi"))
        docstring, outcome = fill_definition(source, d, skeleton, ins, style, cfg, filler, known)
        outcomes.append(outcome)
        if docstring is not None:
            if newline != "\n":
                docstring = docstring.replace("\n", newline)
            replacements.append(Replacement(ins.start, ins.end, ins.before + docstring + ins.after))
    new_text = apply_edits(text_bytes, replacements).decode("utf-8")  # lone CRs kept: same offsets
    return FileResult(path, source_text, new_text, outcomes, style, sorted(replacements, key=_order))


def _order(edit: Replacement) -> tuple[int, int]:
    return edit.start_byte, edit.end_byte
