"""Exact-match rate on single-line infills from held-out source files.

Files come from the corpus's held-out split (infill.training.corpus.heldout_files) or from paths given by
the user. Lines are sampled deterministically: every non-blank line of every file is a candidate,
`random.Random(seed)` picks `limit` of them (uniform over lines, so larger files contribute more). Each picked
line is masked and filled like a HumanEval task (infill.evaluation.filling); the fill matches when
it equals the line's content exactly (indentation included). "stripped" also reports matches up to
leading/trailing whitespace.

Long files are cut to a window of whole lines around the masked line that fits the model (`crop_slot`), three
quarters of the token budget before the line and the rest after it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infill.errors import InputError
from infill.evaluation.filling import Filler, Slot, fill_costs, line_slot, run_tasks, split_lines
from infill.walk import source_files


@dataclass(frozen=True)
class LineTask:
    task_id: str  # "<file>:<line, 1-based>"
    path: str
    line: int  # 1-based
    slot: Slot


def corpus_heldout_files(corpus_dir: Path) -> list[Path]:
    """The corpus's held-out files, as the training code defines them."""
    from infill.training.corpus import heldout_files

    if not corpus_dir.is_dir():
        raise InputError(f"corpus folder not found: {corpus_dir}")
    found = list(heldout_files(corpus_dir))
    if not found:
        raise InputError(
            f"{corpus_dir} holds no held-out files (heldout/*.py): it is not a corpus folder, or its held-out "
            f"split is empty (build one with `infill train corpus --out {corpus_dir}`)"
        )
    return found


def python_files(files: Sequence[Path], dirs: Sequence[Path], respect_gitignore: bool = True) -> list[Path]:
    """The given files plus the *.py files under the given folders, walked as `infill docstrings` walks them
    (infill.walk.source_files: no hidden folders, virtual environments, build output, nor, when
    `respect_gitignore`, what git ignores), deduplicated, in a stable (sorted) order."""
    found: set[Path] = set()
    for f in files:
        if not f.is_file():
            raise InputError(f"not a file: {f}")
        found.add(f)
    for d in dirs:
        if not d.is_dir():
            raise InputError(f"not a folder: {d}")
        found.update(p for p in source_files(d, (".py",), respect_gitignore) if p.is_file())
    return sorted(found, key=str)


def sample_line_tasks(paths: Sequence[Path], limit: int, seed: int = 0) -> list[LineTask]:
    """`limit` non-blank lines drawn without replacement, uniformly over all lines of `paths`; deterministic
    for a given seed and file list. Files that are not UTF-8 are skipped."""
    if limit <= 0:
        raise InputError(f"--limit must be positive, got {limit}")
    texts: list[list[str]] = []
    names: list[str] = []
    candidates: list[tuple[int, int]] = []
    skipped: list[str] = []
    for path in sorted(paths, key=str):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            skipped.append(str(path))
            continue
        lines = split_lines(text)
        file_index = len(texts)
        texts.append(lines)
        names.append(str(path))
        candidates.extend((file_index, i) for i, line in enumerate(lines) if line.strip())
    if not candidates:
        why = ""
        if skipped:  # every file that held text was unreadable or not UTF-8: say which, not only "no lines"
            shown = ", ".join(skipped[:3]) + (f" and {len(skipped) - 3} more" if len(skipped) > 3 else "")
            why = f" ({len(skipped)} of {len(paths)} skipped: not readable UTF-8 text: {shown})"
        raise InputError(f"no non-blank lines found in the held-out files{why}")
    picks = sorted(random.Random(seed).sample(candidates, min(limit, len(candidates))))
    return [LineTask(f"{names[f]}:{i + 1}", names[f], i + 1, line_slot(texts[f], i)) for f, i in picks]


def crop_slot(slot: Slot, count: Callable[[str], int], max_tokens: int, before_share: float = 0.75) -> Slot:
    """Keep whole lines nearest the masked line while the context fits in `max_tokens` tokens (counted line by
    line, which is exact when the tokenizer keeps "\\n" as its own piece)."""
    before = split_lines(slot.before)
    after = split_lines(slot.after)  # after[0] is the masked line's terminator (kept)
    terminator, after = (after[0], after[1:]) if after and not after[0].strip() else ("", after)
    kept_before: list[str] = []
    kept_after: list[str] = []
    used = 0
    room_before = int(max_tokens * before_share)
    for line in reversed(before):
        cost = count(line)
        if used + cost > room_before:
            break
        kept_before.append(line)
        used += cost
    for line in after:
        cost = count(line)
        if used + cost > max_tokens:
            break
        kept_after.append(line)
        used += cost
    if len(kept_after) == len(after):  # the suffix was short: give the rest back to the prefix
        for line in reversed(before[: len(before) - len(kept_before)]):
            cost = count(line)
            if used + cost > max_tokens:
                break
            kept_before.append(line)
            used += cost
    return Slot("".join(reversed(kept_before)), terminator + "".join(kept_after), slot.reference)


def run_heldout_exact(
    tasks: Sequence[LineTask],
    filler: Filler,
    *,
    budget_of: Callable[[str], int] | None = None,
    crop: Callable[[Slot], Slot] | None = None,
    on_result: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Fill every task; budget_of None = the tool's length policy, else the oracle budget."""

    def one(task: LineTask) -> dict[str, Any]:
        slot = crop(task.slot) if crop is not None else task.slot
        budget = budget_of(slot.reference) if budget_of is not None else None
        outcome = filler(slot, budget)
        completion = outcome.completion
        return {
            "task_id": task.task_id,
            "reference": slot.reference,
            **outcome.as_dict(),
            "exact": outcome.error is None and completion == slot.reference,
            "exact_stripped": outcome.error is None and completion.strip() == slot.reference.strip(),
        }

    results = run_tasks(tasks, one, on_result)
    return {"summary": summarize(results), "results": results}


def summarize(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    return {
        "tasks": n,
        "files": len({r["task_id"].rsplit(":", 1)[0] for r in results}),
        "exact": sum(r["exact"] for r in results),
        "exact_match": sum(r["exact"] for r in results) / n if n else 0.0,
        "exact_match_stripped": sum(r["exact_stripped"] for r in results) / n if n else 0.0,
        "errors": sum(r["error"] is not None for r in results),
        **fill_costs(results),
    }
