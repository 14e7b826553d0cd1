"""`infill serve --socket PATH`: the JSON-lines protocol on a Unix domain socket.

Each connection is read by its own thread, but requests run one at a time under one lock (in arrival order
per connection), so a model is never used by two requests at once and a long request cannot interleave with
another.
The daemon exits on `shutdown`, SIGTERM/SIGINT, or after `idle_timeout` seconds without a request. A request
still running then is cancelled at its next forward pass and waited for (at most DRAIN_SECONDS): the interpreter
must not shut down under a thread inside ONNX Runtime or PyTorch, which aborts the process ("terminate called
without an active exception").
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import stat
import sys
import threading
import time
from pathlib import Path
from types import FrameType

from infill.progress import Cancelled, interrupted_when
from infill.server import lifecycle
from infill.server.dispatch import Dispatcher
from infill.server.stdio import hung_up, read_lines

DRAIN_SECONDS = 10.0  # how long a stopping server waits for the request it cancelled


class SocketInUse(Exception):
    """Another server already answers on the socket path."""


class SocketServer:
    def __init__(self, dispatcher: Dispatcher, path: Path, idle_timeout: float = 0.0) -> None:
        self.dispatcher = dispatcher
        self.path = path
        self.idle_timeout = idle_timeout  # 0 = never exit for idleness
        self.stop = threading.Event()
        self._work = threading.Lock()
        self._state = threading.Lock()
        self._busy = 0
        self._last_activity = time.monotonic()
        self._inode: int | None = None
        self._listener: socket.socket | None = None
        self._wake_read, self._wake_write = os.pipe()  # request_stop wakes the accept loop at once
        os.set_blocking(self._wake_write, False)
        self._wake_lock = threading.RLock()  # re-entered by a signal handler in the thread that holds it

    def bind(self) -> socket.socket:
        """Listen on `path` (mode 0600). A stale socket there is replaced; a live one raises SocketInUse."""
        if self._listener is not None:
            return self._listener
        try:
            return self._bind()
        except OSError as exc:  # no such folder, no permission, a path too long for a socket: say which path
            reason = exc.strerror or str(exc)
            raise lifecycle.DaemonUnavailable(f"cannot listen on {self.path}: {reason}") from None

    def _bind(self) -> socket.socket:
        guard = self.path.with_name(self.path.name + ".lock")
        with lifecycle.file_lock(guard, timeout=30.0):
            probe = lifecycle.connect(self.path, timeout=5.0)
            if probe is not None:
                probe.close()
                raise SocketInUse(f"a server is already listening on {self.path}")
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISSOCK(self.path.lstat().st_mode):
                    raise SocketInUse(f"{self.path} exists and is not a socket; refusing to replace it")
            # bind and listen under a private name, then rename into place: the path only ever names a socket
            # that accepts connections, so no client can mistake a starting daemon for a stale one
            staging = self.path.with_name(f"{self.path.name}.{os.getpid()}")
            with contextlib.suppress(FileNotFoundError):
                staging.unlink()
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            old_umask = os.umask(0o177)  # the socket is born 0600: no window where others could connect
            try:
                listener.bind(os.fsencode(staging))
            finally:
                os.umask(old_umask)
            os.chmod(staging, 0o600)
            listener.listen(64)
            os.replace(staging, self.path)  # atomically replaces a stale socket, if any
            self._inode = self.path.lstat().st_ino
            self._listener = listener
            return listener

    def request_stop(self) -> None:
        """Stop (a shutdown request, a signal): the accept loop sees it now, not at its next poll (up to 1 s
        later, which every `infill daemon stop` waited for)."""
        self.stop.set()
        with self._wake_lock, contextlib.suppress(OSError):  # OSError: full, a byte is there already
            if self._wake_write >= 0:  # -1: the loop has ended (and closed it)
                os.write(self._wake_write, b"x")

    def serve_forever(self) -> None:
        """Accept connections until stopped; then remove the socket file if it is still ours."""
        listener = self.bind()
        waiting = select.poll()  # poll, not select: no limit on descriptor numbers
        waiting.register(listener, select.POLLIN)
        waiting.register(self._wake_read, select.POLLIN)
        try:
            while not self.stop.is_set():
                timeout = self._poll_interval()
                if listener.fileno() not in (fd for fd, _ in waiting.poll(timeout * 1000)):
                    if self._idle_expired():
                        return
                    continue
                listener.settimeout(timeout)
                try:
                    conn, _ = listener.accept()
                except TimeoutError:
                    if self._idle_expired():
                        return
                    continue
                threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()
        finally:
            listener.close()
            self._unlink_if_ours()
            self._drain()
            with self._wake_lock:
                wake, self._wake_read, self._wake_write = (self._wake_read, self._wake_write), -1, -1
            for fd in wake:
                os.close(fd)

    def _drain(self) -> None:
        """Wait for the request in progress, which sees `stop` and cancels itself at its next forward pass. One
        stuck in a step that cannot be cancelled (a model load, say) is left behind by os._exit after
        DRAIN_SECONDS: the process ends without the interpreter's shutdown, which would abort under it."""
        self.stop.set()
        if self._work.acquire(timeout=DRAIN_SECONDS):
            self._work.release()
            return
        print(
            f"infill serve: pid {os.getpid()} exiting with a request still running (it did not stop within "
            f"{DRAIN_SECONDS:g} s)",
            file=sys.stderr,
            flush=True,
        )
        os._exit(0)

    def _poll_interval(self) -> float:
        if self.idle_timeout <= 0:
            return 1.0
        with self._state:
            remaining = self.idle_timeout - (time.monotonic() - self._last_activity)
        return min(1.0, max(0.05, remaining))

    def _idle_expired(self) -> bool:
        if self.idle_timeout <= 0:
            return False
        with self._state:
            return self._busy == 0 and time.monotonic() - self._last_activity >= self.idle_timeout

    def _serve_connection(self, conn: socket.socket) -> None:
        with conn:
            creds = lifecycle.peer_credentials(conn)
            if creds is not None and creds[1] != os.getuid():
                return  # the socket is 0600 in a 0700 directory; this is belt and braces
            reader = conn.makefile("rb")
            try:
                for line in read_lines(reader, self.dispatcher.max_request_bytes):
                    out = self._handle(line, conn)
                    if out:
                        conn.sendall(out)
                    if self.dispatcher.stop_requested:
                        self.request_stop()
                        return
            except OSError:
                return  # the client went away; its request (if any) has finished, nothing to clean up
            finally:
                reader.close()

    def _handle(self, line: bytes | None, conn: socket.socket) -> bytes:
        if line is not None and self.dispatcher.is_lock_free(line):
            return self.dispatcher.handle_line(line)
        with self._state:
            self._busy += 1
        try:
            with self._work:
                if self.stop.is_set():
                    return b""
                if line is None:
                    return self.dispatcher.too_large()
                context = self.dispatcher.context
                context.cancelled = lambda: self._stopping() or _peer_closed(conn)
                try:
                    with interrupted_when(lambda: self.stop.is_set() or _peer_closed(conn)):
                        return self.dispatcher.handle_line(line)
                finally:
                    context.cancelled = lambda: False
        finally:
            with self._state:
                self._busy -= 1
                self._last_activity = time.monotonic()

    def _stopping(self) -> bool:
        """False, or (the server is stopping) raises Cancelled, which the client gets as its answer."""
        if self.stop.is_set():
            raise Cancelled("the server is shutting down")
        return False

    def _unlink_if_ours(self) -> None:
        with contextlib.suppress(OSError):
            st = self.path.lstat()
            if stat.S_ISSOCK(st.st_mode) and st.st_ino == self._inode:
                self.path.unlink()


def _peer_closed(conn: socket.socket) -> bool:
    """Whether the client closed its socket (a pending request of a gone client need not finish). On Linux a
    client that only shut down its sending side (`nc -N`, a script's shutdown(SHUT_WR) after its request) still
    reads the answer: there a Unix socket reports POLLHUP only once both directions are shut. Elsewhere, where
    poll may not say, the end of the client's stream counts as its leaving, so that a gone client's run never
    writes on."""
    if sys.platform.startswith("linux"):
        return hung_up(conn)
    try:
        return conn.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def serve_socket(dispatcher: Dispatcher, path: Path, idle_timeout: float = 0.0) -> None:
    """Run a socket server in this (main) thread until shutdown, a signal, or idleness."""
    server = SocketServer(dispatcher, path, idle_timeout)
    server.bind()  # SocketInUse before anything is said: a server that cannot start says only why
    print(f"infill serve: pid {os.getpid()} starting on {path}", file=sys.stderr, flush=True)
    print(
        f"infill serve: pid {os.getpid()} listening (idle timeout {idle_timeout:g} s)",
        file=sys.stderr,
        flush=True,
    )

    def on_signal(signum: int, frame: FrameType | None) -> None:
        server.request_stop()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    server.serve_forever()
    print(f"infill serve: pid {os.getpid()} exiting", file=sys.stderr, flush=True)
