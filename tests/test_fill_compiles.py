"""Python fills compile: when some text in the span makes the file compile (its own text, or a filler such as
`pass` or `if True:` at a level the line may take), only fills with which CPython compiles the file are
accepted, although the emptied line alone leaves a file that does not compile. Other languages get the same
rule from tree-sitter's ERROR / MISSING nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_cli import compiles, fake_model

from infill import api
from infill.cli import main
from infill.config import FillOptions, ModelSpec
from infill.core import checks
from infill.errors import NoValidFillError
from infill.spans import Selection, Span, resolve

LOOP = "def total(l):\n    s = 0\n{line}\n        s += e\n    return s\n"  # the emptied line opened a loop


def fill(text: str, where: str, **kw: object) -> api.FillResult:
    data = text.encode()
    spans = resolve(data, [Selection("span", where)], "python")
    return api.fill_text(text, spans, language="python", model=ModelSpec("fake-compile"), **kw)  # type: ignore[arg-type]


def test_an_emptied_block_opener_needs_a_block_opener() -> None:
    """The emptied `for e in l:` leaves an unexpected indent: the file does not compile as it stands, but
    `if True:` at the line's level would make it compile, so the likelier simple statement is refused."""
    src = LOOP.format(line="")
    assert not compiles(src) and checks.syntax_errors("python", src.encode()) == 0  # tree-sitter sees no error
    with fake_model([[("s = s + 1", 0.7), ("for e in l:", 0.3)]], name="fake-compile"):
        r = fill(src, "3:3", options=FillOptions(max_resample=20))
    assert r.text == LOOP.format(line="    for e in l:") and compiles(r.text)
    # negative control: without the syntax check the likelier line is written, and the file does not compile
    with fake_model([[("s = s + 1", 0.7), ("for e in l:", 0.3)]], name="fake-compile"):
        unchecked = fill(src, "3:3", options=FillOptions(syntax_check=False))
    assert not compiles(unchecked.text)


def test_a_break_below_needs_a_loop() -> None:
    """The emptied line bound a loop whose body breaks: `if` would make the file parse but not compile
    ('break' outside loop); the filler `while True:` shows a loop fits, so only a loop is accepted."""
    src = "def f(xs):\n    n = 0\n\n        if n > 3:\n            break\n        n += 1\n    return n\n"
    with fake_model([[("if xs:", 0.7), ("for x in xs:", 0.3)]], name="fake-compile"):
        r = fill(src, "3:3", options=FillOptions(max_resample=20))
    assert "    for x in xs:\n" in r.text and compiles(r.text)


@pytest.mark.parametrize(
    ("source", "line", "bad", "good"),
    [
        # `if ...:` before a dedent: "expected an indented block"
        ("def f(x):\n    y = 0\n{line}\n    return y\n", "3:3", "if x:", "y = x"),
        # `else:` with no `if`
        ("def f(x):\n    y = 0\n{line}\n    return y\n", "3:3", "else:", "y = 1"),
        # compile-stage errors that ast.parse accepts: `break` outside a loop, `return` at module level
        ("def f(x):\n    y = 0\n{line}\n    return y\n", "3:3", "break", "y = 2"),
        ("x = 1\n{line}\ny = 2\n", "2:2", "return x", "x = 3"),
        # an emptied function header: its body returns, so only a `def` makes the file compile
        ("import os\n\n{line}\n    return os.sep\n", "3:3", "if True:", "def f():"),
        # an emptied line that opened a bracket the next lines continue (HumanEval/19's `value_map = {`); as a
        # real model does, these fills carry their own indentation
        ("def f(x):\n{line}\n        'zero': 0,\n    }}\n    return m[x]\n", "2:2", "    return 0", "    m = {"),
        # ... and one that closed it (HumanEval/105's `}`)
        ("def f(x):\n    m = {{\n        'zero': 0,\n{line}\n    return m[x]\n", "4:4", "        'one': 1,", "    }"),
        # a file indented in uneven steps: the emptied line's level shows only in the lines below it
        (
            "def f(a):\n    while a:\n{line}\n        a = 0\n      a -= 1\n    return a\n",
            "3:3",
            "      x = 1",
            "      if a:",
        ),
    ],
)
def test_fills_that_do_not_compile_are_refused(source: str, line: str, bad: str, good: str) -> None:
    src = source.format(line="")
    with fake_model([[(bad, 0.8), (good, 0.2)]], name="fake-compile"):
        r = fill(src, line, options=FillOptions(max_resample=20))
    assert compiles(r.text) and good in r.text and bad not in r.text.replace(good, "")


def test_when_no_text_can_make_it_compile_tree_sitter_rules() -> None:
    """A file broken elsewhere compiles with no text in the span: the old rule (add no tree-sitter error)."""
    src = LOOP.format(line="") + "def h(:\n"
    with fake_model(["s = s + 1"], name="fake-compile"):
        r = fill(src, "3:3")
    assert "    s = s + 1\n" in r.text and not r.warnings


def test_never_writes_a_file_that_stops_compiling(tmp_path: Path) -> None:
    """Through the CLI: a model that only offers non-compiling lines gets exit 3 and the file is untouched."""
    src = LOOP.format(line="")
    p = tmp_path / "loop.py"
    p.write_text(src)
    with fake_model(["s = s + 1"], name="fake-compile"):
        r = CliRunner().invoke(main, ["fill", str(p), "--span", "3:3", "--model", "fake-compile"])
    assert r.exit_code == 3 and "does not compile" in r.stderr, r.output
    assert p.read_text() == src


def test_other_languages_hold_fills_to_what_a_filler_allows() -> None:
    """JavaScript: the emptied `if (x) {` leaves an unmatched `}` (one tree-sitter error); a `{` filler makes the
    file error-free, so a statement that keeps the error is refused and the opener is chosen."""
    src = "function f(x) {\n  let y = 0;\n\n    y = 1;\n  }\n  return y;\n}\n"
    at = src.index("\n\n") + 1
    check = checks.SyntaxCheck("javascript", src.encode(), [Span(at, at)])
    assert checks.syntax_errors("javascript", src.encode()) == 1 and check.best.errors == 0
    with fake_model([[("y = 2;", 0.7), ("if (x) {", 0.3)]], name="fake-compile"):
        r = api.fill_text(
            src,
            [Span(at, at, "--span 3:3", one_line=True)],
            language="javascript",
            model=ModelSpec("fake-compile"),
            options=FillOptions(max_resample=20),
        )
    assert "  if (x) {\n" in r.text and checks.syntax_errors("javascript", r.text.encode()) == 0


@pytest.mark.parametrize("language", ["javascript", "typescript", "tsx"])
def test_a_method_written_into_an_arrow_body_is_a_syntax_error(language: str) -> None:
    """tree-sitter reads `() => { render() {} }` as an arrow returning an object, without an ERROR node; no
    JavaScript engine does (a `{` after `=>` opens a block). Such a body counts as an error, a label does not."""

    def source(body: str) -> bytes:
        return f"const Hello = (props) => {{\n{body}\n}};\n".encode()

    for bad in ("  render() {\n    return 1;\n  }", "  ...props", '  "a": 1', "  a: 1, b: 2"):
        assert checks.syntax_errors(language, source(bad)) == 1, bad
    for good in ("  return 1;", "  a: 1", "  a, b", "", "  return { render() {} };"):
        assert checks.syntax_errors(language, source(good)) == 0, good
    with fake_model([[("render() {\n}", 0.7), ("return 1;", 0.3)]], name="fake-arrow"):
        r = api.fill_text(
            source("  return 0;").decode(),
            resolve(source("  return 0;"), [Selection("function", "Hello")], language, "a"),
            language=language,
            model=ModelSpec("fake-arrow"),
            options=FillOptions(max_resample=20),
        )
    assert r.text == source("  return 1;").decode()


def test_no_fill_at_all_is_an_error_not_a_broken_file() -> None:
    with fake_model([[("s = s + 1", 0.5), ("print(s)", 0.5)]], name="fake-compile"):
        with pytest.raises(NoValidFillError, match="does not compile"):
            fill(LOOP.format(line=""), "3:3", options=FillOptions(max_resample=4))


def _check(language: str, source: str, holes: list[str], texts: list[str]) -> str | None:
    """SyntaxCheck's verdict on `source` with each hole (a substring, in order) replaced by its text."""
    data = source.encode()
    spans, edits, at = [], [], 0
    for hole, text in zip(holes, texts, strict=True):
        start = data.index(hole.encode(), at)
        at = start + len(hole.encode())
        spans.append(Span(start, at, label=hole, placeholder=hole == "<FILL>"))
        edits.append(checks._Edit(start, at, text))
    patched = checks._apply_shifted(data, edits, 0)
    return checks.SyntaxCheck(language, data, spans).rejection(patched, edits)


TWO_HOLES = "def mean(xs):\n    total = sum(xs)\n    <FILL>\n\n\nclass A:\n    def f(self):\n        <FILL>\n"


def test_fills_may_not_turn_the_code_between_them_into_a_string() -> None:
    """Two `\"\"\"` fills make one string of the class between them: the file compiles (so CPython and
    tree-sitter accept it), but the code after the first fill is no longer code."""
    swallowed = TWO_HOLES.replace("<FILL>", '"""')
    assert compiles(swallowed) and checks.syntax_errors("python", swallowed.encode()) == 0
    assert "runs over" in (_check("python", TWO_HOLES, ["<FILL>", "<FILL>"], ['"""', '"""']) or "")
    # control: fills that end their own strings and comments pass
    assert _check("python", TWO_HOLES, ["<FILL>", "<FILL>"], ['"""Mean."""', "return 1  # one"]) is None


@pytest.mark.parametrize(
    ("language", "source", "hole", "text", "refused"),
    [
        # an inline span: a comment the fill starts takes the rest of the line (`b)`), and the line compiles
        ("python", "total = compute(a, b)\n", "a, ", "a)  # ", True),
        ("python", "total = compute(a, b)\n", "a, ", "a + 1, ", False),
        # a span ending inside a string: the fill's string runs over the rest of it, as the span's own text did
        ("python", 'x = "hello world"\n', '"hello', '"goodbye', False),
        # text written inside a docstring stays in the docstring that began before the span
        ("python", 'def f():\n    """Sum.\n\n    old\n    """\n', "    old", "    Details.", False),
        # a block comment opened in a JavaScript span swallows the statement after it
        ("javascript", "let a = 1;\nlet b = 2;\n/* keep */\n", "let a = 1;", "let a = 1; /*", True),
        ("javascript", "let a = 1;\nlet b = 2;\n", "let a = 1;", "let a = 1; // one", False),
    ],
)
def test_a_string_or_comment_a_fill_opens_may_not_run_over_the_code_after_it(
    language: str, source: str, hole: str, text: str, refused: bool
) -> None:
    reason = _check(language, source, [hole], [text])
    assert (reason is not None and "runs over" in reason) == refused, reason
