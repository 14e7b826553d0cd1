"""Model servers for the remote engine's tests: llama-cpp-python's own OpenAI-compatible server (the `server` extra of
llama-cpp-python, in pyproject's `remote-tests` and `dev` extras) on 127.0.0.1 with tiny GGUF models, and `Fake`, a
standard-library HTTP server that answers what a broken or busy server answers (garbage, 429 with Retry-After,
slowness, an error that quotes the API key).

Outside CI an environment without the extra skips the tests of the real server; CI sets INFILL_REQUIRE_EXTRAS=1,
where a missing extra fails them instead."""

from __future__ import annotations

import contextlib
import http
import http.client
import json
import os
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

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


def ipv6_loopback() -> bool:
    """Whether this machine can listen on ::1 (a container without IPv6 cannot)."""
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


def netloc(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class FakeServer(ThreadingHTTPServer):
    """`answer` serving on `host` (127.0.0.1, or ::1), one thread per request; `seen`: (method, path, headers,
    body) of each request."""

    daemon_threads = True

    def __init__(self, answer: Answer, handler: type[FakeHandler] = FakeHandler, host: str = "127.0.0.1") -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, 0), handler)
        self.answer = answer
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []

    @property
    def url(self) -> str:
        return f"http://{netloc(self.server_address[0], self.server_address[1])}/v1"


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


def tokens(text: str, special: tuple[str, ...]) -> list[int]:
    """A fake tokenizer: each of `special` one token (1000 + its place), any other character its code point."""
    out: list[int] = []
    while text:
        hit = next((i for i, s in enumerate(special) if text.startswith(s)), None)
        out.append(ord(text[0]) if hit is None else 1000 + hit)
        text = text[1:] if hit is None else text[len(special[hit]) :]
    return out


def healthy(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
    """A server without a tokenizer endpoint (as Ollama) that writes `x = 1`."""
    if path.endswith("/v1/models"):
        handler.send(200, {"data": [{"id": "qwen-fake"}]})
    elif path.endswith("/v1/completions"):
        handler.send(200, completion("    x = 1"))
    else:
        handler.send(404, {"error": "not found"})


def fake(answer: Answer) -> Iterator[FakeServer]:
    yield from running(FakeServer(answer))


Server = TypeVar("Server", bound=socketserver.BaseServer)


def running(server: Server) -> Iterator[Server]:
    """`server` serving in a thread until the generator is closed. It looks for the shutdown every 20 ms: at
    serve_forever's default half second, closing a server waited ~0.3 s, in each of a few hundred tests."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


TLS = Path(__file__).parent / "tls"  # ca.pem: a test authority; server.pem: its certificate for gpu-box.test


class KeptHandler(FakeHandler):
    protocol_version = "HTTP/1.1"  # keeps the connection for the next request (FakeHandler's HTTP/1.0 closes it)


class TlsFakeServer(FakeServer):
    """`FakeServer` over TLS with the test certificate for gpu-box.test (trusted where SSL_CERT_FILE is ca.pem),
    keeping connections open."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(answer, KeptHandler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(TLS / "server.pem")
        self.socket = context.wrap_socket(self.socket, server_side=True)


class ProxyHandler(socketserver.StreamRequestHandler):
    server: FakeProxy

    def handle(self) -> None:
        while True:
            line = self.rfile.readline(65536).decode("latin-1")
            if not line.strip():
                return
            method, target, _ = line.split(" ", 2)
            headers: dict[str, str] = {}
            while (header := self.rfile.readline(65536)) not in (b"\r\n", b"\n", b""):
                name, _, value = header.decode("latin-1").partition(":")
                headers[name.strip()] = value.strip()
            self.server.seen.append((method, target, headers))
            length = int(headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if method == "CONNECT" and not authority(target):  # as a proxy that cannot tell the host from the port
                self.wfile.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                self.wfile.flush()
                return
            if self.server.refuse:
                status = http.HTTPStatus(self.server.refuse)
                self.wfile.write(
                    f"HTTP/1.1 {status.value} {status.phrase}\r\nProxy-Authenticate: Basic realm=corp\r\n"
                    "Content-Length: 0\r\n\r\n".encode()
                )
                self.wfile.flush()
                if method == "CONNECT":
                    return
            elif method == "CONNECT":
                self._tunnel()
                return
            else:
                self._forward(method, target, headers, body)

    def _tunnel(self) -> None:
        upstream = socket.create_connection(self.server.upstream)
        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        self.wfile.flush()

        def pump(source: socket.socket, to: socket.socket, record: bytearray | None) -> None:
            try:
                while data := source.recv(65536):
                    if record is not None:
                        record.extend(data)
                    to.sendall(data)
            except OSError:
                pass
            finally:
                with contextlib.suppress(OSError):
                    to.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pump, args=(upstream, self.connection, None), daemon=True)
        back.start()
        pump(self.connection, upstream, self.server.tunnelled)
        back.join()
        upstream.close()

    def _forward(self, method: str, target: str, headers: dict[str, str], body: bytes | None) -> None:
        split = urlsplit(target)
        kept = {k: v for k, v in headers.items() if not k.lower().startswith("proxy-") and k.lower() != "connection"}
        conn = http.client.HTTPConnection(*self.server.upstream, timeout=5)
        conn.request(method, split.path + (f"?{split.query}" if split.query else ""), body=body, headers=kept)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        self.wfile.write(f"HTTP/1.1 {response.status} {response.reason}\r\n".encode())
        for name, value in response.getheaders():
            if name.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.wfile.write(f"{name}: {value}\r\n".encode("latin-1"))
        self.wfile.write(f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        self.wfile.flush()


def authority(target: str) -> bool:
    """Whether a CONNECT's target is HOST:PORT with an IPv6 host in brackets (RFC 9110's authority form)."""
    try:
        split = urlsplit(f"//{target}")
        return split.hostname is not None and split.port is not None
    except ValueError:  # 2001:db8::1:443: a port that is not one
        return False


class FakeProxy(socketserver.ThreadingTCPServer):
    """An HTTP proxy on `host` that sends every host to `upstream` (so any name reaches the fake server): CONNECT
    tunnels (a target not in authority form is a 400), plain requests (an absolute URL) forwarded; `refuse`
    answers that status to each instead. `seen`: (method, target, headers) of each request it got; `tunnelled`:
    the bytes clients sent into its tunnels."""

    daemon_threads = True

    def __init__(self, upstream: tuple[Any, ...], refuse: int | None = None, host: str = "127.0.0.1") -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        super().__init__((host, 0), ProxyHandler)
        self.upstream = (upstream[0], upstream[1])
        self.refuse = refuse
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.tunnelled = bytearray()

    @property
    def url(self) -> str:
        return f"http://{netloc(self.server_address[0], self.server_address[1])}"


PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "ALL_PROXY", "REQUEST_METHOD")


@pytest.fixture
def proxied(monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], None]:
    """Clears the proxy variables of the machine running the tests; sets one (as `NAME`, `name` both tested)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return lambda name, value: monkeypatch.setenv(name, value)
