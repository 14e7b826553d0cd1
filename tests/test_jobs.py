"""Several files at once: `infill fill FILE... --jobs N` and `infill docstrings PATH --jobs N` print what a serial
run prints, exit with its code and leave the same files, with N worker processes each loading the model once."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infill import progress

MODULE = (
    "def mean{i}(values):\n    total = 0\n    for value in values:\n        total += value\n    return total / {n}\n"
)
CLASSY = (
    "def scale{i}(values, factor):\n    return [v * factor + {i} for v in values]\n\n\n"
    "class Counter{i}:\n    def bump(self, by):\n        self.n += by\n        return self.n\n"
)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from infill.models.tiny import build_tiny_checkpoint

    return build_tiny_checkpoint(tmp_path_factory.mktemp("tiny-jobs") / "model", seed=1, init_scale=0.5)


def infill(folder: Path, *args: str) -> tuple[int, str]:
    """`python -m infill ARGS` in `folder`, as a user runs it: (exit code, stdout and stderr as they came)."""
    env = {**os.environ, "INFILL_NO_DAEMON": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "infill", *args], cwd=folder, env=env, capture_output=False, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, timeout=600,
    )  # fmt: skip
    return done.returncode, done.stdout.decode()


def files_of(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def in_this_process(folder: Path, *args: str) -> tuple[int, str]:
    """`infill ARGS` in `folder` through the CLI in this process: (exit code, stdout and stderr as they came; the
    same text and order as `infill` in a process of its own gives, one process start with torch fewer)."""
    from click.testing import CliRunner

    from infill import api
    from infill.cli import main

    api.clear_model_cache()  # the model is loaded as a fresh process loads it
    was = Path.cwd()
    os.chdir(folder)
    try:
        result = CliRunner().invoke(main, list(args))
    finally:
        os.chdir(was)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


def serial_and_parallel(tmp_path: Path, make: dict[str, str], *args: str) -> tuple[tuple[int, str], tuple[int, str]]:
    """The same command on two copies of the files, without --jobs (in this process) and with --jobs 2 (a process
    of its own, as a user runs it, with its worker processes)."""
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    for name, text in make.items():
        (one / name).write_text(text)
    shutil.copytree(one, two)
    serial = in_this_process(one, *args)
    parallel = infill(two, *args, "--jobs", "2")
    assert files_of(one) == files_of(two)
    return serial, parallel


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["write", "diff"])
def test_fill_jobs_print_and_write_what_a_serial_run_does(tiny: Path, tmp_path: Path, mode: str) -> None:
    sources = {f"f{i}.py": MODULE.format(i=i, n=i + 1) for i in range(4)}
    names = ["f0.py", "f1.py", "gone.py", "f2.py", "f3.py", "f1.py"]  # a missing file; f1.py named twice
    flags = ["--span", "4:4", "--model", str(tiny), "--tokens", "6", "--temperature", "1", "--max-resample", "0"]
    flags += ["--allow-syntax-errors"]  # a random model's fill may split a UTF-8 character
    extra = ["--diff"] if mode == "diff" else []
    serial, parallel = serial_and_parallel(tmp_path, sources, "fill", *names, *flags, *extra)
    assert parallel == serial
    code, output = serial
    assert code == 2  # the most severe of the files' codes: a missing file (2) over a diff (1) or a fill (0)
    assert output.count("gone.py: no such file") == 1
    written = files_of(tmp_path / "one")
    if mode == "write":
        assert [name for name, text in sources.items() if written[name] != text.encode()] == list(sources)
        assert output.count("filled f1.py") == 1  # each file once
    else:
        assert all(written[name] == text.encode() for name, text in sources.items())
        assert [line for line in output.splitlines() if line.startswith("+++ ")] == [
            f"+++ b/{name}" for name in ("f0.py", "f1.py", "f2.py", "f3.py")
        ]


@pytest.mark.slow
def test_docstrings_jobs_print_and_write_what_a_serial_run_does(tiny: Path, tmp_path: Path) -> None:
    sources = {f"m{i}.py": CLASSY.format(i=i) for i in range(4)}
    sources["zbad.py"] = "def broken(:\n    pass\n"
    sources["pyproject.toml"] = "[tool.infill.docstrings]\nsummary-tokens = 4\ndescription-tokens = 3\n"
    serial, parallel = serial_and_parallel(tmp_path, sources, "docstrings", ".", "m2.py", "--model", str(tiny))
    assert parallel == serial
    code, output = serial
    assert code == 2 and "error: zbad.py: cannot parse" in output
    assert "4 of 4 files changed" in output  # m2.py, named twice, once
    written = files_of(tmp_path / "one")
    assert all(written[f"m{i}.py"] != sources[f"m{i}.py"].encode() for i in range(4))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a.py", "-", "--span", "1"], "- (stdin) cannot be given with other files"),
        (["a.py", "b.py", "--span", "1", "-o", "out.py"], "-o/--output takes a single FILE"),
        (["a.py", "b.py", "--span", "1", "--jobs", "0"], "--jobs"),
    ],
)
def test_fill_refuses_what_several_files_cannot_mean(args: list[str], message: str) -> None:
    from click.testing import CliRunner

    from infill.cli import main

    result = CliRunner().invoke(main, ["fill", *args])
    assert result.exit_code == 2 and message in result.stderr and len(result.stderr.splitlines()) == 1


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_one_bar_counts_files_and_output_goes_above_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the run's output is printed through the bar (not onto its line); elsewhere it goes to the
    command's own writer, and no bar is drawn."""
    err, out = _Terminal(), _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.delenv("TERM", raising=False)
    direct: list[tuple[str, bool]] = []
    with progress.files_progress(True, 2, lambda text, to_err: direct.append((text, to_err))) as bar:
        bar.write("m.py:1: f: filled\n", False)
        bar.advance()
        bar.advance()
        assert bar.bar.tasks[0].completed == 2
    assert not direct and "m.py:1: f: filled" in err.getvalue()
    with progress.files_progress(False, 2, lambda text, to_err: direct.append((text, to_err))) as bar:
        bar.write("x\n", True)
        bar.advance()
    assert direct == [("x\n", True)]


@pytest.mark.parametrize(
    ("codes", "expected"), [((1, 4, 0), 4), ((1, 3, 4), 3), ((3, 2, 0), 2), ((2, 123, 1), 123), ((0, 0, 0), 0)]
)
def test_several_files_exit_with_the_most_severe_code(
    monkeypatch: pytest.MonkeyPatch, codes: tuple[int, ...], expected: int
) -> None:
    from click.testing import CliRunner

    from infill.cli import main
    from infill.commands import fill

    given = iter(codes)
    monkeypatch.setattr(fill, "_fill_one", lambda *a: {"exit_code": next(given), "stdout": "", "stderr": []})
    result = CliRunner().invoke(main, ["fill", "a.py", "b.py", "c.py", "--span", "1"])
    assert result.exit_code == expected


def test_files_without_the_marker_are_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`infill fill src/*.py --marker '<FILL>'` (the README's example) exited 2 with an error line for every file of
    the glob that has no marker, though the others were filled: such a file is skipped (a line with -v), and only
    a marker found in none of the files is an error. A file that cannot be read keeps its own error."""
    from click.testing import CliRunner

    from infill.cli import main
    from infill.commands import fill
    from infill.core.fill import FillRequest

    (tmp_path / "a.py").write_text("def f(x):\n    return <FILL>\n")
    (tmp_path / "b.py").write_text("def g(y):\n    return y\n")
    (tmp_path / "c.py").write_text("X = <TODO>\n")
    asked: list[str] = []

    def fill_one(request: FillRequest, *args: object) -> dict[str, object]:
        asked.append(request.file)
        return {"exit_code": 0, "stdout": "", "stderr": []}

    monkeypatch.setattr(fill, "_fill_one", fill_one)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["fill", "a.py", "b.py", "c.py", "--marker", "<FILL>", "-v"])
    assert result.exit_code == 0 and asked == ["a.py"], result.output
    assert result.stderr == "skipped b.py: no <FILL> marker\nskipped c.py: no <FILL> marker\n"
    asked.clear()
    result = CliRunner().invoke(main, ["fill", "a.py", "b.py", "c.py", "--marker", "<FILL>", "--marker", "<TODO>"])
    assert result.exit_code == 0 and asked == ["a.py", "c.py"] and result.stderr == ""
    asked.clear()
    result = CliRunner().invoke(main, ["fill", "b.py", "missing.py", "--marker", "<FILL>"])
    assert result.exit_code == 0 and asked == ["missing.py"]  # its "no such file" comes from its own fill
    asked.clear()
    result = CliRunner().invoke(main, ["fill", "b.py", "c.py", "--marker", "<FILL>"])
    assert result.exit_code == 2 and asked == []
    assert result.stderr.splitlines()[-1].startswith("error: --marker <FILL>: marker not found in any of the 2 files")
    result = CliRunner().invoke(main, ["fill", "a.py", "b.py", "--marker", "<FILL>", "--span", "1"])
    assert asked == ["a.py", "b.py"]  # with other selections, every file is asked as before
