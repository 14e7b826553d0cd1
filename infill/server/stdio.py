"""`infill serve --stdio`: JSON lines on stdin, one response line per request on stdout, in order."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import BinaryIO

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
    """Serve requests from `reader` until EOF or `shutdown`; responses go to `writer`, each flushed."""
    for line in read_lines(reader, dispatcher.max_request_bytes):
        out = dispatcher.too_large() if line is None else dispatcher.handle_line(line)
        if out:
            writer.write(out)
            writer.flush()
        if dispatcher.stop_requested:
            return


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
