"""The client side of the per-user daemon, behind `infill fill|docstrings --daemon auto|on|off`.

    result = request("fill", params, mode)   # the result dict, or None: do the work in-process

Every failure of the daemon (none running and none may be started, unsafe runtime directory, spawn failure,
version mismatch that a restart does not fix, crash or kill mid-request, timeout, protocol or internal error)
returns None, and the caller runs the same function in-process, so the output is the same either way.
Errors the work itself raises (bad span, marker not found, ...) are re-raised here as the same
InfillError subclass.

Standard library only: importing this module (and calling it) never imports torch or transformers.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any, Literal

from infill import environment
from infill.models import registry
from infill.server import lifecycle, protocol
from infill.server.lifecycle import DaemonUnavailable, Paths

DaemonMode = Literal["auto", "on", "off"]
DAEMON_MODES: tuple[str, ...] = ("auto", "on", "off")

PING_TIMEOUT = 15.0  # seconds; generous because the machine may be loaded
SPAWN_TIMEOUT = 60.0  # for a new daemon to answer its first ping
DEATH_WAIT = 1.0  # for a daemon that cut a ping's connection to show as exited (then a fresh one is started)
LOCK_TIMEOUT = 30.0  # for another client that is starting the daemon (not at all if it is stopped: lifecycle.file_lock)
DEFAULT_REQUEST_TIMEOUT = 3600.0  # a fill on a slow machine can be long; override with INFILL_DAEMON_TIMEOUT

log = logging.getLogger("infill.server")


class Connection:
    """One connection to a daemon; requests on it are answered in order."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader = sock.makefile("rb")
        self._next_id = 0
        self.ping: dict[str, Any] = {}  # the daemon's answer to the first ping (see _open)
        creds = lifecycle.peer_credentials(sock)
        self.peer_pid = creds[0] if creds is not None else None
        if creds is not None and creds[1] != os.getuid():
            self.close()
            raise DaemonUnavailable(f"the daemon socket belongs to uid {creds[1]}")

    def call(self, method: str, params: Mapping[str, Any], timeout: float) -> dict[str, Any]:
        """Send one request and return its response object (which may hold an "error")."""
        self._next_id += 1
        line = protocol.encode({"id": self._next_id, "method": method, "params": dict(params)})
        self.sock.settimeout(timeout)
        self.sock.sendall(line)
        reply_line = self.reader.readline()
        if not reply_line.endswith(b"\n"):
            raise DaemonUnavailable("the daemon closed the connection")
        reply = json.loads(reply_line)
        if not isinstance(reply, dict) or reply.get("id") != self._next_id:
            raise DaemonUnavailable("the daemon answered out of turn")
        return reply

    def close(self) -> None:
        self.reader.close()
        self.sock.close()


def compatible(ping: Mapping[str, Any], env: Mapping[str, str] | None = None) -> bool:
    """Same protocol, version, copy of the code and relevant environment; else the daemon restarts."""
    return not differences(ping, env)


def differences(ping: Mapping[str, Any], env: Mapping[str, str] | None = None) -> list[str]:
    """What of dispatch.identity differs between a daemon (its ping) and this process: "protocol", "version",
    "package" (another copy of the code), "code" (its files, or a plugin module it imported from outside the
    package, changed since), "env" (a variable that can change a result) or "umask" (a new file's mode)."""
    from infill.server.dispatch import identity

    differ = [key for key, value in identity(env).items() if ping.get(key) != value]
    if "code" not in differ and lifecycle.changed_outside(ping.get("outside")):
        differ.append("code")
    return differ


def is_ci(env: Mapping[str, str]) -> bool:
    return env.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def daemon_allowed(mode: str, env: Mapping[str, str]) -> bool:
    """Whether a command may use a daemon at all. `auto` never does in CI (CI set) or with INFILL_NO_DAEMON=1;
    `on` yields only to INFILL_NO_DAEMON=1."""
    if mode not in DAEMON_MODES:
        raise ValueError(f"daemon mode must be one of {DAEMON_MODES}, not {mode!r}")
    if mode == "off" or environment.enabled("INFILL_NO_DAEMON", env):
        return False
    if os.name != "posix" or not hasattr(socket, "AF_UNIX"):
        return False  # Unix sockets and flock: POSIX only
    if mode == "auto" and is_ci(env):
        return False
    return True


def request(
    method: str,
    params: Mapping[str, Any],
    mode: str = "auto",
    *,
    model: str | None = None,
    env: Mapping[str, str] | None = None,
    idle_timeout: float | None = None,
    timeout: float | None = None,
) -> dict[str, Any] | None:
    """Run `method` in the user's daemon, starting one if needed. None means: do it in-process.

    `model` is the model name the request will load; a name registered in this process only (a test's fake, a
    plugin) is invisible to a daemon, so such requests stay in-process."""
    env = os.environ if env is None else env
    if not daemon_allowed(mode, env):
        return None
    if model is not None and model in registry.registered():
        return None
    if timeout is None:
        timeout = _seconds(env, "INFILL_DAEMON_TIMEOUT", DEFAULT_REQUEST_TIMEOUT)
    if idle_timeout is None:
        idle_timeout = _seconds(env, "INFILL_DAEMON_IDLE_TIMEOUT", lifecycle.DEFAULT_IDLE_TIMEOUT)
    conn: Connection | None = None
    try:
        if len(json.dumps(dict(params), ensure_ascii=True)) > protocol.DEFAULT_MAX_REQUEST_BYTES - 1024:
            return None  # larger than the daemon accepts; not worth a round trip
        conn = connect_daemon(lifecycle.runtime_paths(env), spawn=True, idle_timeout=idle_timeout, env=env)
        if conn is None:
            return None
        reply = conn.call(method, params, timeout)
    except (OSError, ValueError, TypeError, DaemonUnavailable) as exc:  # json errors are ValueErrors
        _note(env, f"daemon unavailable ({exc}); working in-process")
        return None
    finally:
        if conn is not None:
            conn.close()
    error = reply.get("error")
    if error is not None:
        raised = protocol.exception_from_error(error) if isinstance(error, dict) else None
        if raised is None:
            _note(env, f"daemon error {error!r}; working in-process")
            return None
        raise raised
    reply.pop("id", None)
    return reply


def connect_daemon(
    paths: Paths,
    *,
    spawn: bool,
    idle_timeout: float = lifecycle.DEFAULT_IDLE_TIMEOUT,
    env: Mapping[str, str] | None = None,
) -> Connection | None:
    """A connection to a compatible daemon; with `spawn`, one is started (or an incompatible one replaced)
    under the spawn lock, so clients that arrive together start exactly one."""
    env = os.environ if env is None else env
    conn = _open(paths)
    if conn is not None and compatible(conn.ping, env):
        return conn
    if not spawn:
        if conn is not None:
            conn.close()
        return None
    if conn is not None:
        conn.close()
    with lifecycle.file_lock(paths.spawn_lock, timeout=LOCK_TIMEOUT):
        conn = _open(paths)  # someone may have started it while we waited for the lock
        if conn is not None:
            if compatible(conn.ping, env):
                return conn
            log.debug("daemon %s is incompatible (%r); restarting it", paths.socket, conn.ping)
            retire(conn)
        lifecycle.remove_stale_socket(paths.socket)
        process = lifecycle.spawn(paths, idle_timeout, env)
        deadline = time.monotonic() + SPAWN_TIMEOUT
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise DaemonUnavailable(f"the daemon exited at start (see {paths.log})")
            conn = _open(paths)
            if conn is not None:
                if compatible(conn.ping, env):
                    return conn
                retire(conn)
                raise DaemonUnavailable("a freshly started daemon runs different code")
            time.sleep(0.05)
        lifecycle.terminate(process.pid, 5.0)
        raise DaemonUnavailable("the daemon did not start in time")


def _open(paths: Paths) -> Connection | None:
    """Connect and ping; None if nothing listens, or if the daemon died instead of answering (killed while the
    connection waited: a fresh one is started, as for a socket that refuses). DaemonUnavailable if a daemon that
    is still there does not answer."""
    sock = lifecycle.connect(paths.socket, timeout=PING_TIMEOUT)
    if sock is None:
        return None
    conn = Connection(sock)
    try:
        conn.ping = conn.call("ping", {}, PING_TIMEOUT)
    except (OSError, ValueError, DaemonUnavailable):
        conn.close()
        # a daemon killed as it read the ping cuts the connection a moment before it shows as exited
        if conn.peer_pid is not None and lifecycle.wait_for_exit(conn.peer_pid, DEATH_WAIT):
            return None
        raise DaemonUnavailable("the daemon does not answer ping") from None
    return conn


def retire(conn: Connection, timeout: float = 10.0) -> None:
    """Stop the daemon at the other end of `conn`: ask politely (a request in progress may end within the
    5 s the answer may take), then signal the pid its socket names: at once when it did not answer (it is still
    busy; SIGTERM cancels that request, whose client then works in-process), after `timeout` when it answered
    but is still there."""
    pid = conn.peer_pid
    answered = False
    try:
        conn.call("shutdown", {}, 5.0)
        answered = True
    except (OSError, ValueError, DaemonUnavailable):
        pass
    finally:
        conn.close()
    if pid is not None and pid != os.getpid() and not (answered and lifecycle.wait_for_exit(pid, timeout)):
        lifecycle.terminate(pid, 5.0)


def status(env: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The running daemon's ping answer plus its socket path, or None if none runs. Never starts one."""
    paths = _existing_paths(env)
    conn = _open(paths) if paths is not None else None
    if conn is None or paths is None:
        return None
    conn.close()
    differ = differences(conn.ping, env)
    return {**conn.ping, "socket": str(paths.socket), "compatible": not differ, "differences": differ}


def blocked(env: Mapping[str, str] | None = None) -> str | None:
    """Why no daemon can start, when its folder cannot be used or something that is no socket holds the daemon's
    socket path (every client then works in-process, and a daemon would refuse to replace it); None otherwise."""
    import stat

    try:
        paths: Paths | None = lifecycle.runtime_paths(env, create=False)
    except lifecycle.RuntimeDirMissing:
        paths = None
    except DaemonUnavailable as exc:  # its folder is a file, another user's, open to others...
        return str(exc)
    try:
        mode = paths.socket.lstat().st_mode if paths is not None else None
    except OSError:
        return None
    if paths is None or mode is None or stat.S_ISSOCK(mode):
        return None
    return f"{paths.socket} is not a socket; remove it so that a daemon can start"


def stop(env: Mapping[str, str] | None = None) -> bool:
    """Stop the running daemon; False if none was running."""
    paths = _existing_paths(env)
    if paths is None:
        return False
    sock = lifecycle.connect(paths.socket, timeout=PING_TIMEOUT)
    if sock is None:
        lifecycle.remove_stale_socket(paths.socket)
        return False
    retire(Connection(sock))
    return True


def _note(env: Mapping[str, str], message: str) -> None:
    """Why the daemon was not used: logged, and printed to stderr with INFILL_DAEMON_DEBUG=1."""
    log.debug(message)
    if environment.enabled("INFILL_DAEMON_DEBUG", env):
        print(f"infill: {message}", file=sys.stderr)


def _existing_paths(env: Mapping[str, str] | None) -> Paths | None:
    try:
        return lifecycle.runtime_paths(env, create=False)
    except DaemonUnavailable:
        return None


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    """A timeout variable's value (infill.environment: InputError for junk), else `default`."""
    value: float | None = environment.read(name, env)
    return default if value is None else value
