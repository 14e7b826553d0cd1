"""Task construction: HumanEval single-line tasks, line slots, held-out sampling, cropping."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from infill.errors import InputError
from infill.evaluation.filling import Slot, content_of, line_slot, split_lines
from infill.evaluation.heldout import crop_slot, python_files, sample_line_tasks
from infill.evaluation.humaneval import EXPECTED_TASKS, build_tasks, evenly_spaced, load_problems


@pytest.fixture(scope="module")
def problems() -> list[dict[str, str]]:
    return load_problems()


def test_humaneval_has_1033_single_line_tasks(problems: list[dict[str, str]]) -> None:
    tasks = build_tasks(problems)
    assert len(problems) == 164
    assert len(tasks) == EXPECTED_TASKS == 1033
    assert len({t.task_id for t in tasks}) == 1033
    assert len({t.problem_id for t in tasks}) == 164


def test_prompt_and_suffix_split(problems: list[dict[str, str]]) -> None:
    p0 = problems[0]
    lines = p0["canonical_solution"].split("\n")
    tasks = [t for t in build_tasks(problems) if t.problem_id == "HumanEval/0"]
    # every non-blank solution line, in order
    assert [t.slot.reference for t in tasks] == [line for line in lines if line.strip()]
    second = tasks[1]
    assert second.slot.reference == "        for idx2, elem2 in enumerate(numbers):"
    assert second.prompt == p0["prompt"] + lines[0] + "\n"
    assert second.suffix == "\n".join(lines[2:])
    assert second.slot.after == "\n" + second.suffix
    # filling with the reference rebuilds the original program exactly
    expected = p0["prompt"] + p0["canonical_solution"] + "\n" + p0["test"] + "\ncheck(has_close_elements)\n"
    assert all(t.program(t.slot.reference) == expected for t in tasks)
    # what a filler sees never contains the reference line
    assert all(t.slot.reference not in t.slot.before + t.slot.after for t in tasks)


def test_blank_lines_are_skipped() -> None:
    problem = {
        "task_id": "Toy/0",
        "prompt": "def f(x):\n",
        "canonical_solution": "    y = x + 1\n\n    \n    return y\n",
        "test": "def check(f):\n    assert f(1) == 2\n",
        "entry_point": "f",
    }
    tasks = build_tasks([problem])
    assert [(t.task_id, t.slot.reference) for t in tasks] == [
        ("Toy/0/L0", "    y = x + 1"),
        ("Toy/0/L3", "    return y"),
    ]
    last = tasks[1]
    assert last.prompt == "def f(x):\n    y = x + 1\n\n    \n"
    assert last.suffix == ""


def test_evenly_spaced_subset() -> None:
    items = list(range(1033))
    sub = evenly_spaced(items, 10)
    assert len(sub) == 10 and sub[0] == 0 and sub == sorted(set(sub)) and sub[-1] > 900
    assert evenly_spaced(items, None) == items
    assert evenly_spaced(items, 5000) == items
    with pytest.raises(InputError):
        evenly_spaced(items, 0)


def test_split_lines_only_on_newline() -> None:
    text = "a\x0cb\r\n\n  c"
    assert split_lines(text) == ["a\x0cb\r\n", "\n", "  c"]
    assert "".join(split_lines(text)) == text
    assert content_of("x\r\n") == "x" and content_of("x\n") == "x" and content_of("x") == "x"
    slot = line_slot(split_lines(text), 0)
    assert slot == Slot("", "\r\n\n  c", "a\x0cb")
    assert slot.text_with(slot.reference) == text


def _write(folder: Path, name: str, n: int) -> Path:
    path = folder / name
    path.write_text("".join(f"line_{name}_{i} = {i}\n" if i % 3 else "\n" for i in range(n)), encoding="utf-8")
    return path


def test_heldout_sampling_is_deterministic_and_skips_blank_lines(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    paths = [_write(tmp_path, "a.py", 30), _write(tmp_path / "sub", "b.py", 60)]
    (tmp_path / "notes.txt").write_text("not python\n")
    found = python_files([], [tmp_path])
    assert found == sorted(paths, key=str)
    one = sample_line_tasks(found, 25, seed=3)
    assert one == sample_line_tasks(list(reversed(found)), 25, seed=3)
    assert one != sample_line_tasks(found, 25, seed=4)
    assert len(one) == 25 and len({t.task_id for t in one}) == 25
    for t in one:
        assert t.slot.reference.strip()
        original = Path(t.path).read_text()
        assert t.slot.text_with(t.slot.reference) == original
        assert original.split("\n")[t.line - 1] == t.slot.reference
    # asking for more lines than exist gives every non-blank line once
    assert len(sample_line_tasks(found, 10_000)) == sum(1 for i in range(30) if i % 3) + sum(
        1 for i in range(60) if i % 3
    )


def test_crop_keeps_whole_lines_around_the_masked_line() -> None:
    lines = [f"x{i} = {i}\n" for i in range(100)]
    slot = line_slot(lines, 50)

    def count(text: str) -> int:
        return len(text)  # one "token" per character

    cropped = crop_slot(slot, count, max_tokens=80)
    assert cropped.reference == slot.reference
    assert slot.before.endswith(cropped.before) and slot.after.startswith(cropped.after)
    assert cropped.after.startswith("\n")  # the masked line's terminator stays
    assert len(cropped.before) + len(cropped.after) - 1 <= 80
    assert split_lines(cropped.before) == lines[50 - len(split_lines(cropped.before)) : 50]
    assert len(cropped.before) > len(cropped.after)  # three quarters before
    # a line near the end gives the unused suffix room to the prefix
    tail = crop_slot(line_slot(lines, 98), count, max_tokens=80)
    assert len(tail.before) > 60  # more than its three-quarter share (60)
    # everything fits: unchanged
    assert crop_slot(slot, count, max_tokens=10_000) == slot


def test_heldout_exact_scoring(tmp_path: Path) -> None:
    from infill.evaluation.filling import FillOutcome, reference_filler
    from infill.evaluation.heldout import run_heldout_exact

    tasks = sample_line_tasks([_write(tmp_path, "a.py", 30)], 6, seed=1)
    good = run_heldout_exact(tasks, reference_filler)
    assert good["summary"]["exact_match"] == 1.0 and good["summary"]["exact"] == 6

    def padded(slot: Slot, budget: int | None) -> FillOutcome:  # right code, wrong indentation
        return FillOutcome("  " + slot.reference + " ", budget=budget)

    shifted = run_heldout_exact(tasks, padded, budget_of=len)
    assert shifted["summary"]["exact_match"] == 0.0 and shifted["summary"]["exact_match_stripped"] == 1.0
    assert [r["budget"] for r in shifted["results"]] == [len(t.slot.reference) for t in tasks]
    seen: list[int] = []

    def recording(slot: Slot, budget: int | None) -> FillOutcome:
        seen.append(len(slot.before) + len(slot.after))
        return reference_filler(slot, budget)

    run_heldout_exact(tasks, recording, crop=lambda s: crop_slot(s, len, 40))
    assert max(seen) <= 41  # the masked line's terminator is kept on top of the 40-character window


def test_slot_terminator() -> None:
    lines = split_lines("a\r\nb\nc")
    assert [line_slot(lines, i).terminator for i in range(3)] == ["\r\n", "\n", ""]


def test_heldout_folders_skip_virtual_environments_and_what_git_ignores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--dir` is walked as `infill docstrings` walks a folder: installed packages and generated code are not the
    project's held-out code."""
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", os.devnull)  # no user's core.excludesFile
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    ours = _write(tmp_path, "a.py", 6)
    for folder in ("env/lib/site-packages/pkg", "gen", "src"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    installed = _write(tmp_path / "env" / "lib" / "site-packages" / "pkg", "p.py", 6)
    generated = [_write(tmp_path / "gen", "g.py", 6), _write(tmp_path / "src", "m_pb2.py", 6)]
    kept = _write(tmp_path / "src", "keep_pb2.py", 6)
    (tmp_path / ".gitignore").write_text("gen/\n*_pb2.py\n!keep_pb2.py\n")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert python_files([], [tmp_path]) == sorted([ours, kept], key=str)
    assert python_files([], [tmp_path], respect_gitignore=False) == sorted([ours, kept, *generated], key=str)
    assert python_files([installed], [tmp_path]) == sorted([ours, kept, installed], key=str)  # named: read
