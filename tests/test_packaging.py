"""infill as users install it: a wheel in a site-packages shared with other distributions, and what the wheel and
the sdist carry."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def fake_dist(site: Path, name: str, files: list[str], extras: dict[str, list[str]]) -> metadata.Distribution:
    """A `.dist-info` folder in `site` as pip writes it: METADATA with the extras, RECORD listing `files`."""
    info = site / f"{name}-1.0.dist-info"
    info.mkdir()
    lines = [f"Metadata-Version: 2.4\nName: {name}\nVersion: 1.0\n"]
    for extra, requirements in extras.items():
        lines.append(f"Provides-Extra: {extra}\n")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"\n' for r in requirements]
    (info / "METADATA").write_text("".join(lines))
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/METADATA"]))
    return metadata.PathDistribution(info)


def test_a_wheels_hint_names_its_own_extras_beside_other_distributions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, venv_on_path: Path
) -> None:
    """Installed from a wheel, `infill lsp` without pygls hinted `pip install '<infill's source folder>[lsp]'`: every
    distribution in the same site-packages "locates" infill/__init__.py there, so the first one listed (torch, say,
    with no `lsp` extra) was taken for infill's. Only the distribution whose RECORD lists the file is."""
    from infill import extras

    (tmp_path / "infill").mkdir()
    (tmp_path / "infill" / "__init__.py").write_text("")
    other = fake_dist(tmp_path, "torch", ["torch/__init__.py"], {"opt": ["numpy"]})
    ours = fake_dist(tmp_path, "infill", ["infill/__init__.py"], {"lsp": ["pygls<3,>=2.0", "lsprotocol>=2025.0.0"]})
    monkeypatch.setattr(metadata, "distributions", lambda: iter([other, ours]))
    monkeypatch.setattr(extras, "infill", SimpleNamespace(__file__=str(tmp_path / "infill" / "__init__.py")))
    monkeypatch.setattr(extras, "source_tree", lambda: None)  # a wheel: no source folder
    extras.requirements.cache_clear()
    try:
        assert extras.requirements("lsp") == ("pygls<3,>=2.0", "lsprotocol>=2025.0.0")
        assert extras.install_hint("lsp") == "pip install 'pygls<3,>=2.0' 'lsprotocol>=2025.0.0'"
        assert extras.requirements("opt") == ()  # another distribution's extra is not infill's
    finally:
        extras.requirements.cache_clear()


def pyproject() -> dict[str, Any]:
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    data: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return data


def test_the_license_ships_and_its_declaration_builds_past_setuptools_deadline() -> None:
    """README says MIT, but no license text was in the repository, the sdist or the wheel (MIT asks for the notice in
    every copy), and `license = { text = "MIT" }` is a table setuptools deprecates: every build warned that builds
    with it stop being supported on 2027-02-18. An SPDX string and `license-files` (setuptools 77) fix both."""
    project = pyproject()["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n") and "The above copyright notice" in text
    requires = pyproject()["build-system"]["requires"]
    setuptools = [r for r in requires if r.startswith("setuptools")]
    assert setuptools and int(setuptools[0].split(">=")[1].split(".")[0]) >= 77, requires


def precommit_sections() -> dict[str, str]:
    """The README's and docs/docstrings.md's pre-commit set-up: from the `.pre-commit-config.yaml` sample to the
    next heading."""
    out = {}
    for name, start in (("README.md", "As a pre-commit hook"), ("docs/docstrings.md", "## pre-commit")):
        text = (ROOT / name).read_text(encoding="utf-8")
        begin = text.index(start)
        out[name] = text[begin : text.index("\n## ", begin + len(start))]
    return out


def test_the_precommit_set_up_says_how_the_hooks_virtualenv_gets_the_cpu_torch() -> None:
    """pre-commit builds the hook's virtualenv itself, and a bare `torch` requirement pulls the multi-GB CUDA build:
    docs/docstrings.md said to set PIP_CONSTRAINT, the README's set-up (the one people copy) did not."""
    for name, section in precommit_sections().items():
        assert "PIP_CONSTRAINT" in section and "torch==2.13.0" in section, name
    assert "torch==2.13.0" in (ROOT / ".ci" / "constraints.txt").read_text(encoding="utf-8").splitlines()


def test_the_precommit_samples_name_the_same_rev() -> None:
    """docs/docstrings.md's sample said `rev: v0.1.0`, a tag the repository does not have, so copying it failed
    (`pathspec 'v0.1.0' did not match`); the README's says `main`."""
    import re

    revs = {
        name: re.findall(r"^\s+rev: (\S+)", section, re.MULTILINE) for name, section in precommit_sections().items()
    }
    assert revs["README.md"] == ["main"] and revs["docs/docstrings.md"] == ["main"], revs


def test_the_sdist_carries_every_tracked_file(tmp_path: Path) -> None:
    """The sdist held tests/test_*.py (setuptools' default) without conftest.py, the fixtures and the golden files,
    and no docs, Neovim plugin, completions or pre-commit hooks: its tests could not run, and what the README names
    was missing. MANIFEST.in now takes the whole tracked tree; setuptools' egg_info writes the sdist's file list
    (SOURCES.txt) without building it."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist, say): no tracked files to compare")
    setuptools = pytest.importorskip("setuptools")
    if int(setuptools.__version__.split(".")[0]) < 77:  # what [build-system] asks for; an isolated build gets it
        pytest.skip(f"setuptools {setuptools.__version__} here cannot read pyproject.toml's SPDX license")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    setup = "from setuptools import setup; setup()"
    subprocess.run(
        [sys.executable, "-c", setup, "-q", "egg_info", "--egg-base", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    sources = set((tmp_path / "infill.egg-info" / "SOURCES.txt").read_text(encoding="utf-8").splitlines())
    missing = [f for f in tracked.decode().split("\0") if f and f not in sources]
    assert missing == [], missing


def wheel_files(setuptools: dict[str, Any]) -> set[str]:
    """The source files a wheel takes by [tool.setuptools]: each package's modules and its package-data globs
    (only those: include-package-data is off)."""
    assert setuptools.get("include-package-data") is False
    dirs = setuptools.get("package-dir", {})
    out: set[str] = set()
    for package in setuptools["packages"]:
        folder = ROOT / dirs.get(package, package.replace(".", "/"))
        out |= {str(p.relative_to(ROOT)) for p in folder.glob("*.py")}
        for pattern in setuptools.get("package-data", {}).get(package, []):
            out |= {str(p.relative_to(ROOT)) for p in folder.glob(pattern) if p.is_file()}
    return out


def test_the_wheel_takes_every_tracked_file_of_the_package_and_its_queries() -> None:
    """Every tracked file under infill/ and grammars/ (modules, model weights, tokenizers, calibrations, model
    cards, tree-sitter queries) is a module or package data of the wheel. The data folders (grammars/<lang>,
    weights/<name>) came in through include-package-data, with a setuptools warning for each that such a folder
    "would be ignored" as an unlisted package; the package-data globs now say what ships, and nothing else does."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an sdist, say): no tracked files to compare")
    listed = subprocess.run(["git", "ls-files", "-z", "infill", "grammars"], cwd=ROOT, capture_output=True, check=True)
    tracked = {f for f in listed.stdout.decode().split("\0") if f}
    shipped = wheel_files(pyproject()["tool"]["setuptools"])
    assert tracked - shipped == set(), "add these to [tool.setuptools] packages or package-data"
    assert {"infill/weights/default/tokenizer.json", "grammars/python/definitions.scm"} <= shipped


def test_python_310_gets_a_toml_parser() -> None:
    """requires-python says 3.10, where the standard library has no tomllib: `infill docstrings` in any project with
    a pyproject.toml stopped with "internal error: ModuleNotFoundError: No module named 'tomli'" (exit 123), as the
    package read its settings with tomli there but did not depend on it."""
    project = pyproject()["project"]
    assert project["requires-python"] == ">=3.10"
    assert "tomli>=1.1; python_version < '3.11'" in project["dependencies"]
    source = (ROOT / "infill" / "docstrings" / "config.py").read_text(encoding="utf-8")
    assert "import tomli as tomllib" in source  # what the requirement is for
