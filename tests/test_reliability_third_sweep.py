"""Never make a file worse, a third time: one regression test per defect a third sweep of 552 bad-input cases found
(issue 38), grouped as it reported them: high (lost buffers, writes after Ctrl-C, a deaf language server), medium,
low, and the tests it said were missing. Each test failed on the code before its fix.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fixtures_serve import REPO_ROOT, plugin_env, runtime_dir, stop_daemon, wait_until

_ = runtime_dir  # a fixture (a private daemon runtime folder, its daemon stopped afterwards)
SOURCE = b"def f(x):\n    return 0\n\n\ndef g(y):\n    return y\n"
SIGNALS = [pytest.param(signal.SIGINT, 130, id="ctrl-c"), pytest.param(signal.SIGTERM, 143, id="sigterm")]


# --- high 1: the editor filter lost the buffer when a signal came before it had read stdin ----------------------


def _interruptible() -> None:
    """Ctrl-C reaches the child as it reaches a command typed in a terminal (a suite started in the background by
    a non-interactive shell ignores SIGINT, and a process that starts with SIGINT ignored never sees it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def infill_handles_signals(pid: int) -> bool:
    """Whether the process runs infill's own code yet: its SIGTERM handler (infill.commands.interrupts, the first
    thing the entry point does) is installed. Before that the interpreter itself is starting, and a signal ends
    any Python program there."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone already: nothing to wait for
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def start_filter(args: list[str], env: dict[str, str], cwd: Path = REPO_ROOT) -> subprocess.Popen[bytes]:
    """`infill ARGS` as an editor runs its filter: the buffer waiting on a pipe."""
    read_end, write_end = os.pipe()
    os.write(write_end, SOURCE)
    os.close(write_end)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "infill", *args],
            stdin=read_end,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            preexec_fn=_interruptible,
        )
    finally:
        os.close(read_end)


def filter_under_signal(args: list[str], env: dict[str, str], delay: float, signum: int) -> tuple[int, bytes, bytes]:
    """The filter sent `signum` `delay` seconds after infill's first line ran: (exit code, stdout, stderr)."""
    process = start_filter(args, env)
    deadline = time.monotonic() + 60
    while not infill_handles_signals(process.pid) and time.monotonic() < deadline:
        time.sleep(0.0005)
    time.sleep(delay)
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def signal_sweep(args: list[str], env: dict[str, str]) -> list[tuple[float, int, int, bytes, bytes]]:
    """The filter under SIGINT and SIGTERM (alternately) at 0, 10, ..., 200 ms after infill's first line:
    (delay, signal, exit code, stdout, stderr) of each run, three runs at a time."""
    runs = [(step / 100, signal.SIGINT if step % 2 else signal.SIGTERM) for step in range(21)]
    with ThreadPoolExecutor(3) as pool:
        done = pool.map(lambda run: filter_under_signal(args, env, *run), runs)
        return [(delay, signum, *result) for (delay, signum), result in zip(runs, done, strict=True)]


FILTER = ["fill", "-", "--stdin-filename", "s.py", "--span", "2"]
EXIT_CODE = {signal.SIGINT: 130, signal.SIGTERM: 143}


def assert_every_buffer_came_back(runs: list[tuple[float, int, int, bytes, bytes]]) -> None:
    for delay, signum, code, out, err in runs:
        what = f"{signal.Signals(signum).name} at {delay * 1000:.0f} ms"
        assert (code, out, err) == (EXIT_CODE[signum], SOURCE, b""), f"{what}: exit {code}, {out!r}, {err!r}"


def test_a_signal_at_any_moment_gives_the_filter_buffer_back(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "INFILL_NO_DAEMON": "1"}
    assert_every_buffer_came_back(signal_sweep([*FILTER, "--model", "default"], env))


@pytest.fixture
def slow_daemon(runtime_dir: Path) -> Iterator[dict[str, str]]:
    """A warm daemon whose `infill fill` requests (tests/fixtures_serve.py's fake) take 30 s unless their client goes
    away; $INFILL_TEST_FILL_MARKER appears when one arrives. The environment of its clients."""
    from infill.server import client

    marker = runtime_dir / "request-arrived"
    env = plugin_env(runtime_dir, INFILL_TEST_FILL_DELAY="30", INFILL_TEST_FILL_MARKER=str(marker))
    assert client.request("fake_loads", {}, "on", env=env) is not None  # started and answering
    yield env


def test_a_signal_at_any_moment_gives_the_filter_buffer_back_through_the_daemon(slow_daemon: dict[str, str]) -> None:
    args = [*FILTER, "--daemon", "on", "--model", "fake-serve"]
    assert_every_buffer_came_back(signal_sweep(args, slow_daemon))


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_while_the_daemon_fills_gives_the_filter_buffer_back(
    signum: int, code: int, slow_daemon: dict[str, str]
) -> None:
    marker = Path(slow_daemon["INFILL_TEST_FILL_MARKER"])
    marker.unlink(missing_ok=True)
    process = start_filter([*FILTER, "--daemon", "on", "--model", "fake-serve"], slow_daemon)
    wait_until(lambda: marker.exists() or process.poll() is not None, what="the request to reach the daemon")
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    assert (process.returncode, out, err) == (code, SOURCE, b"")


# --- high 2: a cancelled `infill docstrings` went on writing in the daemon -----------------------------------------


@pytest.fixture(scope="module")
def doc_daemon() -> Iterator[tuple[dict[str, str], Path]]:
    """A daemon shared by the tests below (their clients start it), with the pausable model of
    tests/fixtures_serve.py; (its clients' environment, the pause file)."""
    folder = Path(tempfile.mkdtemp(prefix="infill-t-"))
    try:
        yield plugin_env(folder, INFILL_TEST_PAUSE=str(folder / "pause")), folder / "pause"
    finally:
        stop_daemon(folder)
        shutil.rmtree(folder, ignore_errors=True)


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.glob("*.py"))}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "kill"])
def test_a_cancelled_docstrings_run_writes_nothing_more_in_the_daemon(
    signum: int, doc_daemon: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    from infill.server import client

    env, pause = doc_daemon
    project = tmp_path / "project"
    project.mkdir()
    for i in range(30):
        (project / f"m{i:02}.py").write_text(f"def add_{i}(a, b):\n    return a + b\n")
    before = contents(project)
    process = subprocess.Popen(
        [sys.executable, "-m", "infill", "docstrings", "project", "--daemon", "on", "--model", "pausable-doc"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_interruptible,
    )
    try:
        wait_until(lambda: contents(project) != before or process.poll() is not None, what="a first file written")
        held = Path(f"{pause}.held")
        held.unlink(missing_ok=True)
        pause.touch()  # the daemon's run stops between two forward passes, before the next write
        wait_until(held.exists, what="the daemon's run to pause")
        process.send_signal(signum)
        process.wait(timeout=120)
    finally:
        pause.unlink(missing_ok=True)
        if process.poll() is None:
            process.kill()
            process.wait()
    when_cancelled = contents(project)
    assert 0 < sum(when_cancelled[name] != before[name] for name in before) < 30
    assert client.request("fake_loads", {}, "on", env=env) is not None  # the daemon is free: the run has ended
    assert contents(project) == when_cancelled  # not one write after the client went away
