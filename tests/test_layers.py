"""The layers of docs/architecture.md hold: every import inside `infill` runs from a layer to the same layer or a
lower one, and no files import each other around a circle. Imports inside functions and under TYPE_CHECKING
count too: each is a dependency a reader has to follow."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# top to bottom; a path ending in "/" is a package, the most specific entry wins; everything else in infill/ (the
# small modules at its top: config, errors, options, spans, patch, ...) is the bottom layer
LAYERS: tuple[tuple[str, ...], ...] = (
    ("infill/__main__.py", "infill/cli.py"),
    ("infill/commands/",),
    ("infill/lsp/",),
    ("infill/server/",),
    ("infill/docstrings/", "infill/evaluation/"),
    ("infill/api.py",),
    ("infill/core/",),
    ("infill/training/",),
    ("infill/decoding/",),
    ("infill/models/",),
)
BOTTOM = len(LAYERS)


def module_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(rel: str) -> int:
    best, found = -1, BOTTOM
    for index, entries in enumerate(LAYERS):
        for entry in entries:
            if (rel == entry or (entry.endswith("/") and rel.startswith(entry))) and len(entry) > best:
                best, found = len(entry), index
    return found


def imports() -> dict[str, set[str]]:
    """file (relative path) -> the files of infill it imports."""
    files = {module_of(p): p for p in (ROOT / "infill").rglob("*.py")}
    edges: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for name in names:
                while name and name not in files:  # `from infill.x import name`: the module, not the name
                    name = name.rpartition(".")[0]
                if name and name != module and name != "infill":
                    targets.add(str(files[name].relative_to(ROOT)))
        edges[str(path.relative_to(ROOT))] = targets
    return edges


def test_every_import_runs_down_the_layers() -> None:
    upward = [
        f"{source} -> {target}"
        for source, targets in imports().items()
        for target in targets
        if layer_of(target) < layer_of(source)
    ]
    assert upward == []


def test_no_circle_of_imports_between_files() -> None:
    edges = imports()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert circles == []


@pytest.mark.parametrize(
    ("path", "layer"),
    [("infill/api.py", 5), ("infill/core/fill.py", 6), ("infill/config.py", BOTTOM), ("infill/lsp/fills.py", 2)],
)
def test_a_file_is_in_the_layer_of_its_most_specific_entry(path: str, layer: int) -> None:
    assert layer_of(path) == layer


def test_the_check_sees_imports_inside_functions_and_type_checking() -> None:
    edges = imports()
    assert "infill/decoding/registry.py" in edges["infill/decoding/__init__.py"]  # imported inside decode()
    assert "infill/models/base.py" in edges["infill/decoding/__init__.py"]  # under TYPE_CHECKING
