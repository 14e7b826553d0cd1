"""The docstring monitor: a sentence that contradicts the code is never written, whatever the model says.

Each test offers the false sentence through the fake model and trusts the model (min_probability 0), so only
the monitor stands between that sentence and the file: without it, every one of these tests would fail.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from fixtures_cli import fake_model
from fixtures_doc import FakeFiller

from infill import api
from infill.config import DecodeConfig, FillOptions, ModelSpec
from infill.docstrings import facts, monitor, names
from infill.docstrings.config import DocstringConfig
from infill.docstrings.engine import process_source
from infill.docstrings.outcome import Outcome
from infill.docstrings.skeleton import Param, Skeleton, Slot
from infill.spans import Selection, resolve

EXAMPLE = textwrap.dedent(
    """\
    import os

    def read_config(path, default=None):
        if not os.path.exists(path):
            return default
        with open(path) as handle:
            return handle.read()

    class Stack:
        def __init__(self):
            self.items = []
        def push(self, item):
            self.items.append(item)
        def pop(self):
            if not self.items:
                raise IndexError("pop from empty stack")
            return self.items.pop()
    """
)


def fill_with(says: dict[str, str | list[str]], source: str = EXAMPLE) -> tuple[str, dict[str, Outcome]]:
    """Fill `source` with a fake model that writes `says["<slot key>|<qualname>"]` (else plain, true text)."""

    def text_for(key: str, qualname: str) -> str | list[str]:
        return says.get(f"{key}|{qualname}", "the value")

    cfg = DocstringConfig(min_probability=0.0)
    result = process_source(source, "config_tools.py", cfg, FakeFiller(text_for=text_for))
    ast.parse(result.text)
    return result.text, {o.name: o for o in result.outcomes}


def docstring_of(out: str, name: str) -> str:
    """The docstring of the function or class `name` in `out` (of the module for "")."""
    tree = ast.parse(out)
    if not name:
        return ast.get_docstring(tree) or ""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.ClassDef) and node.name == name:
            return ast.get_docstring(node) or ""
    raise AssertionError(name)


def test_a_procedure_is_not_said_to_return_something() -> None:
    out, outcomes = fill_with({"summary|Stack.push": "returns the given item"})
    assert "Return the given item" not in out
    assert docstring_of(out, "push").startswith("Push `item` onto the stack.")
    assert outcomes["Stack.push"].refused["summary"] == "says it returns a value; the function returns nothing"


def test_a_function_that_does_something_is_not_said_to_do_nothing() -> None:
    source = "def total(values):\n    return sum(values)\n"
    out, outcomes = fill_with({"summary|total": "does nothing"}, source)
    assert "nothing" not in out.lower() and "says it does nothing" in outcomes["total"].refused["summary"]
    stub = "def hook(event):\n    pass\n"  # a stub really does nothing: that may be said
    out, _ = fill_with({"summary|hook": "do nothing"}, stub)
    assert "Do nothing." in out


def test_a_raises_entry_names_its_own_exception() -> None:
    out, outcomes = fill_with({"raises:IndexError|Stack.pop": "TypeError"})
    assert "TypeError" not in out and "IndexError: If `not self.items`." in out
    assert outcomes["Stack.pop"].refused["raises:IndexError"] == "names TypeError, not IndexError"
    out, _ = fill_with({"raises:IndexError|Stack.pop": "if a ValueError occurs"})
    assert "ValueError" not in out


@pytest.mark.parametrize(
    ("key", "code"),
    [
        ("summary|config_tools", "def __init__(self)"),
        ("summary|read_config", "if isinstance(path, str)"),
        ("summary|Stack.pop", "return self.items[-1]"),
        ("summary|Stack", "self.items = []"),
        ("param:path|read_config", "os.path.exists handle.read"),
    ],
)
def test_code_is_not_a_sentence(key: str, code: str) -> None:
    out, outcomes = fill_with({key: code})
    slot, _, qualname = key.partition("|")
    name = "" if qualname == "config_tools" else qualname.rsplit(".", 1)[-1]
    written = docstring_of(out, name)
    assert written and code.lower() not in written.lower(), written
    assert outcomes[qualname].refused[slot].startswith("is ")


def test_a_summary_is_about_its_own_object() -> None:
    out, outcomes = fill_with(
        {
            "summary|Stack.push": "pop the last item",  # a sibling method's verb
            "summary|config_tools": "read config",  # a module summary naming one of its functions
            "summary|Stack": "push the item",  # a class summary describing one of its methods
        }
    )
    assert "Pop the last item" not in out and "Read config." not in out and "Push the item." not in out
    assert outcomes["Stack.push"].refused["summary"] == "is about `pop`, not `push`"
    assert outcomes["config_tools"].refused["summary"] == "is about `read_config`, not `config_tools`"
    assert outcomes["Stack"].refused["summary"] == "is about `push`, not `Stack`"


def test_a_class_is_not_said_to_do_what_none_of_its_methods_does() -> None:
    out, outcomes = fill_with({"summary|Stack": "replace the given item"})
    assert "Replace" not in out and docstring_of(out, "Stack") == "Stack."
    out, _ = fill_with({"summary|Stack": "a last-in first-out stack of items"})
    assert docstring_of(out, "Stack") == "A last-in first-out stack of items."


def test_a_parameter_is_not_described_with_another_parameters_name() -> None:
    out, outcomes = fill_with({"param:default|read_config": "the path"})
    assert "default: The path." not in out and "default: The default." in out
    assert outcomes["read_config"].refused["param:default"] == (
        "describes `default` with another parameter's name (`path`)"
    )
    out, _ = fill_with({"param:default|read_config": "returned when the path does not exist"})
    assert "default: Returned when the path does not exist." in out  # naming another one is fine in passing


def test_a_value_is_not_said_to_be_a_parameter_that_is_never_returned() -> None:
    out, outcomes = fill_with({"summary|read_config": "return a path to the path", "returns|read_config": "the path"})
    assert "Return a path" not in out and "        The path." not in out
    assert outcomes["read_config"].refused["summary"] == "says it returns `path`, which no return statement uses"
    out, _ = fill_with({"summary|read_config": "return the default or the file's text"})
    assert "Return the default or the file's text." in out  # `default` is returned


def test_a_refused_candidate_is_resampled_before_falling_back() -> None:
    filler_says = {"summary|Stack.push": ["returns the given item", "append `item` to the stack"]}
    out, outcomes = fill_with(filler_says)
    assert "Append `item` to the stack." in out and "summary" not in outcomes["Stack.push"].refused


def test_the_names_only_sentences_of_the_example_pass_the_monitor() -> None:
    tree = facts.parse_python(EXAMPLE)
    push = Skeleton("method", "push", params=[Param("item")])
    known = facts.python_facts(tree, push, 12, "Stack")
    assert known.returns_value is False and known.others == frozenset({"__init__", "pop"})
    texts = names.texts(known, push.slots())
    assert texts["summary"] == "Push `item` onto the stack."
    assert all(monitor.contradiction(Slot.from_key(k), v, known) is None for k, v in texts.items())


@dataclass
class Refuse:
    """A monitor (infill.core.monitor.Monitor) refusing the fills `why` gives a reason for."""

    why: Callable[[str], str | None]

    def rejection(self, patched: bytes, edits: Sequence[api.Edit]) -> str | None:
        return next((r for e in edits if (r := self.why(e.text.strip())) is not None), None)


def test_fill_text_resamples_what_the_monitor_refuses_and_never_fails_on_it() -> None:
    source = "def inc(x):\n    pass\n"
    spans = resolve(source.encode(), [Selection("span", "2:2")], "python")
    no_constant = Refuse(lambda text: "returns a constant" if text == "return 1" else None)

    def run(seed: int, refuse: Refuse = no_constant, **decode: object) -> api.FillResult:
        config = DecodeConfig(seed=seed, **decode)  # type: ignore[arg-type]
        return api.fill_text(
            source, spans, language="python", model=ModelSpec("fake-monitor"), decode=config,
            options=FillOptions(retrieve=False), monitor=refuse,
        )  # fmt: skip

    with fake_model([[("return 1", 0.5), ("return x + 1", 0.5)]], name="fake-monitor"):
        results = [run(seed) for seed in range(12)]
        assert {r.text for r in results} == {"def inc(x):\n    return x + 1\n"}
        assert any(r.stats["refused"] > 0 for r in results)  # some seeds drew the refused fill first
        everything = run(0, refuse=Refuse(lambda text: "no"))  # all refused: resampled, then the most likely fill
        assert everything.stats["refused"] == 2 and everything.stats["samples"] == 1 + FillOptions().max_resample
        assert everything.text.startswith("def inc(x):\n    return ") and not everything.warnings
    with fake_model([[("return 1", 0.6), ("return x + 1", 0.4)]], name="fake-monitor"):
        # beam search is not steered by a monitor (as with the static one): it ranks the fills the beam finished,
        # here only the refused one, which is still returned
        beam = run(0, decoder="beam", beam=2, temperature=0.0)
        assert beam.text == "def inc(x):\n    return 1\n" and beam.stats["refused"] == 1


def _written(report: dict[str, object]) -> dict[str, str]:
    files = report["files"]
    assert isinstance(files, list)
    return {d["name"]: d["docstring"] for d in files[0]["definitions"] if d["docstring"]}


@pytest.mark.parametrize("trust", [[], ["--min-probability", "0"]], ids=["default", "model-whenever-allowed"])
def test_the_example_gets_no_false_sentence_from_the_real_model(tmp_path: Path, trust: list[str]) -> None:
    """`infill docstrings --diff` on the file from the bug report, with the packaged model: by default, and
    trusting the model wherever the monitor lets it through (then only the monitor stops the false sentences the
    report found: "Def __init__(self)." for the module, "Return a path to the path." for read_config, "Replace the
    given item." for Stack, "Return the given item." for push, "Raises: IndexError: TypeError." for pop)."""
    from click.testing import CliRunner

    from infill.commands.docstrings import docstrings

    path = tmp_path / "example.py"
    path.write_text(EXAMPLE)
    args = ["--diff", "--daemon", "off", "--format", "json", *trust, str(path)]
    result = CliRunner().invoke(docstrings, args)
    assert result.exit_code == 1, result.output  # --diff with a change
    assert path.read_text() == EXAMPLE
    written = _written(json.loads(result.stdout))
    assert set(written) == {"example", "read_config", "Stack", "Stack.push", "Stack.pop"}
    summaries = {name: doc.strip('"').splitlines()[0] for name, doc in written.items()}
    assert "(" not in summaries["example"] and "def " not in summaries["example"].lower()
    assert not summaries["read_config"].startswith("Return a path")
    assert summaries["Stack"] != "Replace the given item."
    assert "return" not in written["Stack.push"].lower()
    raises = written["Stack.pop"].split("Raises:")[1]
    assert "IndexError" in raises and not re.search(r"\b(?!IndexError)\w+Error\b", raises)
    if not trust:  # the default: names-only sentences unless the calibrated model is likely right
        assert summaries["Stack.push"] == "Push `item` onto the stack."
