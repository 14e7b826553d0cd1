"""The work methods' adapters: flat fill params -> the core's request, the core's errors -> structured responses,
and the daemon's docstrings runs with the command's exact output."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from fixtures_doc import FakeFiller

from infill.commands.docstrings import docstrings as docstrings_cli
from infill.core import fill as core_fill
from infill.docstrings import run as docstrings_run
from infill.errors import InputError, ModelError
from infill.server import handlers, protocol
from infill.server.dispatch import Dispatcher, ModelCache, ServerContext
from infill.server.protocol import ProtocolError

CALLS: list[dict[str, Any]] = []


def fake_fill_json(request: dict[str, Any], on_progress: Any = None) -> dict[str, Any]:
    """The contract of infill.core.fill.fill_json, faked: a request dict -> the JSON document, or InfillError."""
    CALLS.append(request)
    if on_progress is not None:
        on_progress({"tokens": 0})
    if any(s["value"] == "missing" for s in request.get("selections", [])):
        raise InputError("marker 'missing' not found", path="<stdin>")
    if request.get("model", {}).get("name") == "broken":
        raise ModelError("cannot load model 'broken'")
    return {"file": None, "edits": [{"start_line": 1, "text": "x"}], "stats": {"cwd": os.getcwd()}}


def fake_run_fill(request: dict[str, Any], on_progress: Any = None) -> dict[str, Any]:
    """The contract of infill.core.fill.run_fill, faked: a request dict -> the command's whole output."""
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
    monkeypatch.setattr(core_fill, "fill_json", fake_fill_json)
    monkeypatch.setattr(core_fill, "run_fill", fake_run_fill)
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


def test_docstrings_command_prints_exactly_what_the_command_would_in_the_clients_directory(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text('"""A module."""\n\n\ndef f():\n    pass\n')
    here = os.getcwd()
    dispatcher = Dispatcher()
    request = {"paths": ["m.py"], "check": True, "cwd": str(tmp_path)}
    reply = call(dispatcher, "docstrings_command", request)
    assert os.getcwd() == here
    assert (reply["exit_code"], reply["stdout"], reply["stderr"]) == (
        1,
        "m.py:4: f\n",
        "1 missing docstring in 1 file\n",
    )
    local = CliRunner().invoke(docstrings_cli, ["--check", str(tmp_path / "m.py")])
    assert local.exit_code == 1 and local.stderr == reply["stderr"]  # the same text as in-process
    missing = call(dispatcher, "docstrings_command", {"paths": ["nope.py"], "cwd": str(tmp_path)})
    assert missing == {"id": 1, "exit_code": 2, "stdout": "", "stderr": "error: nope.py: no such file or folder\n"}
    for bad in (
        {"paths": "m.py"},
        {"paths": [3]},
        {},
        {"paths": ["m.py"], "bogus": 1},
        {"paths": ["m.py"], "check": 1},
    ):
        assert call(dispatcher, "docstrings_command", bad)["error"]["code"] == "input_error", bad
    assert call(dispatcher, "command", {"name": "docstrings", "argv": []})["error"]["code"] == "unknown_method"


def test_exception_mapping_rebuilds_input_errors() -> None:
    error = protocol.error_from_exception(InputError("bad span 9:3", path="a.py", line=9))
    rebuilt = protocol.exception_from_error(error)
    assert isinstance(rebuilt, InputError) and str(rebuilt) == "a.py:9: bad span 9:3"
    assert protocol.exception_from_error(protocol.error_from_exception(ProtocolError("parse_error", "x"))) is None


def test_docstrings_method_runs_the_core_on_text_or_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(docstrings_run, "model_filler_for", lambda cfg, on_progress=None: FakeFiller())
    (tmp_path / "pyproject.toml").write_text('[tool.infill.docstrings]\nstyle = "numpy"\n')
    dispatcher = Dispatcher()
    text = "def f(x):\r\n    return x\r\n"
    reply = call(dispatcher, "docstrings", {"text": text, "filename": str(tmp_path / "pkg" / "m.py"), "update": True})
    assert 'def f(x):\r\n    """' in reply["text"] and reply["text"].endswith("    return x\r\n")  # CRLF kept
    assert "Parameters\r\n" in reply["text"]  # the buffer's project config: numpy style
    entry = reply["files"][0]
    assert entry["path"] == str(tmp_path / "pkg" / "m.py")  # named after the buffer, not the scratch copy
    assert entry["style"] == "numpy" and entry["changed"]
    # min_confidence leaves a docstring missing unless its summary is the model's: trust it (min_probability 0)
    settings = {"style": "sphinx", "min_confidence": -3, "min_probability": 0}
    flagged = call(dispatcher, "docstrings", {"text": text, "filename": "m.py", **settings})
    assert flagged["files"][0]["style"] == "sphinx" and ":param x:" in flagged["text"]

    (tmp_path / "on_disk.py").write_text("def g():\n    pass\n")
    reply = call(dispatcher, "docstrings", {"path": "on_disk.py", "cwd": str(tmp_path), "diff": True})
    assert reply["files"][0]["changed"] and "diff" in reply["files"][0] and "text" not in reply
    assert (tmp_path / "on_disk.py").read_text() == "def g():\n    pass\n"  # --diff: untouched

    missing = call(dispatcher, "docstrings", {"path": "nope.py", "cwd": str(tmp_path)})
    assert missing["error"] == {"code": "input_error", "message": "nope.py: no such file or folder", "exit_code": 2}
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


def test_the_server_and_the_fills_share_one_model_cache() -> None:
    from infill import api
    from infill.config import ModelSpec
    from infill.core import cache
    from infill.models import registry

    loads: list[ModelSpec] = []

    def factory(spec: ModelSpec) -> registry.LoadedModel:
        loads.append(spec)
        return _fake_loaded(spec.name)

    registry.register("shared-fake", factory)
    try:
        dispatcher = Dispatcher()
        assert dispatcher.context.models is cache.SHARED
        first = api.load_model(ModelSpec("shared-fake"))  # what every fill does
        assert "shared-fake" in [m["name"] for m in call(dispatcher, "models", {})["loaded"]]
        assert dispatcher.context.models.get(ModelSpec("shared-fake")) is first and len(loads) == 1
        registry.register("shared-fake", factory)  # re-registered (a new factory object is not needed)
        assert api.load_model(ModelSpec("shared-fake")) is first
        registry.register("shared-fake", lambda spec: factory(spec))  # another factory: loaded again
        assert api.load_model(ModelSpec("shared-fake")) is not first and len(loads) == 2
    finally:
        registry.unregister("shared-fake")
        api.clear_model_cache()
