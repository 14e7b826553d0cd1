"""The remote engine against the servers' own ways (standard-library fakes, tests/fixtures_remote.py): what an old
vLLM refuses in a request, a model replaced on its server under the same name while a process keeps it loaded, and
servers and proxies reached at an IPv6 address."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures_remote import (
    TLS,
    FakeHandler,
    FakeProxy,
    FakeServer,
    TlsFakeServer,
    completion,
    healthy,
    ipv6_loopback,
    proxied,
    running,
    tokens,
)

from infill import api
from infill.cli import main

_ = proxied  # a fixture
SOURCE = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n"

# the fields of OpenAI's completions request, and the sampling ones vLLM adds (its names)
OPENAI_FIELDS = {
    "model",
    "prompt",
    "best_of",
    "echo",
    "frequency_penalty",
    "logit_bias",
    "logprobs",
    "max_tokens",
    "n",
    "presence_penalty",
    "seed",
    "stop",
    "stream",
    "suffix",
    "temperature",
    "top_p",
    "user",
}
VLLM_FIELDS = OPENAI_FIELDS | {"top_k", "min_p", "repetition_penalty", "use_beam_search", "length_penalty"}


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFILL_REMOTE_TIMEOUT", "2")
    monkeypatch.delenv("INFILL_API_KEY", raising=False)


def fill(tmp_path: Path, url: str, *args: str) -> tuple[int, str]:
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", str(path), "--span", "2", "--model", url, *args])
    return r.exit_code, r.stderr


STARCODER = ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<file_sep>")


def strict(
    allowed: set[str], owner: str, name: str = "qwen-fake", special: tuple[str, ...] = ()
) -> Callable[[FakeHandler, str, dict[str, Any] | None], None]:
    """A server that lists its model `name` as owned by `owner` and, as vLLM before 0.6.5 and some gateways,
    refuses a request with a field it does not know (400); as vLLM before 0.9, it refuses `top_k: 0` (its off is
    -1). With `special`, it has vLLM's /tokenize (those tokens one each)."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/models"):
            handler.send(200, {"data": [{"id": name, "object": "model", "owned_by": owner}]})
        elif path == "/tokenize" and special:
            extra = sorted(set(body or {}) - {"model", "prompt", "add_special_tokens"})
            if extra:
                handler.send(400, {"message": f"{extra}: Extra inputs are not permitted", "code": 400})
            else:
                handler.send(200, {"tokens": tokens((body or {})["prompt"], special), "count": 1})
        elif path.endswith("/v1/completions"):
            extra = sorted(set(body or {}) - allowed)
            if extra:
                handler.send(400, {"message": f"{extra}: Extra inputs are not permitted", "code": 400})
            elif (body or {}).get("top_k") == 0:
                handler.send(400, {"message": "top_k must be -1 (disable), or at least 1, got 0.", "code": 400})
            else:
                handler.send(200, completion("    x = 1"))
        else:
            handler.send(404, {"error": "not found"})

    return answer


@pytest.mark.parametrize("temperature", ["0", "0.8"])
def test_an_old_vllm_takes_the_request(tmp_path: Path, temperature: str) -> None:
    """vLLM 0.5 to 0.8 refused the fill (HTTP 400: `repeat_penalty` is llama.cpp's name, `top_k: 0` not its off):
    it is sent its own fields, once, and only those that change the sample."""
    for server in running(FakeServer(strict(VLLM_FIELDS, "vllm"))):
        code, err = fill(tmp_path, server.url + "#qwen-fake", "--temperature", temperature, "--decoder", "sequential")
        assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
        bodies = [s[3] for s in server.seen if s[1].endswith("/completions")]
        assert bodies and all(b["repetition_penalty"] == 1.0 for b in bodies)
        greedy = [b for b in bodies if b["temperature"] == 0]
        assert not [b for b in greedy if {"top_k", "top_p", "min_p"} & set(b)], bodies  # none changes a greedy one
        sampled = [b for b in bodies if b["temperature"] > 0]
        assert all(b["top_k"] == -1 and b["min_p"] == 0.0 for b in sampled), bodies
        assert greedy if temperature == "0" else sampled, bodies


def test_an_old_vllms_tokenizer_finds_the_family(tmp_path: Path) -> None:
    """vLLM before 0.6.5 refused the tokenize request (llama.cpp's `content` with vLLM's `prompt`), so a model whose
    name says no family could not be used: vLLM is asked in its own fields, and its tokenizer finds it."""
    for server in running(FakeServer(strict(VLLM_FIELDS, "vllm", "team-model", STARCODER))):
        code, err = fill(tmp_path, server.url + "#team-model")
        assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
        (body, *_) = [s[3] for s in server.seen if s[1].endswith("/completions")]
        assert body["prompt"].startswith("<fim_prefix>def mean") and body["logit_bias"] == {
            "1000": -100.0,
            "1001": -100.0,
            "1002": -100.0,
        }


def test_a_server_that_takes_only_openais_fields_is_asked_again_with_them(tmp_path: Path) -> None:
    """A gateway that refuses every field beyond OpenAI's: the sample is asked again with OpenAI's fields only,
    and the model keeps to them (one refused request, not one per sample)."""
    for server in running(FakeServer(strict(OPENAI_FIELDS, "gateway"))):
        code, err = fill(tmp_path, server.url + "#qwen-fake", "--temperature", "0.8", "-n", "3")
        assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
        bodies = [s[3] for s in server.seen if s[1].endswith("/completions") and not s[3].get("echo")]
        refused = [b for b in bodies if set(b) - OPENAI_FIELDS]
        assert len(refused) == 1 and len(bodies) >= 4, bodies


def test_llama_cpps_defaults_are_still_turned_off(tmp_path: Path) -> None:
    """llama-server and llama-cpp-python: top-k 40, min-p 0.05 and a repeat penalty are their defaults; a sample
    turns them off in their own names."""
    for server in running(FakeServer(healthy)):
        code, err = fill(tmp_path, server.url + "#qwen-fake", "--temperature", "0.8", "--top-k", "5")
        assert code == 0, err
        (body, *_) = [s[3] for s in server.seen if s[1].endswith("/completions")]
        assert (body["top_k"], body["min_p"], body["repeat_penalty"], body["temperature"]) == (5, 0.0, 1.0, 0.8)


QWEN = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>")


class Restartable:
    """A llama-cpp-python-like server (its /v1/models entry says nothing of the model; llama.cpp's /tokenize)
    whose model under "team-model" is `special`'s; `fail` answers the next completions with a 500 (a restart)."""

    def __init__(self, special: tuple[str, ...]) -> None:
        self.special = special
        self.fail = 0
        self.clock = 0

    def __call__(self, handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        self.clock += 1
        if path.endswith("/v1/models"):  # `created` changes at each answer, as vLLM's and llama-server's
            handler.send(200, {"data": [{"id": "team-model", "owned_by": "me", "created": self.clock}]})
        elif path == "/tokenize":
            handler.send(200, {"tokens": tokens((body or {})["content"], self.special)})
        elif path.endswith("/v1/completions") and self.fail:
            self.fail -= 1
            handler.send(500, {"error": {"message": "Loading model"}})
        elif path.endswith("/v1/completions"):
            handler.send(200, completion("    x = 1"))
        else:
            handler.send(404, {"error": "not found"})


def kept_fill(tmp_path: Path, server: FakeServer) -> tuple[int, str]:
    """A fill in this process without forgetting the models it holds (as the daemon and `infill lsp` keep them)."""
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    r = CliRunner().invoke(main, ["fill", str(path), "--span", "2", "--model", server.url + "#team-model"])
    return r.exit_code, r.stderr


def last_prompt(server: FakeServer) -> str:
    return str([s[3] for s in server.seen if s[1].endswith("/completions")][-1]["prompt"])


def test_a_model_replaced_on_its_server_is_loaded_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server restarted with another model under the same name: a process that keeps the model (the daemon,
    `infill lsp`) sent the old model's FIM tokens, as text, until it restarted. It asks again (here at once:
    REVALIDATE 0) and loads the new one; an unchanged model is kept (its `created` changing is not a change)."""
    from infill.models import remote

    monkeypatch.setattr(remote, "REVALIDATE", 0.0)
    answer = Restartable(QWEN)
    for server in running(FakeServer(answer)):
        api.clear_model_cache()
        assert kept_fill(tmp_path, server)[0] == 0 and last_prompt(server).startswith("<|fim_prefix|>")
        first = api.load_model(api.ModelSpec(server.url + "#team-model"))
        assert kept_fill(tmp_path, server)[0] == 0
        assert api.load_model(api.ModelSpec(server.url + "#team-model")) is first
        answer.special = STARCODER
        code, err = kept_fill(tmp_path, server)
        assert code == 0 and last_prompt(server).startswith("<fim_prefix>def mean"), err
        assert api.load_model(api.ModelSpec(server.url + "#team-model")).info["fim"] == "starcoder"


def test_a_failed_request_has_the_model_checked_at_once(tmp_path: Path) -> None:
    """Within REVALIDATE seconds, a request that failed (the server was restarting) has the next fill check the
    model first."""
    answer = Restartable(QWEN)
    for server in running(FakeServer(answer)):
        api.clear_model_cache()
        assert kept_fill(tmp_path, server)[0] == 0 and last_prompt(server).startswith("<|fim_prefix|>")
        answer.fail, answer.special = 1, STARCODER
        assert kept_fill(tmp_path, server)[0] != 0
        code, err = kept_fill(tmp_path, server)
        assert code == 0 and last_prompt(server).startswith("<fim_prefix>def mean"), err


needs_ipv6 = pytest.mark.skipif(not ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")


@needs_ipv6
def test_a_server_at_an_ipv6_address(tmp_path: Path, proxied: Callable[[str, str], None]) -> None:
    """http://[::1]:PORT is this machine (no opt-in for plain http), reached directly even with a proxy set."""
    for server in running(FakeServer(healthy, host="::1")):
        for proxy in running(FakeProxy(server.server_address, host="::1")):
            proxied("HTTP_PROXY", proxy.url)
            assert server.url.startswith("http://[::1]:")
            code, err = fill(tmp_path, server.url + "#qwen-fake")
            assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
            assert server.seen and not proxy.seen


@needs_ipv6
def test_plain_http_to_an_ipv6_server_through_an_ipv6_proxy(
    tmp_path: Path, proxied: Callable[[str, str], None]
) -> None:
    """The proxy at [::1] is sent the whole URL, the server's IPv6 address in brackets."""
    for server in running(FakeServer(healthy)):
        for proxy in running(FakeProxy(server.server_address, host="::1")):
            proxied("HTTP_PROXY", proxy.url)
            code, err = fill(tmp_path, "http://[2001:db8::7]:8000/v1#qwen-fake", "--allow-http")
            assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
            assert proxy.seen and all(s[1].startswith("http://[2001:db8::7]:8000/") for s in proxy.seen)
            assert all(s[2]["Host"] == "[2001:db8::7]:8000" for s in proxy.seen), proxy.seen


def test_the_tunnel_to_an_ipv6_server_names_it_in_brackets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxied: Callable[[str, str], None]
) -> None:
    """Python before 3.13 wrote `CONNECT 2001:db8::7:8443`, which a proxy cannot split into host and port (this
    one answers 400, as squid does): the tunnel is asked for [2001:db8::7]:8443, and TLS inside it is checked
    against the address (the test certificate is gpu-box.test's, so it is refused for that, past the proxy)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ca.pem"))
    for server in running(TlsFakeServer(healthy)):
        for proxy in running(FakeProxy(server.server_address)):
            proxied("HTTPS_PROXY", proxy.url)
            code, err = fill(tmp_path, "https://[2001:db8::7]:8443/v1#qwen-fake")
            assert [s[:2] for s in proxy.seen] == [("CONNECT", "[2001:db8::7]:8443")], proxy.seen
            assert code != 0 and "its certificate is not trusted (IP address mismatch" in err, err


def to_server(server: FakeServer) -> Callable[..., socket.socket]:
    """socket.create_connection with 2001:db8::7 reaching `server`."""
    create = socket.create_connection

    def connect(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        return create(server.server_address[:2] if address[0] == "2001:db8::7" else address, *args, **kwargs)

    return connect


@pytest.mark.parametrize("bypass", ["2001:db8::7", "[2001:db8::7]", "2001:db8:0:0::7", "2001:db8::/32"])
def test_no_proxy_names_an_ipv6_server(tmp_path: Path, proxied: Callable[[str, str], None], bypass: str) -> None:
    """$NO_PROXY names an IPv6 server bare, in brackets, in another spelling or by its network (as curl takes
    them): the server is reached directly. (Reaching 2001:db8::7 is this machine here: the connection is sent to
    the fake server.)"""
    for server in running(FakeServer(healthy)):
        for proxy in running(FakeProxy(server.server_address)):
            proxied("HTTP_PROXY", proxy.url)
            proxied("NO_PROXY", f"other.example,{bypass}")
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(socket, "create_connection", to_server(server))
                code, err = fill(tmp_path, "http://[2001:db8::7]:8000/v1#qwen-fake", "--allow-http")
            assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
            assert not proxy.seen and server.seen


def test_interrupt_passes_cuts_a_request_in_flight() -> None:
    """A superseded fill in `infill lsp` (infill.progress.interrupt_passes) waited for the model server's answer
    before the next could start: the request in flight raises Cancelled, and the client's next request is served."""
    import threading

    from infill.models.remote_http import Client, parse
    from infill.progress import Cancelled, interrupt_passes

    arrived, release = threading.Event(), threading.Event()

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions") and not arrived.is_set():
            arrived.set()
            release.wait(30)
        healthy(handler, path, body)

    for server in running(FakeServer(answer)):
        client = Client(parse(server.url + "#qwen-fake"), lambda: None, 30.0)
        outcome: list[BaseException | None] = []

        def first(client: Client, outcome: list[BaseException | None]) -> None:
            try:
                client.post("/v1/completions", {"prompt": "a"})
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - what the request raised is the test's subject
                outcome.append(exc)

        thread = threading.Thread(target=first, args=(client, outcome))
        thread.start()
        assert arrived.wait(30)
        interrupt_passes()
        thread.join(20)
        assert not release.is_set() and len(outcome) == 1 and isinstance(outcome[0], Cancelled), outcome
        release.set()
        assert (client.post("/v1/completions", {"prompt": "a"}) or {})["choices"][0]["text"] == "    x = 1"
        interrupt_passes()  # nothing in flight: nothing happens
        assert client.get("/v1/models") is not None


def test_serve_stdio_stops_a_request_whose_answer_no_one_reads(tmp_path: Path) -> None:
    """`infill serve --stdio` whose client closed the pipe it reads (an editor that quit) went on waiting for a
    model server's answer (up to INFILL_REMOTE_TIMEOUT) before the write that ends it: the request is cut and the
    server exits 141 (stdout closed early) while the model server still holds the request."""
    import json
    import os
    import subprocess
    import sys
    import threading

    arrived, release = threading.Event(), threading.Event()

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions"):
            arrived.set()
            release.wait(60)
        healthy(handler, path, body)

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root), "INFILL_REMOTE_TIMEOUT": "60", "OMP_NUM_THREADS": "1"}
    for server in running(FakeServer(answer)):
        params = {"text": "def mean(xs):\n    <FILL>\n", "marker": "<FILL>", "model": server.url + "#qwen-fake"}
        process = subprocess.Popen(
            [sys.executable, "-m", "infill", "serve", "--stdio"],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps({"id": 1, "method": "fill", "params": params}).encode() + b"\n")
            process.stdin.flush()
            assert arrived.wait(60), "the fill never reached the model server"
            process.stdout.close()  # the client quits
            assert process.wait(30) == 141 and not release.is_set()
        finally:
            release.set()
            if process.poll() is None:
                process.kill()
            process.wait()


def test_llama_server_restarted_with_another_context_is_loaded_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """llama-server says its context only in /props: restarted with the same model and a smaller -c, a kept model
    planned fills for the old window (each refused as over the context) until the process restarted."""
    from infill.models import remote

    monkeypatch.setattr(remote, "REVALIDATE", 0.0)
    answer = Restartable(QWEN)
    n_ctx = {"value": 2048}

    def with_props(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path == "/props":
            handler.send(200, {"default_generation_settings": {"n_ctx": n_ctx["value"]}})
        else:
            answer(handler, path, body)

    for server in running(FakeServer(with_props)):
        api.clear_model_cache()
        spec = api.ModelSpec(server.url + "#team-model")
        wide = api.load_model(spec).info["max_length"]
        assert api.load_model(spec).info["max_length"] == wide
        n_ctx["value"] = 256
        assert api.load_model(spec).info["max_length"] < 256 < wide


def test_a_character_a_server_stopped_inside_of_is_not_written(tmp_path: Path) -> None:
    """A server decodes the bytes of a character its fill stopped inside of (its budget, or an end token, reached
    within them) as U+FFFD (llama.cpp's, vLLM's): the fill writes what comes before it. Before, that fill was
    refused as broken UTF-8 and nothing was written (exit 3)."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/models"):
            handler.send(200, {"data": [{"id": "qwen-fake", "object": "model", "owned_by": "me"}]})
        elif path.endswith("/v1/completions"):
            handler.send(200, completion("    x = 1  # é\ufffd"))
        else:
            handler.send(404, {"error": "not found"})

    for server in running(FakeServer(answer)):
        code, err = fill(tmp_path, server.url + "#qwen-fake", "--decoder", "sequential", "--temperature", "0")
        written = (tmp_path / "m.py").read_text()
        assert code == 0 and written.splitlines()[1] == "    x = 1  # é", err
