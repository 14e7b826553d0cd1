"""File extension -> language, its tree-sitter grammar wheel, and its queries in grammars/<lang>/*.scm.

Python's grammar is a core dependency; the other grammars are optional extras (`pip install '.[rust]'` from a
clone: infill.extras).
Unknown extensions are plain text: line/column spans and markers work, tree-sitter selectors do not.
tree_sitter itself is imported lazily, on first use of a grammar.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Any

from infill.errors import InputError

if TYPE_CHECKING:
    import tree_sitter


@dataclass(frozen=True)
class LanguageInfo:
    name: str  # also the folder under grammars/
    module: str  # the grammar wheel's module
    function: str  # the module attribute returning the language pointer
    extra: str  # pip extra that installs the wheel ("" = core dependency)
    extensions: tuple[str, ...]


LANGUAGES: dict[str, LanguageInfo] = {
    info.name: info
    for info in (
        LanguageInfo("python", "tree_sitter_python", "language", "", (".py", ".pyi", ".pyw")),
        LanguageInfo("javascript", "tree_sitter_javascript", "language", "javascript", (".js", ".mjs", ".cjs", ".jsx")),
        LanguageInfo(
            "typescript",
            "tree_sitter_typescript",
            "language_typescript",
            "typescript",
            (".ts", ".mts", ".cts"),
        ),
        LanguageInfo("tsx", "tree_sitter_typescript", "language_tsx", "typescript", (".tsx",)),
        LanguageInfo("go", "tree_sitter_go", "language", "go", (".go",)),
        LanguageInfo("rust", "tree_sitter_rust", "language", "rust", (".rs",)),
        LanguageInfo("java", "tree_sitter_java", "language", "java", (".java",)),
        LanguageInfo("c", "tree_sitter_c", "language", "c", (".c", ".h")),
        LanguageInfo(
            "cpp",
            "tree_sitter_cpp",
            "language",
            "cpp",
            (".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx"),
        ),
    )
}

# languages that share another language's query folder
_QUERY_FOLDER = {"tsx": "typescript"}

_BY_EXTENSION = {ext: info.name for info in LANGUAGES.values() for ext in info.extensions}
_CPP_UPPER = {".C": "cpp", ".H": "cpp"}  # as GCC reads them: capital C and H are C++, not C


def detect(filename: str | None, data: bytes | None = None) -> str | None:
    """Language name for a file name, or None for plain text (unknown or missing extension).

    A `.h` file is C, unless its text (`data`, when given) is C++: C's grammar finds syntax errors in it that
    C++'s does not (a class, a namespace, a template), as GitHub's linguist and ctags also read headers."""
    if not filename:
        return None
    suffix = PurePath(filename).suffix
    found = _CPP_UPPER.get(suffix) or _BY_EXTENSION.get(suffix.lower())
    if found == "c" and suffix.lower() == ".h" and data is not None and _is_cpp_header(data):
        return "cpp"
    return found


def _is_cpp_header(data: bytes) -> bool:
    """Whether C++'s grammar parses `data` with fewer errors than C's (False when either grammar is missing:
    the header stays C, and a missing C grammar is reported as such)."""
    try:
        as_c = error_nodes(parse("c", data).root_node)
        return as_c > 0 and error_nodes(parse("cpp", data).root_node) < as_c
    except InputError:
        return False


def known_extensions() -> str:
    return " ".join(sorted(_BY_EXTENSION))


def _info(name: str) -> LanguageInfo:
    info = LANGUAGES.get(name)
    if info is None:
        raise InputError(f"unknown language {name!r}; known: {', '.join(sorted(LANGUAGES))}")
    return info


@cache
def grammar(name: str) -> tree_sitter.Language:
    """The tree-sitter Language for `name`; InputError naming the pip extra when its wheel is missing."""
    info = _info(name)
    try:
        module = importlib.import_module(info.module)
    except ImportError:
        from infill.extras import install_hint

        raise InputError(
            f"the {name} grammar is not installed; install it with: {install_hint(info.extra or name)}"
        ) from None
    import tree_sitter

    return tree_sitter.Language(getattr(module, info.function)())


_LONE_CR = re.compile(rb"\r(?!\n)")


def parse(name: str, source: bytes) -> tree_sitter.Tree:
    """The tree-sitter parse of `source`. A lone CR ends a line, as it does for Python and in editors; the
    grammars read it as a space (a file with classic Mac line endings was one line of errors, and `--function`
    found nothing in it), so it is read as a LF, which keeps every byte offset."""
    import tree_sitter

    if b"\r" in source:
        source = _LONE_CR.sub(b"\n", source)
    return tree_sitter.Parser(grammar(name)).parse(source)


def error_nodes(root: Any) -> int:
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


def first_error_line(node: Any) -> int:
    """The 1-based line of the first ERROR or MISSING node under `node` (a tree's root_node), in source order;
    `node`'s own line when it has none."""
    stack = [node]
    while stack:
        current = stack.pop()
        if current.type == "ERROR" or current.is_missing:
            return int(current.start_point[0]) + 1
        stack.extend(reversed([c for c in current.children if c.has_error or c.is_missing or c.type == "ERROR"]))
    return int(node.start_point[0]) + 1


def grammars_root() -> Path:
    """The folder holding grammars/<lang>/*.scm.

    A source checkout (the folder next to the imported `infill` package) wins, so a worktree uses its own
    queries even when an editable install of another checkout owns `infill.grammars`; else the installed
    package.
    """
    import infill

    beside = Path(infill.__file__).resolve().parent.parent / "grammars"
    if any(beside.glob("python/*.scm")):
        return beside
    from importlib.resources import files

    return Path(str(files("infill.grammars")))


def query_files(name: str) -> list[Path]:
    folder = grammars_root() / _QUERY_FOLDER.get(name, _info(name).name)
    return sorted(folder.glob("*.scm"))


@cache
def queries(name: str) -> tuple[Any, ...]:
    """Compiled tree_sitter.Query objects, one per .scm file of the language."""
    import tree_sitter

    lang = grammar(name)
    compiled = []
    for path in query_files(name):
        try:
            compiled.append(tree_sitter.Query(lang, path.read_text(encoding="utf-8")))
        except (
            tree_sitter.QueryError,
            ValueError,
        ) as exc:  # a broken shipped query is our bug, not the user's
            from infill.errors import InfillError

            raise InfillError(f"invalid query file {path}: {exc}") from None
    return tuple(compiled)


def capture_names(name: str) -> list[str]:
    """Every capture name the language's queries define (the vocabulary of `--node KIND`)."""
    names: set[str] = set()
    for query in queries(name):
        names.update(query.capture_name(i) for i in range(query.capture_count))
    return sorted(names)
