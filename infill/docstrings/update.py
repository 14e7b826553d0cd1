"""`--update`: bring the parameter entries of an existing docstring up to date.

Entries for parameters that no longer exist are removed; entries for new parameters are added (with
`min-probability` 0 the model writes their descriptions, through the same one-call-per-definition seam and
monitor; otherwise the names-only text). Every other line the user wrote
is kept byte for byte, in its order.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from infill.docstrings.confidence import calibrator_for, threshold
from infill.docstrings.config import DocstringConfig
from infill.docstrings.facts import Facts, from_skeleton
from infill.docstrings.fill import SlotFiller, slot_span
from infill.docstrings.finder import Definition
from infill.docstrings.monitor import judge
from infill.docstrings.skeleton import Param, Skeleton, Slot
from infill.docstrings.styles import numpy_parameter_line
from infill.docstrings.text import fallback_description

SENTINEL = "\x00{}\x00"
_GOOGLE_HEAD = re.compile(r"^(\s*)(Args|Arguments|Parameters|Params|Keyword Args|Keyword Arguments):\s*$")
_GOOGLE_ANY_HEAD = re.compile(r"^(\s*)[A-Z][A-Za-z ]*:\s*$")
_NUMPY_HEAD = re.compile(r"^(\s*)Parameters\s*$")
_SPHINX_FIELD = re.compile(r"^(\s*):(\w+)\s*([^:]*?)\s*:")
_LITERAL = re.compile(r'^([rRuU]?)("""|\'\'\'|"|\')(.*)\2$', re.S)


@dataclass
class Update:
    text: str  # the new docstring literal
    confidence: float | None
    fallbacks: list[str] = field(default_factory=list)


@dataclass
class _Entry:
    name: str  # bare parameter name (no stars)
    lines: list[str]


def _indent_of(line: str) -> int:
    return len(line) - len(line.lstrip())


def _entry_block(lines: list[str], start: int, section_indent: int, head: re.Pattern[str] | None) -> int:
    """Index one past the last line of the section whose entries begin at `start`."""
    i = start
    while i < len(lines):
        line = lines[i]
        if line.strip() and _indent_of(line) <= section_indent:
            break
        if not line.strip():  # a blank line ends the section unless it is followed by more of it
            j = i
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j >= len(lines) or _indent_of(lines[j]) <= section_indent:
                break
        i += 1
    return i


def _split_entries(block: list[str], pattern: re.Pattern[str]) -> tuple[list[str], list[_Entry]] | None:
    """Entries of a section body: a line matching `pattern` at the shallowest indent starts one."""
    content = [b for b in block if b.strip()]
    if not content:
        return [], []
    entry_indent = min(_indent_of(b) for b in content)
    preamble: list[str] = []
    entries: list[_Entry] = []
    for line in block:
        match = pattern.match(line.strip()) if line.strip() and _indent_of(line) == entry_indent else None
        if match:
            entries.append(_Entry(match.group(1).lstrip("*"), [line]))
        elif entries:
            entries[-1].lines.append(line)
        else:
            preamble.append(line)
    return preamble, entries


def _merge(entries: list[_Entry], params: list[Param], new_entry: dict[str, list[str]]) -> list[_Entry]:
    wanted = [p.bare for p in params]
    kept = [e for e in entries if e.name in wanted]
    for index, param in enumerate(params):
        if any(e.name == param.bare for e in kept):
            continue
        before = {p.bare for p in params[:index]}
        position = 0
        for k, e in enumerate(kept):
            if e.name in before:
                position = k + 1
        kept.insert(position, _Entry(param.bare, new_entry[param.name]))
    return kept


def _new_lines(style: str, p: Param, indent: str) -> list[str]:
    slot = SENTINEL.format(f"param:{p.name}")
    if style == "numpy":
        return [indent + numpy_parameter_line(p), f"{indent}    {slot}"]
    if style == "sphinx":
        return [f"{indent}:param {p.bare}: {slot}"]
    return [f"{indent}{p.name}: {slot}"]


def _update_lines(lines: list[str], params: list[Param], style: str, base: str) -> list[str] | None:
    """The docstring's content lines with parameter entries fixed, or None when nothing changes."""
    if style == "sphinx":
        return _update_sphinx(lines, params, base)
    head = _NUMPY_HEAD if style == "numpy" else _GOOGLE_HEAD
    entry_re = re.compile(r"^(\*{0,2}\w+)\s*:" if style == "numpy" else r"^(\*{0,2}\w+)\s*(\([^)]*\))?\s*:")
    if style == "numpy":
        entry_re = re.compile(r"^(\*{0,2}\w+)\s*(:.*)?$")
    for i, line in enumerate(lines):
        if not head.match(line):
            continue
        if style == "numpy" and not (i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"}):
            continue
        section_indent = _indent_of(line)
        start = i + (2 if style == "numpy" else 1)
        end = _entry_block(lines, start, section_indent - (1 if style == "numpy" else 0), head)
        if style == "numpy":  # numpy entries sit at the section's indent; the section ends at the next header
            end = start
            while end < len(lines):
                if end + 1 < len(lines) and lines[end].strip() and set(lines[end + 1].strip()) == {"-"}:
                    break
                end += 1
            while end > start and not lines[end - 1].strip():
                end -= 1
        split = _split_entries(lines[start:end], entry_re)
        if split is None:
            return None
        preamble, entries = split
        indent = " " * (section_indent + (0 if style == "numpy" else 4))
        new = {p.name: _new_lines(style, p, indent) for p in params}
        merged = _merge(entries, params, new)
        if [e.name for e in merged] == [e.name for e in entries]:
            return None
        if not merged:  # every parameter is gone: drop the whole section and a blank line before it
            cut = i - 1 if i > 0 and not lines[i - 1].strip() else i
            tail = lines[end:]
            if cut > 0 and tail and not tail[0].strip() and not lines[cut - 1].strip():
                tail = tail[1:]
            return lines[:cut] + tail
        body = preamble + [line for e in merged for line in e.lines]
        return lines[:start] + body + lines[end:]
    if not params:
        return None
    return _add_section(lines, params, style, base)


def _add_section(lines: list[str], params: list[Param], style: str, base: str) -> list[str]:
    """A new parameters section after the summary and description, before any other section."""
    if style == "numpy":
        section = [f"{base}Parameters", f"{base}----------"]
        for p in params:
            section += _new_lines(style, p, base)
    else:
        section = [f"{base}Args:"] + [line for p in params for line in _new_lines(style, p, base + "    ")]
    position = len(lines)
    for i, line in enumerate(lines[1:], start=1):
        is_google = style == "google" and _GOOGLE_ANY_HEAD.match(line) and _indent_of(line) == len(base)
        is_numpy = style == "numpy" and i + 1 < len(lines) and set(lines[i + 1].strip()) == {"-"} and line.strip()
        if is_google or is_numpy:
            position = i
            break
    before = lines[:position]
    while len(before) > 1 and not before[-1].strip():
        before = before[:-1]
    after = lines[position:]
    return before + [""] + section + ([""] + after if after and any(a.strip() for a in after) else after)


def _update_sphinx(lines: list[str], params: list[Param], base: str) -> list[str] | None:
    wanted = {p.bare for p in params}
    out: list[str] = []
    present: list[str] = []
    skipping = False
    field_indent = None
    for line in lines:
        match = _SPHINX_FIELD.match(line)
        if match and match.group(2) in ("param", "parameter", "arg", "type"):
            name = match.group(3).split()[-1].lstrip("*") if match.group(3) else ""
            field_indent = _indent_of(line)
            skipping = name not in wanted
            if not skipping and match.group(2) != "type":
                present.append(name)
            if skipping:
                continue
        elif skipping and line.strip() and field_indent is not None and _indent_of(line) > field_indent:
            continue
        else:
            skipping = False
        out.append(line)
    missing = [p for p in params if p.bare not in present]
    if not missing and out == lines:
        return None
    if missing:
        last_param = max((i for i, line in enumerate(out) if re.match(r"^\s*:(param|type)\b", line)), default=None)
        if last_param is None:
            first_field = next((i for i, line in enumerate(out) if i > 0 and _SPHINX_FIELD.match(line)), None)
            new = [line for p in missing for line in _new_lines("sphinx", p, base)]
            if first_field is None:
                content_end = len(out)
                while content_end > 1 and not out[content_end - 1].strip():
                    content_end -= 1
                return out[:content_end] + [""] + new + out[content_end:]
            return out[:first_field] + new + out[first_field:]
        insert_at = last_param + 1
        while (
            insert_at < len(out) and out[insert_at].strip() and _indent_of(out[insert_at]) > _indent_of(out[last_param])
        ):
            insert_at += 1
        new = [line for p in missing for line in _new_lines("sphinx", p, base)]
        return out[:insert_at] + new + out[insert_at:]
    return out


def update_docstring(
    source: bytes, d: Definition, skeleton: Skeleton, style: str, cfg: DocstringConfig, filler: SlotFiller
) -> Update | None:
    """The updated docstring literal of `d`, or None when its entries already match the signature."""
    if d.docstring is None or skeleton.is_property or skeleton.kind == "module":
        return None
    literal = source[d.docstring[0] : d.docstring[1]].decode("utf-8").replace("\r\n", "\n")
    match = _LITERAL.match(literal)
    if match is None:
        return None  # a concatenated docstring is left alone
    prefix, quotes, content = match.groups()
    if quotes in ('"', "'"):  # 'Summary.' grows lines, which need triple quotes; escapes read the same in them
        if '"' in content:
            return None
        quotes = '"""'
    lines = content.split("\n")
    line_start = source.rfind(b"\n", 0, d.docstring[0]) + 1
    column = source[line_start : d.docstring[0]].decode("utf-8")
    opening = column if not column.strip() else d.indent + "    "  # where the first line's text logically sits
    base = " " * (len(d.indent) + 4)
    for line in lines[1:]:
        if line.strip():
            base = line[: _indent_of(line)]
            break
    one_line = len(lines) == 1
    if one_line:  # `"""Summary."""` grows a closing line at the body's indent
        body_indent = d.indent + "    "
        lines = [lines[0], body_indent]
        base = body_indent
    elif _GOOGLE_ANY_HEAD.match(lines[0]) or _NUMPY_HEAD.match(lines[0]):
        base = opening  # `"""Args:` with its entries below: the section sits at the quotes' column
    lines[0] = opening + lines[0]  # the first line is measured from the quotes, as the others are
    new_lines = _update_lines(lines, skeleton.params, style, base)
    if new_lines is None:
        return None
    if new_lines and new_lines[0].startswith(opening):
        new_lines[0] = new_lines[0][len(opening) :]
    if one_line and new_lines[-1] != base:
        new_lines.append(base)
    new_content = "\n".join(new_lines)
    if not one_line and lines[-1].strip() == "" and new_lines[-1].strip() != "":
        new_content += "\n" + lines[-1]
    keys = re.findall("\x00([^\x00]*)\x00", new_content)
    texts: dict[str, str] = {}
    fallbacks: list[str] = []
    confidence: float | None = None
    # a new entry has no summary to calibrate on: the model writes it only when the threshold is 0 (trust it
    # wherever the monitor allows); otherwise the names-only text, which is measured closer to people's
    trusted = threshold(calibrator_for(cfg.model), cfg.min_probability) <= 0
    if keys and trusted:
        opening = prefix + quotes
        known = from_skeleton(skeleton)
        texts, fallbacks, confidence = _fill_entries(
            source, d, opening, new_content, filler, cfg.description_tokens, known
        )
    elif keys:
        texts = {key: fallback_description("param", key.split(":", 1)[1]) for key in keys}
        fallbacks = list(keys)
    for key in keys:
        new_content = new_content.replace(SENTINEL.format(key), texts[key])
    return Update(prefix + quotes + new_content + quotes, confidence, fallbacks)


def _fill_entries(
    source: bytes,
    d: Definition,
    opening: str,
    content: str,
    filler: SlotFiller,
    description_tokens: int,
    known: Facts,
) -> tuple[dict[str, str], list[str], float | None]:
    """One model call for the new entries, judged by the monitor; the rest of the definition is the context."""
    doc_start, doc_end = d.docstring or (0, 0)
    line_start = source.rfind(b"\n", 0, d.start_byte) + 1
    head = source[line_start:doc_start] + opening.encode("utf-8")
    tail = opening[-3:].encode("utf-8") + source[doc_end : d.node.end_byte]
    pieces = re.split("\x00([^\x00]*)\x00", content)
    text = bytearray(head)
    spans = []
    for i, piece in enumerate(pieces):
        if i % 2 == 0:
            text += piece.encode("utf-8")
        else:
            spans.append(slot_span(len(text), len(text), f"{piece}|{d.qualname}", description_tokens))
    text += tail
    result = filler(text.decode("utf-8"), spans, language="python")
    by_start = {e.start_byte: e for e in result.edits}
    texts: dict[str, str] = {}
    fallbacks: list[str] = []
    score, tokens = 0.0, 0
    for span in spans:
        key = span.label.split("|", 1)[0]
        subject = key.split(":", 1)[1]
        edit = by_start.get(span.start_byte)
        cleaned = judge(Slot("param", subject), edit.text, known, 200).text if edit is not None else None
        if edit is not None:
            score += edit.score
            tokens += edit.tokens
        if cleaned is None:
            fallbacks.append(key)
            cleaned = fallback_description("param", subject)
        texts[key] = cleaned
    return texts, fallbacks, (score / tokens if tokens else None)
