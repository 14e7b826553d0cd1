"""Which definitions `infill docstrings` sees, and which it skips (interrogate-like rules)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from infill.docstrings.config import DocstringConfig
from infill.docstrings.finder import find_definitions
from infill.errors import InputError

SOURCE = textwrap.dedent(
    '''\
    #!/usr/bin/env python
    # a comment before the module docstring
    """Module docstring."""
    import typing
    from typing import overload


    @decorator
    @other.decorator(1)
    async def fetch(url):
        return url


    def one_liner(x): return x


    def outer():
        def inner():
            pass
        class Local:
            def method(self):
                pass
        return inner


    class Stack:
        """Has one."""

        def __init__(self):
            self.items = []

        def __len__(self):
            return 0

        def _helper(self):
            pass

        @property
        def top(self):
            return 1

        @top.setter
        def top(self, value):
            pass

        @overload
        def get(self, i: int) -> int: ...
        @typing.overload
        def get(self, i: str) -> str: ...
        def get(self, i):
            return i

        class Inner:
            def deep(self):
                pass


    class _Private:
        def public_name(self):
            pass


    def skipped_here():  # infill: skip
        pass


    # infill: skip
    def skipped_above():
        pass


    def documented():
        "Single-quoted docstrings count."


    def concatenated():
        "Two " "parts."


    def fstring(x):
        f"not a docstring {x}"
    '''
)


def by_name() -> dict[str, Any]:
    defs = find_definitions(SOURCE.encode(), "pkg/mod.py", DocstringConfig())
    return {d.qualname: d for d in defs}


def test_finds_every_kind_of_definition() -> None:
    defs = by_name()
    assert {"mod", "fetch", "one_liner", "outer", "outer.inner", "outer.Local", "outer.Local.method", "Stack",
            "Stack.__init__", "Stack.__len__", "Stack.top", "Stack.get", "Stack.Inner", "Stack.Inner.deep",
            "_Private", "_Private.public_name"} <= set(defs)  # fmt: skip
    fetch = defs["fetch"]
    assert fetch.kind == "function" and fetch.line == 10 and fetch.decorators == ("decorator", "other.decorator")
    assert defs["Stack.Inner.deep"].kind == "method"
    assert defs["mod"].kind == "module" and defs["mod"].docstring is not None


def test_missing_and_skip_reasons() -> None:
    defs = find_definitions(SOURCE.encode(), "pkg/mod.py", DocstringConfig())
    missing = [d.qualname for d in defs if d.missing]
    expected = ["fetch", "one_liner", "outer", "Stack.top", "Stack.get", "Stack.Inner", "Stack.Inner.deep"]
    assert missing == [*expected, "fstring"]
    reasons = {d.qualname: d.skip for d in defs if d.skip}
    assert reasons["outer.inner"] == "nested"
    assert reasons["outer.Local.method"] == "nested"
    assert reasons["Stack.__init__"] == "__init__"
    assert reasons["Stack.__len__"] == "magic"
    assert reasons["Stack._helper"] == "private"
    assert reasons["_Private.public_name"] == "private"  # a member of a private class
    assert reasons["skipped_here"] == reasons["skipped_above"] == "infill: skip comment"
    setters = [d for d in defs if d.qualname == "Stack.top" and d.skip]
    assert [d.skip for d in setters] == ["property setter/deleter"]
    overloads = [d.skip for d in defs if d.qualname == "Stack.get"]
    assert overloads == ["overload", "overload", None]  # the implementation keeps its place


def test_existing_docstrings_are_found() -> None:
    defs = by_name()
    assert defs["documented"].docstring is not None
    assert defs["concatenated"].docstring is not None
    assert defs["fstring"].docstring is None


def test_switches_turn_rules_off_and_on() -> None:
    cfg = DocstringConfig(
        ignore_private=False,
        ignore_magic=False,
        ignore_init_method=False,
        ignore_nested_functions=False,
        ignore_nested_classes=True,
        ignore_property_decorators=True,
        ignore_regex=("^fetch$", r"Stack\.get"),
    )
    defs = find_definitions(SOURCE.encode(), "pkg/mod.py", cfg)
    missing = {d.qualname for d in defs if d.missing}
    assert {
        "outer.inner",
        "Stack.__init__",
        "Stack.__len__",
        "Stack._helper",
        "_Private.public_name",
    } <= missing
    reasons = {d.qualname: d.skip for d in defs if d.skip}
    assert reasons["fetch"].startswith("matches --ignore-regex")
    assert reasons["Stack.get"].startswith("matches --ignore-regex")
    assert reasons["Stack.Inner"] == "nested class"
    assert "Stack.top" not in missing


def test_skip_file_and_empty_modules() -> None:
    skipped = find_definitions(b"# infill: skip-file\ndef f():\n    pass\n", "a.py", DocstringConfig())
    assert all(d.skip == "skip-file comment" for d in skipped)
    empty = find_definitions(b"# only a comment\n", "pkg/__init__.py", DocstringConfig())
    assert empty[0].name == "pkg" and empty[0].skip == "empty module"


def test_syntax_error_is_an_input_error_with_location() -> None:
    with pytest.raises(InputError) as info:
        find_definitions(b"def f(:\n    pass\n", "bad.py", DocstringConfig())
    assert info.value.path == "bad.py" and "syntax error" in info.value.message


def test_call_and_new_are_public_methods_like_pydocstyle() -> None:
    source = b"class A:\n    def __new__(cls):\n        pass\n\n    def __call__(self):\n        pass\n"
    defs = find_definitions(source, "a.py", DocstringConfig(ignore_module=True))
    assert [d.qualname for d in defs if d.missing] == ["A", "A.__new__", "A.__call__"]


@pytest.mark.parametrize(
    ("literal", "is_docstring"),
    [('b"bytes"', False), ('Rb"raw bytes"', False), ('f"no placeholder"', False), ('F"a" "b"', False),
     ('"a" f"{1}"', False), ('r"raw"', True), ('u"unicode"', True), ("'''triple'''", True), ('"a" "b"', True)],
)  # fmt: skip
def test_only_a_str_literal_is_a_docstring_as_python_says(literal: str, is_docstring: bool) -> None:
    import ast

    source = f"def f():\n    {literal}\n    return 1\n"
    assert (ast.get_docstring(ast.parse(source).body[0]) is not None) == is_docstring  # type: ignore[arg-type]
    f = by_name_of(source)["f"]
    assert (f.docstring is not None) == is_docstring and f.missing != is_docstring


def by_name_of(source: str) -> dict[str, Any]:
    return {d.qualname: d for d in find_definitions(source.encode(), "m.py", DocstringConfig())}
