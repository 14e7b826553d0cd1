"""Where the per-user daemon lives and how it is found, started, checked and stopped. Pure standard library.

Files, all in the runtime directory: the base ($INFILL_RUNTIME_DIR, else $XDG_RUNTIME_DIR/infill, else
/tmp/infill-<uid>) plus one folder per installation (installation_key(): the interpreter, its prefix, the
package's folder and version), so two installs (a pre-commit hook's environment and the user's own) each have
their own daemon instead of restarting each other's:
  daemon.sock   the Unix socket, mode 0600
  spawn.lock    flock'ed by a client while it starts a daemon, so two clients at once start one daemon
  daemon.log    the daemon's stderr

The directory must be a real directory (not a symlink) owned by this user with no group/other permissions; one
that is ours but too open is tightened, one owned by someone else is refused. A base given as $INFILL_RUNTIME_DIR
is the user's folder: its mode is never changed (one that others may write without the sticky bit is refused),
and the per-installation folder infill makes in it is the private one. Locks are flock(2) locks, which
the kernel drops when their holder dies, so a leftover lock file is never stale; a leftover socket that
refuses connections is stale and is removed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat
import struct
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # subprocess, signal and tempfile are imported where needed: clients stay quick to start
    import subprocess

SOCKET_NAME = "daemon.sock"
SPAWN_LOCK_NAME = "spawn.lock"
LOG_NAME = "daemon.log"
DEFAULT_IDLE_TIMEOUT = 600.0  # seconds without a request after which an auto-started daemon exits
_MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
_LOG_LIMIT = 1 << 20


class DaemonUnavailable(Exception):
    """No daemon can be used (unsafe directory, spawn failed, timeout...). Clients fall back to in-process."""


class RuntimeDirMissing(DaemonUnavailable):
    """The runtime folder does not exist yet: no daemon has run (nothing is wrong)."""


@dataclass(frozen=True)
class Paths:
    directory: Path

    @property
    def socket(self) -> Path:
        return self.directory / SOCKET_NAME

    @property
    def spawn_lock(self) -> Path:
        return self.directory / SPAWN_LOCK_NAME

    @property
    def log(self) -> Path:
        return self.directory / LOG_NAME


def runtime_paths(env: Mapping[str, str] | None = None, *, create: bool = True) -> Paths:
    """The checked runtime directory of this user's daemon for this installation (see installation_key); raises
    DaemonUnavailable if it is not safe to use."""
    from infill import environment

    env = os.environ if env is None else env
    uid = os.getuid()
    base = environment.read("INFILL_RUNTIME_DIR", env)
    if base:
        directory = Path(base)
    elif env.get("XDG_RUNTIME_DIR") and _owned_private_dir(Path(env["XDG_RUNTIME_DIR"]), uid):
        directory = Path(env["XDG_RUNTIME_DIR"]) / "infill"
    else:
        import tempfile

        directory = Path(tempfile.gettempdir()) / f"infill-{uid}"
    for folder in (directory, directory / installation_key()):
        if create:
            try:
                folder.mkdir(mode=0o700, exist_ok=True)
            except OSError as exc:
                reason = "it is not a folder" if folder.exists() and not folder.is_dir() else exc.strerror
                raise DaemonUnavailable(f"cannot create {folder}: {reason}") from None
        # the user's own folder ($INFILL_RUNTIME_DIR) is never changed: only what infill makes in it is tightened
        check_private_dir(folder, tighten=not (folder == directory and base))
    directory = directory / installation_key()
    if len(os.fsencode(directory / SOCKET_NAME)) > _MAX_SOCKET_PATH:
        raise DaemonUnavailable(f"runtime directory path is too long for a Unix socket: {directory}")
    return Paths(directory)


def installation_key() -> str:
    """A short name for this installation of infill: a hash of the interpreter, its environment's prefix, the
    package's folder and its version. A daemon is only ever shared by clients of the same installation."""
    import hashlib

    import infill

    parts = (sys.executable, sys.prefix, str(Path(infill.__file__).resolve().parent), infill.__version__)
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def code_stamp(root: Path | None = None) -> str:
    """A digest of (path, size, mtime, inode) of every file of the package (its code and its packaged models) and
    of its tree-sitter queries, `__pycache__` and hidden folders left out, and of the modification time of each
    site-packages folder: it changes when a `git pull` edits an editable install, when the same version is
    re-installed from another clone, when a packaged model's files are replaced, or when a package is installed,
    upgraded or removed beside infill (llama-cpp-python, torch: a folder's entries change), which
    installation_key does not see. A daemon keeps the stamp it started with (dispatch.identity), so a client
    whose installation changed since replaces it. Stats only, never reads a file: a few ms for the package.
    `root`: that folder alone (tests)."""
    import hashlib

    entries: list[str] = []
    if root is None:
        import site

        import infill
        from infill.languages import grammars_root

        root = Path(infill.__file__).resolve().parent
        queries = grammars_root()
        roots = [root] if queries.is_relative_to(root) else [root, queries]  # a checkout keeps them beside it
        for folder in {*site.getsitepackages(), site.getusersitepackages()}:
            try:
                entries.append(f"{folder}\0{os.stat(folder).st_mtime_ns}")
            except OSError:
                continue
    else:
        roots = [root]
    pending = [str(r) for r in roots]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as items:
                for item in items:
                    if item.name.startswith(".") or item.name == "__pycache__":
                        continue
                    try:
                        if item.is_dir(follow_symlinks=False):
                            pending.append(item.path)
                            continue
                        st = item.stat()
                    except OSError:
                        continue
                    entries.append(f"{item.path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
        except OSError:
            continue
    entries.sort()
    return hashlib.sha256("\n".join(entries).encode("utf-8", "surrogateescape")).hexdigest()[:16]


def outside_modules(modules: Iterable[object]) -> list[str]:
    """The source files of `modules` (of sys.modules) from outside infill's package and outside the
    interpreter's environment (the standard library, site-packages, the user's site-packages:
    code_stamp covers them): the server plugins (INFILL_SERVER_PLUGINS), the model kinds (INFILL_KINDS, an
    editable `infill.kinds` entry point) and what they import, found on PYTHONPATH or in a source tree."""
    import site

    import infill

    package = Path(infill.__file__).parent
    inside = {str(package), str(package.resolve()), site.getusersitepackages()}
    for prefix in {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}:
        inside |= {prefix, os.path.realpath(prefix)}
    prefixes = tuple(folder.rstrip(os.sep) + os.sep for folder in inside)
    files = set()
    for module in modules:
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and os.path.isabs(path) and not path.startswith(prefixes):
            files.add(path)
    return sorted(files)


class OutsideModules:
    """What a daemon has imported from outside (outside_modules), each file's modification time (ns) when it was
    first seen: its ping names them, and a client replaces a daemon one of whose files changed since or is gone
    (changed_outside), as code_stamp does for the package. Seen at each ping and after each request, so a module
    imported lazily (a model kind) is recorded as the daemon loaded it; a file written after the daemon started
    (generated code) is not taken for an edit."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self._examined: dict[str, object] = {}  # the sys.modules entries looked at, by name

    def refresh(self) -> dict[str, int]:
        """Looks only at the modules imported (or replaced) since the last refresh: it runs after every request,
        and a daemon has well over a thousand modules (all of them took 1-2 ms a request, 3 in a test process)."""
        # a copy: a request in another thread may import meanwhile
        new = {n: m for n, m in sys.modules.copy().items() if self._examined.get(n) is not m}
        if not new:
            return dict(self.seen)
        for path in outside_modules(new.values()):
            if path not in self.seen:
                with contextlib.suppress(OSError):
                    self.seen.setdefault(path, os.stat(path).st_mtime_ns)
        self._examined.update(new)
        return dict(self.seen)


def changed_outside(seen: object) -> bool:
    """Whether one of the files a daemon's ping names (OutsideModules) was modified since it saw it, or is gone.
    Stats only; anything but a mapping of paths to times (an older daemon) is no change."""
    if not isinstance(seen, dict):
        return False
    for path, mtime in seen.items():
        try:
            if os.stat(path).st_mtime_ns != mtime:
                return True
        except (OSError, TypeError, ValueError):
            return True
    return False


def _owned_private_dir(path: Path, uid: int) -> bool:
    try:
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == uid


def check_private_dir(directory: Path, tighten: bool = True) -> None:
    """Refuse a directory another user could reach into; tighten one of ours that is too open. With `tighten`
    False (the folder $INFILL_RUNTIME_DIR names, which is the user's) its mode is left alone: one others may
    read is used as it is (what infill makes in it is private), one others may write without the sticky bit
    is refused."""
    try:
        st = directory.lstat()
    except FileNotFoundError:
        raise RuntimeDirMissing(f"{directory} does not exist") from None
    except OSError as exc:
        raise DaemonUnavailable(f"cannot use {directory}: {exc.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise DaemonUnavailable(f"{directory} is not a directory (or is a symlink); refusing to use it")
    if st.st_uid != os.getuid():
        raise DaemonUnavailable(f"{directory} is owned by uid {st.st_uid}, not by you; refusing to use it")
    if not tighten:
        if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
            raise DaemonUnavailable(
                f"{directory} can be written by other users (mode {stat.S_IMODE(st.st_mode):o}, no sticky bit); "
                "refusing to use it: make it private (chmod 700) or unset INFILL_RUNTIME_DIR"
            )
        return
    if st.st_mode & 0o077:
        try:
            os.chmod(directory, 0o700)
        except OSError as exc:
            raise DaemonUnavailable(f"cannot make {directory} private: {exc.strerror}") from None


@contextlib.contextmanager
def file_lock(path: Path, timeout: float) -> Iterator[None]:
    """An exclusive flock on `path` (created 0600), waiting at most `timeout` seconds, and not at all while its
    holder is stopped (a client paused with Ctrl-Z would otherwise keep every other client waiting): then
    DaemonUnavailable, and the caller works in-process. The holder writes its pid into the file."""
    import fcntl  # POSIX only; clients on other systems never get here (see client.daemon_allowed)

    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = _holder(fd)
                if holder is not None and _process_state(holder) in (b"T", b"t"):
                    raise DaemonUnavailable(f"the process holding {path} (pid {holder}) is stopped") from None
                if time.monotonic() >= deadline:
                    raise DaemonUnavailable(f"timed out waiting for the lock {path}") from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _holder(fd: int) -> int | None:
    """The pid the holder of a lock file wrote into it, if any."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def connect(path: Path, timeout: float) -> socket.socket | None:
    """A connected socket, or None when nothing listens at `path` (missing or stale socket), or when the process
    that listens there is dead (`listener_dead`): such a socket takes connections that nobody will answer."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(os.fsencode(path))
    except OSError as exc:
        sock.close()
        if exc.errno in (errno.ENOENT, errno.ECONNREFUSED, errno.ENOTSOCK, errno.EPROTOTYPE):
            return None
        raise
    if listener_dead(sock):
        sock.close()
        return None
    return sock


def listener_dead(sock: socket.socket) -> bool:
    """Whether the process that listens at the other end of `sock` is gone or exiting: a daemon SIGKILLed whose
    main thread is a zombie while its other threads exit (its files, the listening socket among them, close
    only when the last one has), or one whose listening socket a forked child still holds. The kernel queues
    connections to such a socket, and nobody answers them: every client would wait out its ping and work
    in-process, and no new daemon could take the path, until the socket closed. False where the OS does not
    tell (no SO_PEERCRED, a pid from another pid namespace)."""
    try:
        creds = peer_credentials(sock)
    except OSError:
        return False
    if creds is None or creds[0] <= 0:
        return False
    return process_dead(creds[0])


def process_dead(pid: int) -> bool:
    """Whether process `pid` no longer runs: gone, or a zombie (exiting, or exited and not yet reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's: it exists
        return False
    return _process_state(pid) in (b"Z", b"X")


def peer_credentials(sock: socket.socket) -> tuple[int, int] | None:
    """(pid, uid) of the process at the other end of a Unix socket; None where the OS does not tell."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    raw = sock.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    pid, uid, _gid = struct.unpack("3i", raw)
    return pid, uid


def remove_stale_socket(path: Path) -> bool:
    """Remove `path` if it is a socket nobody listens on. True if it was removed."""
    try:
        st = path.lstat()
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise DaemonUnavailable(f"{path} exists and is not a socket; refusing to replace it")
    sock = connect(path, timeout=5.0)
    if sock is not None:
        sock.close()
        return False
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return True


def spawn_command(socket_path: Path, idle_timeout: float) -> list[str]:
    return [
        sys.executable,
        "-m",
        "infill",
        "serve",
        "--socket",
        str(socket_path),
        "--idle-timeout",
        repr(float(idle_timeout)),
    ]


def spawn_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The daemon's environment: the client's, plus the folder holding this very `infill` package when it is
    not an installed one, so the daemon runs the same code as the client (the version check confirms it)."""
    import site

    import infill

    out = dict(env)
    root = str(Path(infill.__file__).resolve().parent.parent)
    known = [*getattr(site, "getsitepackages", list)(), getattr(site, "getusersitepackages", str)()]
    installed = {str(Path(p).resolve()) for p in known if p}
    if root not in installed:
        out["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [out.get("PYTHONPATH")])])
    return out


def spawn(paths: Paths, idle_timeout: float, env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start a detached daemon (own session, stdin closed, output to daemon.log); does not wait for it."""
    import subprocess

    with contextlib.suppress(OSError):
        if paths.log.stat().st_size > _LOG_LIMIT:
            paths.log.unlink()
    log_fd = os.open(paths.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    try:
        return subprocess.Popen(
            spawn_command(paths.socket, idle_timeout),
            stdin=subprocess.DEVNULL,
            stdout=log_fd,
            stderr=log_fd,
            cwd="/",
            env=spawn_environment(env),
            start_new_session=True,
            close_fds=True,
        )
    finally:
        os.close(log_fd)


def terminate(pid: int, timeout: float) -> bool:
    """SIGTERM, then SIGKILL after `timeout`; True once it is gone. Only for pids a socket vouched for."""
    import signal

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return True
        if wait_for_exit(pid, wait):
            return True
    return False


def wait_for_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)  # reaps it if it is our child
            if done == pid:
                return True
        except ChildProcessError:
            pass
        if process_dead(pid):
            return True
        time.sleep(0.05)
    return False


def _process_state(pid: int) -> bytes | None:
    """The state letter of process `pid` (R, S, T stopped, Z zombie...); None where /proc cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
