"""Repeated measurement for the decoder benchmarks (s2d2.py, ssmd.py, ptp.py): every row is measured once per
round, round after round, so that a drift of a shared machine's speed reaches every row alike, and each row
reports the median of its rounds' decode seconds. Pass counts, tokens and quality come from the first round and
are checked to repeat: the benchmarks decode deterministically (greedy, or seeded samples)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

QUALITY = ("humaneval_pass_at_1", "heldout_exact", "tokens")


def run_rounds(jobs: Sequence[tuple[str, Callable[[], dict[str, Any]]]], repeat: int) -> list[dict[str, Any]]:
    """`jobs`: (label, measure) pairs, measure returning a row with "seconds". Returns the first round's rows with
    "seconds" replaced by the median over `repeat` rounds and "seconds_runs" holding every round's; a row whose
    tokens or quality changed between rounds gets "repeats": False (the median then mixes different outputs)."""
    rows: list[dict[str, Any]] = []
    for round_no in range(max(1, repeat)):
        for i, (label, measure) in enumerate(jobs):
            row = measure()
            if round_no == 0:
                row["seconds_runs"] = [row["seconds"]]
                row["repeats"] = True
                rows.append(row)
            else:
                first = rows[i]
                first["seconds_runs"].append(row["seconds"])
                first["repeats"] &= all(first.get(k) == row.get(k) for k in QUALITY)
            print(f"  done: {label} (round {round_no + 1}/{repeat})", file=sys.stderr, flush=True)
    for row in rows:
        row["seconds"] = statistics.median(row["seconds_runs"])
    return rows


def block_jobs(rows: Sequence[tuple[str, Any]], measure: Callable[[Any], dict[str, Any]]) -> list[tuple[str, Any]]:
    """The jobs of `run_rounds` for (label, DecodeConfig) rows measured by `measure(cfg)`, each row labelled with
    its decoder label and block size (s2d2.py, ssmd.py)."""

    def job(label: str, cfg: Any) -> Callable[[], dict[str, Any]]:
        return lambda: {**measure(cfg), "decoder": label, "block_size": cfg.block_size}

    return [(f"{label} B={cfg.block_size}", job(label, cfg)) for label, cfg in rows]


def rounds_note(repeat: int) -> str:
    """The line each benchmark prints under its table about what its seconds are."""
    if repeat <= 1:
        return "# seconds: one run of each row"
    return f"# seconds: median of {repeat} rounds (every row once per round); rows whose output changed are named below"
