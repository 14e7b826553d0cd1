"""The JSON-lines protocol, in-process against the dispatcher (fast), plus a short `serve --stdio` check."""

from __future__ import annotations

import io
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infill.config import ModelSpec
from infill.errors import DecodeError, FileChangedError, InputError, ModelError
from infill.models import registry
from infill.server import protocol
from infill.server.dispatch import Dispatcher, ModelCache, ServerContext
from infill.server.stdio import read_lines, serve_stream
from tests import fixtures_serve
from tests.fixtures_serve import FAKE_MODEL, fake_fill


def make_dispatcher(**kwargs: Any) -> Dispatcher:
    dispatcher = Dispatcher(**kwargs)
    fixtures_serve.install(dispatcher)
    return dispatcher


def call(dispatcher: Dispatcher, obj: Any) -> dict[str, Any]:
    line = (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n"
    out = dispatcher.handle_line(line)
    assert out.endswith(b"\n") and out.count(b"\n") == 1
    out.decode("ascii")  # responses are ASCII-only
    reply: dict[str, Any] = json.loads(out)
    return reply


@pytest.fixture(autouse=True)
def _clean_registry() -> Any:
    from infill import api

    fixtures_serve.LOADS.clear()
    api.clear_model_cache()  # the server loads through the api's per-process cache
    try:
        yield
    finally:
        registry.unregister(FAKE_MODEL)
        api.clear_model_cache()


def test_ping_reports_identity_and_echoes_ids() -> None:
    dispatcher = make_dispatcher()
    for request_id in (1, 0, -5, "abc", "ünï", None, 2**64):
        reply = call(dispatcher, {"id": request_id, "method": "ping"})
        assert reply["id"] == request_id
        assert reply["pong"] is True
        assert reply["protocol"] == protocol.PROTOCOL_VERSION
        assert reply["pid"] == os.getpid()
    # an integer beyond 64 bits, the id too, is one no client could match (nor any parameter use)
    assert call(dispatcher, {"id": 2**70, "method": "ping"})["error"]["code"] == protocol.INVALID_REQUEST
    assert "id" not in {k for k in call(dispatcher, {"method": "ping"}) if k != "id"}
    assert call(dispatcher, {"method": "ping"})["id"] is None  # a request without id gets id null


def test_fill_response_is_the_result_plus_id() -> None:
    dispatcher = make_dispatcher()
    params = {"text": "a = 1\nb = 2\n", "spans": [[6, 11]], "file": "x.py"}
    reply = call(dispatcher, {"id": 7, "method": "fill", "params": params})
    expected = fake_fill(params, ServerContext(ModelCache()))
    assert reply == {"id": 7, **expected}
    assert reply["edits"][0]["text"] == "<6:2 = B>"
    assert reply["edits"][0]["start_line"] == 2


def test_models_are_cached_by_model_and_device() -> None:
    dispatcher = make_dispatcher()
    text = {"text": "x = 1\n", "spans": [[0, 1]]}
    for _ in range(3):
        assert "error" not in call(dispatcher, {"id": 1, "method": "fill", "params": text})
    assert [spec.device for spec in fixtures_serve.LOADS] == ["cpu"]  # loaded once, reused
    call(dispatcher, {"id": 2, "method": "fill", "params": {**text, "device": "cuda"}})
    assert [spec.device for spec in fixtures_serve.LOADS] == ["cpu", "cuda"]
    models = call(dispatcher, {"id": 3, "method": "models"})
    assert models["id"] == 3
    assert sorted(m["device"] for m in models["loaded"]) == ["cpu", "cuda"]
    assert {m["name"] for m in models["loaded"]} == {FAKE_MODEL}
    assert FAKE_MODEL in models["registered"]
    assert [m["device"] for m in call(dispatcher, {"method": "ping"})["models"]] == ["cpu", "cuda"]


def test_model_cache_reloads_a_folder_model_whose_files_change(tmp_path: Path) -> None:
    """Through the real loader (the api's per-process cache): new weights on disk evict both caches."""
    (tmp_path / "model.safetensors").write_bytes(b"v1")
    loads: list[int] = []

    def factory(spec: ModelSpec) -> registry.LoadedModel:
        loads.append(1)
        return registry.LoadedModel("m", "asarm", object(), None, info={"path": str(tmp_path)})

    registry.register("folder-fake", factory)
    try:
        cache = ModelCache()
        first = cache.get(ModelSpec(name="folder-fake"))
        assert cache.get(ModelSpec(name="folder-fake")) is first and len(loads) == 1
        (tmp_path / "model.safetensors").write_bytes(b"version 2")  # a new checkpoint written in place
        assert cache.get(ModelSpec(name="folder-fake")) is not first
        assert len(loads) == 2  # the api's copy was dropped too, so the factory really ran again
    finally:
        registry.unregister("folder-fake")


def test_model_cache_tells_a_replaced_file_and_a_relative_folder_of_another_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon serves every working directory: `--model ./ckpt` from two projects is two models, and a GGUF file
    replaced under the same name (mv of a file of the same size and time) is another model."""
    loads: list[str] = []
    info = {"path": "ckpt"}

    def factory(spec: ModelSpec) -> registry.LoadedModel:
        loads.append(os.getcwd())
        return registry.LoadedModel("m", "asarm", object(), None, info=dict(info))

    for project in ("a", "b"):
        (tmp_path / project / "ckpt").mkdir(parents=True)
        (tmp_path / project / "ckpt" / "model.safetensors").write_bytes(b"v1")
        os.utime(tmp_path / project / "ckpt" / "model.safetensors", ns=(0, 10**18))  # as `cp -p` copies
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF1")
    registry.register("folder-fake", factory)
    try:
        cache = ModelCache()
        monkeypatch.chdir(tmp_path / "a")
        first = cache.get(ModelSpec(name="folder-fake"))
        assert cache.get(ModelSpec(name="folder-fake")) is first
        monkeypatch.chdir(tmp_path / "b")
        assert cache.get(ModelSpec(name="folder-fake")) is not first
        assert loads == [str(tmp_path / "a"), str(tmp_path / "b")]
        info["path"] = str(gguf)
        model = cache.get(ModelSpec(name="folder-fake", device="cuda"))
        replacement = tmp_path / "new.gguf"
        replacement.write_bytes(b"GGUF2")
        st = gguf.stat()
        os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))
        replacement.replace(gguf)
        assert cache.get(ModelSpec(name="folder-fake", device="cuda")) is not model and len(loads) == 4
    finally:
        registry.unregister("folder-fake")


def test_shutdown_answers_then_stops() -> None:
    dispatcher = make_dispatcher()
    assert not dispatcher.stop_requested
    assert call(dispatcher, {"id": "bye", "method": "shutdown"}) == {"id": "bye", "shutdown": True}
    assert dispatcher.stop_requested


def test_serve_stream_stops_after_shutdown() -> None:
    dispatcher = make_dispatcher()
    lines = b'{"id":1,"method":"ping"}\n{"id":2,"method":"shutdown"}\n{"id":3,"method":"ping"}\n'
    out = io.BytesIO()
    serve_stream(dispatcher, io.BytesIO(lines), out)
    assert [json.loads(x)["id"] for x in out.getvalue().splitlines()] == [1, 2]


@pytest.mark.parametrize(
    ("line", "code"),
    [
        (b"not json", protocol.PARSE_ERROR),
        (b'{"id": 1, "method": "ping"', protocol.PARSE_ERROR),
        (b"\xff\xfe{}", protocol.PARSE_ERROR),
        (b"[" * 100_000, protocol.PARSE_ERROR),  # nested too deeply for the parser
        (b"[1, 2]", protocol.INVALID_REQUEST),
        (b'"ping"', protocol.INVALID_REQUEST),
        (b"{}", protocol.INVALID_REQUEST),
        (b'{"id": true, "method": "ping"}', protocol.INVALID_REQUEST),
        (b'{"id": 1.5, "method": "ping"}', protocol.INVALID_REQUEST),
        (b'{"id": {"a": 1}, "method": "ping"}', protocol.INVALID_REQUEST),
        (b'{"id": "\\ud800", "method": "ping"}', protocol.INVALID_REQUEST),
        (b'{"id": 1, "method": 5}', protocol.INVALID_REQUEST),
        (b'{"id": 1, "method": ""}', protocol.INVALID_REQUEST),
        (b'{"id": 1, "method": "ping", "params": [1]}', protocol.INVALID_REQUEST),
        (b'{"id": 1, "method": "nope"}', protocol.UNKNOWN_METHOD),
        (b'{"id": 1, "method": "__init__"}', protocol.UNKNOWN_METHOD),
    ],
)
def test_malformed_requests_get_error_responses(line: bytes, code: str) -> None:
    dispatcher = make_dispatcher()
    reply = call(dispatcher, line)
    assert reply["error"]["code"] == code
    assert isinstance(reply["error"]["message"], str) and reply["error"]["message"]
    assert set(reply) == {"id", "error"}
    assert call(dispatcher, {"id": 9, "method": "ping"})["pong"] is True


def test_errors_keep_the_id_when_it_can_be_read() -> None:
    dispatcher = make_dispatcher()
    assert call(dispatcher, {"id": 4, "method": "nope"})["id"] == 4
    assert call(dispatcher, {"id": "q", "method": 3})["id"] == "q"
    assert call(dispatcher, {"id": 5, "method": "fill", "params": 3})["id"] == 5
    assert call(dispatcher, b"{bad")["id"] is None


def test_bad_span_is_an_input_error_and_the_next_request_is_fine() -> None:
    dispatcher = make_dispatcher()
    reply = call(dispatcher, {"id": 1, "method": "fill", "params": {"text": "abc", "spans": [[2, 99]]}})
    assert reply["id"] == 1
    assert reply["error"]["code"] == protocol.INPUT_ERROR
    assert reply["error"]["exit_code"] == 2
    assert "out of range" in reply["error"]["message"]
    assert reply["error"]["line"] == 1
    good = call(dispatcher, {"id": 2, "method": "fill", "params": {"text": "abc", "spans": [[0, 3]]}})
    assert good["edits"][0]["text"] == "<0:CBA>"


@pytest.mark.parametrize(
    ("exc", "code", "exit_code"),
    [
        (InputError("marker not found"), protocol.INPUT_ERROR, 2),
        (DecodeError("k must be >= 2"), protocol.DECODE_ERROR, 2),
        (ModelError("corrupt model.safetensors", path="/m"), protocol.MODEL_ERROR, 123),
        (FileChangedError("changed"), protocol.FILE_CHANGED, 123),
        (RuntimeError("boom"), protocol.INTERNAL_ERROR, 123),
        (SystemExit(3), protocol.INTERNAL_ERROR, 123),
    ],
)
def test_handler_exceptions_become_error_responses(exc: BaseException, code: str, exit_code: int) -> None:
    def failing(params: dict[str, Any], context: ServerContext) -> dict[str, Any]:
        raise exc

    dispatcher = make_dispatcher(methods={"boom": failing})
    reply = call(dispatcher, {"id": 3, "method": "boom"})
    assert reply["error"]["code"] == code
    assert reply["error"]["exit_code"] == exit_code
    rebuilt = protocol.exception_from_error(reply["error"])
    if code == protocol.INTERNAL_ERROR:
        assert rebuilt is None  # a client falls back to in-process work
    else:
        assert type(rebuilt) is type(exc) and str(rebuilt) == str(exc)
    assert call(dispatcher, {"id": 4, "method": "ping"})["pong"] is True


@pytest.mark.parametrize("result", [{"x": object()}, {"x": float("nan")}, {"id": 1}, [1, 2], None])
def test_results_json_cannot_hold_are_internal_errors(result: Any) -> None:
    dispatcher = make_dispatcher(methods={"odd": lambda params, context: result})
    reply = call(dispatcher, {"id": 1, "method": "odd"})
    assert reply == {"id": 1, "error": reply["error"]}
    assert reply["error"]["code"] == protocol.INTERNAL_ERROR


def test_oversized_requests_are_refused_and_skipped() -> None:
    dispatcher = make_dispatcher(max_request_bytes=100)
    big = json.dumps({"id": 1, "method": "fill", "params": {"text": "x" * 5000}}).encode()
    stream = io.BytesIO(big + b"\n" + b'{"id": 2, "method": "ping"}\n' + b"y" * 300)
    out = io.BytesIO()
    serve_stream(dispatcher, stream, out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r.get("error", {}).get("code") for r in replies] == [protocol.TOO_LARGE, None, protocol.TOO_LARGE]
    assert replies[1]["id"] == 2 and replies[1]["pong"] is True
    assert "100 bytes" in replies[0]["error"]["message"]


def test_read_lines_bounds_memory_and_keeps_an_unterminated_last_line() -> None:
    lines = list(read_lines(io.BytesIO(b"ab\n" + b"z" * 50 + b"\ncd"), limit=10))
    assert lines == [b"ab\n", None, b"cd"]
    assert list(read_lines(io.BytesIO(b"0123456789\n"), limit=10)) == [b"0123456789\n"]  # the newline is free


def test_blank_lines_get_an_invalid_request_reply() -> None:
    """An empty request line gets a reply: without one, a client that sent it would wait forever."""
    dispatcher = make_dispatcher()
    out = io.BytesIO()
    serve_stream(dispatcher, io.BytesIO(b'\n  \n\r\n{"id":1,"method":"ping"}\n'), out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(replies) == 4 and replies[-1]["pong"] is True
    for reply in replies[:3]:
        assert reply["id"] is None and reply["error"]["code"] == "invalid_request"
        assert reply["error"]["message"] == "empty request line"


def _fuzz_lines(rng: random.Random, count: int) -> list[bytes]:
    valid = [
        {"id": 1, "method": "ping"},
        {"id": "s", "method": "fill", "params": {"text": "def f(x):\n    return x\n", "spans": [[10, 23]]}},
        {"id": 3, "method": "models"},
        {"id": 4, "method": "fill", "params": {"text": "é🙂\n", "spans": [[0, 2]]}},
    ]
    atoms = [
        "{",
        "}",
        "[",
        "]",
        '"',
        ":",
        ",",
        "null",
        "true",
        "1e999",
        "-0",
        "\\u0000",
        "\\ud800",
        "\\",
        "id",
        "method",
        "params",
        "fill",
        "ping",
        "shutdown",
        "\x00",
        "\t",
        " ",
        "é",
        "🙂",
        "9" * 40,
    ]
    lines = []
    for _ in range(count):
        kind = rng.randrange(8)
        base = json.dumps(rng.choice(valid), ensure_ascii=rng.random() < 0.5).encode()
        if kind == 0:  # random bytes
            line = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80)))
        elif kind == 1:  # truncated
            line = base[: rng.randrange(len(base))]
        elif kind == 2:  # flipped bytes
            data = bytearray(base)
            for _ in range(rng.randrange(1, 6)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            line = bytes(data)
        elif kind == 3:  # JSON-ish token soup
            line = "".join(rng.choice(atoms) for _ in range(rng.randrange(1, 30))).encode("utf-8", "surrogatepass")
        elif kind == 4:  # valid JSON, wrong shapes
            obj: Any = rng.choice(
                [
                    [],
                    0,
                    "x",
                    None,
                    {"id": [], "method": "ping"},
                    {"method": None},
                    {"id": 1, "method": "fill", "params": {"text": 5}},
                    {"id": 1, "method": "fill", "params": {"text": "ab", "spans": [[1, 0]]}},
                    {"id": 1, "method": "fill", "params": {"text": "ab", "spans": [["a", None]]}},
                    {"id": 1, "method": "fill", "params": {"text": "ab", "spans": [1]}},
                    {"id": 1, "method": "models", "params": {"x": [1] * 5}},
                ]
            )
            line = json.dumps(obj).encode()
        elif kind == 5:  # deep nesting
            depth = rng.randrange(1, 3000)
            line = b"[" * depth + b"]" * rng.randrange(depth + 1)
        elif kind == 6:  # a shutdown is replaced by ping: the stream must go on to the end
            line = base.replace(b"shutdown", b"ping")
        else:
            line = base
        lines.append(line.replace(b"shutdown", b"shutdowN"))
    return lines


def test_fuzz_ten_thousand_lines_then_ping() -> None:
    rng = random.Random(20261122)
    dispatcher = make_dispatcher(max_request_bytes=4000)
    lines = _fuzz_lines(rng, 10_000)
    stream = b"\n".join(lines) + b"\n"
    expected = stream.split(b"\n")[:-1]  # every line gets a reply, an empty one too
    out = io.BytesIO()
    serve_stream(dispatcher, io.BytesIO(stream + b'{"id": "last", "method": "ping"}\n'), out)
    replies = [json.loads(line) for line in out.getvalue().decode("ascii").splitlines()]
    assert len(replies) == len(expected) + 1  # exactly one response per request line, in order
    assert all(isinstance(r, dict) and "id" in r for r in replies)
    assert all("error" not in r or set(r["error"]) >= {"code", "message"} for r in replies)
    assert sum("error" in r for r in replies) > 3000 and sum("error" not in r for r in replies) > 1000
    assert replies[-1]["id"] == "last" and replies[-1]["pong"] is True


def test_stdio_subprocess_survives_garbage_and_keeps_stdout_clean(tmp_path: Path) -> None:
    rng = random.Random(7)
    lines = _fuzz_lines(rng, 400)
    lines.insert(200, json.dumps({"id": "p", "method": "fill", "params": {"text": "ab", "print": True}}).encode())
    lines.append(b"z" * 3000)  # over the limit below
    lines.append(b'{"id": "end", "method": "ping"}')
    stream = b"\n".join(lines) + b"\n"
    expected = stream.split(b"\n")[:-1]  # every line gets a reply, an empty one too
    env = fixtures_serve.plugin_env(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "infill", "serve", "--stdio", "--max-request-bytes", "2000"],
        input=stream,
        capture_output=True,
        env=env,
        cwd=fixtures_serve.REPO_ROOT,
        timeout=120,
        check=True,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]  # stray prints went to stderr, not here
    assert len(replies) == len(expected)
    assert next(r for r in replies if r["id"] == "p")["edits"] == []
    assert replies[-2]["error"]["code"] == protocol.TOO_LARGE
    assert replies[-1] == {**replies[-1], "id": "end", "pong": True, "transport": "stdio"}
    assert b"stray output" in done.stderr and b"stray bytes on fd 1" in done.stderr


def test_serve_needs_exactly_one_transport() -> None:
    from click.testing import CliRunner

    from infill.cli import main

    assert CliRunner().invoke(main, ["serve"]).exit_code == 2
    assert CliRunner().invoke(main, ["serve", "--stdio", "--socket", "/tmp/x.sock"]).exit_code == 2


def test_identity_follows_result_changing_environment_only() -> None:
    from infill.server.dispatch import identity

    base = {"PATH": "/bin", "HOME": "/root"}
    same = [
        {**base, "TERM": "dumb"},
        {**base, "TRANSFORMERS_VERBOSITY": "error", "HF_HUB_DISABLE_PROGRESS_BARS": "1"},
        {**base, "INFILL_NO_DAEMON": "1", "INFILL_RUNTIME_DIR": "/x", "INFILL_DAEMON_IDLE_TIMEOUT": "5"},
        {**base, "HF_TOKEN": "secret"},
        {**base, "INFILL_LSP_PLUGINS": "x:y"},  # read by `infill lsp` only, which never uses the daemon
    ]
    different = [
        {**base, "CUDA_VISIBLE_DEVICES": "1"},
        {**base, "OMP_NUM_THREADS": "1"},
        {**base, "HF_HOME": "/elsewhere"},
        {**base, "INFILL_SERVER_PLUGINS": "x:y"},
        {**base, "INFILL_KINDS": "my_kind"},  # the daemon loads models of these kinds
        # where the daemon finds models (Ollama's store, the HF cache under XDG_CACHE_HOME or ~) and calibrations
        *({**base, name: "/elsewhere"} for name in ("OLLAMA_MODELS", "HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME")),
    ]
    assert all(identity(env) == identity(base) for env in same)
    assert all(identity(env)["env"] != identity(base)["env"] for env in different)
    assert {k for k in identity(base) if identity(base)[k] == identity(different[0])[k]} == {
        "protocol",
        "version",
        "package",
        "code",
        "umask",  # the process's, not the environment's
    }
