"""Reading inputs safely, applying edits, unified diffs, atomic writes that refuse to clobber changed files
and keep the file's owner, group, mode, hard links and symlinks.

Invariant (checked on every patch, `check_outside_unchanged`): bytes outside the edited spans never change.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from infill.errors import FileChangedError, InfillError, InputError


class ByteEdit(Protocol):
    """Anything with a byte range of the original input and replacement text (infill.api.Edit)."""

    @property
    def start_byte(self) -> int: ...

    @property
    def end_byte(self) -> int: ...

    @property
    def text(self) -> str: ...


@dataclass(frozen=True)
class Replacement:
    """Replace bytes [start_byte, end_byte) of an original input by `text` (a ByteEdit without a score)."""

    start_byte: int
    end_byte: int
    text: str


@dataclass(frozen=True)
class Snapshot:
    """What a file looked like when it was read; used to refuse writing over a file that changed meanwhile."""

    path: str
    size: int
    mtime_ns: int
    sha256: str
    mode: int

    def matches(self, data: bytes, st: os.stat_result) -> bool:
        return st.st_size == self.size and hashlib.sha256(data).hexdigest() == self.sha256


def decode_utf8(data: bytes, path: str) -> str:
    """UTF-8 text of an input, or InputError for binary (NUL bytes) and non-UTF-8 data."""
    if b"\x00" in data[:8192]:
        raise InputError("binary file (contains NUL bytes); only UTF-8 text can be filled", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"not UTF-8 (invalid byte at offset {exc.start}); only UTF-8 text can be filled", path=path
        ) from None


def read_source(path: str) -> tuple[bytes, Snapshot]:
    """The bytes of `path` and a snapshot of it; InputError for missing, directory, unreadable files."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot access file: {exc.strerror}", path=path) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory; give a file (or - for stdin)", path=path)
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file", path=path)
    try:
        data = p.read_bytes()
    except PermissionError:
        raise InputError("permission denied: cannot read file", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror}", path=path) from None
    return data, Snapshot(path, len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest(), stat.S_IMODE(st.st_mode))


_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def check_writable(path: str) -> None:
    """InputError unless `path` (an existing file, or a new one in an existing folder) can be replaced.

    A file or folder without any write bit (chmod a-w) counts as read-only even for root, whom os.access
    lets write anywhere: the mode bits say what the owner wants."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    if p.exists():
        mode = p.stat().st_mode
        if not os.access(p, os.W_OK) or not mode & _WRITE_BITS:
            raise InputError("file is read-only; nothing was written (use --diff or -o PATH)", path=path)
    if not folder.is_dir():
        raise InputError("output folder does not exist", path=path)
    if not os.access(folder, os.W_OK | os.X_OK) or not folder.stat().st_mode & _WRITE_BITS:
        raise InputError("folder is read-only; nothing was written (use --diff or -o PATH)", path=path)


def apply_edits(data: bytes, edits: Sequence[ByteEdit]) -> bytes:
    """`data` with every edit applied; edits index `data` and must not overlap."""
    out = []
    at = 0
    for edit in sorted(edits, key=lambda e: (e.start_byte, e.end_byte)):
        if edit.start_byte < at or edit.end_byte < edit.start_byte or edit.end_byte > len(data):
            raise InfillError(f"internal error: bad or overlapping edit {edit.start_byte}:{edit.end_byte}")
        out.append(data[at : edit.start_byte])
        out.append(edit.text.encode("utf-8"))
        at = edit.end_byte
    out.append(data[at:])
    return b"".join(out)


def check_outside_unchanged(original: bytes, patched: bytes, edits: Sequence[ByteEdit]) -> None:
    """Invariant: the bytes between (and around) edits are identical in `original` and `patched`."""
    shift = 0
    at = 0
    for edit in sorted(edits, key=lambda e: (e.start_byte, e.end_byte)):
        if original[at : edit.start_byte] != patched[at + shift : edit.start_byte + shift]:
            raise InfillError(f"internal error: bytes outside the edited spans changed before byte {edit.start_byte}")
        new_len = len(edit.text.encode("utf-8"))
        shift += new_len - (edit.end_byte - edit.start_byte)
        at = edit.end_byte
    if original[at:] != patched[at + shift :]:
        raise InfillError("internal error: bytes after the last edited span changed")


def unified_diff(old: str, new: str, path: str | None) -> str:
    """A unified diff (difflib) from `old` to `new`, labelled a/PATH and b/PATH; '' when equal."""
    name = (path or "<stdin>").lstrip("/")
    lines = difflib.unified_diff(old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{name}", f"b/{name}")
    out = []
    for line in lines:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


def atomic_write(path: str, data: bytes, expected: Snapshot | None = None) -> None:
    """Replace the contents of `path` by `data`, keeping what the file is: its mode, owner and group, its hard
    links, and a symlink (which keeps pointing at its target, whose contents change).

    The usual way is atomic: a temporary file in the same folder, fsync, chown/chmod to the original's owner,
    group and mode, rename over it. A file with several hard links, or one whose owner or group this process
    cannot give the temporary file, is rewritten in place instead (as black and ruff do), since a rename would
    detach the other links or change the owner. With `expected`, refuse (FileChangedError) if the file no
    longer holds what was read.
    """
    p = Path(os.path.realpath(path))  # write through a symlink, never replace the link itself
    check_writable(str(p))
    st: os.stat_result | None = None
    if expected is not None:
        try:
            st = p.stat()
            current = p.read_bytes()
        except OSError:
            raise FileChangedError(
                "file disappeared or became unreadable during the run; nothing written", path=path
            ) from None
        if not expected.matches(current, st):
            raise FileChangedError("file changed on disk since it was read; nothing written", path=path)
    elif p.exists():
        st = p.stat()
    if st is not None and st.st_nlink > 1:
        _write_in_place(p, data)
        return
    folder = str(p.parent) if str(p.parent) else "."
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".infill-tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None and not _take_metadata(tmp, st):
            os.unlink(tmp)
            _write_in_place(p, data)
            return
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    try:  # make the rename durable; not every platform can open a folder
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _take_metadata(tmp: str, original: os.stat_result) -> bool:
    """Give `tmp` the original's owner, group and mode bits; False if the owner or group cannot be given."""
    mine = os.stat(tmp)
    if (mine.st_uid, mine.st_gid) != (original.st_uid, original.st_gid):
        try:
            os.chown(tmp, original.st_uid, original.st_gid)
        except (PermissionError, AttributeError):  # not root, or a group we are not in; no chown on Windows
            return False
    os.chmod(tmp, stat.S_IMODE(original.st_mode))  # after chown, which clears set-user-ID bits
    return True


def _write_in_place(p: Path, data: bytes) -> None:
    """Overwrite the file itself (same inode: hard links, owner and mode stay); not atomic."""
    with open(p, "r+b") as fh:
        fh.write(data)
        fh.truncate()
        fh.flush()
        os.fsync(fh.fileno())
