"""The check step of a fill: each candidate (one fill per span) is turned into edits, checked, and filed as valid,
flagged (it passes the checks but a monitor refuses it) or invalid. infill.core.pipeline draws the candidates;
infill.core.ranking picks among them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infill.core.backends import Fill
from infill.core.edits import Edit, candidate_edits, writes
from infill.core.plan import Region
from infill.spans import LineIndex

if TYPE_CHECKING:
    from infill.core.checks import SyntaxCheck
    from infill.core.monitor import Monitor

# one candidate as filed: its log-likelihood (summed over spans), its edits, the patched text
Candidate = tuple[float, list[Edit], str]


@dataclass
class Checks:
    """What a candidate must pass: no broken UTF-8, the syntax rule (infill.core.checks.SyntaxCheck; None when
    not checked), and the monitors, which only rank."""

    text: str
    data: bytes
    index: LineIndex
    newline: str
    syntax: SyntaxCheck | None
    monitors: list[Monitor]

    def edits(self, regions: list[Region], fills: list[Fill]) -> list[Edit]:
        return candidate_edits(self.data, regions, fills, self.newline, self.index)

    def rejection(self, patched: bytes, edits: list[Edit]) -> str | None:
        """Why a candidate is rejected, or None: it splits a UTF-8 character (U+FFFD), it writes text that is not
        ASCII into a file whose coding cookie declares another encoding (patch.foreign_text), or it is worse than
        the best the spans' surroundings allow (infill.core.checks.SyntaxCheck: Python that some text in the spans makes
        compile must compile; no more tree-sitter ERROR / MISSING nodes than that text leaves)."""
        from infill.patch import foreign_text

        if any("\ufffd" in e.text for e in edits) and "\ufffd" not in self.text:
            return "the fill ends inside a UTF-8 character (an incomplete byte sequence)"
        foreign = foreign_text(self.data, (e.text for e in edits))
        if foreign is not None:
            return foreign
        return self.syntax.rejection(patched, edits) if self.syntax is not None else None

    def region_accepts(self, region: Region, fills: list[Fill]) -> bool:
        """Whether one region's fills pass the checks on their own (beam search stops only at such fills; the
        monitor then ranks the fills it found)."""
        from infill.patch import apply_edits

        edits = self.edits([region], fills)
        return self.rejection(apply_edits(self.data, edits), edits) is None


@dataclass
class Pool:
    """The candidates found so far, by tier, and how many samples were drawn."""

    checks: Checks
    regions: list[Region]
    valid: list[Candidate] = field(default_factory=list)
    flagged: list[Candidate] = field(default_factory=list)  # pass the checks, but a monitor refuses them
    invalid: list[Candidate] = field(default_factory=list)
    # filed without the checks: a valid candidate that writes something was at least as likely, so these can
    # never be chosen (see `consider`); they still count as the chosen fill's rivals (its margin)
    unchecked: list[Candidate] = field(default_factory=list)
    seen: set[tuple[str, ...]] = field(default_factory=set)
    attempts: int = 0

    def consider(self, fills: list[Fill], writing_only: bool = False, lazy: bool = False) -> bool:
        """Check one candidate (a fill per span) and file it; False if seen before (or, with `writing_only`, if it
        leaves a span empty). With `lazy` (the retrieved lines, offered after sampling), a candidate no more likely
        than a valid one that writes something and passes the monitors is filed unchecked: it cannot win (the
        earlier of equals does), and whatever its checks said, a fill that passes is already there (no rescue)."""
        from infill.patch import apply_edits, check_outside_unchanged

        data = self.checks.data
        edits = self.checks.edits(self.regions, fills)
        key = tuple(e.text for e in edits)
        if key in self.seen or (writing_only and not writes(edits)):
            return False
        self.seen.add(key)
        patched = apply_edits(data, edits)
        check_outside_unchanged(data, patched, edits)
        score = sum(e.score for e in edits)
        tier = self.valid
        if lazy and any(c[0] >= score and writes(c[1]) for c in self.valid):
            tier = self.unchecked
        elif self.checks.rejection(patched, edits) is not None:
            tier = self.invalid
        elif any(m.rejection(patched, edits) is not None for m in self.checks.monitors):
            tier = self.flagged
        tier.append((score, edits, patched.decode("utf-8")))
        return True

    def writing(self, also_flagged: bool = False) -> int:
        """How many valid candidates (with `also_flagged`, flagged ones too) write something into every span."""
        tiers = self.valid + self.flagged if also_flagged else self.valid
        return sum(writes(c[1]) for c in tiers)
