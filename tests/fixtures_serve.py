"""Fakes and fixtures for the server tests (tests/test_server_*.py).

This file is also a server plugin: daemons the tests start load it with
INFILL_SERVER_PLUGINS=fixtures_serve:install
(tests/ on PYTHONPATH), which registers a fake model and a deterministic fake `fill` in the daemon's process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from infill.config import ModelSpec
from infill.errors import InputError
from infill.models import registry
from infill.server.dispatch import Dispatcher, ServerContext

FAKE_MODEL = "fake-serve"
TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
LOADS: list[ModelSpec] = []  # every load of the fake model in this process (the cache should make it one)


class FakeModel:
    """A 'model' that fills a span with a deterministic function of its text: enough to compare outputs."""

    def __init__(self, device: str) -> None:
        self.device = device

    def complete(self, before: str, old: str) -> str:
        return f"<{len(before)}:{old[::-1].upper()}>"


def fake_factory(spec: ModelSpec) -> registry.LoadedModel:
    LOADS.append(spec)
    return registry.LoadedModel(FAKE_MODEL, "asarm", FakeModel(spec.device), tokenizer=None, info={"size": 1})


def fake_fill(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    """The shape of `infill fill --format json`, from {"text", "spans": [[start, end], ...], "device"}."""
    text = params.get("text")
    if not isinstance(text, str):
        raise InputError('"text" must be a string')
    die_flag = os.environ.get("INFILL_TEST_DIE_FLAG")
    if context.transport == "socket" and die_flag and os.path.exists(die_flag):
        os.unlink(die_flag)
        holding = os.environ.get("INFILL_TEST_DIE_HOLDING")
        if holding and os.fork() == 0:
            # a child that outlives the daemon with its listening socket, never accepting: what a daemon SIGKILLed
            # while its threads exit is until the last one has. The client's connection it lets go, so that the
            # client sees the daemon die.
            import socket

            for fd in map(int, os.listdir("/proc/self/fd")):
                with contextlib.suppress(OSError):
                    probe = socket.socket(fileno=os.dup(fd))
                    listening = probe.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN)
                    probe.close()
                    if not listening:
                        os.close(fd)
            Path(holding).write_text(str(os.getpid()))
            time.sleep(60)
            os._exit(0)
        os.kill(os.getpid(), signal.SIGKILL)  # killed mid-request
    if params.get("print"):
        print("stray output that must not reach the protocol stream")
        os.write(1, b"stray bytes on fd 1\n")
    data = text.encode("utf-8")
    model = context.models.get(ModelSpec(name=FAKE_MODEL, device=params.get("device", "cpu")))
    edits = []
    for pair in params.get("spans", []):
        start, end = pair
        if not (isinstance(start, int) and isinstance(end, int) and 0 <= start <= end <= len(data)):
            raise InputError(f"span {pair!r} is out of range (0..{len(data)})", line=1)
        before, old = data[:start].decode("utf-8", "replace"), data[start:end].decode("utf-8", "replace")
        new = model.model.complete(before, old)
        edits.append(
            {
                "start_line": before.count("\n") + 1,
                "end_line": before.count("\n") + old.count("\n") + 1,
                "start_byte": start,
                "end_byte": end,
                "text": new,
                "score": -float(len(new)),
            }
        )
    return {
        "file": params.get("file"),
        "edits": edits,
        "stats": {
            "decoder": "fake",
            "model": model.name,
            "nfe": len(edits),
            "tokens": len(edits),
            "seconds": 0.0,
            "pid": os.getpid() if params.get("want_pid") else None,
        },
    }


def fake_loads(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    return {"loads": len(LOADS), "pid": os.getpid()}


def wait_for_cancel(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    """A long request: runs until its client goes away (then writes params["marker"]) or params["seconds"] (120 by
    default) pass."""
    deadline = time.monotonic() + float(params.get("seconds", 120))
    while time.monotonic() < deadline:
        if context.cancelled():
            Path(params["marker"]).write_text("cancelled")
            raise RuntimeError("cancelled")
        time.sleep(0.02)
    return {"cancelled": False}


def fake_fill_command(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
    """run_fill's output shape for `infill fill --daemon on`, without a model. With $INFILL_TEST_FILL_DELAY=SECONDS
    it first waits that long, or until its client goes away, having created $INFILL_TEST_FILL_MARKER (if set)."""
    marker = os.environ.get("INFILL_TEST_FILL_MARKER")
    if marker:
        Path(marker).write_text("")
    deadline = time.monotonic() + float(os.environ.get("INFILL_TEST_FILL_DELAY", "0"))
    while time.monotonic() < deadline and not context.cancelled():
        time.sleep(0.01)
    return {"exit_code": 0, "stdout": f"filled by pid {os.getpid()}\n", "stderr": ["note: fake"], "result": None}


PAUSABLE_MODEL = "pausable-doc"


def pausable_factory(spec: ModelSpec) -> registry.LoadedModel:
    """A scripted any-subset model (tests/fixtures_cli.py) whose forward passes wait while the file
    $INFILL_TEST_PAUSE exists, creating $INFILL_TEST_PAUSE.held as one waits: a test holds a daemon's run between
    two passes for as long as it needs."""
    import torch
    from fixtures_cli import ByteTokenizer, ScriptedModel

    class PausableModel(ScriptedModel):
        def _logits(
            self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool
        ) -> torch.Tensor:
            pause = Path(os.environ["INFILL_TEST_PAUSE"])
            while pause.exists():
                Path(f"{pause}.held").touch()
                time.sleep(0.01)
            return super()._logits(ids, masked, n, targets, verify)

    model = PausableModel([[("Add two numbers.", 1.0)]])
    return registry.LoadedModel(PAUSABLE_MODEL, "asarm", model, ByteTokenizer(), {"fake": True})


def install(dispatcher: Dispatcher) -> None:
    """The plugin hook: a fake model and methods; an optional fake version to test the restart on mismatch."""
    registry.register(FAKE_MODEL, fake_factory)
    registry.register(PAUSABLE_MODEL, pausable_factory)
    dispatcher.register("fill", fake_fill)
    dispatcher.register("fake_loads", fake_loads)
    dispatcher.register("wait_for_cancel", wait_for_cancel)
    dispatcher.register("fill_command", fake_fill_command)
    fake_version = os.environ.get("INFILL_TEST_FAKE_VERSION")
    if fake_version:
        real_ping = dispatcher.methods["ping"]
        dispatcher.register("ping", lambda p, c: {**real_ping(p, c), "version": fake_version})
    die_at_ping = os.environ.get("INFILL_TEST_DIE_AT_PING")
    if die_at_ping:
        answer = dispatcher.methods["ping"]

        def ping_or_die(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
            if os.path.exists(die_at_ping):  # SIGKILLed as a client's ping comes in: its connection is cut
                os.unlink(die_at_ping)
                os.kill(os.getpid(), signal.SIGKILL)
            return answer(params, context)

        dispatcher.register("ping", ping_or_die)


def install_models(dispatcher: Dispatcher) -> None:
    """The plugin hook for daemons that run the real commands (`fill_command` as `infill fill` sends it) on the
    fake models."""
    from infill.server import handlers

    install(dispatcher)
    dispatcher.register("fill_command", handlers.METHODS["fill_command"])


def plugin_env(runtime_dir: Path, **extra: str) -> dict[str, str]:
    """An environment for daemons the tests start: private runtime dir, this plugin, no CI or INFILL_NO_DAEMON."""
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "INFILL_NO_DAEMON")}
    env["INFILL_RUNTIME_DIR"] = str(runtime_dir)
    env["INFILL_SERVER_PLUGINS"] = "fixtures_serve:install"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(TESTS_DIR), *filter(None, [env.get("PYTHONPATH")])])
    env["INFILL_DAEMON_IDLE_TIMEOUT"] = "120"  # a safety net: even a leaked test daemon goes away by itself
    env.update(extra)
    return env


def stop_daemon(directory: Path) -> None:
    from infill.server import client

    try:
        client.stop(plugin_env(directory))
    except Exception:  # noqa: BLE001 - cleanup must go on; the daemon's idle timeout is the last resort
        pass


def daemon_dir(runtime_dir: Path) -> Path:
    """Where the daemon of this installation lives under `runtime_dir` (INFILL_RUNTIME_DIR): a subfolder keyed
    by installation, so two installs never share (and restart) one daemon."""
    from infill.server import lifecycle

    return lifecycle.runtime_paths(plugin_env(runtime_dir)).directory


def serve_socket_process(
    runtime_dir: Path, env: dict[str, str], idle_timeout: float = 120.0
) -> subprocess.Popen[bytes]:
    """Start `infill serve --socket` by hand on the runtime dir's socket (for tests needing a given one)."""
    socket_path = daemon_dir(runtime_dir) / "daemon.sock"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "infill",
            "serve",
            "--socket",
            str(socket_path),
            "--idle-timeout",
            str(idle_timeout),
        ],
        env=env,
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    wait_until(lambda: socket_path.exists() or process.poll() is not None, what="the socket to appear")
    if process.poll() is not None:
        raise RuntimeError(f"serve --socket exited: {process.stderr.read().decode() if process.stderr else ''}")
    return process


def wait_until(condition: Any, what: str, timeout: float = 60.0) -> None:
    """Poll `condition` (generous timeout: the machine may be loaded); fail if it never holds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    import pytest  # here, not at the top: the daemons that load this module as their plugin do without it

    pytest.fail(f"timed out waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True
