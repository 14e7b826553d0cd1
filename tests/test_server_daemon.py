"""The per-user daemon's life cycle through the real client: real processes, a private runtime dir per test,
and every daemon stopped afterwards (the runtime_dir fixture). No timing assertions: waits poll with generous
timeouts."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from infill.errors import InputError
from infill.server import client, lifecycle, protocol
from infill.server.dispatch import ModelCache, ServerContext
from tests.fixtures_serve import (
    REPO_ROOT,
    daemon_dir,
    fake_fill,
    pid_alive,
    plugin_env,
    serve_socket_process,
    wait_until,
)

PARAMS = {"text": "def f(x):\n    return x\n", "spans": [[10, 23]], "file": "f.py", "want_pid": True}


def in_process(params: dict[str, Any]) -> dict[str, Any]:
    """What a command does when the client returns None (the fallback), here with the same fake."""
    from infill import api
    from infill.models import registry
    from tests.fixtures_serve import FAKE_MODEL, fake_factory

    registry.register(FAKE_MODEL, fake_factory)
    try:
        return fake_fill(params, ServerContext(ModelCache()))
    finally:
        registry.unregister(FAKE_MODEL)
        api.clear_model_cache()


def fill(env: dict[str, str], params: dict[str, Any] = PARAMS, mode: str = "on") -> dict[str, Any] | None:
    return client.request("fill", params, mode, env=env)


def daemon_pid(env: dict[str, str]) -> int:
    info = client.status(env)
    assert info is not None
    return int(info["pid"])


def test_start_on_demand_reuse_and_status(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    assert client.status(env) is None
    first = fill(env)
    assert first is not None
    pid = first["stats"].pop("pid")
    assert pid != os.getpid() and pid == daemon_pid(env)
    assert client.status(env)["idle_timeout"] == 120  # type: ignore[index]  # from INFILL_DAEMON_IDLE_TIMEOUT
    local = in_process(PARAMS)
    local["stats"].pop("pid")
    assert first == local  # the daemon's answer is exactly the in-process one
    second = fill(env)
    assert second is not None and second["stats"]["pid"] == pid  # reused, not restarted
    loads = client.request("fake_loads", {}, "on", env=env)
    assert loads == {"loads": 1, "pid": pid}  # the model stayed loaded between requests
    st = os.stat(daemon_dir(runtime_dir) / "daemon.sock")
    assert stat.S_ISSOCK(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(runtime_dir).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(daemon_dir(runtime_dir)).st_mode) == 0o700


def test_input_errors_come_back_as_the_same_exception(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    bad = {"text": "abc", "spans": [[1, 50]]}
    with pytest.raises(InputError) as from_daemon:
        fill(env, bad)
    with pytest.raises(InputError) as local:
        in_process(bad)
    assert str(from_daemon.value) == str(local.value) and from_daemon.value.line == 1
    assert fill(env) is not None  # the daemon is still fine


def test_idle_daemon_exits_and_removes_its_socket(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    result = client.request("fill", PARAMS, "on", env=env, idle_timeout=0.5)
    assert result is not None
    pid = result["stats"]["pid"]  # not from a ping: the daemon may be gone already on a loaded machine
    wait_until(lambda: not pid_alive(pid), what="the idle daemon to exit")
    assert not (daemon_dir(runtime_dir) / "daemon.sock").exists()
    assert "exiting" in (daemon_dir(runtime_dir) / "daemon.log").read_text()


def test_stale_socket_is_replaced(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    path = daemon_dir(runtime_dir) / "daemon.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))  # bound, never listening, then closed: what a crashed daemon leaves behind
    dead.close()
    # lock files left behind are harmless: flock locks die with their holder
    (daemon_dir(runtime_dir) / "spawn.lock").touch()
    (daemon_dir(runtime_dir) / "daemon.sock.lock").touch()
    assert path.exists() and client.status(env) is None
    result = fill(env)
    assert result is not None and result["stats"]["pid"] == daemon_pid(env)


def _listening(path: Path) -> bool:
    sock = lifecycle.connect(path, timeout=1.0)
    if sock is None:
        return False
    sock.close()
    return True


def test_killed_mid_request_falls_back_with_identical_result(runtime_dir: Path) -> None:
    die_flag = runtime_dir / "die-next"
    # INFILL_DAEMON_DEBUG: a failure's captured stderr says why a fill did not go to a daemon
    env = plugin_env(runtime_dir, INFILL_TEST_DIE_FLAG=str(die_flag), INFILL_DAEMON_DEBUG="1")
    params = {**PARAMS, "want_pid": False}
    healthy = fill(env, params)
    assert healthy is not None
    pid = daemon_pid(env)
    die_flag.touch()  # the daemon SIGKILLs itself inside the next request
    assert fill(env, params) is None  # the client saw the connection drop: do it in-process
    assert not die_flag.exists()
    wait_until(lambda: not pid_alive(pid), what="the killed daemon to be gone")
    # its main thread shows as a zombie before its other threads have exited and its files are closed: until
    # then its socket still takes connections, which it never answers (the client sees the process is dead and
    # starts a fresh daemon: test_a_dead_daemon_whose_socket_still_takes_connections_is_replaced)
    wait_until(lambda: not _listening(lifecycle.runtime_paths(env).socket), what="the killed daemon's socket")
    assert in_process(params) == healthy  # what the command prints is the same either way
    again = fill(env, {**params, "want_pid": True})  # the next request starts a fresh daemon
    assert again is not None and again["stats"]["pid"] not in (pid, os.getpid())


def test_a_dead_daemon_whose_socket_still_takes_connections_is_replaced(
    runtime_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon killed mid-request, whose listening socket outlives it (here held by a forked child; a SIGKILLed
    daemon's is until its last thread has exited): the socket takes connections and nobody answers them. Every
    later request waited out its ping and worked in-process (slow: each loads the model again), and no daemon
    could start at that path; now the client sees the process behind the socket is dead and starts a fresh one."""
    monkeypatch.setattr(client, "PING_TIMEOUT", 3.0)  # what the old client waited for, kept short
    die_flag, holder_file = runtime_dir / "die-next", runtime_dir / "holder"
    env = plugin_env(runtime_dir, INFILL_TEST_DIE_FLAG=str(die_flag), INFILL_TEST_DIE_HOLDING=str(holder_file))
    assert fill(env) is not None
    pid = daemon_pid(env)
    die_flag.touch()
    assert fill(env) is None  # killed mid-request: this one works in-process
    wait_until(holder_file.exists, what="the child holding the socket")
    holder = int(holder_file.read_text())
    try:
        wait_until(lambda: not pid_alive(pid), what="the killed daemon to be gone")
        raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        raw.connect(str(lifecycle.runtime_paths(env).socket))  # still takes connections
        raw.close()
        again = fill(env)  # the next request goes to a fresh daemon
        assert again is not None and again["stats"]["pid"] not in (pid, holder, os.getpid())
        assert client.status(env) is not None
    finally:
        os.kill(holder, signal.SIGKILL)


def test_a_daemon_killed_at_the_ping_is_replaced_at_once(runtime_dir: Path) -> None:
    """The socket accepted, and the connection was cut at the ping, because the daemon died: that request worked
    in-process; now it starts a fresh daemon, as for a socket that refuses."""
    die_flag = runtime_dir / "die-at-ping"
    env = plugin_env(runtime_dir, INFILL_TEST_DIE_AT_PING=str(die_flag), INFILL_DAEMON_DEBUG="1")
    assert fill(env) is not None
    pid = daemon_pid(env)
    die_flag.touch()
    again = fill(env)
    assert not die_flag.exists()  # the daemon took the ping, and died of it
    assert again is not None and again["stats"]["pid"] not in (pid, os.getpid())


def test_two_concurrent_clients_start_one_daemon(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    barrier = threading.Barrier(3)
    results: list[dict[str, Any] | None] = [None] * 3

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = fill(env)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert all(r is not None for r in results)
    pids = {r["stats"]["pid"] for r in results if r is not None}
    assert len(pids) == 1
    log = (daemon_dir(runtime_dir) / "daemon.log").read_text()
    assert log.count("starting on") == 1, log


def test_concurrent_cli_processes_start_one_daemon(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    code = (
        "import json, sys; from infill.server import client; "
        "print(json.dumps(client.request('fill', json.loads(sys.argv[1]), 'on')))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, json.dumps(PARAMS)], env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE
        )
        for _ in range(2)
    ]
    outs = [json.loads(p.communicate(timeout=180)[0]) for p in procs]
    assert outs[0] is not None and outs[0] == outs[1]
    assert (daemon_dir(runtime_dir) / "daemon.log").read_text().count("starting on") == 1


def test_version_mismatch_restarts_the_daemon(runtime_dir: Path) -> None:
    old = serve_socket_process(runtime_dir, plugin_env(runtime_dir, INFILL_TEST_FAKE_VERSION="0.0.1"))
    try:
        env = plugin_env(runtime_dir)
        info = client.status(env)
        assert info is not None and info["pid"] == old.pid and info["compatible"] is False
        result = fill(env)
        assert result is not None and result["stats"]["pid"] != old.pid
        old.wait(timeout=60)  # the old daemon was shut down
        assert client.status(env)["compatible"] is True  # type: ignore[index]
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()


def test_a_changed_installation_replaces_the_daemon(runtime_dir: Path, tmp_path: Path) -> None:
    """A `git pull` into an editable install (or the same version re-installed, or new packaged weights) keeps the
    installation key: the daemon, which keeps the stamp of the files it started with, must still be replaced."""
    import shutil

    from tests.fixtures_serve import TESTS_DIR

    shutil.copytree(REPO_ROOT / "infill", tmp_path / "infill", ignore=shutil.ignore_patterns("weights"))
    env = plugin_env(runtime_dir, PYTHONPATH=os.pathsep.join([str(tmp_path), str(TESTS_DIR)]))
    code = (
        "import json, sys; from infill.server import client; "
        "print(json.dumps([client.request('fill', json.loads(sys.argv[1]), 'on'), client.status()]))"
    )

    def fill_from_the_copy() -> tuple[int, dict[str, Any]]:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(PARAMS)], env=env, cwd=tmp_path, capture_output=True, timeout=120
        )
        assert done.returncode == 0, done.stderr.decode()
        result, info = json.loads(done.stdout)
        assert result is not None and info["compatible"] is True, done.stderr.decode()
        return result["stats"]["pid"], info

    old, info = fill_from_the_copy()
    assert info["pid"] == old and info["package"] == str((tmp_path / "infill").resolve())
    with (tmp_path / "infill" / "server" / "handlers.py").open("a") as module:
        module.write("# a git pull\n")
    new, _ = fill_from_the_copy()
    assert new != old
    wait_until(lambda: not pid_alive(old), what="the old daemon to exit")


def test_the_code_stamp_follows_file_changes_but_not_bytecode(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "__pycache__").mkdir(parents=True)
    (package / "weights").mkdir()
    module, weights = package / "mod.py", package / "weights" / "model.safetensors"
    module.write_text("x = 1\n")
    weights.write_bytes(b"1234")
    stamps = [lifecycle.code_stamp(package)]
    (package / "__pycache__" / "mod.cpython.pyc").write_bytes(b"compiled")  # the daemon's own imports
    assert lifecycle.code_stamp(package) == stamps[0]
    module.write_text("x = 2\n")  # a git pull: same size
    stamps.append(lifecycle.code_stamp(package))
    replacement = tmp_path / "new.safetensors"
    replacement.write_bytes(b"5678")
    st = weights.stat()
    os.utime(replacement, ns=(st.st_atime_ns, st.st_mtime_ns))  # same name, size and time: another file
    replacement.replace(weights)
    stamps.append(lifecycle.code_stamp(package))
    (package / "new.py").write_text("")
    stamps.append(lifecycle.code_stamp(package))
    assert len(set(stamps)) == len(stamps)


def test_the_code_stamp_follows_installs_beside_infill_and_its_queries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`pip install -U llama-cpp-python` (or torch) in infill's environment, or a `git pull` that changes only a
    tree-sitter query, must replace a daemon as a change of infill's own files does: installing changes the
    site-packages folder's entries, and the queries live beside the package in a checkout."""
    import site

    from infill import languages

    packages, queries = tmp_path / "site-packages", tmp_path / "grammars"
    (queries / "python").mkdir(parents=True)
    packages.mkdir()
    query = queries / "python" / "definitions.scm"
    query.write_text("(function_definition) @function\n")
    monkeypatch.setattr(site, "getsitepackages", lambda: [str(packages)])
    monkeypatch.setattr(site, "getusersitepackages", lambda: str(tmp_path / "no-user-site"))
    monkeypatch.setattr(languages, "grammars_root", lambda: queries)
    stamps = [lifecycle.code_stamp()]
    assert lifecycle.code_stamp() == stamps[0]
    (packages / "llama_cpp_python-0.4.dist-info").mkdir()  # an upgrade: a new dist-info folder
    os.utime(packages, ns=(0, packages.stat().st_mtime_ns + 1_000_000))  # coarse file-system clocks
    stamps.append(lifecycle.code_stamp())
    query.write_text("(class_definition) @class\n")  # a git pull: a query changed
    os.utime(query, ns=(0, query.stat().st_mtime_ns + 1_000_000))
    stamps.append(lifecycle.code_stamp())
    assert len(set(stamps)) == len(stamps)


def test_a_plugin_module_edited_after_the_daemon_imported_it_restarts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server plugin or model kind (INFILL_SERVER_PLUGINS, INFILL_KINDS) lives outside the package and
    site-packages, where code_stamp does not look: the daemon lists the files it imported from outside them in
    its ping, and a client finds the daemon stale ("code") once one of them is edited or removed."""
    import importlib

    from infill.server.dispatch import Dispatcher

    plugin = tmp_path / "smalls_outside_plugin.py"
    plugin.write_text("def register(server):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "smalls_outside_plugin", raising=False)
    server = Dispatcher()
    importlib.import_module("smalls_outside_plugin")  # as load_plugins or a model kind imports it
    ping = json.loads(server.handle_line(b'{"id": 1, "method": "ping"}\n'))
    assert str(plugin) in ping["outside"]
    assert not any(path.startswith(str(Path(sys.base_prefix))) for path in ping["outside"])  # not the stdlib
    assert client.differences(ping) == []
    st = plugin.stat()
    os.utime(plugin, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))  # edited (coarse file-system clocks)
    assert client.differences(ping) == ["code"]
    assert json.loads(server.handle_line(b'{"id": 2, "method": "ping"}\n'))["outside"] == ping["outside"]  # as seen
    plugin.unlink()  # removed
    assert client.differences(ping) == ["code"]
    assert client.differences({**ping, "outside": "garbage"}) == []  # an older daemon's ping: no such list


def test_a_shutdown_request_ends_the_accept_loop_without_waiting_for_its_poll(tmp_path: Path) -> None:
    """A shutdown request (and SIGTERM, through the same request_stop) wakes the daemon's accept loop: it used to
    see the stop only at its next poll, up to a second later, which every `infill daemon stop` waited for. Here
    the poll is an hour away, so only the wake-up can end the loop within the hang guard."""
    from infill.server.daemon import SocketServer
    from infill.server.dispatch import Dispatcher

    server = SocketServer(Dispatcher(), tmp_path / "d.sock")
    server._poll_interval = lambda: 3600.0  # type: ignore[method-assign]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    with socket.socket(socket.AF_UNIX) as sock:
        for _ in range(600):  # bound in the thread
            if (tmp_path / "d.sock").exists():
                break
            threading.Event().wait(0.01)
        sock.connect(str(tmp_path / "d.sock"))
        sock.sendall(b'{"id": 1, "method": "shutdown"}\n')
        assert json.loads(sock.makefile("rb").readline()) == {"id": 1, "shutdown": True}
    thread.join(timeout=60)  # a hang guard, not a timing: without the wake-up the loop waits for an hour
    assert not thread.is_alive()
    assert not (tmp_path / "d.sock").exists()
    server.request_stop()  # after the loop ended (and closed its pipe): nothing to wake, no error


def test_each_request_looks_only_at_the_modules_imported_since_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon looks for modules from outside after every request: at the ones imported or replaced since it
    last looked, not at all of sys.modules again (well over a thousand in a daemon, 1-2 ms a request, the bulk of
    a refused request's time), and still finds a module imported, or replaced, since."""
    import types

    looked: list[int] = []
    real = lifecycle.outside_modules

    def counting(modules: Any) -> list[str]:
        modules = list(modules)
        looked.append(len(modules))
        return real(modules)

    monkeypatch.setattr(lifecycle, "outside_modules", counting)
    outside = lifecycle.OutsideModules()
    outside.refresh()
    assert looked == [len(sys.modules)]  # the first time: all of them
    outside.refresh()
    assert sum(looked[1:]) == 0  # nothing imported since: nothing looked at
    for name in ("made.py", "remade.py"):  # imported, then replaced under the same name (importlib.reload)
        (tmp_path / name).write_text("")
        module = types.ModuleType("smalls_outside_made")
        module.__file__ = str(tmp_path / name)
        monkeypatch.setitem(sys.modules, "smalls_outside_made", module)
        assert str(tmp_path / name) in outside.refresh()
        assert looked[-1] == 1


@pytest.mark.parametrize(
    ("differences", "says"),
    [
        (["code"], "files (code, packaged models, packages installed beside it, or plugin modules)"),
        (["env"], "started under other environment variables"),
    ],
)
def test_status_says_why_the_next_request_restarts_the_daemon(
    monkeypatch: pytest.MonkeyPatch, differences: list[str], says: str
) -> None:
    from infill.cli import main

    info = {"pid": 7, "version": "0.1.0", "protocol": protocol.PROTOCOL_VERSION, "socket": "/s", "uptime": 3.0}
    monkeypatch.setattr(client, "status", lambda: {**info, "compatible": False, "differences": differences})
    result = CliRunner().invoke(main, ["daemon", "status"])
    assert result.exit_code == 0 and says in " ".join(result.output.split()), result.output
    assert "the next request restarts it" in " ".join(result.output.split())


def serve_at_the_daemon_socket(runtime_dir: Path, env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    """`infill serve --socket` at the daemon's own socket path, run to its end."""
    socket = str(daemon_dir(runtime_dir) / "daemon.sock")
    argv = [sys.executable, "-m", "infill", "serve", "--socket", socket]
    return subprocess.run(argv, env=env, cwd=REPO_ROOT, capture_output=True, timeout=120)


def test_live_socket_is_not_stolen(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    first = serve_socket_process(runtime_dir, env)
    try:
        second = serve_at_the_daemon_socket(runtime_dir, env)
        assert second.returncode == 2 and b"already listening" in second.stderr  # exit 1 means "changes needed"
        assert first.poll() is None and daemon_pid(env) == first.pid
    finally:
        first.terminate()
        assert first.wait(timeout=60) == 0  # SIGTERM is a clean exit
    assert not (daemon_dir(runtime_dir) / "daemon.sock").exists()


@pytest.mark.parametrize(
    "env_extra",
    [{"CI": "true"}, {"INFILL_NO_DAEMON": "1"}],
)
def test_auto_never_spawns_in_ci_or_when_disabled(runtime_dir: Path, env_extra: dict[str, str]) -> None:
    env = plugin_env(runtime_dir, **env_extra)
    assert fill(env, mode="auto") is None
    assert fill(env, mode="off") is None
    folder = daemon_dir(runtime_dir)
    assert not (folder / "daemon.sock").exists() and not (folder / "daemon.log").exists()


def test_auto_uses_the_daemon_outside_ci(runtime_dir: Path) -> None:
    result = fill(plugin_env(runtime_dir), mode="auto")
    assert result is not None and result["stats"]["pid"] != os.getpid()


def test_models_registered_in_this_process_stay_in_process(runtime_dir: Path) -> None:
    from infill.models import registry
    from tests.fixtures_serve import FAKE_MODEL, fake_factory

    registry.register(FAKE_MODEL, fake_factory)
    try:
        assert client.request("fill", PARAMS, "on", model=FAKE_MODEL, env=plugin_env(runtime_dir)) is None
    finally:
        registry.unregister(FAKE_MODEL)
    assert not (daemon_dir(runtime_dir) / "daemon.sock").exists()


def test_unsafe_runtime_dirs_are_refused_or_tightened(runtime_dir: Path) -> None:
    tmp_path = runtime_dir  # short: a socket path must fit in about 100 bytes (pytest-xdist's tmp_path may not)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    os.chmod(open_dir, 0o777)
    # $INFILL_RUNTIME_DIR is the user's folder: never chmod'ed (it was made 0700, shared folders and all);
    # writable by others without the sticky bit, it is refused
    with pytest.raises(lifecycle.DaemonUnavailable, match="can be written by other users"):
        lifecycle.runtime_paths({"INFILL_RUNTIME_DIR": str(open_dir)})
    assert stat.S_IMODE(os.stat(open_dir).st_mode) == 0o777
    for mode in (0o1777, 0o755):  # sticky like /tmp, or only readable by others: used as it is
        os.chmod(open_dir, mode)
        inner = lifecycle.runtime_paths({"INFILL_RUNTIME_DIR": str(open_dir)}).directory
        assert stat.S_IMODE(os.stat(open_dir).st_mode) == mode
        assert stat.S_IMODE(os.stat(inner).st_mode) == 0o700  # what infill made in it is private
    os.chmod(inner, 0o755)  # the per-installation folder infill made: tightened again
    lifecycle.runtime_paths({"INFILL_RUNTIME_DIR": str(open_dir)})
    assert stat.S_IMODE(os.stat(inner).st_mode) == 0o700
    link = tmp_path / "link"
    link.symlink_to(open_dir)
    with pytest.raises(lifecycle.DaemonUnavailable, match="symlink"):
        lifecycle.runtime_paths({"INFILL_RUNTIME_DIR": str(link)})
    assert client.request("fill", PARAMS, "on", env={"INFILL_RUNTIME_DIR": str(link)}) is None  # falls back
    if os.getuid() == 0:  # only root can hand a directory to someone else
        foreign = tmp_path / "foreign"
        foreign.mkdir(mode=0o700)
        os.chown(foreign, 65534, 65534)
        with pytest.raises(lifecycle.DaemonUnavailable, match="owned by uid 65534"):
            lifecycle.runtime_paths({"INFILL_RUNTIME_DIR": str(foreign)})


def test_daemon_cli_status_start_stop(runtime_dir: Path) -> None:
    from infill.cli import main

    env = plugin_env(runtime_dir)
    runner = CliRunner()
    result = runner.invoke(main, ["daemon", "status"], env=env)
    assert result.exit_code == 1 and "no daemon running" in result.output
    result = runner.invoke(main, ["daemon", "start", "--idle-timeout", "120"], env=env)
    assert result.exit_code == 0, result.output
    pid = daemon_pid(env)
    result = runner.invoke(main, ["daemon", "status", "--format", "json"], env=env)
    assert result.exit_code == 0 and json.loads(result.output)["pid"] == pid
    result = runner.invoke(main, ["daemon", "status"], env=env)
    assert f"pid {pid}" in result.output and "idle timeout 120 s" in result.output
    result = runner.invoke(main, ["daemon", "stop"], env=env)
    assert result.exit_code == 0 and "stopped" in result.output
    wait_until(lambda: not pid_alive(pid), what="the daemon to stop")
    assert runner.invoke(main, ["daemon", "stop"], env=env).output.strip() == "no daemon running"


def test_client_never_imports_torch(runtime_dir: Path) -> None:
    code = (
        "import sys\n"
        "import infill.server.client as c, infill.server.options\n"
        "import infill.commands.serve, infill.commands.daemon\n"
        "r = c.request('fill', {'text': 'ab', 'spans': [[0, 1]]}, 'on')\n"
        "assert r is not None and r['edits'], r\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "assert not heavy, heavy\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=plugin_env(runtime_dir),
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()


def test_ping_answers_during_a_long_request_and_a_gone_client_cancels_it(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    pid = client.connect_daemon(lifecycle.runtime_paths(env), spawn=True, env=env)
    assert pid is not None
    pid.close()
    marker = runtime_dir / "cancelled"
    sock = lifecycle.connect(daemon_dir(runtime_dir) / "daemon.sock", timeout=30)
    assert sock is not None
    sock.sendall(json.dumps({"id": 1, "method": "wait_for_cancel", "params": {"marker": str(marker)}}).encode())
    sock.sendall(b"\n")
    assert client.status(env) is not None  # ping is answered while the long request runs
    assert not marker.exists()
    sock.close()  # the client goes away mid-request
    wait_until(marker.exists, what="the request to notice its client left")
    assert fill(env) is not None  # and the daemon serves the next request


def test_infill_fill_client_process_never_imports_torch(runtime_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("a = 1\n")
    code = (
        "import atexit, sys\n"
        "heavy = lambda: sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "atexit.register(lambda: print('HEAVY', heavy(), file=sys.stderr))\n"
        "from infill.cli import main\n"
        "main(['fill', 'x.py', '--span', '1:1', '--daemon', 'on'])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=plugin_env(runtime_dir), cwd=tmp_path, capture_output=True, timeout=120
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode() == f"filled by pid {daemon_pid(plugin_env(runtime_dir))}\n"
    assert done.stderr.decode().splitlines() == ["note: fake", "HEAVY []"]


def test_a_regular_file_at_the_socket_path_is_never_replaced(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    (daemon_dir(runtime_dir) / "daemon.sock").write_text("not a socket")
    assert fill(env) is None  # falls back to in-process
    done = serve_at_the_daemon_socket(runtime_dir, env)
    assert done.returncode == 2 and b"not a socket" in done.stderr
    assert (daemon_dir(runtime_dir) / "daemon.sock").read_text() == "not a socket"


@pytest.mark.parametrize("where", ["missing-folder/s.sock", "x" * 120])
def test_a_socket_path_that_cannot_be_listened_on_is_named(runtime_dir: Path, where: str) -> None:
    """A socket in a folder that does not exist, or a path too long for a Unix socket: exit 2 and one line naming
    the path the user gave (it named a .lock file next to it, or no path at all)."""
    path = runtime_dir / where
    argv = [sys.executable, "-m", "infill", "serve", "--socket", str(path)]
    done = subprocess.run(argv, env=plugin_env(runtime_dir), cwd=REPO_ROOT, capture_output=True, timeout=120)
    lines = done.stderr.decode().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: cannot listen on {path}: ")


def read_answer(sock: socket.socket) -> dict[str, Any]:
    """The one JSON line a server answers, read until it closes or the line is whole."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    answer = json.loads(data)
    assert isinstance(answer, dict)
    return answer


def test_a_client_that_shuts_down_its_sending_side_still_gets_its_answer(runtime_dir: Path) -> None:
    env = plugin_env(runtime_dir)
    server = serve_socket_process(runtime_dir, env)
    try:
        marker = runtime_dir / "cancelled"
        sock = lifecycle.connect(daemon_dir(runtime_dir) / "daemon.sock", timeout=60)
        assert sock is not None
        with sock:
            request = {"id": 7, "method": "wait_for_cancel", "params": {"marker": str(marker), "seconds": 1}}
            sock.sendall(json.dumps(request).encode() + b"\n")
            sock.shutdown(socket.SHUT_WR)  # what `nc -N` and `printf ... | socat` do after the request
            answer = read_answer(sock)
        assert answer == {"id": 7, "cancelled": False}
        assert not marker.exists()
    finally:
        server.terminate()
        assert server.wait(timeout=60) == 0


def test_sigterm_during_a_real_fill_cancels_it_and_exits_cleanly(runtime_dir: Path) -> None:
    """The packaged model on the default engine, stopped mid-fill: the client gets an answer, the server exits 0
    with its socket removed. The interpreter shutting down under a thread inside the engine aborted the process
    (SIGABRT, "terminate called without an active exception")."""
    env = {k: v for k, v in plugin_env(runtime_dir).items() if k != "INFILL_SERVER_PLUGINS"}
    server = serve_socket_process(runtime_dir, env)
    socket_path = daemon_dir(runtime_dir) / "daemon.sock"
    try:
        text = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    x = 1\n    return a - b\n"
        params = {"text": text, "filename": "a.py", "span": "1:7", "tokens": 400, "beam": 0, "decoder": "sequential"}
        sock = lifecycle.connect(socket_path, timeout=120)
        assert sock is not None
        with sock:
            sock.sendall(json.dumps({"id": 1, "method": "fill", "params": params}).encode() + b"\n")
            wait_until(lambda: (client.status(env) or {}).get("models"), what="the fill to load its model")
            server.terminate()
            answer = read_answer(sock)
        assert answer["id"] == 1 and answer["error"]["code"] == "cancelled", answer
        assert answer["error"]["message"] == "the server is shutting down"
        _, stderr = server.communicate(timeout=60)
        assert server.returncode == 0, stderr.decode()
        assert b"terminate called" not in stderr
        assert not socket_path.exists()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_a_fill_command_stopped_with_its_daemon_is_no_answer(runtime_dir: Path, tmp_path: Path) -> None:
    """`infill daemon stop` (or a SIGTERM) during `infill fill`: the run, cancelled before its write, comes back as
    a "cancelled" error, on which the client does the work in-process, as when the daemon is killed; it came back
    as the command's own answer, "internal error: Cancelled", exit 123, and the user's fill failed."""
    from infill.core.fill import FillRequest
    from infill.spans import Selection

    pause = runtime_dir / "pause"
    env = plugin_env(runtime_dir, INFILL_SERVER_PLUGINS="fixtures_serve:install_models", INFILL_TEST_PAUSE=str(pause))
    (tmp_path / "a.py").write_text("def add(a, b):\n    return a + b\n")
    request = FillRequest("a.py", (Selection("span", "2"),), cwd=str(tmp_path))
    params = {**request.to_dict(), "model": {"name": "pausable-doc", "device": "cpu"}}
    server = serve_socket_process(runtime_dir, env)
    socket_path = daemon_dir(runtime_dir) / "daemon.sock"
    try:
        pause.touch()
        sock = lifecycle.connect(socket_path, timeout=60)
        assert sock is not None
        with sock:
            sock.sendall(json.dumps({"id": 1, "method": "fill_command", "params": params}).encode() + b"\n")
            wait_until(Path(f"{pause}.held").exists, what="the fill's first forward pass")
            server.terminate()
            wait_until(lambda: not socket_path.exists(), what="the server to stop listening")
            pause.unlink()
            answer = read_answer(sock)
        assert answer["id"] == 1 and answer.get("error", {}).get("code") == "cancelled", answer
        assert protocol.exception_from_error(answer["error"]) is None  # the client's cue to work in-process
        assert (tmp_path / "a.py").read_text() == "def add(a, b):\n    return a + b\n"
        assert server.wait(timeout=60) == 0
    finally:
        pause.unlink(missing_ok=True)
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.parametrize("answered", [True, False])
def test_a_daemon_too_busy_to_answer_shutdown_is_signalled_at_once(
    monkeypatch: pytest.MonkeyPatch, answered: bool
) -> None:
    """`infill daemon stop` during a long fill: the shutdown request waits behind the fill, and its 5 s without an
    answer say the daemon is busy, so SIGTERM (which cancels the fill) follows at once; it waited 10 s more first.
    A daemon that answered is given its time to exit."""
    calls: list[str] = []

    def call(self: client.Connection, method: str, params: dict[str, Any], timeout: float) -> dict[str, Any]:
        if not answered:
            raise TimeoutError("timed out")
        return {"id": 1, "shutdown": True}

    monkeypatch.setattr(client.Connection, "call", call)
    monkeypatch.setattr(lifecycle, "wait_for_exit", lambda pid, timeout: calls.append("wait") or False)
    monkeypatch.setattr(lifecycle, "terminate", lambda pid, timeout: calls.append("terminate") or True)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with theirs:
        conn = client.Connection(ours)
        conn.peer_pid = 2**22 + 1  # not ours: retire signals it (here: the fakes above)
        client.retire(conn)
    assert calls == (["wait", "terminate"] if answered else ["terminate"])


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_a_client_is_gone_once_its_socket_is_closed(monkeypatch: pytest.MonkeyPatch, platform: str) -> None:
    """On Linux a half-closed client (it shut down its sending side) is still there; elsewhere, where poll may not
    tell the two apart, the end of its stream counts as gone, so that a gone client's run writes nothing more."""
    from infill.server import daemon

    monkeypatch.setattr(sys, "platform", platform)
    server_end, client_end = socket.socketpair()
    with server_end, client_end:
        assert not daemon._peer_closed(server_end)
        client_end.shutdown(socket.SHUT_WR)
        assert daemon._peer_closed(server_end) is (platform != "linux")
        client_end.close()
        assert daemon._peer_closed(server_end)


def test_an_unusable_runtime_folder_is_a_usage_error_and_status_says_why(tmp_path: Path) -> None:
    """`infill daemon start` with $INFILL_RUNTIME_DIR naming a file exited 1, the code for "changes needed" (and
    "none runs" for status), and `status` said only "no daemon running"."""
    from infill.cli import main

    afile = tmp_path / "afile"
    afile.write_text("")
    env = {"INFILL_RUNTIME_DIR": str(afile)}
    result = CliRunner().invoke(main, ["daemon", "start"], env=env)
    assert result.exit_code == 2 and result.stderr.startswith("error: could not start the daemon: "), result.output
    result = CliRunner().invoke(main, ["daemon", "status"], env=env)
    assert result.exit_code == 1 and result.stdout.startswith(f"no daemon running: {afile} is not a directory")
    missing = tmp_path / "missing"  # not made yet: nothing is wrong, and status makes nothing
    result = CliRunner().invoke(main, ["daemon", "status"], env={"INFILL_RUNTIME_DIR": str(missing)})
    assert result.exit_code == 1 and result.stdout == "no daemon running\n" and not missing.exists()


def test_a_gone_clients_wait_on_a_model_server_is_cut(runtime_dir: Path) -> None:
    """A fill on a model server whose client went away waited for the server's answer (up to
    INFILL_REMOTE_TIMEOUT) while every other request of the daemon queued behind it: the request in flight is cut
    once the client is gone, and the next fill is answered while the server still holds the first."""
    from tests.fixtures_remote import FakeServer, healthy, running

    arrived, release = threading.Event(), threading.Event()

    def answer(handler: Any, path: str, body: dict[str, Any] | None) -> None:
        if path.endswith("/completions") and not arrived.is_set():
            arrived.set()
            release.wait(60)  # the first fill's sample: answered only at the end of the test
        healthy(handler, path, body)

    env = plugin_env(runtime_dir, INFILL_REMOTE_TIMEOUT="60", INFILL_SERVER_PLUGINS="")  # the real fill
    process = serve_socket_process(runtime_dir, env)
    path = daemon_dir(runtime_dir) / "daemon.sock"
    try:
        for server in running(FakeServer(answer)):
            params = {"text": "def mean(xs):\n    <FILL>\n", "marker": "<FILL>", "model": server.url + "#qwen-fake"}
            line = json.dumps({"id": 1, "method": "fill", "params": params}).encode() + b"\n"
            gone = lifecycle.connect(path, timeout=30)
            assert gone is not None
            gone.sendall(line)
            assert arrived.wait(60), "the first fill never reached the model server"
            gone.close()  # the client goes away while the daemon waits on the model server
            sock = lifecycle.connect(path, timeout=30)
            assert sock is not None
            sock.settimeout(30)  # half the model server's timeout: waiting out the first fill's request fails
            sock.sendall(line.replace(b'"id": 1', b'"id": 2'))
            reply = json.loads(sock.makefile("rb").readline())
            sock.close()
            assert reply["id"] == 2 and reply["edits"][0]["text"] == "    x = 1" and not release.is_set(), reply
            release.set()
    finally:
        release.set()
        process.terminate()
        process.wait(30)


def test_a_client_under_another_umask_does_not_use_the_daemon() -> None:
    """A new file the daemon writes (`infill fill a.py -o new.py`) gets 0666 less the umask of the daemon's process,
    the one of the command that started it: a client under another umask (077 for private files) restarts it,
    as a variable that changes a result does, so the file gets the mode the client's umask gives."""
    from infill.server.dispatch import Dispatcher

    ping = json.loads(Dispatcher().handle_line(b'{"id": 1, "method": "ping"}\n'))
    assert client.differences(ping) == []
    before = os.umask(0o077)
    try:
        assert client.differences(ping) == ["umask"]
    finally:
        os.umask(before)
    assert client.differences(ping) == []
