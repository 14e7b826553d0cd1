"""Find the modules, classes and functions of a Python file and decide which need a docstring.

Tree-sitter queries in grammars/python/docstrings.scm name the definitions and the docstrings that exist; this
module adds the skip rules (interrogate-like: private, magic, __init__, nested, overloads, properties,
setters, --ignore-regex, and a `# infill: skip` comment). Never imports torch.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from infill.docstrings.config import DocstringConfig
from infill.errors import InputError

Kind = Literal["module", "class", "function", "method"]

SKIP_COMMENT = re.compile(r"#\s*infill:\s*skip\b(?!-)")
SKIP_FILE_COMMENT = re.compile(r"^\s*#\s*infill:\s*skip-file\b", re.MULTILINE)
PROPERTY_DECORATORS = {"property", "cached_property", "abstractproperty"}


@functools.cache
def query(lang: str, file_name: str) -> Any:
    """A compiled query from grammars/<lang>/<file_name> (tsx shares typescript's folder)."""
    from tree_sitter import Query

    from infill import languages

    folder = "typescript" if lang == "tsx" else lang
    path = languages.grammars_root() / folder / file_name
    return Query(languages.grammar(lang), path.read_text(encoding="utf-8"))


def parse(lang: str, source: bytes) -> Any:
    """The tree-sitter tree of `source` (InputError naming the pip extra when the grammar is missing)."""
    from infill import languages

    return languages.parse(lang, source)


def captures(lang: str, file_name: str, node: Any) -> dict[str, list[Any]]:
    from tree_sitter import QueryCursor

    result: dict[str, list[Any]] = QueryCursor(query(lang, file_name)).captures(node)
    return result


@dataclass
class Definition:
    """One place a docstring can go. Byte offsets index the file's UTF-8 bytes; lines are 1-based."""

    kind: Kind
    name: str
    qualname: str
    line: int  # line of the `def` / `class` keyword (1 for a module)
    start_byte: int  # first byte of the definition, decorators included (0 for a module)
    indent: str  # indentation of the `def` line ("" for a module)
    docstring: tuple[int, int] | None  # byte range of an existing docstring's string literal
    decorators: tuple[str, ...] = ()
    skip: str | None = None  # why this definition is not handled, or None
    node: Any = field(default=None, repr=False, compare=False)  # function_definition / class_definition / module
    parent: Definition | None = field(default=None, repr=False, compare=False)

    @property
    def missing(self) -> bool:
        return self.docstring is None and self.skip is None


def _text(node: Any) -> str:
    return str(node.text.decode("utf-8", "replace"))


def decorator_names(definition_node: Any) -> tuple[str, ...]:
    """Decorators as written without `@` or call arguments: "property", "x.setter", "typing.overload"."""
    parent = definition_node.parent
    if parent is None or parent.type != "decorated_definition":
        return ()
    names = []
    for child in parent.named_children:
        if child.type != "decorator":
            continue
        expr = child.named_children[0] if child.named_children else child
        if expr.type == "call":
            expr = expr.child_by_field_name("function") or expr
        names.append(_text(expr).strip())
    return tuple(names)


def _skip_reason(
    kind: Kind,
    name: str,
    qualname: str,
    decorators: tuple[str, ...],
    ancestors: list[Any],
    cfg: DocstringConfig,
) -> str | None:
    last_parts = [d.rsplit(".", 1)[-1] for d in decorators]
    if any(d.endswith((".setter", ".deleter")) for d in decorators):
        return "property setter/deleter"
    for pattern in cfg.ignore_regex:
        if re.search(pattern, name) or re.search(pattern, qualname):
            return f"matches --ignore-regex {pattern!r}"
    in_function = any(a.type == "function_definition" for a in ancestors)
    if in_function and cfg.ignore_nested_functions:
        return "nested"
    if kind == "class" and ancestors and cfg.ignore_nested_classes:
        return "nested class"
    is_dunder = name.startswith("__") and name.endswith("__") and len(name) > 4
    is_magic = is_dunder and name not in ("__init__", "__call__", "__new__")  # pydocstyle's notion (D105)
    private_owner = any(
        a.type == "class_definition" and _text(a.child_by_field_name("name")).startswith("_") for a in ancestors
    )
    if cfg.ignore_private and ((name.startswith("_") and not is_dunder) or private_owner):
        return "private"
    if name == "__init__" and kind == "method":
        if cfg.ignore_init_method:
            return "__init__"
    elif is_magic and cfg.ignore_magic:
        return "magic"
    if "overload" in last_parts and cfg.ignore_overloads:
        return "overload"
    if "override" in last_parts:
        return "override (inherits its docstring)"
    if cfg.ignore_property_decorators and PROPERTY_DECORATORS & set(last_parts):
        return "property"
    return None


def colon_byte(node: Any) -> int:
    """End byte of the `:` that ends a def/class header."""
    colon = [c for c in node.children if c.type == ":"]
    return int(colon[-1].end_byte) if colon else int(node.child_by_field_name("body").start_byte)


def _has_skip_comment(source: bytes, start_byte: int, header_end: int) -> bool:
    """`# infill: skip` on the line above the definition, or on a line of its header (decorators too)."""
    line_start = source.rfind(b"\n", 0, start_byte) + 1
    previous_start = source.rfind(b"\n", 0, max(line_start - 1, 0)) + 1
    above = source[previous_start:line_start] if line_start > 0 else b""
    line_end = source.find(b"\n", header_end)
    header = source[line_start : line_end if line_end >= 0 else len(source)]
    if SKIP_COMMENT.search(above.decode("utf-8", "replace").strip()) and above.strip().startswith(b"#"):
        return True
    return bool(SKIP_COMMENT.search(header.decode("utf-8", "replace")))


def module_name(path: str) -> str:
    """The name a module's docstring is written from: its file's stem (its package's for __init__.py), without
    what cannot stand in a docstring's text: bytes of a file name that are not UTF-8, backslashes (escapes) and
    double quotes (they could end the docstring)."""
    p = Path(path)
    name = p.parent.name if p.stem == "__init__" and p.parent.name else p.stem
    return re.sub('[\udc80-\udcff\\\\"]', "", name)


def _is_text_literal(node: Any) -> bool:
    """Whether a string (or concatenated string) is a docstring to Python: a plain or raw str, not bytes
    (`b"..."`) and not an f-string (`f"..."`, with or without placeholders), as ast.get_docstring and ruff say."""
    parts = node.named_children if node.type == "concatenated_string" else [node]
    for part in parts:
        start = next((c for c in part.children if c.type == "string_start"), None)
        prefix = (start.text if start is not None else b"").rstrip(b"'\"").lower()
        if b"b" in prefix or b"f" in prefix or b"t" in prefix:  # t: a template string (Python 3.14)
            return False
    return True


def find_definitions(source: bytes, path: str, cfg: DocstringConfig) -> list[Definition]:
    """Every module, class and function of a Python file, in order, with docstring and skip reason."""
    tree = parse("python", source)
    if tree.root_node.has_error:
        from infill.languages import first_error_line

        raise InputError(f"cannot parse: syntax error near line {first_error_line(tree.root_node)}", path=path)
    found = captures("python", "docstrings.scm", tree.root_node)
    docstrings: dict[int, tuple[int, int]] = {}  # id of the module/block node -> docstring byte range
    for node in found.get("docstring", []):
        if not _is_text_literal(node):
            continue
        owner = node.parent.parent  # string -> expression_statement -> module / block
        docstrings[owner.id] = (node.start_byte, node.end_byte)

    skip_file = bool(SKIP_FILE_COMMENT.search(source.decode("utf-8", "replace")))
    root = tree.root_node
    has_code = any(c.type != "comment" for c in root.named_children)
    module = Definition(
        kind="module",
        name=module_name(path),
        qualname=module_name(path),
        line=1,
        start_byte=0,
        indent="",
        docstring=docstrings.get(root.id),
        skip="skip-file comment" if skip_file else ("ignore-module" if cfg.ignore_module else None),
        node=root,
    )
    if not has_code and module.skip is None:
        module.skip = "empty module"
    definitions = [module]
    by_node: dict[int, Definition] = {}
    nodes = found.get("doc.function", []) + found.get("doc.class", [])
    for node in sorted(nodes, key=lambda n: n.start_byte):
        name = _text(node.child_by_field_name("name"))
        body = node.child_by_field_name("body")
        ancestors = []
        up = node.parent
        while up is not None:
            if up.type in ("function_definition", "class_definition"):
                ancestors.append(up)
            up = up.parent
        parent_def = by_node.get(ancestors[0].id) if ancestors else module
        kind: Kind
        if node.type == "class_definition":
            kind = "class"
        elif ancestors and ancestors[0].type == "class_definition":
            kind = "method"
        else:
            kind = "function"
        outer = node.parent if node.parent is not None and node.parent.type == "decorated_definition" else node
        decorators = decorator_names(node)
        qualname = f"{parent_def.qualname}.{name}" if parent_def is not None and parent_def is not module else name
        line_start = source.rfind(b"\n", 0, node.start_byte) + 1
        indent = source[line_start : node.start_byte].decode("utf-8", "replace")
        if indent.strip():  # e.g. `if x: def f(): ...` on one line; keep only the leading whitespace
            indent = indent[: len(indent) - len(indent.lstrip())]
        definition = Definition(
            kind=kind,
            name=name,
            qualname=qualname,
            line=node.start_point[0] + 1,
            start_byte=outer.start_byte,
            indent=indent,
            docstring=docstrings.get(body.id),
            decorators=decorators,
            node=node,
            parent=parent_def,
        )
        if skip_file:
            definition.skip = "skip-file comment"
        elif _has_skip_comment(source, outer.start_byte, colon_byte(node)):
            definition.skip = "infill: skip comment"
        else:
            definition.skip = _skip_reason(kind, name, qualname, decorators, ancestors, cfg)
        by_node[node.id] = definition
        definitions.append(definition)
    return definitions


def innermost(ranges: list[tuple[int, int]], at: int) -> int | None:
    """Index of the innermost [start, end] range holding byte `at` (the one starting last), or None."""
    holding = [i for i, (start, end) in enumerate(ranges) if start <= at <= end]
    return max(holding, key=lambda i: ranges[i][0], default=None)
