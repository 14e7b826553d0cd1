"""Never make a file worse, continued: one regression test per defect a second sweep of about 150 bad or edge inputs
found (tried as a new user and as a hostile one would, as root, on a fresh clone), grouped as that sweep reported
them: data loss, hangs and lost buffers, unbounded work, wrong or unclear answers.

Each test failed on the code before its fix. The systematic guarantees are tested where they live: the one writer
(every case here that writes), the bad-input table (test_reliability_bad_inputs.py), the server's request parser
(test_reliability_server_fuzz.py) and the option and environment tables (test_cli_errors.py).
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result
from fixtures_cli import fake_model
from fixtures_serve import plugin_env, wait_until

from infill import patch
from infill.cli import main

SOURCE = "def f(x):\n    return 0\n\n\ndef g(y):\n    return y\n"
FILLED = SOURCE.replace("return 0", "return x + 1")
FAKE = "fake-sweep"


@pytest.fixture(autouse=True)
def model() -> Iterator[None]:
    with fake_model(["    return x + 1"], name=FAKE):
        yield


def fill(*args: str, input: bytes | None = None) -> Result:  # noqa: A002 - CliRunner's word
    return CliRunner().invoke(main, ["fill", *args, "--model", FAKE], input=input)


def one_error_line(r: Result) -> str:
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.endswith(".infill-tmp"))


# --- data loss: -o replaced devices and named pipes with an ordinary file ---------------------------------------


def make_target(kind: str, path: Path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "device":
        if os.geteuid() != 0:
            pytest.skip("only root can create a device node")
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a copy of /dev/null
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_output_to_anything_but_a_regular_file_is_refused(kind: str, tmp_path: Path) -> None:
    source = tmp_path / "a.py"
    source.write_text(SOURCE)
    target = tmp_path / "out"
    make_target(kind, target)
    before = target.lstat()
    r = fill(str(source), "--span", "2", "-o", str(target))
    assert r.exit_code == 2, (r.exit_code, r.output)
    line = one_error_line(r)
    assert str(target) in line and ("not a regular file" in line or "is a directory" in line), line
    after = target.lstat()
    assert (after.st_ino, after.st_mode, after.st_rdev) == (before.st_ino, before.st_mode, before.st_rdev)
    assert source.read_text() == SOURCE and leftovers(tmp_path) == []


def test_the_writer_refuses_a_non_regular_target_itself(tmp_path: Path) -> None:
    """Every path that writes goes through patch.atomic_write, so the refusal is there, not only in `fill`."""
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(patch.InputError, match="not a regular file"):
        patch.atomic_write(str(tmp_path / "pipe"), b"data")
    assert stat.S_ISFIFO((tmp_path / "pipe").lstat().st_mode)


# --- data loss: a full disk left a hard-linked file cut short -----------------------------------------------------


def enospc_half_way(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """os.write writes half of what it is given once, then fails with ENOSPC (a disk that fills up)."""
    real = os.write
    calls: list[int] = []

    def write(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write)
    return calls


@pytest.mark.parametrize("links", [1, 2], ids=["renamed-over", "hard-linked-in-place"])
def test_a_full_disk_leaves_the_file_untouched(links: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "a.py"
    p.write_text(SOURCE)
    if links == 2:
        os.link(p, tmp_path / "link.py")
    calls = enospc_half_way(monkeypatch)
    r = fill(str(p), "--span", "2")
    assert calls, "the writer must write through os.write"
    assert r.exit_code == 2, (r.exit_code, r.output)
    line = one_error_line(r)
    assert line.startswith("error: ") and str(p) in line and "No space left on device" in line, line
    assert p.read_text() == SOURCE and leftovers(tmp_path) == []
    if links == 2:
        assert os.path.samefile(p, tmp_path / "link.py")


def test_a_failed_in_place_rewrite_puts_the_original_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The room for the new content was there (the temporary copy), then the in-place rewrite still failed half
    way (another process filled the disk meanwhile): the original bytes are written back."""
    p = tmp_path / "a.py"
    p.write_bytes(b"old content\n" * 10)
    os.link(p, tmp_path / "link.py")
    real = os.write
    writes: list[int] = []

    def write(fd: int, data: bytes | memoryview) -> int:
        writes.append(fd)
        if len(writes) == 2:  # the first write is the complete copy, the second the rewrite itself
            real(fd, bytes(data[:7]))
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(patch.InputError, match="No space left on device; the file is unchanged"):
        patch.atomic_write(str(p), b"new content, longer than the old one\n" * 10)
    assert p.read_bytes() == b"old content\n" * 10 and leftovers(tmp_path) == []


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs: a real file system that fills up (root only)."""
    mount = shutil.which("mount")
    if os.geteuid() != 0 or mount is None:
        pytest.skip("mounting a tmpfs needs root; test_a_full_disk_leaves_the_file_untouched covers the logic")
    folder = tmp_path / "tiny"
    folder.mkdir()
    done = subprocess.run([mount, "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


@pytest.mark.parametrize("links", [1, 2], ids=["renamed-over", "hard-linked-in-place"])
def test_a_really_full_disk_leaves_the_file_untouched(links: int, tiny_tmpfs: Path) -> None:
    p = tiny_tmpfs / "a.py"
    source = SOURCE + "#" * (4094 - len(SOURCE)) + "\n"  # a full page: the fill needs a second one
    p.write_text(source)
    if links == 2:
        os.link(p, tiny_tmpfs / "link.py")
    fd = os.open(tiny_tmpfs / "filler", os.O_WRONLY | os.O_CREAT)
    try:  # take every free block
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(fd)
    r = fill(str(p), "--span", "2")
    assert r.exit_code == 2, (r.exit_code, r.output)
    assert "No space left on device" in one_error_line(r)
    assert p.read_text() == source and leftovers(tiny_tmpfs) == []


# --- lost buffers: Ctrl-C or SIGTERM wiped the editor filter's buffer, SIGTERM left the temporary file -----------

TESTS = Path(__file__).resolve().parent


def start_cli(args: list[str], cwd: Path, stdin: bytes = b"", **env: str) -> subprocess.Popen[bytes]:
    """`infill ARGS` in a real process (tests/fixtures_cli.py as a script: a fake model `fake-cli`)."""
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)]), **env}
    given = cwd / ".stdin"
    given.write_bytes(stdin)
    with open(given, "rb") as fh:
        return subprocess.Popen(
            [sys.executable, str(TESTS / "fixtures_cli.py"), *args],
            cwd=cwd,
            env=environ,
            stdin=fh,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_interruptible,
        )


def _interruptible() -> None:
    """Ctrl-C reaches the child as it reaches a command typed in a terminal: a suite started in the background by
    a non-interactive shell ignores SIGINT, and a process that starts with SIGINT ignored never sees it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_when(process: subprocess.Popen[bytes], marker: Path, signum: int) -> tuple[bytes, bytes]:
    wait_until(lambda: marker.exists() or process.poll() is not None, what=f"{marker.name} to appear")
    assert process.poll() is None, process.communicate()
    process.send_signal(signum)
    return process.communicate(timeout=120)


SIGNALS = [pytest.param(signal.SIGINT, 130, id="ctrl-c"), pytest.param(signal.SIGTERM, 143, id="sigterm")]


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_to_the_editor_filter_echoes_the_input(signum: int, code: int, tmp_path: Path) -> None:
    marker = tmp_path / "filling"
    process = start_cli(
        ["fill", "-", "--stdin-filename", "a.py", "--span", "2", "--model", "fake-cli"],
        tmp_path,
        SOURCE.encode(),
        FAKE_CLI_FILL="    return x + 1",
        FAKE_CLI_STALL=str(marker),
    )
    out, err = signal_when(process, marker, signum)
    assert process.returncode == code, err
    assert out == SOURCE.encode()  # the buffer comes back, byte for byte
    assert err == b""  # the filter is quiet on stderr (some editors read both streams)


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_during_a_fill_is_one_quiet_line(signum: int, code: int, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(SOURCE)
    marker = tmp_path / "filling"
    process = start_cli(["fill", "a.py", "--span", "2", "--model", "fake-cli"], tmp_path, FAKE_CLI_STALL=str(marker))
    out, err = signal_when(process, marker, signum)
    assert process.returncode == code, err
    assert out == b"" and len(err.decode().splitlines()) == 1, err
    assert (tmp_path / "a.py").read_text() == SOURCE


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_during_the_write_leaves_no_temporary_file(signum: int, code: int, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(SOURCE)
    marker = tmp_path / "writing"
    process = start_cli(
        ["fill", "a.py", "--span", "2", "--model", "fake-cli"],
        tmp_path,
        FAKE_CLI_FILL="    return x + 1",
        FAKE_CLI_STALL_WRITE=str(marker),
    )
    _, err = signal_when(process, marker, signum)
    assert process.returncode == code, err
    assert (tmp_path / "a.py").read_text() == SOURCE
    assert leftovers(tmp_path) == []  # no .a.py.*.infill-tmp


# --- unbounded reads: --context /dev/zero grew without limit, a named pipe hung ----------------------------------


def limited_memory() -> None:
    """In the child: at most 3 GB of data, so a regression that reads /dev/zero fails instead of eating the
    machine."""
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, 3 << 30))


@pytest.mark.parametrize("kind", ["dev-zero", "fifo"])
def test_a_context_file_that_never_ends_is_refused(kind: str, tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text(SOURCE)
    context = "/dev/zero" if kind == "dev-zero" else str(tmp_path / "pipe")
    if kind == "fifo":
        os.mkfifo(context)  # nobody ever writes to it
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    done = subprocess.run(
        [
            sys.executable,
            str(TESTS / "fixtures_cli.py"),
            "fill",
            "a.py",
            "--span",
            "2",
            "--context",
            context,
            "--model",
            "fake-cli",
        ],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        timeout=300,
        preexec_fn=limited_memory,
    )
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.decode().splitlines()
    assert context in line and "not a regular file" in line, line
    assert (tmp_path / "a.py").read_text() == SOURCE


def test_context_files_are_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from infill import options

    monkeypatch.setattr(options, "MAX_CONTEXT_BYTES", 1 << 20)
    p = tmp_path / "a.py"
    p.write_text(SOURCE)
    (tmp_path / "one.py").write_text("x = 1\n" * 100_000)  # 600,000 bytes: fits
    (tmp_path / "two.py").write_text("y = 2\n" * 100_000)  # together 1.2 MB: does not
    r = fill(str(p), "--span", "2", "--context", str(tmp_path / "one.py"), "--context", str(tmp_path / "two.py"))
    assert r.exit_code == 2, r.output
    line = one_error_line(r)
    assert "two.py" in line and "more than 1 MiB" in line, line
    assert fill(str(p), "--span", "2", "--context", str(tmp_path / "one.py")).exit_code == 0
    assert p.read_text() == FILLED


# --- -o /dev/stdout: the daemon wrote into its own log, in-process it was "folder is read-only" -------------------


def test_output_to_dev_stdout_prints_the_file(tmp_path: Path) -> None:
    """In a real process (/dev/stdout is its file descriptor 1) -o /dev/stdout prints what -o - prints (in this
    process: the same output, without the cost of a second process)."""
    (tmp_path / "a.py").write_text(SOURCE)
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent), str(TESTS)])}
    command = [sys.executable, str(TESTS / "fixtures_cli.py"), "fill", "a.py", "--span", "2", "--model", "fake-cli"]
    done = subprocess.run(
        [*command, "-o", "/dev/stdout"], cwd=tmp_path, env={**environ, "FAKE_CLI_FILL": "    return x + 1"},
        capture_output=True, timeout=300,
    )  # fmt: skip
    assert (done.returncode, done.stdout.decode(), done.stderr) == (0, FILLED, b""), done.stderr
    dash = fill(str(tmp_path / "a.py"), "--span", "2", "-o", "-")
    assert (dash.exit_code, dash.stdout, dash.stderr) == (0, FILLED, ""), dash.output
    assert (tmp_path / "a.py").read_text() == SOURCE


def test_output_targets_are_resolved_before_a_daemon_sees_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The daemon resolves paths in its own process, where /dev/stdout is its log file: the client decides."""
    from infill.commands import fill as command

    sent: list[dict[str, object]] = []

    def daemon(request: dict[str, object], mode: str, idle_timeout: float | None) -> dict[str, object]:
        sent.append(request)
        return {"exit_code": 0, "stdout": FILLED, "stderr": [], "result": None}

    monkeypatch.setattr(command, "fill_command", daemon)
    (tmp_path / "a.py").write_text(SOURCE)
    r = fill(str(tmp_path / "a.py"), "--span", "2", "-o", "/dev/stdout")
    assert r.exit_code == 0 and r.stdout == FILLED, r.output
    assert [request["output"] for request in sent] == ["-"]


# --- hangs: a client stopped (Ctrl-Z) while it held the daemon's spawn lock made every other client wait ----------

HOLD_THE_LOCK = """
import os, signal, sys
from infill.server import client, lifecycle

def stop_here(*args, **kwargs):  # a client paused (Ctrl-Z) while it starts the daemon, holding the spawn lock
    os.kill(os.getpid(), signal.SIGSTOP)
    sys.exit(1)

lifecycle.spawn = stop_here
client.connect_daemon(lifecycle.runtime_paths(), spawn=True)
"""


def stopped(pid: int) -> bool:
    return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] == b"T"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="a stopped process is told apart through /proc")
def test_a_stopped_client_holding_the_spawn_lock_blocks_nobody(runtime_dir: Path, tmp_path: Path) -> None:
    env = plugin_env(runtime_dir, INFILL_DAEMON_DEBUG="1")
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_LOCK], env=env, cwd=TESTS.parent)
    try:
        wait_until(lambda: stopped(holder.pid), what="the lock holder to stop")
        (tmp_path / "a.py").write_text(SOURCE)
        done = subprocess.run(
            [sys.executable, "-m", "infill", "fill", "a.py", "--span", "2", "--daemon", "on", "--model", "default"],
            cwd=tmp_path, env=env, capture_output=True, timeout=300,
        )  # fmt: skip
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == 0, done.stderr
    notes = done.stderr.decode()
    assert f"pid {holder.pid}) is stopped" in notes and "working in-process" in notes, notes


# --- unbounded work: --beam 100000 ran out of memory, -n 100000 for minutes, --threads 100000 crashed torch --------


@pytest.mark.parametrize(
    "args",
    [
        ["fill", "{f}", "--span", "2", "--beam", "100000"],
        ["fill", "{f}", "--span", "2", "-n", "100000"],
        ["fill", "{f}", "--span", "2", "--max-resample", "100000"],
        ["fill", "{f}", "--span", "2", "--rescue-width", "1000"],
        ["--threads", "100000", "fill", "{f}", "--span", "2"],
        ["--threads", "2000", "fill", "{f}", "--span", "2"],
    ],
    ids=["beam", "candidates", "max-resample", "rescue-width", "threads", "threads-2000"],
)
def test_work_one_command_asks_for_is_bounded(args: list[str], tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    p.write_text(SOURCE)
    r = CliRunner().invoke(main, [a.replace("{f}", str(p)) for a in args] + ["--model", FAKE])
    assert r.exit_code == 2, r.output
    line = one_error_line(r)
    assert line.startswith("error: ") and "is not in the range" in line, line
    assert p.read_text() == SOURCE


def test_the_server_and_the_command_line_share_the_bounds() -> None:
    """One table (infill.options) bounds both: a flag's range is what a server request may ask for."""
    from infill import options
    from infill.server import params as server_params
    from infill.server.protocol import ProtocolError

    for name in ("beam", "candidates", "max_resample", "rescue_width"):
        option = options.BY_NAME[name]
        assert isinstance(option.type, click.IntRange) and option.type.max is not None, name
        with pytest.raises(ProtocolError, match="at most"):
            server_params.from_params({name: option.type.max + 1})
        server_params.from_params({name: option.type.max})


# --- environment variables: a client-only one restarted the daemon, junk values were ignored or crashed ----------


def test_a_client_only_variable_does_not_restart_the_daemon(runtime_dir: Path) -> None:
    from infill.server import client

    params = {"text": SOURCE, "spans": [[10, 22]], "file": "a.py", "want_pid": True}
    first = client.request("fill", params, "on", env=plugin_env(runtime_dir))
    debug = plugin_env(runtime_dir, INFILL_DAEMON_DEBUG="1", INFILL_DAEMON_TIMEOUT="600")
    again = client.request("fill", params, "on", env=debug)
    assert first is not None and again is not None
    assert again["stats"]["pid"] == first["stats"]["pid"]  # the same daemon, its model still loaded
    info = client.status(debug)
    assert info is not None and info["compatible"] is True
    threads = plugin_env(runtime_dir, INFILL_THREADS="2")  # this one can change a result: a restart
    assert client.status(threads)["differences"] == ["env"]  # type: ignore[index]
    r = CliRunner(env=threads).invoke(main, ["daemon", "status"])
    assert "other environment variables" in r.stdout and "other code" not in r.stdout


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("INFILL_DAEMON_TIMEOUT", "1e999"),
        ("INFILL_DAEMON_TIMEOUT", "soon"),
        ("INFILL_DAEMON_TIMEOUT", "-1"),
        ("INFILL_DAEMON_IDLE_TIMEOUT", "nan"),
        ("INFILL_NO_DAEMON", "please"),
        ("INFILL_DAEMON_DEBUG", "2"),
        ("INFILL_THREADS", "100000"),
        ("INFILL_DEBUG", "maybe"),
        ("INFILL_ENGINE", "fast"),  # was a model error (exit 123), and only once a model loaded
        ("INFILL_REMOTE_TIMEOUT", "soon"),  # was ignored by every command that uses no model server
        ("INFILL_ALLOW_HTTP", "maybe"),  # was read as no, without a word
        ("INFILL_DIST_TIMEOUT", "soon"),  # these three were read where they are used, or never: ignored here
        ("INFILL_CACHE_DIR", "cache"),  # relative: another folder in every directory, and the daemon runs in /
        ("INFILL_DATA_DIR", "data"),
    ],
)
def test_junk_in_an_environment_variable_is_a_usage_error(name: str, value: str, tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    p.write_text(SOURCE)
    r = CliRunner(env={name: value}).invoke(main, ["fill", str(p), "--span", "2", "--model", FAKE])
    assert r.exit_code == 2, r.output
    line = one_error_line(r)
    assert line.startswith("error: ") and name in line, line
    assert p.read_text() == SOURCE
    filtered = CliRunner(env={name: value}).invoke(
        main, ["fill", "-", "--stdin-filename", "a.py", "--span", "2", "--model", FAKE], input=SOURCE
    )
    assert (filtered.exit_code, filtered.stdout, filtered.stderr) == (2, SOURCE, "")  # the filter echoes


# --- a fill of a thousand spans printed nothing for ten minutes ----------------------------------------------------


def many_spans(n: int) -> str:
    return "".join(f"def f{i}(x):\n    <FILL>\n\n\n" for i in range(n))


def test_a_long_fill_shows_progress_on_a_plain_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """stderr is not a terminal here (no progress bar): plain lines instead, as often as PLAIN_EVERY says (every
    step here), and only on stderr: stdout stays the diff."""
    from infill import progress

    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    monkeypatch.setattr(progress, "PLAIN_TOKENS", 1)
    p = tmp_path / "many.py"
    p.write_text(many_spans(6))
    r = fill(str(p), "--marker", "<FILL>", "--diff")
    assert r.exit_code == 1, r.output
    lines = r.stderr.splitlines()
    assert lines and all(line.startswith("infill: filling 6 span(s): ") for line in lines), lines
    assert r.stdout.startswith("--- a/")


@pytest.mark.parametrize("flags", [["-q"], ["--format", "json"]], ids=["quiet", "json"])
def test_no_progress_where_stderr_must_stay_quiet(
    flags: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infill import progress

    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    monkeypatch.setattr(progress, "PLAIN_TOKENS", 1)
    p = tmp_path / "many.py"
    p.write_text(many_spans(3))
    assert fill(str(p), "--marker", "<FILL>", *flags).stderr == ""
    filtered = fill("-", "--stdin-filename", "a.py", "--marker", "<FILL>", input=many_spans(3).encode())
    assert filtered.exit_code == 0 and filtered.stderr == ""


def test_the_work_of_a_fill_grows_linearly_with_its_spans(tmp_path: Path) -> None:
    """Every span costs about the same: model passes grow in proportion to the spans, and no pass sees more than
    the model's window (a region of many spans is cut into windows), so time grows linearly too."""
    seen: list[int] = []
    with fake_model(["return x"], name="fake-window", max_length=256) as model:
        real = model._logits

        def logits(ids: object, *args: object, **kwargs: object) -> object:
            seen.append(len(ids))  # type: ignore[arg-type]
            return real(ids, *args, **kwargs)  # type: ignore[arg-type]

        model._logits = logits  # type: ignore[method-assign]
        passes = []
        for n in (8, 32):
            p = tmp_path / f"many{n}.py"
            p.write_text(many_spans(n))
            before = model.forwards
            r = CliRunner().invoke(main, ["fill", str(p), "--marker", "<FILL>", "--model", "fake-window"])
            assert r.exit_code == 0, r.output
            passes.append(model.forwards - before)
    assert passes[1] <= 4.5 * passes[0], passes
    assert max(seen) <= 256


# --- lone-CR files: docstrings refused them, --diff made a patch that patch and git apply reject --------------------

LONE_CR = b"def f(x):\r    return 0\r\r\rdef g(y):\r    return y\r"


def test_docstrings_fill_a_lone_cr_file(tmp_path: Path) -> None:
    from fixtures_doc import FakeFiller

    p = tmp_path / "mac.py"
    p.write_bytes(LONE_CR)
    compile(LONE_CR, str(p), "exec")  # CPython reads a lone CR as a line break
    r = CliRunner().invoke(main, ["docstrings", str(p)], obj={"slot_filler": FakeFiller()})
    assert r.exit_code == 0, r.output
    out = p.read_bytes()
    assert b"\n" not in out and out.count(b'"""') == 6  # three docstrings, every line break still a lone CR
    compile(out, str(p), "exec")


def apply_patch(diff: bytes, original: bytes, folder: Path) -> bytes:
    """`diff` applied to `original` by the tools users apply patches with: `patch`, else `git apply`."""
    target = folder / "mac.py"
    target.write_bytes(original)
    (folder / "change.diff").write_bytes(diff)
    if shutil.which("patch"):
        subprocess.run(["patch", "-s", str(target), str(folder / "change.diff")], check=True, cwd=folder)
    else:
        assert shutil.which("git"), "neither patch nor git is installed"
        subprocess.run(["git", "init", "-q"], check=True, cwd=folder)
        subprocess.run(["git", "apply", "-p1", "change.diff"], check=True, cwd=folder)
    return target.read_bytes()


@pytest.mark.parametrize(
    "content",
    [LONE_CR, LONE_CR.replace(b"\r", b"\r\n"), LONE_CR.replace(b"\r", b"\n")],
    ids=["lone-cr", "crlf", "lf"],
)
def test_a_diff_applies_whatever_the_line_endings(
    content: bytes, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = tmp_path / "mac.py"
    p.write_bytes(content)
    monkeypatch.chdir(tmp_path)
    r = fill("mac.py", "--span", "2", "--diff")
    assert r.exit_code == 1, r.output
    newline = b"\r\n" if b"\r\n" in content else content[9:10]
    expected = content.replace(b"return 0", b"return x + 1")
    assert b"return x + 1" + newline in expected
    folder = tmp_path / "apply"
    folder.mkdir()
    assert apply_patch(r.stdout_bytes, content, folder) == expected
    assert p.read_bytes() == content  # --diff writes nothing


# --- --format json: -o was written although JSON mode writes nothing, and only some errors were JSON ---------------


def crash(*args: object, **kwargs: object) -> None:
    raise ZeroDivisionError("a bug")


@pytest.mark.parametrize(
    ("args", "code", "kind"),
    [
        (["--span", "2"], 0, None),
        (["--function", "nope"], 2, "input_error"),
        (["--span", "99"], 2, "input_error"),
        (["--span", "2", "--bogus"], 2, "input_error"),
        (["--span", "2", "--tokens", "0"], 2, "input_error"),
        (["--span", "2", "-o", "{d}/out.py"], 2, "input_error"),
        (["--span", "2", "--context", "{d}"], 2, "input_error"),
        (["--span", "2", "--crash"], 123, "internal_error"),
    ],
    ids=["ok", "selector", "span", "unknown-flag", "bad-value", "with-output", "context-folder", "bug"],
)
def test_json_mode_prints_one_document_for_every_outcome(
    args: list[str], code: int, kind: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infill.core import pipeline

    p = tmp_path / "a.py"
    p.write_text(SOURCE)
    if "--crash" in args:
        monkeypatch.setattr(pipeline, "fill_text", crash)
        args = [a for a in args if a != "--crash"]
    r = fill(str(p), *[a.replace("{d}", str(tmp_path)) for a in args], "--format", "json")
    assert r.exit_code == code, r.output
    document = json.loads(r.stdout)
    assert set(document) >= {"file", "edits", "stats"} and document["file"] == str(p)
    if kind is None:
        assert "error" not in document and document["edits"]
    else:
        assert document["edits"] == [] and document["error"]["code"] == kind
        assert document["error"]["exit_code"] == code and "\n" not in document["error"]["message"]
        assert len(r.stderr.splitlines()) == 1  # and the one stderr line, as without --format json
    assert p.read_text() == SOURCE and sorted(os.listdir(tmp_path)) == ["a.py"]  # nothing is ever written


# --- unclear answers: messages that did not name the file, or named an option the command does not have ----------


def test_the_server_says_what_a_named_pipe_is(tmp_path: Path) -> None:
    from infill.server.dispatch import Dispatcher

    os.mkfifo(tmp_path / "pipe.py")
    request = {"id": 1, "method": "docstrings", "params": {"path": "pipe.py", "cwd": str(tmp_path)}}
    reply = json.loads(Dispatcher().handle_line(json.dumps(request).encode()))
    assert reply["error"]["code"] == "input_error" and reply["error"]["exit_code"] == 2
    assert "not a regular file" in reply["error"]["message"] and "no such" not in reply["error"]["message"]


def test_no_valid_fill_names_the_input(tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    p.write_text(SOURCE)
    with fake_model(['"""unterminated'], name="fake-unparseable"):
        args = ["--span", "2", "--no-retrieve", "--model", "fake-unparseable"]  # no line of the file's own either
        r = CliRunner().invoke(main, ["fill", str(p), *args])
        filtered = CliRunner().invoke(main, ["fill", "-", "--stdin-filename", "x.py", "-v", *args], input=SOURCE)
    assert r.exit_code == filtered.exit_code == 3
    assert one_error_line(r).startswith(f"error: {p}: no valid fill")
    assert one_error_line(filtered).startswith("error: x.py: no valid fill") and filtered.stdout == SOURCE


def test_docstrings_suggest_only_what_they_have(tmp_path: Path) -> None:
    from fixtures_doc import FakeFiller

    p = tmp_path / "a.py"
    p.write_text(SOURCE)
    p.chmod(0o444)
    try:
        r = CliRunner().invoke(main, ["docstrings", str(p)], obj={"slot_filler": FakeFiller()})
    finally:
        p.chmod(0o644)
    assert r.exit_code == 2
    line = next(line for line in r.stderr.splitlines() if line.startswith("error:"))
    assert "read-only" in line and "(use --diff)" in line and "-o PATH" not in line, line


# --- odd bytes and numbers in server requests ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "params",
    [
        b'{"text": "x = 1\\n", "span": "1", "seed": ' + b"9" * 5000 + b"}",  # Python refuses to even convert it
        b'{"text": "x = 1\\n", "span": "1", "k": 18446744073709551617}',
        b'{"text": "x = \\u0000\\n", "span": "1"}',
        b'{"text": "x = 1\\n", "span": "1", "filename": "a\\u0000.py"}',
        b'{"text": "x = \\ud800\\n", "span": "1"}',
        b'{"text": "x = 1\\n", "marker": "\\udfff"}',
        b'{"text": "x = 1\\n", "span": "1", "\\ud800": 1}',
    ],
    ids=["5000-digits", "above-64-bits", "nul-in-text", "nul-in-filename", "surrogate-text", "surrogate", "key"],
)
def test_the_server_refuses_what_json_allows_but_it_cannot_use(params: bytes) -> None:
    from infill.server.dispatch import Dispatcher

    reply = json.loads(Dispatcher().handle_line(b'{"id": 3, "method": "fill", "params": ' + params + b"}"))
    assert reply["error"]["code"] == "invalid_request" and reply["error"]["exit_code"] == 2, reply


@pytest.mark.parametrize("filename", ["", "..", "/"])
def test_a_docstrings_request_needs_a_file_name(filename: str) -> None:
    """The server fills a buffer in a private copy named after "filename": one that names no file was an internal
    error (it wrote to the copy's folder)."""
    from infill.server.dispatch import Dispatcher

    params = {"text": SOURCE, "filename": filename}
    reply = json.loads(
        Dispatcher().handle_line(json.dumps({"id": 1, "method": "docstrings", "params": params}).encode())
    )
    assert reply["error"]["code"] == "input_error" and "filename" in reply["error"]["message"], reply


@pytest.mark.parametrize(
    ("failing", "number"),
    [
        ("write", errno.EDQUOT),  # over the user's quota
        ("mkstemp", errno.EROFS),  # a read-only file system (its folder looked writable)
        ("replace", errno.EPERM),  # an immutable or append-only file (chattr +i / +a)
    ],
)
def test_a_refused_write_is_one_line_naming_the_file(
    failing: str, number: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError(number, os.strerror(number))

    target = {"write": (os, "write"), "mkstemp": (tempfile, "mkstemp"), "replace": (os, "replace")}[failing]
    p = tmp_path / "a.py"
    p.write_text(SOURCE)
    with monkeypatch.context() as patched:
        patched.setattr(*target, refuse)
        r = fill(str(p), "--span", "2")
    assert r.exit_code == 2, r.output
    line = one_error_line(r)
    assert line == f"error: {p}: cannot write: {os.strerror(number)}; the file is unchanged", line
    assert p.read_text() == SOURCE and leftovers(tmp_path) == []


WRITERS = re.compile(r"\.write_(text|bytes)\(|\bopen\([^)]*[\"'][wax]b?[\"']|os\.(replace|rename|open)\(")


def test_every_path_that_writes_a_users_file_goes_through_the_one_writer() -> None:
    """fill, docstrings, the server and the daemon write a file only through infill.patch.atomic_write (which
    refuses what is not a regular file and never leaves a partial one): nothing else there opens a file for
    writing. (The daemon's own socket and log files are lifecycle's business.)"""
    root = TESTS.parent / "infill"
    sources = [root / "commands" / "fill.py", root / "commands" / "docstrings.py", root / "api.py"]
    for folder in ("core", "server", "docstrings"):
        sources += sorted((root / folder).glob("*.py"))
    found = [
        f"{path.relative_to(root)}:{n}: {line.strip()}"
        for path in sources
        if path.name not in ("lifecycle.py", "daemon.py")
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if WRITERS.search(line)
    ]
    assert found == []
    assert "atomic_write" in (root / "server" / "handlers.py").read_text(encoding="utf-8")
