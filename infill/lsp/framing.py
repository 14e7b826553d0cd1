"""The language server's base protocol, read defensively: header lines (`Content-Length: N`), a blank line, then N
bytes of JSON. pygls's own reader goes deaf for good after one badly framed message; this one never does.

Every malformed frame gets one error response (ParseError, id null, as JSON-RPC answers what it cannot read) and
one line on stderr, and reading resynchronises on the next header:

- header lines may end in LF alone (accepted, as most servers do); blank lines between messages are skipped;
- a header block without Content-Length, or with one that is not a plain byte count (negative, not a number,
  more than 18 digits), is refused, and the bytes up to the next header are skipped;
- a message over MAX_MESSAGE_BYTES is refused without being held in memory: its bytes are read and dropped;
- bytes outside any message (a body longer than its Content-Length said, stray text) are skipped;
- a body shorter than its Content-Length said is cut where the next header starts. A valid JSON body can never
  hold `Content-Length: N` followed by a raw line break (JSON strings escape line breaks, and the letters are no
  JSON outside a string), so finding one inside a body means the body ended early, and no reply waits for bytes
  that will never come.

The body itself is JSON-decoded here and handed to pygls's protocol: a body that is not JSON, not UTF-8, or nested
too deeply for the decoder also gets a ParseError response. Standard library only (pygls for the server types).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from threading import Event
from typing import TYPE_CHECKING, Any, BinaryIO, cast

if TYPE_CHECKING:
    from pygls.lsp.server import LanguageServer

MAX_MESSAGE_BYTES = 64 * 1024 * 1024  # a document this size is far over any fill's limit; its didOpen still fits
MAX_HEADER_BYTES = 8 * 1024  # the header block; the base protocol has two short headers
_CHUNK = 64 * 1024
_OVERLAP = 128  # bytes kept when dropping, so a header split between two reads is still found

# a header line that starts a message: the only place `Content-Length: N` followed by a line break can be
_HEADER = re.compile(rb"content-length[ \t]*:[ \t]*[0-9]+[ \t]*\r?\n", re.IGNORECASE)
_HEADER_START = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)
_BLOCK_END = re.compile(rb"\r?\n\r?\n")
_FIELD = re.compile(rb"([!#$%&'*+.^_`|~0-9A-Za-z-]+)[ \t]*:[ \t]*(.*?)[ \t]*")
_BYTE_COUNT = re.compile(rb"[0-9]{1,18}")

logger = logging.getLogger("infill.lsp")


@dataclass(frozen=True)
class BadFrame:
    """What was wrong with a frame (one line); `stray`: bytes outside any message, which after a frame that was
    already refused are that frame's rest, not news."""

    message: str
    stray: bool = False


Frame = bytes | BadFrame


class FrameReader:
    """Frames from a byte stream: `await next()` gives a message body, a BadFrame (reading goes on after it), or
    None at the end of the stream. `read(n)` returns up to n bytes as soon as any are there (b"" at the end)."""

    def __init__(self, read: Callable[[int], Awaitable[bytes]], max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self._read = read
        self.max_message_bytes = max_message_bytes
        self._buffer = bytearray()
        self._ended = False
        self._stray = False  # bytes up to the next header are to be dropped (after a header that never ended)

    async def _more(self) -> bool:
        if self._ended:
            return False
        chunk = await self._read(_CHUNK)
        if not chunk:
            self._ended = True
            return False
        self._buffer += chunk
        return True

    async def next(self) -> Frame | None:
        block = await self._header_block()
        if not isinstance(block, bytes):
            return block
        length = self._content_length(block)
        if isinstance(length, BadFrame):
            return length
        if length > self.max_message_bytes:
            await self._take(length, keep=False)
            return BadFrame(
                f"a message of {length:,} bytes is over the limit of {self.max_message_bytes:,}; it was skipped"
            )
        return await self._take(length, keep=True)

    async def _header_block(self) -> bytes | BadFrame | None:
        """The next header block (its lines, without the blank line that ends it), or a BadFrame for stray bytes
        before it, or None at the end of the stream."""
        while True:
            if self._stray:
                found = _HEADER.search(self._buffer)
                if found is None:
                    del self._buffer[: max(0, len(self._buffer) - _OVERLAP)]
                else:
                    del self._buffer[: found.start()]
                    self._stray = False
                    continue
            else:
                while self._buffer.startswith((b"\r\n", b"\n")):  # blank lines between messages
                    del self._buffer[: 1 if self._buffer.startswith(b"\n") else 2]
                end = _BLOCK_END.search(self._buffer, 0, MAX_HEADER_BYTES + 4)
                if end is not None:
                    block = bytes(self._buffer[: end.start()])
                    del self._buffer[: end.end()]
                    return self._resynchronised(block)
                if len(self._buffer) > MAX_HEADER_BYTES:
                    self._stray = True
                    return BadFrame(f"a header longer than {MAX_HEADER_BYTES:,} bytes; skipped to the next message")
            if not await self._more():
                return None

    def _resynchronised(self, block: bytes) -> bytes | BadFrame:
        """A block made of header lines as it is; for one with stray bytes first, a BadFrame for those, and its
        last Content-Length header and the lines after it go back to be read again."""
        starts = list(_HEADER_START.finditer(block))
        # "abcContent-Length: 40" is a well-formed field too (any token is a name): stray bytes glued to a header
        glued = any(m.start() > 0 and block[m.start() - 1 : m.start()] != b"\n" for m in starts)
        if not glued and all(_FIELD.fullmatch(line.rstrip(b"\r")) for line in block.split(b"\n")):
            return block
        if not starts or starts[-1].start() == 0:
            return block  # _content_length says what is wrong with it
        skipped = starts[-1].start()
        stray = BadFrame(f"{skipped:,} byte(s) outside any message were skipped", stray=True)
        tail = block[skipped:]
        if not all(_FIELD.fullmatch(line.rstrip(b"\r")) for line in tail.split(b"\n")):
            return stray
        self._buffer[:0] = tail + b"\r\n\r\n"  # read again after the stray bytes are reported
        return stray

    def _content_length(self, block: bytes) -> int | BadFrame:
        values = []
        for line in block.split(b"\n"):
            field = _FIELD.fullmatch(line.rstrip(b"\r"))
            if field is None:
                return BadFrame(f"not a message header: {_shown(line)}")
            if field.group(1).lower() == b"content-length":
                values.append(field.group(2))
        if not values:
            return BadFrame("a message header without Content-Length")
        if len(set(values)) > 1:
            return BadFrame("a message header with two different Content-Length values")
        if not _BYTE_COUNT.fullmatch(values[0]):
            return BadFrame(f"Content-Length {_shown(values[0])} is not a byte count")
        return int(values[0])

    async def _take(self, length: int, keep: bool) -> bytes | BadFrame | None:
        """The next `length` bytes (`keep`), or drop them; a BadFrame where a header starts before they end (the
        body was shorter than its Content-Length), None at the end of the stream."""
        scanned = 0
        while True:
            found = _HEADER.search(self._buffer, max(0, scanned - _OVERLAP))
            if found is not None and found.start() < length:
                del self._buffer[: found.start()]
                return BadFrame("a message shorter than its Content-Length; it was skipped") if keep else b""
            if len(self._buffer) >= length:
                taken = bytes(self._buffer[:length]) if keep else b""
                del self._buffer[:length]
                return taken
            if not keep and len(self._buffer) > _CHUNK:
                dropped = len(self._buffer) - _OVERLAP
                del self._buffer[:dropped]
                length -= dropped
            scanned = len(self._buffer)
            if not await self._more():
                return None


def _shown(raw: bytes) -> str:
    """Raw header bytes as a short printable excerpt."""
    text = raw.decode("ascii", "backslashreplace")
    return repr(text if len(text) <= 40 else f"{text[:20]}...({len(raw):,} bytes)")


class InvalidMessage(Exception):
    """A JSON-RPC message that is JSON but no request, response or notification (an id that is not a string, an
    integer or null; an id with neither a method nor a result): answered InvalidRequest."""

    def __init__(self, message: str, request_id: int | str | None) -> None:
        super().__init__(message)
        self.message, self.request_id = message, request_id


def decode(body: bytes, structure: Callable[[dict[str, Any]], Any]) -> Any:
    """A body as pygls's protocol reads it (`structure`: its object hook). ValueError for a body that is not JSON,
    not UTF-8, or nested too deeply to decode; InvalidMessage for a message JSON-RPC does not allow. A request
    without params (JSON-RPC allows it) gets params null, so an unknown method is answered MethodNotFound."""

    def hook(obj: dict[str, Any]) -> Any:
        if "jsonrpc" in obj:  # the message itself (its params' objects have no "jsonrpc")
            request_id = obj.get("id")
            if "id" in obj and (isinstance(request_id, bool) or not isinstance(request_id, int | str | None)):
                raise InvalidMessage('"id" must be a string, an integer or null', None)
            if "id" in obj and not any(k in obj for k in ("method", "result", "error")):
                raise InvalidMessage("a message with an id needs a method, a result or an error", request_id)
            if "method" in obj and "params" not in obj:
                obj["params"] = None
        return structure(obj)

    try:
        return json.loads(body, object_hook=hook)
    except RecursionError:
        raise ValueError("nested too deeply") from None


async def serve(reader: FrameReader, server: LanguageServer, stop: Event) -> None:
    """Hand each frame to the server's protocol until the stream ends or the server stops. A bad frame gets a
    ParseError response (id null) and a line on stderr; a body that cannot be read goes to the server's
    report_server_error, as in pygls's own loop."""
    from pygls.exceptions import JsonRpcException, JsonRpcInvalidRequest, JsonRpcParseError

    refused = False  # the frame before was refused: its stray rest needs no second answer
    while not stop.is_set():
        frame = await reader.next()
        if frame is None:
            return
        if isinstance(frame, BadFrame):
            logger.warning("%s", frame.message)
            if not (frame.stray and refused):
                error = JsonRpcParseError(frame.message).to_response_error()
                server.protocol._send_response(cast(Any, None), error=error)
            refused = True
            continue
        refused = False
        try:
            server.protocol.handle_message(decode(frame, server.protocol.structure_message))
        except InvalidMessage as exc:
            logger.warning("%s", exc.message)
            error = JsonRpcInvalidRequest(exc.message).to_response_error()
            server.protocol._send_response(cast(Any, exc.request_id), error=error)
        except Exception as exc:  # noqa: BLE001 - as pygls's loop: report it, serve the next message
            refused = isinstance(exc, ValueError)
            server.report_server_error(exc, JsonRpcException)
        # a request's handler is a task: let it start (it takes its document and position as it begins) before
        # the next message, a change the client sent after the request, is applied
        await asyncio.sleep(0)


class DaemonReads:
    """Reads of a blocking stream, each an awaitable, done in one daemon thread. A read blocked on a client that
    keeps its end open (a SIGTERM, a client that stopped reading the answers) must not hold the process at its
    exit, as a thread of an executor would: the interpreter joins those before it exits. `end()` makes the read
    in progress, and every later one, return b"" (the end of the stream)."""

    def __init__(self, read: Callable[[int], bytes], loop: asyncio.AbstractEventLoop) -> None:
        import queue

        self._read, self._loop = read, loop
        self._asks: queue.SimpleQueue[tuple[int, asyncio.Future[bytes]]] = queue.SimpleQueue()
        self._pending: asyncio.Future[bytes] | None = None
        self._ended = False
        threading.Thread(target=self._work, name="lsp-stdin", daemon=True).start()

    def __call__(self, n: int) -> Awaitable[bytes]:
        future: asyncio.Future[bytes] = self._loop.create_future()
        if self._ended:
            future.set_result(b"")
        else:
            self._pending = future
            self._asks.put((n, future))
        return future

    def end(self) -> None:
        """From any thread: the stream is over for the reader."""

        def now() -> None:
            self._ended = True
            if self._pending is not None:
                _resolve(self._pending, b"")

        self._deliver(now)

    def _work(self) -> None:
        while True:
            n, future = self._asks.get()
            try:
                data = self._read(n)
            except (OSError, ValueError):  # a closed or broken stream is its end
                data = b""
            if not self._deliver(functools.partial(_resolve, future, data)):
                return
            if not data:
                return

    def _deliver(self, call: Callable[[], object]) -> bool:
        try:
            self._loop.call_soon_threadsafe(call)
        except RuntimeError:  # the loop has closed: nobody waits for reads any more
            return False
        return True


def _resolve(future: asyncio.Future[bytes], data: bytes) -> None:
    if not future.done():
        future.set_result(data)


class ClientWriter:
    """pygls's writer for the client's end of a pipe. When the client has closed it (it crashed, or stopped
    reading), one line says so and `closed` runs (it ends the reading), instead of a traceback for every answer
    that cannot be sent."""

    def __init__(self, out: BinaryIO, closed: Callable[[], None]) -> None:
        self._out, self._closed = out, closed
        self.broken = False

    def write(self, data: bytes) -> None:
        if self.broken:
            return
        try:
            self._out.write(data)
            self._out.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.broken = True
            logger.error("the client closed its end; shutting down")
            _to_devnull(self._out)  # what is still buffered for the dead pipe goes nowhere, quietly
            self._closed()

    def close(self) -> None:
        try:
            self._out.close()
        except OSError:
            pass


def serve_stdio(server: LanguageServer, stdin: BinaryIO | None = None, stdout: BinaryIO | None = None) -> None:
    """pygls's `start_io`, reading with FrameReader: until the stream ends, the exit notification, a SIGTERM, or
    the client's closing of the server's output."""
    source = stdin if stdin is not None else sys.stdin.buffer
    stop = Event()
    server._stop_event = stop
    reads: list[DaemonReads] = []

    def closed() -> None:
        for each in reads:
            each.end()

    writer = ClientWriter(stdout if stdout is not None else sys.stdout.buffer, closed)
    server.protocol.set_writer(writer)

    async def run() -> None:
        reads.append(DaemonReads(_reader(source), asyncio.get_running_loop()))
        await serve(FrameReader(reads[0]), server, stop)

    try:
        run_until_terminated(run())
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.shutdown()
    if writer.broken:  # the command's exit: 141, stdout's reader went away
        raise BrokenPipeError("the client closed its end")


def _reader(source: BinaryIO) -> Callable[[int], bytes]:
    """Reads of up to n bytes of `source`: of its file descriptor where it has one. A daemon thread blocked inside
    a buffered stream's read holds the stream's lock, and the interpreter aborts when it finds the lock held as it
    closes the stream at exit."""
    import io
    import os

    try:
        fd = source.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):
        return getattr(source, "read1", source.read)
    return functools.partial(os.read, fd)


def _to_devnull(out: BinaryIO) -> None:
    import os

    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, out.fileno())
        os.close(null)
    except (AttributeError, OSError, ValueError):
        pass


def _peer_left(writer: asyncio.StreamWriter) -> bool:
    """Whether the other end of a TCP connection has closed it (its end of input waits in the socket, maybe not
    read yet), or reset it."""
    import socket

    transport_socket = writer.get_extra_info("socket")
    if transport_socket is None:
        return True
    try:
        with transport_socket.dup() as sock:
            sock.setblocking(False)  # as asyncio's own (MSG_DONTWAIT is not everywhere)
            return sock.recv(1, socket.MSG_PEEK) == b""
    except (BlockingIOError, InterruptedError):  # nothing to read: still connected
        return False
    except OSError:  # reset, or already closed here
        return True


def serve_tcp(server: LanguageServer, host: str, port: int) -> None:
    """pygls's `start_tcp`, reading with FrameReader, for one client at a time. While a client is connected,
    another is refused (closed at once, a line on stderr): it would take over the first one's answers. A client
    that leaves without sending a byte (a port probe, `nc -z`) leaves the server waiting for the next; one that
    did talk ends the session as the end of stdin does. A client that arrives while the one before has left but
    its session is not over yet (a probe and the real client at once: its end of input not read yet, on a loaded
    machine) waits for that session's end, and is served unless it ended the server."""
    stop = Event()
    server._stop_event = stop
    busy = False
    current: asyncio.StreamWriter | None = None
    free = asyncio.Event()  # set while no session runs (made here: bound to the loop at its first wait)
    free.set()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal busy, current
        while busy and current is not None and _peer_left(current):
            await free.wait()
        if stop.is_set():  # the session it waited for ended the server
            writer.close()
            return
        if busy:
            logger.warning("refused a second client on port %d: one client at a time", port)
            writer.close()
            return
        busy, current = True, writer
        free.clear()
        received = 0

        async def read(n: int) -> bytes:
            nonlocal received
            data = await reader.read(n)
            received += len(data)
            return data

        server.protocol.set_writer(writer)
        try:
            await serve(FrameReader(read), server, stop)
        except asyncio.CancelledError:  # the server stops (SIGTERM) with a client connected: end quietly
            return
        finally:
            busy, current = False, None
            free.set()
        if received or stop.is_set():
            server.shutdown()
        else:
            writer.close()

    async def listen() -> None:
        listener = await asyncio.start_server(connection, host, port)
        server._server = listener
        async with listener:
            await listener.serve_forever()

    try:
        run_until_terminated(listen())
    except asyncio.CancelledError:
        pass


def run_until_terminated(main: Coroutine[Any, Any, None]) -> None:
    """`asyncio.run(main)`, with SIGTERM taken by the event loop: it cancels `main`, and Terminated is raised once
    the loop has closed (the command's exit code and line). Raised by the process's own handler instead, it could
    land inside one of the loop's callbacks, where asyncio logs any exception other than SystemExit and
    KeyboardInterrupt and carries on: the server went on running."""
    from infill.errors import Terminated

    terminated = Event()

    async def guarded() -> None:
        task = asyncio.current_task()
        if threading.current_thread() is threading.main_thread() and task is not None:

            def on_term() -> None:
                terminated.set()
                task.cancel()

            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_term)
        await main

    previous = signal.getsignal(signal.SIGTERM)  # the loop leaves SIGTERM at its default when it closes
    try:
        asyncio.run(guarded())
    except asyncio.CancelledError:
        if not terminated.is_set():
            raise
    finally:
        if threading.current_thread() is threading.main_thread() and previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if terminated.is_set():
        raise Terminated()
