"""Test-session settings: `--daemon auto` must not start per-user daemons from the test suite (tests that
exercise the daemon build their own environment without this variable: fixtures_serve.plugin_env). Models run
on the eager engine unless a test asks for another (`--engine auto` would export every tiny model to ONNX when
the `onnx` extra is installed; tests/test_engines.py covers those engines), and exported graphs go to a
temporary directory, never the user's cache."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ["INFILL_NO_DAEMON"] = "1"
os.environ["INFILL_ENGINE"] = "torch"
os.environ["INFILL_CACHE_DIR"] = tempfile.mkdtemp(prefix="infill-test-cache-")
atexit.register(shutil.rmtree, os.environ["INFILL_CACHE_DIR"], ignore_errors=True)


@pytest.fixture
def venv_on_path(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Install hints name this interpreter's installer (infill.extras.installer), which depends on the `pip` found
    on PATH: this runs the test in an activated virtualenv, whose `pip` sits beside `python`, so that the hint reads
    `pip install ...` whatever the PATH the suite runs under. Returns the virtualenv's folder."""
    venv = tmp_path_factory.mktemp("venv")
    (venv / "bin").mkdir()
    for name in ("python", "pip"):
        (venv / "bin" / name).write_text("#!/bin/sh\n")
        (venv / "bin" / name).chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(venv / "bin" / "python"))
    monkeypatch.setattr(sys, "prefix", str(venv))
    monkeypatch.setenv("PATH", str(venv / "bin"))
    return venv


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    """A private daemon runtime directory (short: socket paths are limited); its daemon is stopped after. Here
    rather than in tests/fixtures_serve.py, which the daemons the tests start load as their plugin: they never
    import pytest (~0.2 s of each one's start)."""
    from fixtures_serve import stop_daemon

    directory = Path(tempfile.mkdtemp(prefix="infill-t-"))
    try:
        yield directory
    finally:
        stop_daemon(directory)
        shutil.rmtree(directory, ignore_errors=True)
