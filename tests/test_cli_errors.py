"""Errors that reach the top of the `infill` group become one line on stderr and a documented exit code."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from infill.cli import main


def test_input_error_is_one_line_and_exit_2(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = CliRunner().invoke(main, ["train", "block-diffusion", "--data", str(empty), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"error: no training text found in {empty} (pattern *.py)"]
    assert not (tmp_path / "o").exists()


TOKENIZER = str(Path(__file__).resolve().parent.parent / "infill" / "weights" / "default" / "tokenizer.json")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        # a file where a folder goes: "[Errno 17] File exists" once the run made its folders, or after training
        (["asarm", "--corpus", "{corpus}", "--tokenizer", TOKENIZER, "--run-dir", "{file}", "--steps", "9"], "a file"),
        (["asarm", "--corpus", "{corpus}", "--tokenizer", TOKENIZER, "--out", "{file}", "--steps", "9"], "a file"),
        (["corpus", "--out", "{file}"], "is a file"),
        (["export", "--run-dir", "{empty}", "--tokenizer", TOKENIZER, "--out", "{file}"], "is a file"),
        (["tokenizer", "--corpus", "{corpus}", "--out", "{empty}"], "is a directory"),  # after training it
        (["pack", "--corpus", "{corpus}", "--tokenizer", TOKENIZER, "--out", "{empty}"], "is a directory"),
        # a folder that is no corpus: "[Errno 2] No such file or directory: '.../heldout.jsonl'"
        (["asarm", "--corpus", "{empty}", "--tokenizer", TOKENIZER, "--steps", "1"], "is not a corpus folder"),
        (["tokenizer", "--corpus", "{empty}"], "is not a corpus folder: it has no train.jsonl"),
        (["heldout-nll", "--model", str(Path(TOKENIZER).parent), "--corpus", "{empty}"], "is not a corpus folder"),
        (["tokenizer", "--corpus", "{garbage}"], "train.jsonl:1: not a corpus record"),  # was exit 123
        (["eval", "heldout-exact", "--corpus", "{empty}", "-q"], "holds no held-out files"),  # "no non-blank lines"
        (["eval", "heldout-exact", "--files", "{binary}", "-q"], "skipped: not readable UTF-8 text: "),  # no why
        (
            ["block-diffusion", "--data", "{binary}", "--out", "{empty}/o", "--steps", "1"],
            "1 file(s) skipped, not UTF-8 text",
        ),  # trained
    ],
)
def test_a_path_of_the_wrong_kind_is_one_clear_line(args: list[str], needle: str, tmp_path: Path) -> None:
    """A training or evaluation command given a file for a folder, a folder for a file, or a folder that is no
    corpus: one line that says so, exit 2, before any work; the file given stays as it was."""
    (tmp_path / "a-file").write_text("keep me")
    (tmp_path / "empty").mkdir()
    (tmp_path / "corpus").mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "train.jsonl").write_text("not json\n")
    where = {k: str(tmp_path / v) for k, v in [("file", "a-file"), ("empty", "empty"), ("corpus", "corpus")]}
    where["garbage"] = str(tmp_path / "garbage")
    where["binary"] = str(tmp_path / "binary.py")
    (tmp_path / "binary.py").write_bytes(b"\xff\xfe\x00 not text\n")
    argv = [a.format(**where) for a in args]
    argv = argv if argv[0] == "eval" else ["train", *argv]
    result = CliRunner().invoke(main, argv, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    (line,) = [x for x in result.stderr.splitlines() if x.strip()]
    assert line.startswith("error: ") and needle in line, line
    assert "Errno" not in line
    assert (tmp_path / "a-file").read_text() == "keep me"


def test_training_text_skips_files_that_are_not_utf8(tmp_path: Path) -> None:
    """A binary file among the sources was read with U+FFFD for its bytes and trained on, as `infill train
    corpus` never does; it is skipped now, and the other files are read."""
    from infill.training.blockdiff import load_texts

    (tmp_path / "a.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "b.py").write_bytes(b"\xff\xfe\x00 not text\n")
    assert load_texts([tmp_path]) == ["def f(x):\n    return x\n"]


def test_a_folder_that_is_no_model_says_why_in_plain_words(tmp_path: Path) -> None:
    """`infill train heldout-nll --model EMPTY_FOLDER` said `cannot read .../config.json: [Errno 2] No such file or
    directory: '.../config.json'`: the path twice and the errno. A model error (exit 123, docs/code-models.md)."""
    (tmp_path / "corpus").mkdir()
    args = ["train", "heldout-nll", "--model", str(tmp_path), "--corpus", str(tmp_path / "corpus")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 123, result.output
    (line,) = result.stderr.splitlines()
    assert line == f"error: cannot read {tmp_path / 'config.json'}: No such file or directory", line


def test_unexpected_exception_is_one_line_and_exit_123(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import infill.training.blockdiff as bd

    def boom(*_args: object, **_kwargs: object) -> list[str]:
        raise RuntimeError("kaput")

    monkeypatch.setattr(bd, "load_texts", boom)
    monkeypatch.delenv("INFILL_DEBUG", raising=False)
    args = ["train", "block-diffusion", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 123
    assert result.stderr.strip() == "error: internal error: RuntimeError: kaput (INFILL_DEBUG=1 shows where)"
    assert "Traceback" not in result.stderr


def test_debug_env_shows_the_exception(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import infill.training.blockdiff as bd

    def boom(*_args: object, **_kwargs: object) -> list[str]:
        raise RuntimeError("kaput")

    monkeypatch.setattr(bd, "load_texts", boom)
    monkeypatch.setenv("INFILL_DEBUG", "1")
    args = ["train", "block-diffusion", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert isinstance(result.exception, RuntimeError)


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (RuntimeError("kaput\n  at layer 3\n"), 123, "error: internal error: RuntimeError: kaput (INFILL_DEBUG=1"),
        (ValueError("\nshape mismatch: [2, 3]\nvs [3, 2]"), 123, "error: internal error: ValueError: shape mismatch"),
        (OSError("disk full\nwhile writing"), 2, "error: disk full"),
    ],
)
def test_multi_line_messages_are_cut_to_one_line(
    error: Exception, code: int, line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exception whose message spans lines (torch quotes tensors, JSON errors quote input) still gives the
    one stderr line every error promises: its first non-blank line."""
    import infill.training.blockdiff as bd

    def boom(*_args: object, **_kwargs: object) -> list[str]:
        raise error

    monkeypatch.setattr(bd, "load_texts", boom)
    monkeypatch.delenv("INFILL_DEBUG", raising=False)
    args = ["train", "block-diffusion", "--data", str(tmp_path), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == code
    (printed,) = result.stderr.splitlines()
    assert printed.startswith(line), printed


def _all_options() -> list[tuple[str, click.Option]]:
    """(command path, option) for every option of every `infill` command."""
    from infill.cli import main as group

    found: list[tuple[str, click.Option]] = []

    def walk(command: click.Command, path: str, ctx: click.Context) -> None:
        found.extend((path, param) for param in command.params if isinstance(param, click.Option))
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, f"{path} {name}", click.Context(sub, parent=ctx, info_name=name))

    walk(group, "infill", click.Context(group, info_name="infill"))
    return found


def _float_options() -> list[tuple[str, str]]:
    """(command path, option) for every option of every `infill` command that takes a float."""
    return [(path, o.opts[-1]) for path, o in _all_options() if isinstance(o.type, click.types.FloatParamType)]


def test_the_float_options_are_found() -> None:
    found = dict.fromkeys(_float_options())
    for expected in [
        ("infill eval humaneval-single-line", "--timeout"),
        ("infill train asarm", "--lr"),
        ("infill train block-diffusion", "--fim-rate"),
        ("infill train ptp", "--teacher-share"),
        ("infill train ssmd", "--minutes"),
        ("infill fill", "--temperature"),
    ]:
        assert expected in found, expected


@pytest.mark.parametrize(("command", "option"), _float_options())
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_every_float_option_refuses_non_finite_numbers(command: str, option: str, value: str) -> None:
    """nan passes every comparison of a plain FloatRange, and inf every open upper bound: both would reach a
    training loop or a subprocess timeout. Every float option of every command refuses them (exit 2)."""
    import click

    from infill.cli import main as group

    cmd: click.Command = group
    ctx = click.Context(group, info_name="infill")
    for name in command.split()[1:]:
        assert isinstance(cmd, click.Group)
        sub = cmd.get_command(ctx, name)
        assert sub is not None
        cmd, ctx = sub, click.Context(sub, parent=ctx, info_name=name)
    (param,) = [p for p in cmd.params if isinstance(p, click.Option) and option in p.opts]
    with pytest.raises(click.BadParameter):  # "is not a finite number", or out of a closed range
        param.type.convert(value, param, ctx)


def test_eval_timeout_nan_is_a_usage_error() -> None:
    result = CliRunner().invoke(main, ["eval", "humaneval-single-line", "--timeout", "nan", "--reference"])
    assert result.exit_code == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: ") and "--timeout" in line and "finite" in line


def _number_options() -> list[tuple[str, click.Option]]:
    """(command path, option) for every option of every `infill` command that takes a number (not a count)."""
    number = click.types.IntParamType | click.types.FloatParamType
    return [(path, o) for path, o in _all_options() if isinstance(o.type, number) and not o.count]


def test_every_number_option_declares_its_domain() -> None:
    """Option values outside their domain fail at the flag (exit 2), not deep inside a decoder or a training loop:
    every integer option has a range with a lower bound, every float option is finite, every --threads is
    bounded (100,000 threads crashed torch), and so is the work one fill may ask for (as the server's limits) and
    the worker processes of --jobs."""
    from infill.clitypes import MAX_THREADS, FiniteFloatRange

    options = _number_options()
    assert len(options) > 100
    for path, option in options:
        name = f"{path} {option.opts[-1]}"
        if isinstance(option.type, click.types.FloatParamType):
            assert isinstance(option.type, FiniteFloatRange), name
        else:
            assert isinstance(option.type, click.IntRange) and option.type.min is not None, name
        if option.name == "threads":
            assert isinstance(option.type, click.IntRange) and option.type.max == MAX_THREADS, name
        if option.name in ("beam", "candidates", "max_resample", "rescue_width", "jobs"):
            assert isinstance(option.type, click.IntRange) and option.type.max is not None, name


def test_every_environment_variable_declares_its_domain() -> None:
    """infill's environment variables use the same types: a number is finite and bounded."""
    from infill import environment
    from infill.clitypes import FiniteFloatRange

    for variable in environment.VARIABLES:
        if isinstance(variable.type, click.types.FloatParamType):
            assert isinstance(variable.type, FiniteFloatRange) and variable.type.max is not None, variable.name
        if isinstance(variable.type, click.types.IntParamType):
            assert isinstance(variable.type, click.IntRange) and variable.type.max is not None, variable.name
    documented = (Path(__file__).resolve().parent.parent / "docs" / "server.md").read_text(encoding="utf-8")
    assert all(variable.name in documented for variable in environment.VARIABLES)


def test_no_help_shows_an_empty_range() -> None:
    """A float option without bounds showed `[x<=None]` in its help (`infill docstrings --min-confidence`)."""
    from infill.cli import main as group

    def walk(command: click.Command, ctx: click.Context) -> None:
        assert "None" not in command.get_help(ctx), ctx.command_path
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                if sub is not None:
                    walk(sub, click.Context(sub, parent=ctx, info_name=name))

    walk(group, click.Context(group, info_name="infill"))


def test_the_monitor_help_names_every_rule() -> None:
    """--monitor's help listed undefined, unused and redefined, and showed `[default: binds]`, a rule it never
    named or explained."""
    from infill.cli import main as group
    from infill.core.monitor import LINT_RULES

    for name in ("fill", "eval"):
        ctx = click.Context(group)
        command = group.get_command(ctx, name)
        assert command is not None
        sub = command if name == "fill" else command.get_command(ctx, "heldout-exact")  # type: ignore[attr-defined]
        option = next(p for p in sub.params if p.name == "monitor")
        assert option.help is not None and all(rule in option.help for rule in LINT_RULES), option.help
