"""Model servers for the remote engine's tests: llama-cpp-python's own OpenAI-compatible server (the `server` extra of
llama-cpp-python, in pyproject's `remote-tests` and `dev` extras) on 127.0.0.1 with tiny GGUF models, and `Fake`, a
standard-library HTTP server that answers what a broken or busy server answers (garbage, 429 with Retry-After,
slowness, an error that quotes the API key).

Outside CI an environment without the extra skips the tests of the real server; CI sets INFILL_REQUIRE_EXTRAS=1,
where a missing extra fails them instead."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


def require_server_extra() -> None:
    """Skip (fail under INFILL_REQUIRE_EXTRAS=1) without llama-cpp-python's server and the GGUF writer."""
    if os.environ.get("INFILL_REQUIRE_EXTRAS") != "1":
        pytest.importorskip("llama_cpp", reason="the llamacpp extra is not installed")
        pytest.importorskip("gguf", reason="the llamacpp extra is not installed")
        pytest.importorskip("uvicorn", reason="llama-cpp-python's server extra is not installed")
        pytest.importorskip("starlette_context", reason="llama-cpp-python's server extra is not installed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """`python -m llama_cpp.server` serving `models` (alias -> GGUF file) on 127.0.0.1."""

    models: dict[str, Path]
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, log: Path, timeout: float = 60.0) -> None:
        config = log.with_suffix(".json")
        entries = [
            {"model": str(path), "model_alias": alias, "n_threads": 1, "n_threads_batch": 1, "n_ctx": 512}
            for alias, path in self.models.items()
        ]
        config.write_text(json.dumps({"host": "127.0.0.1", "port": self.port, "models": entries}))
        self.log = log
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "llama_cpp.server", "--config_file", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/models", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("llama_cpp.server did not start")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


Answer = Callable[["FakeHandler", str, dict[str, Any] | None], None]


class FakeHandler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.server.seen.append((method, self.path, dict(self.headers), body))
        self.server.answer(self, self.path, body)

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, answer: Answer) -> None:
        super().__init__(("127.0.0.1", 0), FakeHandler)
        self.answer = answer
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


def completion(text: str, logprobs: list[float] | None = None) -> dict[str, Any]:
    """A /v1/completions answer with one choice."""
    values = logprobs if logprobs is not None else [-0.5] * len(text)
    return {
        "choices": [
            {
                "text": text,
                "finish_reason": "stop",
                "logprobs": {"tokens": list(text), "token_logprobs": values},
            }
        ]
    }


def healthy(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
    """A server without a tokenizer endpoint (as Ollama) that writes `x = 1`."""
    if path.endswith("/v1/models"):
        handler.send(200, {"data": [{"id": "qwen-fake"}]})
    elif path.endswith("/v1/completions"):
        handler.send(200, completion("    x = 1"))
    else:
        handler.send(404, {"error": "not found"})


def fake(answer: Answer) -> Iterator[FakeServer]:
    server = FakeServer(answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
