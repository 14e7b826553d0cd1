"""The pre-commit hooks, run through the real `pre-commit` package in a temporary git repository.

The fast test uses the hook definitions of .pre-commit-hooks.yaml as `repo: local` hooks with
`language: system` (no virtualenv to build), the fill hook running `infill docstrings` with the fake model of
fixtures_doc.py. The `try-repo` test installs the real hooks into a fresh virtualenv (about 3 minutes, as
torch is installed), so it runs only with INFILL_PRECOMMIT_TRY_REPO=1.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
MISSING = "def area(width, height):\n    return width * height\n"


def hooks_file() -> dict[str, dict[str, Any]]:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    return {hook["id"]: hook for hook in hooks}


def test_hooks_file_declares_both_hooks() -> None:
    hooks = hooks_file()
    fill, check = hooks["infill-docstrings"], hooks["infill-docstrings-check"]
    assert fill["require_serial"] is True and fill["types_or"] == ["python", "pyi"]
    assert fill["entry"] == "infill docstrings" and check["entry"] == "infill docstrings --check"
    assert check["types_or"] == ["python", "pyi"]


def environment(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        PRE_COMMIT_HOME=str(tmp_path / "pre-commit-home"),
        PIP_CONSTRAINT=str(REPO / ".ci" / "constraints.txt"),  # any fresh virtualenv gets the CPU torch
        PYTHONPATH=str(REPO),  # `python -m infill` is this checkout
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    env.pop("PRE_COMMIT", None)
    return env


def run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def git_repo(tmp_path: Path, env: dict[str, str]) -> Path:
    repo = tmp_path / "project"
    repo.mkdir()
    run(["git", "init", "-q"], repo, env)
    (repo / "geometry.py").write_text('"""Shapes."""\n\n\n' + MISSING)
    (repo / "notes.txt").write_text("not python\n")
    return repo


def local_config(repo: Path) -> None:
    hooks = hooks_file()
    fill = dict(hooks["infill-docstrings"], language="system")
    fill["entry"] = f"{sys.executable} {REPO / 'tests' / 'fixtures_doc.py'}"  # infill docstrings + fake model
    check = dict(hooks["infill-docstrings-check"], language="system")
    check["entry"] = f"{sys.executable} -m infill docstrings --check"
    config = {"repos": [{"repo": "local", "hooks": [fill, check]}]}
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))


def pre_commit(*args: str) -> list[str]:
    return [sys.executable, "-m", "pre_commit", *args]


def test_hooks_end_to_end_with_pre_commit(tmp_path: Path) -> None:
    env = environment(tmp_path)
    repo = git_repo(tmp_path, env)
    local_config(repo)
    run(["git", "add", "-A"], repo, env)

    check = run(pre_commit("run", "infill-docstrings-check", "--all-files"), repo, env)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "geometry.py:4: area" in check.stdout

    first = run(pre_commit("run", "infill-docstrings", "--all-files"), repo, env)
    assert first.returncode == 1, first.stdout + first.stderr  # it filled: files were modified
    assert "files were modified by this hook" in first.stdout
    text = (repo / "geometry.py").read_text()
    # the fake model's summary is not trusted by the packaged calibration: the names-only sentence is written
    assert 'def area(width, height):\n    """Return the area.\n\n    Args:\n' in text

    run(["git", "add", "-A"], repo, env)
    second = run(pre_commit("run", "--all-files"), repo, env)
    assert second.returncode == 0, second.stdout + second.stderr
    assert (repo / "geometry.py").read_text() == text  # idempotent

    (repo / "more.py").write_text('"""More."""\n\n\n' + MISSING.replace("area", "volume"))
    run(["git", "add", "-A"], repo, env)
    check = run(pre_commit("run", "infill-docstrings-check", "--all-files"), repo, env)
    assert check.returncode == 1 and "more.py:4: volume" in check.stdout and "geometry.py" not in check.stdout


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("INFILL_PRECOMMIT_TRY_REPO") != "1", reason="INFILL_PRECOMMIT_TRY_REPO=1")
def test_real_check_hook_via_try_repo(tmp_path: Path) -> None:
    env = environment(tmp_path)
    env.pop("PYTHONPATH")  # the hook's own virtualenv must provide infill
    repo = git_repo(tmp_path, env)
    run(["git", "add", "-A"], repo, env)
    done = run(pre_commit("try-repo", str(REPO), "infill-docstrings-check", "--all-files"), repo, env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "geometry.py:4: area" in done.stdout


def readme_blocks(language: str) -> list[str]:
    """Fenced `language` blocks of the docstrings documentation (docs/docstrings.md) and the README."""
    text = "\n".join((REPO / name).read_text(encoding="utf-8") for name in ("docs/docstrings.md", "README.md"))
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def test_readme_pre_commit_snippets_name_real_hooks() -> None:
    hooks = hooks_file()
    snippets = [yaml.safe_load(block) for block in readme_blocks("yaml")]
    assert len(snippets) >= 3
    used = [h["id"] for s in snippets if "repos" in s for repo in s["repos"] for h in repo["hooks"]]
    assert set(used) <= set(hooks) and "infill-docstrings" in used
    skip = next(s for s in snippets if "ci" in s)["ci"]["skip"]
    assert set(skip) == set(hooks)


def test_readme_command_examples_parse() -> None:
    from infill.commands.docstrings import docstrings

    examples = [
        m.group(1).split("|")[0].strip()
        for block in readme_blocks("bash")
        for m in re.finditer(r"^infill docstrings (.*?)(?:\s+#.*)?$", block, re.MULTILINE)
    ]
    assert len(examples) >= 6
    for example in examples:
        with docstrings.make_context("docstrings", shlex.split(example)) as ctx:
            assert ctx.params["paths"]
