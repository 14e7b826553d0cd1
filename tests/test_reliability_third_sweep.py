"""Never make a file worse, a third time: one regression test per defect a third sweep of 552 bad-input cases found,
grouped as it reported them: high (lost buffers, writes after Ctrl-C, a deaf language server), medium,
low, and the tests it said were missing. Each test failed on the code before its fix.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import test_reliability_second_sweep as second_sweep
from click.testing import CliRunner, Result
from fixtures_cli import fake_model
from fixtures_serve import REPO_ROOT, plugin_env, stop_daemon, wait_until

from infill.cli import main

SOURCE = b"def f(x):\n    return 0\n\n\ndef g(y):\n    return y\n"
SIGNALS = [pytest.param(signal.SIGINT, 130, id="ctrl-c"), pytest.param(signal.SIGTERM, 143, id="sigterm")]


# --- high 1: the editor filter lost the buffer when a signal came before it had read stdin ----------------------


def _interruptible() -> None:
    """Ctrl-C reaches the child as it reaches a command typed in a terminal (a suite started in the background by
    a non-interactive shell ignores SIGINT, and a process that starts with SIGINT ignored never sees it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def infill_handles_signals(pid: int) -> bool:
    """Whether the process runs infill's own code yet: its SIGTERM handler (infill.commands.interrupts, the first
    thing the entry point does) is installed. Before that the interpreter itself is starting, and a signal ends
    any Python program there."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True  # gone already: nothing to wait for
    caught = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


def start_filter(args: list[str], env: dict[str, str], cwd: Path = REPO_ROOT) -> subprocess.Popen[bytes]:
    """`infill ARGS` as an editor runs its filter: the buffer waiting on a pipe."""
    read_end, write_end = os.pipe()
    os.write(write_end, SOURCE)
    os.close(write_end)
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "infill", *args],
            stdin=read_end,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            preexec_fn=_interruptible,
        )
    finally:
        os.close(read_end)


def filter_under_signal(args: list[str], env: dict[str, str], delay: float, signum: int) -> tuple[int, bytes, bytes]:
    """The filter sent `signum` `delay` seconds after infill's first line ran: (exit code, stdout, stderr)."""
    process = start_filter(args, env)
    deadline = time.monotonic() + 60
    while not infill_handles_signals(process.pid) and time.monotonic() < deadline:
        time.sleep(0.0005)
    time.sleep(delay)
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    return process.returncode, out, err


def signal_sweep(args: list[str], env: dict[str, str]) -> list[tuple[float, int, int, bytes, bytes]]:
    """The filter under SIGINT and SIGTERM (alternately) at 0, 10, ..., 200 ms after infill's first line:
    (delay, signal, exit code, stdout, stderr) of each run, three runs at a time."""
    runs = [(step / 100, signal.SIGINT if step % 2 else signal.SIGTERM) for step in range(21)]
    with ThreadPoolExecutor(3) as pool:
        done = pool.map(lambda run: filter_under_signal(args, env, *run), runs)
        return [(delay, signum, *result) for (delay, signum), result in zip(runs, done, strict=True)]


FILTER = ["fill", "-", "--stdin-filename", "s.py", "--span", "2"]
EXIT_CODE = {signal.SIGINT: 130, signal.SIGTERM: 143}


def assert_every_buffer_came_back(runs: list[tuple[float, int, int, bytes, bytes]]) -> None:
    for delay, signum, code, out, err in runs:
        what = f"{signal.Signals(signum).name} at {delay * 1000:.0f} ms"
        assert (code, out, err) == (EXIT_CODE[signum], SOURCE, b""), f"{what}: exit {code}, {out!r}, {err!r}"


def test_a_signal_at_any_moment_gives_the_filter_buffer_back(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "INFILL_NO_DAEMON": "1"}
    # 20 sampled candidates: the fill takes seconds, so every signal of the sweep lands before it is done (with
    # one beam search the shipped model can finish inside 200 ms, and a signal after that finds nothing to stop)
    args = [*FILTER, "--model", "default", "-n", "20", "--temperature", "1", "--no-retrieve"]
    assert_every_buffer_came_back(signal_sweep(args, env))


@pytest.mark.parametrize("arrives_after", [signal.SIGINT, signal.SIGTERM], ids=["sigint-set", "sigterm-set"])
def test_a_signal_the_moment_its_handler_is_set_waits_for_the_command(
    arrives_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signal delivered right after install() sets a handler (before the rest of install() has run) is held, as
    one during the imports is, and raised when the command line is loaded. Before, it was raised inside install(),
    outside every handler: a traceback and exit 1, and the editor filter's buffer lost."""
    from infill.commands import interrupts
    from infill.errors import Terminated

    real_signal = signal.signal
    arrived: list[int] = []

    def set_then_deliver(signum: int, handler: object) -> object:
        previous = real_signal(signum, handler)  # type: ignore[arg-type]
        if signum == arrives_after and callable(handler):
            arrived.append(signum)
            handler(signal.SIGTERM, None)  # what the interpreter runs when SIGTERM lands now
        return previous

    saved = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(interrupts, "_state", interrupts._State())
    monkeypatch.setattr(signal, "signal", set_then_deliver)
    try:
        interrupts.install()
        assert arrived == [arrives_after] and interrupts._state.pending == signal.SIGTERM
        with pytest.raises(Terminated):
            interrupts.release()
    finally:
        for signum, handler in saved.items():
            real_signal(signum, handler)


_ANSWERED_IN_EXEC = """import sys

import infill.cli


def main(args, prog_name):  # a command that answers a Ctrl-C which landed in code run by exec() of a string
    try:
        exec("raise KeyboardInterrupt")
    except KeyboardInterrupt:
        sys.exit(130)


infill.cli.main = main
{call}
"""


@pytest.mark.parametrize(
    ("call", "code"),
    [
        pytest.param("from infill.__main__ import run\nrun()", 130, id="infill-entry-point"),
        # the negative control: without the entry point's cleanup the interpreter kills itself with SIGINT
        pytest.param("main([], 'infill')", -signal.SIGINT, id="control"),
    ],
)
def test_an_answered_ctrl_c_exits_with_the_answer_under_python_m(tmp_path: Path, call: str, code: int) -> None:
    (tmp_path / "entry.py").write_text(_ANSWERED_IN_EXEC.format(call=call))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run([sys.executable, "-m", "entry"], cwd=tmp_path, env=env, capture_output=True, timeout=60)
    assert (done.returncode, done.stderr) == (code, b"")


@pytest.fixture
def slow_daemon(runtime_dir: Path) -> Iterator[dict[str, str]]:
    """A warm daemon whose `infill fill` requests (tests/fixtures_serve.py's fake) take 30 s unless their client goes
    away; $INFILL_TEST_FILL_MARKER appears when one arrives. The environment of its clients."""
    from infill.server import client

    marker = runtime_dir / "request-arrived"
    env = plugin_env(runtime_dir, INFILL_TEST_FILL_DELAY="30", INFILL_TEST_FILL_MARKER=str(marker))
    assert client.request("fake_loads", {}, "on", env=env) is not None  # started and answering
    yield env


def test_a_signal_at_any_moment_gives_the_filter_buffer_back_through_the_daemon(slow_daemon: dict[str, str]) -> None:
    args = [*FILTER, "--daemon", "on", "--model", "fake-serve"]
    assert_every_buffer_came_back(signal_sweep(args, slow_daemon))


@pytest.mark.parametrize(("signum", "code"), SIGNALS)
def test_a_signal_while_the_daemon_fills_gives_the_filter_buffer_back(
    signum: int, code: int, slow_daemon: dict[str, str]
) -> None:
    marker = Path(slow_daemon["INFILL_TEST_FILL_MARKER"])
    marker.unlink(missing_ok=True)
    process = start_filter([*FILTER, "--daemon", "on", "--model", "fake-serve"], slow_daemon)
    wait_until(lambda: marker.exists() or process.poll() is not None, what="the request to reach the daemon")
    process.send_signal(signum)
    out, err = process.communicate(timeout=120)
    assert (process.returncode, out, err) == (code, SOURCE, b"")


# --- high 2: a cancelled `infill docstrings` went on writing in the daemon -----------------------------------------


@pytest.fixture(scope="module")
def doc_daemon() -> Iterator[tuple[dict[str, str], Path]]:
    """A daemon shared by the tests below (their clients start it), with the pausable model of
    tests/fixtures_serve.py; (its clients' environment, the pause file)."""
    folder = Path(tempfile.mkdtemp(prefix="infill-t-"))
    try:
        yield plugin_env(folder, INFILL_TEST_PAUSE=str(folder / "pause")), folder / "pause"
    finally:
        stop_daemon(folder)
        shutil.rmtree(folder, ignore_errors=True)


def contents(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.glob("*.py"))}


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["ctrl-c", "sigterm", "kill"])
def test_a_cancelled_docstrings_run_writes_nothing_more_in_the_daemon(
    signum: int, doc_daemon: tuple[dict[str, str], Path], tmp_path: Path
) -> None:
    from infill.server import client

    env, pause = doc_daemon
    project = tmp_path / "project"
    project.mkdir()
    for i in range(30):
        (project / f"m{i:02}.py").write_text(f"def add_{i}(a, b):\n    return a + b\n")
    before = contents(project)
    process = subprocess.Popen(
        [sys.executable, "-m", "infill", "docstrings", "project", "--daemon", "on", "--model", "pausable-doc"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_interruptible,
    )
    try:
        wait_until(lambda: contents(project) != before or process.poll() is not None, what="a first file written")
        held = Path(f"{pause}.held")
        held.unlink(missing_ok=True)
        pause.touch()  # the daemon's run stops between two forward passes, before the next write
        wait_until(held.exists, what="the daemon's run to pause")
        process.send_signal(signum)
        process.wait(timeout=120)
    finally:
        pause.unlink(missing_ok=True)
        if process.poll() is None:
            process.kill()
            process.wait()
    when_cancelled = contents(project)
    assert 0 < sum(when_cancelled[name] != before[name] for name in before) < 30
    assert client.request("fake_loads", {}, "on", env=env) is not None  # the daemon is free: the run has ended
    assert contents(project) == when_cancelled  # not one write after the client went away


# --- medium 4 and low: bad values on the command line (one stderr line, exit 2, nothing written) -----------------

TEXT, FILLED = second_sweep.SOURCE, second_sweep.FILLED
FAKE = second_sweep.FAKE  # the fake model its `fill` names
fill, one_error_line = second_sweep.fill, second_sweep.one_error_line


@pytest.fixture
def model() -> Iterator[None]:
    with fake_model(["    return x + 1"], name=FAKE):
        yield


def refused(r: Result, *words: str) -> None:
    """Exit 2 with one `error:` line on stderr that holds `words`."""
    assert r.exit_code == 2, (r.exit_code, r.output)
    line = one_error_line(r)
    assert line.startswith("error: ") and all(w in line for w in words), line


@pytest.mark.usefixtures("model")
def test_an_empty_output_path_is_a_usage_error(tmp_path: Path) -> None:
    """`-o "$OUT"` with OUT unset rewrote the input in place (exit 0)."""
    p = tmp_path / "a.py"
    p.write_text(TEXT)
    refused(fill(str(p), "--span", "2", "-o", ""), "--output", "empty")
    assert p.read_text() == TEXT


@pytest.mark.parametrize(
    "args",
    [
        ["--model", ""],  # was read as "." (the current folder as a model)
        ["--stdin-filename", ""],
        ["--marker", ""],
        ["--function", ""],
    ],
    ids=["model", "stdin-filename", "marker", "function"],
)
def test_an_empty_name_is_a_usage_error(args: list[str], tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    p.write_text(TEXT)
    r = CliRunner().invoke(main, ["fill", str(p), "--span", "2", *args])
    refused(r, args[0], "empty")
    assert p.read_text() == TEXT


@pytest.mark.usefixtures("model")
@pytest.mark.parametrize("where", [100, 9000], ids=["first-8-kib", "after-8-kib"])
def test_a_nul_byte_anywhere_is_binary(where: int, tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    data = (TEXT + "# padding\n" * 1000).encode()
    data = data[:where] + b"\x00" + data[where:]
    p.write_bytes(data)
    refused(fill(str(p), "--span", "2"), "binary")
    assert p.read_bytes() == data


@pytest.mark.usefixtures("model")
@pytest.mark.parametrize("mode", [[], ["--diff"], ["-v"]], ids=["filter", "diff", "filter-verbose"])
def test_a_nul_byte_on_stdin_is_binary(mode: list[str]) -> None:
    """Stdin with a NUL byte was filled (exit 0), where the same bytes in a file are refused as binary: the filter
    echoes it (exit 2), and every other mode refuses it with the file's one line."""
    data = TEXT.encode()[:10] + b"\x00" + TEXT.encode()[10:]
    r = fill("-", "--stdin-filename", "a.py", "--span", "2", *mode, input=data)
    assert r.exit_code == 2, (r.exit_code, r.output)
    if mode != ["--diff"]:
        assert r.stdout_bytes == data  # the filter gives the buffer back, byte for byte
    if mode != []:
        assert one_error_line(r) == "error: a.py: binary file (contains NUL bytes); only UTF-8 text can be filled"


@pytest.mark.usefixtures("model")
@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--span", "9" * 5000], ["--span", "18 digits"]),
        (["--span", "2:" + "9" * 5000], ["--span", "18 digits"]),
        (["--span", "٣"], ["--span", "ASCII"]),  # Arabic-Indic 3
        (["--span", "３"], ["--span", "ASCII"]),  # full-width 3
        (["--span", "2", "--beam", "٣"], ["--beam", "ASCII"]),
        (["--span", "2", "--beam", "1_0"], ["--beam", "ASCII"]),
        (["--span", "2", "--temperature", "０.５"], ["--temperature", "ASCII"]),
        (["--span", "2", "--gamma", "1e200"], ["--gamma", "range"]),
    ],
    ids=["span-5000-digits", "span-end-5000-digits", "arabic-digit", "full-width-digit", "beam", "underscore",
         "float", "gamma"],
)  # fmt: skip
def test_numbers_are_ascii_digits_of_a_sane_size(args: list[str], words: list[str], tmp_path: Path) -> None:
    p = tmp_path / "a.py"
    p.write_text(TEXT)
    refused(fill(str(p), *args), *words)
    assert p.read_text() == TEXT


def test_every_number_option_reads_ascii_digits_only() -> None:
    """The types of every number option (tests/test_cli_errors.py finds them all) refuse what Python's int() and
    float() read but nobody types: other scripts' digits, full-width digits, underscores."""
    import click
    from test_cli_errors import _number_options

    for path, option in _number_options():
        for value in ("٣", "３", "1_0"):
            with pytest.raises(click.BadParameter, match="ASCII digits"):
                option.type.convert(value, option, None)
            assert path


@pytest.mark.usefixtures("model")
def test_a_tiny_temperature_is_greedy_not_nan(tmp_path: Path) -> None:
    """--temperature 1e-320 divided the logits into inf, and softmax into nan probabilities (exit 123)."""
    import torch

    from infill.decoding.sampling import probs

    p = tmp_path / "a.py"
    p.write_text(TEXT)
    r = fill(str(p), "--span", "2", "--temperature", "1e-320")
    assert r.exit_code == 0, r.output
    assert p.read_text() == FILLED
    logits = torch.tensor([[1.0, 3.0, 2.0], [0.5, 0.25, -1.0]])
    assert torch.equal(probs(logits, 1e-320), torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], dtype=torch.float64))


def test_a_huge_gamma_accepts_without_overflow() -> None:
    """(q/p) ** 1e200 overflowed (OverflowError, exit 123) when q > p; such a draft is accepted whatever gamma."""
    import torch

    from infill.decoding.s2d2 import accept_prefix

    p = torch.tensor([[0.25, 0.75]], dtype=torch.float64)
    q = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    accepted, _ = accept_prefix(p, q, torch.tensor([0]), torch.Generator().manual_seed(0), 1e200)
    assert accepted == 1


BAD_ROUTING = [
    f"{policy}:{key}={value}"
    for policy, key in [
        ("score-static", "c"),
        ("score-dynamic", "tau_score"),
        ("hysteresis", "tau_on"),
        ("hysteresis", "tau_off"),
        ("ucb", "ucb_c"),
        ("score-static", "beta"),
        ("score-static", "margin"),
    ]
    for value in ("nan", "inf", "-inf")
] + ["min-span:min_span=-1", "min-span:min_span=0", "ucb:ucb_c=-1", "score-static:margin=2", "min-span:min_span=٣"]


@pytest.mark.parametrize("spec", BAD_ROUTING)
def test_routing_values_outside_their_domain_are_refused(spec: str) -> None:
    from infill.errors import InputError
    from infill.routing_options import parse_routing

    with pytest.raises(InputError, match="routing option"):
        parse_routing(spec)


@pytest.mark.usefixtures("model")
def test_bad_routing_is_refused_on_the_command_line_and_by_the_server(tmp_path: Path) -> None:
    from infill.server.dispatch import Dispatcher

    p = tmp_path / "a.py"
    p.write_text(TEXT)
    refused(fill(str(p), "--span", "2", "--decoder", "s2d2", "--routing", "ucb:ucb_c=nan"), "ucb_c")
    refused(fill(str(p), "--span", "2", "--routing", "score-static:c=inf"), "routing option c")  # any decoder
    assert p.read_text() == TEXT
    params = {"text": TEXT, "span": "2", "model": FAKE, "routing": "min-span:min_span=-1"}
    reply = json.loads(Dispatcher().handle_line(json.dumps({"id": 1, "method": "fill", "params": params}).encode()))
    assert reply["error"]["exit_code"] == 2 and "min_span" in reply["error"]["message"], reply


@pytest.mark.usefixtures("model")
@pytest.mark.parametrize("span", ["9" * 5000, "٣", "2:" + "9" * 5000])
def test_the_server_reads_span_numbers_as_the_flag_does(span: str) -> None:
    """A 5,000-digit "span" was an internal error in the server too (ValueError from int())."""
    from infill.server.dispatch import Dispatcher

    params = {"text": TEXT, "span": span, "model": FAKE}
    reply = json.loads(Dispatcher().handle_line(json.dumps({"id": 1, "method": "fill", "params": params}).encode()))
    assert reply["error"]["exit_code"] == 2 and "--span" in reply["error"]["message"], reply
    assert len(reply["error"]["message"]) < 200


@pytest.mark.usefixtures("model")
def test_the_server_refuses_an_empty_model_name() -> None:
    from infill.server.dispatch import Dispatcher

    params = {"text": TEXT, "span": "2", "model": ""}
    reply = json.loads(Dispatcher().handle_line(json.dumps({"id": 1, "method": "fill", "params": params}).encode()))
    assert reply["error"]["exit_code"] == 2 and '"model" is empty' in reply["error"]["message"], reply


NOT_UTF8 = os.fsdecode(b"x\xff.py")  # how Python holds an argument that is no UTF-8


@pytest.mark.usefixtures("model")
@pytest.mark.parametrize("option", ["--marker", "--stdin-filename", "--function"])
def test_text_that_is_no_utf8_is_refused_at_the_flag(option: str, tmp_path: Path) -> None:
    """A non-UTF-8 --stdin-filename failed after 2.6 s of model work (UnicodeEncodeError, exit 123)."""
    r = fill("-", "--span", "2", option, NOT_UTF8, "--diff", input=SOURCE)
    refused(r, option, "UTF-8")


@pytest.mark.usefixtures("model")
def test_a_marker_of_white_space_is_refused(tmp_path: Path) -> None:
    """`--marker $'\\n'` made every line break a span (64 s, then exit 3)."""
    p = tmp_path / "a.py"
    p.write_text(TEXT)
    for marker in ("\n", " ", "\t\r\n"):
        refused(fill(str(p), "--marker", marker), "--marker", "white space")
    assert p.read_text() == TEXT


@pytest.mark.usefixtures("model")
def test_a_line_break_in_a_file_name_is_quoted_in_the_diff_header(tmp_path: Path) -> None:
    """A newline in --stdin-filename split the diff header in two; names are quoted as git quotes them."""
    r = fill("-", "--span", "2", "--stdin-filename", "a\nb.py", "--diff", input=SOURCE)
    assert r.exit_code == 1, r.output
    head = r.stdout.splitlines()[:2]
    assert head == ['--- "a/a\\nb.py"', '+++ "b/a\\nb.py"'], head
    folder = tmp_path / "repo"
    folder.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    (folder / "a\nb.py").write_bytes(SOURCE)
    subprocess.run(["git", "apply"], cwd=folder, input=r.stdout.encode(), check=True)
    assert (folder / "a\nb.py").read_text() == FILLED


@pytest.mark.parametrize(
    ("redirect", "words"),
    [("<&-", "stdin is closed"), (">&-", "stdout is closed")],
    ids=["stdin", "stdout"],
)
def test_a_closed_standard_stream_is_one_line(redirect: str, words: str, tmp_path: Path) -> None:
    """`infill fill - ... <&-` (or `>&-`) was an internal error (AttributeError on None, exit 123)."""
    (tmp_path / "in.py").write_bytes(SOURCE)
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "INFILL_NO_DAEMON": "1"}
    source = "" if redirect == "<&-" else "< in.py"
    done = subprocess.run(
        f"{sys.executable} -m infill fill - --stdin-filename s.py --span 2 --model default -v {source} {redirect}",
        shell=True, cwd=tmp_path, env=env, capture_output=redirect == "<&-", timeout=120,
        stderr=None if redirect == "<&-" else subprocess.PIPE,
    )  # fmt: skip
    assert done.returncode == 2, done
    (line,) = done.stderr.decode().splitlines()
    assert words in line, line


# --- low: [tool.infill.docstrings] held what the flags refuse --------------------------------------------------------


@pytest.mark.parametrize(
    "setting",
    [
        'line-length = "wide"',
        "seed = 1.5",
        "style = 3",
        'model = ["a"]',
        "model = ''",
        "min-confidence = nan",
        "min-confidence = -inf",
        "line-length = inf",
        "low-confidence = inf",
        "temperature = -1.0",
        "summary-tokens = 0",
        "ignore-regex = " + "[" * 5000 + "]" * 5000,
    ],
)
def test_a_bad_docstrings_setting_is_one_line_naming_the_file(setting: str, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(f"[tool.infill.docstrings]\n{setting}\n")
    (tmp_path / "a.py").write_text("def f(x):\n    return x\n")
    r = CliRunner().invoke(main, ["docstrings", str(tmp_path / "a.py"), "--check"])
    assert r.exit_code == 2, (r.exit_code, r.output)
    line = one_error_line(r)
    assert line.startswith("error: ") and "pyproject.toml" in line, r.stderr  # not as if a flag had given it


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("tool = 1\n", "[tool] must be a table"),  # was an internal error (AttributeError, exit 123)
        ('[tool.infill]\nmodle = "x"\n', "unknown [tool.infill] key 'modle'"),  # was ignored without a word
        ("[tool.infill.fill]\ntokens = 4\n", "unknown [tool.infill] key 'fill'"),  # a section nothing reads
    ],
)
def test_a_bad_tool_infill_table_is_one_line_naming_the_file(text: str, needle: str, tmp_path: Path) -> None:
    """Found from a subfolder, as every command finds pyproject.toml."""
    (tmp_path / "pyproject.toml").write_text(text)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text("def f(x):\n    return x\n")
    r = CliRunner().invoke(main, ["docstrings", str(tmp_path / "sub" / "a.py"), "--check"])
    assert r.exit_code == 2, (r.exit_code, r.output)
    line = one_error_line(r)
    assert line.startswith("error: ") and str(tmp_path / "pyproject.toml") in line and needle in line, line


# --- low: models -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_model_config_with_nan_is_one_line(value: str, tmp_path: Path) -> None:
    """`"layer_norm_eps": NaN` in config.json failed deep inside the model (IndexError, a traceback's last line)."""
    import infill

    folder = tmp_path / "model"
    shutil.copytree(Path(infill.__file__).parent / "weights" / "default", folder)
    config = (folder / "config.json").read_text()
    (folder / "config.json").write_text(re.sub(r'"layer_norm_eps": [^,\n]+', f'"layer_norm_eps": {value}', config))
    (tmp_path / "a.py").write_text(TEXT)
    r = CliRunner().invoke(main, ["fill", str(tmp_path / "a.py"), "--span", "2", "--model", str(folder)])
    assert r.exit_code == 123, r.output
    line = one_error_line(r)
    assert "config.json" in line and f"{value} is not a number" in line, line
    assert (tmp_path / "a.py").read_text() == TEXT


# --- low: the daemon ----------------------------------------------------------------------------------------------


def test_serve_on_a_regular_file_is_exit_2_and_one_line(tmp_path: Path) -> None:
    """`infill serve --socket FILE` printed its error but exited 0 (1 when the daemon's own test ran it)."""
    target = tmp_path / "notes.txt"
    target.write_text("keep me\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "infill", "serve", "--socket", str(target)], env=env, capture_output=True, timeout=120
    )
    assert done.returncode == 2, done
    (line,) = done.stderr.decode().splitlines()
    assert "not a socket" in line, line
    assert target.read_text() == "keep me\n"


@pytest.mark.parametrize(("value", "words"), [("relative/dir", "absolute"), ("", "empty")], ids=["relative", "empty"])
def test_a_runtime_folder_that_is_not_absolute_is_a_usage_error(value: str, words: str, tmp_path: Path) -> None:
    """A relative INFILL_RUNTIME_DIR broke the daemon silently (each directory another folder); an empty one (an
    unset variable in `INFILL_RUNTIME_DIR=$X`) silently meant the default."""
    (tmp_path / "a.py").write_text(TEXT)
    r = CliRunner(env={"INFILL_RUNTIME_DIR": value}).invoke(main, ["fill", str(tmp_path / "a.py"), "--span", "2"])
    refused(r, "INFILL_RUNTIME_DIR", words)
    assert (tmp_path / "a.py").read_text() == TEXT


def test_daemon_status_says_what_blocks_the_daemon(runtime_dir: Path) -> None:
    """A regular file at the socket path disabled the daemon for good; `daemon status` said "no daemon running"."""
    from fixtures_serve import daemon_dir

    socket = daemon_dir(runtime_dir) / "daemon.sock"
    socket.write_text("not a socket\n")
    r = CliRunner(env=plugin_env(runtime_dir)).invoke(main, ["daemon", "status"])
    assert (
        r.exit_code == 1
        and r.stdout == f"no daemon running: {socket} is not a socket; remove it so that a daemon can start\n"
    )
    r = CliRunner(env=plugin_env(runtime_dir)).invoke(main, ["daemon", "status", "--format", "json"])
    assert json.loads(r.stdout) == {
        "running": False,
        "problem": f"{socket} is not a socket; remove it so that a daemon can start",
    }
    assert socket.read_text() == "not a socket\n"


def test_the_default_thread_count_given_or_not_is_the_same_daemon(runtime_dir: Path) -> None:
    """`infill --threads 1 daemon status` warned that a daemon started without it "restarts": 1 is the default."""
    from infill.server import client

    assert client.request("fake_loads", {}, "on", env=plugin_env(runtime_dir)) is not None
    for value in ("1", "01", " 1"):
        info = client.status(plugin_env(runtime_dir, INFILL_THREADS=value))
        assert info is not None and info["differences"] == [], (value, info)
    r = CliRunner(env=plugin_env(runtime_dir)).invoke(main, ["--threads", "1", "daemon", "status"])
    assert r.exit_code == 0 and "restarts" not in r.stdout, r.stdout


def test_files_a_stopped_daemon_changed_count_as_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a daemon crash mid-run, `docstrings` redid the rest in process and said 25 of 30 files changed when
    all 30 had."""
    from fixtures_doc import FakeFiller

    from infill.commands import docstrings as command

    for i in range(4):
        (tmp_path / f"m{i}.py").write_text(f"def f{i}(x):\n    return x\n")

    def daemon_that_crashed(*args: object, **kwargs: object) -> None:  # it wrote two files, then died
        for i in range(2):
            (tmp_path / f"m{i}.py").write_text(f'def f{i}(x):\n    """Done by the daemon."""\n    return x\n')

    monkeypatch.setattr(command, "forward_docstrings", daemon_that_crashed)
    monkeypatch.setattr(command, "model_filler_for", lambda cfg, on_progress=None: FakeFiller())
    r = CliRunner().invoke(main, ["docstrings", str(tmp_path), "--daemon", "on"])
    assert r.exit_code == 0, r.output
    assert "note: the daemon stopped after changing 2 file(s); finishing here" in r.stderr
    assert r.stderr.rstrip().endswith("4 of 4 files changed"), r.stderr


# --- low: files -----------------------------------------------------------------------------------------------


def test_a_missing_grammar_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`infill docstrings FOLDER` with a .js file and no JavaScript grammar: the error did not say which file."""
    from infill import languages

    monkeypatch.setitem(sys.modules, "tree_sitter_javascript", None)  # `import tree_sitter_javascript` fails
    languages.grammar.cache_clear()
    (tmp_path / "app.js").write_text("function add(a, b) {\n  return a + b;\n}\n")
    try:
        r = CliRunner().invoke(main, ["docstrings", str(tmp_path), "--check"])
    finally:
        languages.grammar.cache_clear()
    assert r.exit_code == 2, r.output
    line = one_error_line(r)
    assert line.startswith(f"error: {tmp_path / 'app.js'}: the javascript grammar is not installed"), line
    assert line.endswith("pip install '.[javascript]'"), line  # a hint that installs this project (below)


def test_install_hints_install_this_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, venv_on_path: Path
) -> None:
    """The hints said `pip install 'infill[lsp]'`, but `infill` on the package index is an unrelated project: from a
    clone they name the clone, installed they name the extra's own requirements."""
    from infill import extras

    assert extras.source_tree() == REPO_ROOT
    assert extras.install_hint("lsp") == "pip install '.[lsp]'"  # the tests run in the clone
    monkeypatch.chdir(tmp_path)
    assert extras.install_hint("lsp") == f"pip install '{REPO_ROOT}[lsp]'"
    monkeypatch.setattr(extras, "source_tree", lambda: None)  # a wheel: no source folder
    monkeypatch.setattr(extras, "requirements", lambda extra: ("pygls<3,>=2.0", "lsprotocol>=2025.0.0"))
    assert extras.install_hint("lsp") == "pip install 'pygls<3,>=2.0' 'lsprotocol>=2025.0.0'"
    r = CliRunner().invoke(main, ["lsp", "--help"])
    assert "infill[" not in r.stdout and "'.[lsp]'" in r.stdout


def test_install_hints_name_this_interpreters_installer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, venv_on_path: Path
) -> None:
    """The hints said `pip install ...` whatever `pip` was on PATH: infill run from a virtualenv by path, or in
    pre-commit's hook environment, found another environment's `pip`, and the extra went there. The hint names this
    interpreter's pip unless the `pip` on PATH sits beside it; in a pipx virtualenv (no `pip` of its own), pipx's
    `inject`, which `pipx upgrade` keeps."""
    from infill import extras

    monkeypatch.setattr(extras, "source_tree", lambda: None)
    monkeypatch.setattr(extras, "requirements", lambda extra: ("pygls<3,>=2.0",))
    assert extras.install_hint("lsp") == "pip install 'pygls<3,>=2.0'"  # an activated virtualenv: as before
    other = tmp_path / "other bin"  # another environment's pip first on PATH (and a space to quote)
    other.mkdir()
    (other / "pip").write_text("#!/bin/sh\n")
    (other / "pip").chmod(0o755)
    monkeypatch.setenv("PATH", f"{other}{os.pathsep}{venv_on_path / 'bin'}")
    python = venv_on_path / "bin" / "python"
    assert extras.install_hint("lsp") == f"{python} -m pip install 'pygls<3,>=2.0'"
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no pip on PATH at all
    assert extras.install_hint("lsp") == f"{python} -m pip install 'pygls<3,>=2.0'"
    monkeypatch.setattr(sys, "executable", str(other / "python"))  # quoted for the shell
    assert extras.install_hint("lsp") == f"'{other / 'python'}' -m pip install 'pygls<3,>=2.0'"
    tools = tmp_path / "tools"  # a `uv venv` (no pip module, no pip beside python) with uv on PATH: uv's pip
    tools.mkdir()
    (tools / "uv").write_text("#!/bin/sh\n")
    (tools / "uv").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pip" else find_spec(name, *a))
    assert extras.install_hint("lsp") == f"uv pip install --python '{other / 'python'}' 'pygls<3,>=2.0'"
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    (venv_on_path / "pipx_metadata.json").write_text("{}")  # pipx's virtualenv for the `infill` package
    pipx = tmp_path / "venvs" / "infill"  # the test's own folder: the temporary root is shared (a rerun of the
    pipx.parent.mkdir()  # test in the same session found the `infill` it had left there)
    venv_on_path.rename(pipx)
    monkeypatch.setattr(sys, "prefix", str(pipx))
    assert extras.install_hint("lsp") == "pipx inject infill 'pygls<3,>=2.0'"


def test_an_installed_distribution_lists_its_extras() -> None:
    """The requirements a wheel's hint names come from the metadata of the distribution that holds this package
    (none when the code runs from a folder that no distribution installed)."""
    from importlib import metadata

    from infill import extras

    installed = any(
        str(d.locate_file("infill/__init__.py")) == str(Path(extras.infill.__file__)) for d in metadata.distributions()
    )
    found = extras.requirements("lsp")
    assert found == () if not installed else any(r.startswith("pygls") for r in found), found


@pytest.mark.usefixtures("model")
@pytest.mark.parametrize("name", ["a" * 252 + ".py", "é" * 126 + ".py"], ids=["255-ascii", "255-bytes-utf8"])
def test_a_file_with_the_longest_name_can_be_written(name: str, tmp_path: Path) -> None:
    """The temporary file's name (`.NAME.XXXXXXXX.infill-tmp`) passed the 255-byte limit: names of 235 to 255
    bytes could not be written."""
    assert len(os.fsencode(name)) == 255
    p = tmp_path / name
    p.write_text(TEXT)
    r = fill(str(p), "--span", "2")
    assert r.exit_code == 0, r.output
    assert p.read_text() == FILLED
    assert [f.name for f in tmp_path.iterdir()] == [name]  # no temporary file left


def xattrs_work(folder: Path) -> bool:
    probe = folder / "probe"
    probe.write_text("")
    try:
        os.setxattr(probe, "user.infill-probe", b"1")
    except (OSError, AttributeError):
        return False
    finally:
        probe.unlink()
    return True


@pytest.mark.usefixtures("model")
@pytest.mark.parametrize("settable", [True, False], ids=["renamed", "in-place"])
def test_extended_attributes_are_kept(settable: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The atomic rename dropped extended attributes, and with them ACLs and SELinux labels. The new file gets
    them; where one cannot be given, the file is rewritten in place, which keeps them all."""
    if not xattrs_work(tmp_path):
        pytest.skip("this file system keeps no user extended attributes")
    p = tmp_path / "a.py"
    p.write_text(TEXT)
    os.setxattr(p, "user.infill-test", b"kept")
    inode = p.stat().st_ino
    if not settable:

        def refuse(*args: object, **kwargs: object) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr(os, "setxattr", refuse)
    r = fill(str(p), "--span", "2")
    assert r.exit_code == 0, r.output
    assert p.read_text() == FILLED
    assert os.getxattr(p, "user.infill-test") == b"kept"
    assert (p.stat().st_ino == inode) is not settable  # renamed over, or rewritten in place


# --- low: what the messages say -------------------------------------------------------------------------------------


def test_the_empty_fill_warning_never_suggests_the_flag_that_was_given(tmp_path: Path) -> None:
    """With --allow-syntax-errors given, the warning still said "--allow-syntax-errors accepts the most likely one"."""
    from test_cli_fill import BRANCHES

    src = BRANCHES.format(line="")
    p = tmp_path / "b.py"
    p.write_text(src)
    args = ["fill", str(p), "--span", "4:4", "-n", "2", "--temperature", "1", "--model", "fake-empty"]
    with fake_model([[("    else:", 0.7), ("", 0.3)]], name="fake-empty"):
        plain = CliRunner().invoke(main, args)
        given = CliRunner().invoke(main, [*args, "--allow-syntax-errors"])
    assert "--allow-syntax-errors accepts the most likely one" in plain.stderr
    assert given.exit_code == 0 and p.read_text() == src
    (warning,) = [line for line in given.stderr.splitlines() if "only valid fill is empty" in line]
    assert "accepts the most likely one" not in warning and "does not apply" in warning, warning


def test_a_cached_model_shows_its_revision(tmp_path: Path) -> None:
    """`infill models` showed `-` as the revision of a model cached from its main branch."""
    from test_xlnet_models_command import fake_model as fake_folder

    repo = tmp_path / "models--someone--coder"
    fake_folder(repo / "snapshots" / "abc123", "xlnet")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    r = CliRunner().invoke(main, ["models", "--cache-dir", str(tmp_path)])
    (row,) = [line for line in r.stdout.splitlines() if line.startswith("someone/coder")]
    assert row.split()[1] == "main", row


@pytest.mark.usefixtures("model")
def test_a_fill_whose_client_went_away_stops_before_its_write(tmp_path: Path) -> None:
    """What a daemon runs for `infill fill` checks its client once more just before writing (the "write" progress
    event), as `infill docstrings` does before each file: a client gone after the model's work gets nothing
    written."""
    from infill.core.fill import FillRequest, run_fill
    from infill.progress import Cancelled

    p = tmp_path / "a.py"
    p.write_text(TEXT)
    events: list[str] = []

    def gone_at_the_write(event: dict[str, object]) -> None:
        events.append(str(event.get("event")))
        if event.get("event") == "write":
            raise Cancelled("the client went away")

    request = FillRequest.from_dict(
        {"file": str(p), "selections": [{"kind": "span", "value": "2"}], "cwd": str(tmp_path), "model": {"name": FAKE}}
    )
    with pytest.raises(Cancelled):  # no answer (the daemon's client, if still there, works in-process)
        run_fill(request, gone_at_the_write)
    assert events[-1] == "write" and "step" in events
    assert p.read_text() == TEXT
