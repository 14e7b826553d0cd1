"""Selections -> byte spans: line and line:column ranges, markers, tree-sitter definitions in 8 languages."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures_cli import fake_model
from hypothesis import given, settings
from hypothesis import strategies as st

from infill import languages
from infill.cli import main
from infill.errors import InputError
from infill.spans import (
    LineIndex,
    Selection,
    Span,
    check_spans,
    parse_span,
    resolve,
    snap_to_lines,
    whole_lines,
)


def text_of(data: bytes, spans: list[Span]) -> list[bytes]:
    return [data[s.start_byte : s.end_byte] for s in spans]


def test_parse_span() -> None:
    assert parse_span("12:18") == (12, 18)
    assert parse_span("7") == (7, 7)
    assert parse_span("3:5-4:1") == (3, 5, 4, 1)
    with pytest.raises(InputError):
        parse_span("a:b")


def test_line_index_lf_crlf_and_final_line() -> None:
    data = b"a\r\nbb\n\nccc"
    idx = LineIndex(data)
    assert idx.count == 4
    assert [(idx.start(i), idx.content_end(i)) for i in range(1, 5)] == [(0, 1), (3, 5), (6, 6), (7, 10)]
    assert LineIndex(b"x\n").count == 1
    assert LineIndex(b"").count == 0


def test_line_span_excludes_line_break() -> None:
    data = b"one\r\ntwo\r\nthree\r\n"
    (span,) = resolve(data, [Selection("span", "2:3")])
    assert data[span.start_byte : span.end_byte] == b"two\r\nthree"


def test_line_column_span_counts_characters() -> None:
    data = "é = 1\nfoo(x, y)\n".encode()
    (span,) = resolve(data, [Selection("span", "2:5-2:9")])
    assert data[span.start_byte : span.end_byte] == b"x, y"
    (ins,) = resolve(data, [Selection("span", "1:2-1:2")])
    assert ins.start_byte == ins.end_byte == len("é".encode())


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_a_line_selection_to_the_next_line_s_start_is_those_lines_whole(newline: str) -> None:
    """`--span 2:1-3:1` (an editor's line selection) is line 2 as `--span 2` takes it: its line break stays out of
    the span, or the fill (which ends without one) joins the next line; the same for several lines and at the
    end of the file. A selection that starts inside a line, or ends inside one, is taken as it is."""
    data = newline.join(["\ufeffone", "two", "three", ""]).encode()
    for columns, lines in (("2:1-3:1", "2"), ("1:1-3:1", "1:2"), ("1:1-2:1", "1")):
        (span,) = resolve(data, [Selection("span", columns)])
        (whole,) = resolve(data, [Selection("span", lines)])
        assert (span.start_byte, span.end_byte, span.one_line) == (whole.start_byte, whole.end_byte, whole.one_line)
    last = whole_lines(b"one\ntwo\n", 4, 8, "selection")  # an editor's selection of the last line, its break too
    assert last is not None and (last.start_byte, last.end_byte, last.one_line) == (4, 7, True)
    for columns, text in (("1:2-3:1", "ne" + newline + "two" + newline), ("2:2-3:1", "wo" + newline)):
        (span,) = resolve(data, [Selection("span", columns)])
        assert data[span.start_byte : span.end_byte] == text.encode(), columns


def test_a_whole_line_selection_s_fill_leaves_the_next_line_alone(tmp_path: Path) -> None:
    path = tmp_path / "a.py"
    path.write_text("def f(x):\n    y = x + 1\n\n    return y\n")
    with fake_model(["return x"], name="whole-lines"):
        result = CliRunner().invoke(main, ["fill", str(path), "--span", "2:1-3:1", "--model", "whole-lines"])
    assert result.exit_code == 0, result.output
    assert path.read_text() == "def f(x):\n    return x\n\n    return y\n"


def test_markers() -> None:
    data = b"a <F> b <F>\n"
    spans = resolve(data, [Selection("marker", "<F>")])
    assert text_of(data, spans) == [b"<F>", b"<F>"]
    assert all(s.placeholder for s in spans)


@pytest.mark.parametrize(
    ("sels", "needle"),
    [
        ([Selection("span", "5:5")], "out of range"),
        ([Selection("span", "2:1")], "reversed"),
        ([Selection("span", "1:3-1:1")], "reversed"),
        ([Selection("span", "1:1"), Selection("span", "1:2")], "overlap"),
        ([Selection("span", "1:2-1:2"), Selection("span", "1:2-1:2")], "overlap"),
        ([Selection("marker", "zzz")], "marker not found"),
        ([], "nothing selected"),
    ],
)
def test_bad_selections(sels: list[Selection], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        resolve(b"one\ntwo\n", sels)


def test_check_spans_rejects_split_utf8() -> None:
    with pytest.raises(InputError, match="inside a UTF-8 character"):
        check_spans("é".encode(), [Span(1, 2)])


def test_snap_to_lines() -> None:
    data = b"if x {\n    body\n}\n"
    start, end = snap_to_lines(data, data.index(b"{") + 1, data.index(b"}"))
    assert data[start:end] == b"    body"
    start, end = snap_to_lines(b"f() { a }", 5, 8)
    assert (start, end) == (5, 8)


# --- tree-sitter selectors in every supported language ------------------------------------------------------

DEFS = {
    "a.py": (
        b'class A:\n    """Doc."""\n\n    def f(self, x):\n        """Return x."""\n        y = x\n        return y\n',
        [
            ("function", "f", b"        y = x\n        return y"),
            ("function", "A.f", b"        y = x\n        return y"),
            (
                "class",
                "A",
                b'\n    def f(self, x):\n        """Return x."""\n        y = x\n        return y',
            ),
        ],
    ),
    "a.js": (
        b"class A {\n  m(x) { return x; }\n}\nfunction f(a) {\n  return a;\n}\nconst g = (x) => {\n  return 1;\n};\n",
        [
            ("function", "A.m", b" return x; "),
            ("function", "f", b"  return a;"),
            ("function", "g", b"  return 1;"),
            ("class", "A", b"  m(x) { return x; }"),
        ],
    ),
    "a.ts": (
        b"class A {\n  m(x: number): number {\n    return x;\n  }\n}\ninterface I {\n  a: number;\n}\n",
        [("function", "m", b"    return x;"), ("class", "I", b"  a: number;")],
    ),
    "a.go": (
        b"package m\n\ntype S struct {\n\tA int\n}\n\nfunc (s *S) M() int {\n\treturn 1\n}\n"
        b"func (t T[K]) M() int {\n\treturn 2\n}\nfunc M() {\n\tgo()\n}\n",
        [
            ("function", "S.M", b"\treturn 1"),  # a method is named after its receiver's type too
            ("function", "T.M", b"\treturn 2"),
            ("class", "S", b"\tA int"),
        ],
    ),
    "a.rs": (
        b"struct P { x: i32 }\nimpl P {\n    fn m(&self) -> i32 {\n        self.x\n    }\n}\n",
        [("function", "P.m", b"        self.x")],
    ),
    "A.java": (
        b"class A {\n    int m() {\n        return 1;\n    }\n}\n",
        [
            ("function", "A.m", b"        return 1;"),
            ("class", "A", b"    int m() {\n        return 1;\n    }"),
        ],
    ),
    "a.c": (
        b"struct S { int a; };\nstatic int *g(void) {\r\n  return 0;\r\n}\r\n",
        [("function", "g", b"  return 0;"), ("class", "S", b" int a; ")],
    ),
    "a.cpp": (
        b"class A { public: int m() { return 1; } };\nint A::n() {\n  return 2;\n}\n",
        [
            ("function", "A::n", b"  return 2;"),
            ("function", "A.m", b" return 1; "),
            ("class", "A", b" public: int m() { return 1; } "),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(DEFS))
def test_definitions(name: str) -> None:
    data, cases = DEFS[name]
    lang = languages.detect(name)
    assert lang is not None
    for kind, value, expected in cases:
        spans = resolve(data, [Selection(kind, value)], lang, name)  # type: ignore[arg-type]
        assert text_of(data, spans) == [expected], (kind, value)


def test_class_selector_matches_every_definition() -> None:
    data = b"struct P { x: i32 }\nimpl P {\n    fn m(&self) -> i32 {\n        self.x\n    }\n}\n"
    spans = resolve(data, [Selection("class", "P")], "rust", "a.rs")
    assert text_of(data, spans) == [b" x: i32 ", b"    fn m(&self) -> i32 {\n        self.x\n    }"]


@pytest.mark.parametrize("lang", ["python", "javascript", "typescript", "go", "rust", "java", "c", "cpp"])
def test_every_language_has_queries(lang: str) -> None:
    names = languages.capture_names(lang)
    assert {"function", "function.name", "function.body", "class", "class.name", "class.body"} <= set(names)


def test_node_selector_any_capture() -> None:
    data = b"# one\nx = 1  # two\ndef f():\n    pass\n"
    spans = resolve(data, [Selection("node", "comment")], "python", "a.py")
    assert text_of(data, spans) == [b"# one", b"# two"]
    spans = resolve(data, [Selection("node", "function.body")], "python", "a.py")
    assert text_of(data, spans) == [b"    pass"]


# Two classes with a method of the same name, and a function of that name: a qualified name picks one of them
SAME_NAMES = {
    "a.py": (
        b"class A:\n    def f(self):\n        return 'a'\n\n\nclass B:\n    def f(self):\n        return 'b'\n\n\n"
        b"def f():\n    return 'top'\n",
        {"A.f": b"        return 'a'", "B.f": b"        return 'b'"},
    ),
    "a.cpp": (
        b"int A::f() {\n  return 1;\n}\nint B::f() {\n  return 2;\n}\nint f() {\n  return 3;\n}\n",
        {"A::f": b"  return 1;", "B::f": b"  return 2;"},
    ),
    "a.js": (
        b"class A {\n  f() { return 1; }\n}\nclass B {\n  f() { return 2; }\n}\nfunction f() {\n  return 3;\n}\n",
        {"A.f": b" return 1; ", "B.f": b" return 2; "},
    ),
}


@pytest.mark.parametrize("name", sorted(SAME_NAMES))
def test_a_qualified_function_name_selects_that_class_s_method_only(name: str) -> None:
    """`--function A.f` is A's f: never B's f, nor a function f outside any class (each is matched on its whole
    qualified name, not on its last part)."""
    data, bodies = SAME_NAMES[name]
    lang = languages.detect(name)
    for qualified, body in bodies.items():
        spans = resolve(data, [Selection("function", qualified)], lang, name)
        assert text_of(data, spans) == [body], qualified
    assert len(resolve(data, [Selection("function", "f")], lang, name)) == 3  # the bare name: every f
    with pytest.raises(InputError, match="not found"):  # a class that has no f, though f exists elsewhere
        resolve(data, [Selection("function", "C.f")], lang, name)


def test_a_qualified_name_needs_the_whole_qualifier_to_match() -> None:
    """Outer.A.f is found as A.f and as Outer.A.f, but not as Other.A.f or B.A.f."""
    data = b"class Outer:\n    class A:\n        def f(self):\n            return 1\n"
    for found in ("f", "A.f", "Outer.A.f"):
        assert text_of(data, resolve(data, [Selection("function", found)], "python", "a.py")) == [
            b"            return 1"
        ]
    for missing in ("Other.A.f", "B.A.f", "Outer.f", "A.Outer.f"):
        with pytest.raises(InputError, match="not found"):
            resolve(data, [Selection("function", missing)], "python", "a.py")


# A function nested in a function, named by its enclosing functions as Python's __qualname__ names it (without
# "<locals>"): each file's nested function is "outer.inner"; its body
NESTED = {
    "a.py": (b"def outer(x):\n    def inner(y):\n        return y\n\n    return inner(x)\n", b"        return y"),
    "a.js": (
        b"function outer(x) {\n  function inner(y) {\n    return y;\n  }\n  return inner(x);\n}\n",
        b"    return y;",
    ),
}


@pytest.mark.parametrize("name", sorted(NESTED))
def test_a_nested_function_is_named_by_its_enclosing_functions(name: str) -> None:
    data, body = NESTED[name]
    lang = languages.detect(name)
    for found in ("inner", "outer.inner"):
        assert text_of(data, resolve(data, [Selection("function", found)], lang, name)) == [body], found
    with pytest.raises(InputError, match="not found"):
        resolve(data, [Selection("function", "other.inner")], lang, name)


# A function held by an object literal in a variable is named through the variable, as it is called: api.get
OBJECT_METHODS = b"const api = {\n  get(u) {\n    return 1;\n  },\n  post: (u) => {\n    return 2;\n  },\n};\n"


@pytest.mark.parametrize("name", ["a.js", "a.ts"])
def test_an_object_literal_s_functions_are_named_through_its_variable(name: str) -> None:
    lang = languages.detect(name)
    data = OBJECT_METHODS + b"function get(u) {\n  return 3;\n}\n"
    for qualified, body in (("api.get", b"    return 1;"), ("api.post", b"    return 2;")):
        assert text_of(data, resolve(data, [Selection("function", qualified)], lang, name)) == [body], qualified
    assert len(resolve(data, [Selection("function", "get")], lang, name)) == 2  # the bare name: every get
    with pytest.raises(InputError, match="not found"):
        resolve(data, [Selection("function", "other.get")], lang, name)


def test_a_method_s_nested_function_is_named_through_the_method() -> None:
    """A.f.g, as Python's __qualname__ (A.f.<locals>.g); A.g names a method g of A, which this file lacks."""
    data = b"class A:\n    def f(self):\n        def g():\n            return 1\n\n        return g()\n"
    assert text_of(data, resolve(data, [Selection("function", "A.f.g")], "python", "a.py")) == [b"            return 1"]
    with pytest.raises(InputError, match="not found"):
        resolve(data, [Selection("function", "A.g")], "python", "a.py")


def test_the_command_line_fills_only_the_qualified_method(tmp_path: Path) -> None:
    """`infill fill --function B.f` as a user runs it changes B's f and nothing else."""
    source = SAME_NAMES["a.py"][0].decode()
    path = tmp_path / "a.py"
    path.write_text(source)
    with fake_model(["return 'filled'"], name="fake-qualified"):
        result = CliRunner().invoke(main, ["fill", str(path), "--function", "B.f", "--model", "fake-qualified"])
    assert result.exit_code == 0, result.output
    assert path.read_text() == source.replace("return 'b'", "return 'filled'")


def test_function_not_found_lists_names() -> None:
    with pytest.raises(InputError, match=r"'nope' not found \(f, g\)"):
        resolve(b"def f(): pass\ndef g(): pass\n", [Selection("function", "nope")], "python", "a.py")


@pytest.mark.parametrize(
    ("lang", "source", "line"),
    [
        ("javascript", b"function f( {\n  return 1;\n}\nfunction g() {\n  return 2;\n}\n", 1),
        ("python", b"def f():\n    return 1\n\ndef g(:\n    return 2\n", 4),
    ],
)
def test_a_definition_not_found_in_a_file_that_does_not_parse_says_so(lang: str, source: bytes, line: int) -> None:
    """A syntax error can hide a definition from the grammar (the JavaScript file above has g, yet "has no
    functions"): the message says where the file stops parsing, rather than only that g is not there."""
    with pytest.raises(InputError, match=f"not found .*does not parse from line {line}"):
        resolve(source, [Selection("function", "nope")], lang, "a")
    with pytest.raises(InputError, match=r"not found \(f, g\)$"):  # a file that parses: the names alone
        resolve(b"def f(): pass\ndef g(): pass\n", [Selection("function", "nope")], "python", "a.py")


def test_selector_on_plain_text_and_unknown_extension() -> None:
    assert languages.detect("notes.md") is None
    assert [languages.detect(n) for n in ("a.C", "a.H", "a.c", "a.h", "a.CPP")] == ["cpp", "cpp", "c", "c", "cpp"]
    with pytest.raises(InputError, match="plain text"):
        resolve(b"def f(): pass\n", [Selection("function", "f")], None, "notes.md")


def test_grammars_found_from_source_tree() -> None:
    root = languages.grammars_root()
    assert (root / "python" / "definitions.scm").is_file()


# --- properties ---------------------------------------------------------------------------------------------

lines_st = st.lists(
    st.text(alphabet=st.characters(blacklist_characters="\r\n", blacklist_categories=("Cs",)), max_size=12),
    min_size=1,
    max_size=12,
)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(lines=lines_st, newline=st.sampled_from(["\n", "\r\n"]), data=st.data())
def test_line_spans_are_whole_lines(lines: list[str], newline: str, data: st.DataObject) -> None:
    text = newline.join(lines) + newline
    raw = text.encode()
    a = data.draw(st.integers(1, len(lines)))
    b = data.draw(st.integers(a, len(lines)))
    (span,) = resolve(raw, [Selection("span", f"{a}:{b}")])
    assert raw[span.start_byte : span.end_byte].decode() == newline.join(lines[a - 1 : b])
    assert span.start_byte == 0 or raw[span.start_byte - 1 : span.start_byte] == b"\n"


@settings(derandomize=True, max_examples=150, deadline=None)
@given(lines=lines_st, data=st.data())
def test_line_column_spans_match_python_slicing(lines: list[str], data: st.DataObject) -> None:
    lines = [*lines[:-1], lines[-1] + "!"]  # a final line break opens no line; keep the last line real
    # a leading U+FEFF is the byte order mark, which is no column of line 1 (test_a_bom_is_never_in_a_span)
    lines[0] = "x" + lines[0] if lines[0].startswith("\ufeff") else lines[0]
    text = "\n".join(lines)
    a = data.draw(st.integers(1, len(lines)))
    b = data.draw(st.integers(a, len(lines)))
    c = data.draw(st.integers(1, len(lines[a - 1]) + 1))
    d = data.draw(st.integers(c if a == b else 1, len(lines[b - 1]) + 1))
    (span,) = resolve(text.encode(), [Selection("span", f"{a}:{c}-{b}:{d}")])
    starts = [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]
    expected = text[starts[a - 1] + c - 1 : starts[b - 1] + d - 1]
    if c == 1 and d == 1 and b > a:  # whole lines: their last line break stays (test_a_line_selection_...)
        expected = expected[:-1]
    assert text.encode()[span.start_byte : span.end_byte].decode() == expected


RUST_TRAITS = b"""struct Square {
    side: f64,
}
trait Shape {
    fn area(&self) -> f64;
    fn describe(&self) -> String {
        g()
    }
}
impl Shape for Square {
    fn area(&self) -> f64 {
        1.0
    }
}
impl<T: Copy> Shape for Circle<T> {
    fn area(&self) -> f64 {
        2.0
    }
}
impl fmt::Display for Square {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        h()
    }
}
impl<T> From<T> for Circle {
    fn from(x: T) -> Self {
        Circle
    }
}
"""

SHAPE_TRAIT = b"    fn area(&self) -> f64;\n    fn describe(&self) -> String {\n        g()\n    }"
SQUARE_SHAPE = b"    fn area(&self) -> f64 {\n        1.0\n    }"
CIRCLE_SHAPE = b"    fn area(&self) -> f64 {\n        2.0\n    }"
SQUARE_DISPLAY = b"    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {\n        h()\n    }"

# Definitions the grammars parse but the queries once missed, as real code writes them: each (file name, source,
# selector kind, name, the body or bodies it selects)
REAL_DEFINITIONS = [
    # a Rust impl of a generic type, of a path, and a function in a module
    (
        "a.rs",
        b"struct S<T> { v: T }\nimpl<T> S<T> {\n    fn new() -> i32 {\n        1\n    }\n}\n",
        "function",
        "S.new",
        [b"        1"],
    ),
    ("a.rs", b"impl a::S {\n    fn f() {\n        g();\n    }\n}\n", "function", "S::f", [b"        g();"]),
    (
        "a.rs",
        b"impl<T: Ord> fmt::Debug for a::S<T> {\n    fn fmt() {\n        g();\n    }\n}\n",
        "function",
        "S.fmt",
        [b"        g();"],
    ),
    # a Rust trait's method: by the trait (each impl of it, and its default body), by the type, or by both
    *(
        ("a.rs", RUST_TRAITS, "function", name, bodies)
        for name, bodies in [
            ("Shape.area", [b"        1.0", b"        2.0"]),
            ("Square.area", [b"        1.0"]),
            ("Circle.Shape.area", [b"        2.0"]),
            ("Shape.describe", [b"        g()"]),
            ("Display.fmt", [b"        h()"]),
            ("fmt::Display::fmt", [b"        h()"]),
            ("Square.Display.fmt", [b"        h()"]),
            ("Square.fmt", [b"        h()"]),
            ("From.from", [b"        Circle"]),
            ("Circle.from", [b"        Circle"]),
        ]
    ),
    # a Rust type's or trait's blocks, as its methods are named: a type is its struct and every impl for it, a
    # trait its own body and every impl of it, Type.Trait the one impl of Trait for Type
    *(
        ("a.rs", RUST_TRAITS, "class", name, bodies)
        for name, bodies in [
            ("Square", [b"    side: f64,", SQUARE_SHAPE, SQUARE_DISPLAY]),
            ("Shape", [SHAPE_TRAIT, SQUARE_SHAPE, CIRCLE_SHAPE]),
            ("Square.Shape", [SQUARE_SHAPE]),
            ("Circle.Shape", [CIRCLE_SHAPE]),
            ("fmt::Display", [SQUARE_DISPLAY]),
            ("Square.Display", [SQUARE_DISPLAY]),
        ]
    ),
    (
        "a.rs",
        b"mod util {\n    pub fn helper() -> i32 {\n        1\n    }\n}\n",
        "function",
        "util::helper",
        [b"        1"],
    ),
    # a Java record and its compact constructor
    (
        "P.java",
        b"record P(int x) {\n    P {\n        check(x);\n    }\n    int sum() {\n        return x;\n    }\n}\n",
        "function",
        "P.sum",
        [b"        return x;"],
    ),
    ("P.java", b"record P(int x) {\n    P {\n        check(x);\n    }\n}\n", "function", "P.P", [b"        check(x);"]),
    # a function held by a class field (React's handlers) or by an object's property
    (
        "a.js",
        b"class A {\n  h = (e) => {\n    go(e);\n  };\n  #p() {\n    return 1;\n  }\n}\n",
        "function",
        "A.h",
        [b"    go(e);"],
    ),
    ("a.js", b"class A {\n  #p() {\n    return 1;\n  }\n}\n", "function", "A.#p", [b"    return 1;"]),
    ("a.mjs", b"const o = {\n  f: () => {\n    return 1;\n  },\n};\n", "function", "f", [b"    return 1;"]),
    ("a.tsx", b"class A {\n  private h = (e: E): void => {\n    go(e);\n  };\n}\n", "function", "A.h", [b"    go(e);"]),
    (
        "a.ts",
        b"namespace A.B {\n  export function f() {\n    return 1;\n  }\n}\n",
        "function",
        "A.B.f",
        [b"    return 1;"],
    ),
    # C: a function returning a pointer to pointer or a function pointer; a typedef'd anonymous struct
    ("a.c", b"char **f(void) {\n  return 0;\n}\n", "function", "f", [b"  return 0;"]),
    ("a.c", b"static int (*get(int k))(int) {\n  return twice;\n}\n", "function", "get", [b"  return twice;"]),
    ("a.h", b"typedef struct {\n  int w;\n} size2;\n", "class", "size2", [b"  int w;"]),
    # C++: an out-of-class member of a class template, named without its template arguments
    (
        "a.hpp",
        b"template <typename T>\nT Box<T>::get() const {\n  return w;\n}\n",
        "function",
        "Box::get",
        [b"  return w;"],
    ),
    (
        "a.cc",
        b"template <class K>\nbool M<std::pair<K, int>>::operator<(const M& o) const {\n  return k;\n}\n",
        "function",
        "M.operator<",
        [b"  return k;"],
    ),
    ("a.cc", b"int (*A::get(int k))(int) {\n  return f;\n}\n", "function", "A::get", [b"  return f;"]),
    # C++ operators: an assignment returning a reference, a conversion operator in and out of its class
    (
        "a.cc",
        b"struct S {\n  S& operator=(const S& o) {\n    return *this;\n  }\n};\n",
        "function",
        "S.operator=",
        [b"    return *this;"],
    ),
    (
        "a.cc",
        b"struct S {\n  explicit operator bool() const {\n    return ok;\n  }\n};\n",
        "function",
        "S.operator bool",
        [b"    return ok;"],
    ),
    ("a.cc", b"S::operator int() const {\n  return 1;\n}\n", "function", "S::operator int", [b"  return 1;"]),
]


@pytest.mark.parametrize(("name", "data", "kind", "value", "bodies"), REAL_DEFINITIONS)
def test_real_definitions_are_found(name: str, data: bytes, kind: str, value: str, bodies: list[bytes]) -> None:
    lang = languages.detect(name)
    assert lang is not None and not languages.parse(lang, data).root_node.has_error
    assert text_of(data, resolve(data, [Selection(kind, value)], lang, name)) == bodies  # type: ignore[arg-type]


def test_names_listed_when_not_found_drop_template_arguments() -> None:
    """The names offered are names `--function` accepts: `Box::get`, not `Box<T>::get`."""
    data = b"template <typename T>\nT Box<T>::get() const {\n  return w;\n}\n"
    with pytest.raises(InputError, match=r"'Box::gte' not found \(Box::get\)$"):
        resolve(data, [Selection("function", "Box::gte")], "cpp", "a.cpp")


CPP_HEADER = b"namespace geo {\nclass Shape {\npublic:\n    int name() const {\n        return 1;\n    }\n};\n}\n"


def test_a_cpp_header_is_read_as_cpp() -> None:
    """A `.h` file is C unless C++'s grammar reads it with fewer errors (a class, a namespace)."""
    assert languages.detect("a.h") == "c"
    assert languages.detect("a.h", b"struct p { int x; };\nint f(void);\n") == "c"
    assert languages.detect("a.h", b"int f(void) {\n") == "c"  # broken in both: still C
    assert languages.detect("shapes.h", CPP_HEADER) == "cpp"
    assert languages.detect("a.c", CPP_HEADER) == "c"  # only a header is ambiguous


def test_the_command_line_fills_a_method_of_a_cpp_header(tmp_path: Path) -> None:
    path = tmp_path / "shapes.h"
    path.write_bytes(CPP_HEADER)
    with fake_model(["return 2;"], name="fake-header"):
        result = CliRunner().invoke(
            main, ["fill", str(path), "--function", "geo::Shape::name", "--model", "fake-header"]
        )
    assert result.exit_code == 0, result.output
    assert path.read_bytes() == CPP_HEADER.replace(b"return 1;", b"return 2;")


def test_a_name_not_found_among_many_lists_the_close_ones_first() -> None:
    """Past 12 names the list is cut; the names that look like the one asked for come first, so a typo's fix
    (`parse_hedaer` for `Reader.parse_header`) is shown rather than the first 12 in alphabetical order."""
    funcs = "".join(f"function a{i:02d}() {{\n  return {i};\n}}\n" for i in range(20))
    data = (funcs + "class Reader {\n  parse_header() {\n    return 1;\n  }\n}\n").encode()
    with pytest.raises(InputError, match=r"'parse_hedaer' not found \(parse_header, a00, a01, .*, \.\.\.\)$"):
        resolve(data, [Selection("function", "parse_hedaer")], "javascript", "a.js")


@pytest.mark.parametrize("selector", ["1:1-1:2", "1:1-1:1", "1", "1:2"])
def test_a_bom_is_never_in_a_span(selector: str) -> None:
    data = "\ufeffab\ncd\n".encode()
    (span,) = resolve(data, [Selection("span", selector)])
    assert span.start_byte >= 3
    assert (
        data[span.start_byte : span.end_byte]
        == {"1:1-1:2": b"a", "1:1-1:1": b"", "1": b"ab", "1:2": b"ab\ncd"}[selector]
    )
