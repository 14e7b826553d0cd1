"""Selections -> byte spans of the original UTF-8 input. Never imports torch.

Selectors (each match becomes one masked span):
  --span A:B          lines A..B, 1-based, inclusive. The span covers the lines' text, not the final line
                      break, so line endings (LF or CRLF) are never part of a fill.
  --span A:C-B:D      line:column to line:column; columns are 1-based and count characters; the end column is
                      exclusive, so 3:5-3:5 is an insertion point before column 5 of line 3.
  --marker TEXT       every occurrence of TEXT (the marker itself is replaced; a marker alone on its line
                      stands for the whole line, which gets one line back, as with --span N).
  --function NAME     the body of that function/method (tree-sitter); NAME may be qualified (A.f or A::f).
  --class NAME        the body of that class/struct/trait/...
  --node KIND         every capture named KIND in grammars/<lang>/*.scm (e.g. function.body, class, comment).
Bodies are filled between their delimiters; a Python docstring at the top of a body is kept. Whole lines are
replaced whole (the span starts at column 1 and ends before the line break); in-line bodies stay in-line.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from infill.errors import InputError

SelectorKind = Literal["span", "marker", "function", "class", "node"]

# per-selector default token budgets, used when a span replaces no text (see api.token_budget)
DEFAULT_TOKENS: dict[str, int] = {"span": 32, "marker": 32, "function": 96, "class": 192, "node": 64}


@dataclass(frozen=True, order=True)
class Span:
    """A half-open byte range [start_byte, end_byte) of the original input to be replaced by a fill."""

    start_byte: int
    end_byte: int
    label: str = ""  # where it came from, e.g. "--span 12:18" or "function foo"
    default_tokens: int = 32  # budget when the span replaces no text
    placeholder: bool = False  # True when the replaced text is a placeholder (a marker), not content to resize
    # --span N (one whole line): the fill is one line too (cut at its first line break); a one-line span inside a
    # line (the language server's cursor) gets the rest of that line
    one_line: bool = False
    # a block of at most this many lines (the language server's multi-line suggestion on a blank line after a
    # block opener): the fill ends at its first line that dedents to the opener's level or less; 0 = no limit
    block_lines: int = 0
    # a Python body (--function, --class, a *.body node): the indentation of its definition's line; the fill ends
    # at its first line (after the first) indented that far or less, which would be code after the body
    body_indent: int = -1

    @property
    def block(self) -> bool:
        """Whether the fill is cut at its first dedent (infill.textops.block_cut)."""
        return bool(self.block_lines) or self.body_indent >= 0


@dataclass(frozen=True)
class Selection:
    """One selector flag as given on the command line (JSON-friendly: kind and value are strings)."""

    kind: SelectorKind
    value: str

    @property
    def label(self) -> str:
        return f"--{self.kind} {self.value}"


BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark: never part of a line's text, so never part of a span
_LINE_BREAK = re.compile(rb"\r\n|\r|\n")  # CRLF, LF, and a lone CR (classic Mac), as editors and Python count


class LineIndex:
    """Byte offsets of line starts in UTF-8 `data`; lines are 1-based; a final line break opens no line.

    Line 1 starts after a UTF-8 BOM, so a selection of line 1 never replaces it. Lines end at "\n", "\r\n"
    or a lone "\r"."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        first = len(BOM) if data.startswith(BOM) else 0
        self.starts = [first] + [m.end() for m in _LINE_BREAK.finditer(data)]
        if len(self.starts) > 1 and self.starts[-1] == len(data):
            self.starts.pop()  # "a\n" has one line
        self.count = 0 if not data else len(self.starts)

    def start(self, line: int) -> int:
        return self.starts[line - 1]

    def content_end(self, line: int) -> int:
        """Byte offset of line `line`'s end, before its "\n", "\r\n" or "\r"."""
        start = self.starts[line - 1]
        end = self.starts[line] if line < len(self.starts) else len(self.data)
        if end > start and self.data[end - 1 : end] == b"\n":
            end -= 1
            if end > start and self.data[end - 1 : end] == b"\r":
                end -= 1
        elif end > start and self.data[end - 1 : end] == b"\r":
            end -= 1
        return end

    def line_of(self, offset: int) -> int:
        """1-based line holding byte `offset` (an offset at the very end belongs to the last line)."""
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def byte_of_column(self, line: int, column: int, label: str) -> int:
        """Byte offset of 1-based character `column` of `line`; column len+1 is the end of the line."""
        start, end = self.start(line), self.content_end(line)
        text = self.data[start:end].decode("utf-8")
        if not 1 <= column <= len(text) + 1:
            raise InputError(f"{label}: column {column} is outside line {line} (1..{len(text) + 1})")
        return start + len(text[: column - 1].encode("utf-8"))


_LAST_INDEX: list[LineIndex] = []  # the last LineIndex built by line_index


def line_index(data: bytes) -> LineIndex:
    """LineIndex(data), the last one again when `data` holds the same bytes: one fill needs it for its spans, then
    for its plan (a second each for 20 MB)."""
    last = _LAST_INDEX[0] if _LAST_INDEX else None  # read once: another thread (the language server) may replace it
    if last is not None and (last.data is data or last.data == data):
        return last
    index = LineIndex(data)
    _LAST_INDEX[:] = [index]
    return index


# ASCII digits only (\d also matches '٣' and '３'); more than 18 digits is past any input and past what int() reads
_LINE_RANGE = re.compile(r"\s*([0-9]+)\s*(?::\s*([0-9]+))?\s*")
_CHAR_RANGE = re.compile(r"\s*([0-9]+):([0-9]+)\s*-\s*([0-9]+):([0-9]+)\s*")
_MAX_DIGITS = 18


def parse_span(value: str) -> tuple[int, int] | tuple[int, int, int, int]:
    """'A:B' (or 'A') -> (A, B); 'A:C-B:D' -> (A, C, B, D). Syntax only; ranges are checked later."""
    shown = value if len(value) <= 40 else f"{value[:37]}..."
    m = _CHAR_RANGE.fullmatch(value) or _LINE_RANGE.fullmatch(value)
    if m is None:
        raise InputError(f"--span {shown}: expected LINE, A:B (lines) or A:C-B:D (line:column), in ASCII digits")
    numbers = [g for g in m.groups() if g is not None]
    if any(len(g.lstrip("0")) > _MAX_DIGITS for g in numbers):
        raise InputError(f"--span {shown}: a line or column number of more than {_MAX_DIGITS} digits")
    if len(numbers) == 4:
        a, c, b, d = (int(g) for g in numbers)
        return a, c, b, d
    a = int(numbers[0])
    return a, int(numbers[1]) if len(numbers) == 2 else a


def whole_lines(data: bytes, start: int, end: int, label: str) -> Span | None:
    """The span of a selection that runs from a line's start to a later line's start (Vim's `V`, an editor's line
    selection, `--span 9:1-10:1`): those lines, whole, as `--span A:B` takes them, its last line break left out
    of the span: a fill of lines carries no final line break, and the line after would be joined to it. None for
    any other selection."""
    breaks = (b"\n", b"\r")
    if end <= start or data[end - 1 : end] not in breaks or data[end - 1 : end + 1] == b"\r\n":
        return None
    if start > 0 and data[start - 1 : start] not in breaks and data[:start] != BOM:
        return None
    cut = end - 2 if data[end - 2 : end] == b"\r\n" else end - 1
    one_line = _LINE_BREAK.search(data, start, cut) is None
    return Span(start, cut, label, DEFAULT_TOKENS["span"], one_line=one_line)


def _span_from_lines(index: LineIndex, sel: Selection) -> Span:
    parsed = parse_span(sel.value)
    if index.count == 0:
        raise InputError(f"{sel.label}: the input is empty")
    if len(parsed) == 2:
        a, b = parsed
        for line in (a, b):
            if not 1 <= line <= index.count:
                raise InputError(f"{sel.label}: line {line} is out of range (the input has {index.count} lines)")
        if b < a:
            raise InputError(f"{sel.label}: reversed range (end line {b} is before start line {a})")
        return Span(index.start(a), index.content_end(b), sel.label, DEFAULT_TOKENS["span"], one_line=a == b)
    a, c, b, d = parsed
    for line in (a, b):
        if not 1 <= line <= index.count:
            raise InputError(f"{sel.label}: line {line} is out of range (the input has {index.count} lines)")
    start, end = index.byte_of_column(a, c, sel.label), index.byte_of_column(b, d, sel.label)
    if end < start:
        raise InputError(f"{sel.label}: reversed range (the end is before the start)")
    return whole_lines(index.data, start, end, sel.label) or Span(start, end, sel.label, DEFAULT_TOKENS["span"])


def _spans_from_marker(data: bytes, sel: Selection) -> list[Span]:
    if not sel.value:
        raise InputError("--marker: the marker text is empty")
    if not sel.value.strip():  # `--marker $'\n'` made every line break a span
        raise InputError("--marker: the marker is only white space; give a placeholder text, such as <FILL>")
    try:
        needle = sel.value.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: bytes that were no UTF-8 on the command line or in a request
        raise InputError("--marker: the marker text is not valid UTF-8") from None
    spans = []
    at = data.find(needle)
    while at >= 0:
        end = at + len(needle)
        line_start = data.rfind(b"\n", 0, at) + 1
        line_end = data.find(b"\n", end)
        line_end = len(data) if line_end < 0 else line_end
        if line_end > line_start and data[line_end - 1 : line_end] == b"\r":
            line_end -= 1
        if not data[line_start:at].strip() and not data[end:line_end].strip():
            # a marker alone on its line asks for a line: the whole line is the span, as with --span N
            spans.append(Span(line_start, line_end, sel.label, DEFAULT_TOKENS["marker"], True, one_line=True))
        else:
            spans.append(Span(at, end, sel.label, DEFAULT_TOKENS["marker"], placeholder=True))
        at = data.find(needle, end)
    if not spans:
        raise InputError(f"{sel.label}: marker not found")
    return spans


# ------------------------------------------------------------------------------------------------------------
# tree-sitter selectors


def _is_blank(b: bytes) -> bool:
    return not b.strip()


def snap_to_lines(data: bytes, start: int, end: int) -> tuple[int, int]:
    """Widen/narrow [start, end) to whole lines where only whitespace separates it from a line boundary.

    A span that begins after only indentation starts at column 1; one that begins at the end of a line (after
    "{") starts on the next line. Symmetrically the end stops before the line break. In-line spans stay.
    """
    ls = data.rfind(b"\n", 0, start) + 1
    eol = data.find(b"\n", start)
    eol = len(data) if eol < 0 else eol
    if _is_blank(data[ls:start]):
        start = ls
    elif _is_blank(data[start:eol]) and eol < end:
        start = eol + 1
    le = data.find(b"\n", end)
    le = len(data) if le < 0 else le
    if le > 0 and data[le - 1 : le] == b"\r":
        le -= 1
    ls_end = data.rfind(b"\n", 0, end) + 1
    if le >= end and _is_blank(data[end:le]):
        end = le
    elif _is_blank(data[ls_end:end]) and ls_end > start:
        end = ls_end - 1
        if end > 0 and data[end - 1 : end] == b"\r":
            end -= 1
    return start, max(start, end)


def _python_docstring_end(node: Any) -> int | None:
    first = node.named_children[0] if node.named_children else None
    if first is not None and first.type == "expression_statement" and first.named_child_count == 1:
        if first.named_children[0].type == "string":
            return int(first.end_byte)
    return None


def body_range(data: bytes, node: Any, language: str) -> tuple[int, int]:
    """The fillable interior of a body node: between its braces, or the Python block after any docstring."""
    start, end = int(node.start_byte), int(node.end_byte)
    text = data[start:end]
    if text.endswith(b"}") and b"{" in text:
        start, end = start + text.index(b"{") + 1, end - 1
    elif language == "python":
        doc_end = _python_docstring_end(node)
        if doc_end is not None:
            start = doc_end
            if start == end:  # only a docstring: insert on the line after it
                nl = data.find(b"\n", start)
                start = end = len(data) if nl < 0 else nl + 1
                return start, end
    return snap_to_lines(data, start, end)


def _captures(data: bytes, language: str) -> tuple[Any, list[tuple[int, dict[str, list[Any]]]]]:
    from infill import languages

    tree = languages.parse(language, data)
    import tree_sitter

    matches: list[tuple[int, dict[str, list[Any]]]] = []
    for query in languages.queries(language):
        matches.extend(tree_sitter.QueryCursor(query).matches(tree.root_node))
    return tree, matches


def _require_language(sel: Selection, language: str | None, filename: str | None) -> str:
    if language is None:
        from infill.languages import known_extensions

        what = f"{filename!r} is plain text" if filename else "the input's language is unknown (use --stdin-filename)"
        raise InputError(
            f"{sel.label}: needs a tree-sitter language, but {what}; known extensions: {known_extensions()}"
        )
    return language


# a C++ operator's name, kept whole by _without_template_arguments: operator<, operator<<=, operator(), operator==
_OPERATOR = re.compile(r"operator\b\s*(?:<=>|<<=|>>=|<<|>>|<=|>=|<|>|[^\s<>:.]*)")


def _without_template_arguments(name: str) -> str:
    """`Box<std::pair<K, V>>::get` -> `Box::get`: a C++ (or Rust) name's template arguments, which neither
    `--function Box::get` nor the list of names shown when a name is not found should need."""
    out: list[str] = []
    depth = 0
    at = 0
    while at < len(name):
        word_start = at == 0 or not (name[at - 1].isalnum() or name[at - 1] == "_")
        operator = _OPERATOR.match(name, at) if depth == 0 and word_start else None
        if operator is not None:
            out.append(operator.group())
            at = operator.end()
            continue
        char = name[at]
        if char == "<":
            depth += 1
        elif char == ">" and depth:
            depth -= 1
        elif depth == 0:
            out.append(char)
        at += 1
    return "".join(out)


def _definition_name(data: bytes, node: Any) -> str:
    """The text of a definition's name node; a C++ conversion operator (`operator bool() const`, `S::operator
    int() const`) is named without its parameters and qualifiers: `operator bool`, `S::operator int`."""
    inner = node
    while inner.type == "qualified_identifier" and inner.child_by_field_name("name") is not None:
        inner = inner.child_by_field_name("name")
    target = inner.child_by_field_name("type") if inner.type == "operator_cast" else None
    end = inner.start_byte if target is not None else node.end_byte
    name = data[node.start_byte : end].decode("utf-8", "replace")
    if target is not None:
        name += "operator " + data[target.start_byte : target.end_byte].decode("utf-8", "replace")
    return name


def _name_parts(name: str) -> list[str]:
    return [p for p in re.split(r"\.|::", _without_template_arguments(name)) if p]


def _spans_from_definition(data: bytes, sel: Selection, language: str) -> list[Span]:
    kind = sel.kind  # "function" or "class"
    tree, matches = _captures(data, language)
    defs = []  # (node, the names it answers to, body)
    # (start, end, the names it answers to) of every class, function and named object literal: what a qualified
    # name (A.f, outer.inner, obj.m) names
    scopes: list[tuple[int, int, tuple[str, ...]]] = []
    for _, caps in matches:
        for prefix in ("function", "class", "object"):
            if prefix in caps and f"{prefix}.name" in caps and f"{prefix}.body" in caps:
                node, name_node, body = caps[prefix][0], caps[f"{prefix}.name"][0], caps[f"{prefix}.body"][0]
                name = _definition_name(data, name_node)
                for scope in caps.get(f"{prefix}.scope", [])[:1]:  # a Go method's receiver type: Stack.Push
                    name = data[scope.start_byte : scope.end_byte].decode("utf-8", "replace") + "." + name
                # the names a scope answers to: a Rust `impl Trait for Type` is Type, Trait or Type.Trait
                called: tuple[str, ...] = (name,)
                for trait in caps.get(f"{prefix}.trait", [])[:1]:
                    trait_name = data[trait.start_byte : trait.end_byte].decode("utf-8", "replace")
                    called = (name, trait_name, f"{name}.{_name_parts(trait_name)[-1]}")  # Square.Display
                scopes.append((node.start_byte, node.end_byte, called))
                if prefix == kind:  # a definition answers to what its scope does: --class Shape is each impl too
                    defs.append((node, called, body))
    wanted = _name_parts(sel.value)
    if not wanted:
        raise InputError(f"{sel.label}: empty name")
    found = []
    for node, called, body in defs:
        outer = [
            c[2]
            for c in sorted(set(scopes), key=lambda c: (c[0], -c[1]))
            if c[0] <= node.start_byte and node.end_byte <= c[1] and (c[0], c[1]) != (node.start_byte, node.end_byte)
        ]
        # one name per enclosing scope, and one of the definition's own (C++ qualified names, A::f, bring their
        # own scope)
        for *chosen, own in itertools.product(*outer, called):
            full = [p for o in chosen for p in _name_parts(o)] + _name_parts(own)
            if full[-len(wanted) :] == wanted and len(full) >= len(wanted):
                found.append((node, body))
                break
    if not found:
        names = _closest_first(wanted[-1], sorted({_without_template_arguments(called[0]) for _, called, _ in defs}))
        plural = "classes" if kind == "class" else "functions"
        listing = (
            ", ".join(names[:_LISTED]) + (", ..." if len(names) > _LISTED else "")
            if names
            else f"the file has no {plural}"
        )
        if tree.root_node.has_error:  # a definition inside or after a syntax error may not be recognised
            from infill.languages import first_error_line

            listing += f"; the file does not parse from line {first_error_line(tree.root_node)}, which can hide it"
        raise InputError(f"{sel.label}: {kind} {sel.value!r} not found ({listing})")
    spans = [
        Span(
            *body_range(data, body, language),
            sel.label,
            DEFAULT_TOKENS[kind],
            body_indent=indent_at(data, node, language),
        )
        for node, body in found
    ]
    return _outermost(spans)


_LISTED = 12  # names a "not found" message lists


def _closest_first(wanted: str, names: list[str]) -> list[str]:
    """`names` as a "not found" message lists them: all of them, in order, when they fit; else the ones that
    look like `wanted` (by their last part: `push` finds `Stack.push`) first, so a typo's fix is shown."""
    if len(names) <= _LISTED:
        return names
    import difflib

    def likeness(name: str) -> float:
        parts = _name_parts(name) or [name]
        return difflib.SequenceMatcher(None, wanted.lower(), parts[-1].lower()).ratio()

    close = sorted((n for n in names if likeness(n) >= 0.6), key=lambda n: -likeness(n))
    return close + [n for n in names if n not in close]


def indent_at(data: bytes, definition: Any, language: str) -> int:
    """For Python, the indentation (characters) of the line where `definition` starts, which its body's lines
    exceed; -1 for other languages, whose bodies end at a brace, not at a dedent."""
    if language != "python":
        return -1
    start = data.rfind(b"\n", 0, int(definition.start_byte)) + 1
    line = data[start : int(definition.start_byte)]
    return len(line.decode("utf-8", "replace")) if not line.strip() else -1


def _spans_from_node(data: bytes, sel: Selection, language: str) -> list[Span]:
    from infill.languages import capture_names

    available = capture_names(language)
    if sel.value not in available:
        raise InputError(f"{sel.label}: no query capture named {sel.value!r} for {language} ({', '.join(available)})")
    _, matches = _captures(data, language)
    spans = []
    for _, caps in matches:
        for node in caps.get(sel.value, []):
            indent = -1
            if sel.value.endswith(".body"):
                start, end = body_range(data, node, language)
                if node.parent is not None:
                    indent = indent_at(data, node.parent, language)
            else:
                start, end = snap_to_lines(data, int(node.start_byte), int(node.end_byte))
            spans.append(Span(start, end, sel.label, DEFAULT_TOKENS["node"], body_indent=indent))
    if not spans:
        raise InputError(f"{sel.label}: no {sel.value!r} node found")
    return _outermost(spans)


def _outermost(spans: list[Span]) -> list[Span]:
    """Drop duplicates and spans nested in another span of the same selector."""
    kept: list[Span] = []
    for span in sorted(set(spans), key=lambda s: (s.start_byte, -s.end_byte)):
        if kept and span.end_byte <= kept[-1].end_byte and span.start_byte < kept[-1].end_byte:
            continue
        kept.append(span)
    return kept


# ------------------------------------------------------------------------------------------------------------


def resolve(
    data: bytes, selections: Sequence[Selection], language: str | None = None, filename: str | None = None
) -> list[Span]:
    """All spans selected in `data`, sorted; InputError for out-of-range/reversed/overlapping/missing ones."""
    if not selections:
        raise InputError("nothing selected: give --span, --marker, --function, --class or --node")
    index = line_index(data)
    spans: list[Span] = []
    for sel in selections:
        if sel.kind == "span":
            spans.append(_span_from_lines(index, sel))
        elif sel.kind == "marker":
            spans.extend(_spans_from_marker(data, sel))
        elif sel.kind in ("function", "class"):
            spans.extend(_spans_from_definition(data, sel, _require_language(sel, language, filename)))
        elif sel.kind == "node":
            spans.extend(_spans_from_node(data, sel, _require_language(sel, language, filename)))
        else:
            raise InputError(f"unknown selector {sel.kind!r}")
    return check_spans(data, spans)


def check_spans(data: bytes, spans: Sequence[Span]) -> list[Span]:
    """Sort spans and check they lie inside `data`, on UTF-8 character boundaries, and do not overlap."""
    ordered = sorted(spans, key=lambda s: (s.start_byte, s.end_byte))
    for span in ordered:
        if not 0 <= span.start_byte <= span.end_byte <= len(data):
            raise InputError(
                f"{span.label or 'span'}: byte range {span.start_byte}:{span.end_byte} is outside the input"
            )
        for offset in (span.start_byte, span.end_byte):
            if offset < len(data) and (data[offset] & 0xC0) == 0x80:
                raise InputError(f"{span.label or 'span'}: byte {offset} is inside a UTF-8 character")
    for prev, cur in zip(ordered, ordered[1:], strict=False):
        if cur.start_byte < prev.end_byte or cur.start_byte == prev.start_byte:
            index = LineIndex(data)
            raise InputError(
                f"spans overlap: {prev.label or 'span'} (line {index.line_of(prev.start_byte)}) and "
                f"{cur.label or 'span'} (line {index.line_of(cur.start_byte)})"
            )
    return ordered
