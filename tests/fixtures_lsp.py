"""A language-server client for the tests (JSON-RPC over a subprocess's stdin/stdout, Content-Length framing),
and a plugin for the servers they start (INFILL_LSP_PLUGINS=fixtures_lsp:install) that registers a model whose
forward passes wait for the test, so a test knows exactly how many passes a fill ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from fixtures_cli import ByteTokenizer, ScriptedModel

from infill.config import ModelSpec
from infill.models import registry

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent
GATED_MODEL = "gated-lsp"
LOADING_MODEL = "loading-lsp"  # its load waits for the test (as long as LOAD_WAIT)
LOAD_WAIT = 20.0
SLOW_MODEL = "slow-lsp"  # its first forward pass takes SLOW_SECONDS: slower than a client's request timeout
SLOW_SECONDS = 3.0
TIMEOUT = 120.0  # generous: the machine running the tests may be loaded


class ReplyError(Exception):
    """Raised by an `on_request` to answer the server's request with this JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


UNANSWERED = object()  # an `on_request` answer: leave the server's request unanswered (as Vim's ALE does)


def applied(message: dict[str, Any]) -> Any:
    """The default answer to the server's requests: workspace/applyEdit applied, anything else null."""
    return {"applied": True} if message["method"] == "workspace/applyEdit" else None


class LspClient:
    """Drives `infill lsp` over stdio. Server requests (workspace/applyEdit, window/workDoneProgress/create) are
    kept in `server_requests` and answered as `on_request` says (it may raise ReplyError, or return UNANSWERED);
    notifications
    (window/showMessage, $/progress) are kept in `notifications`."""

    def __init__(self, env: dict[str, str] | None = None, args: tuple[str, ...] = ()) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "infill", "lsp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env if env is not None else lsp_env(),
            cwd=REPO_ROOT,
        )
        self.next_id = 0
        self.responses: dict[Any, dict[str, Any]] = {}
        self.notifications: list[dict[str, Any]] = []
        self.server_requests: list[dict[str, Any]] = []
        self.on_request: Callable[[dict[str, Any]], Any] = applied
        self.initialize_result: dict[str, Any] = {}
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.errors: list[bytes] = []  # the server's stderr, drained so its pipe never fills
        self.drain = threading.Thread(target=lambda: self.errors.extend(iter(self._stderr_line, b"")), daemon=True)
        self.drain.start()

    def _stderr_line(self) -> bytes:
        assert self.process.stderr is not None
        return self.process.stderr.readline()

    # --- wire ---------------------------------------------------------------------------------------------

    def send_raw(self, body: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def send_raw_frames(self, frames: bytes) -> None:
        """Whole framed messages, written at once (the server reads them in one go)."""
        assert self.process.stdin is not None
        self.process.stdin.write(frames)
        self.process.stdin.flush()

    def send(self, message: dict[str, Any]) -> None:
        self.send_raw(json.dumps({"jsonrpc": "2.0", **message}).encode("utf-8"))

    def _read(self) -> None:
        stream = self.process.stdout
        assert stream is not None
        while True:
            length = None
            while True:
                header = stream.readline()
                if not header:
                    return
                if header in (b"\r\n", b"\n"):
                    break
                name, _, value = header.decode("ascii").partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            assert length is not None, "a message without Content-Length"
            message = json.loads(stream.read(length))
            if "method" in message and "id" in message:  # a request from the server
                self.server_requests.append(message)
                try:
                    answer = self.on_request(message)
                    if answer is not UNANSWERED:
                        self.send({"id": message["id"], "result": answer})
                except ReplyError as exc:
                    self.send({"id": message["id"], "error": {"code": exc.code, "message": exc.message}})
            with self.changed:
                if "method" in message:
                    if "id" not in message:
                        self.notifications.append(message)
                else:
                    self.responses[message.get("id")] = message
                self.changed.notify_all()

    # --- requests -----------------------------------------------------------------------------------------

    def start(self, method: str, params: Any = None) -> int:
        """Send a request without waiting; its id."""
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        return self.next_id

    def wait(self, request_id: Any) -> dict[str, Any]:
        """The response to `request_id` (the whole message: "result" or "error")."""
        with self.changed:
            if not self.changed.wait_for(
                lambda: request_id in self.responses or self.process.poll() is not None, TIMEOUT
            ):
                raise AssertionError(f"no response to request {request_id}")
            if request_id not in self.responses:
                raise AssertionError(f"the server exited ({self.process.returncode}): {self.stderr()}")
            return self.responses.pop(request_id)

    def request(self, method: str, params: Any = None) -> dict[str, Any]:
        return self.wait(self.start(method, params))

    def result(self, method: str, params: Any = None) -> Any:
        response = self.request(method, params)
        assert "error" not in response, response
        return response["result"]

    def notify(self, method: str, params: Any = None) -> None:
        self.send({"method": method, "params": params})

    def mark(self) -> int:
        """A point in the notifications: wait_for_notification(after=mark) sees only those that came later."""
        with self.changed:
            return len(self.notifications)

    def wait_for_notification(self, method: str, count: int = 1, after: int = 0) -> list[dict[str, Any]]:
        """The `method` notifications received after `after`, once there are at least `count`."""
        return self._wait_for(self.notifications, method, count, after)

    def wait_for_request(self, method: str, count: int = 1, after: int = 0) -> list[dict[str, Any]]:
        """The server's `method` requests received after `after` (an index of `server_requests`), once there are
        at least `count` (each answered as `on_request` said)."""
        return self._wait_for(self.server_requests, method, count, after)

    def _wait_for(self, kept: list[dict[str, Any]], method: str, count: int, after: int) -> list[dict[str, Any]]:
        def found() -> list[dict[str, Any]]:
            return [n for n in kept[after:] if n["method"] == method]

        with self.changed:
            assert self.changed.wait_for(lambda: len(found()) >= count, TIMEOUT), f"no {method}: {kept}"
            return found()

    def configure(self, settings: dict[str, Any]) -> None:
        """workspace/didChangeConfiguration; read by the server before anything sent after it."""
        self.notify("workspace/didChangeConfiguration", {"settings": {"infill": settings}})

    # --- LSP ----------------------------------------------------------------------------------------------

    def initialize(
        self, options: Any = None, encodings: list[str] | None = None, progress: bool = True
    ) -> dict[str, Any]:
        """initialize, then initialized; `progress`: the client shows work-done progress (window.workDoneProgress,
        as Neovim and VS Code declare; eglot 1.9 does not)."""
        capabilities: dict[str, Any] = {"workspace": {"applyEdit": True, "workspaceEdit": {"documentChanges": True}}}
        if progress:
            capabilities["window"] = {"workDoneProgress": True}
        if encodings is not None:
            capabilities["general"] = {"positionEncodings": encodings}
        params = {"processId": os.getpid(), "rootUri": None, "capabilities": capabilities}
        if options is not None:
            params["initializationOptions"] = options
        result = self.result("initialize", params)
        self.initialize_result = result
        self.notify("initialized", {})
        return result

    def open(self, uri: str, text: str, language: str = "python", version: int = 1) -> None:
        item = {"uri": uri, "languageId": language, "version": version, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": item})

    def change(self, uri: str, version: int, changes: list[dict[str, Any]]) -> None:
        params = {"textDocument": {"uri": uri, "version": version}, "contentChanges": changes}
        self.notify("textDocument/didChange", params)

    def inline(self, uri: str, line: int, character: int) -> dict[str, Any]:
        return self.request("textDocument/inlineCompletion", inline_params(uri, line, character))

    def stderr(self) -> str:
        return b"".join(self.errors).decode("utf-8", "replace")

    def close(self, shutdown: bool = True) -> int:
        """shutdown (unless the test sent it), exit; the server's exit code."""
        if self.process.poll() is None:
            try:
                if shutdown:
                    self.request("shutdown")
                self.notify("exit")
                assert self.process.stdin is not None
                self.process.stdin.close()
            except (OSError, AssertionError):
                pass
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.reader.join(TIMEOUT)
        self.drain.join(TIMEOUT)
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()
        return int(self.process.returncode)


def inline_params(uri: str, line: int, character: int) -> dict[str, Any]:
    return {
        "textDocument": {"uri": uri},
        "position": {"line": line, "character": character},
        "context": {"triggerKind": 2},
    }


def lsp_env(**extra: str) -> dict[str, str]:
    """The tests' environment for a server: tests/ on the path and this plugin loaded."""
    env = {k: v for k, v in os.environ.items() if k not in ("INFILL_LSP_PLUGINS",)}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), str(TESTS_DIR), *filter(None, [env.get("PYTHONPATH")])])
    env["INFILL_LSP_PLUGINS"] = "fixtures_lsp:install"
    env.update(extra)
    return env


# --- the gated model (runs inside the server) --------------------------------------------------------------


class GatedModel(ScriptedModel):
    """A scripted model whose every forward pass first writes `started-N` in $INFILL_TEST_GATE and then waits
    for the test to write `go-N` there: the test decides when each pass may finish."""

    def _logits(
        self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool
    ) -> torch.Tensor:
        gate = Path(os.environ["INFILL_TEST_GATE"])
        number = len(list(gate.glob("started-*"))) + 1
        (gate / f"started-{number}").write_text("")
        deadline = time.monotonic() + TIMEOUT
        while not (gate / f"go-{number}").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"pass {number} was never released")
            time.sleep(0.005)
        return super()._logits(ids, masked, n, targets, verify)


class SlowModel(ScriptedModel):
    """A scripted model (fill "total += 1") whose first forward pass takes SLOW_SECONDS: the test's client has
    given up on a request by then (eglot with `jsonrpc-default-request-timeout` below it)."""

    slept = False

    def _logits(
        self, ids: torch.Tensor, masked: torch.Tensor, n: int, targets: torch.Tensor, verify: bool
    ) -> torch.Tensor:
        if not self.slept:
            self.slept = True
            time.sleep(SLOW_SECONDS)
        return super()._logits(ids, masked, n, targets, verify)


# scripted models: name -> (the fill of every span, the confidence the fill gets or None)
SCRIPTED: dict[str, tuple[str, float | None]] = {
    "scripted-lsp": ("total += 1", None),
    "scripted-rest": ("len(values)\n    print(total)", None),
    "scripted-newline": ("\n    return 0", None),
    "scripted-word": ("al / len(values)", None),
    "scripted-broken": (")))", None),  # breaks any Python file: no valid fill
    "scripted-low": ("total += 1", 0.3),
    "scripted-high": ("total += 1", 0.7),
    # a block after `def mean(values):`, then a dedented line the block must end before
    "scripted-block": ("    total = sum(values)\n    return total / len(values)\nprint(1)\n", None),
}


def install(server: Any) -> None:
    """The plugin hook, run inside the server: registers
    - the SCRIPTED models (a known fill; the "confidence" ones give every fill that calibrated confidence, as
      the model-quality work's calibration will), counting their loads;
    - GATED_MODEL, whose passes wait for the test (a fill of 40 tokens, one pass each with decoder sequential);
    - SLOW_MODEL, whose first forward pass takes SLOW_SECONDS;
    - LOADING_MODEL, whose load writes `load-started` in $INFILL_TEST_GATE, waits up to LOAD_WAIT seconds for
      the test to write `load-go` there, then writes `load-finished`;
    - test/document -> {"text", "version", "broken"} of an open document, as the server has it;
    - test/idle, answered once the worker has finished what it was given before;
    - test/gate {"path"}: the folder the gated model's passes wait in; test/loads: loads per model;
    - test/settings: the settings in force, as the client's messages merged them;
    - test/fills: every fill_text call so far (its span's start and block_lines, the context texts it got)."""
    from infill import api
    from infill.lsp.server import Job

    loads: dict[str, int] = {}

    def scripted(spec: ModelSpec) -> registry.LoadedModel:
        loads[spec.name] = loads.get(spec.name, 0) + 1
        model = ScriptedModel([[(SCRIPTED[spec.name][0], 1.0)]])
        return registry.LoadedModel(spec.name, "asarm", model, ByteTokenizer(), {"fake": True})

    def gated(spec: ModelSpec) -> registry.LoadedModel:
        model = GatedModel([[("x = 1234567890123456789012345678901234567", 1.0)]])
        return registry.LoadedModel(GATED_MODEL, "asarm", model, ByteTokenizer(), {"fake": True})

    def loading(spec: ModelSpec) -> registry.LoadedModel:
        gate = Path(os.environ["INFILL_TEST_GATE"])
        (gate / "load-started").write_text("")
        deadline = time.monotonic() + LOAD_WAIT
        while not (gate / "load-go").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        (gate / "load-finished").write_text("")
        return scripted(ModelSpec(name="scripted-lsp"))

    def slow(spec: ModelSpec) -> registry.LoadedModel:
        model = SlowModel([[(SCRIPTED["scripted-lsp"][0], 1.0)]])
        return registry.LoadedModel(SLOW_MODEL, "asarm", model, ByteTokenizer(), {"fake": True})

    for name in SCRIPTED:
        registry.register(name, scripted)
    registry.register(SLOW_MODEL, slow)
    registry.register(LOADING_MODEL, loading)
    registry.register(GATED_MODEL, gated)

    @server.feature("test/document")
    def document(ls: Any, params: Any) -> dict[str, Any]:
        found = ls.documents[params.uri]
        return {"text": found.text, "version": found.version, "broken": found.broken}

    @server.feature("test/idle")
    async def idle(ls: Any, params: Any) -> str:
        return str(await ls.run(Job("", completion=False), lambda check: "idle"))

    @server.feature("test/gate")
    def set_gate(ls: Any, params: Any) -> None:
        os.environ["INFILL_TEST_GATE"] = params.path

    @server.feature("test/settings")
    def settings(ls: Any, params: Any) -> dict[str, Any]:
        return dict(ls.sent_settings)

    @server.feature("test/loads")
    def count_loads(ls: Any, params: Any) -> dict[str, int]:
        return dict(loads)

    real = api.fill_text
    calls: list[dict[str, Any]] = []  # what each fill was given: its span and the options' context texts

    @server.feature("test/fills")
    def fills_seen(ls: Any, params: Any) -> list[dict[str, Any]]:
        return list(calls)

    def fill_text(*args: Any, **kwargs: Any) -> Any:
        span = args[1][0]
        context = list(kwargs["options"].context) if "options" in kwargs else []
        calls.append({"start": span.start_byte, "block_lines": span.block_lines, "context": context})
        result = real(*args, **kwargs)
        name = getattr(kwargs.get("model"), "name", "")
        if name in SCRIPTED:  # other models keep their own (the benchmarks' real models)
            result.confidence = SCRIPTED[name][1]
        return result

    api.fill_text = fill_text  # type: ignore[assignment]


def started(gate: Path) -> int:
    return len(list(gate.glob("started-*")))


def release(gate: Path, number: int) -> None:
    (gate / f"go-{number}").write_text("")


@contextmanager
def gated_model(client: LspClient, folder: Path, passes: int = 200) -> Iterator[Path]:
    """The gated model (sequential decoding: one forward pass per token, each waiting for its `go-N` file) on
    `client`'s server, its gate a new folder under `folder`. On the way out, whatever still runs is let through
    (up to `passes` passes) and the server must be idle."""
    gate = folder / "gate"
    gate.mkdir()
    client.result("test/gate", {"path": str(gate)})
    client.configure({"model": GATED_MODEL, "fill": {"decoder": "sequential"}})
    try:
        yield gate
    finally:
        for number in range(1, passes):
            release(gate, number)
        assert client.result("test/idle") == "idle"


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
