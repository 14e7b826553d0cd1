"""How to install one of infill's optional extras (a grammar, `lsp`, `onnx`, `eval`) into this very installation.

The name `infill` on the Python package index belongs to an unrelated project, so `pip install 'infill[lsp]'` would
install that one. The hint names what installs this project instead:

- run from a source tree (a clone, an editable install): that folder, `pip install '.[lsp]'` (the folder's path
  when the command runs elsewhere), as the README installs it;
- installed from a wheel: the extra's own requirements, read from this installation's metadata
  (`pip install 'pygls<3,>=2.0' 'lsprotocol>=2025.0.0'`), which work whatever the distribution is called.

The installer is this interpreter's: `pip install` when the `pip` found on PATH sits beside this interpreter (an
activated virtualenv, the system Python), else `/path/to/venv/bin/python -m pip install` (a virtualenv run by path,
pre-commit's hook environment), where a bare `pip` would install into another environment; `pipx inject infill`
inside a pipx virtualenv, which has no `pip` of its own and keeps what `pipx inject` adds across `pipx upgrade`;
`uv pip install --python /path/to/venv/bin/python` for an environment without pip (`uv venv` makes none) where uv
is on PATH.

Standard library only, and nothing is read until a hint is asked for.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import sys
from functools import cache
from pathlib import Path

import infill

_PROJECT_NAME = re.compile(r'^name\s*=\s*"infill"\s*$', re.MULTILINE)


def source_tree() -> Path | None:
    """The folder this code runs from when it is a source tree of infill (pyproject.toml names the project
    `infill` beside the package), else None."""
    root = Path(infill.__file__).resolve().parent.parent
    try:
        pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return root if _PROJECT_NAME.search(pyproject) else None


@cache
def requirements(extra: str) -> tuple[str, ...]:
    """The requirements of `extra` in the metadata of the installed distribution that holds this package; () when
    there is none (run from a folder on PYTHONPATH) or the extra is unknown."""
    from importlib import metadata

    here = Path(infill.__file__).resolve()
    for dist in metadata.distributions():
        # locate_file only joins a path onto the distribution's folder: every distribution in this site-packages
        # "locates" infill/__init__.py there, so only the one whose RECORD lists that file is this package's
        if not any(str(f) == "infill/__init__.py" for f in dist.files or ()):
            continue
        try:
            located = Path(str(dist.locate_file("infill/__init__.py"))).resolve()
        except (OSError, ValueError, TypeError):
            continue
        if located != here:
            continue
        found = []
        for requirement in dist.requires or []:
            spec, _, marker = requirement.partition(";")
            if re.search(rf"extra\s*==\s*['\"]{re.escape(extra)}['\"]", marker):
                found.append(spec.strip().replace(" ", ""))
        return tuple(found)
    return ()


def installer() -> str:
    """The command that installs packages into the environment this code runs in (module docstring)."""
    prefix = Path(sys.prefix)
    if (prefix / "pipx_metadata.json").is_file():
        return f"pipx inject {shlex.quote(prefix.name)}"
    if not sys.executable:
        return "pip install"
    here = Path(sys.executable).absolute().parent  # not resolved: a virtualenv's python links to the system's
    pip = shutil.which("pip")
    try:
        if pip is not None and os.path.samefile(Path(pip).absolute().parent, here):
            return "pip install"
    except OSError:
        pass
    if shutil.which("uv") is not None and importlib.util.find_spec("pip") is None:  # `uv venv` makes no pip
        return f"uv pip install --python {shlex.quote(sys.executable)}"
    return f"{shlex.quote(sys.executable)} -m pip install"


def install_hint(extra: str) -> str:
    """The command that installs `extra` here: `pip install '.[extra]'` from a source tree, else its requirements,
    with this interpreter's installer (`installer`)."""
    install = installer()
    root = source_tree()
    if root is not None:
        here = "." if Path(os.getcwd()).resolve() == root else str(root)
        return f"{install} {shlex.quote(f'{here}[{extra}]')}"
    needed = requirements(extra)
    if needed:
        return f"{install} " + " ".join(shlex.quote(r) for r in needed)
    return f"{install} '<infill's source folder>[{extra}]'"
