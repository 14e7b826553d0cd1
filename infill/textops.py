"""Text post-processing of fills: line endings, indentation, repeated-suffix removal (the checks a fill must pass
are infill.core.checks).

Everything here works on one span at a time and on strings; nothing imports torch. The model sees "\\n" line
endings only; `restore_newlines` puts the file's own line ending back into a fill.
"""

from __future__ import annotations

import re

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


def indent_style(text: str) -> str | None:
    """The indentation step of `text` (indent_unit) when one of its lines is indented, else None: a file with no
    indented line says nothing about tabs or spaces."""
    if any(line[:1] in (" ", "\t") and line.strip() for line in text.split("\n")):
        return indent_unit(text)
    return None


def in_style(indent: str, style: str | None) -> bool:
    """Whether `indent` is written as a file with `style` (indent_style) writes it: no spaces where it indents
    with tabs, no tab where it indents with spaces."""
    if style is None:
        return True
    return " " not in indent if style == "\t" else "\t" not in indent


def restyle(indent: str, style: str | None, step: int) -> str:
    """`indent` written in `style` (indent_style): with tabs, a tab for each `step` spaces (the rest stays
    spaces); with spaces, each tab one step of the style. Unchanged when it already is, or `style` is None."""
    if in_style(indent, style):
        return indent
    if style == "\t":
        width = len(indent.expandtabs(step))
        return "\t" * (width // step) + " " * (width % step)
    assert style is not None
    return indent.replace("\t", style)


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
        # right after a block opener only a deeper line is valid (any depth, in Python), in the file's own
        # indentation: a model that indents with spaces writes no level of a file indented with tabs
        if not (own.startswith(indent_of(last)) and own != indent_of(last)):
            return None
        if not in_style(own[len(indent_of(last)) :], indent_style(prefix + suffix)):
            return None
    elif own not in open_levels(prefix):
        return None
    after = next((line for line in suffix.split("\n") if line.strip()), None)
    if own == "" and indent_of(last) and (after is None or indent_of(after)):
        return None  # no indentation at all inside a block is far more often a lapse than a new top-level line
    if after is not None and len(indent_of(after)) > len(own) and not lines[-1].rstrip().endswith(_OPENERS):
        return None
    return own


def reindent(fill: str, indent: str, style: str | None = None) -> str:
    """Shift `fill` so its first non-blank line has `indent`; relative indentation of later lines is kept,
    written in `style` (indent_style: the file's tabs or spaces, when known)."""
    lines = fill.split("\n")
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        return fill
    base = indent_of(first)
    unit = indent_unit("\n".join(line[len(base) :] if line.startswith(base) else line for line in lines))
    step = len(unit) if unit != "\t" else 4  # the fill's own step, relative to its first line
    out = []
    for line in lines:
        if not line.strip():
            out.append("")
            continue
        own = indent_of(line)
        if own.startswith(base):
            out.append(indent + restyle(own[len(base) :], style, step) + line[len(own) :])
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


def one_line_cut(fill: str, at_line_start: bool) -> str:
    """What a one-line span keeps of `fill`: a whole line gets its first line of text back (`first_line`); a span
    that starts inside a line gets the rest of that line (a fill that begins with a line break leaves it as it
    is)."""
    return first_line(fill) if at_line_start else fill.split("\n", 1)[0]


def line_done(text: str, at_line_start: bool) -> bool:
    """Whether `text`, the beginning of a fill, already holds everything `one_line_cut` keeps of any fill that
    starts with it: whatever is written after it is cut away (decoders stop there)."""
    return "\n" in (text.lstrip() if at_line_start else text)


def block_opener(prefix: str, fill: str, indent: int = -1) -> int:
    """The indentation a block span's lines after the first must exceed: that of the last line of text of
    `prefix` (the opener just before the span), or with `indent` (a body: its definition's indentation) the
    lower of `indent` and one less than the fill's first line of text (a fill written without the body's
    indentation, which the pipeline adds, never ends before a line at its own level)."""
    if indent >= 0:
        first = next((line for line in fill.split("\n") if line.strip()), "")
        return min(indent, len(indent_of(first)) - 1)
    return len(indent_of(next((line for line in reversed(prefix.split("\n")) if line.strip()), "")))


def block_cut(fill: str, prefix: str, max_lines: int, indent: int = -1) -> str:
    """What a block span keeps of `fill` (a multi-line suggestion on a blank line after a block opener, or a
    Python body of --function / --class): from its first line of text, the lines up to the first that dedents to
    the opener's indentation (`block_opener`) or less, at most `max_lines` lines of text (0: no limit)."""
    opener = block_opener(prefix, fill, indent)
    kept: list[str] = []
    for line in fill.split("\n"):
        if not kept and not line.strip():
            continue  # leading blank lines
        if kept and line.strip() and len(indent_of(line)) <= opener:
            break  # the block ended: this line belongs to the code after it
        kept.append(line)
        if sum(1 for k in kept if k.strip()) == max_lines:
            break
    return "\n".join(kept) if kept else fill


def block_done(text: str, prefix: str, max_lines: int, indent: int = -1) -> bool:
    """Whether `text`, the beginning of a fill, already holds everything `block_cut` keeps of any fill that
    starts with it: a line after the first has text at the opener's indentation or less, or `max_lines` lines of
    text are complete (decoders stop there)."""
    opener = block_opener(prefix, text, indent)
    lines = text.lstrip("\n").split("\n")
    if any(line.strip() and len(indent_of(line)) <= opener for line in lines[1:]):
        return True
    return bool(max_lines) and sum(1 for line in lines[:-1] if line.strip()) >= max_lines


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
    indent = own if own is not None else target_indent(prefix, replaced, suffix)
    fill = reindent(fill, indent, indent_style(prefix + replaced + suffix))
    if not fill.strip():
        return ""
    if suffix.startswith("\n"):
        return _trim_tail(fill)  # the span ends a line (an empty line too): that line break stays the file's
    if replaced == "":
        return _trim_tail(fill) + "\n"  # new lines inserted before whatever follows (or at the end of the file)
    if suffix == "":
        return _trim_tail(fill)
    return fill
