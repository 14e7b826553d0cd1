"""Monitors: checks that may refuse a candidate the syntax rule (infill.core.checks) accepts; a refusal ranks it
last, never fails the fill (infill.core.pipeline, "Monitors"). The static monitor lints Python with pyflakes;
the docstring filler brings its own (infill.docstrings.monitor).

Nothing here imports torch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from infill.core.checks import SyntaxCheck


# ---- the static monitor ------------------------------------------------------------------------------------

# What pyflakes reports that a fill can cause, by monitor rule. A fill is refused for a message of a chosen rule
# that the input with neutral text in the spans (SyntaxCheck.compiling) does not have: a name read but defined
# nowhere, a local assigned and never used, a redefinition of an unused name. "binds" works the other way: when
# the neutral input reads names defined nowhere after the span (a loop variable the emptied line bound), a fill
# that binds none of them is refused.
LINT_RULES: dict[str, tuple[str, ...]] = {
    "undefined": ("UndefinedName", "UndefinedLocal"),
    "unused": ("UnusedVariable",),
    "redefined": ("RedefinedWhileUnused",),
    "binds": ("UndefinedName",),
}
MONITOR_BYTES = 1 << 16  # larger Python files are not linted per candidate (pyflakes reads the whole module)
_LINT_WORDS = {"undefined": "reads undefined name", "unused": "leaves local unused", "redefined": "redefines"}


def parse_rules(value: str) -> tuple[str, ...]:
    """'undefined,unused' -> ('undefined', 'unused'); '' or 'none' -> (). InputError for an unknown rule."""
    from infill.errors import InputError

    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip() and n.strip() != "none"))
    unknown = [n for n in names if n not in LINT_RULES]
    if unknown:
        raise InputError(f"--monitor: unknown rule(s) {', '.join(unknown)} (known: {', '.join(LINT_RULES)}, none)")
    return names


@dataclass(frozen=True)
class Lint:
    """The pyflakes messages of one source that the monitor looks at."""

    found: Counter[tuple[str, str]]  # (rule, name) -> count, for the rules that refuse an added message
    undefined_after: frozenset[str]  # names read but defined nowhere, first read after the monitor's line


def lint(source: bytes, rules: Sequence[str], after_line: int = 0) -> Lint | None:
    """The messages of `rules` in `source` (None when it does not parse)."""
    import ast
    import warnings

    from pyflakes.checker import Checker

    kinds = {kind: rule for rule in rules if rule != "binds" for kind in LINT_RULES[rule]}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
        messages = Checker(tree, filename="<fill>").messages
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    found: Counter[tuple[str, str]] = Counter()
    after: set[str] = set()
    for message in messages:
        kind, name = type(message).__name__, str(message.message_args[0]) if message.message_args else ""
        if kind in kinds:
            found[kinds[kind], name] += 1
        if kind == "UndefinedName" and message.lineno > after_line:
            after.add(name)
    return Lint(found, frozenset(after))


class Monitor(Protocol):
    """A check that may refuse a candidate the syntax rule accepts (infill.core.pipeline, "Monitors"): the reason,
    or None. `patched` is the whole text with the candidate's `edits` (infill.core.pipeline.Edit) applied."""

    def rejection(self, patched: bytes, edits: Sequence[Any]) -> str | None: ...


class LintMonitor:
    """Refuses a Python fill by what static analysis of the whole file says (the monitor-guided decoding idea,
    with pyflakes as the analysis): it adds a message of the chosen rules over the input with neutral text in
    its spans, or ("binds") leaves unbound every name the following lines read and nothing defines."""

    def __init__(
        self, reference: bytes, rules: Sequence[str], span_line: int, neutral: tuple[bytes, int] | None = None
    ) -> None:
        """`reference`: the input with text in its spans that compiles (theirs, where they held some); `neutral`:
        the same with neutral text in place of theirs and the line its last span ends on (what "binds" reads: a
        name only the replaced text bound is unbound)."""
        self.rules = tuple(rules)
        self.span_line = span_line  # 1-based line of the last span: "after" means below it
        base = lint(reference, self.rules, span_line)
        self.baseline = base.found if base is not None else Counter()
        self.unbound: frozenset[str] = frozenset()
        if "binds" in self.rules:
            bare = base if neutral is None or neutral[0] == reference else lint(neutral[0], self.rules, neutral[1])
            self.unbound = bare.undefined_after if bare is not None else frozenset()

    def rejection(self, patched: bytes, edits: Sequence[Any] = ()) -> str | None:
        if not self.unbound and all(rule == "binds" for rule in self.rules):
            return None  # "binds" alone, and the input reads no unbound name below the span: nothing to refuse
        found = lint(patched, self.rules, self.span_line)
        if found is None:
            return None  # the syntax rule judges what does not parse
        added = found.found - self.baseline
        if added:
            (rule, name), _ = min(added.items())
            return f"{_LINT_WORDS[rule]} {name!r}"
        if self.unbound and self.unbound <= found.undefined_after:
            return f"binds none of {', '.join(sorted(self.unbound))} (read below, defined nowhere)"
        return None


def monitor_for(check: SyntaxCheck | None, rules: Sequence[str]) -> LintMonitor | None:
    """The static monitor of a fill, or None: no rule chosen, not Python, too large, or no text in the spans
    makes the input compile (then nothing says what the file around them means)."""
    if not rules or check is None or check.language != "python" or check.local or check.compiling is None:
        return None
    if len(check.data) > MONITOR_BYTES:
        return None
    last = max((s.end_byte for s in check.spans), default=0)
    neutral = check.neutral() if "binds" in rules else None
    return LintMonitor(check.compiling, rules, check.data.count(b"\n", 0, last) + 1, neutral)
