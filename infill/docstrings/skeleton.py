"""The structure of a docstring, read from the parse tree: parameters, Returns or Yields, Raises.

The model never decides structure. It only writes the text of the slots a skeleton names: the summary and one
description per parameter, return value, yielded value and raised exception.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from infill.docstrings.finder import PROPERTY_DECORATORS, Definition

SlotKind = Literal["summary", "param", "returns", "yields", "raises"]
# Scopes whose statements belong to someone else: returns, yields and raises inside them are not ours.
NESTED_SCOPES = {"function_definition", "class_definition", "lambda"}


@dataclass(frozen=True)
class Param:
    name: str  # as documented: "x", "*args", "**kwargs"
    annotation: str | None = None
    default: str | None = None

    @property
    def bare(self) -> str:
        return self.name.lstrip("*")


@dataclass(frozen=True)
class Slot:
    """A text hole in a docstring; `key` is unique in it: "summary", "param:x", "raises:ValueError"."""

    kind: SlotKind
    subject: str = ""  # parameter name, exception name, or "" for summary / returns / yields

    @property
    def key(self) -> str:
        return self.kind if not self.subject else f"{self.kind}:{self.subject}"

    @classmethod
    def from_key(cls, key: str) -> Slot:
        kind, _, subject = key.partition(":")
        return cls(kind, subject)  # type: ignore[arg-type]


@dataclass
class Skeleton:
    kind: str  # module / class / function / method
    name: str
    params: list[Param] = field(default_factory=list)
    returns: str | None = None  # return type text; "" = returns a value of unknown type; None = no Returns
    yields: str | None = None  # yielded type text; "" = unknown; None = not a generator
    raises: list[str] = field(default_factory=list)
    is_property: bool = False

    def slots(self) -> list[Slot]:
        out = [Slot("summary")]
        out += [Slot("param", p.name) for p in self.params]
        if self.returns is not None:
            out.append(Slot("returns"))
        if self.yields is not None:
            out.append(Slot("yields"))
        out += [Slot("raises", r) for r in self.raises]
        return out


def _text(node: Any) -> str:
    return str(node.text.decode("utf-8", "replace"))


def _one_line(text: str) -> str:
    return " ".join(text.split())


def parameters(function_node: Any, drop_first: bool) -> list[Param]:
    """Documented parameters of a function_definition, in order; `drop_first` removes self / cls."""
    params_node = function_node.child_by_field_name("parameters")
    out: list[Param] = []
    for child in params_node.named_children if params_node is not None else []:
        kind = child.type
        if kind in ("positional_separator", "keyword_separator", "comment"):
            continue
        annotation = child.child_by_field_name("type")
        default = child.child_by_field_name("value")
        name_node = child.child_by_field_name("name")
        if kind == "identifier":
            name = _text(child)
        elif kind == "list_splat_pattern":
            name = "*" + _text(child.named_children[0]) if child.named_children else ""
        elif kind == "dictionary_splat_pattern":
            name = "**" + _text(child.named_children[0]) if child.named_children else ""
        elif kind == "typed_parameter":  # `x: int`, `*args: int`, `**kw: int`
            inner = child.named_children[0]
            if inner.type == "list_splat_pattern":
                name = "*" + _text(inner.named_children[0])
            elif inner.type == "dictionary_splat_pattern":
                name = "**" + _text(inner.named_children[0])
            else:
                name = _text(inner)
        elif name_node is not None:
            name = _text(name_node)
        else:
            continue
        if not name.lstrip("*"):
            continue
        out.append(
            Param(
                name=name,
                annotation=_one_line(_text(annotation)) if annotation is not None else None,
                default=_one_line(_text(default)) if default is not None else None,
            )
        )
    if drop_first and out and not out[0].name.startswith("*"):
        out = out[1:]
    return out


def _walk_own(body: Any) -> list[Any]:
    """All nodes of a function body that belong to the function itself (not nested defs or lambdas)."""
    out = []
    stack = list(reversed(body.named_children))
    while stack:
        node = stack.pop()
        out.append(node)
        if node.type in NESTED_SCOPES:
            continue
        stack.extend(reversed(node.named_children))
    return out


def _raised_name(raise_node: Any) -> str | None:
    """`raise ValueError(...)` -> "ValueError"; `raise errors.X` -> "errors.X"; `raise err` -> None."""
    exc = next((c for c in raise_node.named_children if c.type != "comment"), None)
    if exc is None:
        return None
    if exc.type == "call":
        exc = exc.child_by_field_name("function")
    if exc is None or exc.type not in ("identifier", "attribute"):
        return None
    name = _text(exc)
    last = name.rsplit(".", 1)[-1]
    if not last[:1].isupper():  # `raise error` re-raises a variable: we cannot name its type
        return None
    return name


def _type_argument(annotation: str, index: int = 0) -> str:
    """ "Iterator[int]" -> "int"; "Generator[str, None, None]" -> "str"; anything else -> ""."""
    if "[" not in annotation or not annotation.endswith("]"):
        return ""
    inner = annotation[annotation.index("[") + 1 : -1]
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(inner):
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:i].strip())
            start = i + 1
    parts.append(inner[start:].strip())
    return parts[index] if index < len(parts) else ""


def function_skeleton(definition: Definition) -> Skeleton:
    node = definition.node
    decorators = [d.rsplit(".", 1)[-1] for d in definition.decorators]
    is_static = "staticmethod" in decorators
    drop_first = definition.kind == "method" and not is_static
    skeleton = Skeleton(kind=definition.kind, name=definition.name, params=parameters(node, drop_first))
    skeleton.is_property = bool(PROPERTY_DECORATORS & set(decorators))
    own = _walk_own(node.child_by_field_name("body"))
    annotation_node = node.child_by_field_name("return_type")
    annotation = _one_line(_text(annotation_node)) if annotation_node is not None else None
    is_generator = any(n.type == "yield" for n in own)
    returns_value = any(n.type == "return_statement" and n.named_children for n in own)
    no_value = {"None", "NoReturn", "Never", "typing.NoReturn", "typing.Never"}
    if is_generator:
        skeleton.yields = _type_argument(annotation) if annotation else ""
    elif annotation is not None:
        if annotation not in no_value:
            skeleton.returns = annotation
    elif returns_value:
        skeleton.returns = ""
    seen: list[str] = []
    for n in own:
        if n.type == "raise_statement":
            name = _raised_name(n)
            if name is not None and name not in seen and name not in ("NotImplementedError",):
                seen.append(name)
    skeleton.raises = seen
    if skeleton.is_property:  # a property is documented like an attribute: a summary only
        skeleton.params, skeleton.returns, skeleton.yields, skeleton.raises = [], None, None, []
    return skeleton


def init_method(class_node: Any) -> Any | None:
    """The `__init__` function_definition directly in a class body, if any."""
    body = class_node.child_by_field_name("body")
    for child in body.named_children if body is not None else []:
        target = child
        if child.type == "decorated_definition":
            target = child.child_by_field_name("definition")
        if target is not None and target.type == "function_definition":
            name = target.child_by_field_name("name")
            if name is not None and _text(name) == "__init__":
                return target
    return None


def class_skeleton(definition: Definition, document_init: bool) -> Skeleton:
    """A summary; plus the `__init__` arguments when `document_init` (they belong there then)."""
    skeleton = Skeleton(kind="class", name=definition.name)
    if document_init:
        init = init_method(definition.node)
        if init is not None:
            skeleton.params = parameters(init, drop_first=True)
            own = _walk_own(init.child_by_field_name("body"))
            for n in own:
                if n.type == "raise_statement":
                    name = _raised_name(n)
                    if name is not None and name not in skeleton.raises and name != "NotImplementedError":
                        skeleton.raises.append(name)
    return skeleton


def build_skeleton(definition: Definition, document_init: bool = True) -> Skeleton:
    if definition.kind in ("function", "method"):
        return function_skeleton(definition)
    if definition.kind == "class":
        return class_skeleton(definition, document_init)
    return Skeleton(kind="module", name=definition.name)
