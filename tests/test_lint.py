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


def test_every_package_is_installed() -> None:
    """An installed infill (pip install ., pre-commit's hook virtualenv) must carry every subpackage."""
    text = (ROOT / "pyproject.toml").read_text()
    start = text.index("packages = [")
    declared = set(text[start : text.index("]", start)].replace('"', " ").replace(",", " ").split()[3:])
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "infill").rglob("__init__.py")}
    assert on_disk - declared == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert "infill.grammars" in declared


def test_no_issue_numbers_in_code_tests_or_docs() -> None:
    """Code, tests, benchmarks and docs say what they guard against, not which issue asked for it: an issue number
    means nothing to a reader without the tracker (and nothing once it moves)."""
    import re

    pattern = re.compile(r"\bissues?\s+#?\d", re.IGNORECASE)
    files = [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
    files += [p for folder in ("infill", "tests", "benchmarks") for p in (ROOT / folder).rglob("*.py")]
    found = [
        f"{p.relative_to(ROOT)}:{n}: {line.strip()}"
        for p in files
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert found == [], "describe the concern instead:\n" + "\n".join(found)
