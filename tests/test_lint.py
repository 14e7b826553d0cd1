"""The project's own standards, enforced where CI can see them: ruff and mypy are clean on infill/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param([sys.executable, "-m", "ruff", "check", "infill", "tests"], id="ruff"),
        pytest.param([sys.executable, "-m", "mypy", "infill"], id="mypy"),
    ],
)
def test_clean(argv: list[str]) -> None:
    tool = argv[2]
    if shutil.which(tool) is None and subprocess.run(argv[:3] + ["--version"], capture_output=True).returncode:
        pytest.skip(f"{tool} is not installed (pip install -e '.[dev]')")
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
