"""`infill serve --stdio`: JSON lines on stdin, one response line per request on stdout, in order."""

from __future__ import annotations

import os
import select
import socket
import sys
from collections.abc import Callable, Iterator
from typing import BinaryIO

from infill.progress import interrupted_when
from infill.server.dispatch import Dispatcher

_DISCARD_CHUNK = 1 << 16


def read_lines(stream: BinaryIO, limit: int) -> Iterator[bytes | None]:
    """Yield each line of `stream` (newline included), or None for a line longer than `limit` bytes.

    An oversized line is skipped in chunks, so memory stays bounded by `limit` whatever the client sends."""
    while True:
        line = stream.readline(limit + 1)
        if not line:
            return
        if len(line) > limit and not line.endswith(b"\n"):
            while True:  # drop the rest of the oversized line
                chunk = stream.readline(_DISCARD_CHUNK)
                if not chunk or chunk.endswith(b"\n"):
                    break
            yield None
            continue
        yield line


def serve_stream(dispatcher: Dispatcher, reader: BinaryIO, writer: BinaryIO) -> None:
    """Serve requests from `reader` until EOF or `shutdown`; responses go to `writer`, each flushed. A request
    whose answer can no longer be read (the reader of `writer`, a pipe or socket, closed it) is cancelled, and
    the write that follows ends the server (exit 141)."""
    gone = _reader_gone(writer)
    for line in read_lines(reader, dispatcher.max_request_bytes):
        if line is None:
            out = dispatcher.too_large()
        else:
            dispatcher.context.cancelled = gone
            try:
                with interrupted_when(gone):
                    out = dispatcher.handle_line(line)
            finally:
                dispatcher.context.cancelled = lambda: False
        if out:
            writer.write(out)
            writer.flush()
        if dispatcher.stop_requested:
            return


def _reader_gone(writer: BinaryIO) -> Callable[[], bool]:
    """Whether the reader of `writer` went away: poll's POLLERR on a pipe or socket whose other end is closed;
    never, for a stream that is not a file descriptor or where poll is missing."""
    try:
        fd = writer.fileno()
    except (AttributeError, OSError, ValueError):
        return lambda: False
    if not hasattr(select, "poll"):
        return lambda: False

    return lambda: hung_up(fd)


def hung_up(target: int | socket.socket) -> bool:
    """Whether poll says that the other end of `target` (a file descriptor or a socket) is closed."""
    poller = select.poll()
    poller.register(target, select.POLLHUP | select.POLLERR)
    try:
        return any(events & (select.POLLHUP | select.POLLERR | select.POLLNVAL) for _, events in poller.poll(0))
    except OSError:
        return True


def protocol_stdout() -> BinaryIO:
    """The process's stdout kept for a protocol alone: a private duplicate of file descriptor 1, after which fd 1
    and sys.stdout point at stderr, so a stray print (ours, a library's, or C code's) can never corrupt the
    stream. `infill serve --stdio` and `infill lsp` write their responses to it."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "wb")


def serve_stdio(dispatcher: Dispatcher) -> None:
    """Serve on the process's stdin/stdout (responses on protocol_stdout())."""
    with protocol_stdout() as writer:
        serve_stream(dispatcher, sys.stdin.buffer, writer)
