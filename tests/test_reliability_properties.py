"""Never make a file worse, systematically: whatever the file, its line endings and the span, every byte outside the
span is preserved, through the three ways a fill comes out (the file written in place, the editor filter's stdout,
and the edits of --format json).

The files are random (hypothesis, derandomized so CI and local runs see the same cases): lines of ASCII,
non-ASCII and whitespace, ended by LF, CRLF, lone CR or a mix, with or without a UTF-8 BOM and a final line
break. The span is drawn as lines (`--span A:B`) or line:column (`--span A:C-B:D`). The expected byte range is
computed here from the generated lines, independently of infill.spans.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner
from fixtures_cli import fake_model
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infill.cli import main

BOM = b"\xef\xbb\xbf"
FILL = "filled ☃ text"
MODEL = "fake-property"

TEXT = st.text(alphabet=st.sampled_from(list("abc xyz_=()#:\t é☃日")), max_size=12)


@dataclass
class Case:
    data: bytes
    lines: list[tuple[int, int, str]]  # per line: start byte, end byte of its text (before the break), text
    span: str  # the --span value
    start: int  # the span's expected byte range [start, end)
    end: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    texts = draw(st.lists(TEXT, min_size=1, max_size=10))
    texts[draw(st.integers(0, len(texts) - 1))] += "word"  # never an empty (whitespace-only) input
    style = draw(st.sampled_from(["\n", "\r\n", "\r", "mixed"]))
    breaks = [draw(st.sampled_from(["\n", "\r\n", "\r"])) if style == "mixed" else style for _ in texts]
    for i in range(1, len(texts)):
        if breaks[i - 1] == "\r" and not texts[i] and breaks[i] != "\r":
            breaks[i] = "\r"  # "\r" then an empty line ended by "\n" is one CRLF, not two line breaks
    final = draw(st.booleans())
    bom = draw(st.booleans())
    data = bytearray(BOM if bom else b"")
    lines = []
    for i, (text, brk) in enumerate(zip(texts, breaks, strict=True)):
        start = len(data)
        data += text.encode("utf-8")
        lines.append((start, len(data), text))
        if i + 1 < len(texts) or final:
            data += brk.encode()
    if len(lines) > 1 and not lines[-1][2]:
        lines.pop()  # an empty last line without a break is no line: "a\n" has one line, as in every editor
    a = draw(st.integers(1, len(lines)))
    b = draw(st.integers(a, len(lines)))
    if draw(st.booleans()):
        span = f"{a}:{b}" if a != b or draw(st.booleans()) else f"{a}"
        return Case(bytes(data), lines, span, lines[a - 1][0], lines[b - 1][1])
    c = draw(st.integers(1, len(lines[a - 1][2]) + 1))
    d = draw(st.integers(1 if a < b else c, len(lines[b - 1][2]) + 1))
    start = lines[a - 1][0] + len(lines[a - 1][2][: c - 1].encode("utf-8"))
    end = lines[b - 1][0] + len(lines[b - 1][2][: d - 1].encode("utf-8"))
    if c == 1 and d == 1 and a < b:  # an editor's line selection: lines a to b-1 whole, their last break kept
        end = lines[b - 2][1]
    return Case(bytes(data), lines, f"{a}:{c}-{b}:{d}", start, end)


def assert_outside_preserved(case: Case, out: bytes) -> None:
    before, after = case.data[: case.start], case.data[case.end :]
    assert out.startswith(before), (case.span, case.data, out)
    assert out.endswith(after), (case.span, case.data, out)
    assert len(out) >= len(before) + len(after)


@settings(
    derandomize=True,
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=cases())
def test_bytes_outside_the_span_are_preserved(case: Case) -> None:
    runner = CliRunner()
    with fake_model([FILL], name=MODEL), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "notes.txt"
        path.write_bytes(case.data)
        # 1. the file, written in place
        r = runner.invoke(main, ["fill", str(path), "--span", case.span, "--model", MODEL, "--tokens", "24"])
        assert r.exit_code == 0, r.output
        assert_outside_preserved(case, path.read_bytes())
        # 2. the editor filter: stdin to stdout
        args = ["fill", "-", "--stdin-filename", "notes.txt", "--span", case.span, "--model", MODEL, "--tokens", "24"]
        r = runner.invoke(main, args, input=case.data)
        assert r.exit_code == 0, r.output
        assert_outside_preserved(case, r.stdout_bytes)
        # 3. --format json: the edit indexes exactly the span's bytes; applying it preserves the rest
        path.write_bytes(case.data)
        args = ["fill", str(path), "--span", case.span, "--model", MODEL, "--tokens", "24", "--format", "json"]
        r = runner.invoke(main, args)
        assert r.exit_code == 0, r.output
        (edit,) = json.loads(r.stdout)["edits"]
        assert (edit["start_byte"], edit["end_byte"]) == (case.start, case.end), case.span
        patched = case.data[: edit["start_byte"]] + edit["text"].encode("utf-8") + case.data[edit["end_byte"] :]
        assert_outside_preserved(case, patched)
        assert path.read_bytes() == case.data  # json never writes
