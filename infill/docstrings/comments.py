"""Doc comments for other languages: JSDoc for JavaScript / TypeScript, `//` for Go, `///` for Rust.

The same skeleton-plus-slots approach as for Python docstrings: tree-sitter queries in grammars/<lang>/ find
the declarations, the parse tree gives the structure (JSDoc: @param with defaults and rest parameters,
@returns or @yields, @throws from `throw new X`), and the model fills only the text slots, in one call per
declaration.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from typing import Any

from infill.docstrings import text
from infill.docstrings.config import DocstringConfig
from infill.docstrings.facts import from_skeleton
from infill.docstrings.fill import SlotFiller, call_filler
from infill.docstrings.finder import SKIP_COMMENT, SKIP_FILE_COMMENT, captures, innermost, parse
from infill.docstrings.monitor import contradiction
from infill.docstrings.outcome import FileResult, Outcome
from infill.docstrings.skeleton import Param, Skeleton, Slot
from infill.docstrings.styles import Rendered, _Builder
from infill.errors import InputError
from infill.patch import Replacement, apply_edits

COMMENT_LANGUAGES = ("javascript", "typescript", "tsx", "go", "rust")  # infill.languages names
FUNCTION_TYPES = {
    "function_declaration", "generator_function_declaration", "method_definition", "arrow_function",
    "function_expression", "generator_function", "method_declaration", "function_item", "closure_expression",
}  # fmt: skip
CLASS_TYPES = {"class_declaration", "abstract_class_declaration", "class", "impl_item", "trait_item"}
CONTEXT_LINES = 60


@dataclass
class Target:
    """One declaration that can carry a doc comment."""

    kind: str  # function / method / class / type
    name: str
    qualname: str
    line: int
    insert_at: int  # byte offset of the start of the line the comment goes above
    indent: str
    node: Any  # the function / class / type node (for a `const f = () => ...`, the arrow function)
    end_byte: int
    documented: bool
    skip: str | None = None


def _text(node: Any) -> str:
    return str(node.text.decode("utf-8", "replace"))


def _is_doc_comment(lang: str, comment: str) -> bool:
    if lang == "go":
        return comment.startswith("//")
    if lang == "rust":
        return comment.startswith(("///", "/**", "#[doc"))
    return comment.startswith("/**")


def _outer(node: Any, lang: str) -> Any:
    """The node whose line the comment goes above: through `export`."""
    outer = node
    while outer.parent is not None and outer.parent.type in ("export_statement",):
        outer = outer.parent
    return outer


def find_targets(lang: str, source: bytes, path: str, cfg: DocstringConfig) -> list[Target]:
    tree = parse(lang, source)
    if tree.root_node.has_error:
        raise InputError("cannot parse: syntax error", path=path)
    found = captures(lang, "docstrings.scm", tree.root_node)
    skip_file = bool(SKIP_FILE_COMMENT.search(source.decode("utf-8", "replace").replace("//", "#")))
    targets: list[Target] = []
    kinds = {"doc.function": "function", "doc.class": "class", "doc.method": "method",
             "doc.type": "type"}  # fmt: skip
    unique = {n.id: (n, kinds[c]) for c in kinds for n in found.get(c, [])}
    for node, kind in sorted(unique.values(), key=lambda item: item[0].start_byte):
        name_node = node.child_by_field_name("name")
        function = node
        if node.type in ("lexical_declaration", "variable_declaration"):
            declarator = next(c for c in node.named_children if c.type == "variable_declarator")
            name_node = declarator.child_by_field_name("name")
            function = declarator.child_by_field_name("value")
        name = _text(name_node)
        outer = _outer(node, lang)
        if node.type == "type_spec" and node.parent.start_point[0] == node.start_point[0]:
            outer = node.parent  # `type X struct{}`: the comment goes above `type`
        first = outer
        previous = outer.prev_named_sibling
        while previous is not None and previous.type in ("decorator", "attribute_item"):
            first, previous = previous, previous.prev_named_sibling  # TS decorators, Rust #[attributes]
        line_start = source.rfind(b"\n", 0, first.start_byte) + 1
        indent = source[line_start : first.start_byte].decode("utf-8")
        if indent.strip():
            continue  # something else starts that line (e.g. `x = function () {}` inside an expression)
        documented = (
            previous is not None
            and previous.type in ("comment", "line_comment", "block_comment")
            and _is_doc_comment(lang, _text(previous))
            and not source[previous.end_byte : line_start].strip()  # directly above: no blank line between
            and source[previous.end_byte : line_start].count(b"\n") <= 1
        )
        ancestors = []
        up = node.parent
        while up is not None:
            if up.type in FUNCTION_TYPES or up.type in CLASS_TYPES:
                ancestors.append(up)
            up = up.parent
        owner = next((a for a in ancestors if a.type in CLASS_TYPES), None)
        owner_name = None
        if owner is not None:
            owner_name = owner.child_by_field_name("name") or owner.child_by_field_name("type")
        qualname = f"{_text(owner_name)}.{name}" if owner_name is not None else name
        if lang == "go" and node.type == "method_declaration":
            receiver = node.child_by_field_name("receiver")
            receiver_type = re.sub(r"[^\w]", " ", _text(receiver)).split()[-1] if receiver is not None else ""
            qualname = f"{receiver_type}.{name}" if receiver_type else name
        target = Target(kind, name, qualname, first.start_point[0] + 1, line_start, indent, function,
                        node.end_byte, documented)  # fmt: skip
        target.skip = _skip(lang, target, source, ancestors, cfg, skip_file)
        targets.append(target)
    return targets


def _skip(
    lang: str, t: Target, source: bytes, ancestors: list[Any], cfg: DocstringConfig, skip_file: bool
) -> str | None:
    if skip_file:
        return "skip-file comment"
    line_end = source.find(b"\n", t.insert_at)
    above_start = source.rfind(b"\n", 0, max(t.insert_at - 1, 0)) + 1
    lines = source[above_start if t.insert_at else 0 : line_end if line_end >= 0 else len(source)]
    if SKIP_COMMENT.search(lines.decode("utf-8", "replace").replace("//", "#")):
        return "infill: skip comment"
    for pattern in cfg.ignore_regex:
        if re.search(pattern, t.name) or re.search(pattern, t.qualname):
            return f"matches --ignore-regex {pattern!r}"
    if any(a.type in FUNCTION_TYPES for a in ancestors) and cfg.ignore_nested_functions:
        return "nested"
    if lang == "go":
        if cfg.ignore_private and not t.name[:1].isupper():
            return "private (unexported)"
        return None
    if lang == "rust":
        in_trait = any(a.type == "trait_item" for a in ancestors)
        public = in_trait or any(c.type == "visibility_modifier" for c in t.node.children)
        if cfg.ignore_private and not public:
            return "private (not pub)"
        return None
    if cfg.ignore_private and t.name.startswith(("_", "#")):
        return "private"
    if t.name == "constructor" and t.kind == "method" and cfg.ignore_init_method:
        return "__init__"
    if t.node.type == "method_definition" and cfg.ignore_property_decorators:
        if any(c.type in ("get", "set") for c in t.node.children):
            return "property"
    if t.node.type == "method_definition" and any(c.type == "set" for c in t.node.children):
        return "property setter/deleter"
    return None


def _own_nodes(body: Any) -> list[Any]:
    out, stack = [], [body]
    while stack:
        node = stack.pop()
        out.append(node)
        if node is not body and node.type in FUNCTION_TYPES | CLASS_TYPES:
            continue
        stack.extend(node.named_children)
    return out


def js_params(function: Any) -> list[Param]:
    params_node = function.child_by_field_name("parameters") or function.child_by_field_name("parameter")
    if params_node is None:
        return []
    if params_node.type == "identifier":  # `x => ...`
        return [Param(_text(params_node))]
    out: list[Param] = []
    for index, child in enumerate(params_node.named_children):
        default = child.child_by_field_name("value") or child.child_by_field_name("right")
        pattern = child.child_by_field_name("pattern") or child.child_by_field_name("left") or child
        if pattern.type == "this":
            continue
        if pattern.type == "rest_pattern":
            name = "..." + _text(pattern.named_children[0])
        elif pattern.type in ("identifier", "shorthand_property_identifier_pattern"):
            name = _text(pattern)
        elif child.type == "comment":
            continue
        else:  # destructured {a, b} / [c]: JSDoc needs a name for it
            name = f"param{index}"
        optional = child.type == "optional_parameter"
        out.append(Param(name, None, _text(default) if default is not None else ("" if optional else None)))
    return out


def js_skeleton(t: Target) -> Skeleton:
    if t.kind == "class":
        return Skeleton(kind="class", name=t.name)
    fn = t.node
    if fn.type == "method_definition" and any(c.type == "get" for c in fn.children):
        return Skeleton(kind=t.kind, name=t.name, is_property=True)  # a getter reads like a property
    skeleton = Skeleton(kind=t.kind, name=t.name, params=js_params(fn))
    body = fn.child_by_field_name("body")
    own = _own_nodes(body) if body is not None else []
    return_type = fn.child_by_field_name("return_type")
    annotation = _text(return_type).lstrip(":").strip() if return_type is not None else None
    if any(n.type == "yield_expression" for n in own):
        skeleton.yields = ""
    elif annotation is not None:
        if annotation not in ("void", "never", "Promise<void>", "undefined"):
            skeleton.returns = annotation
    elif body is not None and body.type != "statement_block":
        skeleton.returns = ""  # `x => x * 2`
    elif any(n.type == "return_statement" and n.named_children for n in own):
        skeleton.returns = ""
    for n in own:
        if n.type == "throw_statement":
            thrown = next((c for c in n.named_children if c.type == "new_expression"), None)
            ctor = thrown.child_by_field_name("constructor") if thrown is not None else None
            if ctor is not None and _text(ctor) not in skeleton.raises:
                skeleton.raises.append(_text(ctor))
    return skeleton


def render_jsdoc(s: Skeleton, indent: str, texts: dict[str, str] | None, width: int) -> Rendered:
    b = _Builder(indent, texts, width)
    summary = Slot("summary")
    if not s.slots()[1:]:
        b.line("/** ", summary, " */")
        return b.build()
    b.line("/**")
    b.entry(" * ", summary, " * ")
    b.line(" *")
    for p in s.params:
        name = p.name.lstrip(".")
        head = f"[{name}={p.default}]" if p.default else (f"[{name}]" if p.default == "" else name)
        b.entry(f" * @param {head} - ", Slot("param", p.name), " *   ")
    if s.returns is not None:
        b.entry(" * @returns ", Slot("returns"), " *   ")
    if s.yields is not None:
        b.entry(" * @yields ", Slot("yields"), " *   ")
    for exc in s.raises:
        b.entry(f" * @throws {{{exc}}} ", Slot("raises", exc), " *   ")
    b.line(" */")
    return b.build()


def render_go(s: Skeleton, indent: str, texts: dict[str, str] | None, width: int) -> Rendered:
    b = _Builder(indent, texts, width)
    b.entry(f"// {s.name} ", Slot("summary"), "// ")
    return b.build()


def rust_skeleton(t: Target) -> Skeleton:
    """A summary; plus `# Errors` for a function returning Result (clippy's missing_errors_doc)."""
    skeleton = Skeleton(kind=t.kind, name=t.name)
    return_type = t.node.child_by_field_name("return_type")
    if t.kind == "function" and return_type is not None and re.match(r"^(\w+::)*Result\b", _text(return_type)):
        skeleton.raises = ["Err"]
    return skeleton


def render_rust(s: Skeleton, indent: str, texts: dict[str, str] | None, width: int) -> Rendered:
    b = _Builder(indent, texts, width)
    b.entry("/// ", Slot("summary"), "/// ")
    if s.raises:
        b.line("///")
        b.line("/// # Errors")
        b.line("///")
        b.entry("/// Returns an error ", Slot("raises", "Err"), "/// ")
    return b.build()


def _clean(lang: str, s: Skeleton, raw: dict[str, str], limit: int) -> tuple[dict[str, str], list[str]]:
    """Cleaned text per slot, refused by the monitor's checks where it contradicts the skeleton (Go's "Name is
    ..." sentences and Rust's error clauses are cleaned their own way, not checked)."""
    out: dict[str, str] = {}
    fallbacks: list[str] = []
    known = from_skeleton(s)
    if lang == "rust":  # its skeleton does not model return values: whether one is returned is not known
        known = replace(known, returns_value=None)
    for slot in s.slots():
        given = raw.get(slot.key, "").replace("*/", " ").replace("/*", " ")
        cleaned: str | None
        if lang == "go":
            line = text.one_line(given)
            line = re.sub(rf"^{re.escape(s.name)}\b\s*", "", line)
            cleaned = None
            if re.search(r"[A-Za-z]{2,}", line) and not text.degenerate(line):
                sentence = re.split(r"(?<=[a-z0-9)\]])[.!?](?:\s|$)", line)[0].rstrip(",;: ")
                cleaned = sentence + "."
            fallback = "is " + ("the " if s.kind == "type" else "used for ") + " ".join(text.words_of(s.name)) + "."
        elif lang == "rust" and slot.kind == "raises":  # "Returns an error " + "if the input is empty."
            line = text.one_line(given)
            usable = re.search(r"[A-Za-z]{2,}", line) and not text.degenerate(line)
            cleaned = line.rstrip(".,;: ") + "." if usable else None
            fallback = "if the operation fails."
        elif slot.kind == "summary":
            cleaned = text.clean_summary(given, name=s.name, is_function=False, limit=limit)
            fallback = text.fallback_summary(s.kind, s.name, s.returns is not None)
        else:
            cleaned = text.clean_description(given, subject=slot.subject.lstrip("."))
            fallback = text.fallback_description(slot.kind, slot.subject.lstrip("."))
        checked = lang != "go" and not (lang == "rust" and slot.kind == "raises")
        if cleaned is not None and checked and contradiction(slot, cleaned, known) is not None:
            cleaned = None
        if cleaned is None:
            fallbacks.append(slot.key)
            cleaned = fallback
        out[slot.key] = cleaned
    return out, fallbacks


def process_comments(
    source_text: str, path: str, lang: str, cfg: DocstringConfig, filler: SlotFiller | None, at: int | None = None
) -> FileResult:
    """Report (filler None) or fill the missing doc comments of a JavaScript, TypeScript, Go or Rust file (with
    `at`, a byte offset: only of the innermost declaration around it)."""
    source = source_text.encode("utf-8")
    newline = "\r\n" if "\r\n" in source_text else "\n"
    outcomes: list[Outcome] = []
    replacements: list[Replacement] = []
    render = {"go": render_go, "rust": render_rust}.get(lang, render_jsdoc)
    targets = find_targets(lang, source, path, cfg)
    if at is not None:
        chosen = innermost([(t.insert_at, t.end_byte) for t in targets], at)
        targets = [] if chosen is None else [targets[chosen]]
    for t in targets:
        if t.documented or t.skip is not None:
            continue
        if filler is None:
            outcomes.append(Outcome(t.qualname, t.kind, t.line, "missing"))
            continue
        if lang == "go":
            skeleton = Skeleton(kind=t.kind, name=t.name)
        else:
            skeleton = rust_skeleton(t) if lang == "rust" else js_skeleton(t)
        template = render(skeleton, t.indent, None, cfg.line_length)
        tail = source[t.insert_at : t.end_byte]
        lines = tail.split(b"\n")
        tail = b"\n".join(lines[:CONTEXT_LINES])
        prefix = t.indent.encode("utf-8")
        language = "typescript" if lang == "tsx" else lang
        model = call_filler(filler, prefix, template, b"\n" + tail, t.qualname, language, cfg)
        texts, fallbacks = _clean(lang, skeleton, model.raw, max(cfg.line_length - len(t.indent) - 8, 30))
        confidence = model.mean()
        outcome = Outcome(t.qualname, t.kind, t.line, "filled", confidence, fallbacks, warnings=model.warnings)
        outcomes.append(outcome)
        conf_value = confidence if confidence is not None else -math.inf
        if cfg.min_confidence is not None and (conf_value < cfg.min_confidence or "summary" in fallbacks):
            outcome.status = "left-missing"
            continue
        if fallbacks or conf_value < cfg.low_confidence:
            outcome.status = "low-confidence"
        comment = render(skeleton, t.indent, texts, cfg.line_length).text
        outcome.docstring = comment
        replacements.append(Replacement(t.insert_at, t.insert_at, t.indent + comment.replace("\n", newline) + newline))
    style = {"go": "godoc", "rust": "rustdoc"}.get(lang, "jsdoc")
    new_text = apply_edits(source, replacements).decode("utf-8")
    return FileResult(path, source_text, new_text, outcomes, style, replacements)
