"""JSDoc (JavaScript / TypeScript) and Go doc comments: the same skeleton-plus-slots approach as Python."""

from __future__ import annotations

import textwrap

from fixtures_doc import FakeFiller

from infill.docstrings.config import DocstringConfig
from infill.docstrings.engine import process_source

JS = textwrap.dedent(
    """\
    /** Already documented. */
    function documented() {}

    export function area({ width, height }, scale = 1, ...extra) {
      function helper() { return 1; }
      if (scale < 0) throw new RangeError("scale");
      return width * height * scale;
    }

    // infill: skip
    function skipped() {}

    const twice = x => x * 2;

    class Shape {
      constructor(name) { this.name = name; }
      get label() { return this.name; }
      set label(v) { this.name = v; }
      _private() {}
      *corners() { yield 1; }
    }
    """
)

TS = textwrap.dedent(
    """\
    export function parse(text: string, strict?: boolean): Record<string, number> {
      return {};
    }

    export abstract class Store {
      @cached
      get size(): number { return 0; }

      clear(this: Store): void {}
    }
    """
)

GO = textwrap.dedent(
    """\
    package geo

    // Area is documented.
    func Area(w, h int) int { return w * h }

    func Volume(w, h, d int) int {
    \treturn w * h * d
    }

    type (
    \tPoint struct{ X, Y int }
    \tsize  int
    )

    func (p *Point) Move(dx int) {
    \tp.X += dx
    }

    func private() {}
    """
)


def run(source: str, path: str, filler: FakeFiller | None = None) -> tuple[str, list[tuple[str, int, str]]]:
    result = process_source(source, path, DocstringConfig(), filler)
    return result.text, [(o.name, o.line, o.status) for o in result.outcomes]


def test_javascript_check_lists_missing_with_skip_rules() -> None:
    _, outcomes = run(JS, "shapes.js")
    assert outcomes == [
        ("area", 4, "missing"),
        ("twice", 13, "missing"),
        ("Shape", 15, "missing"),
        ("Shape.label", 17, "missing"),  # the getter; the setter is skipped
        ("Shape.corners", 20, "missing"),
    ]


def test_javascript_jsdoc_skeleton_and_idempotence() -> None:
    filler = FakeFiller()
    out, outcomes = run(JS, "shapes.js", filler)
    assert len(filler.calls) == 5 and {o[2] for o in outcomes if o[0] != "Shape"} == {"filled"}
    assert ("Shape", 15, "low-confidence") in outcomes  # the fake's "Returns the Shape ..." is refused: a class
    assert (
        "/**\n"
        " * Returns the area of the input.\n"
        " *\n"
        " * @param param0 - The param0 to use.\n"
        " * @param [scale=1] - The scale to use.\n"
        " * @param extra - The ...extra to use.\n"
        " * @returns The computed value.\n"
        " * @throws {RangeError} If the area is invalid.\n"
        " */\n"
        "export function area("
    ) in out
    assert "  /**\n   * Returns the corners of the input.\n   *\n   * @yields Each item in turn.\n   */\n" in out
    assert "/** Shape. */\nclass Shape {" in out
    assert " * @param x - The x to use.\n * @returns The computed value.\n */\nconst twice" in out
    again, _ = run(out, "shapes.js", FakeFiller())
    assert again == out


def test_typescript_optional_parameters_and_decorators() -> None:
    out, outcomes = run(TS, "store.ts", FakeFiller())
    assert [o[0] for o in outcomes] == ["parse", "Store", "Store.size", "Store.clear"]
    assert " * @param text - The text to use.\n * @param [strict] - The strict to use.\n * @returns " in out
    assert "  /** Returns the size of the input. */\n  @cached\n  get size()" in out
    # `this` is no parameter; `: void` returns nothing, so the fake's "Returns the clear ..." is refused
    assert "  /** Clear. */\n  clear(this: Store)" in out


def test_go_doc_comments_start_with_the_name() -> None:
    _, missing = run(GO, "geo.go")
    assert missing == [("Volume", 6, "missing"), ("Point", 11, "missing"), ("Point.Move", 15, "missing")]
    out, _ = run(GO, "geo.go", FakeFiller())
    assert "// Volume returns the Volume of the input.\nfunc Volume(" in out
    assert "\t// Point returns the Point of the input.\n\tPoint struct" in out
    assert "func private() {}" in out and "// private" not in out
    assert run(out, "geo.go", FakeFiller())[0] == out


RUST = textwrap.dedent(
    """\
    /// Documented.
    pub fn area(w: u32, h: u32) -> u32 { w * h }

    #[derive(Debug)]
    pub struct Point { x: i32 }

    impl Point {
        pub fn parse(text: &str) -> Result<Self, String> {
            Err(text.to_string())
        }

        fn private(&self) {}
    }

    pub trait Shape {
        fn area(&self) -> f64;
    }
    """
)


def test_rust_doc_comments_above_attributes_with_errors_section() -> None:
    _, missing = run(RUST, "lib.rs")
    assert missing == [
        ("Point", 4, "missing"),
        ("Point.parse", 8, "missing"),
        ("Shape", 15, "missing"),
        ("Shape.area", 16, "missing"),  # trait methods are public with their trait
    ]
    out, _ = run(RUST, "lib.rs", FakeFiller())
    assert "/// Point.\n#[derive(Debug)]\npub struct Point" in out  # a struct returns nothing
    assert (
        "    /// Returns the parse of the input.\n    ///\n    /// # Errors\n    ///\n"
        "    /// Returns an error if the parse is invalid.\n    pub fn parse("
    ) in out
    assert "    fn private(&self) {}" in out and "/// Returns the private" not in out
    assert run(out, "lib.rs", FakeFiller())[0] == out


def test_at_an_offset_only_the_declaration_around_it_gets_a_comment() -> None:
    """The language server's "add a docstring here" in a JavaScript file: the innermost declaration only, with
    the byte edit that inserts its comment."""
    from infill.patch import apply_edits

    source = "function outer(a) {\n  return a;\n}\n\nfunction other(b) {\n  return b;\n}\n"
    data = source.encode("utf-8")
    at = data.index(b"return b")
    result = process_source(source, "m.js", DocstringConfig(), FakeFiller(), at=at)
    assert [o.name for o in result.outcomes] == ["other"]
    (edit,) = result.edits
    assert edit.start_byte == edit.end_byte == data.index(b"function other")
    assert apply_edits(data, result.edits).decode("utf-8") == result.text
