"""The docstring skeleton comes from the parse tree: parameters, Returns or Yields, Raises."""

from __future__ import annotations

import textwrap

from infill.docstrings.config import DocstringConfig
from infill.docstrings.finder import find_definitions
from infill.docstrings.skeleton import Param, Skeleton, build_skeleton

SOURCE = textwrap.dedent(
    """\
    def full(a, b: int, c=1, d: str = "x", /, *args: int, e, f: bool = False, **kwargs) -> dict[str, int]:
        if a:
            raise ValueError("a")
        try:
            pass
        except KeyError:
            raise
        if b:
            raise errors.InputError("b") from None
        def inner():
            raise TypeError("not ours")
            return 1
        err = RuntimeError()
        raise err


    def gen(n) -> Iterator[int]:
        yield n
        return


    def gen_untyped(n):
        yield from range(n)


    def none() -> None:
        return


    def implicit(x):
        return x * 2


    def no_return(x):
        print(x)
        f = lambda: 1


    class K:
        def __init__(self, size: int, *, name="k"):
            if size < 0:
                raise ValueError(size)

        def method(self, x):
            pass

        @classmethod
        def build(cls, y):
            pass

        @staticmethod
        def static(z):
            pass

        @property
        def value(self) -> int:
            return 1

        def abstract(self) -> int:
            raise NotImplementedError
    """
)


def skeletons(document_init: bool = True) -> dict[str, Skeleton]:
    defs = find_definitions(SOURCE.encode(), "m.py", DocstringConfig())
    return {d.qualname: build_skeleton(d, document_init) for d in defs if d.kind != "module"}


def test_parameters_with_annotations_defaults_and_stars() -> None:
    s = skeletons()["full"]
    assert s.params == [
        Param("a"),
        Param("b", "int"),
        Param("c", None, "1"),
        Param("d", "str", '"x"'),
        Param("*args", "int"),
        Param("e"),
        Param("f", "bool", "False"),
        Param("**kwargs"),
    ]
    assert s.returns == "dict[str, int]" and s.yields is None


def test_raises_from_own_raise_statements_only() -> None:
    # bare `raise`, `raise err` (a variable) and the nested function's TypeError are not listed
    assert skeletons()["full"].raises == ["ValueError", "errors.InputError"]
    assert skeletons()["K.abstract"].raises == []  # NotImplementedError marks an abstract method


def test_returns_versus_yields() -> None:
    s = skeletons()
    assert (s["gen"].yields, s["gen"].returns) == ("int", None)
    assert (s["gen_untyped"].yields, s["gen_untyped"].returns) == ("", None)
    assert s["none"].returns is None
    assert s["implicit"].returns == ""  # returns a value of unknown type
    assert s["no_return"].returns is None  # the lambda's value is not the function's


def test_self_and_cls_are_left_out_but_not_for_staticmethods() -> None:
    s = skeletons()
    assert [p.name for p in s["K.method"].params] == ["x"]
    assert [p.name for p in s["K.build"].params] == ["y"]
    assert [p.name for p in s["K.static"].params] == ["z"]


def test_class_carries_init_arguments_and_property_only_a_summary() -> None:
    s = skeletons()
    assert [p.name for p in s["K"].params] == ["size", "name"] and s["K"].raises == ["ValueError"]
    assert skeletons(document_init=False)["K"].params == []
    value = s["K.value"]
    assert value.is_property and value.params == [] and value.returns is None
    assert [slot.key for slot in value.slots()] == ["summary"]


def test_slot_keys_are_unique_and_ordered() -> None:
    keys = [slot.key for slot in skeletons()["full"].slots()]
    assert keys[0] == "summary" and keys[-2:] == ["raises:ValueError", "raises:errors.InputError"]
    assert len(keys) == len(set(keys))
