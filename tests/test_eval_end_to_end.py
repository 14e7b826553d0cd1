"""End to end: fills are executed against HumanEval's tests and scored; wrong fills fail, right fills pass."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from infill.cli import main
from infill.config import DecodeConfig
from infill.evaluation.filling import Filler, FillOutcome, Slot, reference_filler
from infill.evaluation.humaneval import SingleLineTask, build_tasks, load_problems, run_single_line


@pytest.fixture(scope="module")
def three_tasks() -> list[SingleLineTask]:
    tasks = build_tasks(load_problems())
    # the last line of HumanEval/0 and HumanEval/2 and an inner line of HumanEval/4
    wanted = {"HumanEval/0/L7", "HumanEval/2/L0", "HumanEval/4/L0"}
    return [t for t in tasks if t.task_id in wanted]


def _wrong(slot: Slot, budget: int | None) -> FillOutcome:
    indent = slot.reference[: len(slot.reference) - len(slot.reference.lstrip())]
    return FillOutcome(indent + "return None", tokens=3, nfe=2)


def test_reference_fills_pass_and_wrong_fills_fail(three_tasks: list[SingleLineTask]) -> None:
    assert [t.slot.reference for t in three_tasks] == [
        "    return False",
        "    return number % 1.0",
        "    mean = sum(numbers) / len(numbers)",
    ]
    good = run_single_line(three_tasks, reference_filler)
    assert good["summary"]["passed"] == 3 and good["summary"]["pass_at_1"] == 1.0
    assert all(r["status"] == "passed" and r["completion"] == r["reference"] for r in good["results"])
    bad = run_single_line(three_tasks, _wrong)
    assert bad["summary"]["passed"] == 0 and bad["summary"]["statuses"] == {"failed": 3}
    assert bad["summary"]["tokens_per_nfe"] == 1.5
    assert all(r["detail"] for r in bad["results"])  # the exception is recorded


def test_oracle_budget_is_passed_and_errors_score_as_failures(three_tasks: list[SingleLineTask]) -> None:
    seen: list[tuple[str, int | None]] = []

    def refusing(slot: Slot, budget: int | None) -> FillOutcome:
        seen.append((slot.reference, budget))
        return FillOutcome("", budget=budget, error="too long for the model")

    run = run_single_line(three_tasks, refusing, budget_of=len)
    assert seen == [(t.slot.reference, len(t.slot.reference)) for t in three_tasks]
    assert run["summary"]["passed"] == 0 and run["summary"]["statuses"] == {"error": 3}
    assert [r["budget"] for r in run["results"]] == [len(t.slot.reference) for t in three_tasks]


def test_cli_reference_self_check(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(
        main, ["eval", "humaneval-single-line", "--reference", "--limit", "3", "-q", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "pass@1 100.0% (3/3 tasks" in result.output
    report = json.loads(out.read_text())
    assert report["tasks_total"] == 1033 and report["subset"] == "3 evenly spaced"
    assert [r["task_id"] for r in report["results"]] == [
        "HumanEval/0/L0",
        "HumanEval/70/L2",
        "HumanEval/118/L7",
    ]
    assert report["summary"]["passed"] == 3


def _answering(loaded: Any, fill: Filler, answer: Callable[[Slot], str]) -> Filler:
    """A filler that scripts the model to write answer(slot), then fills through `fill`."""

    def filler(slot: Slot, budget: int | None) -> FillOutcome:
        loaded.model.answer = loaded.tokenizer.encode(answer(slot))
        return fill(slot, budget)

    return filler


def _scripted_run(tasks: list[SingleLineTask], filler_for: Callable[[Any, DecodeConfig], Filler]) -> None:
    """A scripted model that writes the reference passes every task; writing a wrong line fails every task."""
    from infill.evaluation.filling import token_counter
    from tests.fixtures_eval import scripted_loaded_model

    loaded = scripted_loaded_model()
    for decoder in ("sequential", "assd"):
        fill = filler_for(loaded, DecodeConfig(decoder=decoder, k=5, temperature=0.0))
        good = run_single_line(tasks, _answering(loaded, fill, lambda s: s.reference), budget_of=token_counter(loaded))
        assert good["summary"]["passed"] == len(tasks), good["results"]
        assert all(r["completion"] == r["reference"] and r["nfe"] > 0 for r in good["results"])
        assert [r["budget"] for r in good["results"]] == [len(t.slot.reference.encode()) for t in tasks]
        wrong = _answering(loaded, fill, lambda s: _wrong(s, None).completion)
        bad = run_single_line(tasks, wrong, budget_of=token_counter(loaded))
        assert bad["summary"]["passed"] == 0 and bad["summary"]["statuses"] == {"failed": len(tasks)}


def test_through_fill_text_with_a_scripted_model() -> None:
    """The users' path (infill.api.fill_text, oracle budget). Tasks whose line keeps the indentation fill_text
    infers for an insertion point (it re-indents fills there)."""
    from infill.evaluation.filling import api_filler

    tasks = {t.task_id: t for t in build_tasks(load_problems())}
    _scripted_run([tasks["HumanEval/2/L0"], tasks["HumanEval/4/L0"], tasks["HumanEval/12/L0"]], api_filler)


def test_raw_model_fills_with_a_scripted_model(three_tasks: list[SingleLineTask]) -> None:
    """Model-only fills keep the model's own indentation, including the dedent of HumanEval/0/L7."""
    from infill.evaluation.filling import raw_filler

    _scripted_run(three_tasks, raw_filler)


def test_cli_input_errors_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["eval", "heldout-exact", "--dir", str(tmp_path), "-q"])
    assert result.exit_code == 2
    assert "no non-blank lines" in result.output
    result = CliRunner().invoke(main, ["eval", "heldout-exact", "-q"])
    assert result.exit_code == 2 and "--corpus" in result.output


@pytest.mark.parametrize("command", [["heldout-exact", "--files", "{f}"], ["humaneval-single-line", "--reference"]])
def test_cli_a_bad_monitor_rule_is_exit_2_before_any_task(command: list[str], tmp_path: Path) -> None:
    """A setting every fill would refuse is refused once, at the start: `--monitor bogus` was an error in each
    task, reported as a score of 0% with exit 0."""
    (tmp_path / "a.py").write_text("def f(x):\n    return x + 1\n")
    args = [a.replace("{f}", str(tmp_path / "a.py")) for a in command]
    result = CliRunner().invoke(main, ["eval", *args, "--limit", "1", "-q", "--monitor", "bogus", "--json"])
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert "unknown rule(s) bogus" in result.stderr and len(result.stderr.splitlines()) == 1, result.stderr


def test_cli_an_unwritable_report_is_refused_before_any_task(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`-o` into a read-only folder was found only when the report was written, after the whole run."""
    from infill.commands import evaluate

    ran: list[object] = []
    monkeypatch.setattr(evaluate, "_load", lambda *a: ran.append(a) or pytest.fail("a task ran"))
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        result = CliRunner().invoke(
            main, ["eval", "humaneval-single-line", "--limit", "1", "-q", "-o", str(folder / "r.json")]
        )
    finally:
        folder.chmod(0o755)
    assert result.exit_code == 2 and "read-only" in result.stderr and not ran, result.output
    assert list(folder.iterdir()) == []
    report = tmp_path / "new" / "sub" / "r.json"  # a folder that does not exist yet is made, as before
    result = CliRunner().invoke(
        main, ["eval", "humaneval-single-line", "--reference", "--limit", "1", "-q", "-o", str(report)]
    )
    assert result.exit_code == 0 and json.loads(report.read_text())["summary"], result.output
