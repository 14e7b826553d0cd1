"""What the code says about a definition, for checking sentences against it and for writing them from names.

`Facts` holds what a docstring sentence may not contradict: whether a function returns a value (and which names
its return statements use), whether it is a generator, a stub (only `pass`, `...` or `raise`), which exceptions
it raises and under which `if`, its parameters, its class, and the names of the other definitions around it.
`from_skeleton` reads them from the Skeleton (any language) and `python_facts`, for Python, from the standard
library's `ast` as well; the monitor (infill.docstrings.monitor) and the names-only sentences
(infill.docstrings.names) read them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace

from infill.docstrings.skeleton import Skeleton

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
CONDITION_CHARS = 40  # a raise condition longer than this is not quoted in a names-only sentence


@dataclass(frozen=True)
class Facts:
    kind: str  # module / class / function / method
    name: str
    owner: str | None = None  # the class of a method
    params: tuple[str, ...] = ()  # documented parameters, bare ("args" for *args)
    objects: tuple[str, ...] = ()  # the parameters without a default, not *args / **kwargs: what it acts on
    returns_value: bool | None = None  # None: not known (a stub, or a language without the check)
    returned: frozenset[str] | None = None  # identifiers used in return values; None: not known
    generator: bool = False
    stub: bool = False  # only pass / ... / raise (an interface: its contract is elsewhere)
    raises: tuple[str, ...] = ()  # exceptions the docstring documents
    conditions: dict[str, str] = field(default_factory=dict)  # exception -> the `if` test it is raised under
    is_property: bool = False
    others: frozenset[str] = frozenset()  # names of the other definitions in the same scope (siblings, members)
    members: frozenset[str] = frozenset()  # a class's methods; a module's top-level definitions

    @property
    def is_function(self) -> bool:
        return self.kind in ("function", "method")


def from_skeleton(skeleton: Skeleton, owner: str | None = None) -> Facts:
    """The facts a Skeleton carries (any language): parameters, whether something is returned, raises."""
    generator = skeleton.yields is not None
    known = skeleton.kind in ("function", "method") and not skeleton.is_property
    return Facts(
        kind=skeleton.kind,
        name=skeleton.name,
        owner=owner,
        params=tuple(p.bare for p in skeleton.params),
        objects=tuple(p.name for p in skeleton.params if p.default is None and not p.name.startswith("*")),
        returns_value=(skeleton.returns is not None or generator) if known else None,
        generator=generator,
        raises=tuple(skeleton.raises),
        is_property=skeleton.is_property,
    )


def _own(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function body that belong to it (not to nested functions, classes or lambdas)."""
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, FunctionNode | ast.ClassDef | ast.Lambda):
            continue
        yield child
        stack.extend(ast.iter_child_nodes(child))


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )


def _raised(exc: ast.expr | None) -> str | None:
    if isinstance(exc, ast.Call):
        exc = exc.func
    return ast.unparse(exc) if isinstance(exc, ast.Name | ast.Attribute) else None


def is_stub(function: FunctionNode) -> bool:
    """Whether the body only passes, is `...`, or raises (an abstract method, a protocol, a "not supported here"
    that subclasses override)."""
    for statement in function.body:
        if _is_docstring(statement) or isinstance(statement, ast.Pass | ast.Raise):
            continue
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            if statement.value.value is Ellipsis:
                continue
        return False
    return True


def _conditions(function: FunctionNode) -> dict[str, str]:
    """exception -> the source of the `if` test directly above its only `raise` (one short line, else none)."""
    found: dict[str, list[str]] = {}
    for node in _own(function):
        if not isinstance(node, ast.If):
            continue
        for statement in node.body:
            name = _raised(statement.exc) if isinstance(statement, ast.Raise) else None
            if name is not None:
                found.setdefault(name, []).append(ast.unparse(node.test))
    raised = [n for n in _own(function) if isinstance(n, ast.Raise)]
    counts: dict[str, int] = {}
    for r in raised:
        name = _raised(r.exc)
        if name is not None:
            counts[name] = counts.get(name, 0) + 1
    return {
        name: tests[0]
        for name, tests in found.items()
        if len(tests) == 1 == counts.get(name) and len(tests[0]) <= CONDITION_CHARS and "\n" not in tests[0]
    }


def _function_facts(base: Facts, function: FunctionNode, annotated: bool) -> Facts:
    returns = [n for n in _own(function) if isinstance(n, ast.Return)]
    values = [r.value for r in returns if r.value is not None and not _is_none(r.value)]
    generator = any(isinstance(n, ast.Yield | ast.YieldFrom) for n in _own(function))
    stub = is_stub(function)
    returned = frozenset(
        name
        for value in values
        for n in ast.walk(value)
        for name in ([n.id] if isinstance(n, ast.Name) else [n.attr] if isinstance(n, ast.Attribute) else [])
    )
    if base.is_property:
        returns_value: bool | None = None
    elif stub:
        returns_value = base.returns_value if annotated else None  # the annotation is the contract, if any
    else:
        returns_value = bool(values) or generator or (annotated and bool(base.returns_value))
    return replace(
        base,
        returns_value=returns_value,
        returned=None if stub else returned,
        generator=generator,
        stub=stub,
        conditions=_conditions(function),
    )


def _is_none(value: ast.expr) -> bool:
    return isinstance(value, ast.Constant) and value.value is None


def _definitions(body: Sequence[ast.stmt]) -> list[FunctionNode | ast.ClassDef]:
    return [s for s in body if isinstance(s, FunctionNode | ast.ClassDef)]


def python_facts(tree: ast.Module | None, skeleton: Skeleton, line: int, owner: str | None) -> Facts:
    """Facts of the definition whose `def` / `class` keyword is on `line` (1-based); a module for line 1 with
    kind "module". `tree` None (CPython cannot parse the file) gives the Skeleton's facts only."""
    base = from_skeleton(skeleton, owner)
    if tree is None:
        return base
    if skeleton.kind == "module":
        names = frozenset(d.name for d in _definitions(tree.body))
        return replace(base, members=names, others=names)
    for scope in [tree, *ast.walk(tree)]:
        body = getattr(scope, "body", None)
        if not isinstance(body, list):
            continue
        for node in _definitions(body):
            if node.lineno != line or node.name != skeleton.name:
                continue
            others = frozenset(d.name for d in _definitions(body) if d is not node)
            if isinstance(node, ast.ClassDef):
                members = _definitions(node.body)
                init = next((d for d in members if d.name == "__init__" and not isinstance(d, ast.ClassDef)), None)
                conditions = _conditions(init) if init is not None and skeleton.raises else {}
                return replace(base, others=others, members=frozenset(d.name for d in members), conditions=conditions)
            return _function_facts(replace(base, others=others), node, node.returns is not None)
    return base


def parse_python(source: str) -> ast.Module | None:
    """The file's `ast`, or None when CPython cannot parse it (tree-sitter is more lenient), nesting too deep for
    its parser (`-` 100,000 times: MemoryError; a long chain of operators: RecursionError) included."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
