"""End-to-end properties of fill_text (with the scripted model): bytes outside the spans never change, and
CRLF line endings and UTF-8 survive whatever the model writes."""

from __future__ import annotations

from fixtures_cli import fake_model
from hypothesis import given, settings
from hypothesis import strategies as st

from infill import api
from infill.config import DecodeConfig, ModelSpec
from infill.spans import Selection, resolve

piece = st.sampled_from(["a", "b", " ", "\t", "é", "☃", "日本", "x = 1", "(", ")", ":"])
line_st = st.lists(piece, max_size=6).map("".join)
fill_st = st.lists(st.sampled_from(["q", " ", "\n", "ü", "    ", "z(", ")"]), min_size=1, max_size=8).map("".join)


@settings(derandomize=True, max_examples=40, deadline=None)
@given(
    lines=st.lists(line_st, min_size=1, max_size=6),
    newline=st.sampled_from(["\n", "\r\n"]),
    fill=fill_st,
    data=st.data(),
)
def test_outside_bytes_line_endings_and_utf8_survive(
    lines: list[str], newline: str, fill: str, data: st.DataObject
) -> None:
    text = newline.join(lines) + newline
    raw = text.encode()
    a = data.draw(st.integers(1, len(lines)))
    b = data.draw(st.integers(a, len(lines)))
    spans = resolve(raw, [Selection("span", f"{a}:{b}")])
    with fake_model([fill], name="fake-prop"):
        result = api.fill_text(text, spans, model=ModelSpec("fake-prop"), decode=DecodeConfig(k=4), language=None)
    out = result.text.encode()
    (edit,) = result.edits
    assert out[: edit.start_byte] == raw[: edit.start_byte]
    assert out[len(out) - (len(raw) - edit.end_byte) :] == raw[edit.end_byte :]
    assert out == raw[: edit.start_byte] + edit.text.encode() + raw[edit.end_byte :]
    if newline == "\r\n":
        assert "\n" not in result.text.replace("\r\n", "")  # every line break of the result is CRLF
    assert result.text.encode().decode("utf-8") == result.text
