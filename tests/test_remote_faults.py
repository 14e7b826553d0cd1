"""The remote engine's faults, as a user meets them: a server that is down, slow, busy or answering garbage is one
stderr line, exit 123 and the file untouched; 429 and 503 are retried after the server's Retry-After; the API key
is sent but never printed; plain http to another machine needs an opt-in; the language server answers the request
with an error and keeps serving. The servers here are standard-library fakes (tests/fixtures_remote.py)."""

from __future__ import annotations

import base64
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
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
    fake,
    free_port,
    healthy,
    proxied,
    running,
)

from infill import api
from infill.cli import main
from infill.errors import ExitCode

_ = proxied  # a fixture
SOURCE = "def mean(xs):\n    total = sum(xs)\n    return total / len(xs)\n"
KEY = "sk-test-7f3a9c2e51d84b60"
OUTPUTS: list[str] = []  # every stdout and stderr of this process's fills in this module (kept: see the last test)


def held(*outputs: str) -> None:
    """Each test's outputs are checked for the key where they are made (a module's tests may run in different
    processes), and kept for the last test."""
    assert not [o for o in outputs if KEY in o]
    OUTPUTS.extend(outputs)


@pytest.fixture(autouse=True)
def key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFILL_API_KEY", KEY)
    monkeypatch.setenv("INFILL_REMOTE_TIMEOUT", "0.5")


def serve(answer: Any) -> Iterator[FakeServer]:
    yield from fake(answer)


def fill(tmp_path: Path, url: str, *args: str) -> tuple[int, str, str]:
    path = tmp_path / "m.py"
    path.write_text(SOURCE)
    api.clear_model_cache()
    r = CliRunner().invoke(main, ["fill", str(path), "--span", "2", "--model", url, "-v", *args])
    held(r.stdout, r.stderr)
    return r.exit_code, r.stdout, r.stderr


def fails(tmp_path: Path, url: str, *args: str) -> str:
    """A fill that must fail with exit 123: one stderr line, the file byte for byte as it went in."""
    code, _, stderr = fill(tmp_path, url, *args)
    assert (tmp_path / "m.py").read_text() == SOURCE
    lines = stderr.splitlines()
    assert code == ExitCode.INTERNAL and len(lines) == 1 and lines[0].startswith("error: "), (code, stderr)
    return lines[0]


def test_a_server_that_is_down(tmp_path: Path) -> None:
    line = fails(tmp_path, f"http://127.0.0.1:{free_port()}/v1#m")
    assert "is not reachable" in line


def test_a_server_that_stops_between_fills(tmp_path: Path) -> None:
    """A healthy server fills; stopped, the next fill is exit 123 and writes nothing."""
    servers = serve(healthy)
    server = next(servers)
    code, _, err = fill(tmp_path, server.url + "#qwen-fake")
    assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
    assert server.seen[-1][2].get("Authorization") == f"Bearer {KEY}"  # the key is sent in the header only
    next(servers, None)
    assert "is not reachable" in fails(tmp_path, server.url + "#qwen-fake")


RELEASED = threading.Event()  # the slow server's completions answer once this is set (or after 30 s)


def slow(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
    if path.endswith("/completions"):
        RELEASED.wait(30)
        return  # no answer: a client still waiting gets a closed connection; writing to a gone one would print a
        # traceback into the next test's captured stderr
    healthy(handler, path, body)


def test_a_slow_server_times_out(tmp_path: Path) -> None:
    """The fill gives up after INFILL_REMOTE_TIMEOUT: it fails while the server still holds its answer back (no
    wall-clock bound here, which a loaded machine breaks; the answer only comes once the test lets it)."""
    RELEASED.clear()
    try:
        for server in serve(slow):
            line = fails(tmp_path, server.url + "#qwen-fake")
            assert "did not answer within 0.5 s" in line and not RELEASED.is_set()
            assert any(seen[1].endswith("/completions") for seen in server.seen)
    finally:
        RELEASED.set()


@pytest.mark.parametrize("where", ["/v1/models", "/v1/completions"])
@pytest.mark.parametrize("garbage", [b"<html>oops</html>", b'{"choices": "no"}', b"[1, 2]", b"[" * 100_000])
def test_garbage_answers(tmp_path: Path, where: str, garbage: bytes) -> None:
    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith(where):
            handler.send(200, garbage)
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        assert "malformed JSON" in fails(tmp_path, server.url + "#qwen-fake")


def test_busy_then_answering_is_retried_after_retry_after(tmp_path: Path) -> None:
    tries: list[float] = []

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions") and len(tries) < 2:
            tries.append(time.monotonic())
            handler.send(429 if not tries[1:] else 503, {"error": "busy"}, {"Retry-After": "1"})
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        started = time.monotonic()
        code, _, err = fill(tmp_path, server.url + "#qwen-fake")
        assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
        assert len(tries) == 2 and time.monotonic() - started >= 2.0  # waited the server's second, twice


def test_always_busy_gives_up(tmp_path: Path) -> None:
    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions"):
            handler.send(503, {"error": {"code": 503, "message": "Loading model"}}, {"Retry-After": "0"})
        else:
            healthy(handler, path, body)

    for server in serve(answer):  # llama-server while it loads its model: the line says why it is busy
        assert "is busy (HTTP 503: Loading model) after 4 tries" in fails(tmp_path, server.url + "#qwen-fake")
        assert sum(s[1].endswith("/completions") for s in server.seen) == 4


def test_a_refused_key_and_an_error_quoting_it(tmp_path: Path) -> None:
    """Servers that quote the key back (in a 401 and in a 500's message): neither reaches the user."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        auth = handler.headers.get("Authorization", "")
        if path.endswith("/models"):
            handler.send(401, {"error": {"message": f"invalid key {auth}"}})
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        assert "refused the API key of $INFILL_API_KEY (HTTP 401)" in fails(tmp_path, server.url + "#qwen-fake")

    def quoting(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions"):
            handler.send(500, {"error": {"message": f"cannot use {handler.headers.get('Authorization')}"}})
        else:
            healthy(handler, path, body)

    for server in serve(quoting):
        line = fails(tmp_path, server.url + "#qwen-fake", "--format", "json")
        assert "HTTP 500: cannot use Bearer ***" in line


def test_the_key_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFILL_API_KEY")
    (tmp_path / "key").write_text(KEY + "\n")
    for server in serve(healthy):
        code, _, err = fill(tmp_path, server.url + "#qwen-fake", "--api-key-file", str(tmp_path / "key"))
        assert code == 0, err
        assert all(s[2].get("Authorization") == f"Bearer {KEY}" for s in server.seen)
    code, _, err = fill(tmp_path, "http://127.0.0.1:1/v1#m", "--api-key-file", str(tmp_path / "missing"))
    assert code == ExitCode.USAGE and "cannot read the API key file" in err


def test_plain_http_to_another_machine_needs_an_opt_in(tmp_path: Path) -> None:
    code, _, err = fill(tmp_path, "http://192.0.2.10:8000/v1#m")
    assert code == ExitCode.USAGE and "--allow-http" in err and (tmp_path / "m.py").read_text() == SOURCE
    code, _, err = fill(tmp_path, f"http://user:{KEY}@127.0.0.1:8000/v1#m")
    assert code == ExitCode.USAGE and "no credentials in the URL" in err


def test_sampling_and_the_family_from_the_models_name(tmp_path: Path) -> None:
    """Without a tokenizer endpoint (Ollama) the family comes from the name; each sample is one request with the
    family's FIM prompt, its end tokens and the line break as stops, and its own seed."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions"):
            handler.send(200, completion(f"    y = {body['seed'] % 7 if body and 'seed' in body else 0}"))
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        code, _, err = fill(tmp_path, server.url + "#qwen-fake", "--temperature", "1", "-n", "3")
        assert code == 0, err
        bodies = [s[3] for s in server.seen if s[1].endswith("/completions")]
        assert bodies[0]["prompt"].startswith("<|fim_prefix|>def mean(xs):\n") and bodies[0]["model"] == "qwen-fake"
        assert bodies[0]["prompt"].endswith("<|fim_middle|>") and bodies[0]["stop"][-1] == "\n"
        assert len({b["seed"] for b in bodies}) == len(bodies) >= 3


def test_a_server_that_refuses_echo_fills_without_ranking_lines(tmp_path: Path) -> None:
    """llama.cpp's llama-server answers `echo` with an error: the sample is kept, the file's lines are not ranked."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions") and body and body.get("echo"):
            handler.send(400, {"error": {"message": "Only no echo is supported"}})
        else:
            healthy(handler, path, body)

    (tmp_path / "other.py").write_text(SOURCE.replace("total = sum", "total = len"))  # its line 2: a candidate
    for server in serve(answer):
        code, _, err = fill(tmp_path, server.url + "#qwen-fake", "--context", str(tmp_path / "other.py"))
        assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
        assert sum(bool(s[3] and s[3].get("echo")) for s in server.seen) == 1


def test_the_language_server_answers_with_an_error_and_keeps_serving(tmp_path: Path) -> None:
    pytest.importorskip("pygls")
    from fixtures_lsp import LspClient

    request_failed = -32803
    uri = "file:///project/m.py"
    client = LspClient()
    try:
        for server in serve(healthy):
            client.initialize({"model": f"http://127.0.0.1:{free_port()}/v1#m"})
            client.open(uri, "def mean(xs):\n    total = sum(xs)\n    \n    return total / len(xs)\n")
            response = client.inline(uri, 2, 4)
            assert response["error"]["code"] == request_failed and "is not reachable" in response["error"]["message"]
            client.configure({"model": server.url + "#qwen-fake", "threshold": 0})
            response = client.inline(uri, 2, 4)
            assert "error" not in response, response
            assert isinstance(response["result"]["items"], list)
    finally:
        assert client.close() == 0
        held(client.stderr())


def test_no_output_held_the_key(tmp_path: Path) -> None:
    """Every output above was checked where it was made (the module's tests may run in several processes); this
    one adds a server that is down, and looks at every output this process kept."""
    code, _, err = fill(tmp_path, f"http://127.0.0.1:{free_port()}/v1#m")
    assert code == ExitCode.INTERNAL and "is not reachable" in err
    assert OUTPUTS and not [o for o in OUTPUTS if KEY in o]


def test_a_server_that_ignores_max_tokens_writes_nothing(tmp_path: Path) -> None:
    """A completion far longer than the tokens asked for (a server ignoring max_tokens and the stop strings) is
    refused, where it was written into the file whole. The control: the same server's short answer fills."""
    answers = {"text": "    x = 1" + " + 1" * 50_000}

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions"):
            handler.send(200, completion(answers["text"]))
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        line = fails(tmp_path, server.url + "#qwen-fake")
        assert "characters to a request for at most" in line
        answers["text"] = "    x = 1"
        code, _, stderr = fill(tmp_path, server.url + "#qwen-fake")
        assert code == 0 and (tmp_path / "m.py").read_text() != SOURCE, stderr


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 50.0])
def test_log_probabilities_that_are_not_probabilities_are_refused(tmp_path: Path, value: float) -> None:
    """NaN, infinity or a positive log-probability: one line, exit 123 (they made a score of 150, or JSON output
    that is not JSON)."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions"):
            text = "    x = 1"
            handler.send(200, completion(text, [-0.5] * (len(text) - 1) + [value]))
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        assert "not a finite number at most 0" in fails(tmp_path, server.url + "#qwen-fake", "--format", "json")


def test_an_answer_trickled_a_byte_at_a_time_times_out(tmp_path: Path) -> None:
    """The timeout is the whole answer's: a server sending its body a byte every 0.1 s (each read well within
    the 0.5 s) ran on for minutes."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if not path.endswith("/v1/completions"):
            healthy(handler, path, body)
            return
        data = json.dumps(completion("    x = 1")).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        try:
            for byte in data:
                if RELEASED.is_set():
                    return
                handler.wfile.write(bytes([byte]))
                handler.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass

    RELEASED.clear()
    try:
        for server in serve(answer):
            line = fails(tmp_path, server.url + "#qwen-fake")  # while the body is still coming (seconds of it)
            assert "did not answer within 0.5 s" in line
    finally:
        RELEASED.set()


def test_an_answer_over_the_size_limit_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infill.models import remote_http

    monkeypatch.setattr(remote_http, "MAX_ANSWER_BYTES", 2**20)

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions"):
            handler.send(200, b" " * (3 * 2**20))
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        assert "answered more than 1 MiB; refused" in fails(tmp_path, server.url + "#qwen-fake")


@pytest.mark.parametrize("where", ["/v1/models", "/props"])
@pytest.mark.parametrize("n_ctx", [1, 40, True, "4096", 512])
def test_a_context_length_too_small_to_fill_with_is_a_model_error(tmp_path: Path, n_ctx: object, where: str) -> None:
    """A server saying its model's context is a few tokens got requests for a negative number of tokens. Now
    that is a model error naming the length; a length that is not a number (true, a string) is not taken as one,
    and a usable one fills. llama-server says its context under /props, not in /v1/models."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/models"):
            handler.send(200, {"data": [{"id": "qwen-fake", **({"n_ctx": n_ctx} if where == "/v1/models" else {})}]})
        elif path.endswith("/props") and where == "/props":
            handler.send(200, {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1})
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        if isinstance(n_ctx, int) and not isinstance(n_ctx, bool) and n_ctx < 64:
            line = fails(tmp_path, server.url + "#qwen-fake")
            assert f"context is {n_ctx} tokens; a fill needs at least 64" in line
        else:
            code, _, stderr = fill(tmp_path, server.url + "#qwen-fake")
            assert code == 0 and (tmp_path / "m.py").read_text() != SOURCE, stderr


@pytest.mark.parametrize("engine", ["onnx", "torch", "onnx-int8"])
def test_an_engine_of_this_machine_is_refused_for_a_model_server(tmp_path: Path, engine: str) -> None:
    """`--engine onnx` with a model server was ignored without a word (a GGUF file refuses it); auto-int8, the
    language server's default, is auto for a model server (the language server test above fills with it)."""
    for server in serve(healthy):
        code, _, stderr = fill(tmp_path, server.url + "#qwen-fake", "--engine", engine)
        assert code == ExitCode.USAGE and f"--engine {engine} runs models on this machine" in stderr, stderr
        assert not server.seen and (tmp_path / "m.py").read_text() == SOURCE


@pytest.mark.parametrize("flag", ["--revision", "--mask-token"])
def test_a_folders_flag_is_refused_for_a_model_server(tmp_path: Path, flag: str) -> None:
    """A flag that does not apply to the model is a usage error: one line naming it and the model's kind, exit 2,
    before anything is sent."""
    for server in serve(healthy):
        code, _, stderr = fill(tmp_path, server.url + "#qwen-fake", flag, "v2")
        assert code == ExitCode.USAGE and len(stderr.splitlines()) == 1, (code, stderr)
        assert f"{flag} applies to model folders; {server.url} is a model server" in stderr
        assert not server.seen and (tmp_path / "m.py").read_text() == SOURCE


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://[::1/v1#m", "not a valid URL"),
        ("https://exa mple.com/v1#m", "no spaces or control characters"),
        ("http://host:abc/v1#m", "not a valid port"),
        ("http://:8080/v1#m", "no host in the URL"),
    ],
)
def test_a_malformed_server_url_is_a_usage_error(tmp_path: Path, url: str, says: str) -> None:
    """One stderr line and exit 2 before anything is sent; an unclosed IPv6 bracket and a space were internal
    errors (exit 123)."""
    code, _, stderr = fill(tmp_path, url)
    assert code == ExitCode.USAGE and len(stderr.splitlines()) == 1 and says in stderr, (code, stderr)
    assert (tmp_path / "m.py").read_text() == SOURCE


def test_a_prompt_over_the_servers_context_gets_a_hint_and_max_context_fits_it(tmp_path: Path) -> None:
    """llama-server refuses a prompt over its context with HTTP 400 ("exceeds the available context size"), and its
    /v1/models does not say that context: the error says how to send less, and --max-context does."""
    prompts: list[str] = []

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions") and body is not None:
            prompts.append(str(body.get("prompt")))
            if len(prompts[-1]) > 1000:
                message = "the request exceeds the available context size, try increasing it"
                handler.send(400, {"error": {"code": 400, "message": message, "type": "exceed_context_size_error"}})
                return
        healthy(handler, path, body)

    path = tmp_path / "long.py"
    source = "".join(f"def f{i}(xs):\n    return sum(xs) + {i}\n\n\n" for i in range(100))
    path.write_text(source)
    for server in serve(answer):
        api.clear_model_cache()
        argv = ["fill", str(path), "--span", "202", "--model", server.url + "#qwen-fake"]
        r = CliRunner().invoke(main, argv)
        held(r.stdout, r.stderr)
        assert r.exit_code == ExitCode.INTERNAL and path.read_text() == source
        assert "exceeds the available context size" in r.stderr and "--max-context N" in r.stderr
        r = CliRunner().invoke(main, [*argv, "--max-context", "64"])
        held(r.stdout, r.stderr)
        assert r.exit_code == 0 and path.read_text() != source, r.stderr
        assert len(prompts[-1]) <= 1000


def test_llama_servers_log_probabilities_score_the_fill(tmp_path: Path) -> None:
    """llama.cpp's llama-server answers /v1/completions with `logprobs: {"content": [{"token", "logprob", ...}]}`
    (the shape of OpenAI's chat API), not `tokens` and `token_logprobs`: its fills scored 0 (certain), so
    candidates were not ranked and --min-confidence passed anything."""
    pieces = [("    ", -0.25), ("x", -0.5), (" =", -1.0), (" 1", -2.0)]

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions"):
            content = [
                {"id": i, "token": t, "bytes": list(t.encode()), "logprob": v, "top_logprobs": []}
                for i, (t, v) in enumerate(pieces)
            ]
            text = "".join(t for t, _ in pieces)
            handler.send(200, {"choices": [{"text": text, "index": 0, "logprobs": {"content": content}}]})
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        code, stdout, stderr = fill(tmp_path, server.url + "#qwen-fake", "--format", "json")
        assert code == 0, stderr
        result = json.loads(stdout)
        assert result["edits"][0]["text"] == "    x = 1"
        assert result["edits"][0]["score"] == pytest.approx(-3.75)


def test_a_redirect_is_named_not_followed(tmp_path: Path) -> None:
    """A proxy sending http:// to https:// (301) was "answered malformed JSON"; now the line names the redirect and
    where it points. It is not followed: the file's text goes only where --model says."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        handler.send_response(301)
        handler.send_header("Location", f"https://gpu-box.example{path}")
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    for server in serve(answer):
        line = fails(tmp_path, server.url + "#qwen-fake")
        assert "HTTP 301, a redirect to https://gpu-box.example/v1/models" in line, line
        assert len(server.seen) == 1


def test_a_kept_model_sends_the_key_file_as_it_is_now(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that keeps the model loaded (the daemon, `infill lsp`) read the key once: a rotated key file's old
    key went on being sent (401 until a restart), and a relative --api-key-file named the first project's file
    for every project. The model is kept here as there: the cache is not cleared between the fills."""
    monkeypatch.delenv("INFILL_API_KEY")
    one, two = tmp_path / "one", tmp_path / "two"
    for folder, key in ((one, "sk-one"), (two, "sk-two")):
        folder.mkdir()
        (folder / "key").write_text(key + "\n")
        (folder / "m.py").write_text(SOURCE)
    for server in serve(healthy):
        api.clear_model_cache()

        def sent(folder: Path, server: FakeServer = server) -> set[str]:
            monkeypatch.chdir(folder)
            server.seen.clear()
            argv = ["fill", "m.py", "--span", "2", "--model", server.url + "#qwen-fake", "--api-key-file", "key"]
            r = CliRunner().invoke(main, argv)
            assert r.exit_code == 0, r.stderr
            return {s[2].get("Authorization", "") for s in server.seen}

        assert sent(one) == {"Bearer sk-one"}
        assert sent(two) == {"Bearer sk-two"}
        (one / "key").write_text("sk-rotated\n")
        assert sent(one) == {"Bearer sk-rotated"}


def test_a_wrong_base_url_is_named_as_one(tmp_path: Path) -> None:
    """An address that is no OpenAI-compatible API (a wrong path, another program on the port) answers 404 to
    everything: the error asked for ;fim=FAMILY, which then failed anew. It now says the models list is not there
    either, and a completion's bare 404 (an endpoint pasted as the base URL) asks the same; a server that lists its
    models does not get that hint."""

    def nothing(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        handler.send(404, b"404 page not found")

    for server in serve(nothing):
        code, _, stderr = fill(tmp_path, server.url.replace("/v1", "/api/v1") + "#m")
        assert code == ExitCode.USAGE and len(stderr.splitlines()) == 1, stderr
        assert "/api/v1/models is not found: is that the API's base URL?" in stderr
        line = fails(tmp_path, server.url + "/completions#m;fim=qwen")  # an endpoint pasted: the completion's 404
        assert "answered HTTP 404; is http://127.0.0.1" in line and "/v1/completions the API's base URL?" in line
    for server in serve(healthy):
        code, _, stderr = fill(tmp_path, server.url + "#m")
        assert code == ExitCode.USAGE and "add ;fim=FAMILY" in stderr and "base URL" not in stderr, stderr


def test_an_empty_key_file_name_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--api-key-file "$UNSET"` sent no key at all, and the server's 401 then said to give --api-key-file. The flag
    and the server's parameter refuse an empty name, as every other path flag does."""
    from infill.server.dispatch import Dispatcher

    monkeypatch.delenv("INFILL_API_KEY")
    for server in serve(healthy):
        code, _, stderr = fill(tmp_path, server.url + "#qwen-fake", "--api-key-file", "")
        assert code == ExitCode.USAGE and "'--api-key-file': is empty" in stderr, stderr
        assert not server.seen and (tmp_path / "m.py").read_text() == SOURCE
        params = {"text": SOURCE, "span": "2", "model": server.url + "#qwen-fake", "api_key_file": ""}
        line = json.dumps({"id": 1, "method": "fill", "params": params}).encode()
        error = json.loads(Dispatcher().handle_line(line))["error"]
        assert error["code"] == "input_error" and error["message"] == '"api_key_file" is empty (an unset variable?)'
        assert not server.seen


def test_a_refused_key_names_where_it_came_from_and_the_flag_beats_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 401 told the user to set the key even when one was sent, and never which one; docs/server.md promises the
    line says where the key comes from. And $INFILL_API_KEY (an old key left in a shell) silently won over an
    --api-key-file given on the command line; a flag given beats the environment, as in other tools."""
    (tmp_path / "key").write_text("sk-from-the-file\n")

    def refusing(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        handler.send(401, {"error": {"message": "Invalid API Key"}})

    for server in serve(refusing):
        line = fails(tmp_path, server.url + "#qwen-fake", "--api-key-file", str(tmp_path / "key"))
        assert f"refused the API key of --api-key-file {tmp_path / 'key'} (HTTP 401)" in line
        assert server.seen[-1][2].get("Authorization") == "Bearer sk-from-the-file"
        monkeypatch.delenv("INFILL_API_KEY")
        line = fails(tmp_path, server.url + "#qwen-fake")
        assert "(HTTP 401): it wants an API key: set $INFILL_API_KEY or use --api-key-file" in line
        assert "Authorization" not in server.seen[-1][2]


@pytest.mark.parametrize(
    ("code", "message", "hint"),
    [
        (18, "self-signed certificate", True),
        (20, "unable to get local issuer certificate", True),
        (62, "Hostname mismatch, certificate is not valid for 'gpu-box'.", False),
    ],
)
def test_an_untrusted_certificate_says_why_and_how_to_trust_a_teams_own_authority(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, message: str, hint: bool
) -> None:
    """A server with a certificate of the team's own authority failed as "TLS failed (CERTIFICATE_VERIFY_FAILED)",
    which says neither what is wrong nor that SSL_CERT_FILE trusts that authority. A hostname mismatch gets no
    such hint (trusting more would not help). The handshake's failure is OpenSSL's, raised where it connects."""
    import http.client
    import ssl

    def refuse(self: http.client.HTTPSConnection) -> None:
        error = ssl.SSLCertVerificationError(1, f"[SSL: CERTIFICATE_VERIFY_FAILED] {message}")
        error.verify_code, error.verify_message = code, message
        error.library, error.reason = "SSL", "CERTIFICATE_VERIFY_FAILED"  # as the ssl module sets them
        raise error

    monkeypatch.setattr(http.client.HTTPSConnection, "connect", refuse)
    line = fails(tmp_path, "https://gpu-box.example:8000/v1#m")
    assert f"https://gpu-box.example:8000/v1: its certificate is not trusted ({message})" in line
    assert ("set SSL_CERT_FILE to its PEM file" in line) == hint


@pytest.mark.parametrize("host", ["0.0.0.0", "[::ffff:127.0.0.1]"])
def test_addresses_that_reach_this_machine_need_no_http_opt_in(tmp_path: Path, host: str) -> None:
    """llama-server started with --host 0.0.0.0 (as docs/server.md runs it) prints http://0.0.0.0:8080; that
    address, and an IPv4-mapped loopback one, reach this machine, and were refused as "plain http to another
    machine"."""
    for server in serve(healthy):
        code, _, stderr = fill(tmp_path, server.url.replace("127.0.0.1", host) + "#qwen-fake")
        assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), stderr


def test_an_error_nested_too_deeply_is_the_servers_error(tmp_path: Path) -> None:
    """An error answer nested past Python's recursion limit was "internal error: RecursionError" (the JSON server's
    internal_error, after which the daemon's client redoes the work); it is the server's HTTP error. The answers
    themselves: test_garbage_answers."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions"):
            handler.send(500, b'{"error": ' + b"[" * 100_000)
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        assert fails(tmp_path, server.url + "#qwen-fake").endswith("answered HTTP 500")


def test_an_answer_cut_off_is_a_closed_connection(tmp_path: Path) -> None:
    """A server that dies in the middle of its answer (an out-of-memory kill) sent fewer bytes than its
    Content-Length: that was "answered malformed JSON"."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if not path.endswith("/v1/completions"):
            healthy(handler, path, body)
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", "1000")
        handler.end_headers()
        handler.wfile.write(b'{"choices": [{"text": "')
        handler.wfile.flush()
        handler.close_connection = True
        handler.connection.shutdown(2)

    for server in serve(answer):
        assert "closed the connection in the middle of its answer" in fails(tmp_path, server.url + "#qwen-fake")


# A proxy of the environment ($HTTPS_PROXY / $HTTP_PROXY / $NO_PROXY): FakeProxy sends every host to the fake
# server, which answers for gpu-box.test (TlsFakeServer: with the test authority's certificate for that name).
PROXY_SECRET = "s3cret-pw"


def with_credentials(proxy: FakeProxy) -> str:
    return proxy.url.replace("http://", f"http://alice:{PROXY_SECRET}@")


def basic() -> str:
    return "Basic " + base64.b64encode(f"alice:{PROXY_SECRET}".encode()).decode()


def no_secret(*outputs: str) -> None:
    assert not [o for o in outputs if PROXY_SECRET in o or basic()[6:] in o]


def resolve_gpu_box(monkeypatch: pytest.MonkeyPatch) -> None:
    """gpu-box.test is this machine for a connection the client opens itself (one that bypasses the proxy)."""
    create = socket.create_connection

    def connect(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        host, port = address
        return create(("127.0.0.1" if host == "gpu-box.test" else host, port), *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", connect)


def test_https_goes_through_the_proxys_tunnel_verified_against_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, proxied: Callable[[str, str], None]
) -> None:
    """The fill reaches the server through a CONNECT tunnel: the proxy's credentials only in the CONNECT, the API
    key only inside the tunnel's TLS, the certificate checked for the server's name (not the proxy's)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(TLS / "ca.pem"))
    for server in running(TlsFakeServer(healthy)):
        for proxy in running(FakeProxy(server.server_address)):
            proxied("HTTPS_PROXY", with_credentials(proxy))
            code, out, err = fill(tmp_path, "https://gpu-box.test:8443/v1#qwen-fake")
            assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
            no_secret(out, err)
            assert proxy.seen and all(s[:2] == ("CONNECT", "gpu-box.test:8443") for s in proxy.seen), proxy.seen
            assert all(s[2].get("Proxy-Authorization") == basic() for s in proxy.seen)
            assert len(proxy.seen) < len(server.seen)  # the tunnel is kept for the next request
            assert all(s[2].get("Authorization") == f"Bearer {KEY}" for s in server.seen)
            assert not [s for s in server.seen if "Proxy-Authorization" in s[2]]
            assert KEY.encode() not in proxy.tunnelled and b"qwen-fake" not in proxy.tunnelled  # encrypted
            line = fails(tmp_path, "https://other-box.test:8443/v1#qwen-fake")  # the certificate is gpu-box's
            assert "other-box.test:8443/v1: its certificate is not trusted (Hostname mismatch" in line, line


def test_plain_http_is_sent_to_the_proxy_and_still_needs_the_opt_in(
    tmp_path: Path, proxied: Callable[[str, str], None]
) -> None:
    for server in serve(healthy):
        for proxy in running(FakeProxy(server.server_address)):
            proxied("HTTP_PROXY", with_credentials(proxy))
            code, out, err = fill(tmp_path, "http://gpu-box.test:8000/v1#qwen-fake")
            assert code == ExitCode.USAGE and "--allow-http" in err and not proxy.seen
            code, out, err = fill(tmp_path, "http://gpu-box.test:8000/v1#qwen-fake", "--allow-http")
            assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
            no_secret(out, err)
            assert proxy.seen and all(s[1].startswith("http://gpu-box.test:8000/") for s in proxy.seen)
            assert all(s[2].get("Proxy-Authorization") == basic() for s in proxy.seen)
            assert all(s[2].get("Authorization") == f"Bearer {KEY}" for s in server.seen)
            assert not [s for s in server.seen if "Proxy-Authorization" in s[2]]


@pytest.mark.parametrize("variable", ["NO_PROXY", "no_proxy"])
@pytest.mark.parametrize("bypass", ["gpu-box.test", ".test", "test", "*", "other.example, gpu-box.test"])
def test_no_proxy_bypasses_the_proxy(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    proxied: Callable[[str, str], None],
    variable: str,
    bypass: str,
) -> None:
    resolve_gpu_box(monkeypatch)
    for server in serve(healthy):
        for proxy in running(FakeProxy(server.server_address)):
            proxied("HTTP_PROXY", proxy.url)
            proxied(variable, bypass)
            port = server.server_address[1]
            code, _, err = fill(tmp_path, f"http://gpu-box.test:{port}/v1#qwen-fake", "--allow-http")
            assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
            assert not proxy.seen and server.seen


def test_an_address_of_this_machine_never_goes_through_the_proxy(
    tmp_path: Path, proxied: Callable[[str, str], None]
) -> None:
    """A server on this machine is reached directly, as Go's clients do (curl and urllib would send the text, in
    clear for http, to the proxy unless $NO_PROXY names localhost)."""
    for server in serve(healthy):
        for proxy in running(FakeProxy(server.server_address)):
            proxied("HTTP_PROXY", proxy.url)
            code, _, err = fill(tmp_path, server.url + "#qwen-fake")
            assert code == 0 and "x = 1" in (tmp_path / "m.py").read_text(), err
            assert not proxy.seen and server.seen


@pytest.mark.parametrize(("status", "says"), [(407, "it refused the credentials of the proxy's URL"), (403, "")])
def test_a_proxy_that_refuses_is_one_line_naming_it(
    tmp_path: Path, proxied: Callable[[str, str], None], status: int, says: str
) -> None:
    for server in serve(healthy):
        for proxy in running(FakeProxy(server.server_address, refuse=status)):
            proxied("HTTPS_PROXY", with_credentials(proxy))
            proxied("HTTP_PROXY", with_credentials(proxy))
            line = fails(tmp_path, "https://gpu-box.test:8443/v1#qwen-fake")
            no_secret(line)
            assert f"proxy {proxy.url} refused the tunnel to gpu-box.test:8443 (HTTP {status} " in line, line
            assert says in line
            if status == 407:  # a plain-http request the proxy answers 407
                line = fails(tmp_path, "http://gpu-box.test:8000/v1#qwen-fake", "--allow-http")
                no_secret(line)
                assert f"proxy {proxy.url} refused the request to http://gpu-box.test:8000/v1 (HTTP 407)" in line
            assert not server.seen


def test_a_proxy_without_credentials_asked_for_them_says_where_they_go(
    tmp_path: Path, proxied: Callable[[str, str], None]
) -> None:
    for proxy in running(FakeProxy(("127.0.0.1", free_port()), refuse=407)):
        proxied("HTTPS_PROXY", proxy.url.removeprefix("http://"))  # host:port, as curl and urllib take it
        line = fails(tmp_path, "https://gpu-box.test:8443/v1#qwen-fake")
        assert line.endswith("it wants credentials: http://USER:PASSWORD@HOST:PORT as the proxy's URL"), line


def test_a_proxy_that_is_down_is_one_line_naming_it(tmp_path: Path, proxied: Callable[[str, str], None]) -> None:
    port = free_port()
    proxied("HTTPS_PROXY", f"http://alice:{PROXY_SECRET}@127.0.0.1:{port}")
    line = fails(tmp_path, "https://gpu-box.test:8443/v1#qwen-fake")
    no_secret(line)
    assert f"proxy http://127.0.0.1:{port} is not reachable (" in line, line


@pytest.mark.parametrize("value", [f"socks5://alice:{PROXY_SECRET}@127.0.0.1:1080", "http://127.0.0.1:99999"])
def test_a_proxy_url_that_cannot_be_used_is_a_usage_error(
    tmp_path: Path, proxied: Callable[[str, str], None], value: str
) -> None:
    proxied("https_proxy", value)
    code, out, err = fill(tmp_path, "https://gpu-box.test:8443/v1#qwen-fake")
    no_secret(out, err)
    assert code == ExitCode.USAGE and err.startswith("error: $https_proxy: ") and len(err.splitlines()) == 1, err
    assert (tmp_path / "m.py").read_text() == SOURCE


def test_a_daemon_started_under_another_proxy_is_not_trusted() -> None:
    """The daemon reads the proxy of its own environment: a client under another one must restart it."""
    from infill.server import dispatch

    plain = dispatch.identity({})
    for name in ("HTTPS_PROXY", "http_proxy", "NO_PROXY"):
        assert dispatch.identity({name: "proxy.example:3128"}) != plain, name


def without_logprobs(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
    """A server that ignores `logprobs` (older Ollama, some gateways): its completions carry text only."""
    if path.endswith("/v1/completions"):
        handler.send(200, {"choices": [{"text": "    x = 1", "finish_reason": "stop"}]})
    else:
        healthy(handler, path, body)


def test_a_server_without_log_probabilities_fills_unscored(tmp_path: Path) -> None:
    """The fill is made, but neither looks certain nor gets a confidence: score and confidence null, one
    warning (on stderr and in the JSON document), and the stats line says so."""
    from infill.core.ranking import UNSCORED

    for server in serve(without_logprobs):
        url = server.url + "#qwen-fake"
        code, out, err = fill(tmp_path, url, "--format", "json", "--stats")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["edits"][0]["text"] == "    x = 1"
        assert doc["confidence"] is None and doc["edits"][0]["score"] is None
        assert doc["warnings"] == [UNSCORED]
        assert err.count(UNSCORED) == 1
        assert "score=- confidence=-" in err and "unscored: no log-probabilities" in err


def test_min_confidence_refuses_a_fill_without_log_probabilities(tmp_path: Path) -> None:
    """--min-confidence cannot be answered: exit 2 (as for a model without a calibration), one line that says
    why, nothing written."""
    for server in serve(without_logprobs):
        code, _, err = fill(tmp_path, server.url + "#qwen-fake", "--min-confidence", "0.5")
    lines = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == ExitCode.USAGE and (tmp_path / "m.py").read_text() == SOURCE
    assert len(lines) == 1 and "returned no log-probabilities" in lines[0], err


def test_a_scored_server_is_unchanged(tmp_path: Path) -> None:
    """The negative control: a server that returns log-probabilities scores its fill, warns nothing, and
    --min-confidence fails for the lack of a calibration only."""
    for server in serve(healthy):
        code, out, err = fill(tmp_path, server.url + "#qwen-fake", "--format", "json", "--stats")
        refused, _, why = fill(tmp_path, server.url + "#qwen-fake", "--min-confidence", "0.5")
    doc = json.loads(out)
    assert code == 0 and doc["warnings"] == [] and doc["edits"][0]["score"] == pytest.approx(-0.5 * 9)
    assert "warning" not in err and "score=-4.500" in err
    assert refused == ExitCode.USAGE and "no calibrated confidence" in why


def test_unscored_samples_are_kept_in_sample_order(tmp_path: Path) -> None:
    """A server that scores some completions and not others: an unscored one (score 0, "certain") is not
    preferred to the scored first sample; the first valid sample is kept, with one warning for three samples."""
    answers = iter(range(100))

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/v1/completions") and not (body or {}).get("echo"):
            number = next(answers)
            if number == 0:
                handler.send(200, completion("    first = 1", [-3.0] * 3))
            else:
                handler.send(200, {"choices": [{"text": f"    later_{number} = 1", "finish_reason": "stop"}]})
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        code, out, err = fill(tmp_path, server.url + "#qwen-fake", "--format", "json", "-n", "3", "--temperature", "1")
    doc = json.loads(out)
    assert code == 0 and doc["edits"][0]["text"] == "    first = 1", err
    assert next(answers) >= 3  # three samples (or more): still one warning
    assert doc["confidence"] is None and len(doc["warnings"]) == 1


def test_the_json_server_reports_an_unscored_fill(tmp_path: Path) -> None:
    from infill.core.ranking import UNSCORED
    from infill.server.dispatch import Dispatcher

    for server in serve(without_logprobs):
        params = {"text": SOURCE, "filename": "m.py", "span": "2", "model": server.url + "#qwen-fake"}
        api.clear_model_cache()
        reply = json.loads(Dispatcher().handle_line(json.dumps({"id": 1, "method": "fill", "params": params}).encode()))
    assert "error" not in reply, reply
    assert reply["confidence"] is None and reply["warnings"] == [UNSCORED]
    assert reply["edits"][0]["text"] == "    x = 1"


def test_the_language_server_says_once_that_fills_are_unscored(tmp_path: Path) -> None:
    """Shown as for a model without a calibration (whatever the threshold), and told once in a window message."""
    pytest.importorskip("pygls")
    from fixtures_lsp import LspClient

    uri = "file:///project/m.py"
    client = LspClient()
    try:
        for server in serve(without_logprobs):
            client.initialize({"model": server.url + "#qwen-fake", "threshold": 0.9})
            client.open(uri, "def mean(xs):\n    total = sum(xs)\n    \n    return total / len(xs)\n")
            first = client.inline(uri, 2, 4)
            client.change(uri, 2, [{"text": "def mean(xs):\n    total = sum(xs)\n    \n    return total\n"}])
            second = client.inline(uri, 2, 4)
            for response in (first, second):
                (item,) = response["result"]["items"]
                assert item["insertText"].strip() == "x = 1" and item["confidence"] is None
            told = [
                n
                for n in client.notifications
                if n["method"] == "window/showMessage" and "no log-probabilities" in n["params"]["message"]
            ]
            assert len(told) == 1, client.notifications
    finally:
        assert client.close() == 0
        held(client.stderr())


@pytest.mark.parametrize(("said", "again"), [({"stop_reason": None}, False), ({"stop_reason": "\n"}, True), ({}, True)])
def test_a_blank_line_is_asked_again_only_where_the_line_break_may_have_ended_it(
    tmp_path: Path, said: dict[str, Any], again: bool
) -> None:
    """A one-line fill that came back blank is asked again without the line-break stop (the model may go on past
    it); vLLM says which stop ended a completion, and one ended by the model's end token (stop_reason None) ends
    there again: it is not asked again (each sample was two requests, the rescue's hotter ones too)."""

    def answer(handler: FakeHandler, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions"):
            handler.send(200, {"choices": [{"text": "", "finish_reason": "stop", "logprobs": None, **said}]})
        else:
            healthy(handler, path, body)

    for server in serve(answer):
        fill(tmp_path, server.url + "#qwen-fake")
        bodies = [s[3] for s in server.seen if s[1].endswith("/completions")]
        samples = [b for b in bodies if "\n" in b["stop"]]
        retries = [b for b in bodies if "\n" not in b["stop"]]
        assert samples and bodies[0] is samples[0]
        less = [{**b, "stop": [s for s in b["stop"] if s != "\n"]} for b in samples]
        assert retries == (less if again else [])  # each the same request less the line-break stop
