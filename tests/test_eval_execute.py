"""The subprocess executor: candidate programs never run in-process and cannot hang or exhaust the machine."""

from __future__ import annotations

import os

from infill.evaluation.execute import run_program


def test_passing_program() -> None:
    result = run_program("def f(x):\n    return x + 1\nassert f(1) == 2\n")
    assert result.passed and result.status == "passed" and result.returncode == 0


def test_failing_program_reports_the_exception() -> None:
    result = run_program("def f(x):\n    return x\nassert f(1) == 2, 'wrong'\n")
    assert not result.passed and result.status == "failed" and result.returncode == 1
    assert result.detail == "AssertionError: wrong"
    syntax = run_program("def f(:\n")
    assert syntax.status == "failed" and "SyntaxError" in syntax.detail


def test_busy_loop_is_killed_at_the_timeout() -> None:
    result = run_program("while True:\n    pass\n", timeout=1.0)
    assert result.status == "timeout" and not result.passed


def test_sleeping_child_process_group_is_killed() -> None:
    # the guard removed os.fork/system; a plain sleep must still be cut off
    result = run_program("import time\ntime.sleep(60)\n", timeout=1.0)
    assert result.status == "timeout" and result.seconds < 30


def test_memory_hog_is_stopped_by_the_address_space_limit() -> None:
    result = run_program(
        "blocks = []\nwhile True:\n    blocks.append(bytearray(64 * 2**20))\n", memory_mb=256, timeout=20.0
    )
    assert result.status == "memory" and not result.passed


def test_runs_in_a_temporary_directory_with_destructive_calls_removed(tmp_path: object) -> None:
    here = os.getcwd()
    result = run_program(f"import os\nassert os.getcwd() != {here!r}\nassert os.listdir('.') == ['candidate.py']\n")
    assert result.passed, result.detail
    guarded = run_program("import shutil\nshutil.rmtree('/tmp/nothing-here')\n")
    assert guarded.status == "failed" and "NoneType" in guarded.detail
