"""End to end with a real (tiny, random) checkpoint: `infill fill` and `infill docstrings` with `--daemon on`
print and write exactly what `--daemon off` does, and the socket's public `fill` method returns what
`--format json` prints."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from infill.cli import main
from infill.server import client
from tests.fixtures_serve import plugin_env

SOURCE = '''def mean(values):
    """Return the arithmetic mean."""
    total = sum(values)
    return total / len(values)
'''


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infill.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "model")


def run(args: list[str], env: dict[str, str]) -> tuple[int, bytes, bytes]:
    """`infill ARGS` in this process (the --daemon off runs reuse this process's torch import)."""
    result = CliRunner().invoke(main, args, env=env)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout_bytes, result.stderr_bytes or b""


@pytest.mark.slow
def test_daemon_output_and_writes_equal_in_process(
    tiny: Path, runtime_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFILL_NO_DAEMON")  # tests/conftest.py turns daemons off; this one runs --daemon on
    env = plugin_env(runtime_dir)
    del env["INFILL_SERVER_PLUGINS"]  # the real methods, no fakes
    env["INFILL_DAEMON_DEBUG"] = "1"  # a --daemon on run that fell back would say so on stderr: outputs would differ
    for name in ("on", "off"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "stats.py").write_text(SOURCE)
    common = [
        "fill",
        "stats.py",
        "--span",
        "3:3",
        "--model",
        str(tiny),
        "--no-syntax-check",
        "--allow-syntax-errors",  # a random model's fill may split a UTF-8 character: take it anyway
        "--tokens",
        "12",
        "-v",
    ]
    monkeypatch.chdir(tmp_path / "on")
    daemon = run([*common, "--daemon", "on"], env)
    info = client.status(env)
    assert info is not None and info["pid"] != os.getpid() and info["models"], "the daemon kept the model"
    monkeypatch.chdir(tmp_path / "off")
    local = run([*common, "--daemon", "off"], env)
    assert daemon == local and daemon[0] == 0  # exit code, stdout and stderr bytes
    assert (tmp_path / "on" / "stats.py").read_bytes() == (tmp_path / "off" / "stats.py").read_bytes()
    assert (tmp_path / "on" / "stats.py").read_text() != SOURCE  # it did fill (in place, relative path)

    # editor filter mode: stdin -> stdout
    stdin_args = ["fill", "-", "--stdin-filename", "x.py", *common[2:-1]]
    piped = [CliRunner().invoke(main, [*stdin_args, "--daemon", mode], env=env, input=SOURCE) for mode in ("on", "off")]
    assert piped[0].stdout_bytes == piped[1].stdout_bytes != SOURCE.encode() and piped[0].exit_code == 0

    bad = ["fill", "stats.py", "--span", "40:41", "--model", str(tiny)]
    daemon_bad, local_bad = run([*bad, "--daemon", "on"], env), run([*bad, "--daemon", "off"], env)
    assert daemon_bad == local_bad and daemon_bad[0] == 2 and daemon_bad[2]

    # infill docstrings: the daemon runs the same command; output and the written files match in-process
    for name in ("on", "off"):
        (tmp_path / name / "m.py").write_text("def add(a, b):\n    return a + b\n")
    doc_args = ["docstrings", "m.py", "--ignore-module", "--model", str(tiny)]
    monkeypatch.chdir(tmp_path / "on")
    doc_daemon = run([*doc_args, "--daemon", "on"], env)
    monkeypatch.chdir(tmp_path / "off")
    doc_local = run([*doc_args, "--daemon", "off"], env)
    assert doc_daemon == doc_local and doc_daemon[0] == 0
    assert (tmp_path / "on" / "m.py").read_text() == (tmp_path / "off" / "m.py").read_text() != "def add"

    # the editor-facing method over the same (warm) daemon returns what --format json prints
    printed = json.loads(run([*common[:-1], "--format", "json", "--daemon", "off"], env)[1])
    params: dict[str, Any] = {
        "path": "stats.py",
        "cwd": str(tmp_path / "off"),
        "span": "3:3",
        "model": str(tiny),
        "syntax_check": False,
        "tokens": 12,
    }
    reply = client.request("fill", params, "on", env=env)
    assert reply is not None and reply["stats"].pop("seconds") >= 0
    printed["stats"].pop("seconds")
    assert reply == printed
    assert client.status(env)["pid"] == info["pid"]  # type: ignore[index]  # one daemon served it all
