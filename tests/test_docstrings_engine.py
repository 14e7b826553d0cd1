"""Filling and updating docstrings through the SlotFiller seam, with a deterministic fake model."""

from __future__ import annotations

import ast
import textwrap

import pytest
from fixtures_doc import FakeFiller, messy_text

from infill.docstrings.config import DocstringConfig
from infill.docstrings.engine import process_source

SOURCE = textwrap.dedent(
    """\
    import os


    def add(a: int, b: int = 2) -> int:
        # a comment first
        if a < 0:
            raise ValueError("negative")
        return a + b


    async def stream(*paths, **options):
        for p in paths:
            yield p


    class Box:
        def __init__(self, size: int) -> None:
            self.size = size

        def grow(self, by): self.size += by


    def short(): return 1
    class Empty: pass
    """
)


def fill(source: str, filler: FakeFiller | None = None, **cfg: object) -> tuple[str, FakeFiller]:
    """Fill with the fake model's text wherever the monitor lets it through (min_probability 0 by default)."""
    filler = filler or FakeFiller()
    settings = {"min_probability": 0.0, **cfg}
    result = process_source(source, "pkg/mod.py", DocstringConfig(**settings), filler)  # type: ignore[arg-type]
    return result.text, filler


def test_fills_every_missing_docstring_with_one_call_each() -> None:
    out, filler = fill(SOURCE)
    ast.parse(out)
    tree = ast.parse(out)
    documented = {
        getattr(n, "name", "module"): ast.get_docstring(n)
        for n in ast.walk(tree)
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    assert all(documented[name] for name in ("module", "add", "stream", "Box", "grow", "short", "Empty"))
    assert documented["__init__"] is None  # its argument is documented in the class docstring
    assert len(filler.calls) == 7  # one model call per definition, all of its slots at once
    add_text, add_spans = next(c for c in filler.calls if any(s.label.endswith("|add") for s in c[1]))
    assert [s.label.split("|")[0] for s in add_spans] == ["summary", "param:a", "param:b", "returns",
                                                          "raises:ValueError"]  # fmt: skip
    assert all(s.start_byte == s.end_byte for s in add_spans)  # empty slots in the skeleton
    assert "return a + b" in add_text and "Args:" in add_text  # the function's code is the context
    assert documented["add"] == textwrap.dedent(
        """\
        Return the add of the input.

        Args:
            a: The a to use.
            b: The b to use.

        Returns:
            The computed value.

        Raises:
            ValueError: If the add is invalid."""
    )
    assert "Yields:\n    Each item in turn." in (documented["stream"] or "")
    assert "*paths: The paths to use." in (documented["stream"] or "")
    assert "size: The size to use." in (documented["Box"] or "")


def test_original_lines_survive_and_one_liners_become_blocks() -> None:
    out, _ = fill(SOURCE)
    kept = [line for line in SOURCE.splitlines() if "):" not in line and ": pass" not in line]
    out_lines = iter(out.splitlines())
    assert all(any(line == o for o in out_lines) for line in kept)  # original lines, in order
    assert '    def grow(self, by):\n        """' in out and "\n        self.size += by\n" in out
    # a class returns nothing: the monitor refuses the fake's "Returns the Empty ..." and the name speaks instead
    assert 'class Empty:\n    """Empty."""\n\n    pass\n' in out


def test_idempotent() -> None:
    once, _ = fill(SOURCE)
    twice, second = fill(once)
    assert twice == once and second.calls == []


def test_check_mode_needs_no_model() -> None:
    result = process_source(SOURCE, "pkg/mod.py", DocstringConfig(), None)
    assert result.text == SOURCE
    assert [(o.name, o.line, o.status) for o in result.outcomes] == [
        ("mod", 1, "missing"), ("add", 4, "missing"), ("stream", 11, "missing"), ("Box", 16, "missing"),
        ("Box.grow", 20, "missing"), ("short", 23, "missing"), ("Empty", 24, "missing"),
    ]  # fmt: skip


def test_min_confidence_leaves_docstrings_missing() -> None:
    unsure = FakeFiller(logprob=-5.0)
    result = process_source(SOURCE, "m.py", DocstringConfig(min_confidence=-3.0), unsure)
    assert result.text == SOURCE
    assert {o.status for o in result.outcomes} == {"left-missing"}
    assert all(o.confidence == pytest.approx(-5.0) for o in result.outcomes)
    trusting = DocstringConfig(min_confidence=-3.0, min_probability=0.0)
    sure = process_source(SOURCE, "m.py", trusting, FakeFiller(logprob=-1.0))
    # the summaries the monitor refuses (a class or a procedure said to return something) are left missing too
    refused = {o.name for o in sure.outcomes if "summary" in o.refused}
    assert refused == {"m", "Box", "Box.grow", "Empty"}
    assert {o.status for o in sure.outcomes if o.name not in refused} == {"filled"}
    assert {o.status for o in sure.outcomes if o.name in refused} == {"left-missing"}


def test_unusable_output_gets_neutral_text_and_is_reported() -> None:
    result = process_source(SOURCE, "m.py", DocstringConfig(), FakeFiller(text_for=messy_text))
    ast.parse(result.text)
    add = next(o for o in result.outcomes if o.name == "add")
    assert add.status == "low-confidence"
    assert "returns" in add.fallbacks and "raises:ValueError" in add.fallbacks
    assert add.docstring is not None and "\\" not in add.docstring and add.docstring.count('"""') == 2


def test_crlf_and_tabs_are_kept() -> None:
    source = "def f(x):\r\n\treturn x\r\n"
    out, _ = fill(source, ignore_module=True)
    assert "\r\n" in out and "\n" not in out.replace("\r\n", "")
    assert out.startswith('def f(x):\r\n\t"""Return the f of the input.\r\n\r\n\tArgs:\r\n\t    x: The x to use.')
    ast.parse(out.replace("\r\n", "\n"))


def test_style_auto_follows_the_file() -> None:
    source = textwrap.dedent(
        '''\
        """Module."""


        def documented(x):
            """Do it.

            Parameters
            ----------
            x : int
                The x.
            """


        def bare(y):
            return y
        '''
    )
    out, _ = fill(source, style="auto")
    assert "    Parameters\n    ----------\n    y\n        The y to use.\n" in out


UPDATE_CASES = {
    "google": (
        '''\
        def f(a, c, *, d=1):
            """Do it.

            Args:
                a: Kept text.
                b: Stale entry.
                    With a second line.

            Returns:
                Something.
            """
        ''',
        '''\
        def f(a, c, *, d=1):
            """Do it.

            Args:
                a: Kept text.
                c: The c to use.
                d: The d to use.

            Returns:
                Something.
            """
        ''',
    ),
    "numpy": (
        '''\
        def f(a, c):
            """Do it.

            Parameters
            ----------
            a : int
                Kept text.
            b : str
                Stale.

            Returns
            -------
            int
                Something.
            """
        ''',
        '''\
        def f(a, c):
            """Do it.

            Parameters
            ----------
            a : int
                Kept text.
            c
                The c to use.

            Returns
            -------
            int
                Something.
            """
        ''',
    ),
    "sphinx": (
        '''\
        def f(a, c):
            """Do it.

            :param a: Kept text.
            :param b: Stale.
            :type b: str
            :returns: Something.
            """
        ''',
        '''\
        def f(a, c):
            """Do it.

            :param a: Kept text.
            :param c: The c to use.
            :returns: Something.
            """
        ''',
    ),
    "one-line": (
        '''\
        def f(a):
            """Do it."""
        ''',
        '''\
        def f(a):
            """Do it.

            Args:
                a: The a to use.
            """
        ''',
    ),
    "single-quoted": (
        """\
        def f(a, b):
            'Do it.'
        """,
        '''\
        def f(a, b):
            """Do it.

            Args:
                a: The a to use.
                b: The b to use.
            """
        ''',
    ),
    "section-on-the-quotes-line": (
        '''\
        def f(a, b):
            """Args:
                a: Kept.
            """
        ''',
        '''\
        def f(a, b):
            """Args:
                a: Kept.
                b: The b to use.
            """
        ''',
    ),
    "all-stale": (
        '''\
        def f():
            """Do it.

            Args:
                a: Gone.

            Returns:
                Something.
            """
        ''',
        '''\
        def f():
            """Do it.

            Returns:
                Something.
            """
        ''',
    ),
}


@pytest.mark.parametrize("case", sorted(UPDATE_CASES))
def test_update_fixes_parameter_entries_only(case: str) -> None:
    before, after = (textwrap.dedent(s) for s in UPDATE_CASES[case])
    cfg = DocstringConfig(ignore_module=True, min_probability=0.0)  # the fake model's text for new entries
    result = process_source(before, "m.py", cfg, FakeFiller(), update=True)
    assert result.text == after
    assert process_source(after, "m.py", cfg, FakeFiller(), update=True).text == after  # idempotent
    assert process_source(before, "m.py", cfg, FakeFiller()).text == before  # never touched without --update


def test_update_leaves_a_single_quoted_docstring_holding_double_quotes() -> None:
    before = "def f(a, b):\n    'Say \"hi\".'\n"
    cfg = DocstringConfig(ignore_module=True, min_probability=0.0)
    assert process_source(before, "m.py", cfg, FakeFiller(), update=True).text == before


def test_numpy_type_lines_read_as_the_annotation_in_the_docstring() -> None:
    source = 'def f(x: L[\'"""\'], y: L["\\\\n"] = "a") -> L["\\\\t"]:\n    return x\n'
    out, _ = fill(source, ignore_module=True, style="numpy")
    doc = ast.get_docstring(ast.parse(out).body[0])  # type: ignore[arg-type]
    assert doc is not None
    assert 'x : L[\'"""\']\n' in doc and 'y : L["\\\\n"], optional\n' in doc and 'L["\\\\t"]\n' in doc


def test_non_ascii_source_offsets_and_stub_files() -> None:
    source = '"""Ünïcödé módulo: 漢字."""\n\n\ndef größe(wert: str = "ü") -> str:  # ß\n    return wert * 2\n'
    out, filler = fill(source)
    assert out.startswith(source.split("    return")[0]) and out.endswith("    return wert * 2\n")
    assert '    """Return the größe of the input.\n\n    Args:\n        wert: The wert to use.' in out
    context, spans = filler.calls[0]
    summary = next(s for s in spans if s.label.startswith("summary"))
    assert context.encode()[summary.start_byte - 3 : summary.start_byte] == b'"""'  # spans are UTF-8 bytes
    stub = "def f(x: int) -> int: ...\nclass C:\n    def m(self) -> None: ...\n"
    out, _ = fill(stub, ignore_module=True)
    ast.parse(out)
    assert out.startswith('def f(x: int) -> int:\n    """Return the f of the input.\n')
    # `-> None`: even a stub may not say it returns something
    assert '    def m(self) -> None:\n        """Run m."""\n        ...\n' in out


def test_definitions_under_if_and_comment_only_bodies() -> None:
    source = "if True:\n    def g(a):\n        # note\n        pass\n"
    out, _ = fill(source, ignore_module=True)
    assert out == (
        'if True:\n    def g(a):\n        """Return the g of the input.\n\n        Args:\n'
        '            a: The a to use.\n        """\n        # note\n        pass\n'
    )


def test_update_keeps_crlf() -> None:
    before = 'def f(a, b):\r\n    """Do it.\r\n\r\n    Args:\r\n        a: Kept.\r\n    """\r\n'
    cfg = DocstringConfig(ignore_module=True, min_probability=0.0)
    result = process_source(before, "m.py", cfg, FakeFiller(), update=True)
    assert result.text == before.replace("Kept.\r\n", "Kept.\r\n        b: The b to use.\r\n")


def test_blank_lines_after_the_header_do_not_end_up_after_the_docstring() -> None:
    out, _ = fill("def f():\n\n\n    return 1\n", ignore_module=True)
    docstring = '    """Return the f of the input.\n\n    Returns:\n        The computed value.\n    """\n'
    assert out == "def f():\n" + docstring + "    return 1\n"
    out, _ = fill("class C:\n\n    x = 1\n", ignore_module=True)
    assert out == 'class C:\n    """C."""\n\n    x = 1\n'


def test_min_confidence_also_leaves_missing_when_the_summary_is_unusable() -> None:
    cfg = DocstringConfig(min_confidence=-3.0, ignore_module=True)
    blank = FakeFiller(text_for=lambda key, name: "   \n" if key == "summary" else "the input", logprob=-0.5)
    result = process_source("def f(x):\n    return x\n", "m.py", cfg, blank)
    assert result.text == "def f(x):\n    return x\n" and result.outcomes[0].status == "left-missing"


@pytest.mark.parametrize("bom", ["", "\ufeff"])
def test_at_an_offset_only_the_definition_around_it_is_filled_and_edits_say_where(bom: str) -> None:
    """An editor's "add a docstring to the function at the cursor": the innermost definition around the offset
    (a method inside a class: the method); `edits` are the byte replacements that turn the original into the
    result."""
    source = bom + SOURCE
    data = source.encode("utf-8")
    filler = FakeFiller()
    inside = data.index(b"self.size = size")
    result = process_source(source, "m.py", DocstringConfig(ignore_init_method=False), filler, at=inside)
    assert [o.name for o in result.outcomes] == ["Box.__init__"]
    assert len(filler.calls) == 1
    from infill.patch import apply_edits

    assert apply_edits(data, result.edits).decode("utf-8") == result.text
    (edit,) = result.edits
    assert data[: edit.start_byte].endswith(b"-> None:\n") and edit.text.lstrip().startswith('"""')
    # the whole file: every edit, in order, reproduces the text
    whole = process_source(source, "m.py", DocstringConfig(), FakeFiller())
    assert len(whole.edits) == len([o for o in whole.outcomes if o.docstring]) > 1
    assert apply_edits(data, whole.edits).decode("utf-8") == whole.text
    # outside every definition (the import line): nothing
    assert process_source(source, "m.py", DocstringConfig(), FakeFiller(), at=data.index(b"import")).outcomes == []
