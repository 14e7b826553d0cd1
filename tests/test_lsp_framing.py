"""The language server's framing (infill.lsp.framing): every badly framed message gets an answer and the next message
is read, whatever was wrong (one bad frame made `infill lsp` deaf for good, a huge Content-Length ended it).
The reader is checked byte by byte here; a real server is fed each malformed frame and must answer the request after
it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
from fixtures_lsp import LspClient

from infill.lsp.framing import BadFrame, FrameReader

pytest.importorskip("pygls")

REQUEST = b'{"jsonrpc": "2.0", "id": 1, "method": "test/loads"}'


def frame(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def read_frames(chunks: list[bytes], until: bytes = REQUEST, limit: int = 1 << 20) -> list[bytes | BadFrame]:
    """The frames of a stream that delivers `chunks` and then stays open without sending more, up to the first
    `until`: a reader that waits for bytes that never come fails (timeout) instead of returning."""

    async def run() -> list[bytes | BadFrame]:
        pending = list(chunks)

        async def read(n: int) -> bytes:
            if pending:
                return pending.pop(0)
            await asyncio.Event().wait()  # an editor that waits for an answer
            return b""

        reader = FrameReader(read, limit)
        out: list[bytes | BadFrame] = []
        while not out or out[-1] != until:
            got = await reader.next()
            assert got is not None
            out.append(got)
        return out

    return asyncio.run(asyncio.wait_for(run(), 10))


MALFORMED: dict[str, tuple[bytes, str]] = {  # a frame, what the reader says about it
    "no-content-length": (b'Content-Type: application/json\r\n\r\n{"a": 1}', "without Content-Length"),
    "negative": (b"Content-Length: -5\r\n\r\n{}", "is not a byte count"),
    "not-a-number": (b"Content-Length: abc\r\n\r\n{}", "is not a byte count"),
    "exponent": (b"Content-Length: 1e12\r\n\r\n{}", "is not a byte count"),
    "5000-digits": (b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n{}", "is not a byte count"),
    "huge": (b"Content-Length: 1000000000000\r\n\r\n{}", "over the limit"),
    "shorter-than-the-body": (b'Content-Length: 5\r\n\r\n{"a": 12345}', ""),
    "longer-than-the-body": (b"Content-Length: 500\r\n\r\n{}", "shorter than its Content-Length"),
    "not-a-header": (b"hello\r\n\r\n", "not a message header"),
    "endless-header": (b"x" * 10_000, "a header longer than"),
    "two-lengths": (b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "two different"),
    # bytes left over run into the next header ("abcContent-Length: ..." is a well-formed field name)
    "glued-to-the-next-header": (b"Content-Length: -5\r\n\r\nabc", "is not a byte count"),
}


def test_stray_bytes_after_a_body_do_not_cost_the_next_message() -> None:
    *first, read = read_frames([frame(b"{}") + b"garbagegarbage" + frame(REQUEST)])
    assert first[0] == b"{}" and read == REQUEST
    assert all(isinstance(f, BadFrame) and f.stray for f in first[1:]), first


@pytest.mark.parametrize("case", list(MALFORMED))
def test_the_message_after_a_malformed_frame_is_read(case: str) -> None:
    bad, said = MALFORMED[case]
    *refused, read = read_frames([bad + frame(REQUEST)])
    assert read == REQUEST
    if case == "shorter-than-the-body":  # its first 5 bytes are a body (which is no JSON: a ParseError), the rest
        assert refused[0] == b'{"a":'  # are stray bytes
    else:
        assert isinstance(refused[0], BadFrame) and said in refused[0].message, refused[0]
        assert len(refused[0].message) < 200 and "\n" not in refused[0].message
    assert all(isinstance(f, BadFrame) and f.stray for f in refused[1:]), refused  # the rest of the same frame


def test_lf_only_headers_and_blank_lines_between_messages_are_accepted() -> None:
    lf_only = b"Content-Length: %d\n\n%s" % (len(REQUEST), REQUEST)
    assert read_frames([lf_only, b"\r\n\n", frame(b"{}")], until=b"{}") == [REQUEST, b"{}"]


def test_a_message_split_into_single_bytes_is_read_whole() -> None:
    data = frame(b"{}") + frame(REQUEST)
    assert read_frames([data[i : i + 1] for i in range(len(data))]) == [b"{}", REQUEST]


def test_a_header_inside_a_json_string_is_text() -> None:
    body = json.dumps({"jsonrpc": "2.0", "method": "x", "params": {"text": "Content-Length: 5\r\n\r\n{}"}}).encode()
    assert read_frames([frame(body) + frame(REQUEST)]) == [body, REQUEST]


def test_an_oversized_message_is_dropped_without_being_kept() -> None:
    body = b'{"pad": "' + b"x" * 5000 + b'"}'
    frames = read_frames([frame(body)[:2000], frame(body)[2000:] + frame(REQUEST)], limit=1000)
    assert isinstance(frames[0], BadFrame) and "over the limit of 1,000" in frames[0].message
    assert frames[1] == REQUEST


# --- a real server, fed each malformed frame -------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[LspClient]:
    client = LspClient()
    client.initialize()
    try:
        yield client
    finally:
        client.close()


def answer_after(server: LspClient, bad: bytes) -> tuple[dict[str, object], list[dict[str, object]]]:
    """Send `bad`, then a request: (its response, the ParseError responses that came before it)."""
    assert server.process.stdin is not None
    server.process.stdin.write(bad)
    server.process.stdin.flush()
    response = server.request("test/loads")
    with server.changed:
        errors = [server.responses.pop(None)] if None in server.responses else []
    return response, errors


@pytest.mark.parametrize("case", list(MALFORMED))
def test_the_server_answers_a_malformed_frame_and_the_request_after_it(server: LspClient, case: str) -> None:
    response, errors = answer_after(server, MALFORMED[case][0])
    assert "result" in response, response  # never deaf
    assert errors and errors[0]["error"]["code"] == -32700, errors  # type: ignore[index]
    assert server.process.poll() is None


def test_the_server_answers_a_body_nested_too_deeply(server: LspClient) -> None:
    response, errors = answer_after(server, frame(b"[" * 100_000 + b"]" * 100_000))
    assert "result" in response
    assert errors and "nested too deeply" in errors[0]["error"]["message"], errors  # type: ignore[index]


def test_a_request_before_initialize_or_after_shutdown_is_refused() -> None:
    client = LspClient()
    try:
        for params in (None, {}):  # a request whose params do not even fit its method is no different
            early = client.request("textDocument/completion", params)
            assert early["error"]["code"] == -32002, early  # ServerNotInitialized
        client.initialize()
        assert "result" in client.request("test/loads")
        assert "result" in client.request("shutdown")
        late = client.request("test/loads")
        assert late["error"]["code"] == -32600 and "shutting down" in late["error"]["message"], late
    finally:
        code = client.close(shutdown=False)
    assert code == 0  # shutdown, then exit
