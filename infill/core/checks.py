"""The checks every fill must pass (one rule for the fill core, the docstrings writer and the server): the syntax
rule (SyntaxCheck: CPython's compiler for Python, tree-sitter ERROR / MISSING nodes for every language). The
monitors, which only rank what passes, are infill.core.monitor.

Nothing here imports torch.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

from infill.textops import indent_of, open_levels, target_indent, to_model


def python_compiles(source: bytes) -> bool:
    """Whether CPython compiles `source`: the interpreter's own verdict. Tree-sitter's Python grammar recovers
    from indentation errors without ERROR nodes (a block opener with no body, an unexpected indent), and the
    compile stage also refuses what ast.parse accepts (`return` outside a function, `break` outside a loop)."""
    return python_error_line(source) is None


def python_error_line(source: bytes) -> int | None:
    """None when CPython compiles `source`, else the 1-based line its first error names (0 when it names none)."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(source, "<fill>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return exc.lineno or 0
    except (ValueError, RecursionError, MemoryError, OverflowError):
        return 0
    return None


def syntax_errors(language: str, source: bytes, tree: Any = None) -> int:
    """Number of tree-sitter ERROR and MISSING nodes in `source` (`tree`: its parse, when the caller has it), plus
    the errors a grammar hides (_hidden_errors)."""
    from infill.languages import error_nodes, parse

    root = (tree if tree is not None else parse(language, source)).root_node
    return error_nodes(root) + _hidden_errors(language, source, root)


_BRACE_ARROWS = ("javascript", "typescript", "tsx")


@cache
def _object_arrow_bodies(language: str) -> Any:
    import tree_sitter

    from infill.languages import grammar

    return tree_sitter.Query(grammar(language), "(arrow_function body: (object) @body)")


def _hidden_errors(language: str, source: bytes, root: Any) -> int:
    """Syntax errors the grammar parses without an ERROR node. In JavaScript and TypeScript, a `{` after `=>`
    always opens a block, yet tree-sitter reads `() => { render() {} }` as an arrow returning an object (no
    engine does): such a body counts as an error unless it also reads as a block (`() => { a: 1 }`, a label)."""
    if language not in _BRACE_ARROWS:
        return 0
    import tree_sitter

    from infill.languages import parse

    count = 0
    for node in tree_sitter.QueryCursor(_object_arrow_bodies(language)).captures(root).get("body", []):
        if parse(language, b"function _() " + source[node.start_byte : node.end_byte]).root_node.has_error:
            count += 1
    return count


# Inputs above this size are checked around the edits only (see SyntaxCheck): a whole-file parse per candidate
# of a 10 MB file took seconds and over a GB (CPython's AST), for a fill of a few tokens.
LOCAL_CHECK_BYTES = 1 << 20
_MAX_JUDGED = 256  # candidates whose verdict one SyntaxCheck keeps (a fill judges a few dozen)


# Texts that can stand in a span when the file around it is judged: if the file compiles (or has no tree-sitter
# error) with one of them, some fill can make it so, and a fill that does not is refused. Line fillers go at
# the indentation of the enclosing block (the levels a new line may take); in-line fillers go where the span is.
_PY_LINE_FILLERS = (
    "",
    "pass",
    "if True:",
    "while True:",
    "def _():",
    "async def _():",
    "try:",
    "else:",
    "except Exception:",
    "finally:",
    # an emptied line that opened or closed a bracket the lines around it continue
    "_ = (",
    "_ = [",
    "_ = {",
    "_ = f(",
    "def _(",
    "from _ import (",
    ")",
    "]",
    "}",
    "):",
    "),",
    "],",
    "},",
    # a line inside brackets (an argument, an element, a parameter), and one that opened or closed a string
    "_,",
    "f(",
    '"""',
    "'''",
)
_NEAR_LINES = 60  # how far from a span CPython's first error may be for a text in the span to mend it
_MAX_FILLERS = 160  # filler texts tried at most, at their indentations (a bound on one fill's set-up cost)
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


class SyntaxCheck:
    """The syntax rule every fill obeys (one rule for the fill core, the docstrings writer and the server): a
    candidate may not be worse than the best the spans' surroundings allow.

    "The best" is measured on the input as it stands and with every span holding a filler text (the emptied
    span, `pass`, `if True:` ... at each indentation a line there may take; see _PY_LINE_FILLERS): if any of
    them makes the file compile with CPython (Python), every candidate must compile (and add no tree-sitter
    error); for other languages, if one leaves no tree-sitter ERROR / MISSING node, neither may a candidate.
    Otherwise (no text in the spans can make the file clean) a candidate may not add tree-sitter errors to the
    input as it stands. A span's own text counts unless it is a placeholder (a --marker's text is not code).
    So an emptied `for x in xs:` line, whose file does not compile as it stands, still admits only fills with
    which the file compiles.

    Up to LOCAL_CHECK_BYTES the whole file is checked. Larger inputs are checked the same way on the top-level
    statements around the edits only ("chunks": from the start of the top-level statement, in column 1, that
    holds the edit's start, or from the edit when it starts a statement of its own after one, to the start of the
    next one after its end, or the one after that for a decorator; see chunks()).
    """

    def __init__(self, language: str, data: bytes, spans: Sequence[Any] = ()) -> None:
        self.language = language
        self.data = data
        self.local = len(data) > LOCAL_CHECK_BYTES
        self.spans = sorted(spans, key=lambda s: (s.start_byte, s.end_byte))
        self._chunks: dict[tuple[int, int], _Verdict] = {}  # the best verdict of each original chunk
        self._ran_over: dict[tuple[int, int], bool] = {}  # per span: whether its own text's token runs over
        # verdicts of whole candidates already judged (beam search's check of a finished fill, then the pool's
        # check of the same fill), by a digest of the patched bytes; and the last candidate's parse (its error
        # count and its run-over test read the same tree)
        self._judged: dict[tuple[bytes, tuple[tuple[int, int, str], ...]], str | None] = {}
        self._parsed: tuple[bytes, Any] | None = None
        self._lines: dict[bytes, int | None] = {}  # python_error_line by a digest of the text compiled
        self.compiling: bytes | None = None  # the input with some text in the spans that compiles (Python)
        self._neutral: tuple[bytes, int] | None | Literal[False] = False  # neutral(), False until asked
        self._starts: list[int] | None = None  # _statement_starts(), None until asked
        self._whole: Any = None  # the original's parse (large inputs): candidates' chunks are parsed from it
        # the chunk _tree may parse next, as _reparse takes it: a candidate that does not compile is never parsed
        self._pending: tuple[bytes, int, int, Sequence[Any]] | None = None
        self._statements: list[tuple[int, int]] = []  # every top-level statement in column 1: (start, end)
        if not self.local:
            self.best = self._best(data, self.spans, 0)
        else:
            syntax_errors(language, b"")  # fail early (InputError) when the grammar extra is missing

    def neutral(self) -> tuple[bytes, int] | None:
        """The input with neutral text in its spans that compiles (Python), and the 1-based line where its last
        span ends: `compiling` when the spans held no text of their own (blanks aside), else the first filler
        that compiles in place of that text (a span over a line of code keeps the line in `compiling`, and a
        name only that line bound looks bound there). None when nothing compiles."""
        if self.compiling is None or not self.spans:
            return None
        if not any(self.data[s.start_byte : s.end_byte].strip() and not s.placeholder for s in self.spans):
            return self.compiling, self.data.count(b"\n", 0, self.spans[-1].end_byte) + 1
        if self._neutral is False:
            self._neutral = None
            for variant in self._fillers(self.data, self.spans, 0)[:_MAX_FILLERS]:
                source = _apply_shifted(self.data, variant, 0)
                if self._error_line(source) is None:
                    *before, last = variant
                    shift = sum(len(e.text.encode()) - (e.end_byte - e.start_byte) for e in before)
                    end = last.start_byte + shift + len(last.text.encode())
                    self._neutral = source, source.count(b"\n", 0, end) + 1
                    break
        return self._neutral

    @property
    def python(self) -> bool:
        """Whether some text in the spans makes the whole input compile (so every candidate must)."""
        return self.best.compiles

    def _verdict(self, source: bytes) -> _Verdict:
        compiles = self.language == "python" and self._error_line(source) is None
        return _Verdict(syntax_errors(self.language, source, self._tree(source)), compiles)

    def _error_line(self, source: bytes) -> int | None:
        """python_error_line(source), each text compiled once (the input as it stands is also the empty filler's
        text, and a filler that compiles is judged again)."""
        key = hashlib.blake2b(source, digest_size=16).digest()
        if key not in self._lines:
            if len(self._lines) >= _MAX_JUDGED:
                self._lines.clear()
            self._lines[key] = python_error_line(source)
        return self._lines[key]

    def _best(self, original: bytes, spans: Sequence[Any], offset: int) -> _Verdict:
        """The verdict a candidate is held to: the input's own (spans with their text, markers removed), or, when
        a filler makes the input clean (it compiles, for Python; no tree-sitter error, for other languages), that
        clean verdict. A filler that only lowers the error count of a broken input sets no bar: in a file broken
        elsewhere (or cut from a larger one) the count moves with any text. The first variant that compiles is
        kept as `self.compiling` (the static monitor's reference). InputError when the grammar extra is
        missing."""
        markers = [_Edit(s.start_byte, s.end_byte) for s in spans if s.placeholder]  # not code: removed
        source = _apply_shifted(original, markers, offset)
        own = self._verdict(source)
        self.compiling = source if own.compiles else None
        if self._clean(own) or not self._near(source, original, spans, offset):
            return own
        for variant in self._fillers(original, spans, offset)[:_MAX_FILLERS]:
            source = _apply_shifted(original, variant, offset)
            if self.language == "python" and self._error_line(source) is not None:
                continue  # the compiler alone decides; tree-sitter only counts the winner's errors
            verdict = self._verdict(source)
            if self._clean(verdict):
                if verdict.compiles:
                    self.compiling = source
                return _Verdict(min(own.errors, verdict.errors), verdict.compiles)
        return own

    def _near(self, source: bytes, original: bytes, spans: Sequence[Any], offset: int) -> bool:
        """Whether CPython's first error in `source` is near a span (Python): an error far from every span is
        one no text in them can mend, so the fillers are not tried (on a large broken file they would cost
        dozens of whole-file compiles for nothing). So is an error without a line: a limit of the compiler
        (nesting too deep for it: RecursionError, MemoryError), which each filler hit again, at up to a second
        per compile of a long expression (a minute per fill)."""
        if self.language != "python" or not spans:
            return True
        where = self._error_line(source)
        if not where:
            return False
        lines = [original.count(b"\n", 0, s.start_byte - offset) + 1 for s in spans]
        return any(abs(where - line) <= _NEAR_LINES for line in lines)

    def _clean(self, verdict: _Verdict) -> bool:
        return verdict.compiles if self.language == "python" else verdict.errors == 0

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
        # the levels a new line may take after the prefix, and those of the next lines (a file indented in
        # uneven steps, whose emptied line was at a level only the lines below it show)
        below = {indent_of(line) for line in suffix.split("\n")[:8] if line.strip()}
        levels = open_levels(prefix) | {target_indent(prefix, "", suffix)} | below
        indents = sorted(levels, key=len, reverse=True)
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
        the spans allow, or None. Without `edits` the whole patched input is judged (large inputs too). A
        candidate judged before gets the same verdict without a second compile and parse."""
        key = (
            hashlib.blake2b(patched, digest_size=16).digest(),
            tuple((e.start_byte, e.end_byte, e.text) for e in edits or ()),
        )
        if key not in self._judged:
            if len(self._judged) >= _MAX_JUDGED:
                self._judged.clear()
            self._judged[key] = self._rejection(patched, edits)
        return self._judged[key]

    def _rejection(self, patched: bytes, edits: Sequence[Any] | None) -> str | None:
        if not self.local or edits is None:
            best = self.best if not self.local else self._best(self.data, self.spans, 0)
            return self._worse(best, patched) or (self._runs_over(self.data, patched, edits, 0) if edits else None)
        for start, end in self.chunks(edits):
            original = self.data[start:end]
            inside = [e for e in edits if start <= e.start_byte and e.end_byte <= end]

            def chunk_best(start: int = start, end: int = end, original: bytes = original) -> _Verdict:
                if (start, end) not in self._chunks:
                    spans = [s for s in self.spans if start <= s.start_byte and s.end_byte <= end]
                    self._pending = (original, start, end, ())
                    self._chunks[start, end] = self._best(original, spans, start)
                return self._chunks[start, end]

            candidate = _apply_shifted(original, inside, start)
            self._pending = (candidate, start, end, inside)
            reason = self._worse(chunk_best, candidate) or self._runs_over(original, candidate, inside, start)
            if reason is not None:
                return reason
        return None

    def _runs_over(self, original: bytes, patched: bytes, edits: Sequence[Any], offset: int) -> str | None:
        """Why a fill that passes the syntax rule still changes the code after it, or None: a string or comment
        it opens runs over the text after its span (two `\"\"\"` fills make one string of the class between
        them; both compile). It may where the span's own text did so (a span ending inside a token)."""
        shift = 0
        for e in sorted(edits, key=lambda e: (e.start_byte, e.end_byte)):
            start, end, size = e.start_byte - offset, e.end_byte - offset, len(e.text.encode("utf-8"))
            if _token_runs_over(self.language, patched, start + shift, start + shift + size, self._tree(patched)):
                key = (e.start_byte, e.end_byte)
                if key not in self._ran_over:  # the span's own text, parsed once per span
                    self._ran_over[key] = _token_runs_over(self.language, original, start, end)
                if not self._ran_over[key]:
                    return "opens a string or comment that runs over the code after it"
            shift += size - (end - start)
        return None

    def _worse(self, best: _Verdict | Callable[[], _Verdict], new: bytes) -> str | None:
        """Why `new` is worse than `best`, or None. `best` may be a function that works it out: it is called
        only when the candidate is not clean (a chunk's best costs a compile and a parse of the original chunk,
        seconds for a statement megabytes long, and nothing is worse than a candidate that compiles with no
        tree-sitter error)."""
        bar = best if isinstance(best, _Verdict) else None

        def verdict() -> _Verdict:
            nonlocal bar
            if bar is None:
                assert not isinstance(best, _Verdict)
                bar = best()
            return bar

        if self.language == "python" and self._error_line(new) is not None and verdict().compiles:
            return "does not compile"
        errors = syntax_errors(self.language, new, self._tree(new))
        if errors and errors > verdict().errors:
            return "adds syntax errors"
        return None

    def _statement_starts(self) -> list[int]:
        """Byte offsets (sorted) where a top-level statement of the original starts in column 1, after the first
        byte (self._statements has them all, with their ends); the original is parsed once, on the first call."""
        if self._starts is None:
            from infill.languages import parse

            self._whole = parse(self.language, self.data)
            root = self._whole.root_node
            self._statements = [(c.start_byte, c.end_byte) for c in root.children if c.start_point[1] == 0]
            self._starts = [start for start, _ in self._statements if start > 0]
        return self._starts

    def _starts_own_statements(self, e: Any) -> bool:
        """Whether edit `e` (in Python) begins a line after the end of the top-level statement before it (only
        blank space between them) with text whose first line of code is in column 1. Python then
        reads it apart from that statement, as at the file's start (a cookie, a `__future__` import or a
        `global` aside, which chunks() handles), so the chunk need not hold that statement: a blank line after
        a statement megabytes long is checked without it. A fill that continues that statement (an indented line, an
        `else:`) is judged with it."""
        before = bisect.bisect_right(self._statements, (e.start_byte, len(self.data))) - 1
        if self.language != "python" or before < 0 or e.start_byte < self._statements[before][1]:
            return False
        gap = self.data[self._statements[before][1] : e.start_byte]
        if gap.strip() or self.data[e.start_byte - 1 : e.start_byte] != b"\n":
            return False
        first = next((line for line in e.text.splitlines() if line.strip()), "")
        return not first[:1].isspace() and not re.match(r"(else|elif|except|finally)\b", first)

    def _tree(self, source: bytes) -> Any:
        """The tree-sitter parse of `source`, kept for the next call with the same bytes (a candidate's error
        count and its run-over test parse the same text)."""
        from infill.languages import parse

        if self._parsed is None or self._parsed[0] != source:
            if self._pending is not None and self._pending[0] == source:
                self._reparse(*self._pending)  # a chunk of a large input: from the input's parse, when it pays
            if self._parsed is None or self._parsed[0] != source:
                self._parsed = (source, parse(self.language, source))
        return self._parsed[1]

    def _reparse(self, candidate: bytes, start: int, end: int, edits: Sequence[Any]) -> None:
        """Parse `candidate` (chunk [start, end) of the original with `edits`) incrementally, from the original's
        parse with the text outside the chunk cut and the edits applied, and keep it for _tree: a chunk that is
        one statement megabytes long is not parsed from scratch per candidate. A tree with an error is parsed
        again from scratch, so the error count a candidate is judged by is a fresh parse's."""
        import tree_sitter

        from infill.languages import grammar

        if self._whole is None or b"\r" in candidate or 2 * (end - start) < len(self.data):
            # (languages.parse reads a lone CR as a LF: its rows are not those counted here.) Editing the whole
            # input's tree costs about what parsing it does (a second for 20 MB): it pays only for a chunk that
            # is most of the input, not for a function among thousands
            return
        tree = self._whole.copy()
        size = len(self.data)
        tree.edit(end, size, end, _point(self.data, end), _point(self.data, size), _point(self.data, end))
        tree.edit(0, start, 0, (0, 0), _point(self.data, start), (0, 0))
        chunk = self.data[start:end]
        for e in sorted(edits, key=lambda e: (e.start_byte, e.end_byte), reverse=True):
            at, stop, text = e.start_byte - start, e.end_byte - start, e.text.encode("utf-8")
            first = _point(chunk, at)
            lines = text.count(b"\n")
            after = (first[0] + lines, len(text) - text.rfind(b"\n") - 1 if lines else first[1] + len(text))
            tree.edit(at, stop, at + len(text), first, _point(chunk, stop), after)
        parsed = tree_sitter.Parser(grammar(self.language)).parse(candidate, tree)
        if not parsed.root_node.has_error:
            self._parsed = (candidate, parsed)

    def chunks(self, edits: Sequence[Any]) -> list[tuple[int, int]]:
        """Merged [start, end) byte ranges of the original around the edits, on statement boundaries: the
        top-level statements of the original's parse that start in column 1. A line in column 1 after a blank line
        is not enough: inside a multi-line string it starts no statement, and a fill balancing its quotes inside
        such a chunk compiled there while it broke the file. An edit whose text could clash with the statements
        around its chunk (a __future__ import, which belongs at the file's start; a module-level `global` of a
        name bound before it) is judged on the whole file."""
        if any("__future__" in e.text or "global" in e.text for e in edits):
            return [(0, len(self.data))]
        starts = self._statement_starts()
        ranges = []
        for e in edits:
            at = bisect.bisect_right(starts, e.start_byte) - 1
            after = bisect.bisect_right(starts, e.end_byte)
            start = e.start_byte if self._starts_own_statements(e) else starts[at] if at >= 0 else 0
            if any(line.startswith("@") for line in e.text.splitlines()):
                after += 1  # a decorator in column 1 belongs to the statement after the edit: it is judged with it
            ranges.append((start, starts[after] if after < len(starts) else len(self.data)))
        ranges.sort()
        merged: list[tuple[int, int]] = []
        for start, end in ranges:
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
            else:
                merged.append((start, end))
        return merged


def _token_runs_over(language: str, source: bytes, start: int, end: int, tree: Any = None) -> bool:
    """Whether a token (a string's text, a comment, a name) that begins in source[start:end] also holds the first
    text after it (whitespace skipped); `tree` is the parse of `source`, when the caller has it."""
    from infill.languages import parse

    after = end + len(source[end:]) - len(source[end:].lstrip())
    if after >= len(source) or start == end == after:
        return False
    root = (tree if tree is not None else parse(language, source)).root_node
    node = root.descendant_for_byte_range(after, after + 1)
    return node is not None and start <= node.start_byte <= end and node.start_byte < after


def _point(data: bytes, at: int) -> tuple[int, int]:
    """Tree-sitter's (row, byte column) of byte offset `at` in `data`."""
    return data.count(b"\n", 0, at), at - (data.rfind(b"\n", 0, at) + 1)


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
