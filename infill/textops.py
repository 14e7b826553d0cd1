"""Text post-processing of fills: line endings, indentation, repeated-suffix removal, syntax checks.

Everything here works on one span at a time and on strings; nothing imports torch. The model sees "\\n" line
endings only; `restore_newlines` puts the file's own line ending back into a fill.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_INDENT = re.compile(r"^[ \t]*")
_OPENERS = (":", "{", "(", "[", "=>", "->")


def newline_of(text: str) -> str:
    """The file's dominant line ending: "\r\n" if most line breaks are CRLF, "\r" if most are lone CRs (classic
    Mac files), else "\n"."""
    crlf = text.count("\r\n")
    lf, cr = text.count("\n") - crlf, text.count("\r") - crlf
    if cr > crlf and cr > lf:
        return "\r"
    return "\r\n" if crlf and crlf >= lf else "\n"


def to_model(text: str) -> str:
    """The model's view of context text: CRLF and lone CR -> LF (the tokenizer and the model were trained on
    LF)."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


def restore_newlines(fill: str, newline: str) -> str:
    """A fill with the file's line ending (`fill` came from the model, so it only has LF, or stray CRLF)."""
    fill = fill.replace("\r\n", "\n")
    return fill.replace("\n", newline) if newline != "\n" else fill


def indent_of(line: str) -> str:
    m = _INDENT.match(line)
    return m.group(0) if m else ""


def indent_unit(text: str) -> str:
    """The indentation step: a tab if indented lines mostly start with tabs, else the smallest space step."""
    indents = [indent_of(line) for line in text.split("\n") if line.strip()]
    tabs = sum(1 for i in indents if i.startswith("\t"))
    spaces = [len(i) for i in indents if i and not i.startswith("\t")]
    if tabs > len(spaces):
        return "\t"
    steps = sorted({n for n in spaces if n > 0})
    return " " * (steps[0] if steps and steps[0] in (2, 3, 4, 8) else 4)


def target_indent(prefix: str, replaced: str, suffix: str) -> str:
    """Indentation of the block enclosing a whole-line span.

    The replaced text's first non-blank line wins; else the previous non-blank line's indentation, one level
    deeper if it opens a block (ends with ':' or '{' ...); else the next non-blank line's.
    """
    for line in replaced.split("\n"):
        if line.strip():
            return indent_of(line)
    before = [line for line in prefix.split("\n") if line.strip()]
    after = [line for line in suffix.split("\n") if line.strip()]
    if before:
        prev = before[-1]
        if prev.rstrip().endswith(_OPENERS):
            deeper = indent_of(prev) + indent_unit(prefix + suffix)
            if after and len(indent_of(after[0])) > len(indent_of(prev)):
                return indent_of(after[0])
            return deeper
        return indent_of(prev)
    return indent_of(after[0]) if after else ""


def open_levels(prefix: str) -> set[str]:
    """Indentations a new line after `prefix` may take: the last non-blank line's, every shallower one of the
    blocks that enclose it (walking back), and one level deeper if the last line opens a block."""
    lines = [line for line in prefix.split("\n") if line.strip()]
    if not lines:
        return {""}
    levels = {indent_of(lines[-1])}
    shallowest = indent_of(lines[-1])
    for line in reversed(lines[:-1]):
        own = indent_of(line)
        if len(own) < len(shallowest):
            levels.add(own)
            shallowest = own
            if not own:
                break
    if lines[-1].rstrip().endswith(_OPENERS):
        levels.add(indent_of(lines[-1]) + indent_unit(prefix))
    return levels


def model_indent(fill: str, prefix: str, suffix: str) -> str | None:
    """The fill's own indentation, when it is a plausible one for a line inserted after `prefix`: one of
    open_levels(prefix), and not shallower than the next line of `suffix` unless the fill opens a block
    (which that line is then the body of). None when the fill has none worth keeping."""
    lines = [line for line in fill.split("\n") if line.strip()]
    if not lines:
        return None
    own = indent_of(lines[0])
    last = next((line for line in reversed(prefix.split("\n")) if line.strip()), "")
    if last.rstrip().endswith(_OPENERS) and not lines[0].lstrip().startswith(("}", ")", "]")):
        # right after a block opener only a deeper line is valid (any depth, in Python)
        if not (own.startswith(indent_of(last)) and own != indent_of(last)):
            return None
    elif own not in open_levels(prefix):
        return None
    after = next((line for line in suffix.split("\n") if line.strip()), None)
    if own == "" and indent_of(last) and (after is None or indent_of(after)):
        return None  # no indentation at all inside a block is far more often a lapse than a new top-level line
    if after is not None and len(indent_of(after)) > len(own) and not lines[-1].rstrip().endswith(_OPENERS):
        return None
    return own


def reindent(fill: str, indent: str) -> str:
    """Shift `fill` so its first non-blank line has `indent`; relative indentation of later lines is kept."""
    lines = fill.split("\n")
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        return fill
    base = indent_of(first)
    out = []
    for line in lines:
        if not line.strip():
            out.append("")
            continue
        own = indent_of(line)
        if own.startswith(base):
            out.append(indent + line[len(base) :])
        else:  # dedented below the first line: keep the relative dedent, clamped at column 1
            cut = max(0, len(indent) - (len(base) - len(own)))
            out.append(indent[:cut] + line[len(own) :])
    return "\n".join(out)


def first_line(fill: str) -> str:
    """`fill` up to its first line break after some text (leading blank lines are dropped): what a selection of
    one line gets back. A fill with no text at all is returned as it is."""
    lines = fill.split("\n")
    for line in lines:
        if line.strip():
            return line
    return fill


def drop_repeated_suffix(fill: str, suffix: str) -> str:
    """Remove a tail of `fill` that repeats the start of the text after the span (models often re-emit it).

    Whole lines are compared ignoring surrounding whitespace; the longest repeated run of lines is dropped, if
    it holds a word of 3+ characters (a lone "}" or ")" closing the fill's own block is no evidence).
    """
    fill_lines = fill.split("\n")
    suffix_lines = [line.strip() for line in suffix.lstrip("\n").split("\n")]
    for m in range(min(len(fill_lines), len(suffix_lines)), 0, -1):
        tail = [line.strip() for line in fill_lines[-m:]]
        if tail == suffix_lines[:m] and _is_evidence(tail):
            return "\n".join(fill_lines[:-m]).rstrip(" \t")
    # exact repeat of the suffix's first line(s), for in-line spans: "return x)" before ")\n"
    first_line = suffix.split("\n", 1)[0]
    if len(first_line.strip()) >= 4 and re.search(r"\w", first_line) and fill.endswith(first_line):
        return fill[: -len(first_line)]
    return fill


def _is_evidence(lines: list[str]) -> bool:
    return any(re.search(r"\w{3}", line) for line in lines)


def _trim_tail(fill: str) -> str:
    """`fill` without trailing line breaks, blank lines and trailing spaces."""
    lines = fill.rstrip("\n").split("\n")
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines).rstrip(" \t")


def shape_fill(fill: str, prefix: str, replaced: str, suffix: str) -> str:
    """Post-process one fill (LF text) for the place it goes: indentation, repeated suffix, line breaks.

    `prefix`, `replaced` and `suffix` are the text before, inside and after the span (LF). A span that starts
    a line gets the enclosing block's indentation. Whole lines (the span ends before a line break) keep the
    file's line break, so the fill does not end with one; an insertion at the start of a line adds whole
    lines, so it ends with one. In-line spans keep the fill as the model wrote it.
    """
    fill = drop_repeated_suffix(fill, suffix)
    at_line_start = prefix == "" or prefix.endswith("\n")
    if not at_line_start:
        return fill
    # A span over existing lines keeps their indentation. An insertion point or blank lines have none to
    # keep: the model's own indentation wins when it is a plausible level (a dedent such as `return` after a
    # loop, or `else:`), and only a fill without one is shifted to the enclosing block's level.
    own = model_indent(fill, prefix, suffix) if not replaced.strip() else None
    fill = reindent(fill, own if own is not None else target_indent(prefix, replaced, suffix))
    if not fill.strip():
        return ""
    if suffix.startswith("\n"):
        return _trim_tail(fill)  # the span ends a line (an empty line too): that line break stays the file's
    if replaced == "":
        return _trim_tail(fill) + "\n"  # new lines inserted before whatever follows (or at the end of the file)
    if suffix == "":
        return _trim_tail(fill)
    return fill


def python_parses(source: bytes) -> bool:
    """Whether CPython's parser accepts `source` (ast.parse). `python_compiles` is the stricter check fills get."""
    import ast
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # SyntaxWarning (e.g. invalid escapes) must not reach stderr
            ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def python_compiles(source: bytes) -> bool:
    """Whether CPython compiles `source`: the interpreter's own verdict. Tree-sitter's Python grammar recovers
    from indentation errors without ERROR nodes (a block opener with no body, an unexpected indent), and the
    compile stage also refuses what ast.parse accepts (`return` outside a function, `break` outside a loop)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<fill>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return False
    return True


def syntax_errors(language: str, source: bytes) -> int:
    """Number of tree-sitter ERROR and MISSING nodes in `source`."""
    from infill.languages import parse

    return _error_nodes(parse(language, source).root_node)


def _error_nodes(root: Any) -> int:
    """ERROR and MISSING nodes under `root`; subtrees without an error (has_error False) are skipped whole."""
    if not root.has_error:
        return 0
    count = 0
    cursor = root.walk()
    visited_children = False
    while True:
        node = cursor.node
        if not visited_children:
            if node is not None and (node.type == "ERROR" or node.is_missing):
                count += 1
            if node is not None and node.has_error and cursor.goto_first_child():
                continue
        if cursor.goto_next_sibling():
            visited_children = False
        elif cursor.goto_parent():
            visited_children = True
        else:
            return count


# Inputs above this size are checked around the edits only (see SyntaxCheck): a whole-file parse per candidate
# of a 10 MB file took seconds and over a GB (CPython's AST), for a fill of a few tokens.
LOCAL_CHECK_BYTES = 1 << 20
_MAX_CHUNK_SCAN = 1 << 18  # how far to look for a top-level block boundary on each side of an edit


# Texts that can stand in a span when the file around it is judged: if the file compiles (or has no tree-sitter
# error) with one of them, some fill can make it so, and a fill that does not is refused. Line fillers go at
# the indentation of the enclosing block (the levels a new line may take); in-line fillers go where the span is.
_PY_LINE_FILLERS = ("", "pass", "if True:", "try:", "else:", "except Exception:", "finally:")
_PY_INLINE_FILLERS = ("", "0", "pass")
_BRACE_LINE_FILLERS = ("", "{", "}")


@dataclass(frozen=True)
class _Edit:
    """A text put into a byte range of the original: what the checks below apply."""

    start_byte: int
    end_byte: int
    text: str = ""


@dataclass(frozen=True)
class _Verdict:
    errors: int  # tree-sitter ERROR / MISSING nodes
    compiles: bool  # CPython compiles it (Python only; False for other languages)

    def beaten_by(self, other: _Verdict) -> bool:
        return other.errors < self.errors or (other.compiles and not self.compiles)


class SyntaxCheck:
    """The syntax rule every fill obeys (one rule for the fill core, the docstrings writer and the server): a
    candidate may not be worse than the best the spans' surroundings allow.

    "The best" is measured on the input as it stands and with every span holding a filler text (the emptied
    span, `pass`, `if True:` ... at each indentation a line there may take; see _PY_LINE_FILLERS): if any of
    them makes the file compile with CPython (Python), every candidate must compile; and no candidate may have
    more tree-sitter ERROR / MISSING nodes than the fewest any of them has. A span's own text counts unless it
    is a placeholder (a --marker's text is not code). So an emptied `for x in xs:` line, whose file does not
    compile as it stands, still admits only fills with which the file compiles.

    Up to LOCAL_CHECK_BYTES the whole file is checked. Larger inputs are checked the same way on the top-level
    blocks around the edits only ("chunks": from a column-1 line after a blank line before the edit to the
    next such line after it), which is exact whenever those lines are statement boundaries.
    """

    def __init__(self, language: str, data: bytes, spans: Sequence[Any] = ()) -> None:
        self.language = language
        self.data = data
        self.local = len(data) > LOCAL_CHECK_BYTES
        self.spans = sorted(spans, key=lambda s: (s.start_byte, s.end_byte))
        self._chunks: dict[tuple[int, int], _Verdict] = {}  # the best verdict of each original chunk
        if not self.local:
            self.best = self._best(data, self.spans, 0)
        else:
            syntax_errors(language, b"")  # fail early (InputError) when the grammar extra is missing

    @property
    def python(self) -> bool:
        """Whether some text in the spans makes the whole input compile (so every candidate must)."""
        return self.best.compiles

    def _verdict(self, source: bytes) -> _Verdict:
        return _Verdict(syntax_errors(self.language, source), self.language == "python" and python_compiles(source))

    def _best(self, original: bytes, spans: Sequence[Any], offset: int) -> _Verdict:
        """The best verdict of `original` (bytes from `offset` of the input) over its spans' own texts and the
        fillers. InputError when the grammar extra is missing."""
        markers = [_Edit(s.start_byte, s.end_byte) for s in spans if s.placeholder]  # not code: removed
        best = self._verdict(_apply_shifted(original, markers, offset))
        if best.errors == 0 and (best.compiles or self.language != "python"):
            return best
        for variant in self._fillers(original, spans, offset):
            verdict = self._verdict(_apply_shifted(original, variant, offset))
            if best.beaten_by(verdict):
                best = _Verdict(min(best.errors, verdict.errors), best.compiles or verdict.compiles)
            if best.errors == 0 and (best.compiles or self.language != "python"):
                break
        return best

    def _fillers(self, original: bytes, spans: Sequence[Any], offset: int) -> list[list[_Edit]]:
        """Edit sets putting one filler text (at one indentation) into every span at once."""
        if not spans:
            return []
        line_fillers = _PY_LINE_FILLERS if self.language == "python" else _BRACE_LINE_FILLERS
        inline_fillers = _PY_INLINE_FILLERS if self.language == "python" else ("",)
        first = spans[0]
        pos = first.start_byte - offset
        at_line_start = pos == 0 or original[pos - 1 : pos] in (b"\n", b"\r")
        if not at_line_start:
            return [[_Edit(s.start_byte, s.end_byte, f) for s in spans] for f in inline_fillers]
        head = original[max(0, first.start_byte - offset - 8192) : first.start_byte - offset]
        prefix = to_model(head.decode("utf-8", errors="replace"))
        tail = original[first.end_byte - offset : first.end_byte - offset + 8192]
        suffix = to_model(tail.decode("utf-8", errors="replace"))
        indents = sorted(open_levels(prefix) | {target_indent(prefix, "", suffix)}, key=len, reverse=True)
        variants = []
        for filler in line_fillers:
            for indent in indents if filler else [""]:
                edits = []
                for s in spans:
                    end = original[s.end_byte - offset : s.end_byte - offset + 1]
                    text = indent + filler if filler else ""
                    if text and end not in (b"", b"\n", b"\r"):
                        text += "\n"  # an insertion point before text: the filler is a line of its own
                    edits.append(_Edit(s.start_byte, s.end_byte, text))
                variants.append(edits)
        return variants

    def rejection(self, patched: bytes, edits: Sequence[Any] | None = None) -> str | None:
        """Why the candidate (the patched input and its edits, which index the original) is worse than the best
        the spans allow, or None. Without `edits` the whole patched input is judged (large inputs too)."""
        if not self.local or edits is None:
            best = self.best if not self.local else self._best(self.data, self.spans, 0)
            return self._worse(best, patched)
        for start, end in self.chunks(edits):
            original = self.data[start:end]
            inside = [e for e in edits if start <= e.start_byte and e.end_byte <= end]
            if (start, end) not in self._chunks:
                spans = [s for s in self.spans if start <= s.start_byte and s.end_byte <= end]
                self._chunks[start, end] = self._best(original, spans, start)
            reason = self._worse(self._chunks[start, end], _apply_shifted(original, inside, start))
            if reason is not None:
                return reason
        return None

    def _worse(self, best: _Verdict, new: bytes) -> str | None:
        if best.compiles and not python_compiles(new):
            return "does not compile"
        if syntax_errors(self.language, new) > best.errors:
            return "adds syntax errors"
        return None

    def chunks(self, edits: Sequence[Any]) -> list[tuple[int, int]]:
        """Merged [start, end) byte ranges of the original around the edits, on block boundaries."""
        ranges = sorted((_block_start(self.data, e.start_byte), _block_end(self.data, e.end_byte)) for e in edits)
        merged: list[tuple[int, int]] = []
        for start, end in ranges:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged


def _is_boundary(data: bytes, line_start: int) -> bool:
    """A line that starts a top-level block: text in column 1 (not a closing bracket, comment or quote) after a
    blank line."""
    first = data[line_start : line_start + 1]
    if line_start == 0:
        return True
    if not first or first in b" \t\r\n)]}#\"'/*":
        return False
    prev_end = line_start - 1  # the "\n" ending the previous line
    prev_start = data.rfind(b"\n", 0, prev_end) + 1
    return not data[prev_start:prev_end].strip()


def _block_start(data: bytes, offset: int) -> int:
    at = data.rfind(b"\n", 0, offset) + 1
    limit = max(0, offset - _MAX_CHUNK_SCAN)
    while at > limit and not _is_boundary(data, at):
        at = data.rfind(b"\n", 0, at - 1) + 1
    return at if at > limit or at == 0 else 0


def _block_end(data: bytes, offset: int) -> int:
    limit = min(len(data), offset + _MAX_CHUNK_SCAN)
    at = data.find(b"\n", offset)
    while 0 <= at < limit:
        if _is_boundary(data, at + 1) and at + 1 < len(data):
            return at + 1
        at = data.find(b"\n", at + 1)
    return len(data)


def _apply_shifted(chunk: bytes, edits: Sequence[Any], offset: int) -> bytes:
    out, at = [], 0
    for e in sorted(edits, key=lambda e: (e.start_byte, e.end_byte)):
        out += [chunk[at : e.start_byte - offset], e.text.encode("utf-8")]
        at = e.end_byte - offset
    out.append(chunk[at:])
    return b"".join(out)


def breaks_syntax(language: str | None, before: bytes, after: bytes) -> bool:
    """Whether `after` is syntactically worse than `before` by the fill rule (SyntaxCheck with no span: Python
    that CPython compiled must still compile; no more tree-sitter ERROR / MISSING nodes). Plain text (language
    None), or a missing grammar extra, never is."""
    if language is None:
        return False
    from infill.errors import InputError

    try:
        return SyntaxCheck(language, before).rejection(after) is not None
    except InputError:  # the grammar extra is not installed: nothing to check with
        return False
