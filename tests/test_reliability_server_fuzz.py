"""A server must never fall over on bad input: it survives 12,000 malformed or random requests, answers every line
(in order, with one JSON object), never runs the model for them, keeps its memory bounded, and then still answers a
fill correctly.

The server is the real Dispatcher with the real `fill` handler (the CLI's run_fill) and a scripted in-process
model, over the same serve_stream loop `infill serve --stdio` runs, with the socket daemon's input limit. The
requests come from a seeded generator, so every run sends the same ones. The few-second budget holds because
malformed requests are refused before any model work.
"""

from __future__ import annotations

import gc
import io
import json
import os
import random
import tracemalloc
from typing import Any

from fixtures_cli import fake_model

from infill.server import protocol
from infill.server.dispatch import Dispatcher
from infill.server.stdio import serve_stream

MODEL = "fake-fuzz"
SOURCE = "def f(x):\n    return 0\n\n\nclass C:\n    pass\n"
MAX_REQUEST_BYTES = 64 * 1024
COUNT = 12_000


def fill(**params: Any) -> dict[str, Any]:
    return {"id": 1, "method": "fill", "params": {"text": SOURCE, "filename": "a.py", "model": MODEL, **params}}


def _junk(rng: random.Random) -> Any:
    return rng.choice([None, True, 3, -1, 2.5, "x", "\u00e9\u2603", [], [1, "a"], {"k": [None]}, {}, 10**40])


def _malformed(rng: random.Random) -> bytes:
    """One request line the server must refuse (an error reply) without running the model."""
    kind = rng.randrange(26)
    if kind == 0:  # random bytes: mostly not UTF-8, never JSON
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 80))).replace(b"\n", b"~") + b"\xff"
    if kind == 1:  # JSON, but not an object
        return json.dumps(rng.choice([1, "fill", [1, 2], None, True, [{"method": "fill"}]])).encode()
    if kind == 2:  # a valid request, cut short
        line = json.dumps(fill(span="2")).encode()
        return line[: rng.randrange(1, len(line) - 1)]
    if kind == 3:  # bad id
        return json.dumps({"id": rng.choice([True, 1.5, [1], {"a": 1}]), "method": "ping"}).encode()
    if kind == 4:  # bad or unknown method
        obj = {"id": 4, "method": rng.choice(["", 7, None, "fil", "FILL", "shutdown_now", "__init__", "x" * 300])}
        return json.dumps(obj).encode()
    if kind == 5:  # params not an object
        return json.dumps({"id": 5, "method": "fill", "params": rng.choice([[1], "text", 3, True])}).encode()
    if kind == 6:  # unknown parameter
        return json.dumps(fill(span="2", **{rng.choice(["spam", "Span", "text2", "file"]): _junk(rng)})).encode()
    if kind == 7:  # a parameter of the wrong type
        key = rng.choice(["text", "span", "k", "temperature", "syntax_check", "model", "candidates", "tokens"])
        value = rng.choice(
            [{"a": 1}, [None], True if key not in ("syntax_check",) else "no", 1.5 if key == "k" else []]
        )
        return json.dumps(fill(**{"span": "2", key: value})).encode()
    if kind == 8:  # numbers JSON cannot hold, or too large for a float
        key = rng.choice(["temperature", "top_p", "epsilon", "threshold", "gamma"])
        return (
            json.dumps(fill(span="2"))
            .encode()
            .replace(
                b'"span"',
                b'"%s": %s, "span"'
                % (key.encode(), rng.choice([b"NaN", b"Infinity", b"-Infinity", b"1e999", b"-1e400", b"9" * 400])),
            )
        )
    if kind == 9:  # text and path, or neither
        params = rng.choice([{"text": "a", "path": "b.py", "span": "1"}, {"span": "1"}, {"model": MODEL}])
        return json.dumps({"id": 9, "method": "fill", "params": params}).encode()
    if kind == 10:  # bad spans
        span = rng.choice(["0", "99", "3:2", "1:99-1:100", "x:y", "-1", "2:1-1:1", "", "1:2:3", "７"])
        return json.dumps(fill(span=span)).encode()
    if kind == 11:  # overlapping spans, selectors that find nothing
        params = rng.choice(
            [
                {"span": ["1:3", "2:4"]},
                {"marker": "<NOPE>"},
                {"marker": ""},
                {"function": "nope"},
                {"class": "Nope"},
                {"node": "bogus"},
                {},
            ]
        )
        return json.dumps(fill(**params)).encode()
    if kind == 12:  # files that cannot be read
        params = {"path": rng.choice(["/nonexistent/x.py", "/", "/dev/null", "/proc"]), "span": "1", "model": MODEL}
        if rng.random() < 0.5:
            params["cwd"] = rng.choice(["/nonexistent", "/tmp"])
        return json.dumps({"id": 12, "method": "fill", "params": params}).encode()
    if kind == 13:  # too much work asked for
        key = rng.choice(["candidates", "max_resample"])
        return json.dumps(fill(span="2", **{key: rng.choice([101, 10**6, 2**63])})).encode()
    if kind == 14:  # token budgets no model can use
        return json.dumps(fill(span="2", tokens=rng.choice([0, -5, 10**6, 2**40]))).encode()
    if kind == 15:  # decoding settings no decoder can use
        params = rng.choice(
            [
                {"decoder": "nope"},
                {"decoder": "s2d2"},
                {"top_p": 0},
                {"top_p": 1.5},
                {"temperature": -1},
                {"seed": 2**70},
                {"k": 0},
                {"draft": "magic"},
                {"gamma": 0},
                {"precision": "fp8"},
                {"device": "tpu"},
            ]
        )
        return json.dumps(fill(span="2", **params)).encode()
    if kind == 16:  # a model nobody has
        return json.dumps(fill(span="2", model=rng.choice(["nope-model", "/nonexistent/model", ""]))).encode()
    if kind == 17:  # docstrings with bad parameters
        params = rng.choice(
            [
                {"text": "x", "path": "y"},
                {},
                {"text": 3},
                {"text": "def f(): pass\n", "bogus": 1},
                {"path": "/nonexistent.py"},
                {"text": "def f(): pass\n", "seed": "x"},
            ]
        )
        return json.dumps({"id": 17, "method": "docstrings", "params": params}).encode()
    if kind == 18:  # malformed docstrings runs of the daemon's own method
        params = rng.choice([{"paths": []}, {"paths": 3}, {"paths": ["x.py"], "overrides": {"bogus": 1}}, {}])
        return json.dumps({"id": 18, "method": "docstrings_command", "params": params}).encode()
    if kind == 19:  # nested too deeply
        depth = rng.randrange(500, 5000)
        return b"[" * depth + b"]" * rng.randrange(depth + 1)
    if kind == 20:  # over --max-request-bytes
        return b'{"id": 20, "method": "fill", "params": {"text": "' + b"a" * (MAX_REQUEST_BYTES + 10) + b'"}}'
    if kind == 21:  # empty or blank line
        return rng.choice([b"", b"   ", b"\t", b"\r"])
    if kind == 22:  # lone surrogates, which UTF-8 cannot carry
        return rng.choice([b'{"id": "\\ud800", "method": "ping"}', b'{"id": 1, "method": "\\udfff"}'])
    if kind == 24:  # integers no parameter can use, some of them too long for Python to even convert
        key = rng.choice(["k", "seed", "tokens", "candidates", "top_k", "block_size", "bogus"])
        number = rng.choice([b"18446744073709551617", b"-" + b"9" * 30, b"9" * 5000, b"1" + b"0" * 400])
        return json.dumps(fill(span="2")).encode().replace(b'"span"', b'"%s": %s, "span"' % (key.encode(), number))
    if kind == 25:  # what JSON allows in a string but no text, path or name holds: NUL, a lone surrogate
        bad = rng.choice([b"\\u0000", b"\\ud800", b"\\udfff\\ud800", b"a\\u0000"])
        where = rng.choice([b'"text": "x%sy"', b'"filename": "a%s.py"', b'"span": "%s"', b'"marker": "%s"', b'"%s": 1'])
        params = b'{"span": "2", "model": "%s", %s}' % (MODEL.encode(), where % bad)
        return b'{"id": 25, "method": "fill", "params": %s}' % params
    # a malformed request of the daemon's own method
    request = rng.choice(
        [
            {"file": "-", "selections": [{"kind": "nope", "value": "1"}], "stdin": SOURCE},
            {"file": "-", "selections": [], "stdin": SOURCE, "bogus": 1},
            {"file": "-", "selections": [{"kind": "span", "value": "9"}], "stdin": SOURCE, "model": {"name": MODEL}},
        ]
    )
    return json.dumps({"id": 23, "method": "fill_command", "params": request}).encode()


def _rss() -> int:
    """Resident memory of this process in bytes (0 where /proc is missing: the RSS check is then vacuous, the
    tracemalloc one is not)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return 0


def _stream(lines: list[bytes]) -> io.BytesIO:
    return io.BytesIO(b"".join(line + b"\n" for line in lines))


def _serve(dispatcher: Dispatcher, stream: io.BytesIO) -> bytes:
    """What the server writes for the request lines of `stream` (one reply line each)."""
    out = io.BytesIO()
    serve_stream(dispatcher, stream, out)
    return out.getvalue()


def test_server_survives_malformed_requests_and_still_fills() -> None:
    rng = random.Random(12)
    lines = [_malformed(rng) for _ in range(COUNT)]
    dispatcher = Dispatcher(max_request_bytes=MAX_REQUEST_BYTES, max_input_bytes=protocol.DEFAULT_MAX_INPUT_BYTES)
    with fake_model(["return x * 2"], name=MODEL) as model:
        warm = _serve(dispatcher, _stream(lines[:1000]))  # first use of every code path: imports, caches
        rss_before = _rss()
        middle = _stream(lines[1000:4000])
        tracemalloc.start()  # exact accounting on a slice (it slows allocation down a few times)
        try:
            gc.collect()
            baseline, _ = tracemalloc.get_traced_memory()
            traced = _serve(dispatcher, middle)
            gc.collect()  # failed requests leave reference cycles (exception <-> traceback) for the collector
            current, peak = tracemalloc.get_traced_memory()
            current -= len(traced)  # the replies themselves
        finally:
            tracemalloc.stop()
        rest = _serve(dispatcher, _stream(lines[4000:]))
        rss_growth = _rss() - rss_before
        assert model.forwards == 0  # every request was refused before the model ran
        good = json.loads(dispatcher.handle_line(json.dumps(fill(span="2")).encode()))
    replies = [json.loads(line) for line in (warm + traced + rest).splitlines()]
    assert len(replies) == COUNT  # one reply per line, an empty one too
    # an error reply; fill_command (the daemon's own method) answers with the command's exit code and stderr
    errors = [r["error"] for r in replies if "error" in r]
    commands = [r for r in replies if "error" not in r]
    assert all(r["exit_code"] == 2 and len(r["stderr"]) == 1 and r["stdout"] == "" for r in commands), commands[:3]
    assert len(errors) > COUNT * 0.9
    assert all(set(e) >= {"code", "message", "exit_code"} for e in errors)
    assert all(e["code"] != protocol.INTERNAL_ERROR for e in errors), [
        e for e in errors if e["code"] == "internal_error"
    ][:3]
    assert all(e["exit_code"] == 2 or e["code"] == protocol.MODEL_ERROR for e in errors)
    codes = {e["code"] for e in errors}
    assert {"parse_error", "invalid_request", "unknown_method", "too_large", "input_error"} <= codes, codes
    refused = [e["message"] for e in errors if e["code"] == "invalid_request"]
    for reason in ("integers must be at most", "NUL characters are not allowed", "strings must be valid Unicode"):
        assert any(reason in message for message in refused), reason  # refused as what they are
    assert current - baseline < 2**20  # nothing accumulates from request to request
    assert peak - baseline < 16 * MAX_REQUEST_BYTES  # no request used much more than its own size
    # and the process did not grow without bound over the whole run: a leak of a request's size per request would
    # be hundreds of MiB; the allocator's own growth after earlier tests in this process reached 46 MiB
    assert rss_growth < 64 * 2**20
    assert good["edits"] == [
        {
            "start_line": 2,
            "end_line": 2,
            "start_byte": 10,
            "end_byte": 22,
            "text": "    return x * 2",
            "score": good["edits"][0]["score"],
        }
    ]
    assert model.forwards > 0
