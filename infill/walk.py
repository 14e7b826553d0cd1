"""The source files under a folder, as `infill docstrings` and `infill eval heldout-exact --dir` walk it: hidden
folders, virtual environments and build output skipped (black's and ruff's default excludes), and what git ignores
there, asked of git itself: one `git ls-files` call per walked folder.

Git applies every source of ignore rules exactly (nested .gitignore files, `!` negation, .git/info/exclude,
core.excludesFile); no pattern is parsed here. Outside a git work tree, or where git is not installed or fails,
nothing is ignored: ruff does the same (a .gitignore outside a repository is not read), and a walk never fails
for want of git. Like black and ruff, which match the patterns whether or not a file is tracked, a tracked file
that matches an ignore rule counts as ignored.

This module imports neither torch nor Click.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

SKIP_DIRS = {
    ".git", ".hg", ".svn", ".venv", "venv", ".tox", ".nox", "__pycache__", "node_modules", "build", "dist",
    "_build", "buck-out", "__pypackages__", "site-packages",
}  # fmt: skip
GIT_TIMEOUT_S = 120.0  # a wedged git (a network file system, a lock) must not hang a walk forever
# set by git for its hooks (and what they run) to the repository at hand; relative values would point elsewhere from the
# walked folder, so git finds the repository of the folder itself
_GIT_LOCATION_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_PREFIX")


@dataclass(frozen=True)
class Ignored:
    """Paths git ignores under one folder, relative to it with `/` separators (folders without the final `/`)."""

    files: frozenset[str] = frozenset()
    folders: frozenset[str] = frozenset()

    def folder(self, relative: str) -> bool:
        """Whether a folder (relative to the walked one) is ignored as a whole: not walked at all."""
        return relative.replace(os.sep, "/") in self.folders

    def file(self, relative: str) -> bool:
        """Whether a file (relative to the walked one) is ignored (its folder is checked by the walk)."""
        return relative.replace(os.sep, "/") in self.files


NOTHING = Ignored()


def git_ignored(folder: Path) -> Ignored:
    """What git ignores under `folder` (untracked files and whole folders, and tracked files matching a rule).

    NOTHING outside a git work tree, without git, and when git fails; nothing below `folder` when it is itself
    ignored as a whole: a folder named on purpose is walked, as a file named on purpose is read."""
    command = ["git", "-C", str(folder), "ls-files", "--cached", "--others", "--ignored", "--exclude-standard"]
    env = {k: v for k, v in os.environ.items() if k not in _GIT_LOCATION_VARS}
    try:
        proc = subprocess.run(
            [*command, "--directory", "-z"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=env,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):  # no git on PATH, not runnable, timed out
        return NOTHING
    if proc.returncode != 0:  # not a work tree (128), a repository git refuses (dubious ownership), ...
        return NOTHING
    # a folder ignored as a whole is listed as "./", which names no walked path: named on purpose, it is walked
    entries = [os.fsdecode(e) for e in proc.stdout.split(b"\0") if e]
    folders = frozenset(e.rstrip("/") for e in entries if e.endswith("/"))
    return Ignored(frozenset(e for e in entries if not e.endswith("/")), folders)


def _walked(root: str, name: str) -> bool:
    """Whether a folder found under a named one is walked: not hidden, not one of SKIP_DIRS (black's and ruff's
    default excludes), not a virtual environment whatever its name (`env/` holding a pyvenv.cfg): installed
    packages are someone else's code."""
    return (
        name not in SKIP_DIRS
        and not name.startswith(".")
        and not os.path.isfile(os.path.join(root, name, "pyvenv.cfg"))
    )


def _repository_root(path: str) -> bool:
    """Whether a folder is the top of its own git work tree (a `.git` folder, or the `.git` file of a submodule or
    a linked worktree): the enclosing repository's git does not look inside it."""
    return os.path.exists(os.path.join(path, ".git"))


def source_files(folder: Path, suffixes: tuple[str, ...], respect_gitignore: bool = True) -> list[Path]:
    """The files under `folder` whose names end with one of `suffixes`, in a stable (sorted, top-down) order,
    skipping the folders of `_walked` and, when `respect_gitignore`, what git ignores (git_ignored). A separate
    repository or submodule found under `folder` is walked with its own rules, as git and ruff treat it."""
    # each walked folder -> the repository folder whose rules hold there, and those rules (relative to it)
    rules: dict[str, tuple[str, Ignored]] = {}
    out: list[Path] = []
    for root, dirs, files in os.walk(folder):
        if root == str(folder) or (respect_gitignore and _repository_root(root)):
            rules[root] = (root, git_ignored(Path(root)) if respect_gitignore else NOTHING)
        top, ignored = rules[root]
        here = os.path.relpath(root, top)
        dirs[:] = sorted(
            d for d in dirs if _walked(root, d) and not ignored.folder(os.path.normpath(os.path.join(here, d)))
        )
        for d in dirs:
            rules[os.path.join(root, d)] = (top, ignored)
        out += [
            Path(root) / f
            for f in sorted(files)
            if f.endswith(suffixes) and not ignored.file(os.path.normpath(os.path.join(here, f)))
        ]
        del rules[root]
    return out
