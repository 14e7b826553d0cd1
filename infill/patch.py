"""Reading inputs safely, applying edits, unified diffs, atomic writes that refuse to clobber changed files
and keep the file's owner, group, mode, hard links and symlinks.

Invariant (checked on every patch, `check_outside_unchanged`): bytes outside the edited spans never change.
"""

from __future__ import annotations

import codecs
import difflib
import errno
import hashlib
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from infill.errors import FileChangedError, InfillError, InputError

T = TypeVar("T")


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
    """UTF-8 text of an input, or InputError for binary (a NUL byte anywhere: no source file holds one, and one
    past the first 8 KiB is no less binary) and non-UTF-8 data (naming the encoding a coding cookie declares)."""
    if b"\x00" in data:
        raise InputError("binary file (contains NUL bytes); only UTF-8 text can be filled", path=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        declared = declared_encoding(data)
        if declared is not None:
            raise InputError(
                f"not UTF-8: line {declared[1]} declares {declared[0]} (a coding cookie); only UTF-8 text can be "
                f"filled (convert it first, e.g. iconv -f {declared[0]} -t utf-8)",
                path=path,
            ) from None
        raise InputError(
            f"not UTF-8 (invalid byte at offset {exc.start}); only UTF-8 text can be filled", path=path
        ) from None


_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def declared_encoding(data: bytes) -> tuple[str, int] | None:
    """The encoding other than UTF-8 that a coding cookie (PEP 263: a comment on line 1, or on line 2 after a
    comment or blank line 1) declares, and its line; None without one, or when it declares UTF-8. Python reads the
    file in that encoding (so does an editor that honours `-*- coding: ... -*-`)."""
    head = data[:8192].removeprefix(b"\xef\xbb\xbf").splitlines()[:2]
    for number, line in enumerate(head, 1):
        match = _COOKIE.match(line)
        if match is not None:
            name = match.group(1).decode("ascii", "replace")
            try:
                utf8 = codecs.lookup(name).name == "utf-8"
            except LookupError:
                utf8 = False  # an unknown encoding: Python refuses the file
            return None if utf8 else (name, number)
        if line.strip() and not line.lstrip().startswith(b"#"):
            return None  # only a comment or blank first line lets the second declare it
    return None


def foreign_text(data: bytes, added: Iterable[str]) -> str | None:
    """Why text `added` to the input `data` cannot be written, or None: `data` declares another encoding than
    UTF-8 (declared_encoding) and some of the text is not ASCII. Its UTF-8 bytes would be read back in that
    encoding as other characters (`é` as `Ã©` in a latin-1 file)."""
    text = [t for t in added if not t.isascii()]
    if not text:
        return None
    declared = declared_encoding(data)
    if declared is None:
        return None
    return f"writes text that is not ASCII into a file whose line {declared[1]} declares {declared[0]}"


def _reading(path: str, what: str, call: Callable[[], T]) -> T:
    """call(), its OSError as InputError: "no such file", "permission denied: cannot `what` file" or
    "cannot `what` file: <reason>"."""
    try:
        return call()
    except FileNotFoundError:
        raise InputError("no such file", path=path) from None
    except PermissionError:
        raise InputError(f"permission denied: cannot {what} file", path=path) from None
    except OSError as exc:
        raise InputError(f"cannot {what} file: {exc.strerror}", path=path) from None


def read_source(path: str) -> tuple[bytes, Snapshot]:
    """The bytes of `path` and a snapshot of it; InputError for missing, directory, unreadable files."""
    p = Path(path)
    st = _reading(path, "access", p.stat)
    if stat.S_ISDIR(st.st_mode):
        raise InputError("is a directory; give a file (or - for stdin)", path=path)
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file", path=path)
    data = _reading(path, "read", p.read_bytes)
    return data, Snapshot(path, len(data), st.st_mtime_ns, hashlib.sha256(data).hexdigest(), stat.S_IMODE(st.st_mode))


_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


def check_writable(path: str, hint: str = "") -> None:
    """InputError unless `path` (an existing regular file, or a new one in an existing folder) can be replaced.

    Only regular files are ever written: a device (/dev/null, /dev/full), a named pipe, a socket or a folder is
    refused, as it is on the input side. A file or folder without any write bit (chmod a-w) counts as read-only
    even for root, whom os.access lets write anywhere: the mode bits say what the owner wants. `hint` ends the
    read-only messages with what the command offers instead (e.g. "use --diff")."""
    p = Path(path)
    folder = p.parent if str(p.parent) else Path(".")
    advice = f" ({hint})" if hint else ""
    try:
        st: os.stat_result | None = p.stat()
    except FileNotFoundError:
        st = None  # a new file (or a dangling symlink, whose target is created)
    except OSError as exc:
        raise InputError(f"cannot access: {exc.strerror}; nothing was written", path=path) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise InputError("is a directory; nothing was written", path=path)
        if not stat.S_ISREG(st.st_mode):
            raise InputError("not a regular file (a device, pipe or socket); nothing was written", path=path)
        if not os.access(p, os.W_OK) or not st.st_mode & _WRITE_BITS:
            raise InputError(f"file is read-only; nothing was written{advice}", path=path)
    if not folder.is_dir():
        raise InputError("output folder does not exist", path=path)
    if not os.access(folder, os.W_OK | os.X_OK) or not folder.stat().st_mode & _WRITE_BITS:
        raise InputError(f"folder is read-only; nothing was written{advice}", path=path)


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
    """A unified diff (difflib) from `old` to `new`, labelled a/PATH and b/PATH; '' when equal. Lines end at
    "\n" only, as `diff`, `patch` and `git apply` see them: a lone CR is part of a line (a file with lone-CR line
    endings is one line to them), and a CRLF line keeps its CR."""
    name = (path or "<stdin>").lstrip("/")
    a, b = _patch_lines(old), _patch_lines(new)
    hunks = _hunks(_opcodes(a, b))
    if not hunks:
        return ""
    lines = [f"--- {_diff_name(f'a/{name}')}\n", f"+++ {_diff_name(f'b/{name}')}\n"]
    for hunk in hunks:
        lines.append(f"@@ -{_range(hunk[0][1], hunk[-1][2])} +{_range(hunk[0][3], hunk[-1][4])} @@\n")
        for tag, i1, i2, j1, j2 in hunk:
            if tag == "equal":
                lines += [" " + line for line in a[i1:i2]]
            else:
                lines += ["-" + line for line in a[i1:i2]] + ["+" + line for line in b[j1:j2]]
    out = []
    for line in lines:
        out.append(line)
        if not line.endswith("\n"):
            out.append("\n\\ No newline at end of file\n")
    return "".join(out)


_CONTEXT = 3  # lines of context around a change, as `diff -u`
_EXACT = 2000  # lines between the common head and tail that are matched exactly (difflib without autojunk)

Opcode = tuple[str, int, int, int, int]


def _opcodes(a: list[str], b: list[str]) -> list[Opcode]:
    """difflib's opcodes from `a` to `b`: the common head and tail are equal blocks, and the lines between them
    are matched by difflib, exactly where they are few. On the whole of a long file difflib's autojunk keeps
    recurring lines (blank ones, `return y`) from anchoring a match, and one changed line came out as a hunk that
    removed and re-added its neighbours."""
    same, shorter = 0, min(len(a), len(b))
    while same < shorter and a[same] == b[same]:
        same += 1
    tail = 0
    while tail < shorter - same and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    mid_a, mid_b = a[same : len(a) - tail], b[same : len(b) - tail]
    exact = max(len(mid_a), len(mid_b)) <= _EXACT
    matcher = difflib.SequenceMatcher(None, mid_a, mid_b, autojunk=not exact)
    ops: list[Opcode] = [("equal", 0, same, 0, same)] if same else []
    ops += [(tag, i1 + same, i2 + same, j1 + same, j2 + same) for tag, i1, i2, j1, j2 in matcher.get_opcodes()]
    if tail:
        ops.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return ops


def _hunks(ops: list[Opcode]) -> list[list[Opcode]]:
    """The opcodes grouped into hunks, each change with up to _CONTEXT equal lines either side; changes closer
    than twice that share a hunk. No hunk when nothing changed."""
    if all(op[0] == "equal" for op in ops):
        return []
    n = _CONTEXT
    hunks: list[list[Opcode]] = []
    current: list[Opcode] = []
    for k, (tag, i1, i2, j1, j2) in enumerate(ops):
        if tag != "equal":
            current.append((tag, i1, i2, j1, j2))
        elif k == 0:  # before the first change: its context only
            keep = min(n, i2 - i1)
            current.append((tag, i2 - keep, i2, j2 - keep, j2))
        elif k == len(ops) - 1:  # after the last change
            keep = min(n, i2 - i1)
            current.append((tag, i1, i1 + keep, j1, j1 + keep))
        elif i2 - i1 > 2 * n:  # a long stretch between changes ends one hunk and starts the next
            current.append((tag, i1, i1 + n, j1, j1 + n))
            hunks.append(current)
            current = [(tag, i2 - n, i2, j2 - n, j2)]
        else:
            current.append((tag, i1, i2, j1, j2))
    hunks.append(current)
    return hunks


def _range(start: int, stop: int) -> str:
    """A hunk header's range of lines start..stop (0-based, stop exclusive): the first line (1-based) and the
    count, the count left out when it is 1; an empty range names the line before it."""
    count = stop - start
    if count == 1:
        return str(start + 1)
    return f"{start + 1 if count else start},{count}"


_C_ESCAPES = {"\a": "a", "\b": "b", "\t": "t", "\n": "n", "\v": "v", "\f": "f", "\r": "r", '"': '"', "\\": "\\"}


def _diff_name(name: str) -> str:
    """A path in a diff header as git writes it: as is, or in double quotes with C escapes when it holds a quote,
    a backslash, a control character (a line break would split the header) or a byte that is no UTF-8 (held as
    a lone surrogate), which `git apply` and GNU patch read back."""

    def escaped(c: str) -> str:
        code = ord(c)
        if c in _C_ESCAPES:
            return "\\" + _C_ESCAPES[c]
        if code < 0x20 or code == 0x7F:
            return f"\\{code:03o}"
        if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the original byte
            return f"\\{code - 0xDC00:03o}"
        return c

    quoted = "".join(escaped(c) for c in name)
    return name if quoted == name else f'"{quoted}"'


def _patch_lines(text: str) -> list[str]:
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def atomic_write(path: str, data: bytes, expected: Snapshot | None = None, hint: str = "") -> None:
    """Replace the contents of `path` by `data`: the one writer every command, the server and the daemon use.
    It keeps what the file is: its mode, owner and group, its hard links, and a symlink (which keeps pointing at
    its target, whose contents change). It never leaves a file cut short.

    The new content is first written in full to a temporary file in the same folder (fsync), so a full disk, a
    quota or a signal fails before the file is touched. The usual way then gives that file the original's
    owner, group and mode and renames it over the original (atomic). A file with several hard links, or one
    whose owner or group this process cannot give the temporary file, is rewritten in place instead (as black
    and ruff do), since a rename would detach the other links or change the owner: the temporary file is
    removed (freeing the room it proved there is), and should the rewrite still fail, the original bytes are
    written back. Refused (InputError, exit 2): a target that is not a regular file, a read-only file or folder
    (check_writable; `hint` as there), and a write the system refuses (no space, quota, read-only file system,
    an immutable or append-only file), each one line naming the file. With `expected`, refuse
    (FileChangedError) if the file no longer holds what was read.
    """
    p = Path(os.path.realpath(path))  # write through a symlink, never replace the link itself
    check_writable(str(p), hint)
    st: os.stat_result | None = None
    current: bytes | None = None
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
    folder = str(p.parent) if str(p.parent) else "."
    try:
        tmp = _complete_copy(folder, p.name, data)
        renamed = False
        try:
            if st is None:
                os.chmod(tmp, 0o666 & ~umask())  # a new file: the mode open() would give it, not mkstemp's 0600
            if st is None or (st.st_nlink == 1 and _take_metadata(tmp, p, st)):
                os.replace(tmp, p)
                renamed = True
        finally:
            if not renamed:
                _remove(tmp)
        if renamed:
            _sync_folder(folder)
            return
        _write_in_place(p, data, current if current is not None else p.read_bytes())
    except OSError as exc:
        raise _unwritable(path, exc, existed=st is not None) from None


def _unwritable(path: str, exc: OSError, existed: bool) -> InputError:
    """The one line for a write the system refused: ENOSPC, EDQUOT, EROFS, EPERM (an immutable or append-only
    file), EIO... The file is as it was (or, for a new file, absent)."""
    reason = exc.strerror or type(exc).__name__
    if isinstance(exc, _RestoreFailed):
        return InputError(f"cannot write: {reason}; restoring its old content failed too, check the file", path=path)
    return InputError(
        f"cannot write: {reason}; {'the file is unchanged' if existed else 'nothing was written'}", path=path
    )


class _RestoreFailed(OSError):
    """An in-place rewrite failed and so did writing the original bytes back (the one case a file may be left
    changed; the message says so)."""


def umask() -> int:
    """This process's umask, read from /proc where Linux shows it: setting it to read it back (the portable way,
    the fallback) would briefly change it for the other threads of a server."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a write may be short); raises the OSError of the first failure."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _complete_copy(folder: str, name: str, data: bytes) -> str:
    """A temporary file `.NAME.*.infill-tmp` in `folder` holding all of `data`, flushed to disk; removed again if
    that fails (a full disk, a signal), so no partial temporary file is ever left behind."""
    fd, tmp = tempfile.mkstemp(prefix=f".{_short(name)}.", suffix=".infill-tmp", dir=folder)
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)  # a delayed allocation fails here, not in write()
        finally:
            os.close(fd)
    except BaseException:
        _remove(tmp)
        raise
    return tmp


def _short(name: str, limit: int = 200) -> str:
    """`name` cut to at most `limit` bytes of UTF-8 (at a character boundary), so that the temporary file's name
    (it adds about 20) stays within the 255 bytes a file name may have: a file named with 235 to 255 bytes could
    not be written."""
    while len(os.fsencode(name)) > limit:
        name = name[:-1]
    return name


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _sync_folder(folder: str) -> None:
    """Make a rename durable; not every platform can open a folder."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def _take_metadata(tmp: str, path: Path, original: os.stat_result) -> bool:
    """Give `tmp` the original's owner, group, mode bits and extended attributes (ACLs and SELinux labels live
    there); False if the owner, the group or an attribute cannot be given (the caller then rewrites in place)."""
    mine = os.stat(tmp)
    if (mine.st_uid, mine.st_gid) != (original.st_uid, original.st_gid):
        try:
            os.chown(tmp, original.st_uid, original.st_gid)
        except (PermissionError, AttributeError):  # not root, or a group we are not in; no chown on Windows
            return False
    os.chmod(tmp, stat.S_IMODE(original.st_mode))  # after chown, which clears set-user-ID bits
    return _take_xattrs(tmp, path)


def _take_xattrs(tmp: str, path: Path) -> bool:
    """Give `tmp` exactly the extended attributes of `path` (after the mode: an ACL is one of them); False when
    one cannot be set or removed (a security.* label this process may not write, a file system without them)."""
    if not hasattr(os, "listxattr"):  # not Linux: no extended attributes to keep
        return True
    try:
        wanted = {name: os.getxattr(path, name) for name in os.listxattr(path)}
    except OSError as exc:
        return exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP)  # none there to keep
    try:
        for name in set(os.listxattr(tmp)) - set(wanted):  # inherited by the new file (a default ACL), not kept
            os.removexattr(tmp, name)
        present = set(os.listxattr(tmp))
        for name, value in wanted.items():
            if name not in present or os.getxattr(tmp, name) != value:
                os.setxattr(tmp, name, value)
    except OSError:
        return False
    return True


def _write_in_place(p: Path, data: bytes, original: bytes) -> None:
    """Overwrite the file itself (same inode: hard links, owner and mode stay); not atomic. If that fails (or a
    signal interrupts it), the original bytes are written back before the error goes on."""
    fd = os.open(p, os.O_WRONLY)
    try:
        try:
            _write_all(fd, data)
            os.ftruncate(fd, len(data))
            os.fsync(fd)
        except BaseException:
            try:  # the original's blocks are still allocated: writing it back needs no new room
                os.lseek(fd, 0, os.SEEK_SET)
                _write_all(fd, original)
                os.ftruncate(fd, len(original))
                os.fsync(fd)
            except OSError as again:
                raise _RestoreFailed(again.errno, again.strerror) from None
            raise
    finally:
        os.close(fd)
