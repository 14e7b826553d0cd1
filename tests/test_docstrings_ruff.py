"""Generated docstrings pass ruff's pydocstyle rules for their convention; ruff format and black keep them."""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixtures_doc import FakeFiller, default_text, messy_text

from infill.docstrings.config import DocstringConfig
from infill.docstrings.engine import process_source
from infill.docstrings.styles import RUFF_CONVENTION

# Already formatted (ruff format and black agree), so any change they would make is ours.
SOURCE = textwrap.dedent(
    '''\
    """Existing module docstring."""

    import os
    from collections.abc import Iterator


    def add(a: int, b: int = 2, *args: int, scale: float = 1.0, **kwargs: str) -> int:
        if a < 0:
            raise ValueError("negative")
        return a + b


    def walk(root: str) -> Iterator[str]:
        for name in os.listdir(root):
            yield name


    def long_parameter_names(a_really_long_parameter_name_for_wrapping, another_one_here):
        return None


    class Stack:
        def __init__(self, items: list[int]) -> None:
            self.items = items

        def push(self, item: int) -> None:
            self.items.append(item)

        @property
        def top(self) -> int:
            return self.items[-1]

        class Node:
            value = 1


    def untyped(x, y=None):
        if x:
            raise KeyError(x)
        return x
    '''
)


def long_text(key: str, qualname: str) -> str:
    more = "and then it checks every input against the schema before it converts units, rounds values"
    return f"{default_text(key, qualname)} {more} and logs each step for later review by the caller"


def ruff(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True)


def assert_black_keeps(cwd: Path) -> None:
    """black leaves cwd/mod.py as it is (where black is installed)."""
    if importlib.util.find_spec("black") is not None:
        command = [sys.executable, "-m", "black", "--check", "--diff", "-q", "mod.py"]
        black = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
        assert black.returncode == 0, black.stdout


@pytest.mark.parametrize("text_for", [default_text, messy_text, long_text], ids=["plain", "messy", "long"])
@pytest.mark.parametrize("style", ["google", "numpy", "sphinx"])
def test_output_passes_pydocstyle_and_formatters(tmp_path: Path, style: str, text_for: object) -> None:
    assert ruff("format", "--isolated", "--check", "-", cwd=tmp_path).returncode in (0, 1)  # ruff is runnable
    (tmp_path / "before.py").write_text(SOURCE)
    assert ruff("format", "--isolated", "--check", "before.py", cwd=tmp_path).returncode == 0  # precondition
    result = process_source(SOURCE, "mod.py", DocstringConfig(style=style), FakeFiller(text_for=text_for))  # type: ignore[arg-type]
    (tmp_path / "mod.py").write_text(result.text)
    convention = RUFF_CONVENTION[style]
    # D105/D107: magic methods and __init__ are skipped on purpose (the class docstring holds __init__'s args)
    lint = ruff(
        "check", "--isolated", "--select", "D", "--ignore", "D105,D107", "--output-format", "concise",
        "--config", f'lint.pydocstyle.convention="{convention}"', "mod.py", cwd=tmp_path,
    )  # fmt: skip
    assert lint.returncode == 0, lint.stdout + "\n" + result.text
    formatted = ruff("format", "--isolated", "--diff", "mod.py", cwd=tmp_path)
    assert formatted.returncode == 0, formatted.stdout
    assert_black_keeps(tmp_path)


# PEP 8, ruff format and black: two blank lines between a module docstring and a top-level def or class (black
# alone wants one before a decorator there; ruff and PEP 8 win), one before anything else.
@pytest.mark.parametrize(
    "first",
    ["def f(x):\n    return x\n", "async def f(x):\n    return x\n", "class A:\n    x = 1\n",
     "@property\ndef f(x):\n    return x\n", "import os\n\nX = os.sep\n", "# a comment\ndef f(x):\n    return x\n"],
    ids=["def", "async-def", "class", "decorated", "import", "comment-then-def"],
)  # fmt: skip
def test_a_new_module_docstring_is_spaced_as_the_formatters_space_it(tmp_path: Path, first: str) -> None:
    (tmp_path / "before.py").write_text(first)
    assert ruff("format", "--isolated", "--check", "before.py", cwd=tmp_path).returncode == 0  # precondition
    result = process_source(first, "mod.py", DocstringConfig(), FakeFiller())
    assert ast.get_docstring(ast.parse(result.text)) is not None, result.text  # the module docstring was written
    (tmp_path / "mod.py").write_text(result.text)
    formatted = ruff("format", "--isolated", "--diff", "mod.py", cwd=tmp_path)
    assert formatted.returncode == 0, formatted.stdout
    if not first.startswith("@"):
        assert_black_keeps(tmp_path)


def test_a_stubs_new_module_docstring_has_one_blank_line_as_the_formatters_want(tmp_path: Path) -> None:
    stub = "def f(x: int) -> int: ...\n\nclass A:\n    x: int\n"
    result = process_source(stub, "mod.pyi", DocstringConfig(), FakeFiller())
    assert result.text.startswith('"""Mod module."""\n\ndef f(x: int) -> int:'), result.text


# black and ruff format put a blank line between a function's docstring and a nested def or class that opens its
# body (or the comment above one); pydocstyle's D202 allows exactly that blank line.
@pytest.mark.parametrize(
    "body",
    ["    def inner():\n        return 1\n\n    return inner\n",
     "    @staticmethod\n    def inner():\n        return 1\n\n    return inner\n",
     "    class Inner:\n        pass\n\n    return Inner\n",
     "    # the helper\n    def inner():\n        return 1\n\n    return inner\n",
     "    # a comment\n    value = 1\n    return value\n"],
    ids=["def", "decorated", "class", "comment-then-def", "statement"],
)  # fmt: skip
def test_a_docstring_above_a_nested_definition_is_spaced_as_the_formatters_space_it(tmp_path: Path, body: str) -> None:
    source = f'"""Module."""\n\n\ndef outer():\n{body}'
    (tmp_path / "before.py").write_text(source)
    assert ruff("format", "--isolated", "--check", "before.py", cwd=tmp_path).returncode == 0  # precondition
    result = process_source(source, "mod.py", DocstringConfig(), FakeFiller())
    assert ast.get_docstring(ast.parse(result.text).body[1]) is not None, result.text  # type: ignore[arg-type]
    (tmp_path / "mod.py").write_text(result.text)
    formatted = ruff("format", "--isolated", "--diff", "mod.py", cwd=tmp_path)
    assert formatted.returncode == 0, formatted.stdout
    lint = ruff("check", "--isolated", "--select", "D202", "--output-format", "concise", "mod.py", cwd=tmp_path)
    assert lint.returncode == 0, lint.stdout
    assert_black_keeps(tmp_path)
