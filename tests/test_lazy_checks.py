"""The checks a fill can skip without changing it: a retrieved line that cannot win is filed unchecked
(Pool.consider's `lazy`), and a candidate judged twice (beam search's check, then the pool's) is compiled and
parsed once (SyntaxCheck keeps verdicts)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from infill.core.backends import Fill
from infill.core.candidates import Checks, Pool
from infill.core.checks import SyntaxCheck
from infill.core.edits import Edit
from infill.core.ranking import rank
from infill.spans import LineIndex, Span

SOURCE = "def f(x):\n    y = x\n    \n    return y\n"
LINE = SOURCE.index("    \n    return")  # the blank line's start, filled whole


@dataclass
class CountingChecks(Checks):
    """Checks whose candidates are one edit of the blank line, with the score the fill gives; counts the
    candidates it judged."""

    judged: list[str] = field(default_factory=list)

    def edits(self, regions: list, fills: list[Fill]) -> list[Edit]:  # type: ignore[type-arg]
        (fill,) = fills
        return [Edit(LINE, LINE + 4, 3, 3, fill.raw, fill.score, fill.tokens)]

    def rejection(self, patched: bytes, edits: list[Edit]) -> str | None:
        self.judged.append(edits[0].text)
        return super().rejection(patched, edits)


def pool() -> Pool:
    data = SOURCE.encode()
    syntax = SyntaxCheck("python", data, [Span(LINE, LINE + 4, "span")])
    return Pool(CountingChecks(SOURCE, data, LineIndex(data), "\n", syntax, []), [])


def test_a_retrieved_line_that_cannot_win_is_not_checked() -> None:
    p = pool()
    p.consider([Fill("    y = y + 1", -3.0, 5)])  # sampled: checked, valid
    p.consider([Fill("    y = (", -4.0, 3)], lazy=True)  # less likely: cannot win, not checked
    p.consider([Fill("    y = -y", -3.0, 4)], lazy=True)  # as likely: the earlier one wins ties
    assert p.checks.judged == ["    y = y + 1"]  # type: ignore[attr-defined]
    assert [c[1][0].text for c in p.unchecked] == ["    y = (", "    y = -y"]
    assert rank(p).edits[0].text == "    y = y + 1"


@pytest.mark.parametrize("best", [True, False])
def test_a_retrieved_line_that_could_win_is_checked(best: bool) -> None:
    """More likely than every valid fill (`best`), or no valid fill that writes something yet: checked, and a
    broken one never wins."""
    p = pool()
    p.consider([Fill("    y = y + 1", -3.0, 5) if best else Fill("    y = [", -3.0, 3)])
    p.consider([Fill("    y = (", -1.0, 3)], lazy=True)  # more likely, but does not compile
    p.consider([Fill("    y = 2 * y", -2.0, 5)], lazy=True)  # more likely and valid: it wins
    assert len(p.checks.judged) == 3  # type: ignore[attr-defined]
    assert not p.unchecked
    assert rank(p).edits[0].text == "    y = 2 * y"


def test_a_candidate_judged_twice_is_compiled_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from infill.core import checks

    data = SOURCE.encode()
    syntax = SyntaxCheck("python", data, [Span(LINE, LINE + 4, "span")])
    compiled: list[bytes] = []
    real = checks.python_error_line
    monkeypatch.setattr(checks, "python_error_line", lambda source: compiled.append(source) or real(source))
    edit = Edit(LINE, LINE + 4, 3, 3, "    y = (", -1.0, 3)
    patched = data[:LINE] + b"    y = (" + data[LINE + 4 :]
    first = syntax.rejection(patched, [edit])
    assert first == "does not compile" and syntax.rejection(patched, [edit]) == first
    assert compiled == [patched]
