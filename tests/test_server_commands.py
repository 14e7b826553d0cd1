"""The work methods' adapters: flat fill params -> the CLI's request, the CLI's output -> responses, whole
commands run in the server with captured output, and parsed parameters -> an equivalent command line."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from infill.errors import InputError, ModelError
from infill.server import handlers, protocol
from infill.server.dispatch import Dispatcher, ModelCache, ServerContext
from infill.server.options import argv_from_params
from infill.server.protocol import ProtocolError

CALLS: list[dict[str, Any]] = []


def fake_run_fill(request: dict[str, Any], on_progress: Any = None) -> dict[str, Any]:
    """The contract of infill.commands.fill.run_fill, faked: a request dict -> the command's whole output."""
    CALLS.append(request)
    if on_progress is not None:
        on_progress({"tokens": 0})
    selections = request.get("selections", [])
    if any(s["value"] == "missing" for s in selections):
        return {
            "exit_code": 2,
            "stdout": "",
            "stderr": ["error: <stdin>: marker 'missing' not found"],
            "result": None,
        }
    if request.get("model", {}).get("name") == "broken":
        return {
            "exit_code": 123,
            "stdout": "",
            "stderr": ["error: cannot load model 'broken'"],
            "result": None,
        }
    result = {"file": None, "edits": [{"start_line": 1, "text": "x"}], "stats": {"cwd": os.getcwd()}}
    return {"exit_code": 0, "stdout": json.dumps(result) + "\n", "stderr": [], "result": result}


@pytest.fixture
def dispatcher(monkeypatch: pytest.MonkeyPatch) -> Dispatcher:
    CALLS.clear()
    monkeypatch.setattr(handlers, "FILL_FUNCTION", f"{__name__}:fake_run_fill")
    loads: list[Any] = []
    cache = ModelCache(loader=lambda spec: loads.append(spec) or _fake_loaded(spec.name))
    return Dispatcher(context=ServerContext(cache))


def _fake_loaded(name: str) -> Any:
    from infill.models.registry import LoadedModel

    if name == "broken":
        raise ModelError("cannot load model 'broken'")
    return LoadedModel(name, "asarm", object(), None)


def call(dispatcher: Dispatcher, method: str, params: dict[str, Any]) -> dict[str, Any]:
    line = json.dumps({"id": 1, "method": method, "params": params}).encode() + b"\n"
    reply: dict[str, Any] = json.loads(dispatcher.handle_line(line))
    return reply


def test_flat_fill_params_become_a_json_request(dispatcher: Dispatcher) -> None:
    params = {
        "text": "a\n",
        "filename": "a.py",
        "span": "1:1",
        "markers": ["<F>", "<G>"],
        "function": ["f"],
        "decoder": "sequential",
        "k": 4,
        "temperature": 0,
        "top_p": 0.9,
        "seed": 3,
        "tokens": 8,
        "syntax_check": False,
        "model": "m1",
        "device": "cpu",
    }
    reply = call(dispatcher, "fill", params)
    assert reply == {
        "id": 1,
        "file": None,
        "edits": [{"start_line": 1, "text": "x"}],
        "stats": reply["stats"],
    }
    assert CALLS == [
        {
            "file": "-",
            "stdin": "a\n",
            "stdin_filename": "a.py",
            "format": "json",
            "selections": [
                {"kind": "span", "value": "1:1"},
                {"kind": "marker", "value": "<F>"},
                {"kind": "marker", "value": "<G>"},
                {"kind": "function", "value": "f"},
            ],
            "decode": {"decoder": "sequential", "k": 4, "temperature": 0.0, "top_p": 0.9, "seed": 3},
            "options": {"tokens": 8, "syntax_check": False},
            "model": {"name": "m1", "device": "cpu"},
        }
    ]
    assert [m["name"] for m in call(dispatcher, "models", {})["loaded"]] == ["m1"]  # preloaded and kept


def test_fill_of_a_path_is_never_written(dispatcher: Dispatcher) -> None:
    call(dispatcher, "fill", {"path": "src/a.py", "cwd": "/tmp", "span": "2:3"})
    assert CALLS[-1]["file"] == "src/a.py" and CALLS[-1]["cwd"] == "/tmp" and CALLS[-1]["format"] == "json"


@pytest.mark.parametrize(
    "params",
    [
        {"span": "1:1"},
        {"text": "a", "path": "b"},
        {"text": "a", "bogus": 1},
        {"text": 3},
        {"text": "a", "k": "ten"},
        {"text": "a", "k": True},
        {"text": "a", "span": [1]},
        {"text": "a", "syntax_check": "no"},
        {"text": "a", "model": 5},
    ],
)
def test_bad_fill_params_are_input_errors(dispatcher: Dispatcher, params: dict[str, Any]) -> None:
    reply = call(dispatcher, "fill", params)
    assert reply["error"]["code"] == protocol.INPUT_ERROR and reply["error"]["exit_code"] == 2
    assert not CALLS


def test_fill_failures_keep_the_commands_message(dispatcher: Dispatcher) -> None:
    reply = call(dispatcher, "fill", {"text": "a", "marker": "missing"})
    assert reply["error"] == {
        "code": "input_error",
        "message": "<stdin>: marker 'missing' not found",
        "exit_code": 2,
    }
    reply = call(dispatcher, "fill", {"text": "a", "span": "1:1", "model": "broken"})
    assert reply["error"]["code"] == protocol.MODEL_ERROR and reply["error"]["exit_code"] == 123
    assert call(dispatcher, "fill", {"text": "a", "span": "1:1"})["edits"]  # and the server goes on


def test_fill_command_runs_in_the_clients_directory(dispatcher: Dispatcher, tmp_path: Path) -> None:
    here = os.getcwd()
    request = {"file": "x.py", "cwd": str(tmp_path), "selections": [], "model": {"name": "m2"}}
    reply = call(dispatcher, "fill_command", request)
    assert reply["exit_code"] == 0 and reply["result"]["stats"]["cwd"] == str(tmp_path)
    assert os.getcwd() == here
    assert CALLS == [request]  # passed through untouched
    gone = call(dispatcher, "fill_command", {**request, "cwd": str(tmp_path / "nope")})
    assert gone["error"]["code"] == protocol.INTERNAL_ERROR  # the client falls back to in-process


@click.command("echo")
@click.argument("words", nargs=-1)
@click.option("--fail", type=int, default=0)
@click.option("--crash", is_flag=True)
def echo_command(words: tuple[str, ...], fail: int, crash: bool) -> None:
    if crash:
        raise RuntimeError("bug")
    click.echo(" ".join(words) + f" in {os.getcwd()} daemon={os.environ.get('INFILL_NO_DAEMON')}")
    sys.stdout.flush()
    sys.stdout.buffer.write(b"\xff raw\n")
    click.echo("to stderr", err=True)
    raise SystemExit(fail)


def test_run_command_captures_exact_output_exit_code_and_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(handlers.COMMANDS, "echo", f"{__name__}:echo_command")
    dispatcher = Dispatcher()
    reply = call(
        dispatcher,
        "command",
        {"name": "echo", "argv": ["--fail", "1", "--", "a", "-b"], "cwd": str(tmp_path)},
    )
    assert reply["exit_code"] == 1
    assert reply["stdout"].encode("utf-8", "surrogateescape") == f"a -b in {tmp_path} daemon=1\n".encode() + (
        b"\xff raw\n"
    )
    assert reply["stderr"] == "to stderr\n"
    assert call(dispatcher, "command", {"name": "echo", "argv": ["--crash"]})["error"]["code"] == "internal_error"
    assert call(dispatcher, "command", {"name": "train", "argv": []})["error"]["code"] == "unknown_method"
    assert call(dispatcher, "command", {"name": "echo", "argv": "x"})["error"]["code"] == "input_error"


@click.command()
@click.argument("paths", nargs=-1)
@click.option("--count", "-c", count=True)
@click.option("--flag", is_flag=True)
@click.option("--ignore-x/--include-x", "ignore_x", default=None)
@click.option("--color/--no-color", default=True)
@click.option("--many", multiple=True)
@click.option("--ratio", type=float, default=None)
@click.option("--name", default="default")
@click.option("--choice", type=click.Choice(["a", "b"]), default="a")
@click.option("--daemon", default="auto")
def sample(**kwargs: Any) -> None:
    pass


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["x.py", "--", "-y.py"],
        ["-cc", "--flag", "--include-x", "--no-color", "--many", "1", "--many", "--x", "--ratio", "0.1"],
        ["--ignore-x", "--name", "", "--choice", "b", "--", "--weird", "-"],
        ["--ratio", "1e-300", "--daemon", "on", "a"],
    ],
)
def test_argv_from_params_round_trips(argv: list[str]) -> None:
    parsed = sample.make_context("sample", list(argv)).params
    rebuilt = argv_from_params(sample, parsed, skip=("daemon",))
    again = sample.make_context("sample", rebuilt).params
    assert {k: v for k, v in again.items() if k != "daemon"} == {k: v for k, v in parsed.items() if k != "daemon"}
    assert "--daemon" not in rebuilt


def test_exception_mapping_rebuilds_input_errors() -> None:
    error = protocol.error_from_exception(InputError("bad span 9:3", path="a.py", line=9))
    rebuilt = protocol.exception_from_error(error)
    assert isinstance(rebuilt, InputError) and str(rebuilt) == "a.py:9: bad span 9:3"
    assert protocol.exception_from_error(protocol.error_from_exception(ProtocolError("parse_error", "x"))) is None


@click.command("docstrings")
@click.argument("paths", nargs=-1)
@click.option("--format", "output_format", default="text")
@click.option("--style", default=None)
@click.option("--update", is_flag=True)
@click.option("--diff", "show_diff", is_flag=True)
@click.option("--min-confidence", type=float, default=None)
@click.option("--config", "config_path", default=None)
def fake_docstrings(paths: tuple[str, ...], output_format: str, show_diff: bool, **flags: Any) -> None:
    """Stands in for `infill docstrings`: fills in place, prints the JSON report."""
    files = []
    for name in paths:
        path = Path(name)
        if not path.exists():
            click.echo(f"error: {name}: no such file", err=True)
            raise SystemExit(2)
        source = path.read_bytes()
        if not show_diff:
            path.write_bytes(b'"""Filled."""\r\n' + source)
        files.append({"path": name, "changed": True, "flags": flags, "cwd": os.getcwd()})
    click.echo(json.dumps({"files": files, "summary": {"files": len(files)}}, indent=2))


def test_docstrings_method_runs_the_command_on_text_or_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(handlers.COMMANDS, "docstrings", f"{__name__}:fake_docstrings")
    (tmp_path / "pyproject.toml").write_text("[tool.infill]\n")
    dispatcher = Dispatcher()
    text = "def f():\r\n    pass\r\n"
    reply = call(
        dispatcher,
        "docstrings",
        {
            "text": text,
            "filename": str(tmp_path / "pkg" / "m.py"),
            "style": "numpy",
            "update": True,
            "min_confidence": -3,
        },
    )
    assert reply["text"] == '"""Filled."""\r\n' + text  # CRLF kept
    entry = reply["files"][0]
    assert entry["path"] == str(tmp_path / "pkg" / "m.py")  # named after the buffer, not the scratch copy
    assert entry["flags"] == {
        "style": "numpy",
        "update": True,
        "min_confidence": -3.0,
        "config_path": str(tmp_path / "pyproject.toml"),
    }  # the buffer's project config

    (tmp_path / "on_disk.py").write_text("x = 1\n")
    reply = call(dispatcher, "docstrings", {"path": "on_disk.py", "cwd": str(tmp_path), "diff": True})
    assert reply["files"][0]["cwd"] == str(tmp_path) and "text" not in reply
    assert (tmp_path / "on_disk.py").read_text() == "x = 1\n"  # --diff: untouched

    missing = call(dispatcher, "docstrings", {"path": "nope.py", "cwd": str(tmp_path)})
    assert missing["error"] == {"code": "input_error", "message": "nope.py: no such file", "exit_code": 2}
    for bad in ({"text": "x", "path": "y"}, {"text": "x", "style": 3}, {"text": "x", "colour": "red"}):
        assert call(dispatcher, "docstrings", bad)["error"]["code"] == "input_error"


def test_every_decoding_option_is_a_fill_param_and_builds_a_real_request() -> None:
    from dataclasses import fields

    from infill.commands.fill import FillRequest
    from infill.config import DecodeConfig, FillOptions, ModelSpec
    from infill.options import OPTIONS

    def params_of(section: str) -> set[str]:
        return {o.field for o in OPTIONS if o.section == section}

    assert {f.name for f in fields(DecodeConfig)} == params_of("decode")
    assert {f.name for f in fields(ModelSpec)} == params_of("model")  # name <- "model", bf16 <- "precision"
    assert {f.name for f in fields(FillOptions)} == {*params_of("options"), "extra"}
    params = {
        "text": "x = 1\n",
        "filename": "x.py",
        "span": ["1:1"],
        "node": "body",
        "decoder": "assd",
        "k": 5,
        "temperature": 0.5,
        "top_k": 3,
        "top_p": 0.8,
        "seed": 9,
        "draft": "ngram",
        "epsilon": 0.05,
        "block_size": 4,
        "threshold": 0.7,
        "unmask_per_step": 2,
        "routing": "min-span",
        "gamma": 1,
        "tokens": 7,
        "candidates": 2,
        "max_resample": 1,
        "syntax_check": False,
        "model": "m",
        "device": "cpu",
        "revision": "code",
        "mask_token": "<|MASK|>",
        "precision": "fp32",
    }
    request = FillRequest.from_dict(handlers.fill_request(params))
    assert request.decode == DecodeConfig(
        k=5,
        temperature=0.5,
        top_k=3,
        top_p=0.8,
        seed=9,
        draft="ngram",
        epsilon=0.05,
        block_size=4,
        threshold=0.7,
        unmask_per_step=2,
        routing="min-span",
        gamma=1.0,
    )
    assert request.model == ModelSpec(name="m", device="cpu", bf16=False, revision="code", mask_token="<|MASK|>")
    assert request.options == FillOptions(tokens=7, candidates=2, max_resample=1, syntax_check=False)
    assert [(s.kind, s.value) for s in request.selections] == [("span", "1:1"), ("node", "body")]
    assert (request.file, request.stdin, request.stdin_filename, request.format) == ("-", "x = 1\n", "x.py", "json")
    with pytest.raises(InputError, match="precision"):
        handlers.fill_request({"text": "x", "precision": "fp16"})
