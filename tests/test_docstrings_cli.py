"""`infill docstrings` on the command line: --check, writing, --diff, --format json, config, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures_doc import FakeFiller

from infill.commands.docstrings import docstrings

CODE = textwrap.dedent(
    '''\
    """Module."""


    def add(a, b):
        return a + b


    def _private():
        pass


    class Thing:
        def run(self):
            pass
    '''
)


def invoke(*args: str, filler: FakeFiller | None = None) -> tuple[int, str, str]:
    runner = CliRunner()
    result = runner.invoke(docstrings, list(args), obj={"slot_filler": filler or FakeFiller()})
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def project(tmp_path: Path, config: str = "") -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text(CODE)
    (tmp_path / "pkg" / "done.py").write_text('"""Done."""\n')
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.py").write_text("def f():\n    pass\n")
    if config:
        (tmp_path / "pyproject.toml").write_text(config)
    return tmp_path


def test_check_lists_missing_and_exits_1_without_a_model(tmp_path: Path) -> None:
    root = project(tmp_path)
    filler = FakeFiller()
    code, out, err = invoke("--check", str(root), filler=filler)
    mod = root / "pkg" / "mod.py"
    assert code == 1
    assert out.splitlines() == [f"{mod}:4: add", f"{mod}:12: Thing", f"{mod}:13: Thing.run"]
    assert "3 missing docstrings in 2 files" in err
    assert filler.calls == [] and mod.read_text() == CODE
    code, out, _ = invoke("--check", "-q", str(root / "pkg" / "done.py"))
    assert (code, out) == (0, "")


def test_check_does_not_import_torch(tmp_path: Path) -> None:
    root = project(tmp_path)
    script = (
        "import sys\n"
        "from infill.cli import main\n"
        "try:\n"
        f"    main(['docstrings', '--check', {str(root)!r}])\n"
        "except SystemExit as exc:\n"
        "    print('exit', exc.code, 'torch' in sys.modules, 'transformers' in sys.modules)\n"
    )
    repo = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", script], cwd=repo, capture_output=True, text=True)
    assert done.stdout.splitlines()[-1] == "exit 1 False False", done.stderr


def test_fill_writes_then_a_second_run_changes_nothing(tmp_path: Path) -> None:
    root = project(tmp_path)
    mod = root / "pkg" / "mod.py"
    code, out, err = invoke("--min-probability", "0", str(root))  # the fake's text wherever the checks allow
    assert code == 0
    text = mod.read_text()
    assert '    """Return the add of the input.\n\n    Args:\n        a: The a to use.' in text
    assert "def _private():\n    pass" in text  # skipped: private
    assert f"{mod}:4: add: filled (mean log-prob -1.00" in err and out == ""  # reports go to stderr
    assert "3 docstrings filled, 0 updated, 0 left missing (low confidence); 1 of 2 files changed" in err
    second = FakeFiller()
    assert invoke(str(root), filler=second)[0] == 0 and mod.read_text() == text and second.calls == []
    assert invoke("--check", str(root))[0] == 0


def test_diff_prints_and_does_not_write(tmp_path: Path) -> None:
    root = project(tmp_path)
    mod = root / "pkg" / "mod.py"
    code, out, err = invoke("--diff", "-q", "--min-probability", "0", str(mod))
    assert code == 1 and mod.read_text() == CODE
    name = str(mod).lstrip("/")  # labelled like `infill fill --diff`
    assert out.startswith(f"--- a/{name}\n+++ b/{name}\n") and '+    """Return the add of the input.' in out
    assert err == ""


def test_json_report(tmp_path: Path) -> None:
    root = project(tmp_path)
    code, out, _ = invoke("--format", "json", "--diff", "--min-probability", "0", str(root / "pkg"))
    report = json.loads(out)
    assert code == 1 and report["summary"] == {"files": 2, "changed": 1, "missing": 0, "errors": 0}
    mod = next(f for f in report["files"] if f["path"].endswith("mod.py"))
    assert [(d["name"], d["status"]) for d in mod["definitions"]] == [
        ("add", "filled"),
        ("Thing", "low-confidence"),  # "Returns the Thing ...": a class returns nothing, the monitor refuses it
        ("Thing.run", "filled"),  # only `pass`: a stub, whose contract is elsewhere, may say "Return"
    ]
    assert mod["definitions"][1]["refused"] == {"summary": "says it returns a value; a class does not"}
    assert mod["definitions"][1]["fallbacks"] == ["summary"]
    assert mod["definitions"][0]["confidence"] == -1.0 and mod["diff"].startswith("---")
    code, out, _ = invoke("--format", "json", "--check", str(root / "pkg"))
    assert code == 1 and json.loads(out)["summary"]["missing"] == 3


def test_pyproject_configuration_and_flags(tmp_path: Path) -> None:
    config = '[tool.infill.docstrings]\nstyle = "numpy"\nignore-private = false\nignore-regex = ["^Thing$"]\n'
    root = project(tmp_path, config)
    code, out, _ = invoke("--check", str(root / "pkg"))
    names = [line.rsplit(" ", 1)[-1] for line in out.splitlines()]
    assert names == ["add", "_private", "Thing.run"]
    invoke(str(root / "pkg" / "mod.py"))
    assert "    Parameters\n    ----------\n    a\n" in (root / "pkg" / "mod.py").read_text()
    code, out, _ = invoke("--check", "--ignore-regex", "run", "--ignore-private", str(root / "pkg"))
    assert [line.rsplit(" ", 1)[-1] for line in out.splitlines()] == []


def test_each_file_gets_its_own_projects_settings_whatever_the_order(tmp_path: Path) -> None:
    # a pre-commit run in a monorepo: files of two projects in one command line, in any order
    root_config = '[tool.infill.docstrings]\nignore-regex = ["^test_"]\nignore-module = true\n'
    (tmp_path / "pyproject.toml").write_text(root_config)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "pyproject.toml").write_text('[tool.infill.docstrings]\nstyle = "numpy"\n')
    top, sub = tmp_path / "top.py", tmp_path / "pkg" / "sub.py"
    for path in (top, sub):
        path.write_text("def test_a(x):\n    return x\n")
    for order in ((top, sub), (sub, top)):
        code, out, _ = invoke("--check", *map(str, order))
        assert code == 1 and sorted(out.splitlines()) == [f"{sub}:1: sub", f"{sub}:1: test_a"], order
    assert invoke(str(sub), str(top))[0] == 0
    assert top.read_text() == "def test_a(x):\n    return x\n"  # skipped by its own project's rules
    assert "    Parameters\n    ----------\n    x\n" in sub.read_text()  # numpy: its project's style
    (tmp_path / "pkg" / "pyproject.toml").write_text('[tool.infill]\nmodel = "other"\n')
    sub.write_text("def g(x):\n    return x\n")
    code, _, err = invoke(str(top), str(sub))  # one model fills a run: said, not ignored
    assert code == 2 and f"{sub}: its pyproject.toml sets model 'other'" in err
    assert sub.read_text() == "def g(x):\n    return x\n"


def test_a_bad_sub_project_pyproject_is_reported_once_and_skips_only_its_files(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    bad = tmp_path / "pkg" / "pyproject.toml"
    bad.write_text("[tool.infill.docstrings]\nstyle = 3\n")
    for name in ("top.py", "pkg/a.py", "pkg/b.py"):
        (tmp_path / name).write_text("def f(x):\n    return x\n")
    code, out, err = invoke("--check", str(tmp_path))
    assert code == 2 and out.splitlines() == [f"{tmp_path / 'top.py'}:1: top", f"{tmp_path / 'top.py'}:1: f"]
    assert err.count(f"error: {bad}: style must be a string") == 1, err


def test_a_folder_skips_virtual_environments_whatever_their_name_and_build_output(tmp_path: Path) -> None:
    code_of = "def f(x):\n    return x\n"
    installed = tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "foo" / "x.py"
    ours = tmp_path / "src" / "a.py"
    others = [installed, tmp_path / "_build" / "g.py", tmp_path / "__pypackages__" / "3.11" / "lib" / "p.py"]
    for path in (ours, *others):
        path.parent.mkdir(parents=True)
        path.write_text(code_of)
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    code, out, _ = invoke("--check", str(tmp_path))
    assert code == 1 and out.splitlines() == [f"{ours}:1: a", f"{ours}:1: f"]
    assert invoke(str(tmp_path))[0] == 0
    assert ours.read_text() != code_of and all(path.read_text() == code_of for path in others)
    assert invoke("--check", str(installed))[0] == 1  # a file named on the command line is still filled


def test_min_confidence_reports_and_leaves_missing(tmp_path: Path) -> None:
    root = project(tmp_path)
    mod = root / "pkg" / "mod.py"
    code, out, err = invoke("--min-confidence", "-0.5", str(mod))
    assert code == 0 and mod.read_text() == CODE
    assert f"{mod}:4: add: left-missing (mean log-prob -1.00" in err
    assert "3 left missing" in err


def test_usage_and_input_errors_exit_2(tmp_path: Path) -> None:
    root = project(tmp_path)
    assert invoke("--check", str(root / "nope.py"))[0] == 2
    assert invoke("--check", "--update", str(root))[0] == 2
    code, out, err = invoke("--check", "--diff", str(root))  # the --diff was ignored without a word
    assert (code, out) == (2, "") and "--check and --diff cannot be combined" in err
    assert invoke("--style", "plain", str(root))[0] == 2
    (root / "bad.py").write_text("def f(:\n")
    code, _, err = invoke("--check", str(root / "bad.py"), str(root / "pkg" / "mod.py"))
    assert code == 2 and "bad.py:" in err and "syntax error" in err
    (root / "pyproject.toml").write_text("[tool.infill.docstrings]\nstile = 1\n")
    code, _, err = invoke("--check", str(root / "pkg"))
    assert code == 2 and "unknown [tool.infill.docstrings] key 'stile'" in err


def test_update_flag(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text('"""M."""\n\n\ndef f(a, b):\n    """Do it.\n\n    Args:\n        a: Kept.\n    """\n')
    original = path.read_text()
    code, _, err = invoke("--update", str(path))  # by default a new entry gets the names-only text
    assert code == 0 and "        a: Kept.\n        b: The b.\n" in path.read_text()
    assert f"{path}:4: f: updated" in err
    path.write_text(original)
    code, _, err = invoke("--update", "--min-probability", "0", str(path))  # the model's, where the checks allow
    assert code == 0 and "        a: Kept.\n        b: The b to use.\n" in path.read_text()


def test_a_failing_model_exits_123(tmp_path: Path) -> None:
    root = project(tmp_path)

    def broken(key: str, qualname: str) -> str:
        raise RuntimeError("backend exploded")

    code, _, err = invoke(str(root / "pkg" / "mod.py"), filler=FakeFiller(text_for=broken))
    assert code == 123 and "internal error: RuntimeError: backend exploded" in err
    assert (root / "pkg" / "mod.py").read_text() == CODE


def test_model_warnings_are_reported(tmp_path: Path) -> None:
    root = project(tmp_path)
    filler = FakeFiller(warnings=["context truncated to the model's 256 tokens around the spans"])
    code, out, err = invoke(str(root / "pkg" / "mod.py"), filler=filler)
    assert code == 0 and "mod.py:4: add: warning: context truncated" in err
    code, out, _ = invoke("--format", "json", str(root / "pkg" / "mod.py"), filler=filler)
    assert json.loads(out)["files"][0]["definitions"] == []  # already filled by the first run


def test_model_runs_are_forwarded_to_the_daemon_but_check_is_not(tmp_path: Path, monkeypatch: Any) -> None:
    import infill.commands.docstrings as command

    calls: list[tuple[str, str | None]] = []

    def fake_forward(
        request: dict[str, Any], mode: str, idle_timeout: float, model: str | None = None, input_bytes: int = 0
    ) -> int:
        assert 0 < input_bytes < 10_000  # the size of the files, so a large run is never sent to the daemon
        assert request["paths"] == [str(root)] and request["cwd"] == os.getcwd()  # JSON-ready, run where asked
        calls.append((mode, model))
        return 0

    monkeypatch.setattr(command, "forward_docstrings", fake_forward)
    root = project(tmp_path)
    result = CliRunner().invoke(docstrings, ["--daemon", "on", "--model", "tiny", str(root)])
    assert result.exit_code == 0 and calls == [("on", "tiny")]
    assert (root / "pkg" / "mod.py").read_text() == CODE  # the daemon (here: nobody) did the work
    result = CliRunner().invoke(docstrings, ["--daemon", "on", "--check", str(root)])
    assert result.exit_code == 1 and len(calls) == 1  # --check never needs a model, so never a daemon
    assert invoke("--daemon", "on", str(root))[0] == 0 and len(calls) == 1  # an injected filler stays here


def test_a_multi_line_model_error_is_one_line(tmp_path: Path) -> None:
    root = project(tmp_path)

    def broken(key: str, qualname: str) -> str:
        raise RuntimeError("backend exploded\ntensor([[1, 2],\n        [3, 4]])")

    code, _, err = invoke(str(root / "pkg" / "mod.py"), filler=FakeFiller(text_for=broken))
    assert code == 123 and err.splitlines() == ["error: internal error: RuntimeError: backend exploded"]
    assert (root / "pkg" / "mod.py").read_text() == CODE


@pytest.mark.parametrize("flags", [[], ["--diff"], ["--format", "json"]])
def test_docstrings_that_would_break_the_syntax_are_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    """The write guard: whatever the engine produced, a file whose new text does not parse is left as it was,
    reported (exit 3), and neither written nor shown as a diff; the other files of the run are filled."""
    import infill.docstrings.run as run
    from infill.docstrings.outcome import FileResult

    root = project(tmp_path)
    bad = root / "pkg" / "bad.py"
    bad.write_text("def f():\n    pass\n")
    real = run.process_source

    def engine(source: str, path: str, *args: Any, **kwargs: Any) -> FileResult:
        if path.endswith("bad.py"):  # an engine bug: an unterminated docstring
            return FileResult(path, source, source.replace("pass", '"""unterminated\n    pass'), [], "google")
        return real(source, path, *args, **kwargs)

    monkeypatch.setattr(run, "process_source", engine)
    code, out, err = invoke(str(root / "pkg"), *flags)
    assert code == 3, err
    assert bad.read_text() == "def f():\n    pass\n"
    assert "bad.py" in err and "would break the file's syntax" in err
    assert "unterminated" not in out
    mod = (root / "pkg" / "mod.py").read_text()
    assert (mod != CODE) == (flags != ["--diff"])  # the good file is written, unless --diff writes nothing


def test_a_named_pipe_in_a_folder_is_reported_not_read(tmp_path: Path) -> None:
    """Writing docstrings into a folder holding a FIFO named x.py hung: the run hashed every file it planned, the
    pipe too, before its per-file check. Now: the other files are filled, the pipe gets one line, exit 2. Run in a
    child process with a timeout, since the defect is a hang."""
    folder = project(tmp_path)
    os.mkfifo(folder / "pkg" / "pipe.py")
    env = {**os.environ, "INFILL_NO_DAEMON": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "infill", "docstrings", "--min-probability", "0", str(folder / "pkg")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2 and "pipe.py: not a regular file" in done.stderr, done.stderr
    assert '"""' in (folder / "pkg" / "mod.py").read_text().split("def", 1)[1]


def test_a_symlink_loop_named_on_the_command_line_is_an_input_error(tmp_path: Path) -> None:
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    code, _, err = invoke("--check", str(tmp_path / "a.py"))
    assert code == 2 and err.startswith("error: ") and len(err.splitlines()) == 1, err


@pytest.mark.parametrize("name", [os.fsdecode(b"bad\xffname.py"), 'q"""q.py', "bs\\N.py"])
def test_a_file_name_that_cannot_stand_in_a_docstring_is_cleaned(tmp_path: Path, name: str) -> None:
    """The module docstring is written from the file's name. A name whose bytes are not UTF-8 was an internal error
    (exit 123); one holding triple quotes or a backslash gave a docstring that broke the file or read as an
    escape (exit 3). Now those characters are left out, and the file is filled."""
    path = tmp_path / name
    path.write_text("def f(x):\n    return x\n")
    code, out, err = invoke("--min-probability", "0", str(path))
    assert code == 0, err
    text = path.read_text()
    compile(text, "x.py", "exec")
    first = text.splitlines()[0]
    assert first.startswith('"""') and "\\" not in first and first.count('"') == 6


def test_a_definition_whose_body_follows_a_backslash_gets_its_docstring(tmp_path: Path) -> None:
    """`def f(x): \\` with the body on the next line: the docstring went between the two lines, which broke the
    file, so no docstring of the file was written (exit 3). It is now written as for `def f(x): return x`."""
    path = tmp_path / "cont.py"
    path.write_text('"""Cont."""\n\n\ndef f(x): \\\n    return x\n\n\ndef g(y):\n    return y\n')
    code, _, err = invoke("--min-probability", "0", str(path))
    assert code == 0, err
    text = path.read_text()
    compile(text, "cont.py", "exec")
    assert text.count('"""') == 6 and "def f(x):\n" in text and "\\" not in text


GIT_FREE_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}  # no user's core.excludesFile


def _git_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, git: bool = True) -> dict[str, Path]:
    """A project whose .gitignore files (root and nested, with a negation) ignore generated code and output."""
    for key, value in GIT_FREE_ENV.items():
        monkeypatch.setenv(key, value)
    code_of = "def f(x):\n    return x\n"
    files = {
        name: tmp_path / name
        for name in ("src/a.py", "gen/g.py", "src/m_pb2.py", "src/keep_pb2.py", "src/sub/x.py", "src/sub/y.py")
    }
    for path in files.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code_of)
    (tmp_path / ".gitignore").write_text("gen/\n*_pb2.py\n!keep_pb2.py\n")
    (tmp_path / "src" / "sub" / ".gitignore").write_text("x.py\n")
    if git:
        subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return files


def _checked(*args: str) -> set[str]:
    code, out, _ = invoke("--check", *args)
    assert code == 1, out
    return {line.split(":")[0] for line in out.splitlines()}


def test_a_folder_skips_what_git_ignores_but_a_named_file_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _git_project(tmp_path, monkeypatch)
    kept = {str(files[n]) for n in ("src/a.py", "src/keep_pb2.py", "src/sub/y.py")}
    assert _checked(str(tmp_path)) == kept  # root and nested .gitignore, and the `!` negation
    assert _checked(str(tmp_path / "src")) == kept  # the rules hold from a subfolder too
    assert _checked(str(files["gen/g.py"]), str(files["src/sub/x.py"])) == {
        str(files["gen/g.py"]),
        str(files["src/sub/x.py"]),
    }  # named files are read, as ruff and black read them
    assert _checked(str(tmp_path / "gen")) == {str(files["gen/g.py"])}  # and so is a folder named on purpose
    before = {p: p.read_text() for p in files.values()}
    assert invoke(str(tmp_path))[0] == 0
    assert {p for p, text in before.items() if p.read_text() != text} == {Path(p) for p in kept}


def test_tracked_files_and_info_exclude_are_ignored_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _git_project(tmp_path, monkeypatch)
    (tmp_path / ".git" / "info").mkdir(exist_ok=True)
    (tmp_path / ".git" / "info" / "exclude").write_text("src/a.py\n")
    subprocess.run(["git", "-C", str(tmp_path), "add", "-f", "src/m_pb2.py"], check=True)
    assert _checked(str(tmp_path)) == {str(files["src/keep_pb2.py"]), str(files["src/sub/y.py"])}


def test_respect_gitignore_can_be_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = _git_project(tmp_path, monkeypatch)
    everything = {str(p) for p in files.values() if p.parent.name != "gen"} | {str(files["gen/g.py"])}
    assert _checked("--no-respect-gitignore", str(tmp_path)) == everything
    (tmp_path / "pyproject.toml").write_text("[tool.infill.docstrings]\nrespect-gitignore = false\n")
    assert _checked(str(tmp_path)) == everything
    assert len(_checked("--respect-gitignore", str(tmp_path))) == 3  # the flag wins over the file


def test_gitignore_outside_a_git_work_tree_or_without_git_is_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ruff: a .gitignore means nothing outside a repository; and a missing git never fails the walk."""
    files = _git_project(tmp_path, monkeypatch, git=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))  # no repository above tmp_path either
    everything = {str(p) for p in files.values()}
    assert _checked(str(tmp_path)) == everything
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    assert len(_checked(str(tmp_path))) == 3
    monkeypatch.setenv("PATH", str(tmp_path / "no-such-bin"))
    assert _checked(str(tmp_path)) == everything


def test_a_git_hook_environment_does_not_point_the_walk_elsewhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hook (or pre-commit) runs with GIT_DIR / GIT_INDEX_FILE relative to the repository's top; the walk of a
    subfolder still asks the repository of that folder."""
    _git_project(tmp_path, monkeypatch)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_DIR", ".git")
    monkeypatch.setenv("GIT_INDEX_FILE", ".git/index")
    assert _checked("src") == {"src/a.py", "src/keep_pb2.py", "src/sub/y.py"}


@pytest.mark.parametrize("outer_git", [True, False])
def test_a_repository_inside_the_walked_folder_has_its_own_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, outer_git: bool
) -> None:
    """A separate clone under the walked folder (a vendored repository, or projects side by side in a folder that
    is no repository): the enclosing git does not look inside it, so its own .gitignore is asked, as ruff does."""
    files = _git_project(tmp_path, monkeypatch, git=outer_git)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    inner = tmp_path / "vendor" / "lib"
    for name in ("lib.py", "lib_gen.py", "out/o.py"):
        (inner / name).parent.mkdir(parents=True, exist_ok=True)
        (inner / name).write_text("def f(x):\n    return x\n")
    (inner / ".gitignore").write_text("*_gen.py\nout/\n")
    subprocess.run(["git", "init", "-q", str(inner)], check=True)
    checked = _checked(str(tmp_path))
    assert str(inner / "lib.py") in checked
    assert not {str(inner / "lib_gen.py"), str(inner / "out" / "o.py")} & checked
    assert (str(files["gen/g.py"]) in checked) is not outer_git  # the outer rules hold where they did
    assert _checked(str(tmp_path / "vendor")) & {str(inner / "lib_gen.py"), str(inner / "lib.py")} == {
        str(inner / "lib.py")
    }
