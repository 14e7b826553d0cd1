"""LSP positions <-> offsets of a document's text (infill.lsp.documents), in UTF-16, UTF-8 and UTF-32, and the
completion targets and settings of infill.lsp.fills: no server, no model."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infill.errors import InputError
from infill.lsp.documents import ENCODINGS, Document, Encoding, Lines, PositionError, units
from infill.lsp.fills import Filled, Settings, cursor_target, language_of, shown

TEXT = "a😀b\r\nΩ\rx\n"  # an astral character, CRLF, a lone CR, a final line break (an empty last line)


@pytest.mark.parametrize(("encoding", "after_emoji"), [("utf-16", 3), ("utf-8", 5), ("utf-32", 2)])
def test_positions_count_the_encodings_code_units(encoding: Encoding, after_emoji: int) -> None:
    lines = Lines(TEXT)
    assert lines.count == 4
    assert lines.offset(0, after_emoji, encoding) == TEXT.index("b")
    assert lines.position(TEXT.index("b"), encoding) == (0, after_emoji)
    assert lines.offset(1, 0, encoding) == TEXT.index("Ω")
    assert lines.offset(2, 0, encoding) == TEXT.index("x")  # after a lone CR
    assert lines.offset(3, 0, encoding) == len(TEXT)  # the empty last line


def test_positions_inside_a_character_or_past_the_end() -> None:
    lines = Lines(TEXT)
    with pytest.raises(PositionError, match="inside a character"):
        lines.offset(0, 2, "utf-16")  # between the halves of the surrogate pair
    with pytest.raises(PositionError, match="inside a character"):
        lines.offset(0, 3, "utf-8")
    with pytest.raises(PositionError, match="past the end"):
        lines.offset(5, 0, "utf-16")
    with pytest.raises(PositionError, match="negative"):
        lines.offset(0, -1, "utf-16")
    # a character past the end of its line is the end of the line (the line break is not part of it)
    assert lines.offset(0, 99, "utf-16") == TEXT.index("\r\n")
    assert lines.offset(1, 99, "utf-8") == TEXT.index("\r", TEXT.index("Ω"))
    # the line after the last one, character 0: the end of the text (some clients send it for an append)
    assert Lines("ab").offset(1, 0, "utf-16") == 2


@given(st.text(alphabet=st.sampled_from(list("ab \t\r\nÉ😀中")), max_size=40), st.data())
def test_offsets_and_positions_round_trip(text: str, data: st.DataObject) -> None:
    lines = Lines(text)
    offset = data.draw(st.integers(0, len(text)))
    if 0 < offset < len(text) and text[offset - 1 : offset + 1] == "\r\n":
        offset -= 1  # inside a CRLF is not a position
    for encoding in ENCODINGS:
        line, character = lines.position(offset, encoding)
        assert lines.offset(line, character, encoding) == offset
        start = lines.starts[line]
        assert units(text[start:offset], encoding) == character


def test_incremental_changes_and_a_change_that_cannot_apply() -> None:
    document = Document("file:///a.py", "python", 1, "s = '😀'\n")
    document.change(2, "x", (0, 7), (0, 7), "utf-16")  # after the emoji (2 UTF-16 units)
    assert document.text == "s = '😀x'\n"
    with pytest.raises(PositionError):
        document.change(3, "y", (0, 6), (0, 6), "utf-16")
    assert document.broken is not None and document.text == "s = '😀x'\n"
    document.change(4, "z", (0, 0), (0, 0), "utf-16")  # ignored: the server's copy is out of step
    assert document.text == "s = '😀x'\n" and document.version == 4
    document.change(5, "fresh\n", None, None, "utf-16")
    assert document.broken is None and document.text == "fresh\n"


def test_what_a_completion_at_the_cursor_fills() -> None:
    document = Document("file:///a.py", "python", 1, "def f(x):\n    \n    y = x\n")
    blank = cursor_target(document, document.text.index("    \n") + 4)
    assert blank is not None and (blank.start, blank.end) == (10, 14) and blank.span.one_line
    after_text = cursor_target(document, document.text.index(" x\n") + 1)
    assert after_text is not None and after_text.start == after_text.end and after_text.span.one_line
    assert cursor_target(document, document.text.index("y = x")) is None  # in the indentation before text
    assert cursor_target(Document("u", "python", 1, "   \n"), 0) is None  # nothing around to fill from
    wide = Document("u", "python", 1, "s = 'é'\n")  # byte spans count UTF-8
    target = cursor_target(wide, len("s = 'é'"))
    assert target is not None and target.span.start_byte == len("s = 'é'".encode())


def test_threshold_applies_only_to_a_calibrated_confidence() -> None:
    document = Document("u", "python", 1, "x = \n")
    settings = Settings(threshold=0.5)
    assert shown(Filled(4, 4, "1", None), document, settings) is not None  # no calibration: shown
    assert shown(Filled(4, 4, "1", 0.49), document, settings) is None
    assert shown(Filled(4, 4, "1", 0.5), document, settings) is not None
    assert shown(Filled(4, 4, "  ", 0.9), document, settings) is None  # writes nothing


def test_settings_from_a_client() -> None:
    settings = Settings.parse({"infill": {"model": "m", "threshold": 0.25, "tokens": 12, "decoder": "assd"}})
    assert (settings.model.name, settings.threshold, settings.options.tokens) == ("m", 0.25, 12)
    assert settings.decode.decoder == "assd"
    assert Settings.parse(None) == Settings() and Settings().decode.decoder == "beam"  # the tool's default
    assert Settings().model.engine == Settings.parse({"model": "m"}).model.engine == "auto-int8"  # the editor's
    assert Settings.parse({"fill": {"engine": "auto"}}).model.engine == "auto"  # the exact graph, when asked for
    assert Settings.parse({"fill": {"k": 4, "temperature": 0.5}}).decode.k == 4
    # completions skip beam search's wider rescue search unless asked for it
    assert Settings().options.rescue_width == Settings.parse({}).options.rescue_width == 1
    assert Settings.parse({"fill": {"rescue_width": 4}}).options.rescue_width == 4
    for bad in [[1], {"threshold": True}, {"tokens": "3"}, {"fill": []}, {"fill": {"nope": 1}}, {"model": 3}]:
        with pytest.raises(InputError):
            Settings.parse(bad)


def test_language_from_the_file_name_else_the_language_id() -> None:
    assert language_of(Document("file:///a/b.rs", "plaintext", 1, "")) == "rust"
    assert language_of(Document("untitled:Untitled-1", "typescriptreact", 1, "")) == "tsx"
    assert language_of(Document("untitled:Untitled-2", "markdown", 1, "")) is None


def test_a_header_the_editor_calls_cpp_is_cpp() -> None:
    """Vim and Neovim may set filetype cpp on a `.h` file; its syntax is then checked with C++'s grammar."""
    assert language_of(Document("file:///a/b.h", "cpp", 1, "class A {};\n")) == "cpp"
    assert language_of(Document("file:///a/b.h", "c", 1, "")) == "c"


def test_a_position_on_a_long_line_is_found_without_a_step_per_character(monkeypatch: pytest.MonkeyPatch) -> None:
    import infill.lsp.documents as documents

    line = "x = [" + ", ".join("é😀中" for _ in range(20_000)) + "]"
    lines = Lines(f"import os\n{line}\ny = 1\n")
    counted: list[str] = []
    real = documents.units
    monkeypatch.setattr(documents, "units", lambda text, encoding: counted.append(text) or real(text, encoding))
    for encoding in ENCODINGS:
        assert lines.offset(1, units(line, encoding), encoding) == len("import os\n") + len(line)
    # a keystroke at the end of a long line (minified code, a data table) used to cost one step per character
    assert len(counted) <= 3, len(counted)
    monkeypatch.undo()
    with pytest.raises(PositionError, match="inside a character"):  # half of the last 😀, as before
        lines.offset(1, units(line, "utf-16") - 3, "utf-16")


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_lone_surrogates_count_as_they_were_sent(encoding: Encoding) -> None:
    # a high and a low surrogate sent apart are two characters of the text, not one pair
    text = "a\ud83d\ude00b\n"
    lines = Lines(text)
    for offset in range(len(text)):
        line, character = lines.position(offset, encoding)
        assert lines.offset(line, character, encoding) == offset


@given(
    st.text(alphabet=st.sampled_from(list("ab\r\n😀")), max_size=30),
    st.text(alphabet=st.sampled_from(list("ab\r\n😀")), max_size=6),
    st.data(),
)
def test_an_edit_keeps_the_line_starts_a_full_scan_finds(text: str, inserted: str, data: st.DataObject) -> None:
    a = data.draw(st.integers(0, len(text)))
    b = data.draw(st.integers(a, len(text)))
    new = text[:a] + inserted + text[b:]
    assert Lines(text).edited(a, b, inserted, new).starts == Lines(new).starts


def test_a_change_in_a_long_file_scans_only_the_lines_it_touches(monkeypatch: pytest.MonkeyPatch) -> None:
    import infill.lsp.documents as documents

    document = Document("file:///a.py", "python", 1, "".join(f"line_{n} = {n}\r\n" for n in range(10_000)))
    document.lines  # noqa: B018 - the index of the opened text
    scanned: list[tuple[int, int]] = []
    pattern = documents.LINE_BREAK

    class Counting:
        def finditer(self, text: str, pos: int = 0, endpos: int = 2**62) -> Any:
            scanned.append((pos, min(endpos, len(text))))
            return pattern.finditer(text, pos, endpos)

    monkeypatch.setattr(documents, "LINE_BREAK", Counting())
    document.change(2, "new = 1\r\n", (5000, 0), (5000, 0), "utf-16")  # a line typed in the middle
    assert document.offset(5001, 0, "utf-16") == document.text.index("line_5000 ")
    assert document.offset(10_001, 0, "utf-16") == len(document.text)
    assert sum(end - start for start, end in scanned) < 100  # a few lines, not 170,000 characters
