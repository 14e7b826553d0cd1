"""The static monitor's "binds" rule (infill.core.monitor): a fill that leaves unbound every name the lines below
the span read and nothing else defines is refused. For a span over a line of code (`infill fill --span N`), the
names are those the line bound, so the monitor reads the input with neutral text in the span, not the line."""

from __future__ import annotations

import pytest

from infill.core.checks import SyntaxCheck
from infill.core.monitor import LintMonitor, monitor_for
from infill.spans import Span

SOURCE = b"def mean(values):\n    total = sum(values)\n    return total / len(values)\n"
LINE = b"    total = sum(values)\n"


def patched(line: bytes, source: bytes = SOURCE, old: bytes = LINE) -> bytes:
    return source.replace(old, line)


def span_over(old: bytes, source: bytes = SOURCE) -> Span:
    start = source.index(old)
    return Span(start, start + len(old) - 1)  # the line's text, without its line break


@pytest.mark.parametrize(
    ("span", "source"),
    [
        pytest.param(span_over(LINE), SOURCE, id="span-over-the-line"),
        pytest.param(Span(SOURCE.index(LINE), SOURCE.index(LINE)), patched(b"\n"), id="emptied-line"),
    ],
)
def test_a_fill_that_binds_nothing_the_next_lines_read_is_refused(span: Span, source: bytes) -> None:
    check = SyntaxCheck("python", source, [span])
    monitor = monitor_for(check, ("binds",))
    assert monitor is not None and monitor.unbound == {"total"}
    docstring = patched(b'    """Add two numbers."""\n')
    assert "binds none of total" in (monitor.rejection(docstring) or "")
    assert monitor.rejection(patched(b"    total = sum(values) or 1\n")) is None


def test_the_line_itself_as_the_reference_would_hide_the_name() -> None:
    """The negative control: the input as it stands (the span keeps its line, which compiles) binds `total`, so a
    monitor reading it sees nothing unbound and refuses nothing."""
    check = SyntaxCheck("python", SOURCE, [span_over(LINE)])
    assert check.compiling == SOURCE
    stale = LintMonitor(check.compiling, ("binds",), 2)
    assert stale.unbound == frozenset()
    assert stale.rejection(patched(b'    """Add two numbers."""\n')) is None


def test_a_span_of_several_lines_reads_the_names_right_below_it() -> None:
    """A span over two lines is one filler line in the neutral input: the lines below move up, and the name read
    on the first of them still counts as read below the span."""
    source = b"def f(xs):\n    a = len(xs)\n    b = a + 1\n    return b\n"
    old = b"    a = len(xs)\n    b = a + 1\n"
    check = SyntaxCheck("python", source, [span_over(old, source)])
    neutral = check.neutral()
    assert neutral is not None and neutral[0].count(b"\n") == 3 and neutral[1] == 2
    monitor = monitor_for(check, ("binds",))
    assert monitor is not None and monitor.unbound == {"b"}
